"""Vercel AI Gateway evaluation-model v4 (providers.md §3.4; also Prime Intellect, §3.13).

Request: ``{state, questions}`` with **no** body ``model`` (the model goes in ``ai-model-id``);
yes/no questions are ``boolean`` instead of ``noul``; headers ``ai-gateway-auth-method: api-key``,
``ai-gateway-protocol-version: 0.0.1`` (required) and ``ai-evaluation-model-specification-version: 4``.
Response: ``boolean`` answers carry ``probability``; usage is ``inputTokens``/``outputTokens``;
a vendor ``confidence`` sits at ``providerMetadata.<vendor>.confidence.<question id>``.
Errors ``{"error": {message, type, code}}`` are classified by ``type`` first (see http.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import numpy as np

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.dialects.base import Answer, Dialect, Reject, Reply, Served
from workbench.providers.dialects.systemone import CLEF_LIMITS, system_one_answers, validate_system_one, wire_state
from workbench.providers.http import HttpProvider

PROTOCOL_VERSION = "0.0.1"
SPECIFICATION_VERSION = "4"


def to_vercel_questions(questions_wire: dict[str, dict]) -> dict[str, dict]:
    """System One question map → evaluation-model questions (``noul`` → ``boolean``)."""
    return {qid: ({**q, "type": "boolean"} if q["type"] == "noul" else dict(q)) for qid, q in questions_wire.items()}


def from_vercel_answers(data: dict) -> dict[str, dict]:
    """Evaluation-model answers → System One answers (``boolean.probability`` → ``noul.noul``)."""
    answers = data.get("answers")
    if not isinstance(answers, dict):
        raise ProviderError(ErrorKind.MALFORMED, "response has no 'answers' object")
    confidences: dict[str, Any] = {}
    meta = data.get("providerMetadata")
    if isinstance(meta, dict):
        for vendor_meta in meta.values():
            if isinstance(vendor_meta, dict) and isinstance(vendor_meta.get("confidence"), dict):
                confidences.update(vendor_meta["confidence"])
    out: dict[str, dict] = {}
    for qid, a in answers.items():
        if not isinstance(a, dict):
            out[qid] = a
        elif a.get("type") == "boolean":
            out[qid] = {"type": "noul", "noul": a.get("probability")}
        else:
            b = dict(a)
            if "confidence" not in b and qid in confidences:
                b["confidence"] = confidences[qid]
            out[qid] = b
    return out


# -- the emulated service ------------------------------------------------------------------------
def parse_vercel(headers: Mapping[str, str], body: Any) -> tuple[Any, dict, list, dict]:
    if headers.get("ai-gateway-protocol-version") != PROTOCOL_VERSION:
        raise Reject("schema", "Unsupported gateway protocol version")
    model = headers.get("ai-model-id")
    if not model:
        raise Reject("schema", "ai-model-id header is required")
    if isinstance(body, dict) and "model" in body:
        raise Reject("schema", "model must not be sent in the body (use the ai-model-id header)", ("model",))
    if not isinstance(body, dict) or not isinstance(body.get("questions"), dict):
        raise Reject("schema", "questions must be an object", ("questions",))
    translated = {
        qid: ({**q, "type": "noul"} if isinstance(q, dict) and q.get("type") == "boolean" else q)
        for qid, q in body["questions"].items()
    }
    if any(isinstance(q, dict) and q.get("type") == "noul" for q in body["questions"].values()):
        raise Reject("schema", "unknown question type 'noul' (use 'boolean')")
    state, questions, _ = validate_system_one(
        {**body, "questions": translated}, CLEF_LIMITS, allowed_fields=frozenset({"state", "questions"})
    )
    return state, questions, [], {"answered_model": model}


def render_vercel(questions: dict, probs: dict[str, np.ndarray], tokens: int) -> dict:
    s1 = system_one_answers(questions, probs, confidence="pmax")
    answers, conf = {}, {}
    for qid, a in s1.items():
        if a["type"] == "noul":
            answers[qid] = {"type": "boolean", "probability": a["noul"]}
            continue
        conf[qid] = a.pop("confidence")
        answers[qid] = a
    return {
        "answers": answers,
        "usage": {"inputTokens": tokens, "outputTokens": 0},
        "providerMetadata": {"typesafe": {"confidence": conf}},
    }


class Vercel(Dialect):
    """``POST …/v4/ai/evaluation-model``; see the module docstring."""

    name = "vercel"
    paths = frozenset({"/v4/ai/evaluation-model", "/api/v1/evaluations"})

    # -- client half -----------------------------------------------------------------------------
    def headers(self, provider: HttpProvider) -> dict[str, str]:
        return {
            "ai-gateway-auth-method": "api-key",
            "ai-gateway-protocol-version": PROTOCOL_VERSION,
            "ai-model-id": provider.model or "",
            "ai-evaluation-model-specification-version": SPECIFICATION_VERSION,
        }

    def build_body(self, provider: HttpProvider, request: DecisionRequest) -> dict:
        return {"state": wire_state(request.state), "questions": to_vercel_questions(request.schema.to_wire())}

    def to_system_one(
        self, provider: HttpProvider, data: Any, response: httpx.Response, request: DecisionRequest
    ) -> dict:
        if not isinstance(data, dict):
            raise ProviderError(ErrorKind.MALFORMED, f"{provider.spec}: response is not an object")
        usage: dict = data["usage"] if isinstance(data.get("usage"), dict) else {}
        model = data.get("model") or data.get("modelId")
        return {
            "model": model if isinstance(model, str) else None,
            "answers": from_vercel_answers(data),
            "usage": {"input_tokens": usage.get("inputTokens"), "output_tokens": usage.get("outputTokens", 0)},
        }

    # -- emulator half ---------------------------------------------------------------------------
    def route_model(self, path: str, headers: Mapping[str, str], body: bytes) -> str | None:
        return headers.get("ai-model-id")

    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> Served:
        return Served(*parse_vercel(headers, body))

    def render_answer(self, a: Answer) -> Reply:
        return 200, render_vercel(a.questions, a.probs, a.tokens), {"x-request-id": a.rid, "x-inference-id": a.rid}
