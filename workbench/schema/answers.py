"""Normalised answers: re-exported from the dependency-light runtime distribution.

The runtime turns answers into probability vectors exactly as the workbench does when it measures a
run, so both use one implementation (:mod:`workbench_runtime.answers`).
"""

from workbench_runtime.answers import (
    SUM_TOLERANCE,
    NormalisedAnswer,
    entropy,
    margin,
    normalise_answer,
    p_top,
    top_two,
)

__all__ = ["SUM_TOLERANCE", "NormalisedAnswer", "entropy", "margin", "normalise_answer", "p_top", "top_two"]
