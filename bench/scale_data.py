"""Synthetic scale data: a dataset of N items with one 77-option choice question, and a run answering it.

``make_scale_store(db_path, n_items)`` writes (in ``workdir``, default next to the store) a dataset
Parquet and an answers Parquet in the **wide** layout of ``workbench runs import``, chunk by chunk
(:data:`CHUNK` rows at a time: never n × k in memory), then imports both through the library
(``import_dataset`` and ``import_answers``, what ``workbench datasets import`` / ``runs import`` call)
and prints timings. ``bench/scale.py`` calls it; run it alone to time the imports::

    python bench/scale_data.py --items 1000000 --db /tmp/scale.duckdb [--k 77] [--seed 0]

``--import-bench`` times ``workbench datasets import`` alone (a child process per run: CPU s and peak RSS), on
CSV and Parquet, with and without ``--schema``, beside DuckDB reading the same file into a table (the floor),
for this checkout and ``--old`` (before)::

    python bench/scale_data.py --import-bench --items 1000000 --old /work/base --workdir /tmp/ib [--keep]

The probabilities look like a provider's: a label-dependent peak (top-1 accuracy ≈ 80 %), overconfident
(logits × :data:`OVERCONFIDENCE`, so temperature scaling has something to fix), values rounded to 4
decimals like Clef's (sums off by up to ~0.004, re-normalised on import), and ≈ 0.5 % failures
(NULL vectors of kind ``server`` or ``timeout``).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Rows generated and written per chunk (one Parquet row group).
CHUNK = 200_000
#: Signal added to the true option's logit (≈ 80 % top-1 accuracy at 77 options).
SIGNAL = 3.3
#: Logits are multiplied by this before the softmax: overconfident (mean top probability ≈ 0.84 at ≈ 0.79 accuracy).
OVERCONFIDENCE = 4.0
#: Share of items whose call failed.
FAILURE_RATE = 0.005
QUESTION = "intent"


def option_names(k: int) -> list[str]:
    return [f"opt_{i:03d}" for i in range(k)]


def schema_dict(k: int) -> dict:
    return {
        "name": f"scale-{k}",
        "description": "Synthetic scale benchmark (bench/scale_data.py).",
        "questions": {
            QUESTION: {
                "type": "choice",
                "instructions": "Which synthetic intent is this?",
                "criteria": {o: f"synthetic option {o}" for o in option_names(k)},
            }
        },
    }


def _chunk_probs(rng: np.random.Generator, labels: np.ndarray, k: int) -> np.ndarray:
    """Rounded provider-like probabilities for ``labels`` (m, k), computed in float64 then rounded."""
    m = len(labels)
    z = rng.standard_normal((m, k))
    z[np.arange(m), labels] += SIGNAL
    z *= OVERCONFIDENCE
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return np.round(z, 4, out=z)


def write_scale_files(workdir: Path, n_items: int, k: int = 77, seed: int = 0, splits=("calibration", "test")):
    """Write ``dataset.parquet`` (id, text, label, split) and ``answers.parquet`` (wide) in chunks.

    Splits are assigned in equal proportions, item by item (seeded). Returns the two paths.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    opts = np.array(option_names(k), dtype=object)
    rng = np.random.default_rng(seed)
    ds_path, ans_path = workdir / "dataset.parquet", workdir / "answers.parquet"
    ds_schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("label", pa.string()), ("split", pa.string())])
    ans_schema = pa.schema(
        [("item_id", pa.string()), (QUESTION, pa.list_(pa.float64())), (f"{QUESTION}__failure_kind", pa.string())]
    )
    split_arr = np.array(list(splits), dtype=object)
    with pq.ParquetWriter(ds_path, ds_schema) as dsw, pq.ParquetWriter(ans_path, ans_schema) as aw:
        for start in range(0, n_items, CHUNK):
            m = min(CHUNK, n_items - start)
            idx = np.arange(start, start + m)
            ids = pa.array(np.char.add("item-", np.char.zfill(idx.astype(str), 9)).astype(object), type=pa.string())
            labels = rng.integers(0, k, m)
            text = pa.compute.binary_join_element_wise("synthetic message ", ids, "")
            split = split_arr[rng.integers(0, len(split_arr), m)]
            dsw.write_table(
                pa.table(
                    [ids, text, pa.array(opts[labels], type=pa.string()), pa.array(split, type=pa.string())],
                    schema=ds_schema,
                )
            )
            probs = _chunk_probs(rng, labels, k)
            failed = rng.random(m) < FAILURE_RATE
            offsets = np.zeros(m + 1, dtype=np.int32)
            np.cumsum(np.where(failed, 0, k), out=offsets[1:])
            vec = pa.ListArray.from_arrays(
                pa.array(offsets), pa.array(probs[~failed].reshape(-1)), mask=pa.array(failed)
            )
            kinds = np.where(failed, np.where(rng.random(m) < 0.5, "server", "timeout"), None).astype(object)
            aw.write_table(pa.table([ids, vec, pa.array(kinds, type=pa.string())], schema=ans_schema))
            del probs, vec
    return ds_path, ans_path


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def make_scale_store(
    db_path: str | Path,
    n_items: int,
    k: int = 77,
    seed: int = 0,
    splits=("calibration", "test"),
    workdir: str | Path | None = None,
    verbose: bool = True,
) -> tuple[str, str]:
    """Build a store with a synthetic dataset of ``n_items`` and one imported run; returns ``(dataset, run_id)``.

    Files go to ``workdir`` (default: ``<db>.scale-files``). Prints the time (and this process's
    peak RSS so far) of each step when ``verbose``.
    """
    import yaml

    from workbench.schema import DecisionSchema
    from workbench.store.answer_import import import_answers
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec

    db_path = Path(db_path)
    work = Path(workdir) if workdir else db_path.with_name(db_path.name + ".scale-files")
    work.mkdir(parents=True, exist_ok=True)
    name = f"scale-{n_items}"
    schema = DecisionSchema.from_dict(schema_dict(k), source="bench/scale_data.py")
    (work / "schema.yaml").write_text(yaml.safe_dump(schema_dict(k), sort_keys=False))

    def say(step: str, t: float) -> None:
        if verbose:
            print(f"  {step:<28} {time.perf_counter() - t:8.1f} s   peak RSS {_peak_rss_gb():5.2f} GB", flush=True)

    t = time.perf_counter()
    ds_path, ans_path = write_scale_files(work, n_items, k, seed, splits)
    say(f"write files ({n_items:,} x {k})", t)
    con = connect(db_path)
    try:
        t = time.perf_counter()
        spec = ImportSpec(
            name=name, text_column="text", id_column="id", split_column="split", labels={QUESTION: "label"}
        )
        import_dataset(con, [ds_path], spec, schema)
        say("datasets import", t)
        t = time.perf_counter()
        run_id = import_answers(con, ans_path, dataset=name, schema=schema, name=f"{name}-synthetic", model="synthetic")
        say("runs import", t)
    finally:
        con.close()
    return name, run_id


def write_dataset_file(path: Path, n_items: int, k: int = 77, seed: int = 0, splits=("calibration", "test")) -> Path:
    """The dataset file alone (id, text, label, split) as Parquet or CSV (by ``path``'s suffix), in chunks."""
    import pyarrow.csv as pcsv

    path.parent.mkdir(parents=True, exist_ok=True)
    opts = np.array(option_names(k), dtype=object)
    split_arr = np.array(list(splits), dtype=object)
    rng = np.random.default_rng(seed)
    ds_schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("label", pa.string()), ("split", pa.string())])
    csv_out = path.suffix.lower() == ".csv"
    writer = pcsv.CSVWriter(path, ds_schema) if csv_out else pq.ParquetWriter(path, ds_schema)
    with writer:
        for start in range(0, n_items, CHUNK):
            m = min(CHUNK, n_items - start)
            idx = np.arange(start, start + m)
            ids = pa.array(np.char.add("item-", np.char.zfill(idx.astype(str), 9)).astype(object), type=pa.string())
            labels = rng.integers(0, k, m)
            text = pa.compute.binary_join_element_wise("synthetic message ", ids, "")
            split = split_arr[rng.integers(0, len(split_arr), m)]
            writer.write_table(
                pa.table(
                    [ids, text, pa.array(opts[labels], type=pa.string()), pa.array(split, type=pa.string())],
                    schema=ds_schema,
                )
            )
    return path


#: The floor of ``--import-bench``: DuckDB alone reading the file into a table of a new database (the CSV
#: with the reader options of ``datasets import``: every column as text).
_FLOOR = """
import sys, duckdb
src, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
reader = "read_parquet(?)" if src.endswith(".parquet") else "read_csv(?, header = true, all_varchar = true)"
con.execute(f"CREATE TABLE t AS SELECT * FROM {reader}", [src])
con.close()
"""


#: A second floor: DuckDB alone writing the same rows into the store's three dataset tables (``items`` with its
#: primary key, ``labels``, ``gold_labels``) of a fresh store, no checks and no fingerprint.
_STORE_FLOOR = """
import sys
from workbench.store.import_streamed import FAST_PATH_MEMORY_LIMIT
from workbench.store.db import connect
src, db = sys.argv[1], sys.argv[2]
con = connect(db)
con.execute(f"SET memory_limit = '{FAST_PATH_MEMORY_LIMIT}'")  # what the import's writes run under
reader = "read_parquet(?)" if src.endswith(".parquet") else "read_csv(?, header = true, all_varchar = true)"
con.execute(f"CREATE TEMP VIEW f AS SELECT * FROM {reader}".replace("?", repr(src)))
con.begin()
con.execute("INSERT INTO items (dataset, version, item_id, state_text, split) SELECT 's', 1, id, text, split FROM f")
con.execute("INSERT INTO labels SELECT 's', 1, id, 'intent', label, 'import' FROM f")
con.execute("INSERT INTO gold_labels SELECT 's', 1, 'intent', id, split, label FROM f")
con.commit()
con.close()
"""


def _measured(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(CPU s = user + sys, peak RSS GB, exit code) of one child process."""
    import os
    import subprocess

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        print(f"    exit {proc.returncode}: {err.strip()[-300:]}", flush=True)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024**2, proc.returncode


def import_bench(
    n_items: int,
    workdir: Path,
    *,
    k: int = 77,
    formats=("parquet", "csv"),
    trees: dict[str, Path] | None = None,
    keep: bool = False,
    schema_runs: tuple[bool, ...] = (False, True),
) -> list[dict]:
    """``workbench datasets import`` of an ``n_items`` × ``k`` file, with and without ``--schema``, as a child
        process per tree (``trees``: label → checkout; default this one), beside DuckDB alone reading the same
        file into a table (the floor) and writing it, unchecked, into the store's three dataset tables (the store
    floor). Prints and returns CPU s and peak RSS of each, and the ratio to the floor."""
    import os
    import shutil

    import yaml

    trees = trees or {"new": ROOT}
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "schema.yaml").write_text(yaml.safe_dump(schema_dict(k), sort_keys=False))
    rows = []
    for fmt in formats:
        src = workdir / f"dataset-{n_items}.{fmt}"
        if not src.exists():
            write_dataset_file(src, n_items, k)
        size = src.stat().st_size / 1024**2
        db = workdir / "bench.duckdb"
        base_env = {**os.environ, "WORKBENCH_MAX_IMPORT_BYTES": str(1 << 40)}

        def fresh() -> None:
            for p in (db, db.with_name(db.name + ".wal")):
                p.unlink(missing_ok=True)

        fresh()
        cpu, rss, rc = _measured([sys.executable, "-c", _FLOOR, str(src), str(db)], base_env)
        floor = (cpu, rss)
        print(
            f"{fmt} {n_items:,} x {k} ({size:,.0f} MB)  floor (DuckDB CREATE TABLE AS): "
            f"{cpu:7.1f} CPU s  {rss:5.2f} GB",
            flush=True,
        )
        rows.append({"format": fmt, "n": n_items, "run": "floor", "cpu_s": cpu, "rss_gb": rss, "rc": rc})
        fresh()
        tree = next(iter(trees.values()))
        env = {**base_env, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'runtime'}"}
        scpu, srss, rc = _measured([sys.executable, "-c", _STORE_FLOOR, str(src), str(db)], env)
        print(
            f"  {'store floor':<22} {scpu:7.1f} CPU s ({scpu / floor[0]:5.2f}x floor)  {srss:5.2f} GB "
            f"({srss / floor[1]:5.2f}x floor)  (DuckDB INSERTs into items, labels, gold_labels; no checks)",
            flush=True,
        )
        rows.append({"format": fmt, "n": n_items, "run": "store floor", "cpu_s": scpu, "rss_gb": srss, "rc": rc})
        for label, tree in trees.items():
            env = {**base_env, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'runtime'}", "WORKBENCH_DB": str(db)}
            for with_schema in schema_runs:
                fresh()
                cmd = [
                    sys.executable,
                    "-c",
                    "import sys; from workbench.cli import main; sys.exit(main())",
                    "datasets",
                    "import",
                    str(src),
                    "--name",
                    "scale",
                    "--id-column",
                    "id",
                    "--text-column",
                    "text",
                    "--split-column",
                    "split",
                    "--label",
                    f"{QUESTION}=label",
                ]
                if with_schema:
                    cmd += ["--schema", str(workdir / "schema.yaml")]
                cpu, rss, rc = _measured(cmd, env)
                run = f"{label} {'--schema' if with_schema else 'no schema'}"
                print(
                    f"  {run:<22} {cpu:7.1f} CPU s ({cpu / floor[0]:5.2f}x floor)  {rss:5.2f} GB "
                    f"({rss / floor[1]:5.2f}x floor){'' if rc == 0 else f'  FAILED (exit {rc})'}",
                    flush=True,
                )
                rows.append({"format": fmt, "n": n_items, "run": run, "cpu_s": cpu, "rss_gb": rss, "rc": rc})
        fresh()
        if not keep:
            src.unlink()
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=77)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", help="store to build (dataset + run); not with --import-bench")
    ap.add_argument("--workdir", default=None)
    ap.add_argument(
        "--import-bench",
        action="store_true",
        help="time `workbench datasets import` (CSV and Parquet, with and without --schema) beside DuckDB alone",
    )
    ap.add_argument("--formats", default="parquet,csv", help="--import-bench: file formats, comma-separated")
    ap.add_argument("--old", default=None, help="--import-bench: also time this checkout (before)")
    ap.add_argument("--only-old", action="store_true", help="--import-bench: time only the --old checkout")
    ap.add_argument("--keep", action="store_true", help="--import-bench: keep the generated files")
    ap.add_argument(
        "--runs",
        default="no-schema,schema",
        help="--import-bench: which imports (no-schema, schema), comma-separated; 'floors': the floors alone",
    )
    args = ap.parse_args(argv)
    if args.import_bench:
        work = Path(args.workdir or f"/tmp/wb-import-bench-{args.items}")
        trees = {} if args.only_old else {"new": ROOT}
        if args.old:
            trees = {"old": Path(args.old), **trees}
        rows = import_bench(
            args.items,
            work,
            k=args.k,
            formats=args.formats.split(","),
            trees=trees,
            keep=args.keep,
            schema_runs=tuple(
                r.strip() == "schema" for r in args.runs.split(",") if r.strip() in ("schema", "no-schema")
            ),
        )
        print(json.dumps(rows))
        return
    if not args.db:
        ap.error("--db is required (or --import-bench)")
    dataset, run_id = make_scale_store(args.db, args.items, args.k, args.seed, workdir=args.workdir)
    print(json.dumps({"dataset": dataset, "run_id": run_id}))


if __name__ == "__main__":
    main()
