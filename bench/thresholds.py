"""Risk–coverage surface: one pass (binning + 2-D reverse cumulative sums) against a naive scan.

    python bench/thresholds.py                      # 1,000,000 items × 77 options, 100 × 100 grid
    python bench/thresholds.py --n 200000 --json

Timings (best of ``--repeat``):

- ``coordinates``: p_top, margin and predicted option from the (n, k) probability matrix;
- ``surface``: accepted and error counts at every grid point from those coordinates;
- ``surface_per_class``: the same with a class axis (K × grid counts);
- ``selection``: Hoeffding–Bentkus p-values over the grid + Holm + pick (the guarantee step);
- ``naive``: one boolean mask per grid point over all items. It is timed on ``--naive-points``
  random grid points and extrapolated linearly to the full grid (each point costs the same scan);
  the counts of those points are checked against the surface.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from workbench.thresholds.guarantees import select_guarantee
from workbench.thresholds.rules import rule_coordinates
from workbench.thresholds.surface import default_grids, naive_surface, surface_from_coordinates


def _best(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def make_data(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Peaked probability vectors and labels drawn from them (a calibrated model), built in blocks."""
    rng = np.random.default_rng(seed)
    probs = np.empty((n, k))
    labels = np.empty(n, dtype=np.int64)
    block = 100_000
    for s in range(0, n, block):
        e = rng.standard_exponential((min(block, n - s), k)) ** 4
        p = e / e.sum(axis=1, keepdims=True)
        probs[s : s + len(p)] = p
        u = rng.random(len(p))[:, None]
        labels[s : s + len(p)] = np.minimum((np.cumsum(p, axis=1) < u).sum(axis=1), k - 1)
    return probs, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=77)
    ap.add_argument("--grid", type=int, default=100)
    ap.add_argument("--naive-points", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    probs, labels = make_data(args.n, args.k)
    t_coords, coords = _best(lambda: rule_coordinates("choice", probs), args.repeat)
    correct = coords.predicted == labels
    gx, gy = default_grids("choice", args.grid)
    t_surface, surf = _best(
        lambda: surface_from_coordinates(coords.x, coords.y, correct, x_grid=gx, y_grid=gy), args.repeat
    )
    t_class, surf_k = _best(
        lambda: surface_from_coordinates(
            coords.x, coords.y, correct, x_grid=gx, y_grid=gy, predicted=coords.predicted, n_classes=args.k
        ),
        args.repeat,
    )
    t_select, sel = _best(lambda: select_guarantee(surf, alpha=0.05, delta=0.1, method="holm"), args.repeat)

    rng = np.random.default_rng(1)
    n_points = min(args.naive_points, args.grid * args.grid)
    flat = rng.choice(args.grid * args.grid, n_points, replace=False)
    points = np.stack([flat // args.grid, flat % args.grid], axis=1)
    t0 = time.perf_counter()
    acc, err = naive_surface(coords.x, coords.y, correct, gx, gy, points=points)
    t_naive_subset = time.perf_counter() - t0
    assert np.array_equal(acc, surf.accepted[points[:, 0], points[:, 1]])
    assert np.array_equal(err, surf.errors[points[:, 0], points[:, 1]])
    assert np.array_equal(surf_k.class_accepted.sum(axis=0), surf.accepted)
    t_naive_full = t_naive_subset * (args.grid * args.grid) / n_points

    result = {
        "n_items": args.n,
        "n_options": args.k,
        "grid": [args.grid, args.grid],
        "seconds": {
            "coordinates": t_coords,
            "surface": t_surface,
            "surface_per_class": t_class,
            "selection_holm": t_select,
            "coordinates_plus_surface": t_coords + t_surface,
            "naive_measured_points": n_points,
            "naive_measured": t_naive_subset,
            "naive_full_grid_extrapolated": t_naive_full,
        },
        "speedup_surface_vs_naive": t_naive_full / t_surface,
        "speedup_coordinates_plus_surface_vs_naive": t_naive_full / (t_coords + t_surface),
        "naive_counts_equal_surface_on_measured_points": True,
        "chosen": sel.params,
        "chosen_coverage": sel.calibration["coverage"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    s = result["seconds"]
    print(f"{args.n:,} items × {args.k} options, {args.grid} × {args.grid} (tau, margin) grid (best of {args.repeat})")
    print(f"  coordinates (p_top, margin, predicted) : {s['coordinates']:.3f} s")
    print(f"  full surface (accepted, errors)         : {s['surface']:.3f} s")
    print(f"  full surface with per-class axis (K={args.k}) : {s['surface_per_class']:.3f} s")
    print(f"  LTT p-values + Holm + pick              : {s['selection_holm']:.3f} s")
    print(
        f"  naive scan, {n_points} grid points measured : {s['naive_measured']:.3f} s "
        f"-> full grid extrapolated {s['naive_full_grid_extrapolated']:.1f} s"
    )
    print(
        f"  speed-up surface vs naive: {result['speedup_surface_vs_naive']:.0f}x "
        f"(including coordinates: {result['speedup_coordinates_plus_surface_vs_naive']:.0f}x)"
    )


if __name__ == "__main__":
    main()
