"""noul guarantee mode agrees with MAPIE's BinaryClassificationController on the same data and grid.

MAPIE is a test-only dependency. Both sides use Hoeffding–Bentkus p-values with n = number of
accepted items and Bonferroni–Holm over the grid. One known difference: MAPIE recovers the error
count as ``ceil(n * (errors / n))``, which float rounding can push one above the true count (a
slightly larger p-value). So: p-values must be equal wherever that round trip is exact; our Holm on
MAPIE's p-values must give exactly MAPIE's certified set; our own certified set may only differ at
the round-trip points; and the chosen thresholds must agree within one grid step.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.thresholds.synth import noul_data
from workbench.thresholds.guarantees import hoeffding_bentkus_p_values, holm_rejections, select_guarantee
from workbench.thresholds.surface import risk_coverage_surface

risk_control = pytest.importorskip("mapie.risk_control")
ALPHA, DELTA = 0.1, 0.1


def _data(seed: int, n: int = 1500, temperature: float = 1.0):
    probs, labels = noul_data(np.random.default_rng(seed), n, temperature=temperature)
    return probs, labels, 1 - labels  # MAPIE: 1 = positive = "yes" (our option 0)


def _compare(errors, accepted, ours, theirs, mapie_p, *, via_precision=False):
    n = np.maximum(accepted, 1)
    # MAPIE's empirical risk: errors / n, or 1 - precision for the precision risk
    r_hat = 1 - (accepted - errors) / n if via_precision else errors / n
    exact = (accepted == 0) | (np.ceil(accepted * r_hat) == errors)
    assert exact.mean() > 0.5
    our_p = hoeffding_bentkus_p_values(errors, accepted, ALPHA)
    np.testing.assert_allclose(our_p[exact], mapie_p[exact], rtol=1e-9)
    np.testing.assert_array_equal(holm_rejections(mapie_p, DELTA), theirs)  # same Holm on the same p-values
    assert (ours == theirs)[exact].all()
    assert (ours >= theirs).all()  # exact counts are never more conservative than MAPIE's


@pytest.mark.parametrize("seed,temperature", [(0, 1.0), (1, 0.6)])
def test_one_sided_yes_matches_mapie_precision_control(seed: int, temperature: float):
    probs, labels, y_mapie = _data(seed, temperature=temperature)
    x_grid = np.linspace(0.5, 0.99, 50)
    # the no side disabled: y_grid = [+inf] accepts only predicted-yes items (their y is +inf)
    s = risk_coverage_surface("noul", probs, labels, x_grid=x_grid, y_grid=np.array([np.inf]))
    sel = select_guarantee(s, alpha=ALPHA, delta=DELTA, method="holm")
    ours = holm_rejections(hoeffding_bentkus_p_values(s.errors, s.accepted, ALPHA), DELTA)[:, 0]

    ctrl = risk_control.BinaryClassificationController(
        predict_function=lambda X: probs[X.astype(int)][:, ::-1],  # columns [P(no), P(yes)]
        risk="precision",
        target_level=1 - ALPHA,
        confidence_level=1 - DELTA,
        list_predict_params=x_grid,
        fwer_method="bonferroni_holm",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctrl.calibrate(np.arange(len(probs)), y_mapie)
    theirs = np.isin(x_grid, ctrl.valid_predict_params)
    _compare(s.errors[:, 0], s.accepted[:, 0], ours, theirs, np.ravel(ctrl.p_values), via_precision=True)
    assert sel.feasible
    # MAPIE's best (max recall = lowest valid threshold) is our max-coverage choice, within a grid step
    step = x_grid[1] - x_grid[0]
    assert abs(sel.x - float(ctrl.best_predict_param)) <= step + 1e-12


def test_two_sided_matches_mapie_multidimensional_abstention():
    probs, labels, y_mapie = _data(2, n=1200, temperature=0.7)
    yes_grid = np.linspace(0.5, 0.99, 12)
    no_grid = np.linspace(0.01, 0.5, 12)  # tau_no values
    y_grid = np.sort(-no_grid)
    s = risk_coverage_surface("noul", probs, labels, x_grid=yes_grid, y_grid=y_grid)
    ours = holm_rejections(hoeffding_bentkus_p_values(s.errors, s.accepted, ALPHA), DELTA)
    sel = select_guarantee(s, alpha=ALPHA, delta=DELTA, method="holm")

    p_yes = probs[:, 0]

    def predict(X, t_yes, t_no):
        p = p_yes[X.astype(int)]
        out = np.full(len(p), np.nan)
        out[(p >= 0.5) & (p >= t_yes)] = 1.0
        out[(p < 0.5) & (p <= t_no)] = 0.0
        return out

    BinaryRisk = risk_control.BinaryRisk
    error_among_accepted = BinaryRisk(
        risk_occurrence=lambda yt, yp: yp != yt, risk_condition=lambda yt, yp: ~np.isnan(yp), higher_is_better=False
    )
    abstention = BinaryRisk(
        risk_occurrence=lambda yt, yp: np.isnan(yp),
        risk_condition=lambda yt, yp: np.ones(len(yp), dtype=bool),
        higher_is_better=False,
    )
    params = np.array([(t_yes, -y) for t_yes in yes_grid for y in y_grid])  # same (i, j) order as ours
    ctrl = risk_control.BinaryClassificationController(
        predict_function=predict,
        risk=error_among_accepted,
        target_level=ALPHA,
        confidence_level=1 - DELTA,
        best_predict_param_choice=abstention,
        list_predict_params=params,
        fwer_method="bonferroni_holm",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctrl.calibrate(np.arange(len(p_yes)), y_mapie)
    valid = {tuple(np.round(v, 12)) for v in np.atleast_2d(ctrl.valid_predict_params)}
    theirs = np.array([tuple(np.round(p, 12)) in valid for p in params]).reshape(ours.shape)
    _compare(s.errors.ravel(), s.accepted.ravel(), ours.ravel(), theirs.ravel(), np.ravel(ctrl.p_values))
    assert sel.feasible
    best = np.asarray(ctrl.best_predict_param, dtype=float)
    i = int(np.argmin(np.abs(yes_grid - best[0])))
    j = int(np.argmin(np.abs(y_grid + best[1])))
    si, sj = int(np.searchsorted(yes_grid, sel.x)), int(np.searchsorted(y_grid, sel.y))
    # within grid resolution: at most one step apart on each axis, and no less coverage than MAPIE's
    assert abs(si - i) <= 1 and abs(sj - j) <= 1
    assert sel.calibration["n_accepted"] >= s.accepted[i, j]
