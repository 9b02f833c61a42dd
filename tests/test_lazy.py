"""``workbench.lazy.lazy_exports``: the package re-exports of ``workbench`` and ``workbench.metrics`` load
their module on first lookup only, are then kept in the package, are listed by ``dir()``, and an unknown
name is an ``AttributeError`` naming the package (a fresh interpreter for each, so nothing is preloaded)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROBE = """
import sys
import {package} as p
assert {home!r} not in sys.modules, "loaded before first use"
assert {name!r} in dir(p) and {name!r} not in vars(p)
value = getattr(p, {name!r})
assert {home!r} in sys.modules and getattr(sys.modules[{home!r}], {name!r}) is value
assert vars(p)[{name!r}] is value  # kept: later lookups skip __getattr__
try:
    p.no_such_name
except AttributeError as exc:
    assert str(exc) == "module {package!r} has no attribute 'no_such_name'", str(exc)
else:
    raise AssertionError("no AttributeError")
print("ok")
"""


@pytest.mark.parametrize(
    ("package", "name", "home"),
    [
        ("workbench", "RiskCoverageDisplay", "workbench.metrics.displays"),
        ("workbench.metrics", "choice_report", "workbench.metrics.report"),
        ("workbench.metrics", "krippendorff_alpha", "workbench.metrics.agreement"),
    ],
)
def test_a_re_exported_name_loads_on_first_use_and_is_kept(package: str, name: str, home: str):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package, name=name, home=home)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
