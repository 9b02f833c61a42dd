"""Fuzz every file a user hands in with a bench-sized budget: schema, policy, dataset, answer and decision-log files.

    python bench/fuzz_files.py                      # 2,000 examples per test, random seeds
    python bench/fuzz_files.py --examples 5000 --only answer
    python bench/fuzz_files.py --strict             # also run the xfail-marked strictness properties

Runs the fuzz tests of the test suite (``tests/fuzz/``, ``tests/policy/test_policy_fuzz.py``) with
``WORKBENCH_FUZZ_EXAMPLES`` set and ``WORKBENCH_FUZZ_RANDOM=1`` (the suite's CI run is derandomised with a
smaller budget), one pytest process per file on one core (``-n 0``), and prints per test: examples run,
the outcome and the seconds taken. A failing example is printed by hypothesis in full (its minimal form).
Equivalent single command: ``WORKBENCH_FUZZ_EXAMPLES=2000 WORKBENCH_FUZZ_RANDOM=1 python -m pytest -n 0
-p no:cacheprovider tests/fuzz tests/policy/test_policy_fuzz.py --hypothesis-show-statistics``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = {
    "schema": "tests/fuzz/test_fuzz_schema_loading.py",
    "policy": "tests/policy/test_policy_fuzz.py",
    "dataset": "tests/fuzz/test_fuzz_dataset_import.py",
    "answer": "tests/fuzz/test_fuzz_answer_import.py",
    "decision_log": "tests/fuzz/test_fuzz_decision_logs.py",
    # the monitor's outcome files and the gate's requirements files (their own suites, same budget variable)
    "outcomes": "tests/fuzz/test_fuzz_outcomes.py",
    "requirements": "tests/fuzz/test_fuzz_requirements.py",
}
_TEST = re.compile(r"^(\S+\.py::\S+):\s*$")
_EXAMPLES = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")
_OUTCOME = re.compile(r"^(\S+\.py::\S+) (PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED)")


def run(path: str, examples: int, strict: bool) -> tuple[list[tuple[str, str, int, int]], float, str]:
    env = {**os.environ, "WORKBENCH_FUZZ_EXAMPLES": str(examples), "WORKBENCH_FUZZ_RANDOM": "1"}
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-rA", "-v", path]
    cmd += ["--hypothesis-show-statistics", *(["--runxfail"] if strict else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    outcomes: dict[str, str] = {}
    counts: dict[str, tuple[int, int]] = {}
    current, phase = None, ""
    for line in proc.stdout.splitlines():
        if m := _OUTCOME.match(line.strip()):
            outcomes.setdefault(m.group(1), m.group(2))
        if m := _TEST.match(line.strip()):
            current = m.group(1)
        elif "during " in line and " phase" in line:
            phase = line.split("during ", 1)[1].split(" phase", 1)[0]
        elif current and phase in ("generate", "reuse") and (m := _EXAMPLES.search(line)):
            ok, bad, _ = (int(g) for g in m.groups())
            prev = counts.get(current, (0, 0))
            counts[current] = (prev[0] + ok, prev[1] + bad)
    rows = [(t, outcomes.get(t, "?"), *counts.get(t, (0, 0))) for t in sorted(set(outcomes) | set(counts))]
    return rows, seconds, proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=2000, help="examples per test (default 2000)")
    ap.add_argument("--only", choices=sorted(FILES), action="append", help="fuzz only these files (repeatable)")
    ap.add_argument("--strict", action="store_true", help="run the xfail-marked properties as plain tests")
    ap.add_argument("--log", type=Path, help="write pytest's full output here")
    args = ap.parse_args()
    total, failed = 0, []
    logs = []
    for name in args.only or [n for n, f in FILES.items() if (ROOT / f).is_file()]:
        rows, seconds, out = run(FILES[name], args.examples, args.strict)
        logs.append(out)
        print(f"{name}: {FILES[name]} ({seconds:.0f} s)")
        for test, outcome, ok, bad in rows:
            total += ok + bad
            print(f"  {test.split('::')[-1]:<60} {outcome:<7} {ok:>6} examples passed {bad:>3} failed")
            if outcome in ("FAILED", "ERROR"):
                failed.append(test)
    print(f"{total:,} examples; {len(failed)} failing test(s){': ' + ', '.join(failed) if failed else ''}")
    if args.log:
        args.log.write_text("\n".join(logs))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
