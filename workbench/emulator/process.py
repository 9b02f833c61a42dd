"""Run the emulator as a separate ``workbench emulator`` process (no GIL shared with the caller)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from workbench.emulator.faults import FaultConfig


class EmulatorProcess:
    """Handle on an emulator running as a separate ``workbench emulator`` process.

    Same read/write surface as :class:`EmulatorServer` for callers (``base_url``,
    ``cloudflare_base_url``, ``stats``, ``request_count``, ``reset_stats``, ``set_faults``), through
    the admin API. A separate process does not share the GIL with the caller, which matters for
    throughput benchmarks (an in-thread emulator halves a 2-core machine's client throughput).
    """

    def __init__(self, base_url: str, process: Any):
        self.base_url = base_url
        self.process = process
        self.port = int(base_url.rsplit(":", 1)[1])

    @property
    def cloudflare_base_url(self) -> str:
        return f"{self.base_url}/client/v4"

    def _admin(self, method: str, path: str, payload: dict | None = None) -> dict:
        import httpx

        # trust_env=False on purpose: this is the admin API of the emulator process we started on
        # 127.0.0.1. A user's HTTP_PROXY (the proxy tests set one) must not route a loopback call
        # through a proxy that cannot reach our loopback, and no CA or proxy setting applies to it.
        with httpx.Client(timeout=10, trust_env=False) as client:
            resp = client.request(method, f"{self.base_url}/_emulator/{path}", json=payload)
        if resp.status_code >= 400:
            raise ValueError(resp.json().get("error", resp.text))
        return resp.json()

    @property
    def stats(self) -> dict:
        return self._admin("GET", "stats")

    def request_count(self, *, model: str | None = None, path: str | None = None) -> int:
        snap = self.stats
        if model is None and path is None:
            return snap["total"]
        return sum(
            n
            for key, n in snap["by_model_path"].items()
            if (model is None or key.partition(" ")[0] == model) and (path is None or path in key.partition(" ")[2])
        )

    def reset_stats(self) -> None:
        self._admin("POST", "reset")

    def set_faults(self, **changes: Any) -> dict:
        return self._admin("POST", "faults", changes)


@contextlib.contextmanager
def run_emulator_process(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    require_token: str | None = None,
    answerer: str = "lexical",
    startup_timeout_s: float = 60.0,
    **fault_options: Any,
) -> Iterator[EmulatorProcess]:
    """Run ``workbench emulator`` in a child process for the duration of a ``with`` block.

    ``fault_options`` use :class:`FaultConfig` names (``latency_ms=100``, ``rate_limit=0.1``) and
    are applied through the admin API once the server listens. The child is terminated (SIGTERM,
    then SIGKILL) on exit.
    """
    import os
    import subprocess
    import sys

    FaultConfig().merged(**fault_options)  # validate before starting anything
    cmd = [
        sys.executable,
        "-c",
        "from workbench.cli import main; main()",
        "emulator",
        "--host",
        host,
        "--port",
        str(port),
        "--json",
        "--answerer",
        answerer,
    ]
    env = dict(os.environ)
    if require_token:
        env["WORKBENCH_EMULATOR_TOKEN"] = require_token  # not on the command line (visible in ps)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        lines: list[str] = []
        deadline = threading.Event()
        timer = threading.Timer(startup_timeout_s, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                line = proc.stdout.readline() if proc.stdout is not None else ""
                if not line:
                    raise RuntimeError(f"emulator process exited with {proc.wait()} before listening")
                lines.append(line)
                if line.startswith("}"):
                    break
        finally:
            timer.cancel()
        info = json.loads("".join(lines))
        handle = EmulatorProcess(info["base_url"], proc)
        if fault_options:
            handle.set_faults(**fault_options)
        yield handle
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
            proc.wait(5)
