"""The certified figures of the Thresholds page are the CLI's: one library call behind both.

The page's Learn-then-Test section, its certified frontier and its policy export must report what
``workbench thresholds RUN --question Q --max-error A --delta D [--calibrate C] --json`` reports
for the same run and settings (with and without recalibration, whose calibrator the CLI fits on
its own carve of the calibration split).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest

ALPHA, DELTA = 0.2, 0.1


def _cli_json(db, run_id: str, *args: str) -> dict:
    """`workbench thresholds ... --json` run as a real process against the store copy."""
    cmd = [
        sys.executable,
        "-c",
        "from workbench.cli import main; main()",
        "--db",
        str(db),
        "thresholds",
        run_id,
        "--question",
        "intent",
        "--max-error",
        str(ALPHA),
        "--delta",
        str(DELTA),
        *args,
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["questions"]["intent"]


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _array(value) -> list[float]:
    """A plotly JSON array: a list, or ``{"dtype", "bdata"}`` (base64 of the raw values)."""
    if isinstance(value, dict):
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value)


def _frontier_point(at: AppTest, alpha: float) -> float:
    """Certified coverage at ``alpha`` read back from the risk–coverage chart's frontier trace."""
    chart = next(c for c in at.get("plotly_chart") if "certified frontier" in c.proto.spec)
    trace = next(t for t in json.loads(chart.proto.spec)["data"] if t.get("name", "").startswith("certified"))
    xs, ys = _array(trace["x"]), _array(trace["y"])
    return next(x for x, y in zip(xs, ys) if y == pytest.approx(alpha))


@pytest.mark.parametrize("calibrate", ["none", "temperature"])
def test_certified_section_equals_cli_and_library(ui_store, calibrate):
    path, meta = ui_store
    run_id = meta["runs"]["sharp-model"]
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("workbench/ui/pages/thresholds.py").run()
    at.selectbox(key="run_id").set_value(run_id).run()
    at.number_input(key="thr_alpha").set_value(ALPHA).run()
    at.number_input(key="thr_delta").set_value(DELTA).run()
    at.radio(key="thr_recalibrate").set_value("as answered" if calibrate == "none" else calibrate).run()
    assert not at.exception, [e.value for e in at.exception]

    # the library call, with the options the CLI builds from the same flags
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions

    con = connect(path, read_only=True)
    cal = load_answers(con, run_id, "intent", ["calibration"])
    test = load_answers(con, run_id, "intent", ["test"])
    con.close()
    lib = choose_thresholds(cal, test, ThresholdOptions(alpha=ALPHA, delta=DELTA, calibrate=calibrate)).to_dict()
    cli = _cli_json(path, run_id, "--calibrate", calibrate)
    assert cli["certified"] and cli["feasible"]
    assert cli["rule"] == lib["rule"] and cli["guarantee"]["risk_upper_bound"] == lib["guarantee"]["risk_upper_bound"]
    if calibrate != "none":
        # the CLI's calibrator is fitted on its own 30 % carve, not on the whole calibration split
        assert 0 < cli["n_calibrator_fit"] < int((cal.labels >= 0).sum())
        g = cli["guarantee"]  # the rest: items that learn the test order + items that certify
        assert g["n_order"] + g["n_calibration"] == int((cal.labels >= 0).sum()) - cli["n_calibrator_fit"]

    # the page shows exactly those figures
    assert _metric(at, "Certified τ") == f"{cli['rule']['tau']:.4f}"
    assert _metric(at, "Certified m") == f"{cli['rule']['margin']:.4f}"
    assert _metric(at, "Certified error bound") == f"{cli['guarantee']['risk_upper_bound']:.4f}"
    assert float(_metric(at, "Certified τ")) == pytest.approx(cli["rule"]["tau"], abs=5e-5)
    assert f"n_calibration {cli['guarantee']['n_calibration']:,}" in next(
        s.value for s in at.success if "Certified at" in s.value
    )
    cov, err = _metric(at, "Certified: coverage / error (test)").split(" / ")
    assert cov == f"{100 * cli['test']['coverage']['value']:.1f}%"
    assert err == f"{100 * cli['test']['error']['value']:.1f}%"
    # the frontier point at this α is the same selection's calibration coverage
    assert _frontier_point(at, ALPHA) == pytest.approx(cli["calibration"]["coverage"])

    # "use" puts the exploration sliders exactly on the certified point (shared grid)
    at.button(key="thr_use_certified").click().run()
    assert at.select_slider(key="thr_x").value == pytest.approx(cli["rule"]["tau"])
    assert at.select_slider(key="thr_y").value == pytest.approx(cli["rule"]["margin"])

    # the exported guarantee policy carries the rule and calibrator shown
    at.button(key="pol_build").click().run()
    assert not at.exception, [e.value for e in at.exception]
    doc = json.loads(next(iter(at.session_state["session_policies"].values())))
    q = doc["questions"]["intent"]
    assert q["objective"]["certified"] is True
    assert q["rule"]["tau"] == pytest.approx(cli["rule"]["tau"])
    assert q["rule"]["margin"] == pytest.approx(cli["rule"]["margin"])
    assert q["calibrator"]["type"] == cli["calibrator"]["type"] == ("identity" if calibrate == "none" else calibrate)
    assert q["calibrator"]["params"] == pytest.approx(cli["calibrator"]["params"])


def test_slider_grid_is_the_cli_default_grid():
    from workbench.thresholds.options import ThresholdOptions
    from workbench.ui.state import GRID_POINTS

    assert GRID_POINTS == ThresholdOptions().grid
