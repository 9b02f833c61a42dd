"""Runner stress: 1,000 items at concurrency 64 against a zero-latency emulator with its fault mix, repeated.

Issue 25: ``workbench run`` once ended ``done`` with items that had no answer (3,061 of 3,080; 262 of 300;
980 of 1,000 at ``--concurrency 16`` against a 0 ms emulator). Each repetition here is a fresh run in a fresh
DuckDB file through the library entry point the CLI uses; it counts, in the store, the planned item × question
pairs that have neither an answer nor a failure row (``missing``; 0 expected), the leftover journal segments
(0 expected) and the run's status. The emulator runs in its own process (``--emulator thread``: in this
process, sharing the GIL, which slows the event loop as a busy machine does).

    python bench/runner_stress.py [--runs 50] [--items 1000] [--concurrency 64] [--emulator process|thread] [--json]

Exit status 1 when any run misses a row or leaves a segment. ``tests/runner/test_no_answer_lost.py`` runs three
repetitions in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "stress-token-0123456789"
#: the fault mix of tests/runner/test_no_answer_lost.py (and test_runner's fault-mix test, plus resets and 529s)
FAULT_MIX = {
    "rate_limit": 0.10,
    "server_error": 0.02,
    "overloaded": 0.01,
    "reset": 0.01,
    "timeout": 0.01,
    "malformed": 0.01,
    "timeout_sleep_s": 1.0,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=0.5, help="per-call timeout, seconds (the fault mix's hangs)")
    ap.add_argument("--emulator", choices=["process", "thread"], default="process")
    ap.add_argument("--no-faults", action="store_true", help="a clean emulator (0 ms, no fault)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import pandas as pd

    from workbench.runner import execute
    from workbench.schema import DecisionSchema
    from workbench.store import calls as calls_store
    from workbench.store.datasets import import_dataset, load_items
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import get_run

    # the fault mix's 429s back off 20 ms, not 0.5 s (as the tests do): the runs stay a few seconds each
    execute.BACKOFF_BASE_S[execute.ErrorKind.RATE_LIMIT] = 0.02
    execute.BACKOFF_DEFAULT_BASE_S = 0.02

    banking = next(
        p
        for p in (ROOT / "datasets" / "banking77", ROOT.parent / "shared" / "datasets" / "banking77")
        if (p / "test.csv").exists()
    )
    categories = json.loads((banking / "categories.json").read_text())
    schema = DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {
                    "type": "choice",
                    "instructions": "Which intent does the customer message express?",
                    "criteria": {c: c.replace("_", " ") for c in categories},
                }
            }
        }
    )
    df = pd.read_csv(banking / "test.csv")
    df = pd.concat([df] * -(-args.items // len(df)), ignore_index=True).iloc[: args.items]
    df["text"] = [f"{t} (#{i})" for i, t in enumerate(df["text"])]  # distinct requests: no cache hits

    faults = {} if args.no_faults else FAULT_MIX
    if args.emulator == "process":
        from workbench.emulator import run_emulator_process as run_emu
    else:
        from workbench.emulator import run_emulator as run_emu  # type: ignore[assignment]

    results = []
    with run_emu(port=0, require_token=TOKEN) as emu, tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "test.csv"
        df.to_csv(csv, index=False)
        env = {
            "CLOUDFLARE_API_KEY": TOKEN,
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        }
        for i in range(args.runs):
            emu.set_faults(latency_ms=0.0, seed=i, **faults)
            db = Path(tmp) / f"run{i}.duckdb"
            with contextlib.closing(connect(db)) as con:
                import_dataset(
                    con,
                    [csv],
                    ImportSpec(name="stress", text_column="text", labels={"intent": "category"}, split="test"),
                )
                t0 = time.perf_counter()
                (run_id,) = execute.run_experiment(
                    con,
                    dataset="stress",
                    schema=schema,
                    provider_specs=["cloudflare:clef-flash"],
                    env=env,
                    concurrency=args.concurrency,
                    timeout=args.timeout,
                    progress=False,
                )
                wall = time.perf_counter() - t0
                s = get_run(con, run_id)["summary"]
                items = load_items(con, "stress", 1, splits=["test"])
                missing = calls_store.count_missing_answers(con, run_id, list(items["item_id"]), ["intent"])
            journal = db.with_name(db.name + ".journal")
            segments = len(list(journal.glob("*.jsonl"))) if journal.exists() else 0
            r = {
                "run": i,
                "status": s["status"],
                "missing": missing,
                "leftover_segments": segments,
                "answered": s["answered"],
                "failed": s["failed"],
                "requests": s["this_session"]["requests_sent"],
                "wall_seconds": round(wall, 2),
            }
            results.append(r)
            if not args.json:
                print(
                    f"run {i:3d}: {r['status']:<10} missing {missing:4d}  leftover segments {segments}  "
                    f"answered {r['answered']:4d} failed {r['failed']:3d}  requests {r['requests']:5d}  {wall:5.2f} s",
                    flush=True,
                )
            db.unlink(missing_ok=True)
            # the emulator finishes the requests the runner abandoned (timeouts) before the next run
            time.sleep(0.0 if args.no_faults else faults["timeout_sleep_s"])
    bad = [r for r in results if r["missing"] or r["leftover_segments"]]
    report = {
        "runs": len(results),
        "items": args.items,
        "concurrency": args.concurrency,
        "emulator": args.emulator,
        "faults": faults,
        "runs_with_missing": len(bad),
        "missing_total": sum(r["missing"] for r in results),
        "missing_per_run": [r["missing"] for r in results],
        "statuses": sorted({r["status"] for r in results}),
        "wall_seconds_median": statistics.median(r["wall_seconds"] for r in results) if results else None,
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps({**report, "results": results}, indent=2))
    else:
        print(
            f"{len(results)} runs of {args.items} items at concurrency {args.concurrency} ({args.emulator} emulator, "
            f"{'no faults' if args.no_faults else 'fault mix'}): runs with missing rows {len(bad)}, "
            f"missing in total {report['missing_total']}; statuses {report['statuses']}; "
            f"median {report['wall_seconds_median']} s per run; load average {report['load_average_1m']:.2f} "
            f"on {report['cpus']} CPUs"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
