"""`workbench ui`: the Streamlit app on the same store, bound to loopback by default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

from workbench.cli.common import err_console, state


def streamlit_command(db: str | Path, *, port: int = 8501, host: str = "127.0.0.1", headless: bool = True) -> list[str]:
    """The ``streamlit run`` command line for the app on store ``db`` (also used by tests)."""
    import workbench.ui

    entry = Path(workbench.ui.__file__).resolve().parent / "_launch" / "streamlit_app.py"
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(entry),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true" if headless else "false",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "minimal",
        "--",
        "--db",
        str(Path(db).expanduser().resolve()),
    ]


def register(app: typer.Typer) -> None:
    @app.command("ui")
    def ui(
        db: str | None = typer.Option(None, "--db", help="DuckDB store to open (default: the global --db)."),
        port: int = typer.Option(8501, "--port", help="Port to listen on."),
        host: str = typer.Option(
            "127.0.0.1", "--host", help="Address to bind; loopback by default (the UI has no login)."
        ),
        open_browser: bool = typer.Option(False, "--open/--no-open", help="Open a browser tab."),
    ) -> None:
        """Open the Streamlit UI on a store (reads a snapshot, so runs may write meanwhile)."""
        path = Path(db) if db else state.db_path
        if host not in ("127.0.0.1", "localhost", "::1"):
            err_console.print(f"[yellow]warning:[/] binding to {host}: anyone who can reach it can read the store")
        cmd = streamlit_command(path, port=port, host=host, headless=not open_browser)
        err_console.print(f"Decision Workbench UI on http://{host}:{port}  (store {path.resolve()})")
        try:
            code = subprocess.call(cmd, env={**os.environ, "WORKBENCH_DB": str(path.resolve())})
        except KeyboardInterrupt:
            code = 0
        raise typer.Exit(code)
