"""Fuzz: answer files for `workbench runs import` (JSONL wide and long, Parquet wide) end in a run whose stored
vectors are exactly what the runtime accepts, or in one DataImportError line with the store unchanged (issue 25).

The oracle is independent of the import: each line is parsed with the runtime's strict JSON reader
(``workbench_runtime.jsonio.loads_strict``: no NaN, no duplicate key) and each vector goes through the
runtime's own ``normalise_answer(strict=True)`` (a complete map of numbers, not booleans or strings, within
[0, 1], summing to 1 within the tolerance). An input the oracle accepts must be imported with those vectors
(no false refusal); an input it refuses must be refused (no lenient accept). Real DuckDB file, one per module.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from workbench_runtime.answers import normalise_answer
from workbench_runtime.jsonio import StrictJSONError, loads_strict
from workbench_runtime.questions import Choice

from tests.conftest import table_counts
from tests.fuzz import fuzz_settings
from workbench.errors import AnswerError, DataImportError, WorkbenchError
from workbench.schema import DecisionSchema, option_ids
from workbench.store.answer_import import import_answers
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec

SCHEMA = DecisionSchema.from_dict(
    {
        "name": "fz",
        "questions": {
            "topic": {"type": "choice", "instructions": "?", "criteria": {"a": None, "b": None, "c": None}},
            "spam": {"type": "noul", "instructions": "?"},
        },
    }
)
QUESTIONS = SCHEMA.question_ids
K = {q: len(option_ids(SCHEMA.questions[q])) for q in QUESTIONS}
#: the runtime's check of a vector: a complete probability map of a choice question with these options
ORACLE_Q = {q: Choice(instructions="?", criteria={o: None for o in option_ids(SCHEMA.questions[q])}) for q in QUESTIONS}
ITEMS = ["i1", "i2", "i3", "7", "x y"]
_counter = itertools.count()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz-answers")
    (tmp / "ds.csv").write_text("id,text,topic\n" + "".join(f"{i},text {i},a\n" for i in ITEMS))
    con = connect(tmp / "fuzz.duckdb")
    import_dataset(
        con,
        [tmp / "ds.csv"],
        ImportSpec(name="ds", text_column="text", id_column="id", labels={"topic": "topic"}, split="test"),
        SCHEMA,
    )
    yield con, tmp, {"counts": table_counts(con)}
    con.close()


# -- files: valid ones, then 0-3 mutations ----------------------------------------------------------
huge = st.integers(min_value=10**19, max_value=10**30) | st.integers(max_value=-(10**19), min_value=-(10**30))
numbers = st.floats(0, 1) | st.sampled_from([0, 1, 0.0, 1.0, 1e-10, -1e-10, 1 + 1e-10, -0.0, 0.5, 1e-300, 5e-324])
odd_scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-3, 3),
    huge,
    st.booleans(),
    st.none(),
    st.sampled_from(["0.5", "1", "", "NaN", "true", "timeout"]),
    st.builds(lambda: [0.5]),  # a fresh object each draw
    st.builds(lambda: {"a": 1}),
)


@st.composite
def valid_vectors(draw, k: int) -> list:
    p = draw(st.lists(st.floats(0.01, 1), min_size=k, max_size=k))
    vec = [v / sum(p) for v in p]
    how = draw(st.sampled_from(["exact", "rounded", "ints"]))
    if how == "rounded":  # like Clef: 4 decimals
        vec = [round(v, 4) for v in vec]
    elif how == "ints":
        vec = [1 if i == draw(st.integers(0, k - 1)) else 0 for i in range(k)]
    return vec


@st.composite
def mutate_vector(draw, vec: list) -> list | object:
    vec = list(vec)
    how = draw(st.sampled_from(["element", "element", "length", "scale", "whole"]))
    if how == "element":
        vec[draw(st.integers(0, len(vec) - 1))] = draw(odd_scalars | numbers)
    elif how == "length":
        vec = vec + [0.0] if draw(st.booleans()) else vec[:-1]
    elif how == "scale":
        factor = draw(st.sampled_from([0.97, 0.985, 1.015, 1.03, 2.0, -1.0]))
        vec = [v * factor if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in vec]
    else:
        return draw(odd_scalars)
    return vec


ODD_IDS = st.sampled_from([7, "i9", True, None, 1.5, "", " i1", ["i1"], {"id": "i1"}, 10**20, -7])
WIDE_KEYS = ["split", "Topic", "topc", "model", "topic__failure_kind", "spam__failure_message", "item_id"]
LONG_KEYS = ["failure_kind", "failure_message", "model", "latency_ms", "input_tokens", "cost_usd", "cached",
             "p_top", "run_id", "split", "Question", "probability"]  # fmt: skip
figures = numbers | st.sampled_from([-1, -0.5, 12, 250.5, 10**20, 2**63, 1e300]) | odd_scalars


@st.composite
def mutations(draw, records: list[dict], keys: list[str], vector_key) -> list[dict]:
    """0-3 edits of a valid file: a field given an odd value, an element of a vector, a key dropped or
    added, a record repeated, an id changed."""
    for _ in range(draw(st.integers(0, 3))):
        if not records:
            break
        i = draw(st.integers(0, len(records) - 1))
        rec = records[i]
        how = draw(st.sampled_from(["vector", "vector", "field", "drop", "add", "repeat", "id"]))
        vk = vector_key(rec)
        if how == "vector" and vk is not None and isinstance(rec.get(vk), list):
            rec[vk] = draw(mutate_vector(rec[vk]))
        elif how == "field":
            rec[draw(st.sampled_from(keys))] = draw(odd_scalars | figures | st.sampled_from(["timeout", "a", "spam"]))
        elif how == "drop" and rec:
            rec.pop(draw(st.sampled_from(sorted(rec))))
        elif how == "add":
            rec[draw(st.sampled_from(keys))] = draw(st.none() | st.sampled_from(["timeout", "m"]) | figures)
        elif how == "repeat":
            records.insert(draw(st.integers(0, len(records))), dict(rec))
        elif how == "id":
            rec["item_id"] = draw(ODD_IDS)
    return records


@st.composite
def wide_records(draw) -> list[dict]:
    items = draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=len(ITEMS), unique=True))
    out = []
    for item in items:
        rec: dict = {"item_id": 7 if item == "7" and draw(st.booleans()) else item}
        for q in QUESTIONS:
            if draw(st.integers(0, 5)):
                rec[q] = draw(valid_vectors(K[q]))
            else:
                rec[q] = None
                if draw(st.booleans()):
                    rec[f"{q}__failure_kind"] = draw(st.sampled_from(["timeout", "server"]))
        out.append(rec)
    q_of = draw(st.sampled_from(QUESTIONS))
    return draw(mutations(out, WIDE_KEYS, lambda r: q_of))


@st.composite
def long_records(draw) -> list[dict]:
    items = draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=4, unique=True))
    out = []
    for item in items:
        for q in QUESTIONS:
            rec: dict = {"item_id": item, "question": q, "probs": draw(valid_vectors(K[q]) | st.none())}
            for c in ("model", "latency_ms", "input_tokens", "cost_usd", "cached", "run_id", "p_top"):
                if not draw(st.integers(0, 2)):
                    rec[c] = draw(
                        {"model": st.sampled_from(["m1", "m2"]), "cached": st.booleans(), "run_id": st.just("r"),
                         "input_tokens": st.integers(0, 10**6), "p_top": st.floats(0, 1)}.get(c, st.floats(0, 1e4))
                    )  # fmt: skip
            if rec["probs"] is None and draw(st.booleans()):
                rec["failure_kind"] = "timeout"
            out.append(rec)
    return draw(mutations(out, LONG_KEYS + ["question", "probs"], lambda r: "probs"))


def jsonl(records: list[dict], junk: str | None) -> str:
    lines = [json.dumps(r) for r in records]  # NaN/Infinity written as such: the import must refuse them
    if junk is not None:
        lines.insert(len(lines) // 2, junk)
    return "\n".join(lines) + "\n"


JUNK = st.one_of(
    *[st.none()] * 6,
    st.sampled_from(['{"item_id": "i1", "topic": [1, 0, 0]', "[]", "null", "1", "{}", '{"item_id": "i1", "item_id": "i2"}',
                     "\x00", "{'a': 1}", "   ", '{"item_id": "i1", "topic": [NaN, 0, 1]}']),
)  # fmt: skip


# -- the oracle -----------------------------------------------------------------------------------
class Refuse(Exception):
    pass


def _text(v, *, item_id: bool = False):
    if v is None or isinstance(v, str):
        return v
    if item_id and isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**64:
        return str(v)
    raise Refuse(f"not text: {v!r}")


def _vector(q: str, v) -> np.ndarray | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != K[q]:
        raise Refuse("not a vector of the right length")
    try:
        normalise_answer(
            ORACLE_Q[q], {"type": "choice", "probabilities": dict(zip(option_ids(ORACLE_Q[q]), v))}, strict=True
        )
    except AnswerError as exc:
        raise Refuse(str(exc)) from None
    return np.asarray([float(x) for x in v])


def _figure(v, *, integer: bool = False) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise Refuse(f"not a number: {v!r}")
    if integer and not -(2**63) <= v < 2**63:  # a BIGINT column; a large integer is just a number elsewhere
        raise Refuse("integer out of range")
    if not math.isfinite(float(v)) or v < 0:
        raise Refuse(f"figure {v!r}")


def expected(text: str, layout: str) -> dict[tuple[str, str], np.ndarray | None]:
    """{(item, question): vector or None (a failure)} the import must store, or Refuse."""
    rows = []
    for line in text.splitlines():
        if not line.strip(" \t\r\n"):
            continue
        try:
            rec = loads_strict(line)
        except StrictJSONError:
            raise Refuse("not strict JSON") from None
        if not isinstance(rec, dict):
            raise Refuse("not an object")
        rows.append(rec)
    if not rows:
        raise Refuse("no rows")
    keys = set().union(*rows)
    out: dict = {}
    if layout == "long":
        allowed = {"item_id", "question", "probs", "failure_kind", "failure_message", "model", "latency_ms",
                   "input_tokens", "cost_usd", "cached", "run_id", "split", "label", "p_top", "margin", "entropy",
                   "provider", "option_ids", "deviation"}  # fmt: skip
        if "item_id" not in keys or not {"question", "probs"} <= keys or keys - allowed:
            raise Refuse("columns")
        for r in rows:
            item, q = _text(r.get("item_id"), item_id=True), _text(r.get("question"))
            for c in ("failure_kind", "failure_message", "model"):
                _text(r.get(c))
            _figure(r.get("latency_ms"))
            _figure(r.get("cost_usd"))
            _figure(r.get("input_tokens"), integer=True)
            if r.get("cached") is not None and not isinstance(r["cached"], bool):
                raise Refuse("cached")
            if item is None or q not in K or (item, q) in out:
                raise Refuse("key")
            vec = _vector(q, r.get("probs"))
            if vec is not None and r.get("failure_kind") is not None:
                raise Refuse("both")
            out[item, q] = vec
        for item in {i for i, _ in out}:
            if any((item, q) not in out for q in QUESTIONS):
                raise Refuse("incomplete")
    else:
        allowed = {
            "item_id",
            "split",
            *QUESTIONS,
            *(f"{q}__failure_{w}" for q in QUESTIONS for w in ("kind", "message")),
        }
        if "item_id" not in keys or any(q not in keys for q in QUESTIONS) or keys - allowed:
            raise Refuse("columns")
        for r in rows:
            item = _text(r.get("item_id"), item_id=True)
            _text(r.get("split"))
            for q in QUESTIONS:
                _text(r.get(f"{q}__failure_kind"))
                _text(r.get(f"{q}__failure_message"))
            if item is None or (item, QUESTIONS[0]) in out:
                raise Refuse("key")
            for q in QUESTIONS:
                vec = _vector(q, r.get(q))
                if vec is not None and r.get(f"{q}__failure_kind") is not None:
                    raise Refuse("both")
                out[item, q] = vec
    if any(item not in ITEMS for item, _ in out):
        raise Refuse("unknown item")
    return out


# -- the property -----------------------------------------------------------------------------------
def check(store, path, oracle) -> None:
    con, tmp, last = store
    before = last["counts"]
    try:
        want = oracle()
    except Refuse as why:
        want, reason = None, str(why)
    event("accepted" if want is not None else f"refused: {reason.split(':')[0][:30]}")
    try:
        run_id = import_answers(con, path, dataset="ds", schema=SCHEMA, name="fz")
    except WorkbenchError as exc:
        assert isinstance(exc, DataImportError), type(exc)
        assert "\n" not in str(exc), str(exc)
        assert table_counts(con) == before
        assert want is None, f"refused a valid file: {exc}"
        return
    finally:
        path.unlink()
    last["counts"] = table_counts(con)  # before the asserts: a failing example must not fail the next ones
    assert want is not None, f"accepted an invalid file ({reason})"
    got = {
        (i, q): p
        for i, q, p in con.execute("SELECT item_id, question, probs FROM answers WHERE run_id = ?", [run_id]).fetchall()
    }
    assert set(got) == set(want)
    for key, vec in want.items():
        if vec is None:
            assert got[key] is None, key
        else:
            np.testing.assert_allclose(got[key], np.clip(vec, 0, 1) / np.clip(vec, 0, 1).sum(), rtol=0, atol=1e-12)


@fuzz_settings()
@given(wide_records(), JUNK)
def test_wide_jsonl_answers(store, records, junk):
    text = jsonl(records, junk)
    path = store[1] / f"w{next(_counter)}.jsonl"
    path.write_text(text, encoding="utf-8")
    check(store, path, lambda: expected(text, "wide"))


@fuzz_settings()
@given(long_records(), JUNK)
def test_long_jsonl_answers(store, records, junk):
    text = jsonl(records, junk)
    path = store[1] / f"l{next(_counter)}.jsonl"
    path.write_text(text, encoding="utf-8")
    check(store, path, lambda: expected(text, "long"))


# -- Parquet: the column types decide -----------------------------------------------------------------
VECTOR_TYPES = {
    "list<double>": pa.list_(pa.float64()),
    "list<int64>": pa.list_(pa.int64()),
    "list<float>": pa.list_(pa.float32()),
    "large_list<double>": pa.large_list(pa.float64()),
    "fixed": None,  # fixed_size_list<double>[k]
    "list<bool>": pa.list_(pa.bool_()),
    "list<string>": pa.list_(pa.string()),
    "double": pa.float64(),
    "string": pa.string(),
}
ID_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "large_string": pa.large_string(),
}


@st.composite
def parquet_tables(draw):
    items = draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=len(ITEMS), unique=True))
    n = len(items)
    id_type = draw(st.sampled_from(["string"] * 6 + list(ID_TYPES)))
    if id_type in ("string", "large_string"):
        ids = [draw(ODD_IDS.filter(lambda v: isinstance(v, str))) if not draw(st.integers(0, 12)) else i for i in items]
        cols: dict[str, pa.Array] = {"item_id": pa.array(ids, ID_TYPES[id_type])}
    elif id_type == "int64":
        cols = {"item_id": pa.array([7] * n, pa.int64())}
    else:
        cols = {"item_id": pa.array([7.0 if id_type == "double" else True] * n, ID_TYPES[id_type])}
    for q in QUESTIONS:
        kind = draw(st.sampled_from(["list<double>"] * 8 + list(VECTOR_TYPES)))
        k = K[q]
        typ = pa.list_(pa.float64(), k) if kind == "fixed" else VECTOR_TYPES[kind]
        values = []
        for _ in range(n):
            v = draw(valid_vectors(k) | st.none())
            if v is not None and not draw(st.integers(0, 6)):
                v = draw(mutate_vector(v))
            if kind == "fixed" and isinstance(v, list) and len(v) != k:
                v = None
            values.append(v)
        try:
            arr = pa.array(values, type=typ)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            arr = pa.array([None] * n, type=typ)
        cols[q] = arr
        if not draw(st.integers(0, 3)):
            cols[f"{q}__failure_kind"] = _kinds(draw, n)
    if not draw(st.integers(0, 10)):
        cols[draw(st.sampled_from(["split", "spma", "__index_level_0__"]))] = pa.array(["x"] * n)
    return pa.table(cols)


def _kinds(draw, n: int) -> pa.Array:
    typ = draw(st.sampled_from(["string", "string", "int64", "null", "dict"]))
    vals = draw(st.lists(st.none() | st.just("timeout"), min_size=n, max_size=n))
    if typ == "int64":
        return pa.array([None if v is None else 5 for v in vals], pa.int64())
    if typ == "null":
        return pa.nulls(n)
    arr = pa.array(vals, pa.string())
    return arr.dictionary_encode() if typ == "dict" else arr


def expected_parquet(t: pa.Table) -> dict:
    names = set(t.column_names) - {"__index_level_0__"}
    allowed = {"item_id", "split", *QUESTIONS, *(f"{q}__failure_{w}" for q in QUESTIONS for w in ("kind", "message"))}
    if "item_id" not in names or any(q not in names for q in QUESTIONS) or names - allowed:
        raise Refuse("columns")
    id_type = t.schema.field("item_id").type
    if not (pa.types.is_string(id_type) or pa.types.is_large_string(id_type) or pa.types.is_integer(id_type)):
        raise Refuse("id type")
    for q in QUESTIONS:
        typ = t.schema.field(q).type
        if not (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)) or not (
            pa.types.is_floating(typ.value_type) or pa.types.is_integer(typ.value_type)
        ):
            raise Refuse("vector type")
        kt = t.schema.field(f"{q}__failure_kind").type if f"{q}__failure_kind" in names else pa.string()
        if not (
            pa.types.is_string(kt)
            or pa.types.is_null(kt)
            or (pa.types.is_dictionary(kt) and pa.types.is_string(kt.value_type))
        ):
            raise Refuse("kind type")
    if t.num_rows == 0:
        raise Refuse("no rows")
    out: dict = {}
    rows = t.to_pylist()
    for r in rows:
        item = r["item_id"]
        if item is None:
            raise Refuse("empty id")
        item = str(item)
        if (item, QUESTIONS[0]) in out:
            raise Refuse("duplicate")
        for q in QUESTIONS:
            vec = _vector(q, r[q])
            if vec is not None and r.get(f"{q}__failure_kind") is not None:
                raise Refuse("both")
            out[item, q] = vec
    if any(item not in ITEMS for item, _ in out):
        raise Refuse("unknown item")
    return out


@fuzz_settings()
@given(parquet_tables())
def test_wide_parquet_answers(store, table):
    path = store[1] / f"p{next(_counter)}.parquet"
    pq.write_table(table, path)
    check(store, path, lambda: expected_parquet(table))
