"""Slider round trip of the Thresholds page on a 100,000-item × 77-option run.

Builds a store with one synthetic choice run over 100,000 items (half calibration, half test; the
dataset also has a train split the run does not touch), opens the
Thresholds page with Streamlit's AppTest (the same script run a browser triggers) and times
reruns after moving the τ slider, once the per-run caches are warm. Prints one JSON document.

    python bench/ui.py [--run-items 100000] [--options 77] [--moves 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def build(db: Path, n: int, k: int, seed: int = 0) -> str:
    from workbench.schema import DecisionSchema
    from workbench.schema.answers import entropy, margin, p_top
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    rng = np.random.default_rng(seed)
    opts = [f"intent_{j:02d}" for j in range(k)]
    labels = rng.integers(0, k, size=n)
    csv = db.parent / "items.csv"
    pd.DataFrame(
        {
            "id": [f"x{i:07d}" for i in range(n)],
            "text": [f"message {i}" for i in range(n)],
            "label": [opts[y] for y in labels],
        }
    ).to_csv(csv, index=False)
    schema = DecisionSchema.from_dict(
        {"questions": {"intent": {"type": "choice", "instructions": "Intent?", "criteria": {o: None for o in opts}}}}
    )
    con = connect(db)
    info = import_dataset(
        con,
        [csv],
        ImportSpec(
            name="big",
            text_column="text",
            id_column="id",
            labels={"intent": "label"},
            test_fraction=0.4,
            calibration_fraction=0.66,
        ),
        schema,
    )
    ids = con.execute("SELECT item_id FROM items WHERE split <> 'train' ORDER BY item_id").fetchnumpy()["item_id"]
    y = labels[np.array([int(i[1:]) for i in ids])]
    logits = rng.normal(size=(len(ids), k))
    logits[np.arange(len(ids)), y] += rng.uniform(0, 6, size=len(ids))
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    run_id = create_run(
        con,
        dataset="big",
        dataset_version=info.version,
        schema=schema,
        provider="synthetic:big",
        splits=["calibration", "test"],
        name="big",
    )
    write_answers(
        con,
        pd.DataFrame(
            {
                "run_id": run_id,
                "item_id": ids,
                "question": "intent",
                "probs": list(probs),
                "p_top": p_top(probs),
                "margin": margin(probs),
                "entropy": entropy(probs),
            }
        ),
    )
    update_run(con, run_id, status="done")
    con.close()
    return run_id


def _grid() -> np.ndarray:
    from workbench.thresholds.surface import default_grids
    from workbench.ui.state import GRID_POINTS

    return default_grids("choice", GRID_POINTS)[0]


def measure(run_items: int = 100_000, options: int = 77, moves: int = 10) -> dict:
    """Build the store, open the Thresholds page, move τ ``moves`` times; timings in a dict."""
    from streamlit.testing.v1 import AppTest

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.duckdb"
        t0 = time.perf_counter()
        run_id = build(db, int(round(run_items / 0.8)), options)  # 20% of the items are train
        build_s = time.perf_counter() - t0
        old = os.environ.get("WORKBENCH_DB")
        os.environ["WORKBENCH_DB"] = str(db)
        try:
            at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=600).run()
            t0 = time.perf_counter()
            at.switch_page("workbench/ui/pages/thresholds.py").run()
            first_s = time.perf_counter() - t0
            assert not at.exception, [e.value for e in at.exception]
            grid = _grid()
            times, coverages = [], []
            for i in range(moves):
                tau = float(grid[np.argmin(np.abs(grid - (0.3 + 0.05 * (i % 10))))])
                t0 = time.perf_counter()
                at.select_slider(key="thr_x").set_value(tau).run()
                times.append(time.perf_counter() - t0)
                assert not at.exception, [e.value for e in at.exception]
                coverages.append(next(m.value for m in at.metric if m.label == "Coverage (test)"))
        finally:
            if old is None:
                os.environ.pop("WORKBENCH_DB", None)
            else:
                os.environ["WORKBENCH_DB"] = old
    return {
        "run_items": run_items,
        "options": options,
        "run_id": run_id,
        "build_store_s": round(build_s, 2),
        "first_render_s": round(first_s, 2),
        "coverages": coverages,
        "load_average": os.getloadavg()[0],
        "slider_rerun_ms": {
            "median": round(1000 * statistics.median(times), 1),
            "max": round(1000 * max(times), 1),
            "all": [round(1000 * t, 1) for t in times],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-items", type=int, default=100_000, help="calibration + test items answered by the run")
    ap.add_argument("--options", type=int, default=77)
    ap.add_argument("--moves", type=int, default=10)
    args = ap.parse_args()
    print(json.dumps(measure(args.run_items, args.options, args.moves), indent=2))


if __name__ == "__main__":
    sys.exit(main())
