"""`workbench run` with local providers, `runs list`, `export`, Ctrl-C, through the real console entry point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from workbench.cli.run import parse_rate
from workbench.emulator import run_emulator
from workbench.errors import WorkbenchError
from workbench.store.db import connect
from workbench.store.runs import load_answers

from .conftest import BANKING_DIR, ROOT, banking_schema

TOKEN = "cli-test-token-55aa66bb77cc"


def cli(db, *args, env=None, timeout=600):
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), *args]
    return subprocess.run(
        cmd, env={**os.environ, **(env or {})}, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def schema_file(tmp_path):
    p = tmp_path / "banking.yaml"
    p.write_text(yaml.safe_dump(banking_schema().to_file_dict(), sort_keys=False))
    return p


def test_local_providers_answer_every_item_and_export_round_trips(tmp_path, banking_db, schema_file):
    db, name = banking_db
    rules = ROOT / "experiments" / "rules" / "banking77.yaml"
    res = cli(
        db,
        "run",
        "--dataset",
        name,
        "--schema",
        str(schema_file),
        "--provider",
        "baseline:tfidf-logreg",
        "--provider",
        f"rules:{rules}",
        "--provider",
        "local:minilm-zeroshot",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    con = connect(db, read_only=True)
    n = con.execute("SELECT count(*) FROM items WHERE split = 'test'").fetchone()[0]
    con.close()
    assert [r["provider"] for r in runs] == ["baseline:tfidf-logreg", f"rules:{rules}", "local:minilm-zeroshot"]
    for r in runs:
        assert r["status"] == "done" and r["answered"] == n and r["failed"] == 0, r
    listed = json.loads(cli(db, "runs", "list", "--json").stdout)["runs"]
    assert {r["run_id"] for r in listed} >= {r["run_id"] for r in runs}

    gold = pd.concat([pd.read_csv(BANKING_DIR / "test.csv").iloc[::10]]).reset_index(drop=True)
    run_id = runs[0]["run_id"]
    frames = {}
    for fmt in ("parquet", "csv", "jsonl"):
        out = tmp_path / f"export.{fmt}"
        r = cli(db, "export", run_id, "--format", fmt, "--out", str(out), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["rows"] == n
        df = {"parquet": pd.read_parquet, "csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True)}[fmt](out)
        if fmt == "csv":
            df["probs"] = df["probs"].map(json.loads)
        frames[fmt] = df.sort_values("item_id").reset_index(drop=True)
        stored = (
            pq.read_schema(out).metadata[b"workbench.option_ids"]
            if fmt == "parquet"
            else json.dumps(json.loads((tmp_path / f"export.{fmt}.options.json").read_text())["workbench.option_ids"])
        )
        assert json.loads(stored) == {"intent": list(banking_schema().questions["intent"].criteria)}
    con = connect(db, read_only=True)
    ra = load_answers(con, run_id, "intent")
    for df in frames.values():
        assert len(df) == n and set(df.columns) >= {
            "item_id",
            "split",
            "label",
            "probs",
            "provider",
            "model",
            "latency_ms",
            "input_tokens",
            "cost_usd",
            "failure_kind",
        }
        np.testing.assert_allclose(np.vstack(df["probs"].to_numpy()), ra.probs, atol=1e-12)
        assert "option_ids" not in df.columns  # stored once: Parquet metadata, or the side-car of CSV/JSONL
        # the exported label is the imported category, item by item (ids follow file order)
        assert sorted(df["label"].tolist()) == sorted(gold["category"].tolist())
        assert (df["provider"] == "baseline:tfidf-logreg").all() and df["failure_kind"].isna().all()


def test_ctrl_c_commits_what_was_answered_and_resume_finishes(tmp_path, banking_db, schema_file):
    db, name = banking_db
    with run_emulator(port=0, require_token=TOKEN, latency_ms=300.0) as emu:
        # slow enough that Ctrl-C at 100 answers lands long before the 308th (at 60 ms a loaded CI machine
        # let the run finish first)
        env = {
            "CLOUDFLARE_API_KEY": TOKEN,
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        }
        cmd = [
            sys.executable,
            "-c",
            # Ctrl-C at a terminal: SIGINT handled as Python does by default, even when this test itself was
            # started with SIGINT ignored (a job a non-interactive shell put in the background: every child
            # inherits SIG_IGN and Python then never raises KeyboardInterrupt)
            "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from workbench.cli import main; main()",
            "--db",
            str(db),
            "run",
            "--dataset",
            name,
            "--schema",
            str(schema_file),
            "--provider",
            "cloudflare:clef-flash",
            "--concurrency",
            "4",
        ]
        proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.time() + 120
        while emu.stats["answered"] < 100 and time.time() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "--resume" in err
        con = connect(db)
        run_id, status = con.execute("SELECT run_id, status FROM runs").fetchone()
        answered = con.execute(
            "SELECT count(*) FROM answers WHERE run_id = ? AND probs IS NOT NULL", [run_id]
        ).fetchone()[0]
        con.close()
        assert status == "interrupted" and answered >= 90  # everything answered before Ctrl-C was committed
        sent_before = emu.request_count()
        emu.set_faults(latency_ms=0.0)
        res = cli(db, "run", "--resume", run_id, "--json", env=env)
        assert res.returncode == 0, res.stderr
        summary = json.loads(res.stdout)["runs"][0]  # one shape: {"run_ids", "runs", "experiment"}
        assert summary["status"] == "done" and summary["failed"] == 0 and summary["answered"] == 308
        assert emu.request_count() - sent_before <= 308 - answered


def test_usage_errors_are_one_line_and_exit_2(tmp_path, banking_db, schema_file):
    db, name = banking_db
    res = cli(db, "run", "--dataset", name)
    assert res.returncode == 2 and "missing --schema, --provider" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = cli(db, "run", "--dataset", name, "--schema", str(schema_file), "--provider", "nonsense")
    assert res.returncode == 2 and "prefix" in res.stderr
    res = cli(db, "run", "--resume", "run-doesnotexist")
    assert res.returncode == 2 and "does not exist" in res.stderr
    con = connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # nothing half-created
    con.close()


def test_parse_rate():
    assert parse_rate("20") == 20 and parse_rate("20/s") == 20 and parse_rate("600/min") == pytest.approx(10)
    for bad in ("fast", "-1", "0/s", "3/fortnight"):
        with pytest.raises(WorkbenchError):
            parse_rate(bad)
