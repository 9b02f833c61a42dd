"""Confusion matrix with a *review* column, per-class precision/recall/F1 with Wilson intervals.

When a routing rule is applied, each item is either auto-accepted (its arg-max option is the
decision) or routed to human review. The matrix then has ``k + 1`` columns: rows are the gold
options, columns the accepted decisions plus one ``review`` column. Without an accept mask every
item is accepted and the review column is all zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from workbench.metrics.reliability import wilson_interval

REVIEW = "review"


def confusion_matrix(
    labels: np.ndarray,
    predicted: np.ndarray,
    k: int,
    accept: np.ndarray | None = None,
    sample_weight: np.ndarray | None = None,
) -> np.ndarray:
    """Counts, shape (k, k + 1): [true option, decided option or review (last column)].

    Parameters
    ----------
    labels : (n,) int in [0, k)
    predicted : (n,) int in [0, k), the arg-max option
    accept : (n,) bool or None; False routes the item to the review column
    """
    labels = np.asarray(labels, dtype=np.int64)
    col = np.asarray(predicted, dtype=np.int64)
    if accept is not None:
        col = np.where(np.asarray(accept, dtype=bool), col, k)
    flat = np.bincount(labels * (k + 1) + col, weights=sample_weight, minlength=k * (k + 1))
    return flat.reshape(k, k + 1) if sample_weight is not None else flat.reshape(k, k + 1).astype(np.int64)


def review_rate(accept: np.ndarray) -> float:
    """Fraction of items routed to review (not accepted), in [0, 1]."""
    accept = np.asarray(accept, dtype=bool)
    return float(1.0 - accept.mean()) if accept.size else float("nan")


@dataclass
class ConfusionResult:
    """Confusion matrix with the review column and per-option figures.

    ``matrix`` (k, k + 1); per-option arrays (k,): ``precision`` = correct accepted / accepted as
    that option, ``recall`` = correct accepted / items of that option (reviewed items count as
    not recalled), ``f1``; 95% Wilson intervals for precision and recall.
    """

    option_ids: list[str]
    matrix: np.ndarray
    precision: np.ndarray
    precision_low: np.ndarray
    precision_high: np.ndarray
    recall: np.ndarray
    recall_low: np.ndarray
    recall_high: np.ndarray
    f1: np.ndarray
    support: np.ndarray

    #: The per-option arrays, in the columns of :meth:`per_class_frame`.
    PER_CLASS: ClassVar[tuple[str, ...]] = (
        "support",
        "precision",
        "precision_low",
        "precision_high",
        "recall",
        "recall_low",
        "recall_high",
        "f1",
    )

    @property
    def macro_f1(self) -> float:
        """Mean F1 over options that occur in the labels or the decisions (scikit-learn's convention)."""
        present = (self.support > 0) | (self.matrix[:, :-1].sum(axis=0) > 0)
        return float(np.mean(self.f1[present])) if present.any() else float("nan")

    @property
    def review_rate(self) -> float:
        total = self.matrix.sum()
        return float(self.matrix[:, -1].sum() / total) if total else float("nan")

    def to_frame(self) -> pd.DataFrame:
        """The matrix as a labelled frame (rows: gold option; columns: decision or ``review``)."""
        return pd.DataFrame(
            self.matrix, index=pd.Index(self.option_ids, name="label"), columns=[*self.option_ids, REVIEW]
        )

    def per_class_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"option": self.option_ids, **{f: getattr(self, f) for f in self.PER_CLASS}})

    def to_dict(self) -> dict:
        return {
            "options": self.option_ids,
            "columns": [*self.option_ids, REVIEW],
            "matrix": self.matrix.tolist(),
            "review_rate": self.review_rate,
            "macro_f1": self.macro_f1,
            "per_class": self.per_class_frame().to_dict(orient="records"),
        }


def confusion_result(
    labels: np.ndarray, predicted: np.ndarray, option_ids: list[str], accept: np.ndarray | None = None
) -> ConfusionResult:
    """Build a :class:`ConfusionResult` (matrix with review column, per-option P/R/F1 and intervals)."""
    k = len(option_ids)
    m = confusion_matrix(labels, predicted, k, accept)
    correct = np.diag(m[:, :k]).astype(float)
    decided = m[:, :k].sum(axis=0).astype(float)
    support = m.sum(axis=1).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(decided > 0, correct / decided, 0.0)
        recall = np.where(support > 0, correct / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    p_lo, p_hi = wilson_interval(correct, decided)
    r_lo, r_hi = wilson_interval(correct, support)
    return ConfusionResult(list(option_ids), m, precision, p_lo, p_hi, recall, r_lo, r_hi, f1, support.astype(np.int64))


def macro_f1(labels: np.ndarray, predicted: np.ndarray, k: int, sample_weight: np.ndarray | None = None) -> float:
    """Macro-averaged F1 over options present in labels or predictions (= scikit-learn ``f1_score(average='macro')``)."""
    m = confusion_matrix(labels, predicted, k, None, sample_weight)[:, :k].astype(float)
    return macro_f1_from_matrix(m)


def macro_f1_from_matrix(m: np.ndarray) -> float:
    """Macro F1 from a (k, k) (or (k, k + 1) with review column) count matrix; F1 = 2TP / (2TP + FP + FN)."""
    k = m.shape[0]
    tp = np.diag(m[:, :k])
    pred = m[:, :k].sum(axis=0)
    true = m.sum(axis=1)
    present = (true > 0) | (pred > 0)
    denom = pred + true
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(denom > 0, 2 * tp / denom, 0.0)
    return float(np.mean(f1[present])) if present.any() else float("nan")
