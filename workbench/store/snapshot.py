"""Reads of a store that another process may be writing: the live file when free, else a snapshot.

DuckDB lets one process write *or* several read a file (a file lock; measured with the pinned DuckDB
1.5: a read-only open, or ``ATTACH ... (READ_ONLY)``, of a file another process holds read-write is
refused with "Could not set lock", and a read-write open of a file a reader holds is refused too).
:func:`read_connection` therefore:

1. opens the **live file read-only** when no writer holds it, for the duration of one read only
   (no copy, whatever the store's size). A writer that starts meanwhile waits for that read:
   :func:`workbench.store.db.connect` retries a read-write open for up to
   :data:`workbench.store.db.READER_WAIT_S` seconds while the holder is a reader, and flags itself
   (:func:`workbench.store.db.writer_waiting_marker`) so that new reads go to a snapshot until it
   is in: a stream of reads cannot starve it; it waits for the reads in flight at most.
2. falls back to a **snapshot** only when a writer holds the file: a copy of the database file and
   its write-ahead log, taken when the store changed and opened read-only. DuckDB drops a torn WAL
   tail on replay, so a copy taken mid-write shows exactly the committed transactions.

Either way a reader sees only committed transactions (a read-only connection never sees a half
transaction; a snapshot is retried until the store's token did not move while copying) and never
holds the store for longer than one read. Reflink copies are not an option here (ext4:
``cp --reflink=always`` fails with "Operation not supported") and hard links share the pages the
writer rewrites in place, so the copy in step 2 is a real copy: a UI opened on a store that a long
``workbench run`` is writing copies it once per committed batch it looks at.

A snapshot is keyed by the store's *token* (modification time and size of the file and its WAL):
it is reused until a write lands. Snapshots live in a per-process temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from workbench.errors import StoreError

#: Per-process directory of snapshot files (and other small derived files readers write).
SNAPSHOT_DIR = Path(tempfile.gettempdir()) / f"workbench-snapshots-{os.getpid()}"
_SNAP_LOCK = threading.Lock()
#: Live read-only connections of this process per store path, and the condition guarding them.
#: POSIX drops *all* of a process's locks on a file when it closes *any* descriptor of it, so a
#: snapshot copy (which opens and closes the live file) waits until no live read of this process is
#: in flight, and no live read opens while a copy runs: otherwise a waiting writer would get in under
#: a live reader's feet.
_LIVE = threading.Condition()
_live_count: dict[str, int] = {}
_mine = threading.local()  # live reads of the current thread per path (a nested read joins them)
_COPY_ATTEMPTS = 8


def store_token(path: str) -> tuple[int, int, int, int]:
    """(mtime_ns, size) of the database file and of its WAL: changes whenever a write lands."""
    out: list[int] = []
    for p in (path, path + ".wal"):
        try:
            s = os.stat(p)
            out += [s.st_mtime_ns, s.st_size]
        except FileNotFoundError:
            out += [0, 0]
    return (out[0], out[1], out[2], out[3])


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of ``source`` at ``token``, stored at ``path`` (+ ``path.wal``)."""

    source: str
    token: tuple
    path: str


_snapshots: dict[str, Snapshot] = {}


def _remove_snapshots() -> None:
    shutil.rmtree(SNAPSHOT_DIR, ignore_errors=True)


atexit.register(_remove_snapshots)  # snapshots are per process: nothing survives the reader


def _drop(snap: Snapshot) -> None:
    for f in (snap.path, snap.path + ".wal"):
        try:
            os.remove(f)  # open readers keep their inode (POSIX)
        except FileNotFoundError:
            pass


def snapshot(path: str) -> Snapshot:
    """A consistent copy of ``path`` (+ WAL) for the current token; reused until the store changes.

    A copy is consistent when the token did not move while copying; otherwise it is retried.
    Raises :class:`StoreError` when ``path`` is missing or keeps changing.
    """
    if not Path(path).exists():
        raise StoreError(
            f"{path}: no workbench database here", hint="run `workbench demo` or import a dataset, then pass `db` PATH"
        )
    with _SNAP_LOCK:
        for attempt in range(_COPY_ATTEMPTS):
            token = store_token(path)
            cached = _snapshots.get(path)
            if cached is not None and cached.token == token and Path(cached.path).exists():
                return cached
            SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
            stem = hashlib.sha1(f"{path}|{token}".encode()).hexdigest()[:16]
            target = SNAPSHOT_DIR / f"{stem}.duckdb"
            try:
                with _LIVE:  # see _LIVE: no live read of this process may hold the file while it is copied
                    _LIVE.wait_for(lambda: not _live_count.get(path))
                    shutil.copyfile(path, target)
                    if os.path.exists(path + ".wal"):
                        shutil.copyfile(path + ".wal", str(target) + ".wal")
                    elif os.path.exists(str(target) + ".wal"):
                        os.remove(str(target) + ".wal")
            except FileNotFoundError:  # the WAL was checkpointed away while copying
                time.sleep(0.02 * (attempt + 1))
                continue
            if store_token(path) != token:  # a write landed mid-copy: copy again
                time.sleep(0.02 * (attempt + 1))
                continue
            old = _snapshots.get(path)
            _snapshots[path] = snap = Snapshot(path, token, str(target))
            if old is not None and old.path != snap.path:
                _drop(old)
            return snap
    raise StoreError(
        f"{path}: the store kept changing while being read", hint="a run is writing heavily; retry in a moment"
    )


def forget(path: str) -> None:
    """Drop the cached snapshot of ``path`` (the next read copies again)."""
    with _SNAP_LOCK:
        _snapshots.pop(path, None)


def _is_held_by_writer(exc: Exception) -> bool:
    """True when opening read-only failed because another connection holds the file read-write
    (another process's lock, or this process's own read-write connection to the same file)."""
    if getattr(exc, "held", False):  # workbench.store.db: another process holds the file
        return True
    msg = " ".join(str(exc).split()).lower()
    return "lock" in msg or "different configuration" in msg


def _writer_waiting(path: str) -> bool:
    """True while a live process waits to open ``path`` read-write (its marker names its pid)."""
    from workbench.store.db import writer_waiting_marker

    try:
        pid = int(writer_waiting_marker(path).read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:  # a stale marker of a writer that died: ignore it
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def open_live(path: str) -> duckdb.DuckDBPyConnection | None:
    """A read-only connection to the live file ``path``, or None when a writer holds it or waits for it.

    Internal to :func:`read_connection`, which counts it as a live read until it closes it."""
    from workbench.store.db import connect

    held = getattr(_mine, "paths", None)
    if held is None:
        held = _mine.paths = {}
    with _LIVE:
        # a read nested in this thread's own live read joins it (a snapshot would wait for it forever)
        if not held.get(path) and _writer_waiting(path):
            return None
        try:
            con = connect(path, read_only=True, sniff=False)
        except (StoreError, duckdb.Error) as exc:
            if _is_held_by_writer(exc):
                return None
            raise
        _live_count[path] = _live_count.get(path, 0) + 1
        held[path] = held.get(path, 0) + 1
        return con


def _close_live(path: str, con: duckdb.DuckDBPyConnection) -> None:
    with _LIVE:
        con.close()
        _live_count[path] -= 1
        _mine.paths[path] -= 1
        _LIVE.notify_all()


@contextmanager
def read_connection(path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to the store at ``path``, closed on exit: the live file when no
    writer holds it, else a fresh snapshot (see the module docstring for the guarantees).

    Keep the ``with`` block to one read: a writer waits for it to end.
    Retries a few times when a snapshot cannot be opened (e.g. the copy raced a checkpoint).
    """
    from workbench.store.db import connect

    if not Path(path).exists():
        raise StoreError(
            f"{path}: no workbench database here", hint="run `workbench demo` or import a dataset, then pass `db` PATH"
        )
    last: Exception | None = None
    for attempt in range(4):
        con = open_live(path)
        if con is not None:
            try:
                yield con
            finally:
                _close_live(path, con)
            return
        snap = snapshot(path)
        try:
            con = connect(snap.path, read_only=True)
        except (StoreError, duckdb.Error) as exc:
            last = exc
            forget(path)
            time.sleep(0.05 * (attempt + 1))
            continue
        try:
            yield con
        finally:
            con.close()
        return
    raise StoreError(
        f"{path}: cannot read the store ({str(last).splitlines()[0] if last else 'unknown'})", hint="retry in a moment"
    )


__all__ = ["SNAPSHOT_DIR", "Snapshot", "forget", "read_connection", "snapshot", "store_token"]
