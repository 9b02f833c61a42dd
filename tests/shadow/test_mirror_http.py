"""The mirror at its HTTP edges, over real loopback sockets.

A hand-written stand-in champion answers in ways the emulator does not (chunked + gzip bodies,
closing idle keep-alive connections, hanging); the mirror runs in-process (``serve_async`` on a
thread) and is called with httpx.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from contextlib import contextmanager

import httpx

from tests.shadow.conftest import read_journal
from workbench.shadow.mirror import MirrorConfig, serve_async

ANSWER = json.dumps({"model": "stand-in", "answers": {"q": {"type": "noul", "noul": 0.8}}}).encode()


@contextmanager
def stand_in(mode: str):
    """A loopback champion: ``chunked-gzip``, ``close-idle`` (closes each connection after one answer
    without saying so), ``hang`` (never answers), ``status-503`` or ``redirect`` (307 + a cookie)."""
    loop = asyncio.new_event_loop()
    port: list[int] = []
    ready = threading.Event()
    seen = {"requests": 0}

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(
                    [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0].split(b":")[1]
                )
                await reader.readexactly(n)
                seen["requests"] += 1
                seen.setdefault("cookies", []).extend(
                    ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"cookie:")
                )
                if mode == "hang":
                    await asyncio.sleep(30)
                if mode == "chunked-gzip":
                    body = gzip.compress(ANSWER)
                    chunks = b"".join(
                        b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7)
                    )
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                        b"transfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
                    )
                elif mode == "redirect":
                    writer.write(
                        b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /elsewhere\r\nset-cookie: sid=caller-1\r\n"
                        b"content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                    )
                elif mode == "status-503":
                    writer.write(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                        b'content-length: 18\r\n\r\n{"detail": "busy"}'
                    )
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER)
                        + ANSWER
                    )
                await writer.drain()
                if mode == "close-idle":
                    await asyncio.sleep(0.05)
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    done = asyncio.Event()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await done.wait()
        server.close()

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    ready.wait(5)
    try:
        yield f"http://127.0.0.1:{port[0]}/v1/systemone", seen
    finally:
        loop.call_soon_threadsafe(done.set)
        t.join(5)


@contextmanager
def mirror(champion: str, challenger: str, journal, **kw):
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ports: list[int] = []
    ready = threading.Event()
    result: dict = {}

    def on_ready(p):
        ports.append(p)
        ready.set()

    def run():
        asyncio.set_event_loop(loop)
        result["app"] = loop.run_until_complete(
            serve_async(
                MirrorConfig(champion=champion, challenger=challenger, journal=journal, **kw),
                port=0,
                stop=stop,
                ready=on_ready,
            )
        )

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{ports[0]}/v1/systemone", result
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(30)


BODY = {"model": "m", "state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}


def test_chunked_gzip_answer_passes_through_byte_for_byte(tmp_path):
    with stand_in("chunked-gzip") as (champ, _), stand_in("plain") as (chall, _):
        with mirror(champ, chall, tmp_path / "j.jsonl") as (url, _):
            # httpx would decode gzip; compare the raw bytes on the wire
            with httpx.Client() as c:
                with c.stream("POST", url, json=BODY) as r:
                    raw = b"".join(r.iter_raw())
                    assert r.headers["content-encoding"] == "gzip"
            assert gzip.decompress(raw) == ANSWER
    champ_rec = next(r for r in read_journal(tmp_path / "j.jsonl") if r["kind"] == "champion")
    assert json.loads(champ_rec["body"]) == json.loads(ANSWER)  # journaled decompressed


def test_stale_keep_alive_connections_are_retried_and_errors_passed_through(tmp_path):
    with stand_in("close-idle") as (champ, seen), stand_in("plain") as (chall, _):
        with mirror(champ, chall, tmp_path / "j.jsonl") as (url, _):
            with httpx.Client() as c:
                for _ in range(5):
                    r = c.post(url, json=BODY)
                    assert r.status_code == 200 and r.content == ANSWER
                    time.sleep(0.1)  # the champion closes its side meanwhile
            assert seen["requests"] == 5  # one champion call per request: nothing sent twice
    with stand_in("status-503") as (champ, _), stand_in("plain") as (chall, _):
        with mirror(champ, chall, tmp_path / "k.jsonl") as (url, _):
            r = httpx.post(url, json=BODY)
            assert (r.status_code, r.content) == (503, b'{"detail": "busy"}')


def test_unreachable_or_hanging_champion_gives_502_or_504(tmp_path):
    with stand_in("plain") as (chall, _):
        with mirror("http://127.0.0.1:9/v1/systemone", chall, tmp_path / "j.jsonl") as (url, _):
            r = httpx.post(url, json=BODY)
            assert r.status_code == 502 and r.json()["error"]["type"] == "network"
        with stand_in("hang") as (champ, _):
            with mirror(champ, chall, tmp_path / "k.jsonl", champion_timeout=0.3) as (url, result):
                r = httpx.post(url, json=BODY, timeout=5)
                assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"
            assert result["app"].stats["champion_errors"] == 1
    recs = [r for r in read_journal(tmp_path / "k.jsonl") if r["kind"] == "champion"]
    assert recs[0]["error"] == "timeout" and recs[0]["status"] == 504


def test_expect_continue_and_malformed_requests(tmp_path):
    with stand_in("plain") as (champ, _), stand_in("plain") as (chall, _):
        with mirror(champ, chall, tmp_path / "j.jsonl") as (url, _):
            r = httpx.post(url, json=BODY, headers={"expect": "100-continue"})
            assert r.status_code == 200 and r.content == ANSWER
            host, port = url.split("//")[1].split("/")[0].split(":")

            async def garbage():
                rd, wr = await asyncio.open_connection(host, int(port))
                wr.write(b"NOT HTTP\r\n\r\n")
                await wr.drain()
                return await rd.read()

            reply = asyncio.run(garbage())
            assert reply.split(b" ", 2)[1] == b"400"  # refused by the parser, never forwarded
            assert httpx.get(url.replace("/v1/systemone", "/nope")).status_code == 404


def test_sample_rate_mirrors_a_share_and_ingest_keeps_only_sampled_pairs(tmp_path):
    from workbench.store.db import connect
    from workbench.store.shadow import ingest_journal

    with stand_in("plain") as (champ, _), stand_in("plain") as (chall, seen_chall):
        with mirror(champ, chall, tmp_path / "j.jsonl", sample_rate=0.25) as (url, result):
            with httpx.Client() as c:
                for _i in range(200):
                    assert c.post(url, json=BODY).content == ANSWER
    # leaving the block stopped the mirror gracefully: every started challenger call has finished
    assert result["app"].stats["challenger_done"] == seen_chall["requests"]
    recs = list(read_journal(tmp_path / "j.jsonl"))
    champion = [r for r in recs if r["kind"] == "champion"]
    sampled = {r["pair"] for r in champion if r["sampled"]}
    assert len(champion) == 200 and 25 <= len(sampled) <= 75  # every answer journaled, about a quarter mirrored
    assert (
        {r["pair"] for r in recs if r["kind"] == "challenger"}
        == sampled
        == set(r["pair"] for r in champion if r["sampled"])
    )
    assert seen_chall["requests"] == len(sampled)
    con = connect(tmp_path / "wb.duckdb")
    assert ingest_journal(con, tmp_path / "j.jsonl", shadow="s")["n_requests"] == len(sampled)


def test_redirects_and_cookies_are_the_champions_answer_not_the_mirrors(tmp_path):
    """A 307 is passed through (not followed), and a cookie set for one caller never rides on the
    next caller's request (the mirror keeps no cookie jar)."""
    with stand_in("redirect") as (champ, seen), stand_in("plain") as (chall, _):
        with mirror(champ, chall, tmp_path / "j.jsonl") as (url, _):
            for _ in range(3):
                r = httpx.post(url, json=BODY)  # a new client each time: no cookies of its own
                assert (r.status_code, r.headers["location"], r.content) == (307, "/elsewhere", b"{}")
                assert r.headers["set-cookie"] == "sid=caller-1"
    assert seen["requests"] == 3 and seen["cookies"] == []
