"""The error-rate alarm of :mod:`workbench.monitor.sequential` computed over a whole array at once, vectorised
over the last axis (time) and broadcast over leading axes (streams): the reference that
:class:`~workbench.monitor.sequential.AlarmStream` (what the library runs, chunk by chunk) equals to the last
bit, and the form the simulations run thousands of streams through."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from workbench.monitor.sequential import BET_CAP, default_grid, thinned_points


def discounted_rate(x: np.ndarray, alpha: float, *, half_life: float = 100.0, prior_weight: float = 10.0) -> np.ndarray:
    """Recent error rate *after* each outcome, shape of ``x``:
    ``(prior_weight·α + Σ_{j<=t} γ^{t−j} x_j) / (prior_weight + Σ_{j<=t} γ^{t−j})`` with ``γ = 2^(−1/half_life)``."""
    x = np.asarray(x, dtype=float)
    gamma = 2.0 ** (-1.0 / half_life)
    s = lfilter([1.0], [1.0, -gamma], x, axis=-1) if x.shape[-1] else x  # Σ_{j<=t} γ^{t−j} x_j
    t = np.arange(x.shape[-1], dtype=float)
    w = (1.0 - gamma ** (t + 1.0)) / (1.0 - gamma)  # Σ_{j<=t} γ^{t−j}
    return (prior_weight * alpha + s) / (prior_weight + w)


def predictable_rate(
    x: np.ndarray, alpha: float, *, half_life: float = 100.0, prior_weight: float = 10.0
) -> np.ndarray:
    """Discounted estimate of the error rate *before* each outcome (element t uses outcomes before t only):
    ``q̂_{t−1}``, the :func:`discounted_rate` after outcome t−1 (α before the first)."""
    q = discounted_rate(x, alpha, half_life=half_life, prior_weight=prior_weight)
    before = np.empty_like(q)
    if x.shape[-1]:
        before[..., 0] = alpha
        before[..., 1:] = q[..., :-1]
    return before


def kelly_bets(x: np.ndarray, alpha: float, *, half_life: float = 100.0, prior_weight: float = 10.0) -> np.ndarray:
    """Predictable bets ``λ_t >= 0`` against "error rate <= α" (before the per-m cap), shape of ``x``."""
    q = predictable_rate(x, alpha, half_life=half_life, prior_weight=prior_weight)
    return np.maximum((q - alpha) / (alpha * (1.0 - alpha)), 0.0)


def log_wealth(x: np.ndarray, m: float, bets: np.ndarray) -> np.ndarray:
    """``log K_t(m)`` for every t: cumulative log of ``1 + min(λ_i, C/m)(x_i − m)``, shape of ``x``."""
    x = np.asarray(x, dtype=float)
    lam = bets if m <= 0 else np.minimum(bets, BET_CAP / m)
    return np.cumsum(np.log1p(lam * (x - m)), axis=-1)


@dataclass
class Alarm:
    """The error-rate alarm over one ordered stream of accepted decisions with known outcomes.

    Arrays have one entry per outcome (n,): ``errors`` the outcomes, ``log_e`` the log-wealth
    ``log K_t(α)`` (the e-process), ``lower`` the running lower confidence bound of the error rate
    (resolution of ``grid``), ``estimate`` the running error rate. ``first_alarm`` is the index of
    the outcome at which ``K_t(α) >= 1/δ`` first held (None if never). ``recent`` is the discounted
    recent error rate the bets follow.

    Read ``lower`` as: with probability at least 1 − δ, the error rate has been at least this high
    (for a constant rate: the rate is at least this high), at every t simultaneously.
    """

    alpha: float
    delta: float
    errors: np.ndarray
    log_e: np.ndarray
    lower: np.ndarray
    estimate: np.ndarray
    first_alarm: int | None
    params: dict
    recent: np.ndarray | None = None

    @property
    def fired(self) -> bool:
        return self.first_alarm is not None

    @property
    def threshold(self) -> float:
        """``log(1/δ)``: the log-wealth at which the alarm fires."""
        return math.log(1.0 / self.delta)

    def to_dict(self, max_points: int = 400) -> dict:
        """JSON-ready summary; the curves are thinned to at most ``max_points`` (the alarm point kept)."""
        n = int(self.errors.size)
        idx = thinned_points(n, max_points, self.first_alarm)
        return {
            "alpha": self.alpha,
            "delta": self.delta,
            "n_outcomes": n,
            "n_errors": int(self.errors.sum()) if n else 0,
            "fired": self.fired,
            "first_alarm_outcome": self.first_alarm,
            "e_value": float(math.exp(min(self.log_e[-1], 700.0))) if n else 1.0,
            "max_e_value": float(math.exp(min(self.log_e.max(), 700.0))) if n else 1.0,
            "lower_bound": float(self.lower[-1]) if n else 0.0,
            "estimate": float(self.estimate[-1]) if n else None,
            "recent": float(self.recent[-1]) if n and self.recent is not None else None,
            "method": "betting e-process, predictable Kelly plug-in (Waudby-Smith & Ramdas 2023)",
            "params": self.params,
            "curve": {
                "outcome": idx.tolist(),
                "log_e": self.log_e[idx].tolist() if n else [],
                "lower": self.lower[idx].tolist() if n else [],
                "estimate": self.estimate[idx].tolist() if n else [],
                "recent": self.recent[idx].tolist() if n and self.recent is not None else [],
            },
        }


def confidence_lower(x: np.ndarray, bets: np.ndarray, delta: float, grid: np.ndarray) -> np.ndarray:
    """Running lower confidence bound ``L_t = max{m in grid : max_{s<=t} log K_s(m) >= log(1/δ)}`` (0 if none).

    Uses that ``K_t(m)`` is non-increasing in ``m``: the rates rejected by time t form ``[0, L_t]``.
    One pass over the grid; memory is that of ``x``.
    """
    thr = math.log(1.0 / delta)
    lower = np.zeros(np.shape(x))
    for m in np.sort(grid):  # ascending: a larger rejected m overwrites a smaller one
        if m <= 0:
            continue
        rejected = np.maximum.accumulate(log_wealth(x, float(m), bets), axis=-1) >= thr
        lower = np.where(rejected, m, lower)
    return lower


def error_rate_alarm(
    errors: np.ndarray,
    alpha: float,
    delta: float,
    *,
    half_life: float = 100.0,
    prior_weight: float = 10.0,
    with_bound: bool = True,
) -> Alarm:
    """Run the alarm over ``errors`` (n,) in arrival order (1 = an accepted decision was wrong).

    Parameters
    ----------
    errors : (n,) 0/1 outcomes of accepted decisions, oldest first
    alpha : the policy's promised error rate among accepted decisions, in (0, 1)
    delta : allowed probability of ever raising a false alarm, in (0, 1)
    with_bound : also compute the confidence sequence (one pass per grid point)
    """
    if not (0.0 < alpha < 1.0 and 0.0 < delta < 1.0):
        raise ValueError(f"alpha {alpha} and delta {delta} must be in (0, 1)")
    x = np.asarray(errors, dtype=float).reshape(-1)
    bets = kelly_bets(x, alpha, half_life=half_life, prior_weight=prior_weight)
    log_e = log_wealth(x, alpha, bets)
    hits = np.flatnonzero(log_e >= math.log(1.0 / delta))
    lower = confidence_lower(x, bets, delta, default_grid(alpha)) if with_bound else np.zeros_like(x)
    estimate = np.cumsum(x) / np.arange(1, x.size + 1) if x.size else x
    return Alarm(
        alpha,
        delta,
        x.astype(np.int8),
        log_e,
        lower,
        estimate,
        int(hits[0]) if hits.size else None,
        {"half_life": half_life, "prior_weight": prior_weight, "bet_cap": BET_CAP},
        discounted_rate(x, alpha, half_life=half_life, prior_weight=prior_weight),
    )


def first_crossings(errors: np.ndarray, alpha: float, delta: float, **kw: float) -> np.ndarray:
    """Index of the first alarm per stream, (n_streams,) int, −1 where it never fires (simulations)."""
    x = np.asarray(errors, dtype=float)
    log_e = log_wealth(x, alpha, kelly_bets(x, alpha, **kw))
    hit = log_e >= math.log(1.0 / delta)
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1), -1)
