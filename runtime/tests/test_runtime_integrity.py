"""Issue 14 items 1-3: a policy no one can quietly change, and a decide that always fails closed.

Uses only the runtime, on the workbench-exported policy in ``data/``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from workbench_runtime import Policy, PolicyError
from workbench_runtime.model import content_hash

DATA = Path(__file__).with_name("data")
OPTIONS = ["card_arrival", "lost_card", "refund", "top_up", "other"]
MODEL = "sim-model-1.0"


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads((DATA / "workbench-policy.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def policy(doc) -> Policy:
    return Policy.from_dict(copy.deepcopy(doc))


def rehashed(doc: dict) -> dict:
    """What an editor does: change the file and recompute the content hash."""
    doc = {k: v for k, v in doc.items() if k != "signature"}
    doc["content_hash"] = content_hash(doc)
    return doc


def sure(option: str = "card_arrival", p: float = 0.99) -> dict:
    """A confident, complete choice answer for ``option``."""
    rest = (1.0 - p) / (len(OPTIONS) - 1)
    return {
        "type": "choice",
        "choice": option,
        "probabilities": {o: (p if o == option else rest) for o in OPTIONS},
    }


def response(intent=None, urgent=None, **top) -> dict:
    return {
        "model": MODEL,
        "answers": {
            "intent": sure() if intent is None else intent,
            "urgent": {"type": "noul", "noul": 0.99} if urgent is None else urgent,
        },
        **top,
    }


# -- item 1: option order is pinned by the embedded schema hash ----------------------------------
def test_reversed_options_with_recomputed_hash_are_refused(doc):
    edited = copy.deepcopy(doc)
    edited["questions"]["intent"]["options"].reverse()
    edited = rehashed(edited)
    with pytest.raises(PolicyError, match="options differ from the embedded decision schema"):
        Policy.from_dict(edited)


def test_options_renamed_or_dropped_are_refused(doc):
    for change in (lambda o: o.__setitem__(0, "country_support"), lambda o: o.pop()):
        edited = copy.deepcopy(doc)
        change(edited["questions"]["intent"]["options"])
        with pytest.raises(PolicyError, match="options differ"):
            Policy.from_dict(rehashed(edited))


def test_reordered_schema_criteria_break_the_schema_hash(doc):
    edited = copy.deepcopy(doc)
    crit = edited["decision_schema"]["questions"]["intent"]["criteria"]
    edited["decision_schema"]["questions"]["intent"]["criteria"] = dict(reversed(list(crit.items())))
    edited["questions"]["intent"]["options"].reverse()  # consistent with the reordered schema...
    with pytest.raises(PolicyError, match="does not match its hash"):  # ...but not with its hash
        Policy.from_dict(rehashed(edited))


def test_duplicate_keys_in_a_policy_file_are_refused(tmp_path):
    text = (DATA / "workbench-policy.json").read_text(encoding="utf-8")
    dup = text.replace('"policy_version": "1.0.0",', '"policy_version": "1.0.0", "policy_version": "9.0.0",', 1)
    assert dup != text
    p = tmp_path / "dup.json"
    p.write_text(dup, encoding="utf-8")
    with pytest.raises(PolicyError, match="duplicate key 'policy_version'"):
        Policy.load(p)


# -- item 2: a 401-digit integer never raises ----------------------------------------------------
def test_huge_integer_probability_goes_to_review_without_breaking_the_batch(policy):
    huge = response(intent={"type": "choice", "probabilities": {**sure()["probabilities"], "other": 10**400}})
    noul = response(urgent={"type": "noul", "noul": 10**400})
    good = response()
    out = policy.decide_many([good, huge, noul, good])
    assert out[0]["intent"].accepted and out[3]["intent"].accepted
    assert out[1]["intent"].action == "review" and "outside [0, 1]" in out[1]["intent"].reason
    assert out[1]["urgent"].accepted  # the other question of that response is judged on its own
    assert out[2]["urgent"].action == "review" and "outside [0, 1]" in out[2]["urgent"].reason
    text = '{"model": "' + MODEL + '", "answers": {"urgent": {"type": "noul", "noul": ' + "9" * 5000 + "}}}"
    d = policy.decide(text)  # beyond Python's int parsing limit: the text cannot even be parsed
    assert all(x.action == "review" and "not JSON" in x.reason for x in d.values())


# -- item 3: only complete, consistent answers are accepted --------------------------------------
@pytest.mark.parametrize("err", [{}, "", False, 0, [], "boom", {"kind": "timeout"}])
def test_any_error_field_next_to_answers_is_refused(policy, err):
    d = policy.decide(response(error=err))
    assert all(x.action == "review" and "provider failure" in x.reason for x in d.values()), d


def test_null_error_means_no_error(policy):
    assert policy.decide(response(error=None))["intent"].accepted


@pytest.mark.parametrize("err", [{}, "", False, 0])
def test_falsy_error_inside_one_answer_is_refused(policy, err):
    d = policy.decide(response(intent={**sure(), "error": err}))
    assert d["intent"].action == "review" and "provider failure" in d["intent"].reason
    assert d["urgent"].accepted


def test_partial_probability_map_is_refused(policy):
    partial = {"type": "choice", "probabilities": {"card_arrival": 0.974, "lost_card": 0.026}}
    d = policy.decide(response(intent=partial))["intent"]
    assert d.action == "review" and "cover 2 of 5 options" in d.reason


def test_choice_contradicting_probabilities_is_refused(policy):
    lie = {**sure("card_arrival"), "choice": "refund"}
    d = policy.decide(response(intent=lie))["intent"]
    assert d.action == "review" and "contradicts" in d.reason and d.option is None
    unknown = {**sure("card_arrival"), "choice": "country_support"}
    assert "not an option" in policy.decide(response(intent=unknown))["intent"].reason


def test_duplicate_keys_in_response_text_are_refused(policy):
    dup_prob = (
        '{"model": "' + MODEL + '", "answers": {"intent": {"type": "choice", "probabilities": '
        '{"card_arrival": 0.01, "lost_card": 0.0025, "refund": 0.0025, "top_up": 0.0025, "other": 0.0025, '
        '"card_arrival": 0.99}}, "urgent": {"type": "noul", "noul": 0.99}}}'
    )
    d = policy.decide(dup_prob)
    assert d["intent"].action == "review" and "'card_arrival' appears more than once" in d["intent"].reason
    assert d["urgent"].accepted
    good = json.dumps(response())
    dup_answer = good[:-2] + ', "intent": ' + json.dumps(sure("refund")) + "}}"
    out = policy.decide_many([good, dup_answer, good])
    assert out[0]["intent"].accepted and out[2]["intent"].accepted
    assert out[1]["intent"].action == "review" and "more than once" in out[1]["intent"].reason
    dup_top = '{"model": "' + MODEL + '", "model": "other-model", "answers": {}}'
    assert all("appears more than once" in x.reason for x in policy.decide(dup_top).values())


def test_question_answered_twice_in_an_array_is_refused(policy):
    arr = {"model": MODEL, "answers": [{"name": "intent", **sure()}, {"name": "intent", **sure("refund")}]}
    assert "more than once" in policy.decide(arr)["intent"].reason


def test_accepted_reason_names_the_option_and_figures(policy):
    d = policy.decide(response())["intent"]
    assert d.accepted and d.option == "card_arrival"
    assert "accepted: accepted" not in d.reason
    assert d.reason.startswith("accepted 'card_arrival'") and f"{d.p_top:.4f}" in d.reason


def test_valid_rounded_answers_are_still_accepted(policy):
    """Providers round to 4 decimals: a complete map within the sum tolerance stays acceptable."""
    rounded = {
        "type": "choice",
        "choice": "top_up",
        "confidence": 0.97,
        "probabilities": {
            "card_arrival": 0.0025,
            "lost_card": 0.0025,
            "refund": 0.0025,
            "top_up": 0.9899,
            "other": 0.0025,
        },
    }
    d = policy.decide(response(intent=rounded))["intent"]
    assert d.accepted and d.option == "top_up"


# -- issue 29: the batch path decides exactly as one decide per response --------------------------
def test_decide_many_equals_a_loop_of_decide_with_refusals_mixed_in(policy):
    good = response()
    batch = [
        good,
        response(intent={**sure(), "choice": "refund"}),  # contradicts its probabilities
        response(intent={"type": "choice", "probabilities": {**sure()["probabilities"], "refund": True}}),
        response(intent={"type": "choice", "probabilities": {**sure()["probabilities"], "refund": np.float32(0.0)}}),
        response(intent={"type": "choice", "probabilities": {**sure()["probabilities"], "refund": 0}}),  # an int
        response(urgent={"type": "noul", "noul": 1.01}),
        response(urgent={"type": "noul", "noul": 1}),
        response(error="boom"),
        {**response(), "model": "other-model"},
        json.dumps(good)[:-2] + ', "intent": ' + json.dumps(sure("refund")) + "}}",  # named twice
        "not json",
        None,
        json.dumps(good),
        good,
    ]
    many = policy.decide_many(batch)
    assert many == [policy.decide(r) for r in batch]
    assert [row["intent"].accepted for row in many] == [
        True,
        False,
        False,
        False,
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    assert "contradicts" in many[1]["intent"].reason and "True is not a number" in many[2]["intent"].reason
    assert many[5]["urgent"].accepted is False and "outside [0, 1]" in many[5]["urgent"].reason
