"""What Learn-then-Test certifies: the error rate, a misroute cost, and critical-class constraints.

**Misroute costs.** A cost matrix ``C[true, accepted]`` (0 on the diagonal, 1 off it unless given)
turns the risk "error rate among auto-accepted items" into "expected misroute cost among
auto-accepted items", in cost units. Dividing each accepted item's cost by the largest cost
``c_max`` gives a loss in ``[0, 1]``, and the null ``H_λ: E[cost | accepted] > α`` becomes
``E[loss | accepted] > α / c_max``. Conditional on the number ``n_λ`` of accepted calibration items
their losses are i.i.d. and bounded, so the Hoeffding–Bentkus p-value of Learn-then-Test still
applies (Bates, Angelopoulos et al., *Distribution-free, risk-controlling prediction sets*, 2021,
Prop. 3 and 5; Angelopoulos, Bates et al., *Learn then Test*, 2021; the same formula as
``aangelopoulos/ltt`` ``core/bounds.py`` and MAPIE's risk control): the Hoeffding part
``exp(-n h(min(r̂, a), a))`` holds for any loss in [0, 1] (Hoeffding 1963), and the Bentkus part
``e · BinomCDF(⌈n r̂⌉; n, a)`` holds for bounded losses with the factor ``e`` (Bentkus 2004); for
0/1 losses the factor is not needed (the binomial tail is then exact). When every off-diagonal
cost equals the largest one the loss *is* 0/1 and the plain error-rate p-value is used, so the
default matrix certifies exactly what the error rate does.

**Critical-class constraints.** "Of the items whose true option is ``c``, at most ``β_c`` may be
auto-accepted as another option": for grid point ``λ`` the risk is ``P(accepted as ≠ c | true = c)``,
a 0/1 loss over the ``n_c`` calibration items of class ``c`` (fixed, not depending on ``λ``), so its
p-value is the binomial Hoeffding–Bentkus one with ``n = n_c``.

**Jointly.** Each grid point gets one p-value, the largest of the main risk's and the constraints'
(Learn-then-Test with several risks; MAPIE's multi-risk control does the same). It is a valid p-value
for the union null "some risk exceeds its bound", so the family-wise procedure over the grid at ``δ``
certifies every risk at once: ``P(main risk > α or some constraint > β_c) ≤ δ``. No split of ``δ`` is
needed — a Bonferroni split (each risk at ``δ / (1 + m)``) is valid too but rejects a subset of what
the max p-value rejects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from workbench.thresholds.bounds import (
    ThresholdError,
    binomial_upper_bound,
    hoeffding_bentkus_p_values,
    hoeffding_bentkus_upper_bound,
    kl_bernoulli,
)
from workbench.thresholds.surface import Surface

#: How the output and the policy file state the joint certificate.
JOINT_RULE = (
    "one p-value per grid point: the largest of the main risk's and every constraint's "
    "(Learn-then-Test with several risks); the family-wise procedure at delta then certifies all "
    "of them jointly, so delta is not split"
)


def cost_matrix(costs: Mapping[str, Mapping[str, float]] | None, option_ids: Sequence[str]) -> np.ndarray | None:
    """The ``(K, K)`` misroute cost matrix ``[true, accepted]`` of ``costs`` (option ids → option ids → cost).

    Unlisted misroutes cost 1, a correct accept costs 0; ``"*"`` as the accepted option sets every
    misroute of that true option (named entries of the row win). ``None`` when ``costs`` is ``None``.

    Raises
    ------
    ThresholdError
        An option that is not one of ``option_ids`` (named, with the options listed).
    """

    if costs is None:
        return None
    ids = list(option_ids)
    k = len(ids)
    m = np.ones((k, k)) - np.eye(k)
    for star in (True, False):  # "*" rows first, so named entries override them
        for true, row in costs.items():
            for acc, value in row.items():
                if (acc == "*") != star:
                    continue
                for o in (true,) if star else (true, acc):
                    if o not in ids:
                        raise ThresholdError(
                            f"costs name unknown option {o!r} (in costs[{true!r}][{acc!r}])",
                            hint=f"options: {', '.join(ids[:20])}",
                        )
                t = ids.index(true)
                if star:
                    m[t, np.arange(k) != t] = float(value)
                else:
                    m[t, ids.index(acc)] = float(value)
    return m


def bounded_loss_p_values(loss_sum: np.ndarray, n: np.ndarray, alpha: float | np.ndarray) -> np.ndarray:
    """p-values of ``H: E[loss] > alpha`` from the summed losses (each in [0, 1]) of ``n`` items (``alpha``
    one level, or one per item: :func:`bounded_upper_bounds` bisects on it).

    ``min(exp(-n h(min(r̂, α), α)), e · BinomCDF(⌈n r̂⌉; n, α))`` with ``r̂ = loss_sum / n``
    (Hoeffding–Bentkus for bounded losses, as ``ltt.core.bounds.hb_p_value``); ``n == 0`` gives 1.
    """
    from scipy.stats import binom

    loss_sum = np.asarray(loss_sum, dtype=float)
    n = np.asarray(n, dtype=float)
    r_hat = np.where(n > 0, loss_sum / np.maximum(n, 1), 1.0)
    hoeffding = np.exp(-n * kl_bernoulli(np.minimum(r_hat, alpha), alpha))  # type: ignore[arg-type]  # elementwise
    bentkus = math.e * binom.cdf(np.ceil(np.round(loss_sum, 9)), n, alpha)
    return np.where(n > 0, np.clip(np.minimum(hoeffding, bentkus), 0.0, 1.0), 1.0)


def main_p_values(surface: Surface, alpha: float, cls: int | None = None) -> np.ndarray:
    """p-values of the main risk (error rate, or cost in units of ``surface.loss_scale``) at every grid point.

    ``cls``: the same among items accepted as that option (per-class certification).
    """

    acc, err, loss = surface.counts(cls)
    if loss is None:  # 0/1 loss: every misroute costs loss_scale (1 without costs)
        return hoeffding_bentkus_p_values(err, acc, alpha / surface.loss_scale)
    return bounded_loss_p_values(loss, acc, alpha / surface.loss_scale)


def constraint_p_values(surface: Surface, constraints: Sequence[tuple[int, float]]) -> np.ndarray:
    """p-values of ``H_c: P(accepted as another option | true c) > β_c``, shape ``(m, A, B)``."""

    if not constraints:
        return np.ones((0, *surface.accepted.shape))
    if surface.critical_misroutes is None or surface.critical_n is None:
        raise ThresholdError("constraints need a surface built with the critical options")
    out = []
    for c, beta in constraints:
        s = surface.critical.index(int(c))
        # n_c is the same at every grid point and the counts take few values: p-values of the distinct ones
        counts, inverse = np.unique(surface.critical_misroutes[s], return_inverse=True)
        p = hoeffding_bentkus_p_values(counts, np.full(counts.shape, surface.critical_n[s]), beta)
        out.append(p[inverse].reshape(surface.accepted.shape))
    return np.stack(out)


def joint_p_values(surface: Surface, alpha: float, constraints: Sequence[tuple[int, float]] = ()) -> np.ndarray:
    """The largest of the main risk's and the constraints' p-values at every grid point (:data:`JOINT_RULE`)."""
    p = main_p_values(surface, alpha)
    if constraints:
        p = np.maximum(p, constraint_p_values(surface, constraints).max(axis=0))
    return p


def joint_order(
    order_surface: Surface,
    alpha: float,
    level: float,
    constraints: Sequence[tuple[int, float]] = (),
    cls: int | None = None,
    order: str = "upper-bound",
) -> np.ndarray:
    """Split fixed-sequence test order on held-apart items with costs and constraints (flat grid indices).

    ``order="upper-bound"`` (default) does not depend on α, so certification stays monotone in α (see
    :mod:`workbench.thresholds.guarantees`): grid points whose held-apart share of a critical option's
    items misrouted exceeds its β go last; within each group, ascending held-apart upper confidence
    bound of the main risk at ``level`` (the cost's, for bounded losses), then more accepted items
    first — :func:`~workbench.thresholds.guarantees.bound_order` with the constraint in front.
    ``order="learned-per-alpha"``: ascending joint p-value at α, ties strict→lax (fewer accepted
    first; a constraint's p-value is flat wherever the few held-apart items of its option see no
    misroute, and lax-first stopped the sequence at once). It certifies more often on HWU64 but
    changes with α. HWU64 TF-IDF, α = 0.1, 100 resplits half/half: scenario, ``calendar`` β = 0.1 —
    certified in 97% at 76% test coverage (per-α order: 100%, 75%); intent, ``calendar_query``
    β = 0.15 — 55% at 23% (per-α order: 83%, 27%).
    """

    acc, err, loss = order_surface.counts(cls)
    acc = np.asarray(acc)
    if order == "learned-per-alpha":
        p = (
            joint_p_values(order_surface, alpha, constraints)
            if cls is None
            else main_p_values(order_surface, alpha, cls)
        )
        return np.lexsort((acc.ravel(), p.ravel()))
    ub = hoeffding_bentkus_upper_bound(err, acc, level) if loss is None else bounded_upper_bounds(loss, acc, level)
    over = np.zeros(acc.shape, dtype=bool)
    if constraints:
        assert order_surface.critical_misroutes is not None and order_surface.critical_n is not None
        for c, beta in constraints:
            s = order_surface.critical.index(int(c))
            over |= order_surface.critical_misroutes[s] > beta * order_surface.critical_n[s]
    return np.lexsort((-acc.ravel(), ub.ravel(), over.ravel()))


def bounded_upper_bounds(loss_sum: np.ndarray, n: np.ndarray, level: float) -> np.ndarray:
    """Smallest mean loss ``a`` at which :func:`bounded_loss_p_values` rejects ``H: E[loss] > a`` at
    ``level``, elementwise (bisection to 1e-9; the p-value falls as ``a`` grows): a ``1 - level``
    upper confidence bound on the mean loss, 1 where nothing is accepted."""
    loss_sum = np.asarray(loss_sum, dtype=float)
    n = np.asarray(n, dtype=float)
    lo = np.where(n > 0, loss_sum / np.maximum(n, 1), 1.0)
    hi = np.ones_like(lo)
    for _ in range(32):
        mid = (lo + hi) / 2
        ok = bounded_loss_p_values(loss_sum, n, mid) <= level
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return np.where(n > 0, hi, 1.0)


def bounded_upper_bound(loss_sum: float, n: int, level: float) -> float:
    """:func:`bounded_upper_bounds` of one point."""
    return float(bounded_upper_bounds(np.array(loss_sum), np.array(n), level))


def constraints_at(
    surface: Surface, i: int, j: int, constraints: Sequence[tuple[int, float]], level: float
) -> list[dict]:
    """Calibration figures of each constraint at grid point ``(i, j)`` (option as an index)."""

    if not constraints:
        return []
    p = constraint_p_values(surface, constraints)
    assert surface.critical_misroutes is not None and surface.critical_n is not None
    out = []
    for r, (c, beta) in enumerate(constraints):
        s = surface.critical.index(int(c))
        n_c, mis = int(surface.critical_n[s]), int(surface.critical_misroutes[s, i, j])
        out.append(
            {
                "option": int(c),
                "beta": float(beta),
                "n_true": n_c,
                "misrouted": mis,
                "rate": mis / n_c if n_c else None,
                "p_value": float(p[r, i, j]),
                "risk_upper_bound": min(binomial_upper_bound(mis, n_c, level), float(beta)),
            }
        )
    return out
