"""Decision Workbench runtime: load a verified policy file and turn decision-model answers into actions.

Install it alone in a production service (dependencies: numpy and pydantic)::

    pip install ./runtime              # from a checkout of the workbench repository

    from workbench_runtime import Policy
    policy = Policy.load("policy.json")          # fails closed on a corrupt/tampered/newer file
    decisions = policy.decide(response)           # {question id: QuestionDecision}
    decisions["intent"].action                    # "accept" or the fallback ("review")

    # optional: an append-only decision log for `workbench monitor`
    log = DecisionLog("logs/decisions.jsonl")
    decisions = policy.decide(response, decision_id="req-8812", log=log)

Every error is a :class:`WorkbenchError` (``PolicyError`` for files) with a one-line message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench_runtime.errors import AnswerError, CalibrationFitError, PolicyError, SchemaError, WorkbenchError

if TYPE_CHECKING:
    from workbench_runtime.decision_log import DecisionLog, read_decision_log
    from workbench_runtime.model import FORMAT_VERSION, SCHEMA_FILE, json_schema
    from workbench_runtime.policy import Policy, QuestionDecision, verify_document

__version__ = "0.1.0"

# numpy and pydantic load with the first of these names, not with the package: the error classes
# (``workbench_runtime.errors``, which ``workbench.errors`` builds on) cost nothing to import.
_LAZY = {
    "DecisionLog": "workbench_runtime.decision_log",
    "read_decision_log": "workbench_runtime.decision_log",
    "FORMAT_VERSION": "workbench_runtime.model",
    "SCHEMA_FILE": "workbench_runtime.model",
    "json_schema": "workbench_runtime.model",
    "Policy": "workbench_runtime.policy",
    "QuestionDecision": "workbench_runtime.policy",
    "verify_document": "workbench_runtime.policy",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'workbench_runtime' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Policy",
    "DecisionLog",
    "read_decision_log",
    "QuestionDecision",
    "verify_document",
    "json_schema",
    "FORMAT_VERSION",
    "SCHEMA_FILE",
    "WorkbenchError",
    "PolicyError",
    "SchemaError",
    "AnswerError",
    "CalibrationFitError",
]
