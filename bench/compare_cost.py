"""`compare` against its floor, `report`: CPU seconds and peak RSS of both on one store, this checkout and an older one.

Issue 29 §6 asks that ``workbench compare RUN VIEW`` (a run and its calibrated view, as
``bench/scale.py`` runs it) cost at most 3x ``workbench report RUN --split test`` in CPU seconds. This
bench runs both commands as child processes (CPU = user + system of the child, peak RSS from ``wait4``,
as ``bench/scale.py``) on a store built by ``bench/scale.py --workdir DIR --reuse`` (its
``n<size>/pristine.duckdb`` and ``built.json``), with this checkout and, with ``--old PATH``, an older
checkout on the same store, and checks that both versions print the same ``compare --json`` (largest
difference of any number; 0 means identical).

    python bench/scale.py --sizes 1000000 --only report --workdir /data/wb-scale --reuse   # build once
    python bench/compare_cost.py --workdir /data/wb-scale --sizes 1000000 --old /tmp/wb-old [--repeat 3]

The calibrated view is made once per store copy (``workbench calibrate RUN --method temperature``,
not measured). Prints, per size: each command's CPU s and GB for this checkout and the old one, and
the ratio compare / report (the target: <= 3). ``--repeat R`` measures both checkouts R times,
interleaved (new, old, new, old, …), and reports each command's median CPU seconds and each repeat's
ratio: on a shared machine one pair of runs moves by ±10%.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from scale import WB, env_for, run_measured  # noqa: E402  (bench/scale.py: the same child-process measure)

TARGET = 3.0


def _max_difference(a, b) -> float:
    """Largest absolute difference between the numbers of two JSON documents (inf when they differ in shape)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return math.inf
        return max((_max_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return math.inf
        return max((_max_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return 0.0 if a == b else math.inf
    if math.isnan(a) and math.isnan(b):
        return 0.0
    return abs(float(a) - float(b))


def _view_of(code: Path, db: Path, run_id: str) -> str:
    """The calibrated view of ``run_id`` in ``db`` (made with ``code`` when there is none)."""
    import duckdb

    def find() -> str | None:
        con = duckdb.connect(str(db), read_only=True)
        try:
            row = con.execute(
                "SELECT run_id FROM runs WHERE kind = 'calibrated' AND parent_run_id = ? ORDER BY run_id LIMIT 1",
                [run_id],
            ).fetchone()
        finally:
            con.close()
        return row[0] if row else None

    view = find()
    if view is None:
        _, _, code_, tail, _, _ = run_measured(
            [*WB, "calibrate", run_id, "--method", "temperature", "--json"], env_for(code, db)
        )
        if code_ != 0:
            raise SystemExit(f"calibrate failed: {tail}")
        view = find()
    assert view is not None
    return view


def measure(code: Path, db: Path, run_id: str, view: str) -> dict:
    cmds = {
        "report": [*WB, "report", run_id, "--split", "test", "--json"],
        "compare": [*WB, "compare", run_id, view, "--json"],
    }
    out = {}
    for name, cmd in cmds.items():
        sec, rss, rc, tail, stdout, cpu = run_measured(cmd, env_for(code, db))
        if rc != 0:
            raise SystemExit(f"{name} failed with {code}: {tail}")
        out[name] = {"seconds": sec, "cpu_s": cpu, "rss_gb": rss, "stdout": stdout}
        print(f"   {code}: {name:<8} {cpu:7.1f} CPU s {sec:7.1f} s wall {rss:6.2f} GB", flush=True)
    return out


def _median_run(runs: list[dict]) -> dict:
    """Per command, the measurement with the median CPU seconds (its GB and output with it)."""
    out = {}
    for name in runs[0]:
        ranked = sorted((m[name] for m in runs), key=lambda x: x["cpu_s"])
        out[name] = ranked[(len(ranked) - 1) // 2]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True, help="bench/scale.py's --workdir (with --reuse)")
    ap.add_argument("--sizes", default="1000000", help="comma-separated item counts built there")
    ap.add_argument("--old", type=Path, default=None, help="checkout of the old code to run side by side")
    ap.add_argument("--repeat", type=int, default=1, help="measurements of each checkout, interleaved (medians)")
    args = ap.parse_args(argv)
    rows = []
    for n in (int(s) for s in args.sizes.split(",") if s):
        d = args.workdir / f"n{n}"
        pristine, built = d / "pristine.duckdb", d / "built.json"
        if not (pristine.exists() and built.exists()):
            raise SystemExit(f"no store for {n:,} items in {d}: run bench/scale.py --sizes {n} --workdir ... --reuse")
        run_id = json.loads(built.read_text())["run_id"]
        db = d / "compare_cost.duckdb"
        shutil.copy(pristine, db)
        try:
            view = _view_of(ROOT, db, run_id)
            print(f"== {n:,} items × 77 options: compare {run_id} {view}", flush=True)
            news, olds = [], []
            for _ in range(max(1, args.repeat)):
                news.append(measure(ROOT, db, run_id, view))
                if args.old is not None:
                    olds.append(measure(args.old, db, run_id, view))
            new, old = _median_run(news), (_median_run(olds) if olds else None)
            ratios = [m["compare"]["cpu_s"] / m["report"]["cpu_s"] for m in news]
            print(f"   compare / report per repeat: {', '.join(f'{r:.2f}x' for r in ratios)}", flush=True)
            if olds:
                old_ratios = [m["compare"]["cpu_s"] / m["report"]["cpu_s"] for m in olds]
                print(f"   old code per repeat: {', '.join(f'{r:.2f}x' for r in old_ratios)}", flush=True)
        finally:
            db.unlink(missing_ok=True)
        diff = (
            _max_difference(json.loads(new["compare"]["stdout"]), json.loads(old["compare"]["stdout"])) if old else None
        )
        rows.append((n, new, old, diff))
    print()
    print(f"{'items':>11}  {'command':<8} {'CPU s':>7} {'GB':>6} {'old CPU s':>9} {'old GB':>6} {'CPU new/old':>11}")
    for n, new, old, diff in rows:
        for name in ("report", "compare"):
            a, b = new[name], (old or {}).get(name)
            cells = f"{a['cpu_s']:>7.1f} {a['rss_gb']:>6.2f}"
            cells += f" {b['cpu_s']:>9.1f} {b['rss_gb']:>6.2f} {a['cpu_s'] / b['cpu_s']:>10.2f}x" if b else ""
            print(f"{n:>11,}  {name:<8} {cells}")
        ratio = new["compare"]["cpu_s"] / new["report"]["cpu_s"]
        line = f"{n:>11,}  compare / report (floor): {ratio:.2f}x (target <= {TARGET:g}x)"
        if old:
            line += f"; old code {old['compare']['cpu_s'] / old['report']['cpu_s']:.2f}x"
            line += f"; compare --json new vs old: largest difference {diff:.3g}"
        print(line)


if __name__ == "__main__":
    main()
