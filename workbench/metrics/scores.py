"""Proper scores and classification metrics on ``(probs (n, k), labels (n,))`` arrays.

``probs`` rows sum to 1 (option order = schema order); ``labels`` are option indices in [0, k).
Callers drop failed and unlabelled rows first (``RunAnswers.labelled()``). Each metric accepts an
optional ``sample_weight`` (n,) so the bootstrap can reuse it with resampling counts.

Ordinal ("score") metrics treat option j as level j (lowest first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Probabilities are clipped to at least this inside log loss (scikit-learn clips to dtype eps).
LOG_LOSS_FLOOR = float(np.finfo(float).eps)


def weighted_mean(x: np.ndarray, w: np.ndarray | None, total: float | None = None) -> float:
    """Mean of ``x`` (n,) weighted by ``w`` (n,) >= 0, or unweighted when ``w`` is None (``total``: Σw,
    when the caller has it already); NaN when ``x`` is empty."""
    if x.size == 0:
        return float("nan")
    return float(np.mean(x)) if w is None else float(np.dot(x, w) / (w.sum() if total is None else total))


def _true_prob(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return probs[np.arange(len(labels)), labels]


# -- per-item quantities (reused by the bootstrap) ---------------------------------------------
def item_log_loss(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """−log p(true option) per item, with p clipped to [eps, 1]; shape (n,)."""
    return -np.log(np.clip(_true_prob(np.asarray(probs, dtype=float), np.asarray(labels)), LOG_LOSS_FLOOR, 1.0))


def item_brier(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Σ_j (p_j − 1[label = j])² per item, in [0, 2]; shape (n,).

    Computed as Σ p_j² − 2 p_true + 1 to avoid materialising a one-hot (n, k) matrix.
    """
    probs = np.asarray(probs, dtype=float)
    return np.einsum("ij,ij->i", probs, probs) - 2.0 * _true_prob(probs, np.asarray(labels)) + 1.0


def item_rps(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Ranked probability score per item: Σ_{j<k-1} (F_j − 1[label ≤ j])² / (k − 1), in [0, 1]."""
    probs = np.asarray(probs, dtype=float)
    k = probs.shape[1]
    cdf = np.cumsum(probs, axis=1)[:, :-1]
    observed = (np.asarray(labels)[:, None] <= np.arange(k - 1)[None, :]).astype(float)
    return ((cdf - observed) ** 2).sum(axis=1) / (k - 1)


def expected_level(probs: np.ndarray) -> np.ndarray:
    """Σ_j j·p_j per item, in [0, k − 1]."""
    probs = np.asarray(probs, dtype=float)
    return probs @ np.arange(probs.shape[1], dtype=float)


# -- headline scores -----------------------------------------------------------------------------
def accuracy(probs: np.ndarray, labels: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """Fraction of items whose arg-max option is the label, in [0, 1]."""
    return weighted_mean((np.asarray(probs).argmax(axis=1) == np.asarray(labels)).astype(float), sample_weight)


def log_loss(probs: np.ndarray, labels: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """Mean negative log-likelihood of the label (nats), ≥ 0."""
    return weighted_mean(item_log_loss(probs, labels), sample_weight)


def brier_score(probs: np.ndarray, labels: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """Multiclass Brier score, mean over items of Σ_j (p_j − 1[label = j])², in [0, 2].

    For a yes/no question this is twice the binary Brier score on P(yes).
    """
    return weighted_mean(item_brier(probs, labels), sample_weight)


@dataclass
class BrierDecomposition:
    """Murphy decomposition ``brier = reliability − resolution + uncertainty`` (multiclass, summed over options).

    - ``uncertainty`` = Σ_j ȳ_j(1 − ȳ_j): the Brier score of always predicting the label frequencies.
    - ``resolution`` = uncertainty − Brier of the recalibrated forecast (≥ 0, higher is better).
    - ``reliability`` = Brier − Brier of the recalibrated forecast (miscalibration, lower is better).

    The *recalibrated* forecast replaces p_j by the observed frequency of option j among items whose
    p_j falls in the same bin (``n_bins`` equal-width bins per option, histogram convention), the
    binned analogue of the CORP decomposition, so the three terms add up to the Brier score exactly.
    """

    brier: float
    reliability: float
    resolution: float
    uncertainty: float

    def to_dict(self) -> dict:
        return {
            "brier": self.brier,
            "reliability": self.reliability,
            "resolution": self.resolution,
            "uncertainty": self.uncertainty,
        }


def brier_decomposition(
    probs: np.ndarray | None,
    labels: np.ndarray,
    n_bins: int = 15,
    sample_weight: np.ndarray | None = None,
    *,
    bin_sums: tuple | None = None,
    item_briers: np.ndarray | None = None,
) -> BrierDecomposition:
    """Reliability − resolution + uncertainty of the multiclass Brier score (see :class:`BrierDecomposition`).

    Unweighted, the (option, bin) sums come from one chunked pass over the matrix
    (:func:`~workbench.metrics.reliability.option_bin_sums`, or ``bin_sums`` already computed by
    it), so memory stays O(chunk · k).
    """
    from workbench.metrics.reliability import option_bin_sums, uniform_bin_index

    labels = np.asarray(labels, dtype=np.int64)
    if probs is None:  # the caller passed every sum: nothing reads the matrix
        assert bin_sums is not None and item_briers is not None and sample_weight is None
        n, k = labels.shape[0], bin_sums[0].shape[0]
        count, _, hits = bin_sums
        return _decomposition(count.ravel(), hits.ravel(), labels, np.ones(n), k, item_briers)
    probs = np.asarray(probs, dtype=float)
    n, k = probs.shape
    if sample_weight is None:
        w = np.ones(n)
        count, _, hits = bin_sums if bin_sums is not None else option_bin_sums(probs, labels, n_bins)
        count, hits = count.ravel(), hits.ravel()
    else:
        w = np.asarray(sample_weight, dtype=float)
        cells = (uniform_bin_index(probs, n_bins) + n_bins * np.arange(k)[None, :]).ravel()
        count = np.bincount(cells, weights=np.repeat(w, k), minlength=k * n_bins)
        hit_cells = uniform_bin_index(_true_prob(probs, labels), n_bins) + n_bins * labels
        hits = np.bincount(hit_cells, weights=w, minlength=k * n_bins)
    return _decomposition(count, hits, labels, w, k, item_brier(probs, labels) if item_briers is None else item_briers)


def _decomposition(
    count: np.ndarray, hits: np.ndarray, labels: np.ndarray, w: np.ndarray, k: int, briers: np.ndarray
) -> BrierDecomposition:
    """The decomposition from (option, bin) counts and hits (flat), labels, weights and item Briers."""
    total = w.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        freq = np.where(count > 0, hits / count, 0.0)
    brier_recal = float(np.sum(count * freq * (1.0 - freq)) / total)
    label_freq = np.bincount(labels, weights=w, minlength=k) / total
    uncertainty = float(np.sum(label_freq * (1.0 - label_freq)))
    brier = float(np.dot(briers, w) / total)
    return BrierDecomposition(brier, brier - brier_recal, uncertainty - brier_recal, uncertainty)


def binary_brier_decomposition(
    y_true: np.ndarray, y_score: np.ndarray, n_bins: int = 15, sample_weight: np.ndarray | None = None
) -> BrierDecomposition:
    """The same decomposition for the binary Brier score (mean (y_score − y_true)², in [0, 1])."""
    y = np.asarray(y_true, dtype=float)
    s = np.asarray(y_score, dtype=float)
    w = np.ones(y.size) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    total = w.sum()
    from workbench.metrics.reliability import uniform_bin_index

    bins = uniform_bin_index(s, n_bins)
    count = np.bincount(bins, weights=w, minlength=n_bins)
    hits = np.bincount(bins, weights=w * y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        freq = np.where(count > 0, hits / count, 0.0)
    brier_recal = float(np.sum(count * freq * (1.0 - freq)) / total)
    base = float(np.dot(w, y) / total)
    uncertainty = base * (1.0 - base)
    brier = float(np.dot(w, (s - y) ** 2) / total)
    return BrierDecomposition(brier, brier - brier_recal, uncertainty - brier_recal, uncertainty)


# -- ranking metrics for yes/no -----------------------------------------------------------------
def roc_auc(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Area under the ROC curve (Mann–Whitney U with average ranks for ties), NaN with one class only."""
    from scipy.stats import rankdata

    y_true = np.asarray(y_true).astype(bool)
    n_pos = int(y_true.sum())
    n_neg = y_true.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(np.asarray(y_score, dtype=float))
    return float((ranks[y_true].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def average_precision(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Area under the precision–recall curve as average precision: Σ_t (R_t − R_{t−1}) P_t.

    Thresholds are the distinct scores (tied items enter together), as in scikit-learn's
    ``average_precision_score``. NaN without positives.
    """
    y_true = np.asarray(y_true).astype(float)
    y_score = np.asarray(y_score, dtype=float)
    n_pos = y_true.sum()
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-y_score, kind="mergesort")
    s, t = y_score[order], y_true[order]
    last_of_tie = np.r_[np.diff(s) != 0, True]
    tp = np.cumsum(t)[last_of_tie]
    fp = np.cumsum(1.0 - t)[last_of_tie]
    precision = tp / (tp + fp)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
