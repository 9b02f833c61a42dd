"""Coverage of the certified rule before/after the α-independent fixed-sequence order (issue 15 item 3).

    python bench/monotone.py                          # builds /tmp/wb-bench-monotone.duckdb once, then the table
    python bench/monotone.py --store PATH --json
    python bench/monotone.py --sweep 0.15,0.16,...    # also the certified / not certified sweep per run

Runs (bundled datasets, imported as ``workbench.bundled_dataset`` does): BANKING77 ``intent`` and
HWU64 ``scenario`` + ``intent`` answered by the offline ``baseline:tfidf-logreg``, and BANKING77
``intent`` answered by ``cloudflare:clef-flash`` **emulated** by ``workbench.emulator.run_emulator``
(lexical answerer, dummy credentials, loopback only). The store is built once and reused.

For each run, question and α ∈ {0.05, 0.1, 0.2} with the default :class:`ThresholdOptions`
(δ = 0.1, temperature recalibration, fixed-sequence, order fraction 0.3, seed 0), it prints whether
the rule is certified and its coverage and error among accepted items on the **test** split:

- ``before``: the test order learned per α (ascending held-apart p-value at that α), the
  procedure before issue 15 (``order="learned-per-alpha"``);
- ``after``: the order learned once (ascending held-apart upper confidence bound, independent of α,
  ``order="upper-bound"``, the default).

Both use the same calibrator, surface and held-apart items, so the only difference is the order.
The figures are deterministic (seeded); only the one-off store build takes time.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime")]

ALPHAS = (0.05, 0.1, 0.2)
RUNS = (  # (label, dataset, provider, questions)
    ("banking77 tfidf", "banking77", "baseline:tfidf-logreg", ("intent",)),
    ("hwu64 tfidf", "hwu64", "baseline:tfidf-logreg", ("scenario", "intent")),
    ("banking77 clef-flash (emulated)", "banking77", "cloudflare:clef-flash", ("intent",)),
)


def build_store(path: Path) -> dict[str, str]:
    """Import the bundled datasets and answer them (once); returns ``{run label: run_id}``."""
    import os

    import workbench as wb
    from workbench.bundled import bundled_schema_file

    ids_file = path.with_suffix(".runs.json")
    if path.exists() and ids_file.exists():
        return json.loads(ids_file.read_text())
    con = wb.connect(path)
    ids: dict[str, str] = {}
    try:
        for name in {d for _, d, _, _ in RUNS}:
            wb.import_dataset(con, **wb.bundled_dataset(name))
        with ExitStack() as stack:
            emu = stack.enter_context(wb.run_emulator(port=0))
            env = {
                **os.environ,
                "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
                "CLOUDFLARE_API_KEY": "bench-not-a-real-key",
                "CLOUDFLARE_ACCOUNT_ID": "bench-account",
            }
            for label, dataset, provider, _ in RUNS:
                ids[label] = wb.run(
                    con, dataset, bundled_schema_file(dataset), provider, name=label, env=env, concurrency=32
                )
    finally:
        con.close()
    ids_file.write_text(json.dumps(ids))
    return ids


def measure(store: Path, ids: dict[str, str], alphas, orders=("learned-per-alpha", "upper-bound")) -> list[dict]:
    """One row per (run, question, α, order): certified, test coverage and error of the chosen rule."""
    import workbench as wb
    from workbench.thresholds.choose import ThresholdOptions, _finish, prepare_question
    from workbench.thresholds.guarantees import certify_surface

    con = wb.connect(store, read_only=True)
    rows = []
    try:
        for label, _, _, questions in RUNS:
            for q in questions:
                cal = wb.load_answers(con, ids[label], q, splits=["calibration"])
                test = wb.load_answers(con, ids[label], q, splits=["test"])
                opts = ThresholdOptions()
                prep = prepare_question(cal, opts)
                classes = [c for c in range(len(prep.option_ids)) if c not in prep.abstain_idx]
                for a in alphas:
                    o = replace(opts, alpha=float(a))
                    for order in orders:
                        sel = certify_surface(
                            prep.surface,
                            alpha=o.alpha,
                            delta=o.delta,
                            classes=classes,
                            order_fraction=o.order_fraction,
                            seed=o.seed,
                            order=order,
                        )
                        res = _finish(prep, sel, o, cal, test)
                        t = res.test or {}
                        rows.append(
                            {
                                "run": label,
                                "question": q,
                                "alpha": float(a),
                                "order": order,
                                "certified": res.certified,
                                "cal_coverage": sel.calibration["coverage"],
                                "test_coverage": (t.get("coverage") or {}).get("value"),
                                "test_error": (t.get("error") or {}).get("value"),
                            }
                        )
    finally:
        con.close()
    return rows


def _pct(v) -> str:
    return "   –  " if v is None or v != v else f"{100 * v:5.1f}%"


def table(rows: list[dict], alphas) -> str:
    by = {(r["run"], r["question"], r["alpha"], r["order"]): r for r in rows}
    keys = list(dict.fromkeys((r["run"], r["question"]) for r in rows))
    lines = [
        "| run | question | α | before: certified, test coverage (error) | after: certified, test coverage (error) |",
        "|---|---|---|---|---|",
    ]
    for run, q in keys:
        for a in alphas:
            cells = []
            for order in ("learned-per-alpha", "upper-bound"):
                r = by[(run, q, float(a), order)]
                cells.append(
                    f"{'yes' if r['certified'] else 'no '} {_pct(r['test_coverage'])} ({_pct(r['test_error'])})"
                )
            lines.append(f"| {run} | {q} | {a:g} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("/tmp/wb-bench-monotone.duckdb"))
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)))
    ap.add_argument("--sweep", default=None, help="comma-separated α values: print certified yes/no per order")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    alphas = [float(a) for a in args.alphas.split(",")]
    ids = build_store(args.store)
    rows = measure(args.store, ids, alphas)
    sweep_rows = measure(args.store, ids, [float(a) for a in args.sweep.split(",")]) if args.sweep else []
    if args.json:
        print(json.dumps({"rows": rows, "sweep": sweep_rows}, indent=2))
        return
    print(table(rows, alphas))
    if sweep_rows:
        print()
        print("certified per α (before | after):")
        for run, q in dict.fromkeys((r["run"], r["question"]) for r in sweep_rows):
            for order in ("learned-per-alpha", "upper-bound"):
                marks = " ".join(
                    f"{r['alpha']:g}:{'Y' if r['certified'] else 'n'}"
                    for r in sweep_rows
                    if r["run"] == run and r["question"] == q and r["order"] == order
                )
                print(f"  {run} / {q} [{order}]: {marks}")


if __name__ == "__main__":
    main()
