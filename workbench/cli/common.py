"""Shared CLI plumbing: the store path, JSON output, one-line errors."""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

#: Progress bars, logs and tables go to stderr so that stdout carries only the JSON document.
err_console = Console(stderr=True)
out_console = Console()


@dataclass
class _State:
    db: str | None = None

    @property
    def db_path(self) -> Path:
        from workbench.store.db import default_db_path

        return Path(self.db) if self.db else default_db_path()


state = _State()

#: ``--json``: print exactly one JSON document on stdout (every reporting command takes it).
AS_JSON = typer.Option(False, "--json", help="Print the result as one JSON document on stdout.")


#: ``--host`` of the commands that serve HTTP: loopback unless asked.
HOST = typer.Option("127.0.0.1", "--host", help="Address to bind; loopback by default.")

#: ``--engine`` and ``--spark-master`` of the commands that aggregate where the data lives (``aggregate``, ``monitor``).
ENGINE = typer.Option("duckdb", "--engine", help="Where the aggregations run: duckdb (this machine) or spark.")
SPARK_MASTER = typer.Option(
    None, "--spark-master", help="Spark master URL (local[2], spark://host:7077, yarn, k8s://…)."
)


def slice_option(what: str, note: str = "") -> Any:
    """``--slice COLUMN`` (repeatable): ``what`` per slice of an item metadata column or of the state's length."""
    return typer.Option(
        None,
        "--slice",
        help=f"Also {what} per slice of this item metadata column (kept at import with --meta-column), or "
        f"'state_length' (quartile buckets of the state's length){note}; repeatable.",
    )


def open_store(read_only: bool = False):
    """The store for a ``with`` block: read-write, or (``read_only``) a read as the UI reads it.

    A read-only command goes through :func:`workbench.store.snapshot.read_connection`: the live file
    when no writer holds it, else a snapshot of what was committed, so it works while a ``workbench
    run`` writes. A writing command fails at once (one line naming the holder's PID) while another
    process writes the store.
    """
    from workbench.store.db import check_store_file, connect

    if not read_only:
        return connect(state.db_path)
    from workbench.store.snapshot import read_connection

    path = str(state.db_path)
    check_store_file(path, read_only=True)  # no other connection of ours is open yet: reading its header is safe
    return read_connection(path)


def _default(o: Any) -> Any:
    np = sys.modules.get("numpy")  # a numpy value exists only once numpy is loaded: never load it here
    if np is not None:
        if isinstance(o, np.bool_):
            return bool(o)
        if isinstance(o, (np.integer,)):
            return int(o)
        if isinstance(o, (np.floating,)):
            return None if not math.isfinite(float(o)) else float(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
    if isinstance(o, (datetime, date)):
        return o.isoformat()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def to_jsonable(obj: Any) -> Any:
    return _clean(json.loads(json.dumps(obj, default=_default, allow_nan=True)))


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout (NaN/inf become null)."""
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_table(table: Any) -> None:
    """Print a rich ``Table`` with every row on one line when the output is a file or a pipe.

    On a terminal, or with ``COLUMNS`` set, the table fits that width, as rich lays it out. Piped or
    redirected without ``COLUMNS``, rich would assume 80 columns and wrap names into many-line cells
    and cut intervals and headers; there the table is printed at its natural width instead (title and
    caption included), so that a script, ``less -S`` or ``grep`` sees each row whole.
    """
    from rich.measure import Measurement

    console = out_console
    if console.is_terminal or os.environ.get("COLUMNS", "").strip():
        console.print(table)
        return
    width = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    for text in (getattr(table, "title", None), getattr(table, "caption", None)):
        if text:
            width = max(width, console.render_str(text).cell_len if isinstance(text, str) else text.cell_len)
    if width <= console.width:
        console.print(table)
        return
    # Console.print(width=…) never goes past the console's own width: print through a wider console on the same file
    wide = Console(
        file=console.file,
        width=width,
        color_system=console.color_system,  # type: ignore[arg-type]  # None (no colour) unless forced
        no_color=console.no_color,
        legacy_windows=console.legacy_windows,
    )
    wide.print(table)


def cost_text(cost: float | None, emulated: bool, digits: int = 6) -> str:
    """A run's cost for people: ``$0.001234``, ``unknown``, or ``~$0.001234 emulated`` (nothing was billed)."""
    if cost is None or cost != cost:
        return "unknown"
    return f"~${cost:.{digits}f} emulated" if emulated else f"${cost:.{digits}f}"


def print_id(identifier: str) -> None:
    """The id of what a command created, alone on a stdout line (``RUN=$(workbench run …)``).

    Creating commands print it when not in ``--json`` mode (their JSON document carries it too);
    everything meant for people goes to stderr.
    """
    sys.stdout.write(f"{identifier}\n")
    sys.stdout.flush()


def emit_result(doc: Any, as_json: bool, text: Any) -> None:
    """A command's result: with ``--json`` the one JSON document ``doc``; else ``text`` for people on
    stdout (a string, or a callable that makes it from ``doc``)."""
    if as_json:
        emit_json(doc)
    else:
        out_console.print(text(doc) if callable(text) else text)


def emit_created(
    doc: Any, as_json: bool, identifier: str, *lines: str | None, notes: tuple[str | None, ...] = ()
) -> None:
    """What a creating command prints: with ``--json`` the one JSON document ``doc``; else ``lines``
    (rich markup) and ``notes`` (plain text) for people on stderr, then the id alone on stdout
    (:func:`print_id`). A ``None`` line is skipped."""
    if as_json:
        emit_json(doc)
        return
    for line in lines:
        if line:
            err_console.print(line)
    for note in notes:
        if note:
            err_console.print(note, markup=False)
    print_id(identifier)


def write_text_file(path: Path, text: str) -> None:
    """Write a report file (``--markdown``, ``--junit`` …), making its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)
