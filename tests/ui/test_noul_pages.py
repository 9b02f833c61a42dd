"""Thresholds and Calibration pages on a yes/no (noul) question: two-sided τ_yes / τ_no sliders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from store_builder import APP
from store_builder import on_grid as _on_grid
from streamlit.testing.v1 import AppTest


@pytest.fixture
def noul_store(tmp_path, monkeypatch):
    from workbench.schema import DecisionSchema
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    rng = np.random.default_rng(3)
    n = 600
    spam = rng.random(n) < 0.3
    pd.DataFrame(
        {
            "id": [f"m{i:04d}" for i in range(n)],
            "text": [f"message {i}" for i in range(n)],
            "label": np.where(spam, "spam", "ham"),
        }
    ).to_csv(tmp_path / "sms.csv", index=False)
    schema = DecisionSchema.from_dict({"questions": {"spam": {"type": "noul", "instructions": "Is this spam?"}}})
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    info = import_dataset(
        con,
        [tmp_path / "sms.csv"],
        ImportSpec(
            name="sms",
            text_column="text",
            id_column="id",
            labels={"spam": "label"},
            positive={"spam": "spam"},
            test_fraction=0.5,
            calibration_fraction=0.5,
        ),
        schema,
    )
    items = con.execute("SELECT item_id FROM items WHERE split <> 'train' ORDER BY item_id").fetchnumpy()["item_id"]
    truth = spam[np.array([int(i[1:]) for i in items])]
    p_yes = np.clip(np.where(truth, rng.beta(6, 2, len(items)), rng.beta(2, 6, len(items))), 0.001, 0.999)
    run_id = create_run(
        con,
        dataset="sms",
        dataset_version=info.version,
        schema=schema,
        provider="synthetic:spam",
        splits=["calibration", "test"],
        name="spam-model",
    )
    write_answers(
        con,
        pd.DataFrame(
            {"run_id": run_id, "item_id": items, "question": "spam", "probs": [[float(p), float(1 - p)] for p in p_yes]}
        ),
    )
    update_run(con, run_id, status="done")
    con.close()
    monkeypatch.setenv("WORKBENCH_DB", str(db))
    return db, run_id


def test_noul_thresholds_are_two_sided(noul_store):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("workbench/ui/pages/thresholds.py").run()
    assert not at.exception, [e.value for e in at.exception]
    # τ_yes starts at 0.5 and τ_no ends at 0.5: the widest setting accepts every answered item
    at.select_slider(key="thr_x").set_value(_on_grid(0.5, "noul", 0)).run()
    at.select_slider(key="thr_y").set_value(_on_grid(0.5, "noul", 1)).run()
    assert at.select_slider(key="thr_y").value == 0.5
    assert next(m.value for m in at.metric if m.label == "Coverage (test)") == "100.0%"
    at.select_slider(key="thr_x").set_value(_on_grid(0.9, "noul", 0)).run()
    at.select_slider(key="thr_y").set_value(_on_grid(0.1, "noul", 1)).run()
    narrow = float(next(m.value for m in at.metric if m.label == "Coverage (test)").rstrip("%"))
    assert narrow < 100.0
    at.radio(key="thr_recalibrate").set_value("platt").run()
    assert not at.exception, [e.value for e in at.exception]


def test_noul_calibration_page_shows_p_yes_reliability(noul_store):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("workbench/ui/pages/calibration.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="cal_option").options == ["yes", "no"]
    at.selectbox(key="cal_method").set_value("platt").run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert {"as answered", "platt"} <= set(metrics.columns)
    assert "roc_auc" in set(metrics["metric"])
