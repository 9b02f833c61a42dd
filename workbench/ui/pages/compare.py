"""Compare: providers × schema variants with item-paired differences against a chosen baseline.

Every figure comes from :func:`workbench.comparison.compare_runs` (the function behind
``workbench compare``): metrics with bootstrap intervals, paired bootstrap and McNemar tests,
cost per 1,000 items, latency, and coverage/error at the chosen policy objective.
"""

from __future__ import annotations

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state

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
o1, o2, o3, o4 = st.columns(4)
max_error = o1.number_input("Policy: α (max error)", 0.01, 0.5, 0.1, 0.01, key="cmp_alpha")
delta = o2.number_input("δ", 0.01, 0.5, 0.1, 0.01, key="cmp_delta")
calibrate = o3.selectbox("Calibrate before thresholds", ["temperature", "none", "isotonic"], key="cmp_calibrate")
n_boot = o4.select_slider("Bootstrap replicates", [200, 500, 1000, 2000], value=500, key="cmp_boot")

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
    st.stop()

# runs answered by the emulator carry EMULATED in their name (the demo's clef-flash): keep it visible
names = dict(zip(runs["run_id"], runs["name"].fillna("")))
frame["provider"] = [
    p + (" (EMULATED)" if "EMULATED" in names.get(r, "") else "") for p, r in zip(frame["provider"], frame["run_id"])
]
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
            x=g["provider"],
            y=g["accuracy"],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": g["accuracy_high"] - g["accuracy"],
                "arrayminus": g["accuracy"] - g["accuracy_low"],
            },
        )
    )
fig.update_layout(barmode="group", height=380, yaxis_title="accuracy (95% CI)", margin={"t": 20})
scatter = px.scatter(
    frame,
    x="coverage",
    y="error",
    color="provider",
    symbol="variant",
    hover_name="run_id",
    labels={"coverage": "coverage at the certified policy", "error": "error among accepted"},
    height=380,
)
p1, p2 = st.columns(2)
p1.plotly_chart(fig, key="cmp_bar_chart")
if frame["coverage"].notna().any():
    p2.plotly_chart(scatter, key="cmp_policy_chart")
else:
    p2.info(
        f"No run has a certified policy at α={max_error:g}, δ={delta:g} on this split: everything would "
        "go to review. Raise α to see coverage and error at the policy."
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
            "p_bootstrap",
            "p_mcnemar",
            "d_log_loss",
            "d_coverage",
        )
    },
)
st.subheader("All figures")
st.dataframe(frame.drop(columns=["provider_variant"]), hide_index=True, width="stretch", key="cmp_all")
st.download_button(
    "Download the comparison (CSV)", frame.to_csv(index=False).encode(), "comparison.csv", key="cmp_download"
)
