"""choose_thresholds on in-memory answers: score questions, failures and the calibrator carve-out."""

from __future__ import annotations

import numpy as np
import pytest

from tests.thresholds.synth import choice_data
from workbench.answers import RunAnswers
from workbench.thresholds.choose import choose_thresholds
from workbench.thresholds.guarantees import ThresholdError
from workbench.thresholds.options import ThresholdOptions


def _answers(
    probs: np.ndarray, labels: np.ndarray, qtype: str = "score", failed_rate: float = 0.0, seed: int = 0
) -> RunAnswers:
    n, k = probs.shape
    failed = np.random.default_rng(seed).random(n) < failed_rate
    probs = probs.copy()
    probs[failed] = np.nan
    return RunAnswers(
        run_id="r",
        question="q",
        qtype=qtype,
        option_ids=[str(i) for i in range(k)],
        item_ids=np.array([f"i{i}" for i in range(n)], dtype=object),
        splits=np.array(["calibration"] * n, dtype=object),
        probs=probs,
        labels=labels,
        failed=failed,
        failure_kind=np.where(failed, "transient", None).astype(object),
        latency_ms=np.zeros(n),
        cost_usd=np.full(n, 2e-5),
        input_tokens=np.zeros(n),
    )


@pytest.mark.parametrize("level", ["top", "expected"])
def test_score_question_end_to_end(level: str):
    rng = np.random.default_rng(0)
    probs, labels = choice_data(rng, 8000, k=4, scale=4.0)
    cal = _answers(probs[:4000], labels[:4000], failed_rate=0.05)
    test = _answers(probs[4000:], labels[4000:], failed_rate=0.05, seed=1)
    res = choose_thresholds(cal, test, ThresholdOptions(alpha=0.05, delta=0.1, level=level, calibrate="none"))
    assert res.rule.kind == "score" and res.rule.level == level and res.selection.feasible
    d = res.to_dict()
    assert d["rule"]["level"] == level and d["test"]["n_items"] == 4000
    # failures count as reviews: coverage is over all labelled items, and none of them is accepted
    dec = res.rule.decide(test.probs)
    assert not dec.accepted[test.failed].any()
    assert d["test"]["n_accepted"] == int(dec.accepted.sum())


def test_calibrator_is_fitted_on_a_carve_out_and_reported():
    rng = np.random.default_rng(1)
    probs, labels = choice_data(rng, 6000, k=5, scale=4.0, temperature=0.5)  # over-confident
    cal, test = _answers(probs[:3000], labels[:3000], "choice"), _answers(probs[3000:], labels[3000:], "choice")
    res = choose_thresholds(cal, test, ThresholdOptions(calibrate="temperature", calibrator_fraction=0.3))
    assert res.calibrator["type"] == "temperature" and res.calibrator["params"]["temperature"] > 1.2
    assert 700 < res.n_calibrator_fit < 1100
    # the certificate is computed on items the calibrator never saw (and the order on others again)
    g = res.selection.guarantee
    assert g["n_calibration"] + g["n_order"] + res.n_calibrator_fit == 3000


def test_cost_objective_uses_the_runs_api_cost_and_option_costs():
    rng = np.random.default_rng(2)
    probs, labels = choice_data(rng, 4000, k=3, scale=3.0)
    cal = _answers(probs, labels, "choice")
    res = choose_thresholds(
        cal, None, ThresholdOptions(objective="cost", review_cost=1.0, error_cost={"0": 50.0, "1": 1.0, "2": 1.0})
    )
    assert res.selection.cost["api_cost_per_item"] == pytest.approx(2e-5)
    assert not res.selection.certified
    with pytest.raises(ThresholdError, match="unknown option"):
        choose_thresholds(cal, None, ThresholdOptions(objective="cost", error_cost={"zzz": 3.0}))


def test_order_fraction_zero_uses_data_independent_paths():
    rng = np.random.default_rng(3)
    probs, labels = choice_data(rng, 4000, k=4, scale=4.0)
    cal = _answers(probs, labels, "choice")
    res = choose_thresholds(cal, None, ThresholdOptions(order_fraction=0.0, calibrate="none"))
    g = res.selection.guarantee
    assert "data-independent" in g["order"] and g["n_order"] == 0 and g["n_calibration"] == 4000
    assert g["test_level"] == pytest.approx(0.1 / (g["n_paths"] * g["n_starts"]))
    learned = choose_thresholds(cal, None, ThresholdOptions()).selection.guarantee
    assert "learned" in learned["order"] and learned["test_level"] == 0.1
