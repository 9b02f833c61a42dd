"""A ticket decided twice is two requests: ingest keeps every request of an item (keyed by the journal's pair
id), reports the items with several requests, and the report counts requests; outcomes stay per item.
Journals are written with the journal's own writer; the store is a real DuckDB file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tests.conftest import ROOT
from workbench.schema import DecisionSchema
from workbench.shadow.challenger import ChallengerResult, challenger_record
from workbench.shadow.journal import Journal, champion_record
from workbench.shadow.policies import parse_rule_options
from workbench.shadow.report import report_from_answers, shadow_report
from workbench.store import db as store_db
from workbench.store.db import connect
from workbench.store.shadow import import_traffic, ingest_journal, load_shadow, session_states

QUESTIONS = {"urgent": {"type": "noul", "instructions": "Does the customer need help right now?"}}
RULE = parse_rule_options(["urgent:tau=0.6"])


def _answer(p: float, model: str) -> str:
    return json.dumps({"model": model, "answers": {"urgent": {"type": "noul", "noul": p}}})


def _journal(path: Path) -> list[tuple[str, str, float, float]]:
    """278 pairs over 136 items (the hostile tester's figures): items 0-101 once, 102-134 five times, 135
    eleven times, each request with its own answers; returns (pair, item, champion p, challenger p) per request."""
    rng = np.random.default_rng(3)
    counts = [1] * 102 + [5] * 34  # 102 + 170 = 272 requests
    counts[-1] += 6  # one item decided 11 times: 278 requests over 136 items
    rows = []
    journal = Journal(path, fsync=False)
    seq = 0
    for item, n in enumerate(counts):
        for _ in range(n):
            pair = f"{seq:032x}"
            pc, pd = float(rng.uniform(0.05, 0.95)), float(rng.uniform(0.05, 0.95))
            body = json.dumps({"model": "clef", "state": f"ticket {item} try {seq}", "questions": QUESTIONS})
            ts = f"2026-12-01T10:{seq // 60:02d}:{seq % 60:02d}.000000+00:00"
            journal.append(
                champion_record(
                    pair,
                    item_id=f"ticket-{item:03d}",
                    ts=ts,
                    shadow="nginx",
                    request=body.encode(),
                    status=200,
                    body=_answer(pc, "clef").encode(),
                    latency_ms=10.0,
                )
            )
            journal.append(challenger_record(pair, ChallengerResult(200, _answer(pd, "clef-flash"), 5.0)))
            rows.append((pair, f"ticket-{item:03d}", pc, pd))
            seq += 1
    journal.close()
    return rows


def test_ingest_keeps_every_request_of_an_item_and_reports_the_repeated_items(tmp_path):
    rows = _journal(tmp_path / "j.jsonl")
    assert len(rows) == 278 and len({r[1] for r in rows}) == 136
    con = connect(tmp_path / "wb.duckdb")
    try:
        summary = ingest_journal(con, tmp_path / "j.jsonl", shadow="s")
        stored = con.execute(
            """SELECT r.request_id, r.item_id, c.probs[1], d.probs[1] FROM shadow_requests r
               JOIN shadow_answers c ON c.shadow = r.shadow AND c.request_id = r.request_id AND c.side = 'champion'
               JOIN shadow_answers d ON d.shadow = r.shadow AND d.request_id = r.request_id AND d.side = 'challenger'
               WHERE r.shadow = 's' ORDER BY r.request_id"""
        ).fetchall()
        # outcomes are per item: every request of an item takes its item's outcome
        (tmp_path / "outcomes.csv").write_text(
            "item_id,outcome\n" + "".join(f"ticket-{i:03d},{'yes' if i % 2 else 'no'}\n" for i in range(100, 136))
        )
        import_traffic(con, tmp_path / "outcomes.csv", shadow="s")
        streamed = shadow_report(con, "s", champion_policy=RULE, challenger_policy=RULE, n_boot=50).to_dict()
        arrays = load_shadow(con, "s", "urgent")
        states, _ = session_states(con, "s")
    finally:
        con.close()
    assert summary["n_requests"] == 278 and summary["n_items"] == 136
    assert summary["n_items_repeated"] == 34 and summary["n_requests_of_repeated_items"] == 176
    assert summary["max_requests_per_item"] == 11
    assert summary["repeated_examples"][0] == {"item_id": "ticket-135", "requests": 11}
    # each request keeps its own answers, not the last request's of its item
    assert [(r[0], r[1]) for r in stored] == [(p, item) for p, item, _, _ in rows]
    assert np.allclose([r[2] for r in stored], [pc for *_, pc, _ in rows])
    assert np.allclose([r[3] for r in stored], [pd for *_, pd in rows])

    q = streamed["questions"][0]
    assert q["n_requests"] == 278 == arrays.n
    # outcomes of items 100-135: 2 single requests + 34 items x 5 + 6 more requests of the last one
    assert q["error"]["n_known"] == 2 + 170 + 6 == int((arrays.outcome >= 0).sum())
    in_memory = report_from_answers([arrays], champion_policy=RULE, challenger_policy=RULE, n_boot=50).to_dict()
    assert in_memory["questions"][0]["agreement"] == q["agreement"]
    assert in_memory["questions"][0]["directional"] == q["directional"]
    # a rerun gets one state per request: items with several requests go by their request ids
    assert len(states) == 278 and states["item_id"].is_unique


def test_shadow_ingest_cli_says_which_items_have_several_requests(tmp_path):
    _journal(tmp_path / "j.jsonl")
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(tmp_path / "wb.duckdb")]
    out = subprocess.run(
        [*cmd, "shadow", "ingest", str(tmp_path / "j.jsonl"), "--name", "s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stderr.split())
    assert "278 requests (0 challenger lost) in s" in text
    assert "34 items were decided by several requests (176 requests, at most 11 for one item" in text
    assert "ticket-135 (11)" in text


def test_a_store_written_before_request_ids_migrates_with_every_row(tmp_path):
    """The migration that keys shadow requests and answers by request id: rows of a store written before it
    keep their item id as request id, and the session reports as before."""
    path = tmp_path / "old.duckdb"
    raw = duckdb.connect(str(path))
    raw.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    # every migration before the one that keys shadow requests by request id
    keyed = next(i for i, sql in enumerate(store_db._MIGRATIONS) if "shadow_requests_keyed" in sql)
    old = store_db._MIGRATIONS[:keyed]
    for version, sql in enumerate(old, start=1):
        raw.execute(sql)
        raw.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    schema = DecisionSchema.from_dict({"questions": QUESTIONS})
    from workbench.store.runs import save_schema

    h = save_schema(raw, schema)
    raw.execute(
        "INSERT INTO shadow_sessions (shadow, source, schema_hash, params) VALUES ('old', 'mirror', ?, '{}')", [h]
    )
    for i in range(40):
        raw.execute(
            "INSERT INTO shadow_requests (shadow, item_id, seq, champion_status, challenger_status)"
            " VALUES ('old', ?, ?, 200, 200)",
            [f"t{i:02d}", i],
        )
        for side, p in (("champion", 0.3 + i / 100), ("challenger", 0.9 - i / 100)):
            raw.execute(
                "INSERT INTO shadow_answers (shadow, item_id, question, side, probs) VALUES ('old', ?, 'urgent', ?, ?)",
                [f"t{i:02d}", side, [p, 1 - p]],
            )
    raw.close()

    con = connect(path)
    try:
        assert store_db.schema_version(con) == store_db.SCHEMA_VERSION
        requests = con.execute("SELECT request_id, item_id FROM shadow_requests ORDER BY seq").fetchall()
        answers = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE request_id = item_id) FROM shadow_answers"
        ).fetchone()
        report = shadow_report(con, "old", champion_policy=RULE, challenger_policy=RULE, n_boot=20).to_dict()
    finally:
        con.close()
    assert requests == [(f"t{i:02d}", f"t{i:02d}") for i in range(40)]
    assert answers == (80, 80)
    q = report["questions"][0]
    assert q["n_requests"] == 40 and q["n_both_answered"] == 40
    assert q["agreement"]["rate"] == pytest.approx(
        np.mean([(0.3 + i / 100 >= 0.5) == (0.9 - i / 100 >= 0.5) for i in range(40)])
    )


def test_export_and_import_keep_every_request_of_an_item(tmp_path):
    """A session with repeated items exported (a request_id column) imports back with the same requests and
    figures; a traffic file with repeated item ids and no request_id column is refused, not collapsed."""
    _journal(tmp_path / "j.jsonl")
    schema = DecisionSchema.from_dict({"questions": QUESTIONS})
    con = connect(tmp_path / "wb.duckdb")
    try:
        ingest_journal(con, tmp_path / "j.jsonl", shadow="s")
        (tmp_path / "outcomes.csv").write_text(
            "item_id,outcome\n" + "".join(f"ticket-{i:03d},{'yes' if i % 2 else 'no'}\n" for i in range(100, 136))
        )
        import_traffic(con, tmp_path / "outcomes.csv", shadow="s")
        from workbench.store.shadow import export_session

        assert export_session(con, "s", tmp_path / "s.jsonl") == 278
        summary = import_traffic(con, tmp_path / "s.jsonl", shadow="back", schema=schema)
        pairs = [
            con.execute(
                "SELECT request_id, item_id FROM shadow_requests WHERE shadow = ? ORDER BY request_id", [name]
            ).fetchall()
            for name in ("s", "back")
        ]
        reports = [
            shadow_report(con, name, champion_policy=RULE, challenger_policy=RULE, n_boot=50).to_dict()["questions"][0]
            for name in ("s", "back")
        ]
        lines = (tmp_path / "s.jsonl").read_text().splitlines()
        (tmp_path / "no_ids.jsonl").write_text(
            "".join(json.dumps({k: v for k, v in json.loads(ln).items() if k != "request_id"}) + "\n" for ln in lines)
        )
        from workbench.errors import DataImportError

        with pytest.raises(DataImportError, match="duplicate item ids") as refused:
            import_traffic(con, tmp_path / "no_ids.jsonl", shadow="flat", schema=schema)
    finally:
        con.close()
    assert summary["n_requests"] == 278 and summary["n_items_repeated"] == 34 and summary["n_outcomes"] == 36
    assert pairs[0] == pairs[1]
    for key in ("n_requests", "agreement", "directional", "error", "failures"):
        assert reports[0][key] == reports[1][key], key
    assert "request_id column" in refused.value.hint
