"""Acceptance 3: the anytime-valid alarm, proved by simulation and cross-checked against direct computation.

Streams are 0/1 errors of accepted decisions. ≥ 200 seeded streams per scenario:
- no shift (error α/2 throughout, and the boundary case α throughout): the share of streams that
  *ever* alarm stays ≤ δ (Ville's inequality), although the alarm is checked after every outcome;
- a shift α/2 → 2α at a known point: the alarm fires after it in ≥ 95% of streams; the false-alarm
  rate and the median detection delay are printed;
- peeking at a fixed-sample (Wilson) interval after every outcome does inflate false alarms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.monitor.alarm_reference import (
    confidence_lower,
    error_rate_alarm,
    first_crossings,
    kelly_bets,
    log_wealth,
    predictable_rate,
)
from workbench.metrics.reliability import wilson_interval
from workbench.monitor.sequential import BET_CAP, AlarmStream, default_grid

ALPHA, DELTA = 0.05, 0.1
N_STREAMS, N_PRE, N_POST = 400, 3000, 3000


def _streams(seed: int, p_pre: float, p_post: float, n_pre: int = N_PRE, n_post: int = N_POST) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.r_[np.full(n_pre, p_pre), np.full(n_post, p_post)]
    return (rng.random((N_STREAMS, n_pre + n_post)) < p).astype(np.int8)


def test_vectorised_e_process_equals_a_direct_loop():
    rng = np.random.default_rng(1)
    x = (rng.random(700) < np.r_[np.full(300, 0.02), np.full(400, 0.2)]).astype(float)
    half_life, prior = 50.0, 10.0
    gamma = 2.0 ** (-1.0 / half_life)
    s = w = 0.0
    log_k = {m: 0.0 for m in (0.01, ALPHA, 0.3)}
    want = {m: [] for m in log_k}
    q_direct = []
    for xt in x:  # the published recipe, one outcome at a time
        q = (prior * ALPHA + s) / (prior + w)
        q_direct.append(q)
        lam = max((q - ALPHA) / (ALPHA * (1 - ALPHA)), 0.0)
        for m in log_k:
            log_k[m] += math.log(1 + min(lam, BET_CAP / m) * (xt - m))
            want[m].append(log_k[m])
        s, w = gamma * s + xt, gamma * w + 1.0
    np.testing.assert_allclose(
        predictable_rate(x, ALPHA, half_life=half_life, prior_weight=prior), q_direct, rtol=1e-12
    )
    bets = kelly_bets(x, ALPHA, half_life=half_life, prior_weight=prior)
    for m in log_k:
        np.testing.assert_allclose(log_wealth(x, m, bets), want[m], rtol=1e-10, atol=1e-12)


def test_constant_bets_match_the_closed_form_and_wealth_falls_with_m():
    rng = np.random.default_rng(2)
    x = (rng.random(500) < 0.1).astype(float)
    lam = np.full(x.size, 2.0)
    s, n = np.cumsum(x), np.arange(1, x.size + 1)
    for m in (0.02, 0.05, 0.2):
        lm = min(2.0, BET_CAP / m)
        closed = s * math.log1p(lm * (1 - m)) + (n - s) * math.log1p(-lm * m)
        np.testing.assert_allclose(log_wealth(x, m, lam), closed, rtol=1e-10)
    # K_t(m) is non-increasing in m, so the rejected rates form an interval [0, L_t]
    bets = kelly_bets(x, ALPHA)
    grid = default_grid(ALPHA)
    curves = np.array([log_wealth(x, float(m), bets) for m in grid if m > 0])
    assert (np.diff(curves, axis=0) <= 1e-12).all()


def test_no_shift_false_alarms_stay_below_delta():
    rates = {}
    for name, p, seed in (("error α/2 throughout", ALPHA / 2, 10), ("error = α throughout (boundary)", ALPHA, 11)):
        fc = first_crossings(_streams(seed, p, p), ALPHA, DELTA)
        rates[name] = float(np.mean(fc >= 0))
        print(
            f"\n[no shift: {name}] {N_STREAMS} streams x {N_PRE + N_POST} outcomes: false-alarm rate {rates[name]:.3f} (δ={DELTA})"
        )
    assert rates["error α/2 throughout"] <= DELTA
    # Ville: P(ever) <= δ exactly; allow three Monte-Carlo standard errors at the boundary
    assert rates["error = α throughout (boundary)"] <= DELTA + 3 * math.sqrt(DELTA * (1 - DELTA) / N_STREAMS)


def test_shift_from_half_alpha_to_twice_alpha_is_detected():
    fc = first_crossings(_streams(20, ALPHA / 2, 2 * ALPHA), ALPHA, DELTA)
    false = float(np.mean((fc >= 0) & (fc < N_PRE)))
    detected = fc >= N_PRE
    delay = fc[detected] - N_PRE
    print(
        f"\n[shift α/2 -> 2α after {N_PRE} outcomes] {N_STREAMS} streams: false-alarm rate before the shift {false:.3f}, "
        f"detected {detected.mean():.3f}, median delay {np.median(delay):.0f} outcomes "
        f"(p10 {np.percentile(delay, 10):.0f}, p90 {np.percentile(delay, 90):.0f})"
    )
    assert false <= DELTA
    assert detected.mean() >= 0.95
    assert np.median(delay) < N_POST / 2


def test_peeking_at_a_fixed_sample_interval_inflates_false_alarms():
    x = _streams(30, ALPHA, ALPHA).astype(float)
    k, n = np.cumsum(x, axis=1), np.arange(1, x.shape[1] + 1)
    low, _ = wilson_interval(k, np.broadcast_to(n, k.shape))
    peeking = float(np.mean((low[:, 30:] > ALPHA).any(axis=1)))  # "significant" at some look
    e_process = float(np.mean(first_crossings(x, ALPHA, DELTA) >= 0))
    print(f"\n[error = α, look after every outcome] Wilson 95% peeking: {peeking:.3f}; e-process: {e_process:.3f}")
    assert peeking > 2 * DELTA > e_process


def test_confidence_sequence_covers_the_true_rate_uniformly_and_matches_the_alarm():
    p = 0.08
    x = _streams(40, p, p, 1500, 1500).astype(float)[:250]
    bets = kelly_bets(x, ALPHA)
    lower = confidence_lower(x, bets, DELTA, default_grid(ALPHA))
    miss = float(np.mean((lower > p).any(axis=1)))
    print(f"\n[confidence sequence, error {p}] share of streams ever excluding the true rate: {miss:.3f} (δ={DELTA})")
    assert miss <= DELTA + 3 * math.sqrt(DELTA * (1 - DELTA) / 250)
    assert (np.diff(lower, axis=1) >= 0).all()  # running intersection
    al = error_rate_alarm(x[0], ALPHA, DELTA)
    crossed = np.flatnonzero(al.lower >= ALPHA)
    assert al.first_alarm == (int(crossed[0]) if crossed.size else None)  # alarm ⇔ the bound reaches α


def test_the_alarm_rejects_bad_parameters():
    with pytest.raises(ValueError):
        AlarmStream(0.0, 0.1, 3)
