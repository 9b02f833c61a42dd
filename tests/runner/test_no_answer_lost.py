"""Nothing lost, nothing wrong (issue 25): no batch of answers taken for writing is lost.

Real components only: a DuckDB file in tmp_path, the emulator over loopback HTTP, the Cloudflare provider. The
providers below are real ones behind a thin wrapper that adds what a busy machine does to the runner at the
worst moment (the event loop's default thread pool full, rows gone from the store).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from workbench.emulator import run_emulator
from workbench.runner import execute
from workbench.runner.execute import RunOptions, build_provider, execute_run, start_run
from workbench.store.db import connect

from .conftest import banking_schema, import_banking

TOKEN = "cf-test-token-25-nothing-lost"
SPEC = "cloudflare:clef"


@pytest.fixture(scope="module")
def emu():
    with run_emulator(port=0, require_token=TOKEN) as server:
        yield server


@pytest.fixture
def env(emu):
    emu.reset_stats()
    emu.set_faults(
        latency_ms=0.0, rate_limit=0.0, server_error=0.0, timeout=0.0, malformed=0.0, reset=0.0, overloaded=0.0
    )
    return {
        "CLOUDFLARE_API_KEY": TOKEN,
        "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
        "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
    }


class _Wrapped:
    """A real provider; subclasses add something at its ``n``-th response."""

    def __init__(self, inner, n: int):
        self._inner, self._n, self._seen = inner, n, 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def decide(self, request):
        result = await self._inner.decide(request)
        self._seen += 1
        if self._seen == self._n:
            await self.at_last()
        return result

    async def at_last(self) -> None:
        pass

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BusyDefaultExecutorAtTheEnd(_Wrapped):
    """At its last response, fills the event loop's default thread pool (as slow ``getaddrinfo`` calls or any
    other ``asyncio.to_thread`` user can) and holds the last worker past ``BATCH_SECONDS``, so that the runner's
    periodic write is due while no thread of that pool is free. The pool frees up when the provider closes."""

    def __init__(self, inner, n: int):
        super().__init__(inner, n)
        self.release = threading.Event()

    async def at_last(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(64):  # more than any default pool has threads: the next job queues
            loop.run_in_executor(None, self.release.wait, 10.0)
        await asyncio.sleep(execute.BATCH_SECONDS + 0.3)

    async def aclose(self) -> None:
        self.release.set()
        await self._inner.aclose()


def _new_run(con, name: str, env: dict, *, limit: int | None = None, concurrency: int = 4):
    opts = RunOptions(limit=limit, concurrency=concurrency)
    run_id = start_run(con, dataset=name, schema=banking_schema(), provider_spec=SPEC, options=opts)
    provider = build_provider(con, SPEC, dataset=name, dataset_version=1, options=opts, env=env)
    return run_id, provider


def _leftover_segments(db: Path) -> list[Path]:
    d = db.with_name(db.name + ".journal")
    return sorted(d.glob("*.jsonl")) if d.exists() else []


def _rows(con, run_id: str) -> tuple[int, int]:
    """(rows, distinct item × question pairs) of a run."""
    return con.execute(
        "SELECT count(*), count(DISTINCT (item_id, question)) FROM answers WHERE run_id = ?", [run_id]
    ).fetchone()


# -- the cause: a periodic write cancelled before it ran ------------------------------------------------------
def test_a_write_due_while_the_default_thread_pool_is_busy_is_not_lost(tmp_path, emu, env):
    """Before the fix: the flusher's write waited in the loop's default pool, the end of the run cancelled the
    flusher, asyncio cancelled the queued job, and the batch (19 of 20 answers here) never reached the store
    while the run reported ``done`` with 0 failures; its calls sat in a leftover journal segment."""
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data")
    run_id, provider = _new_run(con, name, env, limit=20)
    s = execute_run(con, run_id, env=env, provider=_BusyDefaultExecutorAtTheEnd(provider, 20), progress=False)
    assert emu.request_count() == 20
    assert (s["status"], s["answered"], s["failed"]) == ("done", 20, 0)  # before: ("done", 1, 0)
    assert _rows(con, run_id) == (20, 20)
    assert _leftover_segments(db) == []
