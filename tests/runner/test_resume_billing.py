"""After SIGKILL, --resume sends the calls that were in flight again; they were billed, so the run's
figures count them (issue 14 item 14). The emulator's own request count is the bill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT, run_cli
from workbench.emulator import run_emulator
from workbench.store.db import connect

from .test_run_exit_codes import N_ITEMS, TOKEN, store  # noqa: F401 - the fixture


def test_sigkill_in_flight_calls_are_counted_as_billed_on_resume(store):  # noqa: F811
    db, schema_file = store
    concurrency = 4
    with run_emulator(port=0, require_token=TOKEN, latency_ms=400.0) as emu:
        env = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
               "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}  # fmt: skip
        cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), "run",
               "--dataset", "ds", "--schema", str(schema_file), "--provider", "cloudflare:clef-flash",
               "--concurrency", str(concurrency), "--no-progress"]  # fmt: skip
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.time() + 120
        # kill while a full set of requests is in flight (received, not yet answered)
        while time.time() < deadline and proc.poll() is None:
            if emu.request_count() >= 2 * concurrency + 1:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run finished before it could be killed; raise the latency"
        time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        time.sleep(0.5)  # let the emulator take in anything still on the wire
        received_before_resume = emu.request_count()
        with connect(db) as con:
            run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]

        emu.set_faults(latency_ms=0.0)
        res = run_cli("run", "--resume", run_id, "--json", "--no-progress", db=db, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        s = json.loads(res.stdout)["runs"][0]
        total_requests = emu.request_count()

    assert s["status"] == "done" and s["answered"] == N_ITEMS
    lost = s["billed_unanswered_calls"]
    # the provider saw every item once, plus once more for each call that was in flight at the kill
    assert total_requests == N_ITEMS + lost, (total_requests, lost)
    assert 1 <= lost <= concurrency
    assert received_before_resume <= N_ITEMS + lost
    # their cost is the price of the identical request sent again, and it is in the billed total
    with connect(db, read_only=True) as con:
        expected = con.execute(
            "SELECT sum(cost_usd) FROM calls WHERE cache_key IN (SELECT cache_key FROM billed_unanswered"
            " WHERE run_id = ?)",
            [run_id],
        ).fetchone()[0]
    assert expected is not None and expected > 0
    assert s["billed_unanswered_cost_usd"] == expected
    assert s["cost_billed_usd"] == (s["cost_paid_usd"] or 0.0) + expected
    assert "billed but unanswered" in res.stderr


def test_a_clean_run_has_no_billed_unanswered_calls(store):  # noqa: F811
    db, schema_file = store
    with run_emulator(port=0, require_token=TOKEN) as emu:
        env = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
               "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}  # fmt: skip
        res = run_cli("run", "--dataset", "ds", "--schema", str(schema_file), "--provider", "cloudflare:clef-flash",
                      "--json", "--no-progress", db=db, env=env)  # fmt: skip
    s = json.loads(res.stdout)["runs"][0]
    assert res.returncode == 0 and s["billed_unanswered_calls"] == 0 and s["billed_unanswered_cost_usd"] == 0.0
    assert s["cost_billed_usd"] == s["cost_paid_usd"]
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM billed_unanswered").fetchone()[0] == 0
    assert not (db.parent / (db.name + ".journal")).exists() or not list((db.parent / (db.name + ".journal")).iterdir())
