"""`workbench demo --fast` end to end (real models, real emulator over loopback), then the UI on its store."""

from __future__ import annotations

import os

import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from workbench.demo import run_demo

    before = {k: os.environ.get(k) for k in ("CLOUDFLARE_API_KEY", "CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_CLEF_BASE_URL")}
    result = run_demo(tmp_path_factory.mktemp("demo"), fast=True, alpha=0.2, progress=False, log=lambda _: None)
    after = {k: os.environ.get(k) for k in before}
    return result, before, after


@pytest.mark.slow
def test_demo_runs_everything_offline_and_labels_the_emulator(demo):
    from workbench.policy.io import validate_file
    from workbench.store.db import connect
    from workbench.store.runs import list_runs

    result, env_before, env_after = demo
    assert env_before == env_after  # dummy credentials only went to the runner
    con = connect(result.db_path, read_only=True)
    runs = list_runs(con)
    shadows = con.execute("SELECT shadow FROM shadow_sessions").fetchall()
    con.close()
    # 2 datasets x 2 variants x 3 providers, every run finished with answers and no failure
    assert len(runs) == 12 and set(runs["status"]) == {"done"}
    assert set(runs["provider"]) == {"local:minilm-zeroshot", "baseline:tfidf-logreg", "cloudflare:clef-flash"}
    assert set(runs["variant"]) == {"descriptive", "terse"} and set(runs["dataset"]) == {"banking77", "hwu64"}
    assert (runs["n_failed"] == 0).all() and (runs["n_answers"] > 0).all()
    emulated = runs.loc[runs["provider"] == "cloudflare:clef-flash", "name"]
    assert len(emulated) == 4 and all("EMULATED" in n for n in emulated)
    assert shadows == [("demo-banking77-tfidf-vs-minilm",)]
    # the dummy key never reaches the store
    assert b"demo-not-a-real-key" not in result.db_path.read_bytes()
    # policies: one per run with something certified, and the best one as policy.json
    assert result.policy_path is not None and validate_file(result.policy_path)["valid"]
    assert any(r.figures.get("certified") for r in result.runs)
    # temperature scaling lowers the zero-shot model's test ECE (fitted on calibration)
    zs = [r.figures for r in result.runs if r.provider == "local:minilm-zeroshot"]
    assert all(f["ece_temperature"] < f["ece"] for f in zs)
    # the descriptive options change the zero-shot model's answers (schema A/B is meaningful offline)
    acc = {(r.dataset, r.variant): r.figures["accuracy"] for r in result.runs if r.provider == "local:minilm-zeroshot"}
    assert acc[("banking77", "descriptive")] != acc[("banking77", "terse")]
    assert result.summary.shape[0] == 12
    assert f"workbench ui --db {result.db_path}" in result.ui_commands


@pytest.mark.slow
def test_ui_opens_on_the_demo_store_and_downloads_its_policy(demo, monkeypatch):
    result, _, _ = demo
    monkeypatch.setenv("WORKBENCH_DB", str(result.db_path))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("workbench/ui/pages/runs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.dataframe[0].value) == 12
    at.switch_page("workbench/ui/pages/policy.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Valid policy" in s.value for s in at.success)
    download = at.get("download_button")
    assert download, "no download button on the Policy page"


@pytest.mark.slow
def test_rerunning_the_demo_reuses_its_runs(demo):
    from workbench.demo import run_demo
    from workbench.store.db import connect
    from workbench.store.runs import list_runs

    first, _, _ = demo
    again = run_demo(first.out_dir, fast=True, alpha=0.2, progress=False, log=lambda _: None)
    assert [r.run_id for r in again.runs] == [r.run_id for r in first.runs]
    con = connect(again.db_path, read_only=True)
    assert len(list_runs(con)) == 12
    con.close()
    assert again.summary.drop(columns=["run_id"]).equals(first.summary.drop(columns=["run_id"]))


@pytest.mark.slow
def test_every_row_says_from_which_alpha_it_certifies(demo):
    """The "certifies from α" figure is the library's frontier edge: it certifies there, not one step below."""
    from dataclasses import replace

    import workbench as wb
    from workbench.demo import next_step
    from workbench.store.db import connect
    from workbench.workflows.thresholds import ALPHA_STEPS, frontier_for_run

    result, _, _ = demo
    summary = result.summary
    assert "certifies_from_alpha" in summary.columns and "next_step" in summary.columns
    opts = replace(wb.ThresholdOptions(), alpha=0.2)
    con = connect(result.db_path, read_only=True)
    try:
        for r in result.runs:
            a = r.figures["certifies_from_alpha"]
            certified = bool(r.figures.get("certified"))
            if certified:  # monotone in α: certified at 0.2 means the edge is at or below it
                assert a is not None and a <= 0.2 + 1e-12
                assert next_step(r, 0.2) == ""
            else:
                assert a is None or a > 0.2
                assert next_step(r, 0.2)
            if a is not None:
                i = ALPHA_STEPS.index(a)
                probe = list(ALPHA_STEPS[max(0, i - 1) : i + 1])
                sels = frontier_for_run(con, r.run_id, "intent", opts, probe)
                assert sels[-1].certified and sels[-1].feasible
                if i > 0:
                    assert not (sels[0].certified and sels[0].feasible)
    finally:
        con.close()


@pytest.mark.slow
def test_cli_demo_prints_the_summary_on_stdout_and_progress_on_stderr(demo, tmp_path):
    """`workbench demo --fast > out.txt` keeps the summary; commands are whole lines even at 60 columns."""
    import subprocess
    import sys

    first, _, _ = demo
    env = {**os.environ, "COLUMNS": "60"}
    for k in ("CLOUDFLARE_API_KEY", "CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_CLEF_BASE_URL"):
        env.pop(k, None)
    out_file = tmp_path / "out.txt"
    with out_file.open("w") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "workbench", "demo", "--fast", "--max-error", "0.2", "--out", str(first.out_dir)],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=900,
        )
    assert proc.returncode == 0, proc.stderr
    out = out_file.read_text()
    assert "workbench demo: 12 runs" in out and "certifies from α" in out
    assert f"  workbench ui --db {first.db_path}\n" in out  # one unbroken line
    assert f"workbench --db {first.db_path} shadow report demo-banking77-tfidf-vs-minilm" in out
    assert "(already in the store)" in proc.stderr and "(already in the store)" not in out
    assert f"  {first.monitor_command}\n" in out  # the simulated traffic's monitor command, one line
    assert "workbench demo: 12 runs" not in proc.stderr


@pytest.mark.slow
def test_demo_leaves_traffic_that_monitor_reads_with_one_drifted_day(demo):
    """The exported policy's simulated traffic: the runtime's DecisionLog, outcomes for every decision, and the
    drifted day standing out in `workbench monitor` (a real subprocess) and on the Monitor page."""
    import json
    import subprocess
    import sys

    from workbench_runtime.decision_log import read_decision_log

    from workbench.demo import DRIFTED_DAY, TRAFFIC_DAYS

    result, _, _ = demo
    t = result.traffic
    assert t is not None and result.policy_path is not None and t["run_id"] == result.policy_run
    records = read_decision_log(t["decisions"])
    outcomes = [json.loads(line) for line in open(t["outcomes"], encoding="utf-8")]
    assert len(records) == len(outcomes) == t["n_decisions"] > 0
    assert {r["decision_id"] for r in records} == {o["decision_id"] for o in outcomes}
    assert result.monitor_command == (
        f"workbench monitor --policy {result.policy_path} --decisions {t['decisions']} --outcomes {t['outcomes']}"
    )
    cmd = result.monitor_command.split()[1:] + ["--window", "1D", "--json"]
    proc = subprocess.run([sys.executable, "-m", "workbench", *cmd], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    wins = sorted(doc["windows"], key=lambda w: w["first_decision"])
    assert len(wins) == TRAFFIC_DAYS
    assert all(w["model_mismatch_share"] == 0 and w["schema_mismatch_share"] == 0 for w in wins)
    psi = [w["drift"]["p_top"]["psi"] for w in wins]
    drifted = psi[DRIFTED_DAY - 1]
    others = [p for i, p in enumerate(psi) if i != DRIFTED_DAY - 1]
    assert drifted > 0.25 and drifted > 2 * max(others)  # a few dozen items a day in --fast: clean days are noisy


@pytest.mark.slow
def test_monitor_page_opens_on_the_demo_traffic(demo, monkeypatch):
    result, _, _ = demo
    monkeypatch.setenv("WORKBENCH_DB", str(result.db_path))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("workbench/ui/pages/monitor.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("Point this page" in i.value for i in at.info)  # it found policy.json and the logs
