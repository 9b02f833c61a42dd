"""Decision Workbench runtime: load a verified policy file and turn decision-model answers into actions.

Install it alone in a production service (dependencies: numpy and pydantic)::

    pip install decision-workbench-runtime

    from workbench_runtime import Policy
    policy = Policy.load("policy.json")          # fails closed on a corrupt/tampered/newer file
    decisions = policy.decide(response)           # {question id: QuestionDecision}
    decisions["intent"].action                    # "accept" or the fallback ("review")

    # optional: an append-only decision log for `workbench monitor`
    log = DecisionLog("logs/decisions.jsonl")
    decisions = policy.decide(response, decision_id="req-8812", log=log)

Every error is a :class:`WorkbenchError` (``PolicyError`` for files) with a one-line message.
"""

from workbench_runtime.decision_log import DecisionLog, read_decision_log
from workbench_runtime.errors import AnswerError, CalibrationFitError, PolicyError, SchemaError, WorkbenchError
from workbench_runtime.model import FORMAT_VERSION, SCHEMA_FILE, json_schema
from workbench_runtime.policy import Policy, QuestionDecision, verify_document

__version__ = "0.1.0"

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
