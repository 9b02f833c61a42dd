"""Append-only, fsynced JSON-lines journal: the live mirror's durable log.

Why a file and not DuckDB: the mirror must acknowledge a request only once its record is on disk,
and a DuckDB file admits one writer process, which would lock ``workbench shadow report`` out while
the mirror runs. A journal of JSON lines is written by one background thread with *group commit*
(every record queued while the previous ``fsync`` ran is written and synced together), so durability
costs about one ``fsync`` per burst rather than per request, and the event loop never blocks on disk.

A record is a flat JSON object with a ``kind`` (``"champion"`` or ``"challenger"``) and a ``pair`` id;
:func:`workbench.shadow.store.ingest_journal` pairs them up. A line torn by a crash can only belong
to a record that was never acknowledged, and the reader skips it.
"""
from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Iterator

_STOP = object()


class Journal:
    """Durable JSON-lines appender with one writer thread and group commit.

    Parameters
    ----------
    path : path-like
        File to append to (created with its parent directory). Existing content is kept, so a
        restarted mirror continues the same journal.
    fsync : bool, default=True
        Call ``os.fsync`` after each group of writes. Only tests of throughput turn it off.
    """

    def __init__(self, path: str | Path, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._file = open(self.path, "ab", buffering=0)
        self._repair_tail()
        self.records_written = 0
        self._thread = threading.Thread(target=self._run, name="shadow-journal", daemon=True)
        self._thread.start()

    def _repair_tail(self) -> None:
        """End a line torn by a crash so the next record starts on its own line."""
        size = self.path.stat().st_size
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                self._file.write(b"\n")
                os.fsync(self._file.fileno())

    # -- writer thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while True:  # group commit: take everything queued meanwhile
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in batch)
            records = [item for item in batch if item is not _STOP]
            error: BaseException | None = None
            if records:
                try:
                    self._file.write(b"".join(line for line, _ in records))
                    if self._fsync:
                        os.fsync(self._file.fileno())
                    self.records_written += len(records)
                except BaseException as exc:  # disk full, closed fd: tell every waiter
                    error = exc
            for _, fut in records:
                if fut is not None and not fut.done():
                    if error is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(error)
            if stop:
                return

    # -- API ----------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> Future:
        """Queue ``record``; the returned future resolves once it is written and fsynced."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        fut: Future = Future()
        self._queue.put((line, fut))
        return fut

    async def append_durable(self, record: dict[str, Any]) -> None:
        """Append and wait (without blocking the event loop) until the record is on disk."""
        await asyncio.wrap_future(self.append(record))

    def close(self) -> None:
        """Write what is queued, sync and close the file."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._file.close()


def read_journal(path: str | Path) -> Iterator[dict]:
    """Yield the complete records of a journal, skipping lines torn by a crash."""
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                continue  # torn tail: never acknowledged
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec
