"""Plotly displays carry the same numbers as the metric functions."""

from __future__ import annotations

import numpy as np

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.metrics import reliability
from workbench.metrics.displays import ConfusionDisplay, ReliabilityDisplay
from workbench.store.runs import load_answers
from workbench.workflows.evaluation import calibrate_run


def test_reliability_display_from_predictions_matches_the_curve():
    probs, labels = calibrated_sample(2000, 4, seed=3, temperature=0.6)
    probs[5] = np.nan  # a failure is skipped, not drawn
    d = ReliabilityDisplay.from_predictions(labels, probs, n_bins=10)
    ok = np.isfinite(probs).all(axis=1)
    conf, correct = reliability.top_label(probs[ok], labels[ok])
    curve = reliability.reliability_curve(correct, conf, 10, "uniform", label="top-label")
    markers = [t for t in d.figure_.data if t.type == "scatter" and t.mode == "markers+lines"][0]
    nz = curve.count > 0
    np.testing.assert_allclose(markers.x, curve.mean_score[nz])
    np.testing.assert_allclose(markers.y, curve.frac_true[nz])
    bars = [t for t in d.figure_.data if t.type == "bar"][0]
    assert sum(bars.y) == ok.sum()
    assert f"ECE {curve.ece:.3f}" in markers.name


def test_displays_of_stored_answers_draw_a_run_and_its_calibrated_view(tmp_path):
    probs, labels = calibrated_sample(600, 3, seed=4, temperature=0.5)
    con, run_id, *_ = build_store(tmp_path / "wb.duckdb", {"q": ("choice", ["a", "b", "c"], probs, labels)}, 600)
    view = calibrate_run(con, run_id, "isotonic")["run_id"]
    before, after = (load_answers(con, r, "q", ["test"]) for r in (run_id, view))
    d = ReliabilityDisplay.from_answers([("raw (before)", before), ("isotonic", after)], "q", split="test")
    assert len(d.curves) == 2 and "(before)" in d.curves[0][0]
    c = ConfusionDisplay.from_answers(before, normalize="true")
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


def test_confusion_display_draws_every_option_of_a_77_option_question():
    # issue 27 §6: banking77's 77 options got no matrix on the Calibration page; the display draws them all
    probs, labels = calibrated_sample(2000, 77, seed=3)
    opts = [f"intent_{j}" for j in range(77)]
    d = ConfusionDisplay.from_predictions(labels, probs, opts)
    z = np.asarray(d.figure_.data[0].z)
    assert z.shape == (77, 78) and z.sum() == (labels >= 0).sum()
    assert list(d.figure_.data[0].y) == opts and d.figure_.layout.yaxis.dtick == 1


# -- risk–coverage and threshold surface --------------------------------------------------------------
def _brute_force_risk_coverage(probs, labels):
    """Accept items with top probability >= t for every distinct t: (coverage, risk) per t, by a plain loop."""
    ok = labels >= 0
    probs, labels = probs[ok], labels[ok]
    answered = np.isfinite(probs).all(axis=1)
    conf = np.where(answered, np.nan_to_num(probs, nan=-1).max(axis=1), -1)
    pred = np.nan_to_num(probs, nan=-1).argmax(axis=1)
    out = []
    for t in sorted(set(conf[answered]), reverse=True):
        acc = answered & (conf >= t)
        out.append((acc.sum() / len(labels), (pred[acc] != labels[acc]).mean()))
    return np.array(out)


def test_risk_coverage_curve_matches_a_brute_force_threshold_sweep():
    from workbench.metrics.selective import risk_coverage_curve

    probs, labels = calibrated_sample(700, 4, seed=11, temperature=0.7)
    probs = np.round(probs, 2)  # ties: items with equal confidence are accepted together
    probs[::50] = np.nan  # failures: never accepted, still in the coverage denominator
    labels[3] = -1  # unlabelled: dropped
    curve = risk_coverage_curve(probs, labels)
    ref = _brute_force_risk_coverage(probs, labels)
    np.testing.assert_allclose(curve.coverage, ref[:, 0])
    np.testing.assert_allclose(curve.risk, ref[:, 1])
    assert curve.coverage[-1] < 1.0  # failures keep full coverage out of reach
    assert 0.0 <= curve.aurc <= 1.0


def test_risk_coverage_display_overlays_runs_and_marks_points():
    from workbench.metrics.displays import RiskCoverageDisplay
    from workbench.metrics.selective import risk_coverage_curve

    sharp, ys = calibrated_sample(500, 3, seed=1, temperature=0.4)
    flat, yf = calibrated_sample(500, 3, seed=2, temperature=2.0)
    a = RiskCoverageDisplay.from_predictions(ys, sharp, name="sharp", point=(0.5, 0.02))
    b = RiskCoverageDisplay.from_predictions(yf, flat, name="flat")
    fig = RiskCoverageDisplay.overlay([a, b], title="two runs").plot()
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name.split(" (")[0] for t in lines] == ["sharp", "flat"]
    ref = risk_coverage_curve(flat, yf)
    np.testing.assert_allclose(lines[1].y, ref.risk)
    stars = [t for t in fig.data if t.mode == "markers"]
    assert len(stars) == 1 and stars[0].x[0] == 0.5 and stars[0].marker.color == lines[0].line.color
    assert fig.layout.title.text == "two runs"


def test_surface_displays_read_the_surface_arrays():
    from workbench.metrics.displays import RiskCoverageDisplay, ThresholdSurfaceDisplay
    from workbench.thresholds.surface import risk_coverage_surface

    probs, labels = calibrated_sample(800, 4, seed=5, temperature=0.8)
    surf = risk_coverage_surface("choice", probs, labels, grid=30)
    region = surf.error_rate <= 0.05
    d = ThresholdSurfaceDisplay.from_surface(surf, chosen=(0.5, 0.1), certified=(0.7, 0.2), region=region)
    heat = d.figure_.data[0]
    np.testing.assert_allclose(np.asarray(heat.z, float), surf.error_rate.T)
    names = [t.name for t in d.figure_.data]
    assert {"certified region", "chosen", "certified"} <= set(names)
    # frontier: for each coverage, the lowest error among grid rules accepting at least that share
    rc = RiskCoverageDisplay.from_surface(surf, name="grid")
    line = rc.figure_.data[0]
    cov, err = surf.coverage.ravel(), surf.error_rate.ravel()
    for c, e in zip(line.x[::7], line.y[::7]):
        assert e == np.nanmin(np.where(cov >= c, err, np.nan))
    noul_probs, noul_labels = calibrated_sample(300, 2, seed=8)
    noul = risk_coverage_surface("noul", noul_probs, noul_labels, grid=20)
    nd = ThresholdSurfaceDisplay.from_surface(noul, colour_by="coverage")
    assert nd.y_title.startswith("τ no") and np.all(nd.y_grid >= 0)  # shown as τ no, not −τ no
    np.testing.assert_allclose(np.asarray(nd.figure_.data[0].z, float), noul.coverage.T)
