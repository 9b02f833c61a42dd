"""A real DuckDB store with a synthetic run: one choice and one noul question, some provider failures."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.thresholds.synth import choice_data, noul_data
from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import create_run, write_answers

OPTIONS = ["card_arrival", "lost_card", "refund", "top_up", "other"]
SCHEMA = DecisionSchema.from_dict(
    {
        "name": "synth",
        "questions": {
            "intent": {"type": "choice", "instructions": "Which intent?", "criteria": {o: None for o in OPTIONS}},
            "urgent": {"type": "noul", "instructions": "Is it urgent?"},
        },
    }
)
MODEL = "sim-model-1.0"


def build_store(
    db: Path,
    tmp: Path,
    *,
    n: int = 6000,
    seed: int = 0,
    temperature: float = 1.0,
    run_id: str = "run-sim",
    failure_rate: float = 0.02,
) -> dict:
    """Import a synthetic dataset (train/calibration/test) and write one run of answers for it."""
    rng = np.random.default_rng(seed)
    p_int, y_int = choice_data(rng, n, k=len(OPTIONS), scale=4.0, temperature=temperature)
    p_urg, y_urg = noul_data(rng, n, temperature=temperature)
    split = np.where(rng.random(n) < 0.5, "calibration", "test")
    ids = [f"i{i:05d}" for i in range(n)]
    f = tmp / "synth.csv"
    with f.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "intent", "urgent", "split"])
        for i in range(n):
            w.writerow([ids[i], f"message {i}", OPTIONS[y_int[i]], "yes" if y_urg[i] == 0 else "no", split[i]])
    con = connect(db)
    info = import_dataset(
        con,
        [f],
        ImportSpec(
            name="synth",
            text_column="text",
            id_column="id",
            labels={"intent": "intent", "urgent": "urgent"},
            split_column="split",
            seed=7,
        ),
        SCHEMA,
    )
    create_run(
        con,
        dataset="synth",
        dataset_version=info.version,
        schema=SCHEMA,
        provider="emulator/systemone",
        splits=["calibration", "test"],
        run_id=run_id,
        model=MODEL,
        dialect="systemone",
        status="done",
    )
    failed = rng.random(n) < failure_rate
    rows = []
    for q, probs in (("intent", p_int), ("urgent", p_urg)):
        rows.append(
            pd.DataFrame(
                {
                    "run_id": run_id,
                    "item_id": ids,
                    "question": q,
                    "probs": [None if failed[i] else probs[i].tolist() for i in range(n)],
                    "failure_kind": np.where(failed, "transient", None),
                    "failure_message": np.where(failed, "HTTP 503", None),
                    "model": MODEL,
                    "cost_usd": 1e-5,
                }
            )
        )
    write_answers(con, pd.concat(rows, ignore_index=True))
    con.close()
    return {
        "run_id": run_id,
        "probs": {"intent": p_int, "urgent": p_urg},
        "labels": {"intent": y_int, "urgent": y_urg},
        "split": split,
        "failed": failed,
        "fingerprint": info.fingerprint,
    }


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("policy")
    db = tmp / "wb.duckdb"
    meta = build_store(db, tmp)
    meta["db"] = db
    meta["tmp"] = tmp
    return meta
