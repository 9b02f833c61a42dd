"""Time one ``runs import`` of an existing answers file into a copy of a store, in this process alone.

``bench/scale_data.py`` generates the files and imports them in the same process, so its peak RSS
includes the generation. This script copies a store that already holds the dataset (``--base``, e.g.
one built by ``scale_data.py``), imports ``--answers`` into the copy and prints wall seconds, CPU
seconds (user + sys, all threads) and peak RSS (``getrusage``), plus the RSS reached by each phase::

    python bench/answer_import.py --base /tmp/s1m.duckdb --answers /tmp/f1m/answers.parquet \\
        --dataset scale-1000000 --db /tmp/s1m-copy.duckdb

The schema is ``bench/scale_data.py``'s (one 77-option question, ``--k`` to change it). ``--trace S``
prints RSS and DuckDB's memory by tag every S seconds (its queries hold up the commit's checkpoint: time
without it). For 1M and 10M rows it prints the figures of the
previous import (a staged Parquet file, ``main`` a747592) beside this one's, and the ratios: wall times
on the shared 2-core machine vary 2-4x with its load, so compare CPU seconds first.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


#: rows -> (wall s, CPU s, peak RSS GB) of the staged-Parquet import (main a747592; lead's 10M run,
#: io3's 1M run at load average ~9).
BEFORE = {1_000_000: (87.4, 23.7, 1.51), 10_000_000: (167.0, 209.0, 3.17)}


def _rss_gb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024**2
    return float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="store holding the dataset (left untouched)")
    ap.add_argument("--answers", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--db", required=True, help="the copy to import into (overwritten, kept)")
    ap.add_argument("--k", type=int, default=77)
    ap.add_argument("--trace", type=float, default=0, help="print RSS and DuckDB's memory every this many seconds")
    args = ap.parse_args(argv)
    shutil.copy(args.base, args.db)

    from bench.scale_data import schema_dict
    from workbench.schema import DecisionSchema
    from workbench.store import answer_import
    from workbench.store.db import connect

    t0 = time.perf_counter()
    phases: list[tuple[str, float, float, float]] = []  # (phase, wall, cpu, RSS) at its end
    peak = [0.0]

    con = connect(args.db)

    def sample() -> None:
        cur = con.cursor()  # its own connection: answers while the import's statement runs
        last = 0.0
        while True:
            peak[0] = max(peak[0], _rss_gb())
            now = time.perf_counter() - t0
            if args.trace and now - last >= args.trace:
                last = now
                tags = cur.execute(
                    "SELECT tag, (memory_usage_bytes + temporary_storage_bytes) >> 20 FROM duckdb_memory()"
                    " WHERE memory_usage_bytes + temporary_storage_bytes > 0"
                ).fetchall()
                print(
                    f"  {now:6.1f} s  CPU {time.process_time():6.1f} s  RSS {_rss_gb():5.2f} GB  DuckDB MB {dict(tags)}",
                    flush=True,
                )
            time.sleep(0.5)

    threading.Thread(target=sample, daemon=True).start()
    for name in ("_stage", "_check_items", "_source_items"):
        f = getattr(answer_import, name, None)
        if f is None:  # an older import without that phase
            continue

        def timed(*a, _f=f, _name=name, **kw):
            out = _f(*a, **kw)
            phases.append((_name, time.perf_counter() - t0, time.process_time(), peak[0]))
            return out

        setattr(answer_import, name, timed)
    schema = DecisionSchema.from_dict(schema_dict(args.k), source="bench/scale_data.py")
    try:
        run_id = answer_import.import_answers(
            con, args.answers, dataset=args.dataset, schema=schema, name="bench", model="synthetic"
        )
    finally:
        con.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    for name, wall, cpu, rss in phases:
        print(f"  after {name:<14} {wall:7.1f} s wall {cpu:7.1f} s CPU  RSS so far {rss:5.2f} GB", flush=True)
    now = (time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024**2)
    rows = con_rows(args.db, run_id)
    if rows in BEFORE:
        before = BEFORE[rows]
        print(f"  {'':<8} {'wall s':>8} {'CPU s':>8} {'RSS GB':>8}")
        print(f"  {'before':<8} {before[0]:8.1f} {before[1]:8.1f} {before[2]:8.2f}")
        print(f"  {'now':<8} {now[0]:8.1f} {now[1]:8.1f} {now[2]:8.2f}")
        print(f"  {'ratio':<8} {now[0] / before[0]:8.2f} {now[1] / before[1]:8.2f} {now[2] / before[2]:8.2f}")
    print(
        json.dumps(
            {
                "run_id": run_id,
                "rows": rows,
                "seconds": round(now[0], 1),
                "cpu_seconds": round(now[1], 1),
                "peak_rss_gb": round(now[2], 2),
            }
        )
    )


def con_rows(db: str, run_id: str) -> int:
    """Rows the import stored (read after it, outside the timed part)."""
    from workbench.store.db import connect

    con = connect(db, read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM answers WHERE run_id = ?", [run_id]).fetchone()
    finally:
        con.close()
    return int(row[0]) if row else 0


if __name__ == "__main__":
    main()
