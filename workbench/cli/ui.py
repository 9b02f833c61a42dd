"""`workbench ui`: the Streamlit app on the same store, bound to loopback by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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
            err_console.print(
                f"[yellow]warning:[/] binding to {host}: anyone who can reach it can read the store", soft_wrap=True
            )
        cmd = streamlit_command(path, port=port, host=host, headless=not open_browser)
        err_console.print(f"Decision Workbench UI on http://{host}:{port}  (store {path.resolve()})", soft_wrap=True)
        code = run_child(cmd, env={**os.environ, "WORKBENCH_DB": str(path.resolve())})
        raise typer.Exit(code)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM if this process dies, even by SIGKILL (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_if_running(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()


def run_child(cmd: list[str], *, env: dict[str, str], grace_s: float = 10.0) -> int:
    """Run ``cmd`` (the Streamlit server) as a child and return its exit code.

    SIGTERM or SIGHUP to this process is forwarded to the child as SIGTERM, so a service manager or
    ``kill`` stopping ``workbench ui`` stops the server too (and frees its port); Ctrl-C reaches the
    child through the terminal's process group. Whatever happens, the child does not outlive this
    call: after ``grace_s`` seconds it is killed.
    """
    proc = subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    stopping = False

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            timer = threading.Timer(grace_s, _kill_if_running, args=(proc,))  # a child that ignores SIGTERM
            timer.daemon = True
            timer.start()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            code = proc.wait()
        except KeyboardInterrupt:  # the child got the same SIGINT from the terminal; let it stop
            stopping = True
            try:
                code = proc.wait(grace_s)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
                code = proc.wait()
        if stopping and code in (0, -signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL):
            return 0
        return 128 - code if code < 0 else code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
