"""Label budget planner (issue 15, item 4): the batched certificate equals ``select_guarantee``, the
logistic error model equals scikit-learn's, the pilot verdicts, and the acceptance on BANKING77.

Acceptance: ``workbench plan-labels`` on a 200-item pilot of BANKING77 answered by the offline tf-idf
baseline recommends N labels; 200 calibration splits of N items drawn from the run's whole
calibration + test pool (the pilot left out, so never from the pilot) are certified as
``workbench thresholds`` certifies them, and at least 80 % of them certify.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import copy_store, run_cli
from tests.thresholds.synth import choice_data, noul_data
from workbench.errors import OptionError
from workbench.metrics.recalibrate import apply_calibrator, fit_calibrator
from workbench.thresholds.bounds import clopper_pearson
from workbench.thresholds.choose import choose_thresholds
from workbench.thresholds.guarantees import select_guarantee, select_guarantee_split
from workbench.thresholds.options import ThresholdOptions
from workbench.thresholds.planning import (
    WIDE_SPREAD,
    certify_batch,
    logistic_errors,
    plan_labels_from_pilot,
    range_text,
    sizes_needed,
    success_curves,
)
from workbench.thresholds.rules import RuleCoordinates, rule_coordinates
from workbench.thresholds.surface import default_grids, surface_from_coordinates


# -- the batched certificate is select_guarantee, draw by draw ---------------------------------------
@pytest.mark.parametrize(
    "method, order_fraction, order",
    [
        ("fixed-sequence", 0.3, "upper-bound"),
        ("fixed-sequence", 0.3, "learned-per-alpha"),
        ("fixed-sequence", 0.0, "upper-bound"),
        ("holm", 0.0, "upper-bound"),
    ],
)
def test_certify_batch_selects_what_select_guarantee_selects(method, order_fraction, order):
    rng = np.random.default_rng(1)
    gx, gy = default_grids("choice", 30)
    stacks: dict[str, list] = {"acc": [], "err": [], "oacc": [], "oerr": []}
    expected = []
    for _ in range(30):
        n = int(rng.integers(100, 600))
        probs, labels = choice_data(rng, n, k=5, scale=3.0)
        c = rule_coordinates("choice", probs)
        correct = c.predicted == labels
        hold = rng.random(n) < order_fraction
        cert = surface_from_coordinates(c.x[~hold], c.y[~hold], correct[~hold], x_grid=gx, y_grid=gy)
        held = surface_from_coordinates(c.x[hold], c.y[hold], correct[hold], x_grid=gx, y_grid=gy)
        sel = select_guarantee(
            cert, alpha=0.15, delta=0.1, method=method, order_surface=held if hold.any() else None, order=order
        )
        flat = -1
        if sel.certified:
            flat = int(np.searchsorted(gx, sel.x)) * len(gy) + int(np.searchsorted(gy, sel.y))
        expected.append(flat)
        for key, arr in zip(stacks, (cert.accepted, cert.errors, held.accepted, held.errors)):
            stacks[key].append(arr.astype(np.int32))  # the planner's own dtype
    certified, best = certify_batch(
        np.array(stacks["acc"]),
        np.array(stacks["err"]),
        alpha=0.15,
        delta=0.1,
        method=method,
        order_accepted=np.array(stacks["oacc"]) if order_fraction else None,
        order_errors=np.array(stacks["oerr"]) if order_fraction else None,
        order=order,
    )
    assert best.tolist() == expected
    assert certified.tolist() == [e >= 0 for e in expected]
    assert 5 <= certified.sum() <= 29  # both outcomes are exercised


def test_logistic_error_model_matches_scikit_learn():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(2)
    D, n_pool, n_pilot = 4, 300, 200
    p_wrong = rng.uniform(0.01, 0.6, size=(D, n_pool))
    truth = 1 / (1 + np.exp(-(-0.7 + 1.4 * np.log(p_wrong / (1 - p_wrong)))))  # the shape differs from p_wrong
    wrong = rng.random((D, n_pilot)) < truth[:, :n_pilot]
    counts = rng.multinomial(n_pilot, np.full(n_pilot, 1 / n_pilot), size=D)
    ours = logistic_errors(p_wrong, wrong, counts)
    z = np.log(p_wrong / (1 - p_wrong))
    for d in range(D):
        ref = LogisticRegression(C=1e6, tol=1e-10, max_iter=1000).fit(
            z[d, :n_pilot, None], wrong[d], sample_weight=counts[d]
        )
        np.testing.assert_allclose(ours[d], ref.predict_proba(z[d, :, None])[:, 1], atol=2e-3)


# -- what the pilot can and cannot tell -------------------------------------------------------------
def test_a_tiny_pilot_is_too_small_to_plan_from():
    probs, labels = choice_data(np.random.default_rng(3), 40, k=5, scale=3.0)
    plan = plan_labels_from_pilot(probs, labels, "choice", ThresholdOptions(), n_draws=40, max_labels=3000)
    assert plan.status == "pilot_too_small", plan.messages
    best = plan.pilot["best_rule_at_alpha"]
    assert best is None or best["accepted"] < 3 / 0.05  # the documented criterion: fewer than 3/α accepted
    assert "too small to plan from" in plan.messages[0]


def test_a_model_worse_than_alpha_everywhere_is_unreachable():
    rng = np.random.default_rng(4)
    probs, _ = choice_data(rng, 400, k=4, scale=3.0)
    labels = rng.integers(0, 4, size=400)  # labels unrelated to the model: ~75 % error at every rule
    plan = plan_labels_from_pilot(probs, labels, "choice", ThresholdOptions(alpha=0.1), n_draws=40, max_labels=5000)
    assert plan.status == "unreachable" and plan.recommended_labels is None
    assert "even very many labels will not certify" in plan.messages[0]
    assert plan.curve[-1]["p_certify"] <= 0.05  # and the simulation agrees at 5,000 labels


def test_a_reachable_goal_beyond_max_labels_says_so_and_noul_plans():
    probs, labels = noul_data(np.random.default_rng(5), 600)
    opts = ThresholdOptions(alpha=0.05)
    small = plan_labels_from_pilot(probs, labels, "noul", opts, n_draws=60, max_labels=60)
    assert small.status == "beyond_max_labels" and small.recommended_labels is None
    plan = plan_labels_from_pilot(probs, labels, "noul", opts, n_draws=60, max_labels=5000)
    assert plan.status == "ok" and plan.recommended_labels is not None
    ps = [r["p_certify"] for r in plan.curve]
    assert ps[0] < 0.8 <= max(ps) and plan.curve[-1]["p_certify"] >= 0.9
    with pytest.raises(OptionError) as err:
        plan_labels_from_pilot(probs, labels, "noul", opts, power=1.5)
    assert err.value.parameter == "power"


def _calibrated_pilot(seed: int, n: int = 300, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A pilot of a calibrated k-option model: the top probability is logistic(N(2.5, 1.6)) and the
    top option is right with that probability (the others share the rest evenly)."""
    rng = np.random.default_rng(seed)
    top = np.clip(1 / (1 + np.exp(-rng.normal(2.5, 1.6, n))), 1 / k + 0.01, 0.999)
    labels = rng.integers(0, k, n)
    wrong = rng.random(n) > top
    pred = np.where(wrong, (labels + rng.integers(1, k, n)) % k, labels)
    probs = np.repeat(((1 - top) / (k - 1))[:, None], k, axis=1)
    probs[np.arange(n), pred] = top
    return probs, labels


def test_a_recommendation_far_above_the_median_is_warned_about():
    """N grows like 1/(α - error)²: when a few replicates sit close to α the recommendation (their 90 %
    quantile) is many times the median, and the plan says that it rests on them. Two pilots of the same
    model at a coverage target of 0.5: one 4.9× the median (warned), one 2.8× (not warned)."""
    opts = ThresholdOptions(alpha=0.05)
    plans = {
        seed: plan_labels_from_pilot(
            *_calibrated_pilot(seed), "choice", opts, target_coverage=0.5, n_draws=120, max_labels=20000, seed=seed
        )
        for seed in (0, 4)
    }
    for plan in plans.values():
        r, rec = plan.labels_range, plan.recommended_labels
        assert plan.status == "ok" and rec == r["high"]  # the 90 % quantile
        wide = [w for w in plan.warnings if "bootstrap replicates disagree" in w]
        assert bool(wide) == (rec > WIDE_SPREAD * r["median"])
    wide = plans[4]
    r = wide.labels_range
    assert wide.recommended_labels > 4 * r["median"] and len(wide.warnings) == 1
    assert wide.warnings[0].startswith(
        f"the pilot's bootstrap replicates disagree: the recommended {wide.recommended_labels:,} labels are "
        f"{wide.recommended_labels / r['median']:.1f}× the median {r['median']:,} ({range_text(r)})"
    )
    assert wide.warnings[0].endswith(
        "Label more pilot items to narrow the spread before buying calibration labels, or lower the target coverage"
    )
    assert 2 < plans[0].recommended_labels / plans[0].labels_range["median"] < WIDE_SPREAD
    assert plans[0].warnings == []  # nor is its best rule within the noise of α


# -- the acceptance: BANKING77 tf-idf, a 200-item pilot ----------------------------------------------
def _certify_like_workbench(probs: np.ndarray, labels: np.ndarray, opts: ThresholdOptions, gx, gy):
    """``choose_thresholds``' guarantee on one calibration split: the calibrator fitted on the seeded
    carve, the fixed-sequence order learned on the seeded held-apart share; class counts are left out
    (they do not enter the pooled certificate), which makes a draw ~10× faster."""
    fit = np.random.default_rng(opts.seed).random(len(labels)) < opts.calibrator_fraction
    cal = fit_calibrator(opts.calibrate, probs[fit], labels[fit])
    coords = rule_coordinates("choice", apply_calibrator(cal, probs[~fit]))
    correct = coords.predicted == labels[~fit]
    pooled = RuleCoordinates(np.zeros(len(correct), int), coords.x, coords.y, coords.x_name, coords.y_name)
    sel, _ = select_guarantee_split(
        pooled,
        correct,
        x_grid=gx,
        y_grid=gy,
        n_classes=1,
        alpha=opts.alpha,
        delta=opts.delta,
        order_fraction=opts.order_fraction,
        rng=np.random.default_rng([opts.seed, 1]),
    )
    return sel


def test_plan_labels_on_a_200_item_banking77_pilot_certifies_real_draws(tmp_path, b77_tfidf_master):
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    db = copy_store(b77_tfidf_master["db"], tmp_path / "wb.duckdb")
    run_id = b77_tfidf_master["run_id"]
    html = tmp_path / "plan.html"
    r = run_cli(
        "plan-labels", run_id, "-q", "intent", "--pilot-size", "200", "--json", "--html", str(html), db=db, check=True
    )
    plan = json.loads(r.stdout)
    n_labels = plan["recommended_labels"]
    assert plan["status"] == "ok" and plan["pilot"]["n_items"] == 200 and len(plan["pilot"]["item_ids"]) == 200
    assert plan["settings"]["alpha"] == 0.05 and plan["settings"]["delta"] == 0.1 and plan["power"] == 0.8
    predicted = next(row for row in plan["curve"] if row["n_labels"] == n_labels)
    assert predicted["p_certify"] >= 0.8 and n_labels is not None
    assert "plotly" in html.read_text(encoding="utf-8") and f"{n_labels} labels" in html.read_text(encoding="utf-8")

    con = connect(db, read_only=True)
    pool = load_answers(con, run_id, "intent", splits=["calibration", "test"])
    con.close()
    pool = pool.select((pool.labels >= 0) & ~np.isin(pool.item_ids, plan["pilot"]["item_ids"]))
    opts = ThresholdOptions()
    gx, gy = default_grids("choice", opts.grid)
    rng = np.random.default_rng(20261201)
    certified, coverage = [], []
    for d in range(200):
        pick = np.zeros(len(pool.labels), dtype=bool)
        pick[rng.choice(len(pool.labels), n_labels, replace=False)] = True
        sel = _certify_like_workbench(pool.probs[pick], pool.labels[pick], opts, gx, gy)
        if d < 2:  # the fast path is the workbench's own certificate
            full = choose_thresholds(pool.select(pick), None, opts).selection
            assert (full.certified, full.x, full.y) == (sel.certified, sel.x, sel.y)
        certified.append(sel.certified and sel.feasible)
        coverage.append(sel.guarantee["expected_coverage"] if certified[-1] else 0.0)
    rate = float(np.mean(certified))
    print(
        f"\nplan-labels, 200-item BANKING77 tf-idf pilot: N = {n_labels} labels, predicted P(certified) "
        f"{predicted['p_certify']:.3f}, expected coverage {predicted['expected_coverage']:.3f}; "
        f"200 real draws of {n_labels} from {len(pool.labels)} calibration+test items: certified {rate:.3f}, "
        f"mean certified coverage {np.mean(coverage):.3f}"
    )
    assert rate >= 0.8


def test_plan_labels_cli_text_and_bad_power(tmp_path, b77_tfidf_master):
    db = copy_store(b77_tfidf_master["db"], tmp_path / "wb.duckdb")
    run_id = b77_tfidf_master["run_id"]
    r = run_cli(
        "plan-labels", run_id, "-q", "intent", "--pilot-size", "40", "--draws", "20", "--max-labels", "2000", db=db
    )
    assert r.returncode == 0, r.stderr
    assert "PILOT TOO SMALL" in r.stdout and "too small to plan from" in r.stdout
    assert "α = 0.05, δ = 0.1" in r.stdout and "labels  certifying  P(certified)" in r.stdout
    bad = run_cli("plan-labels", run_id, "-q", "intent", "--power", "1.5", db=db)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --power must be in (0, 1)"), bad.stderr


def test_unlabelled_answers_widen_the_population():
    rng = np.random.default_rng(6)
    probs, labels = noul_data(rng, 300)
    unlabelled, _ = noul_data(rng, 2000)
    opts = ThresholdOptions(alpha=0.05)
    plan = plan_labels_from_pilot(probs, labels, "noul", opts, n_draws=60, max_labels=5000, unlabelled_probs=unlabelled)
    assert plan.pilot["n_unlabelled"] == 2000 and plan.pilot["n_items"] == 300
    assert any("2000 unlabelled items widen the population" in m for m in plan.messages)
    assert plan.status == "ok" and plan.curve[-1]["p_certify"] >= 0.9


# -- the plan states its uncertainty (issue 28 §3) ---------------------------------------------------
def test_success_curves_recover_each_replicates_crossing():
    """Replicates whose probability of success is a known logistic in log N: the fit finds each one's N at
    ``power``; a replicate that never succeeds needs more than the largest size."""
    rng = np.random.default_rng(11)
    sizes = np.geomspace(100, 20000, 15).round()
    log_n = np.log(sizes)
    true_n = np.array([300.0, 1000.0, 4000.0])  # P = 0.8 there
    slope = 3.0
    p = 1 / (1 + np.exp(-(np.log(0.8 / 0.2) + slope * (log_n[None, :] - np.log(true_n)[:, None]))))
    trials = 2000
    wins = np.vstack([rng.binomial(trials, p), np.zeros((1, len(sizes)), dtype=int)])
    c, e = success_curves(log_n, wins, trials)
    need = sizes_needed(c, e, log_n, 0.8, int(sizes[0]), int(sizes[-1]))
    np.testing.assert_allclose(need[:3], true_n, rtol=0.05)
    assert np.isinf(need[3])


def test_the_plans_error_interval_is_clopper_pearson_at_90_percent():
    from statsmodels.stats.proportion import proportion_confint

    for e, a in [(0, 40), (7, 223), (12, 247), (40, 40)]:
        lo, hi = proportion_confint(e, a, alpha=0.1, method="beta")
        np.testing.assert_allclose(clopper_pearson(e, a, 0.9), (lo, hi), atol=1e-12)


def test_plan_labels_reports_n_as_an_interval_and_warns_within_the_noise(tmp_path, b77_tfidf_master):
    """A 300-item BANKING77 pilot: the CLI's --json and text and the API object carry the spread of N over
    the pilot's bootstrap replicates; the recommendation is its 90 % quantile; a coverage target whose
    best pilot rule has an error interval containing α is warned about, a modest one is not."""
    import workbench as wb
    from workbench.thresholds.planning import range_text

    db = copy_store(b77_tfidf_master["db"], tmp_path / "wb.duckdb")
    run_id = b77_tfidf_master["run_id"]
    common = ("plan-labels", run_id, "-q", "intent", "--pilot-size", "300", "--max-labels", "6000", "--draws", "120")
    hard = json.loads(run_cli(*common, "--target-coverage", "0.8", "--json", db=db, check=True).stdout)
    easy = json.loads(run_cli(*common, "--target-coverage", "0.3", "--json", db=db, check=True).stdout)
    for plan in (hard, easy):
        r = plan["labels_range"]
        assert r["replicates"] == 40 and r["confidence"] == 0.9
        known = [v for v in (r["low"], r["median"], r["high"]) if v is not None]
        assert known == sorted(known) and r["low"] is not None
        rec = plan["recommended_labels"]
        if rec is not None:  # the 90 % quantile: at least 90 % of the replicates need no more
            row = next(x for x in plan["curve"] if x["n_labels"] == rec)
            assert row["share_sufficient"] >= 0.9 and rec >= r["median"]
            assert all(x["share_sufficient"] < 0.9 for x in plan["curve"] if x["n_labels"] < rec)
        else:
            assert plan["status"] == "beyond_max_labels" and r["share_beyond"] > 0.1
    # the warning: the pilot's best rule reaching the target has a 90 % error interval containing α
    rule = hard["pilot"]["target_rule"]
    assert rule["coverage"] >= 0.8 and rule["error_interval_90"][0] <= 0.05 <= rule["error_interval_90"][1]
    assert (
        len(hard["warnings"]) == 1
        and "the pilot cannot tell whether its best rule with coverage ≥ 0.8" in (hard["warnings"][0])
    )
    assert easy["warnings"] == [] and easy["pilot"]["target_rule"]["error_interval_90"][1] < 0.05
    # the text: the spread, the warning, the replicates column
    text = run_cli(*common, "--target-coverage", "0.8", db=db, check=True).stdout
    assert f"labels needed: {range_text(hard['labels_range'])}" in " ".join(text.split())
    assert "warning: the pilot cannot tell whether its best rule" in text and "replicates enough" in text
    # the API object: the same plan
    con = wb.connect(str(db), read_only=True)
    plan = wb.plan_labels(con, run_id, "intent", pilot_size=300, max_labels=6000, n_draws=120, target_coverage=0.8)
    con.close()
    assert plan.labels_range == hard["labels_range"] and plan.warnings == hard["warnings"]
    assert plan.recommended_labels == hard["recommended_labels"]
    if plan.recommended_labels is not None:
        assert range_text(plan.labels_range) in plan.summary()
