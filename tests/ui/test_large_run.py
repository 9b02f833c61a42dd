"""The Thresholds page stays responsive on a 100,000-item × 77-option run (issue: slider < 300 ms)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ui.py"


@pytest.mark.slow
def test_slider_rerun_on_100k_items_is_fast():
    spec = importlib.util.spec_from_file_location("bench_ui", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.measure(run_items=100_000, options=77, moves=8)
    # every move changes the figures (τ moves along the grid) ...
    assert len(set(result["coverages"])) > 1
    # ... and the server-side round trip (widget → library call → figures) stays under 300 ms
    assert result["slider_rerun_ms"]["median"] < 300, result
