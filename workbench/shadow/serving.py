"""Running an aiohttp server of shadow mode (the mirror, the collector) until it is told to stop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

from aiohttp import web


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
