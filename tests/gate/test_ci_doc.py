"""Acceptance 4: the workflow in docs/ci.md runs as written and its gate passes."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.gate.conftest import workflow

pytestmark = pytest.mark.slow


def test_every_run_step_of_the_documented_workflow_succeeds(ci_workflow):
    names = [s["name"] for s in workflow()["jobs"]["gate"]["steps"] if "run" in s]
    assert names[0] == "Install"
    assert [n for n, _ in ci_workflow.steps] == names  # nothing skipped, nothing stopped early
    for name, proc in ci_workflow.steps:
        assert proc.returncode == 0, f"step {name!r} failed:\n{proc.stderr[-3000:]}"
    assert ci_workflow.run_id.startswith("run-")


def test_the_install_step_installs_both_distributions_from_the_checkout(ci_workflow):
    """The later steps ran the workbench and the runtime that `Install` put into the new environment."""
    code = (
        "import json, workbench, workbench_runtime; from importlib.metadata import version;"
        "print(json.dumps([workbench.__file__, workbench_runtime.__file__, version('decision-workbench-runtime')]))"
    )
    proc = subprocess.run(  # from a folder that holds no package, so only the installed ones import
        [ci_workflow.python, "-c", code],
        capture_output=True,
        text=True,
        env=ci_workflow.env,
        cwd=ci_workflow.repo / "gate",
    )
    assert proc.returncode == 0, proc.stderr
    wb_file, rt_file, rt_version = json.loads(proc.stdout)
    assert Path(wb_file).is_relative_to(ci_workflow.repo / "workbench")
    assert Path(rt_file).is_relative_to(ci_workflow.repo / "runtime")
    assert rt_version == "0.1.0"


def test_the_workflow_leaves_a_junit_report_and_a_summary(ci_workflow):
    root = ET.parse(ci_workflow.repo / "gate" / "junit.xml").getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == 4 and root.get("failures") == "0" and not root.findall(".//failure")
    summary = (ci_workflow.repo / ".step_summary").read_text()
    assert summary == (ci_workflow.repo / "gate" / "summary.md").read_text()
    assert "Workbench gate: passed" in summary and summary.count("✅") == 4
