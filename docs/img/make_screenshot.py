"""Make docs/img/thresholds.png: the Thresholds page of `workbench ui` in Debian's headless Chromium.

    workbench demo --fast --out /tmp/demo
    python docs/img/make_screenshot.py --db /tmp/demo/workbench.duckdb
    python docs/img/make_screenshot.py --db /tmp/demo/workbench.duckdb --pages all --out-dir /tmp/shots

``--pages all`` (or a comma-separated list of page names) saves one ``PAGE.png`` per page in ``--out-dir``.

Starts the real Streamlit server on a free loopback port the way tests/ui/test_browser.py does, waits
until the script run is over (Streamlit's status widget gone), and saves the top 1280 × 900 px as PNG.
Needs playwright (the test extra) and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.ui.test_browser import CHROMIUM, CHROMIUM_ARGS, _free_port, wait_idle  # noqa: E402
from workbench.cli.ui import streamlit_command  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, required=True, help="a store, e.g. the one `workbench demo --fast` leaves")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "thresholds.png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--pages", default="thresholds", help="'all' or comma-separated page names (with --out-dir)")
    ap.add_argument("--out-dir", type=Path, help="one PNG per page here")
    args = ap.parse_args()
    from workbench.ui.app import PAGES

    names = [f.removesuffix(".py") for f, _, _ in PAGES] if args.pages == "all" else args.pages.split(",")
    shots = [(n, args.out_dir / f"{n}.png") for n in names] if args.out_dir else [(names[0], args.out)]

    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_DB"}
    proc = subprocess.Popen(
        streamlit_command(args.db, port=port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("streamlit did not start") from None
                time.sleep(0.3)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            from workbench.ui.app import PAGES

            default = PAGES[0][0].removesuffix(".py")  # the default page lives at "/", not at its name
            for name, out in shots:
                page.goto(f"{url}/" if name == default else f"{url}/{name}")
                wait_idle(page, timeout=180_000)
                page.wait_for_timeout(1000)  # plotly's last redraw
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out))
                print(f"wrote {out} ({out.stat().st_size // 1024} KB)")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
