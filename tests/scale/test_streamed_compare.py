"""`compare` on streamed runs gives the in-memory comparison.

Three runs of one small store: a raw run, its calibrated view (probabilities computed on read) and a
second raw run that misses some items and failed on others (so pairing by item id matters). The
streamed path reads each run in batches of 37 rows (DuckDB's scan order), keeps a few numbers per
item at their item-id positions, and must give every figure of the in-memory path to 1e-9: metrics
with intervals, ECE, ROC-AUC/AP of the yes/no question, the policy, the paired differences against
the baseline (metrics, McNemar, policy) and the same figures per slice.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from tests.scale.test_streamed_equals_in_memory import _same
from workbench import comparison
from workbench.comparison import compare_runs, stream_side
from workbench.evaluation import calibrate_run
from workbench.metrics.scores import average_precision, roc_auc
from workbench.store import runs as store_runs
from workbench.store.runs import create_run, get_run, iter_answer_batches, load_answers, load_stored_schema
from workbench.thresholds.choose import ThresholdOptions

QUESTIONS = ["intent", "urgent", "severity"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    n = 600
    probs, labels = calibrated_sample(n, 12, seed=11, temperature=0.6)
    labels = labels.copy()
    labels[::31] = -1
    yes = np.clip(np.random.default_rng(3).beta(2, 2, n), 0.01, 0.99)
    noul_labels = np.where(np.random.default_rng(4).random(n) < yes**2, 0, 1)
    s_probs, s_labels = calibrated_sample(n, 5, seed=5)
    con, run_id, item_ids, _ = build_store(
        tmp_path_factory.mktemp("stream_compare") / "wb.duckdb",
        {
            "intent": ("choice", [f"o{j}" for j in range(12)], probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), noul_labels),
            "severity": ("score", ["0", "1", "2", "3", "4"], s_probs, s_labels),
        },
        n,
        fail_every=13,
    )
    # states of varied length, so `--slice state_length` has four buckets
    con.execute("UPDATE items SET state_text = repeat('s', 1 + (hash(item_id) % 97)::INTEGER)")
    view = calibrate_run(con, run_id, "temperature", questions=["intent", "severity"])["run_id"]
    # a second raw run: other probabilities (options reversed), items ending in 7 missing, in 5 failed
    run = get_run(con, run_id)
    other = create_run(
        con,
        dataset=run["dataset"],
        dataset_version=1,
        schema=load_stored_schema(con, run["schema_hash"]),
        provider="test:other",
        splits=["calibration", "test"],
        name="other",
        status="done",
    )
    con.execute(
        "INSERT INTO answer_rows BY NAME SELECT * REPLACE ($other AS run_id,"
        " CASE WHEN item_id LIKE '%5' THEN NULL ELSE list_reverse(probs) END AS probs,"
        " CASE WHEN item_id LIKE '%5' THEN 'server' ELSE failure_kind END AS failure_kind)"
        " FROM answers WHERE run_id = $run AND item_id NOT LIKE '%7'",
        {"other": other, "run": run_id},
    )
    yield con, run_id, view, other
    con.close()


@pytest.fixture
def tiny_batches(monkeypatch):
    monkeypatch.setattr(store_runs, "BATCH_ROWS", 37)
    monkeypatch.setitem(iter_answer_batches.__kwdefaults__, "batch_rows", 37)
    monkeypatch.setattr(comparison, "ITEM_ROWS", 8)  # batches are turned into items in slices


def _compare(con, names, stream, **kw):
    return compare_runs(
        con,
        names,
        questions=QUESTIONS,
        n_boot=25,
        seed=4,
        options=ThresholdOptions(alpha=0.3, calibrate="none"),
        slices=["state_length"],
        stream=stream,
        **kw,
    ).to_dict()


def test_streamed_compare_equals_the_in_memory_compare(store, tiny_batches):
    con, run_id, view, other = store
    mem = _compare(con, [run_id, view, other], False)
    streamed = _compare(con, [run_id, view, other], True)
    _same(mem, streamed)
    rows = {(r["run_id"], r["question"]): r for r in mem["rows"]}
    assert len(rows) == 9
    # the figures checked are there: paired differences with the policy, McNemar, ROC-AUC/AP, slices
    for run in (view, other):
        for q in QUESTIONS:
            vs = rows[(run, q)]["vs_baseline"]
            assert vs["n_pairs"] > 100 and {"accuracy", "log_loss"} <= set(vs["metrics"])
            assert set(vs["policy"]) == {"coverage", "error_among_accepted"} and "p_exact" in vs["mcnemar"]
            assert len(rows[(run, q)]["slices"]["state_length"]["values"]) == 4
    # pairing is by item id: the other run misses items ending in 7 and failed on those ending in 5
    base = load_answers(con, run_id, "urgent", ["test"])
    ok = ~base.failed & (base.labels >= 0)
    ids = base.item_ids.astype(str)
    paired = ok & ~np.char.endswith(ids, "7") & ~np.char.endswith(ids, "5")
    assert rows[(other, "urgent")]["vs_baseline"]["n_pairs"] == int(paired.sum())
    # ROC-AUC / AP of P(yes) on the yes/no question, against the reference functions on the matrix
    point = rows[(run_id, "urgent")]["point_metrics"]
    y, p = base.labels[ok] == 0, base.probs[ok, 0]
    assert point["roc_auc"] == pytest.approx(roc_auc(y, p), abs=1e-12)
    assert point["average_precision"] == pytest.approx(average_precision(y, p), abs=1e-12)
    from sklearn.metrics import average_precision_score, roc_auc_score

    assert point["roc_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-9)
    assert point["average_precision"] == pytest.approx(average_precision_score(y, p), abs=1e-9)


def test_compare_streams_by_size_and_gives_the_same_figures(store, tiny_batches, monkeypatch):
    con, run_id, view, _ = store
    mem = _compare(con, [run_id, view], False, policy=False)
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "100")  # every question is "large"
    _same(mem, _compare(con, [run_id, view], None, policy=False))


def test_streamed_items_are_the_in_memory_items(store, tiny_batches):
    con, run_id, view, _ = store
    side = stream_side(con, view, "intent", "test")
    ans = load_answers(con, view, "intent", ["test"])
    ok = ~ans.failed & (ans.labels >= 0)
    assert side.items.item_ids is None  # the ids stay in DuckDB
    assert np.array_equal(side.labelled, np.flatnonzero(ok)) and side.n_items == len(ans.labels)
    assert side.n_failed == int(ans.failed.sum()) and side.items.labels.dtype == np.int32
    assert np.array_equal(side.items.labels, ans.labels[ok])
    assert np.array_equal(side.items.pred, ans.probs[ok].argmax(axis=1))
    p_true = ans.probs[ok][np.arange(ok.sum()), ans.labels[ok]]
    assert np.allclose(side.items.log_loss, -np.log(p_true), atol=1e-12)


def test_the_risk_coverage_figure_from_the_items_is_the_figure_from_the_matrices(store, tiny_batches):
    """`compare --html/--png` draws the curves kept from the streamed items (``curves=True``): no
    matrix is read (the figure is built without a connection), and every trace equals the one drawn
    from the loaded matrices (the in-memory path), for every question type."""
    from workbench.figures import comparison_figure

    con, run_id, view, other = store
    kw = dict(questions=QUESTIONS, n_boot=5, seed=4, options=ThresholdOptions(alpha=0.3, calibrate="none"))
    streamed = compare_runs(con, [run_id, view, other], stream=True, curves=True, **kw)
    mem = compare_runs(con, [run_id, view, other], stream=False, **kw)
    assert not mem.curves and len(streamed.curves) == 9
    for q in QUESTIONS:
        got = comparison_figure(None, streamed, q)  # no store: the curves are all it reads
        want = comparison_figure(con, mem, q)
        assert len(got.data) == len(want.data) >= 4  # a curve per run, a star per chosen policy
        for g, w in zip(got.data, want.data, strict=True):
            assert g.name == w.name and g.mode == w.mode
            assert len(g.x) == len(w.x) > 0
            np.testing.assert_allclose(np.asarray(g.x, float), np.asarray(w.x, float), rtol=0, atol=1e-12)
            np.testing.assert_allclose(np.asarray(g.y, float), np.asarray(w.y, float), rtol=0, atol=1e-12)
    # the curve against the reference definition on the matrix (failures count, never accepted)
    from workbench.metrics.selective import risk_coverage_curve

    ans = load_answers(con, other, "intent", ["test"])
    ref = risk_coverage_curve(ans.probs, ans.labels)
    got_curve = streamed.curves[(other, "intent")]
    assert got_curve.n_total == int((ans.labels >= 0).sum()) > int((~ans.failed & (ans.labels >= 0)).sum())
    assert np.array_equal(got_curve.coverage, ref.coverage) and np.array_equal(got_curve.risk, ref.risk)
    assert got_curve.aurc == pytest.approx(ref.aurc, abs=1e-12)
