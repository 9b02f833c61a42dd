"""CLI conventions (issue 13, item 3), through the real `workbench` entry point in subprocesses.

`--version`; flags shown as flags in help; creating commands print their id on stdout; one JSON
shape per command; ids never truncated at 80 columns; runs answered by the emulator recorded and
shown as emulated (real DuckDB file, real loopback HTTP); SIGTERM to `workbench ui` stops Streamlit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

import workbench
from tests.conftest import ROOT, import_banking77, run_cli
from tests.runner.conftest import BANKING_DIR, banking_schema
from workbench.emulator import run_emulator
from workbench.store.db import connect
from workbench.store.runs import get_run, list_runs

TOKEN = "conventions-token-0b1c2d3e4f"
ACCOUNT = "00112233445566778899aabbccddeeff"


def test_version_prints_the_package_version():
    res = run_cli("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"workbench {workbench.__version__}"


@pytest.mark.parametrize("command", [("thresholds",), ("run",), ("report",), ("runs", "list")])
def test_help_shows_boolean_flags_without_a_value(command):
    res = run_cli(*command, "--help", env={"COLUMNS": "120"})
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "--json" in ln]
    assert lines, res.stdout
    assert "<bool>" not in res.stdout  # typer 0.29 printed '--json <bool>' for every flag
    assert "<int>" in res.stdout or "<str>" in res.stdout or command == ("runs", "list")  # value options keep theirs


# -- an emulated run, end to end -------------------------------------------------------------------
@pytest.fixture(scope="module")
def emu():
    with run_emulator(port=0, require_token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def store(tmp_path_factory, emu):
    """A store with a 154-item BANKING77 test split, one emulated run and one local baseline run."""
    tmp = tmp_path_factory.mktemp("conventions")
    db = tmp / "wb.duckdb"
    for split, every in (("train", 10), ("test", 20)):
        pd.read_csv(BANKING_DIR / f"{split}.csv").iloc[::every].to_csv(tmp / f"{split}.csv", index=False)
    schema = tmp / "banking.yaml"
    schema.write_text(yaml.safe_dump(banking_schema().to_file_dict(), sort_keys=False))
    imported = import_banking77(db, tmp / "train.csv", tmp / "test.csv", "--schema", str(schema))
    env = {
        "CLOUDFLARE_API_KEY": TOKEN,
        "CLOUDFLARE_ACCOUNT_ID": ACCOUNT,
        "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
    }
    common = ("--dataset", "b77", "--schema", str(schema), "--no-progress")
    emulated = run_cli("run", *common, "--provider", "cloudflare:clef-flash", db=db, env=env)
    local = run_cli("run", *common, "--provider", "baseline:tfidf-logreg", "--json", db=db)
    return {"db": db, "env": env, "schema": schema, "imported": imported, "emulated": emulated, "local": local}


def test_creating_commands_print_their_id_on_stdout(store):
    imported, emulated, local = store["imported"], store["emulated"], store["local"]
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout == "b77\n"  # the name `run --dataset` takes; the narrative is on stderr
    assert emulated.returncode == 0, emulated.stderr
    run_id = emulated.stdout.strip()
    assert run_id.startswith("run-") and "\n" not in run_id
    con = connect(store["db"], read_only=True)
    try:
        assert get_run(con, run_id)["provider"] == "cloudflare:clef-flash"
    finally:
        con.close()
    assert run_id in emulated.stderr  # the human summary names it too
    doc = json.loads(local.stdout)
    assert doc["run_ids"] == [r["run_id"] for r in doc["runs"]] and len(doc["run_ids"]) == 1

    calibrated = run_cli("calibrate", run_id, "--fit-split", "test", db=store["db"])
    assert calibrated.returncode == 0, calibrated.stderr
    view = calibrated.stdout.strip()
    assert view.startswith("run-") and view != run_id
    con = connect(store["db"], read_only=True)
    try:
        row = get_run(con, view)
        assert row["parent_run_id"] == run_id and row["kind"] == "calibrated"
        assert row["emulated"] is True  # a view of an emulated run is emulated too
    finally:
        con.close()


def test_run_json_has_one_shape_for_new_runs_and_resume(store):
    new = json.loads(store["local"].stdout)
    run_id = new["run_ids"][0]
    resumed = run_cli("run", "--resume", run_id, "--json", "--no-progress", db=store["db"])
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads(resumed.stdout)
    assert set(again) == set(new) == {"run_ids", "runs", "experiment"}
    assert again["run_ids"] == [run_id] and again["experiment"] is None
    assert set(again["runs"][0]) == set(new["runs"][0])
    assert again["runs"][0]["answered"] == new["runs"][0]["answered"]
    assert again["runs"][0]["this_session"]["requests_sent"] == 0  # everything was answered already


def test_emulated_runs_are_recorded_and_their_cost_shown_as_emulated(store, emu):
    run_id = store["emulated"].stdout.strip()
    local_id = json.loads(store["local"].stdout)["run_ids"][0]
    con = connect(store["db"], read_only=True)
    try:
        runs = list_runs(con).set_index("run_id")
        assert bool(runs.loc[run_id, "emulated"]) is True
        assert bool(runs.loc[local_id, "emulated"]) is False
        assert get_run(con, run_id)["emulated"] is True and get_run(con, local_id)["emulated"] is False
        n_calls, n_emulated = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE emulated) FROM calls WHERE run_id = ?", [run_id]
        ).fetchone()
        cost = runs.loc[run_id, "cost_usd"]
    finally:
        con.close()
    assert n_calls == n_emulated > 0  # every call was answered by the emulator, and each says so
    assert cost > 0  # priced as the real service would bill ...

    listed = json.loads(run_cli("runs", "list", "--json", db=store["db"]).stdout)["runs"]
    flags = {r["run_id"]: r["emulated"] for r in listed}
    assert flags[run_id] is True and flags[local_id] is False

    table = run_cli("runs", "list", db=store["db"], env={"COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    assert run_id in table.stdout and local_id in table.stdout  # ids whole at 80 columns, never 'run-…'
    assert "…" not in table.stdout
    assert f"~{cost:.4f}" in table.stdout and "emulated" in table.stdout  # ... and shown as not billed

    report = run_cli("report", run_id, "--boot", "0", db=store["db"], env={"COLUMNS": "200"})
    assert report.returncode == 0, report.stderr
    first = report.stdout.splitlines()[0]
    assert "EMULATED" in first and "emulated" in first.split("cost=")[1]
    local_report = run_cli("report", local_id, "--boot", "0", db=store["db"], env={"COLUMNS": "200"})
    assert "EMULATED" not in local_report.stdout


def test_compare_marks_emulated_runs(store):
    run_id = store["emulated"].stdout.strip()
    local_id = json.loads(store["local"].stdout)["run_ids"][0]
    args = ("compare", local_id, run_id, "--baseline", local_id, "--no-policy", "--n-boot", "50")
    doc = json.loads(run_cli(*args, "--json", db=store["db"], check=True).stdout)
    flags = {r["run_id"]: r["emulated"] for r in doc["rows"]}
    assert flags == {local_id: False, run_id: True}
    text = run_cli(*args, db=store["db"], env={"COLUMNS": "250"}, check=True).stdout
    emulated_lines = [ln for ln in text.splitlines() if "clef-flash" in ln]
    assert emulated_lines and all("emulated" in ln for ln in emulated_lines)


# -- SIGTERM to `workbench ui` ---------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_sigterm_to_workbench_ui_stops_its_streamlit_child(tmp_path):
    db = tmp_path / "wb.duckdb"
    connect(db).close()
    port = _free_port()
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "ui", "--db", str(db), "--port", str(port)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise AssertionError("the UI did not start")
        children = _children(proc.pid)
        assert children, "workbench ui should run Streamlit as a child process"

        os.kill(proc.pid, signal.SIGTERM)  # the wrapper only, as a service manager or `kill PID` does
        assert proc.wait(timeout=30) == 0
        deadline = time.time() + 15
        while time.time() < deadline and (any(_alive(c) for c in children) or _port_open(port)):
            time.sleep(0.2)
        assert not any(_alive(c) for c in children), "the Streamlit child outlived workbench ui"
        assert not _port_open(port), "the UI port is still open"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)


def test_report_json_has_one_shape_with_or_without_label_issues(store):
    local_id = json.loads(store["local"].stdout)["run_ids"][0]
    plain = json.loads(run_cli("report", local_id, "--boot", "0", "--json", db=store["db"], check=True).stdout)
    with_issues = json.loads(
        run_cli(
            "report", local_id, "--boot", "0", "--exclude-label-issues", "--json", db=store["db"], check=True
        ).stdout
    )
    assert set(plain) == set(with_issues)
    assert plain["excluding_label_issues"] is None and set(with_issues["excluding_label_issues"]) == {"intent"}
    assert plain["run"]["emulated"] is False and plain["run"]["run_id"] == local_id


def test_a_run_answered_from_the_emulators_cache_is_emulated_too(store, emu):
    """The second run of the same spec at the same endpoint asks nothing: its answers come from calls the
    emulator answered, so it is emulated although no response header was seen this time."""
    before = emu.request_count()
    common = ("--dataset", "b77", "--schema", str(store["schema"]), "--no-progress")
    again = run_cli("run", *common, "--provider", "cloudflare:clef-flash", "--json", db=store["db"], env=store["env"])
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)["runs"][0]
    assert emu.request_count() == before  # every answer came from the cache
    assert summary["this_session"]["cache_hits"] > 0 and summary["emulated"] is True
    con = connect(store["db"], read_only=True)
    try:
        assert get_run(con, summary["run_id"])["emulated"] is True
    finally:
        con.close()
