"""Does the planner's recommendation hold on real data? Pilots of a labelled run against held-apart draws.

    python bench/plan_labels_pilots.py --db wb.duckdb --run RUN_ID [--question intent] [--pilots 20]
        [--pilot-size 300] [--target-coverage 0.6] [--draws 200] [--errors logistic|observed]
        [--pool run|oof] [--folds 3] [--max-share 0.5] [--json]

For each of ``--pilots`` pilot seeds: a random ``--pilot-size`` subset of the labelled items is the
pilot; ``plan_labels_from_pilot`` recommends N (the pessimistic quantile over the pilot's bootstrap
replicates) with its spread (10 % / median / 90 %); then ``--draws`` calibration splits of N items are
drawn without replacement from the items **not in the pilot** (the held-apart pool, M items) and
certified as ``workbench thresholds`` does (default options, the pooled certificate; the first draw of
every pilot is checked against ``choose_thresholds`` itself). A draw succeeds when it certifies and,
with a target, its certified coverage reaches the target. Prints one row per pilot, then the spread of
N (min / quartiles / max) and the share of pilots whose real probability is ≥ ``--accept``.

Where the items come from (``--pool``):

- ``run`` (default): the run's stored answers; the pilot comes from its calibration items, the pool is
  its calibration + test items outside the pilot (BANKING77: M = 4,815; HWU64: M = 2,795).
- ``oof``: out-of-fold answers of the offline baseline (``baseline:tfidf-logreg``'s own pipeline,
  ``TfidfLogReg``) over **every labelled item of the run's dataset**, train split included:
  ``--folds`` folds, each predicted by the model trained on the others (3 folds train on 2/3 of the
  items, close to the run's training share). Pilot and pool both come from these answers, so the pool
  holds everything not in the pilot (BANKING77: M = 12,783; HWU64: M = 10,736). This is the same model
  class on a comparable training size, not the run's model: a population of its own, larger.

A pool of M items cannot check every N. Draws of n items out of M share a growing part of their
items (the pool's own sampling noise is a share n/M of their variance), so a split is drawn at
``n = min(N, ⌊max_share · M⌋)`` (``--max-share``, default 0.5). A pilot whose N is larger is checked at
that cap and passes only when the target is reached there in ≥ ``--accept`` of the draws: valid
because the probability of success does not fall as N grows, which the bench checks on every capped
pilot (the real probability at cap/4, cap/2 and the cap, in the row's ``monotone``; a decrease beyond
the draws' noise is printed). A pilot without a recommendation counts as a failure.
(The model's answers are computed once: everything here resamples them.)

Acceptance of issue 28 §3 (``workbench run … --provider baseline:tfidf-logreg`` on the bundled
BANKING77 and HWU64, ``--pilots 20 --pilot-size 300``): real probability ≥ 0.75 for ≥ 90 % of the pilots.
To build the store::

    python -c "import workbench as wb; from workbench.store.db import connect
    con = connect('b77.duckdb'); wb.import_dataset(con, **wb.bundled_dataset('banking77'))
    print(wb.run(con, 'banking77', wb.bundled_schema_file('banking77'), 'baseline:tfidf-logreg'))"
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "runtime")]


def certify(probs, labels, opts, gx, gy, qtype):
    """``choose_thresholds``' pooled guarantee on one calibration split: (certified, certified coverage)."""
    from workbench.metrics.recalibrate import apply_calibrator, fit_calibrator
    from workbench.thresholds.guarantees import select_guarantee_split
    from workbench.thresholds.rules import RuleCoordinates, rule_coordinates

    fit = np.random.default_rng(opts.seed).random(len(labels)) < opts.calibrator_fraction
    cal = fit_calibrator(opts.calibrate, probs[fit], labels[fit])
    co = rule_coordinates(qtype, apply_calibrator(cal, probs[~fit]))
    correct = co.predicted == labels[~fit]
    pooled = RuleCoordinates(np.zeros(len(correct), int), co.x, co.y, co.x_name, co.y_name)
    sel, _ = select_guarantee_split(
        pooled,
        correct,
        x_grid=gx,
        y_grid=gy,
        n_classes=1,
        alpha=opts.alpha,
        delta=opts.delta,
        order_fraction=opts.order_fraction,
        rng=np.random.default_rng([opts.seed, 1]),
    )
    ok = bool(sel.certified and sel.feasible)
    return ok, (float(sel.guarantee["expected_coverage"]) if ok else 0.0), sel


def oof_answers(con, run_id: str, question: str, folds: int, seed: int = 0):
    """Out-of-fold answers of the offline baseline over every labelled item of the run's dataset.

    Each of ``folds`` random folds is answered by ``TfidfLogReg`` (the pipeline of
    ``baseline:tfidf-logreg``) trained on the other folds; returns a ``RunAnswers`` of the run's
    question over all labelled items (``splits`` holds the dataset split)."""
    from workbench.answers import RunAnswers
    from workbench.providers.baselines import TfidfLogReg
    from workbench.providers.local import state_text
    from workbench.store.datasets import load_items, load_labels
    from workbench.store.runs import get_run, load_answers, question_of

    run = get_run(con, run_id)
    q = question_of(con, run, question)
    ref = load_answers(con, run_id, question, run["splits"])
    items = load_items(con, run["dataset"], run["dataset_version"])
    gold = load_labels(con, run["dataset"], run["dataset_version"], question=question)
    gold = gold.set_index("item_id")["option_id"].reindex(items["item_id"])
    keep = gold.notna().to_numpy() & np.isin(gold.to_numpy().astype(str), ref.option_ids)
    items, gold = items[keep], gold[keep].to_numpy().astype(str)
    texts = np.array([state_text(v) for v in items["state"]], dtype=object)
    fold = np.random.default_rng([seed, 3]).permutation(len(texts)) % folds
    probs = np.empty((len(texts), len(ref.option_ids)))
    for k in range(folds):
        tr = fold != k
        model = TfidfLogReg(texts[tr], {question: list(gold[tr])}, identity=f"oof-{k}")
        probs[~tr] = model.predict_proba(question, q, list(texts[~tr]))
    n = len(texts)
    labels = np.array([ref.option_ids.index(g) for g in gold])
    return RunAnswers(
        f"{run_id}-oof{folds}",
        question,
        ref.qtype,
        list(ref.option_ids),
        items["item_id"].to_numpy().astype(str),
        items["split"].to_numpy().astype(str),
        probs,
        labels,
        np.zeros(n, dtype=bool),
        np.full(n, None, dtype=object),
        np.zeros(n),
        np.zeros(n),
        np.zeros(n),
    )


def real_probability(pool, rest, n, draws, seed, opts, gx, gy, target, check=False) -> tuple[float, float]:
    """Share of ``draws`` splits of ``n`` items out of ``rest`` (pool positions) that succeed, and their
    mean certified coverage; with ``check`` the first draw is compared with ``choose_thresholds``."""
    from workbench.thresholds.choose import choose_thresholds

    rng = np.random.default_rng([seed, 99] if check else [seed, 99, n])
    hits, covs = [], []
    for d in range(draws):
        pick = np.sort(rng.choice(rest, n, replace=False))  # in pool order, as a split is
        ok, cov, sel = certify(pool.probs[pick], pool.labels[pick], opts, gx, gy, pool.qtype)
        if check and d == 0:  # the fast path is the workbench's own certificate
            mask = np.zeros(len(pool.labels), dtype=bool)
            mask[pick] = True
            full = choose_thresholds(pool.select(mask), None, opts).selection
            assert (full.certified, full.x, full.y) == (sel.certified, sel.x, sel.y), "fast path differs"
        hits.append(ok and (target is None or cov >= target - 1e-12))
        covs.append(cov)
    return float(np.mean(hits)), float(np.mean(covs))


def main() -> None:
    from workbench.store.db import connect
    from workbench.store.runs import load_answers
    from workbench.thresholds.options import ThresholdOptions
    from workbench.thresholds.planning import plan_labels_from_pilot
    from workbench.thresholds.surface import default_grids

    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--question", default="intent")
    ap.add_argument("--pilots", type=int, default=20)
    ap.add_argument("--pilot-size", type=int, default=300)
    ap.add_argument("--target-coverage", type=float, default=None)
    ap.add_argument("--max-error", type=float, default=0.05)
    ap.add_argument("--errors", default="logistic")
    ap.add_argument("--confidence", type=float, default=0.9, help="the planner's quantile over pilot bootstraps")
    ap.add_argument("--draws", type=int, default=200, help="real held-apart draws per pilot")
    ap.add_argument("--accept", type=float, default=0.75, help="a pilot passes when its real probability ≥ this")
    ap.add_argument("--pool", choices=("run", "oof"), default="run", help="where pilots and held-apart draws come from")
    ap.add_argument("--folds", type=int, default=3, help="--pool oof: folds of the out-of-fold answers")
    ap.add_argument("--max-share", type=float, default=0.5, help="draw at most this share of the held-apart pool")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    con = connect(args.db, read_only=True)
    if args.pool == "oof":
        t0 = time.perf_counter()
        pool = oof_answers(con, args.run, args.question, args.folds)
        cal = pool
        print(f"out-of-fold answers: {len(pool.labels)} items, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    else:
        cal = load_answers(con, args.run, args.question, ["calibration"])
        pool = load_answers(con, args.run, args.question, ["calibration", "test"])
    con.close()
    cal, pool = cal.select(cal.labels >= 0), pool.select(pool.labels >= 0)
    opts = ThresholdOptions(alpha=args.max_error)
    gx, gy = default_grids(cal.qtype, opts.grid)
    target = args.target_coverage
    rows = []
    for seed in range(args.pilots):
        idx = np.random.default_rng([seed, 28]).choice(len(cal.labels), args.pilot_size, replace=False)
        t0 = time.perf_counter()
        plan = plan_labels_from_pilot(
            cal.probs[idx],
            cal.labels[idx],
            cal.qtype,
            opts,
            question=args.question,
            errors=args.errors,
            target_coverage=target,
            confidence=args.confidence,
            seed=seed,
        )
        plan_s = time.perf_counter() - t0
        n = plan.recommended_labels
        rest = np.flatnonzero(~np.isin(pool.item_ids, cal.item_ids[idx]))
        cap = int(args.max_share * len(rest))
        rng_ = plan.labels_range
        row = {
            "pilot": seed,
            "status": plan.status,
            "n": n,
            "low": rng_["low"],
            "median": rng_["median"],
            "high": rng_["high"],
            "warned": ", ".join(
                k for k, w in (("noise", "cannot tell"), ("spread", "disagree")) if any(w in x for x in plan.warnings)
            )
            or "no",
            "plan_s": plan_s,
            "pool": len(rest),
            "checked_at": None,
            "predicted": None,
            "real": None,
            "real_coverage": None,
            "monotone": None,
            "verdict": "",
        }
        if n is None:
            row["verdict"] = "no recommendation (beyond --max-labels): counted as a failure"
        else:
            row["predicted"] = next(r["p_target"] for r in plan.curve if r["n_labels"] == n)
            at = min(n, cap)
            row["checked_at"] = at
            row["real"], row["real_coverage"] = real_probability(
                pool, rest, at, args.draws, seed, opts, gx, gy, target, check=True
            )
            row["verdict"] = "pass" if row["real"] >= args.accept else "FAIL"
            if at < n:  # checked at the cap: success must not fall with N (checked below the cap)
                row["verdict"] += f" (checked at {at:,} ≤ {args.max_share:g} of the pool)"
                row["monotone"] = {
                    m: real_probability(pool, rest, m, args.draws, seed, opts, gx, gy, target)[0]
                    for m in (at // 4, at // 2)
                } | {at: row["real"]}
                p = list(row["monotone"].values())
                se = 2 * np.sqrt(0.25 / args.draws)
                if any(b < a - se for a, b in zip(p, p[1:], strict=False)):
                    row["verdict"] += " — NOT MONOTONE: the check at the cap is not valid"
        rows.append(row)
        if not args.json:
            print(_fmt(row), flush=True)
    ns = [r["n"] for r in rows if r["n"] is not None]
    passed = sum(r["verdict"].startswith("pass") and "NOT MONOTONE" not in r["verdict"] for r in rows)
    q = np.percentile(ns, [25, 50, 75]) if ns else [None] * 3
    summary = {
        "db": args.db,
        "run": args.run,
        "question": args.question,
        "alpha": opts.alpha,
        "target_coverage": target,
        "confidence": args.confidence,
        "pilots": len(rows),
        "pilot_size": args.pilot_size,
        "draws": args.draws,
        "n_min": min(ns) if ns else None,
        "n_q1": q[0],
        "n_median": q[1],
        "n_q3": q[2],
        "n_max": max(ns) if ns else None,
        "no_recommendation": sum(r["n"] is None for r in rows),
        "pool": args.pool,
        "checked_at_cap": sum(r["monotone"] is not None for r in rows),
        "not_monotone": sum("NOT MONOTONE" in r["verdict"] for r in rows),
        "passed": passed,
        "share_passed": passed / len(rows),
        "plan_s_median": float(np.median([r["plan_s"] for r in rows])),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}))
        return
    print(
        f"{summary['pilots']} pilots of {args.pilot_size}, α = {opts.alpha:g}"
        + (f", target coverage {target:g}" if target is not None else "")
        + f" ({args.pool} pool): recommended N min / quartiles / max "
        + " / ".join(
            "–" if summary[k] is None else f"{summary[k]:,.0f}" for k in ("n_min", "n_q1", "n_median", "n_q3", "n_max")
        )
        + f" ({summary['no_recommendation']} without a recommendation, {summary['checked_at_cap']} checked at "
        f"{args.max_share:g} of the pool, {summary['not_monotone']} of them not monotone); "
        f"real P ≥ {args.accept:g} for {passed}/{len(rows)} pilots ({100 * summary['share_passed']:.0f}%); "
        f"plan time median {summary['plan_s_median']:.1f} s"
    )


def _fmt(r: dict) -> str:
    def n(v):
        return "–" if v is None else f"{v:,}"

    def p(v):
        return "–" if v is None else f"{v:.3f}"

    return (
        f"pilot {r['pilot']:2d}  N {n(r['n']):>7}  [10% {n(r['low']):>7}, median {n(r['median']):>7}, 90% {n(r['high']):>7}]"
        f"  warned {r['warned']:13}  predicted {p(r['predicted'])}  real {p(r['real'])}"
        f"  real coverage {p(r['real_coverage'])}  {r['verdict']}"
        + ("  real P at " + ", ".join(f"{k:,}: {v:.3f}" for k, v in r["monotone"].items()) if r["monotone"] else "")
    )


if __name__ == "__main__":
    main()
