"""The GitHub Actions workflow of docs/ci.md, run step by step on the bundled BANKING77 data.

The workflow's ``run:`` steps are executed verbatim with bash (``Install`` is skipped: the package
under test is already importable), with ``$GITHUB_ENV`` and ``$GITHUB_STEP_SUMMARY`` emulated the
way Actions does, in a scratch checkout that links the repository's datasets and schemas.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    steps: list[tuple[str, subprocess.CompletedProcess]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.env["RUN_ID"]

    def workbench(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", "from workbench.cli import main; main()", *args],
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


@pytest.fixture(scope="session")
def ci_workflow(tmp_path_factory) -> WorkflowRun:
    repo = tmp_path_factory.mktemp("checkout")
    (repo / "datasets").mkdir()
    (repo / "datasets" / "banking77").symlink_to(dataset_path("banking77", "train.csv").parent)
    (repo / "experiments").symlink_to(ROOT / "experiments")
    (repo / "ci").mkdir()
    (repo / "ci" / "requirements.yaml").write_text(requirements_text(), encoding="utf-8")
    bindir = repo / ".bin"  # `workbench` and `python` resolve to the interpreter under test
    bindir.mkdir()
    (bindir / "workbench").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "from workbench.cli import main; main()" "$@"\n'
    )
    (bindir / "workbench").chmod(0o755)
    (bindir / "python").symlink_to(sys.executable)
    job = workflow()["jobs"]["gate"]
    env = {
        **os.environ,
        **{k: str(v) for k, v in job.get("env", {}).items()},
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "GITHUB_ENV": str(repo / ".github_env"),
        "GITHUB_STEP_SUMMARY": str(repo / ".step_summary"),
    }
    Path(env["GITHUB_ENV"]).touch()
    out = WorkflowRun(repo, env)
    for step in job["steps"]:
        if "run" not in step or step.get("name") == "Install":
            continue
        proc = run_step(repo, env, step["run"])
        out.steps.append((step["name"], proc))
        if proc.returncode != 0:
            break
    return out
