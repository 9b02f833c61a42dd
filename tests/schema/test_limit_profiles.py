"""validate_limits against every provider family's documented limits.

The expected outcomes are derived from the limits as written in ../shared/docs/providers.md
(table DOC_LIMITS below, typed in from the document), not from ``PROFILES``, so a wrong number in
the code shows up as a failing case.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.errors import SchemaError
from workbench.schema import PROFILES, DecisionSchema, validate_limits

# profile -> (max questions, (min, max) options, (min, max) levels, restricted question ids,
#             max options in total); None = no limit. providers.md §1 table, §3 per vendor.
DOC_LIMITS = {
    "cloudflare-clef": (64, (2, 255), (2, 10), True, None),  # §3.1 limits table, measured 65/256/11 refused
    "typesafe-jev": (None, (2, 255), (2, 10), True, None),  # "Choice ≤255 options; score ≥2 and ≤10 levels"
    "perplexity": (128, (1, 255), (1, 10), True, None),  # "1–128", "1–255 / 1–10"
    "laya": (64, (2, 100), (1, 32), True, 512),  # 64 questions, 100 options, 32 levels, 512 total
    "subq": (128, (2, 255), (2, 10), True, None),  # "up to 128 questions; 2–255 options; 2–10 levels"
    "openai": (200, (2, 255), (2, 10), True, None),  # 255 choices; OpenRouter lists up to 200 questions
    "self-hosted": (None, (1, None), (1, None), False, None),  # no cap in the reference server code
    "default": (64, (2, 100), (2, 10), True, 512),  # strictest common profile
}


def _choice(n_options: int) -> dict:
    return {"type": "choice", "instructions": "Pick one.", "criteria": {f"o{i}": None for i in range(n_options)}}


def _score(n_levels: int) -> dict:
    return {"type": "score", "instructions": "Rate it.", "criteria": [f"level {i}" for i in range(n_levels)]}


def _schema(questions: dict) -> DecisionSchema:
    return DecisionSchema.from_dict({"questions": questions})


CASES = {
    "65_questions": _schema({f"q{i}": _choice(2) for i in range(65)}),
    "id_with_space": _schema({"my question": _choice(3)}),
    "256_options": _schema({"intent": _choice(256)}),
    "11_levels": _schema({"urgency": _score(11)}),
    "1_option": _schema({"intent": _choice(1)}),
}


def _doc_refuses(case: str, profile: str) -> bool:
    max_q, (min_o, max_o), (min_l, max_l), ids, _ = DOC_LIMITS[profile]
    return {
        "65_questions": max_q is not None and 65 > max_q,
        "id_with_space": ids,
        "256_options": max_o is not None and 256 > max_o,
        "11_levels": max_l is not None and 11 > max_l,
        "1_option": 1 < min_o,
    }[case]


def test_every_profile_has_documented_limits():
    assert set(DOC_LIMITS) == set(PROFILES)


@pytest.mark.parametrize("profile", sorted(DOC_LIMITS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_schema_refused_exactly_where_the_docs_say(case, profile):
    violations = validate_limits(CASES[case], profile)
    assert bool(violations) == _doc_refuses(case, profile)
    if violations:
        assert len(violations) == 1
        v = violations[0]
        expected_qid = None if case == "65_questions" else next(iter(CASES[case].questions))
        assert v.question_id == expected_qid
        text = str(v)
        assert profile in text  # the limit names the profile it comes from
        if expected_qid:
            assert repr(expected_qid) in text  # ... and the offending question


@pytest.mark.parametrize("profile", sorted(DOC_LIMITS))
def test_the_documented_upper_bounds_themselves_are_accepted(profile):
    max_q, (min_o, max_o), (min_l, max_l), _, max_total = DOC_LIMITS[profile]
    n_q = max_q if max_q is not None else 300
    per_q = 2 if max_total is None else min(2, max_total // n_q)
    assert validate_limits(_schema({f"q{i}": _choice(per_q) for i in range(n_q)}), profile) == []
    assert validate_limits(_schema({"a": _choice(max_o if max_o else 1000)}), profile) == []
    assert validate_limits(_schema({"a": _choice(min_o)}), profile) == []
    assert validate_limits(_schema({"a": _score(max_l if max_l else 50)}), profile) == []
    assert validate_limits(_schema({"a": _score(min_l)}), profile) == []


def test_clef_question_id_length_limit_is_100_characters():
    assert validate_limits(_schema({"x" * 100: _choice(2)}), "cloudflare-clef") == []
    [v] = validate_limits(_schema({"x" * 101: _choice(2)}), "cloudflare-clef")
    assert v.field == "id"


@pytest.mark.parametrize("profile", ["laya", "default"])
def test_total_option_budget(profile):
    over = _schema({f"q{i}": _choice(100) for i in range(6)})  # 600 options in total
    violations = validate_limits(over, profile)
    assert [v.question_id for v in violations] == [None]
    assert "600" in str(violations[0]) and "512" in str(violations[0])
    assert validate_limits(over, "cloudflare-clef") == []


def test_every_violation_is_reported_not_only_the_first():
    schema = _schema({"bad id": _choice(1), "levels": _score(11), "many": _choice(300)})
    fields = sorted((v.question_id, v.field) for v in validate_limits(schema, "cloudflare-clef"))
    assert fields == [("bad id", "criteria"), ("bad id", "id"), ("levels", "criteria"), ("many", "criteria")]


def test_unknown_profile_is_a_schema_error():
    with pytest.raises(SchemaError, match="unknown limit profile"):
        validate_limits(CASES["1_option"], "no-such-provider")


_question = st.one_of(
    st.integers(1, 130).map(_choice),
    st.integers(1, 12).map(_score),
    st.just({"type": "noul", "instructions": "Yes?"}),
)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9 _]{0,6}", fullmatch=True), _question, min_size=1, max_size=12))
def test_a_schema_valid_under_default_is_valid_under_every_profile(questions):
    schema = _schema(questions)
    if validate_limits(schema, "default") == []:
        assert all(validate_limits(schema, p) == [] for p in PROFILES)
