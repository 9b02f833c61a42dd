"""Recalibration: fits cross-checked against scikit-learn / an independent NLL, exact serialisation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from tests.metrics.conftest import calibrated_sample
from workbench.metrics.recalibrate import (
    CalibrationFitError,
    IdentityCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    TemperatureScaling,
    calibrator_from_dict,
    make_calibrator,
)


def roundtrip(cal):
    return calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))


def test_temperature_recovers_the_miscalibration(overconfident):
    probs, labels = overconfident  # produced with T = 0.5, so the fit should undo it with T ≈ 2
    cal = TemperatureScaling().fit(probs, labels)
    assert cal.temperature == pytest.approx(2.0, rel=0.05)
    out = cal.transform(probs)
    assert np.allclose(out.sum(axis=1), 1.0)
    assert (out.argmax(axis=1) == probs.argmax(axis=1)).all()
    assert log_loss(labels, out, labels=range(5)) < log_loss(labels, probs, labels=range(5))


def test_temperature_is_the_nll_minimiser():
    probs, labels = calibrated_sample(3000, 4, seed=7, temperature=1.7)
    cal = TemperatureScaling().fit(probs, labels)
    best = log_loss(labels, cal.transform(probs), labels=range(4))
    for factor in (0.99, 1.01, 0.9, 1.1):
        other = TemperatureScaling(cal.temperature * factor).transform(probs)
        assert best <= log_loss(labels, other, labels=range(4)) + 1e-12


def test_isotonic_matches_sklearn_one_vs_rest_then_renormalised():
    probs, labels = calibrated_sample(4000, 4, seed=3, temperature=0.6)
    test_probs, _ = calibrated_sample(1000, 4, seed=4, temperature=0.6)
    cal = IsotonicCalibrator().fit(probs, labels)
    cols = []
    for j in range(4):
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(probs[:, j], labels == j)
        cols.append(iso.predict(test_probs[:, j]))
    expected = np.stack(cols, axis=1)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(cal.transform(test_probs), expected, atol=1e-12)


def test_platt_matches_unpenalised_logistic_regression():
    rng = np.random.default_rng(0)
    n = 5000
    x = rng.normal(0, 1.5, n)
    true_yes = 1 / (1 + np.exp(-(0.6 * x + 0.4)))
    labels = np.where(rng.random(n) < true_yes, 0, 1)  # 0 = yes
    shown_yes = 1 / (1 + np.exp(-x))
    probs = np.stack([shown_yes, 1 - shown_yes], axis=1)
    cal = PlattCalibrator().fit(probs, labels)
    lr = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(x[:, None], labels == 0)
    assert cal.a == pytest.approx(lr.coef_[0, 0], abs=1e-4)
    assert cal.b == pytest.approx(lr.intercept_[0], abs=1e-4)
    np.testing.assert_allclose(cal.transform(probs)[:, 0], lr.predict_proba(x[:, None])[:, 1], atol=1e-5)


def test_platt_refuses_more_than_two_options():
    probs, labels = calibrated_sample(100, 3, seed=1)
    with pytest.raises(CalibrationFitError, match="yes/no"):
        PlattCalibrator().fit(probs, labels)


@pytest.mark.parametrize("method", ["temperature", "isotonic", "platt", "identity"])
def test_serialisation_round_trip_is_exact_and_failures_stay_nan(method):
    k = 2 if method == "platt" else 5
    probs, labels = calibrated_sample(2000, k, seed=11, temperature=0.7)
    probs[::50] = np.nan  # provider failures: ignored by fit, NaN after transform
    labels[1::37] = -1  # unlabelled items: ignored by fit
    cal = make_calibrator(method).fit(probs, labels)
    fresh, _ = calibrated_sample(500, k, seed=12)
    fresh[3] = np.nan
    a = cal.transform(fresh)
    b = roundtrip(cal).transform(fresh)
    assert np.array_equal(a, b, equal_nan=True)
    assert np.isnan(a[3]).all() and np.isfinite(np.delete(a, 3, axis=0)).all()
    np.testing.assert_allclose(np.delete(a, 3, axis=0).sum(axis=1), 1.0)


def test_fit_ignores_failed_and_unlabelled_rows():
    probs, labels = calibrated_sample(3000, 3, seed=5, temperature=0.5)
    clean = TemperatureScaling().fit(probs, labels).temperature
    noisy_p, noisy_y = probs.copy(), labels.copy()
    extra_p = np.full((200, 3), np.nan)
    extra_y = np.zeros(200, int)
    noisy_p = np.vstack([noisy_p, extra_p, probs[:100]])
    noisy_y = np.concatenate([noisy_y, extra_y, np.full(100, -1)])
    assert TemperatureScaling().fit(noisy_p, noisy_y).temperature == clean


def test_identity_changes_nothing():
    probs, labels = calibrated_sample(50, 3, seed=2)
    assert np.array_equal(IdentityCalibrator().fit(probs, labels).transform(probs), probs)


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "dirichlet", "params": {}},
        {"params": {}},
        {"type": "temperature", "params": {"temperature": -1}},
        {"type": "temperature", "params": {}},
        {"type": "isotonic", "params": {"x_thresholds": [[0, 1]], "y_thresholds": [[1, 0.5]]}},
    ],
)
def test_bad_calibrator_dicts_are_rejected(bad):
    with pytest.raises(CalibrationFitError):
        calibrator_from_dict(bad)


def test_too_few_items_is_a_clear_error():
    with pytest.raises(CalibrationFitError, match="at least 2"):
        TemperatureScaling().fit(np.array([[0.5, 0.5]]), np.array([0]))


def test_applying_a_calibrator_needs_numpy_only():
    """The policy runtime imports calibrators in production processes: no scipy/sklearn/pandas."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from workbench.metrics.recalibrate import calibrator_from_dict\n"
        "c = calibrator_from_dict({'type': 'temperature', 'params': {'temperature': 2.0}})\n"
        "c.transform(np.array([[0.9, 0.1]]))\n"
        "print(sorted(m for m in ('scipy', 'sklearn', 'pandas', 'plotly') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_temperature_fit_in_blocks_of_rows_is_the_whole_matrix_fit_exactly(monkeypatch):
    """The likelihood is computed on blocks of rows (cache-sized): every step is per element or per row, so
    the fitted temperature is bit-for-bit the one of the whole matrix, whatever the block size."""
    from workbench.metrics import recalibrate

    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2_000, 7)) * 3
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (p.cumsum(axis=1) < rng.random((2_000, 1))).sum(axis=1).clip(0, 6)
    sharp = np.exp(1.4 * logits) / np.exp(1.4 * logits).sum(axis=1, keepdims=True)
    fitted = {}
    for values in (1, 7 * 333, 10**9):  # one row a block, a ragged last block, the whole matrix
        monkeypatch.setattr(recalibrate, "_NLL_BLOCK_VALUES", values)
        fitted[values] = recalibrate.TemperatureScaling().fit(sharp, y).temperature
    assert fitted[1] == fitted[7 * 333] == fitted[10**9]
    assert 1.2 < fitted[10**9] < 1.6  # the sharpening 1.4 is undone
