"""Decision logs made the way production makes them: responses through the runtime policy, logged by
``DecisionLog``; outcomes written as a separate file. Also a BANKING77 TF-IDF store and policy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import copy_store, run_cli

T0 = datetime(2026, 11, 2, tzinfo=UTC)
SHIFT_AT = 1500


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
def b77_store(tmp_path_factory, b77_tfidf_master) -> dict:
    """BANKING77 answered by ``baseline:tfidf-logreg`` and a policy exported from it (α=0.05, δ=0.1)."""
    tmp = tmp_path_factory.mktemp("b77mon")
    db = copy_store(b77_tfidf_master["db"], tmp / "wb.duckdb")
    run_id = b77_tfidf_master["run_id"]
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


def shift_scenario(tmp: Path) -> dict:
    """A synthetic policy, its test split replayed through the runtime with a log, and outcomes: ``clean.jsonl``
    (true labels) and ``shifted.*`` (from decision SHIFT_AT on, 20% of accepted decisions are wrong or overridden)."""
    from tests.policy.conftest import MODEL, OPTIONS, build_store
    from workbench.policy.runtime import Policy
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    db = tmp / "wb.duckdb"
    build_store(db, tmp, n=6000, seed=3)
    pol = tmp / "policy.json"
    run_cli(
        "policy",
        "export",
        "run-sim",
        "-q",
        "intent",
        "--max-error",
        "0.05",
        "--delta",
        "0.1",
        "--out",
        str(pol),
        db=db,
        check=True,
    )
    con = connect(db, read_only=True)
    ans = load_answers(con, "run-sim", "intent", ["test"])
    con.close()
    ans = ans.select(ans.labels >= 0)
    policy = Policy.load(pol)
    responses = responses_from_answers(ans.probs, ans.option_ids, "intent", MODEL)
    decisions = replay(policy, responses, tmp / "decisions.jsonl")
    labels = [OPTIONS[j] for j in ans.labels]
    rng = np.random.default_rng(5)
    clean, shifted = [], []
    for i, (d, y) in enumerate(zip(decisions, labels)):
        did = f"d{i:06d}"
        clean.append({"decision_id": did, "question": "intent", "outcome": y})
        q = d["intent"]
        if i >= SHIFT_AT and q.accepted and rng.random() < 0.2:  # the world moved: humans now route elsewhere
            wrong = [o for o in OPTIONS if o != q.option]
            if rng.random() < 0.5:
                shifted.append(
                    {"decision_id": did, "question": "intent", "outcome": wrong[int(rng.integers(len(wrong)))]}
                )
            else:  # only the override flag is known for these
                shifted.append({"decision_id": did, "question": "intent", "outcome": None, "override": True})
        else:
            shifted.append(
                {"decision_id": did, "question": "intent", "outcome": y, "override": False if q.accepted else None}
            )
    write_outcomes(tmp / "clean.jsonl", clean)
    write_outcomes(tmp / "shifted.jsonl", shifted)
    write_outcomes(tmp / "shifted.csv", shifted)
    write_outcomes(tmp / "shifted.parquet", shifted)
    return {"tmp": tmp, "db": db, "policy": pol, "n": len(labels), "decisions": decisions, "responses": responses}
