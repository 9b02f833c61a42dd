"""Acceptance 1: `workbench gate` on a BANKING77 TF-IDF run (the store the docs/ci.md workflow built)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.slow


def _write(wf, name: str, text: str):
    p = wf.repo / "ci" / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def documented_gate(ci_workflow):
    """`workbench gate RUN --requirements ci/requirements.yaml --json`, run once for the tests that read it."""
    return ci_workflow.workbench("gate", ci_workflow.run_id, "--requirements", "ci/requirements.yaml", "--json")


def test_passing_file_exits_0_with_figures_of_the_report_and_the_policy(ci_workflow, documented_gate):
    wf = ci_workflow
    r = documented_gate
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["n_failed"] == 0 and doc["n_requirements"] == 4
    got = {x["metric"]: x for x in doc["requirements"]}
    # report metrics are the ones `workbench report --json` prints
    rep = json.loads(wf.workbench("report", wf.run_id, "--question", "intent", "--json", "--boot", "0").stdout)
    for m in ("accuracy", "ece_uniform"):
        assert got[m]["value"] == pytest.approx(rep["questions"]["intent"]["metrics"][m]["estimate"], abs=1e-12)
    # pessimistic ends by default
    assert got["accuracy"]["on"] == "low" and got["accuracy"]["judged_value"] == got["accuracy"]["low"]
    assert got["error_at_policy"]["on"] == "high"
    assert got["accuracy"]["low"] < got["accuracy"]["value"] < got["accuracy"]["high"]
    # the policy applied to the run: the same coverage/error as the figures the export measured on test
    pol = json.loads((wf.repo / "gate" / "policy.json").read_text())["questions"]["intent"]["expected_test"]
    assert got["coverage_at_policy"]["value"] == pytest.approx(pol["coverage"]["value"], abs=1e-12)
    assert got["error_at_policy"]["value"] == pytest.approx(pol["error"]["value"], abs=1e-12)
    assert got["coverage_at_policy"]["n"] == pol["n_items"]


def test_accuracy_099_exits_1_and_junit_counts_one_failure(ci_workflow):
    wf = ci_workflow
    req = _write(
        wf,
        "strict.yaml",
        "split: test\nrequirements:\n"
        "  - {question: intent, metric: accuracy, min: 0.99}\n"
        "  - {question: intent, metric: log_loss, max: 5.0}\n",
    )
    r = wf.workbench(
        "gate", wf.run_id, "--requirements", str(req), "--junit", "out/strict.xml", "--markdown", "out/s.md"
    )
    assert r.returncode == 1, r.stderr
    root = ET.parse(wf.repo / "out" / "strict.xml").getroot()
    assert root.get("failures") == "1" and len(root.findall(".//testcase")) == 2
    (failure,) = root.findall(".//failure")
    msg = failure.get("message")
    assert msg.startswith("accuracy = 0.") and "95% interval [" in msg and "needs >= 0.99" in msg
    md = (wf.repo / "out" / "s.md").read_text()
    assert "FAILED (1 of 2)" in md and md.count("❌") == 1


def test_on_value_judges_the_point_estimate(ci_workflow, documented_gate):
    wf = ci_workflow
    doc = json.loads(documented_gate.stdout)
    acc = next(x for x in doc["requirements"] if x["metric"] == "accuracy")
    # a bound between the low end and the estimate: fails on the pessimistic end, passes on the value
    bound = round((acc["low"] + acc["value"]) / 2, 6)
    for on, code in (("low", 1), ("value", 0)):
        req = _write(
            wf, f"on_{on}.yaml", f"requirements:\n  - {{question: intent, metric: accuracy, min: {bound}, on: {on}}}\n"
        )
        assert wf.workbench("gate", wf.run_id, "-r", str(req)).returncode == code


@pytest.mark.parametrize(
    ("text", "run", "needle"),
    [
        ("requirements:\n  - {question: intent, metric: accuracyy, min: 0.5}\n", None, "unknown metric 'accuracyy'"),
        ("requirements:\n  - {question: intnt, metric: accuracy, min: 0.5}\n", None, "no question 'intnt'"),
        (
            "requirements:\n  - {question: intent, metric: accuracy, min: 0.5}\n",
            "run-nope",
            "run 'run-nope' does not exist",
        ),
        ("requirements:\n  - {question: intent, metric: accuracy}\n", None, "give exactly one of min or max"),
        ("requirements: [\n", None, "cannot parse YAML"),
        (
            "requirements:\n  - {question: intent, metric: error_at_policy, max: 0.1, policy: missing.json}\n",
            None,
            "policy file does not exist",
        ),
    ],
)
def test_a_gate_that_cannot_be_evaluated_exits_2_with_one_line(ci_workflow, text, run, needle):
    wf = ci_workflow
    req = _write(wf, "bad.yaml", text)
    r = wf.workbench("gate", run or wf.run_id, "--requirements", str(req), "--junit", "out/bad.xml")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert r.stdout == ""


def test_baseline_is_paired_and_fails_only_on_a_significant_drop(ci_workflow):
    wf = ci_workflow
    cal = json.loads(wf.workbench("calibrate", wf.run_id, "--method", "temperature", "--json").stdout)["run_id"]
    req = _write(
        wf,
        "base.yaml",
        "n_boot: 300\nrequirements:\n"
        "  - {question: intent, metric: accuracy, min: 0.5}\n"
        "  - {question: intent, metric: ece_uniform, max: 0.5}\n",
    )
    # candidate = the raw run, baseline = its temperature-scaled view: same arg-max, much worse ECE
    r = wf.workbench("gate", wf.run_id, "-r", str(req), "--baseline", cal, "--max-drop", "0.01", "--json")
    assert r.returncode == 1, r.stderr
    got = {x["metric"]: x for x in json.loads(r.stdout)["requirements"]}
    acc = got["accuracy"]["baseline"]
    # identical predictions: a paired bootstrap gives a drop of exactly 0 with a degenerate interval
    assert acc["drop"] == 0 and acc["low"] == 0 and acc["high"] == 0 and not acc["significant"]
    assert got["accuracy"]["passed"]
    ece = got["ece_uniform"]["baseline"]
    assert ece["drop"] > 0.01 and ece["low"] > 0.01 and ece["significant"] and not got["ece_uniform"]["passed"]
    # the other way round the calibrated run improves: no failure
    r2 = wf.workbench("gate", cal, "-r", str(req), "--baseline", wf.run_id, "--max-drop", "0.01")
    assert r2.returncode == 0, r2.stdout + r2.stderr
