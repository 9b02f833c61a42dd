"""The one exception tree of the workbench.

Every error a user can cause carries a ``hint`` that says what to do, so the CLI can
print a single line naming the file, record or field and the fix.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class: ``str(err)`` is the one-line message shown to users."""

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(message if not hint else f"{message} — {hint}")


class SchemaError(WorkbenchError):
    """A decision schema file is malformed or breaks a provider's limits."""


class DataImportError(WorkbenchError):
    """A dataset file cannot be imported (nothing was written)."""


class StoreError(WorkbenchError):
    """The DuckDB store cannot be opened, migrated or queried as asked."""


class AnswerError(WorkbenchError):
    """A provider answer cannot be turned into a probability vector."""


class NotFoundError(WorkbenchError):
    """A named dataset, run, schema or policy does not exist."""


class PolicyError(WorkbenchError):
    """A policy file is corrupt, tampered, or of a newer format (fail closed)."""


class OptionError(WorkbenchError):
    """A command-line option or UI setting has an unusable value."""
