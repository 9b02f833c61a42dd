"""`compare` reads every run in batches (one path at every size) and its figures are the references'.

Three runs of one small store: a raw run, its calibrated view (probabilities computed on read) and a
second raw run that misses some items and failed on others (so pairing by item id matters). Each run
is read in batches of 37 rows (DuckDB's scan order), keeping a few numbers per item at their item-id
positions; the items equal the loaded matrix's, pairing is by item id, ROC-AUC/AP equal scikit-learn's,
the risk–coverage curves drawn from the items equal those drawn from the matrices, and a run and its
view share their passes.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.metrics.scores import average_precision, roc_auc
from workbench.store import runs as store_runs
from workbench.store.runs import create_run, get_run, iter_answer_batches, load_answers, load_stored_schema
from workbench.thresholds.options import ThresholdOptions
from workbench.workflows import compare
from workbench.workflows.compare import compare_runs, stream_sides
from workbench.workflows.evaluation import calibrate_run

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
    monkeypatch.setattr(compare, "ITEM_ROWS", 8)  # batches are turned into items in slices


def _compare(con, names, **kw):
    return compare_runs(
        con,
        names,
        questions=QUESTIONS,
        n_boot=25,
        seed=4,
        options=ThresholdOptions(alpha=0.3, calibrate="none"),
        slices=["state_length"],
        **kw,
    ).to_dict()


def test_compare_reads_every_run_in_batches_and_its_figures_are_the_references(store, tiny_batches):
    """One path for every size (the runs read in batches of 37 rows here): pairing by item id, the
    figures against the reference functions on the loaded matrix."""
    con, run_id, view, other = store
    mem = _compare(con, [run_id, view, other])
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


def test_streamed_items_are_the_in_memory_items(store, tiny_batches):
    con, run_id, view, _ = store
    (side,) = stream_sides(con, [(view, None)], "intent", "test")
    ans = load_answers(con, view, "intent", ["test"])
    ok = ~ans.failed & (ans.labels >= 0)
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
    from workbench.workflows.figures import comparison_figure

    con, run_id, view, other = store
    kw = dict(questions=QUESTIONS, n_boot=5, seed=4, options=ThresholdOptions(alpha=0.3, calibrate="none"))
    streamed = compare_runs(con, [run_id, view, other], curves=True, **kw)
    mem = compare_runs(con, [run_id, view, other], **kw)  # no curves kept: the figure reads the matrices
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


def _counting_passes(monkeypatch) -> list[str]:
    """Every streamed pass over a run's rows (the run read) from now on, in order."""
    read = store_runs.iter_answer_batches
    passes: list[str] = []

    def counted(con, run_id, *args, **kwargs):
        passes.append(run_id)
        return read(con, run_id, *args, **kwargs)

    monkeypatch.setattr(store_runs, "iter_answer_batches", counted)
    monkeypatch.setattr(compare, "iter_answer_batches", counted)
    return passes


def test_a_run_and_its_view_share_their_passes_and_each_gets_its_own_figures(store, tiny_batches, monkeypatch):
    """A calibrated view reads its run's rows: compare prepares both runs' policies from one gather
    of the calibrator carve and one pass of rule coordinates, and reads the test split once for both,
    where each run alone takes its own three passes; every figure is the one each run gets alone
    (`thresholds_for_run`'s rule and test figures, `stream_sides`' items)."""
    from workbench.workflows.thresholds import streamed_thresholds, streamed_thresholds_many, thresholds_for_run

    con, run_id, view, _ = store
    opts = ThresholdOptions(alpha=0.3)  # temperature scaling: the view fits a calibrator of its own
    passes = _counting_passes(monkeypatch)
    together = compare_runs(con, [run_id, view], questions=["intent"], n_boot=25, seed=4, options=opts)
    assert passes == [run_id] * 3  # the carve, the rule coordinates, the test split: the run's rows once each
    rows = {r["run_id"]: r for r in together.rows}
    for run in (run_id, view):
        alone = thresholds_for_run(con, run, "intent", opts)
        pol = rows[run]["policy"]
        assert pol["rule"] == alone.rule_dict() and pol["certified"] == alone.certified
        for figure in ("coverage", "error", "n_accepted", "n_items"):
            assert pol[figure] == alone.test[figure], figure
    # the shared passes give each run exactly its own result and items
    many = streamed_thresholds_many(con, [run_id, view], "intent", opts)
    for run, got in zip((run_id, view), many, strict=True):
        want = streamed_thresholds(con, run, "intent", opts)
        assert got.rule_dict() == want.rule_dict() and got.calibrator == want.calibrator
        assert got.test == want.test and got.selection.calibration == want.selection.calibration
    rule = (many[1].rule, many[1].calibrator)
    sides = compare.stream_sides(con, [(run_id, None), (view, rule)], "intent", "test")
    for side, (run, r) in zip(sides, ((run_id, None), (view, rule)), strict=True):
        (want,) = stream_sides(con, [(run, r)], "intent", "test")
        for f in ("labels", "pred", "conf", "log_loss", "brier", "accepted", "option"):
            a, b = getattr(side.items, f), getattr(want.items, f)
            assert (a is None and b is None) or np.array_equal(a, b), f
        assert np.array_equal(side.labelled, want.labelled) and side.n_failed == want.n_failed
    assert np.array_equal(sides[1].rule_counts["confusion"], many[1].test["confusion"]["matrix"])


def test_shared_bootstrap_draws_are_each_runs_own():
    """`bootstrap_shared` draws each replicate's counts once for several sets of metrics: each set's
    intervals and replicates are exactly those of its own `bootstrap_many`."""
    from workbench.metrics.bootstrap import bootstrap_many, bootstrap_shared

    rng = np.random.default_rng(0)
    x, y = rng.random(300), rng.random(300) ** 2

    def mean_of(v):
        return lambda w: {"mean": float(np.mean(v)) if w is None else float(v @ w / w.sum())}

    shared = bootstrap_shared(lambda w: [mean_of(x)(w), mean_of(y)(w)], 300, n_boot=50, seed=3, level=0.9)
    for v, (ci, reps) in zip((x, y), shared, strict=True):
        want_ci, want_reps = bootstrap_many(mean_of(v), 300, n_boot=50, seed=3, level=0.9, keep_replicates=True)
        assert ci == want_ci and np.array_equal(reps["mean"], want_reps["mean"])
