"""Policy file format: re-exported from the dependency-light runtime distribution.

The model, its JSON Schema (``policy.schema.json``) and the canonical hash live in
:mod:`workbench_runtime.model`, so a production service validates a file exactly as the workbench
writes it. Regenerate the shipped schema after changing the model: ``python -m workbench_runtime.model``.
"""

from workbench_runtime.model import (
    FALLBACK_ACTIONS,
    FORMAT,
    FORMAT_VERSION,
    SCHEMA_FILE,
    CalibratorSpec,
    ClassOverride,
    DatasetSpec,
    Fallback,
    Interval,
    NoulTwoSidedRule,
    Objective,
    Policy,
    QuestionPolicy,
    RuleSpec,
    SchemaSpec,
    ScoreLevelRule,
    Source,
    TestMetrics,
    Threshold,
    TopMarginRule,
    Validity,
    canonical_json,
    content_hash,
    json_schema,
    semver_tuple,
)

__all__ = [
    "FALLBACK_ACTIONS",
    "FORMAT",
    "FORMAT_VERSION",
    "SCHEMA_FILE",
    "CalibratorSpec",
    "ClassOverride",
    "DatasetSpec",
    "Fallback",
    "Interval",
    "NoulTwoSidedRule",
    "Objective",
    "Policy",
    "QuestionPolicy",
    "RuleSpec",
    "SchemaSpec",
    "ScoreLevelRule",
    "Source",
    "TestMetrics",
    "Threshold",
    "TopMarginRule",
    "Validity",
    "canonical_json",
    "content_hash",
    "json_schema",
    "semver_tuple",
]
