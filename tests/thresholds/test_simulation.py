"""The promise must hold: over many random calibration/test splits of data with known error rates,
the certified rule's realised test error exceeds alpha in at most a delta share of splits.

Each scenario draws one dataset, then 200 random calibration/test splits. A split's test set is large
(so the realised error is close to the rule's true conditional error); the Monte-Carlo slack is three
binomial standard errors of the exceedance share over 200 splits. The same splits also show that the
uncertified point estimate ("target error = alpha", what users do today) breaks the promise often,
so the test can tell a guarantee from a point estimate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.thresholds.synth import choice_data, noul_data
from workbench.thresholds.guarantees import select_guarantee_split, select_target
from workbench.thresholds.rules import RuleCoordinates
from workbench.thresholds.surface import risk_coverage_surface, surface_from_coordinates

N_SPLITS = 200
ALPHA, DELTA = 0.05, 0.1


def _exceedance(
    qtype: str, probs: np.ndarray, labels: np.ndarray, n_cal: int, method: str, seed: int, per_class: bool = False
) -> tuple[float, float, float]:
    """Share of splits whose realised test error among accepted exceeds ALPHA: (certified, naive, coverage).

    Coordinates and grid are computed once; a split's calibration surface comes from the same code the
    CLI uses (:func:`select_guarantee_split`), and the test counts at every grid point are the full
    counts minus the calibration counts (exact: same binning; the rule/surface agreement is tested
    in test_surface.py).
    """
    rng = np.random.default_rng(seed)
    n = len(labels)
    full = risk_coverage_surface(qtype, probs, labels, grid=50)
    coords = full.extra["coordinates"]
    correct = coords.predicted == labels
    over_cert = over_naive = 0
    coverage = []
    for _ in range(N_SPLITS):
        cal = np.zeros(n, dtype=bool)
        cal[rng.choice(n, n_cal, replace=False)] = True
        sub = RuleCoordinates(coords.predicted[cal], coords.x[cal], coords.y[cal], coords.x_name, coords.y_name)
        sel, _ = select_guarantee_split(
            sub,
            correct[cal],
            x_grid=full.x_grid,
            y_grid=full.y_grid,
            n_classes=probs.shape[1],
            alpha=ALPHA,
            delta=DELTA,
            method=method,
            per_class=per_class,
            rng=rng,
        )
        cal_surf = surface_from_coordinates(
            sub.x,
            sub.y,
            correct[cal],
            x_grid=full.x_grid,
            y_grid=full.y_grid,
            predicted=np.maximum(sub.predicted, 0),
            n_classes=probs.shape[1],
        )
        test_acc = full.accepted - cal_surf.accepted
        test_err = full.errors - cal_surf.errors
        acc = err = 0
        if per_class:
            test_cls_acc = full.class_accepted - cal_surf.class_accepted
            test_cls_err = full.class_errors - cal_surf.class_errors
            for k, v in sel.per_class.items():
                if v is not None:
                    i, j = np.searchsorted(full.x_grid, v[0]), np.searchsorted(full.y_grid, v[1])
                    acc += test_cls_acc[k, i, j]
                    err += test_cls_err[k, i, j]
        elif sel.feasible:
            i, j = np.searchsorted(full.x_grid, sel.x), np.searchsorted(full.y_grid, sel.y)
            acc, err = test_acc[i, j], test_err[i, j]
        over_cert += acc > 0 and err / acc > ALPHA
        coverage.append(acc / (n - n_cal))
        naive = select_target(cal_surf, target_error=ALPHA)
        if naive.feasible:
            i, j = np.searchsorted(full.x_grid, naive.x), np.searchsorted(full.y_grid, naive.y)
            over_naive += test_acc[i, j] > 0 and test_err[i, j] / test_acc[i, j] > ALPHA
    return over_cert / N_SPLITS, over_naive / N_SPLITS, float(np.mean(coverage))


SLACK = 3 * math.sqrt(DELTA * (1 - DELTA) / N_SPLITS)


@pytest.mark.parametrize(
    "scenario,temperature", [("calibrated", 1.0), ("over-confident", 0.5), ("under-confident", 2.0)]
)
@pytest.mark.parametrize("method", ["fixed-sequence", "holm"])
def test_choice_guarantee_holds_over_random_splits(scenario: str, temperature: float, method: str):
    rng = np.random.default_rng(11)
    probs, labels = choice_data(rng, 60000, k=8, scale=5.0, temperature=temperature)
    certified, naive, coverage = _exceedance("choice", probs, labels, 3000, method, seed=12)
    assert certified <= DELTA + SLACK, (scenario, certified)
    assert coverage > 0.05, "the guarantee should still accept something"
    # the uncertified point estimate at target error = alpha breaks the promise far more often
    assert naive > certified and naive > DELTA, (scenario, naive)


def test_noul_two_sided_guarantee_holds_over_random_splits():
    rng = np.random.default_rng(13)
    probs, labels = noul_data(rng, 60000, temperature=0.6)
    certified, naive, coverage = _exceedance("noul", probs, labels, 2000, "fixed-sequence", seed=14)
    assert certified <= DELTA + SLACK
    assert coverage > 0.2
    assert naive > DELTA


def test_per_class_guarantee_holds_over_random_splits():
    rng = np.random.default_rng(15)
    probs, labels = choice_data(rng, 60000, k=3, scale=4.0, temperature=0.7)
    certified, _, coverage = _exceedance("choice", probs, labels, 6000, "fixed-sequence", seed=16, per_class=True)
    assert certified <= DELTA + SLACK
    assert coverage > 0.05
