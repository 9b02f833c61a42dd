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
