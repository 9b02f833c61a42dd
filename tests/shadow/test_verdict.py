"""Verdict logic on constructed champion/challenger traffic: one case per outcome and per gate."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from tests.shadow.conftest import histogram
from workbench.shadow.drift import js_divergence, psi, window_bounds
from workbench.shadow.policies import parse_rule_options
from workbench.shadow.report import HOLD, PROMOTE, REJECT, Criteria, report_from_answers
from workbench.store.shadow import ShadowAnswers

K = 3
RULE = parse_rule_options(["tau=0.7"])


def _rows(top: np.ndarray, p_top: np.ndarray) -> np.ndarray:
    """Probability rows with ``p_top`` on option ``top`` and the rest split evenly."""
    p = np.repeat(((1 - p_top) / (K - 1))[:, None], K, axis=1)
    p[np.arange(len(top)), top] = p_top
    return p


def _traffic(
    n=2000,
    *,
    seed=0,
    wrong_rate=0.1,
    chall_wrong_confident=0.0,
    chall_conf_shift=0.1,
    chall_fail=0.0,
    chall_latency=50.0,
    known=None,
    drift=False,
) -> ShadowAnswers:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    wrong = rng.random(n) < wrong_rate
    top_c = np.where(wrong, (y + 1) % K, y)
    # the champion is unsure where it is wrong (p 0.4-0.6) and fairly sure elsewhere (0.55-0.95)
    p_c = np.where(wrong, rng.uniform(0.4, 0.6, n), rng.uniform(0.55, 0.95, n))
    top_d = top_c.copy()
    p_d = np.clip(p_c + np.where(wrong, 0.0, chall_conf_shift), 0, 0.99)
    if drift:  # the challenger's confidence climbs over time
        p_d = np.clip(np.where(wrong, p_d, np.linspace(0.6, 0.99, n)), 0, 0.99)
    confident_wrong = rng.random(n) < chall_wrong_confident
    top_d = np.where(confident_wrong, (y + 2) % K, top_d)
    p_d = np.where(confident_wrong, 0.9, p_d)
    probs_d = _rows(top_d, p_d)
    failed_d = rng.random(n) < chall_fail
    probs_d[failed_d] = np.nan
    outcome = y.copy()
    if known is not None:
        outcome[known:] = -1
    return ShadowAnswers(
        shadow="t",
        question="intent",
        qtype="choice",
        option_ids=["a", "b", "c"],
        item_ids=np.asarray([f"i{i}" for i in range(n)], dtype=object),
        ts=np.arange(n).astype("datetime64[s]").astype("datetime64[us]"),
        seq=np.arange(1, n + 1),
        champion_probs=_rows(top_c, p_c),
        challenger_probs=probs_d,
        champion_failure=np.full(n, None, dtype=object),
        challenger_failure=np.where(failed_d, "timeout", None).astype(object),
        champion_logged=np.full(n, None, dtype=object),
        outcome=outcome,
        champion_latency_ms=rng.gamma(4, 25, n),
        challenger_latency_ms=rng.gamma(4, chall_latency / 4, n),
        champion_cost_usd=np.full(n, 2e-5),
        challenger_cost_usd=np.full(n, 1e-5),
    )


def _report(s, criteria=None, challenger=RULE):
    return report_from_answers(
        [s],
        champion_policy=RULE,
        challenger_policy=challenger,
        criteria=criteria or Criteria(max_error_increase=0.01, max_p95_latency_ms=400),
        n_boot=300,
        seed=1,
    )


def _gate(report, name):
    return next(g for g in report.gates if g.gate == name)


def test_promote_when_coverage_rises_and_error_does_not():
    r = _report(_traffic())
    assert r.verdict == PROMOTE
    assert all(g.status == "pass" for g in r.gates)
    q = r.questions[0]
    assert q["review_load"]["coverage_gain"] > 0.05
    # wrong answers stay unaccepted on both sides: no error at all among accepted
    assert q["error"]["error_among_accepted"]["a"] == q["error"]["error_among_accepted"]["b"] == 0.0
    assert q["cost_per_1000"]["change"] == pytest.approx(-0.01)


def test_reject_when_challenger_accepts_confident_errors():
    r = _report(_traffic(chall_wrong_confident=0.08))
    assert r.verdict == REJECT
    err = _gate(r, "error")
    assert err.status == "fail" and err.value > 0.05
    assert any(reason.startswith("error") for reason in r.reasons)
    d = r.questions[0]["directional"]
    assert d["challenger_accepts_where_champion_reviews"] > 0 and d["both_accept_different_answer"] > 0


def test_reject_on_p95_latency_and_on_failures():
    slow = _report(_traffic(chall_latency=300.0))
    assert slow.verdict == REJECT and _gate(slow, "latency").status == "fail"
    flaky = _report(_traffic(chall_fail=0.05))
    assert flaky.verdict == REJECT and _gate(flaky, "failures").status == "fail"
    assert flaky.questions[0]["failures"]["challenger"]["by_kind"]["timeout"] == pytest.approx(100, abs=40)


def test_reject_when_coverage_clearly_misses_the_required_gain():
    r = _report(_traffic(chall_conf_shift=-0.2), Criteria(min_coverage_gain=0.05, max_error_increase=0.01))
    assert r.verdict == REJECT and _gate(r, "coverage").status == "fail"
    assert r.questions[0]["review_load"]["change"] > 0


def test_hold_without_enough_outcomes_or_with_drift_or_without_a_policy():
    few = _report(_traffic(known=30), Criteria(min_outcomes=100, max_error_increase=0.01))
    assert few.verdict == HOLD and _gate(few, "error").status == "inconclusive"
    assert "30 known outcomes" in _gate(few, "error").message
    drifting = _report(_traffic(drift=True))
    assert drifting.verdict == HOLD and _gate(drifting, "drift").status == "fail"
    assert drifting.questions[0]["drift"]["max_psi_challenger"] > 0.25
    assert drifting.questions[0]["drift"]["max_psi_champion"] < 0.1
    blind = _report(_traffic(), challenger=None)
    assert blind.verdict == HOLD and blind.questions[0]["directional"] is None


def test_agreement_and_flip_matrix_count_the_top_choices():
    s = _traffic(chall_wrong_confident=0.1, n=500)
    r = _report(s)
    q = r.questions[0]
    top_c, top_d = s.champion_probs.argmax(1), s.challenger_probs.argmax(1)
    assert q["agreement"]["rate"] == pytest.approx(np.mean(top_c == top_d))
    flips = np.asarray(q["flip_matrix"]["counts"])
    assert flips.sum() == 500 and np.trace(flips) == np.sum(top_c == top_d)
    assert flips[0, 2] == np.sum((top_c == 0) & (top_d == 2))
    assert q["agreement"]["low"] < q["agreement"]["rate"] < q["agreement"]["high"]


def test_drift_measures_match_their_definitions():
    rng = np.random.default_rng(0)
    a, b = rng.beta(5, 2, 4000), rng.beta(2, 2, 4000)
    ha, hb = histogram(a), histogram(b)
    assert ha.sum() == pytest.approx(1.0) and len(ha) == 10
    assert js_divergence(ha, hb) == pytest.approx(jensenshannon(ha, hb, base=2) ** 2, abs=1e-12)
    ra, rb = np.maximum(ha, 1e-4), np.maximum(hb, 1e-4)
    assert psi(ha, hb) == pytest.approx(np.sum((rb - ra) * np.log(rb / ra)))
    assert psi(ha, ha) == 0.0 and js_divergence(ha, ha) == 0.0
    assert window_bounds(100, 5) == [(0, 20), (20, 40), (40, 60), (60, 80), (80, 100)]
    assert window_bounds(30, 5) == [(0, 30)]  # too few items for several windows


def test_drift_by_calendar_period():
    s = _traffic(n=600)  # one request per second: 10 one-minute windows
    r = report_from_answers([s], champion_policy=RULE, challenger_policy=RULE, n_boot=20, period="1min")
    windows = r.questions[0]["drift"]["windows"]
    assert [w["n"] for w in windows] == [60] * 10
    assert windows[1]["start"].startswith("1970-01-01T00:01:00") and windows[0]["psi_challenger"] == 0.0


def _with_failures(s: ShadowAnswers, champion_rows: np.ndarray, challenger_rows: np.ndarray, kind: str) -> None:
    for rows, probs, failure in (
        (champion_rows, s.champion_probs, s.champion_failure),
        (challenger_rows, s.challenger_probs, s.challenger_failure),
    ):
        probs[rows] = np.nan
        failure[rows] = kind


def test_failures_are_judged_in_excess_of_the_champions_on_the_same_requests():
    """A challenger identical to the champion, both refusing the same 5% with 422, is not rejected for failures;
    the same 5% of failures on requests the champion answered is."""
    n = 2000
    same = _traffic(n, chall_conf_shift=0.0)
    same.challenger_probs = same.champion_probs.copy()
    refused = np.arange(n) % 20 == 7  # 5%
    _with_failures(same, refused, refused, "http_422")
    r = _report(same)
    gate = _gate(r, "failures")
    assert gate.status == "pass" and gate.value == 0.0, gate
    assert "100 of them on requests the champion failed too" in gate.message
    paired = r.questions[0]["failures"]["paired"]
    assert paired == {"champion_only": 0, "challenger_only": 0, "both": 100, "challenger_excess_rate": 0.0}
    assert r.questions[0]["failures"]["challenger"]["rate"] == pytest.approx(0.05)  # the raw rate is still shown
    assert r.verdict != REJECT

    apart = _traffic(n, chall_conf_shift=0.0)
    apart.challenger_probs = apart.champion_probs.copy()
    _with_failures(apart, refused, np.roll(refused, 1), "http_422")  # the challenger fails on other requests
    r = _report(apart)
    gate = _gate(r, "failures")
    assert gate.status == "fail" and gate.value == pytest.approx(0.05) and r.verdict == REJECT
    assert r.questions[0]["failures"]["paired"]["both"] == 0


def test_failures_are_paired_in_the_streamed_report_too(tmp_path):
    """The same rule through the store (``import_traffic`` + ``shadow_report``, counts paired in DuckDB)."""
    import json

    from workbench.schema import DecisionSchema
    from workbench.shadow.report import shadow_report
    from workbench.store.db import connect
    from workbench.store.shadow import import_traffic

    s = _traffic(1000, chall_conf_shift=0.0)
    schema = DecisionSchema.from_dict(
        {"questions": {"intent": {"type": "choice", "instructions": "Which?", "criteria": dict.fromkeys("abc")}}}
    )
    con = connect(tmp_path / "wb.duckdb")
    try:
        for name, offset in (("same", 0), ("apart", 1)):
            lines = []
            for i in range(s.n):
                answer = {
                    "answers": {"intent": {"type": "choice", "probabilities": dict(zip("abc", s.champion_probs[i]))}}
                }
                row = {"item_id": f"i{i}", "champion": answer, "challenger": answer, "outcome": "abc"[s.outcome[i]]}
                if i % 20 == 7:
                    row["champion_status"] = 422
                if (i - offset) % 20 == 7:
                    row["challenger_status"] = 422
                lines.append(json.dumps(row) + "\n")
            log = tmp_path / f"{name}.jsonl"
            log.write_text("".join(lines))
            import_traffic(con, log, shadow=name, schema=schema)
        same = shadow_report(con, "same", champion_policy=RULE, challenger_policy=RULE, n_boot=50)
        apart = shadow_report(con, "apart", champion_policy=RULE, challenger_policy=RULE, n_boot=50)
    finally:
        con.close()
    assert same.questions[0]["failures"]["challenger"]["by_kind"] == {"http_422": 50}
    assert _gate(same, "failures").status == "pass" and _gate(same, "failures").value == 0.0
    assert same.questions[0]["failures"]["paired"]["both"] == 50
    assert _gate(apart, "failures").status == "fail" and _gate(apart, "failures").value == pytest.approx(0.05)
    assert apart.verdict == REJECT
