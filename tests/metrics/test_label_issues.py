"""Confident-learning label issues: a hand-checked example, planted label flips, run consensus."""

from __future__ import annotations

import numpy as np
import pytest

from tests.metrics.conftest import build_store, calibrated_sample
from workbench.metrics.label_issues import confident_joint, find_label_issues, label_quality
from workbench.workflows.evaluation import label_issues_for_runs


def test_confident_joint_by_hand():
    probs = np.array(
        [
            [0.9, 0.1, 0.0],  # label 0, confidently 0
            [0.7, 0.3, 0.0],  # label 0, confidently 0 (0.7 >= t0 = 0.6)
            [0.2, 0.8, 0.0],  # label 0, but p1 = 0.8 >= t1 = 0.75: confidently 1 -> issue
            [0.3, 0.7, 0.0],  # label 1: p1 = 0.7 < t1 and p0 = 0.3 < t0: not counted
            [0.1, 0.8, 0.1],  # label 1, confidently 1
            [0.0, 0.5, 0.5],
        ]
    )  # label 2: t2 = 0.5, clears; p1 = 0.5 < t1
    labels = np.array([0, 0, 0, 1, 1, 2])
    cj = confident_joint(probs, labels)
    np.testing.assert_allclose(cj.thresholds, [(0.9 + 0.7 + 0.2) / 3, 0.75, 0.5])
    np.testing.assert_array_equal(cj.confident, [0, 0, 1, -1, 1, 2])
    np.testing.assert_array_equal(cj.joint, [[2, 1, 0], [0, 1, 0], [0, 0, 1]])
    issues = find_label_issues(probs, labels, ["a", "b", "c"], item_ids=list("uvwxyz"))
    assert issues.item_ids == ["w"]
    assert issues.table.iloc[0][["given", "suggested"]].tolist() == ["a", "b"]
    assert label_quality(probs, labels, "normalized_margin")[2] == pytest.approx((0.2 - 0.8 + 1) / 2)


@pytest.mark.parametrize("rank_by", ["self_confidence", "normalized_margin"])
def test_planted_label_flips_are_found_and_ranked_first(rank_by):
    probs, labels = calibrated_sample(20_000, 6, seed=13, temperature=0.8)
    rng = np.random.default_rng(1)
    # keep only items the model is sure about, then flip 4% of their labels
    sure = probs.max(axis=1) > 0.9
    probs, labels = probs[sure], probs[sure].argmax(axis=1)
    flipped = rng.random(len(labels)) < 0.04
    noisy = labels.copy()
    noisy[flipped] = (labels[flipped] + rng.integers(1, 6, flipped.sum())) % 6
    issues = find_label_issues(
        probs, noisy, [str(j) for j in range(6)], item_ids=np.arange(len(labels)).astype(str), rank_by=rank_by
    )
    found = np.isin(np.arange(len(labels)).astype(str), issues.item_ids)
    # items less confident than their option's average self-confidence are not flagged, by design
    assert found[flipped].mean() > 0.7  # recall of planted errors
    assert flipped[found].mean() > 0.95  # precision of the queue
    top = issues.table.head(int(0.5 * flipped.sum()))["item_id"].astype(int).to_numpy()
    assert flipped[top].all()  # the ranking puts planted errors first
    assert (np.diff(issues.table["quality"].to_numpy()) >= 0).all()


def test_consensus_of_two_runs_from_the_store(tmp_path):
    n = 400
    probs, labels = calibrated_sample(n, 3, seed=2, temperature=0.4)
    labels = probs.argmax(axis=1)
    noisy = labels.copy()
    planted = np.flatnonzero(probs.max(axis=1) > 0.99)[:20]  # 20 wrong labels on items both runs are sure of
    noisy[planted] = (labels[planted] + 1) % 3
    con, run_a, item_ids, _ = build_store(tmp_path / "a.duckdb", {"q": ("choice", ["x", "y", "z"], probs, noisy)}, n)
    import pandas as pd

    from workbench.store.runs import create_run, get_run, load_stored_schema, write_answers

    # a second run of the same items whose answers are a bit noisier
    other = 0.8 * probs + 0.2 / 3
    run = get_run(con, run_a)
    run_b = create_run(
        con,
        dataset="toy",
        dataset_version=1,
        schema=load_stored_schema(con, run["schema_hash"]),
        provider="test:other",
        splits=["calibration", "test"],
        status="done",
    )
    write_answers(
        con,
        pd.DataFrame(
            {"run_id": run_b, "item_id": item_ids, "question": "q", "probs": [list(map(float, r)) for r in other]}
        ),
    )
    res = label_issues_for_runs(con, [run_a, run_b])["q"]
    assert set(res.run_ids) == {run_a, run_b}
    assert (res.table["n_runs"] == 2).all()
    assert set(item_ids[planted]) <= set(res.item_ids)
    assert len(res.item_ids) < 40
    con.close()
