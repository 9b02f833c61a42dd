"""The UI's loaders give the same figures when a run is large enough to be read in batches.

Streamlit's cached loaders are plain functions outside a running app; ``WORKBENCH_STREAM_CELLS=1``
makes every split "large", so the same page functions take the streamed path.
"""

from __future__ import annotations

import numpy as np
import pytest
import streamlit as st

from tests.metrics.conftest import build_store, calibrated_sample
from tests.scale.test_streamed_equals_in_memory import _same
from workbench.store.snapshot import store_token
from workbench.ui import state
from workbench.ui.state.cache import reads_in_batches


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    n = 600
    probs, labels = calibrated_sample(n, 9, seed=11, temperature=0.6)
    labels = labels.copy()
    labels[::31] = -1
    yes = np.clip(np.random.default_rng(3).beta(2, 2, n), 0.01, 0.99)
    noul_labels = np.where(np.random.default_rng(4).random(n) < yes**2, 0, 1)
    path = tmp_path_factory.mktemp("ui-stream") / "wb.duckdb"
    con, run_id, *_ = build_store(
        path,
        {
            "intent": ("choice", [f"o{j}" for j in range(9)], probs, labels),
            "urgent": ("noul", ["yes", "no"], np.stack([yes, 1 - yes], axis=1), noul_labels),
        },
        n,
        fail_every=17,
    )
    con.close()
    return str(path), run_id


def _figures(path: str, run_id: str, question: str, recal: str | None) -> dict:
    st.cache_data.clear()
    st.cache_resource.clear()
    state.refresh()
    token = store_token(path)
    settings = state.threshold_settings(alpha=0.2, delta=0.1, method="fixed-sequence", calibrate=recal or "none")
    surf = state.threshold_surface(path, token, run_id, question, "calibration", recal)
    rel = state.reliability_display(path, token, run_id, question, "test", recal, 10, "uniform")
    conf = state.confusion_display(path, token, run_id, question, "test", recal)
    rep = state.question_report(path, token, run_id, question, "test", recal, 15, 30)
    return {
        "thresholds": state.certified_thresholds(path, token, run_id, question, settings),
        "frontier": state.certified_frontier(path, token, run_id, question, settings, (0.1, 0.2, 0.3)).to_dict(),
        "surface": [surf.accepted.tolist(), surf.errors.tolist()],
        "reliability": [c.to_dict() for _, c, _ in rel.curves],
        "confusion": conf.result.to_dict(),
        "metrics": {k: v.to_dict() for k, v in rep.metrics.items() if k != "smece"},
    }


@pytest.mark.parametrize("question,recal", [("intent", None), ("intent", "temperature"), ("urgent", "platt")])
def test_pages_read_in_batches_show_the_in_memory_figures(store_path, monkeypatch, question, recal):
    path, run_id = store_path
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", str(10**12))
    memory = _figures(path, run_id, question, recal)
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "1")
    assert reads_in_batches(path, store_token(path), run_id, question, "test")
    streamed = _figures(path, run_id, question, recal)
    _same(memory, streamed, question)
