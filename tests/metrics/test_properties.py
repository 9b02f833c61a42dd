"""Property tests (hypothesis) and bootstrap checks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sklearn.metrics as skm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from tests.metrics.conftest import calibrated_sample
from workbench.metrics import reliability, scores
from workbench.metrics.bootstrap import bootstrap_many, mcnemar, paired_bootstrap, resample_cell_counts, resample_counts
from workbench.metrics.report import choice_report, noul_report, score_report

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def prob_matrices(draw, max_n=300, max_k=8):
    n = draw(st.integers(5, max_n))
    k = draw(st.integers(2, max_k))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    concentration = draw(st.sampled_from([0.1, 0.5, 1.0, 5.0]))
    probs = rng.dirichlet(np.full(k, concentration), size=n)
    labels = rng.integers(0, k, n)
    return probs, labels, rng.permutation(n)


def _point_metrics(report):
    return {k: v.estimate for k, v in report.metrics.items()}


@SETTINGS
@given(prob_matrices())
def test_metrics_are_invariant_to_item_order(data):
    probs, labels, perm = data
    reporter = {2: noul_report}.get(probs.shape[1], choice_report)
    a = _point_metrics(reporter(probs, labels, n_boot=0, smooth=False))
    b = _point_metrics(reporter(probs[perm], labels[perm], n_boot=0, smooth=False))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == pytest.approx(b[k], abs=1e-12, nan_ok=True), k
    c = _point_metrics(score_report(probs[perm], labels[perm], n_boot=0, smooth=False))
    d = _point_metrics(score_report(probs, labels, n_boot=0, smooth=False))
    for k in c:
        assert c[k] == pytest.approx(d[k], abs=1e-12, nan_ok=True), k


@SETTINGS
@given(prob_matrices(max_n=500, max_k=12), st.sampled_from([5, 10, 15]))
def test_brier_decomposition_sums_to_the_brier_score(data, n_bins):
    probs, labels, _ = data
    d = scores.brier_decomposition(probs, labels, n_bins)
    assert d.reliability - d.resolution + d.uncertainty == pytest.approx(d.brier, abs=1e-12)
    sk = skm.brier_score_loss(labels, probs, labels=range(probs.shape[1]))
    assert d.brier == pytest.approx(2 * sk if probs.shape[1] == 2 else sk, abs=1e-12)  # sklearn halves binary
    assert d.resolution >= -1e-12 and d.uncertainty >= 0
    y = (labels == 0).astype(int)
    b = scores.binary_brier_decomposition(y, probs[:, 0], n_bins)
    assert b.reliability - b.resolution + b.uncertainty == pytest.approx(b.brier, abs=1e-12)
    assert b.brier == pytest.approx(skm.brier_score_loss(y, probs[:, 0]), abs=1e-12)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 10))
def test_ece_of_a_perfectly_calibrated_sample_shrinks_with_n(seed, k):
    small = calibrated_sample(500, k, seed=seed)
    large = calibrated_sample(50_000, k, seed=seed)
    for strategy in ("uniform", "quantile"):
        assert reliability.top_label_ece(*large, 15, strategy) < reliability.top_label_ece(*small, 15, strategy)
    assert reliability.top_label_ece(*large, 15) < 0.03

    def smece(probs, labels):
        conf, correct = reliability.top_label(probs, labels)
        return reliability.smooth_ece(correct, conf)

    assert smece(*large) < smece(*small)


def test_a_bootstrap_replicate_equals_the_metric_on_the_resampled_items():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from netcal.metrics import ECE
    probs, labels = calibrated_sample(3000, 6, seed=2, temperature=0.7)
    rep = choice_report(probs, labels, n_boot=1, seed=123, smooth=False)
    counts = next(resample_counts(len(labels), 1, seed=123)).astype(int)
    idx = np.repeat(np.arange(len(labels)), counts)
    p, y = probs[idx], labels[idx]
    expected = {
        "accuracy": skm.accuracy_score(y, p.argmax(1)),
        "macro_f1": skm.f1_score(y, p.argmax(1), average="macro"),
        "log_loss": skm.log_loss(y, p, labels=range(6)),
        "brier": skm.brier_score_loss(y, p, labels=range(6)),
        "ece_uniform": float(ECE(bins=15).measure(p, y)),
    }
    for k, v in expected.items():
        assert rep.metrics[k].low == pytest.approx(v, abs=1e-9), k
        assert rep.metrics[k].high == rep.metrics[k].low


def test_weighted_auc_and_ap_replicates_match_sklearn_on_resampled_items():
    rng = np.random.default_rng(5)
    s = np.round(rng.random(2000), 2)
    y = (rng.random(2000) < s).astype(int)
    probs = np.stack([s, 1 - s], axis=1)
    labels = 1 - y  # 0 = yes
    rep = noul_report(probs, labels, n_boot=1, seed=9, smooth=False)
    idx = np.repeat(np.arange(2000), next(resample_counts(2000, 1, seed=9)).astype(int))
    assert rep.metrics["roc_auc"].low == pytest.approx(skm.roc_auc_score(y[idx], s[idx]), abs=1e-9)
    assert rep.metrics["pr_auc"].low == pytest.approx(skm.average_precision_score(y[idx], s[idx]), abs=1e-9)
    assert rep.metrics["roc_auc"].estimate == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)


def test_bootstrap_is_seeded_and_covers_the_truth():
    rng = np.random.default_rng(0)
    x = rng.random(400)
    stat = lambda w: {"mean": float(x.mean()) if w is None else float(w @ x / w.sum())}  # noqa: E731
    a = bootstrap_many(stat, 400, n_boot=300, seed=7)["mean"]
    b = bootstrap_many(stat, 400, n_boot=300, seed=7)["mean"]
    assert (a.low, a.high) == (b.low, b.high)
    se = x.std(ddof=1) / np.sqrt(400)  # the interval width is close to the normal-theory one
    assert a.high - a.low == pytest.approx(2 * 1.96 * se, rel=0.2)
    covered = 0
    for rep in range(200):  # the 95% interval of a mean should cover the truth ~95% of the time
        xs = np.random.default_rng(1000 + rep).random(200)
        iv = bootstrap_many(
            lambda w: {"m": float(xs.mean()) if w is None else float(w @ xs / w.sum())}, 200, n_boot=200, seed=rep
        )["m"]
        covered += iv.low <= 0.5 <= iv.high
    assert 0.88 <= covered / 200 <= 0.99


def test_cell_counts_have_the_distribution_of_per_item_draws_summed_per_cell():
    """Per-cell replicates are drawn as Multinomial(n, items per cell / n): the distribution of the per-item
    draws summed per cell. Their means and covariances agree with summing :func:`resample_counts`
    (3,000 replicates each, within Monte Carlo error), every replicate has n draws, and an empty cell
    stays empty."""
    rng = np.random.default_rng(4)
    n, n_cells, n_boot = 600, 6, 3000
    cells = rng.choice(5, size=n, p=[0.5, 0.3, 0.15, 0.04, 0.01])  # cell 5 holds no item
    direct = np.array(list(resample_cell_counts(cells, n_cells, n_boot, seed=1)))
    summed = np.array([np.bincount(cells, weights=w, minlength=n_cells) for w in resample_counts(n, n_boot, seed=2)])
    assert direct.shape == (n_boot, n_cells) and (direct.sum(axis=1) == n).all() and (direct[:, 5] == 0).all()
    share = np.bincount(cells, minlength=n_cells) / n
    expected_cov = n * (np.diag(share) - np.outer(share, share))  # the multinomial's
    for reps in (direct, summed):
        assert (np.abs(reps.mean(axis=0) - n * share) <= 4 * np.sqrt(n * share / n_boot)).all()
        assert np.abs(np.cov(reps.T) - expected_cov).max() <= 0.1 * expected_cov.max()


def test_paired_bootstrap_and_mcnemar():
    probs, labels = calibrated_sample(2000, 4, seed=1)
    worse = 0.5 * probs + 0.5 / 4  # same ranking, less confident: higher log loss
    better_acc = probs.copy()

    def stat(p):
        return lambda w: {"log_loss": scores.log_loss(p, labels, w), "accuracy": scores.accuracy(p, labels, w)}

    same = paired_bootstrap(stat(probs), stat(better_acc), 2000, n_boot=200)
    assert same["log_loss"].difference == 0 and same["log_loss"].low == 0 == same["log_loss"].high
    diff = paired_bootstrap(stat(probs), stat(worse), 2000, n_boot=200)
    assert diff["log_loss"].low > 0 and diff["log_loss"].p_value < 0.01
    assert diff["accuracy"].difference == 0  # argmax unchanged
    a = np.random.default_rng(2).random(500) < 0.7
    b = np.random.default_rng(3).random(500) < 0.75
    res = mcnemar(a, b)
    discordant = res.b01 + res.b10
    assert res.p_exact == pytest.approx(binomtest(res.b01, discordant, 0.5).pvalue, abs=1e-12)
    assert res.p_mid < res.p_exact
