"""Choosing thresholds: Learn-then-Test guarantees, cost minimisation and (uncertified) point targets.

Guarantee objective (Angelopoulos, Bates et al., *Learn then Test*, 2021): for every grid point
``λ = (i, j)`` test the null hypothesis ``H_λ: risk(λ) > α``, where ``risk(λ)`` is the error rate
among auto-accepted items. Conditional on the number ``n_λ`` of accepted calibration items, their
errors are i.i.d. Bernoulli(risk(λ)), so a valid p-value is the Hoeffding–Bentkus one with
``n = n_λ``: ``min(exp(-n h(min(r̂, α), α)), BinomCDF(n r̂; n, α))`` (the ``e`` factor of Bentkus is
not needed for 0/1 losses). Family-wise error control over the grid:

- ``fixed-sequence`` (default): data-independent strict→lax sequences (for a few margin / ``tau_no``
  columns, the first threshold walks down from several evenly spaced starting values), each tested
  in order at level ``δ / n_sequences`` until its first non-rejection;
- ``holm``: Bonferroni–Holm over all grid points.

Every rejected ``λ`` then satisfies ``P(risk(λ) > α) ≤ δ`` simultaneously, so picking the one with
the largest calibration coverage keeps the guarantee. Per-class guarantees run the same procedure
on each predicted option's counts at level ``δ / K`` (Bonferroni over the K acceptable options).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Mapping, Sequence

import numpy as np

from workbench.errors import WorkbenchError
from workbench.thresholds.surface import Surface

Method = Literal["fixed-sequence", "holm"]


class ThresholdError(WorkbenchError):
    """Threshold selection was asked something impossible (bad α/δ, empty data, unknown objective)."""


# -- p-values and FWER procedures -----------------------------------------------------------------
def _kl_bernoulli(a: np.ndarray, b: float) -> np.ndarray:
    """``a ln(a/b) + (1-a) ln((1-a)/(1-b))`` with the ``0 ln 0 = 0`` convention."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0) / b), 0.0)
        t2 = np.where(a < 1, (1 - a) * np.log(np.where(a < 1, 1 - a, 1.0) / (1 - b)), 0.0)
    return t1 + t2


def hoeffding_bentkus_p_values(errors: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """p-values of ``H: risk > alpha`` from ``errors`` wrong out of ``n`` (0/1 losses).

    Parameters
    ----------
    errors, n : array-like of the same shape, int
        Wrong accepted items and accepted items per grid point. ``n == 0`` gives p = 1.
    alpha : float in (0, 1)

    Returns
    -------
    p : ndarray of the same shape, in [0, 1]
    """
    from scipy.stats import binom

    errors = np.asarray(errors, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        r_hat = np.where(n > 0, errors / np.maximum(n, 1), 1.0)
    hoeffding = np.exp(-n * _kl_bernoulli(np.minimum(r_hat, alpha), alpha))
    bentkus = binom.cdf(errors, n, alpha)
    p = np.minimum(hoeffding, bentkus)
    return np.where(n > 0, np.clip(p, 0.0, 1.0), 1.0)


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
    cols = np.unique(np.round(np.linspace(0, B - 1, n_paths + 1)[:-1]).astype(int)) if n_paths < B \
        else np.arange(B)
    rows = np.arange(A - 1, -1, -1)
    starts = np.unique(np.round(np.linspace(0, A - 1, min(n_starts, A) + 1)[:-1]).astype(int))
    return [rows[s:] * B + j for j in cols for s in starts]


def _rejections(p: np.ndarray, delta: float, method: str, n_paths: int, n_starts: int = 10
                ) -> tuple[np.ndarray, float]:
    """Rejected mask and the per-test level used for the first rejection."""
    if method == "fixed-sequence":
        paths = strict_to_lax_paths(p.shape, n_paths, n_starts)
        return fixed_sequence_rejections(p, paths, delta), delta / len(paths)
    if method == "holm":
        return holm_rejections(p, delta), delta / p.size
    raise ThresholdError(f"unknown FWER method {method!r}", hint="use fixed-sequence or holm")


def binomial_upper_bound(errors: int, n: int, level: float) -> float:
    """One-sided Clopper–Pearson upper bound: the smallest ``α`` with ``BinomCDF(errors; n, α) <= level``."""
    from scipy.stats import beta

    if n <= 0:
        return 1.0
    if errors >= n:
        return 1.0
    return float(beta.ppf(1.0 - level, errors + 1, n - errors))


# -- selections -----------------------------------------------------------------------------------
@dataclass
class Selection:
    """A chosen rule and what is known about it on the calibration split.

    ``x``/``y`` are rule-coordinate thresholds (see :mod:`rules`); ``params`` are the rule's own
    parameters (``tau``/``margin`` or ``tau_yes``/``tau_no``). ``per_class`` maps an option index to
    its own ``(x, y)`` (``None`` = never accept that option). ``certified`` is True only for the
    guarantee objective.
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

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.per_class is not None:
            d["per_class"] = {str(k): (None if v is None else [float(v[0]), float(v[1])])
                              for k, v in self.per_class.items()}
        return d


def _check_alpha_delta(alpha: float, delta: float) -> None:
    if not (0 < alpha < 1):
        raise ThresholdError(f"--max-error must be in (0, 1), got {alpha}")
    if not (0 < delta < 1):
        raise ThresholdError(f"--delta must be in (0, 1), got {delta}")


def _best_by_coverage(accepted: np.ndarray, errors: np.ndarray, mask: np.ndarray) -> tuple[int, int] | None:
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
    return {"n_items": int(surface.n_total), "n_accepted": int(accepted), "n_errors": int(errors),
            "coverage": accepted / max(surface.n_total, 1),
            "error_rate": errors / accepted if accepted else None,
            "review_rate": 1.0 - accepted / max(surface.n_total, 1)}


def select_guarantee(surface: Surface, *, alpha: float = 0.05, delta: float = 0.1,
                     method: Method = "fixed-sequence", per_class: bool = False, n_paths: int = 10,
                     n_starts: int = 10, classes: Sequence[int] | None = None) -> Selection:
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

    Returns
    -------
    selection : Selection
    """
    _check_alpha_delta(alpha, delta)
    if not per_class:
        p = hoeffding_bentkus_p_values(surface.errors, surface.accepted, alpha)
        ok, level = _rejections(p, delta, method, n_paths, n_starts)
        best = _best_by_coverage(surface.accepted, surface.errors, ok)
        if best is None:
            return Selection("guarantee", True, None, None, {}, None, _calibration_summary(surface, 0, 0),
                             guarantee={"alpha": alpha, "delta": delta, "method": method, "per_class": False,
                                        "n_calibration": int(surface.n_total), "n_certified_points": 0,
                                        "certified_bound": None, "expected_coverage": 0.0, "p_value": None},
                             feasible=False,
                             notes=["no grid point is certified at this alpha/delta: everything goes to review"])
        i, j = best
        acc, err = int(surface.accepted[i, j]), int(surface.errors[i, j])
        bound = binomial_upper_bound(err, acc, level)
        return Selection(
            "guarantee", True, float(surface.x_grid[i]), float(surface.y_grid[j]), surface.params(i, j), None,
            _calibration_summary(surface, acc, err),
            guarantee={"alpha": alpha, "delta": delta, "method": method, "per_class": False,
                       "n_calibration": int(surface.n_total), "n_accepted_calibration": acc,
                       "n_certified_points": int(ok.sum()), "p_value": float(p[i, j]),
                       "test_level": level, "certified_bound": alpha,
                       "risk_upper_bound": min(bound, alpha),
                       "expected_coverage": acc / max(surface.n_total, 1),
                       "n_paths": n_paths if method == "fixed-sequence" else None,
                       "n_starts": n_starts if method == "fixed-sequence" else None})
    if surface.class_accepted is None:
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
        p = hoeffding_bentkus_p_values(err_k, acc_k, alpha)
        ok, level = _rejections(p, delta_k, method, n_paths, n_starts)
        best = _best_by_coverage(acc_k, err_k, ok & (acc_k > 0))
        if best is None:
            chosen[k] = None
            per[str(k)] = {"certified": False, "accepted": 0}
            continue
        i, j = best
        a, e = int(acc_k[i, j]), int(err_k[i, j])
        tot_acc += a
        tot_err += e
        chosen[k] = (float(surface.x_grid[i]), float(surface.y_grid[j]))
        per[str(k)] = {"certified": True, **surface.params(i, j), "accepted": a, "errors": e,
                       "p_value": float(p[i, j]), "risk_upper_bound": min(binomial_upper_bound(e, a, level), alpha)}
    feasible = any(v is not None for v in chosen.values())
    return Selection(
        "guarantee", True, None, None, {}, chosen, _calibration_summary(surface, tot_acc, tot_err),
        guarantee={"alpha": alpha, "delta": delta, "method": method, "per_class": True,
                   "class_correction": "bonferroni", "delta_per_class": delta_k,
                   "n_calibration": int(surface.n_total), "n_accepted_calibration": tot_acc,
                   "certified_bound": alpha, "expected_coverage": tot_acc / max(surface.n_total, 1),
                   "classes": per, "n_paths": n_paths if method == "fixed-sequence" else None,
                   "n_starts": n_starts if method == "fixed-sequence" else None},
        feasible=feasible,
        notes=[] if feasible else ["no option is certified at this alpha/delta: everything goes to review"])


def error_cost_weights(labels: np.ndarray, predicted: np.ndarray, n_options: int,
                       error_cost: float | Mapping[int, float] | np.ndarray) -> np.ndarray:
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
    i, j = _best_by_coverage(surface.accepted, surface.errors, cand)
    acc, err = int(surface.accepted[i, j]), int(surface.errors[i, j])
    review_everything = review_cost * surface.n_total / n + api_cost_per_item
    return Selection("cost", False, float(surface.x_grid[i]), float(surface.y_grid[j]), surface.params(i, j), None,
                     _calibration_summary(surface, acc, err),
                     cost={"expected_cost_per_item": float(per_item[i, j]), "review_cost": review_cost,
                           "api_cost_per_item": api_cost_per_item,
                           "cost_if_everything_reviewed": float(review_everything)},
                     notes=["point estimate on the calibration split: no guarantee"])


def select_target(surface: Surface, *, target_coverage: float | None = None,
                  target_error: float | None = None) -> Selection:
    """What users do today: a point estimate, clearly **uncertified**.

    ``target_coverage``: among points with calibration coverage ``>= target``, the lowest error.
    ``target_error``: among points with calibration error ``<= target``, the highest coverage.
    """
    if (target_coverage is None) == (target_error is None):
        raise ThresholdError("give exactly one of --target-coverage or --target-error")
    cov, err_rate = surface.coverage, surface.error_rate
    if target_coverage is not None:
        ok = cov >= target_coverage
        if not ok.any():
            raise ThresholdError(f"no grid point reaches coverage {target_coverage}",
                                 hint=f"the highest is {cov.max():.3f}")
        e = np.where(ok, np.nan_to_num(err_rate, nan=np.inf), np.inf)
        i, j = _best_by_coverage(surface.accepted, surface.errors, ok & (e == e.min()))
        kind = {"target_coverage": target_coverage}
    else:
        ok = (surface.accepted > 0) & (np.nan_to_num(err_rate, nan=np.inf) <= target_error)
        best = _best_by_coverage(surface.accepted, surface.errors, ok)
        if best is None:
            return Selection("error", False, None, None, {}, None, _calibration_summary(surface, 0, 0),
                             target={"target_error": target_error}, feasible=False,
                             notes=["no grid point reaches this error on calibration; everything goes to review",
                                    "point estimate: NOT certified"])
        i, j = best
        kind = {"target_error": target_error}
    acc, err = int(surface.accepted[i, j]), int(surface.errors[i, j])
    return Selection("coverage" if target_coverage is not None else "error", False, float(surface.x_grid[i]),
                     float(surface.y_grid[j]), surface.params(i, j), None, _calibration_summary(surface, acc, err),
                     target=kind, notes=["point estimate on the calibration split: NOT certified; the test error "
                                         "can exceed it (use --objective guarantee for a bound)"])


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided exact binomial interval for ``k`` successes in ``n``; ``(nan, nan)`` when ``n == 0``."""
    from scipy.stats import beta

    if n <= 0:
        return (math.nan, math.nan)
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion; ``(nan, nan)`` when ``n == 0``."""
    from scipy.stats import norm

    if n <= 0:
        return (math.nan, math.nan)
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
