"""OpenAI Decisions dialect (providers.md §3.7), translated both ways to the shared System One schema.

Request: ``{model, input, questions: [...]}`` where each question is ``predicate`` (our ``noul``;
true/false criteria are appended to the instructions so their meaning reaches the model),
``choice`` with ``choices: [{value, description?}]`` or ``score`` with ``levels: [{label,
description?}]``; the question id travels as ``name``. Images become ``input_image`` parts of
one user message. Response: ``answers`` is an **array in question order**; each answer is
matched back by ``name`` (by position when unnamed). ``{"type": "refusal"}`` becomes a
``refused`` failure for that question only, never a probability.
"""

from __future__ import annotations

from typing import Any

import httpx

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
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


class OpenAIDecisionsProvider(HttpProvider):
    """``POST /v1/decisions`` with a Bearer key; see the module docstring for the translation."""

    dialect = "openai"

    def build_body(self, request: DecisionRequest) -> dict:
        text = render_state(request.state) if request.state is not None else ""
        if request.images:
            parts: list[dict] = [{"type": "input_text", "text": text}] if text else []
            parts += [{"type": "input_image", "image_url": img} for img in request.images]
            inp: Any = [{"role": "user", "content": parts}]
        else:
            inp = text
        return {"model": self.model, "input": inp, "questions": to_openai_questions(request.schema.to_wire())}

    def to_system_one(self, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
        if not isinstance(data, dict):
            raise ProviderError(ErrorKind.MALFORMED, f"{self.spec}: response is not an object")
        answers = from_openai_answers(request.schema.to_wire(), data.get("answers"))
        usage: dict = data["usage"] if isinstance(data.get("usage"), dict) else {}
        return {
            "model": data.get("model"),
            "answers": answers,
            "usage": {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens", 0)},
        }
