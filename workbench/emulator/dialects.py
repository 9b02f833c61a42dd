"""The decision dialects the emulator speaks: request validation and answer rendering per route.

System One (Cloudflare Clef, plain System One, Perplexity), OpenAI Decisions and Vercel's
evaluation-model; limits come from :data:`workbench.schema.questions.PROFILES` so that client
validation and the emulated service cannot drift apart.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.schema.questions import PROFILES

#: Routes (all on one port).
CF_ROUTE = re.compile(r"^/client/v4/accounts/([^/]+)/ai/run/@cf/cloudflare/([^/]+)$")
SYSTEMONE_PATHS = {"/v1/systemone", "/v2/systemone", "/api/alpha/decisions"}
VERCEL_PATHS = {"/v4/ai/evaluation-model", "/api/v1/evaluations"}
CF_MODELS = {"clef", "clef-flash"}

# ------------------------------------------------------------------------------------------------
# Validation (shared System One rules; limits per route)
# ------------------------------------------------------------------------------------------------
_ID = re.compile(f"^{PROFILES['cloudflare-clef'].id_pattern}$")
_IMG = re.compile(r"^data:image/(png|jpeg|jpg|webp);base64,([A-Za-z0-9+/=\s]*)$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Limits:
    max_questions: int = 64
    min_options: int = 2
    max_options: int = 255
    min_levels: int = 2
    max_levels: int = 10
    max_images: int = 4

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
PERPLEXITY_LIMITS = Limits.from_profile("perplexity", max_images=8)


class Reject(Exception):
    """A request refused by validation: ``kind`` is 'schema' (400/5006) or 'model' (422/5012)."""

    def __init__(self, kind: str, message: str, loc: tuple = ()):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.loc = loc


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
        elif q["type"] == "choice":
            if crit is None:
                raise Reject("schema", f"question {qid}: missing required property 'criteria'", loc)
            if not isinstance(crit, dict):
                raise Reject("model", f"question {qid}: choice criteria must be an object", (*loc, "criteria"))
            if not (limits.min_options <= len(crit) <= limits.max_options):
                raise Reject(
                    "model",
                    f"question {qid}: {limits.min_options} to {limits.max_options} options (got {len(crit)})",
                    (*loc, "criteria"),
                )
            if any(not str(k).strip() for k in crit):
                raise Reject("model", f"question {qid}: option ids must be non-empty", (*loc, "criteria"))
        else:
            if crit is None:
                raise Reject("schema", f"question {qid}: missing required property 'criteria'", loc)
            if not isinstance(crit, list):
                raise Reject("model", f"question {qid}: score criteria must be an array", (*loc, "criteria"))
            if not (limits.min_levels <= len(crit) <= limits.max_levels):
                raise Reject(
                    "model",
                    f"question {qid}: {limits.min_levels} to {limits.max_levels} levels (got {len(crit)})",
                    (*loc, "criteria"),
                )
    images = body.get("images") or []
    if not isinstance(images, list):
        raise Reject("model", "images must be an array", ("images",))
    check_images(images, limits)
    return body["state"], questions, images


def check_images(images: list, limits: Limits) -> None:
    if len(images) > limits.max_images:
        raise Reject("model", f"images: at most {limits.max_images} images (got {len(images)})", ("images",))
    for i, img in enumerate(images):
        if isinstance(img, dict) and {"content_type", "base64"} <= set(img):
            ok = str(img["content_type"]).lower() in ("image/png", "image/jpeg", "image/jpg", "image/webp")
        else:
            ok = isinstance(img, str) and bool(_IMG.match(img))
        if not ok:
            raise Reject("model", "image payload is invalid", ("images", i))


# ------------------------------------------------------------------------------------------------
# Answer rendering per dialect
# ------------------------------------------------------------------------------------------------
def _r4(x: float) -> float:
    return round(float(x), 4)


def _gini_confidence(p: np.ndarray) -> float:
    n = len(p)
    return 0.0 if n < 2 else float((np.sum(p**2) - 1.0 / n) / (1.0 - 1.0 / n))


def system_one_answers(questions: dict, probs: dict[str, np.ndarray], *, confidence: str) -> dict:
    """System One answers from probability vectors; ``confidence`` 'gini' (hosted Clef) or 'pmax'."""
    out: dict[str, dict] = {}
    for qid, q in questions.items():
        p = probs[qid]
        if q["type"] == "noul":
            out[qid] = {"type": "noul", "noul": _r4(p[0])}
            continue
        conf = _gini_confidence(p) if confidence == "gini" else float(p.max())
        top = int(np.argmax(p))  # ties go to the first option in request order
        if q["type"] == "choice":
            keys = [str(k) for k in q["criteria"]]
            out[qid] = {
                "type": "choice",
                "choice": keys[top],
                "probabilities": {k: _r4(v) for k, v in zip(keys, p)},
                "confidence": _r4(conf),
            }
        else:
            levels = q["criteria"]
            out[qid] = {
                "type": "score",
                "score": _r4(float(np.dot(np.arange(len(p)), p))),
                "legend": {str(i): lv for i, lv in enumerate(levels)},
                "probabilities": {str(i): _r4(v) for i, v in enumerate(p)},
                "confidence": _r4(conf),
            }
    return out


def peek_model(body: bytes) -> str | None:
    m = re.search(rb'"model"\s*:\s*"([^"\\]{1,200})"', body[:4096])
    return m.group(1).decode("utf-8", "replace") if m else None


# -- OpenAI Decisions ------------------------------------------------------------------------------
def parse_openai(body: Any) -> tuple[Any, dict, list, dict]:
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
        raise Reject("schema", "model is required", ("model",))
    if "input" not in body:
        raise Reject("schema", "input is required", ("input",))
    unknown = sorted(set(body) - {"model", "input", "questions", "safety_identifier"})
    if unknown:
        raise Reject("schema", f"Unrecognized request argument supplied: {unknown[0]}", (unknown[0],))
    state, images = _openai_input(body["input"])
    qs = body["questions"]
    if not qs:
        raise Reject("schema", "questions must be a non-empty array", ("questions",))
    questions: dict[str, dict] = {}
    values: dict[str, list] = {}
    names: list[str | None] = []
    for i, q in enumerate(qs):
        loc = ("questions", i)
        if not isinstance(q, dict) or q.get("type") not in ("predicate", "choice", "score"):
            raise Reject("schema", f"questions[{i}].type must be predicate, choice or score", loc)
        instr = q.get("instructions")
        if not isinstance(instr, str) or not instr.strip():
            raise Reject("schema", f"questions[{i}].instructions must be a non-empty string", (*loc, "instructions"))
        name = q.get("name")
        qid = name if isinstance(name, str) and name else f"q{i}"
        if qid in questions:
            raise Reject("schema", f"questions[{i}].name {qid!r} is not unique", (*loc, "name"))
        names.append(name if isinstance(name, str) else None)
        if q["type"] == "predicate":
            questions[qid] = {"type": "noul", "instructions": instr}
        elif q["type"] == "choice":
            choices = q.get("choices")
            if not isinstance(choices, list) or not (2 <= len(choices) <= 255):
                raise Reject("schema", f"questions[{i}].choices must hold 2 to 255 entries", (*loc, "choices"))
            vals = [c.get("value") if isinstance(c, dict) else None for c in choices]
            if any(not isinstance(v, (str, bool)) or v == "" for v in vals):
                raise Reject("schema", f"questions[{i}].choices[].value must be a string or boolean", (*loc, "choices"))
            keys = [f"{type(v).__name__}:{v}" for v in vals]  # "true" and True are distinct values
            if len(set(keys)) != len(keys):
                raise Reject("schema", f"questions[{i}].choices values must be unique", (*loc, "choices"))
            questions[qid] = {
                "type": "choice",
                "instructions": instr,
                "criteria": {
                    f"{v}" if isinstance(v, str) else str(v).lower(): c.get("description")
                    for v, c in zip(vals, choices)
                },
            }
            if len(questions[qid]["criteria"]) != len(vals):  # "true" and True both present
                questions[qid]["criteria"] = {k: c.get("description") for k, c in zip(keys, choices)}
            values[qid] = vals
        else:
            levels = q.get("levels")
            if not isinstance(levels, list) or not (2 <= len(levels) <= 10):
                raise Reject("schema", f"questions[{i}].levels must hold 2 to 10 entries", (*loc, "levels"))
            if any(not isinstance(lv, dict) or not isinstance(lv.get("label"), str) for lv in levels):
                raise Reject("schema", f"questions[{i}].levels[].label must be a string", (*loc, "levels"))
            questions[qid] = {
                "type": "score",
                "instructions": instr,
                "criteria": [
                    f"{lv['label']}: {lv['description']}" if lv.get("description") else lv["label"] for lv in levels
                ],
            }
            values[qid] = [lv["label"] for lv in levels]
    return (
        state,
        questions,
        images,
        {"answered_model": body["model"], "values": values, "names": names, "types": [q["type"] for q in qs]},
    )


def _openai_input(inp: Any) -> tuple[Any, list]:
    if isinstance(inp, str):
        return inp, []
    if not isinstance(inp, list) or not inp:
        raise Reject("schema", "input must be a string or a non-empty array of messages", ("input",))
    texts, images = [], []
    for m in inp:
        if not isinstance(m, dict) or m.get("role") not in ("user", "system", "developer"):
            raise Reject("schema", "input messages need a role", ("input",))
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            if isinstance(part, dict) and part.get("type") == "input_text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, dict) and part.get("type") == "input_image":
                images.append(part.get("image_url"))
            else:
                raise Reject("schema", "unsupported input part", ("input",))
    if len(images) > 128:
        raise Reject("schema", "at most 128 images", ("input",))
    check_images(images, Limits(max_images=128))
    return "\n\n".join(texts), images


def render_openai(
    ctx: dict, questions: dict, probs: dict[str, np.ndarray], tokens: int, rng: random.Random, refusal: float
) -> dict:
    answers = []
    for (qid, q), name in zip(questions.items(), ctx["names"]):
        p = probs[qid]
        if refusal > 0 and rng.random() < refusal:
            answers.append({"type": "refusal", "name": name})
            continue
        if q["type"] == "noul":
            answers.append({"type": "predicate", "name": name, "probability": _r4(p[0])})
            continue
        vals = ctx["values"][qid]
        top = int(np.argmax(p))
        if q["type"] == "choice":
            answers.append(
                {
                    "type": "choice",
                    "name": name,
                    "choice": vals[top],
                    "confidence": _r4(p.max()),
                    "probabilities": [{"value": v, "probability": _r4(x)} for v, x in zip(vals, p)],
                }
            )
        else:
            answers.append(
                {
                    "type": "score",
                    "name": name,
                    "score": _r4(float(np.dot(np.arange(len(p)), p))),
                    "confidence": _r4(p.max()),
                    "probabilities": [
                        {"label": v, "probability": _r4(x), "value": i} for i, (v, x) in enumerate(zip(vals, p))
                    ],
                }
            )
    return {
        "model": f"{ctx['answered_model']}-2026-09-14",
        "answers": answers,
        "usage": {
            "input_tokens": tokens,
            "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens,
        },
    }


# -- Vercel evaluation-model -----------------------------------------------------------------------
def parse_vercel(headers: Mapping[str, str], body: Any) -> tuple[Any, dict, list, dict]:
    if headers.get("ai-gateway-protocol-version") != "0.0.1":
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
