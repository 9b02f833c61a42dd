"""Live mirror: a System One endpoint that answers with the champion and shadows the challenger.

Each ``POST /v1/systemone`` is forwarded to the champion; its status, headers and body bytes go back
to the caller unchanged. The same request goes to the challenger in a background task, started at
arrival so it never waits on the champion, bounded in time and in number (excess is *shed* and
logged, never queued), and never awaited by the caller's response. A champion failure is passed
through as the champion's own error (its HTTP status and body); a champion that cannot be reached
becomes 502 (network) or 504 (timeout) with a System One style error body.

Durability: the champion half of every pair is fsynced to the :class:`~workbench.shadow.journal.Journal`
*before* the response is sent, so every acknowledged request survives a crash or restart. The
challenger half is appended when it completes; a pair whose challenger half was lost in a crash is
ingested with ``challenger_error = "lost"``.

The app is plain ASGI (no framework) served by uvicorn; one shared ``httpx.AsyncClient`` per side.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx

from workbench.shadow.journal import Journal

#: Headers that describe one hop, not the message (RFC 9110 §7.6.1); never forwarded either way.
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
               b"trailer", b"transfer-encoding", b"upgrade", b"host", b"content-length"}
#: Request headers the challenger receives (the caller's credentials belong to the champion).
_CHALLENGER_PASS = {b"content-type", b"accept", b"x-item-id", b"x-request-id"}
ITEM_ID_HEADER = b"x-item-id"


@dataclass
class MirrorConfig:
    """Settings of one mirror process.

    Parameters
    ----------
    champion : str
        System One endpoint URL (``http://host:port/v1/systemone``; a ``systemone:`` prefix is accepted).
    challenger : str
        A System One endpoint URL as above — a ``?model=NAME`` query rewrites the body's ``model``
        for the challenger only (the champion always receives the caller's bytes) — or any provider
        spec of the registry (``cloudflare:clef-flash``, ``local:minilm-zeroshot``, ``rules:PATH``...),
        called through the provider layer on a separate event-loop thread.
    journal : path
        Append-only JSON-lines log (see :mod:`workbench.shadow.journal`).
    champion_timeout, challenger_timeout : float
        Seconds per call. The challenger's timeout bounds how long its task lives.
    max_challenger_in_flight : int, default=256
        Challenger calls beyond this are shed (logged with error ``shed``) so a stuck challenger
        cannot grow memory or starve the champion.
    challenger_headers : dict
        Extra headers for the challenger (e.g. its own ``Authorization``); never logged.
    """

    champion: str
    challenger: str
    journal: Path
    name: str = "mirror"
    path: str = "/v1/systemone"
    champion_timeout: float = 30.0
    challenger_timeout: float = 5.0
    max_challenger_in_flight: int = 256
    challenger_headers: dict[str, str] = field(default_factory=dict)
    fsync: bool = True


def endpoint_url(spec: str) -> str:
    """``systemone:http://…`` or ``http://…`` → the URL; anything else is refused."""
    from workbench.errors import WorkbenchError

    url = spec.split(":", 1)[1] if spec.startswith("systemone:") else spec
    if not url.startswith(("http://", "https://")):
        raise WorkbenchError(f"shadow serve needs a System One endpoint URL, got {spec!r}",
                             hint="e.g. http://127.0.0.1:8787/v1/systemone or systemone:https://…/v1/systemone")
    return url


def _is_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://", "systemone:"))


def _split_model(url: str) -> tuple[str, str | None]:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    model = query.pop("model", [None])[0]
    rest = "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
    return urlunsplit(parts._replace(query=rest)), model


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _text(raw: bytes, encoding: str | None) -> str:
    """Body as text for the journal (decompressed when the champion compressed it)."""
    if encoding:
        import gzip
        import zlib

        try:
            raw = gzip.decompress(raw) if encoding == "gzip" else zlib.decompress(raw) if encoding == "deflate" else raw
        except (OSError, zlib.error):
            pass
    return raw.decode("utf-8", errors="replace")


def _error_kind(exc: BaseException) -> str:
    return "timeout" if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)) else "network"


class MirrorApp:
    """ASGI application of the live mirror (see the module docstring)."""

    def __init__(self, config: MirrorConfig, *, champion_transport: httpx.AsyncBaseTransport | None = None,
                 challenger_transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.champion_url = endpoint_url(config.champion)
        self.challenger_is_url = _is_url(config.challenger)
        if self.challenger_is_url:
            self.challenger_url, self.challenger_model = _split_model(endpoint_url(config.challenger))
        else:
            self.challenger_url, self.challenger_model = None, None
        self._provider = None
        self._side_loop: asyncio.AbstractEventLoop | None = None
        self._transports = (champion_transport, challenger_transport)
        self.boot_id = uuid.uuid4().hex[:8]
        self._seq = 0
        self._tasks: set[asyncio.Task] = set()
        self.stats = {"requests": 0, "champion_errors": 0, "challenger_done": 0, "challenger_errors": 0,
                      "challenger_shed": 0, "journal_errors": 0}
        self.journal: Journal | None = None
        self._champion: httpx.AsyncClient | None = None
        self._challenger: httpx.AsyncClient | None = None
        self.on_closed = None  # callable(app) run once the journal is closed

    # -- lifecycle ----------------------------------------------------------------------------
    async def startup(self) -> None:
        cfg = self.config
        self.journal = Journal(cfg.journal, fsync=cfg.fsync)
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
        self._champion = httpx.AsyncClient(transport=self._transports[0], limits=limits,
                                           timeout=httpx.Timeout(cfg.champion_timeout, connect=5.0))
        self._challenger = httpx.AsyncClient(transport=self._transports[1], limits=limits,
                                             timeout=httpx.Timeout(cfg.challenger_timeout,
                                                                   connect=min(5.0, cfg.challenger_timeout)),
                                             headers=cfg.challenger_headers)
        if not self.challenger_is_url:
            self._start_provider()

    def _start_provider(self) -> None:
        """Build the challenger provider and give it its own event loop thread: a CPU-heavy local
        model or a slow client must not hold up the loop that answers with the champion."""
        import os
        import threading

        from workbench.providers.registry import ProviderContext, get_provider

        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name="shadow-challenger", daemon=True).start()
        ready.wait(5)
        self._side_loop = loop
        context = ProviderContext(env=dict(os.environ), timeout=self.config.challenger_timeout)
        self._provider = get_provider(self.config.challenger, context=context)

    async def shutdown(self) -> None:
        # Let running challenger calls finish (each is bounded by its timeout), then close.
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.config.challenger_timeout + 1.0)
        for client in (self._champion, self._challenger):
            if client is not None:
                await client.aclose()
        if self._side_loop is not None:
            if self._provider is not None:
                try:
                    await asyncio.wait_for(asyncio.wrap_future(
                        asyncio.run_coroutine_threadsafe(self._provider.aclose(), self._side_loop)), 5.0)
                except Exception:
                    pass
            self._side_loop.call_soon_threadsafe(self._side_loop.stop)
        if self.journal is not None:
            await asyncio.to_thread(self.journal.close)
        if self.on_closed is not None:  # e.g. ingest the journal: uvicorn re-raises SIGTERM after this
            await asyncio.to_thread(self.on_closed, self)

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "POST" and path == self.config.path:
            await self._mirror(scope, receive, send)
        elif method == "GET" and path == "/v1/shadow/status":
            body = json.dumps({**self.stats, "challenger_in_flight": len(self._tasks), "boot_id": self.boot_id,
                               "name": self.config.name}).encode()
            await _respond(send, 200, [(b"content-type", b"application/json")], body)
        else:
            await _respond(send, 404, [(b"content-type", b"application/json")],
                           b'{"error":{"type":"not_found","message":"the mirror serves POST ' +
                           self.config.path.encode() + b'"}}')

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # e.g. journal path not writable
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _mirror(self, scope: dict, receive, send) -> None:
        body = bytearray()
        while True:
            message = await receive()
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = bytes(body)
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP_BY_HOP]
        self._seq += 1
        self.stats["requests"] += 1
        pair = f"{self.boot_id}-{self._seq:08d}"
        item_id = next((v.decode("latin-1") for k, v in headers if k == ITEM_ID_HEADER), None) or pair
        arrived = _now_iso()
        self._start_challenger(pair, item_id, body, headers)

        t0 = time.perf_counter()
        error = None
        try:
            request = self._champion.build_request("POST", self.champion_url, content=body, headers=headers)
            response = await self._champion.send(request, stream=True)
            try:
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
            status = response.status_code
            out_headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
            encoding = response.headers.get("content-encoding")
        except (httpx.HTTPError, asyncio.TimeoutError) as exc:
            error = _error_kind(exc)
            status = 504 if error == "timeout" else 502
            raw = json.dumps({"error": {"type": error, "message": f"champion unreachable: {type(exc).__name__}"}}
                             ).encode()
            out_headers = [(b"content-type", b"application/json")]
            encoding = None
        latency_ms = (time.perf_counter() - t0) * 1000.0
        if error or status >= 400:
            self.stats["champion_errors"] += 1
        record = {"kind": "champion", "pair": pair, "item_id": item_id, "ts": arrived,
                  "shadow": self.config.name, "request": body.decode("utf-8", errors="replace"),
                  "status": status, "body": _text(raw, encoding), "latency_ms": latency_ms, "error": error}
        try:
            await self.journal.append_durable(record)
        except Exception as exc:  # never change the champion's answer because our disk failed
            self.stats["journal_errors"] += 1
            print(f"shadow mirror: journal write failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        await _respond(send, status, out_headers, raw)

    # -- challenger -----------------------------------------------------------------------------
    def _start_challenger(self, pair: str, item_id: str, body: bytes, headers: list) -> None:
        if len(self._tasks) >= self.config.max_challenger_in_flight:
            self.stats["challenger_shed"] += 1
            self.journal.append({"kind": "challenger", "pair": pair, "status": None, "body": None,
                                 "latency_ms": None, "error": "shed"})
            return
        task = asyncio.get_running_loop().create_task(self._call_challenger(pair, body, headers))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call_challenger(self, pair: str, body: bytes, headers: list) -> None:
        if not self.challenger_is_url:
            await self._call_provider(pair, body)
            return
        sent_headers = [(k, v) for k, v in headers if k in _CHALLENGER_PASS]
        if self.challenger_model is not None:
            try:
                doc = json.loads(body)
                doc["model"] = self.challenger_model
                body = json.dumps(doc, ensure_ascii=False).encode("utf-8")
            except (ValueError, TypeError):
                pass  # not JSON: forward as is, the challenger will refuse it like the champion
        t0 = time.perf_counter()
        status = text = error = None
        try:
            response = await asyncio.wait_for(
                self._challenger.post(self.challenger_url, content=body, headers=sent_headers),
                timeout=self.config.challenger_timeout)
            status, text = response.status_code, response.text
        except (httpx.HTTPError, asyncio.TimeoutError) as exc:
            error = _error_kind(exc)
        except Exception as exc:  # a challenger bug must never surface to the caller
            error = f"internal: {type(exc).__name__}"
        latency_ms = (time.perf_counter() - t0) * 1000.0
        self.stats["challenger_done"] += 1
        if error or (status or 0) >= 400:
            self.stats["challenger_errors"] += 1
        # Not awaited: the group commit syncs it with the next batch; nobody waits on it.
        self.journal.append({"kind": "challenger", "pair": pair, "status": status, "body": text,
                             "latency_ms": latency_ms, "error": error})


    async def _call_provider(self, pair: str, body: bytes) -> None:
        """Challenger through the provider layer; its answer is logged in System One form."""
        from workbench.providers.base import DecisionRequest, ProviderError

        t0 = time.perf_counter()
        status = text = error = None
        try:
            doc = json.loads(body)
            request = DecisionRequest(schema=_schema_of(doc), state=doc.get("state"),
                                      images=tuple(doc.get("images") or ()))
            future = asyncio.run_coroutine_threadsafe(self._provider.decide(request), self._side_loop)
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout=self.config.challenger_timeout)
            status, text = 200, json.dumps(_system_one_body(request.schema, result), ensure_ascii=False)
        except asyncio.TimeoutError:
            error = "timeout"
        except ProviderError as exc:
            error = exc.kind.value
        except Exception as exc:  # unparsable request, provider bug: never reaches the caller
            error = f"invalid_request: {type(exc).__name__}"
        latency_ms = (time.perf_counter() - t0) * 1000.0
        self.stats["challenger_done"] += 1
        if error:
            self.stats["challenger_errors"] += 1
        self.journal.append({"kind": "challenger", "pair": pair, "status": status, "body": text,
                             "latency_ms": latency_ms, "error": error})


def _schema_of(doc: dict):
    from workbench.schema import DecisionSchema

    return DecisionSchema.from_dict({"questions": doc.get("questions")}, source="mirrored request")


def _system_one_body(schema, result) -> dict:
    """A provider result as a System One response (failed questions are left out: missing answers)."""
    from workbench.providers.local import wire_answer

    if result.raw and isinstance(result.raw.get("answers"), dict):
        body = dict(result.raw)
    else:
        body = {"model": result.model,
                "answers": {q: wire_answer(schema.questions[q], a.probs) for q, a in result.answers.items()}}
    if result.input_tokens is not None:
        body.setdefault("usage", {"input_tokens": result.input_tokens, "output_tokens": 0})
    return body


async def _respond(send, status: int, headers: list, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def serve(config: MirrorConfig, *, host: str = "127.0.0.1", port: int = 8790, on_closed=None) -> MirrorApp:
    """Run the mirror until SIGINT/SIGTERM (graceful: running challenger calls finish).

    ``on_closed(app)`` runs after the journal is closed. Code after this call may not run: uvicorn
    re-raises the stopping signal once it has shut down.
    """
    import uvicorn

    app = MirrorApp(config)
    app.on_closed = on_closed
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", access_log=False,
                                           log_level="warning", timeout_keep_alive=30,
                                           server_header=False, date_header=False))
    server.run()
    return app
