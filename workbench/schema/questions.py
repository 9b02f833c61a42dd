"""System One question map: typed questions, limit profiles, canonical form and hash.

A schema file is YAML or JSON in exactly the System One shape, so its ``questions`` can be pasted
into a request::

    name: banking77-intent          # optional, not sent
    description: ...                # optional, not sent
    questions:
      intent:
        type: choice
        instructions: Which intent does the customer message express?
        criteria: {card_arrival: "The customer asks when their card will arrive", ...}

Option order matters: the canonical form keeps the order of choice options and score levels,
because position-sensitive models answer differently when it changes (peers.md). Question order
and formatting do not change :func:`schema_hash`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from workbench.errors import SchemaError

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
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"]
    if err["type"] == "union_tag_invalid":
        msg = "unknown question type; use one of noul, choice, score"
    elif err["type"] == "union_tag_not_found":
        msg = "question has no 'type'; use one of noul, choice, score"
    extra = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{loc}: {msg}{extra}"


def load_schema(path: str | Path) -> DecisionSchema:
    """Read a YAML or JSON schema file. Raises :class:`SchemaError` naming the file and field."""
    path = Path(path)
    if not path.exists():
        raise SchemaError(f"{path}: schema file does not exist", hint="check the path")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not valid UTF-8 (byte {exc.start})", hint="save the file as UTF-8") from None
    try:
        import yaml  # here, so the policy runtime (which never reads YAML) does not load it

        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SchemaError(
            f"{path}: cannot parse: {str(exc).splitlines()[0]}", hint="fix the YAML/JSON syntax"
        ) from None
    return DecisionSchema.from_dict(data, source=str(path))


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


# -- limit profiles -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LimitProfile:
    """What one provider family accepts in one request (providers.md §1, §3)."""

    name: str
    max_questions: int | None
    min_options: int
    max_options: int | None
    min_levels: int
    max_levels: int | None
    id_pattern: str | None = r"[A-Za-z0-9_.-]{1,100}"
    max_total_options: int | None = None


PROFILES: dict[str, LimitProfile] = {
    p.name: p
    for p in [
        LimitProfile("cloudflare-clef", 64, 2, 255, 2, 10),
        LimitProfile("typesafe-jev", None, 2, 255, 2, 10),
        LimitProfile("perplexity", 128, 1, 255, 1, 10),
        LimitProfile("laya", 64, 2, 100, 1, 32, max_total_options=512),
        LimitProfile("subq", 128, 2, 255, 2, 10),
        LimitProfile("openai", 200, 2, 255, 2, 10),
        LimitProfile("self-hosted", None, 1, None, 1, None, id_pattern=None),
        # Strictest common profile: a schema valid here is accepted by every family above.
        LimitProfile("default", 64, 2, 100, 2, 10, max_total_options=512),
    ]
}


@dataclass(frozen=True)
class Violation:
    question_id: str | None
    field: str
    message: str
    limit: str

    def __str__(self) -> str:
        where = f"question {self.question_id!r}" if self.question_id else "schema"
        return f"{where}: {self.field}: {self.message} (limit: {self.limit})"


def validate_limits(schema: DecisionSchema, profile: str | LimitProfile = "default") -> list[Violation]:
    """Every way ``schema`` breaks ``profile``; an empty list means it is accepted."""
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise SchemaError(f"unknown limit profile {profile!r}", hint=f"use one of {', '.join(sorted(PROFILES))}")
        profile = PROFILES[profile]
    out: list[Violation] = []
    n_q = len(schema.questions)
    if profile.max_questions is not None and n_q > profile.max_questions:
        out.append(Violation(None, "questions", f"{n_q} questions", f"{profile.name}: at most {profile.max_questions}"))
    total = 0
    for qid, q in schema.questions.items():
        if profile.id_pattern and not re.fullmatch(profile.id_pattern, qid):
            out.append(
                Violation(
                    qid,
                    "id",
                    "id must be letters, digits, '_', '.', '-' and at most 100 characters",
                    f"{profile.name}: {profile.id_pattern}",
                )
            )
        if q.type == "choice":
            n = len(q.criteria)
            total += n
            if n < profile.min_options or (profile.max_options is not None and n > profile.max_options):
                out.append(
                    Violation(
                        qid,
                        "criteria",
                        f"{n} options",
                        f"{profile.name}: {profile.min_options}–{profile.max_options or '∞'} options",
                    )
                )
            if profile.id_pattern is not None:
                bad = [k for k in q.criteria if not str(k).strip()]
                if bad:
                    out.append(Violation(qid, "criteria", "empty option id", "non-empty option ids"))
        elif q.type == "score":
            n = len(q.criteria)
            total += n
            if n < profile.min_levels or (profile.max_levels is not None and n > profile.max_levels):
                out.append(
                    Violation(
                        qid,
                        "criteria",
                        f"{n} levels",
                        f"{profile.name}: {profile.min_levels}–{profile.max_levels or '∞'} levels",
                    )
                )
        else:
            total += 2
    if profile.max_total_options is not None and total > profile.max_total_options:
        out.append(
            Violation(
                None, "criteria", f"{total} options in total", f"{profile.name}: at most {profile.max_total_options}"
            )
        )
    return out


def check_limits(schema: DecisionSchema, profile: str | LimitProfile = "default", *, source: str = "schema") -> None:
    """Raise :class:`SchemaError` with the first violation (and a count of the others)."""
    violations = validate_limits(schema, profile)
    if violations:
        more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
        raise SchemaError(
            f"{source}: {violations[0]}{more}", hint="change the schema or pick the provider's own --profile"
        )
