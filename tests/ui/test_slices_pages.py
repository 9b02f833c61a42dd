"""Calibration and Thresholds pages: the slice selector (issue 16, item 3) shows the figures of
``workbench report --slice`` and ``workbench thresholds --slice`` for the same run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest


@pytest.fixture
def sliced_store(tmp_path, monkeypatch):
    from workbench.schema import DecisionSchema
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    rng = np.random.default_rng(5)
    n, k = 600, 3
    options = ["card", "transfer", "other"]
    gold = rng.integers(0, k, n)
    pd.DataFrame(
        {
            "id": [f"t{i:04d}" for i in range(n)],
            "text": [f"ticket {i}" + " words" * int(i % 7) for i in range(n)],
            "topic": np.asarray(options)[gold],
            "channel": np.where(np.arange(n) % 3 == 0, "email", "chat"),
        }
    ).to_csv(tmp_path / "t.csv", index=False)
    schema = DecisionSchema.from_dict(
        {"questions": {"topic": {"type": "choice", "instructions": "Topic?", "criteria": dict.fromkeys(options)}}}
    )
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    spec = ImportSpec(
        name="tickets", text_column="text", id_column="id", labels={"topic": "topic"}, meta_columns=["channel"],
        test_fraction=0.5, calibration_fraction=0.5,
    )  # fmt: skip
    info = import_dataset(con, [tmp_path / "t.csv"], spec, schema)
    items = con.execute("SELECT item_id FROM items WHERE split <> 'train' ORDER BY item_id").fetchnumpy()["item_id"]
    truth = gold[np.array([int(i[1:]) for i in items])]
    probs = rng.dirichlet(np.ones(k), len(items)) * 0.3 + np.eye(k)[truth] * 0.7
    run_id = create_run(
        con, dataset="tickets", dataset_version=info.version, schema=schema, provider="synthetic:tickets",
        splits=["calibration", "test"], name="ticket-model",
    )  # fmt: skip
    write_answers(con, pd.DataFrame({"run_id": run_id, "item_id": items, "question": "topic", "probs": list(probs)}))
    update_run(con, run_id, status="done")
    con.close()
    monkeypatch.setenv("WORKBENCH_DB", str(db))
    return db, run_id


def test_calibration_and_thresholds_pages_slice_by_channel(sliced_store):
    from workbench.store.db import connect
    from workbench.workflows.evaluation import report_run

    db, run_id = sliced_store
    at = AppTest.from_file(str(APP), default_timeout=90).run()
    at.switch_page("workbench/ui/pages/calibration.py").run()
    assert not at.exception, [e.value for e in at.exception]
    select = next(s for s in at.selectbox if s.key == "cal_slice")
    assert select.options == ["(none)", "state_length", "channel"]
    select.set_value("channel").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = next(d.value for d in at.dataframe if "channel" in d.value.columns).set_index("channel")
    with connect(db, read_only=True) as con:
        rep = report_run(con, run_id, "topic", "test", slices=["channel"], with_before=False)
    for value, r in rep.slices["channel"].questions["topic"].items():
        assert shown.loc[value, "labelled"] == r.counts["n_labelled"]
        assert shown.loc[value, "accuracy"].startswith(f"{r.metrics['accuracy'].estimate:.4f}")

    at.switch_page("workbench/ui/pages/thresholds.py").run()
    assert not at.exception, [e.value for e in at.exception]
    next(s for s in at.selectbox if s.key == "thr_slice").set_value("channel").run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d.value for d in at.dataframe if "channel" in d.value.columns)
    assert set(table["channel"]) == {"chat", "email"}
    assert int(table["items"].sum()) == rep.questions[0].counts["n_labelled"]
