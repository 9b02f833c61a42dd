"""Start-up: wall and CPU seconds of short CLI calls, side by side with bare ``python -c pass``.

Runs each command as its own process, round-robin (floor, old, new, floor, old, new, …) so that a busy
machine slows every side alike, and reads the child's CPU (user + sys) and peak RSS from ``wait4``:

    python -c pass                 the floor: an interpreter that imports nothing
    workbench --version
    workbench --help
    workbench runs list            on a small real store (a synthetic dataset and one imported run)

Each side runs the ``workbench`` console script of this interpreter's environment with its checkout on
``PYTHONPATH`` (``<checkout>:<checkout>/runtime``); ``--old`` is the checkout to compare with (default
``/work/base`` when it exists), the new side is this checkout. Each side gets its own store, built by its
own ``bench/scale_data.py`` (``--items``, default 2,000), so a store-format change cannot break a side.

    python bench/startup.py                         # 7 runs of each, old = /work/base
    python bench/startup.py --runs 11 --old /tmp/wb-old
    python bench/startup.py --old ''                # this checkout only

Bytecode is cached as in an installed package: every process writes and reads its ``.pyc`` files under
one temporary ``PYTHONPYCACHEPREFIX`` (filled by an uncounted first run), so neither checkout is touched.
``--no-bytecode-cache`` measures instead with ``PYTHONDONTWRITEBYTECODE=1`` and no cache (every start
compiles the checkout's own sources, as a read-only checkout without ``__pycache__`` does).

Prints the median wall and CPU seconds, the median peak RSS and each median's ratio to the floor's (CPU
seconds are the fair figure on a shared machine), and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: list[tuple[str, list[str]]] = [
    ("workbench --version", ["--version"]),
    ("workbench --help", ["--help"]),
    ("workbench runs list", ["runs", "list"]),
]


def measure(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, CPU s = user + sys, peak RSS MB) of one child process; fails loudly on a non-zero exit."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {code}: {err.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def base_env(pycache: Path | None) -> dict[str, str]:
    """This environment without ``PYTHONPATH``; bytecode cached under ``pycache`` (None: never cached)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def side_env(checkout: Path, db: Path, pycache: Path | None) -> dict[str, str]:
    env = base_env(pycache)
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(checkout / "runtime")])
    env["WORKBENCH_DB"] = str(db)
    env["COLUMNS"] = "120"
    return env


def build_store(checkout: Path, work: Path, items: int, pycache: Path | None) -> Path:
    """A store with a synthetic dataset of ``items`` and one imported run, built by ``checkout``'s own code."""
    db = work / "startup.duckdb"
    subprocess.run(
        [sys.executable, str(checkout / "bench" / "scale_data.py"), "--items", str(items), "--db", str(db)],
        env=side_env(checkout, db, pycache),
        cwd=work,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return db


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="runs of each command per side (the median is shown; ≥ 5)")
    ap.add_argument(
        "--old",
        default="/work/base" if Path("/work/base/workbench").is_dir() else "",
        help="checkout to compare with ('' for none)",
    )
    ap.add_argument("--items", type=int, default=2000, help="items of the store `runs list` reads")
    ap.add_argument("--no-bytecode-cache", action="store_true", help="compile every source at every start")
    args = ap.parse_args(argv)
    if args.runs < 5:
        ap.error("--runs must be at least 5")
    script = shutil.which("workbench", path=str(Path(sys.executable).parent)) or shutil.which("workbench")
    if not script:
        raise SystemExit("no `workbench` console script next to this interpreter (pip install -e .)")

    sides = [("new", ROOT)] + ([("old", Path(args.old).resolve())] if args.old else [])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="wb-startup-") as tmp:
        pycache = None if args.no_bytecode_cache else Path(tmp) / "pycache"
        envs: dict[str, tuple[dict[str, str], Path]] = {}
        for name, checkout in sides:
            work = Path(tmp) / name
            work.mkdir()
            db = build_store(checkout, work, args.items, pycache)
            envs[name] = (side_env(checkout, db, pycache), work)

        floor_env = base_env(pycache)
        jobs: list[tuple[str, str, list[str], dict[str, str], Path]] = [
            ("python -c pass", "floor", [sys.executable, "-c", "pass"], floor_env, Path(tmp))
        ]
        for label, cli_args in COMMANDS:
            for name, _ in sorted(sides, key=lambda s: s[0] != "old"):
                env, work = envs[name]
                jobs.append((label, name, [script, *cli_args], env, work))

        for _, _, cmd, env, cwd in jobs:  # warm the file cache once; not counted
            measure(cmd, env, cwd)
        samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {(j[0], j[1]): [] for j in jobs}
        for _ in range(args.runs):
            for label, name, cmd, env, cwd in jobs:
                samples[(label, name)].append(measure(cmd, env, cwd))
    load_after = os.getloadavg()

    med = {key: tuple(statistics.median(s[i] for s in runs) for i in range(3)) for key, runs in samples.items()}
    fw, fc, fr = med[("python -c pass", "floor")]
    print(f"start-up, median of {args.runs} runs each (round-robin); new = {ROOT}, old = {args.old or '-'}")
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f}"
    )
    cache = "none (PYTHONDONTWRITEBYTECODE=1)" if args.no_bytecode_cache else "cached (PYTHONPYCACHEPREFIX)"
    print(f"{os.cpu_count()} CPUs; store: {args.items:,} items, one run; bytecode {cache}")
    print()
    head = f"{'command':<22}{'side':<7}{'wall s':>8}{'×floor':>8}{'CPU s':>8}{'×floor':>8}{'RSS MB':>8}{'×floor':>8}"
    print(head)
    print("-" * len(head))
    for (label, name), (w, c, r) in med.items():
        print(f"{label:<22}{name:<7}{w:8.3f}{w / fw:8.1f}{c:8.3f}{c / fc:8.1f}{r:8.0f}{r / fr:8.1f}")
    if args.old:
        print()
        print(f"{'command':<22}{'old/new wall':>14}{'old/new CPU':>14}{'old/new RSS':>14}")
        for label, _ in COMMANDS:
            (ow, oc, orr), (nw, nc, nr) = med[(label, "old")], med[(label, "new")]
            print(f"{label:<22}{ow / nw:14.1f}{oc / nc:14.1f}{orr / nr:14.1f}")


if __name__ == "__main__":
    main()
