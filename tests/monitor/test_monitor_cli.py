"""`workbench monitor` end to end on a synthetic policy: the alarm after an error shift (exit 1), no alarm
without one (exit 0), outcome formats, torn lines, model mismatches, windows, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import SHIFT_AT, replay, shift_scenario


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> dict:
    return shift_scenario(tmp_path_factory.mktemp("monitor"))


def _monitor(s, *args: str, outcomes: str | None = "shifted.jsonl", decisions: str = "decisions.jsonl"):
    cmd = ["monitor", "--policy", str(s["policy"]), "--decisions", str(s["tmp"] / decisions)]
    if outcomes:
        cmd += ["--outcomes", str(s["tmp"] / outcomes)]
    return run_cli(*cmd, *args)


def test_the_alarm_fires_after_the_shift_and_exits_1(synth):
    md = synth["tmp"] / "out" / "monitor.md"
    r = _monitor(synth, "--window", "6h", "--json", "--markdown", str(md))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["alarm"] is True and len(doc["reasons"]) == 1 and "above α=0.05" in doc["reasons"][0]
    at = doc["first_alarm_at"]
    assert (
        at["question"] == "intent"
        and at["decision_index"] >= SHIFT_AT
        and at["decision_id"] == f"d{at['decision_index']:06d}"
    )
    assert at["time"].startswith("2026-11-0")
    wins = doc["windows"]
    # windows before the shift show no alarm, the last ones do; the alarm state never switches back off
    flags = [w["alarm"] for w in wins]
    assert flags[0] is False and flags[-1] is True and flags == sorted(flags)
    for w in wins:
        if w["last_decision"] < SHIFT_AT:
            assert w["n_overrides"] == 0
    late = [w for w in wins if w["first_decision"] >= SHIFT_AT and w["n_known"]]
    assert late and all(w["error_low"] <= w["error"] <= w["error_high"] for w in late)
    assert sum(w["n_overrides"] for w in late) > 0 and all(w["override_rate"] is not None for w in late)
    seq = doc["questions"]["intent"]["sequence"]
    assert seq["fired"] and seq["max_e_value"] >= 10 and seq["lower_bound"] > 0.05
    text = md.read_text()
    assert "Policy monitor: ALARM" in text and "🔔" in text and "| intent |" in text


def test_without_a_shift_there_is_no_alarm(synth):
    r = _monitor(synth, "--window", "6h", "--json", outcomes="clean.jsonl")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["alarm"] is False and doc["reasons"] == [] and doc["first_alarm_at"] is None
    assert not any(w["alarm"] for w in doc["windows"])


def test_outcome_files_in_csv_and_parquet_give_the_same_figures(synth):
    docs = [
        json.loads(_monitor(synth, "--window", "500", "--json", outcomes=f).stdout)
        for f in ("shifted.jsonl", "shifted.csv", "shifted.parquet")
    ]
    for d in docs[1:]:
        assert d["windows"] == docs[0]["windows"] and d["first_alarm_at"] == docs[0]["first_alarm_at"]
    wins = docs[0]["windows"]
    # a count window: 500 decisions each, the last one the remainder
    assert [w["traffic"] for w in wins[:-1]] == [500] * (len(wins) - 1) and sum(w["traffic"] for w in wins) == synth[
        "n"
    ]


def test_without_outcomes_the_traffic_figures_are_still_there(synth):
    r = _monitor(synth, "--window", "1D", "--json", outcomes=None)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert (
        doc["questions"]["intent"]["overall"]["n_known"] == 0
        and doc["questions"]["intent"]["recertification"]["available"] is False
    )
    assert all(w["error"] is None and w["coverage"] is not None for w in doc["windows"])


def test_a_torn_last_line_is_skipped_with_a_warning(synth):
    import warnings

    from workbench_runtime.decision_log import DecisionLog, read_decision_log

    torn = synth["tmp"] / "torn.jsonl"
    data = (synth["tmp"] / "decisions.jsonl").read_bytes()
    torn.write_bytes(data + b'{"decision_id": "d999999", "time": "2026-11-0')  # crash mid-line
    r = _monitor(synth, "--json", decisions="torn.jsonl")
    assert r.returncode == 1
    assert "skipped 1 line(s)" in r.stderr
    assert json.loads(r.stdout)["inputs"]["n_records"] == synth["n"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(read_decision_log(torn)) == synth["n"]
    assert any("torn" in str(w.message) for w in caught)
    # reopening the log for appending ends the torn line first: the next record stays readable
    from workbench.policy.runtime import Policy

    with DecisionLog(torn) as log:
        Policy.load(synth["policy"]).decide(synth["responses"][0], decision_id="after-crash", log=log)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        recs = read_decision_log(torn)
    assert recs[-1]["decision_id"] == "after-crash" and len(recs) == synth["n"] + 1


def test_decisions_of_another_model_are_counted_as_mismatches(synth, tmp_path):
    from workbench.policy.runtime import Policy

    responses = [
        dict(r, model="other-model") if i % 4 == 0 and "model" in r else r
        for i, r in enumerate(synth["responses"][:800])
    ]
    replay(Policy.load(synth["policy"]), responses, tmp_path / "mixed.jsonl")
    r = run_cli(
        "monitor",
        "--policy",
        str(synth["policy"]),
        "--decisions",
        str(tmp_path / "mixed.jsonl"),
        "--window",
        "400",
        "--json",
    )
    doc = json.loads(r.stdout)
    share = sum(1 for x in responses if x.get("model") == "other-model") / len(responses)
    total = sum(w["model_mismatch_share"] * w["traffic"] for w in doc["windows"]) / sum(
        w["traffic"] for w in doc["windows"]
    )
    assert total == pytest.approx(share)
    assert all(w["schema_mismatch_share"] == 0 for w in doc["windows"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--decisions", "missing.jsonl"], "missing.jsonl: no such file"),
        (["--decisions", "decisions.jsonl", "--window", "fortnight"], "--window 'fortnight' is neither"),
        (["--decisions", "decisions.jsonl", "--outcomes", "bad.csv"], "needs columns decision_id and outcome"),
        (["--decisions", "decisions.jsonl", "--alpha", "2"], "--alpha 2.0 must be between 0 and 1"),
    ],
)
def test_bad_input_exits_2_with_one_line(synth, args, needle):
    (synth["tmp"] / "bad.csv").write_text("id,label\n1,a\n")
    r = run_cli(
        "monitor",
        "--policy",
        str(synth["policy"]),
        *[
            a
            if a.startswith("--") or a[0].isdigit()
            else str(synth["tmp"] / a)
            if a.endswith((".jsonl", ".csv"))
            else a
            for a in args
        ],
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_a_log_of_another_policy_is_refused(synth, b77_policy_like=None):
    other = Path(synth["tmp"]) / "other.jsonl"
    rec = json.loads((synth["tmp"] / "decisions.jsonl").read_text().splitlines()[0])
    rec["policy_hash"] = "sha256:" + "0" * 64
    other.write_text(json.dumps(rec) + "\n")
    r = run_cli("monitor", "--policy", str(synth["policy"]), "--decisions", str(other))
    assert r.returncode == 2 and "was made by policy" in r.stderr
