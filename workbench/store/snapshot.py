"""Lock-free reads of a store that another process may be writing: file snapshots.

DuckDB lets one process write *or* several read a file, so a long-lived reader (the UI) would stop
``workbench run`` from opening the store, and a running ``workbench run`` would stop the reader.
Readers therefore open a *snapshot*: a copy of the database file and its write-ahead log, taken
when the store changed and opened read-only. DuckDB drops a torn WAL tail on replay, so a copy taken
mid-write shows exactly the committed transactions.

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
            f"{path}: no workbench database here", hint="run `workbench demo` or import a dataset, then pass --db PATH"
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


@contextmanager
def read_connection(path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to a fresh snapshot of the store at ``path``, closed on exit.

    Retries a few times when the snapshot cannot be opened (e.g. the copy raced a checkpoint).
    """
    from workbench.store.db import connect

    last: Exception | None = None
    for attempt in range(4):
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
