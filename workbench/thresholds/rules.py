"""Routing rules: re-exported from the dependency-light runtime distribution.

The threshold search (:mod:`workbench.thresholds.surface`) and the production runtime must take
exactly the same decisions, so both use one implementation (:mod:`workbench_runtime.rules`).
"""

from workbench_runtime.rules import (
    DEFAULT_FALLBACK,
    ChoiceRule,
    ClassThreshold,
    Decisions,
    NoulRule,
    Rule,
    RuleCoordinates,
    RuleKind,
    ScoreRule,
    make_rule,
    rule_coordinates,
    score_level_features,
    top_two_fast,
)

__all__ = [
    "DEFAULT_FALLBACK",
    "ChoiceRule",
    "ClassThreshold",
    "Decisions",
    "NoulRule",
    "Rule",
    "RuleCoordinates",
    "RuleKind",
    "ScoreRule",
    "make_rule",
    "rule_coordinates",
    "score_level_features",
    "top_two_fast",
]
