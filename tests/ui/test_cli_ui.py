"""`workbench ui` starts the real Streamlit server bound to loopback only, on the store given."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) listening on ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if int(p, 16) == port and state == "0A":  # 0A = LISTEN
                out.append(addr)
    return out


def _serve(cmd: list[str], port: int) -> str:
    """Start ``cmd``, wait for the health endpoint, check the listening address, stop; return its output."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ}, start_new_session=True
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise AssertionError("the UI did not start")
        assert _listening(port) == ["0100007F"]  # 127.0.0.1 only, never 0.0.0.0 / ::
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=20)[0].decode(errors="replace")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_workbench_ui_binds_loopback_and_serves_the_store(ui_store):
    path, _ = ui_store
    port = _free_port()
    out = _serve(
        [sys.executable, "-c", "from workbench.cli import main; main()", "ui", "--db", str(path), "--port", str(port)],
        port,
    )
    assert str(path.resolve()) in out  # it says which store it opened


def test_readme_streamlit_command_binds_loopback(ui_store):
    """`streamlit run streamlit_app.py -- --db PATH` from the checkout (README): .streamlit/config.toml."""
    path, _ = ui_store
    port = _free_port()
    _serve(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "streamlit_app.py",
            "--server.port",
            str(port),
            "--",
            "--db",
            str(path),
        ],
        port,
    )
