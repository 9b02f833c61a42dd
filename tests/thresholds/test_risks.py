"""Misroute costs and critical-class constraints (workbench.thresholds.risks) on synthetic data.

Counts are cross-checked against a per-grid-point scan, the bounded-loss p-value against MAPIE's
Hoeffding–Bentkus p-value (``binary=False``), and the guarantee on the expected cost by simulation
against a large independent sample standing for the population.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.thresholds.synth import choice_data
from tests.thresholds.test_choose import _answers
from tests.thresholds.test_monotone import SWEEP, _assert_monotone, certified_frontier
from workbench.errors import OptionError
from workbench.thresholds.guarantees import (
    ThresholdError,
    hoeffding_bentkus_p_values,
    select_guarantee,
    select_guarantee_split,
)
from workbench.thresholds.options import ThresholdOptions, calibration_size_needed
from workbench.thresholds.risks import (
    bounded_loss_p_values,
    bounded_upper_bound,
    constraint_p_values,
    cost_matrix,
    joint_p_values,
)
from workbench.thresholds.rules import RuleCoordinates
from workbench.thresholds.surface import risk_coverage_surface

OPTS = ["a", "b", "c", "d"]


def test_cost_matrix_defaults_star_rows_and_unknown_options():
    m = cost_matrix({"a": {"*": 10, "b": 3}, "c": {"d": 0.5}}, OPTS)
    assert m is not None
    np.testing.assert_array_equal(np.diag(m), 0)
    assert m[0].tolist() == [0, 3, 10, 10]  # named entry wins over *
    assert m[2].tolist() == [1, 1, 0, 0.5]
    assert m[1].tolist() == [1, 0, 1, 1]  # unlisted rows: 1 off the diagonal
    assert cost_matrix(None, OPTS) is None
    with pytest.raises(ThresholdError, match="unknown option 'z'"):
        cost_matrix({"a": {"z": 2}}, OPTS)


def test_surface_sums_losses_and_critical_misroutes_like_a_scan():
    rng = np.random.default_rng(3)
    probs, labels = choice_data(rng, 700, k=4)
    m = cost_matrix({"a": {"*": 10}, "b": {"c": 4}}, OPTS)
    s = risk_coverage_surface("choice", probs, labels, grid=15, cost_matrix=m, critical=[0, 2])
    co = s.extra["coordinates"]
    pred = co.predicted
    loss = np.where(pred == labels, 0.0, m[labels, pred] / 10.0)
    assert s.loss_scale == 10.0 and s.loss is not None and s.critical_misroutes is not None
    for i in (0, 4, 9, 14):
        for j in (0, 3, 7, 14):
            acc = (co.x >= s.x_grid[i]) & (co.y >= s.y_grid[j])
            assert s.loss[i, j] == pytest.approx(loss[acc].sum())
            for r, c in enumerate((0, 2)):
                assert s.critical_misroutes[r, i, j] == (acc & (labels == c) & (pred != c)).sum()
            assert s.class_loss is not None
            assert s.class_loss[1, i, j] == pytest.approx(loss[acc & (pred == 1)].sum())
    assert s.critical_n is not None and s.critical_n.tolist() == [(labels == 0).sum(), (labels == 2).sum()]


def test_bounded_p_value_matches_mapie_hoeffding_bentkus_for_bounded_losses():
    methods = pytest.importorskip("mapie.risk_control.methods")
    rng = np.random.default_rng(0)
    n = rng.integers(1, 400, 200).astype(float)
    loss_sum = np.round(rng.random(200) * n * 0.4, 3)
    for alpha in (0.02, 0.1, 0.3):
        theirs = methods.compute_hoeffding_bentkus_p_value(loss_sum / n, n, alpha, binary=False)[:, 0]
        ours = bounded_loss_p_values(loss_sum, n, alpha)
        np.testing.assert_allclose(ours, np.minimum(theirs, 1.0), rtol=1e-9)
    # for 0/1 losses the bounded version only adds Bentkus' factor e: never smaller than the binary one
    err = np.floor(loss_sum)
    assert (bounded_loss_p_values(err, n, 0.1) >= hoeffding_bentkus_p_values(err, n, 0.1) - 1e-12).all()


def test_bounded_upper_bound_inverts_the_p_value():
    ub = bounded_upper_bound(3.5, 200, 0.05)
    assert bounded_loss_p_values(np.array(3.5), np.array(200.0), ub) <= 0.05
    assert bounded_loss_p_values(np.array(3.5), np.array(200.0), ub - 2e-4) > 0.05
    assert 3.5 / 200 < ub < 0.06


def test_default_costs_certify_exactly_the_error_rate_and_uniform_costs_scale_alpha():
    rng = np.random.default_rng(1)
    probs, labels = choice_data(rng, 3000, k=4)
    plain = risk_coverage_surface("choice", probs, labels, grid=40)
    ones = risk_coverage_surface("choice", probs, labels, grid=40, cost_matrix=cost_matrix({}, OPTS))
    threes = risk_coverage_surface(
        "choice", probs, labels, grid=40, cost_matrix=cost_matrix({o: {"*": 3} for o in OPTS}, OPTS)
    )
    assert ones.loss is None and threes.loss is None and threes.loss_scale == 3.0  # 0/1 losses stay 0/1
    np.testing.assert_array_equal(
        joint_p_values(ones, 0.1), hoeffding_bentkus_p_values(plain.errors, plain.accepted, 0.1)
    )
    np.testing.assert_allclose(joint_p_values(threes, 0.3), joint_p_values(plain, 0.1), rtol=1e-12)  # 0.3 / 3
    a = select_guarantee(plain, alpha=0.1, delta=0.1, method="holm")
    b = select_guarantee(threes, alpha=0.3, delta=0.1, method="holm")
    assert (a.x, a.y) == (b.x, b.y) and a.certified
    assert b.guarantee is not None and b.guarantee["risk_upper_bound"] == pytest.approx(
        3 * a.guarantee["risk_upper_bound"]  # type: ignore[index]
    )


def test_constraint_p_value_is_binomial_over_the_critical_items():
    rng = np.random.default_rng(2)
    probs, labels = choice_data(rng, 900, k=4)
    s = risk_coverage_surface("choice", probs, labels, grid=20, critical=[1])
    p = constraint_p_values(s, [(1, 0.05)])[0]
    assert s.critical_misroutes is not None and s.critical_n is not None
    expect = hoeffding_bentkus_p_values(s.critical_misroutes[0], np.full((20, 20), s.critical_n[0]), 0.05)
    np.testing.assert_array_equal(p, expect)
    joint = joint_p_values(s, 0.1, [(1, 0.05)])
    np.testing.assert_array_equal(joint, np.maximum(hoeffding_bentkus_p_values(s.errors, s.accepted, 0.1), expect))


def test_expected_cost_guarantee_holds_by_simulation():
    """Calibrated 4-option data, option ``a`` misroutes cost 10: over 120 calibration draws the true
    expected cost among accepted items (on 200,000 fresh items) exceeds alpha in at most delta of them."""
    alpha, delta, reps, n_cal = 0.5, 0.1, 120, 2500
    m = cost_matrix({"a": {"*": 10}}, OPTS)
    assert m is not None
    rng = np.random.default_rng(11)
    big_p, big_y = choice_data(rng, 200_000, k=4)
    pop = risk_coverage_surface("choice", big_p, big_y, grid=40, cost_matrix=m)
    assert pop.loss is not None
    true_cost = np.where(pop.accepted > 0, pop.loss * 10 / np.maximum(pop.accepted, 1), 0.0)
    over = certified = 0
    for r in range(reps):
        p, y = choice_data(rng, n_cal, k=4)
        s = risk_coverage_surface("choice", p, y, x_grid=pop.x_grid, y_grid=pop.y_grid, cost_matrix=m)
        co = s.extra["coordinates"]
        sel, _ = select_guarantee_split(
            RuleCoordinates(co.predicted, co.x, co.y, co.x_name, co.y_name),
            s.extra["correct"],
            x_grid=pop.x_grid,
            y_grid=pop.y_grid,
            n_classes=4,
            alpha=alpha,
            delta=delta,
            rng=np.random.default_rng([r, 1]),
            loss=s.extra["loss"],
            loss_scale=10.0,
        )
        if sel.feasible:
            certified += 1
            i, j = np.searchsorted(pop.x_grid, sel.x), np.searchsorted(pop.y_grid, sel.y)
            over += true_cost[i, j] > alpha
    assert certified >= 0.9 * reps
    assert over / reps <= delta
    # the unconstrained optimum would sit at the edge: the certified rules are not vacuous
    assert true_cost.max() > alpha


def test_options_check_costs_and_constraints():
    o = ThresholdOptions(alpha=2.0, costs={"a": {"*": 10}}, constraints={"a": 0.05})
    assert o.max_cost() == 10 and o.settings()["constraints"] == {"a": 0.05}
    assert "critical a ≤ 0.05 (joint)" in o.describe()
    assert "costs" not in ThresholdOptions().settings()  # unchanged without them
    with pytest.raises(OptionError, match="must be 0"):
        ThresholdOptions(costs={"a": {"a": 1}})
    with pytest.raises(OptionError, match=r"alpha must be in \(0, 10\)"):
        ThresholdOptions(alpha=10, costs={"a": {"*": 10}})
    with pytest.raises(OptionError, match="beta must be in"):
        ThresholdOptions(constraints={"a": 1.5})
    with pytest.raises(OptionError, match="per-class") as e:
        ThresholdOptions(constraints={"a": 0.1}, per_class=True)
    assert e.value.parameter == "constraints"
    with pytest.raises(OptionError, match="guarantee objective"):
        ThresholdOptions(objective="coverage", target_coverage=0.5, constraints={"a": 0.1})
    with pytest.raises(OptionError, match="cannot both"):
        ThresholdOptions(objective="cost", error_cost={"a": 3}, costs={"a": {"*": 2}})


def test_calibration_size_needed_with_critical_options():
    need = calibration_size_needed(ThresholdOptions(alpha=0.5, calibrate="none", **_crit()))
    assert need["n_true_certifying"] == {"hate": 45}  # 0.95^45 = 0.0994 <= delta = 0.1 < 0.95^44
    assert need["n_certifying"] == 45  # alpha 0.5 in cost units, largest cost 10: a 5% misroute rate


def _crit() -> dict:
    return {"costs": {"hate": {"*": 10}}, "constraints": {"hate": 0.05}}


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(150, 900),
    k=st.integers(2, 5),
    scale=st.floats(0.5, 3.0),
    cost=st.sampled_from([1.0, 3.0, 10.0]),
    beta=st.sampled_from([None, 0.1, 0.3]),
    method=st.sampled_from(["fixed-sequence", "fixed-sequence", "holm"]),
    per_class=st.booleans(),
    calibrate=st.sampled_from(["none", "temperature"]),
)
def test_certification_with_costs_and_constraints_is_monotone_in_alpha(
    seed, n, k, scale, cost, beta, method, per_class, calibrate
):
    """Certified at α ⇒ certified at every larger α, with misroute costs and a critical option too
    (the held-apart order of :func:`workbench.thresholds.risks.joint_order` does not depend on α)."""
    probs, labels = choice_data(np.random.default_rng(seed), n, k=k, scale=scale)
    opts = ThresholdOptions(
        method=method,
        per_class=per_class and beta is None,
        calibrate=calibrate,
        grid=20,
        seed=seed,
        costs={"0": {"*": cost}, "1": {"0": cost / 2}},
        constraints=None if beta is None else {"0": beta},
    )
    _assert_monotone(certified_frontier(_answers(probs, labels, "choice"), opts, SWEEP), SWEEP)


def test_cost_objective_prices_the_matrix_by_error_cost():
    """``objective="cost"`` with ``costs``: a wrong accept costs ``error_cost × costs[true][accepted]``,
    exactly as the same matrix given as ``error_cost`` (the [true][accepted] list it already took)."""
    from workbench.thresholds.choose import choose_thresholds

    probs, labels = choice_data(np.random.default_rng(1), 3000, k=4)
    a = _answers(probs, labels, "choice")
    m = np.ones((4, 4)) - np.eye(4)
    m[0, 1:] = 5
    r1 = choose_thresholds(a, None, ThresholdOptions(objective="cost", error_cost=3.0, costs={"0": {"*": 5}}))
    r2 = choose_thresholds(a, None, ThresholdOptions(objective="cost", error_cost=(3 * m).tolist()))
    r0 = choose_thresholds(a, None, ThresholdOptions(objective="cost", error_cost=3.0))
    assert r1.rule_dict() == r2.rule_dict() and r1.selection.cost == r2.selection.cost
    assert r1.selection.cost["expected_cost_per_item"] > r0.selection.cost["expected_cost_per_item"]  # type: ignore[index]
