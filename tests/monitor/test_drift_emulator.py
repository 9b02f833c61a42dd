"""Drift scenario with the emulator: a model served over loopback HTTP changes its answer distribution at a
known point (the lexical answerer's temperature rises, so answers get flatter); decisions are made by the
runtime from the real HTTP responses and logged. `workbench monitor` shows the p_top/margin PSI jump in the
windows after the change and stay small before it, and the --drift-alarm option turns that into an alarm."""

from __future__ import annotations

import csv
import json
import random
from datetime import timedelta

import httpx
import pytest

from tests.conftest import ROOT, dataset_path, run_cli
from tests.monitor.conftest import T0

pytestmark = pytest.mark.slow
N_STREAM, CHANGE_AT, WINDOW = 1800, 900, 300


def _subset(src, dst, n):
    with open(src, newline="") as fh:
        rows = list(csv.DictReader(fh))
    random.Random(0).shuffle(rows)  # the files are sorted by intent; traffic arrives mixed
    rows = rows[:n]
    with open(dst, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_a_change_of_answer_distribution_shows_as_drift(tmp_path):
    from workbench_runtime.decision_log import DecisionLog

    from workbench.emulator.answering import LexicalAnswerer
    from workbench.emulator.server import run_emulator
    from workbench.policy.runtime import Policy

    _subset(dataset_path("banking77", "train.csv"), tmp_path / "train.csv", 2400)
    _subset(dataset_path("banking77", "test.csv"), tmp_path / "test.csv", N_STREAM)
    db = tmp_path / "wb.duckdb"
    schema_file = ROOT / "experiments" / "schemas" / "banking77.yaml"
    run_cli(
        "datasets",
        "import",
        str(tmp_path / "train.csv"),
        str(tmp_path / "test.csv"),
        "--name",
        "b77s",
        "--text-column",
        "text",
        "--label",
        "intent=category",
        "--calibration-fraction",
        "0.5",
        "--seed",
        "0",
        db=db,
        check=True,
    )
    answerer = LexicalAnswerer(temperature=0.35)
    with run_emulator(port=0, answerer=answerer) as emu:
        url = f"{emu.base_url}/v1/systemone"
        out = run_cli(
            "run",
            "--dataset",
            "b77s",
            "--schema",
            str(schema_file),
            "--split",
            "calibration",
            "--provider",
            f"systemone:{url}?model=clef-flash",
            "--no-progress",
            "--json",
            db=db,
            check=True,
        )
        run_id = json.loads(out.stdout)["runs"][0]["run_id"]
        policy_file = tmp_path / "policy.json"
        run_cli(
            "policy",
            "export",
            run_id,
            "-q",
            "intent",
            "--max-error",
            "0.3",
            "--delta",
            "0.1",
            "--out",
            str(policy_file),
            db=db,
            check=True,
        )
        policy = Policy.load(policy_file)
        assert policy.model.questions["intent"].reference["n"] > 1000
        questions = policy.model.decision_schema.questions  # the wire form the run sent
        with open(tmp_path / "test.csv", newline="") as fh:
            texts = [r["text"] for r in csv.DictReader(fh)]
        times = iter(T0 + timedelta(minutes=i) for i in range(len(texts)))
        with (
            httpx.Client(timeout=30) as client,
            DecisionLog(tmp_path / "decisions.jsonl", clock=lambda: next(times)) as log,
        ):
            for i, text in enumerate(texts):
                if i == CHANGE_AT:
                    answerer.temperature = 1.2  # the served model changes: flatter answers from here on
                resp = client.post(url, json={"model": "clef-flash", "state": text, "questions": questions}).json()
                policy.decide(resp, schema_hash=policy.model.decision_schema.hash, decision_id=f"e{i:05d}", log=log)
            assert log.n_records == len(texts) and log.n_errors == 0
    r = run_cli(
        "monitor",
        "--policy",
        str(policy_file),
        "--decisions",
        str(tmp_path / "decisions.jsonl"),
        "--window",
        str(WINDOW),
        "--json",
    )
    assert r.returncode == 0, r.stderr  # no outcomes: drift alone does not raise the alarm by default
    wins = json.loads(r.stdout)["windows"]
    before = [w for w in wins if w["last_decision"] < CHANGE_AT]
    after = [w for w in wins if w["first_decision"] >= CHANGE_AT]
    assert len(before) == len(after) == 3
    psi = lambda ws, k: [w["drift"][k]["psi"] for w in ws]  # noqa: E731
    print(f"\nPSI p_top before the change {psi(before, 'p_top')}, after {psi(after, 'p_top')}")
    assert max(psi(before, "p_top")) < 0.25 < min(psi(after, "p_top"))
    assert max(psi(before, "margin")) < 0.25 < min(psi(after, "margin"))
    assert min(w["coverage"] for w in before) > max(w["coverage"] for w in after)  # flatter answers: fewer accepted
    assert all(w["model_mismatch_share"] == 0 and w["schema_mismatch_share"] == 0 for w in wins)
    r2 = run_cli(
        "monitor",
        "--policy",
        str(policy_file),
        "--decisions",
        str(tmp_path / "decisions.jsonl"),
        "--window",
        str(WINDOW),
        "--drift-alarm",
        "0.25",
        "--json",
    )
    doc = json.loads(r2.stdout)
    assert r2.returncode == 1 and doc["alarm"] and "drift in window" in doc["reasons"][0]
