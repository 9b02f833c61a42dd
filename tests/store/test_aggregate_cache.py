"""Aggregates kept next to a store (``workbench.store.aggregate_cache``): read back under the same inputs,
never under changed ones (answers, labels, calibrators, description), nothing half-written, off by switch."""

from __future__ import annotations

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.store import aggregate_cache as ac


@pytest.fixture()
def store(tmp_path):
    probs, labels = calibrated_sample(400, 4, seed=1)
    path = tmp_path / "wb.duckdb"
    con, run_id, *_ = build_store(path, {"intent": ("choice", ["a", "b", "c", "d"], probs, labels)}, 400)
    yield con, str(path), run_id
    con.close()


def test_an_aggregate_is_read_back_under_the_same_inputs_only(store):
    con, path, run_id = store
    state = ac.run_state(con, run_id, "intent")
    key = ac.aggregate_key(state, "question_report", "test", None, 15, 200)
    assert ac.load(path, key) is None
    assert ac.save(path, key, b"report bytes")
    assert ac.load(path, key) == b"report bytes"
    # one file, named by the key, next to the store; no temporary file left behind
    assert [f.name for f in ac.cache_dir(path).iterdir()] == [key]
    assert ac.run_state(con, run_id, "intent") == state  # reading changes nothing
    # another computation, or other code, gets another key
    assert ac.aggregate_key(state, "question_report", "test", None, 15, 0) != key
    assert len(key) == 64 and ac.code_version() and len(ac.code_version()) == 16

    # a new gold label changes the run's inputs
    con.execute(
        "INSERT INTO labels (dataset, version, item_id, question, option_id) VALUES ('toy', 1, 'i00000', 'intent', 'b')"
    )
    after_label = ac.run_state(con, run_id, "intent")
    assert after_label != state
    # so does a new answer (count and latest created_at of the run's answers)
    con.execute(
        "INSERT INTO answer_rows (run_id, item_id, question, probs, p_top, margin) "
        "SELECT run_id, 'extra', question, probs, p_top, margin FROM answers WHERE run_id = ? LIMIT 1",
        [run_id],
    )
    after_answer = ac.run_state(con, run_id, "intent")
    assert after_answer != after_label
    assert after_answer[4][0][1] == 401  # (run, count, latest) of the run's answers to the question
    # and a stored calibrator
    con.execute("INSERT INTO calibrators VALUES (?, 'intent', 'temperature', '{\"t\": 1.5}')", [run_id])
    assert ac.run_state(con, run_id, "intent") != after_answer
    assert (
        ac.load(path, ac.aggregate_key(ac.run_state(con, run_id, "intent"), "question_report", "test", None, 15, 200))
        is None
    )


def test_the_switch_and_an_unwritable_directory_keep_nothing(store, monkeypatch):
    _, path, _ = store
    monkeypatch.setenv(ac.ENV_SWITCH, "0")
    assert not ac.enabled()
    assert ac.save(path, "k", b"x") is False and ac.load(path, "k") is None
    assert not ac.cache_dir(path).exists()
    monkeypatch.setenv(ac.ENV_SWITCH, "1")
    ac.cache_dir(path).write_bytes(b"a file where the directory should be")  # mkdir fails: nothing kept, no error
    assert ac.save(path, "k", b"x") is False and ac.load(path, "k") is None


def test_a_large_page_reads_the_kept_report_and_frontier_of_another_session(store, monkeypatch):
    """The UI keeps a large run's report and frontier; after the session's caches are gone (a new
    server), the lookups return the same figures without computing, and nothing once the store changed."""
    import streamlit as st

    from workbench.store.snapshot import store_token
    from workbench.ui import state

    con, path, run_id = store
    con.close()
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "1")  # every split is "large": the streamed path
    token = store_token(path)
    settings = state.threshold_settings(alpha=0.3, delta=0.2, method="fixed-sequence", calibrate="none")
    alphas = (0.2, 0.3)
    assert state.kept_question_report(path, token, run_id, "intent", "test", None, 10, 20) is None
    assert state.kept_frontier(path, token, run_id, "intent", settings, alphas) is None
    rep = state.question_report(path, token, run_id, "intent", "test", None, 10, 20)
    front = state.certified_frontier(path, token, run_id, "intent", settings, alphas)
    st.cache_data.clear()
    st.cache_resource.clear()
    state.refresh()
    again = state.kept_question_report(path, token, run_id, "intent", "test", None, 10, 20)
    assert again is not None and again.params["n_boot"] == 20
    for name, iv in rep.metrics.items():
        assert again.metrics[name].to_dict() == iv.to_dict()
    assert state.kept_frontier(path, token, run_id, "intent", settings, alphas).equals(front)
    assert 0 < front["certified coverage"].max() <= 1
    # a point-estimate report is another aggregate
    assert state.kept_question_report(path, token, run_id, "intent", "test", None, 10, 0) is None

    from workbench.store.db import connect

    con = connect(path)
    con.execute(
        "INSERT INTO labels (dataset, version, item_id, question, option_id) VALUES ('toy', 1, 'i00001', 'intent', 'a')"
    )
    con.close()
    token = store_token(path)
    assert state.kept_question_report(path, token, run_id, "intent", "test", None, 10, 20) is None
    assert np.isfinite(
        state.question_report(path, token, run_id, "intent", "test", None, 10, 20).metrics["accuracy"].estimate
    )
