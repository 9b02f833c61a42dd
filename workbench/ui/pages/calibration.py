"""Calibration: reliability diagrams with interval bands, metric tables with intervals, confusion
matrix, per-class table, before/after recalibration. Every number comes from ``workbench.metrics``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state

st.title("Calibration")

if not state.store_ready():
    st.stop()
path, token = state.current()
runs = state.runs_frame(path, token)
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

try:
    variants = {"as answered": None} | ({after: after_method} if after_method else {})
    reports = {
        name: state.question_report(path, token, run_id, question, split, m, n_bins) for name, m in variants.items()
    }
    curves = {
        name: state.reliability(path, token, run_id, question, split, m, n_bins, strategy)
        for name, m in variants.items()
    }
except WorkbenchError as exc:
    state.show_error(exc)
    st.stop()
if curves["as answered"] is None:
    st.warning(f"No answered, labelled items on `{split}`.")
    st.stop()

base = reports["as answered"]
cnt = base.counts
st.caption(
    f"{cnt.get('n_labelled', 0):,} labelled answered items on `{split}` "
    f"({cnt.get('n_failed', 0):,} provider failures and {cnt.get('n_unlabelled', 0):,} unlabelled items "
    f"left out{'; failures by kind: ' + str(cnt['failures_by_kind']) if cnt.get('failures_by_kind') else ''})."
)

# -- metric table: estimate [low, high] per variant -------------------------------------------------------
st.subheader("Metrics (95% bootstrap intervals)")
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

# -- reliability diagram with interval bands -------------------------------------------------------------
st.subheader("Reliability (top label)")
colors = {"as answered": "#1f77b4", after: "#d62728"}
fig = go.Figure()
fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect", line={"dash": "dash", "color": "grey"}))
for name, cv in curves.items():
    top, smooth = cv[0], cv[1]
    f = top.to_frame().dropna(subset=["mean_score"])
    color = colors.get(name, "#2ca02c")
    fig.add_trace(
        go.Scatter(
            x=np.r_[f["mean_score"], f["mean_score"][::-1]],
            y=np.r_[f["high"], f["low"][::-1]],
            fill="toself",
            fillcolor=color,
            opacity=0.15,
            line={"width": 0},
            hoverinfo="skip",
            name=f"{name}: 95% Wilson band",
            showlegend=True,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=f["mean_score"],
            y=f["frac_true"],
            mode="lines+markers",
            name=f"{name}: binned",
            line={"color": color},
            customdata=f["count"],
            hovertemplate="confidence %{x:.3f}<br>accuracy %{y:.3f}<br>n=%{customdata}<extra></extra>",
        )
    )
    sm = smooth.to_frame()
    fig.add_trace(
        go.Scatter(
            x=sm["score"],
            y=sm["frac_true"],
            mode="lines",
            name=f"{name}: smooth (smECE {smooth.smece:.3f})",
            line={"color": color, "dash": "dot"},
        )
    )
fig.update_layout(
    height=460,
    xaxis_title="confidence (top probability)",
    yaxis_title="observed accuracy",
    xaxis_range=[0, 1],
    yaxis_range=[0, 1],
    margin={"t": 20},
)
hist = go.Figure()
for name, cv in curves.items():
    f = cv[0].to_frame()
    hist.add_trace(
        go.Bar(
            x=(f["lower"] + f["upper"]) / 2,
            y=f["count"],
            name=name,
            opacity=0.6,
            marker_color=colors.get(name, "#2ca02c"),
        )
    )
hist.update_layout(height=460, barmode="overlay", xaxis_title="confidence", yaxis_title="items", margin={"t": 20})
r1, r2 = st.columns([3, 2])
r1.plotly_chart(fig, key="cal_reliability_chart")
r2.plotly_chart(hist, key="cal_hist_chart")

# -- class-wise --------------------------------------------------------------------------------------------
st.subheader("Class-wise reliability")
options = list(reports["as answered"].option_ids)
opt = st.selectbox(
    "Option",
    options,
    key="cal_option",
    help="One-vs-rest: P(option) against 'label is this option'"
    + (" — for noul, option `yes` is the reliability of P(yes)" if qtype == "noul" else ""),
)
k = options.index(opt)
cw = go.Figure()
cw.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect", line={"dash": "dash", "color": "grey"}))
for name, cv in curves.items():
    f = cv[2][k].to_frame().dropna(subset=["mean_score"])
    cw.add_trace(
        go.Scatter(
            x=f["mean_score"],
            y=f["frac_true"],
            mode="lines+markers",
            name=name,
            error_y={
                "type": "data",
                "symmetric": False,
                "array": f["high"] - f["frac_true"],
                "arrayminus": f["frac_true"] - f["low"],
            },
            line={"color": colors.get(name, "#2ca02c")},
        )
    )
cw.update_layout(
    height=380,
    xaxis_title=f"P({opt})",
    yaxis_title=f"observed frequency of {opt}",
    xaxis_range=[0, 1],
    yaxis_range=[-0.02, 1.02],
    margin={"t": 20},
)
st.plotly_chart(cw, key="cal_classwise_chart")

# -- confusion and per-class table --------------------------------------------------------------------------
st.subheader("Confusion matrix (top option, no routing) and per-class figures")
view = st.radio("Probabilities for the matrix", list(curves), horizontal=True, key="cal_confusion_view")
confusion = curves[view][3]
cm = confusion.to_frame()
if len(options) <= 30:
    heat = go.Figure(
        go.Heatmap(
            z=cm.to_numpy(),
            x=list(cm.columns),
            y=list(cm.index),
            colorscale="Blues",
            hovertemplate="label %{y}<br>decision %{x}<br>%{z} items<extra></extra>",
        )
    )
    heat.update_layout(
        height=max(300, 22 * len(options) + 120),
        yaxis_autorange="reversed",
        margin={"t": 20},
        xaxis_title="decision",
        yaxis_title="label",
    )
    st.plotly_chart(heat, key="cal_confusion_chart")
per_class = confusion.per_class_frame()
st.dataframe(per_class, hide_index=True, width="stretch", key="cal_per_class")
st.download_button(
    "Download metrics (CSV)",
    pd.concat([r.to_frame().assign(variant=n) for n, r in reports.items()]).to_csv(index=False).encode(),
    f"metrics-{run_id}-{question}-{split}.csv",
    key="cal_download",
)
