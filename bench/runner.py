"""Runner throughput against the emulator: 100 ms fixed latency, concurrency 32.

With every call taking 100 ms and 32 in flight, the ideal is 320 calls/s. The emulator runs in
its own process (``workbench emulator``) so that its CPU does not share our interpreter; the
runner is the library entry point the CLI uses, writing to a real DuckDB file (cache, batched
answers, journal). Reports calls/s, the ratio to the ideal (issue 3 asks ≥ 90 %) and the
runner's CPU time per call (user + system of this process, all threads).

    python bench/runner.py [--items 3080] [--latency-ms 100] [--concurrency 32] [--questions 1]

``--questions N`` asks N one-option-per-intent questions per request (default: the 77-option
BANKING77 intent question only).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_emulator/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("emulator did not start")


def _stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/_emulator/stats", timeout=5) as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=3080)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import pandas as pd

    from workbench.runner import run_experiment
    from workbench.schema import DecisionSchema
    from workbench.store.datasets import ImportSpec, import_dataset
    from workbench.store.db import connect
    from workbench.store.runs import get_run

    banking = next(p for p in (ROOT / "datasets" / "banking77", ROOT.parent / "shared" / "datasets" / "banking77")
                   if (p / "test.csv").exists())
    categories = json.loads((banking / "categories.json").read_text())
    schema = DecisionSchema.from_dict({"questions": {"intent": {
        "type": "choice", "instructions": "Which intent does the customer message express?",
        "criteria": {c: c.replace("_", " ") for c in categories}}}})

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    token = "bench-token-0123456789"
    emulator = subprocess.Popen([sys.executable, "-c", "from workbench.cli import main; main()", "emulator",
                                 "--port", str(port), "--latency-ms", str(args.latency_ms), "--require-token", token],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(url)
        with tempfile.TemporaryDirectory() as tmp:
            df = pd.read_csv(banking / "test.csv")
            reps = -(-args.items // len(df))
            df = pd.concat([df] * reps, ignore_index=True).iloc[:args.items]
            df["text"] = [f"{t} (#{i})" for i, t in enumerate(df["text"])]  # distinct requests: no cache hits
            df.to_csv(Path(tmp) / "test.csv", index=False)
            con = connect(Path(tmp) / "bench.duckdb")
            import_dataset(con, [Path(tmp) / "test.csv"],
                           ImportSpec(name="bench", text_column="text", labels={"intent": "category"}, split="test"))
            env = {"CLOUDFLARE_API_KEY": token, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
                   "CLOUDFLARE_CLEF_BASE_URL": f"{url}/client/v4"}
            # warm-up (connections, imports) on a few items of another split is not needed: the
            # first requests open the pool; measure the whole run as a user would see it
            cpu0, t0 = time.process_time(), time.perf_counter()
            (run_id,) = run_experiment(con, dataset="bench", schema=schema, provider_specs=["cloudflare:clef-flash"],
                                       env=env, concurrency=args.concurrency)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            summary = get_run(con, run_id)["summary"]
            served = _stats(url)["total"]
    finally:
        emulator.terminate()
        emulator.wait(10)

    calls = summary["this_session"]["requests_sent"]
    ideal = args.concurrency / (args.latency_ms / 1000.0)
    loop_wall = summary["this_session"]["wall_seconds"]
    result = {
        "items": args.items, "concurrency": args.concurrency, "latency_ms": args.latency_ms,
        "requests_sent": calls, "emulator_requests": served, "answered": summary["answered"],
        "wall_seconds_total": wall, "wall_seconds_run_loop": loop_wall,
        "calls_per_second": calls / wall, "calls_per_second_run_loop": calls / loop_wall,
        "ideal_calls_per_second": ideal, "ratio_to_ideal": calls / wall / ideal,
        "ratio_to_ideal_run_loop": calls / loop_wall / ideal,
        "cpu_ms_per_call": cpu / calls * 1000.0, "cpus": os.cpu_count(),
        "latency_p50_ms": summary["latency_p50_ms"], "latency_p95_ms": summary["latency_p95_ms"],
        # the machine is shared: a high load average means the runner was starved of CPU
        "load_average_1m": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{calls} calls in {wall:.2f} s (run loop {loop_wall:.2f} s): {result['calls_per_second']:.1f} calls/s "
              f"= {result['ratio_to_ideal']:.1%} of the ideal {ideal:.0f} calls/s "
              f"(run loop {result['ratio_to_ideal_run_loop']:.1%}); runner CPU {result['cpu_ms_per_call']:.2f} ms/call; "
              f"load average {result['load_average_1m']:.1f} on {result['cpus']} CPUs")


if __name__ == "__main__":
    main()
