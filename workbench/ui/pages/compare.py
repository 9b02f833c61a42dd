"""Compare: providers × schema variants with item-paired differences against a chosen baseline.

Every figure comes from :func:`workbench.workflows.compare.compare_runs` (the function behind
``workbench compare``): metrics with bootstrap intervals, paired bootstrap and McNemar tests,
cost per 1,000 items, latency, and coverage/error at the chosen policy objective.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state
from workbench.wording import format_p

st.title("Compare")

if not state.store_ready():
    st.stop()
path, token = state.current()
runs = state.runs_frame(path, token)
runs = runs.loc[runs["kind"] == "raw"] if "kind" in runs else runs
if runs.empty:
    st.info("No runs to compare yet. `workbench demo` makes 12 offline.")
    st.stop()

c1, c2 = st.columns(2)
datasets = sorted(runs["dataset"].unique())
dataset = c1.selectbox("Dataset", datasets, key="cmp_dataset")
pool = runs.loc[runs["dataset"] == dataset]
experiments = sorted(e for e in pool["experiment"].dropna().unique())
exp = c2.selectbox("Experiment", ["(all runs of this dataset)", *experiments], key="cmp_experiment")
if exp != "(all runs of this dataset)":
    pool = pool.loc[pool["experiment"] == exp]
ids = pool["run_id"].tolist()
chosen = st.multiselect("Runs", ids, default=ids, key="cmp_runs", format_func=lambda r: state.run_label(runs, r))
if len(chosen) < 2:
    st.info("Choose at least two runs.")
    st.stop()
b1, b2, b3 = st.columns(3)
baseline = b1.selectbox("Baseline", chosen, key="cmp_baseline", format_func=lambda r: state.run_label(runs, r))
base_run = state.run_record(path, token, baseline)
question = b2.selectbox("Question", base_run["questions"], key="cmp_question")
split = b3.selectbox("Split", ["test", "calibration"], key="cmp_split")
defaults = state.threshold_defaults()
o1, o2, o3, o4 = st.columns(4)
max_error = o1.number_input(
    "Policy: α (max error)", 0.005, 0.5, float(defaults.alpha), 0.005, format="%.3f", key="cmp_alpha"
)
delta = o2.number_input("δ", 0.01, 0.5, float(defaults.delta), 0.01, key="cmp_delta")
calibrations = ["none", "temperature", "isotonic"]
calibrate = o3.selectbox(
    "Calibrate before thresholds",
    calibrations,
    index=calibrations.index(defaults.calibrate) if defaults.calibrate in calibrations else 0,
    key="cmp_calibrate",
)
n_boot = o4.select_slider("Bootstrap replicates", [200, 500, 1000, 2000], value=500, key="cmp_boot")


def _robustness_section() -> None:
    """Robustness: the chosen runs that are probes (experiment ``probes:``) of the baseline's schema."""
    probed = [
        r
        for r in chosen
        if r != baseline
        and (state.run_record(path, token, r).get("params") or {}).get("probe")
        and state.run_record(path, token, r)["schema_hash"] == base_run["schema_hash"]
    ]
    if probed:
        st.subheader("Robustness: probes against the baseline")
        try:
            rob = state.robustness(path, token, baseline, tuple(probed), question, split, int(n_boot))
        except WorkbenchError as exc:
            state.show_error(exc)
        else:
            rows = []
            for r in rob["probes"]:
                pb = r["position_bias"] or {}
                rows.append(
                    {
                        "run_id": r["run_id"],
                        "probe": r["probe"],
                        "n": r["n"],
                        "flip rate": r["flip_rate"],
                        "flip low": r["flip_rate_ci"][0],
                        "flip high": r["flip_rate_ci"][1],
                        "Δaccuracy": r["accuracy_change"],
                        "Δacc low": r["accuracy_change_ci"][0],
                        "Δacc high": r["accuracy_change_ci"][1],
                        "first-listed bias": pb.get("first", {}).get("bias"),
                        "bias low": (pb.get("first", {}).get("bias_ci") or [None])[0],
                        "bias high": (pb.get("first", {}).get("bias_ci") or [None, None])[1],
                    }
                )
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="cmp_robustness")
            st.caption(
                "Flip rate: share of items whose top option changed under the probe (Wilson 95 %). Δaccuracy: paired, "
                "bootstrap 95 %. First-listed bias (option_order): how much more often the option listed first wins "
                "than that same option in the baseline; `workbench robustness` prints the same figures."
            )


try:
    frame, raw = state.comparison(
        path,
        token,
        tuple(chosen),
        baseline,
        question,
        split,
        ("guarantee", float(max_error), float(delta), calibrate),
        int(n_boot),
    )
except WorkbenchError as exc:
    state.show_error(exc)
    _robustness_section()  # probes need no policy: still shown when the comparison cannot choose one
    st.stop()

st.caption(
    state.settings_caption(float(max_error), float(delta), calibrate)
    + ". Coverage and error at the policy are what `workbench compare` reports with the same options."
)

# runs answered by the project's emulator are marked wherever a run is named (their cost is emulated);
# `compare_runs` reports the flag the runner recorded, as `workbench compare` prints it
emulated = dict(zip(runs["run_id"], state.is_emulated(runs)))
if "emulated" not in frame:
    frame["emulated"] = frame["run_id"].map(emulated).fillna(False)
frame["provider"] = [p + (" (EMULATED)" if e else "") for p, e in zip(frame["provider"], frame["emulated"])]
frame = frame.assign(provider_variant=frame["provider"] + " · " + frame["variant"].fillna("—"))
st.subheader("Providers × schema variants")
matrix = frame.pivot_table(index="provider", columns="variant", values="accuracy", aggfunc="first")
st.caption("Accuracy on the chosen split (rows: provider, columns: schema variant).")
st.dataframe(matrix.style.format("{:.3f}"), width="stretch", key="cmp_matrix")

fig = go.Figure()
for variant, g in frame.groupby(frame["variant"].fillna("—")):
    fig.add_trace(
        go.Bar(
            name=str(variant),
            # the emulated mark on its own line: long provider names were cut under the bars (issue 27 §6)
            x=g["provider"].str.replace(" (EMULATED)", "<br>(EMULATED)", regex=False),
            y=g["accuracy"],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": g["accuracy_high"] - g["accuracy"],
                "arrayminus": g["accuracy"] - g["accuracy_low"],
            },
        )
    )
fig.update_layout(
    barmode="group",
    height=440,
    title={"text": "Accuracy with 95% bootstrap intervals", "x": 0, "xanchor": "left"},
    yaxis_title="accuracy",
    xaxis={"automargin": True},
    legend={"orientation": "h", "y": -0.3, "x": 0, "title": {"text": "schema variant"}},
    margin={"t": 50, "l": 60, "r": 20},
)

# risk–coverage of every selected run, its certified policy starred (RiskCoverageDisplay, as `compare --html`)
labels = tuple(f"{p} · {v}" for p, v in zip(frame["provider"], frame["variant"].fillna("—")))
points = tuple(
    (float(c), float(e)) if pd.notna(c) and pd.notna(e) else None for c, e in zip(frame["coverage"], frame["error"])
)
with state.stop_on_error():
    rc = state.risk_coverage_display(path, token, tuple(frame["run_id"]), labels, question, split, points)
p1, p2 = st.columns(2)
p1.plotly_chart(fig, key="cmp_bar_chart")
p2.plotly_chart(rc.figure_, key="cmp_risk_coverage_chart")
st.caption(
    "Risk–coverage: items accepted in decreasing top probability (answers as given); ★ = the run's certified "
    "policy at the options above"
    + ("" if frame["coverage"].notna().any() else f" — no run has a certified policy at α={max_error:g}, δ={delta:g}")
    + "."
)

# -- cost and latency: what each run costs for what it lets through -------------------------------------
st.subheader("Cost and latency against the policy")
y_choice = st.radio(
    "Vertical axis",
    ["coverage at the policy", "error among accepted at the policy", "accuracy"],
    horizontal=True,
    key="cmp_tradeoff_y",
)
y_col = {"coverage at the policy": "coverage", "error among accepted at the policy": "error", "accuracy": "accuracy"}[
    y_choice
]
trade = frame.assign(
    cost_label=[
        ("emulated " if e else "") + ("unknown" if pd.isna(c) else f"${c:.4f}")
        for c, e in zip(frame["cost_per_1000"], frame["emulated"])
    ]
)
t1, t2 = st.columns(2)
for col, x, title, key in (
    (t1, "cost_per_1000", "Cost per 1,000 items (USD)", "cmp_cost_chart"),
    (t2, "latency_p95_ms", "p95 latency (ms)", "cmp_latency_chart"),
):
    shown = trade.loc[trade[x].notna() & trade[y_col].notna()]
    if shown.empty:
        col.info(
            f"No run has both {title.lower()} and {y_choice} here"
            + (" (no certified policy at these options)" if y_col in ("coverage", "error") else "")
            + "."
        )
        continue
    sc = px.scatter(
        shown,
        x=x,
        y=y_col,
        color="provider_variant",
        hover_name="run_id",
        hover_data={"cost_label": True, "latency_p95_ms": ":.0f"},
        labels={x: title, y_col: y_choice, "provider_variant": "run", "emulated": "emulated"},
        height=420 + 22 * max(0, shown["provider_variant"].nunique() - 2),  # room for the legend below
    )
    sc.update_traces(marker={"size": 14})
    top = 1.02 if y_col != "error" else max(0.05, 1.2 * float(shown[y_col].max()))
    sc.update_yaxes(range=[0, top])
    sc.update_xaxes(rangemode="tozero")  # prices and latencies compare as ratios from zero
    sc.update_layout(
        title={"text": f"{y_choice} vs {title.split(' (')[0].lower()}", "x": 0, "xanchor": "left"},
        legend={"orientation": "h", "y": -0.3, "x": 0, "title": {"text": ""}},
        margin={"t": 50, "l": 60, "r": 20},
    )
    col.plotly_chart(sc, key=key)
st.caption(
    "Cost is the provider's price per 1,000 items on this split (unknown when the provider reports none; "
    "emulated runs show the emulator's simulated price, marked as such); latency is the p95 of provider calls."
)

st.subheader(f"Paired differences against the baseline ({state.run_label(runs, baseline)})")
diff = frame.loc[
    ~frame["is_baseline"],
    [
        "provider",
        "variant",
        "run_id",
        "n",
        "d_accuracy",
        "d_accuracy_low",
        "d_accuracy_high",
        "p_bootstrap",
        "p_mcnemar",
        "d_log_loss",
        "d_coverage",
    ],
]
# p-values as `workbench compare` prints them (one formatter): a bootstrap p of 0 is "< 1/(n_boot+1)", never 0.0000
diff = diff.assign(
    p_bootstrap=[format_p(v, int(n_boot)) for v in diff["p_bootstrap"]],
    p_mcnemar=[format_p(v) for v in diff["p_mcnemar"]],
)
st.dataframe(
    diff,
    hide_index=True,
    width="stretch",
    key="cmp_diff",
    column_config={
        c: st.column_config.NumberColumn(format="%.4f")
        for c in (
            "d_accuracy",
            "d_accuracy_low",
            "d_accuracy_high",
            "d_log_loss",
            "d_coverage",
        )
    },
)
_robustness_section()

st.subheader("All figures")
shown = frame.drop(columns=["provider_variant"])  # p-values as above (the CSV download keeps the raw floats)
shown = shown.assign(
    **{
        c: [format_p(v, int(n_boot) if c == "p_bootstrap" else None) for v in shown[c]]
        for c in ("p_bootstrap", "p_mcnemar")
        if c in shown
    }
)
st.dataframe(shown, hide_index=True, width="stretch", key="cmp_all")
st.download_button(
    "Download the comparison (CSV)", frame.to_csv(index=False).encode(), "comparison.csv", key="cmp_download"
)
