"""Issue 25, "nothing lost, nothing wrong", for `workbench monitor`.

- an outcome that is not an option of its question is rejected and counted by reason, never scored as an
  error; more than 1% of such lines is exit 2 naming the first bad lines (file:line);
- torn, non-JSON and null-decision_id outcome lines are counted and reported, and a decision record logged
  twice counts once (the duplicates are counted);
- shadow mode (and options outside ``enabled_options``) produces evidence: would-accept coverage, error and
  an alarm on the held-back decisions, labelled shadow;
- ``--drift-alarm`` fills in ``first_alarm_at``;
- the store source (``monitor``) and the engine source (``monitor_on_engine`` on DuckDB) agree on all of it.

Independent figures are computed here from the files themselves (pandas/json), not from the monitor's code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.close import assert_tree_close
from tests.conftest import run_cli
from tests.monitor.conftest import SHIFT_AT, replay, shift_scenario


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> dict:
    return shift_scenario(tmp_path_factory.mktemp("nothing_lost"))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _cli(s: dict, *args: str, policy: Path | None = None, decisions: str = "decisions.jsonl", outcomes=None):
    cmd = ["monitor", "--policy", str(policy or s["policy"]), "--decisions", str(s["tmp"] / decisions)]
    for o in outcomes or []:
        cmd += ["--outcomes", str(o)]
    return run_cli(*cmd, *args)


def _both_sources(policy: Path, decisions: list, outcomes: list, **kw) -> dict:
    """The report of the store source, checked equal to the engine source's (DuckDB), as dicts."""
    from workbench.engines.monitoring import monitor_on_engine
    from workbench.monitor.report import MonitorOptions, monitor

    opts = MonitorOptions(**{"window": "500", **kw})
    ref = monitor(policy, decisions, outcomes, opts).to_dict()
    got = json.loads(json.dumps(monitor_on_engine(policy, decisions, outcomes, opts, engine="duckdb").to_dict()))
    ref = json.loads(json.dumps(ref))
    for key in ("alarm", "first_alarm_at", "reasons", "policy", "inputs"):
        assert got[key] == ref[key], key
    assert_tree_close(got["windows"], ref["windows"], abs_tol=1e-9)
    for q, r in ref["questions"].items():
        for key in ("overall", "shadow"):
            assert_tree_close(got["questions"][q][key], r[key], abs_tol=1e-9)
        for key in ("sequence", "shadow_sequence"):
            g, w = got["questions"][q][key], r[key]
            assert {k: v for k, v in g.items() if k != "curve"} == {k: v for k, v in w.items() if k != "curve"}
    return ref


# -- outcomes that are not options ------------------------------------------------------------------
def test_a_mis_cased_outcome_file_is_refused_with_exit_2_not_scored_as_errors(synth):
    """The tester's case: every outcome upper-cased made every accepted decision an error, the alarm fired, exit 1."""
    upper = synth["tmp"] / "upper.jsonl"
    _write_lines(
        upper, [json.dumps({**r, "outcome": r["outcome"].upper()}) for r in _rows(synth["tmp"] / "clean.jsonl")]
    )
    r = _cli(synth, "--json", outcomes=[upper])
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == "", r.stderr
    n = synth["n"]
    assert f"{n:,} of {n:,} outcome line(s) (100.0%) are invalid" in lines[0]
    assert f"{upper}:1: outcome" in lines[0] and "is not an option of 'intent' (did you mean" in lines[0]
    assert f"{upper}:2:" in lines[0]


def test_a_few_bad_outcome_lines_are_counted_by_reason_and_never_scored(synth, tmp_path):
    clean = _rows(synth["tmp"] / "clean.jsonl")
    bad = {
        3: json.dumps({**clean[3], "outcome": clean[3]["outcome"] + " "}),  # trailing blank: not an option
        5: json.dumps({**clean[5], "outcome": 3}),
        7: json.dumps({**clean[7], "outcome": [clean[7]["outcome"]]}),
        9: '{"decision_id": "' + clean[9]["decision_id"] + '", "outcome": "lo',  # torn
        11: json.dumps({**clean[11], "decision_id": None}),
        13: "not json at all",
        15: '{"decision_id": "' + clean[15]["decision_id"] + '", "outcome": "x", "outcome": "y"}',
    }
    lines = [bad.get(i, json.dumps(r)) for i, r in enumerate(clean)]
    lines.insert(20, "")  # a blank line: counted apart, not invalid
    mixed = _write_lines(tmp_path / "mixed.jsonl", lines)
    r = _cli(synth, "--json", outcomes=[mixed])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    inp = doc["inputs"]
    assert inp["outcome_lines"] == synth["n"] and inp["outcome_lines_invalid"] == len(bad)
    assert inp["outcome_lines_rejected"] == {
        "not_an_option": 1,
        "outcome_not_a_string": 2,
        "not_json": 2,
        "missing_decision_id": 1,
        "duplicate_key": 1,
    }
    assert inp["outcome_lines_ignored"] == {"blank": 1}
    o3 = clean[3]["outcome"]
    assert inp["outcome_examples"][0] == (
        f"{mixed}:4: outcome {o3 + ' '!r} is not an option of 'intent' (did you mean {o3!r}?)"
    )
    assert [e.split(": ")[0] for e in inp["outcome_examples"]] == [f"{mixed}:{i + 1}" for i in (3, 5, 7, 9, 11)]
    assert any("outcomes: rejected 7 of" in w for w in doc["warnings"]) and "rejected 7 of" in r.stderr
    assert "7 invalid outcome lines rejected" in _cli(synth, outcomes=[mixed]).stdout  # the printed summary
    # never scored: the figures equal those of the clean file without the bad lines' decisions
    without = _write_lines(tmp_path / "without.jsonl", [json.dumps(r) for i, r in enumerate(clean) if i not in bad])
    ref = json.loads(_cli(synth, "--json", outcomes=[without]).stdout)
    assert (
        doc["windows"] == ref["windows"]
        and doc["questions"]["intent"]["overall"] == ref["questions"]["intent"]["overall"]
    )
    # the store and engine sources agree, counts included
    _both_sources(synth["policy"], [synth["tmp"] / "decisions.jsonl"], [mixed])
    # the share is an option: 0 tolerates none
    strict = _cli(synth, "--max-invalid-outcomes", "0", outcomes=[mixed])
    assert strict.returncode == 2 and len(strict.stderr.strip().splitlines()) == 1 and f"{mixed}:4" in strict.stderr


def test_csv_and_parquet_outcomes_are_checked_the_same_way(synth, tmp_path):
    import pandas as pd

    rows = _rows(synth["tmp"] / "clean.jsonl")
    rows[0] = {**rows[0], "outcome": rows[0]["outcome"].upper()}
    df = pd.DataFrame(rows)
    df.to_csv(tmp_path / "o.csv", index=False)
    df.to_parquet(tmp_path / "o.parquet", index=False)
    docs = [json.loads(_cli(synth, "--json", outcomes=[tmp_path / f]).stdout) for f in ("o.csv", "o.parquet")]
    assert docs[0]["inputs"]["outcome_examples"] == [
        f"{tmp_path / 'o.csv'}:2: outcome {rows[0]['outcome']!r} is not an option of 'intent' "
        f"(did you mean {rows[0]['outcome'].lower()!r}?)"
    ]
    assert docs[1]["inputs"]["outcome_examples"][0].startswith(f"{tmp_path / 'o.parquet'}:row 1: outcome")
    assert docs[0]["windows"] == docs[1]["windows"]
    assert (
        docs[0]["inputs"]["outcome_lines_rejected"]
        == docs[1]["inputs"]["outcome_lines_rejected"]
        == {"not_an_option": 1}
    )


# -- duplicated decision records ----------------------------------------------------------------------
def test_a_decision_logged_twice_counts_once_and_the_copies_are_counted(synth, tmp_path):
    log = (synth["tmp"] / "decisions.jsonl").read_text().splitlines()
    twice = _write_lines(tmp_path / "twice.jsonl", log + log[:250] + ['{"decision_id": null, "question": "intent"}'])
    outcomes = [synth["tmp"] / "shifted.jsonl"]
    doc = _both_sources(synth["policy"], [twice], outcomes)
    ref = _both_sources(synth["policy"], [synth["tmp"] / "decisions.jsonl"], outcomes)
    assert doc["inputs"]["duplicate_records"] == 250 and doc["inputs"]["incomplete_records"] == 1
    assert doc["inputs"]["n_records"] == ref["inputs"]["n_records"] == synth["n"]
    assert (
        doc["windows"] == ref["windows"]
        and doc["questions"]["intent"]["overall"] == ref["questions"]["intent"]["overall"]
    )
    r = _cli(synth, decisions=str(twice), outcomes=outcomes)
    assert "250 decision record(s) logged more than once" in r.stderr
    assert "250 duplicate records counted once" in r.stdout and "1 incomplete records skipped" in r.stdout


# -- shadow mode ---------------------------------------------------------------------------------------
def _policy_variant(synth, name: str, *cmd: str) -> Path:
    out = synth["tmp"] / f"{name}.json"
    if not out.exists():
        run_cli("policy", *cmd[:1], str(synth["policy"]), *cmd[1:], "--out", str(out), check=True)
    return out


def _held_back_truth(log: Path, outcomes: Path) -> dict:
    """Counts straight from the files: held-back decisions (would_accept set), those with an outcome, errors."""
    out = {r["decision_id"]: r.get("outcome") for r in _rows(outcomes)}
    recs = _rows(log)
    held = [r for r in recs if r["action"] != "accept" and r.get("would_accept") is not None]
    known = [r for r in held if out.get(r["decision_id"]) is not None]
    wrong = [r for r in known if out[r["decision_id"]] != r["would_accept"]]
    return {"n": len(recs), "held": len(held), "known": len(known), "errors": len(wrong), "accepted": sum(
        r["action"] == "accept" for r in recs
    )}  # fmt: skip


def test_shadow_mode_reports_would_accept_coverage_error_and_the_alarm(synth, tmp_path):
    from workbench.policy.runtime import Policy

    shadow = _policy_variant(synth, "shadow", "mode", "shadow")
    log = tmp_path / "shadow.jsonl"
    replay(Policy.load(shadow), synth["responses"], log)
    live = json.loads(_cli(synth, "--json", outcomes=[synth["tmp"] / "clean.jsonl"]).stdout)["questions"]["intent"]

    # clean outcomes: evidence, no alarm
    clean = synth["tmp"] / "clean.jsonl"
    truth = _held_back_truth(log, clean)
    assert truth["accepted"] == 0 and truth["held"] == live["overall"]["n_accepted"] > 100
    r = run_cli("monitor", "--policy", str(shadow), "--decisions", str(log), "--outcomes", str(clean), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    q = doc["questions"]["intent"]
    assert q["overall"]["n_accepted"] == 0 and q["overall"]["error"] is None
    sh = q["shadow"]
    assert (
        sh["n_would_accept"] == truth["held"] and sh["n_known"] == truth["known"] and sh["n_errors"] == truth["errors"]
    )
    assert sh["would_accept_coverage"] == pytest.approx(live["overall"]["coverage"], abs=1e-12)
    assert sh["error"] == pytest.approx(live["overall"]["error"], abs=1e-12)  # the same rule, the same outcomes
    assert sh["error_low"] <= sh["error"] <= sh["error_high"]
    assert sum(w["shadow"]["n_would_accept"] for w in doc["windows"]) == truth["held"]
    assert doc["policy"]["mode"] == "shadow" and any("held back (mode: shadow)" in w for w in doc["warnings"])
    assert (
        "(shadow: held back by the rollout): would-accept coverage"
        in run_cli("monitor", "--policy", str(shadow), "--decisions", str(log), "--outcomes", str(clean)).stdout
    )

    # shifted outcomes: the shadow alarm fires, labelled, exit 1, with first_alarm_at
    shifted = synth["tmp"] / "shifted.jsonl"
    truth = _held_back_truth(log, shifted)
    md = tmp_path / "shadow.md"
    r = run_cli(
        "monitor", "--policy", str(shadow), "--decisions", str(log), "--outcomes", str(shifted), "--json",
        "--markdown", str(md),
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "**Shadow (intent)**" in md.read_text() and "held back by the rollout" in md.read_text()
    doc = json.loads(r.stdout)
    assert doc["alarm"] and doc["reasons"][0].startswith("shadow: intent: error rate among held-back decisions")
    at = doc["first_alarm_at"]
    assert at["kind"] == "shadow_error" and at["decision_index"] >= SHIFT_AT and at["decision_id"].startswith("d")
    sh = doc["questions"]["intent"]["shadow"]
    assert sh["n_errors"] == truth["errors"] and sh["n_known"] == truth["known"]
    assert (
        doc["questions"]["intent"]["shadow_sequence"]["fired"] and not doc["questions"]["intent"]["sequence"]["fired"]
    )
    assert any(w["shadow"]["alarm"] for w in doc["windows"]) and not any(w["alarm"] for w in doc["windows"])
    _both_sources(shadow, [log], [shifted])


def test_options_held_back_by_the_rollout_are_shadow_evidence_the_rest_is_live(synth, tmp_path):
    from workbench.policy.runtime import Policy

    partial = _policy_variant(synth, "partial", "disable", "--option", "refund", "--option", "top_up")
    log = tmp_path / "partial.jsonl"
    replay(Policy.load(partial), synth["responses"], log)
    clean = synth["tmp"] / "clean.jsonl"
    truth = _held_back_truth(log, clean)
    assert truth["held"] > 0 and truth["accepted"] > 0
    live = json.loads(_cli(synth, "--json", outcomes=[clean]).stdout)["questions"]["intent"]["overall"]
    doc = _both_sources(partial, [log], [clean])
    q = doc["questions"]["intent"]
    assert q["overall"]["n_accepted"] == truth["accepted"] and q["shadow"]["n_would_accept"] == truth["held"]
    assert q["overall"]["n_accepted"] + q["shadow"]["n_would_accept"] == live["n_accepted"]
    assert q["shadow"]["n_errors"] == truth["errors"] and q["overall"]["n_errors"] + truth["errors"] == live["n_errors"]
    assert any("options outside enabled_options" in w for w in doc["warnings"])


# -- the drift alarm -----------------------------------------------------------------------------------
def test_the_drift_alarm_fills_in_first_alarm_at(synth):
    r = _cli(synth, "--json", "--drift-alarm", "0.000001", outcomes=None)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    at = doc["first_alarm_at"]
    assert at is not None and at["kind"] == "drift" and "drift in window" in doc["reasons"][0]
    first = doc["windows"][0]  # with so low a threshold the first window with a PSI raises it
    assert at["window"] == first["window"] and at["decision_index"] == first["last_decision"]
    assert at["decision_id"] == f"d{first['last_decision']:06d}" and at["time"].startswith("2026-11-0")
    _both_sources(synth["policy"], [synth["tmp"] / "decisions.jsonl"], [], drift_alarm_psi=0.000001)


# -- inputs that are not regular files ---------------------------------------------------------------------
def test_fifos_devices_and_directories_are_refused_not_dropped_or_read(synth, tmp_path):
    """A FIFO named as --outcomes was dropped silently (the monitor ran without the outcomes); as --decisions,
    a FIFO, /dev/zero or a directory gave a DuckDB traceback (exit 1)."""
    import os

    fifo = tmp_path / "o.fifo"
    os.mkfifo(fifo)  # nobody writes: reading it would block until run_cli's timeout
    log = str(synth["tmp"] / "decisions.jsonl")
    for args, needle in (
        (["--decisions", log, "--outcomes", str(fifo)], f"--outcomes {fifo}: not a regular file"),
        (["--decisions", str(fifo)], f"--decisions {fifo}: not a regular file"),
        (["--decisions", "/dev/zero"], "--decisions /dev/zero: not a regular file"),
        (["--decisions", str(tmp_path)], f"--decisions {tmp_path}: a directory"),
        (["--decisions", str(tmp_path / "*")], "not a regular file"),  # a glob that matches the FIFO
    ):
        r = run_cli("monitor", "--policy", str(synth["policy"]), *args, timeout=120)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, (args, r.stderr)


# -- the same on Spark ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_spark_counts_and_shadow_figures_equal_the_store_source(synth, tmp_path):
    """Duplicated records, rejected outcome lines and held-back decisions: Spark (local) = `workbench monitor`."""
    pytest.importorskip("pyspark")
    import shutil

    if shutil.which("java") is None:
        pytest.skip("no Java runtime for Spark")
    from workbench.engines.monitoring import monitor_on_engine
    from workbench.engines.sessions import SparkEngine, spark_session
    from workbench.monitor.report import MonitorOptions, monitor
    from workbench.policy.runtime import Policy

    partial = _policy_variant(synth, "partial", "disable", "--option", "refund", "--option", "top_up")
    log = tmp_path / "partial.jsonl"
    replay(Policy.load(partial), synth["responses"], log)
    lines = log.read_text().splitlines()
    _write_lines(log, lines + lines[:40])
    clean = _rows(synth["tmp"] / "clean.jsonl")
    out = [json.dumps(r) for r in clean]
    out[2] = json.dumps({**clean[2], "outcome": clean[2]["outcome"].upper()})
    outcomes = _write_lines(tmp_path / "o.jsonl", out)
    opts = MonitorOptions(window="500")
    ref = json.loads(json.dumps(monitor(partial, [log], [outcomes], opts).to_dict()))
    session = spark_session("local[1]", {"spark.ui.showConsoleProgress": "false"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        got = json.loads(
            json.dumps(
                monitor_on_engine(partial, [log], [outcomes], opts, engine=SparkEngine(session=session)).to_dict()
            )
        )
    finally:
        session.stop()
    assert ref["inputs"]["duplicate_records"] == 40 and ref["inputs"]["outcome_lines_rejected"] == {"not_an_option": 1}
    assert ref["questions"]["intent"]["shadow"]["n_would_accept"] > 0
    for key in ("inputs", "alarm", "first_alarm_at", "reasons"):
        assert got[key] == ref[key], key
    assert_tree_close(got["windows"], ref["windows"], abs_tol=1e-9)
    for key in ("overall", "shadow"):
        assert_tree_close(got["questions"]["intent"][key], ref["questions"]["intent"][key], abs_tol=1e-9)
