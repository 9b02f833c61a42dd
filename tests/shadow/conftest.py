"""A small labelled dataset with two stored runs (champion, challenger) and a policy file for each.

The runs are written with the store's own functions (``create_run`` + ``write_answers``) from seeded
synthetic probabilities, so the shadow tests need no model; the policies are built by the policy
layer (``build_policy``) exactly as ``workbench policy export`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.policy import Policy
from workbench.policy.build import build_policy
from workbench.policy.io import write_policy
from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import create_run, update_run, write_answers
from workbench.thresholds.options import ThresholdOptions

SCHEMA = DecisionSchema.from_dict(
    {
        "name": "tickets",
        "questions": {
            "intent": {
                "type": "choice",
                "instructions": "Which intent?",
                "criteria": {
                    "refund": "wants money back",
                    "delivery": "asks where the parcel is",
                    "account": "cannot log in",
                },
            },
            "urgent": {"type": "noul", "instructions": "Is it urgent?"},
        },
    }
)
OPTIONS = ["refund", "delivery", "account"]


@dataclass
class ShadowWorld:
    con: object
    db: Path
    champion_run: str
    challenger_run: str
    champion_policy: Path
    challenger_policy: Path
    tmp: Path


def _probs(rng: np.random.Generator, labels: np.ndarray, k: int, strength: float, noise: float) -> np.ndarray:
    """Rows leaning to the label with ``strength`` (Dirichlet noise), some rows leaning elsewhere."""
    logits = rng.normal(0, noise, size=(len(labels), k))
    wrong = rng.random(len(labels)) < 0.15
    target = np.where(wrong, (labels + 1) % k, labels)
    logits[np.arange(len(labels)), target] += strength * rng.random(len(labels)) * 2
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def _write_run(
    con,
    name: str,
    model: str,
    intent: np.ndarray,
    urgent: np.ndarray,
    ids: list[str],
    latency: np.ndarray,
    cost: np.ndarray,
) -> str:
    run_id = create_run(
        con,
        dataset="tickets",
        dataset_version=1,
        schema=SCHEMA,
        provider=f"test:{name}",
        splits=["calibration", "test"],
        name=name,
        model=model,
    )
    n = len(ids)
    rows = pd.DataFrame(
        {
            "run_id": run_id,
            "item_id": ids * 2,
            "question": ["intent"] * n + ["urgent"] * n,
            "probs": [list(map(float, r)) for r in intent] + [list(map(float, r)) for r in urgent],
            "model": model,
            "latency_ms": np.concatenate([latency, latency]),
            "cost_usd": np.concatenate([cost / 2, cost / 2]),
        }
    )
    # one failed answer per run: stored as a failure, never as a probability
    rows.loc[3, "probs"] = None
    rows["failure_kind"] = [("timeout" if i == 3 else None) for i in range(len(rows))]
    write_answers(con, rows)
    update_run(con, run_id, status="done", model=model)
    return run_id


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> ShadowWorld:
    tmp = tmp_path_factory.mktemp("shadow")
    rng = np.random.default_rng(7)
    n = 900
    intent = rng.integers(0, 3, n)
    urgent = rng.random(n) < 0.3
    split = np.where(np.arange(n) < 450, "calibration", "test")
    ids = [f"t{i:04d}" for i in range(n)]
    pd.DataFrame(
        {
            "id": ids,
            "text": [f"ticket {i}" for i in range(n)],
            "intent": np.asarray(OPTIONS)[intent],
            "urgent": np.where(urgent, "yes", "no"),
            "split": split,
        }
    ).to_csv(tmp / "tickets.csv", index=False)
    db = tmp / "wb.duckdb"
    con = connect(db)
    import_dataset(
        con,
        [tmp / "tickets.csv"],
        ImportSpec(
            name="tickets",
            id_column="id",
            text_column="text",
            split_column="split",
            labels={"intent": "intent", "urgent": "urgent"},
            positive={"urgent": "yes"},
        ),
        SCHEMA,
    )
    y_urgent = np.where(urgent, 0, 1)
    champ = _write_run(
        con,
        "champion",
        "clef",
        _probs(rng, intent, 3, 2.0, 1.0),
        _probs(rng, y_urgent, 2, 2.0, 1.0),
        ids,
        rng.gamma(4, 50, n),
        np.full(n, 2e-5),
    )
    chall = _write_run(
        con,
        "challenger",
        "clef-flash",
        _probs(rng, intent, 3, 2.6, 0.8),
        _probs(rng, y_urgent, 2, 2.2, 0.9),
        ids,
        rng.gamma(4, 12, n),
        np.full(n, 8e-6),
    )
    paths = []
    for run_id, name in ((champ, "champion"), (chall, "challenger")):
        model, _ = build_policy(
            con, run_id, ["intent", "urgent"], ThresholdOptions(objective="coverage", target_coverage=0.6)
        )
        path = tmp / f"{name}.policy.json"
        write_policy(model, path)
        Policy.load(path)  # fails closed if the file is not valid
        paths.append(path)
    yield ShadowWorld(con, db, champ, chall, paths[0], paths[1], tmp)
    con.close()


def histogram(scores: np.ndarray, *, n_bins: int = 10) -> np.ndarray:
    """The reference p_top histogram of the drift figures: share of ``scores`` (n,) in [0, 1] per equal-width
    bin, shape (n_bins,); NaN scores dropped."""
    scores = np.asarray(scores, dtype=float)
    scores = scores[np.isfinite(scores)]
    if scores.size == 0:
        return np.full(n_bins, np.nan)
    idx = np.minimum((np.clip(scores, 0.0, 1.0) * n_bins).astype(int), n_bins - 1)
    return np.bincount(idx, minlength=n_bins) / scores.size


def read_journal(path: str | Path):
    """Yield the complete records of a mirror journal, skipping lines torn by a crash."""
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                continue  # torn tail: never acknowledged
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec
