"""Production-size inputs for `workbench shadow report` and `workbench monitor`: seconds and peak RSS.

    python bench/scale_prod.py                         # 1M and 2M decisions, 77 options
    python bench/scale_prod.py --n 200000 --old /tmp/wb-old-prod   # + the figures of another checkout
    python bench/scale_prod.py --n 10000000 --commands monitor

For each N the script writes, once per N (kept in ``--workdir``, re-used on the next run):

- a store with one shadow session of N requests (77-option choice question, both sides answered,
  0.5 % challenger failures, latency and cost per request, outcomes for 30 % of requests), written
  straight into the store's shadow tables in chunks (what ``shadow import``/``replay`` produce);
- a policy file (temperature calibrator, top-margin rule, calibration-time drift reference) and a
  decision log of N decisions of it (JSON Lines, as the runtime's ``DecisionLog`` writes them, via
  DuckDB's JSON writer) plus an outcome file (Parquet) for 30 % of them;

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


def make_shadow_store(path: Path, n: int, k: int, seed: int = 0) -> None:
    """A store with session ``bench``: N requests, both sides' answers, outcomes for 30 %."""
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
    con = connect(tmp)
    con.execute("SET preserve_insertion_order = false")
    with transaction(con):
        _create_session(
            con, "bench", source="import", schema=schema, champion="champ", challenger="chall", params={}, replace=False
        )
    t0 = np.datetime64("2026-11-01T00:00:00", "us")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        ids = np.char.add("req-", np.arange(start, start + m).astype(str)).astype(object)
        cp = _probs(rng, m, k, 2.5)
        dp = np.round(0.7 * cp + 0.3 * _probs(rng, m, k, 2.8), 4)  # a challenger that mostly agrees
        dp[:, 0] = np.clip(dp[:, 0] + 1.0 - dp.sum(axis=1), 0.0, 1.0)
        fail_d = rng.random(m) < 0.005
        label = np.where(rng.random(m) < 0.8, cp.argmax(axis=1), rng.integers(0, k, m))
        known = rng.random(m) < OUTCOME_SHARE
        ts = t0 + (np.arange(start, start + m) * 30_000_000 // max(n // 100_000, 1)).astype("timedelta64[us]")
        req = pa.table(
            {
                "shadow": pa.array(["bench"] * m),
                "item_id": pa.array(ids.tolist()),
                "seq": pa.array(np.arange(start, start + m) + 1),
                "ts": pa.array(ts),
                "champion_latency_ms": pa.array(rng.gamma(4.0, 30.0, m)),
                "champion_cost_usd": pa.array(np.full(m, 0.0004)),
                "champion_model": pa.array(["champ"] * m),
                "challenger_latency_ms": pa.array(rng.gamma(3.0, 25.0, m)),
                "challenger_cost_usd": pa.array(np.full(m, 0.0002)),
                "challenger_model": pa.array(["chall"] * m),
                "challenger_error": pa.array([("timeout" if f else None) for f in fail_d], pa.string()),
            }
        )
        ans = pa.concat_tables(
            [
                pa.table(
                    {
                        "item_id": pa.array(ids.tolist()),
                        "side": pa.array([side] * m),
                        "probs": _list_column(p, fail),
                        "failure_kind": pa.array([("timeout" if f else None) for f in fail], pa.string()),
                    }
                )
                for side, p, fail in (("champion", cp, np.zeros(m, bool)), ("challenger", dp, fail_d))
            ]
        )
        out = pa.table(
            {
                "item_id": pa.array(ids[known].tolist(), pa.string()),
                "outcome": pa.array(np.asarray(opts, dtype=object)[label[known]].tolist(), pa.string()),
            }
        )
        with transaction(con):
            con.register("_req", req)
            con.execute("INSERT INTO shadow_requests BY NAME SELECT * FROM _req")
            con.register("_ans", ans)
            con.execute(
                "INSERT INTO shadow_answers (shadow, item_id, question, side, probs, failure_kind) "
                f"SELECT 'bench', item_id, '{QUESTION}', side, probs, failure_kind FROM _ans"
            )
            con.register("_out", out)
            con.execute(
                f"INSERT INTO shadow_outcomes (shadow, item_id, question, outcome) "
                f"SELECT 'bench', item_id, '{QUESTION}', outcome FROM _out"
            )
            for t in ("_req", "_ans", "_out"):
                con.unregister(t)
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


def make_decision_log(log: Path, outcomes: Path, doc: dict, n: int, k: int, seed: int = 1) -> None:
    """N decision records of ``doc`` (JSON Lines) and outcomes of 30 % of them (Parquet), in chunks."""
    import duckdb

    opts = np.asarray(_options(k), dtype=object)
    rng = np.random.default_rng(seed)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    tmp_log, tmp_out = log.with_suffix(".tmp"), outcomes.with_suffix(".tmp")
    parts_dir = log.parent / (log.name + ".parts")
    parts_dir.mkdir(exist_ok=True)
    t0 = np.datetime64("2026-11-01T00:00:00", "us")
    step_us = max(1, int(14 * 86400 * 1e6 / max(n, 1)))  # two weeks of traffic
    out_tables = []
    with open(tmp_log, "wb") as fh:
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            p = _probs(rng, m, k, 2.5)
            two = -np.partition(-p, 1, axis=1)[:, :2]
            p_top, margin = two[:, 0], two[:, 0] - two[:, 1]
            accept = (p_top >= 0.5) & (margin >= 0.2)
            top = p.argmax(axis=1)
            # later traffic gets worse: the error rate among accepted rises in the second half
            bad = 0.03 + 0.05 * (np.arange(start, start + m) > n // 2)
            label = np.where(rng.random(m) < bad, rng.integers(0, k, m), top)
            ids = np.char.add("d", np.arange(start, start + m).astype(str)).astype(object)
            times = t0 + (np.arange(start, start + m) * step_us).astype("timedelta64[us]")
            tbl = pa.table(
                {
                    "decision_id": pa.array(ids.tolist()),
                    "time": pa.array(np.datetime_as_string(times, unit="us").astype(object) + "+00:00"),
                    "policy_hash": pa.array([doc["content_hash"]] * m),
                    "policy_version": pa.array(["1.0.0"] * m),
                    "model": pa.array(["bench-model"] * m),
                    "schema_hash": pa.array([doc["decision_schema"]["hash"]] * m),
                    "question": pa.array([QUESTION] * m),
                    "action": pa.array(np.where(accept, "accept", "review").astype(object).tolist()),
                    "option": pa.array(opts[top].tolist()),
                    "p_top": pa.array(p_top),
                    "margin": pa.array(margin),
                    "probs": _list_column(p),
                }
            )
            con.register("_t", tbl)
            part = parts_dir / "part.jsonl"
            con.execute(f"COPY _t TO '{part}' (FORMAT json)")
            con.unregister("_t")
            fh.write(part.read_bytes())
            known = rng.random(m) < OUTCOME_SHARE
            out_tables.append(
                pa.table(
                    {
                        "decision_id": pa.array(ids[known].tolist(), pa.string()),
                        "question": pa.array([QUESTION] * int(known.sum()), pa.string()),
                        "outcome": pa.array(opts[label[known]].tolist(), pa.string()),
                    }
                )
            )
    import pyarrow.parquet as pq

    pq.write_table(pa.concat_tables(out_tables), tmp_out)
    (parts_dir / "part.jsonl").unlink(missing_ok=True)
    parts_dir.rmdir()
    tmp_log.rename(log)
    tmp_out.rename(outcomes)


def prepare(workdir: Path, n: int, k: int, commands: list[str]) -> dict:
    d = workdir / f"n{n}_k{k}"
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "store": d / "store.duckdb",
        "policy": d / "policy.json",
        "log": d / "decisions.jsonl",
        "outcomes": d / "outcomes.parquet",
    }
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
    args = ap.parse_args()
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
