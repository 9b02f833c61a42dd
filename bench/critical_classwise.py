"""A rare critical intent: one global constrained rule against class-conditional rules (issue 28 §1).

BANKING77 or HWU64 (``--dataset``) answered once by the TF-IDF baseline (``--build``: the bundled dataset
imported with ``--calibration-fraction`` of its train split as calibration, default 0.6, so the critical
intent has enough calibration items; the rest of train fits the baseline). Every resplit reshuffles the
answered calibration and test items into two halves, so no model is called again. Per resplit and critical
setting (one intent made critical with ``--critical intent:β``), at the same options (α, δ, temperature
recalibration, fixed-sequence with a learned order — the defaults), the ``--procedures``:

- ``global``: today's constrained rule (one (τ, m) as strict as the critical intent needs);
- ``class_conditional``: ``--class-conditional`` (a strict margin for the options the critical intent is
  confused with and a loose one elsewhere, group and test chain learned on the calibrator's carve);
- ``global_carve``: one margin for every option through the same code (``--confusable`` = all options), i.e.
  a global rule whose order is learned on the carve: what the carve alone gives, apart from the family;
- ``unconstrained``: no critical option, for reference.

Judged on the held-out half: test coverage, test error among accepted (> α is a violation), the test
share of the critical intent's items auto-accepted as another option (> β is a violation; ~50 items, so
noisy), and the share of resplits certifying nothing.

``--settings auto`` picks the critical intents by :func:`select_settings`, a rule fixed before any rule was
certified on them: share 1–3%, at least 3 confident misroutes, ≥ 80% of them into ≤ 3 neighbours, the 3
most confidently confused (the issue's "rare class easily confused with a neighbour").

    python bench/critical_classwise.py --build --dataset banking77 --db /tmp/cw_b77.duckdb --resplits 0
    python bench/critical_classwise.py --build --dataset hwu64 --db /tmp/cw_hwu.duckdb --resplits 0
    python bench/critical_classwise.py --db /tmp/cw_b77.duckdb --settings auto --resplits 200   # ~10 min
    python bench/critical_classwise.py --db /tmp/cw_b77.duckdb --settings auto --procedures global_carve

Measured (200 resplits, α = β = δ = 0.1; BANKING77 4,526 calibration / 4,527 test, HWU64 3,549 / 3,550;
"s4" = the class-conditional rule before its order moved to the carve, same resplits):

    critical (share)                  rule                  nothing  coverage  P(err>α)  P(crit>β)  × global
    BANKING77 pending_top_up (1.6%)   global                0.130    0.508     0.000     0.060
                                      global, carve order   0.000    0.645     0.000     0.070      1.27
                                      class-cond. (s4)      0.000    0.709     0.035     0.000      1.39
                                      class-conditional     0.000    0.786     0.040     0.005      1.55
    unable_to_verify_identity (1.2%)  global                0.570    0.233     0.000     0.055
                                      global, carve order   0.000    0.547     0.000     0.075      2.34
                                      class-cond. (s4)      0.565    0.326     0.020     0.005      1.40
                                      class-conditional     0.000    0.753     0.055     0.005      3.23
    top_up_failed (1.4%)              global                0.005    0.720     0.000     0.075
                                      global, carve order   0.000    0.747     0.000     0.075      1.04
                                      class-cond. (s4)      0.005    0.780     0.030     0.000      1.08
                                      class-conditional     0.000    0.809     0.035     0.000      1.12
    HWU64 music_query (1.9%)          global                0.000    0.672     0.000     0.060
                                      global, carve order   0.000    0.707     0.005     0.090      1.05
                                      class-cond. (s4)      0.000    0.724     0.015     0.035      1.08
                                      class-conditional     0.000    0.785     0.030     0.035      1.17
    takeaway_query (1.9%)             global                0.000    0.620     0.000     0.065
                                      global, carve order   0.000    0.679     0.000     0.080      1.10
                                      class-cond. (s4)      0.000    0.712     0.035     0.010      1.15
                                      class-conditional     0.000    0.790     0.050     0.000      1.27
    takeaway_order (1.9%)             global                0.165    0.546     0.000     0.060
                                      global, carve order   0.000    0.727     0.000     0.085      1.33
                                      class-cond. (s4)      0.005    0.677     0.015     0.000      1.24
                                      class-conditional     0.000    0.779     0.025     0.005      1.43

(unconstrained: coverage 0.850 / 0.833, P(test err > α) 0.110 / 0.055 — the population guarantee plus the
test half's noise.) Both risks stay within δ on the held-out half everywhere at α = 0.1.

At α = 0.05 (same settings, β = δ = 0.1), global → class-conditional coverage: pending_top_up 0.489 → 0.659
(1.35×), unable_to_verify_identity 0.228 → 0.652 (2.86×, nothing certified 57% → 0%), top_up_failed 0.671 →
0.671 (1.00×: the error bound binds, unconstrained 0.676), music_query 0.648 → 0.695 (1.07×), takeaway_query
0.594 → 0.680 (1.14×), takeaway_order 0.517 → 0.674 (1.30×); P(test crit > β) 0.000 everywhere, P(test err >
α) 0.065–0.085 on BANKING77 and 0.065 / 0.110 / 0.110 on HWU64 (unconstrained 0.070): a rule certified close
to α exceeds it on a ~2,400-item test half often without exceeding it in the population (issue 28 §5); the
population check is the simulation of ``tests/thresholds/test_classwise.py``.

The previous session's settings (``--settings wrong_exchange_rate_for_cash_withdrawal:0.1,
virtual_card_not_working:0.15``, α = δ = 0.1, 200 resplits): global 0.225 → class-conditional 0.664 (2.96×,
was 2.07×; nothing certified 46.5% → 4%, P(test crit > β) 0.050, P(test err > α) 0.030; global with carve
order 0.413) and 0.460 → 0.800 (1.74×, was 1.42×; P(test err > α) 0.085, P(test crit > β) 0.000). 3× is reached where the global
rule collapses (``unable_to_verify_identity``: 57% of resplits certify nothing, as in the issue's 27%); where
it keeps 0.5–0.7 of 0.85 the ratio is capped by the unconstrained coverage (≤ 1.7×). Of the 3.23×, 2.34× is
the carve (which a global rule could use too: guarantees.certify_surface still holds rows apart), 1.38× the
family. The rest of the gap to the unconstrained 0.85 is data: with ~36 certifying critical items β = 0.1
allows no misroute, and single confident misroutes into unrelated options (``transfer_timing``) force the
loose margin up; the family's best pair with p ≤ δ (no family-wise correction) covered within 0.015 of the
chosen one in 3 of the 4 resplits looked at (0.16 more in the 4th), so the order is rarely the limit.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

SETTINGS = (
    ("wrong_exchange_rate_for_cash_withdrawal", 0.1),
    ("virtual_card_not_working", 0.15),
    ("pending_top_up", 0.1),
)


#: The rules compared per resplit: ThresholdOptions changes from the constrained default, given the option ids.
PROCEDURES = {
    "unconstrained": lambda ids: {"constraints": None},
    "global": lambda ids: {},
    "class_conditional": lambda ids: {"class_conditional": True},
    # one margin for every option through the class-conditional code (strict group = all options): a global
    # rule whose order is learned on the calibrator's carve, so every other row certifies — what the
    # class-conditional rule gains from the carve alone, apart from its family
    "global_carve": lambda ids: {"class_conditional": True, "confusable": ids},
}


def build(db: Path, dataset: str, calibration_fraction: float) -> None:
    import workbench as wb

    con = wb.connect(db)
    spec = {**wb.bundled_dataset(dataset), "calibration_fraction": calibration_fraction}
    wb.import_dataset(con, **spec)
    wb.run(con, dataset, wb.load_schema(wb.bundled_schema_file(dataset)), "baseline:tfidf-logreg", name="tfidf")
    con.close()


def load(db: Path):
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    con = connect(db, read_only=True)
    try:
        ans = load_answers(con, "tfidf", "intent", splits=["calibration", "test"])
    finally:
        con.close()
    return ans.select(ans.labels >= 0)


#: The α of the selection rule's "confident" margin, whatever α the rules are certified at (same settings at every α).
SELECT_ALPHA = 0.1


def select_settings(
    ans,
    *,
    alpha: float,
    n: int = 3,
    share=(0.01, 0.03),
    min_confident: int = 3,
    top: int = 3,
    concentration: float = 0.8,
) -> list[tuple[str, dict]]:
    """The critical intents, by a rule fixed before any rule was certified (issue 28 §1: a rare class easily
    confused with a neighbour), on the whole resplit pool (calibration + test items, raw probabilities):

    - a *confident misroute* of intent ``c`` is an item of ``c`` predicted as another option with a margin at
      least ``m*``, the loosest global margin whose pool error is ≤ ``alpha`` (the items an unconstrained rule
      would roughly accept — the ones that force a constrained global rule to be strict);
    - eligible: a ``share`` of the pool in [1%, 3%], at least ``min_confident`` confident misroutes, and at least
      ``concentration`` of them going to its ``top`` most frequent wrong options (confused with 1–3 neighbours);
    - the ``n`` eligible intents with the most confident misroutes are made critical.

    Returns (intent, description) pairs, most confidently confused first."""
    p = np.asarray(ans.probs, dtype=float)
    y = np.asarray(ans.labels)
    srt = np.sort(p, axis=1)
    pred, margin = p.argmax(axis=1), srt[:, -1] - srt[:, -2]
    o = np.argsort(-margin, kind="stable")
    err = np.cumsum((pred != y)[o]) / np.arange(1, len(o) + 1)
    m_star = float(margin[o][np.nonzero(err <= alpha)[0].max()])
    confident = margin >= m_star
    k, names = p.shape[1], list(ans.option_ids)
    found = []
    for c in range(k):
        sh = float(np.mean(y == c))
        cnt = np.bincount(pred[confident & (y == c) & (pred != c)], minlength=k)
        nb = np.argsort(-cnt, kind="stable")[:top]
        tot = int(cnt.sum())
        frac = float(cnt[nb].sum() / tot) if tot else 0.0
        if share[0] <= sh <= share[1] and tot >= min_confident and frac >= concentration:
            found.append(
                (
                    tot,
                    names[c],
                    {
                        "share": sh,
                        "confident_misroutes": tot,
                        "top_neighbours": frac,
                        "neighbours": {names[i]: int(cnt[i]) for i in nb if cnt[i]},
                        "m_star": m_star,
                    },
                )
            )
    found.sort(key=lambda t: -t[0])  # stable: option order among ties
    return [(name, d) for _, name, d in found[:n]]


def one(cal, test, opts) -> dict:
    from workbench.thresholds.choose import choose_thresholds

    res = choose_thresholds(cal, test, opts)
    t = res.test or {}
    crit = ((res.test_risks or {}).get("constraints") or [{}])[0]
    return {
        "certified": res.certified,
        "coverage": (t.get("coverage") or {}).get("value") or 0.0,
        "error": (t.get("error") or {}).get("value"),
        "critical_rate": crit.get("rate"),
        "strict": ((res.selection.guarantee or {}).get("class_conditional") or {}).get("strict"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--build", action="store_true", help="make the store first (imports --dataset, runs tf-idf)")
    ap.add_argument(
        "--dataset", choices=("banking77", "hwu64"), default="banking77", help="the bundled dataset (--build)"
    )
    ap.add_argument("--calibration-fraction", type=float, default=0.6)
    ap.add_argument("--resplits", type=int, default=200)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument(
        "--settings", default=None, help="INTENT:BETA,... or 'auto' (select_settings; default: the three of SETTINGS)"
    )
    ap.add_argument("--n-settings", type=int, default=3, help="with --settings auto: how many intents")
    ap.add_argument("--beta", type=float, default=0.1, help="with --settings auto: the critical bound")
    ap.add_argument("--out", type=Path, default=None, help="write every resplit's figures as JSON")
    ap.add_argument(
        "--procedures",
        default="unconstrained,global,class_conditional",
        help=f"comma-separated, of {', '.join(PROCEDURES)}",
    )
    args = ap.parse_args()
    if args.build:
        build(args.db, args.dataset, args.calibration_fraction)
    from workbench.thresholds.options import ThresholdOptions

    kinds = args.procedures.split(",")
    unknown = [k for k in kinds if k not in PROCEDURES]
    if unknown:
        ap.error(f"unknown procedure {unknown[0]!r}: use {', '.join(PROCEDURES)}")
    ans = load(args.db)
    n = len(ans.labels)
    print(f"{args.db}: tf-idf, {n} labelled items, {n // 2} calibration / {n - n // 2} test per resplit")
    if args.settings == "auto":
        chosen = select_settings(ans, alpha=SELECT_ALPHA, n=args.n_settings)
        for name, d in chosen:
            print(f"  critical {name}: {json.dumps(d, default=float)}")
        settings = [(name, args.beta) for name, _ in chosen]
    elif args.settings:
        settings = [(s.rpartition(":")[0], float(s.rpartition(":")[2])) for s in args.settings.split(",")]
    else:
        settings = list(SETTINGS)
    rows: list[dict] = []
    t0 = time.time()
    for crit, beta in settings:
        share = float(np.mean(np.asarray(ans.option_ids)[ans.labels] == crit))
        base = ThresholdOptions(alpha=args.alpha, delta=args.delta, constraints={crit: beta})
        for r in range(args.resplits):
            cal_mask = np.zeros(n, dtype=bool)
            cal_mask[np.random.default_rng([28, 1, r]).permutation(n)[: n // 2]] = True
            cal, test = ans.select(cal_mask), ans.select(~cal_mask)
            row: dict = {"critical": crit, "beta": beta, "share": share, "resplit": r}
            for kind in kinds:
                row[kind] = one(cal, test, replace(base, **PROCEDURES[kind](list(ans.option_ids))))
            rows.append(row)
            if r % 50 == 49:
                print(f"  {crit}: {r + 1} resplits, {time.time() - t0:.0f} s", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1, default=float))
    report(rows, args)


def report(rows: list[dict], args) -> None:
    print(f"\nα = {args.alpha:g}, δ = {args.delta:g}; test figures on the held-out half, means over resplits")
    head = (
        "critical (share of traffic)",
        "β",
        "rule",
        "certified nothing",
        "test coverage",
        "P(err > α)",
        "P(crit > β)",
    )
    print(" | ".join(head))
    for crit, beta in dict.fromkeys((r["critical"], r["beta"]) for r in rows):
        sub = [r for r in rows if r["critical"] == crit and r["beta"] == beta]
        share = sub[0]["share"]
        cov = {}
        for kind in (k for k in PROCEDURES if k in sub[0]):
            v = [r[kind] for r in sub]
            cov[kind] = float(np.mean([x["coverage"] for x in v]))
            none = np.mean([not x["certified"] for x in v])
            err = np.mean([x["error"] is not None and x["error"] > args.alpha for x in v])
            crit_v = (
                "–"
                if kind == "unconstrained"
                else f"{np.mean([x['critical_rate'] is not None and x['critical_rate'] > beta for x in v]):.3f}"
            )
            print(
                f"{crit} ({100 * share:.1f}%) | {beta:g} | {kind} | {none:.3f} | {cov[kind]:.3f} | {err:.3f} | {crit_v}"
            )
        for kind in ("class_conditional", "global_carve"):
            if kind in cov and "global" in cov:
                ratio = cov[kind] / cov["global"] if cov["global"] else float("inf")
                print(f"  {kind} / global coverage: {ratio:.2f}× over {len(sub)} resplits")


if __name__ == "__main__":
    main()
