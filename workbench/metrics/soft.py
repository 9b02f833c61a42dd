"""Scores against the annotators' vote distribution instead of the majority label (soft labels).

With ``q`` (n, k) the vote shares of each item (votes / votes of the item), every soft score is the
hard score averaged over the item's votes — the expected score against a randomly drawn annotator
of the item — so with one vote per item it equals the hard score:

- ``soft_accuracy`` = mean q[pred]: the chance the top option matches a random annotator;
- ``soft_log_loss`` = mean −Σ_j q_j log p_j: cross-entropy with the vote distribution (nats);
- ``soft_brier`` = mean E_q[Brier]: choice/score Σ_j (p_j − q_j)² + (1 − Σ_j q_j²) in [0, 2];
  yes/no (s − q_yes)² + q_yes(1 − q_yes) on P(yes), in [0, 1] (as the hard reports);
- ``soft_ece_uniform`` / ``soft_ece_quantile``: top-label ECE whose accuracy per bin is the mean
  vote share of the predicted option (15 bins);
- ``soft_log_loss_floor`` = mean entropy of q, ``soft_brier_floor`` = mean of the Brier term no
  forecast can remove (1 − Σ q² or q_yes(1 − q_yes)): what a model that reproduced every item's
  vote distribution exactly would score. The distance to the floor is the model's own share.

Cross-checked in the tests against scikit-learn's ``log_loss``/``brier_score_loss`` over the
expanded votes with sample weights 1/votes per item. The report of these scores with bootstrap
intervals is :func:`workbench.metrics.report.soft_report`.
"""

from __future__ import annotations

import numpy as np

from workbench.metrics import reliability as rel
from workbench.metrics.scores import LOG_LOSS_FLOOR


def vote_shares(counts: np.ndarray) -> np.ndarray:
    """Rows of ``counts`` (n, k) divided by their sums; rows without votes become NaN."""
    c = np.asarray(counts, dtype=float)
    n = c.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, c / n, np.nan)


def item_soft_log_loss(probs: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """−Σ_j q_j log p_j per item (p clipped to [eps, 1] as in the hard log loss); shape (n,)."""
    p = np.clip(np.asarray(probs, dtype=float), LOG_LOSS_FLOOR, 1.0)
    q = np.asarray(shares, dtype=float)
    return -np.einsum("ij,ij->i", q, np.log(p))


def item_soft_brier(probs: np.ndarray, shares: np.ndarray, qtype: str = "choice") -> np.ndarray:
    """Expected Brier against a random vote per item: Σ p² − 2 p·q + 1 (yes/no: s² − 2 s q + q on P(yes))."""
    p = np.asarray(probs, dtype=float)
    q = np.asarray(shares, dtype=float)
    if qtype == "noul":
        s, y = p[:, 0], q[:, 0]
        return s * s - 2.0 * s * y + y
    return np.einsum("ij,ij->i", p, p) - 2.0 * np.einsum("ij,ij->i", p, q) + 1.0


def item_soft_floors(shares: np.ndarray, qtype: str = "choice") -> tuple[np.ndarray, np.ndarray]:
    """(entropy of q in nats, the Brier term no forecast removes) per item."""
    q = np.asarray(shares, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(q > 0, q * np.log(q), 0.0), axis=1)
    brier = q[:, 0] * (1.0 - q[:, 0]) if qtype == "noul" else 1.0 - np.einsum("ij,ij->i", q, q)
    return ent, brier


def soft_log_loss(probs: np.ndarray, counts: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """Mean cross-entropy between the vote distribution of ``counts`` (n, k) and ``probs``."""
    x = item_soft_log_loss(probs, vote_shares(counts))
    return float(np.average(x, weights=sample_weight)) if x.size else float("nan")


def soft_brier(
    probs: np.ndarray, counts: np.ndarray, qtype: str = "choice", sample_weight: np.ndarray | None = None
) -> float:
    """Mean expected Brier score against the item's votes (see the module docstring)."""
    x = item_soft_brier(probs, vote_shares(counts), qtype)
    return float(np.average(x, weights=sample_weight)) if x.size else float("nan")


def soft_ece(probs: np.ndarray, counts: np.ndarray, n_bins: int = 15, strategy: str = "uniform") -> float:
    """Top-label ECE whose per-bin accuracy is the mean vote share of the predicted option."""
    p = np.asarray(probs, dtype=float)
    q = vote_shares(counts)
    rows = np.arange(p.shape[0])
    pred = p.argmax(axis=1)
    conf = p[rows, pred]
    return rel.calibration_error(q[rows, pred], conf, n_bins=n_bins, strategy=strategy)
