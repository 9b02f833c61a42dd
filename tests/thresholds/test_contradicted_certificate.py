"""Issue 28 §4: when the whole test split's error interval lies above α, every surface warns, in the words
``--slice`` uses for a slice."""

from __future__ import annotations

import numpy as np

from tests.thresholds.synth import choice_data
from tests.thresholds.test_batch import _answers
from workbench.thresholds.choose import ThresholdOptions, choose_thresholds


def _shifted(seed: int = 5):
    """Calibration from a calibrated model; test from the same model on shifted traffic (over-confident)."""
    rng = np.random.default_rng(seed)
    cal_p, cal_y = choice_data(rng, 4000, k=5, scale=4.0)
    test_p, test_y = choice_data(rng, 3000, k=5, scale=4.0, temperature=0.3)
    return _answers(cal_p, cal_y), _answers(test_p, test_y)


def test_a_certified_rule_contradicted_by_the_whole_test_split_carries_a_warning():
    cal, test = _shifted()
    res = choose_thresholds(cal, test, ThresholdOptions(calibrate="none"))
    assert res.certified and res.test is not None and res.test["error"]["low"] > 0.05
    (w,) = res.warnings
    assert w.startswith("q, whole test split: error among accepted") and "lies entirely above α = 0.05" in w
    assert res.to_dict()["warnings"] == [w] and f"WARNING {w}" in res.summary()
    # the same words as a slice's warning
    from workbench.thresholds.evaluate import evaluate_rule_by_slice

    by_slice = evaluate_rule_by_slice(res, test, np.array(["all"] * len(test.labels), dtype=object))
    (sw,) = by_slice["warnings"]
    assert sw.split(": ", 1)[1] == w.split(": ", 1)[1].split(", although")[0]


def test_no_warning_when_the_test_split_agrees():
    cal, _ = _shifted()
    rng = np.random.default_rng(9)
    test = _answers(*choice_data(rng, 3000, k=5, scale=4.0))
    res = choose_thresholds(cal, test, ThresholdOptions(calibrate="none"))
    assert res.certified and res.warnings == [] and res.to_dict()["warnings"] == []
