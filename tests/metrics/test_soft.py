"""Soft scores (workbench.metrics.soft) against scikit-learn over the expanded votes.

Every soft score is the hard score averaged over an item's votes, so the reference expands each item
into one row per vote with sample weight 1 / (votes of the item) and asks scikit-learn.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss
from sklearn.metrics import log_loss as sk_log_loss

from workbench.metrics.report import choice_report, noul_report, soft_report
from workbench.metrics.soft import item_soft_floors, soft_brier, soft_ece, soft_log_loss, vote_shares


def _data(n: int, k: int, seed: int, max_votes: int = 5):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(k) * 0.7, n)
    counts = np.stack([rng.multinomial(rng.integers(1, max_votes + 1), pv) for pv in rng.dirichlet(np.ones(k), n)])
    return probs, counts.astype(float)


def _expand(probs: np.ndarray, counts: np.ndarray):
    item, option = np.nonzero(counts)
    reps = counts[item, option].astype(int)
    item, option = np.repeat(item, reps), np.repeat(option, reps)
    weight = 1.0 / counts.sum(axis=1)[item]
    return probs[item], option, weight


@pytest.mark.parametrize("seed", [0, 1])
def test_soft_log_loss_and_brier_match_sklearn_on_expanded_votes(seed: int):
    k = 4
    probs, counts = _data(300, k, seed)
    p, y, w = _expand(probs, counts)
    assert soft_log_loss(probs, counts) == pytest.approx(sk_log_loss(y, p, sample_weight=w, labels=range(k)), rel=1e-10)
    # multiclass Brier: sum over options (scikit-learn's scale_by_half=False), as the hard report
    ref = brier_score_loss(y, p, sample_weight=w, labels=range(k), scale_by_half=False)
    assert soft_brier(probs, counts) == pytest.approx(ref, rel=1e-10)
    # the direct formulae: cross-entropy and Σ (p - q)² + (1 - Σ q²)
    q = vote_shares(counts)
    assert soft_log_loss(probs, counts) == pytest.approx(np.mean(-(q * np.log(probs)).sum(axis=1)))
    direct = np.mean(((probs - q) ** 2).sum(axis=1) + 1 - (q * q).sum(axis=1))
    assert soft_brier(probs, counts) == pytest.approx(direct, rel=1e-12)


def test_yes_no_soft_brier_is_on_p_yes():
    probs2, counts = _data(250, 2, 4)
    p, y, w = _expand(probs2, counts)
    ref = brier_score_loss((y == 0).astype(int), p[:, 0], sample_weight=w)
    assert soft_brier(probs2, counts, "noul") == pytest.approx(ref, rel=1e-10)


def test_soft_ece_uses_the_vote_share_of_the_predicted_option():
    probs, counts = _data(500, 3, 2)
    q = vote_shares(counts)
    pred = probs.argmax(axis=1)
    conf = probs.max(axis=1)
    share = q[np.arange(len(q)), pred]
    bins = np.minimum((conf * 15).astype(int), 14)  # 15 equal-width bins on [0, 1]
    ref = sum(abs(conf[bins == b].mean() - share[bins == b].mean()) * (bins == b).mean() for b in np.unique(bins))
    assert soft_ece(probs, counts) == pytest.approx(ref, abs=1e-12)
    rep = soft_report(probs, counts, n_boot=20)
    assert rep.metrics["soft_ece_uniform"].estimate == pytest.approx(ref, abs=1e-12)
    assert rep.metrics["soft_accuracy"].estimate == pytest.approx(share.mean())


def test_one_vote_per_item_gives_the_hard_scores():
    rng = np.random.default_rng(9)
    k = 5
    probs = rng.dirichlet(np.ones(k), 400)
    labels = rng.integers(0, k, 400)
    counts = np.eye(k)[labels]
    soft = soft_report(probs, counts, n_boot=0).metrics
    hard = choice_report(probs, labels, n_boot=0, smooth=False).metrics
    for s, h in [("soft_accuracy", "accuracy"), ("soft_log_loss", "log_loss"), ("soft_brier", "brier")]:
        assert soft[s].estimate == pytest.approx(hard[h].estimate, rel=1e-12)
    assert soft["soft_ece_uniform"].estimate == pytest.approx(hard["ece_uniform"].estimate, abs=1e-12)
    assert soft["soft_log_loss_floor"].estimate == pytest.approx(0.0) and soft["soft_brier_floor"].estimate == 0.0
    p2 = rng.dirichlet(np.ones(2), 300)
    y2 = rng.integers(0, 2, 300)
    soft2 = soft_report(p2, np.eye(2)[y2], qtype="noul", n_boot=0).metrics
    assert soft2["soft_brier"].estimate == pytest.approx(
        noul_report(p2, y2, n_boot=0, smooth=False).metrics["brier"].estimate
    )


def test_a_forecast_equal_to_the_votes_scores_the_floor():
    _, counts = _data(200, 3, 6)
    q = vote_shares(counts)
    rep = soft_report(q, counts, n_boot=0).metrics
    ent, gini = item_soft_floors(q)
    assert rep["soft_log_loss"].estimate == pytest.approx(rep["soft_log_loss_floor"].estimate, abs=1e-6)
    assert rep["soft_brier"].estimate == pytest.approx(rep["soft_brier_floor"].estimate, abs=1e-12)
    assert rep["soft_brier_floor"].estimate == pytest.approx(gini.mean()) and ent.mean() > 0


def test_items_without_votes_and_failures_are_counted_not_scored():
    probs, counts = _data(50, 3, 8)
    counts[:5] = 0
    probs[5:8] = np.nan
    rep = soft_report(probs, counts, n_boot=0)
    assert rep.counts["n_labelled"] == 42 and rep.counts["n_failed"] == 3 and rep.counts["n_unlabelled"] == 5
    assert rep.counts["n_votes"] == int(counts[8:].sum())
    assert rep.metrics["soft_log_loss"].estimate == pytest.approx(soft_log_loss(probs[8:], counts[8:]))
