"""The UI's first-paint figures from one DuckDB query over the store equal the library's other paths.

:mod:`workbench.engines.store_aggregates` (over :mod:`workbench.store.aggregates`) gives the report's
sum-based point estimates, the top-label reliability bins, the confusion matrix, the threshold
surface, the certified selection and the rule's test figures; here they are compared with the
in-memory report / ``choose_thresholds`` and the streamed ones on a small run with provider failures,
unlabelled items and exact ties among the top probabilities: metrics to 1e-9, counts exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.engines import store_aggregates as sa
from workbench.store.sources import StoreSource
from workbench.thresholds.evaluate import evaluate_rule
from workbench.thresholds.options import ThresholdOptions
from workbench.thresholds.rules import make_rule
from workbench.thresholds.surface import risk_coverage_surface
from workbench.workflows.evaluation import calibrate_run, report_run
from workbench.workflows.thresholds import thresholds_for_run


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    n = 900
    probs, labels = calibrated_sample(n, 12, seed=11, temperature=0.7)
    probs = probs.copy()
    labels = labels.copy()
    labels[::31] = -1  # unlabelled items
    # exact ties for the top option (arg-max = the first of them) on every 17th row, and a full tie
    for j in range(5, n, 17):
        row = np.full(12, 0.02)
        row[[3, 7]] = 0.4
        probs[j] = row
    probs[8] = np.full(12, 1 / 12)
    yes = np.clip(np.random.default_rng(3).beta(2, 2, n), 0.01, 0.99)
    yes[::23] = 0.5  # the noul rule's boundary
    noul_labels = np.where(np.random.default_rng(4).random(n) < yes**2, 0, 1)
    noul_labels[::37] = -1
    s_probs, s_labels = calibrated_sample(n, 5, seed=5)
    con, run_id, *_ = build_store(
        tmp_path_factory.mktemp("agg") / "wb.duckdb",
        {
            "intent": ("choice", [f"o{j}" for j in range(12)], probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), noul_labels),
            "severity": ("score", ["0", "1", "2", "3", "4"], s_probs, s_labels),
        },
        n,
        fail_every=13,
    )
    # several votes on some items: a majority against the first vote, a tie (the option listed first wins),
    # a vote that names no option, and an unlabelled item that gets two differing votes
    extra = [("i00010", "o11"), ("i00010", "o11"), ("i00012", "o0"), ("i00014", "nonsense"), ("i00031", "o4")]
    extra += [("i00031", "o2"), ("i00062", "o9"), ("i00062", "o9"), ("i00062", "o1")]
    for item, option in extra:
        con.execute(
            "INSERT INTO labels (dataset, version, item_id, question, option_id) VALUES ('toy', 1, ?, 'intent', ?)",
            [item, option],
        )
    yield con, run_id
    con.close()


def test_gold_labels_are_those_of_load_answers(store):
    from workbench.store.runs import load_answers

    con, run_id = store
    ans = load_answers(con, run_id, "intent", ["calibration", "test"])
    votes = con.execute("SELECT count(*) FROM labels WHERE item_id = 'i00010' AND question = 'intent'").fetchone()[0]
    assert votes == 3
    pts = sa.grid_points(StoreSource(con, run_id), "intent", ("calibration", "test"))
    assert pts is not None
    for split in ("calibration", "test"):
        on = ans.splits == split
        assert np.array_equal(pts[split].labels, ans.labels[on][ans.labels[on] >= 0])


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.mark.parametrize("stream", [False, True])
def test_point_report_equals_the_report(store, stream):
    con, run_id = store
    agg = sa.point_report(StoreSource(con, run_id), "intent", "test")
    ref = report_run(con, run_id, "intent", "test", n_boot=0, stream=stream).questions[0]
    assert agg is not None and agg.params["aggregate"] is True
    assert agg.counts == ref.counts
    assert agg.counts["n_failed"] > 0 and agg.counts["n_labelled"] < agg.counts["n_attempted"]
    assert set(agg.metrics) <= set(ref.metrics) and len(agg.metrics) == 6
    for name, iv in agg.metrics.items():
        assert _close(iv.estimate, ref.metrics[name].estimate), name
    mine, theirs = agg.curves["top_label_uniform"], ref.curves["top_label_uniform"]
    assert np.array_equal(mine.count, theirs.count)
    assert np.allclose(mine.mean_score, theirs.mean_score, atol=1e-12, equal_nan=True)
    assert np.allclose(mine.frac_true, theirs.frac_true, atol=1e-12, equal_nan=True)
    assert ref.confusion is not None and agg.confusion is not None
    assert np.array_equal(agg.confusion.matrix, ref.confusion.matrix)
    assert np.allclose(agg.confusion.f1, ref.confusion.f1)


def test_other_question_types_and_calibrated_views_are_not_served(store):
    con, run_id = store
    assert sa.point_report(StoreSource(con, run_id), "urgent", "test") is None
    assert sa.point_report(StoreSource(con, run_id), "severity", "test") is None
    assert sa.grid_points(StoreSource(con, run_id), "severity", ("calibration", "test")) is None
    view = calibrate_run(con, run_id, "temperature", questions=["intent"])["run_id"]
    assert sa.point_report(StoreSource(con, view), "intent", "test") is None
    assert sa.grid_points(StoreSource(con, view), "intent", ("calibration", "test")) is None


@pytest.mark.parametrize("question", ["intent", "urgent"])
def test_grid_points_give_the_surface_and_the_rules_test_figures(store, question):
    from workbench.store.runs import load_answers

    con, run_id = store
    pts = sa.grid_points(StoreSource(con, run_id), question, ("calibration", "test"))
    assert pts is not None
    for split in ("calibration", "test"):
        ans = load_answers(con, run_id, question, [split])
        keep = ans.labels >= 0
        p, y = ans.probs[keep], ans.labels[keep]
        gp = pts[split]
        assert np.array_equal(gp.labels, y)
        ref = risk_coverage_surface(gp.qtype, p, y, grid=100)
        mine = risk_coverage_surface(
            gp.qtype, None, gp.labels, coordinates=sa._int64(gp.coords), n_options=len(gp.option_ids), grid=100
        )
        assert np.array_equal(mine.accepted, ref.accepted) and np.array_equal(mine.errors, ref.errors)
        assert np.array_equal(mine.class_accepted, ref.class_accepted) and mine.n_total == ref.n_total
        from workbench.thresholds.evaluate import evaluate_rule_at

        for i, j in [(0, 0), (37, 5), (90, 60), (99, 99)]:
            rule = make_rule(gp.qtype, float(gp.x_grid[i]), float(gp.y_grid[j]))
            want = evaluate_rule(rule, p, y, option_ids=list(gp.option_ids))
            got = evaluate_rule_at(
                rule, sa._int64(gp.coords), gp.labels, n_options=len(gp.option_ids), option_ids=list(gp.option_ids)
            )
            assert got == want, (split, i, j)


@pytest.mark.parametrize(
    ("question", "opts"),
    [
        ("intent", ThresholdOptions(calibrate="none", alpha=0.2)),
        ("intent", ThresholdOptions(calibrate="none", alpha=0.3, method="holm")),
        ("intent", ThresholdOptions(calibrate="none", alpha=0.01)),  # nothing certified
        ("intent", ThresholdOptions(calibrate="none", alpha=0.3, per_class=True)),
        ("urgent", ThresholdOptions(calibrate="none", alpha=0.2)),
        # misroute costs and a critical option: the test cost and critical rates (attach_test) too
        (
            "intent",
            ThresholdOptions(calibrate="none", alpha=0.9, costs={"o0": {"*": 2.0}}, constraints={"o3": 0.9}),
        ),
    ],
)
def test_certified_from_points_equals_thresholds_for_run(store, question, opts):
    con, run_id = store
    pts = sa.grid_points(StoreSource(con, run_id), question, ("calibration", "test"), grid=opts.grid)
    assert pts is not None
    mine = sa.certified_from_points(question, pts["calibration"], pts["test"], opts)
    if opts.costs is not None:  # certified, so the test cost and critical rates are figures
        assert mine is not None and mine.certified and mine.test_risks and mine.test_risks["cost"]["n_accepted"] > 0
    ref = thresholds_for_run(con, run_id, question, opts).to_dict()
    assert mine is not None and mine.to_dict() == ref


def test_recalibrated_or_other_objectives_are_not_served(store):
    con, run_id = store
    pts = sa.grid_points(StoreSource(con, run_id), "intent", ("calibration", "test"))
    assert pts is not None
    assert sa.certified_from_points("intent", pts["calibration"], pts["test"], ThresholdOptions()) is None
    cost = ThresholdOptions(calibrate="none", objective="cost")
    assert sa.certified_from_points("intent", pts["calibration"], pts["test"], cost) is None
    # class-conditional rules read the critical option's probabilities, which grid points do not hold
    cc = ThresholdOptions(calibrate="none", constraints={pts["calibration"].option_ids[0]: 0.5}, class_conditional=True)
    assert sa.certified_from_points("intent", pts["calibration"], pts["test"], cc) is None


@pytest.mark.parametrize("damage", ["p_top = NULL", "p_top = 0.123456"])
def test_rows_whose_summaries_do_not_match_their_probabilities_are_not_served(tmp_path, damage):
    probs, labels = calibrated_sample(60, 4, seed=2)
    con, run_id, *_ = build_store(tmp_path / "wb.duckdb", {"q": ("choice", ["a", "b", "c", "d"], probs, labels)}, 60)
    assert sa.point_report(StoreSource(con, run_id), "q", "test") is not None
    con.execute(f"UPDATE answer_rows SET {damage} WHERE item_id IN ('i00002', 'i00003')")  # one per split
    assert sa.point_report(StoreSource(con, run_id), "q", "test") is None
    assert sa.grid_points(StoreSource(con, run_id), "q", ("calibration", "test")) is None
    con.close()


@pytest.mark.parametrize("n_bins", [10, 15, 7])
def test_reliability_bins_of_equal_width_edges_are_those_of_the_comparisons(n_bins):
    """The floor(x · n) shortcut for equal-width edges gives the bin of the CASE comparisons (and of
    ``np.searchsorted``) at every edge, one ulp either side, 0, 1 and random scores."""
    from workbench.metrics.reliability import assign_bins, bin_edges
    from workbench.store import aggregates as ag
    from workbench.store.db import memory_connection

    edges = bin_edges(np.zeros(0), n_bins, "uniform")
    x = np.concatenate(
        [edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), np.random.default_rng(1).random(500)]
    )
    x = np.clip(x, 0.0, 1.0)
    con = memory_connection()
    try:
        got = con.execute(
            f"SELECT list(({ag._bin_sql(edges, 'x')}) ORDER BY i) FROM (SELECT unnest($x) AS x, generate_subscripts($x, 1) AS i)",
            {"x": x.tolist()},
        ).fetchone()[0]
        tree = con.execute(
            f"SELECT list(({ag.count_le(edges[1:-1], 'x')}) ORDER BY i) FROM (SELECT unnest($x) AS x, generate_subscripts($x, 1) AS i)",
            {"x": x.tolist()},
        ).fetchone()[0]
    finally:
        con.close()
    assert "floor" in ag._bin_sql(edges, "x") and got == tree == assign_bins(x, edges).tolist()


def test_stored_top_option_gives_the_points_of_the_probability_lists(tmp_path):
    """Rows written with ``top_option`` (the runner's and the import's writers) are read without their
    probability lists and give the same points, bit for bit; one row without it (written before the
    column existed) sends the whole run back to the lists."""
    import pandas as pd

    from workbench.schema.answers import top_two
    from workbench.store import aggregates as ag
    from workbench.store.calls import answers_table, top_option

    probs, labels = calibrated_sample(300, 6, seed=9)
    probs = probs.copy()
    probs[5] = [0.3, 0.3, 0.1, 0.1, 0.1, 0.1]  # a tie: the first of the two
    con, run_id, *_ = build_store(
        tmp_path / "wb.duckdb", {"q": ("choice", [f"o{j}" for j in range(6)], probs, labels)}, 300, fail_every=7
    )
    before = sa.grid_points(StoreSource(con, run_id), "q", ("calibration", "test"))
    assert before is not None and not ag._top_option_written(con, run_id, "q")
    # the runner's writer computes the column from the same rows
    rows = con.execute("SELECT item_id, probs FROM answers WHERE run_id = ? ORDER BY item_id", [run_id]).fetchall()
    written = answers_table([{"item_id": i, "probs": p} for i, p in rows])
    col = written.column("top_option").to_numpy()
    answered = np.array([p is not None for _, p in rows])
    top, p1, _ = top_two(np.vstack([p for _, p in rows if p is not None]))
    assert np.array_equal(col[answered], top_option(top, p1)) and np.all(col[~answered] == -1)
    assert 0 < (~answered).sum() and col[[i for i, _ in rows].index("i00005")] == 0
    con.register("_top", pd.DataFrame({"item_id": [i for i, _ in rows], "t": col}))
    con.execute("UPDATE answer_rows SET top_option = _top.t FROM _top WHERE answer_rows.item_id = _top.item_id")
    assert ag._top_option_written(con, run_id, "q")
    after = sa.grid_points(StoreSource(con, run_id), "q", ("calibration", "test"))
    assert after is not None
    for split in ("calibration", "test"):
        a, b = before[split], after[split]
        assert np.array_equal(a.labels, b.labels)
        for name in ("predicted", "x", "y"):
            assert np.array_equal(getattr(a.coords, name), getattr(b.coords, name)), (split, name)
    con.execute("UPDATE answer_rows SET top_option = NULL WHERE item_id = 'i00010'")
    assert not ag._top_option_written(con, run_id, "q")
    con.close()


def test_the_callers_surface_is_used_only_when_it_is_the_one_the_options_draw(store):
    """``certified_from_points(..., surface=)``: the page's own calibration surface gives the selection
    computed without it; a surface on another grid is not used."""
    con, run_id = store
    opts = ThresholdOptions(calibrate="none", alpha=0.2)
    pts = sa.grid_points(StoreSource(con, run_id), "intent", ("calibration", "test"), grid=opts.grid)
    assert pts is not None
    cal = pts["calibration"]
    want = sa.certified_from_points("intent", cal, pts["test"], opts).to_dict()

    def drawn(grid: int):
        s = risk_coverage_surface(
            cal.qtype, None, cal.labels, coordinates=sa._int64(cal.coords), n_options=len(cal.option_ids), grid=grid
        )
        s.extra.pop("coordinates")  # as the page keeps it
        return s

    assert sa.certified_from_points("intent", cal, pts["test"], opts, surface=drawn(opts.grid)).to_dict() == want
    assert sa.certified_from_points("intent", cal, pts["test"], opts, surface=drawn(40)).to_dict() == want
