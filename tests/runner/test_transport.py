"""The runner's keep-alive transport, against real loopback servers."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from workbench.emulator import run_emulator
from workbench.providers.base import DecisionRequest
from workbench.providers.registry import ProviderContext, get_provider
from workbench.runner.transport import StreamTransport

from .conftest import banking_schema


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

    async def main():
        server, port, state = await _serve(handler)
        async with httpx.AsyncClient(transport=StreamTransport(), timeout=httpx.Timeout(0.3)) as client:
            url = f"http://127.0.0.1:{port}/x?y=1"
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
            with pytest.raises(httpx.ReadTimeout):
                await client.post(url, content=b"slow")
            with pytest.raises(httpx.TransportError) as exc:
                await client.post(url, content=b"reset")
            assert not isinstance(exc.value, httpx.TimeoutException)
            results = await asyncio.gather(*(client.post(url, content=f"c{i}".encode()) for i in range(20)))
            assert [r.text for r in results] == [f"c{i}" for i in range(20)]
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(transport=StreamTransport()) as client:
                server.close()
                await server.wait_closed()
                await client.post(url, content=b"nobody there")

    asyncio.run(main())


def test_answers_identical_to_httpx_default_transport():
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

        ours = asyncio.run(ask(StreamTransport()))
        reference = asyncio.run(ask(None))
        assert emu.request_count() == 6
    for a, b in zip(ours, reference):
        assert a.raw == b.raw and a.request_id and b.request_id
        assert (a.answers["intent"].probs == b.answers["intent"].probs).all()
        assert a.input_tokens == b.input_tokens and a.cost_usd == b.cost_usd
