"""The decision log under hostile conditions (issue 25), with the runtime alone: several writers
(threads, objects, processes, forks) on one path with rotation, O(1) rotation that never renames a
backup, the older ``.1 .2`` layout still read, a full disk and a file-size limit, a FIFO at the path,
a writer that died mid-line, and rate-limited warnings that never quote a record."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import workbench_runtime
from workbench_runtime import DecisionLog, Policy
from workbench_runtime.decision_log import backup_path, log_files, read_decision_log

DATA = Path(os.environ.get("WORKBENCH_RUNTIME_FIXTURES") or Path(__file__).with_name("data"))
PACKAGE_ROOT = str(Path(workbench_runtime.__file__).resolve().parents[1])
WRITER = Path(__file__).with_name("log_writer.py")
DECISION = SimpleNamespace(action="accept", option="a", would_accept=None, p_top=0.9, margin=0.5)
LOGGER = "workbench_runtime.decision_log"


def write(log: DecisionLog, did: str) -> bool:
    """One decision of one question (a ~230-byte line), as ``Policy.decide`` logs it."""
    return log.log_decisions(
        {"q": DECISION},
        decision_id=did,
        policy_hash="sha256:test",
        policy_version="1",
        model="m",
        schema_hash=None,
        probs={"q": [0.9, 0.05, 0.05]},
    )


def spawn(**args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WRITER), PACKAGE_ROOT, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out)


def read_ids(path: Path) -> tuple[list[str], list[str]]:
    """Every decision id read back (in file order) and the reader's warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = [r["decision_id"] for r in read_decision_log(path)]
    return ids, [str(w.message) for w in caught]


def assert_each_once(ids: list[str], expected: list[str]) -> None:
    counts = Counter(ids)
    twice = [i for i, n in counts.items() if n > 1]
    missing = set(expected) - set(counts)
    assert not twice and not missing, f"{len(missing)} lost, {len(twice)} read twice (of {len(expected)})"
    assert len(ids) == len(expected)


@pytest.fixture(scope="module")
def exported() -> tuple[Policy, list[dict]]:
    responses = [json.loads(x) for x in (DATA / "workbench-responses.jsonl").read_text().splitlines() if x.strip()]
    return Policy.load(DATA / "workbench-policy.json"), responses


# -- several writers ------------------------------------------------------------------------------------
def test_two_processes_rotating_one_path_lose_nothing(tmp_path):
    path, start = tmp_path / "d.jsonl", tmp_path / "go"
    procs = [spawn(path=str(path), prefix=f"p{k}", n=4000, rotate_bytes=8192, start=str(start)) for k in range(2)]
    time.sleep(0.5)  # both children importing: let them meet at the start line
    start.touch()
    results = [finish(p) for p in procs]
    ids, warned = read_ids(path)
    assert_each_once(ids, [f"p{k}-{i}" for k in range(2) for i in range(4000)])
    assert sum(r["n_records"] for r in results) == len(ids) and all(r["n_errors"] == 0 for r in results)
    assert not warned
    for k in range(2):  # one writer's records stay in its order
        mine = [i for i in ids if i.startswith(f"p{k}-")]
        assert mine == [f"p{k}-{i}" for i in range(4000)]


def test_eight_objects_in_one_process_rotating_one_path_lose_nothing(tmp_path):
    path = tmp_path / "d.jsonl"
    logs = [DecisionLog(path, rotate_bytes=8192) for _ in range(8)]

    def work(k: int) -> None:
        for i in range(1500):
            write(logs[k], f"o{k}-{i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for log in logs:
        log.close()
    ids, warned = read_ids(path)
    assert_each_once(ids, [f"o{k}-{i}" for k in range(8) for i in range(1500)])
    assert sum(log.n_records for log in logs) == len(ids) and sum(log.n_errors for log in logs) == 0
    assert sum(log.n_rotations for log in logs) == len(log_files(path)) - 1 and not warned


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_children_of_one_log_do_not_share_its_lock(tmp_path):
    path = tmp_path / "d.jsonl"
    log = DecisionLog(path, rotate_bytes=4096)
    assert write(log, "parent-first")  # the parent holds its descriptors when it forks
    pids = []
    for c in range(2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 3
            try:
                ok = [write(log, f"c{c}-{i}") for i in range(600)]
                code = 0 if all(ok) and log.n_records == 601 and log.n_errors == 0 else 1
            finally:
                os._exit(code)
        pids.append(pid)
    ok = [write(log, f"p-{i}") for i in range(600)]
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    log.close()
    assert codes == [0, 0] and all(ok)
    ids, warned = read_ids(path)
    assert_each_once(ids, ["parent-first"] + [f"{w}-{i}" for w in ("c0", "c1", "p") for i in range(600)])
    assert not warned


def test_acceptance_four_threads_and_four_processes_ten_thousand_each(tmp_path):
    """8 writers x 10,000 decisions on one path with small files: every line read back exactly once,
    also by readers running while the writers rotate (no record twice in any one read)."""
    path, start, n = tmp_path / "d.jsonl", tmp_path / "go", 10_000
    procs = [spawn(path=str(path), prefix=f"proc{k}", n=n, rotate_bytes=65536, start=str(start)) for k in range(4)]
    shared = DecisionLog(path, rotate_bytes=65536)  # two threads share one object, two have their own
    logs = [shared, shared, DecisionLog(path, rotate_bytes=65536), DecisionLog(path, rotate_bytes=65536)]
    done = threading.Event()
    reads: list[int] = []

    def work(k: int) -> None:
        while not start.exists():
            time.sleep(0.001)
        for i in range(n):
            write(logs[k], f"thread{k}-{i}")

    def reader() -> None:
        while not done.is_set():
            ids = [r["decision_id"] for r in read_decision_log(path)]
            assert len(ids) == len(set(ids)), "a record read twice by one reader"
            reads.append(len(ids))
            time.sleep(0.2)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a reader may meet a line being written: skipped, read next time
        watcher = threading.Thread(target=reader)
        for t in threads:
            t.start()
        time.sleep(0.5)
        start.touch()
        watcher.start()
        results = [finish(p) for p in procs]
        for t in threads:
            t.join()
        done.set()
        watcher.join()
    for log in logs:
        log.close()
    ids, warned = read_ids(path)
    expected = [f"{w}{k}-{i}" for w in ("proc", "thread") for k in range(4) for i in range(n)]
    assert_each_once(ids, expected)
    n_records = sum(r["n_records"] for r in results) + shared.n_records + logs[2].n_records + logs[3].n_records
    assert n_records == len(ids) == 80_000 and not warned
    assert sum(r["n_errors"] for r in results) + sum(log.n_errors for log in logs[1:]) == 0
    sizes = [f.stat().st_size for f in log_files(path)]
    # it did rotate, in time (past the size by at most the lines the other writers appended at once), and read
    assert len(sizes) > 250 and max(sizes) <= 65536 + 7 * 300 and reads


# -- rotation ----------------------------------------------------------------------------------------------
def test_a_rotation_renames_only_the_live_file(tmp_path):
    """O(1) rotation: a backup keeps its name and its inode until it is deleted (oldest first)."""
    path = tmp_path / "d.jsonl"
    seen: dict[str, int] = {}
    with DecisionLog(path, rotate_bytes=600) as log:  # two decisions a file
        for i in range(300):
            assert write(log, str(i))
            now = {f.name: f.stat().st_ino for f in log_files(path)[:-1]}
            assert all(now[name] == ino for name, ino in seen.items()), f"a backup moved at decision {i}"
            seen = now
    assert log.n_rotations == 149 and [f.name for f in log_files(path)] == [
        *(backup_path(path, k).name for k in range(1, 150)),
        "d.jsonl",
    ]
    ids, _ = read_ids(path)
    assert ids == [str(i) for i in range(300)]
    kept = tmp_path / "k.jsonl"
    with DecisionLog(kept, rotate_bytes=600, backups=3) as small:
        for i in range(100):
            write(small, str(i))
    assert [f.name for f in log_files(kept)] == [*(backup_path(kept, k).name for k in (47, 48, 49)), "k.jsonl"]
    assert read_ids(kept)[0] == [str(i) for i in range(92, 100)]


def test_the_older_layout_is_read_first_and_continued(tmp_path):
    path = tmp_path / "d.jsonl"
    for name, ids in (("d.jsonl.2", "01"), ("d.jsonl.1", "23"), ("d.jsonl", "4")):
        (tmp_path / name).write_text("".join(json.dumps({"decision_id": i}) + "\n" for i in ids))
    with DecisionLog(path, rotate_bytes=600) as log:
        for i in range(5, 12):
            write(log, str(i))
    names = [f.name for f in log_files(path)]
    assert names[:2] == ["d.jsonl.2", "d.jsonl.1"] and names[-1] == "d.jsonl"
    assert read_ids(path)[0] == [str(i) for i in range(12)]
    with DecisionLog(path, rotate_bytes=600, backups=2) as log:  # the first rotation sweeps the oldest
        write(log, "12")
        write(log, "13")
    assert len(log_files(path)) == 3 and read_ids(path)[0][-2:] == ["12", "13"]
    assert not (tmp_path / "d.jsonl.2").exists() and not (tmp_path / "d.jsonl.1").exists()


# -- torn lines, full disks ---------------------------------------------------------------------------------
def test_a_writer_dying_mid_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "d.jsonl"
    with DecisionLog(path) as log:
        assert write(log, "a")
        with open(path, "ab") as fh:  # another process was killed in the middle of its write
            fh.write(b'{"decision_id":"torn","time":"2026-')
        assert write(log, "b")
    ids, warned = read_ids(path)
    assert ids == ["a", "b"] and len(warned) == 1 and "torn" in warned[0]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE semantics are Linux's")
def test_a_partial_write_past_a_file_size_limit_counts_as_an_error(tmp_path):
    path = tmp_path / "d.jsonl"
    result = finish(spawn(path=str(path), prefix="x", n=40, n_limited=25, fsize=4096, list_ok=True))
    ids, warned = read_ids(path)
    fit = sum(int(did.split("-")[1]) < 25 for did in result["ok"])  # the decisions under the limit
    assert 0 < fit < 25 and result["ok"] == [f"x-{i}" for i in (*range(fit), *range(25, 40))]
    assert ids == result["ok"] and result["n_records"] == len(ids) and result["n_errors"] == 25 - fit
    assert not warned  # the torn fragment was removed, nothing was glued to it
    assert any("partial write" in m for m in result["warnings"])


def _mount_tmpfs(where: Path, size: str) -> bool:
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return proc.returncode == 0


def test_a_full_disk_counts_partial_writes_as_errors(tmp_path, caplog):
    """A real full file system (a 64 KiB tmpfs; needs root): nothing counted is missing, nothing torn."""
    mnt = tmp_path / "mnt"
    if not _mount_tmpfs(mnt, "64k"):
        pytest.skip("cannot mount a small tmpfs here (needs root on Linux)")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    try:
        filler = mnt / "filler"
        filler.write_bytes(b"x" * 16384)
        path = mnt / "d.jsonl"
        ok = []
        with DecisionLog(path) as log:
            for i in range(400):  # ~92 KB: the disk fills up on the way
                if write(log, f"full-{i}"):
                    ok.append(f"full-{i}")
            assert log.n_errors > 0
            filler.unlink()  # space again
            for i in range(20):
                if write(log, f"after-{i}"):
                    ok.append(f"after-{i}")
        ids, warned = read_ids(path)
        assert ids == ok and log.n_records == len(ok) and ok[-20:] == [f"after-{i}" for i in range(20)]
        assert log.n_records + log.n_errors == 420 and not warned
        messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert any("partial write" in m for m in messages) and not any("full-" in m for m in messages)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


# -- the path is not a regular file ------------------------------------------------------------------------
def test_a_fifo_at_the_path_is_refused_and_never_blocks_decide(exported, tmp_path):
    policy, responses = exported
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)
    log = DecisionLog(fifo)
    assert log.last_error and "FIFO" in log.last_error  # said when the log is built
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(d=policy.decide(responses[0], decision_id="x", log=log)))
    t.daemon = True
    t.start()
    t.join(10)
    if t.is_alive():  # let the blocked open go, then fail
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t.join(10)
        os.close(fd)
        pytest.fail("decide blocked on a FIFO at the log path")
    assert got["d"] == policy.decide(responses[0])
    assert log.n_errors == 1 and log.n_records == 0 and "FIFO" in log.last_error
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader on the FIFO: still refused, nothing sent
    try:
        assert not write(log, "y") and log.n_errors == 2
        assert os.read(fd, 4096) == b""
    finally:
        os.close(fd)
    later = tmp_path / "later.jsonl"
    log2 = DecisionLog(later)
    os.mkfifo(later)  # appeared after the log was built: refused at the open
    assert not write(log2, "z") and "FIFO" in (log2.last_error or "")


# -- warnings ---------------------------------------------------------------------------------------------
def test_failures_are_warned_once_per_kind_and_never_quote_a_record(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    blocked = tmp_path / "dir"
    blocked.mkdir()
    log = DecisionLog(blocked)
    for i in range(5):
        assert not write(log, f"confidential-{i}")
    assert not log.append([{"decision_id": "confidential-x", "p": float("nan")}])  # not JSON
    assert not log.append([{"decision_id": "confidential-y", "p": float("inf")}])
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert log.n_errors == 7 and len(messages) == 2, messages
    assert "is a directory" in messages[0] and str(blocked) in messages[0]
    assert "record encoding failed: ValueError" in messages[1]
    assert not any("confidential" in m for m in messages)
