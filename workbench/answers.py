"""The answers of one run and one question as aligned numpy arrays: what metrics and thresholds consume.

This type sits below ``metrics/`` and ``thresholds/`` (numpy only) so that the pure maths never
imports the store; :func:`workbench.store.runs.load_answers` builds it from the database, and tests or
notebooks can build one from their own arrays.

:class:`AnswerSource` is the one interface every figure reads a run's answers through (the store's
:class:`workbench.store.sources.StoreSource`, :class:`MemorySource` over arrays), and
:func:`reads_in_batches` the one decision whether a figure reads them in batches or loads the matrix.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

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


class AnswerSource(Protocol):
    """Where the answers of one run come from, question by question: what every figure needs to read them.

    ``splits`` is a list of split names, or None for every split. ``batches`` yields ``(positions, batch)``:
    ``positions`` (m,) int64 are the batch rows' positions in ``load``'s item-id order (batches come in any
    order), so a figure that writes per-row values at ``positions`` gets exactly the arrays ``load`` gives.
    """

    def option_ids(self, question: str) -> list[str] | None:
        """The question's options in schema order; None when the source has no such question."""
        ...

    def question_type(self, question: str) -> str | None:
        """The question's type (``choice``, ``noul``, ...); None when the source has no such question."""
        ...

    def count(self, question: str, splits: Sequence[str] | None) -> int:
        """How many answer rows (answered or failed) the question has on ``splits``."""
        ...

    def batches(self, question: str, splits: Sequence[str] | None) -> Iterator[tuple[np.ndarray, RunAnswers]]:
        """The rows of :meth:`load` a batch at a time, each with its positions in :meth:`load`'s order."""
        ...

    def load(self, question: str, splits: Sequence[str] | None) -> RunAnswers:
        """Every row of the question on ``splits`` in item-id order (the whole (n, k) matrix)."""
        ...


#: Questions with more probabilities than this (n items × k options) are read in batches.
STREAM_CELLS = 20_000_000


def stream_cells() -> int:
    """:data:`STREAM_CELLS`, or ``WORKBENCH_STREAM_CELLS`` when set."""
    return int(os.environ.get("WORKBENCH_STREAM_CELLS") or STREAM_CELLS)


def reads_in_batches(
    source: AnswerSource,
    question: str,
    splits: Sequence[str] | None,
    stream: bool | None = None,
    *,
    split_by_split: bool = False,
    at_most: int | None = None,
    at_least: int | None = None,
) -> bool:
    """Whether figures of ``question`` on ``splits`` read ``source`` in batches (:meth:`AnswerSource.batches`)
    rather than loading the matrix: ``stream`` when given (True/False), else whether its answers × options
    (at least 2) exceed :func:`stream_cells`. A question the source lacks: False (its loader names it).

    This is the only place the library compares a run's size to :func:`stream_cells`. ``split_by_split``
    counts one split at a time and sums them (a caller that reads each split's keys anyway shares those counts).
    ``at_most`` / ``at_least``: bounds on the count known without reading it (e.g. the run's answers on every
    split, less the items of the other splits): when one settles the answer, nothing is counted.
    """
    if stream is not None:
        return stream
    opts = source.option_ids(question)
    if opts is None:
        return False
    k = max(len(opts), 2)
    if at_most is not None and at_most * k <= stream_cells():
        return False
    if at_least is not None and at_least * k > stream_cells():
        return True
    if split_by_split and splits is not None:
        n = sum(source.count(question, [s]) for s in dict.fromkeys(splits))
    else:
        n = source.count(question, splits)
    return n * k > stream_cells()


#: Rows per batch of :class:`MemorySource` (the store's own batches are :data:`workbench.store.runs.BATCH_ROWS`).
MEMORY_BATCH_ROWS = 32_768


class MemorySource:
    """An :class:`AnswerSource` over answers already in memory: one :class:`RunAnswers` per question (rows in
    the order :meth:`load` returns them), e.g. from a notebook's own arrays."""

    def __init__(self, answers: RunAnswers | Sequence[RunAnswers], *, batch_rows: int = MEMORY_BATCH_ROWS) -> None:
        items = [answers] if isinstance(answers, RunAnswers) else list(answers)
        self.answers = {a.question: a for a in items}
        self.batch_rows = int(batch_rows)

    def _get(self, question: str) -> RunAnswers:
        if question not in self.answers:
            raise KeyError(f"no answers to question {question!r} (questions: {', '.join(self.answers) or 'none'})")
        return self.answers[question]

    def _rows(self, question: str, splits: Sequence[str] | None) -> np.ndarray:
        a = self._get(question)
        if splits is None:
            return np.arange(len(a.item_ids))
        return np.flatnonzero(np.isin(np.asarray(a.splits, dtype=object), list(splits)))

    def option_ids(self, question: str) -> list[str] | None:
        a = self.answers.get(question)
        return None if a is None else list(a.option_ids)

    def question_type(self, question: str) -> str | None:
        a = self.answers.get(question)
        return None if a is None else a.qtype

    def count(self, question: str, splits: Sequence[str] | None) -> int:
        return int(self._rows(question, splits).size)

    def load(self, question: str, splits: Sequence[str] | None) -> RunAnswers:
        a = self._get(question)
        return a if splits is None else a.select(self._rows(question, splits))

    def batches(self, question: str, splits: Sequence[str] | None) -> Iterator[tuple[np.ndarray, RunAnswers]]:
        a = self._get(question)
        rows = self._rows(question, splits)
        for start in range(0, rows.size, self.batch_rows):
            pos = np.arange(start, min(start + self.batch_rows, rows.size), dtype=np.int64)
            yield pos, a.select(rows[pos])
