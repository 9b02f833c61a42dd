"""Thresholds: risk–coverage surface, live (τ, m) sliders, certified frontier, costs, policy export.

Two kinds of figures, labelled as such on the page:

* **exploration** (the sliders): calibration-split figures are read from the surface (one lookup
  per slider move); test-split figures come from applying the rule with
  :func:`workbench.thresholds.evaluate.evaluate_rule`. Nothing here is certified.
* **certified** (Learn-then-Test section, frontier, policy export): every figure comes from
  :func:`workbench.thresholds.choose.choose_thresholds` with
  :class:`~workbench.thresholds.options.ThresholdOptions` — the options behind ``workbench thresholds``
  and ``workbench policy export`` — so the screen, the CLI and the exported policy agree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.metrics.displays import ConfusionDisplay, RiskCoverageDisplay, ThresholdSurfaceDisplay
from workbench.ui import state

st.title("Thresholds")
state.preload("scipy.stats")  # the exact binomial bounds: loaded while the first query runs

if not state.store_ready():
    st.stop()
path, token = state.current()
runs = state.run_choices(path, token)  # names only: no pass over the answers
left, right = st.columns([2, 1])
run_id = state.pick_run(runs, container=left)
if run_id is None:
    st.stop()
run = state.run_record(path, token, run_id)
question = state.pick_question(run, container=right)
qtype = run["question_types"][question]
if "calibration" not in run["splits"] or "test" not in run["splits"]:
    st.warning(
        f"This run has splits {', '.join(map(str, run['splits']))}; thresholds are fitted on `calibration` and judged on `test`."
    )

defaults = state.threshold_defaults()
recal_choices = ["as answered", "temperature", "isotonic"] + (["platt"] if qtype == "noul" else [])
# a large run opens on its answers as given (one query over the store); a recalibration streams the run
start, large_note = state.opening_probabilities(path, token, run_id, question, defaults.calibrate)
recal = st.radio(
    "Probabilities",
    recal_choices,
    index=recal_choices.index(start) if start in recal_choices else 0,
    horizontal=True,
    key="thr_recalibrate",
    help="Exploration (sliders): the calibrator is fitted on the whole calibration split. "
    "Certified figures and the policy export fit it on their own carve of the calibration "
    "split, exactly as `workbench thresholds --calibrate` does.",
)
recal_method = None if recal == "as answered" else recal

with state.stop_on_error():
    surface = state.threshold_surface(path, token, run_id, question, "calibration", recal_method)
    test = state.rule_points(path, token, run_id, question, "test", recal_method)
if surface.n_total == 0:
    st.warning("No labelled calibration items in this run.")
    st.stop()

# -- sliders (rule coordinates: tau/margin, or tau_yes/tau_no for noul) -------------------------------
is_noul = qtype == "noul"
x_label, y_label = (
    ("τ yes (accept yes when P(yes) ≥)", "τ no (accept no when P(yes) ≤)")
    if is_noul
    else ("τ (lowest top probability accepted)", "m (lowest margin top − second)")
)
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
        st.caption(
            "Tick an option and give its own τ and m (empty = the sliders' values). Overrides change the "
            "test figures below; the calibration surface is for the global rule."
        )
        # the frame does not depend on the sliders, so edits survive slider moves
        base = pd.DataFrame({"option": list(test.option_ids), "override": False, "tau": np.nan, "margin": np.nan})
        edited = st.data_editor(
            base,
            hide_index=True,
            key=f"thr_overrides_{run_id}_{question}",
            disabled=["option"],
            column_config={
                "tau": st.column_config.NumberColumn(min_value=0.0, max_value=1.0, step=0.01),
                "margin": st.column_config.NumberColumn(min_value=0.0, max_value=1.0, step=0.01),
            },
        )
        for idx, row in enumerate(edited.to_dict("records")):
            if row["override"]:
                per_class[idx] = (
                    float(x_thr) if pd.isna(row["tau"]) else float(row["tau"]),
                    float(y_thr) if pd.isna(row["margin"]) else float(row["margin"]),
                )

from workbench.thresholds.evaluate import accepted_at, evaluate_rule_at  # noqa: E402
from workbench.thresholds.rules import make_rule  # noqa: E402

rule = make_rule(qtype, float(surface.x_grid[i]), float(surface.y_grid[j]), per_class=per_class or None)
test_report = evaluate_rule_at(
    rule, test.coords, test.labels, n_options=len(test.option_ids), option_ids=list(test.option_ids)
)


def _pct(v: float | None) -> str:
    return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{100 * v:.1f}%"


def _ci(d: dict) -> str:
    return "—" if d["low"] is None else f"95% CI {100 * d['low']:.1f}–{100 * d['high']:.1f}%"


if large_note and recal_method is None:
    st.caption(large_note)
st.subheader("At these thresholds (exploration, not certified)")
m = st.columns(4)
m[0].metric(
    "Coverage (test)",
    _pct(test_report["coverage"]["value"]),
    help="Share of test items auto-accepted. " + _ci(test_report["coverage"]),
)
m[1].metric(
    "Error among accepted (test)",
    _pct(test_report["error"]["value"]),
    help="Clopper–Pearson " + _ci(test_report["error"]),
)
m[2].metric(
    "Review load (test)",
    f"{test_report['n_review']:,} items",
    help=f"{_pct(test_report['review_rate']['value'])} of {test_report['n_items']:,} test items",
)
m[3].metric(
    "Coverage / error (calibration)",
    f"{_pct(cal_point['coverage'])} / {_pct(cal_point['error_rate'])}",
    help=f"{cal_point['accepted']:,} of {surface.n_total:,} calibration items accepted "
    "(read from the surface)" + (" — per-class overrides apply to test only" if per_class else ""),
)
st.caption(
    f"Test: {_ci(test_report['coverage'])} for coverage, {_ci(test_report['error'])} for error; "
    f"{test_report['n_failed']} provider failures routed to review."
)

# -- certified frontier ---------------------------------------------------------------------------------
st.subheader("Certified thresholds (Learn-then-Test)")
g1, g2, g3, g4 = st.columns(4)
alpha = g1.number_input(
    "α: max error among accepted", 0.005, 0.5, float(defaults.alpha), 0.005, format="%.3f", key="thr_alpha"
)
delta = g2.number_input("δ: allowed failure probability", 0.01, 0.5, float(defaults.delta), 0.01, key="thr_delta")
methods = ["fixed-sequence", "holm"]
method = g3.selectbox("Family-wise control", methods, index=methods.index(defaults.method), key="thr_method")
scopes: dict[str, str] = {"population": "the long-run error rate", "batch": f"each batch of {defaults.batch} accepted"}
guarantee_for = g4.selectbox(
    "Guarantee for",
    list(scopes),
    index=list(scopes).index(defaults.guarantee_for),
    format_func=lambda scope: scopes[scope],
    key="thr_guarantee_for",
    help=f"batch: P(error among the next {defaults.batch} accepted items > α) ≤ δ — stricter than the population "
    "guarantee, whose rules sit near α and so exceed it in a share of batches.",
)
calibrate = recal_method or "none"
cli = (
    f"workbench thresholds {run_id} --question {question} --max-error {alpha:g} --delta {delta:g} "
    f"--method {method}"
    + (f" --calibrate {calibrate}" if calibrate != defaults.calibrate else "")
    + (f" --guarantee-for {guarantee_for}" if guarantee_for != defaults.guarantee_for else "")
    + " --json"
)
st.caption(
    f"Everything in this section (and the frontier dotted on the risk–coverage plot) is what `{cli}` "
    "reports: same options, same library call. The sliders above only explore."
)

from workbench.thresholds.guarantees import select_cost  # noqa: E402
from workbench.thresholds.planning import range_text  # noqa: E402

settings = state.threshold_settings(
    alpha=float(alpha), delta=float(delta), method=method, calibrate=calibrate, guarantee_for=guarantee_for
)
alphas = tuple(np.round(np.linspace(0.01, 0.3, 30), 3).tolist())
# a large run is streamed for its frontier (one more pass, then a selection per α): drawn on request, or at
# once when a session already kept it
front_key = f"thr_front|{run_id}|{question}|{settings}"
with state.stop_on_error():
    certified = state.certified_thresholds(path, token, run_id, question, settings)
    front = state.frontier(
        path, token, run_id, question, settings, alphas, compute=bool(st.session_state.get(front_key))
    )
st.caption(state.settings_caption(alpha, delta, calibrate, method))
for w in certified.get("warnings") or []:  # the test split contradicts the certificate: as the CLI says it
    st.warning(w)

# -- the certified rule per slice (`workbench thresholds --slice COLUMN`) -----------------------------------
slice_by = st.selectbox(
    "Test figures of the certified rule by slice",
    ["(none)", *state.slice_columns(path, token, run_id)],
    key="thr_slice",
    help="state_length: quartiles of the state's length; other columns: item metadata kept at import.",
)
if slice_by != "(none)":
    try:
        by_slice = state.certified_threshold_slices(path, token, run_id, question, settings, slice_by)
    except WorkbenchError as exc:
        state.show_error(exc)
    else:
        pct = lambda v: "—" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        slice_by: r["slice"],
                        "items": r["n_items"],
                        "accepted": r["n_accepted"],
                        "coverage [95% Wilson]": f"{pct(r['coverage']['value'])}  "
                        f"[{pct(r['coverage']['low'])}, {pct(r['coverage']['high'])}]",
                        "error [95% Clopper–Pearson]": f"{pct(r['error']['value'])}  "
                        f"[{pct(r['error']['low'])}, {pct(r['error']['high'])}]",
                        "error above α": bool(r["error_above_alpha"]),
                    }
                    for r in by_slice["slices"]
                ]
            ),
            hide_index=True,
            width="stretch",
            key="thr_slice_table",
        )
        for w in by_slice["warnings"]:
            st.warning(w)

# -- figures: the library's displays (the CLI's `--html` writes the same ones) ----------------------------
cert_rule, cert_g = certified["rule"], certified["guarantee"] or {}
cert_xy = None
if certified["feasible"]:
    cert_xy = (cert_rule["tau_yes"], cert_rule["tau_no"]) if is_noul else (cert_rule["tau"], cert_rule["margin"])
region = state.certified_region(path, token, run_id, question, recal_method, float(alpha), float(delta), method)
surface_fig = ThresholdSurfaceDisplay.from_surface(
    surface,
    chosen=(float(x_thr), float(y_param)),
    certified=cert_xy,
    region=region,
    title="Calibration: error (colour), coverage (lines)",
).figure_
# the same markers on both charts: ✕ = the sliders' rule, ★ = the certified rule (issue 27 §6: ★ meant the
# sliders on this chart and the certified rule on the other)
grid_curve = RiskCoverageDisplay.from_surface(surface, name="best grid rule")
grid_curve.points = [("✕ sliders", cal_point["coverage"], cal_point["error_rate"] or 0.0, "x")]
cert_cal = certified.get("calibration") or {}
if cert_xy is not None and cert_cal.get("coverage") is not None:
    grid_curve.points.append(("★ certified rule", cert_cal["coverage"], cert_cal.get("error_rate") or 0.0))
curves = [grid_curve]
if front is not None:
    certified_pts = front.loc[front["certified coverage"] > 0]  # α where something is certified
    curves.append(
        RiskCoverageDisplay(
            [
                (
                    f"certified frontier (δ={delta:g})",
                    certified_pts["certified coverage"].to_numpy(),
                    certified_pts["alpha"].to_numpy(),
                )
            ]
        )
    )
curve_fig = RiskCoverageDisplay.overlay(curves, title="Calibration: risk–coverage").figure_
curve_fig.update_traces(selector={"name": "✕ sliders: operating point"}, marker_color="#8e24aa")  # as on the left
pc1, pc2 = st.columns(2)
pc1.plotly_chart(surface_fig, key="thr_surface_chart")
pc2.plotly_chart(curve_fig, key="thr_curve_chart")
n_region = int(np.asarray(region, bool).sum()) if region is not None else 0
st.caption(
    "Left: "
    + (
        f"blue dots are the {n_region:,} grid rules Learn-then-Test certifies on all calibration items (fixed "
        "strict→lax paths)"
        if n_region
        else f"no grid rule is certified on all calibration items at α={float(alpha):g}, δ={float(delta):g} (no "
        "blue dots)"
    )
    + "; on both charts ✕ is the sliders' rule"
    + (
        ", ★ the certified rule `workbench thresholds` reports (fitted on its own carve of the calibration split, "
        "so it may sit just outside the dots)"
        if cert_xy is not None
        else " (nothing certified: no ★)"
    )
    + ". Right: lowest calibration error per coverage over the grid (exploration) and the certified coverage at "
    "each α."
)
if front is None:
    st.caption(
        f"The certified frontier (the selection `workbench thresholds` makes at each of {len(alphas)} α from "
        f"{alphas[0]:g} to {alphas[-1]:g}) takes another pass over this run's calibration split: drawn on request, "
        "then kept for every later session."
    )
    if st.button("Certify the frontier", key="thr_front_go"):
        st.session_state[front_key] = True
        st.rerun()

if not is_noul and st.toggle(
    "Per-class guarantees (one certified (τ, m) per option, Bonferroni over options)", key="thr_per_class"
):
    with state.stop_on_error():
        per_res = state.certified_thresholds(
            path, token, run_id, question, state.threshold_settings(**dict(settings), per_class=True)
        )
    per_g = per_res["selection"]["guarantee"] or {}  # per-class entries keyed by option id
    rows = [
        {"option": opt, **{kk: vv for kk, vv in v.items() if not isinstance(vv, dict)}}
        for opt, v in per_g.get("classes", {}).items()
    ]
    st.caption(
        f"δ per option {per_g.get('delta_per_class', float('nan')):.4g}; "
        f"calibration coverage {_pct(per_res['calibration']['coverage'])} with the certified options only."
        if per_g
        else ""
    )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="thr_per_class_table")
    st.caption("Export a per-class policy from the section below (objective: guarantee).")


batch = certified.get("batch")
if batch and batch.get("guaranteed"):
    bg, be = batch["guaranteed"], batch["estimated"]
    st.caption(
        f"Next {batch['n']} accepted items (`--batch`): P(error > α) ≤ {bg['p_exceed_at_most']:.3f} guaranteed "
        f"(δ + binomial tail at α; at most {bg['tolerance_errors']} errors with probability ≥ "
        f"{bg['tolerance_probability']:.2f}); estimated {be['p_exceed']:.3f} (beta-binomial, not guaranteed). "
        "The certificate is about the population's error rate, not about every batch."
    )

with st.expander("How many calibration labels? (plan-labels)", expanded=False):
    st.caption(
        "Simulates calibration splits of growing size from this run's labelled calibration items (the pilot) "
        "and certifies each as above: the probability of certifying at α and the coverage to expect. "
        f"Same figures as `workbench plan-labels {run_id} -q {question} --max-error {alpha:g} --delta {delta:g}`."
    )
    p1, p2, p3 = st.columns(3)
    pilot_n = p1.number_input("pilot items (0: all)", 0, 100_000, 0, 50, key="thr_plan_pilot")
    target = p2.number_input("target coverage (0: none)", 0.0, 1.0, 0.0, 0.05, key="thr_plan_target")
    power = p3.number_input("required probability", 0.5, 0.99, 0.8, 0.05, key="thr_plan_power")
    if st.button("Plan labels", key="thr_plan_go"):
        try:
            plan = state.label_plan(
                path,
                token,
                run_id,
                question,
                settings,
                int(pilot_n) or None,
                float(target) or None,
                float(power),
            )
        except WorkbenchError as exc:
            state.show_error(exc)
        else:
            rec = plan["recommended_labels"]
            verdict = plan["status"].replace("_", " ")
            if rec is not None:
                st.markdown(f"**{rec} calibration labels** certify with probability ≥ {power:g} ({verdict}).")
            else:
                st.markdown(f"**No simulated size** reaches probability {power:g} ({verdict}).")
            st.caption(f"Labels needed — {range_text(plan['labels_range'])}.")
            for w in plan["warnings"]:
                st.warning(w)
            for m in plan["messages"]:
                st.warning(m)
            st.plotly_chart(plan["figure"], key="thr_plan_chart")
            st.dataframe(pd.DataFrame(plan["curve"]), hide_index=True, width="stretch", key="thr_plan_table")


def _num(v) -> str:
    return "—" if v is None else f"{v:.4f}"


if certified["feasible"] and cert_xy is not None:
    xy = cert_xy
    names = ("Certified τ yes", "Certified τ no") if is_noul else ("Certified τ", "Certified m")
    cm = st.columns(4)
    cm[0].metric(names[0], _num(xy[0]))
    cm[1].metric(names[1], _num(xy[1]))
    cm[2].metric(
        "Certified error bound",
        _num(cert_g.get("risk_upper_bound")),
        help=f"Upper confidence bound on the error among accepted items (≤ α = {alpha:g}) on the "
        f"{cert_g.get('n_calibration', 0):,} certifying calibration items.",
    )
    cert_test = certified.get("test") or {}
    cm[3].metric(
        "Certified: coverage / error (test)",
        f"{_pct((cert_test.get('coverage') or {}).get('value'))} / {_pct((cert_test.get('error') or {}).get('value'))}",
        help="The certified rule applied to the test split (with its calibrator), as the CLI reports.",
    )
    n_fit = certified.get("n_calibrator_fit") or 0
    st.success(
        f"Certified at α={alpha:g}, δ={delta:g} ({method}): "
        + ", ".join(f"{k} = {v:.4f}" for k, v in zip(("τ yes", "τ no") if is_noul else ("τ", "m"), xy))
        + f" → calibration coverage {_pct(cert_g.get('expected_coverage'))}, "
        f"n_calibration {cert_g.get('n_calibration', 0):,}"
        + (f" (calibrator fitted on {n_fit:,} other calibration items)." if n_fit else ".")
    )
    st.button(
        "Use the certified thresholds",
        key="thr_use_certified",
        on_click=_set_point,
        args=xy,
        help="Moves the exploration sliders onto the certified point (the figures above then show it "
        "with the exploration calibrator).",
    )
else:
    st.warning("; ".join(certified["notes"]) or "Nothing is certified at this α/δ.")

# -- costs ----------------------------------------------------------------------------------------------
# the cost surface is a second pass over the calibration items (a second of CPU at 10M): computed
# only while the section is open (the expander tracks its state under its key)
with st.expander("Costs", expanded=False, key="thr_costs", on_change="rerun") as costs_section:
    if costs_section.open:
        k1, k2, k3 = st.columns(3)
        error_cost = k1.number_input("Cost of a wrong auto-accept", 0.0, 1e6, 10.0, key="thr_error_cost")
        review_cost = k2.number_input("Cost of a review", 0.0, 1e6, 1.0, key="thr_review_cost")
        api_cost = k3.number_input("API cost per item", 0.0, 1e3, 0.0, format="%.5f", key="thr_api_cost")
        cost_surface = state.threshold_surface(
            path, token, run_id, question, "calibration", recal_method, float(error_cost)
        )
        best = select_cost(cost_surface, review_cost=float(review_cost), api_cost_per_item=float(api_cost))
        best_cost = best.cost or {}
        st.metric("Lowest expected cost per item (calibration)", f"{best_cost['expected_cost_per_item']:.4f}")
        st.button(
            "Use the cost-optimal thresholds",
            key="thr_use_cost",
            on_click=_set_point,
            args=(
                (best.params.get("tau_yes"), best.params.get("tau_no"))
                if is_noul
                else (best.params.get("tau"), best.params.get("margin"))
            ),
        )
        st.write(
            "Cost-optimal point (not certified): "
            + ", ".join(f"{k} = {v:.3f}" for k, v in best.params.items())
            + f", expected cost per item {best_cost['expected_cost_per_item']:.4f} "
            f"(reviewing everything: {best_cost['cost_if_everything_reviewed']:.4f})."
        )

# -- confusion matrix with review column ------------------------------------------------------------------
st.subheader("Confusion matrix on test, with the review column")
conf = test_report["confusion"]
matrix = pd.DataFrame(conf["matrix"], index=conf["labels"], columns=conf["columns"])
if len(conf["labels"]) <= 30:
    decided = ConfusionDisplay.from_decisions(
        test.labels,
        test.coords.predicted,
        list(test.option_ids),
        accept=accepted_at(rule, test.coords),
        title="Test: decision at these thresholds",
    )
    st.plotly_chart(decided.figure_, key="thr_confusion_chart")
    with st.expander("The matrix as a table", expanded=False):
        st.dataframe(matrix, width="stretch", key="thr_confusion")
else:
    per = pd.DataFrame(
        {
            "label": conf["labels"],
            "accepted correctly": np.diag(matrix.iloc[:, :-1].to_numpy()),
            "accepted wrongly": matrix.iloc[:, :-1].sum(axis=1).to_numpy() - np.diag(matrix.iloc[:, :-1].to_numpy()),
            "review": matrix["review"].to_numpy(),
        }
    )
    st.caption(f"{len(conf['labels'])} options: one row per label (full matrix in the download).")
    st.dataframe(per, hide_index=True, width="stretch", key="thr_confusion")
st.download_button(
    "Download the confusion matrix (CSV)",
    matrix.to_csv().encode(),
    "confusion_with_review.csv",
    key="thr_confusion_download",
)

# -- policy export ---------------------------------------------------------------------------------------
st.subheader("Export the policy")
from workbench.ui import policy_bridge  # noqa: E402

policy_bridge.export_section(
    path,
    token,
    run_id,
    question,
    settings,
    per_class_overrides=bool(per_class),
    qtype=qtype,
    point=(float(x_thr), float(y_param)),
)
