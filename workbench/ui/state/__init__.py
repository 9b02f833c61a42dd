"""Thin Streamlit loaders over the library: which store, cached reads, session keys, widgets.

The pages use ``from workbench.ui import state`` and ``state.xxx(...)``; the names below
(:data:`__all__`) are the UI's whole state API, each defined in the module of its concept:

- :mod:`~workbench.ui.state.store`: which store a tab reads, its connections and tokens, the run record;
- :mod:`~workbench.ui.state.cache`: what is kept between calls, sessions and servers, and which runs are large;
- :mod:`~workbench.ui.state.arrays`: per-item arrays of one split (never cached by Streamlit);
- :mod:`~workbench.ui.state.runs`: datasets, runs and the run and question pickers;
- :mod:`~workbench.ui.state.thresholds`: threshold surfaces, defaults and certified results;
- :mod:`~workbench.ui.state.reports`: reports and figures of runs, slices and comparisons;
- :mod:`~workbench.ui.state.production`: shadow sessions and their reports;
- :mod:`~workbench.ui.state.errors`: a WorkbenchError shown as one line.

Cached values stay small whatever the run's size: reports, binned reliability, confusion counts,
threshold surfaces without per-item coordinates, and at most three small arrays per item for the
Thresholds page (:func:`rule_points`). The n × k probability matrix is never cached by Streamlit
(``st.cache_data`` pickles a copy per entry and unpickles one per hit): it is loaded when an
aggregate is computed, through a process-wide memo bounded in bytes
(:data:`workbench.ui.state.cache.ARRAY_MEMO_BYTES`) so that one page's aggregates share one load.

Loaders are ``st.cache_data`` functions whose keys are small hashable ids: the store path, its
*token* (:func:`workbench.store.snapshot.store_token`, so a write invalidates the cache) and ids
such as a run id or a question. Each loader opens a snapshot and calls one library function
(``workbench.store``, ``workbench.metrics``, ``workbench.thresholds``, ``workbench.workflows.compare``,
``workbench.shadow``); no figure is computed here, so the CLI computes the same numbers through
the same calls.
"""

from __future__ import annotations

import streamlit as st

from workbench.errors import NotFoundError
from workbench.ui.state.cache import forget_answers
from workbench.ui.state.errors import show_error, stop_on_error
from workbench.ui.state.production import shadow_report, shadow_sessions
from workbench.ui.state.reports import (
    agreement_frame,
    comparison,
    confusion_display,
    kept_question_report,
    metric_report,
    point_report,
    question_report,
    reliability_display,
    risk_coverage_display,
    robustness,
    run_headlines,
    slice_table,
)
from workbench.ui.state.runs import (
    dataset_info,
    dataset_schema_file,
    datasets_frame,
    failures_by_kind,
    is_emulated,
    pick_question,
    pick_run,
    planned_answers,
    run_choices,
    run_label,
    runs_frame,
    sample_items,
    slice_columns,
)
from workbench.ui.state.store import (
    KEY_DATASET,
    KEY_DB,
    current,
    current_table,
    db_path,
    preload,
    read_connection,
    run_record,
    store_ready,
    store_token,
)
from workbench.ui.state.thresholds import (
    GRID_POINTS,
    THRESHOLD_FIELDS_NOT_IN_UI,
    certified_frontier,
    certified_region,
    certified_threshold_slices,
    certified_thresholds,
    frontier,
    kept_frontier,
    label_plan,
    opening_probabilities,
    rule_points,
    settings_caption,
    threshold_defaults,
    threshold_settings,
    threshold_surface,
)


def refresh() -> None:
    """Forget cached reads (the sidebar's Refresh button)."""
    st.cache_data.clear()
    rule_points.clear()
    forget_answers()


__all__ = [
    # store: which store, connections, tokens
    "KEY_DB",
    "KEY_DATASET",
    "db_path",
    "store_token",
    "read_connection",
    "preload",
    "current",
    "current_table",
    "store_ready",
    "run_record",
    "refresh",
    # runs: datasets, runs, pickers
    "datasets_frame",
    "dataset_info",
    "dataset_schema_file",
    "sample_items",
    "runs_frame",
    "run_choices",
    "run_label",
    "is_emulated",
    "planned_answers",
    "failures_by_kind",
    "slice_columns",
    "pick_run",
    "pick_question",
    # thresholds
    "GRID_POINTS",
    "THRESHOLD_FIELDS_NOT_IN_UI",
    "threshold_defaults",
    "threshold_settings",
    "settings_caption",
    "rule_points",
    "threshold_surface",
    "certified_region",
    "certified_thresholds",
    "certified_frontier",
    "frontier",
    "kept_frontier",
    "opening_probabilities",
    "certified_threshold_slices",
    "label_plan",
    # reports
    "question_report",
    "kept_question_report",
    "metric_report",
    "point_report",
    "agreement_frame",
    "reliability_display",
    "confusion_display",
    "risk_coverage_display",
    "run_headlines",
    "slice_table",
    "robustness",
    "comparison",
    # production
    "shadow_sessions",
    "shadow_report",
    # errors
    "show_error",
    "stop_on_error",
    "NotFoundError",
]
