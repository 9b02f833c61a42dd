"""Certified cascades: ask a cheap model first, escalate what it is unsure of, review what the last is unsure of.

A cascade of ``S`` stages (runs of the same dataset and question) routes each item like this: stage
``s`` answers; when its top option passes the stage's rule (``p_top >= tau_s`` and
``margin >= margin_s``, the coordinates of :func:`workbench.thresholds.rules.rule_coordinates`, the
same ones :mod:`workbench.thresholds.surface` grids) the answer is accepted, otherwise the item goes
to stage ``s + 1``; after the last stage it goes to review. A failed answer never passes.

Choosing the bands (Learn-then-Test over the *joint* rule):

1. Each stage gets a modest, data-independent grid of candidate rules (``tau`` on the mixed grid of
   :func:`workbench.thresholds.surface.default_grids` × a few margins, plus "never accept"), and the
   joint grid is their product, capped at ``max_configs`` configurations.
2. For every configuration the numbers of auto-accepted items and of wrong accepted items, over all
   stages together, are counted at once: the share of items that reach each stage is a matrix
   product of the previous reach with the stage's pass matrix (no loop over configurations).
3. ``H_c: error among auto-accepted > α`` gets a Hoeffding–Bentkus p-value per configuration
   (:func:`hoeffding_bentkus_p_values`). Family-wise control at δ: ``fixed-sequence`` (default) tests
   the configurations in one order learned on a seeded held-apart share of the calibration items
   (``order_fraction``; :func:`bound_order`, ascending upper bound of the risk — independent of α),
   p-values from the other items; ``holm`` is Bonferroni–Holm over the whole grid on all items.
4. Among the certified configurations, the one with the lowest expected cost per item (provider price
   of every stage an item reaches + ``latency_weight`` × its summed latency + ``review_cost`` if it is
   reviewed) on the calibration items wins. Choosing among certified configurations by any criterion
   keeps the guarantee: with probability ≥ 1 − δ every certified configuration has risk ≤ α.

The cascade applies the raw probabilities (no recalibration): the guarantee holds for any score, and
the policy's stages then carry the identity calibrator. Choice and score (top level) questions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from workbench.answers import RunAnswers
from workbench.thresholds.evaluate import rate_interval
from workbench.thresholds.guarantees import (
    ThresholdError,
    bound_order,
    fixed_sequence_rejections,
    hoeffding_bentkus_p_values,
    hoeffding_bentkus_upper_bound,
    holm_rejections,
)
from workbench.thresholds.rules import rule_coordinates
from workbench.thresholds.surface import default_grids
from workbench.wording import run_ref

CASCADE_METHODS = ("fixed-sequence", "holm")


@dataclass
class CascadeOptions:
    """How a cascade's bands are chosen.

    ``alpha``/``delta``: error among auto-accepted (all stages together) ≤ α with probability ≥ 1 − δ.
    ``prices``: USD per call of each stage (``None`` entries: the run's mean recorded cost).
    ``review_cost``: USD per reviewed item. ``latency_weight``: USD per second of an item's latency.
    ``tau_points`` × ``margins`` (+ never accept) candidate rules per stage, at most ``max_configs``
    joint configurations (fewer ``tau`` points per stage when the product would exceed it).
    """

    alpha: float = 0.05
    delta: float = 0.1
    method: str = "fixed-sequence"
    order_fraction: float = 0.3
    seed: int = 0
    tau_points: int = 16
    margins: tuple[float, ...] = (0.0, 0.05, 0.2)
    max_configs: int = 5000
    prices: list[float | None] | None = None
    review_cost: float = 0.05
    latency_weight: float = 0.0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not (0 < self.alpha < 1) or not (0 < self.delta < 1):
            raise ThresholdError(f"alpha and delta must be in (0, 1), got {self.alpha} and {self.delta}")
        if self.method not in CASCADE_METHODS:
            raise ThresholdError(f"unknown method {self.method!r}", hint=f"use one of {', '.join(CASCADE_METHODS)}")
        if not (0 < self.order_fraction < 1):
            raise ThresholdError(f"order_fraction must be in (0, 1), got {self.order_fraction}")
        if self.review_cost < 0 or self.latency_weight < 0:
            raise ThresholdError("review_cost and latency_weight must be >= 0")
        if self.tau_points < 2 or self.max_configs < 4:
            raise ThresholdError("tau_points must be >= 2 and max_configs >= 4")

    def to_dict(self) -> dict:
        return asdict(self)


def stage_candidates(tau_points: int, margins: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Candidate rules of one stage: ``(tau, margin)`` pairs; the last pair (``tau = inf``) never accepts."""
    taus, _ = default_grids("choice", tau_points)
    t, m = np.meshgrid(taus, np.asarray(margins, dtype=float), indexing="ij")
    return np.append(t.ravel(), np.inf), np.append(m.ravel(), 0.0)


def _points_per_stage(n_stages: int, opts: CascadeOptions) -> int:
    """Largest ``tau`` grid (≤ ``opts.tau_points``) whose joint product stays within ``max_configs``."""
    k = len(opts.margins)
    pts = opts.tau_points
    while pts > 2 and (pts * k + 1) ** n_stages > opts.max_configs:
        pts -= 1
    return pts


@dataclass
class AlignedStages:
    """Items answered by every stage, aligned: per stage the rule coordinates and correctness (shapes (n,))."""

    item_ids: np.ndarray
    labels: np.ndarray
    x: list[np.ndarray]
    y: list[np.ndarray]
    predicted: list[np.ndarray]
    latency_ms: list[np.ndarray]
    cost_usd: list[np.ndarray]


def align_stages(stages: Sequence[RunAnswers], *, labelled: bool = True) -> AlignedStages:
    """Keep the items every stage has (labelled ones with ``labelled``), in one order."""
    if len(stages) < 2:
        raise ThresholdError("a cascade needs at least two stages", hint="pass --stage RUN twice or more")
    q = stages[0]
    for s in stages[1:]:
        if s.question != q.question or list(s.option_ids) != list(q.option_ids):
            raise ThresholdError(
                f"stage {run_ref(s.run_id)} answers {s.question!r} with other options than {run_ref(q.run_id)}",
                hint="every stage must answer the same question with the same options",
            )
    if q.qtype not in ("choice", "score"):
        raise ThresholdError(
            f"question {q.question!r} is a {q.qtype} question; cascades support choice and score questions"
        )
    ids = [np.asarray(s.item_ids).astype(str) for s in stages]
    common = ids[0][q.labels >= 0] if labelled else ids[0]
    for i in ids[1:]:
        common = np.intersect1d(common, i)
    common = np.sort(common)
    out = AlignedStages(common, np.zeros(0, dtype=int), [], [], [], [], [])
    for s, i in zip(stages, ids, strict=True):
        pos = np.searchsorted(np.sort(i), common)
        idx = np.argsort(i, kind="stable")[pos]
        probs = np.asarray(s.probs, dtype=float)[idx]
        probs = np.where(np.asarray(s.failed)[idx][:, None], np.nan, probs)
        c = rule_coordinates(s.qtype, probs)
        out.x.append(c.x)
        out.y.append(c.y)
        out.predicted.append(c.predicted)
        out.latency_ms.append(np.nan_to_num(np.asarray(s.latency_ms, dtype=float)[idx], nan=0.0))
        out.cost_usd.append(np.asarray(s.cost_usd, dtype=float)[idx])
        if len(out.labels) == 0:
            out.labels = np.asarray(s.labels)[idx].astype(int)
    return out


def cascade_counts(
    passes: Sequence[np.ndarray],
    wrong: Sequence[np.ndarray],
    latency_ms: Sequence[np.ndarray],
) -> dict[str, Any]:
    """Counts of every joint configuration at once.

    Parameters
    ----------
    passes : per stage an (n, R_s) bool matrix: item passes candidate rule ``r`` of stage ``s``
    wrong : per stage an (n,) bool: the stage's top option is not the label
    latency_ms : per stage an (n,) float

    Returns
    -------
    dict with flat arrays over the ``prod(R_s)`` configurations (C order of the stage indices):
    ``accepted``, ``errors``, ``reach`` (S, C) items that call stage ``s``, ``accepted_at`` (S, C),
    ``review`` and ``latency_ms`` (summed over items), and ``shape``.
    """
    n = passes[0].shape[0]
    reach = np.ones((1, n))
    acc = np.zeros(1)
    err = np.zeros(1)
    lat = np.zeros(1)
    reach_counts: list[np.ndarray] = []
    acc_at: list[np.ndarray] = []
    shape: list[int] = []
    for P, w, t in zip(passes, wrong, latency_ms, strict=True):
        Pf = np.asarray(P, dtype=float)
        R = Pf.shape[1]
        a_s = reach @ Pf  # (C, R)
        e_s = reach @ (Pf * np.asarray(w, dtype=float)[:, None])
        called = reach.sum(axis=1)  # (C,)
        lat_s = reach @ np.asarray(t, dtype=float)
        acc = (acc[:, None] + a_s).ravel()
        err = (err[:, None] + e_s).ravel()
        lat = np.repeat(lat + lat_s, R)
        reach_counts = [np.repeat(r, R) for r in reach_counts] + [np.repeat(called, R)]
        acc_at = [np.repeat(a, R) for a in acc_at] + [a_s.ravel()]
        reach = (reach[:, None, :] * (1.0 - Pf.T)[None, :, :]).reshape(-1, n)
        shape.append(R)
    return {
        "accepted": np.rint(acc).astype(np.int64),
        "errors": np.rint(err).astype(np.int64),
        "reach": np.rint(np.vstack(reach_counts)).astype(np.int64),
        "accepted_at": np.rint(np.vstack(acc_at)).astype(np.int64),
        "review": np.rint(reach.sum(axis=1)).astype(np.int64),
        "latency_ms": lat,
        "shape": tuple(shape),
    }


def _passes(al: AlignedStages, cands: Sequence[tuple[np.ndarray, np.ndarray]], mask: np.ndarray | None = None):
    sel = slice(None) if mask is None else mask
    P = [
        (al.x[s][sel][:, None] >= t[None, :]) & (al.y[s][sel][:, None] >= m[None, :]) for s, (t, m) in enumerate(cands)
    ]
    W = [al.predicted[s][sel] != al.labels[sel] for s in range(len(cands))]
    L = [al.latency_ms[s][sel] for s in range(len(cands))]
    return P, W, L


def _expected_cost(counts: dict, n: int, prices: np.ndarray, opts: CascadeOptions) -> np.ndarray:
    """Expected USD per item of every configuration."""
    api = (prices[:, None] * counts["reach"]).sum(axis=0)
    return (api + opts.review_cost * counts["review"] + opts.latency_weight * counts["latency_ms"] / 1000.0) / max(n, 1)


def route(al: AlignedStages, rules: Sequence[tuple[float, float]]) -> np.ndarray:
    """Stage index that accepts each item, or ``len(rules)`` for review (shape (n,))."""
    n = len(al.labels)
    out = np.full(n, len(rules), dtype=int)
    open_ = np.ones(n, dtype=bool)
    for s, (t, m) in enumerate(rules):
        ok = open_ & (al.x[s] >= t) & (al.y[s] >= m)
        out[ok] = s
        open_ &= ~ok
    return out


def evaluate_cascade(
    al: AlignedStages, rules: Sequence[tuple[float, float]], prices: np.ndarray, opts: CascadeOptions
) -> dict:
    """Figures of fixed per-stage rules on aligned (test) items: coverage, error, escalation, cost, latency."""
    S, n = len(rules), len(al.labels)
    where = route(al, rules)
    accepted = where < S
    pred = np.full(n, -1)
    for s in range(S):
        pred = np.where(where == s, al.predicted[s], pred)
    k_err = int((accepted & (pred != al.labels)).sum())
    k_acc = int(accepted.sum())
    reached = np.vstack([where >= s for s in range(S)])  # (S, n): the item called stage s
    latency = (reached * np.vstack(al.latency_ms)).sum(axis=0)
    api = (prices[:, None] * reached).sum(axis=0)
    review = ~accepted
    per_item = api + opts.review_cost * review + opts.latency_weight * latency / 1000.0
    return {
        "n_items": n,
        "n_accepted": k_acc,
        "n_errors": k_err,
        "coverage": rate_interval(k_acc, n, "clopper-pearson", opts.confidence),
        "error": rate_interval(k_err, k_acc, "clopper-pearson", opts.confidence),
        "accepted_at_stage": [float(np.mean(where == s)) if n else 0.0 for s in range(S)],
        "escalated_at_stage": [float(np.mean(where > s)) if n else 0.0 for s in range(S - 1)],
        "review_rate": float(review.mean()) if n else 0.0,
        "cost_per_1000": float(per_item.mean() * 1000.0) if n else None,
        "api_cost_per_1000": float(api.mean() * 1000.0) if n else None,
        "latency_ms_mean": float(latency.mean()) if n else None,
        "latency_ms_p95": float(np.percentile(latency, 95)) if n else None,
    }


@dataclass
class CascadeResult:
    """The chosen bands and their figures (``rules[s]`` = ``(tau, margin)``; ``tau = inf``: never accept)."""

    question: str
    qtype: str
    option_ids: list[str]
    run_ids: list[str]
    options: CascadeOptions
    prices: list[float]
    certified: bool
    rules: list[tuple[float, float]]
    calibration: dict
    guarantee: dict
    test: dict | None
    singles: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def stage_rule_dicts(self) -> list[dict]:
        """Per stage the policy rule (``tau: None`` = never accept; fallback escalate, review after the last)."""
        kind = "top_margin" if self.qtype == "choice" else "score"
        out = []
        for s, (t, m) in enumerate(self.rules):
            never = not np.isfinite(t)
            out.append(
                {
                    "kind": kind,
                    "tau": None if never else float(t),
                    "margin": 0.0 if never else float(m),
                    "fallback": "escalate" if s < len(self.rules) - 1 else "review",
                }
            )
        return out

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "type": self.qtype,
            "stages": [
                {"run_id": r, "price_per_call_usd": p, "rule": d}
                for r, p, d in zip(self.run_ids, self.prices, self.stage_rule_dicts(), strict=True)
            ],
            "certified": self.certified,
            "settings": {k: v for k, v in self.options.to_dict().items() if k != "prices"},
            "calibration": self.calibration,
            "guarantee": self.guarantee,
            "test": self.test,
            "singles": self.singles,
            "notes": self.notes,
        }


def stage_prices(stages: Sequence[RunAnswers], prices: Sequence[float | None] | None) -> np.ndarray:
    """USD per call of each stage: declared, else the run's mean recorded cost (0 when none was recorded)."""
    out = []
    for s, st in enumerate(stages):
        p = None if prices is None else prices[s]
        if p is None:
            c = np.asarray(st.cost_usd, dtype=float)
            p = float(np.nanmean(c)) if np.isfinite(c).any() else 0.0
        if p < 0:
            raise ThresholdError(f"price per call of stage {st.run_id} is negative ({p})")
        out.append(float(p))
    return np.asarray(out)


def choose_cascade(
    calibration: Sequence[RunAnswers], test: Sequence[RunAnswers] | None = None, opts: CascadeOptions | None = None
) -> CascadeResult:
    """Certified per-stage bands for a cascade of the given stage runs (see the module docstring).

    Parameters
    ----------
    calibration : per stage the calibration-split answers of one question (same dataset)
    test : per stage the test-split answers, optional (figures on the items every stage answered)
    opts : CascadeOptions

    Returns
    -------
    CascadeResult
    """
    opts = opts or CascadeOptions()
    S = len(calibration)
    if opts.prices is not None and len(opts.prices) != S:
        raise ThresholdError(f"{len(opts.prices)} prices for {S} stages")
    al = align_stages(calibration)
    n = len(al.labels)
    if n == 0:
        raise ThresholdError(
            f"no labelled calibration item of {calibration[0].question!r} was answered by every stage",
            hint="run every stage on the calibration split of the same dataset",
        )
    prices = stage_prices(calibration, opts.prices)
    pts = _points_per_stage(S, opts)
    cands = [stage_candidates(pts, opts.margins)] * S
    notes = []
    if pts < opts.tau_points:
        notes.append(f"tau grid reduced to {pts} points per stage to stay within {opts.max_configs} configurations")

    all_counts = cascade_counts(*_passes(al, cands))
    if opts.method == "fixed-sequence":
        rng = np.random.default_rng([opts.seed, 16])
        held = rng.random(n) < opts.order_fraction
        o = cascade_counts(*_passes(al, cands, held))
        order = bound_order(o["errors"], o["accepted"], opts.delta)
        cert = cascade_counts(*_passes(al, cands, ~held))
        p = hoeffding_bentkus_p_values(cert["errors"], cert["accepted"], opts.alpha)
        rejected = fixed_sequence_rejections(p, [order], opts.delta)
        n_cert = int((~held).sum())
    else:
        cert = all_counts
        p = hoeffding_bentkus_p_values(cert["errors"], cert["accepted"], opts.alpha)
        rejected = holm_rejections(p, opts.delta)
        n_cert = n
    rejected &= cert["accepted"] > 0
    cost = _expected_cost(all_counts, n, prices, opts)
    certified = bool(rejected.any())
    if certified:
        idx = np.flatnonzero(rejected)
        best = int(idx[np.lexsort((-all_counts["accepted"][idx], cost[idx]))[0]])
    else:  # nothing certified: every item goes through every stage to review
        best = int(np.ravel_multi_index(tuple(r - 1 for r in all_counts["shape"]), all_counts["shape"]))
        notes.append(
            f"no joint configuration is certified at alpha {opts.alpha:g}, delta {opts.delta:g}: every item is reviewed"
        )
    pos = np.unravel_index(best, all_counts["shape"])
    rules = [(float(cands[s][0][pos[s]]), float(cands[s][1][pos[s]])) for s in range(S)]
    ub = hoeffding_bentkus_upper_bound(
        np.asarray([cert["errors"][best]]), np.asarray([cert["accepted"][best]]), opts.delta
    )
    guarantee = {
        "alpha": opts.alpha,
        "delta": opts.delta,
        "method": opts.method,
        "order": "held-apart upper bound (bound_order)" if opts.method == "fixed-sequence" else None,
        "n_configurations": int(len(p)),
        "n_certified": int(rejected.sum()),
        "n_certifying_items": n_cert,
        "accepted": int(cert["accepted"][best]),
        "errors": int(cert["errors"][best]),
        "p_value": float(p[best]),
        "risk_upper_bound": float(ub[0]),
    }
    acc = int(all_counts["accepted"][best])
    calib = {
        "n_items": n,
        "coverage": acc / n,
        "error_rate": (int(all_counts["errors"][best]) / acc) if acc else None,
        "accepted_at_stage": [int(all_counts["accepted_at"][s][best]) / n for s in range(S)],
        "expected_cost_per_1000": float(cost[best] * 1000.0),
    }
    test_report = None
    if test is not None:
        tal = align_stages(test)
        test_report = evaluate_cascade(tal, rules, prices, opts)
    return CascadeResult(
        question=calibration[0].question,
        qtype=calibration[0].qtype,
        option_ids=list(calibration[0].option_ids),
        run_ids=[c.run_id for c in calibration],
        options=opts,
        prices=[float(x) for x in prices],
        certified=certified,
        rules=rules,
        calibration=calib,
        guarantee=guarantee,
        test=test_report,
        notes=notes,
    )


def single_stage_figures(
    res_single: Any, test: RunAnswers, price: float, opts: CascadeOptions, item_ids: np.ndarray
) -> dict:
    """A single model under its own certified rule (a :class:`ThresholdResult`), on the cascade's test items."""
    t = res_single.test or {}
    review = 1.0 - ((t.get("coverage") or {}).get("value") or 0.0)
    ids = np.asarray(test.item_ids).astype(str)
    lat = np.nan_to_num(np.asarray(test.latency_ms, dtype=float)[np.isin(ids, item_ids)], nan=0.0)
    mean_lat = float(lat.mean()) if len(lat) else 0.0
    per_item = price + opts.review_cost * review + opts.latency_weight * mean_lat / 1000.0
    return {
        "run_id": test.run_id,
        "price_per_call_usd": price,
        "certified": bool(res_single.certified),
        "rule": res_single.rule_dict(),
        "coverage": t.get("coverage"),
        "error": t.get("error"),
        "review_rate": review,
        "cost_per_1000": per_item * 1000.0,
        "api_cost_per_1000": price * 1000.0,
        "latency_ms_mean": mean_lat,
        "latency_ms_p95": float(np.percentile(lat, 95)) if len(lat) else None,
    }


def parse_price_flags(values: Sequence[str] | None) -> dict[str, float]:
    """``["RUN=USD", …]`` (``--cost-per-call``) → ``{run: usd}``; a malformed entry names itself in the error."""
    from workbench.errors import OptionError

    out: dict[str, float] = {}
    for v in values or []:
        run, sep, usd = v.partition("=")
        try:
            price = float(usd)
        except ValueError:
            price = float("nan")
        if not sep or not run.strip() or not np.isfinite(price) or price < 0:
            raise OptionError(
                f"--cost-per-call {v!r} is not RUN=USD with a non-negative price",
                hint="e.g. --cost-per-call run-1234abcd=0.0005",
                parameter="cost_per_call",
            )
        out[run.strip()] = price
    return out
