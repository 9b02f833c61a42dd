"""The install contract: the README's two install lines — the user install first (the workbench and the
offline model), the contributor install second (plus the test toolchain) — are what `.ci/check_user_install`
and `.ci/run` run, and `constraints.txt` pins a release of every dependency `pyproject.toml` names,
inside its bounds (so the lock and the bounds cannot drift apart unnoticed)."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

USER_EXTRAS = {"local"}  # the README's user line: the offline model, nothing of the test toolchain
CONTRIBUTOR_EXTRAS = {"local", "test"}  # the README's contributor line (.ci/run)


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


def _install_lines(text: str) -> list[str]:
    return [x.strip() for x in text.splitlines() if x.strip().startswith("pip install") and "-e ./runtime" in x]


def _install_line(text: str) -> str:
    lines = _install_lines(text)
    assert len(lines) == 1, lines
    return lines[0]


def _extras(line: str) -> set[str]:
    (extras,) = re.findall(r'-e "\.\[([a-z0-9,]+)\]"', line)
    return set(extras.split(","))


def _readme_lines() -> tuple[str, str]:
    """(user line, contributor line): the README's install section names exactly these two, in this order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("## Install\n") : readme.index("## Run the main job")]
    user, contributor = _install_lines(install)
    assert install.index("### Use the workbench") < install.index(user) < install.index("### Contribute")
    assert install.index("### Contribute") < install.index(contributor)
    assert [x for x in _install_lines(readme) if x not in (user, contributor)] == []
    return user, contributor


def test_readme_contributor_install_line_is_what_ci_runs_and_uses_the_constraints():
    _, readme = _readme_lines()
    ci = _install_line((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert readme == ci
    assert re.search(r"(^| )-c constraints\.txt( |$)", readme), readme
    assert _extras(readme) == CONTRIBUTOR_EXTRAS


def test_readme_user_install_line_is_what_the_ci_check_installs():
    """The user line brings the offline model and no test extra; `.ci/check_user_install` (which `.ci/run`
    calls) installs exactly it in a fresh environment and runs `workbench demo --fast` there."""
    readme, _ = _readme_lines()
    script = (ROOT / ".ci" / "check_user_install").read_text(encoding="utf-8")
    (checked,) = re.findall(r"^USER_INSTALL='(.+)'$", script, flags=re.M)
    assert readme == checked
    assert 'eval "$USER_INSTALL"' in script and "workbench demo --fast" in script
    assert re.search(r"(^| )-c constraints\.txt( |$)", readme), readme
    assert _extras(readme) == USER_EXTRAS
    assert re.search(r"^bash \.ci/check_user_install$", (ROOT / ".ci" / "run").read_text(), flags=re.M)


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
