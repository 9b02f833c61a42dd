"""Coverage of the certified rule before/after the α-independent fixed-sequence order (issue 15 item 3).

    python bench/monotone.py                  # builds /tmp/wb-bench-monotone.duckdb once (~1 min), then the table
    python bench/monotone.py --seeds 20 --sweep --json

Runs (bundled datasets, imported as ``workbench.bundled_dataset`` says): BANKING77 ``intent`` and
HWU64 ``scenario`` + ``intent`` answered by the offline ``baseline:tfidf-logreg``, and BANKING77
``intent`` answered by ``cloudflare:clef-flash`` **emulated** by ``workbench.emulator.run_emulator``
(lexical answerer, dummy credentials, loopback only). The store is built once and reused.

For each run, question and α ∈ {0.05, 0.1, 0.2}, with the default :class:`ThresholdOptions`
(δ = 0.1, temperature recalibration, fixed-sequence, order fraction 0.3) and seeds 0..N-1 (the seed
draws the calibrator carve and the held-apart order part), it prints in how many seeds a rule is
certified and the mean coverage (0 when nothing is certified) and mean error among accepted items
(certified seeds) on the **test** split:

- ``before``: the test order learned per α (ascending held-apart p-value at that α), the
  procedure before issue 15 (``order="learned-per-alpha"``);
- ``after``: the order learned once (ascending held-apart upper confidence bound, independent of α,
  ``order="upper-bound"``, the default).

Both use the same calibrator, surface and held-apart items, so the only difference is the order.
``--sweep`` also counts, per order, the seeds whose sweep α = 0.05, 0.06, …, 0.30 loses the
certificate as α grows (the issue's finding), and those whose test coverage drops as α grows (not
guaranteed by either order: two certified rules need not be nested). The figures are deterministic.
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
ORDERS = ("learned-per-alpha", "upper-bound")  # before, after
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


def measure(store: Path, ids: dict[str, str], alphas, seeds, orders=ORDERS) -> list[dict]:
    """One row per (run, question, seed, α, order): certified, coverage and error of the chosen rule."""
    import workbench as wb
    from workbench.thresholds.choose import evaluate_on, finish_result, prepare_question
    from workbench.thresholds.guarantees import certify_surface
    from workbench.thresholds.options import ThresholdOptions

    con = wb.connect(store, read_only=True)
    rows = []
    try:
        for label, _, _, questions in RUNS:
            for q in questions:
                cal = wb.load_answers(con, ids[label], q, splits=["calibration"])
                test = wb.load_answers(con, ids[label], q, splits=["test"])
                for seed in seeds:
                    opts = ThresholdOptions(seed=seed)  # the defaults; the seed draws the carve and the order part
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
                            n_cal = int((cal.labels >= 0).sum())
                            res = finish_result(prep, sel, o, question=q, n_calibration=n_cal)
                            res.attach_test(evaluate_on(res, test))
                            t = res.test or {}
                            rows.append(
                                {
                                    "run": label,
                                    "question": q,
                                    "seed": seed,
                                    "alpha": float(a),
                                    "order": order,
                                    "certified": res.certified,
                                    "cal_coverage": sel.calibration["coverage"] if res.certified else 0.0,
                                    "test_coverage": (t.get("coverage") or {}).get("value") or 0.0,
                                    "test_error": (t.get("error") or {}).get("value"),
                                }
                            )
    finally:
        con.close()
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per (run, question, α, order): seeds certified, mean test coverage, mean test error where certified."""
    import numpy as np

    out = []
    for key in dict.fromkeys((r["run"], r["question"], r["alpha"], r["order"]) for r in rows):
        rs = [r for r in rows if (r["run"], r["question"], r["alpha"], r["order"]) == key]
        errs = [r["test_error"] for r in rs if r["certified"] and r["test_error"] is not None]
        out.append(
            {
                "run": key[0],
                "question": key[1],
                "alpha": key[2],
                "order": key[3],
                "n_seeds": len(rs),
                "n_certified": sum(r["certified"] for r in rs),
                "test_coverage": float(np.mean([r["test_coverage"] for r in rs])),
                "test_error": float(np.mean(errs)) if errs else None,
            }
        )
    return out


def monotone_report(rows: list[dict]) -> list[dict]:
    """Per (run, question, order): seeds whose α sweep loses the certificate, or test coverage, as α grows."""
    out = []
    for key in dict.fromkeys((r["run"], r["question"], r["order"]) for r in rows):
        lost = cov_drops = 0
        worst = 0.0
        seeds = sorted({r["seed"] for r in rows if (r["run"], r["question"], r["order"]) == key})
        for seed in seeds:
            rs = sorted(
                (r for r in rows if (r["run"], r["question"], r["order"]) == key and r["seed"] == seed),
                key=lambda r: r["alpha"],
            )
            cert = [r["certified"] for r in rs]
            lost += any(a and not b for a, b in zip(cert, cert[1:]))
            cov = [r["test_coverage"] for r in rs]
            drops = [a - b for a, b in zip(cov, cov[1:])]
            cov_drops += any(d > 1e-12 for d in drops)
            worst = max([worst, *drops])
        out.append(
            {
                "run": key[0],
                "question": key[1],
                "order": key[2],
                "n_seeds": len(seeds),
                "certificate_lost": lost,
                "test_coverage_drops": cov_drops,
                "largest_test_coverage_drop": worst,
            }
        )
    return out


def _pct(v) -> str:
    return "–" if v is None or v != v else f"{100 * v:.1f}%"


def table(summary: list[dict], alphas) -> str:
    by = {(r["run"], r["question"], r["alpha"], r["order"]): r for r in summary}
    keys = list(dict.fromkeys((r["run"], r["question"]) for r in summary))
    lines = [
        "| run | question | α | before: certified seeds, test coverage (error) | "
        "after: certified seeds, test coverage (error) |",
        "|---|---|---|---|---|",
    ]
    for run, q in keys:
        for a in alphas:
            cells = []
            for order in ORDERS:
                r = by[(run, q, float(a), order)]
                cells.append(f"{r['n_certified']}/{r['n_seeds']}, {_pct(r['test_coverage'])} ({_pct(r['test_error'])})")
            lines.append(f"| {run} | {q} | {a:g} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("/tmp/wb-bench-monotone.duckdb"))
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)))
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 of ThresholdOptions (carve and order part)")
    ap.add_argument("--sweep", action="store_true", help="also sweep α = 0.05, 0.06, …, 0.30 per seed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    alphas = [float(a) for a in args.alphas.split(",")]
    seeds = range(args.seeds)
    ids = build_store(args.store)
    summary = summarise(measure(args.store, ids, alphas, seeds))
    sweep = []
    if args.sweep:
        grid = [round(0.05 + 0.01 * i, 2) for i in range(26)]
        sweep = monotone_report(measure(args.store, ids, grid, seeds))
    if args.json:
        print(json.dumps({"summary": summary, "sweep": sweep}, indent=2))
        return
    print(table(summary, alphas))
    if sweep:
        print()
        print(f"α swept over 0.05, 0.06, …, 0.30 for each of {args.seeds} seeds:")
        print(
            "| run | question | order | seeds losing the certificate as α grows | "
            "seeds whose test coverage drops (largest drop) |"
        )
        print("|---|---|---|---|---|")
        for r in sweep:
            print(
                f"| {r['run']} | {r['question']} | {r['order']} | {r['certificate_lost']}/{r['n_seeds']} | "
                f"{r['test_coverage_drops']}/{r['n_seeds']} ({_pct(r['largest_test_coverage_drop'])} points) |"
            )


if __name__ == "__main__":
    main()
