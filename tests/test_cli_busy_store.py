"""Issue 27 §4: commands while a `workbench run` writes the store (real subprocesses, real DuckDB file).

Read-only commands read what was committed (the live file when free, else a snapshot, as the UI
does) and succeed; a writing command stops at once with one short line naming the writer's PID.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import duckdb
import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, run_cli
from tests.runner.conftest import BANKING_DIR, banking_schema
from workbench.emulator import run_emulator

TOKEN = "busy-store-token-0b1c2d3e4f"
ACCOUNT = "00112233445566778899aabbccddeeff"


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """A store with one finished local run, then held by an emulated `workbench run` that never ends
    (the emulator answers after 10 minutes); the run is killed at the end."""
    tmp = tmp_path_factory.mktemp("busy")
    db = tmp / "wb.duckdb"
    for split, every in (("train", 20), ("test", 40)):
        pd.read_csv(BANKING_DIR / f"{split}.csv").iloc[::every].to_csv(tmp / f"{split}.csv", index=False)
    schema = tmp / "banking.yaml"
    schema.write_text(yaml.safe_dump(banking_schema().to_file_dict(), sort_keys=False))
    run_cli(
        *("datasets", "import", str(tmp / "train.csv"), str(tmp / "test.csv"), "--name", "b77"),
        *("--text-column", "text", "--label", "intent=category", "--schema", str(schema)),
        *("--calibration-fraction", "0.3", "--seed", "0"),
        db=db,
        check=True,
    )
    common = ("--dataset", "b77", "--schema", str(schema), "--no-progress")
    local = run_cli("run", *common, "--provider", "baseline:tfidf-logreg", "--json", db=db, check=True)
    run_id = json.loads(local.stdout)["run_ids"][0]
    with run_emulator(port=0, require_token=TOKEN, faults={"latency_ms": 600_000}) as emu:
        env = {
            **os.environ,
            "CLOUDFLARE_API_KEY": TOKEN,
            "CLOUDFLARE_ACCOUNT_ID": ACCOUNT,
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        }
        cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), "run", *common]
        writer = subprocess.Popen(
            [*cmd, "--provider", "cloudflare:clef-flash"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while True:  # until the run holds the file read-write
                assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
                try:
                    duckdb.connect(str(db), read_only=True).close()
                except duckdb.Error as exc:
                    if "lock" in str(exc).lower():
                        break
                assert time.monotonic() < deadline, "the run never opened the store"
                time.sleep(0.2)
            yield {"db": db, "run_id": run_id, "writer": writer, "tmp": tmp}
        finally:
            writer.kill()
            writer.wait(30)


def test_read_only_commands_succeed_while_a_run_writes(busy):
    db, run_id = busy["db"], busy["run_id"]
    commands = [
        ("runs", "list", "--json"),
        ("report", run_id, "--json"),
        ("thresholds", run_id, "-q", "intent", "--json"),
        ("label-issues", run_id, "--json"),
        ("compare", run_id, "--json"),
        ("cascade", "--stage", run_id, "--stage", run_id, "--question", "intent", "--json"),
        ("export", run_id, "--out", str(busy["tmp"] / "answers.parquet"), "--force", "--json"),
    ]
    for args in commands:
        res = run_cli(*args, db=db)
        assert res.returncode == 0, f"{args}: {res.stderr}"
        json.loads(res.stdout)  # one JSON document
        assert "lock" not in res.stderr.lower(), res.stderr
    listed = json.loads(run_cli("runs", "list", "--json", db=db).stdout)["runs"]
    assert run_id in {r["run_id"] for r in listed}
    assert busy["writer"].poll() is None  # the run still writes: nobody took its lock


def test_a_writing_command_prints_one_short_line_naming_the_writer(busy):
    res = run_cli("calibrate", busy["run_id"], db=busy["db"])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line == (
        f"error: {busy['db']} is being written by another process (PID {busy['writer'].pid})"
        " — wait for it or use another --db"
    )
    assert "Conflicting" not in line and "duckdb.org" not in line
    assert busy["writer"].poll() is None
