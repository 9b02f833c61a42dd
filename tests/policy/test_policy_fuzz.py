"""Fuzz the two parsers of the runtime that face the outside world (issue 14): policy loading and ``decide``.

Properties:
- loading any bytes, or a workbench-exported policy document mutated anywhere (with or without the
  content hash recomputed), ends in a ``Policy`` or one :class:`PolicyError` with a one-line message —
  never another exception;
- ``Policy.decide`` on any JSON-like response (as data or as JSON text) never raises, and never
  accepts an answer that is not a complete, valid probability vector of the question from the model
  the policy is bound to.

Budget: ``tests.fuzz.fuzz_settings`` (``WORKBENCH_FUZZ_EXAMPLES``, derandomised so CI is reproducible;
``bench/fuzz_files.py`` runs 2,000 each with random seeds).
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import fuzz_settings
from tests.policy import runtime_fixture as fx
from workbench.errors import PolicyError
from workbench.policy import Policy
from workbench.policy.model import content_hash

FUZZ = fuzz_settings()
TEXT = (fx.DATA / fx.POLICY_NAME).read_bytes()
DOC = json.loads(TEXT)
POLICY = Policy.from_dict(copy.deepcopy(DOC))
OPTIONS = list(POLICY.model.questions["intent"].options)
MODEL = POLICY.model.validity.models[0]
SUM_TOLERANCE = 0.02

huge_ints = st.integers(min_value=10**300, max_value=10**420) | st.integers(max_value=-(10**300), min_value=-(10**420))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    huge_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def _expect_load(fn) -> None:
    """``fn()`` returns a Policy or raises one PolicyError with a one-line message; anything else fails the test."""
    try:
        assert isinstance(fn(), Policy)
    except PolicyError as exc:
        assert "\n" not in str(exc) and str(exc).strip()


# -- policy loading ---------------------------------------------------------------------------------
@FUZZ
@given(st.binary(max_size=400) | st.text(max_size=200).map(str.encode))
def test_load_arbitrary_bytes(data):
    _expect_load(lambda: Policy.from_text(data, source="fuzz"))


def _paths(obj, prefix=()):
    """Every path in a JSON document (to the root, dicts and lists included)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(DOC) if p]


@st.composite
def mutated_documents(draw):
    doc = copy.deepcopy(DOC)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            how = draw(st.sampled_from(["replace", "delete", "add", "reverse"]))
            last = path[-1]
            if how == "replace":
                parent[last] = draw(json_like)
            elif how == "delete":
                del parent[last]
            elif how == "add" and isinstance(parent, dict):
                parent[draw(st.text(max_size=8))] = draw(json_like)
            elif how == "reverse" and isinstance(parent[last], (list, dict)):
                v = parent[last]
                parent[last] = v[::-1] if isinstance(v, list) else dict(reversed(list(v.items())))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed this path
    if draw(st.booleans()):  # an editor who recomputes the hash reaches the deeper checks
        try:
            doc["content_hash"] = content_hash(doc)
        except (TypeError, ValueError, AttributeError):
            pass
    return doc


@FUZZ
@given(mutated_documents(), st.booleans())
def test_load_mutated_policy_documents(doc, as_text):
    if as_text:
        try:
            text = json.dumps(doc)  # NaN/Infinity allowed here: the loader must refuse them
        except (TypeError, ValueError):
            return
        _expect_load(lambda: Policy.from_text(text, source="fuzz"))
    else:
        _expect_load(lambda: Policy.from_dict(doc, source="fuzz"))


@pytest.mark.parametrize("key", ["\n", "", "a\x85b"])
def test_an_unprintable_extra_key_is_named_on_one_line(key):
    """Found by the fuzzer: an added key "\n" made the 'Extra inputs' message two lines long."""
    doc = json.loads(TEXT)
    doc["questions"]["intent"]["rule"][key] = 1
    doc["content_hash"] = content_hash(doc)
    with pytest.raises(PolicyError) as info:
        Policy.from_dict(doc, source="edited")
    assert "\n" not in str(info.value) and repr(key) in str(info.value)


@FUZZ
@given(st.integers(0, len(TEXT) - 1), st.binary(min_size=0, max_size=3), st.integers(0, 3))
def test_load_byte_edits_of_a_real_policy(pos, insert, delete):
    data = TEXT[:pos] + insert + TEXT[pos + delete :]
    _expect_load(lambda: Policy.from_text(data, source="fuzz"))


@FUZZ
@given(st.integers(0, len(TEXT) - 1), st.binary(min_size=0, max_size=3), st.integers(0, 3))
def test_load_policy_files(tmp_path_factory, pos, insert, delete):
    """The file path (``Policy.load``, what ``workbench monitor --policy`` and services call): same outcome."""
    path = tmp_path_factory.getbasetemp() / "policy-fuzz.json"
    path.write_bytes(TEXT[:pos] + insert + TEXT[pos + delete :])
    _expect_load(lambda: Policy.load(path))


def test_duplicate_keys_anywhere_in_a_policy_file_are_refused():
    """Every object of the file, given one key twice (same value), is refused — duplicates are never resolved."""
    text = TEXT.decode()
    n = 0
    for line in text.splitlines():
        stripped = line.strip().rstrip(",")
        if stripped.startswith('"') and '": ' in stripped and not stripped.endswith(("{", "[")):
            dup = text.replace(line, line.rstrip(",") + ", " + stripped + ("," if line.endswith(",") else ""), 1)
            try:
                Policy.from_text(dup)
            except PolicyError as exc:
                assert "duplicate key" in str(exc)
                n += 1
            else:
                raise AssertionError(f"accepted a duplicate key: {stripped}")
    assert n > 20


# -- decide -----------------------------------------------------------------------------------------
prob_values = st.one_of(
    st.floats(0, 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-2, 2),
    huge_ints,
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)


@st.composite
def near_valid_maps(draw):
    """Complete, confident probability maps (often accepted), sometimes rounded or with one option dropped."""
    top = draw(st.integers(0, len(OPTIONS) - 1))
    p = draw(st.floats(0.5, 1.0))
    rest = (1 - p) / (len(OPTIONS) - 1)
    m = {o: (p if i == top else rest) for i, o in enumerate(OPTIONS)}
    if draw(st.booleans()):
        m = {o: round(v, 4) for o, v in m.items()}
    if draw(st.integers(0, 4)) == 0:
        m.pop(draw(st.sampled_from(OPTIONS)))
    return m


intent_answers = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["choice", "choice", "choice", "noul", "refusal", "score"]) | scalars,
        "probabilities": near_valid_maps()
        | st.dictionaries(st.sampled_from([*OPTIONS, "country_support", ""]), prob_values, max_size=7)
        | json_like,
    },
    optional={
        "choice": st.sampled_from(OPTIONS) | scalars,
        "error": json_like,
        "confidence": scalars,
    },
)
urgent_answers = st.fixed_dictionaries(
    {"type": st.sampled_from(["noul", "noul", "choice", "refusal"]) | scalars, "noul": prob_values},
    optional={"error": json_like, "confidence": scalars},
)
responses = st.fixed_dictionaries(
    {
        "answers": st.fixed_dictionaries(
            {}, optional={"intent": intent_answers | json_like, "urgent": urgent_answers | json_like}
        )
        | st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["intent", "urgent"])}, optional={"type": scalars}),
            max_size=3,
        )
        | json_like,
    },
    optional={"model": st.just(MODEL) | scalars, "error": json_like, "usage": json_like},
)


def _finite_prob(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        f = float(v)
    except OverflowError:
        return False
    return math.isfinite(f) and -1e-9 <= f <= 1 + 1e-9


def _may_accept_response(r) -> bool:
    return isinstance(r, dict) and r.get("error", None) is None and r.get("model") == MODEL


def _complete_intent(ans) -> list[float] | None:
    """The answer's probability vector when it is a complete, valid, self-consistent choice answer."""
    if not isinstance(ans, dict) or ans.get("error", None) is not None or ans.get("type", "choice") != "choice":
        return None
    p = ans.get("probabilities")
    if not isinstance(p, dict) or set(p) != set(OPTIONS) or not all(_finite_prob(v) for v in p.values()):
        return None
    vec = [float(p[o]) for o in OPTIONS]
    if abs(sum(vec) - 1) > SUM_TOLERANCE:
        return None
    if "choice" in ans and (ans["choice"] not in OPTIONS or vec[OPTIONS.index(ans["choice"])] < max(vec) - 1e-6):
        return None
    return vec


def _check(response, decisions) -> None:
    assert set(decisions) == {"intent", "urgent"}
    for d in decisions.values():
        assert d.action in ("accept", "review") and isinstance(d.reason, str) and d.reason
        assert "internal error" not in d.reason, d.reason  # every bad input is anticipated, not caught blindly
        assert (d.option is not None) == d.accepted
    if not any(d.accepted for d in decisions.values()):
        return
    assert _may_accept_response(response), (response, decisions)
    answers = response["answers"]
    if decisions["intent"].accepted:
        vec = _complete_intent(answers.get("intent") if isinstance(answers, dict) else None)
        assert vec is not None, (response, decisions["intent"])
        assert vec[OPTIONS.index(decisions["intent"].option)] >= max(vec) - 1e-6
    if decisions["urgent"].accepted:
        ans = answers.get("urgent") if isinstance(answers, dict) else None
        assert isinstance(ans, dict) and ans.get("error", None) is None and ans.get("type", "noul") == "noul"
        assert _finite_prob(ans.get("noul")), (response, decisions["urgent"])


@FUZZ
@given(responses | json_like)
def test_decide_never_raises_and_accepts_only_complete_vectors(response):
    _check(response, POLICY.decide(response))


@FUZZ
@given(responses, st.booleans())
def test_decide_on_response_text(response, duplicate):
    if duplicate:  # otherwise acceptable, so the duplicate alone must be what refuses it
        response = {**{k: v for k, v in response.items() if k != "error"}, "model": MODEL}
    try:
        text = json.dumps(response)
    except (TypeError, ValueError):
        return
    answers = response.get("answers")
    if duplicate and isinstance(answers, dict) and answers and next(iter(answers)) in ("intent", "urgent"):
        # name the first answer twice, the second time with a confident, complete answer: never accepted
        qid = next(iter(answers))
        forged = {"type": "noul", "noul": 0.999} if qid == "urgent" else {"probabilities": near_valid(0)}
        text = text.replace('"answers": {', '"answers": {' + json.dumps(qid) + ": " + json.dumps(forged) + ", ", 1)
        d = POLICY.decide(text)
        assert not d[qid].accepted
        assert "more than once" in d[qid].reason or "is not a JSON number" in d[qid].reason  # NaN/Infinity text
    _check(json.loads(text), POLICY.decide(text))


def near_valid(top: int) -> dict:
    return {o: (0.96 if i == top else 0.01) for i, o in enumerate(OPTIONS)}


def test_batch_with_every_kind_of_bad_response_keeps_good_ones():
    good = {"model": MODEL, "answers": {"intent": {"probabilities": near_valid(2)}, "urgent": {"noul": 0.999}}}
    bad = [None, 1, "x", [], {"error": {}}, {"answers": {"intent": {"probabilities": {"refund": 10**400}}}}]
    out = POLICY.decide_many([good, *bad, good])
    assert out[0]["intent"].accepted and out[-1]["intent"].accepted
    assert not any(d.accepted for row in out[1:-1] for d in row.values())
