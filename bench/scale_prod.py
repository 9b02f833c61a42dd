"""Production-size inputs for `workbench shadow report` and `workbench monitor`: seconds and peak RSS.

    python bench/scale_prod.py                         # 1M and 2M decisions, 77 options
    python bench/scale_prod.py --n 200000 --old /tmp/wb-old-prod   # + the figures of another checkout
    python bench/scale_prod.py --n 10000000 --commands monitor
    python bench/scale_prod.py --n 10000000 --prepare-only        # only write the inputs

For each N the script writes, once per N (kept in ``--workdir``, re-used on the next run):

- a store with one shadow session of N requests (77-option choice question, both sides answered,
  0.5 % challenger failures, latency and cost per request, outcomes for 30 % of requests), written
  straight into the store's shadow tables (what ``shadow import``/``replay`` produce, primary keys
  included): Arrow chunks → a Parquet file per million requests → one ``INSERT … FROM read_parquet`` each
  (about 1.5 GB peak; the time is DuckDB compressing and indexing what it stores);
- a policy file (identity calibrator, top-margin rule, calibration-time drift reference) and a
  decision log of N decisions of it (JSON Lines, as the runtime's ``DecisionLog`` writes them: one DuckDB
  ``COPY … (FORMAT json)`` over a stream of Arrow batches, ~900 bytes a line) plus an outcome file
  (Parquet) for 30 % of them;

then runs, each in a fresh subprocess under ``/usr/bin/time -v``:

- ``workbench --db STORE shadow report bench --champion-rule tau=0.5,margin=0.1 --challenger-rule
  tau=0.6,margin=0.05 --json``
- ``workbench monitor --policy POLICY --decisions LOG --outcomes OUTCOMES --window 1D --json``
  (``--monitor-engine spark`` adds ``--engine spark``: local mode; the RSS then includes the JVM's)

and prints items, seconds and peak RSS per command. ``--old PATH`` runs the same commands with the
code of another checkout (``PYTHONPATH=PATH:PATH/runtime``, e.g. a worktree of the base commit) and
prints its figures side by side. ``cpu s`` is user + system time (steadier than wall time on a
busy machine; the 10M extrapolation uses it). A watchdog kills a command whose RSS passes ``--rss-cap-gb``
(default 4) and reports it as killed. Wall times are noisy on a shared machine; RSS is not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime")]

CHUNK = 100_000
OUTCOME_SHARE = 0.3
QUESTION = "intent"


def _options(k: int) -> list[str]:
    return [f"intent_{j:02d}" for j in range(k)]


def _probs(rng: np.random.Generator, m: int, k: int, sharp: float) -> np.ndarray:
    z = rng.normal(0, sharp, size=(m, k))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p = np.round(p / p.sum(axis=1, keepdims=True), 4)
    p[:, 0] += 1.0 - p.sum(axis=1)
    return np.clip(p, 0.0, 1.0)


def _list_column(p: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    m, k = p.shape
    offsets = pa.array(np.arange(0, (m + 1) * k, k, dtype=np.int32))
    mask = pa.array(null) if null is not None and null.any() else None
    return pa.ListArray.from_arrays(offsets, pa.array(p.ravel()), mask=mask)


def _ids(prefix: str, start: int, m: int) -> pa.Array:
    """``prefix`` + position as strings, vectorised in Arrow (no Python string per row)."""
    return pc.binary_join_element_wise(prefix, pa.array(np.arange(start, start + m)).cast(pa.string()), "")


def _where(mask: np.ndarray, text: str) -> pa.Array:
    """``text`` where ``mask``, else null (a string column)."""
    return pc.if_else(pa.array(mask), pa.scalar(text), pa.scalar(None, pa.string()))


def _take(names: list[str], index: np.ndarray) -> pa.Array:
    """``names[index]`` as a string column (Arrow take, no Python string per row)."""
    return pa.array(names, pa.string()).take(pa.array(index))


def make_shadow_store(path: Path, n: int, k: int, seed: int = 0, group: int = 1_000_000, chunk: int = CHUNK) -> None:
    """A store with session ``bench``: N requests, both sides' answers, outcomes for 30 %.

    The rows are those ``shadow import`` writes into the store's shadow tables (with their primary keys).
    They are generated ``chunk`` requests at a time as Arrow arrays (no Python object per row) into a
    Parquet file per ``group`` requests, which one transaction then inserts with ``INSERT … SELECT FROM
    read_parquet`` (DuckDB writes the compressed row groups straight to the file; memory is bounded by a
    group). The random draws and their order are those of the first version of this generator (same seed
    and chunk, same rows); ``group`` (a multiple of ``chunk``) changes no row.
    """
    import pyarrow.parquet as pq

    from workbench.schema import DecisionSchema
    from workbench.store.db import connect, transaction
    from workbench.store.shadow import _create_session

    opts = _options(k)
    schema = DecisionSchema.from_dict(
        {"questions": {QUESTION: {"type": "choice", "instructions": "Which intent?", "criteria": dict.fromkeys(opts)}}}
    )
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".tmp.duckdb")
    tmp.unlink(missing_ok=True)
    parts = path.with_suffix(".parts")
    parts.mkdir(exist_ok=True)
    con = connect(tmp)
    with transaction(con):
        _create_session(
            con, "bench", source="import", schema=schema, champion="champ", challenger="chall", params={}, replace=False
        )
    t0 = np.datetime64("2026-11-01T00:00:00", "us")
    ans_schema = pa.schema(
        [
            ("item_id", pa.string()),
            ("side", pa.string()),
            ("probs", pa.list_(pa.float64())),
            ("failure_kind", pa.string()),
        ]
    )
    for g0 in range(0, n, group):
        files = {t: parts / f"{t}.parquet" for t in ("req", "ans", "out")}
        writers: dict[str, pq.ParquetWriter] = {}
        g1 = min(g0 + group, n)
        for start in range(g0, g1, chunk):
            m = min(chunk, g1 - start)
            ids = _ids("req-", start, m)
            cp = _probs(rng, m, k, 2.5)
            dp = np.round(0.7 * cp + 0.3 * _probs(rng, m, k, 2.8), 4)  # a challenger that mostly agrees
            dp[:, 0] = np.clip(dp[:, 0] + 1.0 - dp.sum(axis=1), 0.0, 1.0)
            fail_d = rng.random(m) < 0.005
            label = np.where(rng.random(m) < 0.8, cp.argmax(axis=1), rng.integers(0, k, m))
            known = rng.random(m) < OUTCOME_SHARE
            ts = t0 + (np.arange(start, start + m) * 30_000_000 // max(n // 100_000, 1)).astype("timedelta64[us]")
            tables = {
                "req": pa.table(
                    {
                        "item_id": ids,
                        "seq": pa.array(np.arange(start, start + m) + 1),
                        "ts": pa.array(ts),
                        "champion_latency_ms": pa.array(rng.gamma(4.0, 30.0, m)),
                        "challenger_latency_ms": pa.array(rng.gamma(3.0, 25.0, m)),
                        "challenger_error": _where(fail_d, "timeout"),
                    }
                ),
                "ans": pa.Table.from_batches(
                    [
                        pa.record_batch(
                            [ids, pa.repeat(pa.scalar(side), m), _list_column(p, fail), _where(fail, "timeout")],
                            schema=ans_schema,
                        )
                        for side, p, fail in (("champion", cp, np.zeros(m, bool)), ("challenger", dp, fail_d))
                    ]
                ),
                "out": pa.table({"item_id": ids.filter(pa.array(known)), "outcome": _take(opts, label[known])}),
            }
            for t, tbl in tables.items():
                if t not in writers:
                    writers[t] = pq.ParquetWriter(files[t], tbl.schema, compression="none")
                writers[t].write_table(tbl)
        for w in writers.values():
            w.close()
        with transaction(con):
            con.execute(
                "INSERT INTO shadow_requests (shadow, request_id, item_id, seq, ts, champion_latency_ms,"
                " champion_cost_usd, champion_model, challenger_latency_ms, challenger_cost_usd, challenger_model,"
                " challenger_error)"
                " SELECT 'bench', item_id, item_id, seq, ts, champion_latency_ms, 0.0004, 'champ', challenger_latency_ms,"
                f" 0.0002, 'chall', challenger_error FROM read_parquet('{files['req']}')"
            )
            con.execute(
                "INSERT INTO shadow_answers (shadow, request_id, item_id, question, side, probs, failure_kind) "
                f"SELECT 'bench', item_id, item_id, '{QUESTION}', side, probs, failure_kind FROM read_parquet('{files['ans']}')"
            )
            con.execute(
                f"INSERT INTO shadow_outcomes (shadow, item_id, question, outcome) "
                f"SELECT 'bench', item_id, '{QUESTION}', outcome FROM read_parquet('{files['out']}')"
            )
        for f in files.values():
            f.unlink()
    parts.rmdir()
    con.execute("CHECKPOINT")
    con.close()
    tmp.rename(path)


def make_policy(path: Path, k: int) -> dict:
    """A hashed policy file for one k-option question, with a calibration-time drift reference."""
    from workbench_runtime.model import content_hash
    from workbench_runtime.questions import DecisionSchema

    from workbench.policy.reference import reference_histograms

    opts = _options(k)
    schema = DecisionSchema.from_dict(
        {"questions": {QUESTION: {"type": "choice", "instructions": "Which intent?", "criteria": dict.fromkeys(opts)}}}
    )
    ref_probs = _probs(np.random.default_rng(99), 5000, k, 2.5)
    doc = {
        "format": "workbench.policy",
        "format_version": 1,
        "policy_version": "1.0.0",
        "created_at": "2026-12-01T00:00:00+00:00",
        "workbench_version": "bench",
        "source": {"provider": "bench", "model": "bench-model"},
        "decision_schema": {"hash": schema.hash, "questions": schema.to_wire()},
        "dataset": {"name": "bench"},
        "questions": {
            QUESTION: {
                "type": "choice",
                "options": opts,
                "calibrator": {"type": "identity", "params": {}},
                "rule": {"kind": "top_margin", "tau": 0.5, "margin": 0.2},
                "objective": {"kind": "guarantee", "certified": True, "alpha": 0.05, "delta": 0.1},
                "reference": reference_histograms(ref_probs, ref_probs, opts),
            }
        },
        "validity": {"schema_hashes": [schema.hash], "models": ["bench-model"]},
    }
    doc["content_hash"] = content_hash(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return doc


def make_decision_log(log: Path, outcomes: Path, doc: dict, n: int, k: int, seed: int = 1, chunk: int = CHUNK) -> None:
    """N decision records of ``doc`` (JSON Lines) and outcomes of 30 % of them (Parquet), in chunks.

    One DuckDB ``COPY … TO (FORMAT json)`` (the records as the runtime's ``DecisionLog`` writes them, in
    order) reads a stream of Arrow batches generated ``chunk`` decisions at a time; the outcome rows of
    each batch are appended to the Parquet file as the batch is generated. Same draws, in the same order,
    as the first version of this generator.
    """
    import duckdb
    import pyarrow.parquet as pq

    opts = _options(k)
    rng = np.random.default_rng(seed)
    tmp_log, tmp_out = log.with_suffix(".tmp"), outcomes.with_suffix(".tmp")
    t0 = np.datetime64("2026-11-01T00:00:00", "us")
    step_us = max(1, int(14 * 86400 * 1e6 / max(n, 1)))  # two weeks of traffic
    out_schema = pa.schema([("decision_id", pa.string()), ("question", pa.string()), ("outcome", pa.string())])
    log_schema = pa.schema(
        [
            ("i", pa.int64()),
            ("time", pa.timestamp("us")),
            ("accept", pa.bool_()),
            ("option", pa.string()),
            ("p_top", pa.float64()),
            ("margin", pa.float64()),
            ("probs", pa.list_(pa.float64())),
        ]
    )

    def batches(writer: pq.ParquetWriter):
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            p = _probs(rng, m, k, 2.5)
            two = -np.partition(-p, 1, axis=1)[:, :2]
            p_top, margin = two[:, 0], two[:, 0] - two[:, 1]
            accept = (p_top >= 0.5) & (margin >= 0.2)
            top = p.argmax(axis=1)
            # later traffic gets worse: the error rate among accepted rises in the second half
            bad = 0.03 + 0.05 * (np.arange(start, start + m) > n // 2)
            label = np.where(rng.random(m) < bad, rng.integers(0, k, m), top)
            idx = np.arange(start, start + m)
            yield pa.record_batch(
                [
                    pa.array(idx),
                    pa.array(t0 + (idx * step_us).astype("timedelta64[us]")),
                    pa.array(accept),
                    _take(opts, top),
                    pa.array(p_top),
                    pa.array(margin),
                    _list_column(p),
                ],
                schema=log_schema,
            )
            known = rng.random(m) < OUTCOME_SHARE
            writer.write_table(
                pa.table(
                    [
                        _ids("d", start, m).filter(pa.array(known)),
                        pa.repeat(pa.scalar(QUESTION), int(known.sum())),
                        _take(opts, label[known]),
                    ],
                    schema=out_schema,
                )
            )

    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET enable_progress_bar = false")
    with pq.ParquetWriter(tmp_out, out_schema) as writer:
        con.register("_log", pa.RecordBatchReader.from_batches(log_schema, batches(writer)))
        con.execute(
            "COPY (SELECT 'd' || i AS decision_id, strftime(time, '%Y-%m-%dT%H:%M:%S.%f+00:00') AS time,"
            " $hash AS policy_hash, '1.0.0' AS policy_version, 'bench-model' AS model, $schema AS schema_hash,"
            f" '{QUESTION}' AS question, CASE WHEN accept THEN 'accept' ELSE 'review' END AS action, option,"
            f" p_top, margin, probs FROM _log) TO '{tmp_log}' (FORMAT json)",
            {"hash": doc["content_hash"], "schema": doc["decision_schema"]["hash"]},
        )
        con.unregister("_log")
    con.close()
    tmp_log.rename(log)
    tmp_out.rename(outcomes)


def input_files(d: Path) -> dict[str, Path]:
    """Where the inputs of one size live in directory ``d``."""
    return {
        "store": d / "store.duckdb",
        "policy": d / "policy.json",
        "log": d / "decisions.jsonl",
        "outcomes": d / "outcomes.parquet",
    }


def prepare(workdir: Path, n: int, k: int, commands: list[str]) -> dict:
    """The inputs of ``commands`` for N decisions under ``workdir/n{N}_k{k}``, generated if missing
    (each file is written under a temporary name and renamed: a kept file is always whole)."""
    d = workdir / f"n{n}_k{k}"
    d.mkdir(parents=True, exist_ok=True)
    files = input_files(d)
    t0 = time.perf_counter()
    if "shadow" in commands and not files["store"].exists():
        make_shadow_store(files["store"], n, k)
    if "monitor" in commands and not (files["log"].exists() and files["policy"].exists()):
        doc = make_policy(files["policy"], k)
        make_decision_log(files["log"], files["outcomes"], doc, n, k)
    took = time.perf_counter() - t0
    if took > 1:
        print(f"# generated inputs for n={n} in {took:.0f} s under {d}", file=sys.stderr, flush=True)
    return files


def command(name: str, files: dict, engine: str = "duckdb") -> list[str]:
    if name == "shadow":
        return [
            "--db",
            str(files["store"]),
            "shadow",
            "report",
            "bench",
            "--champion-rule",
            "tau=0.5,margin=0.1",
            "--challenger-rule",
            "tau=0.6,margin=0.05",
            "--json",
        ]
    return [
        "monitor",
        "--policy",
        str(files["policy"]),
        "--decisions",
        str(files["log"]),
        "--outcomes",
        str(files["outcomes"]),
        "--window",
        "1D",
        "--json",
        *(["--engine", engine] if engine != "duckdb" else []),
    ]


def _tree_rss_kb(pid: int) -> int:
    """RSS of ``pid`` and its descendants (kB), from /proc."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            m = re.search(r"VmRSS:\s+(\d+)", status)
            total += int(m.group(1)) if m else 0
            for t in Path(f"/proc/{p}/task").iterdir():
                kids = (t / "children").read_text().split()
                todo += [int(x) for x in kids]
        except (OSError, ValueError):
            continue
    return total


def measure(code_root: Path, args: list[str], out_path: Path, cap_gb: float) -> dict:
    """Run ``workbench ARGS`` with ``code_root``'s code under /usr/bin/time -v; seconds, peak RSS, exit."""
    env = dict(os.environ, PYTHONPATH=f"{code_root}:{code_root / 'runtime'}")
    cmd = ["/usr/bin/time", "-v", sys.executable, "-c", "from workbench.cli import main; main()", *args]
    t0 = time.perf_counter()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=code_root, start_new_session=True)
        killed = threading.Event()

        def watch() -> None:
            while proc.poll() is None:
                if _tree_rss_kb(proc.pid) > cap_gb * 1024 * 1024:
                    killed.set()
                    os.killpg(proc.pid, signal.SIGKILL)
                    return
                time.sleep(0.2)

        threading.Thread(target=watch, daemon=True).start()
        _, err = proc.communicate()
    secs = time.perf_counter() - t0
    text = err.decode(errors="replace")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    rss = int(m.group(1)) / 1024 / 1024 if m else float("nan")
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([0-9.]+)", text)) or float("nan")
    status = "killed" if killed.is_set() else str(proc.returncode)
    tail = "" if proc.returncode in (0, 1) else text.strip().splitlines()[-12:]
    return {"seconds": secs, "cpu_seconds": cpu, "rss_gb": rss, "exit": status, "tail": tail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[1_000_000, 2_000_000])
    ap.add_argument("--k", type=int, default=77)
    ap.add_argument("--commands", nargs="+", default=["shadow", "monitor"], choices=["shadow", "monitor"])
    ap.add_argument("--old", type=Path, help="another checkout (e.g. a worktree of the base commit) to compare")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/wb-scale-prod"))
    ap.add_argument("--rss-cap-gb", type=float, default=4.0)
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON document too")
    ap.add_argument(
        "--monitor-engine",
        default="duckdb",
        choices=["duckdb", "spark"],
        help="`workbench monitor --engine` (new code)",
    )
    ap.add_argument("--prepare-only", action="store_true", help="generate the inputs (kept in --workdir) and exit")
    args = ap.parse_args()
    if args.prepare_only:
        for n in args.n:
            prepare(args.workdir, n, args.k, args.commands)
        return
    rows = []
    print(f"{'command':8} {'items':>10} {'seconds':>8} {'cpu s':>7} {'peak RSS GB':>11} {'exit':>6}", end="")
    print(f" | {'old s':>8} {'old cpu':>7} {'old GB':>7} {'old exit':>8}" if args.old else "")
    for n in args.n:
        files = prepare(args.workdir, n, args.k, args.commands)
        for name in args.commands:
            out = args.workdir / f"n{n}_k{args.k}" / f"{name}.new.json"
            new = measure(ROOT, command(name, files, args.monitor_engine), out, args.rss_cap_gb)
            row = {"command": name, "items": n, "new": new}
            line = f"{name:8} {n:>10} {new['seconds']:>8.1f} {new['cpu_seconds']:>7.1f} {new['rss_gb']:>11.2f} {new['exit']:>6}"
            if args.old:
                out_old = out.with_name(f"{name}.old.json")
                old = measure(args.old.resolve(), command(name, files), out_old, args.rss_cap_gb)
                row["old"] = old
                line += f" | {old['seconds']:>8.1f} {old['cpu_seconds']:>7.1f} {old['rss_gb']:>7.2f} {old['exit']:>8}"
            print(line, flush=True)
            for r in (row.get("new"), row.get("old")):
                if r and r["tail"]:
                    print("   " + "\n   ".join(r["tail"]), file=sys.stderr)
            rows.append(row)
    for name in args.commands:
        pts = [(r["items"], r["new"]["cpu_seconds"], r["new"]["rss_gb"]) for r in rows if r["command"] == name]
        if len(pts) >= 2 and pts[-1][0] != pts[0][0]:
            (n0, s0, g0), (n1, s1, g1) = pts[0], pts[-1]
            slope_s, slope_g = (s1 - s0) / (n1 - n0), (g1 - g0) / (n1 - n0)
            print(
                f"# {name}: linear extrapolation to 10M: {s0 + slope_s * (10_000_000 - n0):.0f} CPU s, "
                f"{g0 + slope_g * (10_000_000 - n0):.2f} GB peak RSS"
            )
    if args.json:
        print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main()
