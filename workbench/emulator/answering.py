"""How the emulator answers: its own crude tokenizer (usage counts) and the pluggable answerers.

An answerer is ``answerer(questions_wire, state) -> {qid: [p, ...]}`` (probabilities in option order:
noul ``[yes, no]``, choice in request order, score levels). The default :class:`LexicalAnswerer` is a
cheap deterministic token-overlap model; :class:`ProviderAnswerer` adapts any workbench provider.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

# ------------------------------------------------------------------------------------------------
# Tokenizer (the server's own; deliberately cruder and different from the client's estimator)
# ------------------------------------------------------------------------------------------------
_SERVER_TOKEN = re.compile(r" ?[A-Za-z]{1,6}| ?\d{1,3}|\s+|[^\sA-Za-z\d]")
FIXED_TOKENS = 397  # Clef's fixed per-request tokens for a one-question schema (providers.md §7)


def render(value: Any) -> str:
    """A string as is, any other JSON value compact with sorted keys (Clef's renderer, §8)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def server_token_count(text: str) -> int:
    return len(_SERVER_TOKEN.findall(text))


def truncate_tokens(text: str, n: int) -> str:
    """The head of ``text`` holding its first ``n`` server tokens."""
    if n <= 0:
        return ""
    end = 0
    for i, m in enumerate(_SERVER_TOKEN.finditer(text)):
        if i >= n:
            break
        end = m.end()
    return text[:end]


# ------------------------------------------------------------------------------------------------
# Answerers
# ------------------------------------------------------------------------------------------------
Answerer = Callable[[dict, Any], dict[str, list[float]]]

_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being am
i me my we our you your he she it its they them their this that these those there here what which who whom
whose when where why how do does did doing done have has had having can could would should will shall may might
must not no yes so than too very just also about into over under again further then once all any both each few
more most other some such only own same s t don now please hi hello help want need get got im ive id""".split()
)
_NOUL_TRUE = "The proposition is true or the answer is yes."
_NOUL_FALSE = "The proposition is false or the answer is no."


def _stem(word: str) -> str:
    # Crude but deterministic: fold plural/tense endings, then keep a 6-letter prefix so that
    # "activate"/"activated"/"activation" and "card"/"cards" meet.
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word[:6]


def lexical_terms(text: str) -> list[str]:
    """Lower-cased, stop-word-free, stemmed word terms of ``text`` (ids split on ``_ - .``)."""
    words = re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))
    return [_stem(w) for w in words if w not in _STOP and len(w) > 1]


def option_texts(question: dict) -> list[str]:
    """One text per option, in the answer's option order (noul: yes, no)."""
    qtype = question.get("type")
    crit = question.get("criteria")
    instr = render(question.get("instructions", ""))
    if qtype == "noul":
        crit = crit if isinstance(crit, dict) else {}
        t = crit.get("true")
        f = crit.get("false")
        return [instr + " " + render(t if t is not None else _NOUL_TRUE), render(f if f is not None else _NOUL_FALSE)]
    if qtype == "choice":
        return [f"{k} {render(v) if v is not None else ''}" for k, v in (crit or {}).items()]
    return [render(level) for level in crit or []]


class LexicalAnswerer:
    """Token overlap between the state and each option's text, turned into probabilities.

    For each option, ``score = sum(idf of shared terms) / sqrt(1 + n_option_terms)`` where a term's
    idf is ``log(1 + n_options / n_options_with_term)`` within the question; probabilities are
    ``softmax(score / temperature)``. Deterministic, no state between calls, ~0.1 ms per question.
    """

    def __init__(self, temperature: float = 0.35, cache_size: int = 256):
        if temperature <= 0:
            raise ValueError("temperature must be > 0")
        self.temperature = temperature
        self._cache: dict[str, tuple[dict[str, np.ndarray], int]] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _index(self, question: dict) -> tuple[dict[str, np.ndarray], int]:
        # not sort_keys: option order is part of the question (a permuted question is another index)
        key = json.dumps(question, ensure_ascii=False, default=str)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        texts = option_texts(question)
        k = len(texts)
        term_sets = [set(lexical_terms(t)) for t in texts]
        df = Counter(t for s in term_sets for t in s)
        norms = np.array([math.sqrt(1.0 + len(s)) for s in term_sets])
        index: dict[str, np.ndarray] = {}
        for term, n in df.items():
            w = np.zeros(k)
            idf = math.log(1.0 + k / n)
            for j, s in enumerate(term_sets):
                if term in s:
                    w[j] = idf / norms[j]
            index[term] = w
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = (index, k)
        return index, k

    def __call__(self, questions_wire: dict, state: Any) -> dict[str, list[float]]:
        state_terms = set(lexical_terms(render(state)))
        out: dict[str, list[float]] = {}
        for qid, q in questions_wire.items():
            index, k = self._index(q)
            score = np.zeros(k)
            for t in state_terms:
                w = index.get(t)
                if w is not None:
                    score += w
            z = score / self.temperature
            p = np.exp(z - z.max())
            out[qid] = (p / p.sum()).tolist()
        return out


def apply_position_bias(questions_wire: dict, probs: dict[str, np.ndarray], bias: float) -> dict[str, np.ndarray]:
    """Boost the option listed first of every choice question: ``(1 - bias) * p + bias * e_first``.

    The emulator's documented position-bias knob (``FaultConfig.position_bias``, ``run_emulator(...,
    position_bias=0.3)``, ``workbench emulator --position-bias 0.3``): a position-sensitive model in
    miniature, so that the ``option_order`` robustness probe has something real to find. Yes/no and
    score questions are left alone. ``bias=0`` returns ``probs`` unchanged.
    """
    if bias <= 0:
        return probs
    out = dict(probs)
    for qid, q in questions_wire.items():
        if q.get("type") == "choice" and qid in out:
            p = (1.0 - bias) * np.asarray(out[qid], dtype=float)
            p[0] += bias
            out[qid] = p
    return out


def answerer_from_spec(spec: str) -> Answerer:
    """``lexical`` (default) or a local provider spec such as ``local:minilm-zeroshot``.

    A provider is wrapped so that the emulator can call it from its worker thread.
    """
    if spec in ("", "lexical"):
        return LexicalAnswerer()
    from workbench.providers.registry import get_provider  # imported only when asked (torch etc.)

    return ProviderAnswerer(get_provider(spec))


class ProviderAnswerer:
    """Adapt any workbench ``Provider`` (e.g. ``local:minilm-zeroshot``) to the answerer hook."""

    def __init__(self, provider: Any):
        self.provider = provider
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    def __call__(self, questions_wire: dict, state: Any) -> dict[str, list[float]]:
        from workbench.providers.base import DecisionRequest
        from workbench.schema import DecisionSchema

        schema = DecisionSchema.from_dict({"questions": questions_wire}, source="emulator request")
        with self._lock:  # one event loop, one call at a time: local models are CPU-bound anyway
            result = self._loop.run_until_complete(self.provider.decide(DecisionRequest(schema, state)))
        if result.failures:
            qid, (kind, msg) = next(iter(result.failures.items()))
            raise RuntimeError(f"answerer failed on {qid}: {kind}: {msg}")
        return {qid: np.asarray(a.probs, dtype=float).tolist() for qid, a in result.answers.items()}
