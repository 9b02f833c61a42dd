"""Finite-batch view (issue 15, item 5): the tails cross-checked against exact sums and simulation,
and the figures in ``workbench thresholds`` (text and --json) and in the exported policy."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import copy_store, run_cli
from workbench.errors import OptionError
from workbench.thresholds.batch import batch_view


def _binom_sf_exact(c: int, n: int, p: Fraction) -> Fraction:
    """P(Binomial(n, p) > c), summed exactly in rationals."""
    return sum((math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(c + 1, n + 1)), Fraction(0))


@pytest.mark.parametrize("n, alpha", [(200, "0.05"), (1000, "0.1"), (37, "0.2")])
def test_guaranteed_figures_match_exact_binomial_sums(n, alpha):
    a = Fraction(alpha)
    view = batch_view(alpha=float(a), delta=0.1, n_batch=n, accepted=500, errors=20, confidence=0.95)
    limit = math.floor(float(a) * n + 1e-9)
    assert view["max_errors_at_alpha"] == limit == int(a * n)  # E/N > α  <=>  E > ⌊αN⌋
    g = view["guaranteed"]
    tail = _binom_sf_exact(limit, n, a)
    assert g["binomial_tail_at_alpha"] == pytest.approx(float(tail), rel=1e-9)
    assert g["p_exceed_at_most"] == pytest.approx(min(1.0, 0.1 + float(tail)), rel=1e-9)
    c = g["tolerance_errors"]  # the smallest count whose exceedance is at most ε = 0.05
    assert _binom_sf_exact(c, n, a) <= Fraction(5, 100) < _binom_sf_exact(c - 1, n, a)
    assert g["tolerance_probability"] == pytest.approx(0.85)


def test_estimated_exceedance_matches_beta_binomial_sum_and_simulation():
    from scipy.special import betaln, gammaln

    n, accepted, errors, alpha = 400, 1200, 45, 0.05
    est = batch_view(alpha=alpha, delta=None, n_batch=n, accepted=accepted, errors=errors)["estimated"]
    a, b = errors + 0.5, accepted - errors + 0.5
    k = np.arange(21, n + 1)  # E > ⌊0.05 · 400⌋ = 20
    log_pmf = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + betaln(k + a, n - k + b) - betaln(a, b)
    assert est["p_exceed"] == pytest.approx(float(np.exp(log_pmf).sum()), rel=1e-9)
    rng = np.random.default_rng(0)
    draws = rng.binomial(n, rng.beta(a, b, size=400_000))
    share = float((draws > 20).mean())
    assert abs(share - est["p_exceed"]) < 4 * math.sqrt(share * (1 - share) / 400_000)
    assert est["error_rate"] == pytest.approx(a / (a + b)) and est["expected_errors"] == pytest.approx(n * a / (a + b))


def test_uncertified_rules_get_no_guaranteed_figure_and_bad_batch_is_refused():
    view = batch_view(alpha=0.05, delta=None, n_batch=100, accepted=50, errors=1)
    assert view["guaranteed"] is None and view["statement"].startswith("next 100 accepted items: estimated")
    with pytest.raises(OptionError) as err:
        batch_view(alpha=0.05, delta=0.1, n_batch=0, accepted=50, errors=1)
    assert err.value.parameter == "batch"


def test_thresholds_and_policy_export_report_the_next_batch(tmp_path, b77_tfidf_master):
    db = copy_store(b77_tfidf_master["db"], tmp_path / "wb.duckdb")
    run_id = b77_tfidf_master["run_id"]
    doc = json.loads(
        run_cli("thresholds", run_id, "-q", "intent", "--batch", "500", "--json", db=db, check=True).stdout
    )
    q = doc["questions"]["intent"]
    b = q["batch"]
    assert q["certified"] and b["n"] == 500 and b["max_errors_at_alpha"] == 25
    expected = batch_view(
        alpha=0.05, delta=0.1, n_batch=500, accepted=q["calibration"]["n_accepted"], errors=q["calibration"]["n_errors"]
    )
    assert b == json.loads(json.dumps(expected))
    assert 0.1 < b["guaranteed"]["p_exceed_at_most"] < 1 and 0 < b["estimated"]["p_exceed"] < 1
    text = run_cli("thresholds", run_id, "-q", "intent", "--batch", "500", db=db, check=True).stdout
    assert "next 500 accepted items: P(error > 0.05) <=" in text and "not guaranteed" in text
    out = tmp_path / "policy.json"
    run_cli("policy", "export", run_id, "-q", "intent", "--batch", "500", "--out", str(out), db=db, check=True)
    policy = json.loads(out.read_text(encoding="utf-8"))
    assert policy["questions"]["intent"]["objective"]["details"]["batch"]["n"] == 500
    bad = run_cli("thresholds", run_id, "-q", "intent", "--batch", "0", db=db)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --batch must be at least 1"), bad.stderr


# -- the batch guarantee as a selection objective (issue 28 §5) --------------------------------------


@pytest.mark.parametrize("n, alpha, delta", [(300, "0.05", "0.1"), (500, "0.1", "0.05"), (60, "0.05", "0.2")])
def test_batch_levels_bound_the_batch_tail_exactly_and_are_the_largest(n, alpha, delta):
    from workbench.thresholds.batch import batch_certificate_levels

    a, d = float(alpha), float(delta)
    a_pop, d_pop = batch_certificate_levels(a, d, n)
    assert d_pop == d / 2 and 0 < a_pop < a
    limit = int(Fraction(alpha) * n)
    half = Fraction(delta) / 2
    assert _binom_sf_exact(limit, n, Fraction(a_pop)) <= half  # the tail at α' fits in the other δ/2
    assert _binom_sf_exact(limit, n, Fraction(a_pop * (1 + 1e-6))) > half  # and α' is the largest such


def _answers(probs: np.ndarray, labels: np.ndarray):
    from workbench.answers import RunAnswers

    n, k = probs.shape
    return RunAnswers(
        run_id="r",
        question="q",
        qtype="choice",
        option_ids=[str(i) for i in range(k)],
        item_ids=np.array([f"i{i}" for i in range(n)], dtype=object),
        splits=np.array(["calibration"] * n, dtype=object),
        probs=probs,
        labels=labels,
        failed=np.zeros(n, dtype=bool),
        failure_kind=np.full(n, None, dtype=object),
        latency_ms=np.zeros(n),
        cost_usd=np.zeros(n),
        input_tokens=np.zeros(n),
    )


@pytest.mark.slow  # 300 certifications on 4,000 items: about a minute on 2 busy cores
def test_batch_objective_keeps_the_next_batch_under_alpha_where_the_population_one_does_not():
    """Over 150 random calibration draws, the error rate among the next 400 accepted fresh items exceeds
    α in at most a δ share (+ Monte-Carlo slack) with ``guarantee_for="batch"``; the population guarantee,
    whose rules sit near α, exceeds it far more often (the issue's 12-14% on test halves)."""
    from dataclasses import replace

    from tests.thresholds.synth import choice_data
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions

    rng = np.random.default_rng(28)
    probs, labels = choice_data(rng, 200_000, k=6, scale=5.0)
    n_cal, n_batch, n_rep, alpha, delta = 4000, 400, 150, 0.05, 0.1
    population = ThresholdOptions(alpha=alpha, delta=delta, calibrate="none", grid=50, batch=n_batch)
    batch = replace(population, guarantee_for="batch")
    over = {"population": 0, "batch": 0}
    coverage = {"population": [], "batch": []}
    for rep in range(n_rep):
        order = rng.permutation(len(labels))
        cal, fresh = order[:n_cal], order[n_cal:]
        answers = _answers(probs[cal], labels[cal])
        for name, opts in (("population", replace(population, seed=rep)), ("batch", replace(batch, seed=rep))):
            res = choose_thresholds(answers, None, opts)
            if not res.certified:  # nothing is accepted: no batch, no exceedance
                coverage[name].append(0.0)
                continue
            dec = res.rule.decide(probs[fresh])
            taken = fresh[dec.accepted][:n_batch]  # the next n_batch accepted items, in arrival order
            errors = int((dec.option[dec.accepted][:n_batch] != labels[taken]).sum())
            over[name] += errors > math.floor(alpha * n_batch)
            coverage[name].append(float(dec.accepted.mean()))
    slack = 3 * math.sqrt(delta * (1 - delta) / n_rep)
    print({k: v / n_rep for k, v in over.items()}, {k: float(np.mean(v)) for k, v in coverage.items()})
    assert over["batch"] / n_rep <= delta + slack, over
    assert over["population"] > over["batch"], over
    # the price: a stricter rule, still accepting most of what the population rule accepts
    assert np.mean(coverage["batch"]) < np.mean(coverage["population"])
    assert np.mean(coverage["batch"]) > 0.5 * np.mean(coverage["population"]), coverage


def test_batch_objective_is_stated_in_the_result_and_refuses_costs():
    from tests.thresholds.synth import choice_data
    from workbench.thresholds.batch import batch_certificate_levels
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions

    probs, labels = choice_data(np.random.default_rng(3), 5000, k=4, scale=4.0)
    opts = ThresholdOptions(guarantee_for="batch", batch=1000, calibrate="none")
    res = choose_thresholds(_answers(probs, labels), None, opts)
    a_pop, d_pop = batch_certificate_levels(0.05, 0.1, 1000)
    g = res.to_dict()["selection"]["guarantee"]
    assert g["for"] == {
        "batch": 1000,
        "alpha": 0.05,
        "delta": 0.1,
        "alpha_population": a_pop,
        "delta_population": d_pop,
    }
    assert res.batch["guaranteed"]["p_exceed_at_most"] <= 0.1 + 1e-12  # δ/2 + the tail at α' ≤ δ
    assert "for the next 1000 accepted" in opts.describe()
    assert opts.settings()["guarantee_for"] == "batch"
    with pytest.raises(OptionError) as err:
        ThresholdOptions(guarantee_for="batch", costs={"0": {"*": 5}}, alpha=0.5)
    assert err.value.parameter == "guarantee_for"
    with pytest.raises(OptionError) as err:
        ThresholdOptions(guarantee_for="week")
    assert err.value.parameter == "guarantee_for"
