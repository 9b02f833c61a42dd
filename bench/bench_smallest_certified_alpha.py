"""CPU seconds of ``smallest_certified_alpha`` (bisection) against the full ``frontier_for_run`` over the same
grid (the floor it must match), on every run of a demo store; checks the edges are identical.

    python bench/bench_smallest_certified_alpha.py demo-output/workbench.duckdb
"""

from __future__ import annotations

import sys
import time

import workbench as wb
from workbench.store.runs import list_runs
from workbench.workflows.thresholds import ALPHA_STEPS, frontier_for_run, smallest_certified_alpha


def main(db: str) -> None:
    con = wb.connect(db, read_only=True)
    opts = wb.ThresholdOptions()
    bis = full = 0.0
    runs = list_runs(con)["run_id"].tolist()
    for rid in runs:
        t = time.process_time()
        edge = smallest_certified_alpha(con, rid, "intent", opts)
        bis += time.process_time() - t
        t = time.process_time()
        sels = frontier_for_run(con, rid, "intent", opts, list(ALPHA_STEPS))
        full += time.process_time() - t
        flags = [bool(s.certified and s.feasible) for s in sels]
        assert flags == sorted(flags), f"{rid}: certification is not monotone in α"
        assert edge == next((a for a, f in zip(ALPHA_STEPS, flags) if f), None), rid
    con.close()
    print(
        f"{len(runs)} runs, {len(ALPHA_STEPS)} α: bisection {bis:.2f} s CPU, full frontier {full:.2f} s CPU, "
        f"ratio {bis / full:.2f}; edges identical"
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo-output/workbench.duckdb")
