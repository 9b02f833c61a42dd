"""normalise_answer (tolerance, errors, schema order, vendor confidence) and the vectorised
summaries top_two / p_top / margin / entropy, checked against plain numpy and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy

from workbench.errors import AnswerError
from workbench.schema import DecisionSchema, entropy, margin, normalise_answer, option_ids, p_top, top_two
from workbench.schema.answers import SUM_TOLERANCE

SCHEMA = DecisionSchema.from_dict(
    {
        "questions": {
            "topic": {
                "type": "choice",
                "instructions": "Topic?",
                "criteria": {"card": None, "transfer": None, "other": None},
            },
            "refund": {"type": "noul", "instructions": "Refund?"},
            "urgency": {"type": "score", "instructions": "Urgency?", "criteria": ["low", "mid", "high"]},
        }
    }
)
TOPIC, REFUND, URGENCY = (SCHEMA.questions[q] for q in ("topic", "refund", "urgency"))


def _choice(probs: dict, **extra) -> dict:
    return {"type": "choice", "choice": max(probs, key=probs.get), "probabilities": probs, **extra}


def test_tolerance_is_the_documented_0_02():
    assert SUM_TOLERANCE == 0.02


@pytest.mark.parametrize(
    "raw",
    [
        {"card": 0.5, "transfer": 0.3, "other": 0.2},  # exact
        {"card": 0.5101, "transfer": 0.3, "other": 0.2},  # rounded up, +0.0101
        {"card": 0.49, "transfer": 0.3, "other": 0.2},  # -0.01
        {"card": 0.519, "transfer": 0.3, "other": 0.2},  # +0.019, just inside
        {"card": 0.481, "transfer": 0.3, "other": 0.2},  # -0.019, just inside
    ],
)
def test_within_tolerance_is_renormalised_and_the_deviation_reported(raw):
    out = normalise_answer(TOPIC, _choice(raw))
    values = np.array([raw["card"], raw["transfer"], raw["other"]])
    np.testing.assert_allclose(out.probs, values / values.sum(), rtol=0, atol=1e-15)
    assert out.probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert out.deviation == pytest.approx(values.sum() - 1.0, abs=1e-12)


@pytest.mark.parametrize("card", [0.53, 0.47, 0.9, 0.0])
def test_beyond_tolerance_is_an_error_not_an_answer(card):
    with pytest.raises(AnswerError, match="sum to"):
        normalise_answer(TOPIC, _choice({"card": card, "transfer": 0.3, "other": 0.2}), question_id="topic")


def test_probabilities_come_back_in_schema_order_whatever_the_wire_order():
    out = normalise_answer(TOPIC, _choice({"other": 0.1, "card": 0.7, "transfer": 0.2}))
    assert option_ids(TOPIC) == ["card", "transfer", "other"]
    np.testing.assert_allclose(out.probs, [0.7, 0.2, 0.1])


def test_unknown_option_is_an_error_naming_it():
    with pytest.raises(AnswerError, match="'fraud'"):
        normalise_answer(TOPIC, _choice({"card": 0.5, "transfer": 0.3, "fraud": 0.2}), question_id="topic")


@pytest.mark.parametrize(
    "answer, match",
    [
        ({"type": "refusal", "name": "topic"}, "refused"),
        ({"type": "noul", "noul": 0.9}, "does not match"),
        ({"type": "choice", "choice": "card"}, "probabilities"),
        ({"type": "choice", "probabilities": {"card": 1.2, "transfer": -0.2, "other": 0.0}}, "outside"),
        ({"type": "choice", "probabilities": {"card": "0.5", "transfer": 0.5}}, "not a number"),
        ({"type": "choice", "probabilities": {"card": True, "transfer": 0.0}}, "not a number"),
        ({"type": "choice", "probabilities": {"card": float("nan"), "transfer": 0.5}}, "outside"),
        ("card", "expected an object"),
    ],
)
def test_malformed_answers_are_errors(answer, match):
    with pytest.raises(AnswerError, match=match):
        normalise_answer(TOPIC, answer, question_id="topic")


@pytest.mark.parametrize("p_yes", [0.0, 0.03, 0.5, 0.9731, 1.0])
def test_noul_becomes_yes_then_no(p_yes):
    out = normalise_answer(REFUND, {"type": "noul", "noul": p_yes, "confidence": 0.5})
    assert option_ids(REFUND) == ["yes", "no"]
    np.testing.assert_allclose(out.probs, [p_yes, 1.0 - p_yes])
    assert out.deviation == 0.0


def test_noul_outside_unit_interval_is_an_error():
    with pytest.raises(AnswerError):
        normalise_answer(REFUND, {"type": "noul", "noul": 1.5})


def test_score_probabilities_are_keyed_by_level_index():
    out = normalise_answer(
        URGENCY,
        {
            "type": "score",
            "score": 1.6,
            "legend": {"0": "low", "1": "mid", "2": "high"},
            "probabilities": {"2": 0.7, "0": 0.1, "1": 0.2},
            "confidence": 0.4,
        },
    )
    np.testing.assert_allclose(out.probs, [0.1, 0.2, 0.7])


@pytest.mark.parametrize("confidence", [0.37, 0.0, 1.0, 12.5])
def test_vendor_confidence_is_kept_raw_and_never_replaced_by_ours(confidence):
    out = normalise_answer(TOPIC, _choice({"card": 0.8, "transfer": 0.15, "other": 0.05}, confidence=confidence))
    assert out.vendor_confidence == confidence
    assert p_top(out.probs[None, :])[0] == pytest.approx(0.8)  # our own p_top differs from theirs
    assert margin(out.probs[None, :])[0] == pytest.approx(0.65)


def test_missing_or_non_numeric_confidence_is_none():
    assert normalise_answer(TOPIC, _choice({"card": 1.0, "transfer": 0.0, "other": 0.0})).vendor_confidence is None
    assert (
        normalise_answer(
            TOPIC, _choice({"card": 1.0, "transfer": 0.0, "other": 0.0}, confidence="high")
        ).vendor_confidence
        is None
    )


# -- vectorised summaries vs straightforward numpy -------------------------------------------------
def _random_probs(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    probs = rng.dirichlet(np.full(k, 0.3), size=n)
    # some exact ties and one-hot rows, the cases a partial sort can get wrong
    probs[: n // 10] = np.eye(k)[rng.integers(0, k, n // 10)]
    if k >= 2:
        tied = probs[n // 10 : n // 5]
        tied[:] = 0.0
        tied[:, :2] = 0.5
    return probs


@pytest.mark.parametrize("k", [2, 3, 10, 77])
@pytest.mark.parametrize("seed", [0, 1])
def test_top_two_margin_entropy_match_numpy_and_scipy(k, seed):
    rng = np.random.default_rng(seed)
    probs = _random_probs(rng, 2_000, k)
    top, p1, p2 = top_two(probs)

    ordered = np.sort(probs, axis=1)
    np.testing.assert_array_equal(top, np.argmax(probs, axis=1))  # ties -> first in schema order
    np.testing.assert_array_equal(p1, ordered[:, -1])
    np.testing.assert_array_equal(p2, ordered[:, -2])
    np.testing.assert_array_equal(p_top(probs), ordered[:, -1])
    np.testing.assert_allclose(margin(probs), ordered[:, -1] - ordered[:, -2], rtol=0, atol=0)
    np.testing.assert_allclose(entropy(probs), scipy_entropy(probs, axis=1), rtol=1e-12, atol=1e-15)
    assert np.all(margin(probs) >= 0) and np.all(margin(probs) <= 1)


def test_summaries_on_known_rows():
    probs = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    top, p1, p2 = top_two(probs)
    np.testing.assert_array_equal(top, [0, 0, 0])
    np.testing.assert_allclose(margin(probs), [1.0, 0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(entropy(probs), [0.0, np.log(2), np.log(3)], rtol=1e-12)


def test_a_single_answer_vector_is_treated_as_one_row():
    top, p1, p2 = top_two(np.array([0.2, 0.7, 0.1]))
    assert (top.tolist(), p1.tolist(), p2.tolist()) == ([1], [0.7], [0.2])


def _reference_normalise(question, answer: dict, qid: str, strict: bool = False):
    """normalise_answer's choice/score path as it was before the fast path (issue 29 §7), for comparison."""
    from workbench_runtime.answers import _prob

    where = f"answer {qid!r}"
    ids = option_ids(question)
    raw = answer["probabilities"]
    unknown = [k for k in raw if k not in set(ids)]
    if unknown:
        raise AnswerError(f"{where}: unknown option {unknown[0]!r} (not in the schema)")
    values = [raw.get(k, 0.0) for k in ids]
    vec = None
    if all(type(v) is float for v in values):
        vec = np.asarray(values, dtype=float)
    if vec is None or not (np.isfinite(vec).all() and (vec >= -1e-9).all() and (vec <= 1 + 1e-9).all()):
        vec = np.array([_prob(v, f"{where}.{k}") for k, v in zip(ids, values)])
    vec = np.clip(vec, 0.0, 1.0)
    total = float(vec.sum())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise AnswerError(f"{where}: probabilities sum to {total:.4f}, more than {SUM_TOLERANCE} from 1")
    return vec / total, total - 1.0


@pytest.mark.parametrize("seed", range(6))
def test_the_fast_path_gives_the_reference_bits_and_errors(seed):
    """Values at and just past the edges (-1e-9, -0.0, 1 + 1e-9, NaN, inf, ints, bools, strings, partial
    maps): the same vector bit for bit, the same deviation, or the same error message."""
    rng = np.random.default_rng(seed)
    edge = [
        0.0,
        -0.0,
        -1e-9,
        -2e-9,
        1.0,
        1 + 1e-9,
        1 + 2e-9,
        float("nan"),
        float("inf"),
        -float("inf"),
        0,
        1,
        True,
        "0.5",
        None,
        10**400,
    ]
    for question in (TOPIC, URGENCY):
        ids = option_ids(question)
        for _ in range(300):
            p = np.round(rng.dirichlet(np.ones(len(ids))), int(rng.integers(2, 6)))
            probs: dict = {k: float(v) for k, v in zip(ids, p)}
            if rng.random() < 0.5:
                probs[ids[int(rng.integers(len(ids)))]] = edge[int(rng.integers(len(edge)))]
            if rng.random() < 0.2:
                del probs[ids[int(rng.integers(len(ids)))]]
            if rng.random() < 0.05:
                probs["nope"] = 0.1
            if not probs:
                continue
            answer = {"type": question.type, "probabilities": probs}
            try:
                want = _reference_normalise(question, answer, "q")
            except AnswerError as exc:
                with pytest.raises(AnswerError) as got_exc:
                    normalise_answer(question, answer, question_id="q")
                if "unknown option" not in str(exc):  # the reference names it without the bounded repr
                    assert str(got_exc.value) == str(exc)
                continue
            got = normalise_answer(question, answer, question_id="q")
            assert got.probs.tobytes() == want[0].tobytes()
            assert got.deviation == want[1]
