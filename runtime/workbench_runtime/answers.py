"""Normalised answers: one probability vector per question, over the schema's options in order.

Providers round probabilities (Clef: 4 decimals), so a vector whose sum is within ``tol`` of 1 is
re-normalised and its deviation reported; beyond ``tol`` it is an error, never an answer.
The workbench computes its own ``p_top``, ``margin`` and ``entropy``; a vendor's ``confidence``
is kept raw (vendors define it differently, providers.md §5).
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench_runtime.errors import AnswerError
from workbench_runtime.questions import Choice, Noul, Score, option_ids

#: Largest |sum(p) - 1| accepted before re-normalising (Clef rounds to 4 decimals; Polyglot uses 0.02).
SUM_TOLERANCE = 0.02
#: Largest |score - expected level| accepted in strict mode (a score answer's ``score`` is the
#: probability-weighted level; 4-decimal rounding of 10 levels moves it by < 0.005).
SCORE_TOLERANCE = 0.05


@dataclass(frozen=True)
class NormalisedAnswer:
    probs: np.ndarray  # shape (n_options,), schema order, sums to 1
    deviation: float  # sum of the provider's values minus 1, before re-normalising
    vendor_confidence: float | None  # raw, as the vendor sent it; not comparable across vendors


def _prob(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AnswerError(f"{where}: probability {_short(value)} is not a number")
    try:
        v = float(value)
    except OverflowError:  # an integer with hundreds of digits
        raise AnswerError(f"{where}: probability {_short(value)} is outside [0, 1]") from None
    if not np.isfinite(v) or v < -1e-9 or v > 1 + 1e-9:
        raise AnswerError(f"{where}: probability {v} is outside [0, 1]")
    return min(max(v, 0.0), 1.0)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 40


def _short(value: Any) -> str:
    """A bounded ``repr``, so a hostile value (a 1 MB string, a 401-digit integer) cannot flood an error message."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an integer beyond Python's int-to-str digit limit
        return "<integer of more than 4300 digits>"


def _number_or_none(value: Any) -> float | None:
    """A finite float from a JSON number, else None (bools, strings, huge integers, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None  # a float here: math's test, a tenth of numpy's per scalar


_FLOAT_ONLY = {float}
#: id(question) -> (question, its criteria object, option ids, their set); questions are frozen models
_IDS: dict[int, tuple[Any, Any, list[str], frozenset[str]]] = {}


def _option_ids(question: Noul | Choice | Score) -> tuple[list[str], frozenset[str]]:
    """:func:`option_ids` and their set, made once per question object (a run asks the same few)."""
    hit = _IDS.get(id(question))
    if (
        hit is None
        or hit[0] is not question
        or hit[1] is not question.criteria
        or len(hit[2]) != len(question.criteria or ())
    ):
        if len(_IDS) >= 256:
            _IDS.clear()
        ids = option_ids(question)
        hit = _IDS[id(question)] = (question, question.criteria, ids, frozenset(ids))
    return hit[2], hit[3]


def normalise_answer(
    question: Noul | Choice | Score,
    answer: Any,
    *,
    question_id: str = "?",
    tol: float = SUM_TOLERANCE,
    strict: bool = False,
) -> NormalisedAnswer:
    """Turn one System One answer object into a probability vector in schema order.

    ``answer`` is e.g. ``{"type": "noul", "noul": 0.97}`` or
    ``{"type": "choice", "choice": "a", "probabilities": {"a": 0.8, "b": 0.2}, "confidence": 0.6}``.
    Raises :class:`AnswerError` when the answer is missing, of the wrong type, names unknown
    options or sums too far from 1 (never another exception, whatever ``answer`` holds).

    ``strict`` (the policy runtime) also refuses answers that are not a complete vector: a
    probability map that leaves out an option, a ``choice`` that is not a top option of the
    probabilities, and a ``score`` that is not the probability-weighted level.
    """
    where = f"answer {question_id!r}"
    if not isinstance(answer, dict):
        raise AnswerError(f"{where}: expected an object, got {type(answer).__name__}")
    kind = answer.get("type", question.type)
    if kind == "refusal":
        raise AnswerError(f"{where}: the provider refused this question")
    if kind != question.type:
        raise AnswerError(f"{where}: type {_short(kind)} does not match the question type {question.type!r}")
    conf = _number_or_none(answer.get("confidence"))
    if question.type == "noul":
        p_yes = _prob(answer.get("noul"), where)
        return NormalisedAnswer(np.array([p_yes, 1.0 - p_yes]), 0.0, conf)

    ids, id_set = _option_ids(question)
    raw = answer.get("probabilities")
    if not isinstance(raw, dict) or not raw:
        raise AnswerError(f"{where}: no 'probabilities' object")
    if not id_set.issuperset(raw):
        unknown = [k for k in raw if k not in id_set]
        raise AnswerError(f"{where}: unknown option {_short(unknown[0])} (not in the schema)")
    if strict and len(raw) != len(ids):
        missing = [k for k in ids if k not in raw]
        raise AnswerError(
            f"{where}: probabilities cover {len(raw)} of {len(ids)} options (missing {missing[0]!r}); "
            "a partial map is not a probability vector"
        )
    # the options in schema order (as the vendors send them): the values as they stand, else looked up
    values = list(raw.values()) if len(raw) == len(ids) and list(raw) == ids else [raw.get(k, 0.0) for k in ids]
    vec = None
    total = 0.0
    if set(map(type, values)) == _FLOAT_ONLY:  # the common case; ints (0, 1, or huge) take the checked path
        # Python's min and max (one numpy call fewer each: in the runner's event loop, between two
        # calls, a numpy reduction costs ten times its tight-loop time). An infinity fails the range
        # test; a NaN may pass it (its comparisons are false) but not the sum's test below.
        lo, hi = min(values), max(values)
        if lo >= -1e-9 and hi <= 1 + 1e-9:
            vec = np.asarray(values, dtype=float)
            if lo < 0.0 or hi > 1.0:  # within 1e-9 of [0, 1]: clipped (np.clip is the identity inside)
                vec = np.clip(vec, 0.0, 1.0)
            total = float(np.add.reduce(vec))  # vec.sum() without its Python wrapper: the same bits
            if total != total:  # a NaN among the values
                vec = None
    if vec is None:
        # slow path: checks each value (each within [0, 1] after) and names the offending option precisely
        vec = np.array([_prob(v, f"{where}.{k}") for k, v in zip(ids, values)])
        total = float(vec.sum())
    deviation = total - 1.0
    if abs(deviation) > tol:
        raise AnswerError(f"{where}: probabilities sum to {total:.4f}, more than {tol} from 1")
    probs = vec / total
    if strict:
        _check_stated_answer(question, answer, ids, probs, where)
    return NormalisedAnswer(probs, deviation, conf)


def _check_stated_answer(question: Choice | Score, answer: dict, ids: list[str], probs: np.ndarray, where: str) -> None:
    """Strict mode: the answer's own ``choice`` / ``score`` field must agree with its probabilities."""
    if question.type == "choice" and "choice" in answer:
        stated = answer["choice"]
        if not isinstance(stated, str) or stated not in ids:
            raise AnswerError(f"{where}: 'choice' {_short(stated)} is not an option of the question")
        if probs[ids.index(stated)] < probs.max() - 1e-9:
            top = ids[int(probs.argmax())]
            raise AnswerError(f"{where}: 'choice' {stated!r} contradicts the probabilities (top option is {top!r})")
    elif question.type == "score" and "score" in answer:
        stated = _number_or_none(answer["score"])
        expected = float(np.dot(np.arange(len(probs)), probs))
        if stated is None or abs(stated - expected) > SCORE_TOLERANCE:
            raise AnswerError(
                f"{where}: 'score' {_short(answer['score'])} contradicts the probabilities "
                f"(their expected level is {expected:.3f})"
            )


# -- summaries, vectorised over a matrix of answers ---------------------------------------------
#: Rows per block in :func:`top_two` (a reused ~20 MB buffer at 77 options stays cache/TLB friendly).
_BLOCK_ROWS = 32768


def top_two(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index of the top option, its probability and the runner-up's probability, per row.

    Computed block by block with one reused buffer: ``argmax``, then ``max`` after masking the top
    entry (a selection, not arithmetic, so the floats are the input's). On 1M × 77 this avoids
    allocating full-size temporaries.

    Parameters
    ----------
    probs : ndarray of shape (n_items, n_options)
        Probabilities; rows with NaN give NaN summaries (and top index 0).

    Returns
    -------
    top : ndarray of shape (n_items,), int
        Index of the first maximal option (schema order breaks ties).
    p1, p2 : ndarray of shape (n_items,)
        Top and runner-up probability (``p2 == 0`` when there is a single option).
    """
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    n, k = probs.shape
    top = np.empty(n, dtype=np.intp)
    p1 = np.empty(n)
    p2 = np.zeros(n)
    buf = np.empty((min(n, _BLOCK_ROWS), k))
    for start in range(0, n, _BLOCK_ROWS):
        blk = probs[start : start + _BLOCK_ROWS]
        m = blk.shape[0]
        rows = np.arange(m)
        bad = np.isnan(blk.sum(axis=1))
        b = buf[:m]
        np.copyto(b, blk)
        if bad.any():
            b[bad] = 0.0
        t = b.argmax(axis=1)
        top[start : start + m] = t
        first = b[rows, t]
        p1[start : start + m] = np.where(bad, np.nan, first)
        if k >= 2:
            b[rows, t] = -np.inf
            p2[start : start + m] = np.where(bad, np.nan, b.max(axis=1))
        elif bad.any():
            p2[start : start + m][bad] = np.nan
    return top, p1, p2


def p_top(probs: np.ndarray) -> np.ndarray:
    """Probability of the top option per row, shape (n_items,)."""
    return top_two(probs)[1]


def margin(probs: np.ndarray) -> np.ndarray:
    """Top minus runner-up probability per row, in [0, 1]."""
    _, p1, p2 = top_two(probs)
    return p1 - p2


def entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats per row (0 for a one-hot vector)."""
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(probs > 0, -probs * np.log(probs), 0.0)
    return terms.sum(axis=1)
