"""Choosing thresholds: Learn-then-Test guarantees, cost minimisation and (uncertified) point targets.

Guarantee objective (Angelopoulos, Bates et al., *Learn then Test*, 2021): for every grid point
``λ = (i, j)`` test the null hypothesis ``H_λ: risk(λ) > α``, where ``risk(λ)`` is the error rate
among auto-accepted items. Conditional on the number ``n_λ`` of accepted calibration items, their
errors are i.i.d. Bernoulli(risk(λ)), so a valid p-value is the Hoeffding–Bentkus one with
``n = n_λ``: ``min(exp(-n h(min(r̂, α), α)), BinomCDF(n r̂; n, α))`` (the ``e`` factor of Bentkus is
not needed for 0/1 losses). Family-wise error control over the grid:

- ``fixed-sequence`` (default): *split* fixed-sequence testing — a share of the calibration items
  (``order_fraction``, default 0.3) only orders the grid points strict→lax (ascending upper
  confidence bound of the error on those items, :func:`bound_order`, which does not depend on α);
  the other items test them in that order at level ``δ`` until the first non-rejection. Without
  held-apart items, data-independent column paths with several starts each are used at
  ``δ / n_sequences`` (:func:`strict_to_lax_paths`);
- ``holm``: Bonferroni–Holm over all grid points.

Monotone in α. For the same data and options (same seed), certifying at α implies certifying at
every α' > α, and the chosen rule's *calibration* coverage does not decrease:

1. every p-value is non-increasing in α at a fixed grid point (:func:`hoeffding_bentkus_p_values`:
   ``BinomCDF(e; n, α)`` falls as α grows, and ``KL(min(r̂, α) ‖ α)`` is 0 up to ``α = r̂`` and
   increasing after it, so the Hoeffding term falls too; the minimum of two non-increasing
   functions is non-increasing);
2. the order of the tests does not depend on α (the held-apart items are drawn from the seed alone,
   and :func:`bound_order` ranks by an upper bound at the test level, not by a p-value at α; the
   data-independent paths and Holm's sort need no order). Fixed-sequence testing along a fixed
   order rejects the prefix before the first ``p > level``; if every p-value of that prefix is
   ``<= level`` at α it still is at α' (step 1), so the prefix at α' contains the prefix at α.
   Holm's step-down is monotone in the p-values (lowering any p-value never removes a rejection);
3. so the set of certified grid points at α' contains the set at α, the best of them by
   calibration coverage covers at least as much, and per class each option's set grows alike.

What is *not* guaranteed: the rule chosen at α' is the certified point with the most calibration
coverage, which need not accept a superset of the items the rule at α accepts (two grid points
are not always nested), so coverage on *new* items (the test split) can, rarely, be lower at α'.
The order before issue 15 (``order="learned-per-alpha"``: ascending held-apart p-value *at α*,
:func:`learned_order`) reshuffled the sequence for every α and was not monotone.

Every rejected ``λ`` then satisfies ``P(risk(λ) > α) ≤ δ`` simultaneously, so picking the one with
the largest calibration coverage keeps the guarantee. Per-class guarantees run the same procedure
on each predicted option's counts at level ``δ / K`` (Bonferroni over the K acceptable options).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from workbench.thresholds.bounds import (
    ThresholdError,
    binomial_upper_bound,
    hoeffding_bentkus_p_values,
    hoeffding_bentkus_upper_bound,
    min_items_to_certify,
)
from workbench.thresholds.surface import Surface

Method = Literal["fixed-sequence", "holm"]
Order = Literal["upper-bound", "learned-per-alpha"]
ORDERS = ("upper-bound", "learned-per-alpha")


# -- p-values and FWER procedures -----------------------------------------------------------------
def fixed_sequence_rejections(p_values: np.ndarray, paths: Sequence[np.ndarray], delta: float) -> np.ndarray:
    """Grid points rejected by fixed-sequence testing along each path at level ``delta / len(paths)``.

    Parameters
    ----------
    p_values : ndarray of shape (A, B)
    paths : sequence of int arrays of flat indices into ``p_values``, strict first
    delta : float

    Returns
    -------
    rejected : ndarray of shape (A, B), bool
    """
    flat = p_values.ravel()
    level = delta / max(len(paths), 1)
    out = np.zeros(flat.shape, dtype=bool)
    for path in paths:
        ok = flat[path] <= level
        prefix = np.cumprod(ok).astype(bool)  # stop at the first non-rejection
        out[path[prefix]] = True
    return out.reshape(p_values.shape)


def holm_rejections(p_values: np.ndarray, delta: float) -> np.ndarray:
    """Bonferroni–Holm step-down over all grid points; returns the rejected mask (same shape)."""
    flat = p_values.ravel()
    m = flat.size
    order = np.argsort(flat, kind="stable")
    thresholds = delta / (m - np.arange(m))
    ok = flat[order] <= thresholds
    prefix = np.cumprod(ok).astype(bool)
    out = np.zeros(m, dtype=bool)
    out[order[prefix]] = True
    return out.reshape(p_values.shape)


def strict_to_lax_paths(shape: tuple[int, int], n_paths: int = 10, n_starts: int = 10) -> list[np.ndarray]:
    """Data-independent test sequences over an (A, B) grid, strictest point first.

    For ``n_paths`` evenly spread columns ``j`` of the second threshold, the first threshold walks
    from its strictest (last) grid value to its laxest (first). Each column gets ``n_starts`` evenly
    spaced starting points (multi-start fixed-sequence testing, as in MAPIE's
    ``FWERFixedSequenceTesting``): the very strictest rules accept almost nothing, so a single start
    there would stop at once; a start further down the column can still reach the lax end.
    Sequences are tested at ``delta / (n_paths * n_starts)`` each, which keeps the family-wise
    error at most ``delta`` whatever the dependence between them.
    """
    A, B = shape
    cols = np.unique(np.round(np.linspace(0, B - 1, n_paths + 1)[:-1]).astype(int)) if n_paths < B else np.arange(B)
    rows = np.arange(A - 1, -1, -1)
    starts = np.unique(np.round(np.linspace(0, A - 1, min(n_starts, A) + 1)[:-1]).astype(int))
    return [rows[s:] * B + j for j in cols for s in starts]


def bound_order(order_errors: np.ndarray, order_accepted: np.ndarray, level: float) -> np.ndarray:
    """Test order learned on held-apart items, the same for every α: ascending upper bound of the risk.

    The grid points are ranked by :func:`hoeffding_bentkus_upper_bound` of their held-apart counts
    at the test ``level`` (δ, or δ/K per class), then by more accepted items: points that look
    safest (strict rules with enough items) come first and laxer ones after, so the sequence walks
    strict→lax along the data's own risk ridge. For any α the points whose held-apart p-value at α
    is ``<= level`` are exactly those with bound ``<= α``, i.e. a prefix of this order: the same
    set the per-α order (:func:`learned_order`) puts first, so the power is kept, while the order
    itself no longer depends on α, which makes certification monotone in α (module docstring).

    Returns
    -------
    order : ndarray of int, flat indices into the grid
    """
    ub = hoeffding_bentkus_upper_bound(order_errors, order_accepted, level).ravel()
    return np.lexsort((-np.asarray(order_accepted).ravel(), ub))


def learned_order(order_errors: np.ndarray, order_accepted: np.ndarray, alpha: float) -> np.ndarray:
    """Test order learned on held-apart items *at one α*: ascending p-value, then more accepted items first.

    The order before issue 15, kept as ``order="learned-per-alpha"`` to measure against: it changes
    with α, so certifying at α did not imply certifying at a larger α. Use :func:`bound_order`.
    """
    p = hoeffding_bentkus_p_values(order_errors, order_accepted, alpha).ravel()
    return np.lexsort((-np.asarray(order_accepted).ravel(), p))


def _held_apart_order(errors: np.ndarray, accepted: np.ndarray, alpha: float, level: float, order: str) -> np.ndarray:
    """The fixed-sequence test order from held-apart counts (``order`` is one of :data:`ORDERS`)."""
    if order == "upper-bound":
        return bound_order(errors, accepted, level)
    if order == "learned-per-alpha":
        return learned_order(errors, accepted, alpha)
    raise ThresholdError(f"unknown test order {order!r}", hint=f"use one of {', '.join(ORDERS)}")


def _rejections(
    p: np.ndarray, delta: float, method: str, n_paths: int, n_starts: int = 10, order: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Rejected mask and the per-test level used for the first rejection."""
    if method == "fixed-sequence" and order is not None:
        return fixed_sequence_rejections(p, [order], delta), delta
    if method == "fixed-sequence":
        paths = strict_to_lax_paths(p.shape, n_paths, n_starts)
        return fixed_sequence_rejections(p, paths, delta), delta / len(paths)
    if method == "holm":
        return holm_rejections(p, delta), delta / p.size
    raise ThresholdError(f"unknown FWER method {method!r}", hint="use fixed-sequence or holm")


# -- selections -----------------------------------------------------------------------------------
@dataclass
class Selection:
    """A chosen rule and what is known about it on the calibration split.

    ``x``/``y`` are rule-coordinate thresholds (see :mod:`rules`); ``params`` are the rule's own
    parameters (``tau``/``margin`` or ``tau_yes``/``tau_no``). ``per_class`` maps an option index to
    its own ``(x, y)`` (``None`` = never accept that option). ``certified`` is True only for the
    guarantee objective and only when a rule (or, per class, at least one option) was certified.
    """

    objective: str
    certified: bool
    x: float | None
    y: float | None
    params: dict
    per_class: dict[int, tuple[float, float] | None] | None
    calibration: dict
    guarantee: dict | None = None
    cost: dict | None = None
    target: dict | None = None
    feasible: bool = True
    notes: list[str] = field(default_factory=list)
    #: (A, B) bool: the grid points this selection certified (global guarantee only; the certifying carve
    #: with its learned test order), so a figure's dots hold the chosen point. Not part of ``to_dict``.
    region: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("region", None)
        if self.per_class is not None:
            d["per_class"] = {
                str(k): (None if v is None else [float(v[0]), float(v[1])]) for k, v in self.per_class.items()
            }
        return d


def _check_alpha_delta(alpha: float, delta: float) -> None:
    if not (0 < alpha < 1):
        raise ThresholdError(f"alpha (max error) must be in (0, 1), got {alpha}")
    if not (0 < delta < 1):
        raise ThresholdError(f"delta must be in (0, 1), got {delta}")


def best_by_coverage(accepted: np.ndarray, errors: np.ndarray, mask: np.ndarray) -> tuple[int, int] | None:
    """Index of the allowed point with the most accepted items (ties: fewer errors, then stricter)."""
    if not mask.any():
        return None
    a = np.where(mask, accepted, -1).astype(float)
    best = a.max()
    cand = mask & (accepted == best)
    e = np.where(cand, errors, np.iinfo(np.int64).max)
    cand &= e == e.min()
    idx = np.argwhere(cand)
    i, j = idx[np.lexsort((-idx[:, 1], -idx[:, 0]))][0]  # strictest among ties
    return int(i), int(j)


def _calibration_summary(surface: Surface, accepted: int, errors: int) -> dict:
    return {
        "n_items": int(surface.n_total),
        "n_accepted": int(accepted),
        "n_errors": int(errors),
        "coverage": accepted / max(surface.n_total, 1),
        "error_rate": errors / accepted if accepted else None,
        "review_rate": 1.0 - accepted / max(surface.n_total, 1),
    }


def _select_point(objective: str, certified: bool, surface: Surface, i: int, j: int, **fields) -> Selection:
    """The :class:`Selection` of grid point ``(i, j)`` of ``surface`` (one rule for every option)."""
    acc, err = int(surface.accepted[i, j]), int(surface.errors[i, j])
    return Selection(
        objective,
        certified,
        float(surface.x_grid[i]),
        float(surface.y_grid[j]),
        surface.params(i, j),
        None,
        _calibration_summary(surface, acc, err),
        **fields,
    )


#: A certificate's figures when no rule is certified (in the ``guarantee`` of an infeasible selection).
UNCERTIFIED = {"n_certified_points": 0, "certified_bound": None, "expected_coverage": 0.0, "p_value": None}


def certificate(
    ok: np.ndarray, p: np.ndarray, at: tuple, accepted: int, n_items: int, bound: float, *, level: float, alpha: float
) -> dict:
    """A certificate's figures of the chosen rule ``at`` (in the ``guarantee`` of a certified selection): ``ok``
    the rules certified at ``alpha`` (a mask), ``p`` their p-values tested at ``level`` (same shape); the rule
    accepts ``accepted`` of ``n_items`` calibration items, with a risk upper bound ``bound`` (reported as at
    most ``alpha``)."""
    return {
        "n_accepted_calibration": accepted,
        "n_certified_points": int(ok.sum()),
        "p_value": float(p[at]),
        "test_level": level,
        "certified_bound": alpha,
        "risk_upper_bound": min(bound, alpha),
        "expected_coverage": accepted / max(n_items, 1),
    }


def _select_nothing(objective: str, surface: Surface, **fields) -> Selection:
    """The infeasible :class:`Selection`: no rule, everything goes to review."""
    return Selection(
        objective, False, None, None, {}, None, _calibration_summary(surface, 0, 0), feasible=False, **fields
    )


def select_guarantee(
    surface: Surface,
    *,
    alpha: float = 0.05,
    delta: float = 0.1,
    method: Method = "fixed-sequence",
    per_class: bool = False,
    n_paths: int = 10,
    n_starts: int = 10,
    classes: Sequence[int] | None = None,
    order_surface: Surface | None = None,
    constraints: Sequence[tuple[int, float]] = (),
    order: Order = "upper-bound",
) -> Selection:
    """Maximise calibration coverage subject to ``P(error among accepted > alpha) <= delta``.

    Parameters
    ----------
    surface : Surface
        Calibration counts (with ``class_*`` arrays when ``per_class``).
    alpha : float in (0, 1)
        Largest acceptable error rate among auto-accepted items.
    delta : float in (0, 1)
        Allowed probability that the certified rule's true error exceeds ``alpha``.
    method : {"fixed-sequence", "holm"}
        Family-wise error control over the grid.
    per_class : bool
        Certify one ``(x, y)`` per predicted option at level ``delta / K``.
    classes : sequence of int, optional
        Options that may be accepted (default: all); the Bonferroni factor is their number.
    order_surface : Surface, optional
        Counts on calibration items held apart from ``surface`` (same grid). With
        ``method="fixed-sequence"`` the test order is learned on them and one sequence is tested at
        level ``delta``; without it, the data-independent column paths of
        :func:`strict_to_lax_paths` are used at ``delta / (n_paths * n_starts)``.
    constraints : sequence of (option index, beta)
        Critical options: at most ``beta`` of the items truly of that option may be auto-accepted as
        another one, certified jointly with the main risk (:mod:`workbench.thresholds.risks`; needs a
        surface with the critical counts). Not with ``per_class``.
    order : {"upper-bound", "learned-per-alpha"}
        How the held-apart counts order the tests: ``"upper-bound"`` (default, :func:`bound_order`,
        the same order for every α, so certification is monotone in α) or ``"learned-per-alpha"``
        (:func:`learned_order`, the order before issue 15, kept only to measure against). With costs
        or constraints: :func:`workbench.thresholds.risks.joint_order`.

    With a misroute cost matrix on the surface (``surface.loss`` or ``surface.loss_scale != 1``) the
    main risk is the expected cost among accepted items and ``alpha`` is in cost units (see
    :mod:`workbench.thresholds.risks`).

    Returns
    -------
    selection : Selection
    """
    from workbench.thresholds import risks

    costed = surface.loss is not None  # bounded (not 0/1) losses
    _check_alpha_delta(alpha / surface.loss_scale, delta)
    use_order = order_surface is not None and method == "fixed-sequence"
    plain = surface.loss_scale == 1.0 and not costed and not constraints  # the error rate alone, as before costs
    if per_class and constraints:
        raise ThresholdError(
            "class constraints are certified for the global rule only, not with per_class",
            hint="drop `per_class` (the constraint then makes the one rule strict enough), or drop the `constraints`",
        )
    if not per_class:
        p = risks.joint_p_values(surface, alpha, constraints)
        seq = None
        if use_order and order_surface is not None:
            seq = (
                _held_apart_order(order_surface.errors, order_surface.accepted, alpha, delta, order)
                if plain
                else risks.joint_order(order_surface, alpha, delta, constraints, order=order)
            )
        ok, level = _rejections(p, delta, method, n_paths, n_starts, seq)
        best = best_by_coverage(surface.accepted, surface.errors, ok)
        if best is None:
            return _select_nothing(  # nothing certified: the rule accepts nothing
                "guarantee",
                surface,
                guarantee={
                    "alpha": alpha,
                    "delta": delta,
                    "method": method,
                    "per_class": False,
                    "n_calibration": int(surface.n_total),
                    **UNCERTIFIED,
                    **_risk_fields(surface, constraints),
                },
                notes=["no grid point is certified at this alpha/delta: everything goes to review"],
                region=ok,
            )
        i, j = best
        acc, err = int(surface.accepted[i, j]), int(surface.errors[i, j])
        if costed:
            assert surface.loss is not None
            bound = risks.bounded_upper_bound(float(surface.loss[i, j]), acc, level) * surface.loss_scale
        else:
            bound = binomial_upper_bound(err, acc, level) * surface.loss_scale
        extra = _risk_fields(surface, constraints)
        if not plain:
            lsum = float(surface.loss[i, j]) if surface.loss is not None else float(err)
            extra["calibration_cost"] = lsum * surface.loss_scale / max(acc, 1)
        if constraints:
            extra["constraints"] = risks.constraints_at(surface, i, j, constraints, level)
        return _select_point(
            "guarantee",
            True,
            surface,
            i,
            j,
            guarantee={
                "alpha": alpha,
                "delta": delta,
                "method": method,
                "per_class": False,
                "n_calibration": int(surface.n_total),
                **certificate(ok, p, (i, j), acc, surface.n_total, bound, level=level, alpha=alpha),
                "order": _order_name(method, use_order, order_surface, order),
                "n_paths": n_paths if method == "fixed-sequence" and not use_order else None,
                "n_starts": n_starts if method == "fixed-sequence" and not use_order else None,
                **extra,
            },
            region=ok,
        )
    if surface.class_accepted is None or surface.class_errors is None:
        raise ThresholdError("per-class guarantees need a surface with per-class counts")
    K = surface.class_accepted.shape[0]
    classes = list(range(K)) if classes is None else [int(c) for c in classes]
    if not classes:
        raise ThresholdError("no option can be accepted (all are abstain options)")
    delta_k = delta / len(classes)
    chosen: dict[int, tuple[float, float] | None] = {}
    per: dict[str, dict] = {}
    tot_acc = tot_err = 0
    for k in range(K):
        if k not in classes:
            chosen[k] = None
            continue
        acc_k, err_k = surface.class_accepted[k], surface.class_errors[k]
        p = risks.main_p_values(surface, alpha, k)
        seq = (
            _held_apart_order(order_surface.class_errors[k], order_surface.class_accepted[k], alpha, delta_k, order)
            if use_order
            and order_surface is not None
            and order_surface.class_errors is not None
            and order_surface.class_accepted is not None
            else None
        )
        if seq is not None and not plain and order_surface is not None:
            seq = risks.joint_order(order_surface, alpha, delta_k, (), cls=k, order=order)
        ok, level = _rejections(p, delta_k, method, n_paths, n_starts, seq)
        best = best_by_coverage(acc_k, err_k, ok & (acc_k > 0))
        if best is None:
            chosen[k] = None
            per[str(k)] = {"certified": False, "accepted": 0}
            continue
        i, j = best
        a, e = int(acc_k[i, j]), int(err_k[i, j])
        tot_acc += a
        tot_err += e
        chosen[k] = (float(surface.x_grid[i]), float(surface.y_grid[j]))
        if costed:
            assert surface.class_loss is not None
            ub = risks.bounded_upper_bound(float(surface.class_loss[k, i, j]), a, level) * surface.loss_scale
        else:
            ub = binomial_upper_bound(e, a, level) * surface.loss_scale
        per[str(k)] = {
            "certified": True,
            **surface.params(i, j),
            "accepted": a,
            "errors": e,
            "p_value": float(p[i, j]),
            "risk_upper_bound": min(ub, alpha),
        }
    feasible = any(v is not None for v in chosen.values())
    notes = [] if feasible else ["no option is certified at this alpha/delta: everything goes to review"]
    uncertified = [k for k in classes if chosen.get(k) is None]
    if uncertified:
        # even with zero errors, certifying needs (1 - alpha)^n <= the per-test level
        n_min = min_items_to_certify(alpha / surface.loss_scale, delta_k)
        sizes = surface.class_accepted[:, 0, 0]
        notes.append(
            f"{len(uncertified)} of {len(classes)} options {'is' if len(uncertified) == 1 else 'are'} never auto-accepted: certifying one "
            f"option at alpha={alpha} needs at least {n_min} accepted calibration items with no error "
            f"(per-option level {delta_k:.3g}); the median option has "
            f"{int(np.median(sizes[classes]))} items here"
        )
    return Selection(
        "guarantee",
        feasible,  # certified only when some option is
        None,
        None,
        {},
        chosen,
        _calibration_summary(surface, tot_acc, tot_err),
        guarantee={
            "alpha": alpha,
            "delta": delta,
            "method": method,
            "per_class": True,
            "class_correction": "bonferroni",
            "delta_per_class": delta_k,
            "n_calibration": int(surface.n_total),
            "n_accepted_calibration": tot_acc,
            "certified_bound": alpha,
            "expected_coverage": tot_acc / max(surface.n_total, 1),
            "classes": per,
            "order": _order_name(method, use_order, order_surface, order),
            "n_paths": n_paths if method == "fixed-sequence" and not use_order else None,
            "n_starts": n_starts if method == "fixed-sequence" and not use_order else None,
            **_risk_fields(surface, constraints),
        },
        feasible=feasible,
        notes=notes,
    )


def _risk_fields(surface: Surface, constraints: Sequence[tuple[int, float]]) -> dict:
    """What the certificate is about, for the output and the policy file (nothing for the plain error rate)."""
    from workbench.thresholds.risks import JOINT_RULE

    out: dict = {}
    if surface.loss is not None or surface.loss_scale != 1.0:
        out["risk"] = "expected misroute cost among auto-accepted items"
        out["loss_scale"] = float(surface.loss_scale)
    if constraints:
        out["joint"] = JOINT_RULE
        out["delta_split"] = "none (max p-value over the risks)"
        out["constraints"] = [{"option": int(c), "beta": float(b)} for c, b in constraints]
    return out


def _order_name(method: str, use_order: bool, order_surface: Surface | None, order: str = "upper-bound") -> str | None:
    if method != "fixed-sequence":
        return None
    if use_order and order_surface is not None:
        how = "upper bound of the error, the same for every α" if order == "upper-bound" else "p-value at this α"
        return f"learned on {order_surface.n_total} held-apart calibration items by {how} (split fixed-sequence)"
    return "data-independent column paths (multi-start)"


def select_guarantee_split(
    coords,
    correct: np.ndarray,
    *,
    x_grid: np.ndarray,
    y_grid: np.ndarray,
    n_classes: int,
    alpha: float = 0.05,
    delta: float = 0.1,
    method: Method = "fixed-sequence",
    per_class: bool = False,
    classes: Sequence[int] | None = None,
    order_fraction: float = 0.3,
    rng: np.random.Generator | None = None,
    n_paths: int = 10,
    n_starts: int = 10,
    loss: np.ndarray | None = None,
    loss_scale: float = 1.0,
    labels: np.ndarray | None = None,
    constraints: Sequence[tuple[int, float]] = (),
    order: Order = "upper-bound",
) -> tuple[Selection, Surface]:
    """Guarantee selection from per-item coordinates, holding ``order_fraction`` apart to order the tests.

    Parameters
    ----------
    coords : RuleCoordinates
        From :func:`workbench.thresholds.rules.rule_coordinates` on the calibration items.
    correct : ndarray of shape (n_items,), bool
    order_fraction : float in [0, 1)
        Share of items used only to learn the test order (fixed-sequence); 0 uses the
        data-independent paths. Holm uses every item.
    rng : numpy Generator
        Draws the held-apart items (seeded by the caller for reproducibility).
    loss, loss_scale : per-item misroute cost / largest cost, and the largest cost (cost risk)
    labels, constraints : true options and ``(critical option, beta)`` pairs (class constraints)
        Draws the held-apart items (seeded by the caller for reproducibility; the draw does not
        depend on α, so neither does the held-apart part).
    order : {"upper-bound", "learned-per-alpha"}
        How the held-apart part orders the tests (:func:`select_guarantee`).

    Returns
    -------
    selection, certifying_surface : the surface the certificate was computed on.
    """
    from workbench.thresholds.surface import surface_from_rules

    n = len(correct)
    rng = rng or np.random.default_rng(0)
    hold = np.zeros(n, dtype=bool)
    if method == "fixed-sequence" and order_fraction > 0:
        hold = rng.random(n) < order_fraction

    def surf(mask: np.ndarray) -> Surface:
        return surface_from_rules(
            coords, correct, mask, n_classes=n_classes if per_class else None,  # class counts: per-class only
            x_grid=x_grid, y_grid=y_grid, loss=None if loss is None else loss[mask], loss_scale=loss_scale,
            labels=None if labels is None else labels[mask], critical=[c for c, _ in constraints],
        )  # fmt: skip

    certify = surf(~hold)
    order_surface = surf(hold) if hold.any() else None
    sel = select_guarantee(
        certify,
        alpha=alpha,
        delta=delta,
        method=method,
        per_class=per_class,
        classes=classes,
        order_surface=order_surface,
        n_paths=n_paths,
        n_starts=n_starts,
        constraints=constraints,
        order=order,
    )
    if sel.guarantee is not None:
        sel.guarantee["n_order"] = int(hold.sum())
    return sel, certify


def certify_surface(
    surface: Surface,
    *,
    alpha: float = 0.05,
    delta: float = 0.1,
    method: Method = "fixed-sequence",
    per_class: bool = False,
    classes: Sequence[int] | None = None,
    order_fraction: float = 0.3,
    seed: int = 0,
    n_paths: int = 10,
    n_starts: int = 10,
    constraints: Sequence[tuple[int, float]] = (),
    order: Order = "upper-bound",
) -> Selection:
    """The guarantee selection exactly as ``workbench thresholds`` makes it, from a surface built by
    :func:`~workbench.thresholds.surface.risk_coverage_surface` (which keeps the per-item coordinates).

    The held-apart items for the fixed-sequence order are drawn with ``default_rng([seed, 1])``, as
    in :func:`workbench.thresholds.choose.choose_thresholds`, so the CLI, the UI and a policy export
    certify the same point on the same items. Misroute costs and critical counts come from the
    surface (built with ``cost_matrix``/``critical``); ``constraints`` are ``(option index, beta)``.
    """
    coords, correct = surface.extra.get("coordinates"), surface.extra.get("correct")
    if coords is None or correct is None:
        raise ThresholdError("certify_surface needs a surface from risk_coverage_surface (per-item coordinates)")
    n_classes = (
        surface.class_accepted.shape[0]
        if surface.class_accepted is not None
        else int(coords.predicted.max(initial=0)) + 1
    )
    sel, _ = select_guarantee_split(
        coords,
        correct,
        x_grid=surface.x_grid,
        y_grid=surface.y_grid,
        n_classes=n_classes,
        alpha=alpha,
        delta=delta,
        method=method,
        per_class=per_class,
        classes=classes,
        order_fraction=order_fraction,
        rng=np.random.default_rng([seed, 1]),
        n_paths=n_paths,
        n_starts=n_starts,
        loss=surface.extra.get("loss"),
        loss_scale=surface.loss_scale,
        labels=surface.extra.get("labels"),
        constraints=constraints,
        order=order,
    )
    return sel


def error_cost_weights(
    labels: np.ndarray, predicted: np.ndarray, n_options: int, error_cost: float | Mapping[int, float] | np.ndarray
) -> np.ndarray:
    """Per-item cost if the item were auto-accepted: 0 when correct, else the cost of that mistake.

    ``error_cost`` is a scalar, a mapping from the accepted (predicted) option to its cost, or a
    matrix of shape (K, K) indexed ``[true, accepted]``.
    """
    labels = np.asarray(labels).astype(int)
    predicted = np.maximum(np.asarray(predicted).astype(int), 0)
    wrong = labels != predicted
    if isinstance(error_cost, Mapping):
        vec = np.ones(n_options)
        for k, v in error_cost.items():
            vec[int(k)] = float(v)
        cost = vec[predicted]
    else:
        arr = np.asarray(error_cost, dtype=float)
        if arr.ndim == 0:
            cost = np.full(labels.shape, float(arr))
        elif arr.shape == (n_options, n_options):
            cost = arr[np.clip(labels, 0, n_options - 1), predicted]
        else:
            raise ThresholdError(f"error cost matrix must have shape ({n_options}, {n_options}), got {arr.shape}")
    return np.where(wrong, cost, 0.0)


def select_cost(surface: Surface, *, review_cost: float, api_cost_per_item: float = 0.0) -> Selection:
    """Minimise the expected cost per item on the calibration split (a point estimate, not certified).

    cost = (sum of wrong-accept costs over accepted items + review_cost × routed items) / n_total
    + api_cost_per_item. ``surface.weighted`` must hold the wrong-accept costs
    (see :func:`error_cost_weights`).
    """
    if surface.weighted is None:
        raise ThresholdError("the cost objective needs a surface built with error-cost weights")
    if review_cost < 0 or api_cost_per_item < 0:
        raise ThresholdError("costs must be non-negative")
    n = max(surface.n_total, 1)
    per_item = (surface.weighted + review_cost * (surface.n_total - surface.accepted)) / n + api_cost_per_item
    best = per_item.min()
    cand = np.isclose(per_item, best, rtol=0, atol=1e-12)
    best_point = best_by_coverage(surface.accepted, surface.errors, cand)
    assert best_point is not None  # the minimum of per_item is always a candidate
    i, j = best_point
    review_everything = review_cost * surface.n_total / n + api_cost_per_item
    return _select_point(
        "cost",
        False,
        surface,
        i,
        j,
        cost={
            "expected_cost_per_item": float(per_item[i, j]),
            "review_cost": review_cost,
            "api_cost_per_item": api_cost_per_item,
            "cost_if_everything_reviewed": float(review_everything),
        },
        notes=["point estimate on the calibration split: no guarantee"],
    )


def select_manual(surface: Surface, params: dict[str, float]) -> Selection:
    """A rule typed by hand (``tau``/``margin`` or ``tau_yes``/``tau_no``), **uncertified**.

    The thresholds are used exactly as given (no snapping to the grid); the calibration figures
    count the surface's items the rule accepts, from its per-item coordinates
    (:func:`~workbench.thresholds.surface.risk_coverage_surface` keeps them).
    """
    coords, correct = surface.extra.get("coordinates"), surface.extra.get("correct")
    if coords is None or correct is None:
        raise ThresholdError("a manual rule needs a surface from risk_coverage_surface (per-item coordinates)")
    if surface.y_name == "tau_no":
        if "tau_yes" not in params or "tau_no" not in params:
            raise ThresholdError("a manual yes/no rule needs tau_yes and tau_no")
        x, y = float(params["tau_yes"]), -float(params["tau_no"])
    else:
        if "tau" not in params:
            raise ThresholdError("a manual rule needs tau (and optionally margin)")
        x, y = float(params["tau"]), float(params.get("margin", 0.0))
    accepted = (coords.x >= x) & (coords.y >= y)
    acc, err = int(accepted.sum()), int((accepted & ~np.asarray(correct, bool)).sum())
    exact = {"tau_yes": x, "tau_no": -y} if surface.y_name == "tau_no" else {surface.x_name: x, surface.y_name: y}
    return Selection(
        "manual",
        False,
        x,
        y,
        exact,
        None,
        _calibration_summary(surface, acc, err),
        target={"manual": exact},
        notes=["thresholds set by hand: NOT certified"],
    )


def select_target(
    surface: Surface, *, target_coverage: float | None = None, target_error: float | None = None
) -> Selection:
    """What users do today: a point estimate, clearly **uncertified**.

    ``target_coverage``: among points with calibration coverage ``>= target``, the lowest error.
    ``target_error``: among points with calibration error ``<= target``, the highest coverage.
    """
    if (target_coverage is None) == (target_error is None):
        raise ThresholdError("give exactly one of `target_coverage` or `target_error`")
    cov, err_rate = surface.coverage, surface.error_rate
    if target_coverage is not None:
        ok = cov >= target_coverage
        if not ok.any():
            raise ThresholdError(
                f"no grid point reaches coverage {target_coverage}", hint=f"the highest is {cov.max():.3f}"
            )
        e = np.where(ok, np.nan_to_num(err_rate, nan=np.inf), np.inf)
        best_point = best_by_coverage(surface.accepted, surface.errors, ok & (e == e.min()))
        assert best_point is not None  # ok.any() was checked above
        i, j = best_point
        kind: dict[str, float | None] = {"target_coverage": target_coverage}
    else:
        ok = (surface.accepted > 0) & (np.nan_to_num(err_rate, nan=np.inf) <= target_error)
        best = best_by_coverage(surface.accepted, surface.errors, ok)
        if best is None:
            return _select_nothing(
                "error",
                surface,
                target={"target_error": target_error},
                notes=[
                    "no grid point reaches this error on calibration; everything goes to review",
                    "point estimate: NOT certified",
                ],
            )
        i, j = best
        kind = {"target_error": target_error}
    return _select_point(
        "coverage" if target_coverage is not None else "error",
        False,
        surface,
        i,
        j,
        target=kind,
        notes=[
            "point estimate on the calibration split: NOT certified; the test error "
            "can exceed it (use `objective` guarantee for a bound)"
        ],
    )
