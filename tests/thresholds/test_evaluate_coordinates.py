"""evaluate_rule_at (per-item coordinates, what the Thresholds page keeps) gives evaluate_rule's figures."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.metrics.displays import ConfusionDisplay
from workbench.thresholds.evaluate import accepted_at, evaluate_rule, evaluate_rule_at
from workbench.thresholds.rules import make_rule, rule_coordinates


def _probs(qtype: str, n: int = 3000, k: int = 7, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    k = 2 if qtype == "noul" else k
    p = rng.dirichlet(np.full(k, 0.4), size=n)
    p = np.round(p, 2)  # ties and values exactly on the grid thresholds
    p /= p.sum(axis=1, keepdims=True)
    p[rng.random(n) < 0.05] = np.nan  # provider failures
    labels = rng.integers(0, k, size=n)
    return p, labels


@pytest.mark.parametrize(
    ("qtype", "x", "y", "per_class"),
    [
        ("choice", 0.5, 0.1, None),
        ("choice", 0.3, 0.0, {2: (0.9, 0.2), 5: (0.0, 0.0)}),
        ("score", 0.4, 0.05, {1: (0.7, 0.3)}),
        ("noul", 0.7, -0.3, None),
    ],
)
def test_same_figures_as_evaluate_rule(qtype, x, y, per_class):
    probs, labels = _probs(qtype)
    rule = make_rule(qtype, x, y, per_class=per_class)
    coords = rule_coordinates(qtype, probs)
    k = probs.shape[1]
    np.testing.assert_array_equal(accepted_at(rule, coords), rule.decide(probs).accepted)
    expected = evaluate_rule(rule, probs, labels, option_ids=[f"o{j}" for j in range(k)])
    got = evaluate_rule_at(rule, coords, labels, n_options=k, option_ids=[f"o{j}" for j in range(k)])
    assert got == expected
    assert 0 < got["n_accepted"] < len(labels)  # the rule splits the items: the comparison means something
    assert got["n_failed"] == int(np.isnan(probs).any(axis=1).sum()) > 0


def test_confusion_from_decisions_matches_from_predictions():
    probs, labels = _probs("choice")
    labels[:40] = -1  # unlabelled items are left out by both
    rule = make_rule("choice", 0.4, 0.1)
    coords = rule_coordinates("choice", probs)
    opts = [f"o{j}" for j in range(probs.shape[1])]
    a = ConfusionDisplay.from_predictions(labels, probs, opts, accept=rule.decide(probs).accepted).result
    b = ConfusionDisplay.from_decisions(labels, coords.predicted, opts, accept=accepted_at(rule, coords)).result
    np.testing.assert_array_equal(a.matrix, b.matrix)
    keep = np.isfinite(probs).all(axis=1) & (labels >= 0)
    assert a.matrix.sum() == keep.sum()
