"""Drift of a probability distribution between time windows: PSI and Jensen–Shannon divergence.

Both compare histograms of one per-item score (the shadow report uses ``p_top``) over fixed bins
on [0, 1], so windows of different sizes are comparable. Empty bins get a small floor (``eps``)
before the logarithm, as is usual for the population stability index.
"""

from __future__ import annotations

import numpy as np


def psi(reference: np.ndarray, current: np.ndarray, *, eps: float = 1e-4) -> float:
    """Population stability index ``sum((c - r) * ln(c / r))`` of two histograms (shares).

    Rules of thumb: < 0.1 stable, 0.1–0.25 moderate shift, > 0.25 large shift.
    """
    r = np.maximum(np.asarray(reference, dtype=float), eps)
    c = np.maximum(np.asarray(current, dtype=float), eps)
    if not (np.isfinite(r).all() and np.isfinite(c).all()):
        return float("nan")
    return float(np.sum((c - r) * np.log(c / r)))


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen–Shannon divergence in bits (0 = same, 1 = disjoint) of two histograms."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    if not (np.isfinite(p).all() and np.isfinite(q).all()):
        return float("nan")
    m = (p + q) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / m), 0.0).sum()
        kl_q = np.where(q > 0, q * np.log2(q / m), 0.0).sum()
    return float(max(0.0, (kl_p + kl_q) / 2.0))


def window_bounds(n: int, n_windows: int, *, min_size: int = 20) -> list[tuple[int, int]]:
    """Equal-count windows ``[start, stop)`` over ``n`` items in arrival order (fewer when n is small)."""
    k = int(max(1, min(n_windows, n // max(min_size, 1)))) if n else 0
    edges = np.linspace(0, n, k + 1).round().astype(int) if k else np.array([0])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
