"""The provider client (httpx on aiohttp's pool, :func:`build_client`) against real loopback servers.

What the runner relies on: keep-alive reuse, chunked and ``Connection: close`` answers, and a
transport failure classified by what happened (a slow server is a ``timeout``; a reset, a refused
connection or an unresolvable name is ``network``, never a timeout; see ``transport_error``).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.runner.conftest import banking_schema
from workbench.emulator import run_emulator
from workbench.providers.base import DecisionRequest, ErrorKind
from workbench.providers.http import build_client, transport_error
from workbench.providers.registry import ProviderContext, get_provider


async def _serve(handler):
    """A raw asyncio TCP server on a free loopback port; ``handler(reader, writer, state)``."""
    state = {"connections": 0}

    async def on_conn(reader, writer):
        state["connections"] += 1
        try:
            await handler(reader, writer, state)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], state


async def _read_request(reader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return await reader.readexactly(length)


def test_keep_alive_chunked_close_and_errors():
    async def handler(reader, writer, state):
        while True:
            body = await _read_request(reader)
            if body == b"chunked":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/plain\r\n\r\n"
                    b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                )
            elif body == b"close":
                writer.write(b"HTTP/1.1 201 Created\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbye")
                await writer.drain()
                return
            elif body == b"slow":
                await asyncio.sleep(1.0)
                return
            elif body == b"reset":
                writer.transport.abort()
                return
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nx-echo: yes\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    async def kind_of(client, url, body):
        with pytest.raises(httpx.TransportError) as exc:
            await client.post(url, content=body)
        return transport_error(exc.value, []).kind

    async def main():
        server, port, state = await _serve(handler)
        url = f"http://127.0.0.1:{port}/x?y=1"
        # the default timeout here: a 0.3 s connect timeout flaked on a loaded CI machine
        async with build_client() as client:
            for i in range(5):  # sequential requests reuse one connection
                r = await client.post(url, content=f"ping {i}".encode())
                assert r.status_code == 200 and r.text == f"ping {i}" and r.headers["x-echo"] == "yes"
            assert state["connections"] == 1
            r = await client.post(url, content=b"chunked")
            assert r.text == "hello world"
            r = await client.post(url, content=b"close")
            assert r.status_code == 201 and r.text == "bye"
            r = await client.post(url, content=b"again")  # the closed connection is not reused
            assert r.text == "again" and state["connections"] == 2
            # httpx-aiohttp raises ConnectTimeout for a server that hangs up: still a network failure
            assert await kind_of(client, url, b"reset") is ErrorKind.NETWORK
            results = await asyncio.gather(*(client.post(url, content=f"c{i}".encode()) for i in range(20)))
            assert [r.text for r in results] == [f"c{i}" for i in range(20)]
        async with build_client(timeout=0.3) as client:  # a short timeout only where one is the point
            assert await kind_of(client, url, b"slow") is ErrorKind.TIMEOUT
        async with build_client() as client:
            server.close()
            await server.wait_closed()
            assert await kind_of(client, url, b"nobody there") is ErrorKind.NETWORK

    asyncio.run(main())


def test_answers_identical_through_an_injected_httpx_transport():
    """The transport seam: httpx's own transport injected gives the same answers as the default client."""
    schema = banking_schema()
    texts = ["Where is my new card?", "I was charged twice for one coffee", "Can I top up with cash?"]
    with run_emulator(port=0) as emu:
        env = {
            "CLOUDFLARE_API_KEY": "dummy-key-123456",
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        }

        async def ask(transport):
            provider = get_provider("cloudflare:clef", context=ProviderContext(env=env, transport=transport))
            try:
                return [await provider.decide(DecisionRequest(schema, t)) for t in texts]
            finally:
                await provider.aclose()

        ours = asyncio.run(ask(None))
        reference = asyncio.run(ask(httpx.AsyncHTTPTransport()))
        assert emu.request_count() == 6
    for a, b in zip(ours, reference):
        assert a.raw == b.raw and a.request_id and b.request_id
        assert (a.answers["intent"].probs == b.answers["intent"].probs).all()
        assert a.input_tokens == b.input_tokens and a.cost_usd == b.cost_usd


def test_whole_body_transport_matches_httpx_on_the_wire():
    """The client's whole-body transport gives what httpx's own client and
    transport give: status, headers exactly as sent (a chunked answer gains no Content-Length),
    gzip decoded, a redirect recorded but not followed, and the same request on the wire."""
    import gzip

    packed = gzip.compress(b'{"zipped": true}')

    async def handler(reader, writer, state):
        while True:
            body = await _read_request(reader)
            state.setdefault("bodies", []).append(body)
            if body == b"chunked":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
                    b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                )
            elif body == b"gzip":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%s" % (len(packed), packed)
                )
            elif body == b"redirect":
                writer.write(b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 2\r\n\r\nno")
            else:
                writer.write(b"HTTP/1.1 503 Busy\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    def seen(r: httpx.Response):
        nxt = r.next_request
        return (
            r.status_code,
            r.headers.multi_items(),
            r.content,
            r.http_version,
            r.reason_phrase,
            None if nxt is None else (nxt.method, str(nxt.url)),
            (r.num_bytes_downloaded, r.is_closed, r.is_stream_consumed),
        )

    async def main():
        server, port, state = await _serve(handler)
        url = f"http://127.0.0.1:{port}/x"
        out = {}
        for name, client in (
            ("ours", build_client()),
            ("httpx", httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(), follow_redirects=False)),
        ):
            async with client:
                out[name] = [seen(await client.post(url, content=b)) for b in (b"chunked", b"gzip", b"redirect", b"x")]
                out[name].append(seen(await client.post(url, content=b"auth", auth=("u", "p"))))  # with auth
                r = await client.post(url, content=b"timed")
                assert r.is_closed and r.elapsed.total_seconds() >= 0
        server.close()
        await server.wait_closed()
        return out, state["bodies"]

    out, bodies = asyncio.run(main())
    assert out["ours"] == out["httpx"]
    assert out["ours"][0][1][:2] == [("transfer-encoding", "chunked"), ("x-a", "1")]
    assert out["ours"][1][2] == b'{"zipped": true}'
    assert out["ours"][2][0] == 302 and out["ours"][2][5][1].endswith("/elsewhere")  # recorded, not followed
    assert bodies == [b"chunked", b"gzip", b"redirect", b"x", b"auth", b"timed"] * 2
