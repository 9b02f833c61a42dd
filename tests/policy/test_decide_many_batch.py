"""``Policy.decide_many``'s batch path (issue 29 §3) takes exactly the decisions of the one-by-one path.

The batch path reads clean answers for the whole batch at once (``_read_answers``), passes plainly
clean responses without the full refusal check (``Policy._refusals``) and builds the decision objects
from lists (``decide_probs``). The reference here is the code before it: every response and answer
through ``_global_refusal`` / ``_read_answer`` and the per-row ``decide_probs`` loop (copied below).
Properties, on batches mixing clean answers, refusals and every kind of bad value (bools, ints, numpy
scalars, NaN, values just outside [0, 1], sums at the tolerance, stated choices and scores that
contradict the probabilities, duplicate keys in response text):

- ``decide_many(batch)`` equals the reference, field by field (probabilities bit for bit, reasons
  character for character), and a loop of ``decide``;
- the probability rows the batch reader stores are bit for bit those of ``normalise_answer``.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import numpy as np
import pytest
import workbench_runtime.policy as rt
from hypothesis import given
from hypothesis import strategies as st
from workbench_runtime.answers import normalise_answer

from tests.fuzz import fuzz_settings
from tests.policy.test_policy_fuzz import MODEL, OPTIONS, POLICY, json_like, near_valid_maps, responses
from tests.policy.test_policy_rules import _hand_policy

FUZZ = fuzz_settings(scale=0.5)


def _old_decide_probs(self, probs):
    """``_CompiledQuestion.decide_probs`` as it was before the batch path (the reference)."""
    from workbench_runtime.rules import top_two_fast

    cal = np.full_like(probs, np.nan, dtype=float)
    ok = np.isfinite(probs).all(axis=1)
    if ok.any():
        with np.errstate(all="ignore"):
            cal[ok] = self.calibrator.transform(probs[ok])
    ok &= np.isfinite(cal).all(axis=1)
    cal[~ok] = np.nan
    dec = self.rule.decide(cal)
    _, p1, p2 = top_two_fast(cal)
    out = []
    for i in range(len(cal)):
        opt = self.options[int(dec.option[i])] if ok[i] and dec.option[i] >= 0 else None
        why = str(dec.reason[i])
        p_top = float(p1[i]) if ok[i] else None
        margin = float(p1[i] - p2[i]) if ok[i] else None
        if not dec.accepted[i]:
            reason = f"{why} (would have been {opt!r})" if opt else why
            out.append(rt.QuestionDecision(self.qid, self.fallback, None, reason, p_top, margin))
            continue
        figures = f"p_top {p_top:.4f}, margin {margin:.4f}"
        if self.shadow:
            reason = f"shadow mode: the rule would have accepted {opt!r} ({figures})"
            out.append(rt.QuestionDecision(self.qid, self.fallback, None, reason, p_top, margin, opt))
        elif self.enabled is not None and not self.enabled[int(dec.option[i])]:
            reason = f"rollout: {opt!r} is not enabled for auto-accept; the rule would have accepted it ({figures})"
            out.append(rt.QuestionDecision(self.qid, self.fallback, None, reason, p_top, margin, opt))
        else:
            out.append(
                rt.QuestionDecision(
                    self.qid, "accept", opt, f"accepted {opt!r}: {figures} clear the rule", p_top, margin
                )
            )
    return out


def _old_refusals(self, responses, schema_hash, state_tokens):
    return [
        f"provider failure: response is not JSON ({r.why})"
        if isinstance(r, rt._Unreadable)
        else rt._guarded(self._global_refusal, r, schema_hash, None if state_tokens is None else state_tokens[i])
        for i, r in enumerate(responses)
    ]


@contextmanager
def one_by_one():
    """The reference: no batch reader, the full refusal check for every response, the per-row decision loop."""
    mp = pytest.MonkeyPatch()
    mp.setattr(rt, "_read_answers", lambda cq, responses, rows, probs: list(rows))
    mp.setattr(rt.Policy, "_refusals", _old_refusals)
    mp.setattr(rt._CompiledQuestion, "decide_probs", _old_decide_probs)
    try:
        yield
    finally:
        mp.undo()


def _fields(batch):
    """Every field of every decision; floats as their bits, so -0.0 and 0.0 or one ulp differ."""
    return [
        {q: tuple(v.hex() if isinstance(v, float) else v for v in d.to_dict().values()) for q, d in row.items()}
        for row in batch
    ]


def _same_as_reference(policy, batch, **kw):
    got = policy.decide_many(batch, **kw)
    with one_by_one():
        ref = policy.decide_many(batch, **kw)
    assert _fields(got) == _fields(ref)
    assert got == ref
    singles = [policy.decide(r, schema_hash=kw.get("schema_hash")) for r in batch] if "state_tokens" not in kw else None
    if singles is not None:
        assert _fields(singles) == _fields(got)
    return got


# -- values that stress the batch reader ---------------------------------------------------------
edge_values = st.one_of(
    st.floats(0, 1),
    st.sampled_from([0.0, 1.0, -0.0, -1e-9, -1e-10, -2e-9, 1 + 1e-9, 1 + 1e-10, 1 + 2e-9, 5e-324, 0.5]),
    st.sampled_from([0, 1, True, False, 2, -1]),
    st.floats(0, 1).map(np.float64),
    st.floats(0, 1, width=32).map(np.float32),
    st.sampled_from([float("nan"), float("inf"), None, "0.5"]),
)


@st.composite
def probability_maps(draw, options, *, exotic=True):
    """A full map near a probability vector (rounded or not), with sometimes one edited value or key."""
    k = len(options)
    w = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k))) + 1e-3
    p = w / w.sum()
    digits = draw(st.sampled_from([None, 2, 4, 6]))
    if digits is not None:
        p = np.round(p, digits)
    scale = draw(st.sampled_from([1.0, 1.0, 1.0 + 1e-12, 0.98, 1.0199999, 1.0200001, 0.97]))
    m = dict(zip(options, (p * scale).tolist()))
    if exotic and draw(st.integers(0, 3)) == 0:
        m[draw(st.sampled_from(options))] = draw(edge_values)
    if exotic and draw(st.integers(0, 9)) == 0:
        m = dict(reversed(m.items()))  # another key order: same answer
    if exotic and draw(st.integers(0, 14)) == 0:
        m.pop(draw(st.sampled_from(options)))
    if exotic and draw(st.integers(0, 14)) == 0:
        m["not_an_option"] = 0.0
    return m


@st.composite
def intent_answer(draw):
    probs = draw(probability_maps(OPTIONS) | near_valid_maps())
    ans: dict = {"probabilities": probs}
    if draw(st.booleans()):
        ans["type"] = draw(st.sampled_from(["choice", "choice", "refusal", "noul"]))
    if draw(st.booleans()) and probs:
        vals = {o: v for o, v in probs.items() if isinstance(v, float)}
        top = max(vals, key=vals.get) if vals else OPTIONS[0]
        ans["choice"] = draw(st.sampled_from([top, top, top, OPTIONS[0], "nope"]) | st.sampled_from([None, 3]))
    if draw(st.integers(0, 9)) == 0:
        ans["error"] = draw(st.sampled_from([None, "timeout", {"kind": "x"}]))
    return ans


@st.composite
def fixture_responses(draw):
    answers: dict = {}
    if draw(st.integers(0, 9)):
        answers["intent"] = draw(intent_answer())
    if draw(st.integers(0, 9)):
        answers["urgent"] = {"noul": draw(edge_values)}
        if draw(st.booleans()):
            answers["urgent"]["type"] = draw(st.sampled_from(["noul", "noul", "choice", None]))
    r: dict = {"model": MODEL, "answers": answers}
    if draw(st.integers(0, 9)) == 0:
        r["model"] = draw(st.sampled_from(["other-model", None, 3]))
    if draw(st.integers(0, 14)) == 0:
        r["error"] = draw(st.sampled_from([None, "boom", {"type": "rate_limit"}]))
    return r


def _as_text(r, duplicate: bool):
    try:
        text = json.dumps(r, allow_nan=True, default=float)
    except (TypeError, ValueError):
        return r
    if duplicate and '"answers": {"intent": ' in text:  # the answer named twice (the batch must refuse it)
        text = text.replace('"answers": {', '"answers": {"intent": {"probabilities": {}}, ', 1)
    return text


batches = st.lists(
    st.tuples(fixture_responses() | responses | json_like, st.sampled_from(["data", "data", "data", "text", "dup"])),
    min_size=1,
    max_size=8,
).map(lambda rs: [r if how == "data" else _as_text(r, how == "dup") for r, how in rs])


@FUZZ
@given(batches)
def test_decide_many_equals_the_one_by_one_path(batch):
    _same_as_reference(POLICY, batch)


@FUZZ
@given(batches, st.sampled_from([None, "f" * 64]), st.lists(st.sampled_from([None, 1, 10**9, True, "x"]), min_size=8))
def test_decide_many_with_hash_and_state_sizes_equals_the_one_by_one_path(batch, schema_hash, tokens):
    _same_as_reference(POLICY, batch, schema_hash=schema_hash, state_tokens=tokens[: len(batch)])


# -- score, noul and choice questions with abstain options, per-class rules and a rollout ---------
LEVELS = ["0", "1", "2", "3"]
TEAMS = ["a", "b", "other"]
HAND = _hand_policy(
    {
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["l0", "l1", "l2", "l3"]},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"a": None, "b": None, "other": None}},
        "spam": {"type": "noul", "instructions": "Spam?"},
    },
    {
        "urgency": (LEVELS, {"kind": "score", "level": "expected", "tau": 0.4, "margin": 0.0}),
        "team": (
            TEAMS,
            {
                "kind": "top_margin",
                "tau": 0.5,
                "margin": 0.0,
                "per_class": {"b": {"tau": 0.9, "margin": 0.5}},
                "abstain_options": ["other"],
            },
        ),
        "spam": (["yes", "no"], {"kind": "noul_two_sided", "tau_yes": 0.8, "tau_no": 0.3}),
    },
)


@st.composite
def hand_responses(draw):
    urgency = draw(probability_maps(LEVELS))
    ans: dict = {"type": "score", "probabilities": urgency}
    vec = [v for v in urgency.values() if isinstance(v, float)]
    if draw(st.booleans()) and len(vec) == len(LEVELS) and np.isfinite(vec).all() and sum(vec) > 0:
        expected = float(np.dot(np.arange(len(LEVELS)), np.array(vec) / sum(vec)))
        # at, inside and outside the 0.05 tolerance, and a few ulps around it
        delta = draw(st.sampled_from([0.0, 0.01, 0.049999999, 0.05, 0.0500000001, 0.2]))
        ans["score"] = draw(st.sampled_from([expected + delta, expected - delta, np.nextafter(expected + 0.05, 9)]))
        if draw(st.integers(0, 9)) == 0:
            ans["score"] = draw(st.sampled_from([1, True, "2", float("nan"), None]))
    team = {"type": "choice", "probabilities": draw(probability_maps(TEAMS))}
    if draw(st.booleans()):
        team["choice"] = draw(st.sampled_from(TEAMS))
    spam = {"type": "noul", "noul": draw(edge_values)}
    return {"answers": {"urgency": ans, "team": team, "spam": spam}}


@FUZZ
@given(st.lists(hand_responses(), min_size=1, max_size=8))
def test_score_noul_and_choice_rules_equal_the_one_by_one_path(batch):
    _same_as_reference(HAND, batch)


@FUZZ
@given(st.lists(probability_maps(OPTIONS, exotic=False), min_size=2, max_size=6))
def test_batch_reader_stores_normalise_answer_floats_bit_for_bit(maps):
    cq = POLICY.questions["intent"]
    batch = [{"model": MODEL, "answers": {"intent": {"probabilities": m}}} for m in maps]
    probs = np.full((len(batch), len(OPTIONS)), np.nan)
    slow = set(rt._read_answers(cq, batch, list(range(len(batch))), probs))
    for i, m in enumerate(maps):
        try:
            want = normalise_answer(cq.question, {"probabilities": m}, question_id="intent", strict=True).probs
        except Exception:
            assert i in slow  # refused: left to the one-by-one reader, which names what is wrong
            continue
        if all(type(v) is float for v in m.values()):
            assert i not in slow  # a clean answer of floats is read by the batch reader ...
        if i not in slow:
            assert probs[i].tobytes() == want.tobytes()  # ... into the same floats


def test_mixed_batch_keeps_refusals_in_place_and_equals_a_loop_of_decide():
    good = {"model": MODEL, "answers": {"intent": {"probabilities": dict.fromkeys(OPTIONS, 1 / len(OPTIONS))}}}
    conf = {o: (0.96 if i == 3 else 0.04 / (len(OPTIONS) - 1)) for i, o in enumerate(OPTIONS)}
    accepted = {"model": MODEL, "answers": {"intent": {"choice": OPTIONS[3], "probabilities": conf}}}
    bad = [
        {"model": MODEL, "answers": {"intent": {"probabilities": {**conf, OPTIONS[0]: True}}}},  # a bool
        {"model": MODEL, "answers": {"intent": {"probabilities": {**conf, OPTIONS[0]: np.float32(0.001)}}}},
        {"model": MODEL, "answers": {"intent": {"choice": OPTIONS[0], "probabilities": conf}}},  # contradicts
        {"model": MODEL, "answers": {"intent": {"probabilities": {**conf, OPTIONS[0]: -0.5}}}},
        json.dumps(accepted).replace('"answers": {', '"answers": {"intent": {}, ', 1),  # named twice
        {"model": "other", "answers": accepted["answers"]},
        {"error": "boom"},
        "not json",
    ]
    batch = [accepted, *bad, good, accepted]
    got = _same_as_reference(POLICY, batch)
    assert got[0]["intent"].accepted and got[-1]["intent"].accepted
    assert not any(row["intent"].accepted for row in got[1:-1])
    reasons = [row["intent"].reason for row in got[1 : 1 + len(bad)]]
    assert "probability True is not a number" in reasons[0]
    assert "is not a number" in reasons[1]
    assert "contradicts the probabilities" in reasons[2]
    assert "outside [0, 1]" in reasons[3]
    assert "more than once" in reasons[4]
    assert reasons[5].startswith("model mismatch") and reasons[6].startswith("provider failure")
    assert reasons[7].startswith("provider failure: response is not JSON")


@FUZZ
@given(st.lists(fixture_responses(), min_size=5, max_size=12))
def test_blocks_of_the_batch_reader_equal_the_one_by_one_path(batch):
    mp = pytest.MonkeyPatch()
    mp.setattr(rt, "_BATCH_READ_ROWS", 3)  # several blocks, the last one short
    try:
        _same_as_reference(POLICY, batch)
    finally:
        mp.undo()
