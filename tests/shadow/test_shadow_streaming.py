"""`shadow report` streams a session from the store: the same figures as the arrays in memory.

One imported session of 3,000 requests (real DuckDB file, ``import_traffic`` of a JSON Lines log)
with what production logs carry: provider failures, a malformed answer, a challenger model the policy
does not accept, logged champion actions, outcomes for some requests, requests without a time, a
state per request. The streamed report (per-side scans, pairing and counts in DuckDB) is checked
against figures computed here straight from the rows with numpy (the formulas of the in-memory
report before streaming), against the in-memory path of the same module, across chunk sizes, and
its Poisson intervals against the multinomial bootstrap of ``metrics.bootstrap``.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.shadow.conftest import histogram
from workbench.metrics.bootstrap import mcnemar, paired_bootstrap
from workbench.metrics.slices import slice_groups
from workbench.schema import DecisionSchema
from workbench.shadow import report as shadow_report_module
from workbench.shadow.drift import psi, window_bounds
from workbench.shadow.policies import SidePolicy, is_accept, parse_rule_options
from workbench.shadow.report import ShadowSlices, report_from_answers, shadow_report
from workbench.store.db import connect
from workbench.store.shadow import ShadowAnswers, import_traffic, load_shadow
from workbench.thresholds.rules import ChoiceRule

N = 3000
OPTS = ["a", "b", "c", "d"]
CHAMPION = parse_rule_options(["intent:tau=0.6,margin=0.1"])
CHALLENGER = SidePolicy(rules={"intent": ChoiceRule(tau=0.5, margin=0.05)}, valid_models=("m2",), source="test")


def _probs(rng: np.random.Generator, y: np.ndarray, sharp: float) -> np.ndarray:
    z = rng.normal(0, 1, (len(y), len(OPTS)))
    z[np.arange(len(y)), y] += sharp
    p = np.exp(z)
    return np.round(p / p.sum(axis=1, keepdims=True), 4)


def _response(p: np.ndarray, model: str) -> dict:
    return {"model": model, "answers": {"intent": {"type": "choice", "probabilities": dict(zip(OPTS, p.tolist()))}}}


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(7)
    y = rng.integers(0, len(OPTS), N)
    pc, pd_ = _probs(rng, y, 2.0), _probs(rng, y, 2.4)
    rows = []
    for i in range(N):
        row: dict = {
            "item_id": f"r{i:05d}",
            "state": "x" * int(rng.integers(5, 200)),
            "champion": _response(pc[i], "m1"),
            "champion_latency_ms": float(rng.gamma(4.0, 30.0)),
            "challenger_latency_ms": float(rng.gamma(3.0, 25.0)),
            "champion_cost_usd": 0.0004,
            "challenger_cost_usd": 0.0002 if i % 7 else None,
        }
        if i % 53:  # a few requests have no time: they sort last and sit in no period window
            row["timestamp"] = f"2026-11-01T{(i * 3) // 3600:02d}:{(i * 3) // 60 % 60:02d}:{i * 3 % 60:02d}Z"
        if i % 41 == 0:
            row["challenger_error"] = "timeout"
        elif i % 97 == 0:  # malformed: the probabilities sum to 0.5
            row["challenger"] = _response(pd_[i] / 2, "m2")
        else:
            row["challenger"] = _response(pd_[i], "m3" if i % 10 == 3 else "m2")
        if i % 3 == 0:
            row["champion_action"] = "accept" if pc[i].max() > 0.5 else "review"
        if rng.random() < 0.4:
            row["outcome"] = OPTS[y[i]] if rng.random() < 0.85 else OPTS[(y[i] + 1) % len(OPTS)]
        rows.append(row)
    log = tmp / "traffic.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    schema = DecisionSchema.from_dict(
        {"questions": {"intent": {"type": "choice", "instructions": "Which?", "criteria": dict.fromkeys(OPTS)}}}
    )
    db = tmp / "wb.duckdb"
    con = connect(db)
    import_traffic(con, log, shadow="s", schema=schema)
    con.close()
    return db


def _report(db: Path, **kw):
    con = connect(db, read_only=True)
    try:
        return shadow_report(con, "s", champion_policy=CHAMPION, challenger_policy=CHALLENGER, **kw).to_dict()
    finally:
        con.close()


def _in_memory(db: Path, **kw):
    con = connect(db, read_only=True)
    try:
        s = load_shadow(con, "s", "intent")
        s.extra["champion_schema_hash"] = s.extra["challenger_schema_hash"] = s.extra["session"]["schema_hash"]
        return s, report_from_answers([s], champion_policy=CHAMPION, challenger_policy=CHALLENGER, **kw)
    finally:
        con.close()


def _close(a, b, path="") -> list[str]:
    """Paths where two JSON-like documents differ (numbers to 1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _close(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return [] if a is b else [f"{path}: {a} != {b}"]
        if np.isnan(a) and np.isnan(b):
            return []
        return [] if abs(a - b) <= 1e-9 * max(1.0, abs(a)) else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_streamed_figures_equal_the_old_in_memory_formulas(session):
    rep = _report(session, n_boot=200)
    q = rep["questions"][0]
    s, _ = _in_memory(session, n_boot=200)
    n, k = s.n, len(OPTS)
    assert q["n_requests"] == n == N
    # failures: recorded kinds, a malformed answer, an answer the store never got
    cf = np.array([f is not None for f in s.champion_failure])
    df = np.array([f is not None for f in s.challenger_failure])
    kinds, counts = np.unique(s.challenger_failure[df].astype(str), return_counts=True)
    assert q["failures"]["challenger"] == {"rate": df.mean(), "by_kind": dict(zip(kinds.tolist(), counts.tolist()))}
    assert set(q["failures"]["challenger"]["by_kind"]) == {"timeout", "malformed"} and not cf.any()
    # agreement and flips
    both = ~cf & ~df
    tc = np.where(np.isfinite(s.champion_probs).all(1), np.nan_to_num(s.champion_probs, nan=-1).argmax(1), -1)
    td = np.where(np.isfinite(s.challenger_probs).all(1), np.nan_to_num(s.challenger_probs, nan=-1).argmax(1), -1)
    assert q["agreement"]["rate"] == pytest.approx((tc[both] == td[both]).mean(), abs=1e-12)
    flips = np.zeros((k, k), int)
    np.add.at(flips, (tc[both], td[both]), 1)
    assert q["flip_matrix"]["counts"] == flips.tolist()
    # decisions: the logged action where the champion's log has one, else the rule; the challenger's rule
    # accepts nothing answered by m3 (its policy's valid models)
    pc, pdd = s.champion_probs, s.challenger_probs
    srt_c, srt_d = -np.sort(-np.nan_to_num(pc, nan=0), 1), -np.sort(-np.nan_to_num(pdd, nan=0), 1)
    rule_c = (srt_c[:, 0] >= 0.6) & (srt_c[:, 0] - srt_c[:, 1] >= 0.1)
    logged = np.array([a is not None for a in s.champion_logged])
    acc_c = np.where(logged, is_accept(s.champion_logged), rule_c) & ~cf
    acc_d = (srt_d[:, 0] >= 0.5) & (srt_d[:, 0] - srt_d[:, 1] >= 0.05) & (s.challenger_model == "m2") & ~df
    assert q["decisions"] == {"champion": "log+policy", "challenger": "policy"}
    d = q["directional"]
    assert d["challenger_accepts_where_champion_reviews"] == int((acc_d & ~acc_c).sum())
    assert d["champion_accepts_where_challenger_reviews"] == int((acc_c & ~acc_d).sum())
    assert d["both_accept_same_answer"] == int((acc_c & acc_d & (tc == td)).sum())
    assert d["both_review"] == int((~acc_c & ~acc_d).sum())
    assert q["review_load"]["champion"] == pytest.approx(1 - acc_c.mean(), abs=1e-12)
    assert q["review_load"]["challenger"] == pytest.approx(1 - acc_d.mean(), abs=1e-12)
    # error on known outcomes
    known = s.outcome >= 0
    yk = s.outcome[known]
    err_c, err_d = acc_c[known] & (tc[known] != yk), acc_d[known] & (td[known] != yk)
    e = q["error"]
    assert e["n_known"] == int(known.sum()) and e["n_known_accepted_by_challenger"] == int(acc_d[known].sum())
    assert e["error_among_accepted"]["a"] == pytest.approx(err_c.sum() / acc_c[known].sum(), abs=1e-12)
    assert e["error_among_accepted"]["b"] == pytest.approx(err_d.sum() / acc_d[known].sum(), abs=1e-12)
    assert e["errors_per_request"]["difference"] == pytest.approx(err_d.mean() - err_c.mean(), abs=1e-12)
    assert e["mcnemar_top_accuracy"] == mcnemar(tc[known] == yk, td[known] == yk).to_dict()
    # cost and latency per request
    lat = s.challenger_latency_ms
    assert q["latency_ms"]["challenger"]["p95"] == pytest.approx(np.percentile(lat, 95), rel=1e-12)
    cost = s.challenger_cost_usd[np.isfinite(s.challenger_cost_usd)]
    assert q["cost_per_1000"]["challenger"] == pytest.approx(cost.mean() * 1000, rel=1e-12)
    # drift: equal-count windows in arrival order, p_top histograms against the first window
    bounds = window_bounds(n, 5)
    ptop_d = np.where(np.isfinite(pdd).all(1), srt_d[:, 0], np.nan)
    ref = histogram(ptop_d[bounds[0][0] : bounds[0][1]])
    got = [w["psi_challenger"] for w in q["drift"]["windows"]]
    assert got == pytest.approx([psi(ref, histogram(ptop_d[a:b])) for a, b in bounds], abs=1e-12)
    assert [w["first_seq"] for w in q["drift"]["windows"]] == [int(s.seq[a]) for a, _ in bounds]


def test_streamed_report_equals_the_in_memory_report_whatever_the_chunks(session, monkeypatch):
    _, mem = _in_memory(session, n_boot=300, seed=3)
    whole = _report(session, n_boot=300, seed=3)
    monkeypatch.setattr(shadow_report_module, "BATCH_ROWS", 257)
    chunked = _report(session, n_boot=300, seed=3)
    expected = mem.to_dict()
    for doc in (whole, chunked):
        assert _close(doc["questions"], expected["questions"]) == []
        assert doc["verdict"] == expected["verdict"] and doc["gates"] == expected["gates"]


def select_rows(s: ShadowAnswers, mask: np.ndarray) -> ShadowAnswers:
    """``s`` restricted to the rows where ``mask`` (n,) is true, in the same order."""
    kw = {}
    for f in fields(s):
        v = getattr(s, f.name)
        kw[f.name] = v[mask] if isinstance(v, np.ndarray) and v.shape[:1] == (s.n,) else v
    kw["extra"] = dict(s.extra)
    return ShadowAnswers(**kw)


def slice_report(
    answers: list[ShadowAnswers],
    values: pd.DataFrame,
    *,
    column: str,
    order: list[str] | None = None,
    source: str = "",
    **kwargs: Any,
) -> ShadowSlices:
    """The slices in memory, the reference of the streamed ``--slice`` report: :func:`report_from_answers`
    (with ``kwargs``) on each slice's rows of ``answers``; ``values`` maps ``item_id`` to the slice value
    (missing → ``(missing)``)."""
    lookup = pd.Series(values["value"].to_numpy(dtype=object), index=values["item_id"].astype(str).to_numpy())
    lookup = lookup[~lookup.index.duplicated()]
    per_q = []
    for a in answers:
        v = lookup.reindex(pd.Index(a.item_ids.astype(str))).to_numpy(dtype=object)
        per_q.append((a, dict(slice_groups(v, order))))
    names: list[str] = []
    for _, groups in per_q:
        names += [g for g in groups if g not in names]
    out = ShadowSlices(column, names, source)
    for name in names:
        subset = [select_rows(a, groups.get(name, np.zeros(a.n, bool))) for a, groups in per_q]
        out.reports[name] = report_from_answers(subset, **kwargs)
    return out


def test_period_windows_and_slices_stream_with_the_same_figures(session):
    s, mem = _in_memory(session, n_boot=100, period="1h")
    doc = _report(session, n_boot=100, period="1h", slices=["state_length"])
    assert _close(doc["questions"], mem.to_dict()["questions"]) == []
    wins = doc["questions"][0]["drift"]["windows"]
    assert len(wins) == 3 and sum(w["n"] for w in wins) == N - len(range(0, N, 53))  # rows without a time left out
    con = connect(session, read_only=True)
    try:
        from workbench.shadow.report import shadow_slice_values

        values, order, source = shadow_slice_values(con, "s", s.extra["session"], "state_length")
    finally:
        con.close()
    old = slice_report(
        [s], values, column="state_length", order=order, source=source,
        champion_policy=CHAMPION, challenger_policy=CHALLENGER, n_boot=100, period="1h",
    ).to_dict()  # fmt: skip
    new = doc["slices"]["state_length"]
    assert new["values"] == old["values"] and len(new["values"]) == 4
    for v in old["values"]:
        assert _close(new["reports"][v]["questions"], old["reports"][v]["questions"]) == []


def test_poisson_intervals_agree_with_the_multinomial_bootstrap(session):
    """Same data, two bootstrap schemes: the interval ends agree to Monte-Carlo noise (n_boot 4000)."""
    rep = _report(session, n_boot=4000, seed=11)
    s, _ = _in_memory(session, n_boot=10)
    q = rep["questions"][0]
    cf = np.array([f is not None for f in s.champion_failure])
    srt_c = -np.sort(-np.nan_to_num(s.champion_probs, nan=0), 1)
    logged = np.array([a is not None for a in s.champion_logged])
    acc_c = np.where(logged, is_accept(s.champion_logged), (srt_c[:, 0] >= 0.6) & (srt_c[:, 0] - srt_c[:, 1] >= 0.1))
    acc_c &= ~cf
    srt_d = -np.sort(-np.nan_to_num(s.challenger_probs, nan=0), 1)
    df = np.array([f is not None for f in s.challenger_failure])
    acc_d = (srt_d[:, 0] >= 0.5) & (srt_d[:, 0] - srt_d[:, 1] >= 0.05) & (s.challenger_model == "m2") & ~df

    def cov(acc):
        x = acc.astype(float)
        return lambda w: {"coverage": float(x.mean() if w is None else w @ x / w.sum())}

    multi = paired_bootstrap(cov(acc_c), cov(acc_d), N, n_boot=4000, seed=11)["coverage"]
    half = (multi.high - multi.low) / 2
    assert q["review_load"]["coverage_gain"] == pytest.approx(multi.difference, abs=1e-12)
    assert q["review_load"]["coverage_gain_low"] == pytest.approx(multi.low, abs=0.08 * half)
    assert q["review_load"]["coverage_gain_high"] == pytest.approx(multi.high, abs=0.08 * half)
