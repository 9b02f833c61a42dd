"""The runtime's decision log as a hypothesis state machine (issue 25, "Nothing lost, nothing wrong").

Each example is one log path in a fresh temporary directory and up to six ``DecisionLog`` writers on it
(each with its own ``rotate_bytes``: never, tiny or small). Rules: a writer appends a decision of one to
three questions; several threads append at once through shared and separate writers; a rotation is
forced (a writer whose ``rotate_bytes`` is 1 rotates before any write to a non-empty file); a writer
process dies in the middle of a line (a torn fragment is left at the end of the live file, and that
writer is gone); a writer is closed; a fresh writer joins.

Invariants, after every step, read by ``read_decision_log`` (every file, oldest first):

- every record a writer reported as written (``append`` returned true) is read back exactly once, and
  nothing else is (no record of a torn fragment, no record twice);
- the writers' ``n_records`` add up to what the reader reads, with no error counted;
- the reader skips exactly one line per crash (fragments of crashes with no write between them share
  one): no record is glued to a fragment; and each writer's records come back in the order it wrote them.

Budget: 60 examples of at most 30 steps (~5-25 s on a loaded 2-core machine).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
import warnings
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from workbench_runtime.decision_log import DecisionLog, log_files, read_decision_log

ROTATE = st.sampled_from([None, 200, 450, 1000, 4096])
MAX_WRITERS = 6


class DecisionLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="wb-decision-log-"))
        self.path = self.dir / "decisions.jsonl"
        self.writers: list[DecisionLog] = []
        self.counted_closed = 0  # n_records of writers already closed
        self.written: list[str] = []  # "writer/decision/question" keys of every record reported written
        self.torn_lines = 0  # crashes with a write between them (two fragments in a row share a line)
        self.tail_torn = False
        self.seq = itertools.count(1)  # next() is atomic: threads draw distinct numbers

    # -- helpers -------------------------------------------------------------------------------------
    def _append(self, log: DecisionLog, tag: str, n_questions: int) -> list[str]:
        seq = next(self.seq)
        keys = [f"{tag}/{seq}/q{j}" for j in range(n_questions)]
        records = [{"decision_id": k, "question": k.rsplit("/", 1)[1], "p": [0.5, 0.25, 0.25]} for k in keys]
        if not log.append(records):
            return []
        self.tail_torn = False
        return keys

    def _drop(self, i: int) -> None:
        log = self.writers.pop(i)
        log.close()
        self.counted_closed += log.n_records
        assert log.n_errors == 0, log.last_error

    # -- rules ---------------------------------------------------------------------------------------
    @initialize(rotate=ROTATE)
    def first_writer(self, rotate: int | None) -> None:
        self.writers.append(DecisionLog(self.path, rotate_bytes=rotate))

    @precondition(lambda self: len(self.writers) < MAX_WRITERS)
    @rule(rotate=ROTATE)
    def writer_joins(self, rotate: int | None) -> None:
        self.writers.append(DecisionLog(self.path, rotate_bytes=rotate))

    @precondition(lambda self: self.writers)
    @rule(w=st.integers(0, MAX_WRITERS - 1), n_questions=st.integers(1, 3), times=st.integers(1, 8))
    def append(self, w: int, n_questions: int, times: int) -> None:
        i = w % len(self.writers)
        for _ in range(times):
            self.written += self._append(self.writers[i], f"w{id(self.writers[i])}", n_questions)

    @precondition(lambda self: self.writers)
    @rule(n_threads=st.integers(2, 4), each=st.integers(1, 30), shared=st.booleans())
    def threads_append(self, n_threads: int, each: int, shared: bool) -> None:
        got: list[list[str]] = [[] for _ in range(n_threads)]

        def work(t: int) -> None:
            log = self.writers[0 if shared else t % len(self.writers)]
            for _ in range(each):
                # one tag per thread: its own records come back in its order
                got[t] += self._append(log, f"t{t}-{id(got)}", 1)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.written += [k for keys in got for k in keys]

    @rule(n_questions=st.integers(1, 3))
    def forced_rotation(self, n_questions: int) -> None:
        with DecisionLog(self.path, rotate_bytes=1) as rotating:
            self.written += self._append(rotating, f"r{id(rotating)}", n_questions)
        self.counted_closed += rotating.n_records
        assert rotating.n_errors == 0 and rotating.n_rotations <= 1

    @precondition(lambda self: self.writers)
    @rule(w=st.integers(0, MAX_WRITERS - 1), cut=st.integers(1, 60))
    def writer_dies_mid_line(self, w: int, cut: int) -> None:
        line = b'{"decision_id":"torn","question":"q0","p":[0.5,0.25,0.25]}\n'
        with open(self.path, "ab") as fh:  # what its last, interrupted write left
            fh.write(line[: min(cut, len(line) - 2)])  # not yet a whole object
        self.torn_lines += not self.tail_torn
        self.tail_torn = True
        self._drop(w % len(self.writers))

    @precondition(lambda self: self.writers)
    @rule(w=st.integers(0, MAX_WRITERS - 1))
    def writer_closes(self, w: int) -> None:
        self._drop(w % len(self.writers))

    # -- invariants ----------------------------------------------------------------------------------
    @invariant()
    def every_written_record_read_back_exactly_once(self) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            keys = [r["decision_id"] for r in read_decision_log(self.path)]
        assert Counter(keys) == Counter(self.written) and len(set(keys)) == len(keys)
        assert sum(log.n_records for log in self.writers) + self.counted_closed == len(keys)
        assert all(log.n_errors == 0 for log in self.writers)
        assert len(caught) == self.torn_lines, [str(w.message) for w in caught]
        by_tag: dict[str, list[int]] = {}
        for k in keys:
            tag, seq, _ = k.split("/")
            by_tag.setdefault(tag, []).append(int(seq))
        assert all(seqs == sorted(seqs) for seqs in by_tag.values())
        assert all(f.exists() for f in log_files(self.path))

    def teardown(self) -> None:
        for log in self.writers:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_decision_log_state_machine() -> None:
    run_state_machine_as_test(
        DecisionLogMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
