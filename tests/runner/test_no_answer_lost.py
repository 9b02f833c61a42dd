"""Nothing lost, nothing wrong (issue 25): a run ends ``done`` only when the store holds a row (an answer or a
failure) for every planned item × question.

Real components only: a DuckDB file in tmp_path, the emulator over loopback HTTP, the Cloudflare provider. The
providers below are real ones behind a thin wrapper that adds what a busy machine does to the runner at the
worst moment (the event loop's default thread pool full, rows gone from the store).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from workbench.emulator import run_emulator
from workbench.runner import execute, outcome
from workbench.runner.execute import RunOptions, build_provider, execute_run, start_run
from workbench.store import calls as calls_store
from workbench.store.db import connect
from workbench.store.runs import get_run

from .conftest import banking_schema, import_banking, import_banking_items

TOKEN = "cf-test-token-25-nothing-lost"
SPEC = "cloudflare:clef"


@pytest.fixture(scope="module")
def emu():
    with run_emulator(port=0, require_token=TOKEN) as server:
        yield server


@pytest.fixture
def env(emu):
    emu.reset_stats()
    emu.set_faults(
        latency_ms=0.0, rate_limit=0.0, server_error=0.0, timeout=0.0, malformed=0.0, reset=0.0, overloaded=0.0
    )
    return {
        "CLOUDFLARE_API_KEY": TOKEN,
        "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
        "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
    }


class _Wrapped:
    """A real provider; subclasses add something at its ``n``-th response."""

    def __init__(self, inner, n: int):
        self._inner, self._n, self._seen = inner, n, 0

    def __getattr__(self, name):
        if name.startswith("_"):  # not set yet (a copy, a half-built object): no recursion through _inner
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def decide(self, request):
        result = await self._inner.decide(request)
        self._seen += 1
        if self._seen == self._n:
            await self.at_last()
        return result

    async def at_last(self) -> None:
        pass

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BusyDefaultExecutorAtTheEnd(_Wrapped):
    """At its last response, fills the event loop's default thread pool (as slow ``getaddrinfo`` calls or any
    other ``asyncio.to_thread`` user can) and holds the last worker past ``BATCH_SECONDS``, so that the runner's
    periodic write is due while no thread of that pool is free. The pool frees up when the provider closes."""

    def __init__(self, inner, n: int):
        super().__init__(inner, n)
        self.release = threading.Event()

    async def at_last(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(64):  # more than any default pool has threads: the next job queues
            loop.run_in_executor(None, self.release.wait, 10.0)
        await asyncio.sleep(execute.BATCH_SECONDS + 0.3)

    async def aclose(self) -> None:
        self.release.set()
        await self._inner.aclose()


def _new_run(con, name: str, env: dict, *, limit: int | None = None, concurrency: int = 4):
    opts = RunOptions(limit=limit, concurrency=concurrency, timeout=60.0)  # no retry, however loaded the machine
    run_id = start_run(con, dataset=name, schema=banking_schema(), provider_spec=SPEC, options=opts)
    provider = build_provider(con, SPEC, dataset=name, dataset_version=1, options=opts, env=env)
    return run_id, provider


def _leftover_segments(db: Path) -> list[Path]:
    d = db.with_name(db.name + ".journal")
    return sorted(d.glob("*.jsonl")) if d.exists() else []


def _rows(con, run_id: str) -> tuple[int, int]:
    """(rows, distinct item × question pairs) of a run."""
    return con.execute(
        "SELECT count(*), count(DISTINCT (item_id, question)) FROM answers WHERE run_id = ?", [run_id]
    ).fetchone()


# -- the cause: a periodic write cancelled before it ran ------------------------------------------------------
def test_a_write_due_while_the_default_thread_pool_is_busy_is_not_lost(tmp_path, emu, env):
    """Before the fix: the flusher's write waited in the loop's default pool, the end of the run cancelled the
    flusher, asyncio cancelled the queued job, and the batch (19 of 20 answers here) never reached the store
    while the run reported ``done`` with 0 failures; its calls sat in a leftover journal segment."""
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data")
    run_id, provider = _new_run(con, name, env, limit=20)
    s = execute_run(con, run_id, env=env, provider=_BusyDefaultExecutorAtTheEnd(provider, 20), progress=False)
    assert emu.request_count() == 20
    assert (s["status"], s["answered"], s["failed"]) == ("done", 20, 0)  # before: ("done", 1, 0)
    assert _rows(con, run_id) == (20, 20)
    assert _leftover_segments(db) == []
    assert (s["missing"], s["planned"]) == (0, 20)


# -- the end-of-run count ---------------------------------------------------------------------------------------
class _RowsVanish(_Wrapped):
    """At its last response, waits until ``k`` answers of the run are committed, then deletes them (and, with
    ``calls=True``, the cached calls they came from) through another cursor: rows that never reached the store,
    whatever the cause."""

    def __init__(self, inner, n: int, con, run_id: str, k: int, *, calls: bool):
        super().__init__(inner, n)
        self.cur, self.run_id, self.k, self.calls = con.cursor(), run_id, k, calls
        self.deleted: list[str] = []

    async def at_last(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            n = self.cur.execute("SELECT count(*) FROM answers WHERE run_id = ?", [self.run_id]).fetchone()[0]
            if n >= self.k:
                break
            await asyncio.sleep(0.02)
        ids = [
            r[0]
            for r in self.cur.execute(
                "SELECT item_id FROM answers WHERE run_id = ? ORDER BY item_id LIMIT ?", [self.run_id, self.k]
            ).fetchall()
        ]
        assert len(ids) == self.k, "the runner committed nothing in 30 s"
        if self.calls:
            self.cur.execute(
                "DELETE FROM calls WHERE cache_key IN (SELECT cache_key FROM answers WHERE run_id = ?"
                " AND list_contains(?, item_id))",
                [self.run_id, ids],
            )
        self.cur.execute("DELETE FROM answer_rows WHERE run_id = ? AND list_contains(?, item_id)", [self.run_id, ids])
        self.deleted = ids


def test_rows_missing_at_the_end_are_answered_again_from_the_cache(tmp_path, emu, env, monkeypatch):
    monkeypatch.setattr(execute, "BATCH_ROWS", 5)  # commit early, while the last worker waits
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data")
    run_id, provider = _new_run(con, name, env, limit=30)
    wrapped = _RowsVanish(provider, 30, con, run_id, 6, calls=False)
    s = execute_run(con, run_id, env=env, provider=wrapped, progress=False)
    assert len(wrapped.deleted) == 6
    assert emu.request_count() == 30, "the missing answers come from the cache: no new request"
    assert (s["status"], s["answered"], s["failed"]) == ("done", 30, 0)  # before: ("done", 24, 0)
    assert s["missing"] == 0
    assert _rows(con, run_id) == (30, 30)
    assert s["this_session"]["new_calls"] == 30 and s["this_session"]["cache_hits"] == 0


def test_rows_that_cannot_be_rebuilt_end_the_run_incomplete_not_done(tmp_path, emu, env, monkeypatch, capsys):
    monkeypatch.setattr(execute, "BATCH_ROWS", 5)
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data")
    run_id, provider = _new_run(con, name, env, limit=30)
    wrapped = _RowsVanish(provider, 30, con, run_id, 6, calls=True)
    s = execute_run(con, run_id, env=env, provider=wrapped, progress=False)
    assert (s["status"], s["answered"], s["failed"]) == ("incomplete", 24, 0)  # before: ("done", 24, 0)
    assert (s["missing"], s["planned"]) == (6, 30)
    assert get_run(con, run_id)["status"] == "incomplete"
    assert outcome.run_exit_code(s) == outcome.EXIT_INCOMPLETE == 7
    assert outcome.exit_code([{"status": "stopped", "stop_kind": "quota"}, s]) == 7  # the most severe

    from workbench.cli.run import _print_summary

    _print_summary(s)
    err = " ".join(capsys.readouterr().err.split())
    assert "incomplete: 6 of 30 item × question(s) have neither an answer nor a failure" in err
    assert f"workbench run --resume {run_id}" in err

    # --resume asks exactly the six
    before = emu.request_count()
    s2 = execute.resume_run(con, run_id, env=env, progress=False)
    assert emu.request_count() - before == 6
    assert (s2["status"], s2["answered"], s2["missing"]) == ("done", 30, 0)


class _ConflictingRow(_Wrapped):
    """At its ``n``-th request, another cursor moves the answers table away (as another writer could): the
    runner's next batch write then fails (no table to insert into)."""

    def __init__(self, inner, n: int, con, run_id: str):
        super().__init__(inner, n)
        self.cur, self.run_id = con.cursor(), run_id
        self.item_id = ""

    async def decide(self, request):
        self._seen += 1
        if self._seen == self._n:
            self.item_id = request.item_id
            self.cur.execute("ALTER TABLE answer_rows RENAME TO answer_rows_away")
        return await self._inner.decide(request)


def test_a_failed_write_propagates_and_its_calls_are_not_lost(tmp_path, emu, env, monkeypatch):
    """Before: the flusher swallowed the write's error, the batch vanished, and the run ended ``done``."""
    import duckdb

    monkeypatch.setattr(execute, "BATCH_ROWS", 5)
    emu.set_faults(latency_ms=20.0)  # the run lasts long enough for several periodic writes
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data")
    run_id, provider = _new_run(con, name, env, limit=30, concurrency=2)
    wrapped = _ConflictingRow(provider, 8, con, run_id)
    with pytest.raises(duckdb.CatalogException):
        execute_run(con, run_id, env=env, provider=wrapped, progress=False)
    assert get_run(con, run_id)["status"] == "running"  # not "done": nothing could be recorded
    assert _leftover_segments(db), "the calls of the unwritten batch stay in the journal"
    asked = emu.request_count()
    assert asked < 30, "the failed write stopped the run"

    con.execute("ALTER TABLE answer_rows_away RENAME TO answer_rows")
    emu.set_faults(latency_ms=0.0)
    s = execute.resume_run(con, run_id, env=env, progress=False)
    assert (s["status"], s["answered"], s["failed"], s["missing"]) == ("done", 30, 0, 0)
    assert s["this_session"]["calls_recovered_from_journal"] >= 1
    # every call answered before the failure came back from the journal: asked again are only the items never
    # asked and the calls in flight when the run stopped (billed, and counted as such)
    billed = s["billed_unanswered_calls"]
    assert emu.request_count() == 30 + billed and billed <= 2
    assert _leftover_segments(db) == []


# -- the store's count and the journal of one writer ----------------------------------------------------------
def test_count_missing_answers_counts_pairs_without_a_row(tmp_path):
    con = connect(tmp_path / "wb.duckdb")
    rows = [
        {"run_id": "r", "item_id": "a", "question": "q1", "probs": [0.2, 0.8]},
        {"run_id": "r", "item_id": "a", "question": "q2", "probs": None, "failure_kind": "server"},
        {"run_id": "r", "item_id": "b", "question": "q1", "probs": [1.0, 0.0]},
        {"run_id": "other", "item_id": "c", "question": "q1", "probs": [1.0, 0.0]},
    ]
    calls_store.write_batch(con, [], rows, replace=False)
    # a failure counts as a row; "c" is answered in another run only; "d" nowhere
    assert calls_store.count_missing_answers(con, "r", ["a", "b", "c", "d"], ["q1", "q2"]) == 5
    assert calls_store.missing_answers(con, "r", ["a", "b", "c", "d"], ["q1", "q2"]) == {
        "b": {"q2"},
        "c": {"q1", "q2"},
        "d": {"q1", "q2"},
    }
    assert calls_store.count_missing_answers(con, "r", ["a"], ["q1", "q2"]) == 0
    assert calls_store.count_missing_answers(con, "r", [], ["q1"]) == 0


def test_answer_vectors_buffered_as_arrays_are_stored_as_lists_of_the_same_bits(tmp_path):
    """The recorder buffers each answer's numpy vector (no list of Python floats): what is stored, and the
    summaries, are bit for bit those of the same vectors given as lists; failures stay NULL."""
    import numpy as np

    con = connect(tmp_path / "wb.duckdb")
    rng = np.random.default_rng(7)
    vecs = [rng.dirichlet(np.ones(k)) for k in (77, 77, 3, 77)] + [np.array([-0.0, 1.0, np.nan])]
    for run, as_list in (("arrays", False), ("lists", True)):
        rows = [
            {
                "run_id": run,
                "item_id": f"i{n}",
                "question": "q",
                "probs": v.tolist() if as_list else v,
                "deviation": 0.0,
            }
            for n, v in enumerate(vecs)
        ] + [{"run_id": run, "item_id": "f", "question": "q", "probs": None, "failure_kind": "server"}]
        calls_store.write_batch(con, [], rows, replace=False)
    cols = "item_id, probs, p_top, margin, top_option, entropy, failure_kind"
    got = {
        run: con.execute(f"SELECT {cols} FROM answers WHERE run_id = ? ORDER BY item_id", [run]).fetchall()
        for run in ("arrays", "lists")
    }
    assert repr(got["arrays"]) == repr(got["lists"])  # repr: NaN and -0.0 compared as written
    assert got["arrays"][0][:2] == ("f", None) and got["arrays"][1][1] == vecs[0].tolist()


def test_recover_journal_of_one_writer_leaves_the_others(tmp_path):
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    mine = calls_store.CallJournal(calls_store.journal_dir(con), "run-a")
    other = calls_store.CallJournal(calls_store.journal_dir(con), "run-b")

    def call(key: str, run: str) -> dict:
        return {"cache_key": key, "provider": SPEC, "response": json.dumps({"answers": {}}), "run_id": run}

    mine.sent("k1")
    mine.append(call("k1", "run-a"))
    mine.sent("k2")  # in flight when the segment rotates: answered in the next segment
    lost = mine.rotate()  # this segment's write never happened
    mine.append(call("k2", "run-a"))
    mine.close(delete=True)  # the session's last segment, committed
    other.sent("k3")
    other.append(call("k3", "run-b"))
    assert lost is not None and [p.name for p in _leftover_segments(db)] == [lost.name, f"{other.writer}.1.jsonl"]
    assert calls_store.recover_journal(con, writer=mine.writer, in_flight_billed=False) == 1
    assert con.execute("SELECT list(cache_key) FROM calls").fetchone()[0] == ["k1"]
    assert con.execute("SELECT count(*) FROM billed_unanswered").fetchone()[0] == 0, "k2 was answered, not lost"
    assert [p.name for p in _leftover_segments(db)] == [f"{other.writer}.1.jsonl"], "another run's segment stays"
    other.close(delete=True)


def test_write_batch_keeps_one_call_per_key(tmp_path):
    """A batch of distinct keys is inserted as is; a key already cached is ignored; a key twice in one batch
    is stored once (the DISTINCT ON path)."""
    con = connect(tmp_path / "wb.duckdb")

    def call(key: str, run: str, n: int) -> dict:
        return {"cache_key": key, "provider": SPEC, "response": json.dumps({"answers": {}, "n": n}), "run_id": run}

    calls_store.write_batch(con, [call("k1", "a", 1), call("k2", "a", 2)], [])
    calls_store.write_batch(con, [call("k1", "b", 3), call("k3", "b", 4), call("k3", "b", 5)], [])
    rows = con.execute("SELECT cache_key, run_id, response->>'n' FROM calls ORDER BY cache_key").fetchall()
    assert rows[:2] == [("k1", "a", "1"), ("k2", "a", "2")]
    assert rows[2][:2] == ("k3", "b") and rows[2][2] in ("4", "5") and len(rows) == 3


def test_journal_marker_lines_are_the_json_of_their_documents(tmp_path):
    """``sent``/``settled`` markers are written without building a dict: the bytes are still exactly
    ``json.dumps(doc, ensure_ascii=False, separators=(",", ":"))``, whatever the key or run id hold."""
    odd = 'q"uote\\ back é \u2028 \x01'
    for run_id in ("run-a", odd):
        journal = calls_store.CallJournal(tmp_path / run_id.encode().hex(), run_id)
        for key in ("0" * 64, odd):
            journal.sent(key)
            journal.settled(key)
        journal.sent("carried")
        segment = journal.rotate()  # the in-flight marker is rewritten into the next segment
        assert segment is not None
        lines = segment.read_text(encoding="utf-8") + journal._path.read_text(encoding="utf-8")
        docs = [{kind: key, "run_id": run_id} for key in ("0" * 64, odd) for kind in ("sent", "settled")] + [
            {"sent": "carried", "run_id": run_id}
        ] * 2
        assert lines == "".join(json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n" for d in docs)
        journal.close(delete=True)


def test_journaled_responses_come_back_as_received_and_a_torn_record_is_a_call_in_flight(tmp_path):
    """A call's response text is journaled on a line of its own, as received (no JSON string escaping); texts
    holding U+2028, NEL or line breaks come back exactly. A record cut short by a kill is not read as an answer:
    its call counts as billed and unanswered, and the records before it are all recovered."""
    texts = {
        "plain": json.dumps({"answers": {"q": {"type": "noul", "noul": 0.25}}}, separators=(",", ":")),
        "odd": '{"answers":{},"note":"q\\"uote \\\\ é \u2028 \u2029 \x85"}',  # splitlines() breaks at the last three
        "pretty": json.dumps({"answers": {}, "n": 1}, indent=2),  # line breaks: the text is escaped inside its row
        "cr": '{"answers":{},\r"n":2}',
    }
    con = connect(tmp_path / "wb.duckdb")
    journal = calls_store.CallJournal(calls_store.journal_dir(con), "run-a")
    for key, text in texts.items():
        journal.sent(key)
        journal.append({"cache_key": key, "provider": SPEC, "response": text, "run_id": "run-a", "latency_ms": 1.5})
    segment = journal._path
    assert segment is not None
    before = segment.read_bytes()
    journal.sent("torn")
    marker = len(segment.read_bytes()) - len(before)
    journal.append({"cache_key": "torn", "provider": SPEC, "response": texts["plain"], "run_id": "run-a"})
    tail = segment.read_bytes()[len(before) :]
    journal.close(delete=False)
    head_end = marker + tail[marker:].index(b"\n")
    assert tail[head_end + 1 :] == texts["plain"].encode() + b"\n"  # the text as received, on its own line
    cuts = [marker, marker + 5, head_end, head_end + 1, head_end + 10, len(tail) - 2, len(tail) - 1, len(tail)]
    for cut in cuts:
        whole = cut >= len(tail) - 1  # the text is complete (its line end may be missing)
        segment.write_bytes(before + tail[:cut])
        assert calls_store.recover_journal(con) == len(texts) + whole, cut
        got = dict(con.execute("SELECT cache_key, CAST(response AS VARCHAR) FROM calls").fetchall())
        assert got == {**texts, **({"torn": texts["plain"]} if whole else {})}, cut
        assert con.execute("SELECT list(latency_ms) FILTER (WHERE cache_key <> 'torn') FROM calls").fetchone()[0] == [
            1.5
        ] * len(texts)
        billed = [r[0] for r in con.execute("SELECT cache_key FROM billed_unanswered").fetchall()]
        assert billed == ([] if whole else ["torn"]), cut
        assert not segment.exists()
        con.execute("DELETE FROM calls")
        con.execute("DELETE FROM billed_unanswered")


# -- stress: 1,000 items at concurrency 64 against a zero-latency emulator with its fault mix ------------------
FAULT_MIX = {
    "rate_limit": 0.10,
    "server_error": 0.02,
    "overloaded": 0.01,
    "reset": 0.01,
    "timeout": 0.01,
    "malformed": 0.01,
    "timeout_sleep_s": 1.0,
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stress_1000_items_at_concurrency_64_with_the_fault_mix_loses_nothing(tmp_path, emu, env, monkeypatch, seed):
    """``python bench/runner_stress.py`` repeats this 50 times."""
    monkeypatch.setitem(execute.BACKOFF_BASE_S, execute.ErrorKind.RATE_LIMIT, 0.02)
    monkeypatch.setattr(execute, "BACKOFF_DEFAULT_BASE_S", 0.02)
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking_items(con, tmp_path / "data", 1000)
    emu.set_faults(**FAULT_MIX, seed=seed)
    (run_id,) = execute.run_experiment(
        con, dataset=name, schema=banking_schema(), provider_specs=[SPEC], env=env, concurrency=64, timeout=0.5,
        progress=False,
    )  # fmt: skip
    s = get_run(con, run_id)["summary"]
    assert (s["planned"], s["missing"]) == (1000, 0)
    assert _rows(con, run_id) == (1000, 1000)
    # no bound on failures: on a loaded machine the 0.5 s per-call timeout fails hundreds of calls (measured up
    # to 601 of 1,000); every one of them must still have its row
    assert s["answered"] + s["failed"] == 1000
    assert s["status"] == "done" and _leftover_segments(db) == []
    assert s["failed_by_kind"].get("malformed", 0) > 0, "the fault mix reached the runner"
    time.sleep(FAULT_MIX["timeout_sleep_s"] + 0.1)  # the emulator finishes the abandoned (timed-out) requests
