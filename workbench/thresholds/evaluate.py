"""Judge a chosen rule on held-out items: realised error, coverage, review load, confusion with review.

The rule is applied through its own ``decide`` (the same code the policy runtime uses), not through
the surface, so the test figures describe what production will do.
"""

from __future__ import annotations

import numpy as np

from workbench.thresholds.guarantees import clopper_pearson, wilson
from workbench.thresholds.rules import Rule


def confusion_with_review(labels: np.ndarray, accepted: np.ndarray, option: np.ndarray, n_options: int) -> np.ndarray:
    """Confusion matrix with a review column.

    Parameters
    ----------
    labels : ndarray of shape (n_items,), int in [0, K)
    accepted : ndarray of shape (n_items,), bool
    option : ndarray of shape (n_items,), int
        Accepted option (ignored where not accepted).
    n_options : int

    Returns
    -------
    matrix : ndarray of shape (K, K + 1), int
        ``[true, accepted option]`` counts; the last column counts items routed to review.
    """
    labels = np.asarray(labels).astype(int)
    col = np.where(accepted, np.asarray(option).astype(int), n_options)
    cell = labels * (n_options + 1) + col
    return np.bincount(cell, minlength=n_options * (n_options + 1)).reshape(n_options, n_options + 1)


def _interval(k: int, n: int, how: str, confidence: float) -> dict:
    lo, hi = (clopper_pearson if how == "clopper-pearson" else wilson)(k, n, confidence)
    return {
        "value": (k / n) if n else None,
        "low": lo if n else None,
        "high": hi if n else None,
        "k": int(k),
        "n": int(n),
        "interval": how,
        "confidence": confidence,
    }


def evaluate_rule(
    rule: Rule,
    probs: np.ndarray,
    labels: np.ndarray,
    *,
    n_failed: int = 0,
    option_ids: list[str] | None = None,
    confidence: float = 0.95,
) -> dict:
    """Test-split figures of ``rule``.

    Parameters
    ----------
    rule : ChoiceRule | NoulRule | ScoreRule
    probs : ndarray of shape (n_items, n_options)
        NaN rows are failures (always routed to the fallback).
    labels : ndarray of shape (n_items,), int in [0, K)
    n_failed : int
        Failed items not present in ``probs`` (counted as reviews).

    Returns
    -------
    report : dict
        ``error`` (Clopper–Pearson), ``coverage`` and ``review_rate`` (Wilson) with intervals,
        ``confusion`` (K × (K+1), last column = review) and counts.
    """
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    labels = np.asarray(labels).astype(int)
    dec = rule.decide(probs)
    n_total = probs.shape[0] + int(n_failed)
    acc = int(dec.accepted.sum())
    wrong = int((dec.accepted & (dec.option != labels)).sum())
    k = probs.shape[1]
    conf = confusion_with_review(labels, dec.accepted, dec.option, k)
    return {
        "n_items": n_total,
        "n_accepted": acc,
        "n_errors": wrong,
        "n_review": n_total - acc,
        "n_failed": int(n_failed + (~np.isfinite(probs).all(axis=1)).sum()),
        "error": _interval(wrong, acc, "clopper-pearson", confidence),
        "coverage": _interval(acc, n_total, "wilson", confidence),
        "review_rate": _interval(n_total - acc, n_total, "wilson", confidence),
        "confusion": {
            "labels": list(option_ids or [str(i) for i in range(k)]),
            "columns": list(option_ids or [str(i) for i in range(k)]) + ["review"],
            "matrix": conf.tolist(),
        },
    }
