"""Shadow collector: the challenger half of shadow mode behind a gateway's traffic mirror (nginx ``mirror``).

The gateway (not our process) stands in the production path: it answers every decision request with
the champion and sends a copy of the request to this collector. nginx's ``mirror`` subrequest carries
only the *request*; the champion's *answer* reaches the collector through two documented features of
stock nginx, keyed by nginx's ``$request_id`` (``docs/shadow-nginx.md`` has the configuration):

- ``proxy_store SPOOL/$request_id`` writes each successful (200) champion answer, byte for byte, to a
  file (a temporary file renamed into place, so a file that exists is complete);
- an ``access_log syslog:server=127.0.0.1:PORT`` line in JSON (``$request_id``, ``$upstream_status``,
  ``$upstream_response_time``) gives every answer's status — errors included, which nginx does not
  store — and the champion's service time as nginx measured it. Optional: without it a champion error
  is journaled as ``not_stored`` and the latency is the stored file's age since the mirror arrived.

For each mirrored request (``POST``, header ``X-Request-Id: $request_id``) the collector

1. answers the gateway at once with 204 (nginx holds a client's next keep-alive request until its
   mirror subrequests finish, so a slow collector must never be waited on);
2. calls the challenger with the live mirror's :class:`~workbench.shadow.challenger.ChallengerClient`
   (a System One URL, ``?model=NAME`` rewriting the body's model, or any provider spec), bounded in
   time and in number (excess is *shed* and journaled as such); whatever goes wrong — a timeout, a
   body so deeply nested that parsing it raises ``RecursionError`` — is journaled as a challenger
   failure with its ``reason``, never lost;
3. waits up to ``champion_timeout`` for the champion's log line and stored answer (reads and deletes
   the file);
4. journals both halves together under the request id, in the
   :class:`~workbench.shadow.journal.Journal` format of the live mirror (a request or answer over
   ``max_journal_body`` kept as sha256 + size), so ``workbench shadow ingest`` / ``shadow report``
   read it unchanged.

Request ids are checked (letters, digits, ``-``, ``_``, ``.``, not starting with a dot; at most 128)
before they name a file.
Spool files nobody claimed (a mirror subrequest that never arrived, a request the mirror location did
not sample) are deleted after twice the champion timeout and counted as ``orphans``, by a sweep that
runs every champion timeout whether or not a request is waiting.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from workbench.shadow.challenger import ChallengerClient, ChallengerResult, challenger_record, failure
from workbench.shadow.journal import MAX_JOURNAL_BODY, Journal, champion_record, now_iso
from workbench.shadow.serving import QuietServerLog, run_until_stopped

_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")  # a file name: never "." or ".."


@dataclass
class CollectorConfig:
    """Settings of one collector process.

    Parameters
    ----------
    challenger : str
        A System One endpoint URL (``?model=NAME`` rewrites the body's ``model`` for the challenger) or
        any provider spec of the registry (``cloudflare:clef-flash``, ``local:minilm-zeroshot``...).
    journal : path
        Append-only JSON-lines log (see :mod:`workbench.shadow.journal`).
    spool : path
        The directory nginx's ``proxy_store`` writes champion answers to, one file per request id.
    champion_timeout : float, default=30.0
        Seconds to wait for the champion's stored answer (match nginx's ``proxy_read_timeout``).
    challenger_timeout : float, default=5.0
    max_challenger_in_flight : int, default=256
        Challenger calls beyond this are shed (journaled with error ``shed``).
    max_body_bytes : int, default=8 MiB
        Larger mirrored requests get 413 and are not collected; a larger stored champion answer is
        deleted unread and journaled with error ``too_large``.
    request_id_header : str, default="x-request-id"
        The header carrying nginx's ``$request_id`` (the spool file name and the pair id).
    poll_interval : float, default=0.005
        Seconds between two looks at the spool (one directory scan serves every waiting request).
    syslog_port : int, optional
        UDP port (on the collector's host address) receiving nginx's JSON access log lines.
    max_journal_body : int, default=1 MiB
        A request or answer body over this many bytes is journaled as sha256 + size, not whole (so
        ``shadow ingest`` reads every line; such a pair is ingested without its state).
    max_held_bytes : int, default=256 MiB
        Mirrored request bodies held at once (each until its pair is journaled, up to
        ``champion_timeout``). A request that does not fit is dropped unread (503 to the gateway, which
        ignores it) and counted in ``dropped_held_bytes``; its stored answer is swept as an orphan.
        A request without ``Content-Length`` reserves ``max_body_bytes`` while it is read.
    """

    challenger: str
    journal: Path
    spool: Path
    name: str = "nginx"
    champion_timeout: float = 30.0
    challenger_timeout: float = 5.0
    max_challenger_in_flight: int = 256
    max_body_bytes: int = 8 * 1024 * 1024
    challenger_headers: dict[str, str] = field(default_factory=dict)
    request_id_header: str = "x-request-id"
    poll_interval: float = 0.005
    syslog_port: int | None = None
    max_journal_body: int = MAX_JOURNAL_BODY
    max_held_bytes: int = 256 * 1024 * 1024
    fsync: bool = True


class Spool:
    """Champion answers that nginx stores as ``DIR/<request id>``, claimed by the requests waiting for them.

    One polling task scans the directory every ``poll_interval`` while anyone waits (a scan is one
    ``scandir`` however many requests wait); a claimed file is read and deleted. A sweeping task
    (:meth:`start_sweeping`) deletes the files nobody claimed, every ``orphan_after / 2`` seconds whether
    or not anyone waits: with the syslog access log most requests never wait (their answer is already
    there, or their log line says it never will be), so a sweep tied to waiting never ran.
    """

    def __init__(self, path: Path, *, poll_interval: float, orphan_after: float, max_bytes: int = 8 * 1024 * 1024):
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self.poll_interval = poll_interval
        self.orphan_after = orphan_after
        self.orphans = 0
        self.max_bytes = max_bytes
        self._waiters: dict[str, asyncio.Future] = {}
        self._poller: asyncio.Task | None = None
        self._sweeper: asyncio.Task | None = None

    def _claim(self, request_id: str) -> tuple[bytes | None, float] | None:
        """(answer, mtime), the answer None when it is over ``max_bytes`` (deleted unread); None if absent."""
        file = self.path / request_id
        try:
            st = file.stat()
            mtime = st.st_mtime
            data = file.read_bytes() if st.st_size <= self.max_bytes else None
        except OSError:  # not there (yet), or not a regular file
            return None
        file.unlink(missing_ok=True)
        return data, mtime

    async def wait(self, request_id: str, timeout: float) -> tuple[bytes | None, float] | None:
        """(answer bytes, file mtime) once nginx has stored it, or None after ``timeout`` seconds."""
        found = self._claim(request_id)
        if found is not None:
            return found
        future = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = future
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return self._claim(request_id)  # a last look: it may have landed since the last scan
        finally:
            self._waiters.pop(request_id, None)

    async def _poll(self) -> None:
        while self._waiters:
            await asyncio.sleep(self.poll_interval)
            try:
                names = [e.name for e in os.scandir(self.path)]
            except OSError:
                continue
            for name in names:
                future = self._waiters.get(name)
                if future is not None and not future.done():
                    found = self._claim(name)
                    if found is not None:
                        future.set_result(found)

    def start_sweeping(self) -> None:
        """Sweep orphans every ``orphan_after / 2`` seconds until :meth:`stop_sweeping`."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_forever())

    async def stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.orphan_after / 2)
            try:
                names = [e.name for e in os.scandir(self.path)]
            except OSError:
                continue
            self._sweep(names)

    def _sweep(self, names: list[str]) -> None:
        """Delete stored answers that nobody claimed within ``orphan_after`` seconds."""
        now = time.time()
        for name in names:
            if name in self._waiters:
                continue
            file = self.path / name
            try:
                if file.is_file() and now - file.stat().st_mtime > self.orphan_after:
                    file.unlink()
                    self.orphans += 1
            except OSError:
                pass


class AccessLog(asyncio.DatagramProtocol):
    """nginx access log lines received as syslog datagrams: ``<PRI>TIMESTAMP TAG: {json}``, one per request.

    The JSON object (``log_format ... escape=json``) must have ``request_id``; ``upstream_status`` and
    ``upstream_response_time`` are read when present (the last value when nginx tried several upstreams).
    Lines wait up to ``keep_for`` seconds for the mirrored request that claims them.
    """

    def __init__(self, keep_for: float):
        self.keep_for = keep_for
        self.lines = 0
        self.unreadable = 0
        self._unclaimed: OrderedDict[str, tuple[dict, float]] = OrderedDict()
        self._waiters: dict[str, asyncio.Future] = {}

    def datagram_received(self, data: bytes, addr: Any) -> None:
        start = data.find(b"{")
        try:
            line = json.loads(data[start:]) if start >= 0 else None
        except ValueError:
            line = None
        if not isinstance(line, dict) or not isinstance(line.get("request_id"), str):
            self.unreadable += 1
            return
        self.lines += 1
        future = self._waiters.get(line["request_id"])
        if future is not None and not future.done():
            future.set_result(line)
            return
        now = time.monotonic()
        self._unclaimed[line["request_id"]] = (line, now)
        self._unclaimed.move_to_end(line["request_id"])  # in arrival order
        # forget lines nobody claimed in time, oldest first: O(1) per line amortised (rebuilding the dict
        # once it held 1024 lines cost ~0.8 ms a line at 20,000 unclaimed lines, a sampled mirror's normal)
        while self._unclaimed:
            oldest = next(iter(self._unclaimed.values()))
            if now - oldest[1] < self.keep_for:
                break
            self._unclaimed.popitem(last=False)

    async def wait(self, request_id: str, timeout: float) -> dict | None:
        found = self._unclaimed.pop(request_id, None)
        if found is not None:
            return found[0]
        future = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = future
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._waiters.pop(request_id, None)


def _last_number(value: Any) -> float | None:
    """The last number of an nginx upstream variable (``"502, 200"``, ``"0.104"``; ``"-"`` is none)."""
    if isinstance(value, int | float):
        return float(value)
    for token in reversed(re.split(r"[,:\s]+", str(value or ""))):
        try:
            return float(token)
        except ValueError:
            continue
    return None


class Collector:
    """The collector's request handling and lifecycle (see the module docstring)."""

    def __init__(self, config: CollectorConfig):
        if config.champion_timeout <= 0 or config.challenger_timeout <= 0:
            from workbench.errors import WorkbenchError

            raise WorkbenchError("shadow collect: timeouts must be > 0 seconds", hint="e.g. `champion_timeout` 30")
        if config.max_journal_body < 0:
            from workbench.errors import WorkbenchError

            raise WorkbenchError(
                f"shadow collect: max_journal_body must be >= 0 bytes, got {config.max_journal_body}",
                hint="e.g. `max_journal_body` 1MiB",
            )
        if config.max_held_bytes < config.max_body_bytes:
            from workbench.errors import WorkbenchError

            raise WorkbenchError(
                f"shadow collect: max_held_bytes ({config.max_held_bytes}) is below max_body_bytes "
                f"({config.max_body_bytes})",
                hint="the collector must be able to hold one request of the largest size, e.g. `max_held` 256MiB",
            )
        self.config = config
        self.held_bytes = 0  # request bodies held by collections in progress (and reserved by reads)
        # trust_env: a challenger reached through the team's proxy honours HTTPS_PROXY / NO_PROXY
        self.challenger = ChallengerClient(
            config.challenger, timeout=config.challenger_timeout, headers=config.challenger_headers, trust_env=True
        )
        self.spool = Spool(
            Path(config.spool),
            poll_interval=config.poll_interval,
            orphan_after=2 * config.champion_timeout,
            max_bytes=config.max_body_bytes,
        )
        self.access_log: AccessLog | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self.journal: Journal | None = None
        self._tasks: set[asyncio.Task] = set()
        self._challenger_in_flight = 0
        self.stats = {
            "requests": 0,
            "refused": 0,
            "champion_stored": 0,
            "champion_not_stored": 0,
            "champion_errors": 0,
            "challenger_done": 0,
            "challenger_errors": 0,
            "challenger_shed": 0,
            "journal_errors": 0,
            "dropped_held_bytes": 0,
        }
        self.on_closed: Callable[[Collector], None] | None = None
        self.server_log = QuietServerLog("collector")  # malformed requests: one line, never their bytes

    async def startup(self, host: str = "127.0.0.1") -> None:
        self.journal = Journal(self.config.journal, fsync=self.config.fsync)
        await self.challenger.start()
        self.spool.start_sweeping()
        if self.config.syslog_port is not None:
            log = AccessLog(keep_for=2 * self.config.champion_timeout)
            transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
                lambda: log, local_addr=(host, self.config.syslog_port)
            )
            self._udp, self.access_log = transport, log

    async def shutdown(self) -> None:
        """Let collections in progress finish (bounded by the timeouts), close the journal, then ``on_closed``."""
        if self._tasks:
            await asyncio.wait(
                set(self._tasks), timeout=max(self.config.champion_timeout, self.config.challenger_timeout) + 1.0
            )
        await self.challenger.aclose()
        await self.spool.stop_sweeping()
        if self._udp is not None:
            self._udp.close()
        if self.journal is not None:
            self.journal.close()
        if self.on_closed is not None:  # e.g. ingest the journal into the store
            await asyncio.to_thread(self.on_closed, self)

    def status(self) -> dict:
        return {
            **self.stats,
            "in_progress": len(self._tasks),
            "challenger_in_flight": self._challenger_in_flight,
            "held_bytes": self.held_bytes,
            "spool_orphans": self.spool.orphans,
            "malformed_requests": self.server_log.malformed,
            "log_lines": self.access_log.lines if self.access_log is not None else None,
            "name": self.config.name,
        }

    # -- HTTP ---------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_get("/v1/shadow/status", self._status)
        app.router.add_route("*", "/{tail:.*}", self._mirrored)
        return app

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(self.status())

    def _refuse(self, status: int, message: str) -> web.Response:
        self.stats["refused"] += 1
        return web.json_response({"error": {"type": "invalid_request", "message": message}}, status=status)

    async def _mirrored(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return self._refuse(405, "the collector takes the gateway's mirrored POST requests")
        request_id = request.headers.get(self.config.request_id_header, "")
        if not _REQUEST_ID.match(request_id):
            return self._refuse(
                400,
                f"header {self.config.request_id_header} must carry nginx's $request_id "
                "(letters, digits, '-', '_', '.', not starting with '.'; at most 128)",
            )
        length = request.content_length
        if length is not None and length > self.config.max_body_bytes:
            return self._refuse(413, f"mirrored body over {self.config.max_body_bytes} bytes")
        need = length if length is not None else self.config.max_body_bytes
        if self.held_bytes + need > self.config.max_held_bytes:
            self.stats["dropped_held_bytes"] += 1
            response = web.json_response(
                {"error": {"type": "overloaded", "message": "the collector holds its limit of request bodies"}},
                status=503,
            )
            response.force_close()  # the body was not read
            return response
        self.held_bytes += need
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.held_bytes -= need
            return self._refuse(413, f"mirrored body over {self.config.max_body_bytes} bytes")
        except BaseException:
            self.held_bytes -= need
            raise
        self.held_bytes += len(body) - need  # held until the pair is journaled (_collect releases it)
        self.stats["requests"] += 1
        arrived, arrived_wall = now_iso(), time.time()
        task = asyncio.create_task(self._collect(request_id, body, dict(request.headers), arrived, arrived_wall))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.Response(status=204)

    # -- one pair -----------------------------------------------------------------------------
    async def _collect(self, request_id: str, body: bytes, headers: dict, arrived: str, arrived_wall: float) -> None:
        """Both halves of one mirrored request, journaled together once both are known; then the body is released."""
        try:
            await self._collect_pair(request_id, body, headers, arrived, arrived_wall)
        finally:
            self.held_bytes -= len(body)

    async def _collect_pair(
        self, request_id: str, body: bytes, headers: dict, arrived: str, arrived_wall: float
    ) -> None:
        headers = {k.lower(): v for k, v in headers.items()}
        item_id = headers.get("x-item-id") or request_id
        challenger = asyncio.create_task(self._challenger_half(body, headers))
        try:
            status, raw, error, latency_ms = await self._champion_half(request_id, arrived_wall)
        except asyncio.CancelledError:
            challenger.cancel()
            raise
        except Exception as exc:  # a bug: the pair is journaled with the champion half failed
            status, raw, error, latency_ms = None, None, f"internal: {type(exc).__name__}", None
        try:
            result = await challenger
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # _challenger_half does not raise; belt and braces, never lost
            result = failure(f"internal: {type(exc).__name__}", exc)
        self._count_challenger(result)
        limit = self.config.max_journal_body
        champion = champion_record(
            request_id,
            item_id=item_id,
            ts=arrived,
            shadow=self.config.name,
            request=body,
            status=status,
            body=raw,
            latency_ms=latency_ms,
            error=error,
            max_body=limit,
        )
        try:
            assert self.journal is not None  # set by startup()
            await self.journal.append_pair(champion, challenger_record(request_id, result, max_body=limit))
        except Exception:
            self.stats["journal_errors"] += 1

    async def _champion_half(
        self, request_id: str, arrived_wall: float
    ) -> tuple[int | None, bytes | None, str | None, float | None]:
        """(status, body, error, latency ms) of the champion's answer to ``request_id``."""
        timeout = self.config.champion_timeout
        line = await self.access_log.wait(request_id, timeout + 1.0) if self.access_log is not None else None
        status = latency_ms = None
        if line is not None:
            number = _last_number(line.get("upstream_status"))
            status = int(number) if number is not None else None
            seconds = _last_number(line.get("upstream_response_time"))
            latency_ms = seconds * 1000.0 if seconds is not None else None
            if status is not None and status != 200:  # nginx stores 200 answers only
                self.stats["champion_errors"] += 1
                return status, None, None, latency_ms
        # stored before nginx logs the request: a short wait when the log line came, else the timeout
        found = await self.spool.wait(request_id, 1.0 if line is not None else timeout)
        if found is None:
            self.stats["champion_not_stored"] += 1
            return status, None, "not_stored", latency_ms
        self.stats["champion_stored"] += 1
        raw, mtime = found
        if raw is None:  # over the body limit: journaled as a failure, never loaded whole
            return 200, None, "too_large", latency_ms
        if latency_ms is None:
            latency_ms = max(0.0, (mtime - arrived_wall) * 1000.0)
        return 200, raw, None, latency_ms

    async def _challenger_half(self, body: bytes, headers: dict) -> ChallengerResult:
        """The challenger's answer (or failure, with its reason); shed beyond the in-flight cap."""
        if self._challenger_in_flight >= self.config.max_challenger_in_flight:
            self.stats["challenger_shed"] += 1
            return failure("shed")
        self._challenger_in_flight += 1
        try:
            return await self.challenger.call(body, headers.items())  # never raises (bar cancellation)
        finally:
            self._challenger_in_flight -= 1

    def _count_challenger(self, result: ChallengerResult) -> None:
        if result.error == "shed":
            return
        self.stats["challenger_done"] += 1
        if result.failed:
            self.stats["challenger_errors"] += 1


async def collect_async(
    config: CollectorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8791,
    on_closed: Callable[[Collector], None] | None = None,
    stop: asyncio.Event | None = None,
    ready: Callable[[int], None] | None = None,
) -> Collector:
    """Run the collector until ``stop`` is set or SIGINT/SIGTERM arrives; return it (with its stats).

    Stopping is graceful: no new requests, collections in progress finish (bounded by the champion and
    challenger timeouts), the journal is closed, then ``on_closed(collector)`` runs (the CLI ingests
    the journal into the store there).
    """
    collector = Collector(config)
    collector.on_closed = on_closed
    await collector.startup(host)
    runner = web.AppRunner(
        collector.app(), access_log=None, handle_signals=False, shutdown_timeout=5.0, logger=collector.server_log
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        await collector.shutdown()
        raise
    await run_until_stopped(runner, shutdown=collector.shutdown, stop=stop, ready=ready)
    return collector


def collect(
    config: CollectorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8791,
    on_closed: Callable[[Collector], None] | None = None,
    ready: Callable[[int], None] | None = None,
) -> Collector:
    """Run the collector in this thread until SIGINT/SIGTERM (see :func:`collect_async`)."""
    return asyncio.run(collect_async(config, host=host, port=port, on_closed=on_closed, ready=ready))
