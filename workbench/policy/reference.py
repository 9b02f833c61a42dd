"""The calibration-time reference distribution a policy carries for drift monitoring.

``workbench monitor`` compares live traffic with it: histograms of the calibrated top probability
``p_top`` and of the margin ``p_top − p_second`` over :data:`N_BINS` equal-width bins on [0, 1]
(the last bin closed), and counts of the predicted option (arg-max of the raw probabilities, as
the decision log records them). Only answered items count (failed rows are left out).
"""

from __future__ import annotations

import numpy as np

#: Equal-width bins on [0, 1] of the p_top and margin histograms.
N_BINS = 20


def bin_index(x: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Bin of each value in [0, 1] (n,) int; values are clipped into [0, 1] first, 1.0 falls in the last bin."""
    return np.minimum((np.clip(np.asarray(x, dtype=float), 0.0, 1.0) * n_bins).astype(np.int64), n_bins - 1)


def reference_histograms(raw_probs: np.ndarray, calibrated_probs: np.ndarray, option_ids: list[str]) -> dict:
    """The reference of one question from its calibration split.

    Parameters
    ----------
    raw_probs : (n, k) provider probabilities in option order (NaN rows = failures)
    calibrated_probs : (n, k) the same rows after the policy's calibrator
    option_ids : the k option ids

    Returns
    -------
    ``{"n": int, "bins": N_BINS, "p_top": [N_BINS counts], "margin": [N_BINS counts], "option": {id: count}}``
    """
    raw = np.asarray(raw_probs, dtype=float)
    cal = np.asarray(calibrated_probs, dtype=float)
    ok = np.isfinite(raw).all(axis=1) & np.isfinite(cal).all(axis=1)
    raw, cal = raw[ok], cal[ok]
    k = raw.shape[1] if raw.ndim == 2 else len(option_ids)
    if len(cal):
        two = -np.partition(-cal, 1, axis=1)[:, :2] if k > 1 else np.c_[cal[:, 0], np.zeros(len(cal))]
        p_top, margin = two[:, 0], two[:, 0] - two[:, 1]
        pred = raw.argmax(axis=1)
    else:
        p_top = margin = np.array([])
        pred = np.array([], dtype=np.int64)
    return {
        "n": int(len(cal)),
        "bins": N_BINS,
        "p_top": np.bincount(bin_index(p_top), minlength=N_BINS).astype(int).tolist(),
        "margin": np.bincount(bin_index(margin), minlength=N_BINS).astype(int).tolist(),
        "option": {o: int(c) for o, c in zip(option_ids, np.bincount(pred, minlength=k))},
    }
