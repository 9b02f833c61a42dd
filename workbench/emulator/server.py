"""The emulator server: routing, faults, answering, admin API on aiohttp's HTTP server; and running it.

See :mod:`workbench.emulator` for the endpoints. HTTP/1.1 (framing, keep-alive, ``Expect:
100-continue``, chunked bodies, TLS) is aiohttp's server with its llhttp parser; this module only
turns a request into a dialect answer. ``run_emulator`` runs a server in a background thread of
the calling process; :mod:`workbench.emulator.process` runs one as a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import random
import socket
import ssl
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from workbench.emulator.answering import (
    FIXED_TOKENS,
    Answerer,
    LexicalAnswerer,
    apply_position_bias,
    render,
    server_token_count,
    truncate_tokens,
)
from workbench.emulator.faults import FaultConfig
from workbench.providers import dialects
from workbench.providers.base import EMULATOR_HEADER
from workbench.providers.dialects import Answer, Dialect, Error, Reject

# ------------------------------------------------------------------------------------------------
# Requests and answers as the dialect code sees them (aiohttp does the HTTP)
# ------------------------------------------------------------------------------------------------
#: The dialect that words the answer to an unknown URI or method (Cloudflare's API answers them 400/7000).
NO_ROUTE_DIALECT = "cloudflare"
_SHARED_PATH = Dialect()  # words errors ``{"error": {message, type, code}}`` (the base class's)
_REASONS = {413: "Payload Too Large", 422: "Unprocessable Entity", 529: "Site Overloaded"}
_HARD_MAX_BODY = 16 * 1024 * 1024  # beyond the documented 13 MiB body cap: refuse without reading


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # case-insensitive (aiohttp's CIMultiDictProxy)
    body: bytes


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    reset: bool = False  # abort the connection with a TCP RST instead of answering

    @classmethod
    def json(cls, status: int, obj: Any, headers: dict[str, str] | None = None) -> HttpResponse:
        return cls(
            status,
            json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
            {"content-type": "application/json", **(headers or {})},
        )


def _web_response(resp: HttpResponse) -> web.Response:
    headers = {"server": "workbench-emulator", **resp.headers}
    headers[EMULATOR_HEADER] = "1"  # clients record runs answered here as emulated (cost not billed)
    close = headers.pop("connection", "") == "close"
    out = web.Response(status=resp.status, reason=_REASONS.get(resp.status), body=resp.body, headers=headers)
    if close:
        out.force_close()
    return out


def _server_ssl_context(certfile: str | Path, keyfile: str | Path | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(certfile), str(keyfile) if keyfile is not None else None)
    return ctx


# ------------------------------------------------------------------------------------------------
# Stats
# ------------------------------------------------------------------------------------------------
class EmulatorStats:
    """Thread-safe request counters (the server thread writes, tests read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.total = 0
            self.answered = 0
            self.by_path: Counter = Counter()
            self.by_model: Counter = Counter()
            self.by_model_path: Counter = Counter()
            self.by_status: Counter = Counter()
            self.by_fault: Counter = Counter()

    def arrived(self, path: str, model: str | None) -> None:
        """Count a request when it arrives (a request that later hangs or is reset still counts)."""
        m = model or "-"
        with self._lock:
            self.total += 1
            self.by_path[path] += 1
            self.by_model[m] += 1
            self.by_model_path[f"{m} {path}"] += 1

    def finished(self, status: int | str, fault: str | None) -> None:
        with self._lock:
            self.by_status[str(status)] += 1
            if fault:
                self.by_fault[fault] += 1
            if status == 200 and fault is None:
                self.answered += 1

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "total": self.total,
                "answered": self.answered,
                "by_path": dict(self.by_path),
                "by_model": dict(self.by_model),
                "by_model_path": dict(self.by_model_path),
                "by_status": dict(self.by_status),
                "by_fault": dict(self.by_fault),
            }


# ------------------------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One decision request being handled: its dialect and what the fault draw decided."""

    dialect: Dialect  # the one that words the answer (one of ``served``, once the body is read)
    served: list[Dialect]  # the dialects serving the path (empty: no route)
    path: str
    model: str | None
    rng: random.Random
    fault: str | None = None


class EmulatorServer:
    """The emulator; run it with :func:`run_emulator` (background thread) or :meth:`serve` (CLI).

    Parameters
    ----------
    host, port : str, int
        Bind address; port 0 picks a free port (read :attr:`port` after start).
    answerer : callable, optional
        ``answerer(questions_wire, state) -> {qid: [p, ...]}``; default :class:`LexicalAnswerer`.
        Non-default answerers run in a worker thread so that slow models do not block the server.
    faults : FaultConfig or dict, optional
    require_token : str, optional
        When set, every dialect route needs ``Authorization: Bearer <token>`` (401 otherwise).
    max_body_bytes : int, default=524,288
        Bodies above this get 413/5021 (the hosted estimate fired near 520–525 kB, §3.1).
    ssl_certfile, ssl_keyfile : path, optional
        Serve HTTPS with this certificate chain (PEM) and private key (PEM; omit when the key is in
        the certificate file); :attr:`base_url` then starts with ``https://``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        answerer: Answerer | None = None,
        faults: FaultConfig | dict | None = None,
        require_token: str | None = None,
        max_body_bytes: int = 524_288,
        answerer_workers: int = 1,
        ssl_certfile: str | Path | None = None,
        ssl_keyfile: str | Path | None = None,
    ):
        if ssl_keyfile is not None and ssl_certfile is None:
            raise ValueError("ssl_keyfile needs ssl_certfile (the certificate chain it belongs to)")
        self.host = host
        self.port = port
        self.answerer = answerer or LexicalAnswerer()
        self._inline = isinstance(self.answerer, LexicalAnswerer)
        self._executor = (
            None
            if self._inline
            else ThreadPoolExecutor(max_workers=answerer_workers, thread_name_prefix="emulator-answerer")
        )
        if isinstance(faults, dict):
            faults = FaultConfig().merged(**faults)
        self.faults = (faults or FaultConfig()).validate()
        self.require_token = require_token  # may be changed while running (tests)
        self.max_body_bytes = max_body_bytes
        self._stats = EmulatorStats()
        self._attempts: dict[bytes, int] = {}
        self._attempt_lock = threading.Lock()
        # the TLS context is built here so that a bad certificate or key fails the constructor
        self._ssl = _server_ssl_context(ssl_certfile, ssl_keyfile) if ssl_certfile is not None else None
        self._runner: web.AppRunner | None = None

    # -- public helpers ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        scheme = "https" if self._ssl is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    @property
    def cloudflare_base_url(self) -> str:
        """Value for ``CLOUDFLARE_CLEF_BASE_URL``."""
        return f"{self.base_url}/client/v4"

    @property
    def stats(self) -> dict:
        return self._stats.snapshot()

    def request_count(self, *, model: str | None = None, path: str | None = None) -> int:
        """Requests received (all outcomes), optionally for one model and/or a path substring."""
        snap = self.stats
        if model is None and path is None:
            return snap["total"]
        total = 0
        for key, n in snap["by_model_path"].items():
            m, _, p = key.partition(" ")
            if (model is None or m == model) and (path is None or path in p):
                total += n
        return total

    def reset_stats(self) -> None:
        self._stats.reset()
        with self._attempt_lock:
            self._attempts.clear()

    def set_faults(self, **changes: Any) -> FaultConfig:
        self.faults = self.faults.merged(**changes)
        return self.faults

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(client_max_size=_HARD_MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # access_log=None: no per-request log line (CPU); shutdown_timeout: requests still in flight at
        # stop (e.g. a 'timeout' fault sleeping 30 s) are cancelled almost at once, as a test expects
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024, ssl_context=self._ssl)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.port = self._runner.addresses[0][1]

    async def serve(self) -> None:
        """Start (if needed) and serve until cancelled."""
        if self._runner is None:
            await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(runner.cleanup(), 5.0)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- one request -------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > _HARD_MAX_BODY:
            return _web_response(HttpResponse(413, b"", {"connection": "close"}))  # refused unread
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:  # a chunked body past the hard cap
            return _web_response(HttpResponse(413, b"", {"connection": "close"}))
        path, _, query = request.raw_path.partition("?")
        resp = await self._dispatch(HttpRequest(request.method.upper(), path, query, request.headers, body))
        if resp.reset:
            transport = request.transport
            if transport is not None:
                sock = transport.get_extra_info("socket")
                if sock is not None:  # linger 0: close() sends a TCP RST, not a FIN
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()
            # aiohttp finds the transport gone when it writes this, and drops the connection quietly
            return web.Response(status=500)
        return _web_response(resp)

    # -- dispatch ----------------------------------------------------------------------------------
    async def _dispatch(self, req: HttpRequest) -> HttpResponse:
        if req.path.startswith("/_emulator/"):
            return self._admin(req)
        served = [d for d in dialects.registered() if d.serves(req.path)]
        if served:
            # a path several formats share (``/v1/decisions``): the generic error object until the body is read
            dialect = served[0] if len(served) == 1 else _SHARED_PATH
            model = served[0].route_model(req.path, req.headers, req.body)
        else:
            dialect, model = dialects.get(NO_ROUTE_DIALECT), None
        call = _Call(dialect, served, req.path, model, self._rng_for(req.body))
        self._stats.arrived(req.path, model)
        try:
            resp = await self._route(req, call)
        except Exception as exc:  # an answerer bug must not kill the connection loop
            resp = self._error(call, 500, 5000, f"emulator error: {type(exc).__name__}")
        self._stats.finished("reset" if resp.reset else resp.status, call.fault)
        return resp

    def _rng_for(self, body: bytes) -> random.Random:
        digest = hashlib.sha256(body).digest()
        with self._attempt_lock:
            n = self._attempts.get(digest, 0)
            self._attempts[digest] = n + 1
        seed = hashlib.sha256(f"{self.faults.seed}|{n}|".encode() + digest).digest()
        return random.Random(int.from_bytes(seed[:8], "big"))

    async def _route(self, req: HttpRequest, call: _Call) -> HttpResponse:
        t0 = time.perf_counter()
        if not call.served or req.method != "POST":
            call.dialect = dialects.get(NO_ROUTE_DIALECT)
            return self._error(call, 400, 7000, "No route for that URI")
        no_route = call.dialect.route_problem(call.model)
        if no_route:
            return self._error(call, 400, 7000, no_route)
        if self.require_token is not None and not self._authorised(req):
            return self._error(call, 401, 10000, "Authentication error")
        if len(req.body) > self.max_body_bytes:
            return self._error(call, 413, 5021, "Request is too large: the estimated input exceeds the limit")
        try:
            body = json.loads(req.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return self._error(call, 400, 6003, "Invalid request: body is not valid JSON")
        if len(call.served) > 1:  # a path several formats share: the body tells which it is
            call.dialect = next((d for d in call.served if d.claims(body)), call.served[0])
        try:
            state, questions, images, ctx = call.dialect.parse_request(body, req.headers, call.model)
        except Reject as rej:
            status, code = (400, 5006) if rej.kind == "schema" else (422, 5012)
            return self._error(call, status, code, rej.message, loc=rej.loc, model_side=rej.kind == "model")
        if self.faults.force_status is not None:
            call.fault = f"forced_{self.faults.force_status}"
            return self._error(
                call, int(self.faults.force_status), self.faults.force_code, f"forced status {self.faults.force_status}"
            )
        # faults and latency (after validation: a bad request is refused at once)
        call.fault = self.faults.draw_fault(call.rng)
        delay = self.faults.latency_for(call.model, call.rng)
        if call.fault == "timeout":
            await asyncio.sleep(self.faults.timeout_sleep_s)
        elif delay > 0 and call.fault is not None:
            await _sleep_rest(t0, delay)
        if call.fault == "reset":
            return HttpResponse(0, reset=True)
        if call.fault == "rate_limit":
            return self._error(call, 429, 3040, "Capacity temporarily exceeded, please try again.")
        if call.fault == "quota":
            return self._error(
                call,
                429,
                4006,
                "you have used up your daily free allocation of 10,000 neurons, "
                "please upgrade to Cloudflare's Workers Paid plan",
            )
        if call.fault == "server_error":
            return self._error(call, 500, 5000, "Internal server error")
        if call.fault == "overloaded":
            return self._error(call, 529, 5012, "Clef inference failed", model_side=True)
        # answer
        text_state = render(state) if not isinstance(state, str) else state
        billed_state = text_state
        if self.faults.truncate_state_tokens is not None:
            billed_state = truncate_tokens(text_state, self.faults.truncate_state_tokens)
            state = billed_state  # the model silently reads only the head
        probs = await self._answer(questions, state)
        tokens = (
            FIXED_TOKENS + server_token_count(billed_state) + server_token_count(render(questions)) + 1000 * len(images)
        )
        resp = self._render(call, questions, probs, tokens, ctx)
        if call.fault == "malformed":
            resp.body = resp.body[: max(1, len(resp.body) // 2)]
        if delay > 0 and call.fault is None:
            # the latency is the service time: answering counts towards it, as on a real server
            await _sleep_rest(t0, delay)
        return resp

    def _authorised(self, req: HttpRequest) -> bool:
        auth = req.headers.get("authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip() == self.require_token:
            return True
        return req.headers.get("api-subscription-key") == self.require_token

    async def _answer(self, questions: dict, state: Any) -> dict[str, np.ndarray]:
        if self._inline:
            raw = self.answerer(questions, state)
        elif inspect.iscoroutinefunction(self.answerer):
            raw = await self.answerer(questions, state)
        else:
            loop = asyncio.get_running_loop()
            raw = await loop.run_in_executor(self._executor, self.answerer, questions, state)
        out: dict[str, np.ndarray] = {}
        for qid, q in questions.items():
            n = 2 if q["type"] == "noul" else len(q["criteria"])
            p = np.asarray(raw[qid], dtype=float)
            if p.shape != (n,) or not np.all(np.isfinite(p)) or p.min() < 0 or p.sum() <= 0:
                raise ValueError(f"answerer gave an invalid vector for {qid}")
            out[qid] = p / p.sum()
        return apply_position_bias(questions, out, float(self.faults.position_bias))

    # -- rendering ---------------------------------------------------------------------------------
    def _render(
        self, call: _Call, questions: dict, probs: dict[str, np.ndarray], tokens: int, ctx: dict
    ) -> HttpResponse:
        rid = str(uuid.UUID(int=call.rng.getrandbits(128)))
        return HttpResponse.json(
            *call.dialect.render_answer(Answer(questions, probs, tokens, ctx, rid, call.rng, self.faults.refusal))
        )

    def _error(
        self, call: _Call, status: int, code: int | None, message: str, *, loc: tuple = (), model_side: bool = False
    ) -> HttpResponse:
        rid = str(uuid.UUID(int=call.rng.getrandbits(128)))
        return HttpResponse.json(
            *call.dialect.render_error(Error(status, code, message, loc, model_side, rid, call.rng))
        )

    # -- admin -------------------------------------------------------------------------------------
    def _admin(self, req: HttpRequest) -> HttpResponse:
        if req.path == "/_emulator/stats":
            return HttpResponse.json(200, self.stats)
        if req.path == "/_emulator/health":
            return HttpResponse.json(200, {"status": "ok"})
        if req.path == "/_emulator/reset" and req.method == "POST":
            self.reset_stats()
            return HttpResponse.json(200, {"status": "reset"})
        if req.path == "/_emulator/faults":
            if req.method == "POST":
                try:
                    changes = json.loads(req.body or b"{}")
                    if not isinstance(changes, dict):
                        raise ValueError("expected a JSON object")
                    self.set_faults(**changes)
                except (ValueError, TypeError) as exc:
                    return HttpResponse.json(400, {"error": str(exc)})
            return HttpResponse.json(200, asdict(self.faults))
        return HttpResponse.json(404, {"error": "unknown admin endpoint"})


# ------------------------------------------------------------------------------------------------
# Running it
# ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def run_emulator(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    answerer: Answerer | None = None,
    require_token: str | None = None,
    max_body_bytes: int = 524_288,
    faults: FaultConfig | dict | None = None,
    ssl_certfile: str | Path | None = None,
    ssl_keyfile: str | Path | None = None,
    **fault_options: Any,
) -> Iterator[EmulatorServer]:
    """Run an :class:`EmulatorServer` in a background thread for the duration of a ``with`` block.

    Fault options may be given as keywords (``rate_limit=0.1, latency_ms=100``) or as ``faults``.
    ``ssl_certfile`` (PEM chain) and ``ssl_keyfile`` (PEM key) serve HTTPS (``emu.base_url`` is then
    ``https://…``; clients must trust the issuing CA).

    Examples
    --------
    >>> with run_emulator(port=0) as emu:          # doctest: +SKIP
    ...     env = {"CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url, ...}
    """
    config = faults if isinstance(faults, FaultConfig) else FaultConfig().merged(**(faults or {}))
    if fault_options:
        config = config.merged(**fault_options)
    server = EmulatorServer(
        host,
        port,
        answerer=answerer,
        faults=config,
        require_token=require_token,
        max_body_bytes=max_body_bytes,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    error: list[BaseException] = []

    def _main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # e.g. port in use: reported to the caller below
            error.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        # connections aiohttp still holds (a lingering read of an unread body, a handler past the
        # shutdown grace) end with the loop: cancel them so that none is destroyed pending
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=_main, name=f"emulator-{port}", daemon=True)
    thread.start()
    ready.wait(10)
    if error:
        raise error[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def _sleep_rest(t0: float, delay: float) -> None:
    """Sleep what is left of ``delay`` seconds since ``t0`` (work done so far counts)."""
    rest = delay - (time.perf_counter() - t0)
    if rest > 0:
        await asyncio.sleep(rest)
