"""Opening the store: corrupt files are called corrupt, SQLite files are named, no extension is fetched
(issue 14 items 10, 11)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import duckdb
import pytest

from tests.conftest import run_cli
from workbench.errors import StoreError
from workbench.store.db import connect, memory_connection


def _corrupt_copy(tmp_path: Path) -> Path:
    """A real store with bytes flipped after the header: DuckDB reports a checksum mismatch 'in block'."""
    good = tmp_path / "good.duckdb"
    with connect(good) as con:
        con.execute("CREATE TABLE filler AS SELECT range AS i FROM range(200000)")
    data = bytearray(good.read_bytes())
    for i in range(4096, len(data), 7):
        data[i] = (data[i] * 31 + 7) % 256
    bad = tmp_path / "corrupt.duckdb"
    bad.write_bytes(bytes(data))
    return bad


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("read_only", [False, True])
def test_corrupt_store_is_reported_as_corrupt_not_locked(tmp_path: Path, read_only: bool):
    bad = _corrupt_copy(tmp_path)
    with pytest.raises(StoreError) as err:
        connect(bad, read_only=read_only)
    assert "corrupt" in str(err.value) and "locked" not in str(err.value)


def test_corrupt_store_from_the_cli(tmp_path: Path):
    line = _one_line(run_cli("datasets", "list", db=_corrupt_copy(tmp_path)))
    assert "corrupt" in line and "locked" not in line


def test_random_bytes_are_not_a_store(tmp_path: Path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(os.urandom(20000))
    with pytest.raises(StoreError, match="not a readable workbench database"):
        connect(junk)


def test_sqlite_file_as_db_is_named_and_fetches_nothing(tmp_path: Path):
    lite = tmp_path / "store.db"
    with sqlite3.connect(lite) as s:
        s.execute("CREATE TABLE x (a)")
    home = tmp_path / "home"
    home.mkdir()
    line = _one_line(run_cli("datasets", "list", db=lite, env={"HOME": str(home)}))
    assert "SQLite" in line
    assert list(home.iterdir()) == []  # no ~/.duckdb extension directory


def test_every_connection_has_extension_autoload_and_autoinstall_off(db_path: Path):
    q = "SELECT current_setting('autoload_known_extensions'), current_setting('autoinstall_known_extensions')"
    for con in (connect(db_path), memory_connection()):
        with con:
            assert con.execute(q).fetchone() == (False, False)
    with connect(db_path, read_only=True) as con:
        assert con.execute(q).fetchone() == (False, False)


def test_a_known_extension_is_not_loaded_on_demand(tmp_path: Path):
    """DuckDB would autoload sqlite_scanner for sqlite_scan(); here it must fail instead."""
    lite = tmp_path / "other.db"
    with sqlite3.connect(lite) as s:
        s.execute("CREATE TABLE x (a)")
    with memory_connection() as con, pytest.raises(duckdb.Error):
        con.execute("SELECT * FROM sqlite_scan(?, 'x')", [str(lite)]).fetchall()


def test_directory_as_db_is_one_line(tmp_path: Path):
    d = tmp_path / "dir.duckdb"
    d.mkdir()
    line = _one_line(run_cli("datasets", "list", db=d))
    assert "not a regular file" in line
