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


def build_store(path, questions: dict, n: int, seed: int = 0, fail_every: int = 0, dataset: str = "toy"):
    """A real DuckDB store with one dataset and one raw run, made with SQL inserts + create_run/write_answers.

    ``questions`` maps question id -> (type, option_ids, probs (n, k), labels (n,) with -1 = unlabelled).
    Items are split calibration/test alternately; every ``fail_every``-th answer is a provider failure.
    Returns (connection, run_id, item_ids, splits).
    """

    import pandas as pd

    from workbench.schema import DecisionSchema
    from workbench.schema.answers import entropy, top_two
    from workbench.store.db import connect
    from workbench.store.runs import create_run, write_answers

    con = connect(path)
    item_ids = np.array([f"i{j:05d}" for j in range(n)])
    splits = np.where(np.arange(n) % 2 == 0, "calibration", "test")
    body = {}
    for q, (qtype, opts, _, _) in questions.items():
        crit = {"noul": None, "choice": {o: None for o in opts}, "score": list(opts)}[qtype]
        body[q] = {"type": qtype, "instructions": f"question {q}", **({"criteria": crit} if crit else {})}
    schema = DecisionSchema.from_dict({"name": "toy", "questions": body})
    con.execute(
        "INSERT INTO datasets (name, version, fingerprint, questions, n_items) VALUES (?, 1, 'fp', ?, ?)",
        [dataset, list(questions), n],
    )
    items = pd.DataFrame({"dataset": dataset, "version": 1, "item_id": item_ids, "state_text": "s", "split": splits})
    con.register("_items", items)
    con.execute(
        "INSERT INTO items (dataset, version, item_id, state_text, split) "
        "SELECT dataset, version, item_id, state_text, split FROM _items"
    )
    con.unregister("_items")
    label_rows = []
    for q, (_qtype, opts, _, labels) in questions.items():
        for iid, lab in zip(item_ids, labels):
            if lab >= 0:
                label_rows.append((dataset, 1, iid, q, opts[lab]))
    lab_df = pd.DataFrame(label_rows, columns=["dataset", "version", "item_id", "question", "option_id"])
    con.register("_labels", lab_df)
    con.execute("INSERT INTO labels (dataset, version, item_id, question, option_id) SELECT * FROM _labels")
    con.unregister("_labels")
    run_id = create_run(
        con,
        dataset=dataset,
        dataset_version=1,
        schema=schema,
        provider="test:synthetic",
        splits=["calibration", "test"],
        name="synthetic",
        status="done",
    )
    rows = []
    for q, (_qtype, _opts, probs, _) in questions.items():
        failed = (np.arange(n) % fail_every == 3) if fail_every else np.zeros(n, bool)
        _, p1, p2 = top_two(probs)
        ent = entropy(probs)
        for j in range(n):
            rows.append(
                {
                    "run_id": run_id,
                    "item_id": item_ids[j],
                    "question": q,
                    "probs": None if failed[j] else [float(x) for x in probs[j]],
                    "p_top": None if failed[j] else float(p1[j]),
                    "margin": None if failed[j] else float(p1[j] - p2[j]),
                    "entropy": None if failed[j] else float(ent[j]),
                    "failure_kind": "transient" if failed[j] else None,
                    "latency_ms": 10.0,
                    "cost_usd": 0.0,
                }
            )
    write_answers(con, pd.DataFrame(rows))
    return con, run_id, item_ids, splits
