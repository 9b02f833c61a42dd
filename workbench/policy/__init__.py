"""Threshold policy files: the versioned contract production code loads.

``from workbench.policy import Policy; Policy.load(path).decide(response)``. The runtime part (model,
JSON Schema, hash and signature checks, ``Policy``) is the separate distribution
``decision-workbench-runtime`` (import package :mod:`workbench_runtime`, numpy + pydantic only);
this package re-exports it and adds the builder (:mod:`workbench.policy.build`) and file tools.
"""

from workbench_runtime import FORMAT_VERSION, SCHEMA_FILE, Policy, QuestionDecision, verify_document

__all__ = ["Policy", "QuestionDecision", "verify_document", "FORMAT_VERSION", "SCHEMA_FILE"]
