"""Live mirror: a System One endpoint that answers with the champion and shadows the challenger.

Each ``POST /v1/systemone`` is forwarded to the champion; its status, reason, headers and body bytes go
back to the caller unchanged (compressed answers stay compressed). The same request then goes to the
challenger in a background task — started once the champion's answer has been written back, bounded
in time, in number and in buffered bytes (excess is *shed* and logged, never queued), never awaited
by the caller. A champion error is passed through as the champion's own answer (its status and body,
a 413 included); a champion that cannot be reached becomes 502 (network) or 504 (timeout) with a
System One style error body.

Durability: the champion half of every pair is fsynced to the :class:`~workbench.shadow.journal.Journal`
*before* the response is sent, so every acknowledged request survives a crash or restart. The
challenger half is appended when it completes — a failed challenger call as a failure with its
reason (:mod:`workbench.shadow.challenger`); a pair whose challenger half was lost in a crash is
ingested with ``challenger_error = "lost"``.

The HTTP layer is aiohttp: its low-level server (``aiohttp.web.Server``, llhttp parser) in front and
an aiohttp client session per upstream. Limits (all :class:`MirrorConfig` fields and
``workbench shadow serve`` options), each answered by the mirror itself without calling anyone:

========================  ==========  ===============================================================
limit                     default     over it
========================  ==========  ===============================================================
``max_body_bytes``        8 MiB       413 at once, from the ``Content-Length`` (or while a chunked
                                      body streams in); nothing is forwarded
``max_buffered_bytes``    128 MiB     503 + ``Retry-After: 1`` at once (not queued: a queue would
                                      hold the caller's connection and memory); a request reserves
                                      its ``Content-Length`` (a chunked one ``max_body_bytes``) from
                                      its head on; challenger calls may hold at most half of the
                                      budget, beyond that they are shed
``header_timeout``        10 s        a request head still incomplete this long after its first
                                      byte: the connection is closed (slowloris)
``body_timeout``          30 s        a body still incomplete this long after its head: 408
``idle_timeout``          75 s        a connection without a request this long is closed
``max_connections``       1024        further connections are closed as soon as they are accepted
``max_journal_body``      1 MiB       the journal keeps the body's sha256 and size, not the body
========================  ==========  ===============================================================

Invalid framing — two different ``Content-Length`` headers, ``Content-Length`` with
``Transfer-Encoding``, a malformed chunk, bare-LF line ends — is refused with 400 by aiohttp's parser
before the mirror sees the request. It is logged as one line without any of the request's bytes
(:class:`~workbench.shadow.serving.QuietServerLog`, at most one line a second) and counted in
``malformed_requests``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict
from yarl import URL

from workbench.shadow.challenger import (
    ChallengerClient,
    ChallengerResult,
    challenger_record,
    endpoint_url,
    failure,
)
from workbench.shadow.journal import MAX_JOURNAL_BODY, Journal, champion_record, now_iso
from workbench.shadow.serving import QuietServerLog, run_until_stopped

#: Diagnostics of the mirror (a journal write that failed while the champion's answer went out unchanged).
LOG = logging.getLogger("workbench.shadow.mirror")

ITEM_ID_HEADER = "x-item-id"
MiB = 1024 * 1024
#: Not forwarded either way: they describe one connection, not the message (RFC 9110 §7.6.1),
#: plus the framing the sending side sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
        "expect",
    }
)


@dataclass
class MirrorConfig:
    """Settings of one mirror process (the limits are described in the module docstring).

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
    max_body_bytes : int, default=8 MiB
        Largest request body accepted; larger ones get 413 from the mirror, forwarded to nobody.
    max_buffered_bytes : int, default=128 MiB
        Request bodies held in memory at once (requests in progress and challenger calls); a request
        that does not fit gets 503 with ``Retry-After``. Challenger calls hold at most half.
    header_timeout, body_timeout, idle_timeout : float, default=10, 30, 75 s
        Time for a request head to arrive once it started, for its body once the head is in, and
        for a keep-alive connection to send its next request.
    max_connections : int, default=1024
        Open client connections; more are closed on accept.
    max_journal_body : int, default=1 MiB
        Bodies above this are journaled as ``sha256`` + size (see :mod:`workbench.shadow.journal`).
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
    max_body_bytes: int = 8 * MiB
    max_buffered_bytes: int = 128 * MiB
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 75.0
    max_connections: int = 1024
    max_journal_body: int = MAX_JOURNAL_BODY

    def validate(self) -> None:
        from workbench.errors import WorkbenchError

        if not 0.0 < self.sample_rate <= 1.0:
            raise WorkbenchError(f"`sample_rate` {self.sample_rate} must be in (0, 1]")
        for name in ("max_body_bytes", "max_buffered_bytes", "max_connections", "max_journal_body"):
            if getattr(self, name) < 1:
                raise WorkbenchError(f"{name} = {getattr(self, name)} must be positive")
        if self.max_buffered_bytes < self.max_body_bytes:
            raise WorkbenchError(
                f"max_buffered_bytes ({self.max_buffered_bytes}) is below max_body_bytes ({self.max_body_bytes})",
                hint="the buffer must hold at least one request of the largest size",
            )
        for name in ("header_timeout", "body_timeout", "idle_timeout", "champion_timeout", "challenger_timeout"):
            if not getattr(self, name) > 0:
                raise WorkbenchError(f"{name} = {getattr(self, name)} must be positive (seconds)")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|k|mb|mib|m|gb|gib|g)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": MiB, "mb": 10**6, "mib": MiB}
_UNITS |= {"g": 1024**3, "gb": 10**9, "gib": 1024**3}


def parse_size(text: str, *, option: str = "size") -> int:
    """``"8MiB"``, ``"512k"``, ``"1000000"`` → bytes (``k``/``m``/``g`` alone are binary)."""
    from workbench.errors import WorkbenchError

    m = _SIZE.match(text)
    if not m:
        raise WorkbenchError(f"{option} {text!r} is not a size", hint="e.g. 8MiB, 512KiB or a number of bytes")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])


def _error_body(kind: str, message: str) -> bytes:
    return json.dumps({"error": {"type": kind, "message": message}}).encode()


def _json(status: int, body: bytes, *, close: bool = False, headers: dict[str, str] | None = None) -> web.Response:
    response = web.Response(status=status, body=body, content_type="application/json", headers=headers)
    if close:  # the body was not read: do not reuse the connection
        response.force_close()
    return response


class _Connection(RequestHandler):
    """aiohttp's connection handler plus the mirror's connection cap and header-read timeout.

    aiohttp already closes a connection that delivers no complete request head within its
    keep-alive timeout (``idle_timeout``); this adds the shorter clock that starts with the first
    byte of a head (``header_timeout``), so a slowloris client is dropped quickly.
    """

    def __init__(self, manager: web.Server, mirror: MirrorApp, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._mirror = mirror
        self._busy = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        m = self._mirror
        if m.open_connections >= m.config.max_connections:
            m.stats["connections_refused"] += 1
            self.force_close()
            return
        m.open_connections += 1
        self._counted = True

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._counted:
            self._mirror.open_connections -= 1
            self._counted = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._busy and self._head_timer is None and data:
            self._head_timer = self._loop.call_later(self._mirror.config.header_timeout, self._head_expired)
        super().data_received(data)

    def _head_expired(self) -> None:
        self._head_timer = None
        if not self._busy:
            self._mirror.stats["connections_timed_out"] += 1
            self.force_close()

    def request_started(self) -> None:
        self._busy = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def request_finished(self) -> None:
        self._busy = False

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        # aiohttp's message for a request it cannot parse quotes the request's bytes: not echoed
        return super().handle_error(request, status, exc, "malformed request" if status == 400 else message)


class _Server(web.Server):
    """aiohttp's low-level server, building :class:`_Connection` handlers."""

    def __init__(self, handler: Any, *, mirror: MirrorApp, **kwargs: Any):
        super().__init__(handler, **kwargs)
        self._mirror = mirror
        self._handler_kwargs = kwargs

    def __call__(self) -> RequestHandler:
        return _Connection(self, self._mirror, loop=asyncio.get_running_loop(), **self._handler_kwargs)


class _BodyRefused(Exception):
    def __init__(self, response: web.Response):
        self.response = response


class MirrorApp:
    """The mirror's request handling and lifecycle (see the module docstring)."""

    def __init__(self, config: MirrorConfig):
        config.validate()
        self.config = config
        self.champion_url = endpoint_url(config.champion)
        self._champion_target = URL(self.champion_url)
        # the challenger is usually hosted and reached through the team's proxy (HTTPS_PROXY/NO_PROXY)
        self.challenger = ChallengerClient(
            config.challenger, timeout=config.challenger_timeout, headers=config.challenger_headers, trust_env=True
        )
        self.boot_id = uuid.uuid4().hex[:8]
        self._seq = 0
        self._tasks: set[asyncio.Task] = set()
        self.buffered_bytes = 0  # request bodies held: requests in progress + challenger calls
        self.challenger_bytes = 0
        self.open_connections = 0
        self.stats = {
            "requests": 0,
            "champion_errors": 0,
            "challenger_done": 0,
            "challenger_errors": 0,
            "challenger_shed": 0,
            "journal_errors": 0,
            "rejected_too_large": 0,
            "rejected_busy": 0,
            "rejected_slow_body": 0,
            "connections_refused": 0,
            "connections_timed_out": 0,
        }
        self.journal: Journal | None = None
        self._champion: aiohttp.ClientSession | None = None
        self.on_closed: Callable[[MirrorApp], None] | None = None  # run once the journal is closed
        self._sampler = random.Random(self.boot_id)
        self.server_log = QuietServerLog("mirror")  # malformed requests: one line, never their bytes

    # -- lifecycle ----------------------------------------------------------------------------
    async def startup(self) -> None:
        self.journal = Journal(self.config.journal, fsync=self.config.fsync)
        # Raw bytes both ways (no decompression), no headers of aiohttp's own beyond Host and the
        # framing: the champion sees the caller's request, the caller sees the champion's answer.
        # No cookie jar: one caller's cookies must never ride on another caller's request.
        self._champion = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0),
            timeout=aiohttp.ClientTimeout(total=self.config.champion_timeout),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        await self.challenger.start()

    async def shutdown(self) -> None:
        # Let running challenger calls finish (each is bounded by its timeout), then close.
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.config.challenger_timeout + 1.0)
        if self._champion is not None:
            await self._champion.close()
        await self.challenger.aclose()
        if self.journal is not None:
            self.journal.close()
        if self.on_closed is not None:  # e.g. ingest the journal into the store
            await asyncio.to_thread(self.on_closed, self)

    def status(self) -> dict[str, Any]:
        return {
            **self.stats,
            "challenger_in_flight": len(self._tasks),
            "buffered_bytes": self.buffered_bytes,
            "open_connections": self.open_connections,
            "malformed_requests": self.server_log.malformed,
            "boot_id": self.boot_id,
            "name": self.config.name,
        }

    # -- requests -----------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = request.protocol
        if isinstance(conn, _Connection):
            conn.request_started()
        try:
            if request.method == "POST" and request.path == self.config.path:
                return await self._mirror(request)
            if request.method == "GET" and request.path == "/v1/shadow/status":
                return _json(200, json.dumps(self.status()).encode())
            return _json(404, _error_body("not_found", f"the mirror serves POST {self.config.path}"))
        finally:
            if isinstance(conn, _Connection):
                conn.request_finished()

    async def _read_body(self, request: web.BaseRequest) -> bytes:
        """The whole body within the size and time limits, else :class:`_BodyRefused`."""
        limit = self.config.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.config.body_timeout):
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > limit:  # chunked: the length shows only as it streams in
                        raise _BodyRefused(self._too_large(size, streamed=True))
                    chunks.append(chunk)
        except TimeoutError:
            self.stats["rejected_slow_body"] += 1
            raise _BodyRefused(
                _json(
                    408,
                    _error_body("timeout", f"request body not received within {self.config.body_timeout:g} s"),
                    close=True,
                )
            ) from None
        return b"".join(chunks)

    def _too_large(self, size: int, *, streamed: bool = False) -> web.Response:
        self.stats["rejected_too_large"] += 1
        what = f"more than {size - 1}" if streamed else str(size)
        return _json(
            413,
            _error_body(
                "request_too_large",
                f"request body of {what} bytes is over the mirror's limit of {self.config.max_body_bytes} bytes",
            ),
            close=True,
        )

    async def _mirror(self, request: web.BaseRequest) -> web.StreamResponse:
        cfg = self.config
        length = request.content_length
        if length is not None and length > cfg.max_body_bytes:
            return self._too_large(length)
        need = length if length is not None else cfg.max_body_bytes
        if self.buffered_bytes + need > cfg.max_buffered_bytes:
            self.stats["rejected_busy"] += 1
            return _json(
                503,
                _error_body(
                    "overloaded",
                    f"the mirror holds {self.buffered_bytes} bytes of request bodies (limit {cfg.max_buffered_bytes})",
                ),
                headers={"Retry-After": "1"},
                close=True,
            )
        self.buffered_bytes += need
        try:
            if request.headers.get("Expect", "").lower() == "100-continue":
                await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                body = await self._read_body(request)
            except _BodyRefused as refused:
                return refused.response
            response, after = await self._answer(request, body)
            if after is not None:  # send the champion's answer before any challenger work starts
                try:
                    await response.prepare(request)
                    await response.write_eof()
                finally:  # a caller that went away still leaves a pair to compare
                    after()
            return response
        finally:
            self.buffered_bytes -= need

    async def _call_champion(self, request: web.BaseRequest, body: bytes) -> tuple[int, str, CIMultiDict, bytes]:
        assert self._champion is not None  # set by startup()
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
        for attempt in (1, 2):
            try:
                async with self._champion.post(
                    self._champion_target, data=body, headers=headers, allow_redirects=False
                ) as resp:  # a redirect is the champion's answer: passed through, not followed
                    raw = await resp.read()
                    out = CIMultiDict((k, v) for k, v in resp.headers.items() if k.lower() not in HOP_BY_HOP)
                    return resp.status, resp.reason or "", out, raw
            except aiohttp.ServerDisconnectedError:
                # a pooled connection the champion closed as we sent: nothing was answered, once more
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _answer(self, request: web.BaseRequest, body: bytes) -> tuple[web.Response, Callable[[], None] | None]:
        self._seq += 1
        self.stats["requests"] += 1
        pair = f"{self.boot_id}-{self._seq:08d}"
        item_id = request.headers.get(ITEM_ID_HEADER) or pair
        arrived = now_iso()
        t0 = time.perf_counter()
        error = None
        try:
            status, reason, out_headers, raw = await self._call_champion(request, body)
            encoding = out_headers.get("Content-Encoding")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            error = "timeout" if isinstance(exc, TimeoutError) else "network"
            status, reason = (504, "Gateway Timeout") if error == "timeout" else (502, "Bad Gateway")
            raw = _error_body(error, f"champion unreachable: {type(exc).__name__}")
            out_headers, encoding = CIMultiDict({"Content-Type": "application/json"}), None
        latency_ms = (time.perf_counter() - t0) * 1000.0
        if error or status >= 400:
            self.stats["champion_errors"] += 1
        sampled = self.config.sample_rate >= 1.0 or self._sampler.random() < self.config.sample_rate
        record = champion_record(
            pair,
            item_id=item_id,
            ts=arrived,
            shadow=self.config.name,
            request=body,
            status=status,
            body=raw,
            body_text=_decoded(raw, encoding),
            latency_ms=latency_ms,
            error=error,
            sampled=sampled,
            max_body=self.config.max_journal_body,
        )
        try:
            assert self.journal is not None  # set by startup()
            await self.journal.append_durable(record)
        except Exception as exc:  # never change the champion's answer because our disk failed
            self.stats["journal_errors"] += 1
            LOG.error("shadow mirror: journal write failed: %s: %s", type(exc).__name__, exc)
        response = web.Response(status=status, reason=reason, headers=out_headers, body=raw)
        if not sampled:
            return response, None
        headers = list(request.headers.items())
        return response, (lambda: self._start_challenger(pair, body, headers))

    # -- challenger -----------------------------------------------------------------------------
    def _start_challenger(self, pair: str, body: bytes, headers: list[tuple[str, str]]) -> None:
        cfg = self.config
        if (
            len(self._tasks) >= cfg.max_challenger_in_flight
            or self.challenger_bytes + len(body) > cfg.max_buffered_bytes // 2
        ):
            self.stats["challenger_shed"] += 1
            self._record_challenger(pair, failure("shed"), count=False)
            return
        self.challenger_bytes += len(body)
        self.buffered_bytes += len(body)
        task = asyncio.get_running_loop().create_task(self.challenger.call(body, headers))
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._challenger_done(t, pair, len(body)))

    def _challenger_done(self, task: asyncio.Task, pair: str, size: int) -> None:
        self._tasks.discard(task)
        self.challenger_bytes -= size
        self.buffered_bytes -= size
        if task.cancelled():
            result = failure("cancelled")
        elif task.exception() is not None:  # ChallengerClient.call does not raise; belt and braces
            exc = task.exception()
            result = failure(f"internal: {type(exc).__name__}", exc)
        else:
            result = task.result()
        self._record_challenger(pair, result)

    def _record_challenger(self, pair: str, result: ChallengerResult, *, count: bool = True) -> None:
        if count:
            self.stats["challenger_done"] += 1
            if result.failed:
                self.stats["challenger_errors"] += 1
        record = challenger_record(pair, result, max_body=self.config.max_journal_body)
        # written at once (survives a crash of this process), fsynced with the next champion record
        try:
            assert self.journal is not None  # set by startup()
            self.journal.append(record)
        except Exception as exc:
            self.stats["journal_errors"] += 1
            LOG.error("shadow mirror: journal write failed: %s: %s", type(exc).__name__, exc)


def _decoded(raw: bytes, encoding: str | None) -> str | None:
    """The champion's body as text for the journal when it came compressed (None: as it is)."""
    if not encoding:
        return None
    import gzip
    import zlib

    try:
        if encoding.lower() == "gzip":
            return gzip.decompress(raw).decode("utf-8", errors="replace")
        if encoding.lower() == "deflate":
            return zlib.decompress(raw).decode("utf-8", errors="replace")
    except (OSError, zlib.error, EOFError):
        pass
    return None


# -- the server ------------------------------------------------------------------------------------
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
    server = _Server(
        app.handle,
        mirror=app,
        keepalive_timeout=config.idle_timeout,
        access_log=None,
        lingering_time=min(10.0, config.body_timeout),
        logger=app.server_log,
    )
    runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=config.champion_timeout + 1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    # stop accepting, answer requests in progress, close idle connections; then the challenger and journal
    await run_until_stopped(runner, shutdown=app.shutdown, stop=stop, ready=ready)
    return app


def serve(config: MirrorConfig, *, host: str = "127.0.0.1", port: int = 8790, on_closed=None) -> MirrorApp:
    """Run the mirror in this thread until SIGINT/SIGTERM (see :func:`serve_async`)."""
    return asyncio.run(serve_async(config, host=host, port=port, on_closed=on_closed))
