"""Tables stay whole when stdout is a pipe (issue 27 §5): with ``COLUMNS`` unset rich would assume 80
columns and wrap run names into many-line cells and cut intervals and headers ("quest…", "[0.710, 0.85…").
Piped, every table prints at its natural width: one line per row, every interval and header whole.
Real subprocesses of the console entry point, stdout a pipe, on a real store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CLI = [sys.executable, "-c", "from workbench.cli import main; main()"]
LONG_NAME = "demo intents · synthetic:sharp-model [EMULATED] · descriptive schema variant"
INTERVAL = re.compile(r"\[-?\d+(?:\.\d+)?, -?\d+(?:\.\d+)?\]")


def _piped(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The CLI with stdout a pipe (capture_output) and no COLUMNS: rich would lay tables out at 80 columns."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "WORKBENCH_DB", "FORCE_COLOR")}
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    return proc


def _boxed_rows(text: str) -> list[str]:
    """The body lines of the boxed (heavy-head) tables in ``text``."""
    return [ln for ln in text.splitlines() if ln.startswith("│")]


def _assert_whole(text: str) -> None:
    """Every boxed row is one line (its first cell is never blank), nothing is cut with '…', intervals whole."""
    rows = _boxed_rows(text)
    assert rows, text
    for ln in rows:
        first = ln.split("│")[1]
        assert first.strip(), f"a row continued on a second line:\n{text}"
    assert "…" not in text, text
    for ln in rows:
        assert ln.count("[") == len(INTERVAL.findall(ln)), ln


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, dict]:
    from tests.ui.store_builder import build_store, make_schema
    from workbench.store.db import connect
    from workbench.store.runs import create_run

    db = tmp_path_factory.mktemp("piped") / "wb.duckdb"
    meta = build_store(db)
    con = connect(db)
    try:
        meta["long"] = create_run(
            con,
            dataset="intents",
            dataset_version=meta["version"],
            schema=make_schema(),
            provider="synthetic:a-provider-with-a-rather-long-model-name",
            splits=["calibration", "test"],
            name=LONG_NAME,
        )
    finally:
        con.close()
    return db, meta


def test_runs_list_prints_one_line_per_run(store):
    db, meta = store
    proc = _piped("--db", str(db), "runs", "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    runs = [*meta["runs"].values(), meta["long"]]
    for run in runs:
        (line,) = [ln for ln in lines if run in ln]
        if run == meta["long"]:
            assert LONG_NAME in line and "a-provider-with-a-rather-long-model-name" in line, proc.stdout
    header = next(ln for ln in lines if ln.split()[:2] == ["run", "name"])
    assert header.split() == ["run", "name", "provider", "dataset", "status", "n", "fail", "cost", "$", "p50"]
    body = lines[lines.index(header) + 2 :]
    assert len([ln for ln in body if ln.strip().startswith("run-")]) == len(runs)
    assert [ln for ln in body if ln.strip() and not ln.strip().startswith("run-")][0].lstrip().startswith("*")


def test_report_with_slices_keeps_intervals_and_headers_whole(store):
    db, meta = store
    proc = _piped("--db", str(db), "report", meta["runs"]["sharp-model"], "--slice", "state_length", "--boot", "50")
    assert proc.returncode == 0, proc.stderr
    _assert_whole(proc.stdout)
    assert "state_length" in proc.stdout and len(INTERVAL.findall(proc.stdout)) >= 10, proc.stdout
    # the slice table: a row per bucket, each metric as "estimate [low, high]" on that row
    buckets = [ln for ln in _boxed_rows(proc.stdout) if "chars" in ln]
    assert len(buckets) == 4 and all(len(INTERVAL.findall(ln)) == 4 for ln in buckets), proc.stdout
    assert "accuracy [95% CI]" in proc.stdout


def test_label_issues_rows_are_whole(store):
    db, meta = store
    proc = _piped("--db", str(db), "label-issues", meta["runs"]["noisy-model"])
    assert proc.returncode == 0, proc.stderr
    _assert_whole(proc.stdout)
    for header in ("rank", "item_id", "split", "given", "suggested", "quality", "p_given", "p_suggested"):
        assert f" {header} " in proc.stdout, proc.stdout


def test_aggregate_headers_are_whole(store, tmp_path):
    db, meta = store
    answers = tmp_path / "answers.parquet"
    schema = tmp_path / "schema.json"
    from tests.ui.store_builder import WORDS

    questions = {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": dict(WORDS)}}
    schema.write_text(json.dumps({"name": "ui-test-intents", "questions": questions}), encoding="utf-8")
    assert _piped("--db", str(db), "export", meta["runs"]["sharp-model"], "--out", str(answers)).returncode == 0
    proc = _piped("aggregate", str(answers), "--schema", str(schema))
    assert proc.returncode == 0, proc.stderr
    _assert_whole(proc.stdout)
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "question",
        "answers",
        "failed",
        "labelled",
        "accuracy",
        "Brier",
        "log loss",
        "ECE",
        "MCE",
    ]


def test_monitor_windows_and_error_intervals_are_whole(tmp_path):
    from tests.monitor.conftest import shift_scenario

    s = shift_scenario(tmp_path)
    proc = _piped(
        "monitor",
        "--policy",
        str(s["policy"]),
        "--decisions",
        str(tmp_path / "decisions.jsonl"),
        "--outcomes",
        str(tmp_path / "shifted.jsonl"),
        "--window",
        "6h",
    )
    assert proc.returncode == 1, proc.stderr  # the shift raises the alarm
    _assert_whole(proc.stdout)
    rows = [ln for ln in _boxed_rows(proc.stdout) if "intent" in ln]
    assert len(rows) >= 5
    for ln in rows:  # the window's start in full and the error with its whole interval and count, one line
        assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", ln), ln
        assert re.search(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] n=\d+", ln), ln
