"""Fuzz: schema text from the outside world ends in a DecisionSchema or one SchemaError line (issue 14).

Three generators: arbitrary text, JSON-like documents dumped as YAML or JSON (often in the System
One shape), and YAML assembled from the syntax that has broken parsers before (anchors, aliases,
merge keys, tags, flow/block nesting, dates, NaN, huge numbers); and whole files through ``load_schema``
(byte edits of a real schema file, other encodings, binary). A JSON schema that strict JSON refuses (NaN,
Infinity, a duplicate key) is never accepted (issue 25). Budget: ``tests.fuzz.fuzz_settings``
(``WORKBENCH_FUZZ_EXAMPLES``; ``bench/fuzz_files.py`` runs 2,000 each).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st
from workbench_runtime.jsonio import StrictJSONError, loads_strict

from tests.fuzz import fuzz_settings
from workbench.errors import SchemaError, WorkbenchError
from workbench.schema import canonical_json
from workbench.schema.questions import load_schema, loads_schema

FUZZ = fuzz_settings()

keys = st.sampled_from(["questions", "name", "description", "type", "instructions", "criteria", "q", "a", "b", "x"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["noul", "choice", "score", "", " ", "yes", "true", "2024-01-01"]),
    st.text(max_size=6),
)
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=6,
)
question = st.fixed_dictionaries(
    {"type": st.sampled_from(["noul", "choice", "score", "other"]), "instructions": json_like},
    optional={"criteria": json_like},
)
words = st.text(min_size=1, max_size=8)
well_formed_question = st.one_of(
    st.fixed_dictionaries({"type": st.just("noul"), "instructions": words}),
    st.fixed_dictionaries(
        {
            "type": st.just("choice"),
            "instructions": words,
            "criteria": st.dictionaries(words, st.one_of(st.none(), words), min_size=1, max_size=4),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("score"),
            "instructions": st.one_of(words, json_like),
            "criteria": st.lists(words, min_size=1, max_size=4),
        }
    ),
)
schema_like = st.fixed_dictionaries(
    {"questions": st.dictionaries(st.one_of(keys, words), st.one_of(well_formed_question, question), max_size=3)},
    optional={"name": scalars, "description": scalars, "extra": scalars},
)
FRAGMENTS = [
    "questions:", "\n", "\n  ", "\n    ", "  ", "q:", "a:", " type: noul", " type: choice", " type: score",
    " instructions:", " criteria:", " &a", " *a", " &b", " *b", "[", "]", "{", "}", ", ", "<<: ", "!!binary ",
    "!!set ", "!!str ", "!!int ", "!!timestamp ", "!!python/object:os.system ", "- ", "'x'", '"y\\u0000"', "2024-01-01",
    ".nan", ".inf", "~", "? ", ": ", "|\n", ">\n", "# c", "\t", "1e400", "0x1F", "9" * 5000, "---\n", "...\n",
    "%YAML 1.1\n", "\ufeff", "\x00", "é", "\u200b",
]  # fmt: skip
yaml_soup = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


def check(text: str, fmt: str) -> None:
    """The property: a schema whose canonical form and hash work, or one SchemaError/WorkbenchError line."""
    try:
        schema = loads_schema(text, source="fuzz", fmt=fmt)
    except WorkbenchError as exc:
        assert isinstance(exc, SchemaError), type(exc)
        assert "\n" not in str(exc) and str(exc).startswith("fuzz"), str(exc)
        return
    if fmt == "json":  # no lenient accept: strict JSON (no NaN/Infinity, no duplicate key) or refused
        try:
            loads_strict(text)
        except StrictJSONError as exc:
            raise AssertionError(f"accepted a JSON schema strict JSON refuses: {exc}") from None
    json.loads(canonical_json(schema))  # what is hashed and sent is valid JSON
    assert len(schema.hash) == 64
    assert schema.to_wire() and all(q.type in ("noul", "choice", "score") for q in schema.questions.values())


@FUZZ
@given(st.text(max_size=200), st.sampled_from(["yaml", "json"]))
def test_arbitrary_text(text: str, fmt: str):
    check(text, fmt)


@FUZZ
@given(st.one_of(schema_like, json_like), st.sampled_from(["yaml", "json"]), st.booleans())
def test_json_like_documents(doc, fmt: str, flow: bool):
    if fmt == "json":
        text = json.dumps(doc, allow_nan=True)
    else:
        text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True, sort_keys=False)
    check(text, fmt)


@FUZZ
@given(yaml_soup)
def test_yaml_syntax_soup(text: str):
    check(text, "yaml")
    check(text, "json")


# -- whole files ----------------------------------------------------------------------------------------
SCHEMA_FILE = (Path(__file__).resolve().parents[2] / "experiments" / "schemas" / "banking77.yaml").read_bytes()
_files = itertools.count()


@st.composite
def schema_file_bytes(draw) -> tuple[bytes, str]:
    how = draw(st.sampled_from(["edit", "edit", "encoding", "binary", "json"]))
    suffix = ".yaml"
    if how == "binary":
        data = draw(st.binary(max_size=200))
    elif how == "encoding":
        text = draw(
            st.sampled_from(
                [SCHEMA_FILE[:400].decode("utf-8", "ignore"), "questions: {q: {type: noul, instructions: x}}"]
            )
        )
        data = text.encode(draw(st.sampled_from(["utf-16", "utf-8-sig", "utf-32", "latin-1", "utf-8"])), "replace")
    elif how == "json":
        suffix = ".json"
        doc = draw(schema_like)
        data = json.dumps(doc, allow_nan=True).encode()
        if draw(st.booleans()):
            data = data.replace(b'"questions"', b'"questions": {}, "questions"', 1)  # a duplicate key
    else:
        data = SCHEMA_FILE
        for _ in range(draw(st.integers(1, 3))):
            pos = draw(st.integers(0, len(data)))
            data = (
                data[:pos]
                + draw(st.binary(max_size=3) | st.sampled_from([b"\n", b": ", b"- ", b"&a ", b"*a"]))
                + data[pos + draw(st.integers(0, 3)) :]
            )
    return data, suffix


@FUZZ
@given(schema_file_bytes())
def test_schema_files(tmp_path_factory, data_suffix):
    data, suffix = data_suffix
    path = tmp_path_factory.getbasetemp() / f"schema{next(_files)}{suffix}"
    path.write_bytes(data)
    try:
        schema = load_schema(path)
    except WorkbenchError as exc:
        assert isinstance(exc, SchemaError), type(exc)
        assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)
        return
    finally:
        path.unlink()
    if suffix == ".json":
        loads_strict(data.decode("utf-8"))  # accepted JSON is strict JSON
    json.loads(canonical_json(schema))
    assert schema.to_wire() and all(q.type in ("noul", "choice", "score") for q in schema.questions.values())
