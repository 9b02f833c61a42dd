"""End to end in a real headless Chromium (Debian package) driven by Playwright.

Starts ``workbench ui`` (the real Streamlit server) on a free loopback port against a prepared
store, opens every page, moves a threshold slider and checks that the figures change, and
saves one screenshot per page to ``artifacts/screenshots/`` (CI artefacts).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAGES = ["datasets", "runs", "calibration", "thresholds", "compare", "shadow", "policy", "monitor"]
#: Text each page shows only when it rendered the prepared store's data, and its minimum number of charts.
EXPECT = {
    "datasets": ("Sample items", 1),
    "runs": ("Failures by kind", 0),
    "calibration": ("Reliability (top label)", 3),
    "thresholds": ("Coverage (test)", 3),
    "compare": ("Paired differences against the baseline", 2),
    "shadow": ("Verdict:", 2),
    "policy": ("Valid policy", 0),
    "monitor": ("Per window", 3),
}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


def _decision_logs(db: Path, meta: dict) -> None:
    """Production-made decision logs and outcomes next to the store (the Monitor page's defaults): the
    sharp run's test answers decided by the exported policy through the runtime, logged by DecisionLog."""
    from tests.monitor.conftest import replay, responses_from_answers, write_outcomes
    from workbench.policy.runtime import Policy
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    con = connect(db, read_only=True)
    ans = load_answers(con, meta["runs"]["sharp-model"], "intent", ["test"])
    con.close()
    ans = ans.select(ans.labels >= 0)
    replay(
        Policy.load(db.parent / "policy.json"),
        responses_from_answers(ans.probs, ans.option_ids, "intent", "synthetic"),
        db.parent / "decisions.jsonl",
        step=timedelta(hours=1),  # six days of traffic: several of the page's default 1-day windows
    )
    write_outcomes(
        db.parent / "outcomes.jsonl",
        [
            {"decision_id": f"d{i:06d}", "question": "intent", "outcome": ans.option_ids[j]}
            for i, j in enumerate(ans.labels)
        ],
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(prepared_store, tmp_path_factory):
    from workbench.cli.ui import streamlit_command

    src, meta = prepared_store
    db = tmp_path_factory.mktemp("browser") / "wb.duckdb"
    shutil.copyfile(src, db)
    shutil.copyfile(src.parent / "policy.json", db.parent / "policy.json")
    _decision_logs(db, meta)
    port = _free_port()
    log = open(db.parent / "streamlit.log", "wb")
    proc = subprocess.Popen(
        streamlit_command(db, port=port),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "WORKBENCH_DB"},
    )  # `-- --db` only
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=1).status == 200:
                break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        raise AssertionError("streamlit did not start:\n" + (db.parent / "streamlit.log").read_text())
    yield url, {**meta, "db": db}
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def wait_idle(page, timeout: float = 60_000) -> None:
    """Wait until the script run is over: title drawn, the app's script state no longer ``running``
    (the attribute Streamlit's "Running..." status widget follows), no status widget saying Running,
    and no skeleton placeholder — twice, 400 ms apart, so that a rerun starting late is caught."""
    page.wait_for_selector('[data-testid="stMain"] h1', timeout=timeout)
    idle = (
        "() => { const app = document.querySelector('[data-testid=\"stApp\"]');"
        " const state = app ? app.getAttribute('data-test-script-state') : 'initial';"
        " const widget = document.querySelector('[data-testid=\"stStatusWidget\"]');"
        " return state !== 'running' && state !== 'initial'"
        " && !(widget && widget.innerText.includes('Running'))"
        " && !document.querySelector('[data-testid=\"stSkeleton\"]'); }"
    )
    for _ in range(2):
        page.wait_for_function(idle, timeout=timeout)
        page.wait_for_timeout(400)
    page.wait_for_function(idle, timeout=timeout)


def page_url(url: str, name: str) -> str:
    """The first page of the menu is the app's default page: Streamlit serves it at ``/``."""
    return f"{url}/" if name == PAGES[0] else f"{url}/{name}"


def screenshot(page, path: Path, width: int = 1400) -> None:
    """Whole page at ``width`` px: Streamlit scrolls inside ``stMain``, so the viewport grows to its height first."""
    height = page.evaluate(
        "() => { const b = document.querySelector('[data-testid=\"stMainBlockContainer\"]');"
        " return b ? b.getBoundingClientRect().top + b.scrollHeight + 80 : document.body.scrollHeight; }"
    )
    page.set_viewport_size({"width": width, "height": min(int(height) + 40, 12_000)})
    page.wait_for_timeout(600)  # plotly redraws at the new size
    page.screenshot(path=str(path), full_page=True)


CUT_TEXT_JS = """() => {
  const cut = [];
  // metric labels and values: Streamlit ellipsises text wider than its column
  for (const el of document.querySelectorAll(
      '[data-testid="stMetricLabel"] *, [data-testid="stMetricValue"], [data-testid="stMetricValue"] *')) {
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) cut.push('metric: ' + el.innerText);
  }
  // plotly titles (SVG text is clipped by the figure, never wrapped)
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    for (const t of plot.querySelectorAll('.gtitle, .g-xtitle text, .g-ytitle text')) {
      const r = t.getBoundingClientRect();
      if (r.width && (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1))
        cut.push('chart title: ' + t.textContent);
    }
  }
  return cut;
}"""


def cut_texts(page) -> list[str]:
    """Metric labels/values and chart titles that do not fit their box (cut off on screen)."""
    return page.evaluate(CUT_TEXT_JS)


def _main_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def test_every_page_renders_with_data(server, browser):
    url, meta = server
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 3000})  # Streamlit scrolls inside stMain
    for name in PAGES:
        page.goto(page_url(url, name))
        wait_idle(page)
        text = _main_text(page)
        assert name.capitalize() in page.locator('[data-testid="stMain"] h1').first.inner_text()
        assert not page.get_by_text("Page not found").count(), name
        assert "Traceback" not in text and "Error" not in page.locator('[data-testid="stMain"] h1').first.inner_text()
        assert not page.locator('[data-testid="stException"]').count(), text[:2000]
        marker, n_charts = EXPECT[name]
        assert marker in text, (name, text[:1500])
        assert page.locator(".js-plotly-plot").count() >= n_charts, name
        assert not cut_texts(page), (name, cut_texts(page))
        screenshot(page, SHOTS / f"{PAGES.index(name) + 1:02d}-{name}.png")
    # content checks on the pages that must show the prepared data
    page.goto(page_url(url, "datasets"))
    wait_idle(page)
    assert meta["fingerprint"] in _main_text(page)
    page.goto(f"{url}/runs")
    wait_idle(page)
    assert "sharp-model" in _main_text(page) or "noisy-model" in _main_text(page)
    page.close()


def _metric_value(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def test_threshold_slider_changes_the_figures(server, browser):
    url, meta = server
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{url}/thresholds")
    wait_idle(page)
    before = (_metric_value(page, "Coverage (test)"), _metric_value(page, "Review load (test)"))
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    start = float(thumb.input_value())
    thumb.focus()
    t0 = time.perf_counter()
    for _ in range(15):  # +0.15 on τ: stricter, so coverage falls and review load rises
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        '(v) => Number(document.querySelector(\'[data-testid="stSlider"] input[type="range"]\').value) > v', arg=start
    )
    page.wait_for_function(  # the figures follow once the rerun has reached the browser
        "(old) => [...document.querySelectorAll('[data-testid=\"stMetric\"]')]"
        ".find(m => m.innerText.includes('Coverage (test)'))?.querySelector('[data-testid=\"stMetricValue\"]')"
        "?.innerText.trim() !== old",
        arg=before[0],
        timeout=30_000,
    )
    elapsed = time.perf_counter() - t0
    wait_idle(page)
    after = (_metric_value(page, "Coverage (test)"), _metric_value(page, "Review load (test)"))
    assert float(thumb.input_value()) > start
    assert after != before, (before, after)
    assert float(after[0].rstrip("%")) <= float(before[0].rstrip("%"))
    screenshot(page, SHOTS / "04b-thresholds-after-slider.png")
    print(f"slider move + rerun + redraw: {elapsed * 1000:.0f} ms")
    page.close()


def _grid_cell(page, col: int, row: int):
    """The data grid's accessibility cell (glide-data-grid mirrors its canvas in a hidden table)."""
    return page.locator(f'[data-testid="glide-cell-{col}-{row}"]')


def _rerun_by(page, action) -> None:
    """Do ``action`` (a widget edit) and wait until the script rerun it causes has started *and* finished, so the
    next edit cannot race it (an edit made while the previous one's rerun is still on its way can be dropped)."""
    page.evaluate(
        "() => { const app = document.querySelector('[data-testid=\"stApp\"]'); window.__wbRerun = false;"
        " new MutationObserver((_, obs) => { if (app.getAttribute('data-test-script-state') === 'running')"
        " { window.__wbRerun = true; obs.disconnect(); } })"
        ".observe(app, {attributes: true, attributeFilter: ['data-test-script-state']}); }"
    )
    action()
    page.wait_for_function("() => window.__wbRerun === true", timeout=30_000)
    wait_idle(page)


def _library_review_load(db: Path, run_id: str, tau_option0: float) -> int:
    """Test review load of the Thresholds page's default view (its first run, the sharp model), from the library:
    slider rule (τ 0.6, m 0 on the grid), the default recalibration fitted on the calibration split, option 0 overridden to τ ``tau_option0``."""
    from tests.ui.store_builder import on_grid
    from workbench.metrics.recalibrate import make_calibrator
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.evaluate import evaluate_rule
    from workbench.thresholds.options import ThresholdOptions
    from workbench.thresholds.rules import make_rule

    con = connect(db, read_only=True)
    ans = load_answers(con, run_id, "intent", ["calibration", "test"])
    con.close()
    fit, test = (ans.splits == "calibration") & (ans.labels >= 0), (ans.splits == "test") & (ans.labels >= 0)
    probs = (
        make_calibrator(ThresholdOptions().calibrate).fit(ans.probs[fit], ans.labels[fit]).transform(ans.probs[test])
    )
    tau, m = on_grid(0.6), on_grid(0.0, axis=1)
    rule = make_rule("choice", tau, m, per_class={0: (tau_option0, m)})
    return int(evaluate_rule(rule, probs, ans.labels[test], option_ids=list(ans.option_ids))["n_review"])


def test_per_class_override_editor_changes_the_test_figures(server, browser):
    """Tick the first option in the per-class override editor and give it a strict τ: fewer test items are
    accepted, exactly as the library computes (the grid is the real data editor in Chromium, driven by mouse and
    keyboard). Each step waits for a state (grid settled, cell selected, rerun over, editor open), not a fixed time."""
    from playwright.sync_api import expect

    from tests.ui.store_builder import INTENTS, on_grid

    url, meta = server
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{url}/thresholds")
    wait_idle(page)
    before = _metric_value(page, "Review load (test)")
    page.get_by_text("Per-class overrides").click()
    grid = page.locator('[data-testid="stDataFrame"]').first
    _grid_cell(page, 0, 0).wait_for(state="attached")
    expect(_grid_cell(page, 0, 0)).to_have_text(INTENTS[0])  # the grid holds its data
    # the expander animates open: click only once the grid has stopped moving
    page.wait_for_function(
        "(el) => { const r = el.getBoundingClientRect(), k = `${r.x},${r.y},${r.width},${r.height}`;"
        " const same = el.dataset.lastBox === k; el.dataset.lastBox = k; return same && r.height > 100; }",
        arg=grid.element_handle(),
        polling=250,
    )
    box = grid.bounding_box()
    row0 = box["y"] + 35 + 17  # first body row under the 35 px header; columns: option | override | tau | margin

    # 1. tick the override (no effect yet: an empty τ is the slider's); the edit reruns the page
    page.mouse.click(box["x"] + box["width"] * 0.375, row0)
    expect(_grid_cell(page, 1, 0)).to_have_attribute("aria-selected", "true")  # the grid took the click
    _rerun_by(page, lambda: page.keyboard.press("Space"))
    assert _metric_value(page, "Review load (test)") == before

    # 2. a strict τ for that option: the page reruns with the per-class rule
    page.mouse.dblclick(box["x"] + box["width"] * 0.62, row0)
    editor = page.locator("#portal input.gdg-input")
    editor.wait_for()  # the cell's number editor is open and focused
    page.keyboard.press("Control+A")
    page.keyboard.type("0.99")
    expect(editor).to_have_value("0.99")
    # the overlay commits its React state, not the input's text: let the typed value render before Enter
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "(old) => [...document.querySelectorAll('[data-testid=\"stMetric\"]')]"
        ".find(m => m.innerText.includes('Review load (test)'))?.querySelector('[data-testid=\"stMetricValue\"]')"
        "?.innerText.trim() !== old",
        arg=before,
        timeout=30_000,
    )
    wait_idle(page)
    after = _metric_value(page, "Review load (test)")
    n_before, n_after = (int(v.split()[0].replace(",", "")) for v in (before, after))
    assert n_after > n_before, (before, after)
    assert n_before == _library_review_load(meta["db"], meta["runs"]["sharp-model"], on_grid(0.6))
    assert n_after == _library_review_load(meta["db"], meta["runs"]["sharp-model"], 0.99)
    SHOTS.mkdir(parents=True, exist_ok=True)
    screenshot(page, SHOTS / "04c-thresholds-per-class-override.png")
    page.close()


def test_certified_thresholds_are_drawn_and_stated(server, browser):
    """At α = 0.2 a rule is certified: the page states α, δ and recalibration, shows the certified
    metrics without cut labels, and the surface draws the certified point and region."""
    url, meta = server
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{url}/thresholds")
    wait_idle(page)
    alpha = page.locator('[data-testid="stNumberInput"] input').first
    alpha.fill("0.2")
    alpha.press("Enter")
    page.get_by_text("Certified at α=0.2").wait_for(timeout=30_000)
    wait_idle(page)
    text = _main_text(page)
    from workbench.thresholds.options import ThresholdOptions

    d = ThresholdOptions()  # the page starts from the one set of defaults; only α was changed
    assert f"Threshold options: α = 0.2, δ = {d.delta:g}, recalibration {d.calibrate}" in text
    for label in ("Certified τ", "Certified m", "Certified error bound", "Certified: coverage / error (test)"):
        box = page.locator('[data-testid="stMetricLabel"]').filter(has_text=label).first
        inner = box.locator("p, div").first
        # a cut label is wider inside than its box (Streamlit ellipsises it)
        assert inner.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), label
    legend = page.locator(".js-plotly-plot").first.inner_text()
    assert "certified" in legend and "certified region" in legend
    SHOTS.mkdir(parents=True, exist_ok=True)
    screenshot(page, SHOTS / "04d-thresholds-certified.png")
    page.close()


def test_the_costs_section_computes_its_point_when_opened(server, browser):
    """The Costs section draws its cost surface only while open (a second pass over the calibration
    items): closed, no cost figure; opened in the browser, the page reruns and shows the cost-optimal point."""
    url, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{url}/thresholds")
    wait_idle(page)
    assert "Lowest expected cost" not in _main_text(page)
    page.locator('[data-testid="stExpander"] summary').filter(has_text="Costs").click()
    page.get_by_text("Lowest expected cost per item").wait_for(timeout=30_000)
    wait_idle(page)
    assert "Cost-optimal point (not certified)" in _main_text(page)
    assert float(_metric_value(page, "Lowest expected cost")) >= 0
    page.close()


def test_the_cut_text_check_sees_an_ellipsised_label(browser):
    """The check above finds a label the browser ellipsises (so passing pages really fit)."""
    page = browser.new_page(viewport={"width": 400, "height": 300})
    style = "width:60px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis"
    page.set_content(
        f'<div data-testid="stMetricLabel"><p style="{style}">Error among accepted decisions</p></div>'
        f'<div data-testid="stMetricLabel"><p style="{style}">Ok</p></div>'
    )
    assert cut_texts(page) == ["metric: Error among accepted decisions"]
    page.close()
