"""What a child process of ``test_journal_state_machine.py`` runs: ``workbench run`` (the library entry point the
CLI calls) on a stored run, SIGKILLed by itself at a chosen request (a real kill: no ``finally``, no flush).

Imported by the multiprocessing fork server ahead of time, so that a child costs a fork, not an interpreter start
and the imports."""

from __future__ import annotations

import os
import signal

import workbench.providers.remote  # noqa: F401 - imported once, in the fork server
from workbench.providers.http import build_client
from workbench.runner import execute
from workbench.runner.execute import RunOptions, build_provider, execute_run
from workbench.store.db import connect
from workbench.store.runs import get_run


class _KillAt:
    """A real provider that SIGKILLs its process at its ``n``-th request: before sending it (``"before_request"``)
    or once its response has arrived, before the runner sees it (``"after_response"``: a billed call whose
    answer is lost)."""

    def __init__(self, inner, n: int, when: str):
        self._inner, self._n, self._when, self._seen = inner, n, when, 0

    def __getattr__(self, name):
        if name.startswith("_"):  # not set yet (a copy, a half-built object): no recursion through _inner
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def decide(self, request):
        self._seen += 1
        if self._seen == self._n and self._when == "before_request":
            os.kill(os.getpid(), signal.SIGKILL)
        result = await self._inner.decide(request)
        if self._seen == self._n:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    async def aclose(self) -> None:
        await self._inner.aclose()


def run_then_die(
    db: str, run_id: str, env: dict, kill_at: int, when: str, batch_rows: int, batch_seconds: float | None = None
) -> None:
    """Run (or continue) ``run_id`` and die at request ``kill_at``; returns normally when fewer were needed."""
    execute.BATCH_ROWS = batch_rows  # small batches: kills land between, during and after commits
    if batch_seconds is not None:
        execute.BATCH_SECONDS = batch_seconds
    con = connect(db)
    run = get_run(con, run_id)
    opts = RunOptions(**run["params"]["options"])
    provider = build_provider(
        con, run["provider"], dataset=run["dataset"], dataset_version=int(run["dataset_version"]), options=opts, env=env
    )
    execute_run(con, run_id, env=env, provider=_KillAt(provider, kill_at, when), progress=False)
    con.close()


build_client(timeout=1.0)  # imports httpx, aiohttp and the TLS trust store in the fork server
