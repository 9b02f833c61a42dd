"""The GitHub Actions workflow of docs/ci.md, run step by step on the bundled BANKING77 data.

The workflow's ``run:`` steps are executed verbatim with bash, with ``$GITHUB_ENV`` and
``$GITHUB_STEP_SUMMARY`` emulated the way Actions does, in a scratch checkout: a copy of the package
sources (``workbench/``, ``runtime/``, ``pyproject.toml``, ``constraints.txt``) that links the
repository's datasets and schemas. ``Install`` runs in a new virtual environment whose only extra
``sys.path`` entry is the test interpreter's site-packages (so the dependencies pinned in
constraints.txt are found there, nothing from the test interpreter's own workbench is importable,
and pip installs the two distributions from the copy); every later step runs that environment's
``workbench`` and ``python``.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import venv
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, dataset_path

DOC = ROOT / "docs" / "ci.md"


def doc_blocks(lang: str) -> list[str]:
    """Fenced code blocks of docs/ci.md in ``lang``, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def workflow() -> dict:
    (block,) = [b for b in doc_blocks("yaml") if b.startswith("name: decision-gate")]
    return yaml.safe_load(block)


def requirements_text() -> str:
    (block,) = [b for b in doc_blocks("yaml") if b.startswith("# ci/requirements.yaml")]
    return block


@dataclass
class WorkflowRun:
    repo: Path
    env: dict
    python: str
    steps: list[tuple[str, subprocess.CompletedProcess]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.env["RUN_ID"]

    def workbench(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.python, "-c", "from workbench.cli import main; main()", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd or self.repo,
            timeout=600,
        )


def run_step(repo: Path, env: dict, script: str) -> subprocess.CompletedProcess:
    """One ``run:`` step as Actions runs it (bash -e), then fold ``$GITHUB_ENV`` into the environment."""
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=900,
    )
    for line in Path(env["GITHUB_ENV"]).read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            env[k] = v
    return proc


def copy_sources(repo: Path) -> None:
    """What a checkout holds of the two distributions, without build leftovers."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache", ".mypy_cache")
    for name in ("workbench", "runtime"):
        shutil.copytree(ROOT / name, repo / name, ignore=ignore)
    for name in ("pyproject.toml", "constraints.txt", "README.md"):
        shutil.copy2(ROOT / name, repo / name)


def new_environment(path: Path) -> Path:
    """A virtual environment (with pip) that also sees the test interpreter's installed dependencies."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # a plain path line: the directory joins sys.path, its .pth files (editable finders) are not run
    Path(purelib, "_test_interpreter_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return path / "bin"


@pytest.fixture(scope="session")
def ci_workflow(tmp_path_factory) -> WorkflowRun:
    repo = tmp_path_factory.mktemp("checkout")
    copy_sources(repo)
    (repo / "datasets").mkdir()
    (repo / "datasets" / "banking77").symlink_to(dataset_path("banking77", "train.csv").parent)
    (repo / "experiments").symlink_to(ROOT / "experiments")
    (repo / "ci").mkdir()
    (repo / "ci" / "requirements.yaml").write_text(requirements_text(), encoding="utf-8")
    bindir = new_environment(tmp_path_factory.mktemp("venv") / "venv")
    job = workflow()["jobs"]["gate"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(
        {
            **{k: str(v) for k, v in job.get("env", {}).items()},
            "PATH": f"{bindir}:{os.environ['PATH']}",
            "VIRTUAL_ENV": str(bindir.parent),
            "GITHUB_ENV": str(repo / ".github_env"),
            "GITHUB_STEP_SUMMARY": str(repo / ".step_summary"),
        }
    )
    Path(env["GITHUB_ENV"]).touch()
    out = WorkflowRun(repo, env, str(bindir / "python"))
    for step in job["steps"]:
        if "run" not in step:
            continue
        proc = run_step(repo, env, step["run"])
        out.steps.append((step["name"], proc))
        if proc.returncode != 0:
            break
    return out
