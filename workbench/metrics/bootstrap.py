"""Seeded, vectorised bootstrap intervals, paired run comparisons and McNemar's test.

A bootstrap replicate is represented by *resampling counts* ``w`` (n,): how many times each item
was drawn (``np.bincount`` of n uniform draws). Every metric here is a function of per-item
quantities computed once (correctness, bin index, confidence, per-item loss), so a replicate is a
handful of weighted sums — ``w @ x`` or ``np.bincount(bin, weights=w * x)`` — instead of re-running
a report on a resampled copy of the data.

Paired comparison of two runs on the *same items* applies the same counts to both runs, so the
interval of a difference reflects item-level correlation (the compare/shadow layer reuses this).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

Stats = Callable[[np.ndarray | None], Mapping[str, float]]


def _single_threaded_blas():
    """Vector dot products in a replicate are tiny for BLAS threads; on a busy machine the threads'
    spin-waits cost more than the work, so replicates run with one BLAS thread."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        from contextlib import nullcontext

        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def resample_counts(n: int, n_boot: int, seed: int = 0) -> Iterator[np.ndarray]:
    """Yield ``n_boot`` count vectors (n,) float of a seeded multinomial (n draws with replacement)."""
    rng = np.random.default_rng(seed)
    for _ in range(n_boot):
        # counted as integers, then cast: the same numbers as ``np.add.at`` of 1.0 into zeros, in 55% of its
        # time at 500k items (its unbuffered scatter is the slower loop)
        yield np.bincount(rng.integers(0, n, size=n), minlength=n).astype(float)


def resample_cell_counts(cells: np.ndarray, n_cells: int, n_boot: int, seed: int = 0) -> Iterator[np.ndarray]:
    """Replicates of :func:`resample_counts` (``n = len(cells)`` draws with replacement) summed per cell:
    ``n_cells`` floats per replicate. For statistics of items that take a few values (accepted or not,
    wrong or not). n uniform draws over the items land in cell c with probability (items in c) / n,
    independently, so their per-cell counts are exactly Multinomial(n, items per cell / n): drawn as
    such, O(n_cells) per replicate instead of n draws (the same distribution, not the same numbers as
    summing :func:`resample_counts` of the seed)."""
    cells = np.asarray(cells)
    n = len(cells)
    if n == 0:
        yield from (np.zeros(n_cells) for _ in range(n_boot))
        return
    share = np.bincount(cells, minlength=n_cells)[:n_cells] / n
    yield from np.random.default_rng(seed).multinomial(n, share, size=n_boot).astype(float)


@dataclass
class Interval:
    """A point estimate with a percentile bootstrap interval (``low``/``high`` NaN when not bootstrapped)."""

    estimate: float
    low: float = float("nan")
    high: float = float("nan")
    level: float = 0.95
    n_boot: int = 0

    def to_dict(self) -> dict:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "n_boot": self.n_boot,
        }


def percentiles(reps: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided percentile interval at ``level`` in (0, 1) of each column of ``reps`` (n_boot, m)
    (NaN replicates ignored): ``(low, high)``, each (m,); empty arrays when ``reps`` is empty."""
    alpha = (1.0 - level) / 2.0
    with np.errstate(all="ignore"):
        lo = np.nanquantile(reps, alpha, axis=0) if reps.size else np.array([])
        hi = np.nanquantile(reps, 1.0 - alpha, axis=0) if reps.size else np.array([])
    return lo, hi


@overload
def bootstrap_many(
    stats: Stats, n: int, n_boot: int = ..., seed: int = ..., level: float = ..., keep_replicates: Literal[False] = ...
) -> dict[str, Interval]: ...


@overload
def bootstrap_many(
    stats: Stats, n: int, n_boot: int = ..., seed: int = ..., level: float = ..., *, keep_replicates: Literal[True]
) -> tuple[dict[str, Interval], dict]: ...


def bootstrap_many(
    stats: Stats, n: int, n_boot: int = 200, seed: int = 0, level: float = 0.95, keep_replicates: bool = False
) -> dict[str, Interval] | tuple[dict[str, Interval], dict]:
    """Percentile intervals for several metrics sharing the same resamples.

    Parameters
    ----------
    stats : callable(weights or None) -> {name: value}; ``None`` means the plain estimate
    n : number of items
    n_boot : number of replicates (0 gives point estimates only)

    Returns
    -------
    {name: Interval}, plus {name: replicates (n_boot,)} when ``keep_replicates``.
    """
    out, reps = bootstrap_shared(lambda w: [stats(w)], n, n_boot=n_boot, seed=seed, level=level)[0]
    return (out, reps) if keep_replicates else out


def bootstrap_shared(
    stats: Callable[[np.ndarray | None], Sequence[Mapping[str, float]]],
    n: int,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
) -> list[tuple[dict[str, Interval], dict[str, np.ndarray]]]:
    """:func:`bootstrap_many` of several sets of metrics over the same n items with the same seed,
    drawing each replicate's resampling counts once: ``stats(w)`` returns one {name: value} per set
    (e.g. two runs answering the same items). Each set gets exactly what ``bootstrap_many(its stats,
    n, n_boot, seed, level, keep_replicates=True)`` returns: (intervals, replicates)."""
    estimates = [dict(e) for e in stats(None)]
    names = [list(e) for e in estimates]
    reps = [np.empty((n_boot if n > 0 else 0, len(nm))) for nm in names]
    if n > 0:
        with _single_threaded_blas():
            for b, w in enumerate(resample_counts(n, n_boot, seed)):
                for i, values in enumerate(stats(w)):
                    reps[i][b] = [values[k] for k in names[i]]
    out = []
    for est, nm, r in zip(estimates, names, reps, strict=True):
        lo, hi = percentiles(r, level) if n_boot and n > 0 else (np.full(len(nm), np.nan),) * 2
        intervals = {
            k: Interval(float(est[k]), float(lo[i]), float(hi[i]), level, n_boot if n > 0 else 0)
            for i, k in enumerate(nm)
        }
        out.append((intervals, {k: r[:, i] for i, k in enumerate(nm)}))
    return out


@dataclass
class PairedDifference:
    """Difference ``b − a`` of a metric between two runs on the same items.

    ``p_value`` is the two-sided bootstrap p-value of "no difference" (twice the smaller tail
    fraction of replicates on either side of 0, capped at 1).
    """

    a: float
    b: float
    difference: float
    low: float
    high: float
    p_value: float
    level: float = 0.95
    n_boot: int = 0

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "difference": self.difference,
            "low": self.low,
            "high": self.high,
            "p_value": self.p_value,
            "level": self.level,
            "n_boot": self.n_boot,
        }


def paired_bootstrap(
    stats_a: Stats,
    stats_b: Stats,
    n: int,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    *,
    cells: tuple[np.ndarray, int] | None = None,
) -> dict[str, PairedDifference]:
    """Item-paired bootstrap of ``stats_b − stats_a`` for every metric both return.

    Both callables receive the *same* resampling counts per replicate (items aligned by index).
    ``cells=(cell (n,), n_cells)``: the callables receive each replicate's counts summed per cell
    (:func:`resample_cell_counts`: the same distribution, drawn per cell) instead of per item.
    """
    est_a, est_b = dict(stats_a(None)), dict(stats_b(None))
    names = [k for k in est_a if k in est_b]
    diffs = np.empty((n_boot, len(names)))
    draws = resample_counts(n, n_boot, seed) if cells is None else resample_cell_counts(*cells, n_boot, seed)
    with _single_threaded_blas():
        for r, w in enumerate(draws):
            va, vb = stats_a(w), stats_b(w)
            diffs[r] = [vb[k] - va[k] for k in names]
    return _paired_result(est_a, est_b, names, diffs, n_boot, level)


def paired_from_replicates(
    est_a: Mapping[str, float],
    est_b: Mapping[str, float],
    reps_a: Mapping[str, np.ndarray],
    reps_b: Mapping[str, np.ndarray],
    level: float = 0.95,
) -> dict[str, PairedDifference]:
    """:func:`paired_bootstrap` from the replicates each side's :func:`bootstrap_many` kept
    (``keep_replicates=True``): when both were drawn over the same n items with the same seed (the
    same resampling counts, items aligned by index), ``reps_b − reps_a`` are exactly the differences
    ``paired_bootstrap`` would compute, without drawing them again."""
    names = [k for k in est_a if k in est_b]
    n_boot = len(next(iter(reps_a.values()))) if reps_a else 0
    diffs = np.empty((n_boot, len(names)))
    for i, k in enumerate(names):
        diffs[:, i] = np.asarray(reps_b[k], dtype=float) - np.asarray(reps_a[k], dtype=float)
    return _paired_result(dict(est_a), dict(est_b), names, diffs, n_boot, level)


def _paired_result(
    est_a: dict, est_b: dict, names: list[str], diffs: np.ndarray, n_boot: int, level: float
) -> dict[str, PairedDifference]:
    lo, hi = percentiles(diffs, level) if n_boot else (np.full(len(names), np.nan),) * 2
    out = {}
    for i, k in enumerate(names):
        d = diffs[:, i][np.isfinite(diffs[:, i])]
        if d.size:
            p = min(1.0, 2.0 * min(float(np.mean(d <= 0)), float(np.mean(d >= 0))))
        else:
            p = float("nan")
        out[k] = PairedDifference(
            float(est_a[k]),
            float(est_b[k]),
            float(est_b[k] - est_a[k]),
            float(lo[i]),
            float(hi[i]),
            float(p),
            level,
            n_boot,
        )
    return out


@dataclass
class McNemarResult:
    """McNemar's test on paired correctness: ``b01`` = a wrong & b right, ``b10`` = a right & b wrong."""

    b01: int
    b10: int
    p_exact: float
    p_mid: float

    def to_dict(self) -> dict:
        return {"a_wrong_b_right": self.b01, "a_right_b_wrong": self.b10, "p_exact": self.p_exact, "p_mid": self.p_mid}


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> McNemarResult:
    """Exact (binomial) and mid-p McNemar tests of equal accuracy, two-sided.

    Only discordant items matter: under H0 each is equally likely to favour either run, so
    min(b01, b10) ~ Binomial(b01 + b10, 1/2). Exact p = min(1, 2·P(X ≤ min)); mid-p subtracts
    the point probability P(X = min) (Fagerland et al. 2013), which is less conservative.
    """
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    return mcnemar_counts(int(np.sum(~a & b)), int(np.sum(a & ~b)))


def mcnemar_counts(b01: int, b10: int) -> McNemarResult:
    """:func:`mcnemar` from the discordant counts (``b01`` = a wrong & b right, ``b10`` = a right & b wrong)."""
    from scipy.stats import binom

    m = b01 + b10
    if m == 0:
        return McNemarResult(b01, b10, 1.0, 1.0)
    low = min(b01, b10)
    p_exact = min(1.0, 2.0 * float(binom.cdf(low, m, 0.5)))
    p_mid = min(1.0, 2.0 * float(binom.cdf(low, m, 0.5)) - float(binom.pmf(low, m, 0.5)))
    return McNemarResult(b01, b10, p_exact, p_mid)
