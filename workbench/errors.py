"""The one exception tree of the workbench.

Every error a user can cause carries a ``hint`` that says what to do, so the CLI can
print a single line naming the file, record or field and the fix.

Messages speak of options, not flags: a message or hint names an option as the API parameter in
backticks, followed by its value where one helps — ``"`window` 0: a count must be >= 1"``,
``"pass `questions` for the yes/no questions"``. The CLI (:func:`workbench.cli.flags.cli_message`)
shows each backticked name that is an option of the command that ran as its flag (``--window``,
``--question``; a repeatable option's API parameter is its plural); other backticked names stay as
they are, and the UI shows the message as it is. The one place a flag may appear is a full command
line in backticks starting with ``workbench `` (``"run `workbench run --resume RUN_ID`"``).
An :class:`OptionError` may instead give ``parameter`` and start its message with it bare.
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
    """An option (API keyword, command-line flag or UI setting) has an unusable value.

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
