"""`workbench.shadow.collector` without nginx: the cases nginx does not produce on demand. Here the test
plays the gateway's part: it POSTs the mirrored copy and writes the spool file as ``proxy_store`` would
(a temporary name renamed into place). The real nginx path is tests/shadow/test_nginx.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.shadow.conftest import read_journal
from workbench.emulator import run_emulator
from workbench.shadow.collector import CollectorConfig, collect_async
from workbench.store.db import connect
from workbench.store.shadow import ingest_journal

QUESTIONS = {"urgent": {"type": "noul", "instructions": "Does the customer need help right now?"}}


class Running:
    """A collector on its own event-loop thread."""

    def __init__(self, config: CollectorConfig):
        self.loop = asyncio.new_event_loop()
        self.port: int | None = None
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self.stop = asyncio.Event()

            def on_ready(port: int) -> None:
                self.port = port
                ready.set()

            self.collector = self.loop.run_until_complete(collect_async(config, port=0, stop=self.stop, ready=on_ready))

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        assert ready.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


def _store(spool: Path, request_id: str, body: bytes) -> None:
    tmp = spool.parent / f".{request_id}.tmp"
    tmp.write_bytes(body)
    os.replace(tmp, spool / request_id)  # as nginx does: complete before it has its name


@pytest.fixture
def setup(tmp_path):
    spool = tmp_path / "spool"
    with run_emulator(port=0) as challenger:
        config = CollectorConfig(
            challenger=challenger.base_url + "/v1/systemone?model=clef-flash",
            journal=tmp_path / "collect.jsonl",
            spool=spool,
            champion_timeout=0.6,
            challenger_timeout=2.0,
            fsync=False,
        )
        running = Running(config)
        try:
            yield running, spool, config, challenger
        finally:
            running.close()


def test_collector_pairs_stored_answers_and_journals_what_is_missing(setup, tmp_path):
    running, spool, config, challenger = setup
    body = json.dumps({"model": "clef", "state": "someone stole my card", "questions": QUESTIONS}).encode()
    champion_answer = b'{"model":"clef","answers":{"urgent":{"type":"noul","noul":0.8}}}'
    with httpx.Client(trust_env=False, timeout=5) as client:
        post = lambda rid, **h: client.post(  # noqa: E731
            running.url + "/v1/shadow/mirror", content=body, headers={"x-request-id": rid, **h}
        )
        # ids that could name another file are refused before anything is collected
        for rid in ("../escape", "..", ".hidden", "x" * 129, "a b"):
            assert post(rid).status_code == 400, rid
        assert client.post(running.url + "/v1/shadow/mirror", content=body).status_code == 400
        assert client.get(running.url + "/v1/shadow/mirror").status_code == 405
        # answered at once, before the champion's answer exists
        t0 = time.perf_counter()
        assert post("a" * 32, **{"x-item-id": "item-1"}).status_code == 204
        assert time.perf_counter() - t0 < 0.5
        time.sleep(0.1)
        _store(spool, "a" * 32, champion_answer)
        # no stored answer ever comes for this one (a champion error without the syslog line)
        assert post("b" * 32).status_code == 204
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = client.get(running.url + "/v1/shadow/status").json()
            if st["requests"] == 2 and st["in_progress"] == 0:
                break
            time.sleep(0.05)
    assert st["refused"] == 7 and st["champion_stored"] == 1 and st["champion_not_stored"] == 1, st
    assert challenger.stats["answered"] == 2
    assert list(spool.iterdir()) == []  # claimed and deleted

    records = list(read_journal(config.journal))
    champ = {r["pair"]: r for r in records if r["kind"] == "champion"}
    chall = {r["pair"]: r for r in records if r["kind"] == "challenger"}
    assert set(champ) == set(chall) == {"a" * 32, "b" * 32}
    a, b = champ["a" * 32], champ["b" * 32]
    assert (a["item_id"], a["status"], a["body"], a["error"]) == ("item-1", 200, champion_answer.decode(), None)
    assert 50 <= a["latency_ms"] < 2000  # the file's age since the mirror arrived (stored ~100 ms later)
    assert (b["item_id"], b["status"], b["body"], b["error"]) == ("b" * 32, None, None, "not_stored")
    assert json.loads(chall["a" * 32]["body"])["model"] == "clef-flash"  # ?model= rewrote the challenger's body

    con = connect(tmp_path / "wb.duckdb")
    try:
        summary = ingest_journal(con, config.journal, shadow="collected")
        kinds = dict(
            con.execute(
                "SELECT item_id, failure_kind FROM shadow_answers WHERE shadow = 'collected' AND side = 'champion'"
            ).fetchall()
        )
    finally:
        con.close()
    assert summary["n_requests"] == 2 and summary["n_challenger_lost"] == 0
    assert kinds == {"item-1": None, "b" * 32: "not_stored"}


def test_collector_refuses_bodies_over_its_limit(tmp_path):
    """Over ``max_body_bytes``: a mirrored request gets 413, a stored champion answer is deleted unread."""
    body = json.dumps({"model": "clef", "state": "card stolen", "questions": QUESTIONS}).encode()
    with run_emulator(port=0) as challenger:
        config = CollectorConfig(
            challenger=challenger.base_url + "/v1/systemone",
            journal=tmp_path / "c.jsonl",
            spool=tmp_path / "spool",
            max_body_bytes=1000,
            champion_timeout=5.0,
            fsync=False,
        )
        running = Running(config)
        try:
            with httpx.Client(trust_env=False, timeout=5) as client:
                url = running.url + "/v1/shadow/mirror"
                r = client.post(url, content=b"x" * 5000, headers={"x-request-id": "c1"})
                _store(config.spool, "d1", b'{"answers":"' + b"y" * 5000 + b'"}')
                assert client.post(url, content=body, headers={"x-request-id": "d1"}).status_code == 204
        finally:
            running.close()
        assert r.status_code == 413 and challenger.stats["total"] == 1  # only d1 reached the challenger
    assert running.collector.stats["refused"] == 1
    (champ,) = [rec for rec in read_journal(config.journal) if rec["kind"] == "champion"]
    assert (champ["pair"], champ["status"], champ["body"], champ["error"]) == ("d1", 200, None, "too_large")
    assert list(config.spool.iterdir()) == []


def _settled(client: httpx.Client, running: Running, n: int) -> dict:
    """The collector's status once ``n`` mirrored requests are journaled (or after 15 s)."""
    deadline = time.monotonic() + 15
    while True:
        st = client.get(running.url + "/v1/shadow/status").json()
        if (st["requests"] == n and st["in_progress"] == 0) or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_collector_journals_bodies_over_the_journal_limit_as_references(tmp_path):
    """A request and a stored champion answer over ``max_journal_body`` are journaled as sha256 + size
    (nothing large is written) and ingest loads every pair, the big one without its state."""
    limit = 4096
    big = json.dumps({"model": "clef", "state": "s" * 20_000, "questions": QUESTIONS}).encode()
    small = json.dumps({"model": "clef", "state": "card stolen", "questions": QUESTIONS}).encode()
    big_answer = json.dumps(
        {"model": "clef", "answers": {"urgent": {"type": "noul", "noul": 0.8}}, "note": "n" * 10_000}
    ).encode()
    answer = b'{"model":"clef","answers":{"urgent":{"type":"noul","noul":0.8}}}'
    with run_emulator(port=0) as challenger:
        config = CollectorConfig(
            challenger=challenger.base_url + "/v1/systemone?model=clef-flash",
            journal=tmp_path / "c.jsonl",
            spool=tmp_path / "spool",
            champion_timeout=5.0,
            max_journal_body=limit,
            fsync=False,
        )
        running = Running(config)
        try:
            _store(config.spool, "big1", big_answer)
            _store(config.spool, "small1", answer)
            with httpx.Client(trust_env=False, timeout=5) as client:
                url = running.url + "/v1/shadow/mirror"
                assert client.post(url, content=big, headers={"x-request-id": "big1"}).status_code == 204
                assert client.post(url, content=small, headers={"x-request-id": "small1"}).status_code == 204
                st = _settled(client, running, 2)
        finally:
            running.close()
    assert st["champion_stored"] == 2 and st["challenger_errors"] == 0, st
    assert challenger.stats["by_status"] == {"200": 2}  # the challenger got the whole request
    records = {(r["kind"], r["pair"]): r for r in read_journal(config.journal)}
    assert len(records) == 4
    champ = records[("champion", "big1")]
    assert champ["request"] is None and champ["body"] is None and champ["error"] is None
    assert (champ["request_sha256"], champ["request_bytes"]) == (hashlib.sha256(big).hexdigest(), len(big))
    assert (champ["body_sha256"], champ["body_bytes"]) == (hashlib.sha256(big_answer).hexdigest(), len(big_answer))
    assert records[("champion", "small1")]["request"] == small.decode()
    assert records[("champion", "small1")]["body"] == answer.decode()
    assert json.loads(records[("challenger", "big1")]["body"])["model"] == "clef-flash"
    assert config.journal.stat().st_size < 2 * limit + 2000  # neither big body was written

    con = connect(tmp_path / "wb.duckdb")
    try:
        summary = ingest_journal(con, config.journal, shadow="collected")
        rows = con.execute(
            "SELECT item_id, state IS NULL, challenger_error FROM shadow_requests WHERE shadow = 'collected'"
            " ORDER BY item_id"
        ).fetchall()
    finally:
        con.close()
    assert summary["n_requests"] == 2 and summary["n_challenger_lost"] == 0
    assert rows == [("big1", True, None), ("small1", False, None)]


def test_a_nested_json_body_is_journaled_as_a_challenger_failure_with_its_reason(setup, tmp_path):
    """The challenger URL's ``?model=`` makes the collector parse the body: 100,000 nested arrays raise
    RecursionError. The pair is journaled with that failure and its reason, not lost; others still flow."""
    running, spool, config, challenger = setup
    nested = json.dumps({"model": "clef", "state": "deep", "questions": QUESTIONS})[:-1]
    nested += ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    ok = json.dumps({"model": "clef", "state": "card stolen", "questions": QUESTIONS}).encode()
    answer = b'{"model":"clef","answers":{"urgent":{"type":"noul","noul":0.8}}}'
    with httpx.Client(trust_env=False, timeout=5) as client:
        url = running.url + "/v1/shadow/mirror"
        for rid, content in (("deep1", nested.encode()), ("ok1", ok)):
            _store(spool, rid, answer)
            assert client.post(url, content=content, headers={"x-request-id": rid}).status_code == 204
        st = _settled(client, running, 2)
    assert (st["challenger_done"], st["challenger_errors"], st["journal_errors"]) == (2, 1, 0), st
    assert challenger.stats["total"] == 1  # the nested body never reached the challenger
    records = {(r["kind"], r["pair"]): r for r in read_journal(config.journal)}
    failed = records[("challenger", "deep1")]
    assert (failed["status"], failed["body"], failed["error"]) == (None, None, "internal: RecursionError")
    assert failed["reason"].startswith("RecursionError") and "recursion" in failed["reason"]
    assert records[("challenger", "ok1")]["status"] == 200
    assert records[("champion", "deep1")]["request"] == nested  # 200 KB: under the journal limit, kept whole

    con = connect(tmp_path / "wb.duckdb")
    try:
        summary = ingest_journal(con, config.journal, shadow="collected")
        errors = dict(con.execute("SELECT item_id, challenger_error FROM shadow_requests").fetchall())
    finally:
        con.close()
    assert summary["n_requests"] == 2 and summary["n_challenger_lost"] == 0
    assert errors == {"deep1": "internal: RecursionError", "ok1": None}


def test_collect_cli_refuses_a_bad_max_journal_body(tmp_path):
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(tmp_path / "wb.duckdb")]
    cmd += ["shadow", "collect", "--challenger", "http://127.0.0.1:9/v1/systemone", "--spool", str(tmp_path / "s")]
    proc = subprocess.run([*cmd, "--max-journal-body", "lots"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--max-journal-body 'lots' is not a size" in proc.stderr and "8MiB" in proc.stderr


def test_challenger_answers_over_the_journal_limit_are_measured_in_utf8_bytes():
    """The challenger half shares the rule: 5,000 'é' are 5,000 characters but 10,000 bytes."""
    from workbench.shadow.challenger import ChallengerResult, challenger_record

    text = '{"note":"' + "é" * 5000 + '"}'
    raw = text.encode("utf-8")
    over = challenger_record("p1", ChallengerResult(200, text, 3.0), max_body=8192)
    assert (over["body"], over["body_sha256"], over["body_bytes"]) == (None, hashlib.sha256(raw).hexdigest(), 10_011)
    assert len(raw) == 10_011
    under = challenger_record("p2", ChallengerResult(200, text, 3.0), max_body=len(raw))
    assert under["body"] == text and "body_sha256" not in under


def _free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_orphans_are_swept_on_a_timer_with_the_syslog_log(tmp_path):
    """With ``--syslog-port`` (the recipe's set-up) no request ever waits for the spool, so the sweep that ran
    only while a request waited never ran: 520 unclaimed answers stayed on disk. The sweep is on a timer."""
    with run_emulator(port=0) as challenger:
        config = CollectorConfig(
            challenger=challenger.base_url + "/v1/systemone",
            journal=tmp_path / "c.jsonl",
            spool=tmp_path / "spool",
            champion_timeout=0.2,  # orphans after 0.4 s, a sweep every 0.2 s
            syslog_port=_free_udp_port(),
            fsync=False,
        )
        config.spool.mkdir()
        old = time.time() - 3600
        for i in range(50):  # stored answers of requests the mirror location did not sample
            _store(config.spool, f"orphan{i:03d}", b"{}")
            os.utime(config.spool / f"orphan{i:03d}", (old, old))
        running = Running(config)
        try:
            with httpx.Client(trust_env=False, timeout=5) as client:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    st = client.get(running.url + "/v1/shadow/status").json()
                    if st["spool_orphans"] == 50:
                        break
                    time.sleep(0.05)
        finally:
            running.close()
    assert st["spool_orphans"] == 50 and st["requests"] == 0, st
    assert list(config.spool.iterdir()) == []


def test_bodies_held_are_bounded_and_the_excess_is_dropped_with_a_count(tmp_path):
    """Every mirrored body is held until its champion answer comes (up to ``champion_timeout``): 100 bodies
    of 7 MiB grew the collector from 101 to 1,051 MiB. ``max_held_bytes`` bounds them; beyond it a request
    is dropped unread and counted, and the ones held are journaled whole."""
    size = 300 * 1024
    answer = b'{"model":"clef","answers":{"urgent":{"type":"noul","noul":0.8}}}'
    with run_emulator(port=0) as challenger:
        config = CollectorConfig(
            challenger=challenger.base_url + "/v1/systemone",
            journal=tmp_path / "c.jsonl",
            spool=tmp_path / "spool",
            champion_timeout=120.0,  # held until the test stores the answers
            max_body_bytes=512 * 1024,
            max_held_bytes=1024 * 1024,  # three bodies of 300 KiB
            fsync=False,
        )
        running = Running(config)
        try:
            with httpx.Client(trust_env=False, timeout=30) as client:
                url = running.url + "/v1/shadow/mirror"
                codes = []
                for i in range(10):
                    body = json.dumps({"model": "clef", "state": "s" * size, "questions": QUESTIONS, "i": i})
                    codes.append(client.post(url, content=body.encode(), headers={"x-request-id": f"r{i}"}).status_code)
                held = client.get(running.url + "/v1/shadow/status").json()
                for i in range(3):
                    _store(config.spool, f"r{i}", answer)
                st = _settled(client, running, 3)
        finally:
            running.close()
    assert codes == [204] * 3 + [503] * 7
    assert held["dropped_held_bytes"] == 7 and held["requests"] == 3 and held["in_progress"] == 3
    assert 3 * size < held["held_bytes"] <= 1024 * 1024
    assert st["held_bytes"] == 0 and st["champion_stored"] == 3, st
    champ = sorted(r["pair"] for r in read_journal(config.journal) if r["kind"] == "champion")
    assert champ == ["r0", "r1", "r2"]


def test_collector_refuses_a_held_limit_below_one_body(tmp_path):
    from workbench.errors import WorkbenchError
    from workbench.shadow.collector import Collector

    config = CollectorConfig(
        challenger="http://127.0.0.1:9/v1/systemone",
        journal=tmp_path / "c.jsonl",
        spool=tmp_path / "spool",
        max_held_bytes=1000,
    )
    with pytest.raises(WorkbenchError, match="max_held_bytes"):
        Collector(config)


def test_access_log_keeps_unclaimed_lines_for_keep_for_then_forgets_them():
    """Lines of requests nobody mirrored (a sampled mirror: most of them) wait ``keep_for`` seconds for a claim
    and are forgotten after it, oldest first (the CPU figure is bench/shadow_access_log.py)."""
    from workbench.shadow.collector import AccessLog

    def line(i: int, status: str = "200") -> bytes:
        return b"<190>workbench: " + json.dumps({"request_id": f"r{i}", "upstream_status": status}).encode()

    kept, forgotten = AccessLog(keep_for=3600.0), AccessLog(keep_for=0.0)
    for log in (kept, forgotten):
        for i in range(3000):
            log.datagram_received(line(i), ("127.0.0.1", 0))
        log.datagram_received(line(0, "502"), ("127.0.0.1", 0))  # the same id again: the newer line counts

    async def claim(log: AccessLog, i: int) -> dict | None:
        return await log.wait(f"r{i}", 0.01)

    assert asyncio.run(claim(kept, 0))["upstream_status"] == "502"
    assert asyncio.run(claim(kept, 2999))["request_id"] == "r2999"
    assert asyncio.run(claim(forgotten, 0)) is None and asyncio.run(claim(forgotten, 2999)) is None
    assert kept.lines == forgotten.lines == 3001
