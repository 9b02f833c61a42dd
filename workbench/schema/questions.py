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

import json
import re
from dataclasses import dataclass
from pathlib import Path

# The question model, canonical form and hash live in the dependency-light runtime distribution
# (a production service hashes and checks questions exactly as the workbench does); re-exported here.
from workbench_runtime.questions import (  # noqa: F401
    CANONICAL_VERSION,
    Choice,
    DecisionSchema,
    JSONValue,
    Noul,
    Question,
    Score,
    canonical_json,
    option_ids,
    schema_hash,
)

from workbench.errors import SchemaError


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
