"""Per-item figures of one run, question and split read in batches, shared as one ``st.cache_resource`` copy
(every figure a page draws from items, whatever the run's size), and the calibration split's calibrator."""

from __future__ import annotations

import streamlit as st

from workbench.ui.state.store import read_connection


@st.cache_resource(show_spinner=False, max_entries=8)
def split_calibrator(path: str, token: tuple, run_id: str, question: str, method: str):
    """:func:`workbench.workflows.split_calibrator` of a run, fitted once per (run, question, method)
    and shared by every figure of every session that needs it (one streamed pass instead of one per figure)."""
    from workbench.workflows.thresholds import split_calibrator as _fit

    with read_connection(path) as con:
        return _fit(con, run_id, question, method)


@st.cache_resource(show_spinner=False, max_entries=2)
def labelled_items(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, option: int | None = None
):
    """:func:`workbench.workflows.labelled_items` of a large split (recalibrated with a calibrator fitted
    on the calibration split, :func:`split_calibrator`).

    ``st.cache_resource`` with two entries: the figures of one page that need the same items (the
    top-label reliability and the confusion matrix) share one streamed pass, and no more than two
    item sets (about 40 bytes per item each) stay in memory."""
    from workbench.workflows.thresholds import labelled_items as _items

    cal = split_calibrator(path, token, run_id, question, recalibrate) if recalibrate else None
    with read_connection(path) as con:
        return _items(con, run_id, question, split, calibrator=cal, option=option)
