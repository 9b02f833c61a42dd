"""Learn-then-Test pieces cross-checked against MAPIE and scipy; objectives behave as documented."""

from __future__ import annotations

import numpy as np
import pytest

from tests.thresholds.synth import choice_data
from workbench.thresholds.bounds import clopper_pearson, wilson
from workbench.thresholds.guarantees import (
    ThresholdError,
    binomial_upper_bound,
    error_cost_weights,
    fixed_sequence_rejections,
    hoeffding_bentkus_p_values,
    holm_rejections,
    select_cost,
    select_guarantee,
    select_target,
    strict_to_lax_paths,
)
from workbench.thresholds.surface import risk_coverage_surface

mapie_methods = pytest.importorskip("mapie.risk_control.methods")
mapie_fwer = pytest.importorskip("mapie.risk_control.fwer_control")


def test_hb_p_values_match_mapie_binary():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 3000, size=500)
    errors = rng.binomial(n, rng.uniform(0, 0.3, size=500))
    for alpha in (0.01, 0.05, 0.2):
        ours = hoeffding_bentkus_p_values(errors, n, alpha)
        ref = mapie_methods.compute_hoeffding_bentkus_p_value(errors / n, n.astype(float), alpha, binary=True)[:, 0]
        # MAPIE recovers the error count as ceil(n * (errors / n)), which float rounding can push one
        # above the integer count; compare where that round trip is exact
        exact = np.ceil(n * (errors / n)) == errors
        assert exact.mean() > 0.8
        np.testing.assert_allclose(ours[exact], ref[exact], rtol=1e-10, atol=1e-300)
        assert (ours[~exact] <= ref[~exact] + 1e-15).all()  # exact counts are never looser
    assert hoeffding_bentkus_p_values(np.array([0]), np.array([0]), 0.1)[0] == 1.0  # nothing accepted


def test_holm_matches_mapie():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=300) ** 4
    ours = np.flatnonzero(holm_rejections(p, 0.1))
    ref = np.sort(mapie_fwer.control_fwer(p, 0.1, "bonferroni_holm"))
    np.testing.assert_array_equal(ours, ref)


def test_fixed_sequence_single_path_matches_mapie():
    rng = np.random.default_rng(2)
    p = np.sort(rng.uniform(size=80) ** 3)  # easiest first, then a non-monotone tail
    p[40:] = rng.uniform(size=40)
    ours = np.flatnonzero(fixed_sequence_rejections(p, [np.arange(80)], 0.1))
    ref = np.sort(mapie_fwer.control_fwer(p, 0.1, "fixed_sequence"))
    np.testing.assert_array_equal(ours, ref)


def test_paths_are_strict_first_and_data_independent():
    paths = strict_to_lax_paths((5, 4), n_paths=2, n_starts=2)
    assert len(paths) == 4
    first = paths[0]
    assert first[0] == 4 * 4 + 0 and first[-1] == 0  # (A-1, col) first, (0, col) last


def test_intervals_match_scipy():
    from scipy.stats import binomtest

    for k, n in [(0, 10), (3, 50), (49, 50), (120, 1000)]:
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)
        ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)
    # upper bound at level l is where the binomial cdf equals l
    from scipy.stats import binom

    ub = binomial_upper_bound(7, 400, 0.01)
    assert binom.cdf(7, 400, ub) == pytest.approx(0.01, rel=1e-6)


def _surface(seed=3, n=4000, k=6, temperature=1.0):
    rng = np.random.default_rng(seed)
    probs, labels = choice_data(rng, n, k=k, temperature=temperature)
    return risk_coverage_surface("choice", probs, labels, grid=40), probs, labels


@pytest.mark.parametrize("method", ["fixed-sequence", "holm"])
def test_guarantee_picks_certified_point_with_most_coverage(method: str):
    s, _, _ = _surface()
    sel = select_guarantee(s, alpha=0.08, delta=0.1, method=method)
    assert sel.certified and sel.feasible
    i = int(np.searchsorted(s.x_grid, sel.x))
    j = int(np.searchsorted(s.y_grid, sel.y))
    p = hoeffding_bentkus_p_values(s.errors[i, j], s.accepted[i, j], 0.08)
    assert p <= sel.guarantee["test_level"]
    assert sel.guarantee["risk_upper_bound"] <= 0.08
    assert sel.calibration["n_accepted"] == s.accepted[i, j] > 0
    # a stricter alpha never gives more coverage
    tighter = select_guarantee(s, alpha=0.04, delta=0.1, method=method)
    assert tighter.calibration["n_accepted"] <= sel.calibration["n_accepted"]


def test_guarantee_infeasible_routes_everything_to_review():
    s, _, _ = _surface(n=200)
    sel = select_guarantee(s, alpha=0.001, delta=0.01)
    assert not sel.feasible and sel.calibration["n_accepted"] == 0 and sel.notes


def test_per_class_guarantee_uses_bonferroni_over_classes():
    s, _, _ = _surface(n=20000, k=3)
    sel = select_guarantee(s, alpha=0.1, delta=0.1, per_class=True, classes=[0, 1])
    assert sel.guarantee["delta_per_class"] == pytest.approx(0.05)
    assert sel.per_class[2] is None  # not an acceptable class
    for k in (0, 1):
        x, y = sel.per_class[k]
        i, j = int(np.searchsorted(s.x_grid, x)), int(np.searchsorted(s.y_grid, y))
        p = hoeffding_bentkus_p_values(s.class_errors[k, i, j], s.class_accepted[k, i, j], 0.1)
        assert p <= 0.05 / 100


def test_cost_objective_minimises_expected_cost():
    rng = np.random.default_rng(4)
    s, probs, labels = _surface()
    from workbench.thresholds.rules import rule_coordinates

    pred = rule_coordinates("choice", probs).predicted
    w = error_cost_weights(labels, pred, 6, 5.0)
    s = risk_coverage_surface("choice", probs, labels, grid=40, weights=w)
    sel = select_cost(s, review_cost=1.0, api_cost_per_item=0.001)
    cost = (s.weighted + 1.0 * (s.n_total - s.accepted)) / s.n_total + 0.001
    assert sel.cost["expected_cost_per_item"] == pytest.approx(cost.min())
    assert not sel.certified
    # expensive mistakes -> fewer accepts
    w2 = error_cost_weights(labels, pred, 6, 100.0)
    s2 = risk_coverage_surface("choice", probs, labels, grid=40, weights=w2)
    assert select_cost(s2, review_cost=1.0).calibration["n_accepted"] <= sel.calibration["n_accepted"]
    # matrix and per-class forms
    m = np.ones((6, 6)) * 3
    np.testing.assert_array_equal(error_cost_weights(labels, pred, 6, m), np.where(labels != pred, 3.0, 0.0))
    per = error_cost_weights(labels, pred, 6, {0: 7.0})
    assert set(np.unique(per[(labels != pred) & (pred == 0)])) <= {7.0}
    with pytest.raises(ThresholdError):
        error_cost_weights(labels, pred, 6, np.ones((2, 2)))
    del rng


def test_targets_are_uncertified_point_estimates():
    s, _, _ = _surface()
    sel = select_target(s, target_error=0.05)
    assert not sel.certified and sel.calibration["error_rate"] <= 0.05
    ok = (s.accepted > 0) & (np.nan_to_num(s.error_rate, nan=1) <= 0.05)
    assert sel.calibration["n_accepted"] == s.accepted[ok].max()
    sel = select_target(s, target_coverage=0.5)
    assert sel.calibration["coverage"] >= 0.5 and "NOT certified" in sel.notes[0]
    with pytest.raises(ThresholdError):
        select_target(s, target_coverage=2.0)
