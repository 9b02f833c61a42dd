"""Shadow: agreement, flip matrix, directional disagreements and the PROMOTE / HOLD / REJECT verdict.

Reads shadow sessions (replayed runs, imported logs, the live mirror's journal) through
:func:`workbench.shadow.report.shadow_report`, the function behind ``workbench shadow report``.
A replay of two runs can be created here (the same call as ``workbench shadow replay``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state

st.title("Shadow")

if not state.store_ready():
    st.stop()
path, token = state.current()
sessions = state.shadow_sessions(path, token)
runs = state.runs_frame(path, token)


def _replay_form() -> None:
    with st.expander("Create a replay session from two runs", expanded=sessions.empty):
        if len(runs) < 2:
            st.info("Needs two runs over the same dataset.")
            return
        with st.form("shadow_replay"):
            a = st.selectbox(
                "Champion (incumbent) run",
                runs["run_id"].tolist(),
                key="sh_new_champion",
                format_func=lambda r: state.run_label(runs, r),
            )
            b = st.selectbox(
                "Challenger run",
                runs["run_id"].tolist(),
                index=1,
                key="sh_new_challenger",
                format_func=lambda r: state.run_label(runs, r),
            )
            name = st.text_input("Session name", value="replay", key="sh_new_name")
            go_ = st.form_submit_button("Create replay")
        if go_:
            from workbench.store.db import connect
            from workbench.store.shadow import replay_runs

            try:
                con = connect(path)  # a short write; runs may be reading meanwhile from their own process
                try:
                    info = replay_runs(
                        con, shadow=name, champion_run=a, challenger_run=b, splits=["test"], replace=True
                    )
                finally:
                    con.close()
            except WorkbenchError as exc:
                state.show_error(exc)
                return
            st.success(f"Session `{name}` created: {info}")
            st.rerun()


if sessions.empty:
    st.info(
        "No shadow session in this store yet: replay two runs below, or import production logs with "
        "`workbench shadow import FILE`."
    )
    _replay_form()
    st.stop()

st.dataframe(sessions, hide_index=True, width="stretch", key="sh_sessions")
shadow = st.selectbox("Session", sessions["shadow"].tolist(), key="sh_session")

store_dir = Path(path).parent
policy_files = [
    str(p) for p in [store_dir / "policy.json", *sorted((store_dir / "policies").glob("*.json"))] if p.is_file()
]


def _side(label: str, key: str) -> tuple:
    # default "none": no policy given, so the library certifies one per side at ThresholdOptions() —
    # what `workbench shadow report SESSION` does without routing flags
    kind = st.radio(
        f"{label} routing",
        ["none", "policy file", "rule"],
        horizontal=True,
        key=f"{key}_kind",
        format_func={"none": "certified policy (CLI default)", "policy file": "policy file", "rule": "rule τ/m"}.get,
        help="Certified policy: the policy `workbench policy export` would certify on the side's run with the "
        "threshold defaults — what `workbench shadow report SESSION` uses without routing flags.",
    )
    if kind == "policy file":
        if not policy_files:
            st.caption("No policy file next to the store.")
            return ("none", "")
        return (
            "file",
            st.selectbox(f"{label} policy", policy_files, key=f"{key}_file", format_func=lambda p: Path(p).name),
        )
    if kind == "rule":
        c1, c2 = st.columns(2)
        tau = c1.slider(f"{label} τ", 0.0, 1.0, 0.6, 0.01, key=f"{key}_tau")
        margin = c2.slider(f"{label} m", 0.0, 1.0, 0.1, 0.01, key=f"{key}_margin")
        return ("rule", f"tau={tau},margin={margin}")
    return ("none", "")


s1, s2 = st.columns(2)
with s1:
    champion = _side("Champion", "sh_champion")
with s2:
    challenger = _side("Challenger", "sh_challenger")
if "none" in (champion[0], challenger[0]):
    d = state.threshold_defaults()
    st.caption(
        "Sides without a policy file or rule route with the policy certified on their run. "
        + state.settings_caption(d.alpha, d.delta, d.calibrate, d.method)
        + ". The verdict is the one `workbench shadow report` gives with its defaults."
    )
from workbench.shadow.report import Criteria  # noqa: E402

crit0 = Criteria()  # the defaults of `workbench shadow report`
with st.expander("Rollout criteria", expanded=False):
    k1, k2, k3 = st.columns(3)
    criteria = {
        "max_error_increase": k1.number_input(
            "Max error increase", 0.0, 0.5, float(crit0.max_error_increase), 0.005, key="sh_max_err"
        ),
        "min_coverage_gain": k2.number_input(
            "Min coverage gain", -0.5, 0.5, float(crit0.min_coverage_gain), 0.01, key="sh_min_cov"
        ),
        "max_failure_rate": k3.number_input(
            "Max challenger failure rate",
            0.0,
            1.0,
            float(crit0.max_failure_rate),
            0.005,
            key="sh_max_fail",
            help="Share of requests the challenger failed while the champion answered the same request",
        ),
        "min_outcomes": int(
            k1.number_input("Min known outcomes", 0, 100_000, int(crit0.min_outcomes), 10, key="sh_min_out")
        ),
        "max_drift_psi": float(
            k3.number_input("Max drift PSI", 0.0, 10.0, float(crit0.max_drift_psi or 0.25), 0.05, key="sh_max_psi")
        ),
    }
    p95 = k2.number_input(
        "Max challenger p95 latency (ms, 0 = no limit)", 0.0, 1e6, float(crit0.max_p95_latency_ms or 0.0), key="sh_p95"
    )
    if p95:
        criteria["max_p95_latency_ms"] = float(p95)

with state.stop_on_error():
    rep = state.shadow_report(path, token, shadow, champion, challenger, tuple(sorted(criteria.items())))

verdict = rep["verdict"]
box = {"PROMOTE": st.success, "HOLD": st.warning, "REJECT": st.error}.get(verdict, st.info)
box(f"**Verdict: {verdict}**  \n" + "  \n".join(f"- {r}" for r in rep["reasons"]))
st.dataframe(rep["frame"], hide_index=True, width="stretch", key="sh_summary")

for q in rep["questions"]:
    st.subheader(f"Question `{q['question']}` — {q['n_requests']:,} requests")
    m = st.columns([1, 1.5, 1.2, 1])  # "100.0% → 100.0%" needs the wider second column
    ag = q["agreement"]
    m[0].metric(
        "Agreement (top answer)",
        "—" if ag["rate"] is None else f"{100 * ag['rate']:.1f}%",
        help=f"95% Wilson {100 * ag['low']:.1f}–{100 * ag['high']:.1f}% on {ag['n']:,} requests",
    )
    load = q.get("review_load") or {}
    m[1].metric(
        "Review load champion → challenger",
        "—" if not load else f"{100 * load['champion']:.1f}% → {100 * load['challenger']:.1f}%",
    )
    err = (q.get("error") or {}).get("error_among_accepted") or {}
    m[2].metric(
        "Error among accepted change",
        "—" if not err else f"{100 * err['difference']:+.1f} pts",
        help="" if not err else f"95% CI {100 * err['low']:+.1f} to {100 * err['high']:+.1f} pts",
    )
    fails = q["failures"]["challenger"]
    paired = q["failures"]["paired"]
    m[3].metric(
        "Challenger failures",
        "—" if fails["rate"] is None else f"{100 * fails['rate']:.2f}%",
        help=None
        if paired["challenger_excess_rate"] is None
        else f"beyond the champion's on the same requests (what the verdict judges): "
        f"{100 * paired['challenger_excess_rate']:.2f}%; {paired['both']} requests failed on both sides",
    )
    d = q.get("directional")
    if d:
        st.dataframe(
            pd.DataFrame([{"case": k.replace("_", " "), "requests": v} for k, v in d.items() if k != "n"]),
            hide_index=True,
            width="stretch",
            key=f"sh_directional_{q['question']}",
        )
    for note in q.get("notes") or []:
        st.caption(note)
    flips = q["flip_matrix"]
    counts = np.asarray(flips["counts"])
    opts = flips["options"]
    f1, f2 = st.columns(2)
    # every option count gets its flip matrix (banking77's 77 options left the left half empty, issue 27 §6):
    # past 40 options the rows are denser and the labels smaller
    many = len(opts) > 40
    flip_height = 10 * len(opts) + 200 if many else max(380, 16 * len(opts) + 160)
    tick = {"tickfont": {"size": 8}, "dtick": 1} if many else {}
    if opts:
        fig = go.Figure(
            go.Heatmap(
                z=np.log1p(counts),
                x=opts,
                y=opts,
                colorscale="Purples",
                customdata=counts,
                text=counts,
                texttemplate="%{text}" if len(opts) <= 12 else None,
                hovertemplate="champion %{y}<br>challenger %{x}<br>%{customdata} requests<extra></extra>",
                showscale=False,
            )
        )
        fig.update_layout(
            title={"text": "Flip matrix: top answers (requests)", "x": 0, "xanchor": "left"},
            height=flip_height,
            yaxis={"autorange": "reversed", "automargin": True, "title": "champion answer", **tick},
            xaxis={"automargin": True, "title": "challenger answer", **tick},
            margin={"t": 50, "r": 10},
        )
        f1.plotly_chart(fig, key=f"sh_flip_chart_{q['question']}")
    drift = q.get("drift") or {}
    windows = pd.DataFrame(drift.get("windows") or [])
    if not windows.empty:
        windows["window"] = [f"{i + 1}" for i in range(len(windows))]
        dfig = go.Figure()
        for side, colour in (("champion", "#1f77b4"), ("challenger", "#d62728")):
            dfig.add_trace(
                go.Bar(x=windows["window"], y=windows[f"psi_{side}"], name=f"PSI {side}", marker_color=colour)
            )
            dfig.add_trace(
                go.Scatter(
                    x=windows["window"],
                    y=windows[f"mean_p_top_{side}"],
                    name=f"mean p_top {side}",
                    mode="lines+markers",
                    line={"color": colour, "dash": "dot"},
                    yaxis="y2",
                )
            )
        limit = criteria.get("max_drift_psi")
        if limit:
            dfig.add_hline(y=limit, line_dash="dash", line_color="grey", annotation_text=f"max PSI {limit:g}")
        dfig.update_layout(
            title={"text": "Drift of p_top per window (vs the first)", "x": 0, "xanchor": "left"},
            barmode="group",
            height=380 if many else flip_height,
            xaxis_title=f"window ({drift.get('windows_by', '')})",
            yaxis={"title": "PSI", "rangemode": "tozero"},
            yaxis2={
                "title": "mean p_top",
                "overlaying": "y",
                "side": "right",
                "range": [0, 1],
                "dtick": 0.2,
                "showgrid": False,
                "automargin": True,  # the right axis title was cut (issue 27 §6)
            },
            legend={"orientation": "h", "y": -0.25, "x": 0},
            margin={"t": 50, "r": 80},
        )
        f2.plotly_chart(dfig, key=f"sh_drift_chart_{q['question']}")
    if flips["top_flips"]:
        st.caption("Most frequent flips (champion → challenger)")
        st.dataframe(
            pd.DataFrame(flips["top_flips"]), hide_index=True, width="stretch", key=f"sh_flips_{q['question']}"
        )
with st.expander("Gates", expanded=False):
    st.dataframe(pd.DataFrame(rep["gates"]).astype(str), hide_index=True, width="stretch", key="sh_gates")
_replay_form()
