"""Shadow report with the shared threshold defaults, the schema-hash restriction, and `shadow rerun`.

Real DuckDB store, the offline TF-IDF provider on SMS spam, the real CLI in a subprocess, and the
workbench emulator over loopback HTTP as the new challenger of `shadow rerun`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front-shadow")
    df = pd.read_csv(ROOT / "datasets" / "sms_spam" / "sms_spam.csv", dtype=str, keep_default_na=False).iloc[:1500]
    df["split"] = ["train"] * 700 + ["calibration"] * 500 + ["test"] * 300
    df.to_csv(tmp / "spam.csv", index=False)
    db = tmp / "wb.duckdb"
    con = wb.connect(db)
    wb.import_dataset(
        con,
        tmp / "spam.csv",
        name="spam",
        text_column="text",
        id_column="id",
        split_column="split",
        labels={"spam": "label"},
        positive={"spam": "spam"},
    )
    schema = wb.load_schema(wb.bundled_schema_file("sms_spam"))
    champion = wb.run(con, "spam", schema, "baseline:tfidf-logreg", name="champion")
    challenger = wb.calibrate(con, champion, "platt")["run_id"]
    wb.replay_shadow(con, "s", champion, challenger, splits=["test"])
    # the same model asked with other instructions: another schema hash
    other = schema.model_copy(update={"description": "asked differently"})
    other.questions["spam"] = other.questions["spam"].model_copy(update={"instructions": "Spam? Answer yes or no."})
    reworded = wb.run(con, "spam", other, "baseline:tfidf-logreg", name="reworded")
    wb.replay_shadow(con, "reworded", champion, reworded, splits=["test"])
    policy_file = tmp / "champion-policy.json"
    wb.build_policy(con, champion, "spam", out=policy_file)
    con.close()
    return {"db": db, "tmp": tmp, "champion": champion, "challenger": challenger, "policy": policy_file}


def test_report_without_rules_uses_the_certified_policies_on_every_surface(store):
    db = store["db"]
    cli = json.loads(run_cli("shadow", "report", "s", "--n-boot", "200", "--json", db=db, check=True).stdout)
    con = wb.connect(db, read_only=True)
    try:
        api = wb.shadow_report(con, "s", n_boot=200).to_dict()
        chosen = {
            side: wb.choose_thresholds(con, store[side], "spam").rule_dict() for side in ("champion", "challenger")
        }
    finally:
        con.close()
    assert cli["verdict"] == api["verdict"] and cli["questions"] == api["questions"]
    assert cli["policies"]["settings"] == wb.ThresholdOptions().settings()
    for side in ("champion", "challenger"):
        assert cli["policies"][side]["source"] == f"certified on {store[side]}"
        assert cli["policies"][side]["settings"]["alpha"] == 0.05
    q = cli["questions"][0]
    assert q["decisions"] == {"champion": "policy", "challenger": "policy"}
    assert q["review_load"] is not None and q["error"] is not None  # no 'None' figures any more
    # the certified rule is the one `workbench thresholds` chooses for the run (same defaults)
    assert chosen["champion"]["tau_yes"] is not None
    text = run_cli("shadow", "report", "s", "--n-boot", "200", db=db, check=True).stdout
    assert f"champion routing: certified on {store['champion']}" in text and "α = 0.05, δ = 0.1" in text


def test_a_policy_for_another_schema_accepts_nothing(store):
    db = store["db"]
    # the champion's policy applies to its own schema: accepted on the 's' session...
    same = json.loads(
        run_cli(
            "shadow", "report", "s", "--challenger-policy", str(store["policy"]), "--n-boot", "100", "--json", db=db
        ).stdout
    )
    assert "schema_refusals" not in same["questions"][0]
    assert same["questions"][0]["review_load"]["challenger"] < 1.0
    # ... but the reworded challenger's requests were sent with another schema: the runtime refuses them
    doc = json.loads(
        run_cli(
            "shadow",
            "report",
            "reworded",
            "--challenger-policy",
            str(store["policy"]),
            "--n-boot",
            "100",
            "--json",
            db=db,
            check=True,
        ).stdout
    )
    q = doc["questions"][0]
    assert "schema hash mismatch" in q["schema_refusals"]["challenger"]
    assert "champion" not in q["schema_refusals"]
    assert q["review_load"]["challenger"] == 1.0  # nothing auto-accepted
    assert doc["policies"]["challenger"]["valid_schema_hashes"]


def test_rerun_runs_a_new_challenger_over_the_logged_states(store):
    db = store["db"]
    with wb.run_emulator(port=0) as emu:
        env = {
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
            "CLOUDFLARE_API_KEY": "dummy-key",
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
        }
        r = run_cli("shadow", "rerun", "s", "--challenger", "cloudflare:clef-flash", "--json", db=db, env=env)
        n_emulated = emu.request_count()
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["shadow"] == "s+clef-flash" and s["n_requests"] == 300 and s["n_outcomes"] == 300
    assert n_emulated >= 300  # every logged state went over HTTP to the (emulated) new model
    con = wb.connect(db, read_only=True)
    try:
        from workbench.store.shadow import load_shadow

        old, new = load_shadow(con, "s", "spam"), load_shadow(con, "s+clef-flash", "spam")
        run = wb.load_answers(con, s["run_id"], "spam")
        sessions = wb.list_runs(con)
    finally:
        con.close()
    # the champion side is the session's, as logged; the challenger side is the new run's answers
    o, n = np.argsort(old.item_ids.astype(str)), np.argsort(new.item_ids.astype(str))
    assert (old.item_ids[o] == new.item_ids[n]).all()
    np.testing.assert_array_equal(old.champion_probs[o], new.champion_probs[n])
    np.testing.assert_array_equal(old.outcome[o], new.outcome[n])
    r_ord = np.argsort(run.item_ids.astype(str))
    assert (run.item_ids[r_ord] == new.item_ids[n]).all()
    np.testing.assert_allclose(new.challenger_probs[n], run.probs[r_ord])
    assert s["run_id"] in set(sessions["run_id"])
    # and the new session reports (the champion certified on its run, the challenger with a rule)
    rep = run_cli(
        "shadow", "report", "s+clef-flash", "--challenger-rule", "tau=0.9", "--n-boot", "100", "--json", db=db
    )
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["verdict"] in ("PROMOTE", "HOLD", "REJECT")
