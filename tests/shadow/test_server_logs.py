"""What shadow mode's servers write to their logs about requests they cannot parse: one short line, never
the request's bytes. The real `workbench shadow serve` and `shadow collect` processes get raw bytes over a
loopback socket; their stderr is read once they have stopped."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from workbench.emulator import run_emulator

SECRET = "sk-live-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _malformed(path: str) -> list[bytes]:
    auth = f"Authorization: Bearer {SECRET}".encode()
    return [
        # bare LF line ends: aiohttp's parser quoted the whole request, every header included
        b"POST " + path.encode() + b" HTTP/1.1\nHost: x\n" + auth + b"\nContent-Length: 2\n\n{}",
        # a NUL in a header value, after the credentials
        b"POST "
        + path.encode()
        + b" HTTP/1.1\r\nHost: x\r\n"
        + auth
        + b"\r\nX-Note: a\x00b "
        + SECRET.encode()
        + b"\r\nContent-Length: 2\r\n\r\n{}",
        # not HTTP at all
        SECRET.encode() + b" \x16\x03\x01 garbage\r\n\r\n",
    ]


def _send_raw(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _started(proc: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/v1/shadow/status", timeout=1.0)
            return
        except httpx.HTTPError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.05)
    raise AssertionError("server did not start")


@pytest.mark.parametrize("command", ["serve", "collect"])
def test_malformed_requests_are_one_line_without_their_bytes(tmp_path: Path, command: str):
    port = _free_port()
    cli = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(tmp_path / "wb.duckdb")]
    with run_emulator(port=0) as emulator:
        endpoint = emulator.base_url + "/v1/systemone"
        if command == "serve":
            args = ["shadow", "serve", "--champion", endpoint, "--challenger", endpoint, "--no-ingest"]
            path = "/v1/systemone"
        else:
            args = ["shadow", "collect", "--challenger", endpoint, "--spool", str(tmp_path / "spool"), "--no-ingest"]
            path = "/v1/shadow/mirror"
        args += ["--port", str(port), "--journal", str(tmp_path / "j.jsonl")]
        proc = subprocess.Popen([*cli, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            url = f"http://127.0.0.1:{port}"
            _started(proc, url)
            t0 = time.monotonic()
            answers = [_send_raw(port, raw) for raw in _malformed(path) * 10]
            elapsed = time.monotonic() - t0
            status = httpx.get(url + "/v1/shadow/status", timeout=30).json()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=600)
    text = err.decode(errors="replace")
    assert all(a.startswith(b"HTTP/1.") and b" 400 " in a.split(b"\r\n")[0] for a in answers), answers[:3]
    assert SECRET not in text and "Bearer" not in text and "Traceback" not in text, text
    assert status["malformed_requests"] == 30
    lines = [ln for ln in text.splitlines() if "malformed request" in ln]
    # one line a second at most (the others counted into the next line), each short
    assert 1 <= len(lines) <= int(elapsed) + 2, text
    assert all(len(ln) < 200 for ln in lines)
    if command == "serve":  # the mirror's 400 does not echo the request either
        assert not any(SECRET.encode() in a for a in answers)


def test_a_handler_error_is_one_line_without_its_message(caplog):
    """An exception raised while handling a request (aiohttp answers 500) is logged as its type and where it
    was raised, not its message (which may quote a header), and is not counted as a malformed request."""
    from workbench.shadow.serving import QuietServerLog

    log = QuietServerLog("collector", interval=0.0)
    try:
        {}[f"Bearer {SECRET}"]
    except KeyError as exc:
        with caplog.at_level("WARNING", logger="workbench.shadow.server"):
            log.exception("Error handling request from %s", "127.0.0.1", exc_info=exc)
    (record,) = caplog.records
    assert SECRET not in record.getMessage() and "KeyError at test_server_logs.py:" in record.getMessage()
    assert (log.errors, log.malformed) == (1, 0)
