"""The System One wire format (providers.md §2): TypeSafe Jev, OpenRouter, SubQ, Sarvam, Laya, XOR and
any self-hosted ``/v1/systemone`` server (Ollama, llama.cpp, the emulator); Cloudflare and Perplexity
are variants of it (their own modules).

Request ``{model, state, questions[, images]}``; response ``{model, answers, usage}``. Errors are
``{"detail": {error_type, message, code}}``, and 422 ``{"detail": [{type, loc, msg}]}``. The emulator's
limits come from :data:`workbench.schema.questions.PROFILES`, so that client validation and the
emulated service cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.dialects.base import Answer, Dialect, Error, Reject, Reply, Served, dumps, r4
from workbench.providers.http import HttpProvider
from workbench.schema.questions import PROFILES


def wire_state(state: Any) -> Any:
    """State as sent: numbers and booleans become text (Clef refuses bare numbers, §3.1/§3.3)."""
    if isinstance(state, bool):
        return "true" if state else "false"
    if isinstance(state, (int, float)):
        return str(state)
    if state is None:
        return ""
    return state


# ------------------------------------------------------------------------------------------------
# What the service accepts (shared by every System One route; limits per route)
# ------------------------------------------------------------------------------------------------
_ID = re.compile(f"^{PROFILES['cloudflare-clef'].id_pattern}$")
_IMG = re.compile(r"^data:image/(png|jpeg|jpg|webp);base64,([A-Za-z0-9+/=\s]*)$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Limits:
    """What one System One route accepts: a limit profile's numbers (:meth:`from_profile`) and an image count."""

    max_questions: int
    min_options: int
    max_options: int
    min_levels: int
    max_levels: int
    max_images: int

    @classmethod
    def from_profile(cls, name: str, *, max_images: int) -> Limits:
        """The hosted service's limits, from the same profiles the client validates with."""
        p = PROFILES[name]
        if p.max_questions is None or p.max_options is None or p.max_levels is None:
            raise ValueError(f"limit profile {name!r} has no hosted limits to emulate")
        return cls(
            max_questions=p.max_questions,
            min_options=p.min_options,
            max_options=p.max_options,
            min_levels=p.min_levels,
            max_levels=p.max_levels,
            max_images=max_images,
        )


CLEF_LIMITS = Limits.from_profile("cloudflare-clef", max_images=4)


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, (list, dict)) and not v)


def validate_system_one(body: Any, limits: Limits, *, allowed_fields: frozenset[str]) -> tuple[Any, dict, list[str]]:
    """Check a System One body; return (state, questions, images). Raises :class:`Reject`."""
    if not isinstance(body, dict):
        raise Reject("schema", "request body must be a JSON object")
    missing = [f for f in ("state", "questions") if f not in body]
    if missing:
        raise Reject("schema", "required properties at '/' are 'model,state,questions'", (missing[0],))
    unknown = sorted(set(body) - allowed_fields)
    if unknown:
        raise Reject("model", f"Unrecognized key(s) in object: '{unknown[0]}'", (unknown[0],))
    questions = body["questions"]
    if not isinstance(questions, dict) or not questions:
        raise Reject("schema", "questions must be an object with at least 1 question", ("questions",))
    if len(questions) > limits.max_questions:
        raise Reject(
            "model", f"questions: at most {limits.max_questions} questions (got {len(questions)})", ("questions",)
        )
    for qid, q in questions.items():
        loc = ("questions", qid)
        if not _ID.match(qid):
            raise Reject("model", f"question id {qid[:40]!r} must match [A-Za-z0-9_.-]{{1,100}}", loc)
        if not isinstance(q, dict) or q.get("type") not in ("noul", "choice", "score"):
            raise Reject("schema", f"question {qid}: type must be one of noul, choice, score", loc)
        extra = set(q) - {"type", "instructions", "criteria"}
        if extra:
            raise Reject("model", f"question {qid}: unrecognized key '{sorted(extra)[0]}'", loc)
        if "instructions" not in q:
            raise Reject("schema", f"question {qid}: missing required property 'instructions'", loc)
        if _empty(q["instructions"]) or not isinstance(q["instructions"], (str, dict, list)):
            raise Reject("model", f"question {qid}: instructions must be non-empty", (*loc, "instructions"))
        crit = q.get("criteria")
        if q["type"] == "noul":
            if crit is not None and (not isinstance(crit, dict) or set(crit) - {"true", "false"}):
                raise Reject(
                    "model", f"question {qid}: noul criteria may only have 'true' and 'false'", (*loc, "criteria")
                )
        else:  # choice: {option id: text}, score: [level texts]
            kind, container, low, high = (
                ("options", dict, limits.min_options, limits.max_options)
                if q["type"] == "choice"
                else ("levels", list, limits.min_levels, limits.max_levels)
            )
            if crit is None:
                raise Reject("schema", f"question {qid}: missing required property 'criteria'", loc)
            if not isinstance(crit, container):
                shape = "an object" if container is dict else "an array"
                raise Reject("model", f"question {qid}: {q['type']} criteria must be {shape}", (*loc, "criteria"))
            if not (low <= len(crit) <= high):
                raise Reject("model", f"question {qid}: {low} to {high} {kind} (got {len(crit)})", (*loc, "criteria"))
            if container is dict and any(not str(k).strip() for k in crit):
                raise Reject("model", f"question {qid}: option ids must be non-empty", (*loc, "criteria"))
    images = body.get("images") or []
    if not isinstance(images, list):
        raise Reject("model", "images must be an array", ("images",))
    check_images(images, limits.max_images)
    return body["state"], questions, images


def check_images(images: list, max_images: int) -> None:
    if len(images) > max_images:
        raise Reject("model", f"images: at most {max_images} images (got {len(images)})", ("images",))
    for i, img in enumerate(images):
        if isinstance(img, dict) and {"content_type", "base64"} <= set(img):
            ok = str(img["content_type"]).lower() in ("image/png", "image/jpeg", "image/jpg", "image/webp")
        else:
            ok = isinstance(img, str) and bool(_IMG.match(img))
        if not ok:
            raise Reject("model", "image payload is invalid", ("images", i))


def _gini_confidence(p: np.ndarray) -> float:
    n = len(p)
    return 0.0 if n < 2 else float((np.sum(p**2) - 1.0 / n) / (1.0 - 1.0 / n))


def system_one_answers(questions: dict, probs: dict[str, np.ndarray], *, confidence: str) -> dict:
    """System One answers from probability vectors; ``confidence`` 'gini' (hosted Clef) or 'pmax'."""
    out: dict[str, dict] = {}
    for qid, q in questions.items():
        p = probs[qid]
        if q["type"] == "noul":
            out[qid] = {"type": "noul", "noul": r4(p[0])}
            continue
        conf = _gini_confidence(p) if confidence == "gini" else float(p.max())
        top = int(np.argmax(p))  # ties go to the first option in request order
        if q["type"] == "choice":
            keys = [str(k) for k in q["criteria"]]
            out[qid] = {
                "type": "choice",
                "choice": keys[top],
                "probabilities": {k: r4(v) for k, v in zip(keys, p)},
                "confidence": r4(conf),
            }
        else:
            levels = q["criteria"]
            out[qid] = {
                "type": "score",
                "score": r4(float(np.dot(np.arange(len(p)), p))),
                "legend": {str(i): lv for i, lv in enumerate(levels)},
                "probabilities": {str(i): r4(v) for i, v in enumerate(p)},
                "confidence": r4(conf),
            }
    return out


#: System One error types by status (the 429 is ``quota_exceeded`` for Cloudflare's code 4006).
_ERROR_TYPES = {
    400: "invalid_request",
    401: "authentication_error",
    413: "max_tokens_exceeded",
    429: "rate_limit",
    500: "internal_server_error",
    529: "overloaded",
}
_FIELDS = frozenset({"model", "state", "questions", "images"})


class SystemOne(Dialect):
    """Plain System One; the other System One services subclass it."""

    name = "systemone"
    paths = frozenset({"/v1/systemone", "/v2/systemone", "/api/alpha/decisions"})

    # -- client half -----------------------------------------------------------------------------
    def build_body(self, provider: HttpProvider, request: DecisionRequest) -> dict:
        body: dict[str, Any] = {}
        if provider.model is not None:
            body["model"] = provider.model
        body["state"] = wire_state(request.state)
        body["questions"] = request.schema.to_wire()
        if request.images:
            body["images"] = list(request.images)
        return body

    def render_body(self, provider: HttpProvider, request: DecisionRequest) -> str:
        """:meth:`build_body` as compact JSON, with the ``questions`` text rendered once per schema.

        Same text as ``json.dumps(build_body(request))`` (tests check it).
        """
        parts = [] if provider.model is None else ['"model":' + dumps(provider.model)]
        parts.append('"state":' + dumps(wire_state(request.state)))
        parts.append('"questions":' + provider.schema_facts(request.schema)[0])
        if request.images:
            parts.append('"images":' + dumps(list(request.images)))
        return "{" + ",".join(parts) + "}"

    def to_system_one(
        self, provider: HttpProvider, data: Any, response: httpx.Response, request: DecisionRequest
    ) -> dict:
        if not isinstance(data, dict) or not isinstance(data.get("answers"), dict):
            raise ProviderError(
                ErrorKind.MALFORMED, f"{provider.spec}: response has no 'answers' object", status=response.status_code
            )
        return data

    # -- emulator half ---------------------------------------------------------------------------
    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> Served:
        state, questions, images = validate_system_one(body, CLEF_LIMITS, allowed_fields=_FIELDS)
        return Served(state, questions, images, {"answered_model": body.get("model") or "systemone-emulator"})

    def render_answer(self, a: Answer) -> Reply:
        body = {
            "model": a.ctx["answered_model"],
            "answers": system_one_answers(a.questions, a.probs, confidence="pmax"),
            "usage": {"input_tokens": a.tokens, "output_tokens": 0},
        }
        return 200, body, {"x-request-id": a.rid}

    def render_error(self, e: Error) -> Reply:
        headers = {"x-request-id": e.rid}
        if e.status == 422:
            return 422, {"detail": [{"type": "value_error", "loc": ["body", *e.loc], "msg": e.message}]}, headers
        etype = "quota_exceeded" if e.status == 429 and e.code == 4006 else _ERROR_TYPES.get(e.status, "error")
        return e.status, {"detail": {"error_type": etype, "message": e.message, "code": e.code}}, headers
