"""Fuzz: small CSV, JSONL and Parquet files end in an import or one DataImportError line, and a refused
import changes no table of the store (issue 14). An import is also checked for what it stored (issue 25: no
lenient accept): labels are options of the schema, texts and ids are not blank, splits are known, and a
JSON(L) file holding a record that strict JSON refuses (NaN, Infinity) is never imported. Budget:
``tests.fuzz.fuzz_settings`` (``WORKBENCH_FUZZ_EXAMPLES``), against one real DuckDB file."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from workbench_runtime.jsonio import StrictJSONError, loads_strict

from tests.conftest import table_counts
from tests.fuzz import fuzz_settings
from workbench.errors import WorkbenchError
from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import SPLITS, ImportSpec

FUZZ = fuzz_settings()
SCHEMA = DecisionSchema.from_dict(
    {"questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": {"a": None, "b": None}}}}
)
CANONICAL = ["id", "text", "label", "split", "state"]
COLUMNS = ["id", "text", "label", "split", "Text", "id ", "", "state"]
# explicit alphabets: the default text() alphabet costs seconds of codec tables per process
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=("Cs",))
CELL_ALPHABET = ANY_CHAR | st.sampled_from(
    [",", '"', "\n", "\r", "\t", ";", " ", "\u200b", "\ufeff", "\x00", "é", "\u0301"]
)
cells = st.one_of(
    st.sampled_from(["a", "b", "", " ", "NaN", "nan", "train", "test", "calibration", "x1", "x1 ", "{}", '{"k": 1}']),
    st.text(alphabet=CELL_ALPHABET, max_size=6),
)
_counter = itertools.count()
# strategies built once (building them inside a draw re-runs hypothesis' emptiness checks every example)
NAMES = st.one_of(*[st.sampled_from(["ds", "ds2"])] * 3, st.text(alphabet=ANY_CHAR, min_size=1, max_size=4))
IDS = st.sampled_from(["x1", "x1 ", "x2", "caf\u00e9", "cafe\u0301", "\u200b"]) | st.text(
    alphabet=ANY_CHAR, min_size=1, max_size=4
)
TEXTS = st.text(alphabet=CELL_ALPHABET, min_size=1, max_size=8) | cells
HEADERS = st.just(CANONICAL) | st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=5)
# rows under the full header: mostly plausible values per column, so imports get past the readers
CANONICAL_ROWS = st.lists(
    st.tuples(
        IDS,
        TEXTS,
        st.sampled_from(["a", "b", "", "NaN", " a "]) | cells,
        st.sampled_from(["train", "test", "calibration", "dev"]) | cells,
        st.sampled_from(['{"k": 1}', "[1, 2]", '"s"', "null", '{"k": 1, "k": 2}']) | cells,
    ).map(list),
    min_size=1,
    max_size=6,
)
ROWS = {
    (width, ragged): st.lists(
        st.lists(cells, min_size=max(0, width - 1) if ragged else width, max_size=width + 1 if ragged else width),
        max_size=6,
    )
    for width in range(1, 6)
    for ragged in (False, True)
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz-import")
    con = connect(tmp / "fuzz.duckdb")
    tables = sorted(table_counts(con))
    yield con, tmp, tables, {"counts": counts(con, tables)}
    con.close()


def counts(con, tables: list[str]) -> dict[str, int]:
    """Row count of every table of the store, in one query (the tables themselves never change here)."""
    row = con.execute("SELECT " + ", ".join(f'(SELECT count(*) FROM "{t}")' for t in tables)).fetchone()
    return dict(zip(tables, row, strict=True))


@st.composite
def specs(draw) -> tuple[ImportSpec, DecisionSchema | None]:
    how = draw(st.sampled_from(["split", "split_column", "test_fraction", "none"]))
    state = draw(st.booleans()) if how != "none" else False
    spec = ImportSpec(
        name=draw(NAMES),
        text_column=None if state else "text",
        state_column="state" if state else None,
        id_column=draw(st.sampled_from(["id", None])),
        labels={"q": "label"},
        split="test" if how == "split" else None,
        split_column="split" if how == "split_column" else None,
        test_fraction=0.3 if how == "test_fraction" else None,
    )
    return spec, draw(st.sampled_from([SCHEMA, None]))


@st.composite
def csv_bytes(draw) -> bytes:
    header = draw(HEADERS)
    if header == CANONICAL and draw(st.booleans()):
        rows = draw(CANONICAL_ROWS)
    else:
        rows = draw(ROWS[len(header), draw(st.integers(0, 9)) == 0])
    style = draw(st.sampled_from(["csv", "raw", "bytes"]))
    if style == "bytes":
        return draw(st.binary(max_size=60))
    if style == "raw":  # no quoting at all: delimiters and quotes inside cells break rows
        return "\n".join(",".join(r) for r in [header, *rows]).encode("utf-8", "surrogatepass")
    buf = io.StringIO()
    csv.writer(buf).writerows([header, *rows])
    return buf.getvalue().encode("utf-8", "surrogatepass")


json_values = (
    cells
    | cells
    | st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), cells),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(COLUMNS), inner, max_size=3),
        max_leaves=6,
    )
)


KINDS = st.sampled_from(["record"] * 6 + ["value", "raw"])
RAW_LINE = st.text(alphabet=CELL_ALPHABET, max_size=12)
# one strategy per record (drawing a value per key re-checks the recursive strategy each time)
RECORDS = st.dictionaries(st.sampled_from(COLUMNS), json_values, max_size=5)


@st.composite
def jsonl_bytes(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(KINDS)
        if kind == "record" and draw(st.booleans()):
            record: dict = dict(zip(CANONICAL, draw(CANONICAL_ROWS)[0], strict=True))
            if not draw(st.integers(0, 3)):  # a plausible record with one value of another JSON type (issue 25)
                record[draw(st.sampled_from(["label", "label", "text", "id", "state"]))] = draw(
                    st.sampled_from([float("nan"), float("inf"), 1, 2.5, True, None, ["a"], {"k": 1}])
                )
            lines.append(json.dumps(record))
        elif kind == "record":
            lines.append(json.dumps(draw(RECORDS)))
        elif kind == "value":
            lines.append(json.dumps(draw(json_values)))
        else:
            lines.append(draw(RAW_LINE))
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def check(store, data: bytes, suffix: str, spec_schema) -> None:
    """Imported (and the store grew by exactly that version), or one WorkbenchError line and no change."""
    con, tmp, tables, last = store
    spec, schema = spec_schema
    path = tmp / f"f{next(_counter)}{suffix}"
    path.write_bytes(data)
    before = last["counts"]  # what the previous example left (one count query per example)
    try:
        info = import_dataset(con, [path], spec, schema)
    except WorkbenchError as exc:
        assert "\n" not in str(exc), str(exc)
        assert counts(con, tables) == before
        return
    finally:
        path.unlink()
    after = last["counts"] = counts(con, tables)
    if info.created:
        assert after["items"] == before["items"] + info.n_items
        assert after["datasets"] == before["datasets"] + 1
    else:
        assert after == before
    if suffix == ".jsonl":
        assert not _not_strict_json(data), "imported a JSONL file holding a record strict JSON refuses"
    stored(con, info, schema)


def _not_strict_json(data: bytes) -> bool:
    """Some line of the file is a record strict JSON refuses (NaN/Infinity) although Python's reader takes it."""
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            loads_strict(line)
        except StrictJSONError:
            try:
                json.loads(line)
            except ValueError:
                continue
            return True
    return False


_BLANK = re.compile(r"[\s\u200b\ufeff\x00-\x1f]*")


def stored(con, info, schema) -> None:
    """What an import wrote is valid: labels are options, texts/states and ids not blank, splits known."""
    items = con.execute(
        "SELECT item_id, state_text, state_json::VARCHAR, split FROM items WHERE dataset = ? AND version = ?",
        [info.name, info.version],
    ).fetchall()
    assert len(items) == info.n_items
    for item_id, text, state, split in items:
        assert item_id and not _BLANK.fullmatch(item_id), item_id
        assert split in SPLITS, split
        if state is None:
            assert text is not None and not _BLANK.fullmatch(text), text
        else:
            assert json.loads(state) is not None
    labels = con.execute(
        "SELECT DISTINCT question, option_id FROM labels WHERE dataset = ? AND version = ?", [info.name, info.version]
    ).fetchall()
    for question, option in labels:
        assert option and not _BLANK.fullmatch(option), option
        if schema is not None:
            assert option in {"a", "b"}, (question, option)


@FUZZ
@given(csv_bytes(), specs())
def test_csv_import(store, data: bytes, spec_schema):
    check(store, data, ".csv", spec_schema)


@FUZZ
@given(jsonl_bytes(), specs())
def test_jsonl_import(store, data: bytes, spec_schema):
    check(store, data, ".jsonl", spec_schema)


# -- Parquet: column types as well as values ---------------------------------------------------------
PARQUET_VALUES = {
    "string": (pa.string(), cells),
    "int": (pa.int64(), st.integers(-3, 3) | st.none()),
    "float": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True) | st.none()),
    "bool": (pa.bool_(), st.booleans() | st.none()),
    "binary": (pa.binary(), st.binary(max_size=4) | st.none()),
    "list": (pa.list_(pa.string()), st.lists(cells, max_size=2) | st.none()),
    "struct": (pa.struct([("k", pa.int64())]), st.fixed_dictionaries({"k": st.integers(0, 3)}) | st.none()),
}


@st.composite
def parquet_tables(draw) -> pa.Table:
    n = draw(st.integers(1, 5))
    cols = {}
    for name in draw(st.just(CANONICAL) | st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=5, unique=True)):
        kind = draw(st.sampled_from(["string"] * 5 + list(PARQUET_VALUES)))
        typ, values = PARQUET_VALUES[kind]
        if name == "label" and kind == "string":
            values = st.sampled_from(["a", "b", "NaN", "", " a "]) | st.none() | cells
        if name == "split" and kind == "string":
            values = st.sampled_from(["train", "test", "calibration", "dev", "x"]) | st.none()
        if name == "id" and kind == "string":
            values = IDS | st.none()
        cols[name] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), typ)
    return pa.table(cols)


@FUZZ
@given(parquet_tables(), specs())
def test_parquet_import(store, table, spec_schema):
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    check(store, buf.getvalue().to_pybytes(), ".parquet", spec_schema)
