"""Threshold policy files: the versioned contract production code loads.

``from workbench.policy import Policy; Policy.load(path).decide(response)`` — a small runtime that
imports numpy and pydantic only (see :mod:`workbench.policy.runtime`).
"""

from workbench.policy.model import FORMAT_VERSION, SCHEMA_FILE
from workbench.policy.runtime import Policy, QuestionDecision, verify_document

__all__ = ["Policy", "QuestionDecision", "verify_document", "FORMAT_VERSION", "SCHEMA_FILE"]
