"""The shadow report: what would change if the challenger replaced the champion, and a verdict.

Per question, on the same requests:

- **agreement** of the top choices (with a Wilson interval) and the **flip matrix**
  (champion choice × challenger choice, both answered);
- **directional disagreements** under each side's policy: the challenger would auto-accept where
  the champion routed to review, and the reverse; both accept but different answers;
- **review load** of each side and its change (paired bootstrap interval);
- **error** on requests whose outcome is known: error among auto-accepted, errors per request and
  top-choice accuracy of each side, paired differences with intervals (paired bootstrap) and
  McNemar's test on top-choice correctness — all from :mod:`workbench.metrics.bootstrap`;
- **cost** per 1,000 requests and **latency** p50/p95 of each side;
- **drift**: PSI and Jensen–Shannon divergence of the ``p_top`` histogram of each window against
  the first window, per side, and between the sides in each window;
- a **verdict** PROMOTE / HOLD / REJECT with one ledger line per gate (:class:`Criteria`).

The champion's decisions are its *logged* actions where the log has them (what production did),
otherwise its policy's; the challenger's are always its policy's (it never acted).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from workbench.metrics.bootstrap import mcnemar, paired_bootstrap
from workbench.metrics.confusion import confusion_matrix
from workbench.metrics.reliability import wilson_interval
from workbench.shadow.drift import histogram, js_divergence, psi, time_window_bounds, window_bounds
from workbench.shadow.policies import SidePolicy, is_accept
from workbench.store.shadow import ShadowAnswers
from workbench.thresholds.rules import top_two_fast

PROMOTE, HOLD, REJECT = "PROMOTE", "HOLD", "REJECT"
_RANK = {PROMOTE: 0, HOLD: 1, REJECT: 2}


@dataclass
class Criteria:
    """What the user requires before a rollout (absolute differences, challenger − champion).

    Parameters
    ----------
    max_error_increase : float, default=0.0
        Largest acceptable rise of the error rate among auto-accepted requests. REJECT when the
        interval's lower bound is above it; PROMOTE needs the upper bound at or below it.
    min_coverage_gain : float, default=0.0
        Smallest auto-accept rate gain worth a rollout. REJECT when the interval's upper bound
        is below it.
    max_p95_latency_ms : float or None
        Largest acceptable challenger p95 latency.
    max_cost_increase_per_1000 : float or None
        Largest acceptable cost increase in USD per 1,000 requests.
    max_failure_rate : float, default=0.01
        Largest acceptable share of challenger failures (timeouts, errors, malformed answers).
    min_outcomes : int, default=100
        Requests with a known outcome needed to judge the error gate.
    max_drift_psi : float, default=0.25
        A challenger whose ``p_top`` distribution moves more than this between windows is HELD.
    level : float, default=0.95
        Confidence level of the intervals.
    """

    max_error_increase: float = 0.0
    min_coverage_gain: float = 0.0
    max_p95_latency_ms: float | None = None
    max_cost_increase_per_1000: float | None = None
    max_failure_rate: float = 0.01
    min_outcomes: int = 100
    max_drift_psi: float | None = 0.25
    level: float = 0.95


@dataclass
class Gate:
    """One line of the verdict ledger."""

    gate: str
    status: str  # pass | fail | inconclusive
    verdict: str  # what this gate alone implies: PROMOTE | HOLD | REJECT
    message: str
    value: Any = None
    limit: Any = None
    question: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _top_choice(probs: np.ndarray) -> np.ndarray:
    top, _, _ = top_two_fast(probs) if len(probs) else (np.zeros(0, int), None, None)
    return np.where(np.isfinite(probs).all(axis=1), top, -1) if len(probs) else np.zeros(0, int)


def _side_decisions(
    policy: SidePolicy | None,
    s: ShadowAnswers,
    probs: np.ndarray,
    failed: np.ndarray,
    logged: np.ndarray | None,
    models: np.ndarray | None,
    schema_hash: str | None = None,
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(accepted (n,), option (n,), source) or None when the side has neither a policy nor a log.

    ``schema_hash`` is the hash of the schema this side's requests were sent with: a policy restricted
    to other schemas accepts none of them (as the runtime refuses them)."""
    top = _top_choice(probs)
    has_log = None if logged is None else pd.notna(np.asarray(logged, dtype=object))
    decided = policy.decide(s.question, s.qtype, probs, models, schema_hash) if policy is not None else None
    if decided is None and (has_log is None or not has_log.any()):
        return None
    if decided is not None:
        accepted, option = decided.accepted.copy(), np.where(decided.option >= 0, decided.option, top)
    else:
        accepted, option = np.zeros(s.n, bool), top
    source = "policy" if has_log is None or not has_log.any() else ("log" if decided is None else "log+policy")
    if has_log is not None and has_log.any() and logged is not None:
        accepted = np.where(has_log, is_accept(logged), accepted)
        option = np.where(has_log, top, option)
    return accepted & ~failed, option, source


def _quantiles(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"n": 0, "p50": None, "p95": None, "mean": None}
    return {
        "n": int(x.size),
        "p50": float(np.percentile(x, 50)),
        "p95": float(np.percentile(x, 95)),
        "mean": float(x.mean()),
    }


def _per_1000(cost: np.ndarray) -> float | None:
    known = np.isfinite(cost)
    if not known.any():
        return None
    return float(np.mean(cost[known]) * 1000.0)


def _wmean(x: np.ndarray, w: np.ndarray | None) -> float:
    if w is None:
        return float(np.mean(x)) if x.size else float("nan")
    total = w.sum()
    return float(w @ x / total) if total > 0 else float("nan")


def _rate_stats(accepted: np.ndarray, wrong: np.ndarray, top_correct: np.ndarray):
    """Bootstrap statistics of one side on known-outcome requests (weights = resample counts)."""
    acc = accepted.astype(float)
    err = (accepted & wrong).astype(float)
    top = top_correct.astype(float)

    def stats(w: np.ndarray | None) -> dict[str, float]:
        n_acc = acc.sum() if w is None else w @ acc
        n_err = err.sum() if w is None else w @ err
        return {
            "error_among_accepted": float(n_err / n_acc) if n_acc > 0 else 0.0,
            "errors_per_request": _wmean(err, w),
            "coverage": _wmean(acc, w),
            "top_accuracy": _wmean(top, w),
        }

    return stats


def _question_report(
    s: ShadowAnswers,
    champion: SidePolicy | None,
    challenger: SidePolicy | None,
    *,
    criteria: Criteria,
    n_windows: int,
    n_boot: int,
    seed: int,
    period: str | None = None,
) -> dict:
    n, k = s.n, len(s.option_ids)
    cf = pd.notna(np.asarray(s.champion_failure, dtype=object)) if n else np.zeros(0, bool)
    df = pd.notna(np.asarray(s.challenger_failure, dtype=object)) if n else np.zeros(0, bool)
    top_c, top_d = _top_choice(s.champion_probs), _top_choice(s.challenger_probs)
    both = ~cf & ~df
    out: dict[str, Any] = {
        "question": s.question,
        "type": s.qtype,
        "options": s.option_ids,
        "n_requests": n,
        "n_both_answered": int(both.sum()),
    }
    kinds_c: Any
    kinds_d: Any
    counts_c: Any
    counts_d: Any
    kinds_c, counts_c = np.unique(s.champion_failure[cf].astype(str), return_counts=True) if cf.any() else ([], [])
    kinds_d, counts_d = np.unique(s.challenger_failure[df].astype(str), return_counts=True) if df.any() else ([], [])
    out["failures"] = {
        "champion": {
            "rate": float(cf.mean()) if n else None,
            "by_kind": dict(zip(map(str, kinds_c), map(int, counts_c))),
        },
        "challenger": {
            "rate": float(df.mean()) if n else None,
            "by_kind": dict(zip(map(str, kinds_d), map(int, counts_d))),
        },
    }

    # -- agreement and flips (answers, before any policy) -----------------------------------------
    agree = top_c[both] == top_d[both]
    lo, hi = wilson_interval(np.array([agree.sum()]), np.array([agree.size]))
    out["agreement"] = {
        "rate": float(agree.mean()) if agree.size else None,
        "n": int(agree.size),
        "low": float(lo[0]),
        "high": float(hi[0]),
    }
    flips = confusion_matrix(top_c[both], top_d[both], k)[:, :k] if both.any() else np.zeros((k, k), int)
    off = [(int(flips[i, j]), s.option_ids[i], s.option_ids[j]) for i, j in zip(*np.nonzero(flips)) if i != j]
    off.sort(key=lambda t: -t[0])
    out["flip_matrix"] = {
        "rows": "champion",
        "columns": "challenger",
        "options": s.option_ids,
        "counts": flips.tolist(),
        "top_flips": [{"champion": a, "challenger": b, "count": c} for c, a, b in off[:10]],
    }

    # -- decisions under each side's policy ---------------------------------------------------------
    hash_c, hash_d = s.extra.get("champion_schema_hash"), s.extra.get("challenger_schema_hash")
    dec_c = _side_decisions(champion, s, s.champion_probs, cf, s.champion_logged, s.champion_model, hash_c)
    dec_d = _side_decisions(challenger, s, s.challenger_probs, df, None, s.challenger_model, hash_d)
    out["decisions"] = {"champion": dec_c[2] if dec_c else None, "challenger": dec_d[2] if dec_d else None}
    refusals = {
        side: pol.schema_refusal(h)
        for side, pol, h in (("champion", champion, hash_c), ("challenger", challenger, hash_d))
        if pol is not None and pol.schema_refusal(h) is not None
    }
    if refusals:
        out["schema_refusals"] = refusals
    if dec_c is None or dec_d is None or n == 0:
        out["directional"] = out["review_load"] = out["error"] = None
        out["notes"] = [
            "no policy (or logged actions) for "
            + " and ".join(side for side, d in (("champion", dec_c), ("challenger", dec_d)) if d is None)
            + ": directional, review-load and error sections need both"
        ]
    else:
        acc_c, opt_c, _ = dec_c
        acc_d, opt_d, _ = dec_d
        out["directional"] = {
            "challenger_accepts_where_champion_reviews": int((acc_d & ~acc_c).sum()),
            "champion_accepts_where_challenger_reviews": int((acc_c & ~acc_d).sum()),
            "both_accept_same_answer": int((acc_c & acc_d & (opt_c == opt_d)).sum()),
            "both_accept_different_answer": int((acc_c & acc_d & (opt_c != opt_d)).sum()),
            "both_review": int((~acc_c & ~acc_d).sum()),
            "n": n,
        }
        one = np.ones(n, bool)
        ones = np.zeros(n, bool)
        load = paired_bootstrap(
            _rate_stats(acc_c, ones, one),
            _rate_stats(acc_d, ones, one),
            n,
            n_boot=n_boot,
            seed=seed,
            level=criteria.level,
        )["coverage"]
        out["review_load"] = {
            "champion": 1.0 - load.a,
            "challenger": 1.0 - load.b,
            "change": -load.difference,
            "low": -load.high,
            "high": -load.low,
            "coverage_gain": load.difference,
            "coverage_gain_low": load.low,
            "coverage_gain_high": load.high,
            "p_value": load.p_value,
        }
        known = s.outcome >= 0
        nk = int(known.sum())
        err: dict[str, Any] = {
            "n_known": nk,
            "n_known_accepted_by_champion": int((known & acc_c).sum()),
            "n_known_accepted_by_challenger": int((known & acc_d).sum()),
        }
        if nk:
            y = s.outcome[known]
            wrong_c, wrong_d = opt_c[known] != y, opt_d[known] != y
            top_ok_c, top_ok_d = top_c[known] == y, top_d[known] == y
            diffs = paired_bootstrap(
                _rate_stats(acc_c[known], wrong_c, top_ok_c),
                _rate_stats(acc_d[known], wrong_d, top_ok_d),
                nk,
                n_boot=n_boot,
                seed=seed + 1,
                level=criteria.level,
            )
            err.update({name: d.to_dict() for name, d in diffs.items()})
            err["mcnemar_top_accuracy"] = mcnemar(top_ok_c, top_ok_d).to_dict()
        out["error"] = err

    # -- cost and latency -------------------------------------------------------------------------
    cost_c, cost_d = _per_1000(s.champion_cost_usd), _per_1000(s.challenger_cost_usd)
    out["cost_per_1000"] = {
        "champion": cost_c,
        "challenger": cost_d,
        "change": None if cost_c is None or cost_d is None else cost_d - cost_c,
    }
    lat_c, lat_d = _quantiles(s.champion_latency_ms), _quantiles(s.challenger_latency_ms)
    out["latency_ms"] = {
        "champion": lat_c,
        "challenger": lat_d,
        "p50_change": None if lat_c["p50"] is None or lat_d["p50"] is None else lat_d["p50"] - lat_c["p50"],
        "p95_change": None if lat_c["p95"] is None or lat_d["p95"] is None else lat_d["p95"] - lat_c["p95"],
    }

    # -- drift of p_top over time windows -----------------------------------------------------------
    out["drift"] = _drift(s, n_windows, period)
    return out


def _drift(s: ShadowAnswers, n_windows: int, period: str | None = None) -> dict:
    ptop_c = top_two_fast(s.champion_probs)[1] if s.n else np.zeros(0)
    ptop_d = top_two_fast(s.challenger_probs)[1] if s.n else np.zeros(0)
    bounds = time_window_bounds(s.ts, period) if period else window_bounds(s.n, n_windows)
    rows: list[dict[str, Any]] = []
    ref_c = histogram(ptop_c[bounds[0][0] : bounds[0][1]]) if bounds and s.n else None
    ref_d = histogram(ptop_d[bounds[0][0] : bounds[0][1]]) if bounds and s.n else None
    for a, b in bounds:
        if b <= a:
            continue
        assert ref_c is not None and ref_d is not None  # bounds exist, so the first window does
        hc, hd = histogram(ptop_c[a:b]), histogram(ptop_d[a:b])
        ts = s.ts[a:b]
        known_ts = ts[~np.isnat(ts)]
        rows.append(
            {
                "start": str(known_ts.min()) if known_ts.size else None,
                "end": str(known_ts.max()) if known_ts.size else None,
                "first_seq": int(s.seq[a]),
                "n": int(b - a),
                "mean_p_top_champion": float(np.nanmean(ptop_c[a:b])) if np.isfinite(ptop_c[a:b]).any() else None,
                "mean_p_top_challenger": float(np.nanmean(ptop_d[a:b])) if np.isfinite(ptop_d[a:b]).any() else None,
                "psi_champion": psi(ref_c, hc),
                "psi_challenger": psi(ref_d, hd),
                "js_champion": js_divergence(ref_c, hc),
                "js_challenger": js_divergence(ref_d, hd),
                "js_between_sides": js_divergence(hc, hd),
            }
        )
    finite = [r["psi_challenger"] for r in rows if np.isfinite(r["psi_challenger"])]
    return {
        "score": "p_top",
        "bins": 10,
        "reference": "first window",
        "windows_by": f"period {period}" if period else f"{len(rows)} equal-count windows in arrival order",
        "windows": rows,
        "max_psi_challenger": max(finite) if finite else None,
        "max_psi_champion": max([r["psi_champion"] for r in rows if np.isfinite(r["psi_champion"])], default=None),
    }


# -- verdict ---------------------------------------------------------------------------------------
def judge(questions: list[dict], criteria: Criteria) -> tuple[str, list[Gate]]:
    """Verdict and ledger from per-question report sections (see :class:`Criteria`).

    REJECT when any gate shows harm; PROMOTE when every gate passes; HOLD otherwise (evidence
    missing or inconclusive).
    """
    gates: list[Gate] = []
    for q in questions:
        qid = q["question"]
        rate = q["failures"]["challenger"]["rate"]
        if rate is None:
            gates.append(Gate("failures", "inconclusive", HOLD, "no requests", None, criteria.max_failure_rate, qid))
        elif rate > criteria.max_failure_rate:
            gates.append(
                Gate(
                    "failures",
                    "fail",
                    REJECT,
                    f"challenger failed on {rate:.1%} of requests",
                    rate,
                    criteria.max_failure_rate,
                    qid,
                )
            )
        else:
            gates.append(
                Gate(
                    "failures",
                    "pass",
                    PROMOTE,
                    f"challenger failure rate {rate:.2%}",
                    rate,
                    criteria.max_failure_rate,
                    qid,
                )
            )

        load = q.get("review_load")
        if load is None:
            gates.append(
                Gate(
                    "coverage",
                    "inconclusive",
                    HOLD,
                    "no policy for one side: coverage not judged",
                    None,
                    criteria.min_coverage_gain,
                    qid,
                )
            )
        else:
            gain, hi = load["coverage_gain"], load["coverage_gain_high"]
            if gain >= criteria.min_coverage_gain:
                gates.append(
                    Gate(
                        "coverage",
                        "pass",
                        PROMOTE,
                        f"auto-accept rate {gain:+.1%} (review load {load['change']:+.1%})",
                        gain,
                        criteria.min_coverage_gain,
                        qid,
                    )
                )
            elif np.isfinite(hi) and hi < criteria.min_coverage_gain:
                gates.append(
                    Gate(
                        "coverage",
                        "fail",
                        REJECT,
                        f"auto-accept rate {gain:+.1%}, interval below the {criteria.min_coverage_gain:+.1%} required",
                        gain,
                        criteria.min_coverage_gain,
                        qid,
                    )
                )
            else:
                gates.append(
                    Gate(
                        "coverage",
                        "inconclusive",
                        HOLD,
                        f"auto-accept rate {gain:+.1%} below the {criteria.min_coverage_gain:+.1%} required "
                        "but within the interval",
                        gain,
                        criteria.min_coverage_gain,
                        qid,
                    )
                )

        err = q.get("error")
        if err is None:
            gates.append(
                Gate(
                    "error",
                    "inconclusive",
                    HOLD,
                    "no policy for one side: error not judged",
                    None,
                    criteria.max_error_increase,
                    qid,
                )
            )
        elif err["n_known"] < criteria.min_outcomes:
            gates.append(
                Gate(
                    "error",
                    "inconclusive",
                    HOLD,
                    f"{err['n_known']} known outcomes, {criteria.min_outcomes} needed",
                    err["n_known"],
                    criteria.min_outcomes,
                    qid,
                )
            )
        else:
            d = err["error_among_accepted"]
            if d["low"] > criteria.max_error_increase:
                gates.append(
                    Gate(
                        "error",
                        "fail",
                        REJECT,
                        f"error among accepted {d['a']:.2%} → {d['b']:.2%} "
                        f"(+{d['difference']:.2%}, interval [{d['low']:+.2%}, {d['high']:+.2%}])",
                        d["difference"],
                        criteria.max_error_increase,
                        qid,
                    )
                )
            elif d["high"] <= criteria.max_error_increase:
                gates.append(
                    Gate(
                        "error",
                        "pass",
                        PROMOTE,
                        f"error among accepted {d['a']:.2%} → {d['b']:.2%} "
                        f"(interval [{d['low']:+.2%}, {d['high']:+.2%}])",
                        d["difference"],
                        criteria.max_error_increase,
                        qid,
                    )
                )
            else:
                gates.append(
                    Gate(
                        "error",
                        "inconclusive",
                        HOLD,
                        f"error change {d['difference']:+.2%} with interval [{d['low']:+.2%}, {d['high']:+.2%}]"
                        f" straddling the {criteria.max_error_increase:+.2%} allowed",
                        d["difference"],
                        criteria.max_error_increase,
                        qid,
                    )
                )

        drift = q["drift"]["max_psi_challenger"]
        if criteria.max_drift_psi is not None and drift is not None and drift > criteria.max_drift_psi:
            gates.append(
                Gate(
                    "drift",
                    "fail",
                    HOLD,
                    f"challenger p_top PSI up to {drift:.3f} across windows",
                    drift,
                    criteria.max_drift_psi,
                    qid,
                )
            )
        elif criteria.max_drift_psi is not None:
            gates.append(
                Gate(
                    "drift",
                    "pass",
                    PROMOTE,
                    f"challenger p_top PSI ≤ {drift if drift is not None else 0:.3f}",
                    drift,
                    criteria.max_drift_psi,
                    qid,
                )
            )

    if questions:  # latency and cost are per request: judged on the first question's rows
        q = questions[0]
        p95 = q["latency_ms"]["challenger"]["p95"]
        if criteria.max_p95_latency_ms is not None:
            if p95 is None:
                gates.append(
                    Gate(
                        "latency", "inconclusive", HOLD, "challenger latency unknown", None, criteria.max_p95_latency_ms
                    )
                )
            elif p95 > criteria.max_p95_latency_ms:
                gates.append(
                    Gate("latency", "fail", REJECT, f"challenger p95 {p95:.0f} ms", p95, criteria.max_p95_latency_ms)
                )
            else:
                gates.append(
                    Gate("latency", "pass", PROMOTE, f"challenger p95 {p95:.0f} ms", p95, criteria.max_p95_latency_ms)
                )
        change = q["cost_per_1000"]["change"]
        if criteria.max_cost_increase_per_1000 is not None:
            if change is None:
                gates.append(
                    Gate(
                        "cost",
                        "inconclusive",
                        HOLD,
                        "cost unknown for one side",
                        None,
                        criteria.max_cost_increase_per_1000,
                    )
                )
            elif change > criteria.max_cost_increase_per_1000:
                gates.append(
                    Gate(
                        "cost",
                        "fail",
                        REJECT,
                        f"cost {change:+.4f} USD per 1,000 requests",
                        change,
                        criteria.max_cost_increase_per_1000,
                    )
                )
            else:
                gates.append(
                    Gate(
                        "cost",
                        "pass",
                        PROMOTE,
                        f"cost {change:+.4f} USD per 1,000 requests",
                        change,
                        criteria.max_cost_increase_per_1000,
                    )
                )
    if not gates:
        return HOLD, [Gate("data", "inconclusive", HOLD, "no requests in the session")]
    verdict = max((g.verdict for g in gates), key=_RANK.__getitem__)
    return verdict, gates


# -- result object ---------------------------------------------------------------------------------
@dataclass
class ShadowReport:
    """Report of one shadow session: ``questions`` (one dict per question), ``verdict`` and ``gates``."""

    shadow: str
    session: dict
    questions: list[dict]
    verdict: str
    gates: list[Gate]
    criteria: Criteria
    policies: dict = field(default_factory=dict)
    slices: dict[str, ShadowSlices] = field(default_factory=dict)

    @property
    def reasons(self) -> list[str]:
        """The gates that decided the verdict (all of them when PROMOTE)."""
        deciding = [g for g in self.gates if g.verdict == self.verdict] or self.gates
        return [f"{g.gate}{' [' + g.question + ']' if g.question else ''}: {g.message}" for g in deciding]

    def to_dict(self) -> dict:
        """A JSON-ready copy (changing it does not change the report)."""
        return copy.deepcopy(
            {
                "shadow": self.shadow,
                "session": self.session,
                "verdict": self.verdict,
                "reasons": self.reasons,
                "gates": [g.to_dict() for g in self.gates],
                "criteria": asdict(self.criteria),
                "policies": self.policies,
                "questions": self.questions,
                "slices": {c: sl.to_dict() for c, sl in self.slices.items()},
            }
        )

    def to_frame(self) -> pd.DataFrame:
        """One row per question with the headline figures."""
        rows = []
        for q in self.questions:
            err = q.get("error") or {}
            ea = err.get("error_among_accepted") or {}
            load = q.get("review_load") or {}
            rows.append(
                {
                    "question": q["question"],
                    "n": q["n_requests"],
                    "agreement": q["agreement"]["rate"],
                    "review_champion": load.get("champion"),
                    "review_challenger": load.get("challenger"),
                    "review_change": load.get("change"),
                    "n_known": err.get("n_known"),
                    "error_champion": ea.get("a"),
                    "error_challenger": ea.get("b"),
                    "error_change": ea.get("difference"),
                    "error_change_low": ea.get("low"),
                    "error_change_high": ea.get("high"),
                    "challenger_failure_rate": q["failures"]["challenger"]["rate"],
                    "latency_p95_champion": q["latency_ms"]["champion"]["p95"],
                    "latency_p95_challenger": q["latency_ms"]["challenger"]["p95"],
                    "cost_per_1000_change": q["cost_per_1000"]["change"],
                    "max_psi_challenger": q["drift"]["max_psi_challenger"],
                }
            )
        return pd.DataFrame(rows)

    def to_text(self) -> str:
        lines = [f"shadow session {self.shadow}: verdict {self.verdict}"]
        lines += [f"  - {r}" for r in self.reasons]
        for side in ("champion", "challenger"):
            p = self.policies.get(side)
            lines.append(f"{side} routing: {p['source'] if p else 'none (logged actions only, if any)'}")
        if self.policies.get("settings_text"):
            lines.append(f"certified policies chosen at {self.policies['settings_text']}")
        lines += [f"note: {n}" for n in self.policies.get("notes") or []]
        frame = self.to_frame()
        if not frame.empty:
            lines.append(frame.T.to_string(header=False))
        for q in self.questions:
            d = q.get("directional")
            if d:
                lines.append(
                    f"[{q['question']}] challenger accepts where champion reviews: "
                    f"{d['challenger_accepts_where_champion_reviews']}; champion accepts where challenger "
                    f"reviews: {d['champion_accepts_where_challenger_reviews']}; both accept, different "
                    f"answer: {d['both_accept_different_answer']}"
                )
            for f in q["flip_matrix"]["top_flips"][:5]:
                lines.append(f"[{q['question']}] flip {f['champion']} → {f['challenger']}: {f['count']}")
        for sl in self.slices.values():
            lines.append(sl.to_text())
        return "\n".join(lines)


@dataclass
class ShadowSlices:
    """The shadow report on each slice of one column: ``reports[value]`` is the :class:`ShadowReport` of
    the session's requests with that value (``values`` in display order), made by
    :func:`report_from_answers` on those rows only with the same policies, criteria and seed."""

    column: str
    values: list[str]
    source: str  # where the values come from: "dataset NAME vN" or "session requests"
    reports: dict[str, ShadowReport] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "column": self.column,
            "values": list(self.values),
            "source": self.source,
            "reports": {
                v: {k: d[k] for k in ("verdict", "reasons", "gates", "questions")}
                for v, d in ((v, r.to_dict()) for v, r in self.reports.items())
            },
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per (slice, question): :meth:`ShadowReport.to_frame`'s figures plus the agreement and
        review-change intervals and the slice's verdict."""
        frames = []
        for value, rep in self.reports.items():
            f = rep.to_frame()
            if f.empty:
                continue
            f.insert(0, "slice", value)
            f.insert(0, "column", self.column)
            f["agreement_low"] = [q["agreement"]["low"] for q in rep.questions]
            f["agreement_high"] = [q["agreement"]["high"] for q in rep.questions]
            f["review_change_low"] = [(q.get("review_load") or {}).get("low") for q in rep.questions]
            f["review_change_high"] = [(q.get("review_load") or {}).get("high") for q in rep.questions]
            f["verdict"] = rep.verdict
            frames.append(f)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def to_text(self) -> str:
        frame = self.to_frame()
        lines = [f"by {self.column} ({self.source}):"]
        if frame.empty:
            return "\n".join([*lines, "  no requests"])

        def pct(x: Any) -> str:
            return "—" if x is None or pd.isna(x) else f"{x:.1%}"

        def diff(x: Any, lo: Any, hi: Any) -> str:
            if x is None or pd.isna(x):
                return "—"
            return f"{x:+.1%} [{lo:+.1%}, {hi:+.1%}]" if lo is not None and not pd.isna(lo) else f"{x:+.1%}"

        rows = pd.DataFrame(
            {
                "question": frame["question"],
                self.column: frame["slice"],
                "n": frame["n"],
                "agreement": [
                    f"{pct(a)} [{pct(lo)}, {pct(hi)}]"
                    for a, lo, hi in zip(frame["agreement"], frame["agreement_low"], frame["agreement_high"])
                ],
                "review change": [
                    diff(x, lo, hi)
                    for x, lo, hi in zip(
                        frame["review_change"], frame["review_change_low"], frame["review_change_high"]
                    )
                ],
                "known": ["—" if x is None or pd.isna(x) else str(int(x)) for x in frame["n_known"]],
                "error change (accepted)": [
                    diff(x, lo, hi)
                    for x, lo, hi in zip(frame["error_change"], frame["error_change_low"], frame["error_change_high"])
                ],
                "verdict": frame["verdict"],
            }
        )
        lines.append(rows.to_string(index=False))
        return "\n".join(lines)


def select_rows(s: ShadowAnswers, mask: np.ndarray) -> ShadowAnswers:
    """``s`` restricted to the rows where ``mask`` (n,) is true, in the same order."""
    kw = {}
    for f in fields(s):
        v = getattr(s, f.name)
        kw[f.name] = v[mask] if isinstance(v, np.ndarray) and v.shape[:1] == (s.n,) else v
    kw["extra"] = dict(s.extra)
    return ShadowAnswers(**kw)


def shadow_slice_values(con, shadow: str, session: dict, column: str) -> tuple[pd.DataFrame, list[str], str]:
    """``(frame item_id/value, display order, source)``: the slice value of each request of ``shadow``.

    A session replayed from two runs takes its items' metadata from the runs' dataset version
    (``--meta-column`` at import) and ``state_length`` from that version, exactly as ``workbench report
    --slice`` buckets it; any other session (imported logs, a mirror or collector journal, a rerun) has
    only ``state_length``: quartile buckets of its logged requests' state length in characters.
    """
    from workbench.errors import NotFoundError
    from workbench.metrics.slices import length_buckets
    from workbench.store.datasets import BUILTIN_SLICES, load_item_meta, meta_columns
    from workbench.store.runs import get_run
    from workbench.store.shadow import request_state_lengths

    run = None
    if session.get("source") == "replay" and session.get("champion"):
        try:
            run = get_run(con, session["champion"])
        except NotFoundError:
            run = None
    if run is not None:
        ds, version = str(run["dataset"]), int(run["dataset_version"])
        source = f"dataset {ds} v{version}"
        if column not in BUILTIN_SLICES and column not in meta_columns(con, ds, version):
            known = [*BUILTIN_SLICES, *meta_columns(con, ds, version)]
            raise NotFoundError(
                f"slice {column!r}: shadow session {shadow!r} (replayed from dataset {ds} v{version}) has no "
                f"column {column!r}",
                hint=f"slice by one of: {', '.join(known)}; metadata columns are kept at import with "
                "`workbench datasets import … --meta-column COL`",
            )
        meta = load_item_meta(con, ds, version, column)
    else:
        source = "session requests"
        if column not in BUILTIN_SLICES:
            raise NotFoundError(
                f"slice {column!r}: shadow session {shadow!r} ({session.get('source')}) has no column {column!r}",
                hint=f"slice by one of: {', '.join(BUILTIN_SLICES)}; logged requests carry no item metadata "
                "(metadata columns apply to sessions made by `workbench shadow replay` from a dataset imported "
                "with --meta-column)",
            )
        meta = request_state_lengths(con, shadow)
    order: list[str] = []
    if column == "state_length":
        lengths = pd.to_numeric(meta["value"], errors="coerce").to_numpy(dtype=float)
        known_len = np.isfinite(lengths)
        labels = np.full(len(lengths), None, dtype=object)
        labels[known_len], order = length_buckets(lengths[known_len])
        meta = meta.assign(value=labels)
    return meta[["item_id", "value"]], order, source


def slice_report(
    answers: list[ShadowAnswers],
    values: pd.DataFrame,
    *,
    column: str,
    order: list[str] | None = None,
    source: str = "",
    **kwargs: Any,
) -> ShadowSlices:
    """:func:`report_from_answers` (with ``kwargs``) on each slice's rows of ``answers``: ``values`` maps
    ``item_id`` to the slice value (missing → ``(missing)``)."""
    from workbench.metrics.slices import slice_groups

    lookup = pd.Series(values["value"].to_numpy(dtype=object), index=values["item_id"].astype(str).to_numpy())
    lookup = lookup[~lookup.index.duplicated()]
    per_q = []
    for a in answers:
        v = lookup.reindex(pd.Index(a.item_ids.astype(str))).to_numpy(dtype=object)
        per_q.append((a, dict(slice_groups(v, order))))
    names: list[str] = []
    for _, groups in per_q:
        names += [g for g in groups if g not in names]
    out = ShadowSlices(column, names, source)
    for name in names:
        subset = [select_rows(a, groups.get(name, np.zeros(a.n, bool))) for a, groups in per_q]
        out.reports[name] = report_from_answers(subset, **kwargs)
    return out


def report_from_answers(
    answers: list[ShadowAnswers],
    *,
    champion_policy: SidePolicy | None,
    challenger_policy: SidePolicy | None,
    criteria: Criteria | None = None,
    n_windows: int = 5,
    n_boot: int = 1000,
    seed: int = 0,
    shadow: str = "",
    session: dict | None = None,
    period: str | None = None,
) -> ShadowReport:
    """Build the report from per-question arrays (no store needed).

    Drift windows are ``n_windows`` equal-count windows in arrival order, or calendar periods when
    ``period`` is given (a pandas offset such as ``"1h"`` or ``"1D"``; rows without a time are left out).
    """
    criteria = criteria or Criteria()
    questions = [
        _question_report(
            s,
            champion_policy,
            challenger_policy,
            criteria=criteria,
            n_windows=n_windows,
            n_boot=n_boot,
            seed=seed,
            period=period,
        )
        for s in answers
    ]
    verdict, gates = judge(questions, criteria)
    policies = {
        "champion": champion_policy.describe() if champion_policy else None,
        "challenger": challenger_policy.describe() if challenger_policy else None,
    }
    return ShadowReport(shadow, session or {}, questions, verdict, gates, criteria, policies)


def _side_schema_hash(con, session: dict, side: str) -> str | None:
    """Hash of the schema ``side``'s requests were sent with: the run's for a replay of two runs, else
    the session's (the schema its traffic was imported with)."""
    from workbench.errors import NotFoundError
    from workbench.store.runs import get_run

    if session.get("source") in ("replay", "rerun") and session.get(side):
        try:
            return str(get_run(con, session[side])["schema_hash"])
        except NotFoundError:
            pass
    return session.get("schema_hash")


def _certified_sides(
    con, session: dict, questions: list[str], sides: dict[str, SidePolicy | None], options: Any
) -> tuple[dict[str, SidePolicy | None], list[str]]:
    """Fill the sides without a policy with the policy certified on their run (when the session names
    a stored run for that side: replayed and rerun sessions)."""
    from workbench.errors import NotFoundError, WorkbenchError
    from workbench.shadow.policies import certified_side_policy
    from workbench.store.runs import get_run

    def is_run(label: str | None) -> bool:
        if not label:
            return False
        try:
            get_run(con, label)
        except NotFoundError:
            return False
        return True

    notes = []
    out = dict(sides)
    for side, pol in sides.items():
        if pol is not None:
            continue
        if not is_run(session.get(side)):
            if side == "challenger":
                notes.append(
                    "the challenger has no policy and no stored run to certify one on: "
                    "pass --challenger-policy or --challenger-rule"
                )
            continue
        try:
            out[side] = certified_side_policy(con, session[side], questions, options)
        except WorkbenchError as exc:
            notes.append(f"no certified policy for the {side} (run {session[side]}): {exc.message}")
    return out, notes


def shadow_report(
    con,
    shadow: str,
    *,
    champion_policy: SidePolicy | None = None,
    challenger_policy: SidePolicy | None = None,
    criteria: Criteria | None = None,
    questions: list[str] | None = None,
    n_windows: int = 5,
    n_boot: int = 1000,
    seed: int = 0,
    period: str | None = None,
    options: Any = None,
    slices: list[str] | str | None = None,
) -> ShadowReport:
    """Report of stored session ``shadow`` (see the module docstring).

    A side without a policy routes with the policy certified on its run's calibration split with
    ``options`` (:class:`~workbench.thresholds.choose.ThresholdOptions`, default its defaults) when
    the session replays two stored runs — the policy ``workbench policy export`` would write — so
    the CLI, the UI and the API judge a session the same way. Each side's policy is applied only to
    requests sent with a schema it accepts (``validity.schema_hashes``) and answered by a model it
    accepts (``validity.models``), as the runtime does.

    ``slices`` (column names) adds ``report.slices[column]``: the same report on each slice's requests
    (:func:`slice_report`; values from :func:`shadow_slice_values` — a replayed session's dataset
    metadata columns, or ``state_length`` for any session). An unknown column raises
    :class:`~workbench.errors.NotFoundError` naming the columns there are.
    """
    from workbench.store.shadow import get_session, load_shadow, session_schema
    from workbench.thresholds.choose import ThresholdOptions

    options = options if options is not None else ThresholdOptions()
    session = get_session(con, shadow)
    schema = session_schema(con, shadow)
    ids = questions or schema.question_ids
    sides, notes = _certified_sides(
        con, session, list(ids), {"champion": champion_policy, "challenger": challenger_policy}, options
    )
    slice_list = [slices] if isinstance(slices, str) else list(dict.fromkeys(slices or []))
    slice_values = {c: shadow_slice_values(con, shadow, session, c) for c in slice_list}  # fail before work
    hashes = {side: _side_schema_hash(con, session, side) for side in ("champion", "challenger")}
    arrays = [load_shadow(con, shadow, q) for q in ids]
    for a in arrays:
        a.extra["champion_schema_hash"], a.extra["challenger_schema_hash"] = hashes["champion"], hashes["challenger"]
    meta = {k: session[k] for k in ("source", "champion", "challenger")}
    meta["created_at"] = str(session["created_at"])
    common: dict[str, Any] = {
        "champion_policy": sides["champion"],
        "challenger_policy": sides["challenger"],
        "criteria": criteria,
        "n_windows": n_windows,
        "n_boot": n_boot,
        "seed": seed,
        "shadow": shadow,
        "session": meta,
        "period": period,
    }
    report = report_from_answers(arrays, **common)
    for column, (values, order, source) in slice_values.items():
        report.slices[column] = slice_report(arrays, values, column=column, order=order, source=source, **common)
    report.policies["settings"] = options.settings()
    report.policies["settings_text"] = options.describe()
    report.policies["notes"] = notes
    return report
