"""Selective prediction: error among accepted items as a function of coverage.

Items are accepted in decreasing order of their top probability; the curve gives, for every
distinct confidence value, the share of items accepted (coverage) and the error rate among them
(selective risk). It is the classic risk–coverage curve of a confidence score, before any margin
rule or guarantee (those live in :mod:`workbench.thresholds`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RiskCoverageCurve:
    """Risk–coverage curve of one model.

    Attributes
    ----------
    coverage : ndarray of shape (m,), ascending in (0, 1]
        Accepted items over all items (failures count in the denominator and are never accepted).
    risk : ndarray of shape (m,), in [0, 1]
        Error rate among the accepted items.
    threshold : ndarray of shape (m,), descending
        Lowest top probability accepted at that point.
    n_total : int
        Items the coverage is relative to.
    aurc : float
        Area under the curve: mean selective risk over accepted-set sizes 1..n_answered, scaled by
        n_answered / n_total (lower is better).
    """

    coverage: np.ndarray
    risk: np.ndarray
    threshold: np.ndarray
    n_total: int
    aurc: float


def risk_coverage_curve(probs: np.ndarray, labels: np.ndarray) -> RiskCoverageCurve:
    """Risk–coverage curve of the top probability.

    Parameters
    ----------
    probs : ndarray of shape (n, k)
        Probabilities; NaN rows are provider failures (never accepted, still counted in coverage).
    labels : ndarray of shape (n,)
        Option index per item; ``-1`` (unlabelled) rows are dropped.

    Returns
    -------
    RiskCoverageCurve
        One point per distinct confidence value (ties are accepted together).

    Examples
    --------
    >>> import numpy as np
    >>> c = risk_coverage_curve(np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]]), np.array([0, 1, 1]))
    >>> c.coverage.round(3).tolist(), c.risk.round(3).tolist()
    ([0.333, 0.667, 1.0], [0.0, 0.0, 0.333])
    """
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels)
    keep = labels >= 0
    probs, labels = probs[keep], labels[keep]
    n_total = len(labels)
    answered = np.isfinite(probs).all(axis=1) if n_total else np.zeros(0, bool)
    p, y = probs[answered], labels[answered]
    if len(y) == 0:
        return risk_coverage_from_top(np.zeros(0), np.zeros(0, bool), n_total)
    return risk_coverage_from_top(p.max(axis=1), p.argmax(axis=1) != y, n_total)


def risk_coverage_from_top(conf: np.ndarray, wrong: np.ndarray, n_total: int) -> RiskCoverageCurve:
    """:func:`risk_coverage_curve` from the answered, labelled items' top probability ``conf`` (m,)
    and whether their arg-max is wrong ``wrong`` (m,) bool; ``n_total`` counts the labelled items
    including failures (never accepted). A few numbers per item instead of the (n, k) matrix
    (``workbench compare`` keeps them), the same curve.
    """
    conf, wrong = np.asarray(conf, dtype=float), np.asarray(wrong, dtype=bool)
    if len(conf) == 0:
        empty = np.zeros(0)
        return RiskCoverageCurve(empty, empty, empty, n_total, float("nan"))
    order = np.argsort(-conf, kind="stable")
    conf, wrong = conf[order], wrong[order]
    accepted = np.arange(1, len(conf) + 1)
    risk_all = np.cumsum(wrong) / accepted
    last_of_tie = np.r_[conf[1:] != conf[:-1], True]  # ties share one threshold: accept them together
    aurc = float(risk_all.sum() / n_total)
    return RiskCoverageCurve(
        coverage=accepted[last_of_tie] / n_total,
        risk=risk_all[last_of_tie],
        threshold=conf[last_of_tie],
        n_total=n_total,
        aurc=aurc,
    )
