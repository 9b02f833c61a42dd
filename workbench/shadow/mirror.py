"""Live mirror: a System One endpoint that answers with the champion and shadows the challenger.

Each ``POST /v1/systemone`` is forwarded to the champion; its status, headers and body bytes go back
to the caller unchanged. The same request then goes to the challenger in a background task — started
once the champion's answer has been written back, bounded in time and in number (excess is *shed*
and logged, never queued), never awaited by the caller. A champion failure is passed through as the
champion's own error (its HTTP status and body); a champion that cannot be reached becomes 502
(network) or 504 (timeout) with a System One style error body.

Durability: the champion half of every pair is fsynced to the :class:`~workbench.shadow.journal.Journal`
*before* the response is sent, so every acknowledged request survives a crash or restart. The
challenger half is appended when it completes; a pair whose challenger half was lost in a crash is
ingested with ``challenger_error = "lost"``.

The HTTP layer is :mod:`workbench.shadow.http11` (plain asyncio streams: the mirror must add as
little CPU as possible in front of production traffic). A challenger given as a provider spec
(``cloudflare:clef-flash``, ``local:minilm-zeroshot``...) is called through the provider layer
(httpx, one shared client per provider) on its own event-loop thread.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from workbench.shadow.http11 import (
    ClientPool,
    HttpError,
    Message,
    encode_response,
    read_request,
)
from workbench.shadow.journal import Journal

#: Request headers the challenger receives (the caller's credentials belong to the champion).
_CHALLENGER_PASS = {b"content-type", b"accept", b"x-item-id", b"x-request-id"}
ITEM_ID_HEADER = b"x-item-id"
_JSON = [(b"content-type", b"application/json")]


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
        spec of the registry (``cloudflare:clef-flash``, ``local:minilm-zeroshot``, ``rules:PATH``...).
    journal : path
        Append-only JSON-lines log (see :mod:`workbench.shadow.journal`).
    champion_timeout, challenger_timeout : float
        Seconds per call. The challenger's timeout bounds how long its task lives.
    max_challenger_in_flight : int, default=256
        Challenger calls beyond this are shed (logged with error ``shed``) so a stuck challenger
        cannot grow memory or starve the champion.
    challenger_headers : dict
        Extra headers for the challenger (e.g. its own ``Authorization``); never logged.
    sample_rate : float in (0, 1], default=1.0
        Share of requests mirrored to the challenger (to bound its cost). Every champion answer is
        journaled; unsampled ones are marked and left out of the shadow session at ingest.
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
    sample_rate: float = 1.0


def endpoint_url(spec: str) -> str:
    """``systemone:http://…`` or ``http://…`` → the URL; anything else is refused."""
    from workbench.errors import WorkbenchError

    url = spec.split(":", 1)[1] if spec.startswith("systemone:") else spec
    if not url.startswith(("http://", "https://")):
        raise WorkbenchError(
            f"shadow serve needs a System One endpoint URL, got {spec!r}",
            hint="e.g. http://127.0.0.1:8787/v1/systemone or systemone:https://…/v1/systemone",
        )
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
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _text(raw: bytes, encoding: bytes | None) -> str:
    """Body as text for the journal (decompressed when the champion compressed it)."""
    if encoding:
        import gzip
        import zlib

        try:
            if encoding.lower() == b"gzip":
                raw = gzip.decompress(raw)
            elif encoding.lower() == b"deflate":
                raw = zlib.decompress(raw)
        except (OSError, zlib.error):
            pass
    return raw.decode("utf-8", errors="replace")


def _error_kind(exc: BaseException) -> str:
    return "timeout" if isinstance(exc, asyncio.TimeoutError) else "network"


class MirrorApp:
    """The mirror's request handling and lifecycle (see the module docstring)."""

    def __init__(self, config: MirrorConfig):
        self.config = config
        self.champion_url = endpoint_url(config.champion)
        self.challenger_is_url = _is_url(config.challenger)
        self.challenger_url: str | None = None
        self.challenger_model: str | None = None
        if self.challenger_is_url:
            self.challenger_url, self.challenger_model = _split_model(endpoint_url(config.challenger))
        self.boot_id = uuid.uuid4().hex[:8]
        self._seq = 0
        self._tasks: set[asyncio.Task] = set()
        self.stats = {
            "requests": 0,
            "champion_errors": 0,
            "challenger_done": 0,
            "challenger_errors": 0,
            "challenger_shed": 0,
            "journal_errors": 0,
        }
        self.journal: Journal | None = None
        self._champion: ClientPool | None = None
        self._challenger: ClientPool | None = None
        self._challenger_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in config.challenger_headers.items()
        ]
        self._provider: Any = None  # a workbench provider (providers.registry)
        self._side_loop: asyncio.AbstractEventLoop | None = None
        self.on_closed: Callable[[MirrorApp], None] | None = None  # run once the journal is closed
        if not 0.0 < config.sample_rate <= 1.0:
            from workbench.errors import WorkbenchError

            raise WorkbenchError(f"--sample-rate {config.sample_rate} must be in (0, 1]")
        import random

        self._sampler = random.Random(self.boot_id)

    # -- lifecycle ----------------------------------------------------------------------------
    async def startup(self) -> None:
        self.journal = Journal(self.config.journal, fsync=self.config.fsync)
        self._champion = ClientPool(self.champion_url, max_idle=256)
        if self.challenger_is_url:
            assert self.challenger_url is not None
            self._challenger = ClientPool(self.challenger_url, max_idle=256)
        else:
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
        for pool in (self._champion, self._challenger):
            if pool is not None:
                await pool.aclose()
        if self._side_loop is not None:
            if self._provider is not None:
                try:
                    await asyncio.wait_for(
                        asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._provider.aclose(), self._side_loop)),
                        5.0,
                    )
                except Exception:
                    pass
            self._side_loop.call_soon_threadsafe(self._side_loop.stop)
        if self.journal is not None:
            self.journal.close()
        if self.on_closed is not None:  # e.g. ingest the journal into the store
            await asyncio.to_thread(self.on_closed, self)

    # -- requests -----------------------------------------------------------------------------
    async def handle(self, request: Message) -> tuple[int, list, bytes, Callable[[], None] | None]:
        """(status, headers, body, after) for one request; ``after()`` runs once the answer is sent."""
        path = request.target.split("?", 1)[0]
        if request.method == "POST" and path == self.config.path:
            return await self._mirror(request)
        if request.method == "GET" and path == "/v1/shadow/status":
            body = json.dumps(
                {
                    **self.stats,
                    "challenger_in_flight": len(self._tasks),
                    "boot_id": self.boot_id,
                    "name": self.config.name,
                }
            ).encode()
            return 200, _JSON, body, None
        return (
            404,
            _JSON,
            (b'{"error":{"type":"not_found","message":"the mirror serves POST ' + self.config.path.encode() + b'"}}'),
            None,
        )

    async def _mirror(self, request: Message) -> tuple[int, list, bytes, Callable[[], None] | None]:
        body, headers = request.body, request.headers
        self._seq += 1
        self.stats["requests"] += 1
        pair = f"{self.boot_id}-{self._seq:08d}"
        item_id = next((v.decode("latin-1") for k, v in headers if k == ITEM_ID_HEADER), None) or pair
        arrived = _now_iso()
        t0 = time.perf_counter()
        error = None
        try:
            assert self._champion is not None  # set by startup()
            response = await asyncio.wait_for(
                self._champion.request("POST", headers, body), self.config.champion_timeout
            )
            status, out_headers, raw = response.status, response.headers, response.body
            encoding = response.header(b"content-encoding")
        except (TimeoutError, OSError, EOFError, HttpError, asyncio.IncompleteReadError) as exc:
            error = _error_kind(exc)
            status = 504 if error == "timeout" else 502
            raw = json.dumps(
                {"error": {"type": error, "message": f"champion unreachable: {type(exc).__name__}"}}
            ).encode()
            out_headers, encoding = _JSON, None
        latency_ms = (time.perf_counter() - t0) * 1000.0
        if error or status >= 400:
            self.stats["champion_errors"] += 1
        sampled = self.config.sample_rate >= 1.0 or self._sampler.random() < self.config.sample_rate
        record = {
            "kind": "champion",
            "pair": pair,
            "item_id": item_id,
            "ts": arrived,
            "shadow": self.config.name,
            "request": body.decode("utf-8", errors="replace"),
            "status": status,
            "body": _text(raw, encoding),
            "latency_ms": latency_ms,
            "error": error,
            "sampled": sampled,
        }
        try:
            assert self.journal is not None  # set by startup()
            await self.journal.append_durable(record)
        except Exception as exc:  # never change the champion's answer because our disk failed
            self.stats["journal_errors"] += 1
            print(f"shadow mirror: journal write failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if not sampled:
            return status, out_headers, raw, None
        return status, out_headers, raw, (lambda: self._start_challenger(pair, body, headers))

    # -- challenger -----------------------------------------------------------------------------
    def _start_challenger(self, pair: str, body: bytes, headers: list) -> None:
        if len(self._tasks) >= self.config.max_challenger_in_flight:
            self.stats["challenger_shed"] += 1
            assert self.journal is not None  # set by startup()
            self.journal.append(
                {"kind": "challenger", "pair": pair, "status": None, "body": None, "latency_ms": None, "error": "shed"}
            )
            return
        call = self._call_challenger(pair, body, headers) if self.challenger_is_url else self._call_provider(pair, body)
        task = asyncio.get_running_loop().create_task(call)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call_challenger(self, pair: str, body: bytes, headers: list) -> None:
        sent_headers = [(k, v) for k, v in headers if k in _CHALLENGER_PASS] + self._challenger_headers
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
            assert self._challenger is not None  # set by startup()
            response = await asyncio.wait_for(
                self._challenger.request("POST", sent_headers, body), self.config.challenger_timeout
            )
            status, text = response.status, _text(response.body, response.header(b"content-encoding"))
        except (TimeoutError, OSError, EOFError, HttpError, asyncio.IncompleteReadError) as exc:
            error = _error_kind(exc)
        except Exception as exc:  # a challenger bug must never surface to the caller
            error = f"internal: {type(exc).__name__}"
        self._record_challenger(pair, status, text, error, t0)

    async def _call_provider(self, pair: str, body: bytes) -> None:
        """Challenger through the provider layer; its answer is logged in System One form."""
        from workbench.providers.base import DecisionRequest, ProviderError

        t0 = time.perf_counter()
        status = text = error = None
        try:
            doc = json.loads(body)
            request = DecisionRequest(
                schema=_schema_of(doc), state=doc.get("state"), images=tuple(doc.get("images") or ())
            )
            assert self._provider is not None and self._side_loop is not None  # set by startup()
            future = asyncio.run_coroutine_threadsafe(self._provider.decide(request), self._side_loop)
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout=self.config.challenger_timeout)
            status, text = 200, json.dumps(_system_one_body(request.schema, result), ensure_ascii=False)
        except TimeoutError:
            error = "timeout"
        except ProviderError as exc:
            error = exc.kind.value
        except Exception as exc:  # unparsable request, provider bug: never reaches the caller
            error = f"invalid_request: {type(exc).__name__}"
        self._record_challenger(pair, status, text, error, t0)

    def _record_challenger(self, pair: str, status, text, error, t0: float) -> None:
        latency_ms = (time.perf_counter() - t0) * 1000.0
        self.stats["challenger_done"] += 1
        if error or (status or 0) >= 400:
            self.stats["challenger_errors"] += 1
        # written at once (survives a crash of this process), fsynced with the next champion record
        assert self.journal is not None  # set by startup()
        self.journal.append(
            {
                "kind": "challenger",
                "pair": pair,
                "status": status,
                "body": text,
                "latency_ms": latency_ms,
                "error": error,
            }
        )


def _schema_of(doc: dict):
    from workbench.schema import DecisionSchema

    return DecisionSchema.from_dict({"questions": doc.get("questions")}, source="mirrored request")


def _system_one_body(schema, result) -> dict:
    """A provider result as a System One response (failed questions are left out: missing answers)."""
    from workbench.providers.local import wire_answer

    if result.raw and isinstance(result.raw.get("answers"), dict):
        body = dict(result.raw)
    else:
        body = {
            "model": result.model,
            "answers": {q: wire_answer(schema.questions[q], a.probs) for q, a in result.answers.items()},
        }
    if result.input_tokens is not None:
        body.setdefault("usage", {"input_tokens": result.input_tokens, "output_tokens": 0})
    return body


# -- the server ------------------------------------------------------------------------------------
class _Server:
    """Connections in, :meth:`MirrorApp.handle` per request, keep-alive, graceful stop."""

    def __init__(self, app: MirrorApp):
        self.app = app
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.writers: set[asyncio.StreamWriter] = set()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while True:
                try:
                    request = await read_request(reader, writer)
                except HttpError as exc:
                    writer.write(
                        encode_response(
                            exc.status,
                            _JSON,
                            json.dumps({"error": {"type": "invalid_request", "message": str(exc)}}).encode(),
                            keep_alive=False,
                        )
                    )
                    await writer.drain()
                    return
                if request is None:
                    return
                self.active += 1
                self.idle.clear()
                try:
                    status, headers, body, after = await self.app.handle(request)
                    writer.write(encode_response(status, headers, body, keep_alive=request.keep_alive))
                    await writer.drain()
                finally:
                    self.active -= 1
                    if self.active == 0:
                        self.idle.set()
                if after is not None:
                    after()
                if not request.keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            self.writers.discard(writer)
            writer.close()


async def serve_async(
    config: MirrorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8790,
    on_closed=None,
    stop: asyncio.Event | None = None,
    ready=None,
) -> MirrorApp:
    """Run the mirror until ``stop`` is set or SIGINT/SIGTERM arrives; return the app (with its stats).

    Stopping is graceful: no new connections, requests in progress are answered and journaled,
    running challenger calls finish (bounded by their timeout), the journal is closed, then
    ``on_closed(app)`` runs (the CLI ingests the journal into the store there).
    """
    app = MirrorApp(config)
    app.on_closed = on_closed
    await app.startup()
    server_state = _Server(app)
    server = await asyncio.start_server(server_state.connection, host, port, limit=65_536, backlog=1024)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    if ready is not None:
        ready(server.sockets[0].getsockname()[1])
    try:
        await stop.wait()
    finally:
        server.close()
        try:
            await asyncio.wait_for(server_state.idle.wait(), timeout=config.champion_timeout + 1.0)
        except TimeoutError:
            pass
        for w in list(server_state.writers):  # idle keep-alive connections
            w.close()
        await app.shutdown()
    return app


def serve(config: MirrorConfig, *, host: str = "127.0.0.1", port: int = 8790, on_closed=None) -> MirrorApp:
    """Run the mirror in this thread until SIGINT/SIGTERM (see :func:`serve_async`)."""
    return asyncio.run(serve_async(config, host=host, port=port, on_closed=on_closed))
