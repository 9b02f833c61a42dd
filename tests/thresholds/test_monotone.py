"""Certification is monotone in α (issue 15 item 3): certified at α ⇒ certified at every larger α.

Same data, same options, same seed; only α changes. The property is checked over random runs
(hypothesis) through the same path as ``workbench thresholds`` (:func:`certified_frontier`: the
calibrator carve, the held-apart order part, fixed-sequence or Holm, pooled or per class).

On the code before issue 15 (test order learned per α) this fails with four falsifying runs, e.g.
seed 0, n 163, 2 options, scale 1, δ 0.05, pooled: certified at 0.14–0.18, not at 0.20–0.22.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.thresholds.synth import choice_data
from tests.thresholds.test_choose import _answers
from workbench.thresholds.choose import ThresholdOptions, certified_frontier

SWEEP = np.round(np.arange(0.02, 0.52, 0.02), 2)  # 25 values of α


def _assert_monotone(sels, alphas) -> None:
    """Certified at α ⇒ certified at every larger α; the certified calibration coverage never shrinks."""
    cert = [s.certified and s.feasible for s in sels]
    marks = "".join("Y" if c else "." for c in cert)
    if any(cert):
        first = cert.index(True)
        assert all(cert[first:]), f"certified at α={alphas[first]} but not at every larger α: {marks}"
    acc = [s.calibration["n_accepted"] for s in sels]
    assert all(b >= a for a, b in zip(acc, acc[1:])), f"certified coverage shrinks as α grows: {acc}"
    per = [s.guarantee["classes"] for s in sels if s.guarantee and "classes" in s.guarantee]
    for c in per[0] if per else {}:
        ok = [p[c]["certified"] for p in per]
        if any(ok):
            assert all(ok[ok.index(True) :]), f"option {c} loses its certificate as α grows"
        n = [p[c]["accepted"] for p in per]
        assert all(b >= a for a, b in zip(n, n[1:])), f"option {c}: accepted items shrink as α grows: {n}"


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,  # the same 100 runs every time: a failure is reproducible, never flaky
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(60, 600),
    k=st.integers(2, 5),
    scale=st.floats(0.5, 3.0),
    temperature=st.floats(0.5, 1.5),
    delta=st.sampled_from([0.05, 0.1, 0.2]),
    method=st.sampled_from(["fixed-sequence", "fixed-sequence", "fixed-sequence", "holm"]),
    per_class=st.booleans(),
    order_fraction=st.sampled_from([0.3, 0.3, 0.3, 0.5, 0.0]),
    calibrate=st.sampled_from(["none", "temperature"]),
)
def test_certified_at_alpha_implies_certified_at_every_larger_alpha(
    seed, n, k, scale, temperature, delta, method, per_class, order_fraction, calibrate
):
    probs, labels = choice_data(np.random.default_rng(seed), n, k=k, scale=scale, temperature=temperature)
    cal = _answers(probs, labels, "choice")
    opts = ThresholdOptions(
        delta=delta,
        method=method,
        per_class=per_class,
        order_fraction=order_fraction,
        calibrate=calibrate,
        grid=20,
        seed=seed,
    )
    _assert_monotone(certified_frontier(cal, opts, SWEEP), SWEEP)
