"""A read-only command while another process writes the store (issue 27 §4): before/after, with its floor.

    python bench/busy_store.py STORE RUN_ID [--base /path/to/base/checkout] [--question intent]

Runs ``workbench thresholds RUN_ID -q QUESTION --json`` in a subprocess three ways and prints exit code,
CPU seconds (user+sys of the child) and peak RSS for each:

- *floor*: the store is free (the command reads the live file read-only);
- *busy*: a second process holds the store read-write (as a ``workbench run`` does): the command reads
  a snapshot (a copy of the file and its WAL in a temporary directory, removed at exit);
- *busy, base*: the same with the checkout given by ``--base`` (before: exit 2 with DuckDB's lock text).

The store is not modified (the holder opens it read-write and commits nothing).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HOLDER = "import sys, duckdb; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); sys.stdin.readline()"


def _measure(code_root: str, args: list[str]) -> tuple[int, float, float, str, str]:
    """Exit code, CPU s (user+sys) and peak RSS (MiB) of the command alone (GNU time), and its stderr."""
    env = {**os.environ, "PYTHONPATH": f"{code_root}:{code_root}/runtime"}
    # `python -c` puts the working directory first on sys.path: run in code_root so it is that code
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        proc = subprocess.run(
            [
                "/usr/bin/time",
                "-q",
                "-f",
                "%U %S %M",
                "-o",
                tf.name,
                sys.executable,
                "-c",
                "from workbench.cli import main; main()",
                *args,
            ],
            env=env,
            cwd=code_root,
            capture_output=True,
            text=True,
        )
        user, sys_s, rss_kb = tf.read().split()[-3:]
    return proc.returncode, float(user) + float(sys_s), int(rss_kb) / 1024, proc.stderr.strip(), proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("run_id")
    ap.add_argument("--question", default="intent")
    ap.add_argument("--base", default=None, help="checkout of the code before the change")
    a = ap.parse_args()
    a.store = os.path.abspath(a.store)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = ["--db", a.store, "thresholds", a.run_id, "-q", a.question, "--json"]
    size = os.path.getsize(a.store) / 2**20
    print(f"store {a.store}: {size:.1f} MiB; command: workbench {' '.join(args[2:])}")
    rows = [("floor (store free)", here, False), ("busy (writer holds it)", here, True)]
    if a.base:
        rows.append(("busy, base checkout", a.base, True))
    outputs = []
    for label, root, busy in rows:
        holder = None
        if busy:
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, a.store], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        try:
            t0 = time.perf_counter()
            rc, cpu, rss, err, out = _measure(root, args)
            wall = time.perf_counter() - t0
        finally:
            if holder is not None:
                holder.communicate("stop\n", timeout=60)
        if rc == 0:
            outputs.append(out)
        tail = err.splitlines()[-1] if err else ""
        print(
            f"{label:24s} exit {rc}  cpu {cpu:6.2f} s  peak RSS {rss:5.0f} MiB  wall {wall:5.2f} s"
            f"  stderr {len(err)} chars: {tail[:160]}"
        )
    print(f"JSON documents of the successful runs identical: {len(set(outputs)) == 1}")


if __name__ == "__main__":
    main()
