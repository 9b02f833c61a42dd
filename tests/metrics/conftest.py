"""Synthetic probability data with known calibration, shared by the metrics tests."""
from __future__ import annotations

import numpy as np
import pytest


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def calibrated_sample(n: int, k: int, seed: int, temperature: float = 1.0):
    """Labels drawn from softmax(z); returned probs are softmax(z / temperature).

    ``temperature=1`` gives perfectly calibrated probabilities; ``< 1`` over-confident ones.
    """
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.0, size=(n, k))
    true = softmax(z)
    u = rng.random(n)[:, None]
    labels = (true.cumsum(axis=1) < u).sum(axis=1)
    labels = np.minimum(labels, k - 1)
    return softmax(z / temperature), labels


@pytest.fixture
def overconfident():
    return calibrated_sample(20_000, 5, seed=1, temperature=0.5)
