"""The real `workbench report | calibrate | label-issues` commands on a store in tmp_path."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import sklearn.metrics as skm

from tests.conftest import run_cli
from tests.metrics.conftest import build_store, calibrated_sample


@pytest.fixture
def store(tmp_path):
    n = 500
    probs, labels = calibrated_sample(n, 4, seed=31, temperature=0.5)
    labels = labels.copy()
    sure = np.flatnonzero(probs.max(axis=1) > 0.995)[:8]
    labels[sure] = (probs[sure].argmax(axis=1) + 1) % 4  # planted label errors
    path = tmp_path / "wb.duckdb"
    con, run_id, item_ids, splits = build_store(
        path, {"intent": ("choice", ["a", "b", "c", "d"], probs, labels)}, n, fail_every=25
    )
    con.close()
    return path, run_id, probs, labels, splits, item_ids[sure]


def test_report_json_has_every_metric_with_intervals(store):
    path, run_id, probs, labels, splits, _ = store
    proc = run_cli("report", run_id, "--json", "--boot", "50", db=path, check=True)
    doc = json.loads(proc.stdout)
    q = doc["questions"]["intent"]
    failed = np.arange(len(labels)) % 25 == 3
    use = (splits == "test") & ~failed
    assert q["counts"]["n_failed"] == int(((splits == "test") & failed).sum())
    assert q["metrics"]["accuracy"]["estimate"] == pytest.approx(skm.accuracy_score(labels[use], probs[use].argmax(1)))
    for name in (
        "accuracy",
        "macro_f1",
        "log_loss",
        "brier",
        "ece_uniform",
        "ece_quantile",
        "debiased_ece",
        "smece",
        "classwise_ece",
        "top_2_accuracy",
        "mce_uniform",
    ):
        m = q["metrics"][name]
        assert m["low"] <= m["estimate"] <= m["high"], name
    assert len(q["reliability"]["top_label_uniform"]["count"]) == 15
    assert q["confusion"]["columns"][-1] == "review"
    text = run_cli("report", run_id, "--boot", "20", db=path, check=True).stdout
    assert "ece_uniform" in text and "coverage" in text


def test_calibrate_then_report_shows_before_and_after(store):
    path, run_id, *_ = store
    out = json.loads(run_cli("calibrate", run_id, "--method", "temperature", "--json", db=path, check=True).stdout)
    q = out["questions"]["intent"]
    assert q["ece_after"] < q["ece_before"] and q["temperature"] > 1
    doc = json.loads(run_cli("report", out["run_id"], "--json", "--boot", "20", db=path, check=True).stdout)
    assert doc["run"]["kind"] == "calibrated" and doc["before"]["run"]["run_id"] == run_id
    after = doc["questions"]["intent"]["metrics"]["ece_uniform"]["estimate"]
    before = doc["before"]["questions"]["intent"]["metrics"]["ece_uniform"]["estimate"]
    assert after < before
    assert doc["calibrators"]["intent"]["type"] == "temperature"
    bad = run_cli("calibrate", run_id, "--method", "platt", db=path)
    assert bad.returncode == 2 and "yes/no" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_label_issues_json_and_csv(store, tmp_path):
    path, run_id, probs, labels, splits, planted = store
    out_csv = tmp_path / "queue.csv"
    doc = json.loads(run_cli("label-issues", run_id, "--json", "--csv", str(out_csv), db=path, check=True).stdout)
    q = doc["questions"]["intent"]
    flagged = {r["item_id"] for r in q["issues"]}
    assert set(planted) <= flagged
    assert q["metrics_test"]["n_excluding"] < q["metrics_test"]["n_all"]
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == q["n_issues"] and {"item_id", "given", "suggested", "quality"} <= set(rows[0])
