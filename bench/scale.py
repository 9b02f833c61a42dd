"""Scale: seconds and peak RSS of every command on a synthetic run of N items × 77 options.

For each size, builds a store with ``bench/scale_data.py`` (a dataset and a run imported with
``workbench runs import``), then runs each command as its own process (``workbench …`` with this
checkout on ``PYTHONPATH``) and reads that process's peak RSS from ``wait4``. With ``--old PATH``
(a checkout of an older commit, e.g. ``git worktree add /tmp/wb-old <commit>``) the same commands
also run with that code on the same store, side by side, for sizes up to ``--old-max`` (the old code
needs several times the memory; beyond it the figures measured when issue 11 was filed are shown).

    python bench/scale.py                      # 1M and 3M
    python bench/scale.py --full               # 1M, 3M and 10M
    python bench/scale.py --sizes 200000 --old /tmp/wb-old
    python bench/scale.py --full --workdir /data/wb-scale --reuse   # build each size once, then reuse it

Prints one table: items, command, seconds (wall and CPU: the machine may be shared), peak RSS (GB), old seconds/RSS and the ratios, plus
the store size before and after ``calibrate`` (a calibrated view stores its calibrator only).

``shadow`` (``workbench shadow report`` of a session of N requests) and ``monitor`` (``workbench monitor``
over a log of N decisions) run on the production-size inputs of ``bench/scale_prod.py`` (built by it,
in a child process, under ``<size>/prod/``; ``--reuse`` keeps them too), e.g.
``python bench/scale.py --only shadow,monitor --full --workdir /data/wb-scale --reuse``. A selection of
only these two builds no run store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Peak RSS of the old code measured when issue 11 was filed (GB): {items: {command: GB}}.
FILED = {
    1_000_000: {"thresholds": 3.96, "calibrate": 5.31},
    5_000_000: {"thresholds": 15.3, "export": 19.4, "calibrate": float("inf")},  # calibrate: out of memory
}
#: ``shadow report`` before it streamed (commit a74aec7's parent): killed above 4 GB at 1M requests.
FILED_PROD = {1_000_000: {"shadow": float("inf")}}


def run_measured(cmd: list[str], env: dict) -> tuple[float, float, int, str, str, float]:
    """(seconds, peak RSS in GB, exit code, stderr tail, stdout, CPU seconds) of one child process.

    The peak comes from ``wait4`` of that child; this parent stays small, since a forked child's peak
    starts at the parent's resident size."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # run from the checkout itself: `python -c` puts the working directory first on sys.path
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=env["PYTHONPATH"].split(os.pathsep)[0]
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t
        err.seek(0)
        tail = err.read().decode(errors="replace")[-600:]
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    return seconds, usage.ru_maxrss / 1024**2, proc.returncode, tail, stdout, usage.ru_utime + usage.ru_stime


def _run_id(stdout: str) -> str | None:
    """The calibrated view's id in ``calibrate --json`` output (older versions let DuckDB's progress
    bar onto stdout, so the document is found rather than parsed whole)."""
    import re

    m = re.search(r'"run_id":\s*"([^"]+)"', stdout)
    return m.group(1) if m else None


def env_for(code: Path, db: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{code}{os.pathsep}{code / 'runtime'}"
    env["WORKBENCH_DB"] = str(db)
    env["COLUMNS"] = "200"
    return env


WB = [sys.executable, "-c", "from workbench.cli import main; main()"]
#: Commands on the run store of ``bench/scale_data.py``.
RUN_COMMANDS = ("report", "thresholds", "calibrate", "export", "compare")
#: Commands on the production-size inputs of ``bench/scale_prod.py`` (a shadow session, a decision log).
PROD_COMMANDS = ("shadow", "monitor")
#: Exit codes that are a result, not a failure: ``monitor`` exits 1 when its alarm fires.
OK_EXIT = {"monitor": (0, 1)}


def commands(run_id: str, out_dir: Path) -> dict[str, list[str]]:
    return {
        "report": [*WB, "report", run_id, "--split", "test", "--json"],
        "thresholds": [*WB, "thresholds", run_id, "--question", "intent", "--json"],
        "calibrate": [*WB, "calibrate", run_id, "--method", "temperature", "--json"],
        "export": [*WB, "export", run_id, "--format", "parquet", "--out", str(out_dir / "export.parquet"), "--force"],
        "compare": [*WB, "compare", run_id, "{view}", "--json"],
    }


def prod_inputs(d: Path, n: int, names: list[str]) -> tuple[dict[str, list[str]], float]:
    """``bench/scale_prod.py``'s inputs of ``names`` for N decisions under ``d`` (built in a child
    process when missing) and the commands on them; the seconds it took to build them."""
    sys.path.insert(0, str(ROOT / "bench"))
    import scale_prod

    t = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale_prod.py"), "--prepare-only", "--n", str(n)]
        + ["--workdir", str(d), "--commands", *names],
        env=env_for(ROOT, d / "unused.duckdb"),
        check=True,
    )
    files = scale_prod.input_files(d / f"n{n}_k77")
    return {name: [*WB, *scale_prod.command(name, files)] for name in names}, time.perf_counter() - t


def measure_run_commands(args, d: Path, n: int, names: list[str], keep: bool, rows: list) -> None:
    """Build (or, with ``--reuse``, copy back) the run store of N items and measure ``names`` on it."""
    db = d / "wb.duckdb"
    pristine, built_json = d / "pristine.duckdb", d / "built.json"
    if keep and pristine.exists() and built_json.exists():
        print(f"== {n:,} items × 77 options: reusing {pristine}", flush=True)
        for stale in d.glob("*"):
            if stale not in (pristine, built_json, d / "prod"):
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        shutil.copy(pristine, db)
        kept = json.loads(built_json.read_text())
        run_id, build = kept["run_id"], kept["seconds"]
    else:
        for stale in d.glob("*") if d.exists() else ():
            if not (keep and stale == d / "prod"):  # --reuse keeps the production inputs
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        d.mkdir(parents=True, exist_ok=True)
        print(f"== {n:,} items × 77 options: building the store", flush=True)
        # built in a child: a command forked from a large parent would inherit its peak RSS
        t = time.perf_counter()
        built = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "scale_data.py"), "--items", str(n), "--db", str(db)]
            + ["--workdir", str(d / "files")],
            env=env_for(ROOT, db),
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        print(built.stdout, end="", flush=True)
        run_id = json.loads(built.stdout.strip().splitlines()[-1])["run_id"]
        build = time.perf_counter() - t
        shutil.rmtree(d / "files", ignore_errors=True)
        if keep:
            shutil.copy(db, pristine)
            built_json.write_text(json.dumps({"run_id": run_id, "seconds": build}))
    size0 = db.stat().st_size
    rows.append({"items": n, "command": "build (datasets + runs import)", "seconds": build})
    cmds = commands(run_id, d)
    size1 = size0
    view = old_view = None
    old_db = None
    if args.old is not None and n <= args.old_max:
        old_db = d / "old.duckdb"  # the old code works on its own copy (it writes its own view)
        shutil.copy(db, old_db)
    for name in names:
        cmd = [view if c == "{view}" else c for c in cmds[name]]
        if "{view}" in cmds[name] and view is None:
            print(f"   {name}: skipped (needs the calibrated view of calibrate)")
            continue
        sec, rss, code, tail, stdout, cpu = run_measured(cmd, env_for(ROOT, db))
        row = {"items": n, "command": name, "seconds": sec, "cpu_s": cpu, "rss_gb": rss, "ok": code == 0}
        if code != 0:
            print(f"   {name} failed ({code}): {tail}", flush=True)
        if name == "calibrate":
            size1 = db.stat().st_size
            view = _run_id(stdout) if code == 0 else None
        if old_db is not None:
            o_cmd = [old_view if c == "{view}" else c for c in cmds[name]]
            o_sec, o_rss, o_code, _, o_out, _ = run_measured(o_cmd, env_for(args.old, old_db))
            row |= {"old_seconds": o_sec, "old_rss_gb": o_rss, "old_ok": o_code == 0}
            if name == "calibrate":
                row["old_store_growth"] = old_db.stat().st_size / size0 - 1
                old_view = _run_id(o_out) if o_code == 0 else "missing"
        elif n in FILED and name in FILED[n]:
            row["old_rss_gb"] = FILED[n][name]
            row["old_note"] = "filed"
        print(
            f"   {name:<11} {sec:8.1f} s ({cpu:.0f} s CPU)  {rss:6.2f} GB  {'ok' if code == 0 else 'FAILED'}",
            flush=True,
        )
        rows.append(row)
    rows.append({"items": n, "command": "store size (GB)", "size_gb": size0 / 1e9, "growth": size1 / size0 - 1})


def measure_prod_commands(args, d: Path, n: int, names: list[str], keep: bool, rows: list) -> None:
    """Build (or, with ``--reuse``, keep) ``bench/scale_prod.py``'s inputs of N decisions under
    ``d/prod`` and measure ``shadow report`` / ``monitor`` on them (the old code too, with ``--old``)."""
    prod = d / "prod"
    if not keep:
        shutil.rmtree(prod, ignore_errors=True)
    print(f"== {n:,} decisions × 77 options: {', '.join(names)} inputs under {prod}", flush=True)
    cmds, build = prod_inputs(prod, n, names)
    if build > 5:
        rows.append({"items": n, "command": f"build ({', '.join(names)} inputs)", "seconds": build})
    for name in names:
        # shadow report only reads its store (temporary tables aside): it runs on the kept file itself
        env = env_for(ROOT, prod / "unused.duckdb")
        sec, rss, code, tail, _, cpu = run_measured(cmds[name], env)
        ok = code in OK_EXIT.get(name, (0,))
        label = {"shadow": "shadow report"}.get(name, name)
        row = {"items": n, "command": label, "seconds": sec, "cpu_s": cpu, "rss_gb": rss, "ok": ok}
        if not ok:
            print(f"   {label} failed ({code}): {tail}", flush=True)
        if args.old is not None and n <= args.old_max:
            o_sec, o_rss, o_code, _, _, _ = run_measured(cmds[name], env_for(args.old, prod / "unused.duckdb"))
            row |= {"old_seconds": o_sec, "old_rss_gb": o_rss, "old_ok": o_code in OK_EXIT.get(name, (0,))}
        elif n in FILED_PROD and name in FILED_PROD[n]:
            row["old_rss_gb"] = FILED_PROD[n][name]
            row["old_note"] = "scale_prod"
        print(f"   {label:<13} {sec:8.1f} s ({cpu:.0f} s CPU)  {rss:6.2f} GB  {'ok' if ok else 'FAILED'}", flush=True)
        rows.append(row)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,3000000", help="comma-separated item counts")
    ap.add_argument("--full", action="store_true", help="add 10,000,000 items")
    ap.add_argument("--old", type=Path, default=None, help="checkout of the old code to run side by side")
    ap.add_argument("--old-max", type=int, default=1_000_000, help="largest size the old code runs at")
    ap.add_argument("--only", default=None, help="comma-separated commands (default: all)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep stores here (default: a temp dir)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --workdir: keep a pristine copy of each built store and start from it next time (no rebuild)",
    )
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.full and 10_000_000 not in sizes:
        sizes.append(10_000_000)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wb-scale-"))
    rows = []
    names = args.only.split(",") if args.only else [*RUN_COMMANDS, *PROD_COMMANDS]
    unknown = sorted(set(names) - {*RUN_COMMANDS, *PROD_COMMANDS})
    if unknown:
        ap.error(
            f"--only: unknown command(s) {', '.join(unknown)} (choose from {', '.join(RUN_COMMANDS + PROD_COMMANDS)})"
        )
    run_names = [c for c in names if c in RUN_COMMANDS]
    prod_names = [c for c in names if c in PROD_COMMANDS]
    keep = args.reuse and args.workdir is not None
    try:
        for n in sizes:
            d = work / f"n{n}"
            if run_names:
                measure_run_commands(args, d, n, run_names, keep, rows)
            if prod_names:
                measure_prod_commands(args, d, n, prod_names, keep, rows)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"{'items':>11}  {'command':<31} {'seconds':>8} {'CPU s':>7} {'peak GB':>8} {'old s':>8} {'old GB':>8} {'RSS ratio':>9}"
    )
    for r in rows:
        if "size_gb" in r:
            print(
                f"{r['items']:>11,}  {r['command']:<31} {r['size_gb']:>8.2f} GB;"
                f" calibrate added {100 * r['growth']:.2f}%"
            )
            continue
        rss, old = r.get("rss_gb"), r.get("old_rss_gb")
        cells = [
            f"{r['seconds']:>8.1f}",
            f"{r['cpu_s']:>7.0f}" if "cpu_s" in r else f"{'':>7}",
            f"{rss:>8.2f}" if rss is not None else f"{'':>8}",
            f"{r['old_seconds']:>8.1f}" if "old_seconds" in r else f"{'':>8}",
            (f"{old:>8.2f}" if old != float("inf") else f"{'OOM':>8}") if old is not None else f"{'':>8}",
            f"{old / rss:>8.1f}x" if old and rss and old != float("inf") else f"{'':>9}",
        ]
        note = {
            "filed": " (old: figure filed with issue 11)",
            "scale_prod": " (old: before it streamed, killed above 4 GB by bench/scale_prod.py)",
        }.get(r.get("old_note", ""), "")
        if "old_store_growth" in r:
            note += f" (old calibrate grew the store {100 * r['old_store_growth']:.0f}%)"
        if r.get("ok") is False or r.get("old_ok") is False:
            note += " FAILED" if r.get("ok") is False else " old FAILED"
        print(f"{r['items']:>11,}  {r['command']:<31} {' '.join(cells)}{note}")
    print(json.dumps(rows), file=open(work.parent / "scale-last.json", "w") if args.workdir else sys.stderr)


if __name__ == "__main__":
    main()
