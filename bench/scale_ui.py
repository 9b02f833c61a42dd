"""First load of the Calibration and Thresholds pages on a store of millions of items × 77 options.

Builds (once, kept under ``--dir``) a synthetic store: a dataset of N items (half calibration, half
test, one gold label each), one choice question of 77 options, and one run whose answers are written
with :func:`workbench.store.runs.write_answers` in Arrow batches of 200,000 rows (with the ``p_top``,
``margin`` and ``top_option`` every writer stores). ``--db`` measures existing stores instead, e.g. one
built by ``bench/scale_data.py``'s imports, as ``docs/large-runs.md`` reports. Then, for each
checkout given with ``--tree`` (e.g. this worktree and an old one), starts the real Streamlit server
on the store, opens each page in Chromium (playwright, ``/usr/bin/chromium``), waits until Streamlit's
status widget is gone, and prints the seconds of each page's first load and the server's peak RSS
(``VmHWM`` of the server process, read from ``/proc``; the server is started fresh per page so the
peak is that page's own). A server whose RSS passes ``--limit-gb`` (default 4) is killed and its row
says so: the machine is shared.

The UI keeps a large run's aggregates next to the store (``<store>.aggregates/``,
:mod:`workbench.store.aggregate_cache`), so each page is measured twice: ``cold`` (that directory
removed first: the first session ever on this run computes everything) and ``warm`` (a new server on
the same store: a later session reads what the first one kept). ``--cold-only`` skips the second.
``--shots DIR`` saves a screenshot of each page after its last load (1400 px wide, whole page).

    python bench/scale_ui.py --items 1000000 2000000 --tree new=. --tree old=/tmp/wb-old-ui

Wall times are noisy on a shared 2-core machine (the table prints the load average); the server's own CPU
seconds (user + system, from ``/proc``) and its RSS are not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
BATCH = 200_000
PAGES = {"Calibration": "calibration", "Thresholds": "thresholds"}


def build(db: Path, n: int, k: int = 77, seed: int = 0) -> str:
    """A store with one dataset of ``n`` items and one run answering all of them; returns the run id."""
    import pandas as pd

    from workbench.schema import DecisionSchema
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    rng = np.random.default_rng(seed)
    opts = [f"intent_{j:02d}" for j in range(k)]
    labels = rng.integers(0, k, size=n)
    ids = np.array([f"x{i:08d}" for i in range(n)], dtype=object)
    parquet = db.parent / f"items-{n}.parquet"
    pd.DataFrame(
        {
            "id": ids,
            "text": "message",
            "label": np.array(opts, dtype=object)[labels],
            "split": np.where(np.arange(n) % 2 == 0, "calibration", "test"),
        }
    ).to_parquet(parquet)
    schema = DecisionSchema.from_dict(
        {"questions": {"intent": {"type": "choice", "instructions": "Intent?", "criteria": {o: None for o in opts}}}}
    )
    con = connect(db)
    con.execute("SET memory_limit = '2GB'")
    con.execute("SET preserve_insertion_order = false")
    info = import_dataset(
        con,
        [parquet],
        ImportSpec(name="big", text_column="text", id_column="id", labels={"intent": "label"}, split_column="split"),
        schema,
    )
    parquet.unlink()
    run_id = create_run(
        con,
        dataset="big",
        dataset_version=info.version,
        schema=schema,
        provider="synthetic:big",
        splits=["calibration", "test"],
        name="big",
    )
    for start in range(0, n, BATCH):
        y = labels[start : start + BATCH]
        m = len(y)
        logits = rng.normal(size=(m, k))
        logits[np.arange(m), y] += rng.uniform(0, 6, size=m)
        probs = np.exp(logits - logits.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        srt = np.sort(probs, axis=1)
        flat = pa.array(probs.ravel())
        table = pa.table(
            {
                "run_id": pa.array([run_id] * m),
                "item_id": pa.array(ids[start : start + m]),
                "question": pa.array(["intent"] * m),
                "probs": pa.ListArray.from_arrays(pa.array(np.arange(0, m * k + 1, k, dtype=np.int32)), flat),
                "p_top": pa.array(srt[:, -1]),
                "margin": pa.array(srt[:, -1] - srt[:, -2]),
                "top_option": pa.array(probs.argmax(1).astype(np.int32)),  # as every writer stores it
            }
        )
        write_answers(con, table, replace=False)
        del logits, probs, srt, flat, table
    update_run(con, run_id, status="done")
    con.execute("CHECKPOINT")
    con.close()
    return run_id


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
IDLE = (
    "() => { const app = document.querySelector('[data-testid=\"stApp\"]');"
    " const state = app ? app.getAttribute('data-test-script-state') : 'initial';"
    " const widget = document.querySelector('[data-testid=\"stStatusWidget\"]');"
    " return state !== 'running' && state !== 'initial'"
    " && !(widget && widget.innerText.includes('Running'))"
    " && !document.querySelector('[data-testid=\"stSkeleton\"]'); }"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_rss_gb(pid: int) -> float:
    """``VmHWM`` (peak resident set) of a live process, in GB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``): on a shared machine the
    server's own work, whatever the others take of the cores."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024**2
    return 0.0


def _watch(proc: subprocess.Popen, limit_gb: float, killed: list) -> None:
    """Kill the server when its RSS passes ``limit_gb`` (the machine is shared)."""
    while proc.poll() is None:
        try:
            if _rss_gb(proc.pid) > limit_gb:
                killed.append(True)
                proc.kill()
                return
        except OSError:
            return
        time.sleep(0.1)


def first_load(
    tree: Path, db: Path, page: str, timeout_s: float = 900, limit_gb: float = 4.0, shot: Path | None = None
) -> dict:
    """Start Streamlit from ``tree`` on ``db``, open ``page`` once; seconds until idle and peak RSS.

    The server is killed when its RSS passes ``limit_gb``: the row then says so instead of a time.
    """
    import threading

    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_DB"}
    env["PYTHONPATH"] = f"{tree}:{tree / 'runtime'}"
    log = open(db.parent / f"streamlit-{page}.log", "wb")
    cmd = [sys.executable, "-m", "streamlit", "run", str(tree / "streamlit_app.py"), "--server.headless", "true"]
    cmd += ["--server.port", str(port), "--browser.gatherUsageStats", "false", "--", "--db", str(db)]
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        import urllib.request

        while time.time() < deadline:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.3)
        base_rss = _peak_rss_gb(proc.pid)
        killed: list = []
        threading.Thread(target=_watch, args=(proc, limit_gb, killed), daemon=True).start()
        peak = base_rss
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            t0 = time.perf_counter()
            cpu0 = _cpu_s(proc.pid)
            cpu = None
            try:
                tab.goto(f"{url}/{page}")

                def wait(js: str) -> None:  # in short slices, so that a server killed at the limit ends the wait
                    end = time.perf_counter() + timeout_s
                    while True:
                        if killed or proc.poll() is not None:
                            raise OSError("the server is gone")
                        try:
                            tab.wait_for_function(js, timeout=5000)
                            return
                        except PlaywrightError:
                            if time.perf_counter() > end:
                                raise

                wait("() => !!document.querySelector('[data-testid=\"stMain\"] h1')")
                for _ in range(2):
                    wait(IDLE)
                    tab.wait_for_timeout(400)
                    peak = _peak_rss_gb(proc.pid)
                wait(IDLE)
                peak = _peak_rss_gb(proc.pid)
                seconds: float | None = time.perf_counter() - t0 - 0.8  # the two 400 ms settling pauses
                cpu = _cpu_s(proc.pid) - cpu0
                errors = tab.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').count()
                if shot is not None:
                    shot.parent.mkdir(parents=True, exist_ok=True)
                    tab.set_viewport_size({"width": 1400, "height": 5000})  # Streamlit scrolls inside its main block
                    tab.wait_for_timeout(1500)
                    wait(IDLE)
                    tab.screenshot(path=str(shot), full_page=True)
            except (PlaywrightError, OSError):
                if not killed:
                    raise
                seconds, errors, peak = None, 0, limit_gb
            browser.close()
        if killed:
            return {"seconds": None, "peak_rss_gb": f"> {limit_gb:g} (killed)", "idle_rss_gb": round(base_rss, 2)}
        return {
            "seconds": None if seconds is None else round(seconds, 1),
            "cpu_s": None if cpu is None else round(cpu, 1),
            "peak_rss_gb": round(peak, 2),
            "idle_rss_gb": round(base_rss, 2),
            "errors": errors,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, nargs="+", default=[1_000_000, 2_000_000])
    ap.add_argument("--options", type=int, default=77)
    ap.add_argument("--dir", default="/tmp/wb-scale-ui", help="where the stores are built (and kept)")
    ap.add_argument("--tree", action="append", default=None, help="NAME=PATH of a checkout to serve (repeatable)")
    ap.add_argument("--pages", nargs="+", default=list(PAGES))
    ap.add_argument("--limit-gb", type=float, default=4.0, help="kill a server whose RSS passes this")
    ap.add_argument("--cold-only", action="store_true", help="measure only the first session (no kept aggregates)")
    ap.add_argument("--shots", default=None, help="directory for a screenshot of each page")
    ap.add_argument(
        "--db",
        nargs="+",
        default=None,
        help="measure these stores (e.g. copies of bench/scale.py's pristine stores) instead of building them; "
        "each is opened on its first run",
    )
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in (args.tree or [f"new={ROOT}"])]
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    targets = [(Path(d).resolve(), Path(d).stem) for d in args.db] if args.db else []
    targets += [] if args.db else [(out / f"scale-{n}x{args.options}.duckdb", n) for n in args.items]
    for db, n in targets:
        if not db.exists():
            t0 = time.perf_counter()
            build(db, n, args.options)
            print(f"built {db} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        for name, tree in trees:
            for title in args.pages:
                kept = db.with_name(db.name + ".aggregates")
                for cache in ["cold"] + ([] if args.cold_only else ["warm"]):
                    if cache == "cold" and kept.is_dir():
                        shutil.rmtree(kept)
                    shot = None
                    if args.shots and cache == ("cold" if args.cold_only else "warm"):
                        shot = Path(args.shots) / f"{title.lower()}-{n}-{name}.png"
                    r = first_load(Path(tree).resolve(), db, PAGES[title], limit_gb=args.limit_gb, shot=shot)
                    rows.append(
                        {
                            "items": n,
                            "tree": name,
                            "page": title,
                            "cache": cache,
                            **r,
                            "store_gb": round(db.stat().st_size / 1e9, 2),
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(
        f"{'items':>10} {'tree':>5} {'page':>12} {'session':>8} {'first load s':>13} {'server CPU s':>13} "
        f"{'peak RSS GB':>16} {'store GB':>9}"
    )
    for r in rows:
        secs = "—" if r["seconds"] is None else f"{r['seconds']:.1f}"
        print(
            f"{r['items']!s:>10} {r['tree']:>5} {r['page']:>12} {r['cache']:>8} {secs:>13} {r.get('cpu_s')!s:>13} "
            f"{r['peak_rss_gb']!s:>16} "
            f"{r['store_gb']:>9.2f}" + (f"  ({r['errors']} errors on the page)" if r.get("errors") else "")
        )
    print(json.dumps({"load_average": os.getloadavg()[0], "rows": rows}))


if __name__ == "__main__":
    sys.exit(main())
