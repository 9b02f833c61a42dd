"""Append-only, fsynced JSON-lines journal: the live mirror's durable log.

Why a file and not DuckDB: the mirror must acknowledge a request only once its record is on disk,
and a DuckDB file admits one writer process, which would lock ``workbench shadow report`` out while
the mirror runs.

Two kinds of appends, both from the event loop's thread (so lines never interleave):

- :meth:`Journal.append_durable` (the champion half of a pair) resolves once the line is written
  *and fsynced*. Appends made in the same event-loop tick share one ``fsync`` (group commit without
  threads: a thread would cost two GIL hand-offs and a loop wake-up per request, which is more
  than the ``fsync`` itself on a busy machine).
- :meth:`Journal.append` (the challenger half, written when it completes) goes to the file at once
  with ``os.write`` — it survives the death of the process — and reaches the disk with the next
  ``fsync``. Nobody waits on it.

A record is a flat JSON object with a ``kind`` (``"champion"`` or ``"challenger"``) and a ``pair`` id;
:func:`workbench.store.shadow.ingest_journal` pairs them up. A line torn by a crash can only belong
to a record that was never acknowledged: the reader skips it, and reopening the journal ends it.

Size: a request or response body over ``max_body`` bytes (default :data:`MAX_JOURNAL_BODY`, 1 MiB)
is kept as a reference — ``request_sha256`` + ``request_bytes`` (``body_sha256`` + ``body_bytes``)
with ``request``/``body`` null — so every line stays far below what ingest reads in one piece, and a
caller cannot fill the disk with a few huge posts. Such a pair is ingested without its state.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Bodies above this many bytes are journaled as a reference (sha256 + size), not whole.
MAX_JOURNAL_BODY = 1024 * 1024


def now_iso() -> str:
    """The journal's timestamp of now: ISO 8601 in UTC, to the microsecond."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def body_fields(
    field: str, raw: bytes | None, text: str | None = None, *, max_body: int = MAX_JOURNAL_BODY
) -> dict[str, Any]:
    """``{field: text}``, or ``{field: None, field_sha256: hex, field_bytes: n}`` when ``raw`` is over ``max_body``.

    ``text`` is the body as text when it differs from ``raw`` decoded (a decompressed answer); ``raw``
    None (no answer at all) gives ``{field: None}``.
    """
    if raw is None:
        return {field: None}
    if len(raw) > max_body or (text is not None and len(text) > max_body):
        return {field: None, f"{field}_sha256": hashlib.sha256(raw).hexdigest(), f"{field}_bytes": len(raw)}
    return {field: raw.decode("utf-8", errors="replace") if text is None else text}


def champion_record(
    pair: str,
    *,
    item_id: str,
    ts: str,
    shadow: str,
    request: bytes,
    status: int | None,
    body: bytes | None,
    body_text: str | None = None,
    latency_ms: float | None,
    error: str | None = None,
    sampled: bool = True,
    max_body: int = MAX_JOURNAL_BODY,
) -> dict[str, Any]:
    """The journal line of the champion half of ``pair`` (bodies over ``max_body`` as references).

    ``body_text`` is the answer as text when ``body`` is compressed on the wire. ``status``/``body`` are
    None when the front never saw the answer (a collector whose champion answer was not stored).
    """
    return {
        "kind": "champion",
        "pair": pair,
        "item_id": item_id,
        "ts": ts,
        "shadow": shadow,
        **body_fields("request", request, max_body=max_body),
        "status": status,
        **body_fields("body", body, body_text, max_body=max_body),
        "latency_ms": latency_ms,
        "error": error,
        "sampled": sampled,
    }


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class Journal:
    """Durable JSON-lines appender (see the module docstring).

    Parameters
    ----------
    path : path-like
        File to append to (created with its parent directory). Existing content is kept, so a
        restarted mirror continues the same journal.
    fsync : bool, default=True
        Sync before acknowledging. Only throughput experiments turn it off.
    """

    def __init__(self, path: str | Path, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._pending: list[bytes] = []
        self._waiters: list[asyncio.Future] = []
        self._flush_scheduled = False
        self.syncs = 0
        self._repair_tail()

    def _repair_tail(self) -> None:
        """End a line torn by a crash so the next record starts on its own line."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                os.write(self._fd, b"\n")
                os.fsync(self._fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # a regular file takes it all at once; loop for the general case
            n = os.write(self._fd, view)
            view = view[n:]

    # -- API ----------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` now (no wait for the disk; synced with the next durable append)."""
        self._write(_line(record))

    async def append_pair(self, champion: dict[str, Any], challenger: dict[str, Any]) -> None:
        """Both halves of a pair at once (a collector that learns them together), durably."""
        self.append(champion)
        await self.append_durable(challenger)

    async def append_durable(self, record: dict[str, Any]) -> None:
        """Append and return once the record is written and fsynced (group commit per loop tick)."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._pending.append(_line(record))
        self._waiters.append(waiter)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush_pending)
        await waiter

    def _flush_pending(self) -> None:
        self._flush_scheduled = False
        waiters, self._waiters = self._waiters, []
        try:
            self.flush()
        except BaseException as exc:  # disk full, closed fd: every waiter learns it
            for w in waiters:
                if not w.done():
                    w.set_exception(exc)
            return
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def flush(self) -> None:
        """Write what is pending and fsync everything written so far."""
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._write(data)
        if self._fsync:
            os.fsync(self._fd)
            self.syncs += 1

    def close(self) -> None:
        """Write what is pending, sync and close the file."""
        if self._fd < 0:
            return
        self._flush_pending()
        os.close(self._fd)
        self._fd = -1
