"""Reliability curves and the calibration-error family (binned ECE/MCE, debiased ECE, smooth ECE).

Conventions used throughout:

- A *binary* calibration problem is a pair ``(y_true, y_score)``: ``y_true`` (n,) in {0, 1},
  ``y_score`` (n,) in [0, 1] the predicted probability that ``y_true == 1``.
- *Top-label* reduces a multiclass problem ``(probs (n, k), labels (n,))`` to the binary pair
  (correct = argmax == label, confidence = max prob) — netcal's and relplot's reduction.
- *Class-wise* (marginal) measures apply the binary measure to every one-vs-rest column
  ``(labels == j, probs[:, j])`` and average over options.
- Bins: ``"uniform"`` = equal width on [0, 1]; ``"quantile"`` = equal mass (quantiles of the
  scores, outer edges forced to 0 and 1). A score goes to bin ``b`` when
  ``edges[b] <= s < edges[b + 1]`` (the last bin also takes ``s == 1``), numpy's histogram
  convention. Empty bins are *kept* with count 0 and NaN means, so curves always have
  ``n_bins`` rows (scikit-learn's ``calibration_curve`` drops them).

Everything is vectorised: one ``searchsorted`` per score column and ``np.bincount`` per bin sum,
so the per-bin sums can be reused by the bootstrap (see :mod:`workbench.metrics.bootstrap`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

STRATEGIES = ("uniform", "quantile")
Z95 = 1.959963984540054


# -- binning ------------------------------------------------------------------------------------
def bin_edges(y_score: np.ndarray, n_bins: int = 15, strategy: str = "uniform") -> np.ndarray:
    """Bin edges, shape (n_bins + 1,), from 0 to 1.

    ``"quantile"`` edges are the empirical quantiles of ``y_score`` (linear interpolation); ties
    can make several edges equal, which leaves some bins empty rather than merging them.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":
        s = np.asarray(y_score, dtype=float)
        if s.size == 0:
            return np.linspace(0.0, 1.0, n_bins + 1)
        edges = np.quantile(s, np.linspace(0.0, 1.0, n_bins + 1))
        edges[0], edges[-1] = 0.0, 1.0
        return edges
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def assign_bins(y_score: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index in [0, len(edges) - 2] for every score (histogram convention, see module doc)."""
    return np.searchsorted(edges[1:-1], np.asarray(y_score, dtype=float), side="right")


def uniform_bin_index(y_score: np.ndarray, n_bins: int) -> np.ndarray:
    """Same result as ``assign_bins(y_score, linspace(0, 1, n_bins + 1))``, without a binary search.

    ``floor(s · n_bins)`` can only disagree with the edge array for scores within rounding error of
    an edge; those few are re-assigned by ``searchsorted`` on the edges.
    """
    s = np.asarray(y_score, dtype=float)
    t = s * n_bins
    b = t.astype(np.int64)
    near = np.abs(t - np.rint(t)) < 1e-9
    if near.any():
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        b[near] = np.searchsorted(edges[1:-1], s[near], side="right")
    np.clip(b, 0, n_bins - 1, out=b)
    return b


def option_bin_sums(
    probs: np.ndarray, labels: np.ndarray, n_bins: int = 15, chunk_rows: int = 16384
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal-width bin sums of every one-vs-rest column, in one pass over row chunks.

    Returns ``count``, ``sum_score`` and ``sum_true``, each (k, n_bins): for option j and bin b the
    number of items with p_j in bin b, the sum of those p_j, and how many of them are labelled j.
    Row chunks keep the work cache-friendly and memory O(chunk_rows · k) (reading columns of a
    C-ordered (n, k) matrix one at a time would stream the whole matrix k times).
    """
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels, dtype=np.int64)
    n, k = probs.shape
    size = k * n_bins
    offsets = n_bins * np.arange(k, dtype=np.int64)[None, :]
    count = np.zeros(size)
    sum_score = np.zeros(size)
    sub = 4096  # bin indices a few rows at a time: their temporaries stay in cache (the sums are per chunk)
    cells = np.empty((min(chunk_rows, n), k), dtype=np.int64)
    for start in range(0, n, chunk_rows):
        block = probs[start : start + chunk_rows]
        m = len(block)
        for s0 in range(0, m, sub):
            np.add(uniform_bin_index(block[s0 : s0 + sub], n_bins), offsets, out=cells[s0 : min(s0 + sub, m)])
        flat = cells[:m].ravel()
        count += np.bincount(flat, minlength=size)
        sum_score += np.bincount(flat, weights=block.ravel(), minlength=size)
    p_label = probs[np.arange(n), labels]
    sum_true = np.bincount(uniform_bin_index(p_label, n_bins) + n_bins * labels, minlength=size).astype(float)
    return count.reshape(k, n_bins), sum_score.reshape(k, n_bins), sum_true.reshape(k, n_bins)


@dataclass
class BinStats:
    """Per-bin sums of one binary problem; everything binned metrics need.

    Arrays have shape (n_bins,): ``count`` items, ``sum_score`` Σ y_score, ``sum_true`` Σ y_true.
    ``n`` is the total weight (number of items when unweighted).
    """

    edges: np.ndarray
    count: np.ndarray
    sum_score: np.ndarray
    sum_true: np.ndarray

    @property
    def n(self) -> float:
        return float(self.count.sum())


def bin_stats(y_true: np.ndarray, y_score: np.ndarray, n_bins: int = 15, strategy: str = "uniform") -> BinStats:
    """Sum scores, outcomes and counts per bin."""
    y_true = np.asarray(y_true, dtype=float)
    y_score = np.asarray(y_score, dtype=float)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        bins = uniform_bin_index(y_score, n_bins)
    else:
        edges = bin_edges(y_score, n_bins, strategy)
        bins = assign_bins(y_score, edges)
    nb = len(edges) - 1
    count = np.bincount(bins, minlength=nb).astype(float)
    sum_score = np.bincount(bins, weights=y_score, minlength=nb)
    sum_true = np.bincount(bins, weights=y_true, minlength=nb)
    return BinStats(edges, count, sum_score, sum_true)


def _gaps(stats: BinStats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bin weights (count / n), mean score and observed frequency (NaN for empty bins)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_score = stats.sum_score / stats.count
        frac_true = stats.sum_true / stats.count
    n = stats.n
    weight = stats.count / n if n > 0 else np.zeros_like(stats.count)
    return weight, mean_score, frac_true


def ece_from_stats(stats: BinStats) -> float:
    """Σ_b (n_b / n) · |mean score_b − frequency_b|."""
    weight, s, t = _gaps(stats)
    nz = stats.count > 0
    return float(np.sum(weight[nz] * np.abs(s[nz] - t[nz]))) if nz.any() else float("nan")


def mce_from_stats(stats: BinStats) -> float:
    """max over non-empty bins of |mean score_b − frequency_b|."""
    _, s, t = _gaps(stats)
    nz = stats.count > 0
    return float(np.max(np.abs(s[nz] - t[nz]))) if nz.any() else float("nan")


def debiased_ece_from_stats(stats: BinStats) -> float:
    """Kumar et al. (2019) debiased L2 calibration error from per-bin sums.

    Per bin the squared gap (s̄_b − ȳ_b)² overestimates the true squared gap by the sampling
    variance of ȳ_b, estimated as ȳ_b(1 − ȳ_b)/(n_b − 1); bins with fewer than 2 items contribute 0.
    Returns sqrt(max(Σ_b (n_b/n)·(gap² − variance), 0)). Assumes unit weights (counts of items).
    """
    weight, s, t = _gaps(stats)
    ok = stats.count >= 2
    if not (stats.count > 0).any():
        return float("nan")
    term = (s[ok] - t[ok]) ** 2 - t[ok] * (1.0 - t[ok]) / (stats.count[ok] - 1.0)
    return float(np.sqrt(max(float(np.sum(weight[ok] * term)), 0.0)))


# -- binary measures ----------------------------------------------------------------------------
def calibration_error(
    y_true: np.ndarray, y_score: np.ndarray, n_bins: int = 15, strategy: str = "uniform", norm: str = "l1"
) -> float:
    """Binned calibration error of a binary problem.

    Parameters
    ----------
    y_true : (n,) array of {0, 1}
    y_score : (n,) array in [0, 1], predicted P(y_true = 1)
    norm : ``"l1"`` (ECE), ``"max"`` (MCE) or ``"debiased"`` (Kumar's debiased L2)

    Returns
    -------
    float in [0, 1] (NaN when there are no items)
    """
    stats = bin_stats(y_true, y_score, n_bins, strategy)
    if norm == "l1":
        return ece_from_stats(stats)
    if norm == "max":
        return mce_from_stats(stats)
    if norm == "debiased":
        return debiased_ece_from_stats(stats)
    raise ValueError(f"norm must be 'l1', 'max' or 'debiased', got {norm!r}")


def wilson_interval(successes: np.ndarray, trials: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion, vectorised; NaN where ``trials == 0``."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1.0 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = np.where(n > 0, np.clip(centre - half, 0.0, 1.0), np.nan)
    high = np.where(n > 0, np.clip(centre + half, 0.0, 1.0), np.nan)
    return low, high


@dataclass
class ReliabilityCurve:
    """Binned reliability curve of one binary problem; all arrays have shape (n_bins,).

    ``mean_score`` and ``frac_true`` are NaN for empty bins (``count == 0``); ``low``/``high``
    are 95% Wilson intervals of ``frac_true``.
    """

    edges: np.ndarray
    count: np.ndarray
    mean_score: np.ndarray
    frac_true: np.ndarray
    low: np.ndarray
    high: np.ndarray
    strategy: str = "uniform"
    label: str = ""

    @property
    def ece(self) -> float:
        nz = self.count > 0
        return (
            float(np.sum(self.count[nz] * np.abs(self.mean_score[nz] - self.frac_true[nz])) / self.count.sum())
            if nz.any()
            else float("nan")
        )

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "bin": np.arange(len(self.count)),
                "lower": self.edges[:-1],
                "upper": self.edges[1:],
                "count": self.count.astype(int),
                "mean_score": self.mean_score,
                "frac_true": self.frac_true,
                "low": self.low,
                "high": self.high,
            }
        )

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "strategy": self.strategy,
            "edges": self.edges.tolist(),
            "count": self.count.astype(int).tolist(),
            "mean_score": self.mean_score.tolist(),
            "frac_true": self.frac_true.tolist(),
            "low": self.low.tolist(),
            "high": self.high.tolist(),
        }


def curve_from_stats(stats: BinStats, strategy: str = "uniform", label: str = "") -> ReliabilityCurve:
    _, s, t = _gaps(stats)
    low, high = wilson_interval(stats.sum_true, stats.count)
    return ReliabilityCurve(stats.edges, stats.count, s, t, low, high, strategy, label)


def reliability_curve(
    y_true: np.ndarray, y_score: np.ndarray, n_bins: int = 10, strategy: str = "uniform", label: str = ""
) -> ReliabilityCurve:
    """Reliability curve of a binary problem (all ``n_bins`` bins, empty ones with count 0 and NaN)."""
    return curve_from_stats(bin_stats(y_true, y_score, n_bins, strategy), strategy, label)


# -- multiclass reductions ----------------------------------------------------------------------
def top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(confidence (n,), correct (n,) float) of the arg-max option; ties go to the first option."""
    probs = np.asarray(probs, dtype=float)
    pred = probs.argmax(axis=1)
    conf = probs[np.arange(len(pred)), pred]
    return conf, (pred == np.asarray(labels)).astype(float)


def top_label_ece(
    probs: np.ndarray, labels: np.ndarray, n_bins: int = 15, strategy: str = "uniform", norm: str = "l1"
) -> float:
    """Top-label ECE (``norm="l1"``), MCE (``"max"``) or debiased L2 CE (``"debiased"``), in [0, 1]."""
    conf, correct = top_label(probs, labels)
    return calibration_error(correct, conf, n_bins, strategy, norm)


def classwise_stats(
    probs: np.ndarray | None, labels: np.ndarray, n_bins: int = 15, strategy: str = "uniform", sums: tuple | None = None
) -> list[BinStats]:
    """One :class:`BinStats` per option (one-vs-rest).

    Equal-width bins come from one chunked pass (:func:`option_bin_sums`, or ``sums`` already
    computed by it); equal-mass bins need per-column quantiles, so they loop over the k columns.
    """
    labels = np.asarray(labels)
    if strategy == "uniform":  # one chunked pass over the matrix instead of k column scans
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        if sums is None:
            sums = option_bin_sums(np.asarray(probs, dtype=float), labels, n_bins)
        count, sum_score, sum_true = sums  # with ``sums`` given, ``probs`` may be None
        return [BinStats(edges, count[j], sum_score[j], sum_true[j]) for j in range(count.shape[0])]
    probs = np.asarray(probs, dtype=float)
    return [bin_stats((labels == j), probs[:, j], n_bins, strategy) for j in range(probs.shape[1])]


def classwise_ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15, strategy: str = "uniform") -> float:
    """Mean over options of the binned ECE of column j against ``labels == j`` (Kull et al. 2019)."""
    return float(np.mean([ece_from_stats(s) for s in classwise_stats(probs, labels, n_bins, strategy)]))


# -- smooth ECE (Błasiok & Nakkiran 2024) -------------------------------------------------------
def _grid_size(sigma: float) -> int:
    # ~10 grid points per sigma and at least 1001 — the reference implementation's resolution, so
    # that both discretise the same integral the same way (results agree to ~1e-5).
    return int(max(2000, round(20.0 / sigma)) // 2 + 1)


def _linear_binning(x: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Spread each value onto the two nearest points of a uniform grid on [0, 1] (linear weights)."""
    pos = np.clip(x, 0.0, 1.0) * (size - 1)
    lo = np.minimum(pos.astype(np.int64), size - 2)
    frac = pos - lo
    return np.bincount(lo, weights=(1.0 - frac) * values, minlength=size) + np.bincount(
        lo + 1, weights=frac * values, minlength=size
    )


def _reflected_gaussian_smooth(binned: np.ndarray, sigma: float) -> np.ndarray:
    """Convolve grid masses with a Gaussian reflected at 0 and 1; returns values on the same grid.

    Reflection mirrors the mass around both boundaries so that the smoother is not biased
    towards the interior near 0 and 1.
    """
    size = binned.size
    h = 1.0 / (size - 1)
    half = int(min(size - 1, np.ceil(6.0 * sigma / h)))  # the kernel is negligible beyond 6 sigma
    offsets = np.arange(-half, half + 1) * h
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    left = binned[1 : half + 1][::-1]  # mirror image across 0 (the point 0 itself is not duplicated)
    right = binned[-half - 1 : -1][::-1]  # mirror image across 1
    extended = np.concatenate([left, binned, right])
    return np.convolve(extended, kernel, mode="valid")


def _smooth_parts(
    y_true: np.ndarray,
    y_score: np.ndarray,
    sigma: float,
    cache: dict | None = None,
    sample_weight: np.ndarray | None = None,
):
    size = _grid_size(sigma)
    if cache is not None and size in cache:
        b_res, b_one = cache[size]
    else:
        w = np.ones_like(y_score) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        b_res = _linear_binning(y_score, w * (y_score - y_true), size)
        b_one = _linear_binning(y_score, w, size)
        if cache is not None:
            cache[size] = (b_res, b_one)
    return _reflected_gaussian_smooth(b_res, sigma), _reflected_gaussian_smooth(b_one, sigma)


def smooth_ece_sigma(
    y_true: np.ndarray,
    y_score: np.ndarray,
    sigma: float,
    _cache: dict | None = None,
    sample_weight: np.ndarray | None = None,
) -> float:
    """smECE at a fixed bandwidth ``sigma``: ∫|r̂_σ(t)| δ̂_σ(t) dt / ∫ δ̂_σ(t) dt.

    r̂_σ is the kernel regression of the residual (score − outcome) on the score and δ̂_σ the kernel
    density of the scores, both with a Gaussian of width ``sigma`` reflected at 0 and 1. Since
    r̂·δ̂ is the smoothed residual mass, the ratio is Σ_t |S_res(t)| / Σ_t S_one(t) over a mesh.
    ``sample_weight`` (n,) weights items (bootstrap counts).
    """
    y_true = np.asarray(y_true, dtype=float)
    y_score = np.asarray(y_score, dtype=float)
    if y_true.size == 0:
        return float("nan")
    s_res, s_one = _smooth_parts(y_true, y_score, sigma, _cache, sample_weight)
    # The integral is a Riemann sum over an evaluation mesh of max(200, 10/σ) points, the
    # discretisation of the reference implementation (relplot), interpolated from the finer grid.
    grid = np.linspace(0.0, 1.0, s_one.size)
    mesh = np.linspace(0.0, 1.0, int(max(200, round(10.0 / sigma))))
    return float(np.abs(np.interp(mesh, grid, s_res)).sum() / np.interp(mesh, grid, s_one).sum())


def smooth_ece(y_true: np.ndarray, y_score: np.ndarray, *, return_sigma: bool = False, tol: float = 1e-4):
    """Smooth ECE with the automatic bandwidth: the fixed point σ* where smECE_σ = σ.

    smECE_σ decreases with σ, so σ* is found by bisection on (0, 1] to ``tol``; the returned
    value is smECE at the upper end of the final bracket (≈ σ*). Continuous in the predictions and
    free of a bin-count choice; see Błasiok & Nakkiran (ICLR 2024).

    Returns
    -------
    float in [0, 1], or (value, sigma) when ``return_sigma``.
    """
    y_true = np.asarray(y_true, dtype=float)
    y_score = np.asarray(y_score, dtype=float)
    if y_true.size == 0:
        return (float("nan"), float("nan")) if return_sigma else float("nan")
    cache: dict = {}
    lo, hi = 0.0, 1.0
    if smooth_ece_sigma(y_true, y_score, hi, cache) <= hi:
        while hi - lo > tol and hi > 1e-3:
            mid = 0.5 * (lo + hi)
            if smooth_ece_sigma(y_true, y_score, mid, cache) > mid:
                lo = mid
            else:
                hi = mid
    value = smooth_ece_sigma(y_true, y_score, hi, cache)
    return (value, hi) if return_sigma else value


@dataclass
class SmoothReliabilityCurve:
    """Kernel-smoothed reliability curve on a mesh of scores in [0, 1] (all arrays (m,)).

    ``curve`` is the smoothed observed frequency E[y | score = t] and ``density`` the smoothed
    density of the scores (normalised to integrate to 1 on [0, 1]).
    """

    mesh: np.ndarray
    curve: np.ndarray
    density: np.ndarray
    sigma: float
    smece: float
    label: str = ""
    extra: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"score": self.mesh, "frac_true": self.curve, "density": self.density})

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "sigma": self.sigma,
            "smece": self.smece,
            "mesh": self.mesh.tolist(),
            "frac_true": self.curve.tolist(),
            "density": self.density.tolist(),
        }


def smooth_reliability_curve(y_true: np.ndarray, y_score: np.ndarray, label: str = "") -> SmoothReliabilityCurve:
    """Kernel-smoothed reliability curve on 201 points, at the bandwidth of the smECE fixed point."""
    y_true = np.asarray(y_true, dtype=float)
    y_score = np.asarray(y_score, dtype=float)
    value, s = smooth_ece(y_true, y_score, return_sigma=True)
    s_res, s_one = _smooth_parts(y_true, y_score, s)
    grid = np.linspace(0.0, 1.0, s_one.size)
    mesh = np.linspace(0.0, 1.0, 201)
    res = np.interp(mesh, grid, s_res)
    one = np.interp(mesh, grid, s_one)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.where(one > 1e-12 * max(one.max(), 1e-300), mesh - res / one, np.nan)
    density = one / (one.sum() * (mesh[1] - mesh[0])) if one.sum() > 0 else one
    return SmoothReliabilityCurve(mesh, np.clip(curve, 0.0, 1.0), density, float(s), float(value), label)
