"""Reports and figures of runs: metrics with intervals, reliability, confusion, risk–coverage,
agreement, slices, robustness and comparisons (what ``workbench report``, ``compare`` and
``robustness`` print)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from workbench.thresholds.options import ThresholdOptions
from workbench.ui.state.arrays import labelled_items, split_calibrator
from workbench.ui.state.cache import kept, reads_in_batches, run_answers
from workbench.ui.state.runs import runs_frame
from workbench.ui.state.store import option_names, read_connection


@st.cache_data(show_spinner=False, max_entries=32)
def robustness(
    path: str, token: tuple, base_run: str, probe_runs: tuple[str, ...], question: str, split: str, n_boot: int
) -> dict:
    """:func:`workbench.workflows.robustness.robustness` of probed runs against their base run (``workbench robustness``)."""
    from workbench.workflows.robustness import robustness as _robustness

    with read_connection(path) as con:
        return _robustness(con, base_run, list(probe_runs), question=question, splits=[split], n_boot=n_boot)


@st.cache_data(show_spinner=False, max_entries=32)
def question_report(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, n_bins: int, n_boot: int
):
    """:mod:`workbench.metrics.report` of one question on one split (metrics with bootstrap intervals), as
    ``workbench report`` computes it (the run read in batches, :func:`_streamed_report`), with ``recalibrate``
    fitted on the calibration split as ``workbench calibrate`` fits it.

    Of a large run, kept between sessions (:func:`kept`); see :func:`kept_question_report` for a
    lookup that computes nothing."""

    def compute():
        return _streamed_report(path, token, run_id, question, split, recalibrate, n_bins, n_boot)

    if reads_in_batches(path, token, run_id, question, split):
        return kept(path, token, run_id, question, ("question_report", split, recalibrate, n_bins, n_boot), compute)
    return compute()


@st.cache_data(show_spinner=False, max_entries=32)
def point_report(path: str, token: tuple, run_id: str, question: str, split: str, n_bins: int = 15):
    """:func:`workbench.engines.store_aggregates.point_report` of a large run as answered (the report's
    sum-based point estimates, top-label reliability, confusion, counts from one DuckDB query), kept
    between sessions; None when the run or question does not qualify."""
    from workbench.engines import store_aggregates as sa
    from workbench.store.sources import StoreSource

    def compute():
        with read_connection(path) as con:
            return sa.point_report(StoreSource(con, run_id), question, split, n_bins=n_bins)

    return kept(path, token, run_id, question, ("point_report", split, n_bins), compute)


def kept_question_report(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, n_bins: int, n_boot: int
):
    """The :func:`question_report` of a large run if a session already computed it, else None (nothing is computed)."""
    return kept(path, token, run_id, question, ("question_report", split, recalibrate, n_bins, n_boot))


def metric_report(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None,
    n_bins: int,
    n_boot: int,
    *,
    full: bool,
):
    """The metric report a page shows: :func:`question_report` with ``n_boot`` bootstrap replicates, except for a
    run the library reads in batches when ``full`` is False: then the full report only if a session kept it, else
    the point estimates first (the store's sums of :func:`point_report` for a raw choice question as given, else a
    streamed report without the bootstrap). ``params["n_boot"]`` of the result says which one it is."""
    if not full and reads_in_batches(path, token, run_id, question, split):
        rep = kept_question_report(path, token, run_id, question, split, recalibrate, n_bins, n_boot)
        if rep is None and recalibrate is None:  # the sums of one query over the store (a raw choice question)
            rep = point_report(path, token, run_id, question, split, n_bins)
        if rep is None:
            rep = question_report(path, token, run_id, question, split, recalibrate, n_bins, n_boot=0)
        return rep
    return question_report(path, token, run_id, question, split, recalibrate, n_bins, n_boot=n_boot)


def _streamed_report(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, n_bins: int, n_boot: int
):
    from workbench.metrics.recalibrate import apply_calibrator
    from workbench.store.sources import StoreSource
    from workbench.workflows.evaluation import stream_question_report

    cal = split_calibrator(path, token, run_id, question, recalibrate) if recalibrate else None
    with read_connection(path) as con:
        rep = stream_question_report(
            StoreSource(con, run_id),
            question,
            [split],
            transform=None if cal is None else (lambda p: apply_calibrator(cal, p)),
            n_bins=n_bins,
            n_boot=n_boot,
            smooth=True,
        )
    return replace(rep, replicate=None)


@st.cache_data(show_spinner=False, max_entries=32)
def agreement_frame(path: str, token: tuple, run_id: str, question: str, split: str) -> tuple[pd.DataFrame, str]:
    """Agreement among annotators next to the run's (:func:`workbench.workflows.evaluation.agreement_for_run`,
    what ``workbench report`` prints) as (table, caption); an empty table when no item has several votes."""
    from workbench.workflows.evaluation import agreement_for_run

    def compute() -> tuple[pd.DataFrame, str]:
        with read_connection(path) as con:
            ag = agreement_for_run(con, run_id, question, split)[question]
        if ag is None:
            return pd.DataFrame(), ""
        caption = (
            f"{ag.n_items:,} items with two or more votes ({ag.votes_per_item:.2f} per item, "
            f"{ag.n_annotators} named annotators). " + " ".join(ag.notes)
        )
        return ag.to_frame().drop(columns="question"), caption

    if reads_in_batches(path, token, run_id, question, split):  # a count over every vote: kept between sessions
        return kept(path, token, run_id, question, ("agreement_frame", split), compute)
    return compute()


@st.cache_data(show_spinner=False, max_entries=64)
def reliability_display(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None,
    n_bins: int,
    strategy: str,
    option: int | None = None,
    compute: bool = True,
):
    """:class:`~workbench.metrics.displays.ReliabilityDisplay` of the answers as given and, with
    ``recalibrate``, after recalibration (one figure). ``option`` = None: top label; else the
    one-vs-rest column of that option. None when no answered labelled item is left. Of a large run,
    kept between sessions (:func:`kept`); the top-label figure of its answers as given (equal-width
    bins) comes from :func:`point_report` (without the smooth curve); ``compute=False`` returns None
    instead of streaming the run for a figure nobody kept yet. The figure itself comes from each item's top
    option, confidence and ``option`` column read in batches (:func:`~workbench.ui.state.arrays.labelled_items`),
    for every size of run: never the matrix."""

    def figure():
        from workbench.metrics.displays import ReliabilityDisplay

        parts = []
        for name, method in [("as answered", None)] + ([(recalibrate, recalibrate)] if recalibrate else []):
            items = labelled_items(path, token, run_id, question, split, method, option)
            ok = np.isfinite(items.top)
            if not ok.any():
                return None
            if option is None:
                y, s, x_t = (items.coords.predicted == items.labels)[ok], items.top[ok], "top-label confidence"
            else:
                assert items.column is not None
                y, s, x_t = (items.labels == option)[ok], items.column[ok], f"P(option {option})"
            parts.append(ReliabilityDisplay.from_scores(y, s, n_bins=n_bins, strategy=strategy, name=name, x_title=x_t))
        x_title = parts[0].x_title if option is None else f"P({option_names(path, token, run_id, question)[option]})"
        d = ReliabilityDisplay(
            [c for part in parts for c in part.curves],
            f"{question} on {split}: reliability of {'the top label' if option is None else x_title} ({strategy} bins)",
            x_title,
        )
        d.plot()
        return d

    if reads_in_batches(path, token, run_id, question, split):
        description = ("reliability_display", split, recalibrate, n_bins, strategy, option)
        done = kept(path, token, run_id, question, description)
        if done is not None:
            return done
        if recalibrate is None and strategy == "uniform" and option is None:
            rep = point_report(path, token, run_id, question, split, n_bins)
            if rep is not None:
                return _report_reliability(rep, question, split, n_bins)
        if not compute:
            return None
        return kept(path, token, run_id, question, description, figure)
    return figure()


def _report_reliability(rep, question: str, split: str, n_bins: int):
    """The top-label :class:`~workbench.metrics.displays.ReliabilityDisplay` of a point report's binned curve."""
    from workbench.metrics.displays import ReliabilityDisplay

    if "top_label_uniform" not in rep.curves:
        return None
    curve = replace(rep.curves["top_label_uniform"], label="as answered")
    d = ReliabilityDisplay(
        [("as answered", curve, None)],
        f"{question} on {split}: reliability of the top label (uniform bins)",
        "top-label confidence",
    )
    d.plot()
    return d


@st.cache_data(show_spinner=False, max_entries=64)
def confusion_display(path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None):
    """:class:`~workbench.metrics.displays.ConfusionDisplay` of the top option (no routing)."""
    from workbench.metrics.displays import ConfusionDisplay

    title = f"{question} on {split}: top option vs gold"

    def confusion():  # each item's top option read in batches, for every size of run
        items = labelled_items(path, token, run_id, question, split, recalibrate)
        return ConfusionDisplay.from_decisions(items.labels, items.coords.predicted, items.option_ids, title=title)

    if reads_in_batches(path, token, run_id, question, split):
        description = ("confusion_display", split, recalibrate)
        done = kept(path, token, run_id, question, description)
        if done is not None:
            return done
        rep = point_report(path, token, run_id, question, split) if recalibrate is None else None
        if rep is not None and rep.confusion is not None:
            return ConfusionDisplay.from_result(rep.confusion, title=title)
        return kept(path, token, run_id, question, description, confusion)
    return confusion()


@st.cache_data(show_spinner=False, max_entries=16)
def run_headlines(path: str, token: tuple) -> pd.DataFrame:
    """Accuracy and top-label ECE of every run and question on the test split (point estimates), from
    :func:`workbench.metrics.report.report_run` — what ``workbench report RUN`` prints."""
    from workbench.workflows.evaluation import report_run

    runs = runs_frame(path, token)
    rows = []
    with read_connection(path) as con:
        for run_id in runs["run_id"]:
            try:
                rep = report_run(con, run_id, split="test", n_boot=0, with_before=False, smooth=False)
            except Exception:  # noqa: BLE001 - a run without this split (or still empty) has no headline
                continue
            for q in rep.questions:
                m = q.metrics
                ece = m.get("ece_uniform") or m.get("ece_yes_uniform")
                rows.append(
                    {
                        "run_id": run_id,
                        "question": q.question,
                        "accuracy": m["accuracy"].estimate if "accuracy" in m else None,
                        "ece": ece.estimate if ece is not None else None,
                    }
                )
    return pd.DataFrame(rows, columns=["run_id", "question", "accuracy", "ece"])


@st.cache_data(show_spinner=False, max_entries=16)
def risk_coverage_display(
    path: str,
    token: tuple,
    run_ids: tuple[str, ...],
    labels: tuple[str, ...],
    question: str,
    split: str,
    points: tuple = (),
):
    """:class:`~workbench.metrics.displays.RiskCoverageDisplay` overlay of several runs on one split
    (top-probability ranking); ``labels`` name the curves; ``points`` = ((coverage, error) | None per run)."""
    from workbench.metrics.displays import RiskCoverageDisplay

    parts = []
    for k, (run_id, label) in enumerate(zip(run_ids, labels)):
        ans = run_answers(path, token, run_id, question, (split,))
        pt = points[k] if k < len(points) else None
        parts.append(RiskCoverageDisplay.from_predictions(ans.labels, ans.probs, name=label, point=pt))
    return RiskCoverageDisplay.overlay(parts, title=f"{question} on {split}: error among accepted vs coverage")


@st.cache_data(show_spinner="Comparing runs…", max_entries=16)
def comparison(
    path: str,
    token: tuple,
    run_ids: tuple[str, ...],
    baseline: str,
    question: str,
    split: str,
    objective: tuple,
    n_boot: int,
):
    """:func:`workbench.workflows.compare.compare_runs` (paired bootstrap, McNemar) as a frame + the raw rows.

    ``objective`` = (kind, alpha, delta, calibrate): the :class:`ThresholdOptions` fields the page sets
    (the others keep their defaults, as ``workbench compare`` does).
    """
    from workbench.workflows.compare import compare_runs

    kind, alpha, delta, calibrate = objective
    with read_connection(path) as con:
        comp = compare_runs(
            con,
            list(run_ids),
            baseline=baseline,
            questions=[question],
            split=split,
            options=ThresholdOptions(objective=kind, alpha=alpha, delta=delta, calibrate=calibrate),
            n_boot=n_boot,
        )
    return comp.to_frame(), comp.to_dict()


@st.cache_data(show_spinner="Reporting each slice…", max_entries=32)
def slice_table(path: str, token: tuple, run_id: str, question: str, split: str, column: str, n_bins: int = 15):
    """Per-slice report of one question (``workbench report --slice COLUMN``): one row per slice with
    its labelled count and headline metrics as ``estimate [low, high]``."""
    from workbench.metrics.slices import HEADLINE_METRICS
    from workbench.workflows.evaluation import report_run

    with read_connection(path) as con:
        rep = report_run(con, run_id, question, split, n_bins=n_bins, slices=[column], with_before=False)
    sr = rep.slices[column]
    per_value = sr.questions.get(question, {})
    names = [m for m in HEADLINE_METRICS if any(m in r.metrics for r in per_value.values())]
    rows = []
    for value, r in per_value.items():
        row: dict = {column: value, "labelled": r.counts.get("n_labelled", 0), "failed": r.counts.get("n_failed", 0)}
        for m in names:
            iv = r.metrics.get(m)
            row[m] = "—" if iv is None else f"{iv.estimate:.4f}  [{iv.low:.4f}, {iv.high:.4f}]"
        rows.append(row)
    return pd.DataFrame(rows)
