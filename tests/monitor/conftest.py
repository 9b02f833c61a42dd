"""Decision logs made the way production makes them: responses through the runtime policy, logged by
``DecisionLog``; outcomes written as a separate file. Also a BANKING77 TF-IDF store and policy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, dataset_path, run_cli

T0 = datetime(2026, 11, 2, tzinfo=UTC)


def responses_from_answers(probs: np.ndarray, option_ids: Sequence[str], question: str, model: str) -> list[dict]:
    """System One responses carrying stored probabilities (NaN rows become provider failures)."""
    out = []
    for p in probs:
        if not np.isfinite(p).all():
            out.append({"error": {"kind": "transient", "message": "HTTP 503"}})
            continue
        out.append(
            {
                "model": model,
                "answers": {
                    question: {
                        "type": "choice",
                        "choice": option_ids[int(p.argmax())],
                        "probabilities": dict(zip(option_ids, p.tolist())),
                    }
                },
            }
        )
    return out


def replay(
    policy,
    responses: list,
    log_path: Path,
    *,
    start: datetime = T0,
    step: timedelta = timedelta(minutes=1),
    schema_hash=None,
) -> list[dict]:
    """Decide every response with the runtime policy and log it; returns the decisions."""
    from workbench_runtime.decision_log import DecisionLog

    times = iter(start + i * step for i in range(len(responses)))
    out = []
    with DecisionLog(log_path, clock=lambda: next(times)) as log:
        for i, r in enumerate(responses):
            out.append(policy.decide(r, schema_hash=schema_hash, decision_id=f"d{i:06d}", log=log))
        assert log.n_errors == 0, log.last_error
    return out


def write_outcomes(path: Path, rows: list[dict]) -> Path:
    """Outcome rows as JSONL, CSV or Parquet (by suffix)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    elif path.suffix == ".csv":
        df.to_csv(path, index=False)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def b77_store(tmp_path_factory) -> dict:
    """BANKING77 answered by ``baseline:tfidf-logreg`` and a policy exported from it (α=0.05, δ=0.1)."""
    tmp = tmp_path_factory.mktemp("b77mon")
    db = tmp / "wb.duckdb"
    run_cli(
        "datasets",
        "import",
        str(dataset_path("banking77", "train.csv")),
        str(dataset_path("banking77", "test.csv")),
        "--name",
        "b77",
        "--text-column",
        "text",
        "--label",
        "intent=category",
        "--calibration-fraction",
        "0.3",
        "--seed",
        "0",
        db=db,
        check=True,
    )
    out = run_cli(
        "run",
        "--dataset",
        "b77",
        "--schema",
        str(ROOT / "experiments" / "schemas" / "banking77.yaml"),
        "--provider",
        "baseline:tfidf-logreg",
        "--no-progress",
        "--json",
        db=db,
        check=True,
    )
    run_id = json.loads(out.stdout)["runs"][0]["run_id"]
    policy = tmp / "policy.json"
    run_cli(
        "policy",
        "export",
        run_id,
        "--question",
        "intent",
        "--max-error",
        "0.05",
        "--delta",
        "0.1",
        "--out",
        str(policy),
        db=db,
        check=True,
    )
    return {"db": db, "run_id": run_id, "policy": policy, "tmp": tmp}
