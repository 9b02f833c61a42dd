"""Decision schema (System One question map), limit profiles and normalised answers."""

from workbench.schema.answers import NormalisedAnswer, entropy, margin, normalise_answer, p_top, top_two
from workbench.schema.questions import (
    PROFILES,
    Choice,
    DecisionSchema,
    LimitProfile,
    Noul,
    Question,
    Score,
    Violation,
    canonical_json,
    load_schema,
    option_ids,
    schema_hash,
    validate_limits,
)

__all__ = [
    "Choice",
    "DecisionSchema",
    "LimitProfile",
    "Noul",
    "PROFILES",
    "Question",
    "Score",
    "Violation",
    "canonical_json",
    "load_schema",
    "option_ids",
    "schema_hash",
    "validate_limits",
    "NormalisedAnswer",
    "entropy",
    "margin",
    "normalise_answer",
    "p_top",
    "top_two",
]
