"""Selective prediction: error among accepted items as a function of coverage.

Items are accepted in decreasing order of their top probability; the curve gives, for every
distinct confidence value, the share of items accepted (coverage) and the error rate among them
(selective risk). It is the classic risk–coverage curve of a confidence score, before any margin
rule or guarantee (those live in :mod:`workbench.thresholds`).

AURC (area under that curve) and the selective risk at a fixed coverage are computed by
:class:`ConfidenceRanking` for any integer resampling weights (the report's bootstrap), O(n) per replicate.
Convention for ties in confidence: items of equal confidence are accepted together, so the curve is a
step function of coverage whose risk over a tie group is the risk at the group's end (all of it
accepted). Without ties this is the usual mean of the selective risks over accepted-set sizes 1..n.
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
        Area under the curve (:meth:`ConfidenceRanking.aurc`, ties accepted together): the selective
        risk integrated over coverage 0..n_answered / n_total (lower is better).
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
    return RiskCoverageCurve(
        coverage=accepted[last_of_tie] / n_total,
        risk=risk_all[last_of_tie],
        threshold=conf[last_of_tie],
        n_total=n_total,
        aurc=ConfidenceRanking(conf, wrong).aurc(None, n_total=n_total),
    )


class ConfidenceRanking:
    """Items ranked by decreasing confidence, ties grouped, for the weighted AURC and selective risk.

    Built once per set of items (one sort); each call takes integer resampling weights ``w`` (n,) in the
    items' order (``None``: every item once) and costs O(n): the weights summed per tie group (gathered
    into rank order when there are no ties), then one cumulative sum of (weight, weighted error) pairs
    over the groups. Without ties a replicate's arrays are written into buffers kept for the next one
    (32 bytes per item), so a bootstrap's replicates allocate nothing of size n.

    Parameters
    ----------
    conf : ndarray of shape (n,)
        Confidence of each item's top option (higher is accepted first).
    wrong : ndarray of shape (n,), bool
        Whether the top option is not the label.
    """

    def __init__(self, conf: np.ndarray, wrong: np.ndarray):
        conf = np.asarray(conf, dtype=float)
        wrong = np.asarray(wrong, dtype=bool)
        self.order = np.argsort(-conf, kind="stable")
        s = conf[self.order]
        self.wrong = wrong[self.order]
        self.n = int(s.size)
        new_group = np.r_[True, s[1:] != s[:-1]] if self.n else np.zeros(0, bool)
        #: first rank of each tie group; None when every item is its own group (no ties)
        self.starts: np.ndarray | None = np.flatnonzero(new_group)
        if self.starts is not None and self.starts.size == self.n:
            self.starts = None
        #: with ties (e.g. probabilities given to a few decimals): each item's tie group in the items' own
        #: order, and the wrong items and their groups, so a replicate's per-group sums are two
        #: ``np.bincount`` passes — no gather into rank order and no ``reduceat`` over all n (3–4× faster
        #: at 500k items with 9k to 330k groups; the sums are of integers, so exact in any order). Without
        #: ties the gather and one cumulative sum is the faster of the two (2.5×).
        self._groups: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if self.starts is not None:
            group = np.empty(self.n, dtype=np.int32 if self.starts.size < 2**31 else np.int64)
            group[self.order] = np.cumsum(new_group) - 1
            wrong_items = np.flatnonzero(wrong)
            self._groups = (group, wrong_items, group[wrong_items])
        self._buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _buffer(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(weights in rank order (n,), cumulative (weight + i·error) per group (m,) complex, risk (m,))."""
        if self._buffers is None:
            m = self.n if self.starts is None else self.starts.size
            self._buffers = (np.empty(self.n if self._groups is None else 0), np.empty(m, dtype=complex), np.empty(m))
        return self._buffers

    def ends(self, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per tie group (in rank order): its weight, the cumulative weight and the cumulative weighted
        errors at its end — everything :meth:`aurc` and :meth:`risk_at_coverage` read (pass it as their
        ``ends`` to compute both from one gather). The arrays are overwritten by the next call."""
        ws, z, _ = self._buffer()
        if self._groups is not None:
            group, wrong_items, wrong_group = self._groups
            m = z.size
            if w is None:
                gw = np.bincount(group, minlength=m).astype(float)
                z.imag = np.bincount(wrong_group, minlength=m)
            else:
                w = np.asarray(w, dtype=float)
                gw = np.bincount(group, weights=w, minlength=m)
                z.imag = np.bincount(wrong_group, weights=w[wrong_items], minlength=m)
            z.real = gw
            np.cumsum(z, out=z)
            return gw, z.real, z.imag
        if w is None:
            ws[:] = 1.0
        else:
            np.take(np.asarray(w, dtype=float), self.order, out=ws, mode="clip")  # clip: no buffered copy
        np.copyto(z.real, ws)
        np.multiply(ws, self.wrong, out=z.imag)
        # one pass sums both: the real and imaginary parts accumulate separately, in rank order
        np.cumsum(z, out=z)
        return ws, z.real, z.imag

    def aurc(
        self,
        w: np.ndarray | None = None,
        n_total: float | None = None,
        *,
        ends: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> float:
        """Area under the risk–coverage curve: Σ over tie groups of (group weight / total) × (weighted
        error rate among the items accepted down to the group's end). ``n_total``: the coverage
        denominator when it is not the total weight (failed items count, never accepted); ``ends``:
        :meth:`ends` of ``w`` when already computed. NaN for no item.
        """
        if self.n == 0:
            return float("nan")
        gw, cw, ce = self.ends(w) if ends is None else ends
        total = float(cw[-1]) if n_total is None else float(n_total)
        if total <= 0:
            return float("nan")
        # a leading run of zero-weight groups has cw = ce = 0 and weight 0: its risk counts as 0
        risk = np.maximum(cw, np.finfo(float).tiny, out=self._buffer()[2])
        np.divide(ce, risk, out=risk)
        return float(gw @ risk / total)

    def risk_at_coverage(
        self,
        coverage: float,
        w: np.ndarray | None = None,
        *,
        ends: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> float:
        """Selective risk at ``coverage`` in (0, 1]: the weighted error rate among the items accepted down
        to the end of the first tie group at which the accepted share reaches ``coverage`` (the most
        confident ⌈coverage·n⌉ items when there are no ties). NaN for no item."""
        if self.n == 0:
            return float("nan")
        _, cw, ce = self.ends(w) if ends is None else ends
        # weights are integers, so the cumulative sums are exact; the tolerance absorbs coverage·total's rounding
        g = int(np.searchsorted(cw, coverage * cw[-1] * (1.0 - 1e-12), side="left"))
        g = min(g, cw.size - 1)
        return float(ce[g] / cw[g]) if cw[g] > 0 else float("nan")
