"""Monitor: a live policy's decision logs and outcomes, per window, with the anytime-valid alarm.

Every figure comes from :func:`workbench.monitor.report.monitor`, the function behind
``workbench monitor``. The files default to the URL's query parameters (``?policy=…&decisions=…
&outcomes=…&window=…``), else to ``policy.json``, ``decisions*.jsonl*`` and ``outcomes.*`` next to
the store.
"""

from __future__ import annotations

import glob
import math
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from workbench.ui import state

st.title("Monitor")
st.caption(
    "Production decisions against the policy's promise: per-window traffic, coverage, overrides and error, "
    "drift against the calibration-time reference, and an alarm that stays valid however often you look."
)

params = st.query_params
store_dir = Path(state.db_path()).parent


def _default(name: str, fallback: str) -> str:
    return params.get(name) or fallback


c1, c2 = st.columns(2)
policy_path = c1.text_input("Policy file", value=_default("policy", str(store_dir / "policy.json")), key="mon_policy")
window = c2.text_input(
    "Window (1D, 6h, 15min, 1W or a count of decisions)", value=_default("window", "1D"), key="mon_window"
)
decisions_text = c1.text_input(
    "Decision logs (comma-separated; globs allowed)",
    value=_default("decisions", str(store_dir / "decisions*.jsonl*")),
    key="mon_decisions",
)
outcomes_text = c2.text_input(
    "Outcome files (JSONL, CSV or Parquet; comma-separated)",
    value=_default("outcomes", str(store_dir / "outcomes.*")),
    key="mon_outcomes",
)


def _files(text: str) -> list[str]:
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            out += sorted(glob.glob(part)) if any(c in part for c in "*?[") else [part]
    return out


def _token(files: list[str]) -> tuple:
    return tuple((f, *(lambda s: (s.st_mtime_ns, s.st_size))(Path(f).stat())) for f in files if Path(f).exists())


@st.cache_data(show_spinner="Reading the decision logs…", max_entries=8)
def _monitor(policy: str, decisions: tuple, outcomes: tuple, window: str, token: tuple) -> dict:
    from workbench.monitor.report import MonitorOptions, monitor

    rep = monitor(policy, list(decisions), list(outcomes), MonitorOptions(window=window))
    return rep.to_dict()


decision_files, outcome_files = _files(decisions_text), _files(outcomes_text)
if not Path(policy_path).exists() or not decision_files:
    st.info(
        "Point this page at a policy file and the decision logs the runtime wrote "
        "(`Policy.decide(response, decision_id=..., log=DecisionLog(path))`); outcomes are optional."
    )
    st.stop()
with state.stop_on_error():
    doc = _monitor(
        policy_path,
        tuple(decision_files),
        tuple(outcome_files),
        window,
        _token([policy_path, *decision_files, *outcome_files]),
    )

if doc["alarm"]:
    st.error("**ALARM** — " + "  \n".join(doc["reasons"]))
else:
    st.success("No alarm: the error rate among accepted decisions is not confidently above the policy's α.")
for w in doc["warnings"]:
    st.warning(w)

questions = list(doc["questions"])
q = st.selectbox("Question", questions, key="mon_question") if len(questions) > 1 else questions[0]
info = doc["questions"][q]
overall = info["overall"]
wins = [w for w in doc["windows"] if w["question"] == q]
seq = info["sequence"]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


m = st.columns(3) + st.columns(3)  # two rows of three: six metrics in one row cut labels and values at 1400 px
m[0].metric("Decisions", f"{overall['traffic']:,}")
m[1].metric("Coverage", _pct(overall["coverage"]))
m[2].metric("Review load", f"{overall['review_load']:,}")
m[3].metric("Override rate", _pct(overall["override_rate"]))
m[4].metric(
    "Error (accepted)",
    _pct(overall["error"]),
    help=f"{overall['n_errors']} of {overall['n_known']} accepted decisions with a known outcome; Wilson 95% "
    f"[{_pct(overall['error_low'])}, {_pct(overall['error_high'])}]",
)
m[5].metric(
    "α / δ",
    f"{info['alpha']:g} / {info['delta']:g}",
    help="The policy's promised error rate α; δ bounds the chance of ever raising a false alarm.",
)

x = [w["start"] if w["start"] is not None else w["window"] for w in wins]
# one window: a category axis (a time axis around one instant drew sub-millisecond ticks, issue 27 §6)
one_window = len(wins) == 1

# -- per-window figures ------------------------------------------------------------------------------
st.subheader("Per window")
fig = make_subplots(
    rows=3,
    cols=1,
    shared_xaxes=True,
    vertical_spacing=0.08,
    subplot_titles=("Traffic and review load", "Coverage and override rate", "Error among accepted (95% CI)"),
)
fig.add_bar(x=x, y=[w["traffic"] for w in wins], name="decisions", marker_color="#9ecae1", row=1, col=1)
fig.add_bar(x=x, y=[w["review_load"] for w in wins], name="sent to review", marker_color="#fd8d3c", row=1, col=1)
fig.add_scatter(
    x=x, y=[w["coverage"] for w in wins], name="coverage", mode="lines+markers", line_color="#1f77b4", row=2, col=1
)
fig.add_scatter(
    x=x,
    y=[w["override_rate"] for w in wins],
    name="override rate",
    mode="lines+markers",
    line_color="#ff7f0e",
    row=2,
    col=1,
)
err = [w["error"] for w in wins]
fig.add_scatter(
    x=x,
    y=err,
    name="error",
    mode="lines+markers",
    error_y={
        "type": "data",
        "symmetric": False,
        "array": [None if w["error"] is None else w["error_high"] - w["error"] for w in wins],
        "arrayminus": [None if w["error"] is None else w["error"] - w["error_low"] for w in wins],
    },
    line_color="#d62728",
    row=3,
    col=1,
)
fig.add_hline(y=info["alpha"], line_dash="dash", line_color="black", annotation_text="α", row=3, col=1)
fig.update_layout(height=720, barmode="overlay", margin={"t": 40, "b": 30}, legend={"orientation": "h"})
# shares stay on a 0–100% scale and the error axis reaches just past α or the highest interval: plotly's
# autorange around one point drew a 150% axis (issue 27 §6)
err_top = max(
    [info["alpha"], *(w["error_high"] for w in wins if w["error"] is not None and w["error_high"] is not None)]
)
fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=2, col=1)
fig.update_yaxes(tickformat=".0%", range=[0, min(1.05, 1.25 * err_top)], row=3, col=1)
if one_window:
    fig.update_xaxes(type="category")
st.plotly_chart(fig, key="mon_windows_chart", width="stretch")

# -- the confidence sequence and the alarm -------------------------------------------------------------
st.subheader("Confidence sequence against α")
st.caption(
    f"Lower {100 * (1 - info['delta']):.0f}% confidence sequence of the error rate among accepted decisions with a "
    "known outcome (betting e-process, Waudby-Smith & Ramdas 2023): with that probability the error rate has "
    "reached the blue line. It holds at every outcome at once, so looking after each new outcome does not "
    "inflate false alarms. The alarm fires when it crosses α."
)
curve = seq["curve"]
cs = go.Figure()
cs.add_scatter(x=curve["outcome"], y=curve["recent"], name="recent error rate", mode="lines", line_color="#7f7f7f")
cs.add_scatter(
    x=curve["outcome"],
    y=curve["estimate"],
    name="overall error rate",
    mode="lines",
    line={"color": "#bbbbbb", "dash": "dot"},
)
cs.add_scatter(x=curve["outcome"], y=curve["lower"], name="lower confidence bound", mode="lines", line_color="#1f77b4")
cs.add_hline(y=info["alpha"], line_dash="dash", line_color="black", annotation_text=f"α = {info['alpha']:g}")
if seq["fired"]:
    k = seq["first_alarm_outcome"]
    pos = curve["outcome"].index(k) if k in curve["outcome"] else None
    y_alarm = curve["lower"][pos] if pos is not None else info["alpha"]
    cs.add_vline(x=k, line_color="#d62728", line_width=2)
    cs.add_scatter(
        x=[k],
        y=[y_alarm],
        mode="markers+text",
        marker={"size": 14, "color": "#d62728", "symbol": "x"},
        text=[f"ALARM at outcome {k}"],
        textposition="top left",
        name="alarm",
    )
cs.update_layout(
    height=400,
    xaxis_title="accepted decisions with a known outcome",
    yaxis_tickformat=".1%",
    margin={"t": 20},
    legend={"orientation": "h", "y": -0.25},
)
st.plotly_chart(cs, key="mon_cs_chart", width="stretch")
at = doc["first_alarm_at"]
if at and at["question"] == q:
    st.markdown(
        f"First alarm at decision **{at['decision_index']}** (`{at['decision_id']}`, {at['time']}), after "
        f"{at['outcome_index'] + 1} outcomes."
    )

ev = go.Figure()
ev.add_scatter(
    x=curve["outcome"],
    y=[math.exp(min(v, 700.0)) for v in curve["log_e"]],
    mode="lines",
    name="e-value",
    line_color="#9467bd",
)
ev.add_hline(
    y=1 / info["delta"], line_dash="dash", line_color="#d62728", annotation_text=f"1/δ = {1 / info['delta']:g}"
)
ev.update_layout(height=260, yaxis_type="log", yaxis_title="e-value", margin={"t": 20})
with st.expander("E-process (wealth of the bet against “error ≤ α”)"):
    st.plotly_chart(ev, key="mon_e_chart", width="stretch")

# -- drift ---------------------------------------------------------------------------------------------
st.subheader("Drift against the calibration-time reference")
if not info["has_reference"]:
    st.info("This policy carries no calibration-time reference (exported before monitoring existed): re-export it.")
else:
    dr = go.Figure()
    for key, name in (("p_top", "p_top"), ("margin", "margin"), ("option", "predicted option")):
        dr.add_scatter(x=x, y=[w["drift"][key]["psi"] for w in wins], name=f"PSI {name}", mode="lines+markers")
    dr.add_hline(y=0.1, line_dash="dot", line_color="#999", annotation_text="0.1 moderate")
    dr.add_hline(y=0.25, line_dash="dash", line_color="#d62728", annotation_text="0.25 large")
    dr.update_layout(height=320, yaxis_title="PSI", margin={"t": 30}, legend={"orientation": "h", "y": 1.15})
    if one_window:
        dr.update_xaxes(type="category")
    st.plotly_chart(dr, key="mon_drift_chart", width="stretch")
mm = go.Figure()
mm.add_scatter(x=x, y=[w["model_mismatch_share"] for w in wins], name="other model", mode="lines+markers")
mm.add_scatter(x=x, y=[w["schema_mismatch_share"] for w in wins], name="other schema hash", mode="lines+markers")
mm.update_layout(
    height=220,
    yaxis={"tickformat": ".0%", "title": "share", "range": [0, 1.05]},
    margin={"t": 30},
    legend={"orientation": "h", "y": 1.2},
)
if one_window:
    mm.update_xaxes(type="category")
st.plotly_chart(mm, key="mon_mismatch_chart", width="stretch")

# -- recertification -----------------------------------------------------------------------------------
st.subheader("Recertification hint")
rc = info["recertification"]
if rc["available"]:
    what = (
        f"`workbench thresholds` would certify this rule today, with expected coverage {_pct(rc['expected_coverage'])}"
        if rc["certified"]
        else "no rule can be certified today (the policy's rule is on the right)"
    )
    st.markdown(f"On **{rc['n_outcomes']:,}** fresh outcomes at α = {rc['alpha']:g}, δ = {rc['delta']:g}: {what}.")
    cols = st.columns(2)
    cols[0].markdown("**Today**")
    cols[0].json(rc["rule"], expanded=True)
    cols[1].markdown("**In the policy**")
    cols[1].json(rc["current_rule"], expanded=True)
    st.caption(rc.get("note", ""))
else:
    st.info(rc["message"])

with st.expander("Per-window table"):
    st.dataframe(
        [
            {
                "window": w["window"],
                "traffic": w["traffic"],
                "coverage": w["coverage"],
                "review": w["review_load"],
                "override rate": w["override_rate"],
                "error": w["error"],
                "error low": w["error_low"],
                "error high": w["error_high"],
                "PSI p_top": w["drift"]["p_top"]["psi"],
                "PSI margin": w["drift"]["margin"]["psi"],
                "PSI option": w["drift"]["option"]["psi"],
                "alarm": w["alarm"],
            }
            for w in wins
        ],
        hide_index=True,
        width="stretch",
        key="mon_table",
    )
