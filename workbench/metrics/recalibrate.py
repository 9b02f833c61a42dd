"""Post-hoc recalibration of probability vectors: temperature, isotonic (one-vs-rest), Platt, identity.

Every calibrator follows the same small contract::

    cal = TemperatureScaling().fit(probs, labels)   # probs (n, k) rows summing to 1, labels (n,) in [0, k)
    calibrated = cal.transform(probs)               # (m, k) -> (m, k), rows sum to 1
    d = cal.to_dict()                               # {"type": ..., "params": ...}, JSON-serialisable
    same = calibrator_from_dict(d)                  # transform() gives bit-identical output

``transform`` uses numpy only (no scipy, no scikit-learn), so a policy file applies exactly the same
map at decision time as the workbench did when it measured it. Fitting may use scipy/scikit-learn;
those imports happen inside ``fit``. Rows of ``probs`` that contain NaN (provider failures) stay NaN
in the output and are ignored when fitting, as are labels < 0 (unlabelled items).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from workbench_runtime import calibrators as _applied
from workbench_runtime.calibrators import LOG_FLOOR, _check_probs, _log_probs
from workbench_runtime.errors import CalibrationFitError

__all__ = [
    "LOG_FLOOR",
    "CalibrationFitError",
    "IdentityCalibrator",
    "TemperatureScaling",
    "PlattCalibrator",
    "IsotonicCalibrator",
    "CALIBRATORS",
    "METHODS",
    "make_calibrator",
    "calibrator_from_dict",
]


def _fit_rows(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Rows usable for fitting: answered (no NaN) and labelled (label >= 0)."""
    p = _check_probs(probs)
    y = np.asarray(labels).astype(int, copy=False).reshape(-1)
    if y.shape[0] != p.shape[0]:
        raise CalibrationFitError(f"{p.shape[0]} probability rows but {y.shape[0]} labels")
    keep = np.isfinite(p).all(axis=1) & (y >= 0)
    if (y[keep] >= p.shape[1]).any():
        raise CalibrationFitError(f"labels must be option indices in [0, {p.shape[1]})")
    if keep.sum() < 2:
        raise CalibrationFitError(
            f"need at least 2 answered, labelled items to fit a calibrator, got {int(keep.sum())}",
            hint="check that the run has answers on its calibration split",
        )
    return p[keep], y[keep]


# The maps themselves (transform, to_dict, from_params) live in the runtime distribution, so a
# policy applies the very code the workbench measured with; these subclasses add fitting.
class IdentityCalibrator(_applied.IdentityCalibrator):
    """The no-op calibrator (``transform`` returns a copy of its input)."""

    def fit(self, probs: Any, labels: Any) -> IdentityCalibrator:
        _check_probs(probs)
        return self


#: Values per block of rows in the temperature fit's likelihood (160k doubles, 1.3 MB: one core's L2 cache).
_NLL_BLOCK_VALUES = 160_000


class TemperatureScaling(_applied.TemperatureScaling):
    """One temperature per question: ``softmax(log(max(p, 1e-12)) / T)``.

    ``T`` is fitted by minimising the mean negative log-likelihood on the calibration items
    (bounded 1-D search over ``log T`` in [-7, 7]). ``T > 1`` softens over-confident answers,
    ``T < 1`` sharpens under-confident ones. The arg-max never changes.
    """

    def fit(self, probs: Any, labels: Any) -> TemperatureScaling:
        from scipy.optimize import minimize_scalar

        p, y = _fit_rows(probs, labels)
        z = _log_probs(p)
        z_true = z[np.arange(len(y)), y]
        # each row's largest z, once: dividing by a positive t keeps the same entry largest and rounds
        # it the same way, so max(z / t) is exactly max(z) / t
        z_max = z.max(axis=1)

        # the row-wise steps run on blocks of rows that stay in the CPU cache (four passes over a 60 MB
        # matrix at 100k × 77 became four over 1.3 MB): every step is per element or per row, so the
        # numbers are exactly the whole-matrix ones; the mean over rows is taken on the full vector as before
        block = max(1, _NLL_BLOCK_VALUES // max(1, z.shape[1]))
        buf = np.empty((min(block, len(z)), z.shape[1]))
        lse = np.empty(len(z))

        def nll(log_t: float) -> float:
            t = math.exp(log_t)
            m = z_max / t
            for start in range(0, len(z), block):
                stop = min(start + block, len(z))
                s = buf[: stop - start]
                np.divide(z[start:stop], t, out=s)
                s -= m[start:stop, None]
                np.exp(s, out=s)
                np.log(s.sum(axis=1), out=lse[start:stop])
                lse[start:stop] += m[start:stop]
            return float(np.mean(lse - z_true / t))

        res = minimize_scalar(nll, bounds=(-7.0, 7.0), method="bounded", options={"xatol": 1e-7})
        self.temperature = float(math.exp(res.x))
        return self


class PlattCalibrator(_applied.PlattCalibrator):
    """Platt scaling for yes/no questions: ``P(yes) = sigmoid(a * logit(p_yes) + b)``.

    Option 0 is "yes" (the workbench's noul option order is ``["yes", "no"]``). ``a`` and ``b``
    minimise the log-loss on the calibration items (no regularisation, so the fit is the maximum
    likelihood one and is reproducible).
    """

    def fit(self, probs: Any, labels: Any) -> PlattCalibrator:
        from scipy.optimize import minimize

        p, y = _fit_rows(probs, labels)
        if p.shape[1] != 2:
            raise CalibrationFitError(
                f"Platt scaling is for yes/no questions (2 options), got {p.shape[1]}",
                hint="use `method` temperature or isotonic for choice and score questions",
            )
        x = self._logit_yes(p)
        t = (y == 0).astype(float)  # 1 when the gold answer is "yes"

        def loss_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
            s = theta[0] * x + theta[1]
            # log(1 + e^s) - t*s, written stably
            loss = np.logaddexp(0.0, s) - t * s
            r = 1.0 / (1.0 + np.exp(-s)) - t
            return float(loss.mean()), np.array([np.mean(r * x), np.mean(r)])

        res = minimize(
            loss_grad,
            np.array([1.0, 0.0]),
            jac=True,
            method="L-BFGS-B",
            options={"ftol": 1e-14, "gtol": 1e-10, "maxiter": 500},
        )
        self.a, self.b = float(res.x[0]), float(res.x[1])
        return self


class IsotonicCalibrator(_applied.IsotonicCalibrator):
    """One-vs-rest isotonic regression per option (pool-adjacent-violators via scikit-learn), then
    rows renormalised; see :class:`workbench_runtime.calibrators.IsotonicCalibrator` for the map."""

    def fit(self, probs: Any, labels: Any) -> IsotonicCalibrator:
        from sklearn.isotonic import IsotonicRegression

        p, y = _fit_rows(probs, labels)
        xs, ys = [], []
        for j in range(p.shape[1]):  # one 1-D fit per option; k is small (<= a few hundred)
            iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
            iso.fit(p[:, j], (y == j).astype(float))
            xs.append(np.asarray(iso.X_thresholds_, dtype=float))
            ys.append(np.asarray(iso.y_thresholds_, dtype=float))
        self.x_thresholds_, self.y_thresholds_ = xs, ys
        return self


CALIBRATORS: dict[str, type[Any]] = {
    c.kind: c for c in (IdentityCalibrator, TemperatureScaling, PlattCalibrator, IsotonicCalibrator)
}
#: Methods the CLI offers (identity is the "no calibration" marker in policy files).
METHODS = ("temperature", "isotonic", "platt")


def make_calibrator(method: str):
    """A fresh, unfitted calibrator for ``method`` (``temperature``, ``isotonic``, ``platt``, ``identity``)."""
    try:
        return CALIBRATORS[method]()
    except KeyError:
        raise CalibrationFitError(
            f"unknown calibration method {method!r}", hint=f"choose one of {', '.join(CALIBRATORS)}"
        ) from None


def calibrator_from_dict(d: dict):
    """Rebuild a fitted calibrator from :meth:`to_dict` output (raises on unknown types or bad params)."""
    return _applied.calibrator_from_dict(d, CALIBRATORS)


def fit_calibrator(method: str, probs: np.ndarray, labels: np.ndarray):
    """A ``method`` calibrator fitted on ``probs`` (n, k), rows summing to 1 (NaN rows ignored) and
    ``labels`` (n,) in [0, k) (labels < 0 ignored); ``none`` or ``identity`` gives the identity
    calibrator without fitting (``probs`` and ``labels`` are then not read and may be empty)."""
    identity = method in ("none", "identity")
    cal = make_calibrator("identity" if identity else method)
    if not identity:
        cal.fit(probs, labels)
    return cal


def apply_calibrator(cal: Any, probs: np.ndarray) -> np.ndarray:
    """``probs`` (n, k) through the fitted calibrator ``cal``: (n, k) float, answered rows calibrated,
    failed (NaN) rows left NaN."""
    ok = np.isfinite(probs).all(axis=1)
    if ok.all():
        # every row answered: the calibrators map rows one by one into a new array, so the rows are
        # the same numbers without a copy of them in and out
        return np.asarray(cal.transform(probs), dtype=float)
    out = np.full_like(probs, np.nan, dtype=float)
    if ok.any():
        out[ok] = cal.transform(probs[ok])
    return out
