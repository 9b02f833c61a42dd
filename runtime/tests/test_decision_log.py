"""The decision log with the runtime alone: one line per question decision, decisions unchanged,
rotation, a torn last line skipped with a warning, errors swallowed and counted, concurrent writers."""

from __future__ import annotations

import json
import os
import threading
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest
from workbench_runtime import DecisionLog, Policy, read_decision_log
from workbench_runtime.decision_log import iter_decision_log, log_files

DATA = Path(os.environ.get("WORKBENCH_RUNTIME_FIXTURES") or Path(__file__).with_name("data"))
FIELDS = [
    "decision_id",
    "time",
    "policy_hash",
    "policy_version",
    "model",
    "schema_hash",
    "question",
    "action",
    "option",
    "would_accept",
    "p_top",
    "margin",
    "probs",
]


@pytest.fixture(scope="module")
def exported() -> tuple[Policy, list[dict]]:
    responses = [json.loads(x) for x in (DATA / "workbench-responses.jsonl").read_text().splitlines() if x.strip()]
    return Policy.load(DATA / "workbench-policy.json"), responses


def test_one_line_per_question_decision_with_every_field(exported, tmp_path):
    policy, responses = exported
    with DecisionLog(tmp_path / "d.jsonl") as log:
        got = [policy.decide(r, decision_id=f"id-{i}", log=log) for i, r in enumerate(responses)]
    assert log.n_errors == 0 and log.n_records == sum(len(d) for d in got)
    recs = read_decision_log(tmp_path / "d.jsonl")
    assert len(recs) == log.n_records
    it = iter(recs)
    for i, (r, dec) in enumerate(zip(responses, got)):
        for q, d in dec.items():
            rec = next(it)
            assert list(rec) == FIELDS
            assert rec["decision_id"] == f"id-{i}" and rec["question"] == q
            assert (rec["action"], rec["option"], rec["would_accept"], rec["p_top"], rec["margin"]) == (
                d.action,
                d.option,
                d.would_accept,
                d.p_top,
                d.margin,
            )
            assert rec["policy_hash"] == policy.content_hash and rec["policy_version"] == policy.version
            assert rec["model"] == (r.get("model") if isinstance(r, dict) else None)
            assert datetime.fromisoformat(rec["time"]).utcoffset().total_seconds() == 0
            options = policy.questions[q].options
            if d.p_top is None:
                assert rec["probs"] is None or len(rec["probs"]) == len(options)
            else:
                assert len(rec["probs"]) == len(options) and abs(sum(rec["probs"]) - 1) < 1e-3


def test_logging_leaves_the_decisions_unchanged(exported, tmp_path):
    policy, responses = exported
    plain = policy.decide_many(responses)
    with DecisionLog(tmp_path / "d.jsonl") as log:
        logged = policy.decide_many(responses, decision_ids=[str(i) for i in range(len(responses))], log=log)
    assert plain == logged
    assert [r["decision_id"] for r in read_decision_log(tmp_path / "d.jsonl")][:1] == ["0"]


def test_rotation_keeps_every_record_in_order(exported, tmp_path):
    policy, responses = exported
    path = tmp_path / "d.jsonl"
    with DecisionLog(path, rotate_bytes=4096) as log:
        for i in range(60):
            policy.decide(responses[i % len(responses)], decision_id=str(i), log=log)
    files = log_files(path)
    assert log.n_rotations >= 3 and len(files) == log.n_rotations + 1
    assert all(f.stat().st_size <= 4096 or f.read_text().count("\n") == 1 for f in files)
    ids = list(dict.fromkeys(r["decision_id"] for r in read_decision_log(path)))
    assert ids == [str(i) for i in range(60)]
    with DecisionLog(tmp_path / "k.jsonl", rotate_bytes=2048, backups=2) as small:
        for i in range(60):
            policy.decide(responses[i % len(responses)], decision_id=str(i), log=small)
    assert len(log_files(tmp_path / "k.jsonl")) == 3  # the live file and two backups


def test_a_torn_last_line_is_skipped_and_ended_on_reopen(exported, tmp_path):
    policy, responses = exported
    path = tmp_path / "d.jsonl"
    with DecisionLog(path) as log:
        policy.decide(responses[0], decision_id="a", log=log)
    with open(path, "ab") as fh:
        fh.write(b'{"decision_id": "torn", "time": "2026-')  # the process died mid-write
    with pytest.warns(UserWarning, match="torn"):
        assert {r["decision_id"] for r in read_decision_log(path)} == {"a"}
    with DecisionLog(path) as log:
        policy.decide(responses[0], decision_id="b", log=log)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = list(iter_decision_log(path))
    assert [r["decision_id"] for r in recs][-1] == "b" and len(caught) == 1


def test_errors_are_swallowed_and_counted(exported, tmp_path):
    policy, responses = exported
    blocked = tmp_path / "dir"
    blocked.mkdir()
    log = DecisionLog(blocked)  # a directory: every write fails
    want = policy.decide(responses[0])
    assert policy.decide(responses[0], decision_id="x", log=log) == want
    assert log.n_errors == 1 and log.n_records == 0 and "IsADirectoryError" in log.last_error

    class Broken:
        def log_decisions(self, *a, **k):
            raise RuntimeError("boom")

    assert policy.decide(responses[0], log=Broken()) == want


def test_concurrent_writers_leave_whole_lines(exported, tmp_path):
    policy, responses = exported
    path = tmp_path / "d.jsonl"
    log = DecisionLog(path, rotate_bytes=None)

    def work(t: int) -> None:
        for i in range(100):
            policy.decide(responses[i % len(responses)], decision_id=f"{t}-{i}", log=log)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == log.n_records and all(json.loads(x)["decision_id"] for x in lines)
    assert len({json.loads(x)["decision_id"] for x in lines}) == 600


def test_a_given_clock_stamps_the_records(exported, tmp_path):
    policy, responses = exported
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with DecisionLog(tmp_path / "d.jsonl", clock=lambda: when) as log:
        policy.decide(responses[0], log=log)
    rec = read_decision_log(tmp_path / "d.jsonl")[0]
    assert rec["time"] == "2026-01-02T03:04:05.000000+00:00" and len(rec["decision_id"]) == 32
