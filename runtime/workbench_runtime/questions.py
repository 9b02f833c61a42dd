"""System One question map: typed questions, canonical form and hash (the runtime's part of the schema layer).

A schema file is YAML or JSON in exactly the System One shape, so its ``questions`` can be pasted
into a request::

    name: banking77-intent          # optional, not sent
    description: ...                # optional, not sent
    questions:
      intent:
        type: choice
        instructions: Which intent does the customer message express?
        criteria: {card_arrival: "The customer asks when their card will arrive", ...}

``workbench.schema`` re-exports these and adds file loading (YAML) and provider limit profiles.

Option order matters: the canonical form keeps the order of choice options and score levels,
because position-sensitive models answer differently when it changes (peers.md). Question order
and formatting do not change :func:`schema_hash`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from workbench_runtime.errors import SchemaError

JSONValue = str | int | float | bool | None | dict | list

#: Canonical-form version: bump when :func:`canonical_json` changes, so old hashes are not mixed.
CANONICAL_VERSION = 1


def _non_empty(value: Any) -> Any:
    if (
        value is None
        or (isinstance(value, (str, list, dict)) and len(value) == 0)
        or (isinstance(value, str) and not value.strip())
    ):
        raise ValueError("instructions must be a non-empty string (or JSON object/array)")
    return value


class _Question(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    instructions: str | dict | list

    @field_validator("instructions")
    @classmethod
    def _instructions_not_empty(cls, v: Any) -> Any:
        return _non_empty(v)


class Noul(_Question):
    """Yes/no question; answers are ``[P(yes), P(no)]``."""

    type: Literal["noul"] = "noul"
    criteria: dict[Literal["true", "false"], JSONValue] | None = None


class Choice(_Question):
    """Named options (option id -> description or null), in the order they are sent."""

    type: Literal["choice"] = "choice"
    criteria: dict[str, JSONValue]

    @field_validator("criteria")
    @classmethod
    def _option_ids_not_empty(cls, v: dict) -> dict:
        for key in v:
            if not str(key).strip():
                raise ValueError("choice option ids must be non-empty strings")
        return v


class Score(_Question):
    """Ordered levels, level 0 (lowest) first."""

    type: Literal["score"] = "score"
    criteria: list[JSONValue]


Question = Annotated[Noul | Choice | Score, Field(discriminator="type")]
_questions_adapter = TypeAdapter(dict[str, Question])


class DecisionSchema(BaseModel):
    """A named System One question map. ``questions`` keeps the file's order (it is what is sent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str | None = None
    description: str | None = None
    questions: dict[str, Question] = Field(min_length=1)

    # -- derived views -------------------------------------------------------------------------
    @property
    def question_ids(self) -> list[str]:
        return list(self.questions)

    def to_wire(self, question_ids: list[str] | None = None) -> dict[str, dict]:
        """The ``questions`` object exactly as sent, in file order (optionally a slice)."""
        ids = self.question_ids if question_ids is None else question_ids
        out: dict[str, dict] = {}
        for qid in ids:
            q = self.questions[qid]
            body: dict[str, Any] = {"type": q.type, "instructions": q.instructions}
            if q.criteria is not None:
                body["criteria"] = q.criteria
            out[qid] = body
        return out

    def to_file_dict(self) -> dict:
        d: dict[str, Any] = {}
        if self.name:
            d["name"] = self.name
        if self.description:
            d["description"] = self.description
        d["questions"] = self.to_wire()
        return d

    def subset(self, question_ids: list[str]) -> DecisionSchema:
        return DecisionSchema(
            name=self.name, description=self.description, questions={q: self.questions[q] for q in question_ids}
        )

    @property
    def hash(self) -> str:
        return schema_hash(self)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<schema>") -> DecisionSchema:
        if not isinstance(data, dict):
            raise SchemaError(
                f"{source}: a schema must be a mapping with a 'questions' key",
                hint="see experiments/schemas/*.yaml for the shape",
            )
        data = {k: v for k, v in data.items() if k not in ("model", "state")}
        if "questions" not in data:
            raise SchemaError(
                f"{source}: no 'questions' key", hint="put the System One question map under 'questions:'"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SchemaError(
                f"{source}: {_describe_validation_error(exc)}", hint="fix the field named above"
            ) from None


def _describe_validation_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    # ids may hold any character (a newline would break the one-line message): odd ones are quoted
    loc = ".".join(str(p) if re.fullmatch(r"[\w.-]+", str(p)) else repr(str(p)) for p in err["loc"])
    msg = err["msg"]
    if err["type"] == "union_tag_invalid":
        msg = "unknown question type; use one of noul, choice, score"
    elif err["type"] == "union_tag_not_found":
        msg = "question has no 'type'; use one of noul, choice, score"
    extra = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{loc}: {msg}{extra}"


# -- option ids --------------------------------------------------------------------------------
def option_ids(question: Noul | Choice | Score) -> list[str]:
    """Option ids in schema order: noul -> ``["yes", "no"]``; score -> ``["0", "1", ...]``."""
    if question.type == "noul":
        return ["yes", "no"]
    if question.type == "choice":
        return [str(k) for k in question.criteria]
    return [str(i) for i in range(len(question.criteria))]


# -- canonical form and hash --------------------------------------------------------------------
def _canonical_question(q: Noul | Choice | Score) -> dict:
    body: dict[str, Any] = {"type": q.type, "instructions": q.instructions}
    if q.type == "choice":
        # list of pairs: json sort_keys must not reorder options
        body["criteria"] = [[str(k), v] for k, v in q.criteria.items()]
    elif q.criteria is not None:
        body["criteria"] = q.criteria
    return body


def canonical_json(schema: DecisionSchema) -> str:
    """Canonical text of what is sent: question order and field order folded, option order kept."""
    doc = {
        "v": CANONICAL_VERSION,
        "questions": [[qid, _canonical_question(schema.questions[qid])] for qid in sorted(schema.questions)],
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schema_hash(schema: DecisionSchema) -> str:
    """sha256 hex digest of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()
