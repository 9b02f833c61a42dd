"""The install commands the docs show for the light runtime work as written, in a fresh virtual
environment on a copy of the checkout: docs/monitoring.md's two lines, and the command the runtime's own
error names when an Ed25519 key is loaded without the `[ed25519]` extra (a real install, then the same
key loads). docs/ci.md's `Install` step is run by tests/gate/test_ci_doc.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

LOAD_KEY = """
import sys
from workbench_runtime import DecisionLog, Policy, PolicyError
from workbench_runtime.signing import parse_key
try:
    print("key", parse_key(sys.stdin.read()).key_id)
except PolicyError as exc:
    print("error", exc)
"""


def _doc_install_lines() -> list[str]:
    text = (ROOT / "docs" / "monitoring.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [x.split("#", 1)[0].strip() for b in blocks for x in b.splitlines() if x.startswith("pip install")]


def _ed25519_public_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def test_the_documented_runtime_installs_work_and_the_runtime_names_a_working_install(tmp_path):
    lines = _doc_install_lines()
    assert lines == ["pip install -c constraints.txt ./runtime", 'pip install -c constraints.txt "./runtime[ed25519]"']
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "runtime", checkout / "runtime", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy2(ROOT / "constraints.txt", checkout / "constraints.txt")
    venv.EnvBuilder(with_pip=True, symlinks=True).create(tmp_path / "venv")
    bindir = tmp_path / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{bindir}:{env['PATH']}", VIRTUAL_ENV=str(tmp_path / "venv"), PIP_QUIET="1")

    def sh(command: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, f"{command}:\n{proc.stderr[-3000:]}"
        return proc

    def load_key() -> str:
        proc = subprocess.run(
            [bindir / "python", "-c", LOAD_KEY],
            input=pem,
            cwd=tmp_path,  # no package here: only what was installed imports
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    pem = _ed25519_public_pem()
    sh(lines[0])  # the runtime alone: numpy + pydantic, no cryptography
    out = load_key()
    assert out.startswith("error ") and "cryptography" in out, out
    (hinted,) = re.findall(r"pip install '[^']+'", out)
    sh(hinted)  # the install the runtime's message names
    assert load_key().startswith("key "), "the hinted install did not bring Ed25519 support"
    sh(lines[1])  # the documented extra line, on top
    assert load_key().startswith("key ")
