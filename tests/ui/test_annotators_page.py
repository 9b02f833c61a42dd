"""Calibration page: the annotator agreement table (issue 15) next to the model's, the same figures as
``workbench report`` (``agreement_for_run``), and no table for one label per item."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest


@pytest.fixture
def annotated_store(tmp_path, monkeypatch):
    from workbench.schema import DecisionSchema
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    rng = np.random.default_rng(11)
    n, m, k = 300, 3, 3
    options = ["card", "transfer", "other"]
    gold = rng.integers(0, k, n)
    votes = np.where(rng.random((n, m)) < 0.25, (gold[:, None] + rng.integers(1, k, (n, m))) % k, gold[:, None])
    pd.DataFrame(
        {
            "id": np.repeat([f"t{i:04d}" for i in range(n)], m),
            "text": np.repeat([f"ticket {i}" for i in range(n)], m),
            "who": np.tile([f"ann{j + 1}" for j in range(m)], n),
            "topic": np.asarray(options)[votes.ravel()],
        }
    ).to_csv(tmp_path / "long.csv", index=False)
    schema = DecisionSchema.from_dict(
        {"questions": {"topic": {"type": "choice", "instructions": "Topic?", "criteria": dict.fromkeys(options)}}}
    )
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    spec = ImportSpec(
        name="tickets", text_column="text", id_column="id", annotator_column="who", labels={"topic": "topic"},
        test_fraction=0.5, calibration_fraction=0.5,
    )  # fmt: skip
    info = import_dataset(con, [tmp_path / "long.csv"], spec, schema)
    items = con.execute("SELECT item_id FROM items WHERE split <> 'train' ORDER BY item_id").fetchnumpy()["item_id"]
    truth = gold[np.array([int(i[1:]) for i in items])]
    probs = rng.dirichlet(np.ones(k), len(items)) * 0.4 + np.eye(k)[truth] * 0.6
    run_id = create_run(
        con, dataset="tickets", dataset_version=info.version, schema=schema, provider="synthetic:tickets",
        splits=["calibration", "test"], name="ticket-model",
    )  # fmt: skip
    write_answers(con, pd.DataFrame({"run_id": run_id, "item_id": items, "question": "topic", "probs": list(probs)}))
    update_run(con, run_id, status="done")
    con.close()
    monkeypatch.setenv("WORKBENCH_DB", str(db))
    return db, run_id


def test_calibration_page_shows_agreement_next_to_the_model(annotated_store):
    from workbench.store.db import connect
    from workbench.workflows.evaluation import agreement_for_run

    db, run_id = annotated_store
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("workbench/ui/pages/calibration.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Annotator agreement (the noise floor)" in [s.value for s in at.subheader]
    shown = next(d.value for d in at.dataframe if "figure" in d.value.columns)
    with connect(db, read_only=True) as con:
        ag = agreement_for_run(con, run_id, "topic", "test")["topic"]
    assert ag is not None and ag.n_annotators == 3
    table = shown.set_index("figure")
    for name, value in ag.annotators.items():
        assert table.loc[name, "annotators"] == pytest.approx(value)
        assert table.loc[name, "model"] == pytest.approx(ag.model[name])
    assert {"krippendorff_alpha_nominal", "fleiss_kappa", "cohen_kappa"} <= set(table.index)
