"""Fuzz: schema text from the outside world ends in a DecisionSchema or one SchemaError line (issue 14).

Three generators: arbitrary text, JSON-like documents dumped as YAML or JSON (often in the System
One shape), and YAML assembled from the syntax that has broken parsers before (anchors, aliases,
merge keys, tags, flow/block nesting, dates, NaN, huge numbers). Each runs 2,000 examples.
"""

from __future__ import annotations

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.errors import SchemaError, WorkbenchError
from workbench.schema import canonical_json
from workbench.schema.questions import loads_schema

FUZZ = settings(
    max_examples=2000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

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
