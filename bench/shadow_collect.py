"""Memory of `workbench shadow collect` while it holds mirrored bodies waiting for the champion's answer.

The collector is the real CLI process; the challenger an emulator process. N bodies of S MiB are
mirrored with no stored champion answer, so every body is held up to --champion-timeout. Reports the
collector's resident memory (VmRSS, and the peak VmHWM from /proc) before and after, and what it
dropped over --max-held.

    python bench/shadow_collect.py [--requests 100] [--mib 7] [--max-held 256MiB]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from workbench.emulator import run_emulator_process

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--mib", type=float, default=7.0)
    ap.add_argument("--max-held", default="256MiB")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-collect-"))
    port = _free_port()
    with run_emulator_process(port=0) as challenger:
        cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(tmp / "wb.duckdb")]
        cmd += ["shadow", "collect", "--challenger", challenger.base_url + "/v1/systemone", "--spool", str(tmp / "s")]
        cmd += ["--port", str(port), "--journal", str(tmp / "j.jsonl"), "--no-ingest", "--champion-timeout", "60"]
        cmd += ["--max-held", args.max_held]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(url + "/v1/shadow/status", timeout=1.0)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("collector did not start") from None
                    time.sleep(0.1)
            before = _mem(proc.pid)
            state = "s" * int(args.mib * 1024 * 1024)
            with httpx.Client(timeout=60) as client:
                for i in range(args.requests):
                    body = json.dumps({"model": "clef", "state": state, "questions": {}, "i": i}).encode()
                    client.post(url + "/v1/shadow/mirror", content=body, headers={"x-request-id": f"r{i}"})
                status = client.get(url + "/v1/shadow/status").json()
            after = _mem(proc.pid)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    print(
        f"{args.requests} bodies of {args.mib:g} MiB, --max-held {args.max_held}: RSS {before['VmRSS']:.0f} -> "
        f"{after['VmRSS']:.0f} MiB (peak {after['VmHWM']:.0f} MiB); held {status['held_bytes'] / 2**20:.0f} MiB, "
        f"requests {status['requests']}, dropped_held_bytes {status['dropped_held_bytes']}"
    )


if __name__ == "__main__":
    main()
