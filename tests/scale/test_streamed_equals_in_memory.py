"""Streamed reads (batches of rows in DuckDB's scan order) give the in-memory figures.

The streamed paths place every row at its item-id position, so their arrays are the in-memory
arrays: point estimates and bootstrap intervals agree to 1e-9 (sums may differ in the last bit).
Batches are made tiny here so that every question spans many of them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.metrics.report import question_report
from workbench.store import runs as store_runs
from workbench.store.runs import get_run, iter_answer_batches, load_answers
from workbench.workflows.evaluation import calibrate_run, report_run


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    n = 700
    probs, labels = calibrated_sample(n, 12, seed=7, temperature=0.6)
    labels = labels.copy()
    labels[::29] = -1
    yes = np.clip(np.random.default_rng(3).beta(2, 2, n), 0.01, 0.99)
    noul_labels = np.where(np.random.default_rng(4).random(n) < yes**2, 0, 1)
    s_probs, s_labels = calibrated_sample(n, 5, seed=5)
    con, run_id, *_ = build_store(
        tmp_path_factory.mktemp("stream") / "wb.duckdb",
        {
            "intent": ("choice", [f"o{j}" for j in range(12)], probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), noul_labels),
            "severity": ("score", ["0", "1", "2", "3", "4"], s_probs, s_labels),
        },
        n,
        fail_every=13,
    )
    yield con, run_id
    con.close()


@pytest.fixture
def tiny_batches(monkeypatch):
    monkeypatch.setattr(store_runs, "BATCH_ROWS", 37)
    defaults = iter_answer_batches.__kwdefaults__
    monkeypatch.setitem(defaults, "batch_rows", 37)


def _same(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(1.0, abs(a)), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_batches_cover_every_row_once_at_its_item_id_position(store, tiny_batches):
    con, run_id = store
    whole = load_answers(con, run_id, "intent", ["test"])
    probs = np.full_like(whole.probs, -7.0)
    seen = np.zeros(len(whole.labels), int)
    n_batches = 0
    for pos, b in iter_answer_batches(con, run_id, "intent", ["test"]):
        n_batches += 1
        probs[pos] = b.probs
        seen[pos] += 1
        assert list(b.item_ids) == list(whole.item_ids[pos])
        assert np.array_equal(b.labels, whole.labels[pos])
    assert n_batches > 5 and (seen == 1).all()
    assert np.array_equal(np.isnan(probs), np.isnan(whole.probs))
    assert np.array_equal(probs[~whole.failed], whole.probs[~whole.failed])


@pytest.mark.parametrize("split", ["test", "all"])
def test_streamed_report_equals_the_in_memory_report(store, tiny_batches, split):
    """report_run reads every size in batches; its figures are the pure report's on the loaded matrix."""
    con, run_id = store
    exclude = {"intent": ["i00004", "i00010", "i00100"]}
    splits = None if split == "all" else [split]
    streamed = report_run(con, run_id, split=split, n_boot=40, seed=3, exclude_items=exclude).to_dict()
    assert list(streamed["questions"]) == ["intent", "urgent", "severity"]
    for q in streamed["questions"]:
        mem = question_report(load_answers(con, run_id, q, splits), exclude_items=exclude.get(q), n_boot=40, seed=3)
        q_str = streamed["questions"][q]
        assert q_str["agreement"] is None  # one vote per item (tests/store/test_repeated_votes.py has several)
        _same(mem.to_dict() | {"agreement": None}, q_str, q)


def test_calibrated_view_stores_parameters_and_reads_the_parent_transformed(store, tiny_batches):
    con, run_id = store
    before = con.execute("SELECT count(*) FROM answers").fetchone()[0]
    out = calibrate_run(con, run_id, "temperature", questions=["intent"])
    view = out["run_id"]
    assert con.execute("SELECT count(*) FROM answers").fetchone()[0] == before  # no second copy
    assert get_run(con, view)["params"]["on_read"] is True
    parent = load_answers(con, run_id, "intent")
    mine = load_answers(con, view, "intent")
    t = out["calibrators"]["intent"]["params"]["temperature"]
    z = np.log(np.clip(parent.probs[~parent.failed], 1e-12, 1)) / t
    z = np.exp(z - z.max(axis=1, keepdims=True))
    assert np.allclose(mine.probs[~mine.failed], z / z.sum(axis=1, keepdims=True), atol=1e-12)
    assert np.array_equal(mine.failed, parent.failed) and mine.run_id == view
    # the figures of calibrate equal the in-memory top-label ECE / log loss of the same arrays
    from workbench.metrics.reliability import top_label_ece
    from workbench.metrics.scores import log_loss

    test_mem = load_answers(con, run_id, "intent", ["test"])
    ok = ~test_mem.failed & (test_mem.labels >= 0)
    q = out["questions"]["intent"]
    assert q["ece_before"] == pytest.approx(top_label_ece(test_mem.probs[ok], test_mem.labels[ok]), abs=1e-12)
    assert q["log_loss_before"] == pytest.approx(log_loss(test_mem.probs[ok], test_mem.labels[ok]), abs=1e-12)
    after = load_answers(con, view, "intent", ["test"])
    assert q["ece_after"] == pytest.approx(top_label_ece(after.probs[ok], after.labels[ok]), abs=1e-12)
    assert not q["fit_subsampled"] and q["n_fit"] == q["n_fit_available"]
    # the streamed report of the view equals its in-memory report
    _same(
        question_report(load_answers(con, view, "intent", ["test"]), n_boot=20).to_dict() | {"agreement": None},
        report_run(con, view, "intent", n_boot=20).to_dict()["questions"]["intent"] | {"agreement": None},
    )


@pytest.mark.parametrize(
    "question,kw",
    [
        ("intent", {}),
        ("intent", {"calibrate": "none", "objective": "coverage", "target_coverage": 0.5}),
        ("urgent", {"alpha": 0.2}),
        ("severity", {"alpha": 0.3, "calibrate": "none"}),
        # misroute costs and critical options: the test cost and critical rates (attach_test) too
        ("intent", {"alpha": 0.9, "calibrate": "none", "costs": {"o0": {"*": 2.0}}, "constraints": {"o3": 0.9}}),
        ("intent", {"alpha": 0.6, "constraints": {"o3": 0.5}}),
        # class-conditional: the streamed pass keeps the critical option's calibrated probabilities
        ("intent", {"alpha": 0.6, "constraints": {"o3": 0.5}, "class_conditional": True}),
        # ... and learns its group and chain on the calibrator's carve, with the carve's misroute costs
        (
            "intent",
            {"alpha": 0.9, "costs": {"o0": {"*": 2.0}}, "constraints": {"o3": 0.5}, "class_conditional": True},
        ),
        ("intent", {"objective": "cost", "costs": {"o0": {"*": 3.0}, "o1": {"o2": 2.0}}, "error_cost": 0.5}),
    ],
)
def test_streamed_thresholds_equal_the_in_memory_thresholds(store, tiny_batches, question, kw):
    from workbench.store.sources import StoreSource
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions
    from workbench.workflows.thresholds import thresholds_for_run

    con, run_id = store
    opts = ThresholdOptions(**kw)
    # the pure selection on the loaded splits (the in-memory reference) against the store's one path
    source = StoreSource(con, run_id)
    mem = choose_thresholds(source.load(question, ["calibration"]), source.load(question, ["test"]), opts)
    streamed = thresholds_for_run(con, run_id, question, opts)
    assert mem.test is not None and mem.test["n_items"] > 300
    if opts.costs is not None or opts.constraints:  # a rule that accepts, so its test risks are figures
        assert mem.test["n_accepted"] > 100 and mem.test_risks is not None
    if opts.class_conditional:  # a certified pair of rules, whose order read the critical probabilities
        assert mem.certified and mem.selection.guarantee["class_conditional"]["strict"]
    _same(mem.to_dict(), streamed.to_dict(), question)
    assert np.array_equal(mem.surface.accepted, streamed.surface.accepted)


def test_reports_read_in_batches_and_large_ones_refuse_the_whole_matrix(store, monkeypatch):
    """Majority reports of every size read in batches; above WORKBENCH_STREAM_CELLS probabilities a figure that
    needs the whole matrix (soft labels) is refused, and thresholds read in batches too."""
    from workbench.workflows import evaluation
    from workbench.workflows.thresholds import thresholds_for_run

    con, run_id = store
    calls = []
    real = evaluation.stream_question_report
    monkeypatch.setattr(evaluation, "stream_question_report", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "100")
    report_run(con, run_id, "intent", n_boot=0)
    assert calls == ["intent"]
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", str(10**9))
    report_run(con, run_id, "intent", n_boot=0)
    assert calls == ["intent", "intent"]
    assert report_run(con, run_id, "intent", labels="soft", n_boot=0).questions[0].params.get("labels") == "soft"
    assert calls == ["intent", "intent"]
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "100")
    with pytest.raises(evaluation.WorkbenchError, match="too large"):
        report_run(con, run_id, "intent", labels="soft")
    assert thresholds_for_run(con, run_id, "intent").test is not None


def test_export_of_a_calibrated_view_writes_its_calibrated_probabilities(store, tmp_path):
    import pyarrow.parquet as pq

    from workbench.store.export import export_run

    con, run_id = store
    view = calibrate_run(con, run_id, "temperature", questions=["intent"], name="view-for-export")["run_id"]
    out = tmp_path / "view.parquet"
    n = export_run(con, view, "parquet", out)
    tbl = pq.read_table(out).to_pandas()
    assert n == len(tbl) == 3 * 700 and set(tbl["run_id"]) == {view}
    mine = load_answers(con, view, "intent")
    rows = tbl[tbl["question"] == "intent"].set_index("item_id").loc[list(mine.item_ids)]
    ok = ~mine.failed
    got = np.stack(rows["probs"].to_numpy()[ok])
    assert np.allclose(got, mine.probs[ok], rtol=0, atol=1e-15)
    assert np.allclose(rows["p_top"].to_numpy()[ok], mine.probs[ok].max(axis=1), atol=1e-15)
    assert rows["probs"].isna().to_numpy()[~ok].all()
    # the other questions have no calibrator in this view: the parent's probabilities, untouched
    parent = load_answers(con, run_id, "urgent")
    urgent = tbl[tbl["question"] == "urgent"].set_index("item_id").loc[list(parent.item_ids)]
    assert np.array_equal(np.stack(urgent["probs"].to_numpy()[~parent.failed]), parent.probs[~parent.failed])


def test_a_fit_set_over_the_cap_is_a_seeded_sample_and_says_so(store, monkeypatch):
    from workbench.workflows import evaluation

    con, run_id = store
    full = calibrate_run(con, run_id, "temperature", questions=["intent"], name="full")["questions"]["intent"]
    monkeypatch.setattr(evaluation, "FIT_ROWS_MAX", 150)
    a = calibrate_run(con, run_id, "temperature", questions=["intent"], name="a")["questions"]["intent"]
    b = calibrate_run(con, run_id, "temperature", questions=["intent"], name="b")["questions"]["intent"]
    assert not full["fit_subsampled"] and full["n_fit"] == full["n_fit_available"] > 150
    assert a["fit_subsampled"] and a["n_fit"] == 150 and a["n_fit_available"] == full["n_fit_available"]
    assert a["temperature"] == b["temperature"]  # the sample is seeded
    # one parameter from 150 of ~300 rows: close to the full fit, not equal
    assert a["temperature"] != full["temperature"]
    assert abs(np.log(a["temperature"] / full["temperature"])) < 0.25


def test_keys_without_ids_are_the_keys_with_ids_less_the_ids(store):
    """``load_answer_keys(ids=False)`` (what the streamed report, thresholds and calibrate read) has the
    same rows in the same order as the full key read, and holds no Python string per item."""
    con, run_id = store
    full = store_runs.load_answer_keys(con, run_id, "intent", ["calibration"])
    light = store_runs.load_answer_keys(con, run_id, "intent", ["calibration"], ids=False)
    assert len(full.labels) == len(light.labels) > 100
    for f in ("labels", "failed"):
        assert np.array_equal(getattr(full, f), getattr(light, f))
    assert np.array_equal(full.cost_usd, light.cost_usd, equal_nan=True)
    assert list(full.failure_kind) == list(light.failure_kind)
    # ids stay in DuckDB; the one split is a view of its name: neither costs memory per item
    assert light.item_ids.strides == (0,) and set(light.item_ids) == {None}
    assert light.splits.strides == (0,) and set(light.splits) == {"calibration"} == set(full.splits)


def test_a_streamed_pass_lowers_duckdbs_memory_limit_and_puts_it_back(store, monkeypatch):
    """Inside a pass DuckDB's pool is capped at WORKBENCH_STREAM_MEMORY; after it (finished or
    abandoned) the store's own limit is back, and a limit already lower is never raised."""
    from workbench.store.db import _size_bytes, stream_memory

    con, run_id = store

    def limit() -> float:
        return _size_bytes(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])

    before = limit()
    monkeypatch.setenv("WORKBENCH_STREAM_MEMORY", "300MB")
    seen = []
    for _ in iter_answer_batches(con, run_id, "intent", ["test"]):
        seen.append(limit())
    assert seen and all(abs(s - 300e6) < 1e6 for s in seen)
    assert abs(limit() - before) < 1e6
    batches = iter_answer_batches(con, run_id, "intent", ["test"])
    next(batches)
    batches.close()  # a caller that stops early
    assert abs(limit() - before) < 1e6
    con.execute("SET memory_limit = '100MB'")
    try:
        with stream_memory(con):
            assert abs(limit() - 100e6) < 1e6
        assert abs(limit() - 100e6) < 1e6
    finally:
        con.execute(f"SET memory_limit = '{int(before)}B'")
    assert abs(limit() - before) < 1e6


def test_streamed_labels_are_the_in_memory_majority_with_ties_and_unknown_options(tmp_path):
    """The keys read (streamed passes) chooses each item's gold label as :func:`load_answers` does:
    most votes, ties to the option listed first, and no label when the winner is not an option
    (votes for unknown options are counted per option, not pooled)."""
    n = 40
    probs, labels = calibrated_sample(n, 4, seed=2)
    con, run_id, item_ids, _ = build_store(
        tmp_path / "wb.duckdb", {"intent": ("choice", ["a", "b", "c", "d"], probs, labels)}, n
    )
    extra = [
        (item_ids[0], "c"),  # item 0: its label and "c" tie -> the option listed first
        (item_ids[1], "zz"),
        (item_ids[1], "zz"),  # item 1: two votes for an unknown option beat one -> no label
        (item_ids[2], "zz"),
        (item_ids[2], "yy"),  # item 2: two unknown options with one vote each tie with the known one
        (item_ids[3], "d"),
        (item_ids[3], "d"),  # item 3: "d" wins 2 to 1
    ]
    con.executemany(
        "INSERT INTO labels (dataset, version, item_id, question, option_id) VALUES ('toy', 1, ?, 'intent', ?)", extra
    )
    for splits in (["calibration"], ["test"], None):
        whole = load_answers(con, run_id, "intent", splits)
        keys = store_runs.load_answer_keys(con, run_id, "intent", splits)
        assert list(keys.item_ids) == list(whole.item_ids)
        assert np.array_equal(keys.labels, whole.labels)
        streamed = np.full(len(whole.labels), -9)
        for pos, b in iter_answer_batches(con, run_id, "intent", splits, batch_rows=7):
            streamed[pos] = b.labels
        assert np.array_equal(streamed, whole.labels)
    whole = load_answers(con, run_id, "intent", None)
    at = {i: j for j, i in enumerate(whole.item_ids)}
    assert whole.labels[at[item_ids[0]]] == min(labels[0], 2)
    assert whole.labels[at[item_ids[1]]] == -1
    assert whole.labels[at[item_ids[3]]] == 3
    con.close()
