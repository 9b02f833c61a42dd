"""Robustness probes: deterministic, seeded transformations of a request, answered back in schema order.

A probe changes how a request is *presented* and nothing else, so that a probed run can be compared
item by item with the unprobed run of the same schema (:mod:`workbench.workflows.robustness`):

``option_order``
    Every choice question's options in a seeded random order, drawn afresh per item (the seed is
    ``sha256(probe, seed, item_id)``), so the option listed first is a random option of each item.
``option_ids_only``
    Choice option descriptions dropped (``null``), yes/no criteria dropped: only the ids remain.
``irrelevant_context``
    One seeded, off-topic sentence appended to the state (a string state) or put next to it (a
    JSON state becomes ``{"input": state, "note": sentence}``).
``instruction_paraphrase``
    Every question's instructions wrapped in one of a few fixed rewordings (seeded per question).
``yes_no_inversion``
    Every yes/no question asked the other way round ("Answer yes if the following does NOT
    hold …", true/false criteria swapped); the answer's ``[P(yes), P(no)]`` is swapped back, so a
    stored "yes" is the original yes and the expected label is effectively inverted when scoring.

:class:`ProbedProvider` wraps any provider: it sends the transformed request and maps every answer
back to the ORIGINAL schema's option order (choice answers are keyed by option id; inverted yes/no
answers are swapped), in the :class:`DecisionResult` and in its System One ``raw`` body, so the
stored answers, the cache and every metric compare like with like. Its ``render_body`` renders the
transformed request, so the call cache keys on what was actually sent: a probed request is its own
cache entry, and a rerun of the probed run is free.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.providers.base import DecisionRequest, DecisionResult
from workbench.schema import DecisionSchema, NormalisedAnswer

PROBES: tuple[str, ...] = (
    "option_order",
    "option_ids_only",
    "irrelevant_context",
    "instruction_paraphrase",
    "yes_no_inversion",
)

#: Off-topic sentences for ``irrelevant_context`` (neutral, no intent or sentiment words).
IRRELEVANT_SENTENCES: tuple[str, ...] = (
    "The weather was mild today, with a light breeze in the afternoon.",
    "A museum downtown reopened its east wing after renovation.",
    "The train schedule for the weekend follows the usual timetable.",
    "Tomatoes grow best with plenty of sunlight and regular watering.",
    "The local library extended its opening hours on Thursdays.",
    "Mountain trails in the north are popular with hikers in the autumn.",
)

#: Rewordings for ``instruction_paraphrase``; ``{i}`` is the original instructions.
PARAPHRASES: tuple[str, ...] = (
    "Please consider the following carefully. {i}",
    "{i} Base your answer only on the text given.",
    "Task: {i}",
    "Here is what we would like to know. {i}",
)

INVERSION = "Answer yes if the following does NOT hold, and no if it does. {i}"


class ProbeError(WorkbenchError):
    """An unknown probe name or a bad probe seed."""


@dataclass(frozen=True)
class Probe:
    """One probe and its seed (recorded in the run's ``params['probe']``)."""

    name: str
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in PROBES:
            raise ProbeError(f"unknown probe {self.name!r}", hint=f"use one of: {', '.join(PROBES)}")

    def as_params(self) -> dict:
        return {"name": self.name, "seed": int(self.seed)}


def _rng(*parts: Any) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def option_permutation(probe: Probe, qid: str, n_options: int, item_id: str | None) -> np.ndarray:
    """``perm`` with ``perm[j]`` = original index of the option listed at position ``j``.

    Identity for every probe but ``option_order``; deterministic in (probe seed, question, item).
    """
    if probe.name != "option_order":
        return np.arange(n_options)
    return _rng("option_order", probe.seed, qid, item_id or "").permutation(n_options)


def transform_schema(schema: DecisionSchema, probe: Probe, item_id: str | None = None) -> DecisionSchema:
    """The schema as the probe presents it (for ``option_order``, to item ``item_id``)."""
    wire = schema.to_wire()
    out: dict[str, dict] = {}
    for qid, q in wire.items():
        q = copy.deepcopy(q)
        kind = q["type"]
        if probe.name == "option_order" and kind == "choice":
            keys = list(q["criteria"])
            perm = option_permutation(probe, qid, len(keys), item_id)
            q["criteria"] = {keys[j]: q["criteria"][keys[j]] for j in perm}
        elif probe.name == "option_ids_only":
            if kind == "choice":
                q["criteria"] = dict.fromkeys(q["criteria"])
            elif kind == "noul":
                q.pop("criteria", None)
        elif probe.name == "instruction_paraphrase":
            template = PARAPHRASES[int(_rng("paraphrase", probe.seed, qid).integers(len(PARAPHRASES)))]
            q["instructions"] = template.format(i=_text(q["instructions"]))
        elif probe.name == "yes_no_inversion" and kind == "noul":
            q["instructions"] = INVERSION.format(i=_text(q["instructions"]))
            crit = q.get("criteria")
            if isinstance(crit, dict):
                q["criteria"] = {"true": crit.get("false"), "false": crit.get("true")}
        out[qid] = q
    return DecisionSchema.from_dict(
        {"name": schema.name, "description": schema.description, "questions": out}, source=f"probe {probe.name}"
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def transform_state(state: Any, probe: Probe, item_id: str | None = None) -> Any:
    """The state as the probe presents it (only ``irrelevant_context`` changes it)."""
    if probe.name != "irrelevant_context":
        return state
    sentence = IRRELEVANT_SENTENCES[int(_rng("context", probe.seed, item_id or "").integers(len(IRRELEVANT_SENTENCES)))]
    if isinstance(state, str):
        return f"{state}\n\n{sentence}"
    return {"input": state, "note": sentence}


def transform_request(request: DecisionRequest, probe: Probe) -> DecisionRequest:
    return DecisionRequest(
        schema=transform_schema(request.schema, probe, request.item_id),
        state=transform_state(request.state, probe, request.item_id),
        images=request.images,
        item_id=request.item_id,
    )


def map_back(result: DecisionResult, request: DecisionRequest, probe: Probe) -> DecisionResult:
    """``result`` (answers to the transformed request) in the ORIGINAL schema's option order.

    Choice probabilities are put back in schema order (``p_orig[perm] = p_sent``); an inverted
    yes/no answer ``[P(yes'), P(no')]`` becomes ``[P(no'), P(yes')]``, and ``raw['answers'][q]['noul']``
    becomes ``1 - noul``. Other answers are unchanged.
    """
    answers = dict(result.answers)
    raw = copy.deepcopy(result.raw) if result.raw is not None else None
    for qid, ans in result.answers.items():
        q = request.schema.questions.get(qid)
        if q is None:
            continue
        probs = np.asarray(ans.probs, dtype=float)
        if probe.name == "option_order" and q.type == "choice":
            perm = option_permutation(probe, qid, len(probs), request.item_id)
            back = np.empty_like(probs)
            back[perm] = probs
            answers[qid] = NormalisedAnswer(back, ans.deviation, ans.vendor_confidence)
        elif probe.name == "yes_no_inversion" and q.type == "noul":
            p_yes = 1.0 - float(probs[0])  # [p, 1 - p] exactly as a cached raw ``noul: 1 - p'`` normalises
            answers[qid] = NormalisedAnswer(np.array([p_yes, 1.0 - p_yes]), ans.deviation, ans.vendor_confidence)
            body = ((raw or {}).get("answers") or {}).get(qid)
            if isinstance(body, dict) and isinstance(body.get("noul"), (int, float)):
                body["noul"] = 1.0 - float(body["noul"])
    # the body as received no longer matches the mapped-back ``raw``: it is not kept
    return replace(result, answers=answers, raw=raw, raw_text=None)


class ProbedProvider:
    """Any provider, asked the probe's transformed request; its answers mapped back to schema order.

    Every attribute not defined here (``spec``, ``dialect``, ``limits``, ``model``, ``endpoint``,
    ``vendor``, ``aclose`` …) is the wrapped provider's. ``decide_batch`` exists only when the wrapped
    provider has it, so the runner drives a local model in chunks and an HTTP provider request by
    request, as it would unwrapped.
    """

    def __init__(self, inner: Any, probe: Probe):
        self.inner = inner
        self.probe = probe
        if hasattr(inner, "decide_batch"):
            self.decide_batch = self._decide_batch

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "probe"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        result = await self.inner.decide(transform_request(request, self.probe))
        return map_back(result, request, self.probe)

    def _decide_batch(self, requests: list[DecisionRequest]) -> list[Any]:
        results = self.inner.decide_batch([transform_request(r, self.probe) for r in requests])
        return [
            map_back(res, req, self.probe) if isinstance(res, DecisionResult) else res  # a ProviderError stays one
            for res, req in zip(results, requests)
        ]

    def render_body(self, request: DecisionRequest) -> str:
        """The body text of the transformed request (the call-cache key's body)."""
        sent = transform_request(request, self.probe)
        render = getattr(self.inner, "render_body", None)
        if callable(render):
            return str(render(sent))
        build = getattr(self.inner, "build_body", None)
        if callable(build):
            return json.dumps(build(sent), ensure_ascii=False, separators=(",", ":"))
        body = {"state": sent.state, "questions": sent.schema.to_wire()}
        if sent.images:
            body["images"] = list(sent.images)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
