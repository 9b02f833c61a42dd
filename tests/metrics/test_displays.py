"""Plotly displays carry the same numbers as the metric functions."""

from __future__ import annotations

import numpy as np

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.evaluation import calibrate_run, confusion_display, reliability_display
from workbench.metrics import reliability
from workbench.metrics.displays import ConfusionDisplay, ReliabilityDisplay


def test_reliability_display_from_predictions_matches_the_curve():
    probs, labels = calibrated_sample(2000, 4, seed=3, temperature=0.6)
    probs[5] = np.nan  # a failure is skipped, not drawn
    d = ReliabilityDisplay.from_predictions(labels, probs, n_bins=10)
    ok = np.isfinite(probs).all(axis=1)
    curve = reliability.top_label_reliability_curve(probs[ok], labels[ok], 10)
    markers = [t for t in d.figure_.data if t.type == "scatter" and t.mode == "markers+lines"][0]
    nz = curve.count > 0
    np.testing.assert_allclose(markers.x, curve.mean_score[nz])
    np.testing.assert_allclose(markers.y, curve.frac_true[nz])
    bars = [t for t in d.figure_.data if t.type == "bar"][0]
    assert sum(bars.y) == ok.sum()
    assert f"ECE {curve.ece:.3f}" in markers.name


def test_display_of_a_stored_run_draws_before_and_after_for_a_calibrated_view(tmp_path):
    probs, labels = calibrated_sample(600, 3, seed=4, temperature=0.5)
    con, run_id, *_ = build_store(tmp_path / "wb.duckdb", {"q": ("choice", ["a", "b", "c"], probs, labels)}, 600)
    view = calibrate_run(con, run_id, "isotonic")["run_id"]
    d = reliability_display(con, view, "q")
    assert len(d.curves) == 2 and "(before)" in d.curves[0][0]
    c = confusion_display(con, run_id, "q", normalize="true")
    heat = c.figure_.data[0]
    assert list(heat.x)[-1] == "review"
    np.testing.assert_allclose(np.asarray(heat.z).sum(axis=1), 1.0)
    con.close()


def test_confusion_display_review_column():
    probs, labels = calibrated_sample(500, 3, seed=6)
    accept = probs.max(axis=1) > 0.7
    d = ConfusionDisplay.from_predictions(labels, probs, ["x", "y", "z"], accept=accept)
    z = np.asarray(d.figure_.data[0].z)
    assert z[:, -1].sum() == (~accept).sum()
    assert "review rate" in d.figure_.layout.title.text
