"""Aggregates of a run kept between sessions: the UI's reports, surfaces and certified selections of large runs.

A page of the UI over a run of millions of items spends minutes streaming the answers to compute a few
kilobytes (a report, binned reliability, a threshold surface, a certified selection). This module keeps
those results, keyed by a fingerprint of everything they were computed from, so that the next session
(or the next server) reads them in milliseconds instead of streaming the run again.

Where: a directory next to the store, ``<store>.aggregates/`` (one file per aggregate, written to a
temporary name and renamed into place, so a reader sees a whole file or none). Not a table inside the
store, on purpose: a write into the store moves its token (:func:`workbench.store.snapshot.store_token`),
which would invalidate every cached read of every open session, and would need the store's write lock,
which a ``workbench run`` in progress holds for hours; the directory needs neither.

The key of an aggregate is a SHA-256 over:

- the run's inputs (:func:`run_state`): its status and end time, the count and latest ``created_at`` of
  its answers (and of its parent run's for a calibrated view), its stored calibrators, and the count of
  gold labels of its dataset version: a new answer, a new label or a re-calibration changes it;
- the code (:func:`code_version`): a hash of the ``workbench`` package's source, so an aggregate computed
  by other code is never read back;
- the caller's description of the computation (the function and its arguments).

Nothing here computes a figure: callers pass the bytes to keep (the UI pickles the aggregate its library
call returned). ``WORKBENCH_AGGREGATE_CACHE=0`` turns the cache off; an unwritable directory only means
nothing is kept.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path

import duckdb

#: Set to ``0`` to neither read nor write kept aggregates.
ENV_SWITCH = "WORKBENCH_AGGREGATE_CACHE"


def enabled() -> bool:
    """False when ``WORKBENCH_AGGREGATE_CACHE`` is ``0`` (or ``false``/``no``/``off``)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir(store_path: str | Path) -> Path:
    """``<store>.aggregates/``: where the aggregates of the store at ``store_path`` are kept."""
    p = Path(store_path)
    return p.with_name(p.name + ".aggregates")


@lru_cache(maxsize=1)
def code_version() -> str:
    """SHA-256 (16 hex digits) of the source of every module of the installed ``workbench`` package."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def run_state(con: duckdb.DuckDBPyConnection, run_id: str, question: str) -> tuple:
    """What an aggregate of ``question`` of ``run_id`` depends on in the store (see the module doc);
    raises :class:`workbench.errors.NotFoundError` for an unknown run."""
    from workbench.store.runs import get_run

    run = get_run(con, run_id)
    runs = [run["run_id"]] + ([run["parent_run_id"]] if run.get("parent_run_id") else [])
    answers = con.execute(
        "SELECT run_id, count(*), CAST(max(created_at) AS VARCHAR) FROM answers "
        "WHERE run_id IN (SELECT unnest(?)) AND question = ? GROUP BY run_id ORDER BY run_id",
        [runs, question],
    ).fetchall()
    calibrators = con.execute(
        "SELECT question, method, CAST(params AS VARCHAR) FROM calibrators WHERE run_id = ? ORDER BY question",
        [run["run_id"]],
    ).fetchall()
    labels = con.execute(
        "SELECT count(*) FROM labels WHERE dataset = ? AND version = ? AND question = ?",
        [run["dataset"], int(run["dataset_version"]), question],
    ).fetchone()
    return (
        run["run_id"],
        run.get("status"),
        str(run.get("finished_at")),
        run.get("schema_hash"),
        tuple(map(tuple, answers)),
        tuple(map(tuple, calibrators)),
        int(labels[0]) if labels else 0,
    )


def aggregate_key(state: tuple, *description: object) -> str:
    """The file name of an aggregate: SHA-256 of the run's :func:`run_state`, :func:`code_version` and
    ``description`` (the computation and its arguments, as ``repr``-able values)."""
    return hashlib.sha256(repr((state, code_version(), description)).encode()).hexdigest()


def load(store_path: str | Path, key: str) -> bytes | None:
    """The bytes kept under ``key`` for the store at ``store_path``, or None (none kept, the cache is off, or
    the file belongs to another user: callers unpickle it, so only this user's own files are read)."""
    if not enabled():
        return None
    f = cache_dir(store_path) / key
    try:
        if f.stat().st_uid != os.getuid():  # the UI unpickles it: only a file this user wrote is read
            return None
        return f.read_bytes()
    except OSError:
        return None


def save(store_path: str | Path, key: str, payload: bytes) -> bool:
    """Keep ``payload`` under ``key`` (atomically: a temporary file renamed into place); False when the
    cache is off or the directory cannot be written (nothing is kept then, and nothing half-written)."""
    if not enabled():
        return False
    d = cache_dir(store_path)
    try:
        d.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(tmp, d / key)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True
