"""Thresholds: risk–coverage surface, live (τ, m) sliders, certified frontier, costs, policy export.

Calibration-split figures are read from the surface (one lookup per slider move); test-split
figures come from applying the rule with :func:`workbench.thresholds.evaluate.evaluate_rule`, the
same code the CLI and the policy runtime use.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state

st.title("Thresholds")

if not state.store_ready():
    st.stop()
path, token = state.current()
runs = state.runs_frame(path, token)
left, right = st.columns([2, 1])
run_id = state.pick_run(runs, container=left)
if run_id is None:
    st.stop()
run = state.run_record(path, token, run_id)
question = state.pick_question(run, container=right)
qtype = run["question_types"][question]
if "calibration" not in run["splits"] or "test" not in run["splits"]:
    st.warning(f"This run has splits {run['splits']}; thresholds are fitted on `calibration` and judged on `test`.")

recal = st.radio("Probabilities", ["as answered", "temperature", "isotonic"] + (["platt"] if qtype == "noul" else []),
                 horizontal=True, key="thr_recalibrate",
                 help="Recalibration is fitted on the calibration split and applied to both splits.")
recal_method = None if recal == "as answered" else recal

try:
    surface = state.threshold_surface(path, token, run_id, question, "calibration", recal_method)
    test = state.question_arrays(path, token, run_id, question, "test", recal_method)
except WorkbenchError as exc:
    state.show_error(exc)
    st.stop()
if surface.n_total == 0:
    st.warning("No labelled calibration items in this run.")
    st.stop()

# -- sliders (rule coordinates: tau/margin, or tau_yes/tau_no for noul) -------------------------------
is_noul = qtype == "noul"
x_label, y_label = ("τ yes (accept yes when P(yes) ≥)", "τ no (accept no when P(yes) ≤)") if is_noul else \
    ("τ (lowest top probability accepted)", "m (lowest margin top − second)")
# the sliders move over the surface's own grid (it may be finer near the strict end), so every
# position is a grid point whose calibration figures are read from the surface without rescanning
x_opts = [float(v) for v in surface.x_grid]
y_opts = sorted(float(-v) for v in surface.y_grid) if is_noul else [float(v) for v in surface.y_grid]


def _nearest(options: list[float], value: float) -> float:
    return options[int(np.argmin(np.abs(np.asarray(options) - float(value))))]


def _set_point(x: float, y_param: float) -> None:
    st.session_state["thr_x"] = _nearest(x_opts, x)
    st.session_state["thr_y"] = _nearest(y_opts, y_param)


st.session_state.setdefault("thr_x", _nearest(x_opts, 0.6 if not is_noul else 0.8))
st.session_state.setdefault("thr_y", _nearest(y_opts, 0.0 if not is_noul else 0.2))
for k, opts in (("thr_x", x_opts), ("thr_y", y_opts)):  # another run or question type: snap onto this grid
    if st.session_state[k] not in opts:
        st.session_state[k] = _nearest(opts, st.session_state[k])
c1, c2 = st.columns(2)
x_thr = c1.select_slider(x_label, options=x_opts, key="thr_x", format_func=lambda v: f"{v:.3f}")
y_param = c2.select_slider(y_label, options=y_opts, key="thr_y", format_func=lambda v: f"{v:.3f}")
y_thr = -y_param if is_noul else y_param  # surface coordinate

i = int(np.argmin(np.abs(surface.x_grid - x_thr)))
j = int(np.argmin(np.abs(surface.y_grid - y_thr)))
cal_point = surface.point(i, j)

# per-class overrides (choice/score)
per_class: dict[int, tuple[float, float]] = {}
if not is_noul:
    with st.expander("Per-class overrides", expanded=False):
        st.caption("Tick an option and give its own τ and m (empty = the sliders' values). Overrides change the "
                   "test figures below; the calibration surface is for the global rule.")
        # the frame does not depend on the sliders, so edits survive slider moves
        base = pd.DataFrame({"option": list(test.option_ids), "override": False,
                             "tau": np.nan, "margin": np.nan})
        edited = st.data_editor(base, hide_index=True, key=f"thr_overrides_{run_id}_{question}", disabled=["option"],
                                column_config={"tau": st.column_config.NumberColumn(min_value=0.0, max_value=1.0,
                                                                                    step=0.01),
                                               "margin": st.column_config.NumberColumn(min_value=0.0,
                                                                                       max_value=1.0, step=0.01)})
        for k, row in enumerate(edited.itertuples()):
            if row.override:
                per_class[k] = (float(x_thr) if pd.isna(row.tau) else float(row.tau),
                                float(y_thr) if pd.isna(row.margin) else float(row.margin))

from workbench.thresholds.evaluate import evaluate_rule  # noqa: E402
from workbench.thresholds.rules import make_rule  # noqa: E402

rule = make_rule(qtype, float(surface.x_grid[i]), float(surface.y_grid[j]), per_class=per_class or None)
test_report = evaluate_rule(rule, test.probs, test.labels, option_ids=list(test.option_ids))


def _pct(v: float | None) -> str:
    return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{100 * v:.1f}%"


def _ci(d: dict) -> str:
    return "—" if d["low"] is None else f"95% CI {100 * d['low']:.1f}–{100 * d['high']:.1f}%"


st.subheader("At these thresholds")
m = st.columns(4)
m[0].metric("Coverage (test)", _pct(test_report["coverage"]["value"]),
            help="Share of test items auto-accepted. " + _ci(test_report["coverage"]))
m[1].metric("Error among accepted (test)", _pct(test_report["error"]["value"]),
            help="Clopper–Pearson " + _ci(test_report["error"]))
m[2].metric("Review load (test)", f"{test_report['n_review']:,} items",
            help=f"{_pct(test_report['review_rate']['value'])} of {test_report['n_items']:,} test items")
m[3].metric("Coverage / error (calibration)",
            f"{_pct(cal_point['coverage'])} / {_pct(cal_point['error_rate'])}",
            help=f"{cal_point['accepted']:,} of {surface.n_total:,} calibration items accepted "
                 "(read from the surface)" + (" — per-class overrides apply to test only" if per_class else ""))
st.caption(f"Test: {_ci(test_report['coverage'])} for coverage, {_ci(test_report['error'])} for error; "
           f"{test_report['n_failed']} provider failures routed to review.")

# -- surface plots ------------------------------------------------------------------------------------
cov = surface.coverage
err = surface.error_rate
ys = -surface.y_grid if is_noul else surface.y_grid
fig = go.Figure()
fig.add_trace(go.Heatmap(x=surface.x_grid, y=ys, z=err.T, colorscale="RdYlGn_r", zmin=0,
                         zmax=float(np.nanmax(err)) if np.isfinite(err).any() else 1,
                         colorbar={"title": "error"}, name="error among accepted",
                         hovertemplate="x=%{x:.2f} y=%{y:.2f}<br>error %{z:.3f}<extra></extra>"))
fig.add_trace(go.Contour(x=surface.x_grid, y=ys, z=cov.T, showscale=False, contours_coloring="lines",
                         line_width=1, colorscale=[[0, "black"], [1, "black"]],
                         contours={"showlabels": True, "start": 0.1, "end": 0.9, "size": 0.1},
                         name="coverage", hoverinfo="skip"))
fig.add_trace(go.Scatter(x=[surface.x_grid[i]], y=[ys[j]], mode="markers", name="current",
                         marker={"symbol": "x", "size": 14, "color": "blue"}))
fig.update_layout(height=420, margin={"t": 30}, title="Calibration split: error among accepted (colour), "
                  "coverage (contours)", xaxis_title=x_label.split(" (")[0], yaxis_title=y_label.split(" (")[0])

# risk–coverage curve at the chosen margin (one row of the surface) + every grid point as a cloud
curve = go.Figure()
curve.add_trace(go.Scatter(x=cov.ravel(), y=err.ravel(), mode="markers", name="all (τ, m)",
                           marker={"size": 3, "color": "lightgrey"}))
curve.add_trace(go.Scatter(x=cov[:, j], y=err[:, j], mode="lines", name=f"varying τ at this {'τ no' if is_noul else 'm'}"))
curve.add_trace(go.Scatter(x=[cal_point["coverage"]], y=[cal_point["error_rate"]], mode="markers", name="current",
                           marker={"symbol": "x", "size": 14, "color": "blue"}))

# -- certified frontier ---------------------------------------------------------------------------------
st.subheader("Certified thresholds (Learn-then-Test)")
g1, g2, g3 = st.columns(3)
alpha = g1.number_input("α: max error among accepted", 0.005, 0.5, 0.05, 0.005, format="%.3f", key="thr_alpha")
delta = g2.number_input("δ: allowed failure probability", 0.01, 0.5, 0.1, 0.01, key="thr_delta")
method = g3.selectbox("Family-wise control", ["fixed-sequence", "holm"], key="thr_method")

from workbench.thresholds.guarantees import select_cost  # noqa: E402

selection = state.certified_selection(path, token, run_id, question, recal_method, float(alpha), float(delta), method)
front = state.certified_frontier(path, token, run_id, question, recal_method, float(delta), method,
                                 tuple(np.round(np.linspace(0.01, 0.3, 30), 3).tolist()))
curve.add_trace(go.Scatter(x=front["certified coverage"], y=front["alpha"], mode="lines+markers",
                           name=f"certified frontier (δ={delta:g})", line={"dash": "dot"}))
curve.update_layout(height=420, margin={"t": 30}, title="Risk–coverage (calibration)",
                    xaxis_title="coverage", yaxis_title="error among accepted")
pc1, pc2 = st.columns(2)
pc1.plotly_chart(fig, key="thr_surface_chart")
pc2.plotly_chart(curve, key="thr_curve_chart")

if not is_noul and st.toggle("Per-class guarantees (one certified (τ, m) per option, Bonferroni over options)",
                             key="thr_per_class"):
    per_sel = state.certified_selection(path, token, run_id, question, recal_method, float(alpha), float(delta),
                                        method, True)
    classes = (per_sel.guarantee or {}).get("classes", {})
    rows = [{"option": test.option_ids[int(k)], **{kk: vv for kk, vv in v.items() if not isinstance(vv, dict)}}
            for k, v in classes.items()]
    st.caption(f"δ per option {per_sel.guarantee.get('delta_per_class', float('nan')):.4g}; "
               f"calibration coverage {_pct(per_sel.calibration['coverage'])} with the certified options only."
               if per_sel.guarantee else "")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="thr_per_class_table")
    st.caption("Export a per-class policy from the section below (objective: guarantee).")
if selection.feasible:
    gpar = selection.params
    st.success(f"Certified at α={alpha:g}, δ={delta:g} ({method}): "
               + ", ".join(f"{k} = {v:.3f}" for k, v in gpar.items())
               + f" → calibration coverage {_pct(selection.guarantee['expected_coverage'])}, "
               f"n_calibration {selection.guarantee['n_calibration']:,}.")
    xy = (gpar.get("tau_yes"), gpar.get("tau_no")) if is_noul else (gpar.get("tau"), gpar.get("margin"))
    st.button("Use the certified thresholds", key="thr_use_certified", on_click=_set_point, args=xy)
else:
    st.warning("; ".join(selection.notes) or "Nothing is certified at this α/δ.")

# -- costs ----------------------------------------------------------------------------------------------
with st.expander("Costs", expanded=False):
    k1, k2, k3 = st.columns(3)
    error_cost = k1.number_input("Cost of a wrong auto-accept", 0.0, 1e6, 10.0, key="thr_error_cost")
    review_cost = k2.number_input("Cost of a review", 0.0, 1e6, 1.0, key="thr_review_cost")
    api_cost = k3.number_input("API cost per item", 0.0, 1e3, 0.0, format="%.5f", key="thr_api_cost")
    cost_surface = state.threshold_surface(path, token, run_id, question, "calibration", recal_method,
                                           float(error_cost))
    best = select_cost(cost_surface, review_cost=float(review_cost), api_cost_per_item=float(api_cost))
    st.metric("Lowest expected cost per item (calibration)", f"{best.cost['expected_cost_per_item']:.4f}")
    st.button("Use the cost-optimal thresholds", key="thr_use_cost", on_click=_set_point,
              args=((best.params.get("tau_yes"), best.params.get("tau_no")) if is_noul
                    else (best.params.get("tau"), best.params.get("margin"))))
    st.write(f"Cost-optimal point (not certified): "
             + ", ".join(f"{k} = {v:.3f}" for k, v in best.params.items())
             + f", expected cost per item {best.cost['expected_cost_per_item']:.4f} "
             f"(reviewing everything: {best.cost['cost_if_everything_reviewed']:.4f}).")

# -- confusion matrix with review column ------------------------------------------------------------------
st.subheader("Confusion matrix on test, with the review column")
conf = test_report["confusion"]
matrix = pd.DataFrame(conf["matrix"], index=conf["labels"], columns=conf["columns"])
if len(conf["labels"]) <= 30:
    st.dataframe(matrix, width="stretch", key="thr_confusion")
else:
    per = pd.DataFrame({"label": conf["labels"], "accepted correctly": np.diag(matrix.iloc[:, :-1].to_numpy()),
                        "accepted wrongly": matrix.iloc[:, :-1].sum(axis=1).to_numpy()
                        - np.diag(matrix.iloc[:, :-1].to_numpy()),
                        "review": matrix["review"].to_numpy()})
    st.caption(f"{len(conf['labels'])} options: one row per label (full matrix in the download).")
    st.dataframe(per, hide_index=True, width="stretch", key="thr_confusion")
st.download_button("Download the confusion matrix (CSV)", matrix.to_csv().encode(), "confusion_with_review.csv",
                   key="thr_confusion_download")

# -- policy export ---------------------------------------------------------------------------------------
st.subheader("Export the policy")
from workbench.ui import policy_bridge  # noqa: E402

policy_bridge.export_section(path, token, run_id, question, recal_method, rule_params=cal_point,
                             per_class=per_class, selection=selection, alpha=float(alpha), delta=float(delta))
