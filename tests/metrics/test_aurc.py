"""AURC and selective risk at 80% coverage: one entry of the table of metrics, on every surface.

The reference is the definition itself, written as a plain loop over the distinct confidence thresholds
(ties accepted together): accept every item whose top probability is at least the threshold, and add
(coverage gained) × (error rate among the accepted). The report (every question type, in memory and
streamed from a real DuckDB store), compare, the gate and ``workbench report --json`` in a subprocess
must give that number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.metrics import registry
from workbench.metrics.report import choice_report, noul_report, question_report, score_report
from workbench.metrics.selective import ConfidenceRanking, risk_coverage_curve

PER_ITEM = ("aurc", "selective_risk_80")


def brute_aurc(conf: np.ndarray, wrong: np.ndarray) -> float:
    """Area under the step risk–coverage curve, one threshold per distinct confidence (ties together)."""
    n, area, before = len(conf), 0.0, 0
    for t in sorted(set(conf.tolist()), reverse=True):
        accepted = conf >= t
        m = int(accepted.sum())
        area += (m - before) / n * float(wrong[accepted].mean())
        before = m
    return area


def brute_risk_at(conf: np.ndarray, wrong: np.ndarray, coverage: float) -> float:
    """Error rate among the accepted at the highest threshold whose coverage reaches ``coverage``."""
    for t in sorted(set(conf.tolist()), reverse=True):
        accepted = conf >= t
        if accepted.mean() >= coverage - 1e-12:
            return float(wrong[accepted].mean())
    raise AssertionError("unreachable: the lowest threshold accepts everything")


def tied_sample(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows drawn from a few templates (columns permuted): many items share a top probability."""
    rng = np.random.default_rng(seed)
    templates = rng.dirichlet(np.ones(k), size=5)
    rows = templates[rng.integers(0, 5, n)]
    probs = np.take_along_axis(rows, rng.permuted(np.tile(np.arange(k), (n, 1)), axis=1), axis=1)
    labels = np.where(rng.random(n) < 0.6, probs.argmax(1), rng.integers(0, k, n))
    return probs, labels


@pytest.mark.parametrize("decimals", [None, 3, 1])  # no ties; some (groups > n/2); many (groups <= n/2)
def test_weighted_ranking_equals_the_definition_on_the_resampled_copy(decimals):
    rng = np.random.default_rng(7)
    n = 400
    conf = rng.random(n)
    if decimals is not None:
        conf = np.round(conf, decimals)
    wrong = rng.random(n) < conf * 0.2 + 0.2 * (1 - conf)
    ranking = ConfidenceRanking(conf, wrong)
    assert ranking.aurc() == pytest.approx(brute_aurc(conf, wrong), abs=1e-12)
    for c in (0.05, 0.5, 0.8, 1.0):
        assert ranking.risk_at_coverage(c) == pytest.approx(brute_risk_at(conf, wrong, c), abs=1e-12)
    for _ in range(5):  # integer resampling counts: the metric of the copy that repeats each item w times
        w = np.bincount(rng.integers(0, n, n), minlength=n).astype(float)
        copy_conf, copy_wrong = np.repeat(conf, w.astype(int)), np.repeat(wrong, w.astype(int))
        assert ranking.aurc(w) == pytest.approx(brute_aurc(copy_conf, copy_wrong), abs=1e-12)
        assert ranking.risk_at_coverage(0.8, w) == pytest.approx(brute_risk_at(copy_conf, copy_wrong, 0.8), abs=1e-12)


def test_group_sums_by_bincount_equal_the_sums_in_rank_order_bit_for_bit():
    """With ties a replicate's per-group sums come from ``np.bincount`` over the items' own order; the
    sums are of integers, so they equal the sums taken in rank order (``reduceat``) exactly."""
    rng = np.random.default_rng(5)
    n = 5000
    for decimals in (2, 4):  # 101 groups; most items alone in their group
        conf, wrong = np.round(rng.random(n), decimals), rng.random(n) < 0.3
        ranking = ConfidenceRanking(conf, wrong)
        order = np.argsort(-conf, kind="stable")
        s = conf[order]
        starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        for w in (None, *(np.bincount(rng.integers(0, n, n), minlength=n).astype(float) for _ in range(3))):
            ws = np.ones(n) if w is None else w[order]
            gw = np.add.reduceat(ws, starts)
            expected = (gw, np.cumsum(gw), np.cumsum(np.add.reduceat(ws * wrong[order], starts)))
            for got, want in zip(ranking.ends(w), expected, strict=True):
                np.testing.assert_array_equal(got, want)


def test_aurc_does_not_depend_on_the_order_of_tied_items():
    rng = np.random.default_rng(3)
    conf = np.round(rng.random(300), 1)
    wrong = rng.random(300) < 0.3
    perm = rng.permutation(300)
    assert ConfidenceRanking(conf, wrong).aurc() == pytest.approx(ConfidenceRanking(conf[perm], wrong[perm]).aurc())


def test_risk_coverage_curve_area_is_the_same_aurc_scaled_by_failures():
    probs, labels = tied_sample(300, 4, seed=2)
    probs[::9] = np.nan  # failures: counted in coverage, never accepted
    curve = risk_coverage_curve(probs, labels)
    ok = np.isfinite(probs).all(1)
    conf, wrong = probs[ok].max(1), probs[ok].argmax(1) != labels[ok]
    step_area = float(np.sum(np.diff(np.r_[0.0, curve.coverage]) * curve.risk))
    assert curve.aurc == pytest.approx(step_area, abs=1e-12)
    assert curve.aurc == pytest.approx(brute_aurc(conf, wrong) * ok.sum() / len(labels), abs=1e-12)


@pytest.mark.parametrize("qtype", ["choice", "noul", "score"])
@pytest.mark.parametrize("ties", [False, True])
def test_report_aurc_is_the_definition_on_the_kept_items_with_intervals(qtype, ties):
    k = {"choice": 5, "noul": 2, "score": 4}[qtype]
    probs, labels = tied_sample(500, k, seed=11) if ties else calibrated_sample(500, k, seed=11)
    probs[::17] = np.nan
    labels = labels.copy()
    labels[::13] = -1
    fn = {"choice": choice_report, "noul": noul_report, "score": score_report}[qtype]
    rep = fn(probs, labels, n_boot=60, seed=4, smooth=False)
    keep = np.isfinite(probs).all(1) & (labels >= 0)
    conf, wrong = probs[keep].max(1), probs[keep].argmax(1) != labels[keep]
    assert rep.metrics["aurc"].estimate == pytest.approx(brute_aurc(conf, wrong), abs=1e-12)
    assert rep.metrics["selective_risk_80"].estimate == pytest.approx(brute_risk_at(conf, wrong, 0.8), abs=1e-12)
    for name in PER_ITEM:
        iv = rep.metrics[name]
        assert iv.n_boot == 60 and iv.low <= iv.estimate <= iv.high and iv.low < iv.high
    # every metric the report carries is declared once, in the table, for this type and option count
    assert set(rep.metrics) == set(registry.report_metrics(qtype, k)) - {"smece", "smece_yes"}


def test_better_ranking_gives_lower_aurc_at_the_same_accuracy():
    rng = np.random.default_rng(5)
    n = 2000
    correct = rng.random(n) < 0.7
    good = np.where(correct, 0.6 + 0.4 * rng.random(n), 0.5 * rng.random(n) + 0.3)  # errors less confident
    bad = 0.3 + 0.7 * rng.random(n)  # confidence unrelated to correctness
    a, b = ConfidenceRanking(good, ~correct).aurc(), ConfidenceRanking(bad, ~correct).aurc()
    assert a < b and registry.higher_is_better("aurc") is False


# -- a real store: streamed = in memory, compare, gate, the CLI in a subprocess --------------------------------
@pytest.fixture
def store(tmp_path):
    n = 800
    probs, labels = tied_sample(n, 6, seed=21)
    labels = labels.copy()
    labels[::31] = -1
    yes = np.round(np.clip(np.random.default_rng(3).beta(2, 2, n), 0.01, 0.99), 2)
    noul_labels = np.where(np.random.default_rng(4).random(n) < yes, 0, 1)
    s_probs, s_labels = calibrated_sample(n, 4, seed=5)
    path = tmp_path / "wb.duckdb"
    con, run_id, _, _ = build_store(
        path,
        {
            "intent": ("choice", list("abcdef"), probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), noul_labels),
            "severity": ("score", ["0", "1", "2", "3"], s_probs, s_labels),
        },
        n,
        fail_every=10,
    )
    yield con, path, run_id
    con.close()


def test_streamed_report_equals_in_memory_and_the_definition(store, monkeypatch):
    from workbench.store.runs import load_answers
    from workbench.workflows.evaluation import report_run

    con, _, run_id = store
    mem = {q.question: q for q in report_run(con, run_id, split="test", n_boot=40, stream=False).questions}
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "50")  # every question is read in batches
    streamed = {q.question: q for q in report_run(con, run_id, split="test", n_boot=40).questions}
    for q in ("intent", "urgent", "severity"):
        ans = load_answers(con, run_id, q, ["test"])
        keep = ~ans.failed & (ans.labels >= 0)
        p, y = ans.probs[keep], ans.labels[keep]
        assert mem[q].metrics["aurc"].estimate == pytest.approx(brute_aurc(p.max(1), p.argmax(1) != y), abs=1e-12)
        for name in PER_ITEM:
            a, b = mem[q].metrics[name], streamed[q].metrics[name]
            assert (b.estimate, b.low, b.high) == pytest.approx((a.estimate, a.low, a.high), abs=1e-9)


def test_compare_reports_aurc_and_its_paired_difference(store):
    from workbench.workflows.compare import compare_runs
    from workbench.workflows.evaluation import calibrate_run, report_run

    con, _, run_id = store
    view = calibrate_run(con, run_id, "temperature", questions=["intent"])["run_id"]
    rows = compare_runs(con, [run_id, view], questions=["intent"], n_boot=50, policy=False).to_dict()["rows"]
    base, other = rows
    for name in PER_ITEM:
        d = other["vs_baseline"]["metrics"][name]
        assert d["difference"] == pytest.approx(
            other["metrics"][name]["estimate"] - base["metrics"][name]["estimate"], abs=1e-12
        )
        assert d["low"] <= d["difference"] <= d["high"]
    reports = {
        r: {q.question: q for q in report_run(con, r, split="test", n_boot=0).questions}["intent"]
        for r in (run_id, view)
    }
    for row in rows:
        for name in PER_ITEM:
            assert row["metrics"][name]["estimate"] == pytest.approx(
                reports[row["run_id"]].metrics[name].estimate, abs=1e-12
            )
    # the CLI's flat table carries every per-item metric and its difference
    frame = compare_runs(con, [run_id, view], questions=["intent"], n_boot=20, policy=False).to_frame()
    assert {"aurc", "aurc_low", "aurc_high", "d_aurc", "d_selective_risk_80"} <= set(frame.columns)


def test_gate_judges_aurc_and_its_drop_against_a_baseline(store):
    from workbench.store.runs import load_answers
    from workbench.workflows.evaluation import calibrate_run
    from workbench.workflows.gate import KNOWN_METRICS, evaluate_gate, loads_requirements

    con, _, run_id = store
    view = calibrate_run(con, run_id, "temperature", questions=["urgent"])["run_id"]
    assert {"aurc", "selective_risk_80"} <= set(KNOWN_METRICS)
    reqs = loads_requirements(
        "n_boot: 100\nrequirements:\n"
        "  - {question: urgent, metric: aurc, max: 0.9}\n"
        "  - {question: urgent, metric: aurc, max: 0.0001}\n"
        "  - {question: intent, metric: selective_risk_80, max: 0.99}\n"
    )
    result = evaluate_gate(con, run_id, reqs)
    assert [r.passed for r in result.results] == [True, False, True]
    rep = question_report(load_answers(con, run_id, "urgent", ["test"]), n_boot=100, smooth=False)
    assert result.results[0].value == pytest.approx(rep.metrics["aurc"].estimate, abs=1e-12)
    paired = evaluate_gate(con, view, loads_requirements(reqs.model_dump_json()), baseline=run_id, max_drop=1.0)
    assert paired.results[0].drop is not None and np.isfinite(paired.results[0].drop.drop)


def test_cli_report_json_and_text_in_a_subprocess_streamed_or_not(store):
    con, path, run_id = store
    con.close()
    env = {**os.environ, "WORKBENCH_DB": str(path), "COLUMNS": "250"}
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "report", run_id, "--split", "test"]

    def run(*extra: str, **env_extra: str) -> str:
        proc = subprocess.run(
            [*cmd, *extra], env=env | env_extra, capture_output=True, text=True, timeout=300, check=False
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    mem, streamed = json.loads(run("--json")), json.loads(run("--json", WORKBENCH_STREAM_CELLS="50"))
    for q in ("intent", "urgent", "severity"):
        for name in PER_ITEM:
            a, b = mem["questions"][q]["metrics"][name], streamed["questions"][q]["metrics"][name]
            assert b["estimate"] == pytest.approx(a["estimate"], abs=1e-9)
            assert b["low"] == pytest.approx(a["low"], abs=1e-9) and b["high"] == pytest.approx(a["high"], abs=1e-9)
    text = run()
    assert "aurc" in text and "area under the risk–coverage curve" in text


def test_compare_and_report_give_one_brier_for_a_yes_no_question(store):
    """The report's yes/no Brier is that of P(yes), in [0, 1]; compare's is the same figure (it was the
    two-option sum, twice as large)."""
    from workbench.workflows.compare import compare_runs
    from workbench.workflows.evaluation import calibrate_run, report_run

    con, _, run_id = store
    view = calibrate_run(con, run_id, "temperature", questions=["urgent"])["run_id"]
    rows = compare_runs(con, [run_id, view], questions=["urgent"], n_boot=20, policy=False).to_dict()["rows"]
    for row in rows:
        rep = {q.question: q for q in report_run(con, row["run_id"], split="test", n_boot=0).questions}["urgent"]
        for name in ("accuracy", "log_loss", "brier", *PER_ITEM):
            assert row["metrics"][name]["estimate"] == pytest.approx(rep.metrics[name].estimate, abs=1e-12), name


def test_gate_refuses_a_baseline_for_a_metric_without_paired_comparison_before_measuring(store):
    """The table says which metrics are outside the replicate function (smooth ECE, class-wise ECE):
    with a baseline they are refused with one RequirementsError, never a crash while pairing."""
    from workbench.errors import RequirementsError
    from workbench.workflows.evaluation import calibrate_run
    from workbench.workflows.gate import evaluate_gate, loads_requirements

    con, _, run_id = store
    view = calibrate_run(con, run_id, "temperature", questions=["intent"])["run_id"]
    for metric in ("classwise_ece", "smece"):
        reqs = loads_requirements(f"requirements:\n  - {{question: intent, metric: {metric}, max: 0.9}}\n")
        with pytest.raises(RequirementsError, match="has no paired comparison"):
            evaluate_gate(con, view, reqs, baseline=run_id)


def test_soft_reports_carry_exactly_the_soft_metrics_of_the_table():
    from workbench.metrics.report import soft_report

    probs, _ = calibrated_sample(200, 3, seed=9)
    votes = np.random.default_rng(2).integers(0, 3, size=(200, 3))
    rep = soft_report(probs, votes, n_boot=10)
    assert set(rep.metrics) == set(registry.report_metrics("choice", 3, labels="soft"))
    assert set(registry.METRIC_INFO) == {m.name for m in registry.METRICS}
