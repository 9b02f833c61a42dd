"""`workbench.shadow.collector` without nginx: the cases nginx does not produce on demand. Here the test
plays the gateway's part: it POSTs the mirrored copy and writes the spool file as ``proxy_store`` would
(a temporary name renamed into place). The real nginx path is tests/shadow/test_nginx.py."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest

from workbench.emulator import run_emulator
from workbench.shadow.collector import CollectorConfig, collect_async
from workbench.shadow.journal import read_journal
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
