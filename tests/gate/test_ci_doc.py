"""Acceptance 4: the workflow in docs/ci.md runs as written and its gate passes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.gate.conftest import workflow

pytestmark = pytest.mark.slow


def test_every_run_step_of_the_documented_workflow_succeeds(ci_workflow):
    names = [s["name"] for s in workflow()["jobs"]["gate"]["steps"] if "run" in s and s.get("name") != "Install"]
    assert [n for n, _ in ci_workflow.steps] == names  # nothing skipped, nothing stopped early
    for name, proc in ci_workflow.steps:
        assert proc.returncode == 0, f"step {name!r} failed:\n{proc.stderr}"
    assert ci_workflow.run_id.startswith("run-")


def test_the_workflow_leaves_a_junit_report_and_a_summary(ci_workflow):
    root = ET.parse(ci_workflow.repo / "gate" / "junit.xml").getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == 4 and root.get("failures") == "0" and not root.findall(".//failure")
    summary = (ci_workflow.repo / ".step_summary").read_text()
    assert summary == (ci_workflow.repo / "gate" / "summary.md").read_text()
    assert "Workbench gate: passed" in summary and summary.count("✅") == 4
