"""Shadow replay (two stored runs) and log import (a production log file) give the same report.

The log is written here independently of the shadow code: System One responses rebuilt from the
stored answers, the champion's action taken by the policy runtime (``Policy.decide``, one response at
a time, as production code would), and the eventual outcomes.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from workbench.policy import Policy
from workbench.shadow.policies import load_side_policy
from workbench.shadow.report import shadow_report
from workbench.store.shadow import import_traffic, replay_runs

from .conftest import OPTIONS, SCHEMA


def _response(model: str, intent: list[float], urgent: list[float]) -> dict:
    probs = dict(zip(OPTIONS, intent))
    return {
        "model": model,
        "answers": {
            "intent": {"type": "choice", "choice": max(probs, key=probs.get), "probabilities": probs},
            "urgent": {"type": "noul", "noul": urgent[0]},
        },
        "usage": {"input_tokens": 100, "output_tokens": 0},
    }


def _traffic(world) -> list[dict]:
    con = world.con
    ans = con.execute(
        """SELECT a.run_id, a.item_id, a.question, a.probs, a.model, a.latency_ms, a.cost_usd
           FROM answers a JOIN items i ON i.item_id = a.item_id AND i.dataset = 'tickets'
           WHERE i.split = 'test' AND a.run_id IN (?, ?) ORDER BY a.item_id""",
        [world.champion_run, world.challenger_run],
    ).df()
    gold = dict(
        con.execute("SELECT item_id || '/' || question, option_id FROM labels WHERE dataset = 'tickets'").fetchall()
    )
    policy = Policy.load(world.champion_policy)
    rows = []
    for item_id, g in ans.groupby("item_id", sort=True):
        side = {}
        for run_id, name in ((world.champion_run, "champion"), (world.challenger_run, "challenger")):
            s = g[g.run_id == run_id].set_index("question")
            side[name] = {
                "response": _response(s.model.iloc[0], list(s.loc["intent", "probs"]), list(s.loc["urgent", "probs"])),
                "latency_ms": float(s.latency_ms.max()),
                "cost_usd": float(s.cost_usd.sum()),
            }
        decision = policy.decide(side["champion"]["response"])
        rows.append(
            {
                "item_id": item_id,
                "state": f"ticket {item_id}",
                "champion": side["champion"]["response"],
                "champion_action": {q: d.action for q, d in decision.items()},
                "challenger": side["challenger"]["response"],
                "champion_latency_ms": side["champion"]["latency_ms"],
                "challenger_latency_ms": side["challenger"]["latency_ms"],
                "champion_cost_usd": side["champion"]["cost_usd"],
                "challenger_cost_usd": side["challenger"]["cost_usd"],
                "outcome": {"intent": gold[f"{item_id}/intent"], "urgent": gold[f"{item_id}/urgent"] == "yes"},
            }
        )
    return rows


def _write_jsonl(rows: list[dict], path) -> None:
    """In the order replay uses for items without an arrival time (documented: md5 of the id)."""
    rows = sorted(rows, key=lambda r: hashlib.md5(r["item_id"].encode()).hexdigest())
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _close(a, b, path="") -> None:
    """Reports equal up to float rounding (the import re-normalises probabilities it parsed)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


def _comparable(report) -> dict:
    d = report.to_dict()
    d.pop("session")
    d.pop("shadow")
    for q in d["questions"]:
        q.pop("decisions")  # where the champion's decisions came from: its policy vs its log
    return d


@pytest.fixture(scope="module")
def policies(world):
    return load_side_policy(world.champion_policy), load_side_policy(world.challenger_policy)


def test_replay_and_log_import_produce_the_same_report(world, policies, tmp_path):
    champ, chall = policies
    replay = replay_runs(
        world.con,
        shadow="replay",
        champion_run=world.champion_run,
        challenger_run=world.challenger_run,
        splits=["test"],
    )
    assert replay["n_requests"] == 450 and replay["n_outcomes"] == 900
    rows = _traffic(world)
    log = tmp_path / "traffic.jsonl"
    _write_jsonl(rows, log)
    imported = import_traffic(world.con, log, shadow="imported", schema=SCHEMA)
    assert imported["n_requests"] == 450 and imported["n_outcomes"] == 900

    a = shadow_report(world.con, "replay", champion_policy=champ, challenger_policy=chall, n_boot=300)
    b = shadow_report(world.con, "imported", champion_policy=champ, challenger_policy=chall, n_boot=300)
    assert a.questions[0]["decisions"]["champion"] == "policy"
    assert b.questions[0]["decisions"]["champion"] == "log+policy"
    _close(_comparable(a), _comparable(b))

    # the figures are real: logged champion actions equal the vectorised policy on every item
    acc_log = np.array([r["champion_action"]["intent"] == "accept" for r in rows])
    d = a.questions[0]["directional"]
    n_chal_only = d["challenger_accepts_where_champion_reviews"]
    assert 0 < n_chal_only < 450 and a.questions[0]["review_load"]["champion"] == pytest.approx(1 - acc_log.mean())
    assert a.questions[0]["error"]["n_known"] == 450
    assert a.verdict in ("PROMOTE", "HOLD", "REJECT") and a.reasons


def test_csv_parquet_and_late_outcomes_import_the_same(world, policies, tmp_path):
    champ, chall = policies
    rows = _traffic(world)
    reference = shadow_report(world.con, "imported", champion_policy=champ, challenger_policy=chall, n_boot=100)
    # CSV: nested values as JSON text; outcomes arrive later in their own file
    rows = sorted(rows, key=lambda r: hashlib.md5(r["item_id"].encode()).hexdigest())
    flat = pd.DataFrame(
        [{**{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items() if k != "outcome"}} for r in rows]
    )
    flat.to_csv(tmp_path / "traffic.csv", index=False)
    outcomes = pd.DataFrame([{"item_id": r["item_id"], "outcome": json.dumps(r["outcome"])} for r in rows])
    outcomes.to_csv(tmp_path / "outcomes.csv", index=False)
    s = import_traffic(world.con, tmp_path / "traffic.csv", shadow="csv", schema=SCHEMA)
    assert s["n_outcomes"] == 0
    before = shadow_report(world.con, "csv", champion_policy=champ, challenger_policy=chall, n_boot=100)
    assert before.questions[0]["error"]["n_known"] == 0
    late = import_traffic(world.con, tmp_path / "outcomes.csv", shadow="csv")
    assert late["kind"] == "outcomes" and late["n_outcomes"] == 900
    _close(
        _comparable(reference),
        _comparable(shadow_report(world.con, "csv", champion_policy=champ, challenger_policy=chall, n_boot=100)),
    )
    # Parquet with the JSON columns as text
    flat.assign(outcome=outcomes["outcome"]).to_parquet(tmp_path / "traffic.parquet")
    import_traffic(world.con, tmp_path / "traffic.parquet", shadow="pq", schema=SCHEMA)
    _close(
        _comparable(reference),
        _comparable(shadow_report(world.con, "pq", champion_policy=champ, challenger_policy=chall, n_boot=100)),
    )


def test_shadow_cli_import_report_json(world, tmp_path):
    rows = _traffic(world)
    log = tmp_path / "t.jsonl"
    _write_jsonl(rows, log)
    db = tmp_path / "cli.duckdb"
    run_cli("shadow", "import", str(log), "--name", "prod", "--policy", str(world.champion_policy), db=db, check=True)
    proc = run_cli(
        "shadow",
        "report",
        "prod",
        "--champion-policy",
        str(world.champion_policy),
        "--challenger-policy",
        str(world.challenger_policy),
        "--min-outcomes",
        "50",
        "--max-error-increase",
        "0.05",
        "--n-boot",
        "200",
        "--json",
        db=db,
        check=True,
    )
    doc = json.loads(proc.stdout)
    assert doc["verdict"] in ("PROMOTE", "HOLD", "REJECT") and doc["reasons"]
    assert {g["gate"] for g in doc["gates"]} >= {"failures", "coverage", "error", "drift"}
    assert len(doc["questions"]) == 2 and doc["questions"][0]["flip_matrix"]["options"] == OPTIONS
    # a malformed file fails with one line and exit code 2, the store unchanged
    (tmp_path / "bad.jsonl").write_text('{"champion": {}}\n')
    bad = run_cli(
        "shadow", "import", str(tmp_path / "bad.jsonl"), "--name", "bad", "--policy", str(world.champion_policy), db=db
    )
    assert bad.returncode == 2 and "item_id" in bad.stderr


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_export_then_import_round_trips_a_replayed_session(world, policies, tmp_path, suffix):
    from workbench.store.shadow import export_session

    champ, chall = policies
    if not world.con.execute("SELECT count(*) FROM shadow_sessions WHERE shadow = 'replay'").fetchone()[0]:
        replay_runs(
            world.con,
            shadow="replay",
            champion_run=world.champion_run,
            challenger_run=world.challenger_run,
            splits=["test"],
        )
    out = tmp_path / f"replay{suffix}"
    assert export_session(world.con, "replay", out) == 450
    import_traffic(world.con, out, shadow=f"back{suffix}", schema=SCHEMA)
    a = shadow_report(world.con, "replay", champion_policy=champ, challenger_policy=chall, n_boot=100)
    b = shadow_report(world.con, f"back{suffix}", champion_policy=champ, challenger_policy=chall, n_boot=100)
    _close(_comparable(a), _comparable(b))
