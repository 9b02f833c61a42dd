"""Runs: list (provider, schema, status, cost, latency), failures by kind, launch and watch a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from workbench.ui import state

st.title("Runs")

KEY_PROC = "launched_runs"  # session state: list of {"pid", "log", "cmd"} started from this tab


def _runner_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("workbench.cli.run") is not None


def _launch_form(path: str, token: tuple) -> None:
    """Start `workbench run` in a subprocess (it owns the write lock; this page reads snapshots)."""
    with st.expander("Launch a run", expanded=False):
        if not _runner_available():
            st.info("The runner is not installed in this build (`workbench run` is missing).")
            return
        datasets = state.datasets_frame(path, token)
        if datasets.empty:
            st.info("Import a dataset first.")
            return
        dataset = st.selectbox("Dataset", datasets["name"].tolist(), key="launch_dataset")
        stored = state.dataset_schema_file(path, token, dataset)
        schema_files = ([stored] if stored else []) + (
            sorted(str(p) for p in Path("experiments/schemas").glob("*.y*ml"))
            if Path("experiments/schemas").is_dir()
            else []
        )
        with st.form("launch_run"):
            c1, c2 = st.columns(2)
            schema = c2.selectbox(
                "Schema file",
                schema_files,
                key="launch_schema",
                accept_new_options=True,
                format_func=lambda f: "the dataset's own schema" if f == stored else f,
            )
            provider = c1.text_input("Provider spec", value="baseline:tfidf-logreg", key="launch_provider")
            splits = c2.multiselect(
                "Splits", ["calibration", "test"], default=["calibration", "test"], key="launch_splits"
            )
            limit = c1.number_input("Limit (0 = all items)", 0, 10_000_000, 0, key="launch_limit")
            name = c2.text_input("Run name (optional)", key="launch_name")
            go = st.form_submit_button("Start run")
        if not go:
            return
        if not schema:
            st.error("Choose a schema file.")
            return
        cmd = [
            sys.executable,
            "-c",
            "from workbench.cli import main; main()",
            "--db",
            path,
            "run",
            "--dataset",
            dataset,
            "--schema",
            str(schema),
            "--provider",
            provider,
            "--no-progress",
        ]
        for s in splits:
            cmd += ["--split", s]
        if limit:
            cmd += ["--limit", str(int(limit))]
        if name:
            cmd += ["--run-name", name]
        log = Path(tempfile.mkstemp(prefix="workbench-run-", suffix=".log")[1])
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ}, start_new_session=True
            )
        st.session_state.setdefault(KEY_PROC, []).append(
            {"pid": proc.pid, "log": str(log), "cmd": " ".join(cmd[3:]), "proc": proc}
        )
        st.success(f"Started `workbench {' '.join(cmd[3:])}` (pid {proc.pid}).")


@st.fragment(run_every=2.0)
def _progress() -> None:
    """Live view while something is running: answers so far per running run, and launched logs."""
    path = state.db_path()
    token = state.store_token(path)
    runs = state.runs_frame(path, token)
    running = runs.loc[runs["status"] == "running"]
    launched = st.session_state.get(KEY_PROC, [])
    if running.empty and not launched:
        return
    st.subheader("In progress")
    for r in running.to_dict("records"):
        planned = state.planned_answers(path, token, state.run_record(path, token, str(r["run_id"])))
        n_answers, n_failed = int(r["n_answers"]), int(r["n_failed"])
        label = f"{r['name'] or r['provider']} — {n_answers:,} answers, {n_failed:,} failed"
        if planned:
            st.progress(min(1.0, n_answers / float(planned)), text=f"{label} of {int(planned):,}")
        else:
            st.write(label)
    for entry in launched:
        proc = entry.get("proc")
        code = proc.poll() if proc is not None else None
        status = "running" if code is None else f"exited {code}"
        with st.expander(f"`workbench {entry['cmd']}` — {status}", expanded=code not in (None, 0)):
            try:
                tail = Path(entry["log"]).read_text(errors="replace")[-3000:]
            except FileNotFoundError:
                tail = ""
            st.code(tail or "(no output yet)")


if state.store_ready():
    path, token, runs = state.current_table(state.runs_frame, "No runs yet. Launch one below, or run `workbench demo`.")
    if not runs.empty:
        c = st.columns(4)
        c[0].metric("Runs", len(runs))
        c[1].metric("Answers", f"{int(runs['n_answers'].sum()):,}")
        c[2].metric("Failures", f"{int(runs['n_failed'].sum()):,}")
        # an emulated run's cost is what the real service would bill, never money spent: kept apart (issue 27 §6)
        emulated_runs = state.is_emulated(runs)
        billed = runs.loc[~emulated_runs, "cost_usd"].sum(min_count=1)
        simulated = runs.loc[emulated_runs, "cost_usd"].sum(min_count=1)
        if emulated_runs.all():
            c[3].metric(
                "Emulated cost (USD)",
                "unknown" if pd.isna(simulated) else f"~{simulated:.4f}",
                help="Every run was answered by the project's emulator: this is the price it simulates, "
                "nothing was billed.",
            )
        else:
            c[3].metric(
                "Cost (USD)",
                "unknown" if pd.isna(billed) else f"{billed:.4f}",
                help="Billed by real providers"
                + ("" if pd.isna(simulated) else f"; emulated runs add ~{simulated:.4f} of simulated cost (not billed)")
                + ".",
            )
        heads = state.run_headlines(path, token)
        shown = runs.assign(emulated=state.is_emulated(runs))
        questions = heads["question"].value_counts().index.tolist()[:3]  # the store's main questions
        for q in questions:
            h = heads.loc[heads["question"] == q].set_index("run_id")
            suffix = f" ({q})" if len(questions) > 1 else ""
            shown[f"accuracy{suffix}"] = shown["run_id"].map(h["accuracy"])
            shown[f"ECE{suffix}"] = shown["run_id"].map(h["ece"])
        metric_cols = [c for c in shown.columns if c.startswith(("accuracy", "ECE"))]
        shown = shown[
            [
                "run_id",
                "name",
                "emulated",
                "kind",
                "dataset",
                "provider",
                "model",
                "variant",
                "status",
                *metric_cols,
                "n_answers",
                "n_failed",
                "cost_usd",
                "latency_p50_ms",
                "created_at",
            ]
        ]
        st.caption(
            "Accuracy and top-label ECE (15 equal-width bins) on the test split, as `workbench report RUN` "
            "computes them. Emulated runs were answered by the project's emulator: their cost is simulated."
        )
        st.dataframe(
            shown,
            hide_index=True,
            width="stretch",
            key="runs_table",
            column_config={
                "run_id": st.column_config.TextColumn("run id", width="medium"),
                "emulated": st.column_config.CheckboxColumn("emulated"),
                **{c: st.column_config.NumberColumn(c, format="%.3f") for c in metric_cols},
                "cost_usd": st.column_config.NumberColumn("cost (USD)", format="%.4f"),
                "latency_p50_ms": st.column_config.NumberColumn("p50 latency (ms)", format="%.0f"),
            },
        )

        picked = state.pick_run(runs)
        if picked is None:
            st.stop()
        run_id = str(picked)
        run = state.run_record(path, token, run_id)
        st.markdown(
            f"**{run.get('name') or run_id}** · provider `{run['provider']}` · model "
            f"`{run.get('model') or '—'}` · dialect `{run.get('dialect') or '—'}` · schema "
            f"`{run['schema_hash'][:12]}` · splits {', '.join(run['splits'])} · status **{run['status']}**"
        )
        summary = run.get("summary") or {}
        if summary:
            with st.expander("Run summary", expanded=False):
                st.json(summary)
        st.subheader("Failures by kind")
        failures = state.failures_by_kind(path, token, run_id)
        if failures.empty:
            st.success("No failures: every item × question has an answer.")
        else:
            st.dataframe(failures, hide_index=True, width="stretch", key="failures_table")
        with st.expander("Decision schema", expanded=False):
            st.code(json.dumps(run["schema_wire"], indent=2, ensure_ascii=False), language="json")
    _progress()
    _launch_form(path, token)
