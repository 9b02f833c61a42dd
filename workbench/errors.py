"""The one exception tree of the workbench.

Every error a user can cause carries a ``hint`` that says what to do, so the CLI can
print a single line naming the file, record or field and the fix.
"""

from __future__ import annotations

from workbench_runtime.errors import AnswerError, PolicyError, SchemaError, WorkbenchError

__all__ = [
    "WorkbenchError",
    "SchemaError",
    "DataImportError",
    "StoreError",
    "AnswerError",
    "NotFoundError",
    "PolicyError",
    "OptionError",
    "OutcomeError",
]


class DataImportError(WorkbenchError):
    """A dataset file cannot be imported (nothing was written)."""


class StoreError(WorkbenchError):
    """The DuckDB store cannot be opened, migrated or queried as asked."""


class NotFoundError(WorkbenchError):
    """A named dataset, run, schema or policy does not exist."""


class OptionError(WorkbenchError):
    """A command-line option or UI setting has an unusable value.

    ``parameter`` names the library parameter (e.g. ``alpha``) the message starts with; the CLI shows
    it as its flag (``--max-error``) through one mapping, ``workbench.cli.flags``.
    """

    def __init__(self, message: str, *, hint: str | None = None, parameter: str | None = None):
        super().__init__(message, hint=hint)
        self.parameter = parameter


class RequirementsError(WorkbenchError):
    """A CI gate cannot be evaluated: a malformed requirements file, or no such run, question or metric."""


class OutcomeError(WorkbenchError):
    """Outcome files for ``workbench monitor`` hold too many lines that are not outcomes (nothing is scored)."""
