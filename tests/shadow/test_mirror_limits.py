"""The mirror tried as an attacker would (issue 12): each finding, against the real `shadow serve` process.

- two conflicting ``Content-Length`` headers: 400, nothing forwarded;
- five concurrent 50 MB POSTs: 413 at once, the mirror's peak RSS stays near its start;
- bodies held at once are bounded: the request that does not fit gets 503, the others go through;
- the champion's own 413 comes back as 413 within a second (not a 502 a minute later);
- a body over the journal limit is logged as sha256 + size, and ingest loads every pair — also from
  an old journal holding a 32 MiB line;
- slowloris and idle connections are closed within their timeouts; connections over the cap at once;
- a deeply nested JSON body that crashes the challenger's parsing is journaled as a failure with
  its reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import duckdb
import httpx
import pytest

from tests.shadow.conftest import read_journal
from tests.shadow.test_mirror import QUESTIONS, Mirror, _body
from workbench.emulator import run_emulator, run_emulator_process
from workbench.shadow.journal import Journal
from workbench.store.db import connect
from workbench.store.shadow import ingest_journal

MiB = 1024 * 1024


def _kib(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def _raw(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


@pytest.fixture(scope="module")
def champion():
    with run_emulator_process(port=0) as emu:
        yield emu.base_url + "/v1/systemone"


def _mirror(tmp_path, champion: str, challenger: str | None = None, *extra: str) -> Mirror:
    return Mirror(
        champion,
        challenger or champion + "?model=clef-flash",
        tmp_path / "shadow.jsonl",
        tmp_path / "wb.duckdb",
        challenger_timeout=2.0,
        extra=extra,
    ).start()


def test_conflicting_content_length_is_refused_and_not_forwarded(tmp_path, champion):
    mirror = _mirror(tmp_path, champion, None, "--no-ingest")
    body = json.dumps(_body(1)).encode()
    head = b"POST /v1/systemone HTTP/1.1\r\nhost: m\r\ncontent-type: application/json\r\n"
    try:
        # the old parser took the first length and forwarded the request
        conflicting = head + b"content-length: %d\r\ncontent-length: %d\r\n\r\n" % (len(body), len(body) + 9) + body
        both = head + b"content-length: %d\r\ntransfer-encoding: chunked\r\n\r\n" % len(body) + body
        bad_chunk = head + b"transfer-encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n"
        for raw in (conflicting, both, bad_chunk):
            reply = _raw(mirror.port, raw)
            assert reply.split(b" ", 2)[1] == b"400", reply[:200]
        assert mirror.status()["requests"] == 0
    finally:
        mirror.stop()
    assert list(read_journal(tmp_path / "shadow.jsonl")) == []  # nothing reached the champion


def test_five_concurrent_50mb_posts_get_413_and_memory_stays_bounded(tmp_path, champion):
    mirror = _mirror(tmp_path, champion, None, "--no-ingest")
    try:
        assert httpx.post(mirror.url + "/v1/systemone", json=_body(0)).status_code == 200
        rss_before = _kib(mirror.proc.pid, "VmRSS")
        big = b"x" * (50 * 1000 * 1000)

        def post(_: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            r = httpx.post(mirror.url + "/v1/systemone", content=big, timeout=30.0)
            return r.status_code, time.perf_counter() - t0

        with ThreadPoolExecutor(5) as pool:
            results = list(pool.map(post, range(5)))
        peak = _kib(mirror.proc.pid, "VmHWM")
        print(f"mirror RSS {rss_before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB during five 50 MB posts")
        # before the limits: 52 MiB -> 1,470 MiB peak. Now nothing is buffered beyond socket reads.
        assert (peak - rss_before) / 1024 < 40, f"peak RSS {peak / 1024:.0f} MiB, {rss_before / 1024:.0f} MiB before"
        assert [s for s, _ in results] == [413] * 5
        # "at once": the 413 comes from the head alone, before any of the body is sent
        with socket.create_connection(("127.0.0.1", mirror.port), timeout=5) as s:
            t0 = time.perf_counter()
            s.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: m\r\ncontent-length: 50000000\r\n\r\n")
            assert s.recv(65536).split(b" ", 2)[1] == b"413"
            assert time.perf_counter() - t0 < 1.0
        assert mirror.status()["requests"] == 1  # the 413s were answered by the mirror: nothing forwarded
    finally:
        mirror.stop()


def test_buffered_bytes_are_bounded_across_requests(tmp_path, champion):
    """--max-body 1MiB --max-buffered 2MiB: two bodies of 900 KB in progress hold 1.8 MB; a third
    request is refused with 503 at once, and both slow ones are answered once their bodies arrive."""
    mirror = _mirror(tmp_path, champion, None, "--no-ingest", "--max-body", "1MiB", "--max-buffered", "2MiB")
    body = json.dumps({**_body(2), "state": "s" * 900_000}).encode()
    head = b"POST /v1/systemone HTTP/1.1\r\nhost: m\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    slow = []
    try:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", mirror.port), timeout=10)
            s.sendall(head % len(body) + body[:1000])  # head in, body in progress: its bytes are reserved
            slow.append(s)
        time.sleep(0.3)
        t0 = time.perf_counter()
        r = httpx.post(mirror.url + "/v1/systemone", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert time.perf_counter() - t0 < 1.0
        assert mirror.status()["buffered_bytes"] == 2 * len(body)
        for s in slow:
            s.sendall(body[1000:])
        for s in slow:
            reply = b""
            while b"\r\n\r\n" not in reply:
                reply += s.recv(65536)
            assert reply.split(b" ", 2)[1] == b"413"  # the emulator's own limit (524,288 bytes), passed through
        assert httpx.post(mirror.url + "/v1/systemone", json=_body(3)).status_code == 200
        status = mirror.status()
        assert status["rejected_busy"] == 1 and status["requests"] == 3
    finally:
        for s in slow:
            s.close()
        mirror.stop()


@contextmanager
def early_413_champion(limit: int):
    """A champion that, like a gateway or the emulator's hard cap, answers 413 from the head alone and
    closes without reading a body over ``limit``."""
    loop = asyncio.new_event_loop()
    port: list[int] = []
    ready = threading.Event()
    done = asyncio.Event()

    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")).split(b":")[1])
        body = b'{"error":{"type":"request_too_large","message":"over 1 MiB"}}'
        if length <= limit:
            await reader.readexactly(length)
            body = b'{"model":"x","answers":{}}'
        status = b"413 Payload Too Large" if length > limit else b"200 OK"
        writer.write(
            b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, len(body), body)
        )
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await done.wait()
        server.close()

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    assert ready.wait(5)
    try:
        yield f"http://127.0.0.1:{port[0]}/v1/systemone"
    finally:
        loop.call_soon_threadsafe(done.set)
        t.join(5)


def test_champion_413_is_passed_through_at_once(tmp_path):
    with early_413_champion(MiB) as champ, run_emulator(port=0) as chall:
        mirror = _mirror(tmp_path, champ, chall.base_url + "/v1/systemone", "--no-ingest")
        try:
            body = json.dumps({**_body(4), "state": "s" * (7 * MiB)}).encode()  # under the mirror's 8 MiB
            direct = httpx.post(champ, content=body, timeout=90.0)
            t0 = time.perf_counter()
            r = httpx.post(mirror.url + "/v1/systemone", content=body, timeout=90.0)
            elapsed = time.perf_counter() - t0
            assert (r.status_code, r.content) == (direct.status_code, direct.content) == (413, direct.content)
            assert elapsed < 2.0, elapsed
        finally:
            mirror.stop()
    rec = next(r for r in read_journal(tmp_path / "shadow.jsonl") if r["kind"] == "champion")
    assert rec["status"] == 413 and rec["error"] is None


def test_big_body_is_journaled_as_a_reference_and_ingest_loads_every_pair(tmp_path, champion):
    mirror = _mirror(tmp_path, champion)  # default --max-journal-body 1MiB, ingest on exit
    big = json.dumps({**_body(5), "state": "s" * (3 * MiB)}).encode()
    with httpx.Client() as client:
        statuses = []
        for i in range(6):
            content = big if i == 3 else json.dumps(_body(i)).encode()
            r = client.post(mirror.url + "/v1/systemone", content=content, headers={"x-item-id": f"r{i}"})
            statuses.append(r.status_code)
    mirror.drain()
    err = mirror.stop()
    assert statuses == [200, 200, 200, 413, 200, 200]  # the champion's (emulator's) limit is 524,288 bytes
    assert "ingested 6 requests" in err, err
    rec = next(r for r in read_journal(tmp_path / "shadow.jsonl") if r.get("item_id") == "r3")
    assert rec["request"] is None
    assert (rec["request_sha256"], rec["request_bytes"]) == (hashlib.sha256(big).hexdigest(), len(big))
    assert (tmp_path / "shadow.jsonl").stat().st_size < MiB  # nothing large was written
    con = duckdb.connect(str(tmp_path / "wb.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT item_id, state IS NULL FROM shadow_requests ORDER BY item_id").fetchall()
    finally:
        con.close()
    assert rows == [(f"r{i}", i == 3) for i in range(6)]


def test_ingest_of_a_journal_with_a_huge_line_loads_every_pair(tmp_path):
    """A journal written before the size limit (bodies up to 64 MiB whole): one 32 MiB line once made
    ingest fail with a traceback and load none of the pairs."""
    path = tmp_path / "old.jsonl"
    j = Journal(path, fsync=False)
    answer = json.dumps({"model": "clef", "answers": {"urgent": {"type": "noul", "noul": 0.8}}})
    questions = {"urgent": QUESTIONS["urgent"]}
    for i in range(6):
        state = "s" * (32 * MiB) if i == 2 else f"ticket {i}"
        request = json.dumps({"model": "clef", "state": state, "questions": questions})
        j.append(
            {"kind": "champion", "pair": f"p{i}", "item_id": f"i{i}", "ts": f"2026-01-01T00:00:0{i}+00:00"}
            | {"request": request, "status": 200, "body": answer, "latency_ms": 1.0, "error": None, "sampled": True}
        )
        j.append({"kind": "challenger", "pair": f"p{i}", "status": 200, "body": answer, "latency_ms": 1.0})
    j.close()
    con = connect(tmp_path / "wb.duckdb")
    summary = ingest_journal(con, path, shadow="old")
    assert summary["n_requests"] == 6 and summary["n_challenger_lost"] == 0
    probs = con.execute(
        "SELECT count(*) FROM shadow_answers WHERE shadow = 'old' AND probs IS NOT NULL AND question = 'urgent'"
    ).fetchone()[0]
    assert probs == 12  # both sides of every pair


def test_slowloris_and_idle_connections_are_closed(tmp_path, champion):
    mirror = _mirror(tmp_path, champion, None, "--no-ingest", "--header-timeout", "1", "--idle-timeout", "2")
    slow, idle = [], []
    try:
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", mirror.port), timeout=5)
            s.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: m\r\n")
            slow.append(s)
        for _ in range(20):
            idle.append(socket.create_connection(("127.0.0.1", mirror.port), timeout=5))
        t0 = time.monotonic()
        closed_at: dict[int, float] = {}
        while time.monotonic() - t0 < 4.0 and len(closed_at) < len(slow) + len(idle):
            for k, s in enumerate(slow + idle):
                if k in closed_at:
                    continue
                try:
                    if k < len(slow):
                        s.sendall(b"x-slow-%d: 1\r\n" % k)  # a header line every 0.2 s, never the end of the head
                    s.setblocking(False)
                    if s.recv(1) == b"":
                        closed_at[k] = time.monotonic() - t0
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[k] = time.monotonic() - t0
                finally:
                    s.setblocking(True)
            time.sleep(0.2)
        # a normal request meanwhile is answered
        assert httpx.post(mirror.url + "/v1/systemone", json=_body(6)).status_code == 200
        assert len(closed_at) == 60, f"{60 - len(closed_at)} connections still open after 4 s"
        assert max(closed_at[k] for k in range(40)) < 1.9  # header timeout 1 s
        assert max(closed_at.values()) < 3.0  # idle timeout 2 s
        assert mirror.status()["connections_timed_out"] == 40
    finally:
        for s in slow + idle:
            s.close()
        mirror.stop()


def test_connections_over_the_cap_are_closed_on_accept(tmp_path, champion):
    mirror = _mirror(tmp_path, champion, None, "--no-ingest", "--max-connections", "20")
    conns = []
    try:
        for _ in range(25):
            conns.append(socket.create_connection(("127.0.0.1", mirror.port), timeout=2))
        time.sleep(0.3)
        closed = 0
        for s in conns:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        assert closed == 5
        for s in conns[:10]:
            s.close()
        time.sleep(0.3)
        status = mirror.status()
        assert status["connections_refused"] == 5 and status["open_connections"] == 11  # 10 + this one
    finally:
        for s in conns:
            s.close()
        mirror.stop()


def test_a_nested_json_body_that_crashes_parsing_is_journaled_as_a_challenger_failure(tmp_path):
    with run_emulator(port=0) as emu:
        champ = emu.base_url + "/v1/systemone"
        mirror = _mirror(tmp_path, champ)  # ?model=clef-flash: the challenger body is parsed and rewritten
        nested = json.dumps({**_body(7), "state": "deep"})[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
        with httpx.Client() as client:
            r = client.post(mirror.url + "/v1/systemone", content=nested.encode(), headers={"x-item-id": "deep"})
            d = client.post(champ, content=nested.encode())
            assert (r.status_code, r.content) == (d.status_code, d.content)
            for i in range(3):
                assert client.post(mirror.url + "/v1/systemone", json=_body(i), headers={"x-item-id": f"ok{i}"})
        mirror.drain()
        err = mirror.stop()
    assert "ingested 4 requests" in err, err
    records = list(read_journal(tmp_path / "shadow.jsonl"))
    pair = next(r["pair"] for r in records if r["kind"] == "champion" and r["item_id"] == "deep")
    failed = [r for r in records if r["kind"] == "challenger" and r["pair"] == pair]
    assert len(failed) == 1 and failed[0]["error"] == "internal: RecursionError"
    assert "recursion" in failed[0]["reason"]
    con = duckdb.connect(str(tmp_path / "wb.duckdb"), read_only=True)
    try:
        errors = dict(con.execute("SELECT item_id, challenger_error FROM shadow_requests").fetchall())
    finally:
        con.close()
    assert errors == {"deep": "internal: RecursionError", "ok0": None, "ok1": None, "ok2": None}
