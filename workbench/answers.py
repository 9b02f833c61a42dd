"""The answers of one run and one question as aligned numpy arrays: what metrics and thresholds consume.

This type sits below ``metrics/`` and ``thresholds/`` (numpy only) so that the pure maths never
imports the store; :func:`workbench.store.runs.load_answers` builds it from the database, and tests or
notebooks can build one from their own arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RunAnswers:
    """Arrays of one run and one question, aligned by item (shapes in brackets).

    ``probs`` is NaN on failed rows; ``labels`` is the index of the gold option or -1 when the
    item has no label (majority vote over annotators, ties to the first option in schema order).
    """

    run_id: str
    question: str
    qtype: str
    option_ids: list[str]
    item_ids: np.ndarray  # (n,) str
    splits: np.ndarray  # (n,) str
    probs: np.ndarray  # (n, k) float
    labels: np.ndarray  # (n,) int, -1 = unlabelled
    failed: np.ndarray  # (n,) bool
    failure_kind: np.ndarray  # (n,) object (None when answered)
    latency_ms: np.ndarray  # (n,)
    cost_usd: np.ndarray  # (n,)
    input_tokens: np.ndarray  # (n,)
    extra: dict = field(default_factory=dict)
    #: (n, k) float votes per item and option (every annotator's label), or None when not loaded;
    #: ``labels`` is their majority. Soft scores and agreement figures use it.
    votes: np.ndarray | None = None

    def select(self, mask: np.ndarray) -> RunAnswers:
        kw = {k: getattr(self, k) for k in ("run_id", "question", "qtype", "option_ids")}
        for k in (
            "item_ids",
            "splits",
            "probs",
            "labels",
            "failed",
            "failure_kind",
            "latency_ms",
            "cost_usd",
            "input_tokens",
        ):
            kw[k] = getattr(self, k)[mask]
        votes = None if self.votes is None else self.votes[mask]
        extra = dict(self.extra)
        if "vote_annotators" in extra:  # (row, annotator, option) of every vote: rows follow the selection
            rows, annotators, options = extra["vote_annotators"]
            new_row = np.full(len(self.item_ids), -1)
            kept = np.arange(len(self.item_ids))[mask]
            new_row[kept] = np.arange(kept.size)
            ok = new_row[rows] >= 0
            extra["vote_annotators"] = (new_row[rows][ok], annotators[ok], options[ok])
        return RunAnswers(**kw, extra=extra, votes=votes)

    def answered(self) -> RunAnswers:
        """Only rows with an answer (and a label when one exists)."""
        return self.select(~self.failed)

    def labelled(self) -> RunAnswers:
        """Rows answered and labelled: the inputs to every metric."""
        return self.select((~self.failed) & (self.labels >= 0))
