"""The policy runtime: re-exported from the dependency-light distribution ``decision-workbench-runtime``.

A production service installs only that distribution (numpy + pydantic) and writes
``from workbench_runtime import Policy``; inside the workbench ``from workbench.policy import Policy``
is the same class.
"""

from workbench_runtime.policy import Policy, QuestionDecision, verify_document

__all__ = ["Policy", "QuestionDecision", "verify_document"]
