"""Hostile and clumsy dataset files: refused in one line with the store unchanged, or imported with the
normalisation reported (issue 14 items 6, 7, 8, 9, 12)."""

from __future__ import annotations

import json
import os
import threading
import unicodedata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_cli, table_counts
from workbench.errors import DataImportError
from workbench.store.datasets import import_dataset, load_items, load_labels
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec


def spec(**kw) -> ImportSpec:
    base = dict(name="ds", text_column="text", id_column="id", labels={"intent": "label"}, split="test")
    return ImportSpec(**{**base, **kw})


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    import csv

    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    return path


def refused(db: Path, paths: list[Path], sp: ImportSpec, match: str) -> str:
    """The import raises one DataImportError matching ``match`` and changes no table."""
    with connect(db) as con:
        before = table_counts(con)
        with pytest.raises(DataImportError, match=match) as err:
            import_dataset(con, paths, sp)
        assert table_counts(con) == before
    assert "\n" not in str(err.value)
    return str(err.value)


def one_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def cli_import(db: Path, *paths: Path, timeout: float = 60):
    return run_cli(
        "datasets", "import", *map(str, paths), "--name", "ds", "--text-column", "text", "--id-column", "id",
        "--label", "intent=label", "--split", "test", db=db, timeout=timeout,
    )  # fmt: skip


# -- item 6: Parquet text columns holding bytes or lists ---------------------------------------
def test_parquet_bytes_that_are_utf8_are_decoded(db_path: Path, tmp_path: Path):
    f = tmp_path / "b.parquet"
    pq.write_table(
        pa.table({"id": ["a", "b"], "text": pa.array([b"ok", "caf\u00e9".encode()], pa.binary()), "label": ["x", "y"]}),
        f,
    )
    with connect(db_path) as con:
        import_dataset(con, [f], spec())
        items = load_items(con, "ds")
    assert items.set_index("item_id")["state"].to_dict() == {"a": "ok", "b": "caf\u00e9"}
    assert not any("bytearray" in s for s in items["state"])


def test_parquet_non_utf8_bytes_are_refused(db_path: Path, tmp_path: Path):
    f = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": pa.array([b"\xff\xfe"], pa.binary()), "label": ["x"]}), f)
    msg = refused(db_path, [f], spec(), "binary data that is not UTF-8")
    assert "'text'" in msg


@pytest.mark.parametrize("column", ["text", "label", "id"])
def test_parquet_list_columns_are_refused_not_stored_as_reprs(db_path: Path, tmp_path: Path, column: str):
    cols = {"id": ["a", "b"], "text": ["one", "two"], "label": ["x", "y"]}
    cols[column] = [["x"], ["y", "z"]]
    f = tmp_path / "l.parquet"
    pq.write_table(pa.table(cols), f)
    msg = refused(db_path, [f], spec(), "holds lists, not text")
    assert repr(column) in msg


def test_parquet_nested_json_state_is_stored_as_json(db_path: Path, tmp_path: Path):
    f = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": ["a"], "state": [{"tags": ["x", "y"], "n": 2}], "label": ["x"]}), f)
    with connect(db_path) as con:
        import_dataset(con, [f], spec(text_column=None, state_column="state"))
        assert load_items(con, "ds")["state"].iloc[0] == {"tags": ["x", "y"], "n": 2}


# -- item 7: CSV fields over 131,072 characters --------------------------------------------------
@pytest.mark.parametrize("length", [131_073, 3_000_000])
def test_csv_field_longer_than_the_csv_module_limit_imports(db_path: Path, tmp_path: Path, length: int):
    long_text = ("word " * (length // 5 + 1))[:length].strip() + "!"
    f = write_csv(tmp_path / "long.csv", [["id", "text", "label"], ["a", long_text, "x"], ["b", "short", "y"]])
    with connect(db_path) as con:
        import_dataset(con, [f], spec())
        items = load_items(con, "ds").set_index("item_id")
    assert items.loc["a", "state"] == long_text and len(items.loc["a", "state"]) >= length


def test_csv_limit_is_restored_after_import(db_path: Path, tmp_path: Path):
    import csv

    before = csv.field_size_limit()
    f = write_csv(tmp_path / "long.csv", [["id", "text", "label"], ["a", "x" * 200_000, "x"]])
    with connect(db_path) as con:
        import_dataset(con, [f], spec())
    assert csv.field_size_limit() == before


# -- items 8 and 9: only regular files, sane size ----------------------------------------------
def test_directory_named_like_a_csv_is_one_line(db_path: Path, tmp_path: Path):
    d = tmp_path / "x.csv"
    d.mkdir()
    assert "is a directory" in one_line(cli_import(db_path, d))


def test_dev_zero_is_refused_at_once(db_path: Path, tmp_path: Path):
    msg = refused(db_path, [Path("/dev/zero")], spec(), "a device, not a regular file")
    assert "/dev/zero" in msg
    link = tmp_path / "zero.csv"  # a .csv name is no reason to read a device
    link.symlink_to("/dev/zero")
    assert "a device, not a regular file" in one_line(cli_import(db_path, link, timeout=30))


def test_fifo_is_refused_without_opening_it(db_path: Path, tmp_path: Path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    # if the import opened the FIFO it would block forever; a writer thread would unblock it, so none is started
    done = threading.Event()
    result: dict = {}

    def attempt():
        try:
            with connect(db_path) as con:
                import_dataset(con, [fifo], spec())
        except DataImportError as exc:
            result["error"] = str(exc)
        finally:
            done.set()

    threading.Thread(target=attempt, daemon=True).start()
    if not done.wait(20):
        with open(fifo, "w"):  # release the reader so the thread ends, then fail
            pass
        pytest.fail("import blocked on a FIFO")
    assert "a FIFO, not a regular file" in result["error"]


def test_file_over_the_size_limit_is_refused_before_reading(db_path: Path, tmp_path: Path):
    big = tmp_path / "huge.csv"
    with big.open("wb") as fh:
        fh.write(b"id,text,label\n")
        fh.truncate(5 * 1024**3)  # sparse: 5 GiB on paper, nothing read
    assert "larger than the import limit" in refused(db_path, [big], spec(), "import limit")


def test_stdin_dash_is_refused_with_a_hint(db_path: Path):
    refused(db_path, [Path("-")], spec(), "stdin")


def test_empty_file_is_refused(db_path: Path, tmp_path: Path):
    f = tmp_path / "e.csv"
    f.write_bytes(b"")
    refused(db_path, [f], spec(), "empty file")


# -- item 12: ids, invisible text, headers, labels, names, shared ids ----------------------------
def test_ids_are_trimmed_and_nfc_normalised_so_variants_collide(db_path: Path, tmp_path: Path):
    nfd = unicodedata.normalize("NFD", "caf\u00e9")
    f = write_csv(tmp_path / "d.csv", [["id", "text", "label"], ["a1", "one", "x"], ["a1 ", "two", "y"]])
    msg = refused(db_path, [f], spec(), "duplicate item id 'a1'")
    assert "1 id appear" in msg or "1 id " in msg
    g = write_csv(tmp_path / "n.csv", [["id", "text", "label"], ["caf\u00e9", "one", "x"], [nfd, "two", "y"]])
    refused(db_path, [g], spec(), "duplicate item id")


def test_normalised_ids_are_stored_and_reported(db_path: Path, tmp_path: Path):
    nfd = unicodedata.normalize("NFD", "caf\u00e9")
    f = write_csv(tmp_path / "d.csv", [["id", "text", "label"], [" a1\u200b", "one", "x"], [nfd, "two", "y"]])
    with connect(db_path) as con:
        info = import_dataset(con, [f], spec())
        assert sorted(load_items(con, "ds")["item_id"]) == ["a1", "caf\u00e9"]
    assert info.ids_normalised == 2 and any("NFC" in n for n in info.notices)


@pytest.mark.parametrize("blank", ["\u200b", "\u200b\u200d\ufeff", " \u3164 ", "\u00ad", "\u2800\u2060"])
def test_invisible_only_text_fails_the_empty_text_check(db_path: Path, tmp_path: Path, blank: str):
    f = write_csv(tmp_path / "i.csv", [["id", "text", "label"], ["a", "fine", "x"], ["b", blank, "y"]])
    assert "line 3" in refused(db_path, [f], spec(), "empty text")


def test_visible_text_with_invisible_characters_is_kept(db_path: Path, tmp_path: Path):
    f = write_csv(tmp_path / "i.csv", [["id", "text", "label"], ["a", "\u200bhello\u200b", "x"]])
    with connect(db_path) as con:
        import_dataset(con, [f], spec())
        assert load_items(con, "ds")["state"].iloc[0] == "\u200bhello\u200b"


@pytest.mark.parametrize("header", [["id", "text", "text", "label"], ["id", "Text", "text", "label"]])
def test_duplicated_csv_header_is_refused(db_path: Path, tmp_path: Path, header: list[str]):
    f = write_csv(tmp_path / "h.csv", [header, ["a", "one", "two", "x"]])
    assert "appears twice in the header" in refused(db_path, [f], spec(), "appears twice")


def test_duplicated_parquet_and_json_columns_are_refused(db_path: Path, tmp_path: Path):
    f = tmp_path / "h.parquet"
    t = pa.Table.from_arrays([pa.array(["a"]), pa.array(["one"]), pa.array(["two"]), pa.array(["x"])],
                             names=["id", "text", "text", "label"])  # fmt: skip
    pq.write_table(t, f)
    refused(db_path, [f], spec(), "appears twice")
    j = tmp_path / "h.jsonl"
    j.write_text('{"id": "a", "Text": "one", "text": "two", "label": "x"}\n', encoding="utf-8")
    refused(db_path, [j], spec(), "appears twice")
    k = tmp_path / "k.jsonl"
    k.write_text('{"id": "a", "text": "one", "text": "two", "label": "x"}\n', encoding="utf-8")
    refused(db_path, [k], spec(), "'text' appears twice")


def test_duplicate_key_in_a_json_state_cell_is_refused(db_path: Path, tmp_path: Path):
    f = write_csv(tmp_path / "s.csv", [["id", "state", "label"], ["a", '{"x": 1, "x": 2}', "y"]])
    refused(db_path, [f], spec(text_column=None, state_column="state"), "duplicate key 'x'")


def test_empty_and_nan_labels_are_counted_and_reported(db_path: Path, tmp_path: Path):
    f = write_csv(
        tmp_path / "l.csv",
        [["id", "text", "label"], ["a", "one", "x"], ["b", "two", ""], ["c", "three", "NaN"], ["d", "four", " "]],
    )
    with connect(db_path) as con:
        info = import_dataset(con, [f], spec())
        assert sorted(load_labels(con, "ds")["item_id"]) == ["a"]
    assert info.unlabelled == {"intent": 3}
    assert any("3 row(s) have an empty or NaN label for 'intent'" in n for n in info.notices)
    proc = run_cli(
        "datasets", "import", str(f), "--name", "cli", "--text-column", "text", "--id-column", "id",
        "--label", "intent=label", "--split", "test", "--json", db=db_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["import"]["unlabelled"] == {"intent": 3}
    assert "empty or NaN label" in proc.stderr


def test_parquet_nan_labels_are_counted(db_path: Path, tmp_path: Path):
    f = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["one", "two"], "label": [1.0, float("nan")]}), f)
    with connect(db_path) as con:
        info = import_dataset(con, [f], spec())
    assert info.unlabelled == {"intent": 1}


@pytest.mark.parametrize(
    "name, match",
    [("bad\nname", "U\\+000A"), ("x" * 5000, "5,000 characters"), (" pad", "surrounding whitespace"),
     ("zero\u200bwidth", "U\\+200B"), ("", "empty")],
)  # fmt: skip
def test_dataset_names_are_validated(db_path: Path, tmp_path: Path, name: str, match: str):
    f = write_csv(tmp_path / "ok.csv", [["id", "text", "label"], ["a", "one", "x"]])
    refused(db_path, [f], spec(name=name), match)


def test_reimport_reports_the_count_of_shared_ids(db_path: Path, tmp_path: Path):
    rows = [["id", "text", "label"]] + [[f"i{k}", f"text {k}", "x"] for k in range(10)]
    first = write_csv(tmp_path / "v1.csv", rows)
    second = write_csv(tmp_path / "v2.csv", rows[:8] + [[f"new{k}", "t", "y"] for k in range(5)])
    with connect(db_path) as con:
        assert import_dataset(con, [first], spec()).shared_ids is None
        again = import_dataset(con, [first], spec())
        assert (again.created, again.shared_ids) == (False, 10)
        v2 = import_dataset(con, [second], spec())
        assert (v2.version, v2.shared_ids, v2.n_items) == (2, 7, 12)


def test_same_file_twice_counts_duplicate_ids_not_rows(db_path: Path, tmp_path: Path):
    f = write_csv(tmp_path / "d.csv", [["id", "text", "label"], ["a", "1", "x"], ["b", "2", "y"], ["c", "3", "y"]])
    msg = refused(db_path, [f, f], spec(), "duplicate item id")
    assert "3 ids appear more than once (6 rows)" in msg


def test_append_clash_counts_ids(db_path: Path, tmp_path: Path):
    f = write_csv(tmp_path / "d.csv", [["id", "text", "label"], ["a", "1", "x"], ["b", "2", "y"]])
    with connect(db_path) as con:
        import_dataset(con, [f], spec())
    refused(db_path, [f], spec(append=True), "2 item ids")


# -- issue 25: JSON records are read as strictly as the runtime reads JSON ----------------------------
def test_a_nan_label_in_jsonl_names_its_own_record_not_a_valid_one(db_path: Path, tmp_path: Path):
    """One NaN label made DuckDB read the key as JSON text, so the valid label "a" became '"a"' and the
    error blamed record 1; NaN is not JSON (the runtime refuses it): the NaN record is named, with the field."""
    from workbench.schema import DecisionSchema

    schema = DecisionSchema.from_dict(
        {"questions": {"intent": {"type": "choice", "instructions": "?", "criteria": {"a": None, "b": None}}}}
    )
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"id": "x1", "text": "one", "label": "a"}\n{"id": "x2", "text": "two", "label": NaN}\n'
        '{"id": "x3", "text": "three", "label": "b"}\n',
        encoding="utf-8",
    )
    with connect(db_path) as con:
        before = table_counts(con)
        with pytest.raises(DataImportError, match=r"d\.jsonl: record 2: field 'label' holds NaN") as err:
            import_dataset(con, [f], spec(), schema)
        assert table_counts(con) == before
    assert "write null" in str(err.value) and "\n" not in str(err.value)
    n = tmp_path / "n.jsonl"  # a number column with one Infinity (it would have become an unlabelled row)
    n.write_text('{"id": "x1", "text": "one", "label": 1}\n{"id": "x2", "text": "two", "label": -Infinity}\n')
    refused(db_path, [n], spec(), r"record 2: field 'label' holds -Infinity")
    s = tmp_path / "s.jsonl"  # inside a JSON state, named by its path
    s.write_text('{"id": "x1", "state": {"k": [1, NaN]}, "label": "a"}\n')
    refused(db_path, [s], spec(text_column=None, state_column="state"), r"record 1: field 'state\.k\.1' holds NaN")


def test_jsonl_keys_of_mixed_types_read_each_value_as_itself(db_path: Path, tmp_path: Path):
    """A key holding a string in one record and a list or number in another is read per record: the valid
    labels import as they are, and the record with a list is the one named."""
    f = tmp_path / "m.jsonl"
    f.write_text('{"id": "x1", "text": "one", "label": "a"}\n{"id": "x2", "text": "two", "label": 2}\n')
    with connect(db_path) as con:
        import_dataset(con, [f], spec())
        labels = load_labels(con, "ds")
    assert dict(zip(labels["item_id"], labels["option_id"])) == {"x1": "a", "x2": "2"}
    g = tmp_path / "g.jsonl"
    g.write_text('{"id": "x1", "text": "one", "label": "a"}\n{"id": "x2", "text": "two", "label": ["a"]}\n')
    refused(db_path, [g], spec(name="g"), r"g\.jsonl: record 2: column 'label' holds lists, not text")


@pytest.mark.parametrize("ids", [[1, None], [None, None]])
def test_a_missing_integer_id_in_parquet_is_named_not_a_traceback(db_path: Path, tmp_path: Path, ids):
    """Found by the dataset fuzzer: an integer id column with a null reached pandas as Int64 and the blank
    check raised TypeError ("Invalid value '' for dtype 'Int64'")."""
    f = tmp_path / "i.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "text": ["one", "two"], "label": ["a", "b"]}), f)
    refused(db_path, [f], spec(), f"i\\.parquet: record {ids.index(None) + 1}: empty id in column 'id'")
