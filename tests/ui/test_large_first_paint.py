"""First paint of a large run: the Calibration and Thresholds pages read one store query, the rest on request.

``WORKBENCH_STREAM_CELLS=1`` makes every split of the test store "large", so the pages take the path
of a run of millions of items (AppTest, real store, no mocks). The figures shown must be the library's:
the point estimates of ``workbench report --n-boot 0`` and ``workbench thresholds --calibrate none``.
"""

from __future__ import annotations

import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest

TIMEOUT = 90


@pytest.fixture
def large(ui_store, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STREAM_CELLS", "1")
    monkeypatch.setenv("WORKBENCH_AGGREGATE_CACHE", "0")  # nothing kept: every figure is computed here
    return ui_store


def _app(page: str, run_id: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.switch_page(f"workbench/ui/pages/{page}.py").run()
    at.selectbox(key="run_id").set_value(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_calibration_first_paint_shows_the_reports_point_estimates(large):
    from workbench.store.db import connect
    from workbench.workflows.evaluation import report_run

    path, meta = large
    run_id = meta["runs"]["noisy-model"]
    at = _app("calibration", run_id)
    assert any(s.value == "Metrics (point estimates)" for s in at.subheader)
    table = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    con = connect(path, read_only=True)
    ref = report_run(con, run_id, "intent", "test", n_boot=0, stream=False).questions[0]
    con.close()
    shown = dict(zip(table["metric"], table["as answered"]))
    assert set(shown) == {"accuracy", "macro_f1", "log_loss", "brier", "ece_uniform", "mce_uniform"}
    for name, value in shown.items():
        assert value == f"{ref.metrics[name].estimate:.4f}", name
    per_class = next(d.value for d in at.dataframe if "precision" in d.value.columns)
    assert per_class["support"].tolist() == ref.confusion.support.tolist()
    assert any("failures by kind: rate_limit" in c.value for c in at.caption)
    # the class-wise curve and the full report (with intervals) are drawn on request
    assert len(at.get("plotly_chart")) == 2  # top-label reliability and the confusion matrix
    at.button(key="cal_cw_go").click().run()
    assert not at.exception and len(at.get("plotly_chart")) == 3
    at.button(key="cal_boot_go").click().run()
    assert not at.exception
    assert any(s.value == "Metrics (95% bootstrap intervals)" for s in at.subheader)
    table = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert {"smece", "ece_quantile", "classwise_ece"} <= set(table["metric"])


def test_thresholds_first_paint_is_the_cli_with_calibrate_none(large):
    from workbench.store.db import connect
    from workbench.thresholds.options import ThresholdOptions
    from workbench.workflows.thresholds import thresholds_for_run

    path, meta = large
    run_id = meta["runs"]["sharp-model"]
    at = _app("thresholds", run_id)
    assert at.radio(key="thr_recalibrate").value == "as answered"
    at.number_input(key="thr_alpha").set_value(0.2).run()
    assert not at.exception, [e.value for e in at.exception]
    con = connect(path, read_only=True)
    ref = thresholds_for_run(con, run_id, "intent", ThresholdOptions(alpha=0.2, calibrate="none"))
    con.close()
    assert ref.certified
    assert any("--calibrate none" in c.value for c in at.caption)
    success = next(s.value for s in at.success if "Certified at" in s.value)
    assert f"τ = {ref.rule_dict()['tau']:.4f}" in success and f"m = {ref.rule_dict()['margin']:.4f}" in success
    metrics = {m.label: m.value for m in at.metric}
    test = ref.test or {}
    assert metrics["Certified: coverage / error (test)"] == (
        f"{100 * test['coverage']['value']:.1f}% / {100 * test['error']['value']:.1f}%"
    )
    # the sliders' test figures: at the certified point they are the certified rule's
    at.button(key="thr_use_certified").click().run()
    assert not at.exception
    assert (
        metrics["Certified: coverage / error (test)"].split(" / ")[0]
        == {m.label: m.value for m in at.metric}["Coverage (test)"]
    )
