"""The one-pass surface equals a naive scan per grid point, and rules decide exactly as the surface counts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.thresholds.synth import choice_data, noul_data
from workbench.schema.answers import top_two
from workbench.thresholds.rules import make_rule, rule_coordinates, top_two_fast
from workbench.thresholds.surface import default_grids, naive_surface, risk_coverage_surface


def _quantised(probs: np.ndarray, step: float = 0.05) -> np.ndarray:
    """Rounded probabilities: many exact ties with grid values and between options."""
    q = np.round(probs / step) * step
    q[:, 0] += 1 - q.sum(axis=1)  # keep rows summing to 1 (may leave small negatives: clip)
    q = np.clip(q, 0, 1)
    return q / q.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("quantise", [False, True])
def test_choice_surface_equals_naive_scan(seed: int, quantise: bool):
    rng = np.random.default_rng(seed)
    probs, labels = choice_data(rng, 3000, k=6, scale=rng.uniform(0.5, 3))
    if quantise:
        probs = _quantised(probs)
    probs[rng.random(len(probs)) < 0.03] = np.nan  # provider failures: never accepted
    grid = int(rng.integers(7, 40))
    s = risk_coverage_surface("choice", probs, labels, grid=grid, abstain_options=[5])
    c = s.extra["coordinates"]
    acc, err = naive_surface(c.x, c.y, c.predicted == labels, s.x_grid, s.y_grid)
    np.testing.assert_array_equal(s.accepted, acc)
    np.testing.assert_array_equal(s.errors, err)
    # per class: the class slices add up and each equals a naive scan on that class
    np.testing.assert_array_equal(s.class_accepted.sum(axis=0), s.accepted)
    for k in range(6):
        m = c.predicted == k
        a_k, e_k = naive_surface(c.x[m], c.y[m], (c.predicted == labels)[m], s.x_grid, s.y_grid)
        np.testing.assert_array_equal(s.class_accepted[k], a_k)
        np.testing.assert_array_equal(s.class_errors[k], e_k)
    assert s.class_accepted[5].sum() == 0  # the abstain option is never accepted


@pytest.mark.parametrize("seed", [3, 4])
def test_noul_and_score_surfaces_equal_naive_scan(seed: int):
    rng = np.random.default_rng(seed)
    probs, labels = noul_data(rng, 4000)
    probs = np.round(probs, 2)
    s = risk_coverage_surface("noul", probs, labels, grid=21)
    c = s.extra["coordinates"]
    acc, err = naive_surface(c.x, c.y, c.predicted == labels, s.x_grid, s.y_grid)
    np.testing.assert_array_equal(s.accepted, acc)
    np.testing.assert_array_equal(s.errors, err)

    probs, labels = choice_data(rng, 3000, k=5)
    for level in ("top", "expected"):
        s = risk_coverage_surface("score", probs, labels, grid=17, level=level)
        c = s.extra["coordinates"]
        acc, err = naive_surface(c.x, c.y, c.predicted == labels, s.x_grid, s.y_grid)
        np.testing.assert_array_equal(s.accepted, acc)
        np.testing.assert_array_equal(s.errors, err)


def test_weighted_surface_sums_costs_of_accepted_items():
    rng = np.random.default_rng(5)
    probs, labels = choice_data(rng, 2000, k=4)
    w = rng.exponential(size=2000)
    s = risk_coverage_surface("choice", probs, labels, grid=11, weights=w)
    c = s.extra["coordinates"]
    for i, j in [(0, 0), (3, 2), (7, 1), (10, 0)]:
        mask = (c.x >= s.x_grid[i]) & (c.y >= s.y_grid[j])
        assert s.weighted[i, j] == pytest.approx(w[mask].sum(), rel=1e-12)


@pytest.mark.parametrize("qtype", ["choice", "noul", "score"])
def test_rule_decide_matches_surface_at_every_grid_point(qtype: str):
    """The runtime path (rule.decide) and the surface take exactly the same decisions."""
    rng = np.random.default_rng(6)
    if qtype == "noul":
        probs, labels = noul_data(rng, 1500)
    else:
        probs, labels = choice_data(rng, 1500, k=5)
    probs = _quantised(probs, 0.02)
    abstain = [4] if qtype == "choice" else []
    s = risk_coverage_surface(qtype, probs, labels, grid=13, abstain_options=abstain)
    for i in range(13):
        for j in range(13):
            rule = make_rule(qtype, s.x_grid[i], s.y_grid[j], abstain_options=abstain)
            d = rule.decide(probs)
            assert d.accepted.sum() == s.accepted[i, j], (i, j)
            assert (d.accepted & (d.option != labels)).sum() == s.errors[i, j], (i, j)


def test_per_class_overrides_and_never_accept():
    probs = np.array([[0.7, 0.2, 0.1], [0.5, 0.45, 0.05], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [np.nan] * 3])
    rule = make_rule("choice", 0.6, 0.1, per_class={1: (0.9, 0.0), 2: (float("inf"), float("inf"))})
    d = rule.decide(probs)
    assert d.accepted.tolist() == [True, False, False, False, False]
    assert d.reason.tolist() == ["accepted", "below_tau", "below_tau", "below_tau", "provider_failure"]
    noul = make_rule("noul", 0.8, -0.3)  # accept yes at p >= 0.8, no at p <= 0.3
    d = noul.decide(np.array([[0.8, 0.2], [0.79, 0.21], [0.3, 0.7], [0.31, 0.69], [0.5, 0.5]]))
    assert d.accepted.tolist() == [True, False, True, False, False]
    assert d.option.tolist()[:3] == [0, 0, 1]


def test_top_two_fast_equals_schema_top_two():
    rng = np.random.default_rng(7)
    probs = _quantised(rng.dirichlet(np.ones(9), size=5000), 0.1)  # many ties
    a = top_two(probs)
    b = top_two_fast(probs)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_coordinates_send_failures_to_minus_infinity():
    c = rule_coordinates("choice", np.array([[np.nan, np.nan], [0.6, 0.4]]))
    assert np.isneginf(c.x[0]) and c.predicted[0] == -1 and c.x[1] == 0.6


@pytest.mark.parametrize(
    "grid",
    [
        default_grids("choice", 100)[0],
        default_grids("noul", 100)[0],
        default_grids("noul", 100)[1],  # -tau_no: negative values
        np.linspace(0.0, 1.0, 101),
        np.sort(np.random.default_rng(5).random(40)),
        np.array([0.1, 0.2, 0.2, 0.2, 0.5, 0.9]),  # repeated thresholds (non-decreasing)
        np.array([0.0, 1e-12, 2e-12, 0.5, 1.0]),  # several grid points in one cell of the guess table
    ],
)
def test_bin_index_is_searchsorted(grid):
    """The grid cell of a value (the guess-and-step path, taken from 50,000 values) is exactly
    ``np.searchsorted(grid, value, "right") - 1`` (NaN: -1), at the grid points and one ulp either side."""
    from workbench.thresholds.surface import _SEARCH_MAX, bin_index

    rng = np.random.default_rng(0)
    edges = np.concatenate([grid, np.nextafter(grid, -np.inf), np.nextafter(grid, np.inf)])
    x = np.concatenate([rng.random(_SEARCH_MAX) * 1.6 - 0.3, edges, -edges, [np.nan, np.inf, -np.inf, 0.0, -0.0]])
    x = np.concatenate([x, 1.0 - rng.random(20_000) ** 8 * 1e-3])  # crowded near 1, as over-confident answers are
    rng.shuffle(x)
    want = np.searchsorted(grid, np.where(np.isnan(x), -np.inf, x), side="right") - 1
    assert len(x) >= _SEARCH_MAX
    assert np.array_equal(bin_index(x, grid), want)
    assert np.array_equal(bin_index(x[:100], grid), want[:100])  # the small path
