"""Vercel AI Gateway evaluation-model v4 dialect (providers.md §3.4; also Prime Intellect, §3.13).

Request: ``{state, questions}`` with **no** body ``model`` (the model goes in ``ai-model-id``);
yes/no questions are ``boolean`` instead of ``noul``; headers ``ai-gateway-auth-method: api-key``,
``ai-gateway-protocol-version: 0.0.1`` (required) and ``ai-evaluation-model-specification-version: 4``.
Response: ``boolean`` answers carry ``probability``; usage is ``inputTokens``/``outputTokens``;
a vendor ``confidence`` sits at ``providerMetadata.<vendor>.confidence.<question id>``.
Errors ``{"error": {message, type, code}}`` are classified by ``type`` first (see http.py).
"""

from __future__ import annotations

from typing import Any

import httpx

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.http import HttpProvider
from workbench.providers.systemone import wire_state

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


class VercelProvider(HttpProvider):
    """``POST …/v4/ai/evaluation-model``; see the module docstring."""

    dialect = "vercel"

    def dialect_headers(self) -> dict[str, str]:
        return {
            "ai-gateway-auth-method": "api-key",
            "ai-gateway-protocol-version": PROTOCOL_VERSION,
            "ai-model-id": self.model or "",
            "ai-evaluation-model-specification-version": SPECIFICATION_VERSION,
        }

    def build_body(self, request: DecisionRequest) -> dict:
        return {"state": wire_state(request.state), "questions": to_vercel_questions(request.schema.to_wire())}

    def to_system_one(self, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
        if not isinstance(data, dict):
            raise ProviderError(ErrorKind.MALFORMED, f"{self.spec}: response is not an object")
        usage: dict = data["usage"] if isinstance(data.get("usage"), dict) else {}
        model = data.get("model") or data.get("modelId")
        return {
            "model": model if isinstance(model, str) else None,
            "answers": from_vercel_answers(data),
            "usage": {"input_tokens": usage.get("inputTokens"), "output_tokens": usage.get("outputTokens", 0)},
        }
