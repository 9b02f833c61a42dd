"""Running an aiohttp server of shadow mode (the mirror, the collector) until it is told to stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

#: Where shadow mode's servers report malformed requests and their own errors (one line each).
LOG = logging.getLogger("workbench.shadow.server")


class QuietServerLog:
    """Stands in for aiohttp's ``aiohttp.server`` logger in a server's connection handlers (``logger=``).

    aiohttp logs a request it cannot parse with the parser's exception, whose message quotes the raw
    request (a bare-LF request printed every header, ``Authorization`` included) and a 12-line traceback.
    Here a malformed request is one line — the peer address and the exception's type, never its message,
    so no request byte or header value reaches a log — at most one line per ``interval`` seconds (the
    lines left out are counted into the next one). Any other error the handler logs (a bug of ours) is
    one line too: the exception's type and where it was raised, without its message.
    """

    def __init__(self, server: str, *, interval: float = 1.0):
        self.server = server
        self.interval = interval
        self.malformed = 0  # malformed requests seen (every one, logged or not)
        self.errors = 0
        self._suppressed = 0
        self._last = float("-inf")

    def _emit(self, line: str) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._suppressed += 1
            return
        if self._suppressed:
            line += f" (and {self._suppressed} more since the last line)"
            self._suppressed = 0
        self._last = now
        LOG.warning("shadow %s: %s", self.server, line)

    def exception(self, msg: Any, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = exc_info if isinstance(exc_info, BaseException) else None
        text = str(msg)
        if text.startswith("Error handling request") and isinstance(exc, HttpProcessingError):
            self.malformed += 1  # the parser refused the request (aiohttp answers 400)
            peer = args[0] if args else "?"
            self._emit(f"malformed request from {peer} refused ({type(exc).__name__})")
            return
        self.errors += 1  # a handler that raised (aiohttp answers 500), or another error of ours
        where = ""
        if exc is not None and exc.__traceback__ is not None:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f" at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
        self._emit(f"{text.split(chr(10))[0].split(' from ')[0][:80]}: {type(exc).__name__ if exc else 'error'}{where}")

    def warning(self, msg: Any, *args: Any, **kw: Any) -> None:
        self._emit(str(msg).split("\n")[0][:120])  # the message alone, never its arguments

    error = warning

    def debug(self, msg: Any = "", *args: Any, **kw: Any) -> None:
        if str(msg).startswith("Error handling request"):  # a first request that is not HTTP at all
            self.exception(msg, *args, **kw)
        # aiohttp's other debug lines (disconnections) are dropped

    info = debug

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 (logging.Logger's name)
        return level >= logging.WARNING


async def run_until_stopped(
    runner: web.BaseRunner,
    *,
    shutdown: Callable[[], Awaitable[None]],
    stop: asyncio.Event | None = None,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``runner`` (set up, its site started) until ``stop`` is set or SIGINT/SIGTERM arrives.

    ``ready(port)`` is called once it listens. On the way out the runner is cleaned up first (no new
    connections; requests in progress are answered), then ``shutdown()`` closes the app's own work
    (challenger calls, the journal).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    if ready is not None:
        ready(runner.addresses[0][1])
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await shutdown()
