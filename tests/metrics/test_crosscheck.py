"""Cross-checks against scikit-learn, netcal and relplot on the same inputs (1e-9 unless stated)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sklearn.metrics as skm
from sklearn.calibration import calibration_curve

from tests.metrics.conftest import calibrated_sample
from workbench.metrics import confusion, reliability, scores
from workbench.metrics.report import choice_report, noul_report, score_report

TOL = 1e-9


@pytest.fixture(params=[(1000, 5, 0, 0.6), (3000, 12, 1, 1.0), (777, 3, 2, 1.8)])
def choice_data(request):
    n, k, seed, t = request.param
    return calibrated_sample(n, k, seed=seed, temperature=t)


def binary_data(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    score = rng.beta(0.8, 1.2, n)
    y = (rng.random(n) < score**1.3).astype(int)
    return y, score


def test_log_loss_and_brier_match_sklearn(choice_data):
    probs, labels = choice_data
    k = probs.shape[1]
    assert scores.log_loss(probs, labels) == pytest.approx(skm.log_loss(labels, probs, labels=range(k)), abs=TOL)
    sk_brier = skm.brier_score_loss(labels, probs, labels=range(k))  # multiclass: sum over options
    assert scores.brier_score(probs, labels) == pytest.approx(sk_brier, abs=TOL)


def test_binary_brier_matches_sklearn():
    y, score = binary_data()
    probs = np.stack([score, 1 - score], axis=1)  # (yes, no); label 0 = yes
    rep = noul_report(probs, 1 - y, n_boot=0, smooth=False)
    assert rep.metrics["brier"].estimate == pytest.approx(skm.brier_score_loss(y, score), abs=TOL)
    # the multiclass form on (yes, no) columns is twice the binary one
    assert scores.brier_score(probs, 1 - y) == pytest.approx(2 * skm.brier_score_loss(y, score), abs=TOL)


def test_confusion_and_f1_match_sklearn(choice_data):
    probs, labels = choice_data
    k = probs.shape[1]
    pred = probs.argmax(axis=1)
    ours = confusion.confusion_matrix(labels, pred, k)
    np.testing.assert_array_equal(ours[:, :k], skm.confusion_matrix(labels, pred, labels=range(k)))
    assert (ours[:, k] == 0).all()
    assert confusion.macro_f1(labels, pred, k) == pytest.approx(skm.f1_score(labels, pred, average="macro"), abs=TOL)
    res = confusion.confusion_result(labels, pred, [str(j) for j in range(k)])
    np.testing.assert_allclose(
        res.f1, skm.f1_score(labels, pred, average=None, labels=range(k), zero_division=0), atol=TOL
    )
    np.testing.assert_allclose(
        res.precision, skm.precision_score(labels, pred, average=None, labels=range(k), zero_division=0), atol=TOL
    )
    np.testing.assert_allclose(
        res.recall, skm.recall_score(labels, pred, average=None, labels=range(k), zero_division=0), atol=TOL
    )
    assert scores.accuracy(probs, labels) == pytest.approx(skm.accuracy_score(labels, pred), abs=TOL)


def test_review_column_moves_rejected_items_only():
    probs, labels = calibrated_sample(2000, 4, seed=9)
    pred = probs.argmax(axis=1)
    accept = probs.max(axis=1) >= 0.6
    m = confusion.confusion_matrix(labels, pred, 4, accept)
    np.testing.assert_array_equal(m[:, :4], skm.confusion_matrix(labels[accept], pred[accept], labels=range(4)))
    np.testing.assert_array_equal(m[:, 4], np.bincount(labels[~accept], minlength=4))
    assert confusion.review_rate(accept) == pytest.approx(1 - accept.mean())
    assert confusion.confusion_result(labels, pred, list("abcd"), accept).review_rate == pytest.approx(
        1 - accept.mean()
    )


def test_top_k_accuracy_matches_sklearn(choice_data):
    probs, labels = choice_data
    k = probs.shape[1]
    metrics = choice_report(probs, labels, n_boot=0, smooth=False).metrics
    for top in (2, 3)[: k - 2]:  # top-2 from 3 options, top-3 from 4
        assert metrics[f"top_{top}_accuracy"].estimate == pytest.approx(
            skm.top_k_accuracy_score(labels, probs, k=top, labels=range(k)), abs=TOL
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_and_average_precision_match_sklearn(seed):
    y, score = binary_data(1500, seed)
    score = np.round(score, 2)  # force ties
    assert scores.roc_auc(y, score) == pytest.approx(skm.roc_auc_score(y, score), abs=TOL)
    assert scores.average_precision(y, score) == pytest.approx(skm.average_precision_score(y, score), abs=TOL)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [5, 10, 15])
def test_reliability_curve_matches_sklearn_on_non_empty_bins(strategy, n_bins):
    y, score = binary_data(1000, 4)
    score = np.where(score < 0.5, 0.7 * score, 0.3 + 0.7 * score)  # nothing in [0.35, 0.65): empty bins
    curve = reliability.reliability_curve(y, score, n_bins, strategy)
    prob_true, prob_pred = calibration_curve(y, score, n_bins=n_bins, strategy=strategy)
    nz = curve.count > 0
    assert len(curve.count) == n_bins
    np.testing.assert_allclose(curve.frac_true[nz], prob_true, atol=TOL)
    np.testing.assert_allclose(curve.mean_score[nz], prob_pred, atol=TOL)
    assert np.isnan(curve.mean_score[~nz]).all() and (curve.count[~nz] == 0).all()
    if strategy == "uniform":
        assert (~nz).any()  # the test really exercises empty bins


@pytest.mark.parametrize("equal_intervals", [True, False])
def test_top_label_ece_matches_netcal(choice_data, equal_intervals):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from netcal.metrics import ECE, MCE
    probs, labels = choice_data
    strategy = "uniform" if equal_intervals else "quantile"
    ours = reliability.top_label_ece(probs, labels, 15, strategy)
    theirs = ECE(bins=15, equal_intervals=equal_intervals).measure(probs, labels)
    if equal_intervals:
        assert ours == pytest.approx(float(theirs), abs=TOL)
        mce = MCE(bins=15).measure(probs, labels)
        assert reliability.top_label_ece(probs, labels, 15, strategy, norm="max") == pytest.approx(float(mce), abs=TOL)
    else:  # netcal's equal-mass edges are quantiles of the clipped confidences: same up to clipping
        assert ours == pytest.approx(float(theirs), abs=1e-6)


def test_smooth_ece_matches_relplot_within_1e3():
    import relplot

    for seed in range(12):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(200, 20_000))
        f = rng.random(n) ** rng.uniform(0.3, 4)
        y = (rng.random(n) < np.clip(f ** rng.uniform(0.5, 2), 0, 1)).astype(float)
        assert reliability.smooth_ece(y, f) == pytest.approx(float(relplot.smECE(f, y)), abs=1e-3)
        assert reliability.smooth_ece_sigma(y, f, 0.05) == pytest.approx(
            float(relplot.smECE_sigma(f, y, 0.05)), abs=1e-6
        )


def test_quadratic_weighted_kappa_matches_sklearn():
    probs, labels = calibrated_sample(1500, 5, seed=3)
    pred = probs.argmax(axis=1)
    assert score_report(probs, labels, n_boot=0, smooth=False).metrics["qwk"].estimate == pytest.approx(
        skm.cohen_kappa_score(labels, pred, weights="quadratic"), abs=TOL
    )


def _score_metric(probs, labels, name):
    """``name`` of the ordinal report (option j = level j), no bootstrap."""
    return score_report(np.asarray(probs, dtype=float), labels, n_boot=0, smooth=False).metrics[name].estimate


def test_ranked_probability_score_against_its_definition():
    probs, labels = calibrated_sample(300, 4, seed=8)
    expected = []
    for p, y in zip(probs, labels):  # the textbook double sum, item by item
        expected.append(sum((sum(p[: j + 1]) - (1.0 if y <= j else 0.0)) ** 2 for j in range(3)) / 3)
    assert _score_metric(probs, labels, "rps") == pytest.approx(np.mean(expected), abs=TOL)
    # a one-hot forecast on the right level scores 0, on the farthest level scores 1
    assert _score_metric(np.eye(4)[[0, 3]], np.array([0, 3]), "rps") == 0
    assert _score_metric(np.eye(4)[[0]], np.array([3]), "rps") == pytest.approx(1.0)


def test_mae_and_within_one():
    probs = np.array([[0.5, 0.5, 0, 0], [0, 0, 0.2, 0.8], [1, 0, 0, 0]])
    labels = np.array([1, 1, 3])
    assert _score_metric(probs, labels, "mae_expected_level") == pytest.approx((0.5 + 1.8 + 3) / 3)
    assert _score_metric(probs, labels, "within_one_accuracy") == pytest.approx(1 / 3)


def test_debiased_ece_against_verified_calibration_formula():
    y, score = binary_data(5000, 6)
    edges = reliability.bin_edges(score, 15, "quantile")
    b = reliability.assign_bins(score, edges)
    total = 0.0
    for j in range(15):  # per-bin loop written from the paper's formula
        m = b == j
        if m.sum() < 2:
            continue
        ybar, pbar = y[m].mean(), score[m].mean()
        total += m.mean() * ((pbar - ybar) ** 2 - ybar * (1 - ybar) / (m.sum() - 1))
    assert reliability.calibration_error(y, score, 15, "quantile", "debiased") == pytest.approx(
        np.sqrt(max(total, 0)), abs=TOL
    )


def test_classwise_ece_is_the_mean_of_one_vs_rest_eces(choice_data):
    probs, labels = choice_data
    per_class = []
    for j in range(probs.shape[1]):
        prob_true, prob_pred = calibration_curve(labels == j, probs[:, j], n_bins=15, strategy="uniform")
        counts = np.histogram(probs[:, j], bins=np.linspace(0, 1, 16))[0]
        counts = counts[counts > 0]
        per_class.append(np.sum(counts * np.abs(prob_true - prob_pred)) / len(labels))
    assert reliability.classwise_ece(probs, labels, 15) == pytest.approx(np.mean(per_class), abs=TOL)


@pytest.mark.parametrize("n_bins", [3, 5, 7, 10, 13, 15, 20, 100])
def test_fast_uniform_bins_agree_with_the_edge_array_even_at_edges(n_bins):
    rng = np.random.default_rng(n_bins)
    edges = np.linspace(0, 1, n_bins + 1)
    s = np.clip(
        np.r_[
            rng.random(10_000), edges, np.nextafter(edges, 2), np.nextafter(edges, -1), np.arange(n_bins + 1) / n_bins
        ],
        0,
        1,
    )
    np.testing.assert_array_equal(reliability.uniform_bin_index(s, n_bins), reliability.assign_bins(s, edges))
    # and the numpy histogram convention (what netcal uses)
    np.testing.assert_array_equal(
        np.bincount(reliability.uniform_bin_index(s, n_bins), minlength=n_bins), np.histogram(s, bins=edges)[0]
    )


@pytest.mark.parametrize("n", [1, 4095, 4097, 20_000])
def test_option_bin_sums_equal_a_column_by_column_bincount(n):
    """The chunked one-vs-rest bin sums (bin indices computed a few rows at a time) are each column's
    ``np.bincount`` over equal-width bins, for sizes that end mid-chunk; edges and 0/1 included."""
    probs, labels = calibrated_sample(n, 7, seed=n)
    probs[0, 0] = 4 / 15  # on an edge
    edges = np.linspace(0.0, 1.0, 16)
    count, sum_score, sum_true = reliability.option_bin_sums(probs, labels, 15, chunk_rows=9000)
    for j in range(7):
        b = np.clip(np.searchsorted(edges[1:-1], probs[:, j], side="right"), 0, 14)
        assert np.array_equal(count[j], np.bincount(b, minlength=15))
        assert np.allclose(sum_score[j], np.bincount(b, weights=probs[:, j], minlength=15), rtol=1e-12, atol=0)
        assert np.array_equal(sum_true[j], np.bincount(b, weights=labels == j, minlength=15))
