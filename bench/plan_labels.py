"""The label budget planner's certificate, batched over draws, against one ``select_guarantee`` per draw.

    python bench/plan_labels.py                 # 200 draws of 1,000 calibration items, grid 100
    python bench/plan_labels.py --draws 400 --n 3000 --json

Synthetic 20-option answers; every draw gets its certifying and order-learning surfaces (the same
counts for both sides). Baseline: ``select_guarantee(surface, order_surface=...)`` once per draw
(what a loop over ``select_guarantee_split`` costs, surfaces excluded); batched: one
:func:`workbench.thresholds.planning.certify_batch` call. Prints both timings, the ratio and whether
the selections agree. Then times a whole plan (``plan_labels_from_pilot``, 200-item pilot,
default sizes) — the figure ``workbench plan-labels`` spends simulating. Timings are wall-clock on a
possibly shared machine: compare the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime"), str(ROOT / "tests" / "thresholds")]


def main() -> None:
    from synth import choice_data

    from workbench.thresholds.guarantees import select_guarantee
    from workbench.thresholds.options import ThresholdOptions
    from workbench.thresholds.planning import certify_batch, plan_labels_from_pilot
    from workbench.thresholds.rules import rule_coordinates
    from workbench.thresholds.surface import default_grids, surface_from_coordinates

    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    gx, gy = default_grids("choice", 100)
    cert, order = [], []
    for _ in range(args.draws):
        probs, labels = choice_data(rng, args.n, k=20, scale=3.0)
        c = rule_coordinates("choice", probs)
        ok = c.predicted == labels
        hold = rng.random(args.n) < 0.3
        cert.append(surface_from_coordinates(c.x[~hold], c.y[~hold], ok[~hold], x_grid=gx, y_grid=gy))
        order.append(surface_from_coordinates(c.x[hold], c.y[hold], ok[hold], x_grid=gx, y_grid=gy))
    t0 = time.perf_counter()
    loop = [select_guarantee(s, alpha=0.1, delta=0.1, order_surface=o) for s, o in zip(cert, order)]
    t_loop = time.perf_counter() - t0
    t0 = time.perf_counter()
    certified, _ = certify_batch(
        np.array([s.accepted for s in cert]),
        np.array([s.errors for s in cert]),
        alpha=0.1,
        delta=0.1,
        order_accepted=np.array([o.accepted for o in order]),
        order_errors=np.array([o.errors for o in order]),
    )
    t_batch = time.perf_counter() - t0
    agree = certified.tolist() == [s.certified for s in loop]
    probs, labels = choice_data(np.random.default_rng(1), 200, k=20, scale=3.0)
    t0 = time.perf_counter()
    plan = plan_labels_from_pilot(probs, labels, "choice", ThresholdOptions(alpha=0.1))
    t_plan = time.perf_counter() - t0
    out = {
        "draws": args.draws,
        "n": args.n,
        "select_guarantee_loop_s": t_loop,
        "certify_batch_s": t_batch,
        "speedup": t_loop / t_batch,
        "agree": agree,
        "plan_s": t_plan,
        "plan_sizes": len(plan.curve),
        "plan_recommended": plan.recommended_labels,
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.draws} draws × grid 100²: select_guarantee loop {t_loop:.2f} s, certify_batch {t_batch:.2f} s")
    print(f"ratio {t_loop / t_batch:.1f}× (same certified flags: {agree})")
    print(f"whole plan (200-item pilot, {len(plan.curve)} sizes × 200 draws): {t_plan:.1f} s")


if __name__ == "__main__":
    main()
