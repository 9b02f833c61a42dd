"""`workbench thresholds --html/--png` and `workbench compare --html` write the library's displays,
with the numbers of the library calls behind the commands (real CLI subprocess, real store)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

CLI = [sys.executable, "-c", "from workbench.cli import main; main()"]


def _cli(db, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_DB"}
    return subprocess.run([*CLI, "--db", str(db), *args], capture_output=True, text=True, env=env, timeout=300)


def _figures(html: str) -> list[dict]:
    """The figures of a plotly HTML file, parsed: ``{"data": [...], "layout": {...}}`` per ``Plotly.newPlot``.

    Parsed rather than searched as text: plotly may escape non-ASCII characters (``\\u03b1`` for α).
    """
    decoder = json.JSONDecoder()
    figs = []
    for m in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]*\",\s*", html):
        data, end = decoder.raw_decode(html, m.end())
        layout, _ = decoder.raw_decode(html, re.compile(r",\s*").match(html, end).end())
        figs.append({"data": data, "layout": layout})
    return figs


def _figure_titles(html: str) -> list[str]:
    return [(f["layout"].get("title") or {}).get("text", "") for f in _figures(html)]


def _trace_names(html: str) -> set[str]:
    return {t.get("name") for f in _figures(html) for t in f["data"]}


def test_thresholds_html_draws_the_chosen_rule(ui_store, tmp_path):
    db, meta = ui_store
    run = meta["runs"]["sharp-model"]
    out = tmp_path / "fig" / "thresholds.html"
    res = _cli(db, "thresholds", run, "--question", "intent", "--max-error", "0.2", "--html", str(out), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)["questions"]["intent"]
    text = out.read_text(encoding="utf-8")
    titles = _figure_titles(text)
    assert any("error over the grid" in t and "α=0.2" in t and "δ=0.1" in t for t in titles), titles
    assert any("risk–coverage" in t for t in titles), titles
    assert len(_figures(text)) == 2
    assert doc["feasible"] and {"certified", "certified region"} <= _trace_names(text)
    # the figures are threshold_figures() of the same library call: the star sits on the reported rule
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions
    from workbench.workflows.figures import certified_region, threshold_figures

    con = connect(db, read_only=True)
    cal, test = (load_answers(con, run, "intent", [s]) for s in ("calibration", "test"))
    con.close()
    result = choose_thresholds(cal, test, ThresholdOptions(alpha=0.2))
    surface_fig, curve_fig = threshold_figures(result)
    star = next(t for t in surface_fig.data if t.name == "certified")
    assert (star.x[0], star.y[0]) == pytest.approx((doc["rule"]["tau"], doc["rule"]["margin"]))
    region = certified_region(result.surface, alpha=0.2, delta=0.1)
    assert region.any() and np.all(result.surface.error_rate[region] < 0.2)  # certified ⇒ observed error below α
    # the dots are the grid points the selection certified (its own carve and test order): the ★ is one of
    # them (issue 27 §6: drawn from all items, the region could leave the ★ outside)
    dots = next(t for t in surface_fig.data if t.name == "certified region")
    assert (star.x[0], star.y[0]) in set(zip(np.asarray(dots.x, float).tolist(), np.asarray(dots.y, float).tolist()))
    assert int(np.asarray(result.selection.region).sum()) == result.selection.guarantee["n_certified_points"]
    assert "region" not in result.selection.to_dict()
    np.testing.assert_allclose(np.asarray(surface_fig.data[0].z, float), result.surface.error_rate.T)
    point = next(t for t in curve_fig.data if t.mode == "markers")
    assert point.x[0] == pytest.approx(doc["calibration"]["coverage"])


def _drawn(image) -> bool:
    return np.asarray(image.convert("L")).std() > 10  # something is drawn, not a blank page


def test_thresholds_png_writes_the_file_asked_for_with_every_figure(ui_store, tmp_path):
    pytest.importorskip("kaleido")
    from PIL import Image

    db, meta = ui_store
    out = tmp_path / "figs" / "thr.png"
    res = _cli(db, "thresholds", meta["runs"]["sharp-model"], "--question", "intent", "--png", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["thr.png"]  # no thr-1.png, thr-2.png, no temp file
    assert f"wrote {out}" in res.stderr
    image = Image.open(out)
    # the two figures (surface, risk–coverage: 460 px each by default) stacked, 1,100 px wide, both drawn
    from workbench.store.db import connect
    from workbench.thresholds.options import ThresholdOptions
    from workbench.workflows.figures import threshold_figures
    from workbench.workflows.thresholds import thresholds_for_run

    with connect(db, read_only=True) as con:
        res_q = thresholds_for_run(con, meta["runs"]["sharp-model"], "intent", ThresholdOptions())
    heights = [int(f.layout.height or 460) for f in threshold_figures(res_q)]
    assert len(heights) == 2
    assert image.size == (1100, sum(heights))
    assert _drawn(image.crop((0, 0, 1100, heights[0]))) and _drawn(image.crop((0, heights[0], 1100, sum(heights))))


def test_compare_png_writes_the_file_asked_for(ui_store, tmp_path):
    pytest.importorskip("kaleido")
    from PIL import Image

    db, meta = ui_store
    out = tmp_path / "figs" / "compare.png"
    runs = [meta["runs"]["sharp-model"], meta["runs"]["noisy-model"]]
    res = _cli(db, "compare", *runs, "--n-boot", "50", "--png", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["compare.png"]
    assert f"wrote {out}" in res.stderr
    image = Image.open(out)
    assert image.width == 1100 and image.height >= 400 and _drawn(image)


def test_compare_html_overlays_every_run(ui_store, tmp_path):
    from workbench.metrics.selective import risk_coverage_curve
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    db, meta = ui_store
    runs = [meta["runs"]["sharp-model"], meta["runs"]["noisy-model"]]
    out = tmp_path / "compare.html"
    res = _cli(db, "compare", *runs, "--n-boot", "50", "--html", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text(encoding="utf-8")
    names = _trace_names(text)
    for run in runs:
        assert any(run in (n or "") for n in names), (run, names)
    con = connect(db, read_only=True)
    ans = load_answers(con, runs[1], "intent", ["test"])
    con.close()
    aurc = risk_coverage_curve(ans.probs, ans.labels).aurc
    assert any(n.endswith(f"{runs[1]} (AURC {aurc:.3f})") for n in names if n), names
    assert any("risk–coverage" in t for t in _figure_titles(text))


def test_png_without_kaleido_is_a_clear_error(tmp_path, monkeypatch):
    import importlib.util

    from workbench.errors import OptionError
    from workbench.workflows.figures import write_figures

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kaleido" else real(name, *a))
    with pytest.raises(OptionError, match="kaleido"):
        write_figures([], png=tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
