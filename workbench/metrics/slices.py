"""Slices: the same report figures on each segment of the items (a language, a channel, long states).

One code path: a slice's figures are the report of ``answers.select(mask)`` — exactly what a run
filtered to that slice reports (same bootstrap seed, same bins) — so a per-slice figure and the figure
of the filtered run agree to the last bit. :func:`slice_groups` turns per-item slice values into
ordered masks; :func:`length_buckets` makes the built-in ``state_length`` slice; :func:`slice_reports`
reports every slice of one question. Loading the values from the store is a floor-7 step
(:func:`workbench.workflows.evaluation.slice_values`).

``state_length`` buckets are the quartiles of the state's length in characters over **every item of the
dataset version** (all splits, so an item's bucket does not depend on the split or run reported);
tied quartiles merge, so there are at most four buckets, named by their inclusive length range
(``"≤ 32 chars"``, ``"33–48 chars"``, …, ``"≥ 97 chars"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench.metrics import registry
from workbench.metrics.report import QuestionReport, question_report

#: The slice of items without a value in the metadata column.
MISSING = "(missing)"
#: Quantiles that cut ``state_length`` into (at most) four buckets.
LENGTH_QUANTILES = (0.25, 0.5, 0.75)
#: Metrics shown in a slice table, in this order, when the question's report has them.
HEADLINE_METRICS = registry.HEADLINE_METRICS


def length_buckets(lengths: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Quartile buckets of lengths in characters: (label per item (n,) object, labels in length order).

    Edges are the ``inverted_cdf`` quartiles (values that occur), deduplicated; bucket ``i`` holds the
    lengths in ``(edge[i-1], edge[i]]``, the last one the lengths above the last edge.
    """
    x = np.asarray(lengths, dtype=float)
    if x.size == 0:
        return np.asarray([], dtype=object), []
    edges = np.unique(np.quantile(x, LENGTH_QUANTILES, method="inverted_cdf")).astype(int)
    if edges[-1] >= x.max():  # the top quartile is the maximum: no item above it
        edges = edges[:-1]
    idx = np.searchsorted(edges, x, side="left")  # (edge[i-1], edge[i]] -> i
    names = []
    for i in range(len(edges) + 1):
        lo = None if i == 0 else int(edges[i - 1]) + 1
        hi = None if i == len(edges) else int(edges[i])
        if lo is None and hi is None:
            names.append("all lengths")
        elif lo is None:
            names.append(f"≤ {hi} chars")
        elif hi is None:
            names.append(f"≥ {lo} chars")
        else:
            names.append(f"{lo}–{hi} chars" if lo != hi else f"{lo} chars")
    labels = np.asarray(names, dtype=object)[idx]
    present = [n for i, n in enumerate(names) if (idx == i).any()]
    return labels, present


def slice_groups(values: np.ndarray, order: Sequence[str] | None = None) -> list[tuple[str, np.ndarray]]:
    """``[(slice value, mask (n,) bool)]`` for every value present; missing values form :data:`MISSING`.

    Order: ``order`` first (values it names that occur), then the other values sorted, then missing.
    """
    v = np.asarray(values, dtype=object)
    missing = pd.isna(pd.Series(v, dtype=object)).to_numpy()
    text = np.where(missing, MISSING, v.astype(str) if v.size else v).astype(object)
    codes, uniques = pd.factorize(pd.Series(text, dtype=object), sort=True)
    present = [str(u) for u in uniques]
    first = [o for o in (order or []) if o in present]
    rest = [u for u in present if u not in first and u != MISSING]
    ordered = first + rest + ([MISSING] if MISSING in present and MISSING not in first else [])
    pos = {u: i for i, u in enumerate(present)}
    return [(u, codes == pos[u]) for u in ordered]


@dataclass
class SliceReports:
    """Reports of each slice of one metadata column: ``questions[question][value]`` is a
    :class:`QuestionReport` of the items with that value (``values`` in display order)."""

    column: str
    values: list[str]
    questions: dict[str, dict[str, QuestionReport]] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """One row per (question, slice, metric): column, slice, question, metric, estimate, low, high, n."""
        frames = [
            rep.to_frame().assign(slice=value)
            for per_value in self.questions.values()
            for value, rep in per_value.items()
        ]
        cols = ["column", "slice", "question", "type", "metric", "estimate", "low", "high", "n"]
        if not frames:
            return pd.DataFrame(columns=cols)
        return pd.concat(frames, ignore_index=True).assign(column=self.column)[cols]

    def to_dict(self) -> dict:
        return {
            "column": self.column,
            "values": list(self.values),
            "questions": {
                q: {value: rep.to_dict() for value, rep in per_value.items()} for q, per_value in self.questions.items()
            },
        }


def slice_reports(
    answers: Any,
    values: np.ndarray,
    *,
    order: Sequence[str] | None = None,
    report: Callable[[Any], QuestionReport] | None = None,
    **kwargs: Any,
) -> dict[str, QuestionReport]:
    """``{slice value: report of answers.select(mask)}`` for one question's :class:`RunAnswers`.

    ``values`` (n,) aligns with ``answers``' rows; ``report`` (default :func:`question_report` with
    ``kwargs``) is called on each slice's rows, so a slice reports exactly as the filtered answers do.
    """
    fn = report if report is not None else (lambda a: question_report(a, **kwargs))
    return {value: fn(answers.select(mask)) for value, mask in slice_groups(values, order)}
