"""Label-issue queue: items whose gold label a confident provider (or a consensus of runs) disputes.

Confident learning (Northcutt, Jiang & Chuang 2021), written from the paper's definitions:

1. Per-option threshold ``t_j`` = mean predicted probability of option j over items *labelled* j
   (the model's average self-confidence on that option).
2. An item "confidently belongs" to option j when ``p_j >= t_j``; when several options clear their
   thresholds, the most probable of them is taken. Items where none clears are not counted.
3. The *confident joint* C[i, j] counts items labelled i that confidently belong to j. Its
   off-diagonal cells are the suspected label errors.
4. Suspects are ranked by a label-quality score, lowest first: ``self_confidence`` = p(given label),
   or ``normalized_margin`` = (p(given label) − max other p + 1) / 2, both in [0, 1].

Probabilities must be out-of-sample for the item (true for API providers; the baseline models only
score items outside their own training split). Suspects are *queued for relabelling*, not dropped:
reports can show metrics with and without them side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError

RANKINGS = ("self_confidence", "normalized_margin")


@dataclass
class ConfidentJoint:
    """``joint`` (k, k) counts [given label, confident option]; ``thresholds`` (k,) per-option t_j;
    ``confident`` (n,) option index or −1 when no option clears its threshold."""

    joint: np.ndarray
    thresholds: np.ndarray
    confident: np.ndarray

    def calibrated(self, label_counts: np.ndarray) -> np.ndarray:
        """Joint rescaled so row i sums to the number of items labelled i (the paper's calibration step)."""
        rows = self.joint.sum(axis=1, keepdims=True).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(rows > 0, self.joint / rows, 0.0) * np.asarray(label_counts, dtype=float)[:, None]
        return out


def confident_joint(probs: np.ndarray, labels: np.ndarray, k: int | None = None) -> ConfidentJoint:
    """Confident joint of ``probs`` (n, k) against ``labels`` (n,) in [0, k) (see module doc)."""
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels, dtype=np.int64)
    k = k or probs.shape[1]
    counts = np.bincount(labels, minlength=k)
    sums = np.bincount(labels, weights=probs[np.arange(len(labels)), labels], minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        # an option nobody is labelled with gets threshold +inf: nothing can "confidently" be it
        thresholds = np.where(counts > 0, sums / np.maximum(counts, 1), np.inf)
    above = probs >= thresholds[None, :]
    masked = np.where(above, probs, -np.inf)
    confident = np.where(above.any(axis=1), masked.argmax(axis=1), -1)
    has = confident >= 0
    joint = np.bincount(labels[has] * k + confident[has], minlength=k * k).reshape(k, k)
    return ConfidentJoint(joint, thresholds, confident)


def label_quality(probs: np.ndarray, labels: np.ndarray, method: str = "self_confidence") -> np.ndarray:
    """Per-item label quality in [0, 1] (low = the label looks wrong); see module doc."""
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels, dtype=np.int64)
    rows = np.arange(len(labels))
    p_label = probs[rows, labels]
    if method == "self_confidence":
        return p_label
    if method == "normalized_margin":
        others = probs.copy()
        others[rows, labels] = -np.inf
        return (p_label - others.max(axis=1) + 1.0) / 2.0
    raise WorkbenchError(f"unknown ranking {method!r}", hint=f"choose one of {', '.join(RANKINGS)}")


@dataclass
class LabelIssues:
    """Suspected label errors of one question, ranked (most suspicious first).

    ``table`` columns: rank, item_id, split, given, suggested, quality, p_given, p_suggested, n_runs.
    """

    question: str
    option_ids: list[str]
    run_ids: list[str]
    ranked_by: str
    table: pd.DataFrame
    joint: ConfidentJoint
    n_items: int
    label_counts: np.ndarray
    extra: dict = field(default_factory=dict)

    @property
    def item_ids(self) -> list[str]:
        return self.table["item_id"].tolist()

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    def to_dict(self, top: int | None = None) -> dict:
        t = self.table if top is None else self.table.head(top)
        cal = self.joint.calibrated(self.label_counts)
        off = float(cal.sum() - np.trace(cal)) / max(float(cal.sum()), 1.0)
        return {
            "question": self.question,
            "runs": self.run_ids,
            "ranked_by": self.ranked_by,
            "n_items": self.n_items,
            "n_issues": int(len(self.table)),
            "estimated_noise_rate": off,
            "options": self.option_ids,
            "thresholds": {
                o: (float(v) if np.isfinite(v) else None) for o, v in zip(self.option_ids, self.joint.thresholds)
            },
            "issues": t.to_dict(orient="records"),
            **self.extra,
        }


def find_label_issues(
    probs: np.ndarray,
    labels: np.ndarray,
    option_ids: Sequence[str],
    *,
    item_ids: Sequence[str] | np.ndarray | None = None,
    splits: Sequence[str] | np.ndarray | None = None,
    rank_by: str = "self_confidence",
    question: str = "",
    run_ids: Sequence[str] = (),
    n_runs: np.ndarray | None = None,
) -> LabelIssues:
    """Off-diagonal items of the confident joint, ranked by label quality (lowest first).

    Parameters
    ----------
    probs : (n, k) probabilities (failed rows NaN are ignored)
    labels : (n,) gold option index, −1 = unlabelled (ignored)
    """
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels, dtype=np.int64)
    n, k = probs.shape
    ids = np.asarray(item_ids if item_ids is not None else np.arange(n).astype(str), dtype=object)
    spl = np.asarray(splits if splits is not None else [""] * n, dtype=object)
    runs_per_item = np.ones(n, dtype=int) if n_runs is None else np.asarray(n_runs)
    keep = np.isfinite(probs).all(axis=1) & (labels >= 0)
    p, y = probs[keep], labels[keep]
    if len(y) == 0:
        raise WorkbenchError(
            f"question {question!r}: no answered, labelled items to check",
            hint="the run needs answers on labelled items",
        )
    cj = confident_joint(p, y, k)
    suspect = (cj.confident >= 0) & (cj.confident != y)
    quality = label_quality(p, y, rank_by)
    rows = np.arange(len(y))
    opts = np.asarray(list(option_ids), dtype=object)
    table = pd.DataFrame(
        {
            "item_id": ids[keep][suspect],
            "split": spl[keep][suspect],
            "given": opts[y[suspect]],
            "suggested": opts[cj.confident[suspect]],
            "quality": quality[suspect],
            "p_given": p[rows, y][suspect],
            "p_suggested": p[rows, np.maximum(cj.confident, 0)][suspect],
            "n_runs": runs_per_item[keep][suspect],
        }
    )
    table = table.sort_values(["quality", "item_id"], kind="mergesort").reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    return LabelIssues(
        question, list(option_ids), list(run_ids), rank_by, table, cj, int(len(y)), np.bincount(y, minlength=k)
    )


def consensus_probs(answer_sets: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Average several runs' probabilities per item (runs that failed on an item are left out).

    Returns item_ids (m,), splits (m,), labels (m,), mean probs (m, k), number of runs answering (m,),
    over the union of items, aligned by item id.
    """
    first = answer_sets[0]
    for a in answer_sets[1:]:
        if a.option_ids != first.option_ids:
            raise WorkbenchError(
                f"runs {first.run_id} and {a.run_id} have different options for {first.question!r}",
                hint="label issues from several runs need the same question options",
            )
    all_ids = np.unique(np.concatenate([a.item_ids.astype(str) for a in answer_sets]))
    m, k = len(all_ids), len(first.option_ids)
    total = np.zeros((m, k))
    n_runs = np.zeros(m, dtype=int)
    labels = np.full(m, -1, dtype=np.int64)
    splits = np.full(m, "", dtype=object)
    for a in answer_sets:
        pos = np.searchsorted(all_ids, a.item_ids.astype(str))
        ok = ~a.failed
        total[pos[ok]] += a.probs[ok]
        n_runs[pos[ok]] += 1
        labels[pos] = np.where(a.labels >= 0, a.labels, labels[pos])
        splits[pos] = a.splits
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_runs[:, None] > 0, total / np.maximum(n_runs, 1)[:, None], np.nan)
    return all_ids.astype(object), splits, labels, mean, n_runs
