"""The install contract: the README's install line is what `.ci/run` runs, and `constraints.txt` pins a
release of every dependency `pyproject.toml` names, inside its bounds (so the lock and the bounds
cannot drift apart unnoticed)."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

INSTALL_EXTRAS = ("local", "test")  # the README's line


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version and "+" not in version, f"constraints.txt: {raw!r} is not an exact NAME==VERSION pin"
        assert canonicalize_name(name) not in pins, f"constraints.txt pins {name} twice"
        pins[canonicalize_name(name)] = version
    return pins


def _requirements(path, extras=()) -> list[Requirement]:
    project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(x) for x in lines]


def _install_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip().startswith("pip install") and "-e ./runtime" in x]
    assert len(lines) == 1, lines
    return lines[0]


def test_readme_install_line_is_what_ci_runs_and_uses_the_constraints():
    readme = _install_line((ROOT / "README.md").read_text(encoding="utf-8"))
    ci = _install_line((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert readme == ci
    assert re.search(r"(^| )-c constraints\.txt( |$)", readme), readme
    assert all(f"{e}" in readme for e in INSTALL_EXTRAS)


@pytest.mark.parametrize(
    ("pyproject", "extras"),
    [("pyproject.toml", ("local", "test", "png", "spark")), ("runtime/pyproject.toml", ("ed25519",))],
)
def test_constraints_pin_every_dependency_within_its_bounds(pyproject, extras):
    pins = _pins()
    for req in _requirements(ROOT / pyproject, extras):
        name = canonicalize_name(req.name)
        if name == "decision-workbench-runtime":  # installed from ./runtime, not from an index
            continue
        assert name in pins, f"{pyproject}: {req} has no pin in constraints.txt (regenerate: bash .ci/lock)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]} outside {pyproject}'s {req.specifier}"
        )


def test_every_dependency_has_an_upper_bound():
    """A major release nobody has tested is excluded until `bash .ci/drift` has run the tests on it."""
    for pyproject, extras in (
        ("pyproject.toml", ("local", "test", "png", "spark")),
        ("runtime/pyproject.toml", ("ed25519",)),
    ):
        for req in _requirements(ROOT / pyproject, extras):
            ops = {s.operator for s in req.specifier}
            assert ops & {"<", "<=", "==", "~="}, f"{pyproject}: {req} has no upper bound"
