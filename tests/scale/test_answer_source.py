"""One answer source: a stored run (raw or a calibrated view) and answers in memory behave alike, and
:func:`workbench.answers.reads_in_batches` is the one size decision every store-backed figure follows."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.answers import MemorySource, reads_in_batches
from workbench.metrics.report import question_report
from workbench.store import runs as store_runs
from workbench.store.sources import StoreSource
from workbench.workflows.evaluation import calibrate_run, stream_question_report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    n = 500
    probs, labels = calibrated_sample(n, 9, seed=11, temperature=0.7)
    labels = labels.copy()
    labels[::31] = -1
    yes = np.clip(np.random.default_rng(2).beta(2, 2, n), 0.01, 0.99)
    con, run_id, *_ = build_store(
        tmp_path_factory.mktemp("source") / "wb.duckdb",
        {
            "intent": ("choice", [f"o{j}" for j in range(9)], probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), (yes < 0.5).astype(int)),
        },
        n,
        fail_every=17,
    )
    view = calibrate_run(con, run_id, "temperature")["run_id"]
    yield con, run_id, view
    con.close()


def _assemble(source, question, splits):
    whole = source.load(question, splits)
    probs = np.full_like(whole.probs, -7.0)
    labels = np.full(len(whole.labels), -9)
    seen = np.zeros(len(whole.labels), int)
    for pos, b in source.batches(question, splits):
        probs[pos], labels[pos] = b.probs, b.labels
        seen[pos] += 1
    return whole, probs, labels, seen


@pytest.mark.parametrize("which", ["raw", "view"])
@pytest.mark.parametrize("question", ["intent", "urgent"])
def test_store_and_memory_sources_give_the_same_rows(store, monkeypatch, which, question):
    con, run_id, view = store
    monkeypatch.setitem(store_runs.iter_answer_batches.__kwdefaults__, "batch_rows", 41)
    stored = StoreSource(con, run_id if which == "raw" else view)
    memory = MemorySource(stored.load(question, None), batch_rows=53)
    for source in (stored, memory):
        assert source.option_ids(question) == stored.option_ids(question)
        assert source.question_type(question) == ("choice" if question == "intent" else "noul")
        assert source.option_ids("nope") is None and source.question_type("nope") is None
        for splits in (None, ["test"], ["calibration", "test"]):
            whole, probs, labels, seen = _assemble(source, question, splits)
            assert source.count(question, splits) == len(whole.labels) > 0
            assert (seen == 1).all()
            assert np.array_equal(np.isnan(probs), np.isnan(whole.probs))
            assert np.array_equal(probs[~whole.failed], whole.probs[~whole.failed])
            assert np.array_equal(labels, whole.labels)
    for splits in (None, ["test"]):  # in memory and from the store: the same rows in the same order
        a, b = stored.load(question, splits), memory.load(question, splits)
        assert list(a.item_ids) == list(b.item_ids)
        assert np.allclose(a.probs, b.probs, equal_nan=True)


def test_a_batched_report_of_either_source_equals_the_in_memory_report(store):
    con, run_id, view = store
    for run in (run_id, view):
        stored = StoreSource(con, run)
        memory = MemorySource(stored.load("intent", ["test"]), batch_rows=29)
        want = question_report(stored.load("intent", ["test"]), n_boot=20, seed=3).to_frame()
        for source in (stored, memory):
            got = stream_question_report(source, "intent", ["test"], n_boot=20, seed=3).to_frame()
            assert list(got["metric"]) == list(want["metric"])
            for col in ("estimate", "low", "high"):
                assert np.allclose(
                    got[col].astype(float), want[col].astype(float), rtol=1e-9, atol=1e-12, equal_nan=True
                )


def test_reads_in_batches_compares_answers_times_options_to_stream_cells(store, monkeypatch):
    con, run_id, _ = store
    stored = StoreSource(con, run_id)
    n = stored.count("intent", ["test"])
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", str(n * 9))
    assert not reads_in_batches(stored, "intent", ["test"])
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", str(n * 9 - 1))
    assert reads_in_batches(stored, "intent", ["test"])
    assert not reads_in_batches(stored, "intent", ["test"], stream=False)
    assert reads_in_batches(MemorySource(stored.load("intent", None)), "intent", ["test"])
    both = stored.count("intent", ["calibration", "test"])
    assert both == sum(stored.count("intent", [s]) for s in ("calibration", "test"))
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", str(both * 9 - 1))
    assert reads_in_batches(stored, "intent", ["calibration", "test"], split_by_split=True)
    assert not reads_in_batches(stored, "nope", ["test"])  # the loader names the missing question
    # bounds known without a count settle it when they can (the count is not read: a source without one)
    uncounted = MemorySource(stored.load("intent", None))
    uncounted.count = None  # type: ignore[method-assign,assignment]
    assert not reads_in_batches(uncounted, "intent", ["test"], at_most=(both * 9 - 1) // 9)
    assert reads_in_batches(uncounted, "intent", ["test"], at_least=both)
    # a yes/no question counts at least two options
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", str(stored.count("urgent", ["test"]) * 2 - 1))
    assert reads_in_batches(stored, "urgent", ["test"])


def test_only_the_library_decision_compares_a_size_to_stream_cells():
    """Outside ``workbench/answers.py`` no module calls ``stream_cells()`` to decide (a message may show it)
    and no module defines its own size decision; the UI pages never ask which way a run is read."""
    callers = {}
    for path in (ROOT / "workbench").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
                    n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                }
                if {"stream_cells", "STREAM_CELLS"} & names:
                    callers.setdefault(str(path.relative_to(ROOT)), []).append(node.lineno)
            if isinstance(node, ast.FunctionDef) and node.name in {
                "should_stream",
                "is_large",
                "_is_large",
                "_streams",
            }:
                callers.setdefault(str(path.relative_to(ROOT)), []).append(node.lineno)
    assert list(callers) == ["workbench/answers.py"], callers
    for page in (ROOT / "workbench" / "ui" / "pages").glob("*.py"):
        text = page.read_text()
        for name in ("is_large", "reads_in_batches", "point_report", "kept_question_report", "kept_frontier"):
            assert name not in text, (page.name, name)


def test_only_a_stored_source_answers_from_stored_summaries(store):
    """The SQL first paint is the stored run's own way to answer point figures: other sources get None (and
    the batched path)."""
    from workbench.engines import store_aggregates as sa

    con, run_id, view = store
    stored = StoreSource(con, run_id)
    memory = MemorySource(stored.load("intent", None))
    assert sa.point_report(memory, "intent", "test") is None
    assert sa.grid_points(memory, "intent", ("calibration", "test")) is None
    assert sa.point_report(StoreSource(con, view), "intent", "test") is None  # probabilities computed on read
