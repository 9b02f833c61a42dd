"""report_run and calibrate_run against a real DuckDB store in tmp_path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sklearn.metrics as skm

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.metrics.recalibrate import CalibrationFitError, calibrator_from_dict
from workbench.store.runs import get_run, load_answers
from workbench.workflows.evaluation import calibrate_run, report_run


@pytest.fixture
def store(tmp_path):
    n = 600
    probs, labels = calibrated_sample(n, 4, seed=21, temperature=0.5)  # over-confident choice answers
    labels = labels.copy()
    labels[::25] = -1  # some items unlabelled
    yes = np.clip(np.random.default_rng(3).beta(2, 2, n), 0.01, 0.99)
    noul_labels = np.where(np.random.default_rng(4).random(n) < yes**2, 0, 1)
    s_probs, s_labels = calibrated_sample(n, 5, seed=5)
    con, run_id, item_ids, splits = build_store(
        tmp_path / "wb.duckdb",
        {
            "intent": ("choice", ["a", "b", "c", "d"], probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), noul_labels),
            "severity": ("score", ["0", "1", "2", "3", "4"], s_probs, s_labels),
        },
        n,
        fail_every=10,
    )
    yield con, run_id, item_ids, splits, probs, labels
    con.close()


def test_report_run_counts_failures_separately_and_matches_sklearn(store):
    con, run_id, item_ids, splits, probs, labels = store
    rep = report_run(con, run_id, split="test", n_boot=50)
    intent = {q.question: q for q in rep.questions}["intent"]
    test = splits == "test"
    failed = np.arange(len(labels)) % 10 == 3
    use = test & ~failed & (labels >= 0)
    assert intent.counts["n_attempted"] == test.sum()
    assert intent.counts["n_failed"] == (test & failed).sum()
    assert intent.counts["failures_by_kind"] == {"transient": int((test & failed).sum())}
    assert intent.counts["n_labelled"] == use.sum()
    assert intent.counts["coverage"] == pytest.approx(1 - (test & failed).sum() / test.sum())
    acc = intent.metrics["accuracy"]
    assert acc.estimate == pytest.approx(skm.accuracy_score(labels[use], probs[use].argmax(1)), abs=1e-12)
    assert acc.low <= acc.estimate <= acc.high and acc.n_boot == 50
    assert intent.metrics["log_loss"].estimate == pytest.approx(skm.log_loss(labels[use], probs[use], labels=range(4)))
    frame = rep.to_frame()
    assert {"accuracy", "ece_uniform", "smece", "classwise_ece", "brier_reliability"} <= set(frame["metric"])
    kinds = {q.question: q for q in rep.questions}
    assert {"roc_auc", "pr_auc", "ece_yes_uniform"} <= set(kinds["urgent"].metrics)
    assert {"rps", "qwk", "mae_expected_level", "within_one_accuracy", "cumulative_ece"} <= set(
        kinds["severity"].metrics
    )
    json.dumps(rep.to_dict(), default=float)  # JSON-ready (numpy scalars aside)


def test_calibrate_run_stores_a_view_and_lowers_test_ece(store):
    con, run_id, item_ids, splits, probs, labels = store
    out = calibrate_run(con, run_id, "temperature", questions=["intent"])
    view = get_run(con, out["run_id"])
    assert view["kind"] == "calibrated" and view["parent_run_id"] == run_id
    q = out["questions"]["intent"]
    assert q["temperature"] > 1.2  # answers were generated over-confident (T = 0.5)
    assert q["ece_after"] < q["ece_before"]
    # the stored view holds exactly the calibrator's transform of the parent, on every split
    cal = calibrator_from_dict(out["calibrators"]["intent"])
    parent = load_answers(con, run_id, "intent")
    child = load_answers(con, out["run_id"], "intent")
    assert np.array_equal(child.failed, parent.failed)
    np.testing.assert_allclose(child.probs[~child.failed], cal.transform(parent.probs[~parent.failed]), atol=1e-15)
    assert set(child.splits) == {"calibration", "test"}
    rep = report_run(con, out["run_id"], question="intent", n_boot=20)
    assert rep.before is not None and rep.calibrators["intent"]["type"] == "temperature"
    merged = rep.to_frame()
    ece = merged[merged.metric == "ece_uniform"].iloc[0]
    assert ece.estimate < ece.estimate_before


def test_platt_on_a_choice_question_is_a_clear_error(store):
    con, run_id, *_ = store
    with pytest.raises(CalibrationFitError, match="yes/no"):
        calibrate_run(con, run_id, "platt", questions=["intent"])
    n_runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert n_runs == 1  # nothing half-written
