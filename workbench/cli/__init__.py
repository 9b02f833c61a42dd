"""`workbench` command line: a thin layer over the library.

Each area registers its commands from its own module (``workbench/cli/<area>.py`` exposes
``register(app)``), so modules import heavy dependencies only inside their commands.
Every reporting command takes ``--json`` and prints exactly one JSON document on stdout;
logs and progress go to stderr.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from workbench.cli.common import fail, state


def _show_flags_as_flags() -> None:
    """Help lists a boolean flag as ``--json``, not ``--json <bool>``.

    typer (0.29) prints every option's value type in help, flags included, which reads as if the
    flag took a value; a flag has no value to show.
    """
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_workbench_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._workbench_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_show_flags_as_flags()

#: ``workbench --help`` groups the commands in these panels, in workflow order, and lists each panel's
#: commands in the order given here (a command or sub-app registered by an area must appear here:
#: tests/test_cli_panels.py checks it).
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Data", ("datasets", "schema")),
    ("Runs", ("run", "runs", "export")),
    ("Evaluation", ("report", "calibrate", "label-issues", "compare", "robustness", "aggregate")),
    ("Thresholds & policy", ("thresholds", "plan-labels", "cascade", "policy")),
    ("Production", ("gate", "shadow", "monitor")),
    ("Tools", ("demo", "ui", "emulator")),
)

_PANEL_OF = {command: panel for panel, commands in PANELS for command in commands}
_ORDER = {command: i for i, command in enumerate(_PANEL_OF)}


class _WorkflowGroup(TyperGroup):
    """The root group: lists its commands in the order of `PANELS` (typer lists sub-apps after commands)."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda name: _ORDER.get(name, len(_ORDER)))


app = typer.Typer(
    cls=_WorkflowGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Decision Workbench: evaluate decision models, calibrate, pick thresholds, ship a policy.",
)

AREAS = [
    "datasets",
    "schema_cmd",
    "run",
    "emulator",
    "report",
    "thresholds",
    "plan",
    "policy",
    "compare",
    "robustness",
    "cascade",
    "shadow",
    "gate",
    "monitor",
    "aggregate",
    "demo",
    "ui",
]


def _print_version(value: bool) -> None:
    if value:
        from workbench import __version__

        print(f"workbench {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    db: str = typer.Option(
        None, "--db", envvar="WORKBENCH_DB", help="DuckDB file of the store (default ./workbench.duckdb)."
    ),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
) -> None:
    if db:
        state.db = db


for _area in AREAS:
    try:
        _mod = importlib.import_module(f"workbench.cli.{_area}")
    except ModuleNotFoundError as exc:  # an area not written yet
        if exc.name != f"workbench.cli.{_area}":
            raise
        continue
    _mod.register(app)

for _command in app.registered_commands:
    _command.rich_help_panel = _PANEL_OF.get(_command.name or "", _command.rich_help_panel)
for _group in app.registered_groups:
    _group.rich_help_panel = _PANEL_OF.get(_group.name or "", _group.rich_help_panel)


def main() -> None:
    from workbench.errors import WorkbenchError

    try:
        rv = app(standalone_mode=False)
        if isinstance(rv, int) and rv != 0:  # typer.Exit(code) is returned, not raised, here
            sys.exit(rv)
    except WorkbenchError as exc:
        from workbench.cli.flags import cli_message, command_options

        fail(cli_message(exc, command_options(typer.main.get_command(app), sys.argv[1:])))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # usage errors (typer vendors its own click: match by behaviour)
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
