"""workbench.store.snapshot: lock-free reads of a store another process is writing (no Streamlit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

WRITER = textwrap.dedent(
    """
    import sys, time
    import duckdb
    con = duckdb.connect(sys.argv[1])
    con.execute("CREATE TABLE IF NOT EXISTS t (i INTEGER)")
    for i in range(int(sys.argv[2])):
        con.execute("INSERT INTO t VALUES (?)", [i])
    print("ready", flush=True)
    sys.stdin.readline()  # hold the write lock until told to stop
    con.close()
    """
)


def test_reader_sees_committed_rows_while_the_writer_holds_the_lock(tmp_path):
    import duckdb

    from workbench.store.snapshot import read_connection, snapshot, store_token

    db = str(tmp_path / "w.duckdb")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, db, "50"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        with pytest.raises(duckdb.Error):  # the live file is locked by the writer
            duckdb.connect(db, read_only=True)
        token = store_token(db)
        with read_connection(db) as con:
            assert con.execute("SELECT count(*), sum(i) FROM t").fetchone() == (50, sum(range(50)))
        assert snapshot(db).token == token  # unchanged store: the same snapshot is reused
        assert snapshot(db).path != db  # a copy, never the live file
    finally:
        writer.communicate("stop\n", timeout=30)
    assert writer.returncode == 0  # the reader never blocked the writer


def test_missing_store_is_a_clear_error(tmp_path):
    from workbench.errors import StoreError
    from workbench.store.snapshot import read_connection

    with pytest.raises(StoreError, match="no workbench database"):
        with read_connection(str(tmp_path / "absent.duckdb")):
            pass


def _database_file(con) -> str:
    return con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0]


PAIRS_WRITER = textwrap.dedent(
    """
    import sys, time
    from workbench.store.db import connect
    con = connect(sys.argv[1])
    con.execute("CREATE TABLE IF NOT EXISTS pairs (i INTEGER)")
    print("ready", flush=True)
    for i in range(1, int(sys.argv[2]) + 1):
        con.execute("BEGIN")
        con.execute("INSERT INTO pairs VALUES (?)", [i])
        time.sleep(0.02)  # a reader copying now must not see this half of the pair
        con.execute("INSERT INTO pairs VALUES (?)", [-i])
        con.execute("COMMIT")
    con.close()
    print("done", flush=True)
    """
)


def test_free_store_is_read_in_place_and_a_busy_one_from_a_snapshot(tmp_path):
    """No writer: the live file itself (no multi-GB copy). A writer holding it: a snapshot, and only
    whole transactions (pairs (i, -i) written in one transaction each: the sum is always 0)."""
    from workbench.store.db import connect
    from workbench.store.snapshot import read_connection

    db = str(tmp_path / "p.duckdb")
    connect(db).close()
    with read_connection(db) as con:
        assert _database_file(con) == db
    writer = subprocess.Popen([sys.executable, "-c", PAIRS_WRITER, db, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        seen = []
        while writer.poll() is None:
            with read_connection(db) as con:
                n, total = con.execute("SELECT count(*), coalesce(sum(i), 0) FROM pairs").fetchone()
                seen.append((n, total, _database_file(con)))
        assert writer.stdout.read().strip() == "done"
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0
    assert all(total == 0 and n % 2 == 0 for n, total, _ in seen), seen  # never half a transaction
    snapshots = [n for n, _, f in seen if f != db]
    assert len(set(snapshots)) >= 3  # while the writer held the file: snapshots, following its commits
    assert all(n == 120 for n, _, f in seen if f == db)  # the live file only once the writer had closed it
    with read_connection(db) as con:  # the writer is gone: the live file again, everything committed
        assert _database_file(con) == db
        assert con.execute("SELECT count(*), sum(i) FROM pairs").fetchone() == (120, 0)


def _read_file(db: str) -> str:
    from workbench.store.snapshot import read_connection

    with read_connection(db) as con:
        return _database_file(con)


def test_a_writer_waits_for_a_read_in_flight_then_writes(tmp_path):
    """A read-only read of the live file holds DuckDB's lock: a writer starting meanwhile retries
    (flagging itself so that new reads go to a snapshot) and writes once the read is over."""
    import threading
    import time

    from workbench.store.db import connect, writer_waiting_marker
    from workbench.store.snapshot import read_connection

    db = str(tmp_path / "w.duckdb")
    con = connect(db)
    con.execute("CREATE TABLE t (i INTEGER)")
    con.close()
    code = (
        "import sys, time; from workbench.store.db import connect; t = time.monotonic(); con = connect(sys.argv[1]); "
        "con.execute('INSERT INTO t VALUES (1)'); con.close(); print(round(time.monotonic() - t, 2))"
    )
    with read_connection(db) as con:
        assert _database_file(con) == db
        writer = subprocess.Popen([sys.executable, "-c", code, db], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while not writer_waiting_marker(db).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer_waiting_marker(db).exists()  # the writer is waiting for this read
        files: list[str] = []
        other = threading.Thread(target=lambda: files.append(_read_file(db)))
        other.start()  # another session's read does not join the live file (it would starve the writer):
        time.sleep(1.0)  # it waits to copy a snapshot until this read is over (a copy would drop our lock)
        assert files == []
        with read_connection(db) as nested:  # a read nested in this one joins it
            assert _database_file(nested) == db
        assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
    other.join(30)
    assert files and files[0] != db
    out, _ = writer.communicate(timeout=30)
    assert writer.returncode == 0
    assert 1.0 <= float(out) < 10  # it waited for the read, not for READER_WAIT_S
    assert not writer_waiting_marker(db).exists()
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM t").fetchone() == (1,)
