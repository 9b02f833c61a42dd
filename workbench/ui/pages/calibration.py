"""Calibration: reliability diagrams with interval bands, metric tables with intervals, confusion
matrix, per-class table, before/after recalibration. Every number comes from ``workbench.metrics``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state

st.title("Calibration")

if not state.store_ready():
    st.stop()
path, token = state.current()
runs = state.run_choices(path, token)  # names only: no pass over the answers
c1, c2, c3 = st.columns([2, 1, 1])
run_id = state.pick_run(runs, container=c1)
if run_id is None:
    st.stop()
run = state.run_record(path, token, run_id)
question = state.pick_question(run, container=c2)
if run.get("kind") == "calibrated" and isinstance(run.get("parent_run_id"), str):
    st.caption(
        f"This run is a calibrated view of `{run['parent_run_id']}` (made by `workbench calibrate`): pick the "
        "parent run to see the answers as the provider gave them."
    )
qtype = run["question_types"][question]
splits = [s for s in ("test", "calibration") if s in run["splits"]] or run["splits"]
split = c3.selectbox("Split", splits, key="cal_split")
d1, d2, d3 = st.columns(3)
n_bins = d1.slider("Bins", 5, 30, 15, key="cal_bins")
strategy = d2.radio(
    "Binning",
    ["uniform", "quantile"],
    horizontal=True,
    key="cal_strategy",
    help="uniform = equal-width bins; quantile = equal-mass bins",
)
methods = ["temperature", "isotonic"] + (["platt"] if qtype == "noul" else [])
after = d3.selectbox("Recalibration (fitted on the calibration split)", ["none", *methods], key="cal_method")
after_method = None if after == "none" else after
if after_method and split == "calibration":
    st.caption("The recalibration is fitted on this split: judge it on `test`.")

#: Bootstrap replicates of the metric intervals: those of ``workbench report`` (its ``--n-boot`` default).
N_BOOT = 200
with state.stop_on_error():
    variants = {"as answered": None} | ({after: after_method} if after_method else {})
    # a large run shows its point estimates first, the bootstrap intervals (the same 200 replicates as
    # `workbench report`) on request, or at once when a session kept them
    boot_key = f"cal_boot|{run_id}|{question}|{split}|{after}|{n_bins}"
    full = bool(st.session_state.get(boot_key))
    reports = {
        name: state.metric_report(path, token, run_id, question, split, m, n_bins, N_BOOT, full=full)
        for name, m in variants.items()
    }
    top = state.reliability_display(path, token, run_id, question, split, after_method, n_bins, strategy)
if top is None:
    st.warning(f"No answered, labelled items on `{split}`.")
    st.stop()

base = reports["as answered"]
cnt = base.counts
failure_kinds = ", ".join(f"{k} {v:,}" for k, v in (cnt.get("failures_by_kind") or {}).items())
st.caption(
    f"{cnt.get('n_labelled', 0):,} labelled answered items on `{split}` "
    f"({cnt.get('n_failed', 0):,} provider failures and {cnt.get('n_unlabelled', 0):,} unlabelled items "
    f"left out{'; failures by kind: ' + failure_kinds if failure_kinds else ''})."
)

# -- metric table: estimate [low, high] per variant -------------------------------------------------------
with_intervals = all(int(r.params.get("n_boot") or 0) > 0 for r in reports.values())
st.subheader("Metrics (95% bootstrap intervals)" if with_intervals else "Metrics (point estimates)")
if not with_intervals:
    st.caption(
        f"{cnt.get('n_labelled', 0):,} items: the point estimates are shown first"
        + (
            " (those that are sums, from one query over the store: the equal-mass and debiased ECE, smooth ECE, "
            "class-wise ECE, top-k accuracy and the Brier decomposition come with the full report)"
            if any(r.params.get("aggregate") for r in reports.values())
            else ""
        )
        + f". The 95% bootstrap intervals ({N_BOOT} replicates, the same figures as `workbench report {run_id} "
        f"--split {split}`) take another pass over the run; once computed they are kept for every later session."
    )
    if st.button(f"Compute the full report with bootstrap intervals ({N_BOOT} replicates)", key="cal_boot_go"):
        st.session_state[boot_key] = True
        st.rerun()
table = None
for name, rep in reports.items():
    f = rep.to_frame()[["metric", "estimate", "low", "high"]]
    f[name] = [
        f"{e:.4f}" + ("" if not np.isfinite(lo) else f"  [{lo:.4f}, {hi:.4f}]")
        for e, lo, hi in zip(f["estimate"], f["low"].astype(float), f["high"].astype(float))
    ]
    f = f[["metric", name]]
    table = f if table is None else table.merge(f, on="metric", how="outer")
st.dataframe(table, hide_index=True, width="stretch", key="cal_metrics")

# -- slices: the same metrics on each segment of the items (`workbench report --slice COLUMN`) ---------------
slice_by = st.selectbox(
    "Slice by",
    ["(none)", *state.slice_columns(path, token, run_id)],
    key="cal_slice",
    help="state_length: quartiles of the state's length; other columns: item metadata kept at import "
    "with `datasets import --meta-column`. Figures as answered (no recalibration).",
)
if slice_by != "(none)":
    try:
        slice_rows = state.slice_table(path, token, run_id, question, split, slice_by, n_bins)
    except WorkbenchError as exc:
        state.show_error(exc)
    else:
        st.subheader(f"By {slice_by} (95% bootstrap intervals)")
        st.dataframe(slice_rows, hide_index=True, width="stretch", key="cal_slice_table")
        st.caption(f"The same figures as `workbench report RUN --split {split} --slice {slice_by}`.")

# -- annotators: agreement among them next to the model's (the noise floor), when items have several votes ----
agreement, agreement_caption = state.agreement_frame(path, token, run_id, question, split)
if not agreement.empty:
    st.subheader("Annotator agreement (the noise floor)")
    st.caption(
        agreement_caption + " Model column: the run's top option as one more annotator (α, Fleiss' κ), or its "
        "mean κ against each annotator; pairwise agreement: with a random annotator of the item."
    )
    st.dataframe(agreement, hide_index=True, width="stretch", key="cal_agreement")

# -- reliability diagrams: the library's ReliabilityDisplay (the figure notebooks and the CLI draw) ----------
st.subheader("Reliability (top label)")
st.plotly_chart(top.figure_, key="cal_reliability_chart")

st.subheader("Class-wise reliability")
options = list(base.option_ids)
opt = st.selectbox(
    "Option",
    options,
    key="cal_option",
    help="One-vs-rest: P(option) against 'label is this option'"
    + (" — for noul, option `yes` is the reliability of P(yes)" if qtype == "noul" else ""),
)
k = options.index(opt)
cw_key = f"cal_cw|{run_id}|{question}|{split}|{after}|{n_bins}|{strategy}|{k}"
cw_now = bool(st.session_state.get(cw_key))  # a small run draws it anyway
classwise = state.reliability_display(
    path, token, run_id, question, split, after_method, n_bins, strategy, k, compute=bool(cw_now)
)
if classwise is not None:
    st.plotly_chart(classwise.figure_, key="cal_classwise_chart")
elif not cw_now:
    st.caption("A large run: the class-wise curve takes a pass over the run; drawn on request, then kept.")
    if st.button("Draw the class-wise reliability", key="cal_cw_go"):
        st.session_state[cw_key] = True
        st.rerun()

# -- confusion and per-class table --------------------------------------------------------------------------
st.subheader("Confusion matrix (top option, no routing) and per-class figures")
view = st.radio("Probabilities for the matrix", list(variants), horizontal=True, key="cal_confusion_view")
confusion = state.confusion_display(path, token, run_id, question, split, variants[view])
# every option count gets its matrix (banking77 has 77 options): past 20 columns the cells lose their numbers
# (hover shows them) and the labels shrink, as ConfusionDisplay draws them
st.plotly_chart(confusion.figure_, key="cal_confusion_chart")
per_class = confusion.result.per_class_frame()
st.dataframe(per_class, hide_index=True, width="stretch", key="cal_per_class")
st.download_button(
    "Download metrics (CSV)",
    pd.concat([r.to_frame().assign(variant=n) for n, r in reports.items()]).to_csv(index=False).encode(),
    f"metrics-{run_id}-{question}-{split}.csv",
    key="cal_download",
)
