"""Paired Poisson bootstrap over a table of cell counts: intervals that need no per-item arrays.

When every per-item quantity a statistic uses takes one of a few values (accepted or not, wrong or
not, top choice right or not…), an item is described by its *cell* and the data by the count of
items per cell. The Poisson bootstrap gives every item an independent Poisson(1) weight; the
weight of a cell is then the sum of its items' weights, which is exactly Poisson(count). So a
replicate is one Poisson draw per cell, and the replicates depend only on the counts and the seed:
not on how the items were read (chunks, order, partitions), and not on n (O(cells) per replicate
instead of O(n)). Streaming readers accumulate the counts per chunk and bootstrap at the end.

The Poisson bootstrap approximates the multinomial one of :func:`workbench.metrics.bootstrap.paired_bootstrap`
(Hanley & MacGibbon 2006; Chamandy et al. 2012, "Estimating uncertainty for massive data
streams"); the two give the same intervals up to Monte-Carlo noise, not the same replicates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from workbench.metrics.bootstrap import PairedDifference, percentiles

#: ``stats(W)``: W (r, cells) float weights per cell → {name: (r,) values}.
CellStats = Callable[[np.ndarray], Mapping[str, np.ndarray]]


def poisson_cell_weights(counts: np.ndarray, n_boot: int, seed: int = 0) -> np.ndarray:
    """(n_boot, cells) Poisson(count) draws: the summed Poisson(1) item weights of each cell."""
    counts = np.asarray(counts, dtype=float).reshape(-1)
    rng = np.random.default_rng(seed)
    return rng.poisson(counts, size=(n_boot, counts.size)).astype(float)


def paired_cell_bootstrap(
    counts: np.ndarray,
    stats_a: CellStats,
    stats_b: CellStats,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, PairedDifference]:
    """Paired bootstrap of ``stats_b − stats_a`` from cell ``counts`` (both sides see the same weights).

    The estimate uses the counts themselves; the interval is the percentile interval of the
    replicate differences and ``p_value`` twice the smaller tail share on either side of 0 (as
    :func:`~workbench.metrics.bootstrap.paired_bootstrap`).
    """
    counts = np.asarray(counts, dtype=float).reshape(1, -1)
    est_a, est_b = stats_a(counts), stats_b(counts)
    names = [k for k in est_a if k in est_b]
    if n_boot:
        w = poisson_cell_weights(counts, n_boot, seed)
        va, vb = stats_a(w), stats_b(w)
        diffs = np.column_stack([np.asarray(vb[k], float) - np.asarray(va[k], float) for k in names])
        lo, hi = percentiles(diffs, level)
    else:
        diffs = np.empty((0, len(names)))
        lo = hi = np.full(len(names), np.nan)
    out = {}
    for i, k in enumerate(names):
        d = diffs[:, i][np.isfinite(diffs[:, i])]
        p = min(1.0, 2.0 * min(float(np.mean(d <= 0)), float(np.mean(d >= 0)))) if d.size else float("nan")
        a, b = float(np.asarray(est_a[k]).reshape(-1)[0]), float(np.asarray(est_b[k]).reshape(-1)[0])
        out[k] = PairedDifference(a, b, b - a, float(lo[i]), float(hi[i]), float(p), level, n_boot)
    return out
