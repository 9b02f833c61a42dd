"""Annotator agreement: the workbench's vectorised pairwise Cohen's κ against a loop of scikit-learn calls.

    python bench/agreement.py                       # 20,000 items, 3 votes each, 300 annotators
    python bench/agreement.py --items 100000 --annotators 2000 --json

Workload (same seeded votes on both sides): the mean Cohen's κ over every annotator pair sharing at
least two items (Light's κ), as ``workbench report`` shows for a question with several votes per item.

- *workbench*: :func:`workbench.metrics.agreement.pairwise_kappa` — every pair at once from bincounts
  over the pairs of votes that share an item.
- *baseline*: find the pairs sharing ≥ 2 items (sparse co-occurrence), then one
  ``sklearn.metrics.cohen_kappa_score`` call per pair on the items it shares (found by
  ``np.intersect1d`` of the two annotators' sorted items).

Prints both times, their ratio and the two means (equal to 1e-12). Timings on a shared 2-core machine
are noisy; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np


def make_votes(n: int, k: int, crowd: int, per_item: int, flip: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, k, n)
    who = np.argsort(rng.random((n, crowd)), axis=1)[:, :per_item] if crowd <= 64 else None
    if who is None:  # large crowds: draw per_item distinct annotators per item without an (n, crowd) matrix
        who = rng.integers(0, crowd, (n, per_item))
        for j in range(1, per_item):
            clash = (who[:, [j]] == who[:, :j]).any(axis=1)
            while clash.any():
                who[clash, j] = rng.integers(0, crowd, int(clash.sum()))
                clash = (who[:, [j]] == who[:, :j]).any(axis=1)
    flipped = rng.random((n, per_item)) < flip
    opts = np.where(flipped, (gold[:, None] + rng.integers(1, k, (n, per_item))) % k, gold[:, None])
    return np.repeat(np.arange(n), per_item), who.ravel(), opts.ravel()


def workbench_side(item, who, opt, k):
    from workbench.metrics.agreement import pairwise_kappa

    t = time.perf_counter()
    value, pairs = pairwise_kappa((item, who, opt), k)
    return time.perf_counter() - t, value, pairs


def baseline_side(item, who, opt, k):
    from scipy.sparse import csc_matrix
    from sklearn.metrics import cohen_kappa_score

    t = time.perf_counter()
    n, m = int(item.max()) + 1, int(who.max()) + 1
    labelled = csc_matrix((np.ones(item.size), (item, who)), shape=(n, m))
    co = (labelled.T @ labelled).tocoo()
    order = np.lexsort((item, who))  # per annotator: its items (sorted) and options
    starts = np.searchsorted(who[order], np.arange(m + 1))
    items_of = [item[order][starts[j] : starts[j + 1]] for j in range(m)]
    opts_of = [opt[order][starts[j] : starts[j + 1]] for j in range(m)]
    values = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a, b, shared in zip(co.row, co.col, co.data):
            if a >= b or shared < 2:
                continue
            _, ia, ib = np.intersect1d(items_of[a], items_of[b], assume_unique=True, return_indices=True)
            values.append(cohen_kappa_score(opts_of[a][ia], opts_of[b][ib], labels=list(range(k))))
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    return time.perf_counter() - t, float(finite.mean()), int(finite.size)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--annotators", type=int, default=300)
    ap.add_argument("--per-item", type=int, default=3)
    ap.add_argument("--options", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    item, who, opt = make_votes(args.items, args.options, args.annotators, args.per_item, 0.2)
    wb_time, wb_value, wb_pairs = workbench_side(item, who, opt, args.options)
    base_time, base_value, base_pairs = baseline_side(item, who, opt, args.options)
    result = {
        "items": args.items,
        "annotators": args.annotators,
        "votes_per_item": args.per_item,
        "pairs": wb_pairs,
        "workbench_s": round(wb_time, 3),
        "baseline_s": round(base_time, 3),
        "speedup": round(base_time / wb_time, 1),
        "same_value": bool(abs(wb_value - base_value) < 1e-12 and wb_pairs == base_pairs),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"pairwise Cohen's κ, {args.items:,} items × {args.per_item} votes, {args.annotators} annotators, "
            f"{wb_pairs:,} pairs: workbench {wb_time:.3f} s, scikit-learn loop {base_time:.3f} s "
            f"(× {base_time / wb_time:.1f}); same mean: {result['same_value']}"
        )


if __name__ == "__main__":
    main()
