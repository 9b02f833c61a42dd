"""Per-item arrays of one run, question and split: never cached by Streamlit (callers cache what
they compute from them), or shared as one ``st.cache_resource`` copy of a large split's items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from workbench.ui.state.cache import run_answers
from workbench.ui.state.store import read_connection


@dataclass(frozen=True)
class QuestionArrays:
    """Labelled items of one run, question and split (failures kept as NaN rows).

    ``probs`` (n, k) float, NaN rows = provider failures; ``labels`` (n,) int in [0, k).
    ``calibrator`` is the fitted calibrator's ``to_dict()`` when recalibrated, else None.
    """

    qtype: str
    option_ids: tuple[str, ...]
    probs: Any
    labels: Any
    calibrator: dict | None = None


def question_arrays(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None = None
) -> QuestionArrays:
    """Probabilities and labels of one split; optionally recalibrated with a calibrator fitted on
    the run's *calibration* split (``recalibrate`` = ``temperature``, ``isotonic`` or ``platt``).

    Not cached (n × k floats): callers cache what they compute from it."""
    ans = run_answers(path, token, run_id, question, (split,))
    keep = ans.labels >= 0
    probs, labels = ans.probs[keep], ans.labels[keep]
    cal_dict = None
    if recalibrate:
        from workbench.metrics.recalibrate import make_calibrator

        fit_on = ans if split == "calibration" else run_answers(path, token, run_id, question, ("calibration",))
        fit = fit_on.labels >= 0
        cal = make_calibrator(recalibrate).fit(fit_on.probs[fit], fit_on.labels[fit])
        probs = cal.transform(probs)
        cal_dict = cal.to_dict()
    return QuestionArrays(ans.qtype, tuple(ans.option_ids), probs, labels, cal_dict)


@st.cache_resource(show_spinner=False, max_entries=8)
def split_calibrator(path: str, token: tuple, run_id: str, question: str, method: str):
    """:func:`workbench.workflows.split_calibrator` of a large run, fitted once per (run, question, method)
    and shared by every figure of every session that needs it (one streamed pass instead of one per figure)."""
    from workbench.workflows.thresholds import split_calibrator as _fit

    with read_connection(path) as con:
        return _fit(con, run_id, question, method)


@st.cache_resource(show_spinner=False, max_entries=2)
def labelled_items(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, option: int | None = None
):
    """:func:`workbench.workflows.labelled_items` of a large split (recalibrated with a calibrator fitted
    on the calibration split, as :func:`question_arrays` does).

    ``st.cache_resource`` with two entries: the figures of one page that need the same items (the
    top-label reliability and the confusion matrix) share one streamed pass, and no more than two
    item sets (about 40 bytes per item each) stay in memory."""
    from workbench.workflows.thresholds import labelled_items as _items

    cal = split_calibrator(path, token, run_id, question, recalibrate) if recalibrate else None
    with read_connection(path) as con:
        return _items(con, run_id, question, split, calibrator=cal, option=option)
