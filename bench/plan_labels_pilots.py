"""Does the planner's recommendation hold on real data? Pilots of a labelled run against real splits.

    python bench/plan_labels_pilots.py --db wb.duckdb --run RUN_ID [--question intent] [--pilots 0 1 2 …]
        [--pilot-size 200] [--errors logistic|observed] [--draws 200]

For each pilot seed: a random ``--pilot-size`` subset of the run's calibration items is the pilot;
``plan_labels_from_pilot`` recommends N; then ``--draws`` calibration splits of N items are drawn
from the run's calibration + test items not in the pilot and certified as ``workbench thresholds``
does (default options; class counts left out, they do not enter the pooled certificate). Prints the
predicted probability and the real share that certified, per pilot and on average. (The BANKING77
tf-idf figures in the README come from this script with pilots 0–7; the run of
``workbench demo``-style import: calibration fraction 0.3, seed 0.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime")]


def certify(probs, labels, opts, gx, gy, qtype):
    from workbench.metrics.recalibrate import apply_calibrator, fit_calibrator
    from workbench.thresholds.guarantees import select_guarantee_split
    from workbench.thresholds.rules import RuleCoordinates, rule_coordinates

    fit = np.random.default_rng(opts.seed).random(len(labels)) < opts.calibrator_fraction
    cal = fit_calibrator(opts.calibrate, probs[fit], labels[fit])
    co = rule_coordinates(qtype, apply_calibrator(cal, probs[~fit]))
    correct = co.predicted == labels[~fit]
    pooled = RuleCoordinates(np.zeros(len(correct), int), co.x, co.y, co.x_name, co.y_name)
    sel, _ = select_guarantee_split(
        pooled,
        correct,
        x_grid=gx,
        y_grid=gy,
        n_classes=1,
        alpha=opts.alpha,
        delta=opts.delta,
        order_fraction=opts.order_fraction,
        rng=np.random.default_rng([opts.seed, 1]),
    )
    return bool(sel.certified and sel.feasible)


def main() -> None:
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.choose import ThresholdOptions
    from workbench.thresholds.planning import plan_labels_from_pilot
    from workbench.thresholds.surface import default_grids

    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--question", default="intent")
    ap.add_argument("--pilots", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--pilot-size", type=int, default=200)
    ap.add_argument("--errors", default="logistic")
    ap.add_argument("--draws", type=int, default=200)
    args = ap.parse_args()
    con = connect(args.db, read_only=True)
    cal = load_answers(con, args.run, args.question, ["calibration"])
    pool = load_answers(con, args.run, args.question, ["calibration", "test"])
    con.close()
    cal, pool = cal.select(cal.labels >= 0), pool.select(pool.labels >= 0)
    opts = ThresholdOptions()
    gx, gy = default_grids(cal.qtype, opts.grid)
    reals = []
    for seed in args.pilots:
        idx = np.random.default_rng(seed).choice(len(cal.labels), args.pilot_size, replace=False)
        plan = plan_labels_from_pilot(
            cal.probs[idx], cal.labels[idx], cal.qtype, opts, question=args.question, errors=args.errors
        )
        n = plan.recommended_labels
        if n is None:
            print(f"pilot {seed}: {plan.status}, no recommendation")
            continue
        rest = np.flatnonzero(~np.isin(pool.item_ids, cal.item_ids[idx]))
        rng = np.random.default_rng([seed, 99])
        ok = [
            certify(pool.probs[s], pool.labels[s], opts, gx, gy, cal.qtype)
            for s in (rng.choice(rest, n, replace=False) for _ in range(args.draws))
        ]
        row = next(r for r in plan.curve if r["n_labels"] == n)
        reals.append(float(np.mean(ok)))
        print(f"pilot {seed}: N = {n}, predicted P(certified) {row['p_certify']:.3f}, real {reals[-1]:.3f}", flush=True)
    if reals:
        print(
            f"real share certified at the recommended N: min {min(reals):.3f}, mean {np.mean(reals):.3f}, max {max(reals):.3f}"
        )


if __name__ == "__main__":
    main()
