"""Acceptance 2: the BANKING77 test split replayed through the runtime with a decision log, plus its
outcomes, gives in `workbench monitor --json` the coverage and accepted-error of `workbench policy apply`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import replay, responses_from_answers, write_outcomes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def b77_replay(b77_store):
    from workbench.policy.runtime import Policy
    from workbench.store.db import connect
    from workbench.store.runs import get_run, load_answers

    con = connect(b77_store["db"], read_only=True)
    ans = load_answers(con, b77_store["run_id"], "intent", ["test"])
    model = get_run(con, b77_store["run_id"])["model"]
    con.close()
    ans = ans.select(ans.labels >= 0)
    # BANKING77's test file is sorted by intent (77 blocks of 40). Replayed in that order, traffic would arrive
    # one intent at a time, and the intents whose accepted error is 15-19% would be a real (and rightly alarmed)
    # shift of the traffic mix. Production traffic drawn like the calibration split arrives in random order.
    ans = ans.select(np.random.default_rng(0).permutation(len(ans.labels)))
    tmp = b77_store["tmp"]
    responses = responses_from_answers(ans.probs, ans.option_ids, "intent", model)
    (tmp / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses))
    policy = Policy.load(b77_store["policy"])
    replay(policy, responses, tmp / "decisions.jsonl")
    labels = [ans.option_ids[j] for j in ans.labels]
    write_outcomes(
        tmp / "outcomes.jsonl",
        [{"decision_id": f"d{i:06d}", "question": "intent", "outcome": y} for i, y in enumerate(labels)],
    )
    return {**b77_store, "labels": labels, "n": len(labels), "file_order": np.argsort(ans.item_ids, kind="stable")}


def test_monitor_equals_policy_apply_on_the_test_split(b77_replay):
    tmp = b77_replay["tmp"]
    applied = json.loads(
        run_cli(
            "policy",
            "apply",
            str(b77_replay["policy"]),
            "--answers",
            str(tmp / "responses.jsonl"),
            "--json",
            check=True,
        ).stdout
    )
    rows = applied["decisions"]
    accepted = np.array([r["intent"]["action"] == "accept" for r in rows])
    wrong = np.array([r["intent"]["option"] != y for r, y in zip(rows, b77_replay["labels"])]) & accepted
    want_cov, want_err = accepted.mean(), wrong.sum() / accepted.sum()

    r = run_cli(
        "monitor",
        "--policy",
        str(b77_replay["policy"]),
        "--decisions",
        str(tmp / "decisions.jsonl"),
        "--outcomes",
        str(tmp / "outcomes.jsonl"),
        "--window",
        "1D",
        "--json",
    )
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"alarm", "first_alarm_at", "windows", "reasons"}
    ov = doc["questions"]["intent"]["overall"]
    assert ov["traffic"] == b77_replay["n"] == len(rows)
    assert ov["n_accepted"] == int(accepted.sum()) == applied["counts"]["intent"]["accept"]
    assert ov["coverage"] == pytest.approx(want_cov, abs=1e-12)
    assert ov["n_known"] == int(accepted.sum()) and ov["n_errors"] == int(wrong.sum())
    assert ov["error"] == pytest.approx(want_err, abs=1e-12)
    # per-window figures add up to the same totals (one decision a minute: three days of windows)
    wins = doc["windows"]
    assert len(wins) == 3 and sum(w["traffic"] for w in wins) == ov["traffic"]
    assert sum(w["n_accepted"] for w in wins) == ov["n_accepted"] and sum(w["n_errors"] for w in wins) == ov["n_errors"]
    # the policy keeps its promise on its own test split: no alarm, exit 0
    assert r.returncode == 0 and doc["alarm"] is False and doc["first_alarm_at"] is None
    # the same decisions and outcomes in the file's intent-sorted order are a shifting traffic mix: the alarm fires
    from tests.monitor.alarm_reference import error_rate_alarm

    q = doc["questions"]["intent"]
    by_intent = b77_replay["file_order"]
    assert error_rate_alarm(wrong[by_intent][accepted[by_intent]], q["alpha"], q["delta"], with_bound=False).fired
    # the test split is drawn like the calibration split: no large p_top/margin drift
    for w in wins:
        assert w["drift"]["p_top"]["psi"] < 0.25 and w["drift"]["margin"]["psi"] < 0.25
    # and with the fresh outcomes, a recertification hint from choose_thresholds
    rc = doc["questions"]["intent"]["recertification"]
    assert rc["available"] and rc["n_outcomes"] == b77_replay["n"] and rc["rule"]["kind"] == "top_margin"
