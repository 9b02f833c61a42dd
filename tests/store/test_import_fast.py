"""Large plain Parquet files import through DuckDB alone (``_fast_plain_parquet``) and store exactly what
the pandas path stores: the same fingerprint, items, labels and dataset row. Anything not provably plain
(an id to trim, an unknown label, a blank text) goes the pandas path, which normalises or names the row."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import workbench.store.datasets as ds
import workbench.store.fingerprints as fingerprints
import workbench.store.import_files as import_files
import workbench.store.import_streamed as streamed
from tests.conftest import table_counts
from workbench.errors import DataImportError
from workbench.schema import DecisionSchema
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec

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
SPEC = ImportSpec(
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
    monkeypatch.setattr(streamed, "FAST_PATH_MIN_ROWS", 0 if fast else 10**12)
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
    real = ds.streamed_import
    monkeypatch.setattr(ds, "streamed_import", lambda *a: calls.append(r := real(*a)) or r)
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
    monkeypatch.setattr(streamed, "FAST_PATH_MIN_ROWS", 0)
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
    monkeypatch.setattr(fingerprints, "HASH_BATCH_ROWS", 1000)  # six batches
    row = "concat_ws(chr(31), item_id, coalesce(text, ''))"
    for relation in ("t", "(SELECT * FROM t WHERE false)", "(SELECT * FROM t WHERE text IS NULL)"):
        expected = con.execute(
            f"SELECT coalesce(sha256(string_agg({row}, chr(30) ORDER BY item_id)), '') FROM {relation}"
        ).fetchone()[0]
        assert fingerprints._sha256_agg(con, row, relation, "item_id") == expected
    assert fingerprints._sha256_agg(con, row, "(SELECT * FROM t WHERE false)", "item_id") == ""


# -- the streamed path without --schema, on CSV/TSV, any question type and any split source ------------------
SCHEMA2 = DecisionSchema.from_dict(
    {
        "name": "kinds",
        "questions": {
            "topic": {"type": "choice", "instructions": "Which?", "criteria": {"a": "A", "b": "B", "nan": "not a NaN"}},
            "spam": {"type": "noul", "instructions": "Spam?"},
            "grade": {"type": "score", "instructions": "Grade?", "criteria": ["low", "mid", "high"]},
        },
    },
    source="test",
)
M = 600


def _cols(n: int = M, prefix: str = "x") -> dict[str, list]:
    return {
        "id": [f"{prefix}-{i:05d}" for i in range(n)],
        "text": [['message, "quoted"', "日本語のテキスト", "ça va ✓", "x"][i % 4] + f" {i}" for i in range(n)],
        "t": [["a", " b", "nan", "", None, "a "][i % 6] for i in range(n)],
        "s": [["yes", "No", "TRUE", "0", " ", None][i % 6] for i in range(n)],
        "g": [["0", "high", "mid", "2", "NaN"][i % 5] for i in range(n)],
        "split": [["Calibration", "test", "dev", "train", " Test "][i % 5] for i in range(n)],
    }


def _write(path: Path, cols: dict[str, list]) -> Path:
    import pyarrow.csv as pcsv

    t = pa.table({k: pa.array(v, type=pa.string()) for k, v in cols.items()})
    if path.suffix == ".parquet":
        pq.write_table(t, path)
    else:
        pcsv.write_csv(t, path, pcsv.WriteOptions(delimiter="\t" if path.suffix == ".tsv" else ","))
    return path


def _stored(con) -> tuple:
    return (
        con.execute("SELECT * EXCLUDE (created_at) FROM datasets ORDER BY version").fetchall(),
        con.execute("SELECT * FROM items ORDER BY rowid").fetchall(),  # insertion order: the file's
        con.execute("SELECT * FROM labels ORDER BY rowid").fetchall(),
        con.execute("SELECT * FROM gold_labels ORDER BY ALL").fetchall(),
    )


def _both_paths(tmp_path, monkeypatch, files: list[Path], spec: ImportSpec, schema) -> tuple:
    calls: list = []
    real = ds.streamed_import
    monkeypatch.setattr(ds, "streamed_import", lambda *a: calls.append(r := real(*a)) or r)
    out = []
    for label, threshold in (("streamed", 0), ("pandas", 10**12)):
        monkeypatch.setattr(streamed, "FAST_PATH_MIN_ROWS", threshold)
        con = connect(tmp_path / f"{label}.duckdb")
        info = ds.import_dataset(con, files, spec, schema)
        again = ds.import_dataset(con, files, spec, schema)
        out.append((info.to_dict(), again.to_dict(), _stored(con)))
        con.close()
    return calls, out


SPEC_NO_SCHEMA = ImportSpec(
    name="plain", text_column="text", id_column="id", split_column="split", labels={"topic": "t", "grade": "g"}
)
SPEC_KINDS = ImportSpec(
    name="kinds",
    text_column="text",
    id_column="id",
    test_fraction=0.3,
    calibration_fraction=0.25,
    seed=7,
    labels={"topic": "t", "spam": "s", "grade": "g"},
)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet"])
@pytest.mark.parametrize(
    ("spec", "schema"),
    [
        (SPEC_NO_SCHEMA, None),
        (SPEC_KINDS, SCHEMA2),
        (
            ImportSpec(
                name="pos", text_column="text", id_column="id", split="dev", labels={"s": "s"}, positive={"s": "yes"}
            ),
            None,
        ),
    ],
    ids=["no-schema", "schema-noul-score-fractions", "positive-fixed-split"],
)
def test_streamed_path_stores_what_the_pandas_path_stores(tmp_path, monkeypatch, suffix, spec, schema):
    """Without --schema, on CSV/TSV/Parquet, with yes/no, score and NaN-spelled labels, blank and null labels
    (unlabelled, with the same notice), non-ASCII texts and every split source: the same dataset row (params
    included), items and labels in the same order, gold labels, notices and re-import result."""
    src = _write(tmp_path / f"data{suffix}", _cols())
    calls, ((info, again, rows), (p_info, p_again, p_rows)) = _both_paths(tmp_path, monkeypatch, [src], spec, schema)
    assert calls[0] is not None and calls[2] is None  # streamed, then the pandas path (below its threshold)
    assert info == p_info and again == p_again and rows == p_rows
    assert info["created"] and not again["created"] and info["n_items"] == M
    assert info["unlabelled"] and info["notices"]  # blank/None labels became unlabelled items, with a notice
    assert len(rows[1]) == M and rows[3]


def test_streamed_path_splits_by_file_name(tmp_path, monkeypatch):
    files = [
        _write(tmp_path / "train.csv", _cols(300, "tr")),
        _write(tmp_path / "test.parquet", _cols(200, "te")),
        _write(tmp_path / "valid.csv", _cols(100, "va")),
    ]
    spec = ImportSpec(name="files", text_column="text", id_column="id", labels={"topic": "t"})
    calls, ((info, again, rows), (p_info, p_again, p_rows)) = _both_paths(tmp_path, monkeypatch, files, spec, None)
    assert calls[0] is not None and (info, again, rows) == (p_info, p_again, p_rows)
    assert [r[6] for r in rows[1]] == ["train"] * 300 + ["test"] * 200 + ["calibration"] * 100


@pytest.mark.parametrize(
    ("col", "value", "message"),
    [
        ("text", "\u200b \u3000", r"line 12: empty text in column 'text'"),  # invisible only (no ASCII at all)
        ("id", " x-00009", r"duplicate item id .x-00009."),  # trimmed, then a duplicate
        ("split", "holdout", r"line 12: split 'holdout' is not one of"),
        ("g", "top", r"line 12: label 'top' in column 'g' is not an option of question 'grade'"),
        ("s", "maybe", r"line 12: label 'maybe' for yes/no question 'spam'"),
    ],
)
def test_what_the_streamed_path_cannot_prove_is_refused_by_the_pandas_path(tmp_path, monkeypatch, col, value, message):
    cols = _cols()
    cols[col][10] = value
    src = _write(tmp_path / "bad.csv", cols)
    spec = ImportSpec(
        name="bad", text_column="text", id_column="id", split_column="split", labels={"grade": "g", "spam": "s"}
    )
    calls: list = []
    real = ds.streamed_import
    monkeypatch.setattr(ds, "streamed_import", lambda *a: calls.append(r := real(*a)) or r)
    con = connect(tmp_path / "bad.duckdb")
    before = table_counts(con)
    with pytest.raises(DataImportError, match=message):
        ds.import_dataset(con, [src], spec, SCHEMA2)
    assert calls == [None] and table_counts(con) == before
    con.close()


@pytest.mark.parametrize("block", [1, 2, 3, 5, 7, 64, 1 << 24])
def test_utf8_check_reads_blocks_and_names_the_line_and_byte(tmp_path, monkeypatch, block):
    """The CSV UTF-8 check reads blocks (was the whole file at once): characters cut by a block boundary are
    whole, and a bad byte is named at the line and with the value the whole-file decode named; the longest line
    (what bounds DuckDB's ``max_line_size``) counts its newline."""
    monkeypatch.setattr(import_files, "UTF8_CHECK_BLOCK", block)
    good = "id,text\nx-1,ça va ✓ 日本\nx-2,€uro 🙂\n".encode()
    (tmp_path / "good.csv").write_bytes(good)
    assert import_files._check_utf8(tmp_path / "good.csv") == (
        len(good),
        max(len(line) + 1 for line in good.split(b"\n")[:-1]),
    )
    for bad, line in ((good + b"x-3,\xff\n", 4), (good[:12] + b"\xe2\x82" + good[12:], 2), (good + b"\xe2\x82", 4)):
        (tmp_path / "bad.csv").write_bytes(bad)
        try:
            bad.decode("utf-8")
        except UnicodeDecodeError as exc:
            expected = f"line {line} (byte 0x{bad[exc.start]:02x})"
            assert bad.count(b"\n", 0, exc.start) + 1 == line
        with pytest.raises(DataImportError, match=re.escape(expected)):
            import_files._check_utf8(tmp_path / "bad.csv")
