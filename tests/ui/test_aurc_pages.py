"""A metric added to the table of metrics (AURC) shows on the Calibration and Compare pages with no page code."""

from __future__ import annotations

import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest


def _page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page(f"workbench/ui/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_calibration_and_compare_pages_show_aurc_as_the_library_computes_it(ui_store):
    from workbench.metrics.registry import PER_ITEM_METRICS
    from workbench.store.db import connect
    from workbench.workflows.compare import compare_runs
    from workbench.workflows.evaluation import report_run

    path, meta = ui_store
    run_id = meta["runs"]["noisy-model"]
    con = connect(path, read_only=True)
    rep = {q.question: q for q in report_run(con, run_id, split="test", n_boot=0).questions}["intent"]
    con.close()

    at = _page("calibration")
    at.selectbox(key="run_id").set_value(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    for name in PER_ITEM_METRICS:
        shown = table.loc[table["metric"] == name, "as answered"].iloc[0]
        assert float(shown.split()[0]) == pytest.approx(rep.metrics[name].estimate, abs=5e-5)

    at = _page("compare")
    at.selectbox(key="cmp_baseline").set_value(run_id).run()
    at.select_slider(key="cmp_boot").set_value(200).run()
    assert not at.exception, [e.value for e in at.exception]
    everything = next(d.value for d in at.dataframe if "d_accuracy" in d.value.columns and "aurc" in d.value.columns)
    row = everything.loc[everything["run_id"] == run_id].iloc[0]
    assert row["aurc"] == pytest.approx(rep.metrics["aurc"].estimate, abs=1e-12)
    assert {f"d_{m}" for m in PER_ITEM_METRICS} <= set(everything.columns)
    con = connect(path, read_only=True)
    direct = compare_runs(
        con, list(everything["run_id"]), baseline=run_id, questions=["intent"], n_boot=20, policy=False
    )
    con.close()
    assert {r["run_id"]: r["metrics"]["aurc"]["estimate"] for r in direct.rows} == pytest.approx(
        dict(zip(everything["run_id"], everything["aurc"])), abs=1e-12
    )
