"""A YAML alias bomb in a schema: time and peak memory until it is refused, against a plain
``yaml.safe_load`` of the same text (the baseline: it builds the shared graph, and anything that
walks it — pydantic, the canonical JSON — expands it), side by side.

    python bench/schema_alias_bomb.py --levels 7
    python bench/schema_alias_bomb.py --levels 8 --no-baseline   # a 494-byte bomb like issue 14's

Before the fix ``workbench schema validate`` on the 8-level bomb took 35 s and 652 MiB here (and
reported it valid); ``--levels 7`` keeps the baseline's expansion to some seconds.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

from workbench.errors import SchemaError
from workbench.schema.questions import loads_schema


def bomb(levels: int, fan: int = 9) -> str:
    lines = ["a0: &a0 [" + ",".join(['"lol"'] * fan) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * fan) + "]" for i in range(1, levels)]
    body = "\n".join("      " + line for line in lines)
    return f"name: bomb\nquestions:\n  q:\n    type: noul\n    instructions:\n{body}\n"


def measure(fn) -> tuple[float, float, str]:
    """Seconds (a plain run) and peak traced MiB (a second run under tracemalloc) of ``fn``."""
    t0 = time.perf_counter()
    try:
        value = fn()
        outcome = f"accepted ({type(value).__name__})"
    except SchemaError as exc:
        outcome = f"refused: {exc.message[:60]}"
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    try:
        fn()
    except SchemaError:
        pass
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, outcome


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", type=int, default=7)
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    text = bomb(args.levels)
    print(f"bomb: {len(text)} bytes, expands to 9**{args.levels} = {9**args.levels:,} strings")
    s, m, out = measure(lambda: loads_schema(text, source="bomb.yaml"))
    print(f"workbench loads_schema     {s:8.3f} s  peak {m:8.1f} MiB  {out}")
    if not args.no_baseline:
        import yaml

        s, m, _ = measure(lambda: len(json.dumps(yaml.safe_load(text))))
        print(f"safe_load + json.dumps     {s:8.3f} s  peak {m:8.1f} MiB  (expanded)")


if __name__ == "__main__":
    main()
