"""Progress and log reporting, injected into long library workflows (runner, experiments, demo).

The library never imports the CLI's console: a workflow takes a :class:`Reporter` and defaults to
:class:`LogReporter` (lines go to the ``workbench`` :mod:`logging` logger; no progress bars). The
CLI passes :class:`RichReporter` over its stderr console, so bars and narrative reach the terminal
while stdout carries only the command's result.

A reporter has two jobs:

``log(message)``
    One line of narrative; may hold rich markup (``[bold]…[/]``), which :class:`LogReporter` strips.
``task(description, total)``
    A context manager giving a :class:`Task` whose ``update(completed, detail="")`` reports how many
    of ``total`` units are done and a short free-text detail (rate, failures, cost).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger("workbench")

_MARKUP = re.compile(r"\[/?[a-zA-Z#][^\[\]]*\]|\[/\]")


class Task(Protocol):
    """One unit of progress: ``completed`` of a known total, with a short detail text."""

    def update(self, completed: int, detail: str = "") -> None: ...


@runtime_checkable
class Reporter(Protocol):
    """Where a long workflow reports its narrative and its progress."""

    def log(self, message: str) -> None: ...

    def task(self, description: str, total: int) -> contextlib.AbstractContextManager[Task]: ...


class _NoTask:
    def update(self, completed: int, detail: str = "") -> None:
        return None


def strip_markup(message: str) -> str:
    """``message`` without rich markup tags (``[bold]x[/]`` -> ``x``)."""
    return _MARKUP.sub("", message)


class SilentReporter:
    """Reports nothing."""

    def log(self, message: str) -> None:
        return None

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Task]:
        yield _NoTask()


class LogReporter:
    """Lines to the ``workbench`` logger at INFO (markup stripped); a task logs only its end."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self._logger = log or logger

    def log(self, message: str) -> None:
        self._logger.info("%s", strip_markup(message))

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Task]:
        last = _LastUpdate()
        try:
            yield last
        finally:
            self._logger.info("%s: %d/%d %s", description, last.completed, total, last.detail)


class _LastUpdate:
    def __init__(self) -> None:
        self.completed = 0
        self.detail = ""

    def update(self, completed: int, detail: str = "") -> None:
        self.completed, self.detail = completed, detail


class RichReporter:
    """Narrative and live progress bars on a :class:`rich.console.Console` (the CLI's stderr console).

    ``progress=False`` keeps the narrative and drops the bars (``--no-progress``).
    """

    def __init__(self, console: Any, *, progress: bool = True) -> None:
        self.console = console
        self.progress = progress

    def log(self, message: str) -> None:
        self.console.print(message)

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Task]:
        if not self.progress:
            yield _NoTask()
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[detail]}"),
            console=self.console,
            refresh_per_second=4,
            transient=False,
        )
        task_id = bar.add_task(description, total=total, detail="")

        class _BarTask:
            def update(self, completed: int, detail: str = "") -> None:
                bar.update(task_id, completed=completed, detail=detail)

        with bar:
            yield _BarTask()


def default_reporter() -> Reporter:
    """The library default: :class:`LogReporter` on the ``workbench`` logger."""
    return LogReporter()
