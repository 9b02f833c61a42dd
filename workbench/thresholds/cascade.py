"""Certified cascades: ask a cheap model first, escalate what it is unsure of, review what the last is unsure of.

A cascade of ``S`` stages (runs of the same dataset and question) routes each item like this: stage
``s`` answers; when its top option passes the stage's rule (``p_top >= tau_s`` and
``margin >= margin_s``, the coordinates of :func:`workbench.thresholds.rules.rule_coordinates`, the
same ones :mod:`workbench.thresholds.surface` grids) the answer is accepted, otherwise the item goes
to stage ``s + 1``; after the last stage it goes to review. A failed answer never passes.

Choosing the configuration (Learn-then-Test over one family of configurations):

1. **The same footing as a single model** (:func:`workbench.thresholds.choose.choose_thresholds`):
   every stage is recalibrated (``calibrate``, temperature by default) by a calibrator fitted on the
   same seeded carve of the calibration items (:func:`~workbench.thresholds.choose.calibrator_carve`,
   ``calibrator_fraction``); the guarantee is computed on the other items, and every rule is on the
   single path's grid (:func:`workbench.thresholds.surface.default_grids` with ``grid`` points per axis).
2. **The family** holds every *structure* — each non-empty ordered subsequence of the stages: each
   stage alone (priced as its own model: an item pays only that stage), and the cascades of two or
   more stages — and per structure every rule of its last stage (``grid × grid``) for every
   combination of rules of its earlier stages (``grid × grid`` per earlier stage while the product of
   the earlier stages' rules stays within ``max_early``; fewer points per axis beyond). Counting is
   nested but vectorised: per chunk of earlier-stage combinations, the items that reach the last
   stage are binned on its grid and one two-dimensional reverse cumulative sum gives the counts of
   every last-stage rule at once.
3. ``H_c: error among auto-accepted > α`` gets a Hoeffding–Bentkus p-value per configuration
   (:func:`hoeffding_bentkus_p_values`). Family-wise control at δ over **the whole family, single
   stages included**:

   - ``fixed-sequence`` (default): a seeded share of the certifying items (``order_fraction``, drawn
     as :func:`~workbench.thresholds.guarantees.certify_surface` draws it, so a stage alone is ordered
     on the same items as by ``workbench thresholds``) is held apart. On it, per structure and per
     (errors, accepted) count, the cheapest configuration is picked. Two sequences are built from the
     picked configurations, one of the single stages and one of the cascades: each is ordered by the
     held-apart upper bound of the risk at its test level (as :func:`bound_order`, independent of α)
     and keeps each configuration that is cheaper on the held-apart items than every one before it —
     strict and expensive to lax and cheap. The other items test the single stages' sequence at
     ``(1 - cascade_share) δ`` and the cascades' at ``cascade_share δ`` (Bonferroni over the two), each
     until its first configuration that is not rejected. Everything before the tests used held-apart
     items only, so the family-wise error over every configuration of the family is at most δ. A
     cascade's configuration is the best of many earlier-stage rules with the same held-apart counts,
     so its held-apart figures are optimistic and its sequence stops sooner; in its own sequence it
     cannot end the single stages' one, which keeps nearly the power of ``workbench thresholds``.
   - ``holm``: Bonferroni–Holm on all certifying items over every configuration of the family (the
     count includes the single stages and configurations whose rules accept the same items).
4. Among the certified configurations, the one with the lowest expected cost per item (provider price
   of every stage an item reaches + ``latency_weight`` × its summed latency + ``review_cost`` if it is
   reviewed; ties: more coverage) on the certifying items wins. Choosing among certified
   configurations by any criterion keeps the guarantee: with probability ≥ 1 − δ every certified
   configuration has risk ≤ α. So a configuration that another certified one beats on calibration
   cost is never recommended, and a single stage wins when it is the cheapest.

Earlier-stage rules that accept exactly the same calibration items give the same configurations;
the search counts the first of them only (Holm still counts every copy). Choice and score (top
level) questions only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from workbench.answers import RunAnswers
from workbench.thresholds.evaluate import rate_interval
from workbench.thresholds.guarantees import (
    ThresholdError,
    hoeffding_bentkus_p_values,
    hoeffding_bentkus_upper_bound,
)
from workbench.thresholds.rules import rule_coordinates
from workbench.thresholds.surface import default_grids, reverse_cumsum_2d
from workbench.wording import run_ref

CASCADE_METHODS = ("fixed-sequence", "holm")
CASCADE_RECALIBRATIONS = ("none", "temperature", "isotonic", "platt")
#: Configurations counted per chunk (earlier-stage combinations × last-stage rules).
_CHUNK = 1 << 18


@dataclass
class CascadeOptions:
    """How a cascade's configuration is chosen.

    ``alpha``/``delta``: error among auto-accepted (all stages together) ≤ α with probability ≥ 1 − δ.
    ``prices``: USD per call of each stage (``None`` entries: the run's mean recorded cost).
    ``review_cost``: USD per reviewed item. ``latency_weight``: USD per second of an item's latency.
    ``calibrate``/``calibrator_fraction``/``grid``: as :class:`~workbench.thresholds.options.ThresholdOptions`
    (each stage recalibrated on the same seeded carve; ``grid`` points per threshold axis).
    ``max_early``: most rule combinations of a structure's earlier stages (the last stage always has
    the full grid); with two stages the first stage gets the full ``grid × grid`` at the default.
    ``cascade_share``: the share of δ the cascades' test sequence gets (fixed-sequence); the single
    stages' sequence gets the rest (Bonferroni over the two sequences).
    ``prefer_single_z``: a certified cascade is recommended over the cheapest certified single stage only
    when it is cheaper on the certifying items by more than this many standard errors of the paired
    per-item cost difference (0: the cheapest certified configuration wins). A choice among certified
    configurations: the guarantee is the same.
    """

    alpha: float = 0.05
    delta: float = 0.1
    method: str = "fixed-sequence"
    order_fraction: float = 0.3
    seed: int = 0
    calibrate: str = "temperature"
    calibrator_fraction: float = 0.3
    grid: int = 100
    max_early: int = 10_000
    cascade_share: float = 0.2
    prefer_single_z: float = 1.645
    prices: list[float | None] | None = None
    review_cost: float = 0.05
    latency_weight: float = 0.0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not (0 < self.alpha < 1) or not (0 < self.delta < 1):
            raise ThresholdError(f"alpha and delta must be in (0, 1), got {self.alpha} and {self.delta}")
        if self.method not in CASCADE_METHODS:
            raise ThresholdError(f"unknown method {self.method!r}", hint=f"use one of {', '.join(CASCADE_METHODS)}")
        if self.calibrate not in CASCADE_RECALIBRATIONS:
            raise ThresholdError(
                f"unknown recalibration {self.calibrate!r}", hint=f"use one of {', '.join(CASCADE_RECALIBRATIONS)}"
            )
        if not (0 < self.order_fraction < 1) or not (0 < self.calibrator_fraction < 1):
            raise ThresholdError(
                f"order_fraction and calibrator_fraction must be in (0, 1), got {self.order_fraction} "
                f"and {self.calibrator_fraction}"
            )
        if self.review_cost < 0 or self.latency_weight < 0:
            raise ThresholdError("review_cost and latency_weight must be >= 0")
        if self.prefer_single_z < 0:
            raise ThresholdError(f"prefer_single_z must be >= 0, got {self.prefer_single_z}")
        if not (0 < self.cascade_share < 1):
            raise ThresholdError(f"cascade_share must be in (0, 1), got {self.cascade_share}")
        if not (2 <= self.grid <= 1000) or self.max_early < 4:
            raise ThresholdError(f"grid must be in [2, 1000] and max_early >= 4, got {self.grid} and {self.max_early}")

    def to_dict(self) -> dict:
        return asdict(self)


def structures(n_stages: int) -> list[tuple[int, ...]]:
    """Every non-empty ordered subsequence of the stages: each stage alone first, then the longer ones."""
    return [c for k in range(1, n_stages + 1) for c in itertools.combinations(range(n_stages), k)]


def early_grid_points(n_early: int, opts: CascadeOptions) -> int:
    """Points per axis of each earlier stage's grid: ``grid``, or fewer so that the product of the
    earlier stages' ``points²`` rules stays within ``max_early``."""
    pts = opts.grid
    while pts > 2 and pts ** (2 * n_early) > opts.max_early:
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

    def select(self, rows: np.ndarray | None = None, stages: Sequence[int] | None = None) -> AlignedStages:
        """The given rows (bool mask or indices) of the given stages (in that order)."""
        r = slice(None) if rows is None else rows
        st = range(len(self.x)) if stages is None else stages
        return AlignedStages(
            self.item_ids[r],
            self.labels[r],
            [self.x[s][r] for s in st],
            [self.y[s][r] for s in st],
            [self.predicted[s][r] for s in st],
            [self.latency_ms[s][r] for s in st],
            [self.cost_usd[s][r] for s in st],
        )


def _check_stages(stages: Sequence[RunAnswers]) -> None:
    if len(stages) < 2:
        raise ThresholdError("a cascade needs at least two stages", hint="give two or more `stages`")
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


def _aligned_rows(stages: Sequence[RunAnswers]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Sorted labelled item ids every stage has and, per stage, the row of each of them."""
    ids = [np.asarray(s.item_ids).astype(str) for s in stages]
    common = ids[0][stages[0].labels >= 0]
    for i in ids[1:]:
        common = np.intersect1d(common, i)
    common = np.sort(common)
    rows = []
    for i in ids:
        order = np.argsort(i, kind="stable")
        rows.append(order[np.searchsorted(i[order], common)])
    return common, rows


def _stage_probs(stage: RunAnswers, idx: np.ndarray) -> np.ndarray:
    probs = np.asarray(stage.probs, dtype=float)[idx]
    return np.where(np.asarray(stage.failed)[idx][:, None], np.nan, probs)


def align_stages(stages: Sequence[RunAnswers], *, calibrators: Sequence[Any] | None = None) -> AlignedStages:
    """Keep the labelled items every stage has, in one order; with
    ``calibrators`` (one fitted calibrator per stage) the coordinates are those of the calibrated
    probabilities (failed answers stay NaN: never accepted)."""
    from workbench.metrics.recalibrate import apply_calibrator

    _check_stages(stages)
    common, rows = _aligned_rows(stages)
    out = AlignedStages(common, np.zeros(0, dtype=int), [], [], [], [], [])
    for s, (st, idx) in enumerate(zip(stages, rows, strict=True)):
        probs = _stage_probs(st, idx)
        if calibrators is not None:
            probs = apply_calibrator(calibrators[s], probs)
        c = rule_coordinates(st.qtype, probs)
        out.x.append(c.x)
        out.y.append(c.y)
        out.predicted.append(c.predicted)
        out.latency_ms.append(np.nan_to_num(np.asarray(st.latency_ms, dtype=float)[idx], nan=0.0))
        out.cost_usd.append(np.asarray(st.cost_usd, dtype=float)[idx])
        if s == 0:
            out.labels = np.asarray(st.labels)[idx].astype(int)
    return out


def fit_stage_calibrators(stages: Sequence[RunAnswers], opts: CascadeOptions) -> tuple[list[Any], np.ndarray, int]:
    """Per stage the calibrator of :func:`~workbench.thresholds.choose.choose_thresholds` (same method,
    same seeded carve), fitted on the carve of the labelled items every stage answered.

    Returns
    -------
    calibrators, certify : the fitted calibrators and the (n,) bool mask of the aligned labelled items
        that were not fitted on (they certify); n_fit the number fitted on.
    """
    from workbench.metrics.recalibrate import fit_calibrator
    from workbench.thresholds.choose import calibrator_carve
    from workbench.thresholds.options import ThresholdOptions

    _check_stages(stages)
    common, rows = _aligned_rows(stages)
    topts = ThresholdOptions(
        calibrate=opts.calibrate, calibrator_fraction=opts.calibrator_fraction, seed=opts.seed, alpha=opts.alpha
    )
    fit = calibrator_carve(len(common), topts)
    cals = []
    for st, idx in zip(stages, rows, strict=True):
        if fit is None:
            cals.append(fit_calibrator("none", np.zeros((0, len(st.option_ids))), np.zeros(0, dtype=int)))
        else:
            labels = np.asarray(st.labels)[idx].astype(int)
            cals.append(fit_calibrator(opts.calibrate, _stage_probs(st, idx)[fit], labels[fit]))
    certify = np.ones(len(common), dtype=bool) if fit is None else ~fit
    return cals, certify, 0 if fit is None else int(fit.sum())


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


def per_item_cost(
    al: AlignedStages, rules: Sequence[tuple[float, float]], prices: np.ndarray, opts: CascadeOptions
) -> np.ndarray:
    """USD of each item under fixed per-stage rules: the price of every stage it reaches, its summed
    latency × ``latency_weight``, and ``review_cost`` when no stage accepts it (shape (n,))."""
    where = route(al, rules)
    reached = np.vstack([where >= s for s in range(len(rules))])
    latency = (reached * np.vstack(al.latency_ms)).sum(axis=0)
    api = (prices[:, None] * reached).sum(axis=0)
    return api + opts.review_cost * (where == len(rules)) + opts.latency_weight * latency / 1000.0


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


def _bins(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Largest ``i`` with ``grid[i] <= value`` (-1 below the grid, NaN or -inf)."""
    v = np.asarray(values, dtype=float)
    return np.searchsorted(grid, np.where(np.isnan(v), -np.inf, v), side="right") - 1


def _max_errors(n_max: int, alpha: float, level: float) -> np.ndarray:
    """``out[n]``: the most errors among ``n`` accepted items whose p-value at α is ``<= level`` (-1: none).

    The Hoeffding–Bentkus p-value rises with the errors at a fixed ``n``, so a configuration is
    rejected exactly when its errors are at most ``out[accepted]`` (bisection per ``n``, vectorised)."""
    n = np.arange(n_max + 1)
    lo, hi = np.full(n_max + 1, -1), n.copy()
    while (lo < hi).any():
        open_ = lo < hi
        mid = (lo + hi + 1) // 2
        ok = hoeffding_bentkus_p_values(np.maximum(mid, 0), n, alpha) <= level
        lo = np.where(open_ & ok, mid, lo)
        hi = np.where(open_ & ~ok, mid - 1, hi)
    return lo


@dataclass
class _EarlyStage:
    """One earlier stage on its grid: the distinct rules (first of each set of rules accepting the same
    items) and how many rules of the grid each stands for."""

    passes: np.ndarray  # (R, n) bool, distinct rules only
    reps: np.ndarray  # (R,) index of each into the grid's rules (i * points + j)
    mult: np.ndarray  # (R,) rules of the grid accepting the same items
    x_grid: np.ndarray
    y_grid: np.ndarray


def _early_stage(x: np.ndarray, y: np.ndarray, qtype: str, points: int) -> _EarlyStage:
    xg, yg = default_grids(qtype, points)
    ix, iy = _bins(x, xg), _bins(y, yg)
    ii, jj = np.divmod(np.arange(points * points), points)
    P = (ix[None, :] >= ii[:, None]) & (iy[None, :] >= jj[:, None])
    _, first, counts = np.unique(np.packbits(P, axis=1), axis=0, return_index=True, return_counts=True)
    order = np.argsort(first)
    reps = first[order]
    return _EarlyStage(P[reps], reps, counts[order], xg, yg)


@dataclass
class FamilySearch:
    """What :func:`search_family` found: the cheapest certified configuration overall and per structure."""

    structures: list[tuple[int, ...]]
    n_configurations: list[int]  # per structure, every configuration of the family (copies included)
    n_tested: list[int]  # per structure, the configurations tested (fixed-sequence: chosen on the held-apart items)
    n_certified: list[int]  # per structure
    best: list[dict | None]  # per structure: the cheapest certified configuration
    chosen: int | None  # index into ``structures`` of the cheapest certified configuration overall
    level: float  # the level of the first test (fixed-sequence: the larger of the two) or the strictest (Holm)
    levels: list[float]  # per structure, the level its configurations are tested at (Holm: the strictest)
    #: fixed-sequence: the tested configurations in test order (``k`` structure, ``u`` held-apart bound,
    #: counts ``ah``/``eh`` held apart and ``ac``/``ec`` certifying, ``gidx`` place in the family, ``rejected``)
    sequence: dict[str, np.ndarray] | None = field(default=None, repr=False)


def decode_configuration(
    gidx: int, n_stages: int, opts: CascadeOptions, qtype: str = "choice"
) -> tuple[tuple[int, ...], list[tuple[float, float]]]:
    """The structure and per-stage ``(tau, margin)`` rules of configuration ``gidx`` of the family
    (its place in the family's order: structures in :func:`structures` order, then the earlier stages'
    rules in C order, then the last stage's grid point)."""
    xg, yg = default_grids(qtype, opts.grid)
    G = len(xg) * len(yg)
    rest = int(gidx)
    for st in structures(n_stages):
        pts = early_grid_points(len(st) - 1, opts) if len(st) > 1 else 0
        full = tuple(pts * pts for _ in st[:-1])
        size = int(np.prod(full, dtype=np.int64)) * G
        if rest >= size:
            rest -= size
            continue
        orig, cell = divmod(rest, G)
        rules = []
        if full:
            ex, ey = default_grids(qtype, pts)
            for r in np.unravel_index(orig, full):
                i, j = divmod(int(r), pts)
                rules.append((float(ex[i]), float(ey[j])))
        i, j = divmod(cell, len(yg))
        rules.append((float(xg[i]), float(yg[j])))
        return st, rules
    raise ThresholdError(f"configuration {gidx} is not in the family of {n_stages} stages")


def search_family(
    al: AlignedStages, held: np.ndarray, prices: np.ndarray, opts: CascadeOptions, qtype: str = "choice"
) -> FamilySearch:
    """Test the configurations of the family (module docstring) on the certifying items ``al``.

    ``held`` (n,) bool marks the items that only choose and order the fixed-sequence tests (all
    False for Holm); the others give the p-values. The cost and coverage a certified configuration is
    chosen by are counted on all of ``al``'s items.
    """
    n, S = len(al.labels), len(al.x)
    held = np.asarray(held, dtype=bool)
    cert_rows = ~held
    n_h, n_c = int(held.sum()), int(cert_rows.sum())
    xg, yg = default_grids(qtype, opts.grid)
    A, B = len(xg), len(yg)
    G = A * B
    wrong = [np.asarray(al.predicted[s]) != al.labels for s in range(S)]
    lat = [np.asarray(al.latency_ms[s], dtype=float) for s in range(S)]
    code, valid = [], []
    for s in range(S):
        ix, iy = _bins(al.x[s], xg), _bins(al.y[s], yg)
        ok = (ix >= 0) & (iy >= 0)
        code.append(np.where(ok, cert_rows * (2 * G) + wrong[s] * G + np.maximum(ix, 0) * B + np.maximum(iy, 0), 0))
        valid.append(ok)
    fixed = opts.method == "fixed-sequence"
    early_cache: dict[tuple[int, int], _EarlyStage] = {}
    structs = structures(S)
    offsets = []
    plans = []
    total = 0
    for st in structs:
        early = st[:-1]
        pts = early_grid_points(len(early), opts) if early else 0
        stages = []
        for e in early:
            if (e, pts) not in early_cache:
                early_cache[(e, pts)] = _early_stage(al.x[e], al.y[e], qtype, pts)
            stages.append(early_cache[(e, pts)])
        full = tuple(pts * pts for _ in early)
        offsets.append(total)
        total += int(np.prod(full, dtype=np.int64)) * G
        plans.append((st, stages, full))

    def chunks(k: int):
        """Counts of every configuration of structure ``k``, a chunk of earlier-stage combinations at a
        time; arrays (b, G) whose C order is the family's order (``gidx``)."""
        st, stages, full = plans[k]
        f = st[-1]
        shape = tuple(len(es.reps) for es in stages)
        n_combos = int(np.prod(shape, dtype=np.int64))
        size = max(1, _CHUNK // G)
        cols = np.arange(G)
        for start in range(0, n_combos, size):
            combos = np.arange(start, min(start + size, n_combos))
            b = len(combos)
            pos = np.unravel_index(combos, shape) if stages else ()
            orig = (
                np.ravel_multi_index(tuple(es.reps[p] for es, p in zip(stages, pos, strict=True)), full)
                if stages
                else np.zeros(b, dtype=np.int64)
            )
            mult = np.ones(b, dtype=np.int64)
            reach = np.ones((b, n), dtype=bool)
            acc_h, acc_c, err_h, err_c = (np.zeros(b, dtype=np.int64) for _ in range(4))
            base, base_h = np.zeros(b), np.zeros(b)  # API price + latency cost, all items and held-apart ones
            for es, p, e in zip(stages, pos, st[:-1], strict=True):
                P = es.passes[p]
                mult *= es.mult[p]
                rh = reach & held
                base += prices[e] * reach.sum(axis=1) + opts.latency_weight * (reach @ lat[e]) / 1000.0
                base_h += prices[e] * rh.sum(axis=1) + opts.latency_weight * (rh @ lat[e]) / 1000.0
                a = reach & P
                w = a & wrong[e]
                acc_h += (a & held).sum(axis=1)
                acc_c += (a & cert_rows).sum(axis=1)
                err_h += (w & held).sum(axis=1)
                err_c += (w & cert_rows).sum(axis=1)
                reach &= ~P
            rh = reach & held
            base += prices[f] * reach.sum(axis=1) + opts.latency_weight * (reach @ lat[f]) / 1000.0
            base_h += prices[f] * rh.sum(axis=1) + opts.latency_weight * (rh @ lat[f]) / 1000.0
            r, c = np.nonzero(reach & valid[f])
            cnt = np.bincount(r * (4 * G) + code[f][c], minlength=b * 4 * G).reshape(b, 4, A, B)
            rc = reverse_cumsum_2d(cnt).reshape(b, 4, G)
            ah = acc_h[:, None] + rc[:, 0] + rc[:, 1]
            eh = err_h[:, None] + rc[:, 1]
            ac = acc_c[:, None] + rc[:, 2] + rc[:, 3]
            ec = err_c[:, None] + rc[:, 3]
            acc_all = ah + ac
            d = {
                "ah": ah,
                "eh": eh,
                "ac": ac,
                "ec": ec,
                "acc": acc_all,
                "err": eh + ec,
                "cost": (base[:, None] + opts.review_cost * (n - acc_all)) / n,
                "cost_h": (base_h[:, None] + opts.review_cost * (n_h - ah)) / max(n_h, 1),
                "gidx": offsets[k] + orig[:, None] * G + cols[None, :],
            }
            yield d, mult

    names = ("ah", "eh", "ac", "ec", "acc", "err", "cost", "cost_h", "gidx")
    tested: dict[str, np.ndarray]
    level = opts.delta
    levels = [opts.delta] * len(structs)
    holm_cert = [0] * len(structs)  # Holm: certified configurations per structure, copies included
    if fixed:
        # two sequences, Bonferroni: the single stages at (1 - cascade_share) δ, the cascades at cascade_share δ
        multi = [len(st) > 1 for st in structs]
        share = opts.cascade_share if any(multi) and not all(multi) else (1.0 if all(multi) else 0.0)
        levels = [opts.delta * (share if m else 1.0 - share) for m in multi]
        level = max(levels)
        # the held-apart items choose each structure's tests: per (errors, accepted) count on them the
        # cheapest configuration (held-apart cost)
        width = n_h + 1
        picked: list[dict[str, np.ndarray]] = []
        for k in range(len(structs)):
            cheapest = np.full(width * width, np.inf)
            for d, _ in chunks(k):
                np.minimum.at(cheapest, (d["eh"] * width + d["ah"]).ravel(), d["cost_h"].ravel())
            seen = np.zeros(width * width, dtype=bool)
            rows: list[dict[str, np.ndarray]] = []
            for d, _ in chunks(k):
                key = (d["eh"] * width + d["ah"]).ravel()
                hit = np.flatnonzero((d["cost_h"].ravel() == cheapest[key]) & ~seen[key])
                if len(hit):
                    uk, first = np.unique(key[hit], return_index=True)  # the first in the family's order
                    at = hit[first]
                    seen[uk] = True
                    rows.append({name: d[name].ravel()[at] for name in names})
            got = {name: np.concatenate([r[name] for r in rows]) for name in names}
            u = hoeffding_bentkus_upper_bound(got["eh"], got["ah"], levels[k])
            picked.append({**got, "u": u, "k": np.full(len(u), k)})
        parts = []
        for group in (False, True):  # the single stages' sequence, then the cascades'
            ks = [k for k in range(len(structs)) if multi[k] == group]
            if not ks:
                continue
            g = {name: np.concatenate([picked[k][name] for k in ks]) for name in picked[0]}
            # strict to lax, each configuration cheaper (held-apart cost) than every one before it
            o = np.lexsort((g["gidx"], g["cost_h"], g["u"]))
            c = g["cost_h"][o]
            keep = o[c < np.minimum.accumulate(np.concatenate([[np.inf], c[:-1]]))]
            g = {name: v[keep] for name, v in g.items()}
            emax = _max_errors(n_c, opts.alpha, levels[ks[0]])
            g["rejected"] = np.cumprod(g["ec"] <= emax[g["ac"]]).astype(bool)  # until the first non-rejection
            parts.append(g)
        tested = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        cert: np.ndarray = tested.pop("rejected")
        n_tested = [int((tested["k"] == k).sum()) for k in range(len(structs))]
    else:
        pair_keys, pair_w = [], []
        for k in range(len(structs)):
            for d, mult in chunks(k):
                keys = d["ec"] * (n_c + 1) + d["ac"]
                uk, inv = np.unique(keys, return_inverse=True)
                pair_keys.append(uk)
                pair_w.append(np.bincount(inv.ravel(), weights=np.repeat(mult, G), minlength=len(uk)))
        uk, inv = np.unique(np.concatenate(pair_keys), return_inverse=True)
        w = np.bincount(inv, weights=np.concatenate(pair_w))
        p = hoeffding_bentkus_p_values(uk // (n_c + 1), uk % (n_c + 1), opts.alpha)
        o = np.argsort(p, kind="stable")
        before = np.cumsum(w[o]) - w[o]
        ok = p[o] <= opts.delta / (total - before)
        rejected = np.sort(uk[o][np.cumprod(ok).astype(bool)])
        level = opts.delta / total
        levels = [level] * len(structs)
        rows = []
        for k in range(len(structs)):
            for d, mult in chunks(k):
                in_rejected = np.isin(d["ec"] * (n_c + 1) + d["ac"], rejected)
                if in_rejected.any():
                    holm_cert[k] += int((in_rejected * mult[:, None]).sum())
                    # only the chunk's cheapest rejected configuration (ties: more accepted, then first)
                    at = np.flatnonzero(in_rejected.ravel())
                    i = at[np.lexsort((d["gidx"].ravel()[at], -d["acc"].ravel()[at], d["cost"].ravel()[at]))[0]]
                    rows.append({**{name: d[name].ravel()[[i]] for name in names}, "k": np.array([k])})
        if rows:
            tested = {name: np.concatenate([r[name] for r in rows]) for name in rows[0]}
        else:
            tested = {name: np.zeros(0, dtype=np.int64) for name in (*names, "k")}
        cert = np.ones(len(tested["k"]), dtype=np.bool_)
        n_tested = [int(np.prod(p[2], dtype=np.int64)) * G for p in plans]

    best: list[dict | None] = [None] * len(structs)
    n_cert = [0] * len(structs)
    for k in range(len(structs)):
        sel = np.flatnonzero(cert & (tested["k"] == k))
        if not len(sel):
            continue
        n_cert[k] = len(sel) if fixed else holm_cert[k]
        i = sel[np.lexsort((tested["gidx"][sel], -tested["acc"][sel], tested["cost"][sel]))[0]]
        b: dict[str, Any] = {
            name: (float(tested[name][i]) if name == "cost" else int(tested[name][i]))
            for name in names
            if name != "cost_h"
        }
        b["key"] = (b["cost"], -b["acc"], b["gidx"])
        b["rules"] = decode_configuration(int(b["gidx"]), S, opts, qtype)[1]
        best[k] = b
    found = [k for k in range(len(structs)) if best[k] is not None]
    chosen = min(found, key=lambda k: best[k]["key"]) if found else None  # type: ignore[index]
    return FamilySearch(
        structs,
        [int(np.prod(p[2], dtype=np.int64)) * G for p in plans],
        n_tested,
        n_cert,
        best,
        chosen,
        level,
        levels,
        {**tested, "rejected": cert} if fixed else None,
    )


def structure_label(run_ids: Sequence[str], structure: Sequence[int]) -> str:
    """``run-a alone`` or ``run-a → run-b`` (short run references)."""
    names = [run_ref(run_ids[s]) for s in structure]
    return f"{names[0]} alone" if len(names) == 1 else " → ".join(names)


@dataclass
class CascadeResult:
    """The chosen configuration and its figures.

    ``structure``: the stages (indices into ``run_ids``) of the chosen configuration, one stage when a
    single model is the cheapest certified; ``rules[k]`` = ``(tau, margin)`` of ``structure[k]``
    (``tau = inf``: never accept). ``configurations``: per structure of the family its cheapest
    certified configuration with calibration and test figures; ``singles``: the single-stage ones.
    """

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
    structure: list[int] = field(default_factory=list)
    calibrators: list[dict] = field(default_factory=list)
    configurations: list[dict] = field(default_factory=list)

    @property
    def chosen_run_ids(self) -> list[str]:
        return [self.run_ids[s] for s in self.structure]

    @property
    def chosen_label(self) -> str:
        return structure_label(self.run_ids, self.structure)

    @property
    def warnings(self) -> list[str]:
        """As :attr:`ThresholdResult.warnings <workbench.thresholds.result.ThresholdResult.warnings>`: one
        sentence when the chosen configuration is certified and its error interval on the whole test split
        lies entirely above α."""
        from workbench.thresholds.evaluate import certificate_contradicted_sentence, error_above_alpha

        o = self.options
        if not self.certified or not error_above_alpha(self.test, o.alpha):
            return []
        assert self.test is not None
        where = f"{self.question} ({self.chosen_label}), whole test split"
        return [certificate_contradicted_sentence(where, self.test, o.alpha, o.delta, o.confidence)]

    def stage_rule_dicts(self) -> list[dict]:
        """Per chosen stage the policy rule (``tau: None`` = never accept; fallback escalate, review after the last)."""
        return _rule_dicts(self.qtype, self.rules)

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "type": self.qtype,
            "chosen": {
                "structure": self.chosen_label,
                "kind": "single" if len(self.structure) == 1 else "cascade",
                "run_ids": self.chosen_run_ids,
            },
            "stages": [
                {
                    "run_id": self.run_ids[s],
                    "price_per_call_usd": self.prices[s],
                    "rule": d,
                    "calibrator": self.calibrators[s],
                }
                for s, d in zip(self.structure, self.stage_rule_dicts(), strict=True)
            ],
            "run_ids": self.run_ids,
            "certified": self.certified,
            "warnings": self.warnings,
            "settings": {k: v for k, v in self.options.to_dict().items() if k != "prices"},
            "calibration": self.calibration,
            "guarantee": self.guarantee,
            "test": self.test,
            "configurations": self.configurations,
            "singles": self.singles,
            "notes": self.notes,
        }


def _rule_dicts(qtype: str, rules: Sequence[tuple[float, float]]) -> list[dict]:
    kind = "top_margin" if qtype == "choice" else "score"
    out = []
    for s, (t, m) in enumerate(rules):
        never = not np.isfinite(t)
        out.append(
            {
                "kind": kind,
                "tau": None if never else float(t),
                "margin": 0.0 if never else float(m),
                "fallback": "escalate" if s < len(rules) - 1 else "review",
            }
        )
    return out


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


def _prefer_single(
    found: FamilySearch, al: AlignedStages, prices: np.ndarray, opts: CascadeOptions
) -> tuple[int | None, dict | None]:
    """The recommended structure: the cheapest certified one, unless it is a cascade whose saving over
    the cheapest certified single stage (paired per-item costs on the certifying items) is within
    ``prefer_single_z`` standard errors — then that single stage. Also the margin when it decided."""
    if found.chosen is None or len(found.structures[found.chosen]) == 1 or opts.prefer_single_z == 0:
        return found.chosen, None
    singles = [k for k, st in enumerate(found.structures) if len(st) == 1 and found.best[k] is not None]
    if not singles:
        return found.chosen, None
    s1 = min(singles, key=lambda k: found.best[k]["key"])  # type: ignore[index]
    k = found.chosen

    def costs(j: int) -> np.ndarray:
        st = found.structures[j]
        b = found.best[j]
        assert b is not None
        return per_item_cost(al.select(stages=st), b["rules"], prices[list(st)], opts)

    d = costs(s1) - costs(k)  # > 0: the cascade saves
    n = len(d)
    se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    if float(d.mean()) > opts.prefer_single_z * se:
        return k, None
    return s1, {"structure": found.structures[k], "saving": float(d.mean()), "se": se}


def _own_certificate(
    cal: RunAnswers,
    test: RunAnswers | None,
    common: np.ndarray,
    tal: AlignedStages | None,
    s: int,
    price: float,
    opts: CascadeOptions,
) -> dict:
    """Stage ``s`` alone under its own certificate — :func:`~workbench.thresholds.choose.choose_thresholds`
    at the same settings on the items every stage answered, what ``workbench thresholds`` gives — as a
    reference next to the family (it is certified on its own, not within the family's correction)."""
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions

    topts = ThresholdOptions(
        alpha=opts.alpha,
        delta=opts.delta,
        method=opts.method,
        calibrate=opts.calibrate,
        calibrator_fraction=opts.calibrator_fraction,
        order_fraction=opts.order_fraction,
        seed=opts.seed,
        grid=opts.grid,
        confidence=opts.confidence,
    )
    c = cal.select(np.isin(np.asarray(cal.item_ids).astype(str), common))
    t_ans = None
    if test is not None and tal is not None:
        tids = np.asarray(test.item_ids).astype(str)
        t_ans = test.select(np.isin(tids, tal.item_ids))
    res = choose_thresholds(c, t_ans, topts)
    out: dict[str, Any] = {"certified": res.certified, "rule": res.rule_dict(), "coverage": None, "error": None}
    if res.test:
        cov = res.test["coverage"]["value"] or 0.0
        lat = float(np.mean(tal.latency_ms[s])) if tal is not None and len(tal.labels) else 0.0
        per_item = price + opts.review_cost * (1.0 - cov) + opts.latency_weight * lat / 1000.0
        out.update(coverage=res.test["coverage"], error=res.test["error"], cost_per_1000=1000.0 * per_item)
    return out


def choose_cascade(
    calibration: Sequence[RunAnswers], test: Sequence[RunAnswers] | None = None, opts: CascadeOptions | None = None
) -> CascadeResult:
    """The cheapest certified configuration — a cascade of the given stage runs or one of them alone —
    (see the module docstring), with every structure's cheapest certified configuration beside it.

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
    _check_stages(calibration)
    common = _aligned_rows(calibration)[0]
    if len(common) == 0:
        raise ThresholdError(
            f"no labelled calibration item of {calibration[0].question!r} was answered by every stage",
            hint="run every stage on the calibration split of the same dataset",
        )
    qtype = calibration[0].qtype
    cals, certify, n_fit = fit_stage_calibrators(calibration, opts)
    al = align_stages(calibration, calibrators=cals).select(certify)
    n = len(al.labels)
    if n == 0:
        raise ThresholdError(
            "no calibration item is left to certify after the calibrator's carve",
            hint="use a larger calibration split or `calibrate` none",
        )
    prices = stage_prices(calibration, opts.prices)
    held = np.zeros(n, dtype=bool)
    if opts.method == "fixed-sequence":
        held = np.random.default_rng([opts.seed, 1]).random(n) < opts.order_fraction
    found = search_family(al, held, prices, opts, qtype)
    found.chosen, margin = _prefer_single(found, al, prices, opts)
    run_ids = [c.run_id for c in calibration]
    tal = align_stages(test, calibrators=cals) if test is not None else None
    configurations: list[dict[str, Any]] = []
    for k, st in enumerate(found.structures):
        b = found.best[k]
        rules = b["rules"] if b is not None else [(float("inf"), 0.0)] * len(st)
        sub = al.select(stages=st)
        where = route(sub, rules)
        configurations.append(
            {
                "structure": structure_label(run_ids, st),
                "run_ids": [run_ids[s] for s in st],
                "stages": list(st),
                "certified": b is not None,
                "chosen": k == found.chosen,
                "rules": _rule_dicts(qtype, rules),
                "n_configurations": found.n_configurations[k],
                "n_certified": found.n_certified[k],
                "calibration": {
                    "n_items": n,
                    "coverage": float(np.mean(where < len(st))),
                    "error_rate": (b["err"] / b["acc"]) if b is not None and b["acc"] else None,
                    "accepted_at_stage": [float(np.mean(where == i)) for i in range(len(st))],
                    "expected_cost_per_1000": evaluate_cascade(sub, rules, prices[list(st)], opts)["cost_per_1000"],
                },
                "test": evaluate_cascade(tal.select(stages=st), rules, prices[list(st)], opts)
                if tal is not None and len(tal.labels)
                else None,
            }
        )
    certified = found.chosen is not None
    notes = []
    if certified:
        assert found.chosen is not None
        k = found.chosen
        structure = list(found.structures[k])
        best = found.best[k]
        assert best is not None
        rules = best["rules"]
        if len(structure) == 1 and margin is None:
            notes.append(
                f"a single stage is the cheapest certified configuration: {configurations[k]['structure']} "
                "(no cascade of these stages is certified at a lower expected cost)"
            )
        elif margin is not None:
            notes.append(
                f"a single stage is recommended: {configurations[k]['structure']}; the cheapest certified cascade "
                f"({structure_label(run_ids, margin['structure'])}) is cheaper on the calibration items by ${1000 * margin['saving']:.4f} per "
                f"1,000 items, within {opts.prefer_single_z:g} standard errors (${1000 * margin['se']:.4f})"
            )
    else:
        k = len(found.structures) - 1  # every stage, nothing accepted: every item is reviewed
        structure, best = list(range(S)), None
        rules = [(float("inf"), 0.0)] * S
        notes.append(
            f"no configuration is certified at alpha {opts.alpha:g}, delta {opts.delta:g}: every item is reviewed"
        )
    total = int(sum(found.n_configurations))
    p_value = ub = None
    if best is not None:
        p_value = float(hoeffding_bentkus_p_values(np.asarray([best["ec"]]), np.asarray([best["ac"]]), opts.alpha)[0])
        ub = float(
            min(
                hoeffding_bentkus_upper_bound(np.asarray([best["ec"]]), np.asarray([best["ac"]]), found.levels[k])[0],
                opts.alpha,
            )
        )
    fixed = opts.method == "fixed-sequence"
    guarantee = {
        "alpha": opts.alpha,
        "delta": opts.delta,
        "method": opts.method,
        "order": (
            "held-apart: per structure and count the cheapest configuration; two sequences (single stages, "
            "cascades) by upper bound of the risk, each cheaper than every one before it; Bonferroni over the two"
        )
        if fixed
        else None,
        "family": "every stage alone and every cascade of the stages in order, each with every rule of the grid",
        "n_configurations": total,
        "n_tested": int(sum(found.n_tested)),
        "n_certified": int(sum(found.n_certified)),
        "test_level": found.levels[k],
        "test_levels": {
            structure_label(run_ids, st): lv for st, lv in zip(found.structures, found.levels, strict=True)
        },
        "n_certifying_items": int((~held).sum()),
        "n_order_items": int(held.sum()),
        "accepted": None if best is None else best["ac"],
        "errors": None if best is None else best["ec"],
        "p_value": p_value,
        "risk_upper_bound": ub,
    }
    chosen_cfg = configurations[k]
    calib = {
        "n_items": n,
        "n_calibrator_fit": n_fit,
        "coverage": chosen_cfg["calibration"]["coverage"],
        "error_rate": chosen_cfg["calibration"]["error_rate"],
        "accepted_at_stage": chosen_cfg["calibration"]["accepted_at_stage"],
        "expected_cost_per_1000": chosen_cfg["calibration"]["expected_cost_per_1000"],
    }
    singles = []
    for s in range(S):
        cfg = next(c for c in configurations if c["stages"] == [s])
        t = cfg["test"] or {}
        singles.append(
            {
                "run_id": run_ids[s],
                "price_per_call_usd": float(prices[s]),
                "certified": cfg["certified"],
                "chosen": cfg["chosen"],
                "rule": cfg["rules"][0],
                "calibration_coverage": cfg["calibration"]["coverage"],
                "calibration_cost_per_1000": cfg["calibration"]["expected_cost_per_1000"],
                "coverage": t.get("coverage"),
                "error": t.get("error"),
                "review_rate": t.get("review_rate"),
                "cost_per_1000": t.get("cost_per_1000"),
                "api_cost_per_1000": t.get("api_cost_per_1000"),
                "latency_ms_mean": t.get("latency_ms_mean"),
                "latency_ms_p95": t.get("latency_ms_p95"),
                "own_certificate": _own_certificate(
                    calibration[s], test[s] if test is not None else None, common, tal, s, float(prices[s]), opts
                ),
            }
        )
    return CascadeResult(
        question=calibration[0].question,
        qtype=qtype,
        option_ids=list(calibration[0].option_ids),
        run_ids=run_ids,
        options=opts,
        prices=[float(x) for x in prices],
        certified=certified,
        rules=rules,
        calibration=calib,
        guarantee=guarantee,
        test=chosen_cfg["test"],
        singles=singles,
        notes=notes,
        structure=structure,
        calibrators=[c.to_dict() for c in cals],
        configurations=configurations,
    )


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
                f"`cost_per_call` {v!r} is not RUN=USD with a non-negative price",
                hint="e.g. `cost_per_call` run-1234abcd=0.0005",
                parameter="cost_per_call",
            )
        out[run.strip()] = price
    return out
