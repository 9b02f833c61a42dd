"""bench/scale_prod.py builds what bench/scale.py measures for `shadow report` and `monitor`: a shadow session
of N requests written straight into the store's shadow tables (in groups, each one transaction) and a
decision log of N records the monitor reads back whole (checked at 2,500 rows, 7 options)."""

from __future__ import annotations

import json
import sys

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT
from workbench.monitor.logs import MonitorStore
from workbench.store.db import connect
from workbench.store.shadow import load_shadow

N, K = 2500, 7


@pytest.fixture(scope="module")
def scale_prod():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import scale_prod
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return scale_prod


def _rows(path, table: str) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        drop = {"shadow_outcomes": " EXCLUDE (recorded_at)"}.get(table, "")
        return con.execute(f"SELECT *{drop} FROM {table} ORDER BY ALL").fetchall()
    finally:
        con.close()


def test_shadow_store_groups_change_no_row(tmp_path, scale_prod):
    # three groups of 1,000 requests (five chunks of 500) and one group of all 2,500: the same rows
    scale_prod.make_shadow_store(tmp_path / "a.duckdb", N, K, group=1000, chunk=500)
    scale_prod.make_shadow_store(tmp_path / "b.duckdb", N, K, group=N, chunk=500)
    for table in ("shadow_requests", "shadow_answers", "shadow_outcomes"):
        assert _rows(tmp_path / "a.duckdb", table) == _rows(tmp_path / "b.duckdb", table), table

    con = connect(tmp_path / "a.duckdb", read_only=True)
    try:
        sa = load_shadow(con, "bench", "intent")
        n_req, n_err = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE challenger_error = 'timeout') FROM shadow_requests"
        ).fetchone()
    finally:
        con.close()
    assert n_req == N and sa.n == N and sa.champion_probs.shape == (N, K)
    failed = ~np.isfinite(sa.challenger_probs).all(axis=1)
    # Binomial(2500, 0.005): mean 12.5, sd 3.5; the failed answers are those the requests log as timeouts
    assert int(failed.sum()) == n_err and 0 < n_err < 30
    assert np.isfinite(sa.champion_probs).all()
    # 4-decimal values, the residue put on the first option (clipped at 0): sums within 1e-3 of 1
    np.testing.assert_allclose(sa.champion_probs.sum(axis=1), 1.0, atol=1e-3)
    # outcomes for ~30 % (Binomial sd 23) and 80 % of them the champion's top choice (plus chance 1/7 of the rest)
    known = sa.outcome >= 0
    assert abs(int(known.sum()) - 0.3 * N) < 100
    agree = float((sa.champion_probs[known].argmax(axis=1) == sa.outcome[known]).mean())
    assert 0.76 < agree < 0.9


def test_decision_log_reads_back_whole(tmp_path, scale_prod):
    doc = scale_prod.make_policy(tmp_path / "policy.json", K)
    log, outcomes = tmp_path / "decisions.jsonl", tmp_path / "outcomes.parquet"
    scale_prod.make_decision_log(log, outcomes, doc, N, K, chunk=1000)
    lines = log.read_text().splitlines()
    assert len(lines) == N
    first = json.loads(lines[0])
    assert list(first) == [
        *("decision_id", "time", "policy_hash", "policy_version", "model", "schema_hash", "question"),
        *("action", "option", "p_top", "margin", "probs"),
    ]
    assert first["policy_hash"] == doc["content_hash"] and first["time"] == "2026-11-01T00:00:00.000000+00:00"
    with MonitorStore() as store:
        summary = store.load_decisions([str(log)])
        assert (summary.n_records, summary.skipped, summary.incomplete) == (N, {}, 0)
        ids, acc, opt, p_top, margin, probs = zip(
            *store.con.execute(
                "SELECT decision_id, action = 'accept', option, p_top, margin, probs FROM decisions ORDER BY time"
            ).fetchall(),
            strict=True,
        )
    assert list(ids) == [f"d{i}" for i in range(N)]  # in time order, one per decision
    p = np.array(probs)
    top2 = -np.sort(-p, axis=1)[:, :2]
    np.testing.assert_array_equal(np.array(p_top), top2[:, 0])
    np.testing.assert_allclose(np.array(margin), top2[:, 0] - top2[:, 1], atol=1e-15)
    np.testing.assert_array_equal(np.array(acc), (top2[:, 0] >= 0.5) & (top2[:, 0] - top2[:, 1] >= 0.2))
    assert list(opt) == [f"intent_{j:02d}" for j in p.argmax(axis=1)]
    out = pq.read_table(outcomes)
    assert abs(out.num_rows - 0.3 * N) < 100 and set(out.column("question").to_pylist()) == {"intent"}
    assert set(out.column("decision_id").to_pylist()) <= set(ids)
