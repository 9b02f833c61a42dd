"""The runner's journal under kills and resumes, as a hypothesis state machine (issue 25).

Each example is one run of 24 items in a fresh DuckDB file. Rules: a session in a child process that SIGKILLs
itself at a drawn request (before sending it, or once its response has arrived but before the runner saw it),
with a drawn batch size so that kills land between, during and after commits; and an in-process ``--resume``
that must finish. The emulator (a thread of this process, over loopback HTTP) counts the answers it gives per
item: that count is the bill.

Invariants, after every step:

- every item × question has at most one row, and a row is an answer or a failure, never both;
- a run whose status is ``done`` has a row for every planned item × question (counted in the store);
- no call is paid twice when its response was journaled: an item was answered by the emulator at most once,
  plus once for each call the journal shows in flight at a kill (``billed_unanswered``);

and at the end of each example, after a last resume: every item answered, with the answers of an uninterrupted
run, no journal segment left.

Children are forked by a multiprocessing fork server that imported the runner beforehand (``_kill_child``): a
kill costs a fork, not an interpreter start. Budget: 15 examples of at most 3 steps, 27 s measured on a 2-core
machine at load 9 (20 examples took 41-51 s at load 9-11, and 98 s with two benchmarks running beside it).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from workbench.emulator import run_emulator
from workbench.emulator.answering import LexicalAnswerer
from workbench.runner.execute import RunOptions, resume_run, run_experiment, start_run
from workbench.store import calls as calls_store
from workbench.store.datasets import load_items
from workbench.store.db import connect
from workbench.store.runs import get_run, load_answers

from .conftest import ROOT, banking_schema, import_banking_items

TOKEN = "journal-machine-token-0123456789"
SPEC = "cloudflare:clef"
N_ITEMS = 24


class CountingAnswerer:
    """The emulator's default answerer, counting the answers it gives per request state (the item text)."""

    def __init__(self) -> None:
        self.inner = LexicalAnswerer()
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def __call__(self, questions_wire, state):
        with self.lock:
            self.counts[str(state)] += 1
        return self.inner(questions_wire, state)

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()


class World:
    """What every example shares: the emulator, a store template, the reference answers, the fork server."""

    emu = None
    answerer: CountingAnswerer
    env: dict
    template: Path
    tmp: Path
    text_of: dict[str, str]  # item id -> its text (the request state)
    reference: dict[str, tuple]  # item id -> probabilities of an uninterrupted run
    ctx: multiprocessing.context.BaseContext


W = World()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    W.answerer = CountingAnswerer()
    tmp = tmp_path_factory.mktemp("journal_machine")
    W.tmp = tmp
    with run_emulator(port=0, require_token=TOKEN, answerer=W.answerer) as emu:
        W.emu = emu
        W.env = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
                 "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}  # fmt: skip
        W.template = tmp / "template.duckdb"
        con = connect(W.template)
        import_banking_items(con, tmp / "data", N_ITEMS, name="journal")
        items = load_items(con, "journal", 1)
        W.text_of = {str(i): str(t) for i, t in zip(items["item_id"], items["state"])}
        con.close()
        # the answers of an uninterrupted run, in a copy of the template
        ref_db = tmp / "reference.duckdb"
        shutil.copy(W.template, ref_db)
        with connect(ref_db) as con:
            (ref,) = run_experiment(con, dataset="journal", schema=banking_schema(), provider_specs=[SPEC], env=W.env,
                                    timeout=60.0, progress=False)  # fmt: skip
            W.reference = _answers(con, ref)
        assert len(W.reference) == N_ITEMS and all(p is not None for p in W.reference.values())
        assert set(W.answerer.snapshot()) == set(W.text_of.values()), "the request state is the item text"
        # the fork server imports the runner once; PYTHONPATH lets it import this package's child module
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([*([old] if old else []), str(ROOT)])
        try:
            W.ctx = multiprocessing.get_context("forkserver")
            W.ctx.set_forkserver_preload(["tests.runner._kill_child"])
            yield W
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old


def _answers(con, run_id: str) -> dict[str, tuple | None]:
    ra = load_answers(con, run_id, "intent")
    return {i: (None if f else tuple(p)) for i, p, f in zip(ra.item_ids, ra.probs, ra.failed)}


def _emulator_idle(timeout: float = 10.0) -> None:
    """Wait until every request that reached the emulator has been answered (a killed client's in-flight ones)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = W.emu.stats
        if sum(s["by_status"].values()) >= s["total"]:
            return
        time.sleep(0.01)
    raise AssertionError(f"the emulator still handles requests after {timeout} s: {W.emu.stats}")


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(os.path.join(W.tmp, f"ex{time.monotonic_ns()}"))
        self.dir.mkdir()
        self.db = self.dir / "wb.duckdb"
        shutil.copy(W.template, self.db)
        self.run_id = ""
        self.sessions = 0  # killed sessions attempted (a child may finish before its kill)

    @initialize(concurrency=st.sampled_from([1, 4, 16]))
    def start(self, concurrency: int) -> None:
        _emulator_idle()
        W.answerer.reset()
        W.emu.reset_stats()
        with connect(self.db) as con:
            self.run_id = start_run(con, dataset="journal", schema=banking_schema(), provider_spec=SPEC,
                                    options=RunOptions(concurrency=concurrency, timeout=60.0))  # fmt: skip
            # (a call never times out, however loaded the machine: a timed-out call answered by the emulator and
            # asked again would be a second paid call, rightly failing the invariant)

    @precondition(lambda self: self.sessions < 3)
    @rule(
        kill_at=st.integers(1, N_ITEMS),
        when=st.sampled_from(["before_request", "after_response"]),
        batch_rows=st.sampled_from([1, 3, 500]),
    )
    def killed_session(self, kill_at: int, when: str, batch_rows: int) -> None:
        from tests.runner._kill_child import run_then_die

        proc = W.ctx.Process(target=run_then_die, args=(str(self.db), self.run_id, W.env, kill_at, when, batch_rows))
        self.sessions += 1
        proc.start()
        proc.join(120)
        assert proc.exitcode in (0, -9), f"the child ended with {proc.exitcode}"
        event("session killed" if proc.exitcode == -9 else "session finished before its kill")
        _emulator_idle()

    @rule()
    def resume(self) -> None:
        with connect(self.db) as con:
            s = resume_run(con, self.run_id, env=W.env, progress=False)
        assert (s["status"], s["missing"], s["answered"], s["failed"]) == ("done", 0, N_ITEMS, 0), s
        _emulator_idle()

    @invariant()
    def every_answer_once_and_no_journaled_call_paid_twice(self) -> None:
        if not self.run_id:
            return
        with connect(self.db, read_only=True) as con:
            rows, pairs, mixed = con.execute(
                "SELECT count(*), count(DISTINCT (item_id, question)),"
                " count(*) FILTER (WHERE (probs IS NULL) = (failure_kind IS NULL)) FROM answers WHERE run_id = ?",
                [self.run_id],
            ).fetchone()
            assert rows == pairs <= N_ITEMS and mixed == 0
            status = get_run(con, self.run_id)["status"]
            if status == "done":
                assert calls_store.count_missing_answers(con, self.run_id, list(W.text_of), ["intent"]) == 0
            keys = dict(con.execute(
                "SELECT item_id, cache_key FROM answers WHERE run_id = ? AND probs IS NOT NULL", [self.run_id]
            ).fetchall())  # fmt: skip
            billed = Counter(
                dict(
                    con.execute(
                        "SELECT cache_key, count(*) FROM billed_unanswered WHERE run_id = ? GROUP BY 1", [self.run_id]
                    ).fetchall()
                )  # fmt: skip
            )
        paid = W.answerer.snapshot()
        for item_id, key in keys.items():
            n = paid[W.text_of[item_id]]
            assert 1 <= n <= 1 + billed[key], f"{item_id} answered {n} times, {billed[key]} in flight at a kill"

    def teardown(self) -> None:
        try:
            if self.run_id:
                self.resume()
                with connect(self.db, read_only=True) as con:
                    assert _answers(con, self.run_id) == W.reference
                self.every_answer_once_and_no_journaled_call_paid_twice()
                journal = self.db.with_name(self.db.name + ".journal")
                assert not journal.exists() or not list(journal.glob("*.jsonl"))
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def test_journal_kill_resume_state_machine(world):
    run_state_machine_as_test(
        JournalMachine,
        settings=settings(
            max_examples=15,
            stateful_step_count=3,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


def test_killed_with_every_answer_buffered_resumes_each_from_the_journal_once(world, tmp_path):
    """A session killed before its first write (one batch would have held the whole run): its answers were in
    memory and in its journal only. The resume reads each from the journal once (no call paid twice), asks again
    only the call in flight at the kill, and ends with the answers of an uninterrupted run."""
    from tests.runner._kill_child import run_then_die

    db = tmp_path / "wb.duckdb"
    shutil.copy(W.template, db)
    _emulator_idle()
    W.answerer.reset()
    with connect(db) as con:
        run_id = start_run(con, dataset="journal", schema=banking_schema(), provider_spec=SPEC,
                           options=RunOptions(concurrency=1, timeout=60.0))  # fmt: skip
    # killed once the last response has arrived, before the runner saw it; no write by count or by time
    proc = W.ctx.Process(target=run_then_die, args=(str(db), run_id, W.env, N_ITEMS, "after_response", 10**6, 3600.0))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -9
    _emulator_idle()
    journal = db.with_name(db.name + ".journal")
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM answers WHERE run_id = ?", [run_id]).fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM calls").fetchone()[0] == 0
    assert list(journal.glob("*.jsonl")), "the buffered answers' calls are in the journal"
    assert sorted(W.answerer.snapshot().values()) == [1] * N_ITEMS

    with connect(db) as con:
        s = resume_run(con, run_id, env=W.env, progress=False)
        assert _answers(con, run_id) == W.reference
    assert (s["status"], s["missing"], s["answered"], s["failed"]) == ("done", 0, N_ITEMS, 0), s
    assert s["this_session"]["calls_recovered_from_journal"] == N_ITEMS - 1
    assert s["this_session"]["requests_sent"] == 1  # the call in flight at the kill, and no other
    assert s["billed_unanswered_calls"] == 1
    # paid: every item once, the one in flight twice (billed at the kill, asked again)
    assert sorted(W.answerer.snapshot().values()) == [1] * (N_ITEMS - 1) + [2]
    assert not list(journal.glob("*.jsonl"))
