"""The DuckDB store: connection, forward migrations, transactions. The only SQL lives in ``store/``.

Tables (schema version 1):

- ``datasets`` — one row per (name, version): fingerprint, question ids, counts, import parameters.
- ``items`` — (dataset, version, item_id): state as text or JSON, images, split, group, metadata (``meta``).
- ``labels`` — (dataset, version, item_id, question, option_id, annotator); several annotators allowed.
- ``gold_labels`` — (dataset, version, question, item_id, split, gold): the split and label of each labelled
  item, written at import for the questions with one vote per item (recorded in ``datasets.params``).
- ``schemas`` — decision schemas by ``schema_hash`` (the file's wire form, as JSON).
- ``runs`` — one experiment run: dataset version, schema hash, provider spec, model, status, summary.
- ``calls`` — the response cache, keyed by ``cache_key`` = sha256(provider, model, exact request).
- ``answer_rows`` — (run_id, item_id, question): probabilities as ``DOUBLE[]`` in schema order, or a
  failure kind and message (never both). ``p_top``/``margin``/``entropy``/``top_option`` are the
  workbench's own (``top_option``: the arg-max option, -1 for a failure, NULL in older rows).
  ``normalise_on_read`` true: ``probs`` holds the provider's values as given (clipped into [0, 1]),
  which sum to ``1 + deviation``; false or NULL: ``probs`` is stored normalised (every row written
  before migration 10, and the runner's rows).
- ``answers`` — the view every reader reads (:data:`ANSWERS_VIEW`): ``answer_rows`` with ``probs``
  normalised (divided by ``1 + deviation`` where ``normalise_on_read``: the very division the import
  did before it stored the values as given, so the figures are the same bit for bit) and without the
  ``normalise_on_read`` column. Writers insert into and delete from :data:`ANSWERS_TABLE`; nothing
  reads it but the view.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from workbench.errors import StoreError

DEFAULT_DB = "workbench.duckdb"

#: The table answers are written to (insert, delete); readers read the view :data:`ANSWERS_VIEW`.
ANSWERS_TABLE = "answer_rows"
#: ``probs`` of an :data:`ANSWERS_TABLE` row as every reader sees it: the one place stored probabilities are
#: normalised. A row with ``normalise_on_read`` holds the values as given, divided here by their sum
#: ``1 + deviation`` as the writer computed it (``1 + (s - 1)`` is ``s`` exactly for the sums a writer
#: accepts, within 0.02 of 1: the same doubles as dividing by ``s`` before storing). The view
#: :data:`ANSWERS_VIEW` (migration 10) is this expression over the table; a reader that needs the table's row
#: ids (a view has none) selects it from the table. Frozen: changing it needs a migration that replaces the view.
NORMALISED_PROBS = (
    "CASE WHEN normalise_on_read THEN list_transform(probs, lambda x: x / (1::DOUBLE + deviation)) ELSE probs END"
)


def normalise_rows(probs: Any, flag: Any, deviation: Any) -> Any:
    """:data:`NORMALISED_PROBS` over a dense (n, k) float64 matrix of table rows, in place: rows whose
    ``normalise_on_read`` (Arrow, NULL = false) is set are divided by ``1 + deviation`` — the same IEEE
    divisions, so the same doubles as the view (``tests/store/test_db.py`` checks it bit for bit).

    For a streamed reader that reads :data:`ANSWERS_TABLE` itself (row ids) and builds the matrix anyway:
    DuckDB's ``list_transform`` costs ~10 ns a value (0.75 CPU s per 77M, more than ALP saves on the scan),
    numpy's division ~1 ns."""
    import numpy as np
    import pyarrow.compute as pc

    need = np.asarray(pc.fill_null(flag, False).to_numpy(zero_copy_only=False), dtype=bool)
    if need.any():
        dev = np.asarray(deviation.to_numpy(zero_copy_only=False), dtype=np.float64)[need]
        probs[need] = probs[need] / (1.0 + dev)[:, None]
    return probs


#: The view of :data:`ANSWERS_TABLE` every reader reads: its rows with ``probs`` as :data:`NORMALISED_PROBS`,
#: without ``normalise_on_read``. ``*`` is expanded on every read, so a migration adding a column to the
#: table needs no change to the view.
ANSWERS_VIEW = "answers"

_MIGRATIONS: list[str] = [
    # 1: initial layout
    """
    CREATE TABLE datasets (
        name VARCHAR NOT NULL,
        version INTEGER NOT NULL,
        fingerprint VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        questions VARCHAR[] NOT NULL,
        schema_hash VARCHAR,
        n_items INTEGER NOT NULL,
        params JSON,
        PRIMARY KEY (name, version)
    );
    CREATE TABLE items (
        dataset VARCHAR NOT NULL,
        version INTEGER NOT NULL,
        item_id VARCHAR NOT NULL,
        state_text VARCHAR,
        state_json JSON,
        images VARCHAR[],
        split VARCHAR NOT NULL,
        grp VARCHAR,
        PRIMARY KEY (dataset, version, item_id)
    );
    CREATE TABLE labels (
        dataset VARCHAR NOT NULL,
        version INTEGER NOT NULL,
        item_id VARCHAR NOT NULL,
        question VARCHAR NOT NULL,
        option_id VARCHAR NOT NULL,
        annotator VARCHAR NOT NULL DEFAULT 'import'
    );
    CREATE TABLE schemas (
        schema_hash VARCHAR PRIMARY KEY,
        name VARCHAR,
        body JSON NOT NULL,
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
    );
    CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY,
        name VARCHAR,
        kind VARCHAR NOT NULL DEFAULT 'raw',          -- raw | calibrated
        parent_run_id VARCHAR,                         -- for calibrated views
        dataset VARCHAR NOT NULL,
        dataset_version INTEGER NOT NULL,
        schema_hash VARCHAR NOT NULL,
        provider VARCHAR NOT NULL,                     -- spec string, never a secret
        model VARCHAR,                                 -- model that answered (most frequent)
        dialect VARCHAR,
        splits VARCHAR[],
        status VARCHAR NOT NULL DEFAULT 'running',    -- running | done | interrupted | failed
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        finished_at TIMESTAMP,
        params JSON,
        summary JSON,
        experiment VARCHAR,
        variant VARCHAR
    );
    CREATE TABLE calls (
        cache_key VARCHAR PRIMARY KEY,
        provider VARCHAR NOT NULL,
        model VARCHAR,
        response JSON,                                 -- System One response body (normalised dialect)
        model_answered VARCHAR,
        request_id VARCHAR,
        latency_ms DOUBLE,
        input_tokens INTEGER,
        cost_usd DOUBLE,
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
    );
    CREATE TABLE answers (
        run_id VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        question VARCHAR NOT NULL,
        probs DOUBLE[],                                -- schema order; NULL when failed
        p_top DOUBLE,
        margin DOUBLE,
        entropy DOUBLE,
        deviation DOUBLE,                              -- provider sum - 1 before re-normalising
        vendor_confidence DOUBLE,                      -- raw vendor figure, not comparable
        failure_kind VARCHAR,                          -- NULL when answered
        failure_message VARCHAR,
        model VARCHAR,
        latency_ms DOUBLE,
        input_tokens INTEGER,
        cost_usd DOUBLE,
        cache_key VARCHAR,
        cached BOOLEAN DEFAULT false,
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        PRIMARY KEY (run_id, item_id, question)
    );
    CREATE TABLE calibrators (
        run_id VARCHAR NOT NULL,                       -- the calibrated view's run id
        question VARCHAR NOT NULL,
        method VARCHAR NOT NULL,
        params JSON NOT NULL,
        PRIMARY KEY (run_id, question)
    );
    """,
    # 2: the run that paid for a cached call (resume counts its own journaled calls as not cached)
    """
    ALTER TABLE calls ADD COLUMN run_id VARCHAR;
    """,
    # 3: shadow mode (champion vs challenger on the same traffic): sessions, requests, answers, outcomes
    """
    CREATE TABLE shadow_sessions (
        shadow VARCHAR PRIMARY KEY,
        source VARCHAR NOT NULL,                       -- import | mirror | replay
        champion VARCHAR,                              -- run id, URL or label; never a secret
        challenger VARCHAR,
        schema_hash VARCHAR,                           -- option order of every question
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        params JSON
    );
    CREATE TABLE shadow_requests (
        shadow VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        seq BIGINT,                                    -- arrival order when there is no timestamp
        ts TIMESTAMP,
        state JSON,
        champion_status INTEGER,
        champion_error VARCHAR,
        champion_latency_ms DOUBLE,
        champion_cost_usd DOUBLE,
        champion_model VARCHAR,
        champion_response JSON,
        champion_actions JSON,                         -- actions as logged: a string or {question: action}
        challenger_status INTEGER,
        challenger_error VARCHAR,
        challenger_latency_ms DOUBLE,
        challenger_cost_usd DOUBLE,
        challenger_model VARCHAR,
        challenger_response JSON,
        PRIMARY KEY (shadow, item_id)
    );
    CREATE TABLE shadow_answers (
        shadow VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        question VARCHAR NOT NULL,
        side VARCHAR NOT NULL,                         -- champion | challenger
        probs DOUBLE[],                                -- schema order; NULL when failed
        failure_kind VARCHAR,
        logged_action VARCHAR,                         -- the action production took, when logged
        PRIMARY KEY (shadow, item_id, question, side)
    );
    CREATE TABLE shadow_outcomes (
        shadow VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        question VARCHAR NOT NULL,
        outcome VARCHAR,                               -- the option that proved right
        final_queue VARCHAR,
        human_override VARCHAR,
        recorded_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        PRIMARY KEY (shadow, item_id, question)
    );
    """,
    # emulated runs: answered by `workbench emulator` (it announces itself with a response header);
    # their cost is what the real service would have billed, shown as emulated, never as spent
    """
    ALTER TABLE runs ADD COLUMN emulated BOOLEAN DEFAULT false;
    ALTER TABLE calls ADD COLUMN emulated BOOLEAN DEFAULT false;
    """,
    # calls a killed run had sent but got no answer for (the provider billed them; --resume sends
    # them again): recovered from the journal's "sent" markers, counted in the run's cost figures
    """
    CREATE TABLE billed_unanswered (
        run_id VARCHAR NOT NULL,
        cache_key VARCHAR NOT NULL,
        segment VARCHAR NOT NULL,                      -- journal segment it was recovered from
        recovered_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        PRIMARY KEY (run_id, cache_key, segment)
    );
    """,
    # item metadata kept at import (`datasets import --meta-column COL`): {column: text or null} per
    # item, NULL when the import named no metadata column; slices (`report --slice COL`) read it
    """
    ALTER TABLE items ADD COLUMN meta JSON;
    """,
    # the arg-max option of each answer (0-based, ties to the option listed first; -1 for a failure or a
    # row with a non-finite probability), written beside p_top/margin by every writer, so the Thresholds
    # page's rule coordinates are read without the probability lists; NULL in rows written before it
    # (readers then take the arg-max of the lists)
    """
    ALTER TABLE answers ADD COLUMN top_option INTEGER;
    """,
    # each labelled item's split and label, for the questions whose items have one vote each (then the
    # label is the gold label whatever the run's option order), written by the dataset import: the UI's
    # threshold grid reads one table instead of joining items with labels (10M items: ~2.5 s of 7)
    """
    CREATE TABLE gold_labels (
        dataset VARCHAR NOT NULL,
        version INTEGER NOT NULL,
        question VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        split VARCHAR,
        gold VARCHAR NOT NULL                          -- the item's one label (an option id, or not)
    );
    """,
    # shadow mode keeps every request, not one per item: a ticket decided twice is two requests (the
    # journal's pair ids; ingest kept only the last request of an item). Requests and answers are keyed by
    # a request id; item_id stays the ticket that outcomes and slices join on. Rows written before: the
    # item id was unique per session, so it is the request id.
    """
    CREATE TABLE shadow_requests_keyed (
        shadow VARCHAR NOT NULL,
        request_id VARCHAR NOT NULL,                   -- one per request (a journal's pair id, else the item id)
        item_id VARCHAR NOT NULL,                      -- the item decided; several requests may share it
        seq BIGINT,
        ts TIMESTAMP,
        state JSON,
        champion_status INTEGER,
        champion_error VARCHAR,
        champion_latency_ms DOUBLE,
        champion_cost_usd DOUBLE,
        champion_model VARCHAR,
        champion_response JSON,
        champion_actions JSON,
        challenger_status INTEGER,
        challenger_error VARCHAR,
        challenger_latency_ms DOUBLE,
        challenger_cost_usd DOUBLE,
        challenger_model VARCHAR,
        challenger_response JSON,
        PRIMARY KEY (shadow, request_id)
    );
    INSERT INTO shadow_requests_keyed BY NAME SELECT *, item_id AS request_id FROM shadow_requests;
    DROP TABLE shadow_requests;
    ALTER TABLE shadow_requests_keyed RENAME TO shadow_requests;
    CREATE TABLE shadow_answers_keyed (
        shadow VARCHAR NOT NULL,
        request_id VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        question VARCHAR NOT NULL,
        side VARCHAR NOT NULL,
        probs DOUBLE[],
        failure_kind VARCHAR,
        logged_action VARCHAR,
        PRIMARY KEY (shadow, request_id, question, side)
    );
    INSERT INTO shadow_answers_keyed BY NAME SELECT *, item_id AS request_id FROM shadow_answers;
    DROP TABLE shadow_answers;
    ALTER TABLE shadow_answers_keyed RENAME TO shadow_answers;
    """,
    # answers keep the provider's values as given and are normalised on read (issue 29): re-normalised
    # 4-decimal vectors (0.0077 -> 0.007700770077007701) defeated DuckDB's ALP compression. The rows move
    # to a table without the primary key (its index took 14% of a 1M-answer store and grew the memory of
    # every large import; writers keep (run_id, item_id, question) unique themselves: the import checks
    # the file, the runner deletes before it re-inserts), and `answers` becomes the one view readers read.
    # Rows written before stay as they were (stored normalised: normalise_on_read is NULL).
    """
    CREATE TABLE answer_rows (
        run_id VARCHAR NOT NULL,
        item_id VARCHAR NOT NULL,
        question VARCHAR NOT NULL,
        probs DOUBLE[],                                -- schema order; NULL when failed; see normalise_on_read
        p_top DOUBLE,
        margin DOUBLE,
        entropy DOUBLE,
        deviation DOUBLE,                              -- provider sum - 1 (clipped values)
        vendor_confidence DOUBLE,
        failure_kind VARCHAR,
        failure_message VARCHAR,
        model VARCHAR,
        latency_ms DOUBLE,
        input_tokens INTEGER,
        cost_usd DOUBLE,
        cache_key VARCHAR,
        cached BOOLEAN DEFAULT false,
        created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
        top_option INTEGER,
        normalise_on_read BOOLEAN                      -- true: probs as given, summing to 1 + deviation
    );
    INSERT INTO answer_rows BY NAME SELECT * FROM answers;
    DROP TABLE answers;
    CREATE VIEW answers AS SELECT * EXCLUDE (normalise_on_read) REPLACE ("""
    + NORMALISED_PROBS
    + """ AS probs) FROM answer_rows;
    """,
]

SCHEMA_VERSION = len(_MIGRATIONS)


def default_db_path() -> Path:
    return Path(os.environ.get("WORKBENCH_DB", DEFAULT_DB))


#: Settings for every DuckDB connection the workbench opens: never download or load an extension
#: behind the user's back (a SQLite file as --db made DuckDB fetch sqlite_scanner into ~/.duckdb).
CONNECTION_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
}

#: DuckDB's buffer pool (cached blocks, sorts, hash tables) of a store connection. DuckDB's default
#: is 80% of RAM, and a scan of a run larger than memory keeps every block it read cached up to that
#: limit; sorts and joins spill to a temporary directory beyond it. ``WORKBENCH_DUCKDB_MEMORY``
#: (a DuckDB size such as ``4GB``) overrides it.
DEFAULT_MEMORY_LIMIT = "1GB"


def store_config(read_only: bool) -> dict[str, str | bool | int | float | list[str]]:
    """:data:`CONNECTION_CONFIG` plus the memory limit and (read-only stores) a writable spill directory."""
    import tempfile

    config = dict(CONNECTION_CONFIG)
    config["memory_limit"] = os.environ.get("WORKBENCH_DUCKDB_MEMORY") or DEFAULT_MEMORY_LIMIT
    if read_only:  # DuckDB's default spill directory sits beside the database file, which may not be ours
        config["temp_directory"] = str(Path(tempfile.gettempdir()) / f"workbench-duckdb-{os.getpid()}")
    return config


_LOCK_MESSAGE = re.compile(r"could not set lock|conflicting lock|\block(ed)?\b", re.IGNORECASE)
_CORRUPT_MESSAGE = re.compile(
    r"corrupt|checksum|not a valid duckdb database|invalid database|serializ|"
    r"extension .*not found|failed to download extension|is an existing extension",
    re.IGNORECASE,
)


_SCRATCH: duckdb.DuckDBPyConnection | None = None


def memory_connection() -> duckdb.DuckDBPyConnection:
    """A connection to the process's scratch in-memory database, with :data:`CONNECTION_CONFIG`.

    For file readers and scratch work; close it when done. It is a cursor on one shared in-memory
    database (a new DuckDB instance costs ~10-30 ms; a cursor well under one), so register views
    and temporary tables under unique names.
    """
    global _SCRATCH
    if _SCRATCH is None:
        _SCRATCH = duckdb.connect(":memory:", config=dict(CONNECTION_CONFIG))
    con = _SCRATCH.cursor()
    con.execute("SET python_enable_replacements = false")
    return con


_HOLDER_PID = re.compile(r"\(PID (\d+)\)")


def _open_error(path: str, exc: duckdb.Error) -> StoreError:
    """Name what went wrong opening ``path``: held by another process, not a DuckDB store, or other.

    Held: one short line naming the holder's PID and whether it writes or reads (DuckDB's own
    message, ~400 characters of lock internals, is left out)."""
    msg = " ".join(str(exc).split())[:300]
    if _LOCK_MESSAGE.search(msg) and not _CORRUPT_MESSAGE.search(msg):
        found = _HOLDER_PID.search(str(exc))
        holder = f"another process (PID {found.group(1)})" if found else "another process"
        doing = "read" if _HELD_BY_READER in " ".join(str(exc).split()).lower() else "written"
        err = StoreError(f"{path} is being {doing} by {holder}", hint="wait for it or use another `db`")
        err.held = True  # type: ignore[attr-defined]  # read by workbench.store.snapshot: read a snapshot instead
        return err
    if _CORRUPT_MESSAGE.search(msg):
        return StoreError(
            f"{path}: not a readable workbench database (corrupt, or another file format): {msg}",
            hint="restore it from a backup, or pass `db` with a DuckDB file the workbench created",
        )
    return StoreError(f"{path}: cannot open database: {msg}", hint="check the path and permissions")


def _head(path: Path, n: int = 16) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


#: Seconds a read-write open waits while the file is held by *readers* (the UI reads the live file
#: read-only, one read at a time: :mod:`workbench.store.snapshot`). A writer holding it fails at once.
READER_WAIT_S = float(os.environ.get("WORKBENCH_READER_WAIT_S", "30"))
#: DuckDB's lock message names a reader holder this way (a writer holder: without this sentence).
_HELD_BY_READER = "you would be able to open this database in read-only mode"


def writer_waiting_marker(path: str) -> Path:
    """File a read-write open creates while readers hold ``path``: new readers then read a snapshot
    instead of the live file (:mod:`workbench.store.snapshot`), so a stream of reads cannot starve it."""
    return Path(path + ".writer-waiting")


def _open(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``; a read-write open retries (with backoff) while only readers hold the file,
    flagging itself with :func:`writer_waiting_marker` meanwhile."""
    deadline = time.monotonic() + READER_WAIT_S
    pause = 0.01
    marker: Path | None = None
    try:
        while True:
            try:
                return duckdb.connect(path, read_only=read_only, config=store_config(read_only))
            except duckdb.Error as exc:
                held_by_reader = _HELD_BY_READER in " ".join(str(exc).split()).lower()
                if read_only or not held_by_reader or time.monotonic() >= deadline:
                    raise _open_error(path, exc) from None
            if marker is None:
                marker = writer_waiting_marker(path)
                try:
                    marker.write_text(str(os.getpid()))
                except OSError:  # a read-only directory: wait without the flag
                    pass
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)


def check_store_file(path: str, *, read_only: bool, sniff: bool = True) -> None:
    """Refuse, before DuckDB opens it, a ``path`` that cannot be a store: missing (read-only), not a
    regular file, or (``sniff``: reads its first bytes) a SQLite database."""
    p = Path(path)
    if read_only and not p.exists():
        raise StoreError(
            f"{path}: no workbench database here", hint="import a dataset first, or pass `db` / set WORKBENCH_DB"
        )
    if p.exists() and not p.is_file():
        raise StoreError(f"{path}: not a regular file", hint="pass `db` with the path of a .duckdb file")
    if sniff and p.is_file() and _head(p).startswith(b"SQLite format 3\x00"):
        raise StoreError(
            f"{path}: is a SQLite database, not a workbench (DuckDB) store",
            hint="pass `db` with a .duckdb file, or a new path to create one",
        )


def connect(
    path: str | Path | None = None, *, read_only: bool = False, sniff: bool = True
) -> duckdb.DuckDBPyConnection:
    """Open (and migrate) the store at ``path``; ``":memory:"`` works for tests.

    ``sniff=False`` skips reading the file's first bytes (the SQLite check): closing any descriptor
    of a file drops every POSIX lock this process holds on it, DuckDB's included, so a process that
    may hold the store open elsewhere (the UI's live reads, :mod:`workbench.store.snapshot`) must not.
    """
    path = str(path if path is not None else default_db_path())
    if path != ":memory:":
        check_store_file(path, read_only=read_only, sniff=sniff)
    con = _open(path, read_only)
    try:
        con.execute("SET python_enable_replacements = false")
        # DuckDB draws a progress bar on stdout for queries over ~2 s: stdout carries only results (`--json`)
        no_progress_bar(con)
        if not read_only:
            migrate(con)
        elif schema_version(con) < SCHEMA_VERSION and path != ":memory:":
            # a store written by an older workbench: readers expect today's tables (migration 10 moved
            # the answers into `answer_rows`), so upgrade it once, then read it as asked
            con.close()
            _upgrade(path)
            con = _open(path, read_only)
            no_progress_bar(con)
            con.execute("SET python_enable_replacements = false")
    except duckdb.Error as exc:
        con.close()
        raise _open_error(path, exc) from None
    except BaseException:
        con.close()
        raise
    return con


def _upgrade(path: str) -> None:
    """Apply the pending migrations to the store at ``path`` through a short read-write open."""
    try:
        con = _open(path, False)
    except StoreError as exc:
        raise StoreError(
            f"{path} was written by an older workbench and must be upgraded once before it can be read; "
            f"that needs write access ({exc.message})",
            hint="run this command again when no other process holds the store, where the file is writable",
        ) from None
    try:
        migrate(con)
    finally:
        con.close()


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = fetch_scalar(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'")
    if not exists:
        return 0
    return int(fetch_scalar(con, "SELECT max(version) FROM schema_version") or 0)


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply forward migrations; each in its own transaction. Returns the resulting version."""
    current = schema_version(con)
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"database schema version {current} is newer than this workbench ({SCHEMA_VERSION})",
            hint="upgrade the workbench package",
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        with transaction(con):
            con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                "applied_at TIMESTAMP DEFAULT current_timestamp)"
            )
            con.execute(_MIGRATIONS[version - 1])
            con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    return SCHEMA_VERSION


def no_progress_bar(con: duckdb.DuckDBPyConnection) -> None:
    """Turn DuckDB's progress bar off (it draws on stdout, which carries ``--json`` documents).

    In Jupyter without ipywidgets DuckDB refuses to touch the setting at all; there is no bar to
    turn off then, so the refusal is ignored."""
    try:
        con.execute("SET enable_progress_bar = false")
    except duckdb.Error:
        pass


#: DuckDB's memory limit while a large run is streamed (``WORKBENCH_STREAM_MEMORY`` changes it). A
#: streamed pass needs only its join tables; DuckDB would otherwise fill the rest of its pool with the
#: run's blocks it has already read (counted in RSS, useless to a single pass). Measured on a 3M × 77
#: run: a pass peaks at 0.9 GB RSS under 512MB against 1.4 GB under 1GB, in the same time.
STREAM_MEMORY_LIMIT = "512MB"
#: DuckDB's cap for a keys-only read (ids ranked, gold labels chosen, sorted by id): at 10M items its
#: aggregates and sort ran out of memory under :data:`STREAM_MEMORY_LIMIT` and finish under 1 GB
#: (``bench/scale.py --full``), at a peak of 1.5 GB RSS.
KEYS_MEMORY_LIMIT = "1GB"


_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _size_bytes(size: str) -> float:
    """Bytes of a DuckDB size such as ``512MB`` or ``953.6 MiB`` (inf when unreadable)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", size)
    if not m or m.group(2).lower() not in _UNITS:
        return float("inf")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def release_memory(con: duckdb.DuckDBPyConnection) -> None:
    """Hand the blocks DuckDB keeps cached after a query back to the system.

    A streamed pass over a large run leaves DuckDB's buffer pool full of the run's blocks (up to
    ``memory_limit``, counted in the process's RSS) while the caller goes on to compute in numpy;
    lowering the limit for a moment evicts them, then the limit is put back. Best effort: when
    DuckDB cannot shrink (pinned blocks, e.g. temporary tables) nothing changes."""
    with stream_memory(con, "32MB"):
        pass


@contextmanager
def stream_memory(con: duckdb.DuckDBPyConnection, limit: str | None = None) -> Iterator[None]:
    """DuckDB's memory limit lowered to ``limit`` (default ``WORKBENCH_STREAM_MEMORY`` or
    :data:`STREAM_MEMORY_LIMIT`) inside the block, then the blocks it cached are released and the
    limit is put back. DuckDB spills sorts and joins to its temporary directory beyond the limit."""
    row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    want = limit or os.environ.get("WORKBENCH_STREAM_MEMORY") or STREAM_MEMORY_LIMIT
    lowered = False
    if row is not None and _size_bytes(want) < _size_bytes(str(row[0])):
        try:
            con.execute(f"SET memory_limit = '{want}'")
            lowered = True
        except duckdb.Error:  # e.g. more is pinned than the lower limit: stream under the usual one
            pass
    try:
        yield
    finally:
        if lowered and row is not None:
            try:
                con.execute("SET memory_limit = '32MB'")  # evict what the block cached
            except duckdb.Error:
                pass
            con.execute(f"SET memory_limit = '{row[0]}'")


def sql_setting_value(value: Any) -> str:
    """``value`` as the right-hand side of DuckDB's ``SET name = …`` (booleans and numbers bare, text quoted)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


@contextmanager
def duckdb_settings(
    con: duckdb.DuckDBPyConnection, settings: dict[str, Any], *, release: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """DuckDB ``settings`` ({name: value}) set inside the block and put back as they were afterwards,
    whatever happens inside. ``release=True`` also hands back the blocks the block cached (the memory
    limit is lowered to 32 MB for a moment before it is restored: DuckDB's buffer pool counts in RSS).

    The one way the store changes a connection's settings for a while (an import's memory cap, an
    export's insertion order, a query's larger pool), so none of them leaks into the next command."""
    before = {name: fetch_scalar(con, "SELECT current_setting(?)", [name]) for name in settings}
    try:
        for name, value in settings.items():
            con.execute(f"SET {name} = {sql_setting_value(value)}")
        yield con
    finally:
        if release:
            try:
                con.execute("SET memory_limit = '32MB'")
            except duckdb.Error:  # more is pinned than that (e.g. temporary tables): nothing to hand back now
                pass
        for name, value in before.items():
            con.execute(f"SET {name} = {sql_setting_value(value)}")


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """All or nothing: one transaction per user action (an import, a runner flush, an export)."""
    con.begin()
    try:
        yield con
    except BaseException:
        con.rollback()
        raise
    con.commit()


def fetch_scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | tuple | dict | None = None) -> Any:
    """The first column of the first row of ``sql`` (aggregates such as ``count(*)`` always return one)."""
    row = con.execute(sql, params).fetchone() if params is not None else con.execute(sql).fetchone()
    if row is None:
        raise StoreError(f"query returned no row: {sql.split()[0]} …")
    return row[0]
