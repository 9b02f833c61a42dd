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
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.metrics.bootstrap import mcnemar_counts
from workbench.metrics.poisson_bootstrap import paired_cell_bootstrap
from workbench.metrics.reliability import wilson_interval
from workbench.shadow.drift import js_divergence, psi, window_bounds
from workbench.shadow.policies import SidePolicy, is_accept
from workbench.store.shadow import ShadowAnswers
from workbench.thresholds.rules import top_two_fast
from workbench.wording import run_ref

PROMOTE, HOLD, REJECT = "PROMOTE", "HOLD", "REJECT"
_RANK = {PROMOTE: 0, HOLD: 1, REJECT: 2}
_STATUS_VERDICT = {"pass": PROMOTE, "fail": REJECT, "inconclusive": HOLD}  # what a gate alone implies


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
        Largest acceptable share of requests on which the challenger failed (timeouts, errors,
        malformed answers) while the champion answered the same request: failures of both sides on the
        same request (a request both refuse with 422, an outage of both) are not the challenger's.
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


def _mean_or_none(x: np.ndarray) -> float | None:
    known = np.isfinite(x)
    return float(np.mean(x[known])) if known.any() else None


def request_figures(s: ShadowAnswers) -> dict:
    """Latency quantiles and mean cost per side of the rows of ``s`` (the in-memory counterpart of
    :func:`workbench.store.shadow.shadow_request_figures`)."""
    return {
        "n": s.n,
        **{
            side: {"latency": _quantiles(lat), "cost_mean": _mean_or_none(cost)}
            for side, lat, cost in (
                ("champion", s.champion_latency_ms, s.champion_cost_usd),
                ("challenger", s.challenger_latency_ms, s.challenger_cost_usd),
            )
        },
    }


#: Cells of one side on a request with a known outcome: accepted (a), accepted and wrong (e), top
#: choice right (t); cell = a + e + 3·t (a=0,e=0 → 0; a=1,e=0 → 1; a=1,e=1 → 2; +3 when t).
_SIDE_CELLS = 6


def _side_cell_stats(side: int):
    """Bootstrap statistics of one side from weights over the 36 joint cells (champion cell × 6 + challenger cell)."""

    def stats(w: np.ndarray) -> dict[str, np.ndarray]:
        per = w.reshape(len(w), _SIDE_CELLS, _SIDE_CELLS).sum(axis=2 - side)  # (r, 6) weights of this side's cells
        total = per.sum(axis=1)
        n_acc = per[:, 1] + per[:, 2] + per[:, 4] + per[:, 5]
        n_err = per[:, 2] + per[:, 5]
        n_top = per[:, 3:].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "error_among_accepted": np.where(n_acc > 0, n_err / np.where(n_acc > 0, n_acc, 1.0), 0.0),
                "errors_per_request": np.where(total > 0, n_err / total, np.nan),
                "coverage": np.where(total > 0, n_acc / total, np.nan),
                "top_accuracy": np.where(total > 0, n_top / total, np.nan),
            }

    return stats


def _coverage_stats(side: int):
    """Coverage of one side from weights over the 4 cells (champion accepted × 2 + challenger accepted)."""

    def stats(w: np.ndarray) -> dict[str, np.ndarray]:
        per = w.reshape(len(w), 2, 2).sum(axis=2 - side)
        total = per.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"coverage": np.where(total > 0, per[:, 1] / total, np.nan)}

    return stats


def _window_keys(s: ShadowAnswers, pos: np.ndarray, edges: np.ndarray | None, period: str | None) -> np.ndarray:
    """Window key per row (int64; -1 = in no window): the equal-count window of ``pos``, or the
    calendar-period floor of the row's time (ns since the epoch)."""
    if period:
        out = np.full(s.n, -1, dtype=np.int64)
        known = ~np.isnat(s.ts)
        if known.any():
            out[known] = pd.DatetimeIndex(s.ts[known]).floor(period).asi8
        return out
    assert edges is not None
    return np.searchsorted(edges, pos, side="right").astype(np.int64) - 1


class _QuestionAccumulator:
    """Everything the per-question report needs, accumulated chunk by chunk (memory independent of n).

    Counts (failures by kind, agreement, flips, directional decisions, the bootstrap cells) and per-window
    p_top histograms are sums over rows, so the report of a session streamed in chunks equals the report
    of the same rows in one array (:func:`_question_report`), whatever the chunking or order.
    """

    def __init__(
        self,
        question: str,
        qtype: str,
        option_ids: list[str],
        n_total: int,
        champion: SidePolicy | None,
        challenger: SidePolicy | None,
        *,
        hashes: tuple[str | None, str | None],
        n_windows: int,
        period: str | None,
    ):
        from collections import Counter

        self.question, self.qtype, self.option_ids = question, qtype, option_ids
        k = len(option_ids)
        self.k = k
        self.champion, self.challenger = champion, challenger
        self.decides = [p is not None and p.has_rule(question) for p in (champion, challenger)]
        self.hashes = hashes
        self.period = period
        self.n = 0
        self.n_both = 0
        self.kinds: tuple[Counter, Counter] = (Counter(), Counter())
        self.n_failed = [0, 0]
        self.n_failed_alone = [0, 0]  # side i failed where the other side answered the same request
        self.agree = 0
        self.flips = np.zeros(k * k, dtype=np.int64)
        self.has_log = [False, False]
        self.directional = np.zeros(5, dtype=np.int64)
        self.load_cells = np.zeros(4, dtype=np.int64)
        self.error_cells = np.zeros(_SIDE_CELLS * _SIDE_CELLS, dtype=np.int64)
        self.n_known = 0
        self.edges = None if period else self._edges(n_total, n_windows)
        self.windows: dict[int, dict] = {}

    @staticmethod
    def _edges(n: int, n_windows: int) -> np.ndarray:
        bounds = window_bounds(n, n_windows)
        return np.asarray([a for a, _ in bounds] + ([bounds[-1][1]] if bounds else []), dtype=np.int64)

    def _decisions(self, policy: SidePolicy | None, s: ShadowAnswers, probs, failed, logged, models, schema_hash, top):
        """(accepted, option, has_log) of one side on the rows of ``s``: the logged action where the
        log has one, else the policy's decision (nothing accepted without a policy)."""
        decided = policy.decide(s.question, s.qtype, probs, models, schema_hash) if policy is not None else None
        if decided is not None:
            accepted, option = decided.accepted.copy(), np.where(decided.option >= 0, decided.option, top)
        else:
            accepted, option = np.zeros(s.n, bool), top
        has_log = pd.notna(np.asarray(logged, dtype=object)) if logged is not None else np.zeros(s.n, bool)
        if has_log.any():
            accepted = np.where(has_log, is_accept(logged), accepted)
            option = np.where(has_log, top, option)
        return accepted & ~failed, option, bool(has_log.any())

    def add(self, s: ShadowAnswers, pos: np.ndarray) -> None:
        n, k = s.n, self.k
        if n == 0:
            return
        self.n += n
        cf = pd.notna(np.asarray(s.champion_failure, dtype=object))
        df = pd.notna(np.asarray(s.challenger_failure, dtype=object))
        self.n_failed_alone[0] += int((cf & ~df).sum())
        self.n_failed_alone[1] += int((df & ~cf).sum())
        for i, (fail, kinds) in enumerate(((cf, s.champion_failure), (df, s.challenger_failure))):
            self.n_failed[i] += int(fail.sum())
            if fail.any():
                names, counts = np.unique(kinds[fail].astype(str), return_counts=True)
                self.kinds[i].update(dict(zip(map(str, names), map(int, counts))))
        top_c, top_d = _top_choice(s.champion_probs), _top_choice(s.challenger_probs)
        both = ~cf & ~df
        self.n_both += int(both.sum())
        self.agree += int((top_c[both] == top_d[both]).sum())
        self.flips += np.bincount(top_c[both] * k + top_d[both], minlength=k * k)
        hash_c, hash_d = self.hashes
        acc_c, opt_c, log_c = self._decisions(
            self.champion, s, s.champion_probs, cf, s.champion_logged, s.champion_model, hash_c, top_c
        )
        acc_d, opt_d, log_d = self._decisions(
            self.challenger, s, s.challenger_probs, df, None, s.challenger_model, hash_d, top_d
        )
        self.has_log[0] |= log_c
        self.has_log[1] |= log_d
        self.directional += [
            int((acc_d & ~acc_c).sum()),
            int((acc_c & ~acc_d).sum()),
            int((acc_c & acc_d & (opt_c == opt_d)).sum()),
            int((acc_c & acc_d & (opt_c != opt_d)).sum()),
            int((~acc_c & ~acc_d).sum()),
        ]
        self.load_cells += np.bincount(acc_c.astype(np.int64) * 2 + acc_d, minlength=4)
        known = s.outcome >= 0
        if known.any():
            y = s.outcome[known]
            cells = []
            for acc, opt, top in ((acc_c, opt_c, top_c), (acc_d, opt_d, top_d)):
                a = acc[known].astype(np.int64)
                cells.append(a + (a & (opt[known] != y)) + 3 * (top[known] == y))
            self.n_known += int(known.sum())
            self.error_cells += np.bincount(cells[0] * _SIDE_CELLS + cells[1], minlength=_SIDE_CELLS**2)
        self._add_windows(s, pos)

    def _add_windows(self, s: ShadowAnswers, pos: np.ndarray) -> None:
        ptop = [top_two_fast(p)[1] for p in (s.champion_probs, s.challenger_probs)]
        keys = _window_keys(s, pos, self.edges, self.period)
        inside = keys >= 0
        if not inside.any():
            return
        uniq, inv = np.unique(keys[inside], return_inverse=True)
        m = len(uniq)
        pos_in, seq_in, ts_in = pos[inside], s.seq[inside], s.ts[inside]
        count = np.bincount(inv, minlength=m)
        order = np.lexsort((pos_in, inv))  # rows by window, then arrival position
        first_row = order[np.r_[0, np.cumsum(count)[:-1]]]
        ts_known = ~np.isnat(ts_in)
        ts_int = ts_in.astype("datetime64[us]").astype(np.int64)
        lo = np.full(m, np.iinfo(np.int64).max)
        hi = np.full(m, np.iinfo(np.int64).min)
        np.minimum.at(lo, inv[ts_known], ts_int[ts_known])
        np.maximum.at(hi, inv[ts_known], ts_int[ts_known])
        side_figs = []
        for p in ptop:
            p = p[inside]
            fin = np.isfinite(p)
            b = np.minimum((np.clip(np.where(fin, p, 0.0), 0.0, 1.0) * 10).astype(int), 9)
            hist = np.bincount(inv[fin] * 10 + b[fin], minlength=m * 10).reshape(m, 10)
            side_figs.append((hist, np.bincount(inv[fin], weights=p[fin], minlength=m)))
        for j, key in enumerate(uniq.tolist()):
            w = self.windows.get(key)
            if w is None:
                w = self.windows[key] = {
                    "n": 0,
                    "first_pos": np.iinfo(np.int64).max,
                    "first_seq": 0,
                    "ts_lo": np.iinfo(np.int64).max,
                    "ts_hi": np.iinfo(np.int64).min,
                    "hist": [np.zeros(10, np.int64), np.zeros(10, np.int64)],
                    "psum": [0.0, 0.0],
                }
            w["n"] += int(count[j])
            r = first_row[j]
            if pos_in[r] < w["first_pos"]:
                w["first_pos"], w["first_seq"] = int(pos_in[r]), int(seq_in[r])
            w["ts_lo"], w["ts_hi"] = min(w["ts_lo"], int(lo[j])), max(w["ts_hi"], int(hi[j]))
            for i, (hist, psum) in enumerate(side_figs):
                w["hist"][i] += hist[j]
                w["psum"][i] += float(psum[j])

    def load_counts(self, state: dict) -> None:
        """Take the counts that :func:`~workbench.store.shadow.shadow_pair_aggregates` computed in SQL."""
        k = self.k
        self.n, self.n_both, self.agree, self.n_known = state["n"], state["n_both"], state["agree"], state["n_known"]
        self.n_failed = list(state["n_failed"])
        self.n_failed_alone = list(state["n_failed_alone"])
        for i in range(2):
            self.kinds[i].update(state["kinds"][i])
        self.has_log = list(state["has_log"])
        self.directional = np.asarray(state["directional"], dtype=np.int64)
        for tc, td, n in state["flips"]:
            self.flips[tc * k + td] += n
        for cell, n in state["load_cells"]:
            self.load_cells[cell] += n
        for cc, cd, n in state["error_cells"]:
            self.error_cells[cc * _SIDE_CELLS + cd] += n
        self.windows = dict(state["windows"])

    # -- the report section ------------------------------------------------------------------------
    def finish(self, requests: dict, *, criteria: Criteria, n_boot: int, seed: int) -> dict:
        n, k, opts = self.n, self.k, self.option_ids
        out: dict[str, Any] = {
            "question": self.question,
            "type": self.qtype,
            "options": opts,
            "n_requests": n,
            "n_both_answered": self.n_both,
        }
        out["failures"] = {
            side: {
                "rate": self.n_failed[i] / n if n else None,
                "by_kind": dict(sorted(self.kinds[i].items())),
            }
            for i, side in enumerate(("champion", "challenger"))
        }
        # paired on the same requests: the challenger is judged on the failures in excess of the champion's
        out["failures"]["paired"] = {
            "champion_only": self.n_failed_alone[0],
            "challenger_only": self.n_failed_alone[1],
            "both": self.n_failed[1] - self.n_failed_alone[1],
            "challenger_excess_rate": self.n_failed_alone[1] / n if n else None,
        }
        lo, hi = wilson_interval(np.array([self.agree]), np.array([self.n_both]))
        out["agreement"] = {
            "rate": self.agree / self.n_both if self.n_both else None,
            "n": self.n_both,
            "low": float(lo[0]),
            "high": float(hi[0]),
        }
        flips = self.flips.reshape(k, k)
        off = [(int(flips[i, j]), opts[i], opts[j]) for i, j in zip(*np.nonzero(flips)) if i != j]
        off.sort(key=lambda t: -t[0])
        out["flip_matrix"] = {
            "rows": "champion",
            "columns": "challenger",
            "options": opts,
            "counts": flips.tolist(),
            "top_flips": [{"champion": a, "challenger": b, "count": c} for c, a, b in off[:10]],
        }
        sources: list[str | None] = []
        for decides, logged in zip(self.decides, self.has_log):
            if not decides and not logged:
                sources.append(None)
            else:
                sources.append("policy" if not logged else ("log" if not decides else "log+policy"))
        out["decisions"] = {"champion": sources[0], "challenger": sources[1]}
        refusals = {
            side: pol.schema_refusal(h)
            for side, pol, h in (
                ("champion", self.champion, self.hashes[0]),
                ("challenger", self.challenger, self.hashes[1]),
            )
            if pol is not None and pol.schema_refusal(h) is not None
        }
        if refusals:
            out["schema_refusals"] = refusals
        if sources[0] is None or sources[1] is None or n == 0:
            out["directional"] = out["review_load"] = out["error"] = None
            out["notes"] = [
                "no policy (or logged actions) for "
                + " and ".join(side for side, d in zip(("champion", "challenger"), sources) if d is None)
                + ": directional, review-load and error sections need both"
            ]
        else:
            names = (
                "challenger_accepts_where_champion_reviews",
                "champion_accepts_where_challenger_reviews",
                "both_accept_same_answer",
                "both_accept_different_answer",
                "both_review",
            )
            out["directional"] = {**{m: int(v) for m, v in zip(names, self.directional)}, "n": n}
            load = paired_cell_bootstrap(
                self.load_cells, _coverage_stats(0), _coverage_stats(1), n_boot=n_boot, seed=seed, level=criteria.level
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
            cells = self.error_cells.reshape(_SIDE_CELLS, _SIDE_CELLS)
            acc_c = int(cells[[1, 2, 4, 5], :].sum())
            acc_d = int(cells[:, [1, 2, 4, 5]].sum())
            err: dict[str, Any] = {
                "n_known": self.n_known,
                "n_known_accepted_by_champion": acc_c,
                "n_known_accepted_by_challenger": acc_d,
            }
            if self.n_known:
                diffs = paired_cell_bootstrap(
                    self.error_cells,
                    _side_cell_stats(0),
                    _side_cell_stats(1),
                    n_boot=n_boot,
                    seed=seed + 1,
                    level=criteria.level,
                )
                err.update({name: d.to_dict() for name, d in diffs.items()})
                b01 = int(cells[:3, 3:].sum())  # champion's top choice wrong, challenger's right
                b10 = int(cells[3:, :3].sum())
                err["mcnemar_top_accuracy"] = mcnemar_counts(b01, b10).to_dict()
            out["error"] = err

        # -- cost and latency (per request, from the requests table or the rows' arrays) ------------
        cost_c, cost_d = (
            None if requests[side]["cost_mean"] is None else float(requests[side]["cost_mean"]) * 1000.0
            for side in ("champion", "challenger")
        )
        out["cost_per_1000"] = {
            "champion": cost_c,
            "challenger": cost_d,
            "change": None if cost_c is None or cost_d is None else cost_d - cost_c,
        }
        lat_c, lat_d = requests["champion"]["latency"], requests["challenger"]["latency"]
        out["latency_ms"] = {
            "champion": lat_c,
            "challenger": lat_d,
            "p50_change": None if lat_c["p50"] is None or lat_d["p50"] is None else lat_d["p50"] - lat_c["p50"],
            "p95_change": None if lat_c["p95"] is None or lat_d["p95"] is None else lat_d["p95"] - lat_c["p95"],
        }
        out["drift"] = self._drift()
        return out

    def _drift(self) -> dict:
        keys = sorted(self.windows)
        rows: list[dict[str, Any]] = []
        ref: list[np.ndarray] = []

        def share(h: np.ndarray) -> np.ndarray:
            return h / h.sum() if h.sum() else np.full(10, np.nan)

        def when(t: int, empty: int) -> str | None:
            return None if t == empty else str(np.datetime64(t, "us"))

        for key in keys:
            w = self.windows[key]
            hc, hd = share(w["hist"][0]), share(w["hist"][1])
            if not ref:
                ref = [hc, hd]
            nc, nd = int(w["hist"][0].sum()), int(w["hist"][1].sum())
            rows.append(
                {
                    "start": when(w["ts_lo"], np.iinfo(np.int64).max),
                    "end": when(w["ts_hi"], np.iinfo(np.int64).min),
                    "first_seq": w["first_seq"],
                    "n": w["n"],
                    "mean_p_top_champion": w["psum"][0] / nc if nc else None,
                    "mean_p_top_challenger": w["psum"][1] / nd if nd else None,
                    "psi_champion": psi(ref[0], hc),
                    "psi_challenger": psi(ref[1], hd),
                    "js_champion": js_divergence(ref[0], hc),
                    "js_challenger": js_divergence(ref[1], hd),
                    "js_between_sides": js_divergence(hc, hd),
                }
            )
        finite = [r["psi_challenger"] for r in rows if np.isfinite(r["psi_challenger"])]
        return {
            "score": "p_top",
            "bins": 10,
            "reference": "first window",
            "windows_by": f"period {self.period}"
            if self.period
            else f"{len(rows)} equal-count windows in arrival order",
            "windows": rows,
            "max_psi_challenger": max(finite) if finite else None,
            "max_psi_champion": max([r["psi_champion"] for r in rows if np.isfinite(r["psi_champion"])], default=None),
        }


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
    """The report section of one question from its rows in memory, in arrival order."""
    acc = _QuestionAccumulator(
        s.question,
        s.qtype,
        s.option_ids,
        s.n,
        champion,
        challenger,
        hashes=(s.extra.get("champion_schema_hash"), s.extra.get("challenger_schema_hash")),
        n_windows=n_windows,
        period=period,
    )
    acc.add(s, np.arange(s.n, dtype=np.int64))
    return acc.finish(request_figures(s), criteria=criteria, n_boot=n_boot, seed=seed)


# -- verdict ---------------------------------------------------------------------------------------
def judge(questions: list[dict], criteria: Criteria) -> tuple[str, list[Gate]]:
    """Verdict and ledger from per-question report sections (see :class:`Criteria`).

    REJECT when any gate shows harm; PROMOTE when every gate passes; HOLD otherwise (evidence
    missing or inconclusive).
    """
    gates: list[Gate] = []

    def add(gate: str, status: str, message: str, value: Any, limit: Any, question: str | None, verdict: str = ""):
        """A gate whose verdict is its status's (pass: PROMOTE, fail: REJECT, inconclusive: HOLD) unless given."""
        gates.append(Gate(gate, status, verdict or _STATUS_VERDICT[status], message, value, limit, question))

    for q in questions:
        qid = q["question"]
        # the challenger's failures in excess of the champion's, paired on the same requests
        paired = q["failures"]["paired"]
        rate = paired["challenger_excess_rate"]
        total = q["failures"]["challenger"]["rate"]
        if rate is None:
            add("failures", "inconclusive", "no requests", None, criteria.max_failure_rate, qid)
        else:
            netted = (
                f" (challenger failures {total:.2%} of requests, {paired['both']} of them on requests the champion"
                " failed too)"
                if paired["both"]
                else ""
            )
            failed = rate > criteria.max_failure_rate
            message = (
                f"challenger failed on {rate:.1%} of requests the champion answered"
                if failed
                else f"challenger failure rate beyond the champion's {rate:.2%}"
            )
            add("failures", "fail" if failed else "pass", message + netted, rate, criteria.max_failure_rate, qid)

        load = q.get("review_load")
        min_gain = criteria.min_coverage_gain
        if load is None:
            add("coverage", "inconclusive", "no policy for one side: coverage not judged", None, min_gain, qid)
        else:
            gain, hi = load["coverage_gain"], load["coverage_gain_high"]
            if gain >= min_gain:
                add(
                    "coverage",
                    "pass",
                    f"auto-accept rate {gain:+.1%} (review load {load['change']:+.1%})",
                    gain,
                    min_gain,
                    qid,
                )
            elif np.isfinite(hi) and hi < min_gain:
                message = f"auto-accept rate {gain:+.1%}, interval below the {min_gain:+.1%} required"
                add("coverage", "fail", message, gain, min_gain, qid)
            else:
                message = f"auto-accept rate {gain:+.1%} below the {min_gain:+.1%} required but within the interval"
                add("coverage", "inconclusive", message, gain, min_gain, qid)

        err = q.get("error")
        max_up = criteria.max_error_increase
        if err is None:
            add("error", "inconclusive", "no policy for one side: error not judged", None, max_up, qid)
        elif err["n_known"] < criteria.min_outcomes:
            message = f"{err['n_known']} known outcomes, {criteria.min_outcomes} needed"
            add("error", "inconclusive", message, err["n_known"], criteria.min_outcomes, qid)
        else:
            d = err["error_among_accepted"]
            interval = f"interval [{d['low']:+.2%}, {d['high']:+.2%}]"
            if d["low"] > max_up:
                message = f"error among accepted {d['a']:.2%} → {d['b']:.2%} (+{d['difference']:.2%}, {interval})"
                add("error", "fail", message, d["difference"], max_up, qid)
            elif d["high"] <= max_up:
                message = f"error among accepted {d['a']:.2%} → {d['b']:.2%} ({interval})"
                add("error", "pass", message, d["difference"], max_up, qid)
            else:
                message = f"error change {d['difference']:+.2%} with {interval} straddling the {max_up:+.2%} allowed"
                add("error", "inconclusive", message, d["difference"], max_up, qid)

        drift = q["drift"]["max_psi_challenger"]
        max_psi = criteria.max_drift_psi
        if max_psi is not None and drift is not None and drift > max_psi:
            add("drift", "fail", f"challenger p_top PSI up to {drift:.3f} across windows", drift, max_psi, qid, HOLD)
        elif max_psi is not None:
            message = f"challenger p_top PSI ≤ {drift if drift is not None else 0:.3f}"
            add("drift", "pass", message, drift, max_psi, qid)

    if questions:  # latency and cost are per request: judged on the first question's rows
        q = questions[0]
        p95 = q["latency_ms"]["challenger"]["p95"]
        max_p95 = criteria.max_p95_latency_ms
        if max_p95 is not None:
            if p95 is None:
                add("latency", "inconclusive", "challenger latency unknown", None, max_p95, None)
            else:
                add("latency", "fail" if p95 > max_p95 else "pass", f"challenger p95 {p95:.0f} ms", p95, max_p95, None)
        change = q["cost_per_1000"]["change"]
        max_cost = criteria.max_cost_increase_per_1000
        if max_cost is not None:
            if change is None:
                add("cost", "inconclusive", "cost unknown for one side", None, max_cost, None)
            else:
                message = f"cost {change:+.4f} USD per 1,000 requests"
                add("cost", "fail" if change > max_cost else "pass", message, change, max_cost, None)
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
                    "challenger_excess_failure_rate": q["failures"]["paired"]["challenger_excess_rate"],
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


def shadow_slice_values(con, shadow: str, session: dict, column: str) -> tuple[pd.DataFrame, list[str], str]:
    """``(frame item_id/value, display order, source)``: the slice value of each request of ``shadow``.

    A session replayed from two runs takes its items' metadata from the runs' dataset version
    (``--meta-column`` at import) and ``state_length`` from that version, exactly as ``workbench report
    --slice`` buckets it; any other session (imported logs, a mirror or collector journal, a rerun) has
    only ``state_length``: quartile buckets of its logged requests' state length in characters.
    """
    from workbench.errors import NotFoundError
    from workbench.metrics.slices import length_buckets
    from workbench.store.datasets import load_item_meta, meta_columns
    from workbench.store.import_spec import BUILTIN_SLICES
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
                "with `meta_columns`)",
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
    return _assemble(questions, champion_policy, challenger_policy, criteria, shadow, session)


def _assemble(
    questions: list[dict],
    champion_policy: SidePolicy | None,
    challenger_policy: SidePolicy | None,
    criteria: Criteria,
    shadow: str,
    session: dict | None,
) -> ShadowReport:
    verdict, gates = judge(questions, criteria)
    policies = {
        "champion": champion_policy.describe() if champion_policy else None,
        "challenger": challenger_policy.describe() if challenger_policy else None,
    }
    return ShadowReport(shadow, session or {}, questions, verdict, gates, criteria, policies)


#: Rows per chunk the streaming report reads (two 77-option matrices of float64: ~60 MB).
BATCH_ROWS = 50_000
#: DuckDB's buffer pool while the streaming report joins and orders a session (it spills beyond). 1 GB, not
#: 512 MB: at 10M requests the pairing's three joins of 10M rows spilled at 512 MB (195 s CPU, 1.03 GB peak;
#: 168 s, 1.65 GB at 1 GB; bench/scale.py --only shadow).
MEMORY_LIMIT = "1GB"


def _side_rows(policy: SidePolicy | None, question: str, qtype: str, chunk: dict, schema_hash: str | None) -> pa.Table:
    """Per-row results of one side on a chunk of its answers (see ``SIDE_ROWS_COLUMNS`` in the store):
    the policy decides without the model check, which the pairing applies in SQL."""
    probs = chunk["probs"]
    m = len(probs)
    failed = ~np.isfinite(probs).all(axis=1)
    kinds = np.where(pd.isna(chunk["failure_kind"]), "missing_answer", chunk["failure_kind"]).astype(object)
    kinds[~failed] = None
    top = _top_choice(probs)
    ptop = top_two_fast(probs)[1]
    decided = policy.decide(question, qtype, probs, None, schema_hash) if policy is not None else None
    if decided is not None:
        acc, opt = decided.accepted & ~failed, np.where(decided.option >= 0, decided.option, top)
    else:
        acc, opt = np.zeros(m, bool), top
    logged = chunk["logged"]
    has_log = pd.notna(logged)
    return pa.table(
        {
            "request_id": chunk["request_id"],
            "top": pa.array(top.astype(np.int32)),
            "ptop": pa.array(np.asarray(ptop, dtype=float), from_pandas=True),
            "acc_policy": pa.array(acc),
            "opt_policy": pa.array(opt.astype(np.int32)),
            "has_log": pa.array(has_log),
            "log_accept": pa.array(is_accept(logged) if has_log.any() else np.zeros(m, bool)),
            "failed": pa.array(failed),
            "kind": pa.array(kinds.tolist(), pa.string()),
        }
    )


def _stream_sections(
    con,
    shadow: str,
    question: str,
    *,
    champion_policy: SidePolicy | None,
    challenger_policy: SidePolicy | None,
    hashes: dict[str, str | None],
    criteria: Criteria,
    n_windows: int,
    n_boot: int,
    seed: int,
    period: str | None,
    groups: str | None = None,
) -> dict[Any, dict]:
    """Report sections of ``question`` per group value (``None`` = the whole session), from the store
    without holding the session in memory.

    Each side's answers are scanned in chunks (no join): the top choice, p_top and the policy's decision
    of every row go to a small temporary table; DuckDB then pairs both sides with the requests and
    outcomes and computes every count (:func:`~workbench.store.shadow.shadow_pair_aggregates`), and the
    section is finished from those counts exactly as :func:`_question_report` finishes it from arrays.
    """
    from workbench.schema import option_ids
    from workbench.store.shadow import (
        iter_side_answers,
        session_schema,
        shadow_pair_aggregates,
        shadow_request_figures,
        side_rows_tables,
    )

    q = session_schema(con, shadow).questions[question]
    qtype, opts = q.type, option_ids(q)
    policies = {"champion": champion_policy, "challenger": challenger_policy}
    figures = shadow_request_figures(con, shadow, groups)
    with side_rows_tables(con, policies) as (append, tables):
        for side, policy in policies.items():
            decides = policy is not None and policy.has_rule(question)
            for chunk in iter_side_answers(con, shadow, question, side, batch_rows=BATCH_ROWS):
                append[side](_side_rows(policy if decides else None, question, qtype, chunk, hashes[side]))
        agg = shadow_pair_aggregates(
            con,
            shadow,
            question,
            tables,
            valid_models={
                side: list(p.valid_models) if p is not None and p.has_rule(question) else []
                for side, p in policies.items()
            },
            window_starts=None if period else (lambda n: [a for a, _ in window_bounds(n, n_windows)]),
            period_us=_period_us(period) if period else None,
            groups=groups,
        )
    if not agg:
        agg = {None: None}
    out = {}
    for key, state in agg.items():
        acc = _QuestionAccumulator(
            question,
            qtype,
            opts,
            0 if state is None else state["n"],
            champion_policy,
            challenger_policy,
            hashes=(hashes["champion"], hashes["challenger"]),
            n_windows=n_windows,
            period=period,
        )
        if state is not None:
            acc.load_counts(state)
        fig = figures.get(key) or {
            "n": 0,
            **{side: {"latency": _quantiles(np.zeros(0)), "cost_mean": None} for side in ("champion", "challenger")},
        }
        out[key] = acc.finish(fig, criteria=criteria, n_boot=n_boot, seed=seed)
    return out


def _period_us(period: str) -> int:
    """Length of a fixed calendar period (``"1h"``, ``"1D"``, ``"15min"``) in microseconds, as pandas floors it."""
    from pandas.tseries.frequencies import to_offset

    try:
        return int(to_offset(period).nanos) // 1000
    except ValueError as exc:
        from workbench.errors import OptionError

        raise OptionError(f"`period` {period!r}: {exc}", hint="a fixed period such as 15min, 1h or 1D") from None


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
                    "pass `challenger_policy` or `challenger_rule`"
                )
            continue
        try:
            out[side] = certified_side_policy(con, session[side], questions, options)
        except WorkbenchError as exc:
            notes.append(f"no certified policy for the {side} ({run_ref(session[side])}): {exc.message}")
    return out, notes


def _stream_slices(
    con,
    shadow: str,
    ids: list[str],
    values: pd.DataFrame,
    *,
    column: str,
    order: list[str] | None,
    source: str,
    meta: dict,
    **common: Any,
) -> ShadowSlices:
    """The report of each slice's requests, streamed from the store: the slice value of each request joins the
    rows in DuckDB, and one pass per question accumulates every slice (positions count within the slice)."""
    from workbench.metrics.slices import MISSING, slice_groups
    from workbench.store.shadow import register_slice_values

    with register_slice_values(con, values) as name:
        per_q = {
            q: {
                (MISSING if k is None else str(k)): sec
                for k, sec in _stream_sections(con, shadow, q, groups=name, **common).items()
            }
            for q in ids
        }
    present = np.asarray(sorted({v for secs in per_q.values() for v in secs}), dtype=object)
    shown = np.asarray([None if v == MISSING else v for v in present], dtype=object)
    names = [v for v, _ in slice_groups(shown, order)] if present.size else []
    out = ShadowSlices(column, names, source)
    crit = common["criteria"]
    for v in names:
        sections = [per_q[q][v] for q in ids if v in per_q[q]]
        out.reports[v] = _assemble(sections, common["champion_policy"], common["challenger_policy"], crit, shadow, meta)
    return out


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
    ``options`` (:class:`~workbench.thresholds.options.ThresholdOptions`, default its defaults) when
    the session replays two stored runs — the policy ``workbench policy export`` would write — so
    the CLI, the UI and the API judge a session the same way. Each side's policy is applied only to
    requests sent with a schema it accepts (``validity.schema_hashes``) and answered by a model it
    accepts (``validity.models``), as the runtime does.

    ``slices`` (column names) adds ``report.slices[column]``: the same report on each slice's requests
    (values from :func:`shadow_slice_values` — a replayed session's dataset metadata columns, or
    ``state_length`` for any session). An unknown column raises
    :class:`~workbench.errors.NotFoundError` naming the columns there are.
    """
    from workbench.store.shadow import bounded_memory, get_session, session_schema
    from workbench.thresholds.options import ThresholdOptions

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
    meta = {k: session[k] for k in ("source", "champion", "challenger")}
    meta["created_at"] = str(session["created_at"])
    criteria = criteria or Criteria()
    common: dict[str, Any] = {
        "champion_policy": sides["champion"],
        "challenger_policy": sides["challenger"],
        "hashes": hashes,
        "criteria": criteria,
        "n_windows": n_windows,
        "n_boot": n_boot,
        "seed": seed,
        "period": period,
    }
    with bounded_memory(con, MEMORY_LIMIT):
        sections = [_stream_sections(con, shadow, q, **common)[None] for q in ids]
        report = _assemble(sections, sides["champion"], sides["challenger"], criteria, shadow, meta)
        for column, (values, order, source) in slice_values.items():
            report.slices[column] = _stream_slices(
                con, shadow, list(ids), values, column=column, order=order, source=source, meta=meta, **common
            )
    report.policies["settings"] = options.settings()
    report.policies["settings_text"] = options.describe()
    report.policies["notes"] = notes
    return report
