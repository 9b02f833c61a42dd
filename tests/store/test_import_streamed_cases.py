"""The streamed import also takes JSON and JSONL files, files without an id column (ids ``STEM-00001``),
``group_column`` (carving by group), ``image_column`` and ``meta_columns``, and stores exactly what the pandas
path stores for them: the same dataset row (params included), items, labels, gold labels, notices and
re-import result (compared with the pandas path forced by ``FAST_PATH_MIN_ROWS``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.store.test_import_fast import SCHEMA2, _both_paths, _cols, _write
from workbench.store.import_spec import ImportSpec

M = 600


def _cases(n: int = M, prefix: str = "x") -> dict[str, list]:
    cols = _cols(n, prefix)
    cols["grp"] = [None if i % 7 == 0 else f"g{i // 3}" for i in range(n)]
    cols["img"] = [["a.png; b.png", "", "  ", None, "c.png;;d.png ;", " e.png"][i % 6] for i in range(n)]
    cols["lang"] = [["en", ' say "hi" ', "back\\slash", "", "   ", None, "fr "][i % 7] for i in range(n)]
    cols["tier"] = [["gold", None][i % 2] for i in range(n)]
    return cols


def _write_any(path: Path, cols: dict[str, list]) -> Path:
    if path.suffix not in (".json", ".jsonl"):
        return _write(path, cols)
    records = [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return path


#: every column the streamed path now takes, and carving by group
COLUMNS = {"group_column": "grp", "image_column": "img", "meta_columns": ["lang", "tier"]}
CARVING = {"test_fraction": 0.3, "calibration_fraction": 0.25, "seed": 3}
FULL = ImportSpec(
    "full", "text", labels={"topic": "t", "spam": "s", "grade": "g"}, id_column="id", **COLUMNS, **CARVING
)


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".parquet"])
def test_group_images_metadata_and_json_files_are_streamed_as_the_pandas_path_stores_them(
    tmp_path, monkeypatch, suffix
):
    src = _write_any(tmp_path / f"data{suffix}", _cases())
    calls, ((info, again, rows), (p_info, p_again, p_rows)) = _both_paths(tmp_path, monkeypatch, [src], FULL, SCHEMA2)
    assert calls[0] is not None and calls[2] is None  # streamed, then the pandas path (below its threshold)
    assert info == p_info and again == p_again and rows == p_rows
    assert info["created"] and not again["created"] and info["n_items"] == M
    items = rows[1]
    assert {r[6] for r in items} == {"train", "calibration", "test"}
    split_of_group: dict = {}
    for r in items:  # one group, one split (items without a group are carved by their id)
        if r[7] is not None:
            assert split_of_group.setdefault(r[7], r[6]) == r[6]
    assert [list(r[5]) if r[5] is not None else None for r in items[:6]] == [
        ["a.png", "b.png"],
        None,
        [],
        None,
        ["c.png", "d.png"],
        ["e.png"],
    ]
    assert [json.loads(r[8]) for r in items[:7]] == [
        {"lang": v, "tier": t}
        for v, t in zip(["en", 'say "hi"', "back\\slash", None, None, None, "fr"], ["gold", None] * 4, strict=False)
    ]


def test_files_without_an_id_column_are_numbered_per_file_when_streamed(tmp_path, monkeypatch):
    files = [_write_any(tmp_path / "train.jsonl", _cases(300, "tr")), _write_any(tmp_path / "test.csv", _cases(120))]
    spec = ImportSpec(name="noid", text_column="text", labels={"topic": "t"}, meta_columns=["lang"])
    calls, ((info, again, rows), (p_info, p_again, p_rows)) = _both_paths(tmp_path, monkeypatch, files, spec, None)
    assert calls[0] is not None and (info, again, rows) == (p_info, p_again, p_rows)
    assert [r[2] for r in rows[1]][:2] == ["train-00001", "train-00002"] and rows[1][-1][2] == "test-00120"
    assert [r[6] for r in rows[1]] == ["train"] * 300 + ["test"] * 120


@pytest.mark.parametrize(
    ("col", "value"),
    [("lang", "caf\u00e9"), ("img", "a.png;\tb.png")],  # not printable ASCII: Python's strip is not SQL's trim
)
def test_metadata_or_images_beyond_printable_ascii_go_the_pandas_path(tmp_path, monkeypatch, col, value):
    cols = _cases()
    cols[col][4] = value
    src = _write_any(tmp_path / "data.parquet", cols)
    calls, ((info, _, rows), (p_info, _, p_rows)) = _both_paths(tmp_path, monkeypatch, [src], FULL, SCHEMA2)
    assert calls[0] is None and (info, rows) == (p_info, p_rows)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("null", [False, True], ids=["integers", "a-null-integer"])
def test_integer_columns_are_streamed_as_their_text_unless_one_is_null(tmp_path, monkeypatch, suffix, null):
    """Integer ids, labels (a yes/no question's 1/0, a score's level index) and groups are read as Python's
    ``str`` of the integer, as the pandas path reads them; a null in one goes the pandas path."""
    n = 400
    cols = {
        "id": list(range(1000, 1000 + n)),
        "text": [f"message {i}" for i in range(n)],
        "s": [i % 2 for i in range(n)],
        "g": [i % 3 for i in range(n)],
        "grp": [i // 4 for i in range(n)],
    }
    if null:
        cols["g"][7] = None
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        src = tmp_path / "ints.parquet"
        pq.write_table(
            pa.table({k: pa.array(v, pa.int64() if k != "text" else pa.string()) for k, v in cols.items()}), src
        )
    else:
        src = _write_any(tmp_path / "ints.jsonl", cols)
    spec = ImportSpec(
        "ints",
        "text",
        labels={"spam": "s", "grade": "g"},
        id_column="id",
        group_column="grp",
        **{k: v for k, v in CARVING.items()},
    )
    calls, ((info, again, rows), (p_info, p_again, p_rows)) = _both_paths(tmp_path, monkeypatch, [src], spec, SCHEMA2)
    assert (calls[0] is None) == null and (info, again, rows) == (p_info, p_again, p_rows)
    assert rows[1][0][2] == "1000" and rows[1][0][7] == "0" and rows[1][4][7] == "1"
    assert [r[4] for r in rows[2][:2]] == ["no", "yes"]  # spam of items 1000, 1001 (1/0 is yes/no)
    assert [r[4] for r in rows[2] if r[3] == "grade"][:3] == ["0", "1", "2"]  # the levels' indices
