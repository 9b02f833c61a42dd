"""Acceptance 5: the Monitor page in a real Chromium against real decision logs, with the alarm marked.

The scenario of ``tests/monitor`` (a synthetic policy, its test split replayed through the runtime with
a decision log, outcomes whose error rate among accepted decisions jumps at decision 1,500) is opened
through the page's query parameters. The page must show the alarm, its position (the same as
``workbench monitor --json``), the charts, and the recertification hint; a screenshot is saved to
``artifacts/screenshots/08b-monitor-alarm.png`` (the every-page browser test writes 08-monitor.png).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import shift_scenario
from tests.ui.test_browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, wait_idle

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def monitor_server(tmp_path_factory):
    from workbench.cli.ui import streamlit_command

    tmp = tmp_path_factory.mktemp("monitor-ui")
    scenario = shift_scenario(tmp)
    port = _free_port()
    log = open(tmp / "streamlit.log", "wb")
    proc = subprocess.Popen(
        streamlit_command(scenario["db"], port=port),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "WORKBENCH_DB"},
    )
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
        raise AssertionError("streamlit did not start:\n" + (tmp / "streamlit.log").read_text())
    yield url, scenario
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_monitor_page_marks_the_alarm(monitor_server):
    from playwright.sync_api import sync_playwright

    url, sc = monitor_server
    tmp = sc["tmp"]
    query = urllib.parse.urlencode(
        {
            "policy": str(sc["policy"]),
            "decisions": str(tmp / "decisions.jsonl"),
            "outcomes": str(tmp / "shifted.jsonl"),
            "window": "6h",
        }
    )
    cli = json.loads(
        run_cli(
            "monitor",
            "--policy",
            str(sc["policy"]),
            "--decisions",
            str(tmp / "decisions.jsonl"),
            "--outcomes",
            str(tmp / "shifted.jsonl"),
            "--window",
            "6h",
            "--json",
        ).stdout
    )
    at = cli["first_alarm_at"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 3400})
        page.goto(f"{url}/monitor?{query}")
        wait_idle(page)
        main = page.locator('[data-testid="stMain"]')
        text = main.inner_text()
        assert "Monitor" in page.locator('[data-testid="stMain"] h1').first.inner_text()
        assert not page.locator('[data-testid="stException"]').count(), text[:2000]
        assert "ALARM" in text and "above α=0.05" in text
        # the alarm point: the same decision as the CLI, in the text and as a marker on the chart
        assert f"First alarm at decision {at['decision_index']}" in text and at["decision_id"] in text
        assert page.locator(".js-plotly-plot").count() >= 4
        cs = page.locator(".js-plotly-plot").nth(1)
        assert f"ALARM at outcome {at['outcome_index']}" in cs.inner_text()
        assert "Recertification hint" in text and "In the policy" in text
        # the headline figures are the library's
        ov = cli["questions"]["intent"]["overall"]
        assert f"{ov['traffic']:,}" in text and f"{100 * ov['coverage']:.1f}%" in text
        page.screenshot(path=str(SHOTS / "08b-monitor-alarm.png"), full_page=True)
        page.close()
        browser.close()
