"""The base of the workbench's exception tree, shared by the runtime and the workbench.

Every error a user can cause carries a ``hint`` that says what to do, so a caller can print a
single line naming the file, record or field and the fix. ``workbench.errors`` re-exports these
classes and adds the workbench-only ones (store, import, options), so ``except WorkbenchError``
catches runtime errors too.
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


class AnswerError(WorkbenchError):
    """A provider answer cannot be turned into a probability vector."""


class PolicyError(WorkbenchError):
    """A policy file is corrupt, tampered, unsigned when a key is configured, or of a newer format (fail closed)."""


class CalibrationFitError(WorkbenchError):
    """A calibrator cannot be fitted or rebuilt (too few items, wrong shape, bad stored parameters)."""
