"""Runner acceptance (issue 3, points 2–4 and 7) at a size that runs fast: 308 BANKING77 test items.

Real components only: a DuckDB file in tmp_path, the emulator over loopback HTTP, the
Cloudflare provider, and the `workbench` console entry point in a subprocess for the crash test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from workbench.emulator import run_emulator
from workbench.runner import execute, resume_run, run_experiment
from workbench.schema import DecisionSchema
from workbench.store.db import connect
from workbench.store.runs import get_run, load_answers

from .conftest import ROOT, banking_schema

TOKEN = "cf-test-token-7d1f0c9a2b4e6f8a"
ACCOUNT = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def emu():
    with run_emulator(port=0, require_token=TOKEN) as server:
        yield server


@pytest.fixture
def env(emu):
    emu.reset_stats()
    emu.set_faults(
        latency_ms=0.0,
        rate_limit=0.0,
        quota=0.0,
        server_error=0.0,
        overloaded=0.0,
        timeout=0.0,
        reset=0.0,
        malformed=0.0,
        timeout_sleep_s=30.0,
    )
    return {
        "CLOUDFLARE_API_KEY": TOKEN,
        "CLOUDFLARE_ACCOUNT_ID": ACCOUNT,
        "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
    }


def _answers(con, run_id: str, question: str = "intent"):
    ra = load_answers(con, run_id, question)
    return {i: (None if f else tuple(p)) for i, p, f in zip(ra.item_ids, ra.probs, ra.failed)}


def _failure_rows(con, run_id: str):
    return con.execute(
        "SELECT item_id, question, failure_kind, failure_message, probs FROM answers"
        " WHERE run_id = ? AND failure_kind IS NOT NULL",
        [run_id],
    ).fetchall()


def _n_test(con) -> int:
    return con.execute("SELECT count(*) FROM items WHERE split = 'test'").fetchone()[0]


# -- the endpoint is part of the cache key ---------------------------------------------------------
def test_another_endpoint_is_not_served_from_the_cache(banking_db, emu, env):
    """Answers cached from one base URL (an emulator, a proxy) are never reused for another."""
    db, name = banking_db
    con = connect(db)
    n = _n_test(con)
    run_experiment(
        con, dataset=name, schema=banking_schema(), provider_specs=["cloudflare:clef-flash"], env=env, concurrency=8
    )
    assert emu.request_count() == n
    with run_emulator(port=0, require_token=TOKEN) as other:
        other_env = {**env, "CLOUDFLARE_CLEF_BASE_URL": other.cloudflare_base_url}
        run_experiment(
            con,
            dataset=name,
            schema=banking_schema(),
            provider_specs=["cloudflare:clef-flash"],
            env=other_env,
            concurrency=8,
        )
        assert other.request_count() == n, "a different endpoint must be asked, not answered from the cache"
    assert emu.request_count() == n


# -- 2. rerun: zero calls ------------------------------------------------------------------------
def test_rerun_makes_no_new_requests_and_gives_identical_answers(banking_db, emu, env):
    db, name = banking_db
    con = connect(db)
    n = _n_test(con)
    (first,) = run_experiment(
        con, dataset=name, schema=banking_schema(), provider_specs=["cloudflare:clef"], env=env, concurrency=8
    )
    assert emu.request_count() == n
    (second,) = run_experiment(
        con, dataset=name, schema=banking_schema(), provider_specs=["cloudflare:clef"], env=env, concurrency=8
    )
    assert emu.request_count() == n, "a rerun of the same experiment must not call the provider"
    s2 = get_run(con, second)["summary"]
    assert s2["this_session"]["cache_hits"] == n and s2["this_session"]["requests_sent"] == 0
    assert s2["answered"] == n and s2["failed"] == 0
    a1, a2 = _answers(con, first), _answers(con, second)
    assert a1 == a2 and len(a1) == n
    # cached answers are flagged, and the cost they carry is the original call's
    cached = con.execute("SELECT bool_and(cached), sum(cost_usd) FROM answers WHERE run_id = ?", [second]).fetchone()
    paid = con.execute("SELECT sum(cost_usd) FROM answers WHERE run_id = ?", [first]).fetchone()[0]
    assert cached[0] is True and cached[1] == pytest.approx(paid)
    assert s2["cost_paid_usd"] is None or s2["this_session"]["cost_paid_usd"] == 0.0


def test_changed_question_reasks_only_that_question(banking_db, emu, env):
    db, name = banking_db
    con = connect(db)
    n = _n_test(con)
    base = banking_schema().to_file_dict()
    base["questions"]["complaint"] = {"type": "noul", "instructions": "Is the customer complaining?"}
    schema_a = DecisionSchema.from_dict(base)
    run_experiment(
        con, dataset=name, schema=schema_a, provider_specs=["cloudflare:clef"], env=env, questions_per_request=1
    )
    assert emu.request_count() == 2 * n
    changed = json.loads(json.dumps(base))
    changed["questions"]["complaint"]["instructions"] = "Is the customer unhappy about a fee?"
    (run_b,) = run_experiment(
        con,
        dataset=name,
        schema=DecisionSchema.from_dict(changed),
        provider_specs=["cloudflare:clef"],
        env=env,
        questions_per_request=1,
    )
    assert emu.request_count() == 3 * n, "only the changed question is asked again"
    s = get_run(con, run_b)["summary"]
    assert s["answered"] == 2 * n and s["this_session"]["cache_hits"] == n
    # grouped requests: the whole (changed) request is one call per item, nothing more
    emu.reset_stats()
    run_experiment(con, dataset=name, schema=schema_a, provider_specs=["cloudflare:clef"], env=env)
    assert emu.request_count() == n


# -- 3. SIGKILL half way, then --resume -------------------------------------------------------------
def _cli(db: Path, *args: str, env: dict) -> list[str]:
    return [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), *args]


SIZED = pytest.mark.parametrize("sized_db", ["subset", pytest.param("full", marks=pytest.mark.slow)], indirect=True)


@SIZED
def test_sigkill_half_way_then_resume_matches_uninterrupted_run(tmp_path, sized_db, emu, env):
    db, name, subset = sized_db
    con = connect(db)
    n = _n_test(con)
    con.close()
    schema_file = tmp_path / "schema.yaml"
    schema_file.write_text(yaml.safe_dump(banking_schema().to_file_dict(), sort_keys=False))
    emu.set_faults(latency_ms=40.0)
    concurrency = 4 if n < 1000 else 32
    full_env = {**os.environ, **env}
    proc = subprocess.Popen(
        _cli(
            db,
            "run",
            "--dataset",
            name,
            "--schema",
            str(schema_file),
            "--provider",
            "cloudflare:clef",
            "--concurrency",
            str(concurrency),
            env=env,
        ),
        env=full_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    while emu.stats["answered"] < n // 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed; raise the latency"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed_at = emu.request_count()
    assert n // 4 < killed_at < n

    con = connect(db)
    (run_id, status) = con.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "running"  # nothing could mark it
    written = con.execute("SELECT count(*) FROM answers WHERE run_id = ?", [run_id]).fetchone()[0]
    con.close()
    assert written < n
    emu.set_faults(latency_ms=0.0)
    res = subprocess.run(
        _cli(db, "run", "--resume", run_id, "--json", env=env),
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)["runs"][0]  # one shape: {"run_ids", "runs", "experiment"}
    assert summary["status"] == "done" and summary["answered"] == n and summary["failed"] == 0
    total_requests = emu.request_count()
    assert total_requests <= n + concurrency, (total_requests, n, concurrency)
    # what the killed process had received but not yet committed came back from its journal
    recovered = summary["this_session"]["calls_recovered_from_journal"]
    assert written + recovered >= killed_at - concurrency

    # an uninterrupted run of the same experiment in a fresh store gives the same answers
    other = connect(tmp_path / "fresh.duckdb")
    from .conftest import import_banking

    import_banking(other, tmp_path / "data2", **subset)
    (clean,) = run_experiment(other, dataset=name, schema=banking_schema(), provider_specs=["cloudflare:clef"], env=env)
    con = connect(db)
    assert _answers(con, run_id) == _answers(other, clean)


# -- 4. fault mix -------------------------------------------------------------------------------
@SIZED
def test_fault_mix_loses_nothing_and_resume_reasks_only_failures(sized_db, emu, env, monkeypatch):
    monkeypatch.setitem(execute.BACKOFF_BASE_S, execute.ErrorKind.RATE_LIMIT, 0.02)
    monkeypatch.setattr(execute, "BACKOFF_DEFAULT_BASE_S", 0.02)
    db, name, _ = sized_db
    con = connect(db)
    n = _n_test(con)
    # the client's timeout (2 s) is far above any answer's latency on a loaded machine, so only the
    # emulator's timeout fault (6 s) times out: a slow malformed answer must not be counted as a timeout
    emu.set_faults(rate_limit=0.10, server_error=0.02, timeout=0.01, malformed=0.01, timeout_sleep_s=6.0, seed=3)
    (run_id,) = run_experiment(
        con,
        dataset=name,
        schema=banking_schema(),
        provider_specs=["cloudflare:clef"],
        env=env,
        concurrency=16,
        timeout=2.0,
    )
    stats = emu.stats
    summary = get_run(con, run_id)["summary"]
    rows = con.execute("SELECT item_id, probs, failure_kind FROM answers WHERE run_id = ?", [run_id]).fetchall()
    assert len(rows) == n and len({r[0] for r in rows}) == n, "every item × question has a row"
    for _, probs, kind in rows:
        assert (probs is None) == (kind is not None), "a failure is never stored as a probability"
        if probs is not None:
            assert abs(sum(probs) - 1) < 1e-9
    fails = _failure_rows(con, run_id)
    assert all(kind in {"server", "timeout", "malformed", "rate_limit", "network"} for _, _, kind, _, _ in fails)
    assert all(msg for *_, msg, _ in fails)
    # retries as specified: malformed never retried, 429 retried (6 tries make a final 429 ~impossible)
    assert summary["failed_by_kind"].get("malformed", 0) == stats["by_fault"].get("malformed", 0)
    assert summary["failed_by_kind"].get("rate_limit", 0) == 0
    assert stats["by_fault"].get("rate_limit", 0) > 0 and summary["this_session"]["retries"] > 0
    # every request that reached the server was counted by the runner (timeouts reach it too)
    assert summary["this_session"]["requests_sent"] >= stats["total"]
    n_failed = len(fails)
    assert n_failed == summary["failed"]

    emu.set_faults(rate_limit=0.0, server_error=0.0, timeout=0.0, malformed=0.0)
    time.sleep(6.1)  # abandoned (timed-out) requests are counted by the emulator when they finish
    before = emu.request_count()
    s2 = resume_run(con, run_id, env=env)
    assert emu.request_count() - before == n_failed, "resume asks only what failed"
    assert s2["answered"] == n and s2["failed"] == 0


# -- retry policy per kind --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fault,kind,tries",
    [
        ("server_error", "server", 2),
        ("overloaded", "server", 2),
        ("rate_limit", "rate_limit", 6),
        ("malformed", "malformed", 1),
        ("reset", "network", 2),
    ],
)
def test_retry_attempts_per_error_kind(banking_db, emu, env, monkeypatch, fault, kind, tries):
    monkeypatch.setitem(execute.BACKOFF_BASE_S, execute.ErrorKind.RATE_LIMIT, 0.01)
    monkeypatch.setattr(execute, "BACKOFF_DEFAULT_BASE_S", 0.01)
    db, name = banking_db
    con = connect(db)
    emu.set_faults(**{fault: 1.0})
    (run_id,) = run_experiment(
        con, dataset=name, schema=banking_schema(), provider_specs=["cloudflare:clef"], env=env, limit=5, concurrency=2
    )
    assert emu.request_count() == 5 * tries
    kinds = {r[2] for r in _failure_rows(con, run_id)}
    assert kinds == {kind}


def test_timeout_is_retried_once(banking_db, emu, env, monkeypatch):
    monkeypatch.setattr(execute, "BACKOFF_DEFAULT_BASE_S", 0.01)
    db, name = banking_db
    con = connect(db)
    emu.set_faults(timeout=1.0, timeout_sleep_s=1.5)
    t0 = time.perf_counter()
    (run_id,) = run_experiment(
        con,
        dataset=name,
        schema=banking_schema(),
        provider_specs=["cloudflare:clef"],
        env=env,
        limit=3,
        concurrency=3,
        timeout=0.3,
    )
    assert time.perf_counter() - t0 < 5
    s = get_run(con, run_id)["summary"]
    assert s["failed_by_kind"] == {"timeout": 3} and s["this_session"]["requests_sent"] == 6
    time.sleep(1.6)  # let the emulator finish the abandoned requests so they do not count in the next test
    assert emu.request_count() == 6


@pytest.mark.parametrize("fault_or_token,kind", [("quota", "quota"), ("bad-token", "authentication")])
def test_quota_and_authentication_stop_the_run(banking_db, emu, env, fault_or_token, kind):
    db, name = banking_db
    con = connect(db)
    if fault_or_token == "quota":
        emu.set_faults(quota=1.0)
    else:
        env = {**env, "CLOUDFLARE_API_KEY": "wrong-token-123456789"}
    (run_id,) = run_experiment(
        con, dataset=name, schema=banking_schema(), provider_specs=["cloudflare:clef"], env=env, limit=40, concurrency=1
    )
    assert emu.request_count() == 1, "no call after a stopping failure"
    s = get_run(con, run_id)["summary"]
    assert s["status"] == "stopped" and s["failed_by_kind"] == {kind: 1, "not_asked": 39}
    assert s["answered"] == 0
    if kind == "authentication":
        assert "wrong-token" not in json.dumps(s)
    # --resume after the cause is fixed asks exactly the 40 items
    emu.set_faults(quota=0.0)
    fixed_env = {**env, "CLOUDFLARE_API_KEY": TOKEN}
    s2 = resume_run(con, run_id, env=fixed_env)
    assert s2["answered"] == 40 and emu.request_count() == 41, (s2, emu.stats)


def test_max_cost_stops_before_exceeding(banking_db, emu, env):
    db, name = banking_db
    con = connect(db)
    (probe,) = run_experiment(
        con,
        dataset=name,
        schema=banking_schema(),
        provider_specs=["cloudflare:clef"],
        env=env,
        limit=20,
        splits=["train"],
    )
    per_call = get_run(con, probe)["summary"]["cost_usd"] / 20
    cap = per_call * 10.5
    emu.reset_stats()
    (run_id,) = run_experiment(
        con,
        dataset=name,
        schema=banking_schema(),
        provider_specs=["cloudflare:clef"],
        env=env,
        limit=40,
        concurrency=4,
        max_cost=cap,
    )
    s = get_run(con, run_id)["summary"]
    assert s["status"] == "stopped" and s["cost_paid_usd"] <= cap
    assert 5 <= s["answered"] <= 10 and s["failed_by_kind"]["not_asked"] == 40 - s["answered"]


def test_rate_limit_spaces_requests(banking_db, emu, env):
    db, name = banking_db
    con = connect(db)
    t0 = time.perf_counter()
    run_experiment(
        con,
        dataset=name,
        schema=banking_schema(),
        provider_specs=["cloudflare:clef"],
        env=env,
        limit=11,
        concurrency=8,
        rate=20.0,
    )
    # a token bucket of capacity 1 at 20/s lets 11 requests through in no less than 10/20 s
    assert time.perf_counter() - t0 >= 0.5 - 0.02
    assert emu.request_count() == 11


# -- 7. no secret anywhere ----------------------------------------------------------------------------
def test_token_never_reaches_database_journal_or_logs(tmp_path, banking_db, emu, env):
    db, name = banking_db
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(banking_schema().to_file_dict()))
    full_env = {**os.environ, **env}
    outputs = []
    emu.set_faults(rate_limit=0.05, server_error=0.05, malformed=0.02)
    for args in (
        [
            "run",
            "--dataset",
            name,
            "--schema",
            str(schema_file),
            "--provider",
            "cloudflare:clef",
            "--limit",
            "60",
            "--json",
        ],
        ["runs", "list", "--json"],
    ):
        res = subprocess.run(
            _cli(db, *args, env=env), env=full_env, cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert res.returncode in (0, 3), res.stderr  # 3: finished with some (injected) failures
        outputs += [res.stdout, res.stderr]
    # a rejected token must not leak either (the 401 message, the stored failure)
    bad = {**full_env, "CLOUDFLARE_API_KEY": TOKEN[::-1]}
    res = subprocess.run(
        _cli(
            db,
            "run",
            "--dataset",
            name,
            "--schema",
            str(schema_file),
            "--provider",
            "cloudflare:clef",
            "--split",
            "train",
            "--limit",
            "5",
            "--json",
            env=env,
        ),
        env=bad,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outputs += [res.stdout, res.stderr]
    by_kind = json.loads(res.stdout)["runs"][0]["failed_by_kind"]
    assert by_kind["authentication"] >= 1 and by_kind["authentication"] + by_kind.get("not_asked", 0) == 5
    con = connect(db)
    con.execute("CHECKPOINT")
    con.close()
    blobs = [p.read_bytes() for p in db.parent.rglob("*") if p.is_file()]
    for secret in (TOKEN, TOKEN[::-1]):
        assert not any(secret.encode() in b for b in blobs), "token found in a file of the store"
        assert not any(secret in o for o in outputs), "token found in the command output"
