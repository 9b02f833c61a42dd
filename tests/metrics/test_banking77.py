"""Acceptance on real data: BANKING77 through the TF-IDF baseline, then report / calibrate / label-issues."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, dataset_path, run_cli

pytestmark = pytest.mark.slow


def test_banking77_report_calibrate_label_issues(tmp_path):
    db = tmp_path / "b77.duckdb"
    run_cli(
        "datasets",
        "import",
        str(dataset_path("banking77", "train.csv")),
        str(dataset_path("banking77", "test.csv")),
        "--name",
        "banking77",
        "--text-column",
        "text",
        "--label",
        "intent=category",
        "--calibration-fraction",
        "0.2",
        "--seed",
        "0",
        "--schema",
        str(ROOT / "experiments" / "schemas" / "banking77.yaml"),
        db=db,
        check=True,
    )
    out = run_cli(
        "run",
        "--dataset",
        "banking77",
        "--schema",
        str(ROOT / "experiments" / "schemas" / "banking77.yaml"),
        "--provider",
        "baseline:tfidf-logreg",
        "--split",
        "calibration",
        "--split",
        "test",
        "--no-progress",
        "--json",
        db=db,
        check=True,
    )
    run_id = json.loads(out.stdout)["runs"][0]["run_id"]
    rep = json.loads(run_cli("report", run_id, "--json", "--boot", "100", db=db, check=True).stdout)
    metrics = rep["questions"]["intent"]["metrics"]
    for name in (
        "accuracy",
        "macro_f1",
        "top_2_accuracy",
        "log_loss",
        "brier",
        "ece_uniform",
        "ece_quantile",
        "mce_uniform",
        "debiased_ece",
        "smece",
        "classwise_ece",
    ):
        m = metrics[name]
        assert m["n_boot"] == 100 and m["low"] <= m["high"], name
    assert 0.8 < metrics["accuracy"]["estimate"] < 0.95  # TF-IDF + logistic regression on BANKING77
    assert rep["questions"]["intent"]["counts"]["n_labelled"] == 3080
    cal = json.loads(run_cli("calibrate", run_id, "--method", "temperature", "--json", db=db, check=True).stdout)
    q = cal["questions"]["intent"]
    assert q["ece_after"] < q["ece_before"]
    issues = json.loads(run_cli("label-issues", run_id, "--top", "5", "--json", db=db, check=True).stdout)
    li = issues["questions"]["intent"]
    assert len(li["issues"]) == 5 and li["n_issues"] >= 5
    assert li["metrics_test"]["n_excluding"] < li["metrics_test"]["n_all"]
