"""Large plain Parquet files import through DuckDB alone (``_fast_plain_parquet``) and store exactly what
the pandas path stores: the same fingerprint, items, labels and dataset row. Anything not provably plain
(an id to trim, an unknown label, a blank text) goes the pandas path, which normalises or names the row."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import workbench.store.datasets as ds
from workbench.errors import DataImportError
from workbench.schema import DecisionSchema
from workbench.store.db import connect, table_counts

SCHEMA = DecisionSchema.from_dict(
    {
        "name": "fast",
        "questions": {
            "topic": {"type": "choice", "instructions": "Which?", "criteria": {"a": "A", "b": "B", "c's": "C"}},
            "tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": "calm", "angry": "angry"}},
        },
    },
    source="test",
)
SPEC = ds.ImportSpec(
    name="fast", text_column="text", id_column="id", split_column="split", labels={"topic": "t", "tone": "o"}
)
N = 3000


def table(**edits) -> pa.Table:
    cols = {
        "id": [f"x-{i:05d}" for i in range(N)],
        "text": [f"message {i} with 'quotes'" for i in range(N)],
        "t": [["a", "b", "c's"][i % 3] for i in range(N)],
        "o": [["calm", "angry"][i % 2] for i in range(N)],
        "split": [["Calibration", "test", "dev"][i % 3] for i in range(N)],
    }
    for col, (i, v) in edits.items():
        cols[col][i] = v
    return pa.table(cols)


def imported(tmp_path: Path, name: str, t: pa.Table, *, fast: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(ds, "FAST_PATH_MIN_ROWS", 0 if fast else 10**12)
    src = tmp_path / f"{name}.parquet"
    pq.write_table(t, src)
    con = connect(tmp_path / f"{name}.duckdb")
    info = ds.import_dataset(con, [src], SPEC, SCHEMA)
    again = ds.import_dataset(con, [src], SPEC, SCHEMA)
    rows = (
        con.execute("SELECT * EXCLUDE (created_at, params) FROM datasets").fetchall(),
        con.execute("SELECT * FROM items ORDER BY item_id").fetchall(),
        con.execute("SELECT * FROM labels ORDER BY item_id, question").fetchall(),
    )
    con.close()
    return info, again, rows


def test_the_duckdb_path_stores_what_the_pandas_path_stores(tmp_path, monkeypatch):
    calls = []
    real = ds._fast_plain_parquet
    monkeypatch.setattr(ds, "_fast_plain_parquet", lambda *a: calls.append(r := real(*a)) or r)
    fast, fast_again, fast_rows = imported(tmp_path, "fast", table(), fast=True, monkeypatch=monkeypatch)
    assert calls and calls[0] is not None  # the fast path did the import
    slow, _, slow_rows = imported(tmp_path, "slow", table(), fast=False, monkeypatch=monkeypatch)
    assert fast.fingerprint == slow.fingerprint and fast.created and fast.n_items == N
    assert fast_rows == slow_rows
    assert {r[6] for r in fast_rows[1]} == {"calibration", "test"}  # 'dev' and 'Calibration' map as in the pandas path
    assert (fast_again.created, fast_again.version, fast_again.shared_ids) == (False, 1, N)


@pytest.mark.parametrize(
    ("col", "value", "outcome"),
    [
        ("id", "x-99999 ", "normalised"),  # trimmed by the pandas path, with a notice
        ("t", "d", "refused"),  # not an option: the pandas path names the row
        ("text", " \u200b ", "refused"),  # invisible only
        ("id", "x-00008", "refused"),  # duplicate
    ],
)
def test_anything_not_plain_takes_the_pandas_path(tmp_path, monkeypatch, col, value, outcome):
    t = table(**{col: (9, value)})
    if outcome == "normalised":
        info, _, rows = imported(tmp_path, "n", t, fast=True, monkeypatch=monkeypatch)
        assert info.ids_normalised == 1 and "x-99999" in {r[2] for r in rows[1]} and len(rows[1]) == N
        return
    monkeypatch.setattr(ds, "FAST_PATH_MIN_ROWS", 0)
    pq.write_table(t, tmp_path / "bad.parquet")
    con = connect(tmp_path / "bad.duckdb")
    before = table_counts(con)
    with pytest.raises(DataImportError, match=r"record 10|duplicate item id"):
        ds.import_dataset(con, [tmp_path / "bad.parquet"], SPEC, SCHEMA)
    assert table_counts(con) == before
    con.close()


def test_streamed_fingerprint_hash_equals_duckdbs_string_agg(monkeypatch):
    """The fingerprint's hash is streamed in Arrow batches (DuckDB's ``string_agg`` needed 0.5 GB in one piece
    at 10M items): the same hex digest as ``sha256(string_agg(…, chr(30) ORDER BY …))`` over several batches,
    with multi-byte text and empty strings, and ``''`` for no rows, as ``coalesce(sha256(NULL), '')`` gives."""
    import duckdb

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT 'id-' || (i * 7919 % 5003) AS item_id,"
        " CASE i % 4 WHEN 0 THEN NULL WHEN 1 THEN 'héllo ✓' WHEN 2 THEN '' ELSE repeat('x', i % 300) END AS text"
        " FROM range(5003) r(i)"
    )
    monkeypatch.setattr(ds, "HASH_BATCH_ROWS", 1000)  # six batches
    row = "concat_ws(chr(31), item_id, coalesce(text, ''))"
    for relation in ("t", "(SELECT * FROM t WHERE false)", "(SELECT * FROM t WHERE text IS NULL)"):
        expected = con.execute(
            f"SELECT coalesce(sha256(string_agg({row}, chr(30) ORDER BY item_id)), '') FROM {relation}"
        ).fetchone()[0]
        assert ds._sha256_agg(con, row, relation, "item_id") == expected
    assert ds._sha256_agg(con, row, "(SELECT * FROM t WHERE false)", "item_id") == ""
