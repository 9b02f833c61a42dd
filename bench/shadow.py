"""Live mirror overhead: champion latency through `workbench shadow serve` vs calling the champion directly.

Both emulators run as separate processes (as real services would), the mirror is the real CLI
process. Reports, per challenger behaviour, the p50/p95 latency through the mirror and direct, the
overhead, and the mirror's CPU time per request (from /proc).

    python bench/shadow.py [--requests 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from workbench.emulator import run_emulator_process

ROOT = Path(__file__).resolve().parents[1]
BODY = {
    "model": "clef",
    "questions": {
        "intent": {
            "type": "choice",
            "instructions": "Which intent?",
            "criteria": {"card_arrival": "card not arrived", "refund": "wants money back", "lost_card": "lost it"},
        },
        "urgent": {"type": "noul", "instructions": "Urgent?"},
    },
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(champion: str, challenger: str, n: int, tmp: Path, label: str) -> dict:
    port = _port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from workbench.cli import main; main()",
            "--db",
            str(tmp / "b.duckdb"),
            "shadow",
            "serve",
            "--champion",
            champion,
            "--challenger",
            challenger,
            "--port",
            str(port),
            "--journal",
            str(tmp / f"{label}.jsonl"),
            "--challenger-timeout",
            "0.2",
            "--no-ingest",
        ],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1/systemone"
    for _ in range(300):
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/shadow/status")
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    via, direct = [], []
    with httpx.Client() as c:
        for i in range(50):  # warm-up
            c.post(url, json={**BODY, "state": f"warm {i}"})
        cpu0 = _cpu_seconds(proc.pid)
        for i in range(n):
            body = json.dumps({**BODY, "state": f"where is my card {i}"}).encode()
            t0 = time.perf_counter()
            c.post(url, content=body, headers={"content-type": "application/json"})
            t1 = time.perf_counter()
            c.post(champion, content=body, headers={"content-type": "application/json"})
            t2 = time.perf_counter()
            via.append((t1 - t0) * 1000)
            direct.append((t2 - t1) * 1000)
        cpu = (_cpu_seconds(proc.pid) - cpu0) / n * 1000
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    return {
        "challenger": label,
        "requests": n,
        "mirror_p50_ms": float(np.median(via)),
        "mirror_p95_ms": float(np.percentile(via, 95)),
        "direct_p50_ms": float(np.median(direct)),
        "direct_p95_ms": float(np.percentile(direct, 95)),
        "overhead_p50_ms": float(np.median(via) - np.median(direct)),
        "overhead_p95_ms": float(np.percentile(via, 95) - np.percentile(direct, 95)),
        "mirror_cpu_ms_per_request": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    rows = []
    with (
        run_emulator_process(port=0) as champ,
        run_emulator_process(port=0) as ok,
        run_emulator_process(port=0, timeout=0.3, server_error=0.3, timeout_sleep_s=2.0) as bad,
    ):
        champion = champ.base_url + "/v1/systemone"
        for label, challenger in (
            ("healthy", ok.base_url + "/v1/systemone?model=clef-flash"),
            ("30% timeouts + 30% HTTP 500", bad.base_url + "/v1/systemone"),
            ("unreachable", "http://127.0.0.1:9/v1/systemone"),
        ):
            rows.append(measure(champion, challenger, args.requests, tmp, label.split()[0]))
            rows[-1]["challenger"] = label
    print(json.dumps({"load_average": os.getloadavg(), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
