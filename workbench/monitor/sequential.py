"""An anytime-valid alarm on the error rate of auto-accepted decisions (testing by betting).

After every outcome ``x_t`` (1 = the accepted answer was wrong, 0 = right) a gambler who bets
*against* "the error rate is at most α" multiplies her wealth by ``1 + λ_t (x_t − α)``, with a bet
``λ_t >= 0`` chosen from the past only. Under the null — the conditional error probability of
every accepted decision is at most α — her wealth ``K_t(α) = Π_{i<=t} (1 + λ_i (x_i − α))`` is a
non-negative supermartingale with ``K_0 = 1``, so by Ville's inequality

    P(∃ t: K_t(α) >= 1/δ) <= δ.

The alarm fires the first time ``K_t(α) >= 1/δ``: however often someone looks, the chance of a
false alarm over the whole (infinite) stream stays below δ. Looking at a fixed-sample interval
after every outcome does not have this property (its false-alarm rate grows with the number of
looks).

This is the betting e-process of Waudby-Smith & Ramdas (2023), "Estimating means of bounded
random variables by betting", JRSS-B 86(1), with their predictable plug-in (Kelly) bet for a
Bernoulli mean: ``λ = (q − m) / (m (1 − m))`` maximises the expected log-wealth when the error
rate is ``q``. The bet uses a discounted estimate ``q̂_{t−1}`` of the recent error rate (memory
``half_life`` outcomes, shrunk towards α by ``prior_weight`` pseudo-outcomes), so wealth is not
staked while the error rate looks fine and betting starts soon after it rises. ``λ`` is clipped
to ``[0, c/m]`` (``c`` < 1) so every factor stays positive.

Because the bets do not depend on the hypothesised rate ``m`` and each factor is non-increasing
in ``m``, ``K_t(m)`` is non-increasing in ``m``: ``{m : K_t(m) < 1/δ}`` is an interval ``(L_t, 1]``,
and its running intersection gives a lower *confidence sequence* for a constant error rate. The
alarm fires exactly when ``L_t`` reaches α.

The library computes the alarm over a stream fed in chunks (:class:`AlarmStream`, memory independent of the
stream's length); ``tests/monitor/alarm_reference.py`` holds the same alarm over a whole array, vectorised
over streams, that it equals to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

#: Largest bet as a fraction of the bankroll that a loss at rate m can take (factors stay >= 1 − C).
BET_CAP = 0.9


def default_grid(alpha: float) -> np.ndarray:
    """Hypothesised error rates for the confidence sequence: fine around α, coarse elsewhere; α exactly in it."""
    return np.unique(np.r_[np.linspace(0.0, 1.0, 101), alpha * np.linspace(0.0, 3.0, 121), alpha])


def thinned_points(n: int, max_points: int = 400, first_alarm: int | None = None) -> np.ndarray:
    """Outcome indices a curve of ``n`` points is drawn at: at most ``max_points`` evenly spread (and the alarm)."""
    idx = np.unique(np.r_[np.linspace(0, n - 1, min(n, max_points)).round().astype(int), []]).astype(int)
    if first_alarm is not None:
        idx = np.union1d(idx, [first_alarm])
    return idx[(idx >= 0) & (idx < n)] if n else np.array([], int)


@dataclass
class AlarmSummary:
    """What :class:`AlarmStream` keeps of the alarm over a long stream: the figures at chosen outcome
    indices (``points``: sorted indices; ``log_e``, ``lower``, ``estimate``, ``recent`` at them) and the
    stream's totals. ``to_dict()`` is the alarm's JSON summary (curves thinned by :func:`thinned_points`)."""

    alpha: float
    delta: float
    n: int
    n_errors: int
    first_alarm: int | None
    max_log_e: float
    points: np.ndarray
    log_e: np.ndarray
    lower: np.ndarray
    estimate: np.ndarray
    recent: np.ndarray
    params: dict

    @property
    def fired(self) -> bool:
        return self.first_alarm is not None

    def at(self, i: int) -> tuple[float, float, float, float]:
        """(log_e, lower, estimate, recent) after outcome ``i`` (an index given to the stream as ``keep``)."""
        j = int(np.searchsorted(self.points, i))
        if j >= self.points.size or self.points[j] != i:
            raise KeyError(f"outcome {i} was not kept by the alarm stream")
        return float(self.log_e[j]), float(self.lower[j]), float(self.estimate[j]), float(self.recent[j])

    def to_dict(self, max_points: int = 400) -> dict:
        n = self.n
        idx = thinned_points(n, max_points, self.first_alarm)
        sel = np.searchsorted(self.points, idx)
        last = self.at(n - 1) if n else None
        return {
            "alpha": self.alpha,
            "delta": self.delta,
            "n_outcomes": n,
            "n_errors": self.n_errors,
            "fired": self.fired,
            "first_alarm_outcome": self.first_alarm,
            "e_value": float(math.exp(min(last[0], 700.0))) if last else 1.0,
            "max_e_value": float(math.exp(min(self.max_log_e, 700.0))) if n else 1.0,
            "lower_bound": last[1] if last else 0.0,
            "estimate": last[2] if last else None,
            "recent": last[3] if last else None,
            "method": "betting e-process, predictable Kelly plug-in (Waudby-Smith & Ramdas 2023)",
            "params": self.params,
            "curve": {
                "outcome": idx.tolist(),
                "log_e": self.log_e[sel].tolist(),
                "lower": self.lower[sel].tolist(),
                "estimate": self.estimate[sel].tolist(),
                "recent": self.recent[sel].tolist(),
            },
        }


def _carry_accumulate(ufunc: np.ufunc, carry: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``ufunc.accumulate`` of ``x`` continuing from ``carry`` (a 1-element array: the previous chunk's last
    value): the same operations in the same order as one accumulate over the whole stream, so the same doubles."""
    return ufunc.accumulate(np.concatenate([carry, x]))[1:]


class AlarmStream:
    """The alarm over a stream fed in chunks (oldest first), in memory independent of its length.

    ``n`` is the stream's length (known beforehand: the curve is thinned over it) and ``keep`` extra outcome
    indices whose figures the caller needs (e.g. each window's last outcome). Every figure equals that of
    the alarm computed on the whole array (``tests/monitor/alarm_reference.py``) exactly (same floating-point operations, in the same order):
    the discounted rate continues the IIR filter from its state, the cumulative sums and running maxima
    continue from the previous chunk's last values.
    """

    def __init__(
        self,
        alpha: float,
        delta: float,
        n: int,
        *,
        keep: Sequence[int] | np.ndarray = (),
        half_life: float = 100.0,
        prior_weight: float = 10.0,
        max_points: int = 400,
    ):
        if not (0.0 < alpha < 1.0 and 0.0 < delta < 1.0):
            raise ValueError(f"alpha {alpha} and delta {delta} must be in (0, 1)")
        self.alpha, self.delta, self.n = float(alpha), float(delta), int(n)
        self.half_life, self.prior_weight = half_life, prior_weight
        self.gamma = 2.0 ** (-1.0 / half_life)
        self.thr = math.log(1.0 / delta)
        grid = np.sort(default_grid(alpha))
        self.grid = grid[grid > 0]
        self.keep = np.union1d(thinned_points(self.n, max_points), np.asarray(keep, dtype=int))
        self.t = 0
        self.zi = np.zeros(1)
        self.q_last = float(alpha)
        self.log_e_last = np.zeros(1)
        self.sum_last = np.zeros(1)
        self.lw_last = np.zeros(self.grid.size)
        self.lw_max = np.full(self.grid.size, -np.inf)
        self.n_errors = 0
        self.first_alarm: int | None = None
        self.max_log_e = -np.inf
        self._kept: list[tuple[np.ndarray, ...]] = []

    def add(self, errors: np.ndarray) -> None:
        """The next outcomes (1 = an accepted decision was wrong), oldest first."""
        x = np.asarray(errors, dtype=float).reshape(-1)
        m = x.size
        if not m:
            return
        t0, alpha = self.t, self.alpha
        s, self.zi = lfilter([1.0], [1.0, -self.gamma], x, zi=self.zi * 1.0)
        t = np.arange(t0, t0 + m, dtype=float)
        w = (1.0 - self.gamma ** (t + 1.0)) / (1.0 - self.gamma)
        q = (self.prior_weight * alpha + s) / (self.prior_weight + w)  # the discounted recent error rate
        before = np.empty_like(q)
        before[0] = self.q_last
        before[1:] = q[:-1]
        self.q_last = float(q[-1])
        bets = np.maximum((before - alpha) / (alpha * (1.0 - alpha)), 0.0)
        lam = np.minimum(bets, BET_CAP / alpha)
        log_e = _carry_accumulate(np.add, self.log_e_last, np.log1p(lam * (x - alpha)))
        self.log_e_last = log_e[-1:]
        lower = np.zeros(m)
        for j, g in enumerate(self.grid):  # ascending: a larger rejected rate overwrites a smaller one
            lw = _carry_accumulate(np.add, self.lw_last[j : j + 1], np.log1p(np.minimum(bets, BET_CAP / g) * (x - g)))
            self.lw_last[j] = lw[-1]
            run = _carry_accumulate(np.maximum, self.lw_max[j : j + 1], lw)
            self.lw_max[j] = run[-1]
            lower = np.where(run >= self.thr, g, lower)
        csum = _carry_accumulate(np.add, self.sum_last, x)
        self.sum_last = csum[-1:]
        estimate = csum / (t + 1.0)
        hits = np.flatnonzero(log_e >= self.thr)
        if self.first_alarm is None and hits.size:
            self.first_alarm = t0 + int(hits[0])
        self.max_log_e = max(self.max_log_e, float(log_e.max()))
        self.n_errors += int(x.sum())
        lo, hi = np.searchsorted(self.keep, [t0, t0 + m])
        sel = self.keep[lo:hi] - t0
        if self.first_alarm is not None and t0 <= self.first_alarm < t0 + m:
            sel = np.union1d(sel, [self.first_alarm - t0])
        self._kept.append((sel + t0, log_e[sel], lower[sel], estimate[sel], q[sel]))
        self.t += m

    def finish(self) -> AlarmSummary:
        if self.t != self.n:
            raise ValueError(f"the alarm stream was told {self.n} outcomes and got {self.t}")
        cols = [np.concatenate([k[i] for k in self._kept]) if self._kept else np.zeros(0) for i in range(5)]
        return AlarmSummary(
            self.alpha,
            self.delta,
            self.n,
            self.n_errors,
            self.first_alarm,
            self.max_log_e,
            cols[0].astype(int),
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            params={"half_life": self.half_life, "prior_weight": self.prior_weight, "bet_cap": BET_CAP},
        )
