"""OpenAI Decisions (providers.md §3.7), translated both ways to the shared System One schema.

Request: ``{model, input, questions: [...]}`` where each question is ``predicate`` (our ``noul``;
true/false criteria are appended to the instructions so their meaning reaches the model),
``choice`` with ``choices: [{value, description?}]`` or ``score`` with ``levels: [{label,
description?}]``; the question id travels as ``name``. Images become ``input_image`` parts of
one user message. Response: ``answers`` is an **array in question order**; each answer is
matched back by ``name`` (by position when unnamed). ``{"type": "refusal"}`` becomes a
``refused`` failure for that question only, never a probability. Errors are
``{"error": {message, type, param, code}}``. Perplexity shares the path ``/v1/decisions``; a
``questions`` array is OpenAI's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import numpy as np

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.dialects.base import Answer, Dialect, Error, Reject, Reply, Served, error_object, r4
from workbench.providers.dialects.systemone import check_images
from workbench.providers.http import HttpProvider
from workbench.providers.tokens import render_state

#: Score level texts up to this length are sent as the level ``label``; longer ones as ``description``.
MAX_LABEL_CHARS = 64


def to_openai_questions(questions_wire: dict[str, dict]) -> list[dict]:
    """System One question map → OpenAI ``questions`` array (same order)."""
    out: list[dict[str, Any]] = []
    for qid, q in questions_wire.items():
        instr = render_state(q["instructions"])
        crit: Any = q.get("criteria")  # noul: optional {true, false}; choice: {id: text}; score: [levels]
        if q["type"] == "noul":
            if crit:
                extra = [
                    f"Yes means: {render_state(crit['true'])}" if crit.get("true") is not None else "",
                    f"No means: {render_state(crit['false'])}" if crit.get("false") is not None else "",
                ]
                instr = "\n".join([instr, *[e for e in extra if e]])
            out.append({"type": "predicate", "name": qid, "instructions": instr})
        elif q["type"] == "choice":
            choices = []
            for value, desc in crit.items():
                c: dict[str, Any] = {"value": str(value)}
                if desc is not None:
                    c["description"] = render_state(desc)
                choices.append(c)
            out.append({"type": "choice", "name": qid, "instructions": instr, "choices": choices})
        else:
            levels = []
            for i, level in enumerate(crit):
                text = render_state(level)
                levels.append(
                    {"label": text} if len(text) <= MAX_LABEL_CHARS else {"label": f"level {i}", "description": text}
                )
            out.append({"type": "score", "name": qid, "instructions": instr, "levels": levels})
    return out


def from_openai_answers(questions_wire: dict[str, dict], answers: Any) -> dict[str, dict]:
    """OpenAI ``answers`` array → System One answers keyed by question id.

    Raises :class:`ProviderError` (malformed) when ``answers`` is not an array.
    """
    if not isinstance(answers, list):
        raise ProviderError(ErrorKind.MALFORMED, "response 'answers' is not an array")
    ids = list(questions_wire)
    out: dict[str, dict] = {}
    for pos, a in enumerate(answers):
        if not isinstance(a, dict):
            continue
        name = a.get("name")
        qid = name if isinstance(name, str) and name in questions_wire else (ids[pos] if pos < len(ids) else None)
        if qid is None or qid in out:
            continue
        atype = a.get("type")
        if atype == "refusal":
            out[qid] = {"type": "refusal"}
        elif atype == "predicate":
            out[qid] = {"type": "noul", "noul": a.get("probability")}
        elif atype == "choice":
            probs = {
                str(p.get("value")).lower() if isinstance(p.get("value"), bool) else str(p.get("value")): p.get(
                    "probability"
                )
                for p in a.get("probabilities") or []
                if isinstance(p, dict)
            }
            out[qid] = {
                "type": "choice",
                "choice": str(a.get("choice")),
                "probabilities": probs,
                "confidence": a.get("confidence"),
            }
        elif atype == "score":
            labels = [lv["label"] for lv in to_openai_questions({qid: questions_wire[qid]})[0]["levels"]]
            probs = {}
            for p in a.get("probabilities") or []:
                if not isinstance(p, dict):
                    continue
                idx = p.get("value")
                if not isinstance(idx, int) or isinstance(idx, bool):
                    idx = labels.index(p.get("label")) if p.get("label") in labels else None
                if idx is not None:
                    probs[str(idx)] = p.get("probability")
            out[qid] = {
                "type": "score",
                "score": a.get("score"),
                "probabilities": probs,
                "confidence": a.get("confidence"),
            }
        else:
            out[qid] = {"type": str(atype)}  # normalise_answer reports the mismatch as malformed
    return out


# -- the emulated service ------------------------------------------------------------------------
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
    check_images(images, 128)
    return "\n\n".join(texts), images


def render_openai(a: Answer) -> dict:
    ctx, questions, probs, tokens, rng, refusal = a.ctx, a.questions, a.probs, a.tokens, a.rng, a.refusal
    answers = []
    for (qid, q), name in zip(questions.items(), ctx["names"]):
        p = probs[qid]
        if refusal > 0 and rng.random() < refusal:
            answers.append({"type": "refusal", "name": name})
            continue
        if q["type"] == "noul":
            answers.append({"type": "predicate", "name": name, "probability": r4(p[0])})
            continue
        vals = ctx["values"][qid]
        top = int(np.argmax(p))
        if q["type"] == "choice":
            answers.append(
                {
                    "type": "choice",
                    "name": name,
                    "choice": vals[top],
                    "confidence": r4(p.max()),
                    "probabilities": [{"value": v, "probability": r4(x)} for v, x in zip(vals, p)],
                }
            )
        else:
            answers.append(
                {
                    "type": "score",
                    "name": name,
                    "score": r4(float(np.dot(np.arange(len(p)), p))),
                    "confidence": r4(p.max()),
                    "probabilities": [
                        {"label": v, "probability": r4(x), "value": i} for i, (v, x) in enumerate(zip(vals, p))
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


class OpenAIDecisions(Dialect):
    """``POST /v1/decisions`` with a Bearer key; see the module docstring for the translation."""

    name = "openai"
    paths = frozenset({"/v1/decisions"})

    # -- client half -----------------------------------------------------------------------------
    def build_body(self, provider: HttpProvider, request: DecisionRequest) -> dict:
        text = render_state(request.state) if request.state is not None else ""
        if request.images:
            parts: list[dict] = [{"type": "input_text", "text": text}] if text else []
            parts += [{"type": "input_image", "image_url": img} for img in request.images]
            inp: Any = [{"role": "user", "content": parts}]
        else:
            inp = text
        return {"model": provider.model, "input": inp, "questions": to_openai_questions(request.schema.to_wire())}

    def to_system_one(
        self, provider: HttpProvider, data: Any, response: httpx.Response, request: DecisionRequest
    ) -> dict:
        if not isinstance(data, dict):
            raise ProviderError(ErrorKind.MALFORMED, f"{provider.spec}: response is not an object")
        answers = from_openai_answers(request.schema.to_wire(), data.get("answers"))
        usage: dict = data["usage"] if isinstance(data.get("usage"), dict) else {}
        return {
            "model": data.get("model"),
            "answers": answers,
            "usage": {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens", 0)},
        }

    # -- emulator half ---------------------------------------------------------------------------
    def claims(self, body: Any) -> bool:
        return isinstance(body, dict) and isinstance(body.get("questions"), list)

    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> Served:
        return Served(*parse_openai(body))

    def render_answer(self, a: Answer) -> Reply:
        return 200, render_openai(a), {"x-request-id": a.rid}

    def render_error(self, e: Error) -> Reply:
        err = {**error_object(e.status, e.code, e.message), "param": ".".join(map(str, e.loc)) or None}
        return e.status, {"error": err}, {"x-request-id": e.rid}
