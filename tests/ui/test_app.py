"""Streamlit AppTest of every page against a real prepared store (no mocks)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from store_builder import APP
from store_builder import on_grid as _on_grid
from streamlit.testing.v1 import AppTest

TIMEOUT = 60


def _app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    if page:
        at.switch_page(f"workbench/ui/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [m.value for m in at.caption] + [t.value for t in at.title]
    parts += [str(m.label) + " " + str(m.value) for m in at.metric]
    parts += [i.value for i in at.info] + [s.value for s in at.success] + [e.value for e in at.error]
    return "\n".join(map(str, parts))


def test_missing_store_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "nothing.duckdb"))
    at = _app()
    assert "No store at" in _texts(at)


def test_datasets_page_shows_counts_versions_and_samples(ui_store):
    path, meta = ui_store
    at = _app()  # Datasets is the default page
    assert at.title[0].value == "Datasets"
    table = at.dataframe[0].value
    assert table["name"].tolist() == ["intents"]
    assert int(table["n_items"].iloc[0]) == 400
    metrics = {m.label: m.value for m in at.metric}
    # the three split counts add up to the item count shown
    assert sum(int(metrics[s].replace(",", "")) for s in ("Train", "Calibration", "Test")) == 400
    assert meta["fingerprint"] in _texts(at)
    # sample rows follow the slider
    at.slider(key="dataset_sample_rows").set_value(7).run()
    samples = at.dataframe[-1].value
    assert len(samples) == 7 and "intent" in samples.columns
    from store_builder import WORDS  # gold labels next to the state (the builder wrote text from the label)

    assert all(row.state.startswith(WORDS[row.intent]) for row in samples.itertuples())
    at.selectbox(key="dataset_sample_split").set_value("test").run()
    assert set(at.dataframe[-1].value["split"]) == {"test"}


def test_runs_page_lists_runs_and_failures(ui_store):
    path, meta = ui_store
    at = _app("runs")
    assert at.title[0].value == "Runs"
    table = at.dataframe[0].value
    assert set(table["name"]) == {"sharp-model", "noisy-model"}
    assert (table["status"] == "done").all()
    noisy = table.loc[table["name"] == "noisy-model"].iloc[0]
    assert int(noisy["n_failed"]) == -(-meta["n_scored"] // 25)  # every 25th item failed
    at.selectbox(key="run_id").set_value(meta["runs"]["noisy-model"]).run()
    fails = at.dataframe[-1].value
    assert fails["failure_kind"].tolist() == ["rate_limit"]
    assert int(fails["count"].iloc[0]) == int(noisy["n_failed"])
    at.selectbox(key="run_id").set_value(meta["runs"]["sharp-model"]).run()
    assert any("No failures" in s.value for s in at.success)


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_thresholds_page_sliders_update_figures_live(ui_store):
    path, meta = ui_store
    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(meta["runs"]["sharp-model"]).run()
    at.select_slider(key="thr_x").set_value(_on_grid(0.0)).run()
    at.select_slider(key="thr_y").set_value(_on_grid(0.0, axis=1)).run()
    assert not at.exception, [e.value for e in at.exception]
    # with no threshold everything answered is accepted: coverage 100 % on test
    assert _metric(at, "Coverage (test)") == "100.0%"
    low_cov = _metric(at, "Coverage (test)")
    at.select_slider(key="thr_x").set_value(_on_grid(0.9)).run()
    high_tau_cov = _metric(at, "Coverage (test)")
    assert float(high_tau_cov.rstrip("%")) < float(low_cov.rstrip("%"))
    # the confusion matrix has a review column whose total equals the review load shown
    conf = next(d.value for d in at.dataframe if "review" in d.value.columns)
    assert conf.columns[-1] == "review"
    assert f"{int(conf['review'].sum()):,} items" == _metric(at, "Review load (test)")
    # certified thresholds: the button moves the sliders onto the point `workbench thresholds` certifies
    at.number_input(key="thr_alpha").set_value(0.2).run()
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions

    con = connect(path, read_only=True)
    cal = load_answers(con, meta["runs"]["sharp-model"], "intent", ["calibration"])
    con.close()
    expected = choose_thresholds(cal, None, ThresholdOptions(alpha=0.2, delta=0.1)).selection
    assert expected.feasible
    at.button(key="thr_use_certified").click().run()
    assert at.select_slider(key="thr_x").value == pytest.approx(expected.params["tau"])
    assert at.select_slider(key="thr_y").value == pytest.approx(expected.params["margin"])
    assert any("Certified at" in s.value for s in at.success)
    # issue 27 §6: the caption describes what is drawn, and the markers mean the same on both charts
    charts = {c.proto.id.rsplit("-", 1)[-1]: json.loads(c.proto.spec)["data"] for c in at.get("plotly_chart")}
    surface = {t.get("name"): t for t in charts["thr_surface_chart"]}
    curve = {t.get("name"): t for t in charts["thr_curve_chart"]}
    caption = next(c.value for c in at.caption if c.value.startswith("Left:"))
    if "certified region" in surface:  # blue dots drawn: the caption counts them
        assert "blue dots are the" in caption and "no blue dots" not in caption
        assert surface["certified region"]["marker"]["color"] != surface["chosen"]["marker"]["color"]
    else:
        assert "no blue dots" in caption
    assert surface["certified"]["marker"]["symbol"] == "star" and surface["chosen"]["marker"]["symbol"] == "x"
    assert curve["★ certified rule: operating point"]["marker"]["symbol"] == "star"
    assert curve["✕ sliders: operating point"]["marker"]["symbol"] == "x"
    assert curve["✕ sliders: operating point"]["marker"]["color"] == surface["chosen"]["marker"]["color"]


def test_calibration_page_matches_the_metrics_library(ui_store):
    path, meta = ui_store
    at = _app("calibration")
    assert at.title[0].value == "Calibration"
    at.selectbox(key="run_id").set_value(meta["runs"]["noisy-model"]).run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    # accuracy shown equals scikit-learn's on the same test items (failures excluded)
    from sklearn.metrics import accuracy_score

    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    con = connect(path, read_only=True)
    ans = load_answers(con, meta["runs"]["noisy-model"], "intent", ["test"]).labelled()
    con.close()
    expected = accuracy_score(ans.labels, ans.probs.argmax(axis=1))
    shown = metrics.loc[metrics["metric"] == "accuracy", "as answered"].iloc[0]
    assert float(shown.split()[0]) == pytest.approx(expected, abs=5e-5)
    per_class = next(d.value for d in at.dataframe if "precision" in d.value.columns)
    assert int(per_class["support"].sum()) == len(ans.labels)
    # recalibration adds a second column; changing bins re-renders without error
    at.selectbox(key="cal_method").set_value("temperature").run()
    metrics = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert "temperature" in metrics.columns
    at.slider(key="cal_bins").set_value(8).run()
    assert not at.exception
    assert len(at.get("plotly_chart")) >= 3
    # the confusion matrix is drawn (issue 27 §6: it was left out past 30 options)
    confusion = [c for c in at.get("plotly_chart") if "cal_confusion_chart" in c.proto.id]
    assert len(confusion) == 1 and '"heatmap"' in confusion[0].proto.spec


def test_export_policy_from_thresholds_then_view_diff_and_refuse_tampered(ui_store):
    path, meta = ui_store
    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(meta["runs"]["sharp-model"]).run()
    at.number_input(key="thr_alpha").set_value(0.2).run()
    at.button(key="pol_build").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("certified: True" in s.value for s in at.success)
    at.radio(key="pol_objective").set_value("coverage").run()
    at.button(key="pol_build").click().run()
    exported = at.session_state["session_policies"]
    assert len(exported) == 2
    # the exported text is a valid policy for the library (the same check as `workbench policy validate`)
    from workbench.policy.io import validate_file

    for name, text in exported.items():
        f = path.parent / name
        f.write_text(text)
        assert validate_file(f)["valid"]
    # a tampered copy next to the store is refused by the Policy page
    tampered = json.loads(next(iter(exported.values())))
    q = next(iter(tampered["questions"].values()))
    q["rule"]["tau"] = 0.0
    (path.parent / "policies").mkdir()
    (path.parent / "policies" / "tampered.json").write_text(json.dumps(tampered))
    at.switch_page("workbench/ui/pages/policy.py").run()
    assert at.title[0].value == "Policy"
    names = at.selectbox(key="pol_view").options
    assert any("tampered.json" in n for n in names)
    session_name = next(n for n in names if "guarantee" in n)
    at.selectbox(key="pol_view").set_value(session_name.replace(" (this session)", "")).run()
    assert any("Valid policy" in s.value for s in at.success)
    assert next(d.value for d in at.dataframe if "certified" in d.value.columns)["certified"].iloc[0]
    # diff A vs B: the rule changed between the guarantee and the coverage objective
    a_name = next(n for n in exported if "guarantee" in n)
    b_name = next(n for n in exported if "coverage" in n)
    at.selectbox(key="pol_diff_a").set_value(a_name).run()
    at.selectbox(key="pol_diff_b").set_value(b_name).run()
    assert not at.exception, [e.value for e in at.exception]
    changes = next(d.value for d in at.dataframe if list(d.value.columns) == ["path", "a", "b"])
    assert any("objective.kind" in p for p in changes["path"])
    at.selectbox(key="pol_diff_run").set_value(meta["runs"]["sharp-model"]).run()
    moves = next(d.value for d in at.dataframe if "coverage change" in d.value.columns)
    assert moves["coverage change"].iloc[0] == pytest.approx(moves["coverage B"].iloc[0] - moves["coverage A"].iloc[0])
    # the tampered file: refused, fail closed
    tampered_name = str(path.resolve().parent / "policies" / "tampered.json")
    at.selectbox(key="pol_view").set_value(tampered_name).run()
    assert any("Refused" in e.value and "hash" in e.value for e in at.error)


def test_compare_page_pairs_runs_against_the_baseline(ui_store):
    path, meta = ui_store
    at = _app("compare")
    assert at.title[0].value == "Compare"
    at.selectbox(key="cmp_baseline").set_value(meta["runs"]["noisy-model"]).run()
    at.select_slider(key="cmp_boot").set_value(200).run()
    assert not at.exception, [e.value for e in at.exception]
    everything = next(
        d.value for d in at.dataframe if "d_accuracy" in d.value.columns and "accuracy" in d.value.columns
    )
    from sklearn.metrics import accuracy_score

    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    con = connect(path, read_only=True)
    sharp = load_answers(con, meta["runs"]["sharp-model"], "intent", ["test"]).labelled()
    con.close()
    row = everything.loc[everything["run_id"] == meta["runs"]["sharp-model"]].iloc[0]
    assert row["accuracy"] == pytest.approx(accuracy_score(sharp.labels, sharp.probs.argmax(axis=1)))
    # the sharp model is clearly better; p-values read as the CLI prints them ("< 0.001", never 0.0000)
    p = row["p_mcnemar"]
    assert row["d_accuracy"] > 0 and (p.startswith("< ") or float(p) < 0.05), p
    diff = next(d.value for d in at.dataframe if "p_mcnemar" in d.value.columns and "accuracy" not in d.value.columns)
    assert diff["run_id"].tolist() == [meta["runs"]["sharp-model"]]
    # p-values through the CLI's formatter (issue 27 §6: the page showed `p 0.0000` where the CLI says `< 0.001`)
    from workbench.cli.compare import format_p as cli_format_p
    from workbench.wording import format_p

    assert cli_format_p is format_p  # one formatter, not two
    shown = diff.iloc[0]
    # both tables print the p-values through it: the same words, never a bare 0.0000
    assert shown["p_mcnemar"] == row["p_mcnemar"] != "0.0000"
    assert shown["p_bootstrap"] == row["p_bootstrap"] != "0.0000"
    raw = float("nan") if shown["p_bootstrap"].startswith("<") else float(shown["p_bootstrap"])
    assert shown["p_bootstrap"] == (format_p(raw, 200) if raw == raw else "< 0.005")


def test_shadow_page_reports_agreement_flips_and_verdict(ui_store):
    path, meta = ui_store
    at = _app("shadow")
    assert at.title[0].value == "Shadow"
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="sh_session").value == "noisy-vs-sharp"
    verdicts = [b.value for b in [*at.success, *at.warning, *at.error] if "Verdict" in b.value]
    assert verdicts and any(v in verdicts[0] for v in ("PROMOTE", "HOLD", "REJECT"))
    # agreement shown equals the share of test items where the two runs' top answers agree
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    con = connect(path, read_only=True)
    a = load_answers(con, meta["runs"]["noisy-model"], "intent", ["test"])
    b = load_answers(con, meta["runs"]["sharp-model"], "intent", ["test"])
    con.close()
    both = ~a.failed & ~b.failed
    expected = (a.probs[both].argmax(1) == b.probs[both].argmax(1)).mean()
    shown = next(m.value for m in at.metric if m.label == "Agreement (top answer)")
    assert shown == f"{100 * expected:.1f}%"
    # the flip matrix fills the left half; the drift chart's right axis title has room (issue 27 §6)
    charts = {c.proto.id.rsplit("-", 1)[-1]: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    assert charts["sh_flip_chart_intent"]["data"][0]["type"] == "heatmap"
    if "sh_drift_chart_intent" in charts:
        assert charts["sh_drift_chart_intent"]["layout"]["yaxis2"]["automargin"] is True
    # the default routing is the CLI's (`shadow report` without flags: each side's certified policy at the
    # threshold defaults), so the verdict is the library's with defaults
    assert at.radio(key="sh_champion_kind").value == "none" and at.radio(key="sh_challenger_kind").value == "none"
    from workbench.shadow.report import shadow_report

    con = connect(path, read_only=True)
    lib = shadow_report(con, "noisy-vs-sharp")
    con.close()
    assert f"Verdict: {lib.verdict}" in verdicts[0]
    assert all(r in verdicts[0] for r in lib.reasons)
    from workbench.thresholds.options import ThresholdOptions

    d = ThresholdOptions()
    assert any(f"α = {d.alpha:g}, δ = {d.delta:g}, recalibration {d.calibrate}" in c.value for c in at.caption)
    at.radio(key="sh_champion_kind").set_value("rule").run()
    at.radio(key="sh_challenger_kind").set_value("rule").run()
    # stricter challenger rule: its review load rises
    load_before = next(m.value for m in at.metric if m.label.startswith("Review load"))
    at.slider(key="sh_challenger_tau").set_value(0.95).run()
    load_after = next(m.value for m in at.metric if m.label.startswith("Review load"))
    assert load_before != load_after
    assert float(load_after.split("→")[1].strip().rstrip("%")) > float(load_before.split("→")[1].strip().rstrip("%"))


def test_launch_a_run_from_the_runs_page_and_watch_it_finish(ui_store):
    path, meta = ui_store
    at = _app("runs")
    assert at.selectbox(key="launch_schema").value is not None  # the dataset's own schema
    at.text_input(key="launch_provider").set_value("baseline:tfidf-logreg")
    at.text_input(key="launch_name").set_value("from-the-ui")
    next(b for b in at.button if b.label == "Start run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    launched = at.session_state["launched_runs"]
    assert len(launched) == 1
    assert launched[0]["proc"].wait(timeout=300) == 0, open(launched[0]["log"]).read()
    at.button(key="refresh_store").click().run()
    table = at.dataframe[0].value
    new = table.loc[table["name"] == "from-the-ui"].iloc[0]
    assert new["status"] == "done" and new["provider"] == "baseline:tfidf-logreg"
    assert int(new["n_answers"]) == meta["n_scored"] and int(new["n_failed"]) == 0


def test_import_form_writes_a_new_dataset_version(ui_store, tmp_path):
    path, meta = ui_store
    at = _app()
    csv = (
        b"text,category,split\nmy card has not arrived,card_arrival,train\nplease refund me,refund,train\n"
        b"where is my card,card_arrival,test\nI want a refund,refund,test\n"
    )
    at.file_uploader(key="import_file").set_value(("tiny.csv", csv, "text/csv"))
    at.text_input(key="import_name").set_value("tiny")
    at.text_input(key="import_split_column").set_value("split")
    at.number_input(key="import_calibration_fraction").set_value(0.0)
    next(b for b in at.button if b.label == "Import").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Imported tiny v1: 4 items" in s.value for s in at.success), [s.value for s in at.success]
    # the listing refreshes from the store (new token) and matches the library's own count
    from workbench.store.datasets import dataset_info
    from workbench.store.db import connect

    at.run()
    table = at.dataframe[0].value
    assert set(table["name"]) == {"intents", "tiny"}
    con = connect(path, read_only=True)
    info = dataset_info(con, "tiny")
    con.close()
    assert info["splits"] == {"test": 2, "train": 2}


def test_cost_inputs_pick_the_library_cost_optimum(ui_store):
    path, meta = ui_store
    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(meta["runs"]["noisy-model"]).run()
    at.radio(key="thr_recalibrate").set_value("as answered").run()  # the library call below uses raw probabilities
    # the section computes its surface only while open
    assert not any(m.label.startswith("Lowest expected cost") for m in at.metric)
    at.session_state["thr_costs"] = True
    at.run()
    at.number_input(key="thr_error_cost").set_value(25.0).run()
    at.number_input(key="thr_review_cost").set_value(2.0).run()
    at.button(key="thr_use_cost").click().run()
    assert not at.exception, [e.value for e in at.exception]
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.guarantees import error_cost_weights, select_cost
    from workbench.thresholds.rules import rule_coordinates
    from workbench.thresholds.surface import risk_coverage_surface

    con = connect(path, read_only=True)
    ans = load_answers(con, meta["runs"]["noisy-model"], "intent", ["calibration"])
    con.close()
    ans = ans.select(ans.labels >= 0)
    w = error_cost_weights(ans.labels, rule_coordinates("choice", ans.probs).predicted, 4, 25.0)
    from workbench.ui.state import GRID_POINTS

    best = select_cost(
        risk_coverage_surface("choice", ans.probs, ans.labels, grid=GRID_POINTS, weights=w), review_cost=2.0
    )
    assert at.select_slider(key="thr_x").value == pytest.approx(best.params["tau"])
    assert at.select_slider(key="thr_y").value == pytest.approx(best.params["margin"])
    shown = next(m.value for m in at.metric if m.label.startswith("Lowest expected cost"))
    assert shown == f"{best.cost['expected_cost_per_item']:.4f}"


def test_per_class_guarantee_table_and_export(ui_store):
    path, meta = ui_store
    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(meta["runs"]["sharp-model"]).run()
    at.number_input(key="thr_alpha").set_value(0.2).run()
    at.toggle(key="thr_per_class").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d.value for d in at.dataframe if "certified" in d.value.columns and "option" in d.value.columns)
    assert list(table["option"]) == ["card_arrival", "lost_card", "refund", "top_up"]
    at.button(key="pol_build").click().run()
    assert not at.exception, [e.value for e in at.exception]
    doc = json.loads(next(iter(at.session_state["session_policies"].values())))
    assert doc["questions"]["intent"]["objective"]["per_class"] is True


def test_runs_page_names_a_purely_emulated_cost(ui_store):
    """Issue 27 §6: with only emulated runs, the Runs page showed "Cost (USD) 3.09" as if billed."""
    path, meta = ui_store
    from workbench.store.db import connect

    con = connect(path)
    con.execute("UPDATE runs SET emulated = true")
    con.close()
    at = _app("runs")
    table = next(d.value for d in at.dataframe if "emulated" in d.value.columns)
    assert table["emulated"].all()
    cost = next(m for m in at.metric if "cost" in m.label.lower())
    simulated = table["cost_usd"].sum(min_count=1)
    assert cost.label == "Emulated cost (USD)"
    assert cost.value == ("unknown" if pd.isna(simulated) else f"~{simulated:.4f}")


def test_emulated_runs_are_marked_on_runs_and_compare(ui_store):
    """The runner's ``emulated`` flag (list_runs) marks a run on the Runs table, in run pickers and on Compare."""
    path, meta = ui_store
    at = _app("runs")
    table = next(d.value for d in at.dataframe if "emulated" in d.value.columns)
    marked = dict(zip(table["run_id"], table["emulated"]))
    assert marked == {meta["runs"]["noisy-model"]: True, meta["runs"]["sharp-model"]: False}
    # the cost metric counts real providers only; the emulated run's simulated cost is named as such
    cost = next(m for m in at.metric if "Cost" in m.label)
    real = table.loc[~table["emulated"], "cost_usd"].sum(min_count=1)
    assert cost.label == "Cost (USD)" and cost.value == ("unknown" if pd.isna(real) else f"{real:.4f}")
    simulated = table.loc[table["emulated"], "cost_usd"].sum(min_count=1)
    if not pd.isna(simulated):
        assert f"~{simulated:.4f} of simulated cost" in cost.proto.help
    assert {"accuracy", "ECE"} <= set(table.columns)
    picker = at.selectbox(key="run_id")
    assert "EMULATED" in picker.format_func(meta["runs"]["noisy-model"])
    assert "EMULATED" not in picker.format_func(meta["runs"]["sharp-model"])
    at.switch_page("workbench/ui/pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    figures = next(d.value for d in at.dataframe if "d_accuracy" in d.value.columns and "accuracy" in d.value.columns)
    provider = dict(zip(figures["run_id"], figures["provider"]))
    assert provider[meta["runs"]["noisy-model"]].endswith("(EMULATED)")
    assert "EMULATED" not in provider[meta["runs"]["sharp-model"]]
    # under the bars the mark goes on its own line and the axis makes room (issue 27 §6: labels were cut)
    bar = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "cmp_bar_chart" in c.proto.id)
    ticks = [x for t in bar["data"] for x in t["x"]]
    assert "synthetic:noisy-model<br>(EMULATED)" in ticks and bar["layout"]["xaxis"]["automargin"] is True


def test_thresholds_page_plans_labels_like_the_cli(ui_store):
    """The page's plan-labels section shows the library's recommendation and the batch caption."""
    path, meta = ui_store
    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(meta["runs"]["sharp-model"]).run()
    at.number_input(key="thr_alpha").set_value(0.2).run()
    assert any("Next 1000 accepted items" in c.value for c in at.caption)
    at.button(key="thr_plan_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    from workbench.store.db import connect
    from workbench.thresholds.options import ThresholdOptions
    from workbench.workflows.thresholds import plan_labels_for_run

    con = connect(path, read_only=True)
    plan = plan_labels_for_run(
        con,
        meta["runs"]["sharp-model"],
        "intent",
        ThresholdOptions(alpha=0.2, delta=0.1, method="fixed-sequence", calibrate="temperature"),
    )
    con.close()
    shown = _texts(at)
    if plan.recommended_labels is not None:
        assert f"**{plan.recommended_labels} calibration labels**" in shown
    else:
        assert "No simulated size" in shown
    table = next(d.value for d in at.dataframe if "p_certify" in d.value.columns)
    assert table["p_certify"].tolist() == [r["p_certify"] for r in plan.curve]
    from workbench.thresholds.planning import range_text

    # the spread of N over the pilot's bootstraps, in the CLI's words (issue 28 §3)
    assert f"Labels needed — {range_text(plan.labels_range)}." in [c.value for c in at.caption]


def test_large_run_pages_show_point_estimates_first_then_intervals_and_frontier_on_request(ui_store, monkeypatch):
    """A large run (``WORKBENCH_STREAM_CELLS=1`` makes every run large): point estimates at once; the
    bootstrap intervals and the certified frontier on a button, with the CLI's figures; all of it kept
    next to the store for later sessions."""
    from workbench.store import aggregate_cache
    from workbench.store.db import connect
    from workbench.workflows.evaluation import report_run

    path, meta = ui_store
    run_id = meta["runs"]["noisy-model"]
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "1")
    con = connect(path, read_only=True)
    cli = report_run(con, run_id, "intent", "test").questions[0].metrics  # `workbench report RUN` (200 replicates)
    con.close()

    at = _app("calibration")
    at.selectbox(key="run_id").set_value(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(h.value == "Metrics (point estimates)" for h in at.subheader)
    metrics = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    shown = metrics.set_index("metric")["as answered"]
    assert shown["accuracy"] == f"{cli['accuracy'].estimate:.4f}"  # a point estimate, no interval yet
    at.button(key="cal_boot_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(h.value == "Metrics (95% bootstrap intervals)" for h in at.subheader)
    shown = next(d.value for d in at.dataframe if "metric" in d.value.columns).set_index("metric")["as answered"]
    for name in ("accuracy", "ece_uniform", "brier"):
        iv = cli[name]
        assert shown[name] == f"{iv.estimate:.4f}  [{iv.low:.4f}, {iv.high:.4f}]"

    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(b.key == "thr_front_go" for b in at.button)
    at.button(key="thr_front_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any(b.key == "thr_front_go" for b in at.button)  # drawn: no button left
    # a new session (fresh caches) finds the intervals and the frontier kept: no button on either page
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    at = _app("thresholds")
    at.selectbox(key="run_id").set_value(run_id).run()
    assert not any(b.key == "thr_front_go" for b in at.button)
    at = _app("calibration")
    at.selectbox(key="run_id").set_value(run_id).run()
    assert not any(b.key == "cal_boot_go" for b in at.button)
    assert any(aggregate_cache.cache_dir(path).iterdir())


def test_policy_page_question_table_fits(ui_store):
    """Issue 27 §6: the question table's last column was cut; α and δ share a column and every column is sized."""
    path, meta = ui_store
    at = _app("policy")
    table = next(d for d in at.dataframe if "rule" in d.value.columns)
    assert list(table.value.columns)[-3:] == ["coverage (test)", "error (test)", "error 95% high"]
    assert "α / δ" in table.value.columns and len(table.value.columns) == 11
    assert table.value["α / δ"].iloc[0] == "0.2 / 0.1"
