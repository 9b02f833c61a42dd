"""Does the planner's recommendation hold on real data? Pilots of a labelled run against held-apart draws.

    python bench/plan_labels_pilots.py --db wb.duckdb --run RUN_ID [--question intent] [--pilots 20]
        [--pilot-size 300] [--target-coverage 0.6] [--draws 200] [--errors logistic|observed] [--json]

For each of ``--pilots`` pilot seeds: a random ``--pilot-size`` subset of the run's calibration items is
the pilot; ``plan_labels_from_pilot`` recommends N (the pessimistic quantile over the pilot's bootstrap
replicates) with its spread (10 % / median / 90 %); then ``--draws`` calibration splits of N items are
drawn without replacement from the run's calibration + test items **not in the pilot** and certified as
``workbench thresholds`` does (default options, the pooled certificate; the first draw of every pilot
is checked against ``choose_thresholds`` itself). A draw succeeds when it certifies and, with a
target, its certified coverage reaches the target. Prints one row per pilot — a pilot whose N is
larger than the held-apart pool, or that gets no recommendation, is listed as such and counts as a
failure — then the spread of N and the share of pilots whose real probability is ≥ ``--accept``.
(The model's answers are stored once: everything here resamples stored answers.)

Acceptance of issue 28 §3 (``workbench run … --provider baseline:tfidf-logreg`` on the bundled
BANKING77 and HWU64, ``--pilots 20 --pilot-size 300``): real probability ≥ 0.75 for ≥ 90 % of the pilots.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime")]


def certify(probs, labels, opts, gx, gy, qtype):
    """``choose_thresholds``' pooled guarantee on one calibration split: (certified, certified coverage)."""
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
    ok = bool(sel.certified and sel.feasible)
    return ok, (float(sel.guarantee["expected_coverage"]) if ok else 0.0), sel


def main() -> None:
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions
    from workbench.thresholds.planning import plan_labels_from_pilot
    from workbench.thresholds.surface import default_grids

    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--question", default="intent")
    ap.add_argument("--pilots", type=int, default=20)
    ap.add_argument("--pilot-size", type=int, default=300)
    ap.add_argument("--target-coverage", type=float, default=None)
    ap.add_argument("--max-error", type=float, default=0.05)
    ap.add_argument("--errors", default="logistic")
    ap.add_argument("--confidence", type=float, default=0.9, help="the planner's quantile over pilot bootstraps")
    ap.add_argument("--draws", type=int, default=200, help="real held-apart draws per pilot")
    ap.add_argument("--accept", type=float, default=0.75, help="a pilot passes when its real probability ≥ this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    con = connect(args.db, read_only=True)
    cal = load_answers(con, args.run, args.question, ["calibration"])
    pool = load_answers(con, args.run, args.question, ["calibration", "test"])
    con.close()
    cal, pool = cal.select(cal.labels >= 0), pool.select(pool.labels >= 0)
    opts = ThresholdOptions(alpha=args.max_error)
    gx, gy = default_grids(cal.qtype, opts.grid)
    target = args.target_coverage
    rows = []
    for seed in range(args.pilots):
        idx = np.random.default_rng([seed, 28]).choice(len(cal.labels), args.pilot_size, replace=False)
        t0 = time.perf_counter()
        plan = plan_labels_from_pilot(
            cal.probs[idx],
            cal.labels[idx],
            cal.qtype,
            opts,
            question=args.question,
            errors=args.errors,
            target_coverage=target,
            confidence=args.confidence,
            seed=seed,
        )
        plan_s = time.perf_counter() - t0
        n = plan.recommended_labels
        rest = np.flatnonzero(~np.isin(pool.item_ids, cal.item_ids[idx]))
        rng_ = plan.labels_range
        row = {
            "pilot": seed,
            "status": plan.status,
            "n": n,
            "low": rng_["low"],
            "median": rng_["median"],
            "high": rng_["high"],
            "warned": bool(plan.warnings),
            "plan_s": plan_s,
            "pool": len(rest),
            "predicted": None,
            "real": None,
            "real_coverage": None,
            "verdict": "",
        }
        if n is None:
            row["verdict"] = "no recommendation (beyond --max-labels)"
        elif n > len(rest):
            row["verdict"] = f"pool too small: N {n} > {len(rest)} held-apart items"
        else:
            row["predicted"] = next(r["p_target"] for r in plan.curve if r["n_labels"] == n)
            rng = np.random.default_rng([seed, 99])
            hits, covs = [], []
            for d in range(args.draws):
                pick = np.sort(rng.choice(rest, n, replace=False))  # in pool order, as a split is
                ok, cov, sel = certify(pool.probs[pick], pool.labels[pick], opts, gx, gy, cal.qtype)
                if d == 0:  # the fast path is the workbench's own certificate
                    mask = np.zeros(len(pool.labels), dtype=bool)
                    mask[pick] = True
                    full = choose_thresholds(pool.select(mask), None, opts).selection
                    assert (full.certified, full.x, full.y) == (sel.certified, sel.x, sel.y), "fast path differs"
                hits.append(ok and (target is None or cov >= target - 1e-12))
                covs.append(cov)
            row["real"] = float(np.mean(hits))
            row["real_coverage"] = float(np.mean(covs))
            row["verdict"] = "pass" if row["real"] >= args.accept else "FAIL"
        rows.append(row)
        if not args.json:
            print(_fmt(row), flush=True)
    ns = [r["n"] for r in rows if r["n"] is not None]
    passed = sum(r["verdict"] == "pass" for r in rows)
    summary = {
        "db": args.db,
        "run": args.run,
        "question": args.question,
        "alpha": opts.alpha,
        "target_coverage": target,
        "confidence": args.confidence,
        "pilots": len(rows),
        "pilot_size": args.pilot_size,
        "draws": args.draws,
        "n_min": min(ns) if ns else None,
        "n_median": float(np.median(ns)) if ns else None,
        "n_max": max(ns) if ns else None,
        "no_recommendation": sum(r["n"] is None for r in rows),
        "pool_too_small": sum(r["verdict"].startswith("pool too small") for r in rows),
        "passed": passed,
        "share_passed": passed / len(rows),
        "plan_s_median": float(np.median([r["plan_s"] for r in rows])),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}))
        return
    print(
        f"{summary['pilots']} pilots of {args.pilot_size}, α = {opts.alpha:g}"
        + (f", target coverage {target:g}" if target is not None else "")
        + f": recommended N min {summary['n_min']}, median {summary['n_median']}, max {summary['n_max']}"
        f" ({summary['no_recommendation']} without a recommendation, {summary['pool_too_small']} beyond the pool); "
        f"real P ≥ {args.accept:g} for {passed}/{len(rows)} pilots ({100 * summary['share_passed']:.0f}%); "
        f"plan time median {summary['plan_s_median']:.1f} s"
    )


def _fmt(r: dict) -> str:
    def n(v):
        return "–" if v is None else f"{v:,}"

    def p(v):
        return "–" if v is None else f"{v:.3f}"

    return (
        f"pilot {r['pilot']:2d}  N {n(r['n']):>7}  [10% {n(r['low']):>7}, median {n(r['median']):>7}, 90% {n(r['high']):>7}]"
        f"  warned {'yes' if r['warned'] else 'no ':3}  predicted {p(r['predicted'])}  real {p(r['real'])}"
        f"  real coverage {p(r['real_coverage'])}  {r['verdict']}"
    )


if __name__ == "__main__":
    main()
