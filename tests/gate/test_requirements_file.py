"""Issue 25: a requirements file is read through the hardened loader of schema files and validated in full
before anything is measured. Every bad file ends in one line and exit 2 (never a traceback, never exit 1,
never a PASS on a file two readers would read differently), and a good one still passes.

The CLI cases run `workbench gate` against a store path that does not exist: the file must be refused
before the store is opened (the store file is never created), so nothing has been computed.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import run_cli
from workbench.errors import RequirementsError
from workbench.workflows.gate import load_requirements

GOOD = "requirements:\n  - {question: intent, metric: accuracy, min: 0.5}\n"

BAD = [
    # the hostile tester's cases
    ("requirements:\n  - {question: intent, metric: accuracy, min: 0.999, min: 0.0}\n", "duplicate key 'min' at line 2"),
    (GOOD + "requirements:\n  - {question: intent, metric: accuracy, min: 0.0}\n", "duplicate key 'requirements'"),
    ("requirements: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels"),
    ("seed: -1\n" + GOOD, "seed: Input should be greater than or equal to 0"),
    ("requirements:\n  - {question: intent, metric: accuracy, min: .nan}\n", "requirements[0].min: Input should be a finite"),
    ("requirements:\n  - {question: intent, metric: accuracy, max: .inf}\n", "requirements[0].max: Input should be a finite"),
    ("requirements:\n  - {question: intent, metric: acuracy, min: 0.5}\n", "unknown metric 'acuracy' (did you mean 'accuracy'?)"),
    # types are strict: no text for numbers, no booleans, no YAML 1.1 boolean keys for `on`
    ("requirements:\n  - {question: intent, metric: accuracy, min: '0.9'}\n", "requirements[0].min: Input should be a valid number"),
    ("requirements:\n  - {question: intent, metric: accuracy, min: yes}\n", "requirements[0].min: Input should be a valid number"),
    ("n_boot: 100.0\n" + GOOD, "n_boot: Input should be a valid integer"),
    ("level: 1.5\n" + GOOD, "level: Input should be less than 1"),
    ("requirements:\n  - {question: intent, metric: accuracy, min: 0.5, true: low}\n", "requirements[0].true: Extra inputs"),
    ("requirements:\n  - {question: intent, metric: accuracy, min: 0.5, on: value, 'on': low}\n", "duplicate key 'on'"),
    ("requirements:\n  - {question: 2024-01-01, metric: accuracy, min: 0.5}\n", "requirements[0].question: Input should be a valid string"),
    ("requirements:\n  - {question: intent, metric: accuracy, min: 0.5, policy: p.json}\n", "'policy' applies to"),
    ("requirements: []\n", "requirements: List should have at least 1 item"),
    ("requirements:\n  - {question: intent, metric: accuracy, min: 0.5}\n  - 3\n", "requirements[1]: Input should be"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n" + GOOD,
     "expands to more than"),
    ("requirements: [\n", "cannot parse YAML"),
    ("- just\n- a list\n", "expected a mapping with 'requirements:'"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "needle"), BAD, ids=range(len(BAD)))
def test_bad_requirement_text_is_one_requirements_error(tmp_path, text, needle):
    p = tmp_path / "r.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(RequirementsError) as info:
        load_requirements(p)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg, msg


def test_a_good_file_keeps_working(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(
        "split: test\nseed: 7\nrequirements:\n  - {question: intent, metric: accuracy, min: 0.5, on: value}\n"
        "  - {question: intent, metric: ece_uniform, max: 0.1}\n"
        "  - {question: intent, metric: error_at_policy, max: 0.1, policy: policy.json}\n",
        encoding="utf-8",
    )
    reqs = load_requirements(p)
    assert reqs.seed == 7 and [r.judged_on for r in reqs.requirements] == ["value", "high", "high"]
    # JSON is YAML too (and read as strictly)
    p.write_text(json.dumps({"requirements": [{"question": "q", "metric": "brier", "max": 1}]}), encoding="utf-8")
    assert load_requirements(p).requirements[0].bound == 1.0
    p.write_text('{"requirements": [{"question": "q", "metric": "brier", "max": 1, "max": 2}]}', encoding="utf-8")
    with pytest.raises(RequirementsError, match="duplicate key 'max'"):
        load_requirements(p)


def test_the_metric_table_is_what_the_report_computes():
    """REPORT_METRICS (checked before measuring) = the names `question_report` returns, per type and option count."""
    from workbench.answers import RunAnswers
    from workbench.metrics.report import question_report
    from workbench.workflows.gate import KNOWN_METRICS, REPORT_METRICS

    rng = np.random.default_rng(0)
    for qtype, k in (("choice", 2), ("choice", 3), ("choice", 5), ("noul", 2), ("score", 5)):
        n = 80
        opts = ["yes", "no"] if qtype == "noul" else [str(i) for i in range(k)]
        ans = RunAnswers(
            "r", "q", qtype, opts, np.arange(n).astype(str), np.full(n, "test"), rng.dirichlet(np.ones(k), n),
            rng.integers(0, k, n), np.zeros(n, bool), np.full(n, None, object), *(np.full(n, np.nan),) * 3,
        )  # fmt: skip
        got = set(question_report(ans, n_boot=50, seed=0, level=0.95, smooth=True).metrics)
        want = {m for m in REPORT_METRICS[qtype] if k >= {"top_2_accuracy": 3, "top_3_accuracy": 4}.get(m, 0)}
        assert got == want, (qtype, k, got ^ want)
    assert set(KNOWN_METRICS) >= {m for ms in REPORT_METRICS.values() for m in ms}


def _cli_refuses(tmp_path, req_path, needle: str) -> None:
    db = tmp_path / "never-created.duckdb"
    r = run_cli("gate", "run-x", "--requirements", str(req_path), db=db, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not db.exists()  # refused before the store was opened: nothing was measured


@pytest.mark.parametrize(("text", "needle"), [BAD[i] for i in (0, 1, 2, 3, 4, 6)], ids=range(6))
def test_cli_refuses_the_testers_files_with_exit_2_before_opening_the_store(tmp_path, text, needle):
    p = tmp_path / "r.yaml"
    p.write_text(text, encoding="utf-8")
    _cli_refuses(tmp_path, p, needle)


def test_cli_refuses_devices_fifos_directories_and_huge_files_without_reading_them(tmp_path):
    _cli_refuses(tmp_path, "/dev/zero", "/dev/zero: not a regular file")
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)  # nobody writes: a reader that opened it blocking would hang (run_cli's timeout)
    _cli_refuses(tmp_path, fifo, "r.fifo: not a regular file")
    _cli_refuses(tmp_path, tmp_path, "a directory")
    big = tmp_path / "big.yaml"
    big.write_text(GOOD + "#" * (1024 * 1024) + "\n", encoding="utf-8")
    _cli_refuses(tmp_path, big, "too large for a requirements file")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    _cli_refuses(tmp_path, latin, "not valid UTF-8")


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory):
    from tests.policy.conftest import build_store

    tmp = tmp_path_factory.mktemp("gate_sim")
    build_store(tmp / "wb.duckdb", tmp, n=600, seed=1)
    return tmp / "wb.duckdb"


@pytest.mark.parametrize(
    ("reqs", "needle"),
    [
        ("  - {question: intent, metric: roc_auc, min: 0.5}\n", "metric 'roc_auc' does not apply to choice question"),
        ("  - {question: urgent, metric: qwk, min: 0.5}\n", "metric 'qwk' does not apply to noul question"),
        ("  - {question: intnt, metric: accuracy, min: 0.5}\n", "run-sim has no question 'intnt'"),
        ("  - {question: intent, metric: error_at_policy, max: 0.1, policy: nope.json}\n", "does not exist"),
    ],
)
def test_a_requirement_the_run_cannot_have_is_refused_before_anything_is_measured(sim_store, tmp_path, reqs, needle):
    """The bad requirement comes last, after one that is expensive to measure: the check runs first
    (the library's check_requirements, called by evaluate_gate before its first measurement)."""
    from workbench.store.db import connect
    from workbench.workflows.gate import check_requirements

    p = tmp_path / "r.yaml"
    p.write_text("n_boot: 2000\nrequirements:\n  - {question: intent, metric: smece, max: 0.5}\n" + reqs)
    con = connect(sim_store, read_only=True)
    try:
        with pytest.raises(RequirementsError, match=needle):
            check_requirements(con, load_requirements(p), ["run-sim"], base_dir=tmp_path)
    finally:
        con.close()
    r = run_cli("gate", "run-sim", "--requirements", str(p), db=sim_store)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert "requirements[1]" in r.stderr


def test_a_valid_file_on_the_sim_run_passes_and_fails_as_before(sim_store, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("n_boot: 50\nrequirements:\n  - {question: intent, metric: accuracy, min: 0.01, on: value}\n")
    assert run_cli("gate", "run-sim", "-r", str(p), db=sim_store).returncode == 0
    p.write_text("n_boot: 50\nrequirements:\n  - {question: intent, metric: accuracy, min: 0.999, on: value}\n")
    assert run_cli("gate", "run-sim", "-r", str(p), db=sim_store).returncode == 1
