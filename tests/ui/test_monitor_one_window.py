"""Issue 27 §6: the Monitor page with a single window (AppTest, no browser).

Plotly's autorange around one point drew sub-millisecond time ticks and a 150% y-axis; the page now puts a
single window on a category axis and keeps shares on 0–100% and the error axis just past α or the interval.
"""

from __future__ import annotations

import json

from store_builder import APP
from streamlit.testing.v1 import AppTest

from tests.monitor.conftest import shift_scenario


def test_monitor_page_with_one_window_has_sane_axes(tmp_path, monkeypatch):
    sc = shift_scenario(tmp_path)
    monkeypatch.setenv("WORKBENCH_DB", str(sc["db"]))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("workbench/ui/pages/monitor.py").run()
    at.text_input(key="mon_policy").set_value(str(sc["policy"]))
    at.text_input(key="mon_decisions").set_value(str(tmp_path / "decisions.jsonl"))
    at.text_input(key="mon_outcomes").set_value(str(tmp_path / "shifted.jsonl"))
    at.text_input(key="mon_window").set_value("1000000").run()  # a count of decisions past the log: one window
    assert not at.exception, [e.value for e in at.exception]
    charts = {c.proto.id.rsplit("-", 1)[-1]: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    layout = charts["mon_windows_chart"]["layout"]
    assert len(charts["mon_windows_chart"]["data"][0]["x"]) == 1  # one window indeed
    assert all(layout[f"xaxis{k}"]["type"] == "category" for k in ("", "2", "3"))
    assert layout["yaxis2"]["range"] == [0, 1.05]
    low, high = layout["yaxis3"]["range"]
    assert low == 0 and high <= 1.05
    assert charts["mon_mismatch_chart"]["layout"]["xaxis"]["type"] == "category"
