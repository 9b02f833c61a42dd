"""Store size and the scan-bound commands against DuckDB's own floor, old code and new side by side.

For one answers file of ``bench/scale_data.py`` (wide, N items × 77 options, 4-decimal values) and a store
holding its dataset (``--base``), each in a child process (CPU seconds and peak RSS from ``wait4``):

1. ``runs import`` into a copy of ``--base`` (``bench/answer_import.py``), with this checkout and, with
   ``--old PATH``, with the old checkout into another copy (the old code cannot read a newer store);
2. the floor: DuckDB's own ``CREATE TABLE AS`` of the same Parquet file in a fresh database (the size the
   answers need), and a scan of every probability in it (the least a scan-bound command reads);
3. ``report`` and ``thresholds`` (``bench/scale.py``'s command lines) on each store.

Prints the run's share of the store (store after the import less ``--base``) against the floor, the whole
store against the floor plus the dataset's own ``CREATE TABLE AS`` (``--dataset-file``), and CPU seconds /
peak RSS of each command beside its floor::

    python bench/store_size.py --prepare 1000000 --base /tmp/s1m/base.duckdb --answers /tmp/s1m/answers.parquet \\
        --dataset-file /tmp/s1m/dataset.parquet --dataset scale-1000000 --work /tmp/s1m/cmp --old /work/base

``--prepare N`` first writes ``bench/scale_data.py``'s files of N items (to the paths given) and a store
holding only their dataset (``--base``), with the ``--old`` code when given (so that both codes can read
it); without it the three must exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale import commands, env_for, run_measured  # noqa: E402

#: The floor scan: every probability of the floor table read once (sum, so nothing is optimised away).
FLOOR_SCAN = "SELECT count(*), sum(list_sum(intent)), sum(list_max(intent)) FROM a"


def _import(code: Path, args, db: Path) -> dict:
    """``bench/answer_import.py`` of ``code`` in a child process: its JSON line, CPU s and peak RSS."""
    cmd = [sys.executable, str(code / "bench" / "answer_import.py"), "--base", str(args.base)]
    cmd += ["--answers", str(args.answers), "--dataset", args.dataset, "--db", str(db)]
    sec, rss, code_, tail, out, cpu = run_measured(cmd, env_for(code, db))
    if code_ != 0:
        raise SystemExit(f"import with {code} failed: {tail}")
    doc = json.loads(out.strip().splitlines()[-1])
    return {"run_id": doc["run_id"], "seconds": sec, "cpu_s": cpu, "rss_gb": rss, "size": db.stat().st_size}


def _prepare(args) -> None:
    """Write bench/scale_data.py's files of ``--prepare`` items and a store of their dataset only (child process)."""
    code = args.old or ROOT
    work = args.answers.parent
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'bench')\n"
        "from scale_data import QUESTION, schema_dict, write_scale_files\n"
        "from workbench.schema import DecisionSchema\n"
        "from workbench.store.datasets import import_dataset\n"
        "from workbench.store.import_spec import ImportSpec\n"
        "from workbench.store.db import connect\n"
        f"ds, ans = write_scale_files(Path({str(work)!r}), {args.prepare})\n"
        f"Path(ans).rename({str(args.answers)!r}); Path(ds).rename({str(args.dataset_file or work / 'dataset.parquet')!r})\n"
        "schema = DecisionSchema.from_dict(schema_dict(77), source='bench')\n"
        f"con = connect({str(args.base)!r})\n"
        f"spec = ImportSpec(name={args.dataset!r}, text_column='text', id_column='id', split_column='split',"
        " labels={QUESTION: 'label'})\n"
        f"import_dataset(con, [{str(args.dataset_file or work / 'dataset.parquet')!r}], spec, schema)\n"
        "con.close()\n"
    )
    work.mkdir(parents=True, exist_ok=True)
    args.base.unlink(missing_ok=True)
    sec, rss, rc, tail, _, cpu = run_measured([sys.executable, "-c", script], env_for(code, args.base))
    if rc != 0:
        raise SystemExit(f"--prepare failed: {tail}")
    print(f"== prepared {args.prepare:,} items in {sec:.0f} s", flush=True)


def _floor(args, work: Path) -> dict:
    """DuckDB's ``CREATE TABLE AS`` of the answers (and dataset) file, then a scan of it, in child processes."""
    out = {}
    for name, files in (("answers", [args.answers]), ("both", [args.answers, args.dataset_file])):
        if None in files:
            continue
        db = work / f"floor_{name}.duckdb"
        db.unlink(missing_ok=True)
        sql = "; ".join(
            f"CREATE TABLE {t} AS SELECT * FROM read_parquet('{f}')" for t, f in zip(("a", "d"), files, strict=False)
        )
        code = f"import duckdb; c = duckdb.connect({str(db)!r}); c.execute({sql!r}); c.execute('CHECKPOINT'); c.close()"
        sec, rss, rc, tail, _, cpu = run_measured([sys.executable, "-c", code], env_for(ROOT, db))
        if rc != 0:
            raise SystemExit(f"floor failed: {tail}")
        out[name] = db.stat().st_size
        if name == "answers":
            scan = f"import duckdb; c = duckdb.connect({str(db)!r}, read_only=True); print(c.execute({FLOOR_SCAN!r}).fetchall())"
            sec, rss, rc, tail, _, cpu = run_measured([sys.executable, "-c", scan], env_for(ROOT, db))
            out["scan"] = {"seconds": sec, "cpu_s": cpu, "rss_gb": rss}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="store holding only the dataset (left untouched)")
    ap.add_argument("--answers", type=Path, required=True, help="the wide answers Parquet of bench/scale_data.py")
    ap.add_argument("--dataset", required=True, help="the dataset's name in --base")
    ap.add_argument("--dataset-file", type=Path, default=None, help="the dataset's Parquet (whole-store floor)")
    ap.add_argument("--work", type=Path, required=True, help="directory for the copies (kept)")
    ap.add_argument("--old", type=Path, default=None, help="checkout of the old code to run side by side")
    ap.add_argument("--commands", default="report,thresholds", help="commands to time on each store ('' for none)")
    ap.add_argument("--prepare", type=int, default=0, help="first write the files and dataset store of N items")
    ap.add_argument("--reuse", action="store_true", help="keep each side's import from an earlier run in --work")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        _prepare(args)
    base = args.base.stat().st_size
    sides = {"new": ROOT} | ({"old": args.old} if args.old else {})
    results: dict[str, dict] = {}
    for side, code in sides.items():
        db = args.work / f"{side}.duckdb"
        print(f"== runs import with the {side} code", flush=True)
        kept = db.with_suffix(".json")
        if args.reuse and kept.exists() and db.exists():
            results[side] = json.loads(kept.read_text())
            print("   (reusing the import of an earlier run)", flush=True)
        else:
            results[side] = _import(code, args, db)
            kept.write_text(json.dumps(results[side]))
        for name in [c for c in args.commands.split(",") if c]:
            cmd = commands(results[side]["run_id"], args.work)[name]
            sec, rss, rc, tail, _, cpu = run_measured(cmd, env_for(code, db))
            if rc != 0:
                print(f"   {side} {name} failed: {tail}", flush=True)
            results[side][name] = {"seconds": sec, "cpu_s": cpu, "rss_gb": rss, "ok": rc == 0}
            print(f"   {name:<11} {cpu:7.1f} s CPU  {rss:5.2f} GB", flush=True)
    print("== floor: DuckDB's CREATE TABLE AS of the same Parquet, then a scan of every probability", flush=True)
    floor = _floor(args, args.work)
    mb = 1e6
    print()
    print(
        f"{'':<6} {'store MB':>9} {'run MB':>8} {'x floor':>8} {'whole x':>8}   {'import CPU s':>12} {'GB':>5}", end=""
    )
    names = [c for c in args.commands.split(",") if c]
    for name in names:
        print(f"   {name + ' CPU s':>16} {'GB':>5}", end="")
    print()
    for side, r in results.items():
        run = r["size"] - base
        whole = f"{r['size'] / floor['both']:8.2f}" if "both" in floor else f"{'':>8}"
        print(
            f"{side:<6} {r['size'] / mb:9.0f} {run / mb:8.0f} {run / floor['answers']:8.2f} {whole}"
            f"   {r['cpu_s']:12.1f} {r['rss_gb']:5.2f}",
            end="",
        )
        for name in names:
            c = r[name]
            ratio = c["cpu_s"] / floor["scan"]["cpu_s"]
            print(f"   {c['cpu_s']:9.1f} ({ratio:4.1f}x) {c['rss_gb']:5.2f}", end="")
        print()
    scan = floor["scan"]
    both = f"{floor['both'] / mb:9.0f}" if "both" in floor else f"{'':>9}"
    print(f"{'floor':<6} {both} {floor['answers'] / mb:8.0f} {1:8.2f} {'':>8}   {'':>12} {'':>5}", end="")
    for _ in names:
        print(f"   {scan['cpu_s']:9.1f} (scan) {scan['rss_gb']:5.2f}", end="")
    print()
    print(
        f"(dataset store --base: {base / mb:.0f} MB; 'x floor': the run's share / the answers' CREATE TABLE AS;"
        " 'whole x': the store / dataset + answers CREATE TABLE AS; command ratios are to the floor scan)"
    )
    print(json.dumps({"base": base, "floor": floor, "results": results}), file=sys.stderr)


if __name__ == "__main__":
    main()
