"""`workbench run` exit codes tell a script what happened (issue 14 item 13), against the emulator's
fault injection over loopback: 0 all answered, 3 some failed, 4 stopped on 401/quota, 5 all failed,
6 --max-cost reached."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from workbench.emulator import run_emulator
from workbench.runner import outcome
from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec

TOKEN = "exit-code-token-0123456789"
OPTIONS = ["card_arrival", "lost_card", "refund", "other"]
SCHEMA = DecisionSchema.from_dict(
    {"questions": {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": dict.fromkeys(OPTIONS)}}}
)
N_ITEMS = 24


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    """A store with one 24-item test split, and the schema file."""
    data = tmp_path / "items.csv"
    words = ["where is my card", "I lost my card", "give my money back", "hello there"]
    with data.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"])
        for i in range(N_ITEMS):
            w.writerow([f"i{i:03d}", f"{words[i % 4]} #{i}", OPTIONS[i % 4]])
    db = tmp_path / "wb.duckdb"
    with connect(db) as con:
        import_dataset(con, [data], ImportSpec(name="ds", text_column="text", id_column="id",
                                                labels={"intent": "label"}, split="test"), SCHEMA)  # fmt: skip
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_file_dict()), encoding="utf-8")
    return db, schema_file


def run_against(store, *, key: str = TOKEN, extra: tuple[str, ...] = (), **faults):
    db, schema_file = store
    with run_emulator(port=0, require_token=TOKEN, **faults) as emu:
        env = {"CLOUDFLARE_API_KEY": key, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
               "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}  # fmt: skip
        proc = run_cli("run", "--dataset", "ds", "--schema", str(schema_file), "--provider", "cloudflare:clef-flash",
                       "--concurrency", "4", "--no-progress", "--json", *extra, db=db, env=env, timeout=300)  # fmt: skip
    summary = json.loads(proc.stdout)["runs"][0] if proc.stdout.strip() else None
    return proc, summary


def test_all_answered_exits_0(store):
    proc, s = run_against(store)
    assert proc.returncode == 0, proc.stderr
    assert (s["answered"], s["failed"]) == (N_ITEMS, 0)


def test_some_failed_exits_3(store):
    proc, s = run_against(store, malformed=0.3, seed=3)
    assert proc.returncode == outcome.EXIT_SOME_FAILED, proc.stderr
    assert s["answered"] > 0 and s["failed"] > 0 and s["status"] == "done"


def test_401_stops_the_run_and_exits_4(store):
    proc, s = run_against(store, key="wrong-key-0000000000")
    assert proc.returncode == outcome.EXIT_STOPPED, proc.stderr
    assert s["status"] == "stopped" and s["stop_kind"] == "authentication"
    assert s["failed_by_kind"].get("not_asked", 0) > 0 and s["answered"] == 0


def test_quota_429_stops_the_run_and_exits_4(store):
    proc, s = run_against(store, quota=1.0)
    assert proc.returncode == outcome.EXIT_STOPPED, proc.stderr
    assert s["stop_kind"] == "quota" and s["failed_by_kind"].get("not_asked", 0) > N_ITEMS // 2


def test_every_item_failed_exits_5(store):
    proc, s = run_against(store, malformed=1.0)
    assert proc.returncode == outcome.EXIT_ALL_FAILED, proc.stderr
    assert s["answered"] == 0 and s["failed"] == N_ITEMS and s["status"] == "done"


def test_budget_stop_exits_6(store):
    proc, s = run_against(store, extra=("--max-cost", "0.0000001"))
    assert proc.returncode == outcome.EXIT_BUDGET, proc.stderr
    assert s["stop_kind"] == "budget"


@pytest.mark.parametrize(
    "summaries, code",
    [
        ([{"status": "done", "answered": 5, "failed": 0}], 0),
        ([{"status": "done", "answered": 5, "failed": 0}, {"status": "done", "answered": 4, "failed": 1}], 3),
        ([{"status": "stopped", "stop_kind": "budget", "answered": 0, "failed": 9}], 6),
        ([{"status": "done", "answered": 0, "failed": 9}, {"status": "stopped", "stop_kind": "quota"}], 4),
        ([{"status": "done", "answered": 0, "failed": 9}, {"status": "done", "answered": 3, "failed": 1}], 5),
        ([{"status": "stopped", "stop_kind": "quota"}, {"status": "incomplete", "answered": 8, "missing": 2}], 7),
    ],
)
def test_most_severe_outcome_wins(summaries, code):
    assert outcome.exit_code(summaries) == code


def test_codes_are_documented_in_help_and_readme():
    codes = {c for c in vars(outcome).values() if isinstance(c, int)} | {2, 130}
    helptext = run_cli("run", "--help").stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for code in codes:
        assert re.search(rf"\b{code} ", " ".join(helptext.split())), code
        assert f"| {code} |" in readme, code
