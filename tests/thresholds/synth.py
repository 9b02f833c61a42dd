"""Synthetic probability data with known error rates (vectorised)."""

from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def sample_labels(rng: np.random.Generator, true_probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``true_probs`` (n, k)."""
    u = rng.random(true_probs.shape[0])[:, None]
    return np.minimum((np.cumsum(true_probs, axis=1) < u).sum(axis=1), true_probs.shape[1] - 1)


def choice_data(
    rng: np.random.Generator, n: int, k: int = 8, *, scale: float = 2.5, temperature: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from ``softmax(z)``; the model reports ``softmax(z / temperature)``.

    ``temperature == 1`` is perfectly calibrated; ``< 1`` is over-confident (miscalibrated).
    """
    z = rng.normal(size=(n, k)) * scale
    labels = sample_labels(rng, softmax(z))
    return softmax(z / temperature), labels


def noul_data(rng: np.random.Generator, n: int, *, temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``[p_yes, p_no]`` with labels (0 = yes) drawn from the calibrated ``p_yes``."""
    logit = rng.normal(size=n) * 3.0
    p_true = 1 / (1 + np.exp(-logit))
    labels = (rng.random(n) >= p_true).astype(int)
    p = 1 / (1 + np.exp(-logit / temperature))
    return np.stack([p, 1 - p], axis=1), labels
