"""Build a small but real workbench store for UI tests (library functions only, no mocks).

One choice dataset (4 intents, train / calibration / test carved by the importer) and two
runs whose probabilities are drawn so that one model is sharper than the other; the second
run has a few recorded provider failures (stored as failures, never as probabilities) and is
recorded as emulated (as if answered by ``workbench emulator``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

#: The app's entry script (what `streamlit run` and AppTest start from).
APP = Path(__file__).resolve().parents[2] / "streamlit_app.py"

INTENTS = ["card_arrival", "lost_card", "refund", "top_up"]
WORDS = {
    "card_arrival": "when will my new card arrive",
    "lost_card": "I lost my card please block it",
    "refund": "I want my money back for this purchase",
    "top_up": "how do I top up my account",
}


def make_schema():
    from workbench.schema import DecisionSchema

    return DecisionSchema.from_dict(
        {
            "name": "ui-test-intents",
            "questions": {
                "intent": {
                    "type": "choice",
                    "instructions": "Which intent does the message express?",
                    "criteria": {k: f"The customer asks: {v}" for k, v in WORDS.items()},
                }
            },
        }
    )


def _answers_frame(
    run_id: str, item_ids: np.ndarray, labels: np.ndarray, sharpness: float, seed: int, fail_every: int = 0
) -> pd.DataFrame:
    from workbench.schema.answers import entropy, margin, p_top

    rng = np.random.default_rng(seed)
    n, k = len(item_ids), len(INTENTS)
    logits = rng.normal(size=(n, k))
    logits[np.arange(n), labels] += sharpness * rng.uniform(0.0, 2.0, size=n)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    failed = np.zeros(n, bool)
    if fail_every:
        failed[::fail_every] = True
    frame = pd.DataFrame(
        {
            "run_id": run_id,
            "item_id": item_ids,
            "question": "intent",
            "probs": [None if f else list(map(float, p)) for p, f in zip(probs, failed)],
            "p_top": np.where(failed, np.nan, p_top(probs)),
            "margin": np.where(failed, np.nan, margin(probs)),
            "entropy": np.where(failed, np.nan, entropy(probs)),
            "failure_kind": np.where(failed, "rate_limit", None),
            "failure_message": np.where(failed, "429 3040", None),
            "model": "synthetic",
            "latency_ms": rng.gamma(4.0, 30.0, size=n),
            "input_tokens": 20,
            "cost_usd": np.where(failed, np.nan, 1e-5),
        }
    )
    return frame


def build_store(db_path: Path, n_items: int = 400, seed: int = 7) -> dict:
    """Create the store at ``db_path``; returns ids the tests assert against."""
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(INTENTS), size=n_items)
    texts = [f"{WORDS[INTENTS[y]]} #{i}" for i, y in enumerate(labels)]
    csv = db_path.parent / "intents.csv"
    pd.DataFrame(
        {"id": [f"it-{i:05d}" for i in range(n_items)], "text": texts, "category": [INTENTS[y] for y in labels]}
    ).to_csv(csv, index=False)
    schema = make_schema()
    con = connect(db_path)
    try:
        info = import_dataset(
            con,
            [csv],
            ImportSpec(
                name="intents",
                text_column="text",
                id_column="id",
                labels={"intent": "category"},
                test_fraction=0.4,
                calibration_fraction=0.4,
                seed=1,
            ),
            schema,
        )
        items = con.execute(
            "SELECT item_id, split FROM items WHERE dataset = 'intents' AND split <> 'train' ORDER BY item_id"
        ).df()
        index = {f"it-{i:05d}": y for i, y in enumerate(labels)}
        ids = items["item_id"].to_numpy()
        y = np.array([index[i] for i in ids])
        runs = {}
        for name, sharp, fail_every, s in (("sharp-model", 3.0, 0, 11), ("noisy-model", 1.2, 25, 12)):
            run_id = create_run(
                con,
                dataset="intents",
                dataset_version=info.version,
                schema=schema,
                provider=f"synthetic:{name}",
                splits=["calibration", "test"],
                name=name,
                model="synthetic",
                dialect="systemone",
                experiment="ui-test",
                variant="descriptive",
                emulated=name == "noisy-model",  # as if answered by `workbench emulator`: the pages mark it
            )
            write_answers(con, _answers_frame(run_id, ids, y, sharp, s, fail_every))
            update_run(con, run_id, status="done", summary={"answered": int(len(ids))})
            runs[name] = run_id
        from workbench.store.shadow import replay_runs

        replay_runs(
            con,
            shadow="noisy-vs-sharp",
            champion_run=runs["noisy-model"],
            challenger_run=runs["sharp-model"],
            splits=["test"],
        )
        from workbench.policy.build import build_policy
        from workbench.policy.io import write_policy
        from workbench.thresholds.options import ThresholdOptions

        policy, _ = build_policy(
            con,
            runs["sharp-model"],
            ["intent"],
            ThresholdOptions(objective="guarantee", alpha=0.2, delta=0.1, calibrate="temperature"),
        )
        write_policy(policy, db_path.parent / "policy.json")
    finally:
        con.close()
    return {
        "dataset": "intents",
        "version": info.version,
        "runs": runs,
        "n_scored": len(ids),
        "fingerprint": info.fingerprint,
    }


def on_grid(value: float, qtype: str = "choice", axis: int = 0) -> float:
    """The threshold grid point nearest ``value`` (the sliders move over the surface's grid)."""
    import numpy as np

    from workbench.thresholds.surface import default_grids
    from workbench.ui.state import GRID_POINTS

    grid = default_grids(qtype, GRID_POINTS)[axis]
    grid = np.sort(-grid) if (qtype == "noul" and axis == 1) else grid
    return float(grid[np.argmin(np.abs(grid - value))])
