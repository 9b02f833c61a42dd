"""The binomial bounds every certificate rests on: Hoeffding–Bentkus p-values and upper bounds of a
risk from ``errors`` out of ``n`` accepted items, the smallest ``n`` that can certify, and the exact
(Clopper–Pearson) and Wilson intervals of a proportion.

Pure functions of counts, used by :mod:`workbench.thresholds.guarantees` (Learn-then-Test),
:mod:`workbench.thresholds.risks` (misroute costs and critical options) and the test reports of
:mod:`workbench.thresholds.evaluate`; below all of them, so none of them imports another to reach these.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.errors import WorkbenchError


class ThresholdError(WorkbenchError):
    """Threshold selection was asked something impossible (bad α/δ, empty data, unknown objective).

    ``parameter``, as for :class:`~workbench.errors.OptionError`, names the option the message starts with
    (the CLI shows it as its flag).
    """

    def __init__(self, message: str, *, hint: str | None = None, parameter: str | None = None):
        super().__init__(message, hint=hint)
        self.parameter = parameter


def kl_bernoulli(a: np.ndarray, b: float) -> np.ndarray:
    """``KL(a ‖ b)`` of Bernoulli laws, ``a ln(a/b) + (1-a) ln((1-a)/(1-b))``, elementwise over ``a`` (any
    shape, in [0, 1]) for one ``b`` in (0, 1), with the ``0 ln 0 = 0`` convention: same shape as ``a``, >= 0."""
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
    hoeffding = np.exp(-n * kl_bernoulli(np.minimum(r_hat, alpha), alpha))
    bentkus = binom.cdf(errors, n, alpha)
    p = np.minimum(hoeffding, bentkus)
    return np.where(n > 0, np.clip(p, 0.0, 1.0), 1.0)


def min_items_to_certify(alpha: float, level: float) -> int:
    """Smallest ``n`` whose p-value of 0 errors among ``n`` accepted items is at most ``level``.

    Uses :func:`hoeffding_bentkus_p_values` itself (at 0 errors both of its terms equal
    ``(1 - alpha)^n``, which gives the starting guess), so it is exactly the number of error-free
    accepted items below which no grid point can be certified when the first test runs at ``level``.
    """
    if not (0 < alpha < 1) or not (0 < level < 1):
        raise ThresholdError(f"alpha and level must be in (0, 1), got {alpha} and {level}")
    guess = max(1, math.ceil(math.log(level) / math.log1p(-alpha)))
    n = np.arange(max(1, guess - 3), guess + 4)
    ok = hoeffding_bentkus_p_values(np.zeros_like(n), n, alpha) <= level
    while not ok.any():  # never in practice: the guess is exact up to rounding
        n = n + 7
        ok = hoeffding_bentkus_p_values(np.zeros_like(n), n, alpha) <= level
    return int(n[ok][0])


def hoeffding_bentkus_upper_bound(errors: np.ndarray, n: np.ndarray, level: float) -> np.ndarray:
    """Smallest ``α`` whose Hoeffding–Bentkus p-value is ``<= level``: an upper confidence bound of the risk.

    The p-value is the smaller of two terms that are both non-increasing in α (module docstring),
    so ``{α : p(α) <= level}`` is ``[u, 1)`` with ``u = min(u_B, u_H)``: ``u_B`` solves
    ``BinomCDF(errors; n, u) = level`` (the one-sided Clopper–Pearson bound, ``betaincinv``) and
    ``u_H > r̂`` solves ``n KL(r̂ ‖ u) = ln(1 / level)`` (bisection to about 1e-13). So for every α,
    ``u <= α`` exactly when :func:`hoeffding_bentkus_p_values` at α is ``<= level`` (up to that
    tolerance). ``n == 0`` or ``errors == n`` gives 1. Computed once per distinct ``(errors, n)``.

    Parameters
    ----------
    errors, n : array-like of the same shape, int
    level : float in (0, 1)

    Returns
    -------
    u : ndarray of the same shape, in (0, 1]
    """
    from scipy.special import betaincinv

    if not (0 < level < 1):
        raise ThresholdError(f"level must be in (0, 1), got {level}")
    errors, n = np.broadcast_arrays(np.asarray(errors, dtype=np.int64), np.asarray(n, dtype=np.int64))
    pairs, inverse = np.unique(np.stack([errors.ravel(), n.ravel()], axis=1), axis=0, return_inverse=True)
    e, m = pairs[:, 0].astype(float), pairs[:, 1].astype(float)
    open_ = (m > 0) & (e < m)  # otherwise p = 1 for every α
    u = np.ones(len(pairs))
    if open_.any():
        e, m = e[open_], m[open_]
        u_b = betaincinv(e + 1, m - e, 1 - level)
        r_hat, target = e / m, math.log(1 / level) / m
        lo, hi = r_hat.copy(), np.ones_like(r_hat)
        for _ in range(44):  # KL(r̂ ‖ u) increases from 0 to ∞ on (r̂, 1)
            mid = (lo + hi) / 2
            above = _kl_pairs(r_hat, mid) >= target
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid)
        u[open_] = np.minimum(u_b, hi)
    return u[inverse.ravel()].reshape(errors.shape)


def _kl_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ``KL(a ‖ b)`` of Bernoulli laws for ``0 <= a < b < 1`` (``0 ln 0 = 0``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0) / b), 0.0)
    return t1 + (1 - a) * np.log((1 - a) / (1 - b))


def binomial_upper_bound(errors: int, n: int, level: float) -> float:
    """One-sided Clopper–Pearson upper bound: the smallest ``α`` with ``BinomCDF(errors; n, α) <= level``."""
    from scipy.stats import beta

    if n <= 0:
        return 1.0
    if errors >= n:
        return 1.0
    return float(beta.ppf(1.0 - level, errors + 1, n - errors))


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

    from workbench.metrics.reliability import wilson_interval

    if n <= 0:
        return (math.nan, math.nan)
    lo, hi = wilson_interval(np.asarray(k), np.asarray(n), z=float(norm.ppf(1 - (1 - confidence) / 2)))
    return float(lo), float(hi)
