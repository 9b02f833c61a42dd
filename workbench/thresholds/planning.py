"""How many calibration labels to buy: simulate the guarantee from a labelled pilot.

Given a pilot of labelled items (the model's probabilities and the gold labels), :func:`plan_labels_from_pilot`
estimates, for a range of calibration-split sizes ``N``, the probability that the guarantee of
``workbench thresholds`` certifies a rule at α (and, with a target, a rule whose certified coverage
reaches it), and the certified coverage to expect.

The recommendation states the pilot's own uncertainty. The pilot is bootstrapped (``n_replicates``
Bayesian-bootstrap replicates, each re-fitting the calibrator and the error model: one plausible
population each); every replicate gets its own simulated splits at every size, its probability of
success is smoothed along ``log N`` (:func:`success_curves`, a two-parameter logistic fit) and solved for
the N at which it reaches ``power`` (default 0.8). Those N are the plan's spread
(``labels_range``: 10 %, median, 90 %); the recommendation is their ``confidence`` quantile (default
0.9), so that the size is enough unless the pilot was unusually lucky. (The pooled curve, the
average over replicates, is a predictive probability: on 300-item BANKING77 pilots its N reached a
coverage target in 34–63 % of real draws, against the promised 80 %.) With a target coverage, the plan
warns when the pilot's best rule reaching that coverage has a 90 % Clopper–Pearson error interval
that contains α: the pilot cannot then tell whether the target is reachable at all. It also warns when
the recommendation is more than :data:`WIDE_SPREAD` times the median N: the replicates disagree, because
N grows like ``1 / (α - error)²`` and the replicates whose best rule sits close to α need many times
more labels (on 300-item BANKING77 pilots with a coverage target of 0.5, one pilot's replicates spread
from 726 to 19,140 labels while real draws of 600 already reach the target in 82 % of cases).

How a draw of size ``N`` is simulated
-------------------------------------
1. **A population per draw.** Bayesian-bootstrap weights (Dirichlet(1, …, 1), Rubin 1981) over the
   pilot items (and the unlabelled items, if given) describe one plausible population; the
   calibrator of the :class:`~workbench.thresholds.options.ThresholdOptions` is re-fitted on a resample
   of the pilot drawn from those weights, and every item is reduced to its rule coordinates and grid
   cell (:func:`~workbench.thresholds.rules.rule_coordinates`). Each item's chance of being wrong
   when accepted is a two-parameter logistic fit, on the same resample, of the pilot's observed
   errors on the (temperature-)calibrated probability of the accepted option (``errors="logistic"``).
   Populations (one per replicate, ``n_draws // n_replicates`` draws each) are shared by all sizes
   (common random numbers). Drawing from a population rather than from the pilot carries the pilot's
   own uncertainty into the result: the pooled probability is a *predictive* probability given the
   pilot, and the spread over replicates is the uncertainty of N.
2. **The split.** The ``N`` items are split as ``choose_thresholds`` splits a calibration split: a
   ``calibrator_fraction`` carve (only fits the calibrator), an ``order_fraction`` share of the rest
   (only orders the fixed-sequence tests) and the certifying items; per-item counts are multinomial
   and errors binomial.
3. **The certificate.** Risk–coverage surfaces of every draw come from one ``np.bincount`` (draw ×
   grid cell) and a reverse cumulative sum; the Learn-then-Test selection of
   :func:`~workbench.thresholds.guarantees.select_guarantee` is applied to all draws at once by
   :func:`certify_batch` (Hoeffding–Bentkus p-values, the strict→lax order learned on the held-apart
   items (ascending upper bound, ``select_guarantee``'s default), fixed-sequence
   testing or Holm, the most-covering certified point); ``tests/thresholds/test_planning.py`` checks
   it against ``select_guarantee`` draw by draw.

Why not resample the pilot's own (probability, label) pairs? With ``errors="observed"`` each pilot
item keeps its observed correctness: the search over thousands of rules then exploits the pilot's
lucky corners (a winner's curse) and the plan is optimistic (on BANKING77 tf-idf, eight 200-item pilots
predicted 80 % but real draws certified 54–95 %, mean 72 %; with the logistic fit 65–99 %, mean 86 %). The logistic fit keeps the pilot's error *level*
but smooths its shape along the calibrated confidence.

The model's answers on **unlabelled** items, when given, enter the population like pilot items;
their errors come from the same fit (a model-based estimate).

When the pilot cannot support a plan
------------------------------------
- **too small**: fewer than :data:`MIN_PILOT_ITEMS` labelled items, or the pilot's best rule at α
  (the most accepting rule whose pilot error is at most α) accepts fewer than
  ``MIN_EXPECTED_ERRORS / α`` pilot items. At an error of exactly α such a rule would show fewer
  than :data:`MIN_EXPECTED_ERRORS` errors, so the pilot cannot tell a rule at α from an error-free
  one and the simulation would be optimistic. The curve is still computed, as a rough guide.
- **unreachable**: no rule accepting at least :data:`MIN_USEFUL_ACCEPTED` pilot items (and the
  target coverage, when one is given) has a pilot error below α. Labels only shrink the uncertainty
  around the error; they do not lower it, so even very many labels will not certify a useful rule.
- **beyond the largest size**: more than ``1 - confidence`` of the replicates stay below ``power`` up
  to ``max_labels``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.errors import OptionError
from workbench.reporting import LogReporter, Reporter
from workbench.thresholds.bounds import clopper_pearson
from workbench.thresholds.guarantees import (
    ThresholdError,
    best_by_coverage,
    hoeffding_bentkus_p_values,
    hoeffding_bentkus_upper_bound,
    strict_to_lax_paths,
)
from workbench.wording import article

#: A pilot with fewer labelled items is too small to plan from.
MIN_PILOT_ITEMS = 30
#: The pilot's best rule at α must accept at least ``MIN_EXPECTED_ERRORS / α`` pilot items.
MIN_EXPECTED_ERRORS = 3
#: A rule that accepts fewer pilot items than this is not "useful" (its error is not estimated).
MIN_USEFUL_ACCEPTED = 5
#: The plan warns when its recommendation is more than this many times the median N over the pilot's
#: bootstrap replicates: the recommendation then rests on the few replicates whose best rule sits close
#: to α (N grows like 1 / (α - error)², so a little noise in the error moves it by multiples).
WIDE_SPREAD = 3.0
#: How a simulated item's error is drawn: ``logistic`` (default), a two-parameter logistic fit of the
#: pilot's observed errors on the calibrated probability of the accepted option; ``observed``, each
#: pilot item keeps its own observed correctness (optimistic: the search over rules exploits the
#: pilot's lucky corners).
ERROR_MODELS = ("logistic", "observed")


# -- the Learn-then-Test selection, batched over draws ----------------------------------------------
def reverse_cumsum(counts: np.ndarray) -> np.ndarray:
    """``out[..., i, j] = counts[..., i:, j:].sum()`` over the last two axes (any leading axes)."""
    out = np.flip(counts, axis=(-2, -1))
    out = np.cumsum(np.cumsum(out, axis=-2, dtype=out.dtype), axis=-1, dtype=out.dtype)
    return np.flip(out, axis=(-2, -1))


def _per_pair(errors: np.ndarray, accepted: np.ndarray, fn) -> tuple[np.ndarray, np.ndarray]:
    """``fn(errors, accepted)`` computed once per distinct ``(errors, accepted)`` pair.

    Returns the values (shape of ``errors``) and their dense rank (equal values, equal rank), so that
    an order by value can be taken on integers. Distinct pairs are found with a dense lookup table
    when the key space is small (no sort of the D × grid array), else with ``np.unique``.
    """
    e = errors.astype(np.int64).ravel()
    n = accepted.astype(np.int64).ravel()
    base = int(n.max(initial=0)) + 1
    key = e * base + n
    space = (int(e.max(initial=0)) + 1) * base
    if space <= 50_000_000:
        seen = np.zeros(space, dtype=bool)
        seen[key] = True
        uniq = np.flatnonzero(seen)
        lut = np.zeros(space, dtype=np.int64)
        lut[uniq] = np.arange(len(uniq))
        inverse = lut[key]
    else:
        uniq, inverse = np.unique(key, return_inverse=True)
    values = np.asarray(fn(uniq // base, uniq % base), dtype=float)
    _, rank = np.unique(values, return_inverse=True)
    return values[inverse].reshape(errors.shape), rank.ravel()[inverse].reshape(errors.shape)


def max_certifiable_errors(n_max: int, alpha: float, level: float) -> np.ndarray:
    """``e*(n)`` for ``n = 0 … n_max``: the most errors among ``n`` accepted items whose
    Hoeffding–Bentkus p-value is still at most ``level`` (-1: none). The p-value grows with the
    errors, so ``p(e, n) <= level`` exactly when ``e <= e*(n)`` (a vectorised bisection over ``e``)."""
    n = np.arange(n_max + 1)
    lo = np.full(n_max + 1, -1)
    hi = n.copy()
    while (lo < hi).any():
        mid = (lo + hi + 1) // 2
        ok = hoeffding_bentkus_p_values(mid, n, alpha) <= level
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid - 1)
    return lo


def certify_batch(
    accepted: np.ndarray,
    errors: np.ndarray,
    *,
    alpha: float,
    delta: float,
    method: str = "fixed-sequence",
    order_accepted: np.ndarray | None = None,
    order_errors: np.ndarray | None = None,
    n_paths: int = 10,
    n_starts: int = 10,
    order: str = "upper-bound",
) -> tuple[np.ndarray, np.ndarray]:
    """The pooled guarantee selection of :func:`~workbench.thresholds.guarantees.select_guarantee`, for D draws at once.

    Parameters
    ----------
    accepted, errors : ndarray of shape (D, A, B), int
        Certifying counts of each draw at every grid point.
    order_accepted, order_errors : ndarray of shape (D, A, B), optional
        Counts on the held-apart items of each draw: with ``method="fixed-sequence"`` the test order is
        learned on them (``order``: ``"upper-bound"``, :func:`~workbench.thresholds.guarantees.bound_order`,
        the default of ``select_guarantee``; or ``"learned-per-alpha"``) and one sequence is tested at
        ``delta``; without them, the data-independent column paths at ``delta / n_sequences``.

    Returns
    -------
    certified : ndarray of shape (D,), bool
    best : ndarray of shape (D,), int
        Flat grid index ``i * B + j`` of the selected point (-1 when nothing is certified): the
        certified point with the most accepted items, then the fewest errors, then the strictest.
    """
    D, A, B = accepted.shape
    G = A * B
    rejected = np.zeros((D, G), dtype=bool)
    rows = np.arange(D)[:, None]

    def passes(level: float) -> np.ndarray:  # p <= level, without computing p
        estar = max_certifiable_errors(int(accepted.max(initial=0)), alpha, level)
        return (errors <= estar[accepted]).reshape(D, G)

    if method == "fixed-sequence" and order_accepted is not None and order_errors is not None:
        # bound_order (default): ascending Hoeffding–Bentkus upper bound of the held-apart risk at δ,
        # then more accepted items first; learned_order ("learned-per-alpha"): ascending p-value at α.
        # np.lexsort's stable order is taken on one integer key: the value's rank, then the accepted
        # count reversed, then the grid index. Fixed-sequence testing rejects every point placed
        # before the first point that fails (p > delta), so no sort is needed: reject the points whose
        # key is below the smallest key of a failing point.
        o_acc = order_accepted.reshape(D, G).astype(np.int64)
        if order == "upper-bound":
            rank = _per_pair(order_errors, order_accepted, lambda e, n: hoeffding_bentkus_upper_bound(e, n, delta))[1]
        elif order == "learned-per-alpha":
            rank = _per_pair(order_errors, order_accepted, lambda e, n: hoeffding_bentkus_p_values(e, n, alpha))[1]
        else:
            raise ThresholdError(f"unknown test order {order!r}", hint="use upper-bound or learned-per-alpha")
        rank = rank.reshape(D, G).astype(np.int64)
        top = int(o_acc.max(initial=0))
        key = (rank * (top + 1) + (top - o_acc)) * G + np.arange(G)
        first_fail = np.where(passes(delta), np.iinfo(np.int64).max, key).min(axis=1, keepdims=True)
        rejected = key < first_fail
    elif method == "fixed-sequence":
        paths = strict_to_lax_paths((A, B), n_paths, n_starts)
        ok = passes(delta / len(paths))
        for path in paths:
            rejected[:, path] |= np.cumprod(ok[:, path], axis=1).astype(bool)
    elif method == "holm":
        p = _per_pair(errors, accepted, lambda e, n: hoeffding_bentkus_p_values(e, n, alpha))[0].reshape(D, G)
        by_p = np.argsort(p, axis=1, kind="stable")
        ok = p[rows, by_p] <= delta / (G - np.arange(G))
        rejected[rows, by_p] = np.cumprod(ok, axis=1).astype(bool)
    else:
        raise ThresholdError(f"unknown FWER method {method!r}", hint="use fixed-sequence or holm")
    acc = accepted.reshape(D, G).astype(np.int64)
    err = errors.reshape(D, G).astype(np.int64)
    certified = rejected.any(axis=1)
    top = np.where(rejected, acc, -1).max(axis=1, keepdims=True)
    cand = rejected & (acc == top)
    e = np.where(cand, err, np.iinfo(np.int64).max)
    cand &= e == e.min(axis=1, keepdims=True)
    best = G - 1 - np.argmax(cand[:, ::-1], axis=1)  # strictest among ties: the largest flat index
    return np.asarray(certified, dtype=bool), np.where(certified, best, -1)


def logistic_errors(p_wrong: np.ndarray, wrong: np.ndarray, counts: np.ndarray, n_iter: int = 25) -> np.ndarray:
    """P(wrong) of every item from a two-parameter logistic fit per draw, all draws at once (Newton).

    Parameters
    ----------
    p_wrong : ndarray of shape (D, n_pool)
        Base chance of being wrong (one minus the calibrated probability of the accepted option).
    wrong : ndarray of shape (D, n_pilot), bool
        Observed errors of the pilot items (the first ``n_pilot`` pool items).
    counts : ndarray of shape (D, n_pilot)
        How often each pilot item appears in the draw's resample (the fit's weights).

    Returns
    -------
    ndarray of shape (D, n_pool)
        ``sigmoid(a_d + b_d · logit(p_wrong))`` with ``(a_d, b_d)`` the weighted maximum-likelihood fit of
        the pilot's errors (a tiny ridge towards ``(0, 1)``, i.e. towards the calibrated probabilities,
        keeps pilots without errors finite).
    """
    z = np.log(np.clip(p_wrong, 1e-6, 1 - 1e-6)) - np.log(np.clip(1 - p_wrong, 1e-6, 1))
    n_pilot = wrong.shape[1]
    zp, y, w = z[:, :n_pilot], wrong.astype(float), counts.astype(float)
    a = np.zeros(len(z))
    b = np.ones(len(z))
    ridge = 1e-3
    with np.errstate(over="ignore"):  # exp(±large) is inf: a sigmoid of exactly 0 or 1
        for _ in range(n_iter):
            q = 1 / (1 + np.exp(-(a[:, None] + b[:, None] * zp)))
            r = w * (q - y)
            g0, g1 = r.sum(1) + ridge * a, (r * zp).sum(1) + ridge * (b - 1)
            h = w * q * (1 - q)
            h00, h01, h11 = h.sum(1) + ridge, (h * zp).sum(1), (h * zp * zp).sum(1) + ridge
            det = h00 * h11 - h01 * h01
            da, db = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
            a, b = a - da, b - db
            if max(np.abs(da).max(), np.abs(db).max()) < 1e-9:
                break
        return 1 / (1 + np.exp(-(a[:, None] + b[:, None] * z)))


def success_curves(
    log_sizes: np.ndarray, successes: np.ndarray, trials: int, n_iter: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """P(success) against log(N) of every bootstrap replicate: a two-parameter logistic fit, all at once.

    Parameters
    ----------
    log_sizes : ndarray of shape (S,)
        log of the simulated calibration-split sizes.
    successes : ndarray of shape (R, S), int
        Successful draws of replicate ``r`` at size ``s`` out of ``trials``.

    Returns
    -------
    (c, e) : ndarrays of shape (R,)
        ``P_r(N) = sigmoid(c_r + e_r · (log N - m) / sd)`` with ``m``, ``sd`` the mean and spread of
        ``log_sizes`` (maximum likelihood; a small ridge keeps replicates that always or never succeed
        finite, i.e. a steep step between the sizes that fail and those that succeed).
    """
    m, sd = float(log_sizes.mean()), float(log_sizes.std()) or 1.0
    x = (log_sizes - m) / sd
    k = successes.astype(float)
    c = np.zeros(len(k))
    e = np.ones(len(k))
    ridge = 1e-2
    for _ in range(n_iter):
        with np.errstate(over="ignore"):
            q = 1 / (1 + np.exp(-(c[:, None] + e[:, None] * x)))
        r = trials * q - k
        g0, g1 = r.sum(1) + ridge * c, (r * x).sum(1) + ridge * e
        h = trials * q * (1 - q)
        h00, h01, h11 = h.sum(1) + ridge, (h * x).sum(1), (h * x * x).sum(1) + ridge
        det = h00 * h11 - h01 * h01
        dc, de = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        step = np.maximum(1.0, np.maximum(np.abs(dc), np.abs(de)) / 5.0)  # damped: at most 5 per step
        c, e = c - dc / step, e - de / step
        if max(np.abs(dc).max(), np.abs(de).max()) < 1e-8:
            break
    return c, e


def sizes_needed(
    c: np.ndarray, e: np.ndarray, log_sizes: np.ndarray, power: float, n_min: int, n_max: int
) -> np.ndarray:
    """Smallest N with ``P_r(N) >= power`` of every replicate of :func:`success_curves` (``inf``: none up to
    ``n_max``; never below ``n_min``, the smallest size simulated)."""
    m, sd = float(log_sizes.mean()), float(log_sizes.std()) or 1.0
    z = math.log(power / (1 - power))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        n = np.exp(m + sd * (z - c) / e)
    rising = e > 0
    at_min = c + e * (math.log(n_min) - m) / sd >= z
    n = np.where(at_min, n_min, np.where(rising, np.ceil(n - 1e-9), np.inf))
    return np.where(n > n_max, np.inf, np.maximum(n, n_min))


# -- the plan ---------------------------------------------------------------------------------------
@dataclass
class LabelPlan:
    """Result of :func:`plan_labels_from_pilot`: the curve, the recommendation and what limits it.

    ``curve`` rows: ``n_labels`` (calibration split size), ``n_certifying`` (mean certifying items),
    ``p_certify`` (share of simulated draws that certify), ``p_target`` (certify *and* reach the
    target coverage; equals ``p_certify`` without a target), ``expected_coverage`` (mean certified
    coverage, 0 for a draw that certifies nothing) and ``coverage_if_certified``.
    """

    question: str
    qtype: str
    settings: dict
    power: float
    target_coverage: float | None
    n_draws: int
    seed: int
    pilot: dict
    curve: list[dict]
    recommended_labels: int | None
    status: str  # "ok", "pilot_too_small", "unreachable" or "beyond_max_labels"
    messages: list[str] = field(default_factory=list)
    method_note: str = ""
    #: The spread of N over the pilot's bootstrap replicates: ``low`` / ``median`` / ``high`` (10 %,
    #: 50 %, 90 % quantiles; ``None``: beyond ``max_labels``), ``confidence`` (the quantile that is
    #: ``recommended_labels``), ``replicates`` and ``share_beyond`` (replicates that need more than
    #: the largest size simulated).
    labels_range: dict = field(default_factory=dict)
    #: Sentences the user must read before buying labels (the pilot's best rule within its noise of α).
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "type": self.qtype,
            "status": self.status,
            "recommended_labels": self.recommended_labels,
            "labels_range": self.labels_range,
            "warnings": self.warnings,
            "power": self.power,
            "target_coverage": self.target_coverage,
            "settings": self.settings,
            "n_draws": self.n_draws,
            "seed": self.seed,
            "pilot": self.pilot,
            "curve": self.curve,
            "messages": self.messages,
            "method": self.method_note,
        }

    def to_frame(self):
        """The curve as a pandas DataFrame (one row per simulated size)."""
        import pandas as pd

        return pd.DataFrame(self.curve)

    def summary(self) -> str:
        """One line: the recommendation (or why there is none) with α, δ and the power."""
        s = self.settings
        what = f"certify at α = {s['alpha']:g}, δ = {s['delta']:g}"
        if self.target_coverage is not None:
            what += f" with coverage ≥ {self.target_coverage:g}"
        head = f"{self.question}: "
        if self.recommended_labels is not None:
            head += (
                f"about {self.recommended_labels} calibration labels to {what} with probability ≥ {self.power:g} "
                f"(simulated from {article(str(self.pilot['n_items']) + '-item')} pilot; {range_text(self.labels_range)})"
            )
        else:
            head += f"no size up to {self.curve[-1]['n_labels'] if self.curve else 0} labels reaches "
            head += f"probability {self.power:g} to {what}"
        if self.status != "ok":
            head += f" [{self.status.replace('_', ' ')}]"
        return head


def range_text(r: dict) -> str:
    """``labels_range`` in words: "N over 40 pilot bootstraps: 10 % 900, median 1,300, 90 % 2,400"."""
    if not r:
        return "no spread computed"

    def n(v):
        return f"{v:,}" if v is not None else "beyond the largest size"

    return (
        f"N over {r['replicates']} pilot bootstraps: 10% {n(r['low'])}, median {n(r['median'])}, "
        f"90% {n(r['high'])}; recommended: the {100 * r['confidence']:g}% quantile"
    )


def _sizes(n_lo: int, n_hi: int, n_points: int) -> list[int]:
    if n_hi <= n_lo:
        return [n_hi]
    grid = np.unique(np.round(np.geomspace(n_lo, n_hi, n_points)).astype(int))
    return [int(v) for v in grid]


def plan_labels_from_pilot(
    probs: np.ndarray,
    labels: np.ndarray,
    qtype: str,
    options: Any = None,
    *,
    question: str = "",
    option_ids: Sequence[str] | None = None,
    target_coverage: float | None = None,
    power: float = 0.8,
    n_draws: int = 200,
    max_labels: int = 20000,
    sizes: Sequence[int] | None = None,
    n_sizes: int = 12,
    refine: int = 5,
    seed: int = 0,
    unlabelled_probs: np.ndarray | None = None,
    errors: str = "logistic",
    confidence: float = 0.9,
    n_replicates: int = 40,
    reporter: Reporter | None = None,
) -> LabelPlan:
    """Calibration labels needed to certify at ``options.alpha`` with probability ≥ ``power``.

    Parameters
    ----------
    probs : ndarray of shape (n_pilot, k)
        The model's probabilities on the labelled pilot items (NaN rows: failed calls, never accepted).
    labels : ndarray of shape (n_pilot,), int
        Gold option indices (all >= 0).
    qtype : {"choice", "noul", "score"}
    options : ThresholdOptions, optional
        How ``workbench thresholds`` certifies (α, δ, recalibration, method, grid, fractions); the
        guarantee objective, pooled (``per_class`` is not planned).
    target_coverage : float in (0, 1], optional
        Count a draw as a success only when its certified coverage reaches this.
    power : float in (0, 1)
        Required probability of success (default 0.8).
    n_draws : int
        Simulated calibration splits per size (``n_replicates`` populations × ``n_draws // n_replicates``
        splits each).
    max_labels : int
        Largest calibration split simulated (the default grid runs from the smallest split that could
        certify at all, :func:`~workbench.thresholds.options.calibration_size_needed`, to this).
    sizes : sequence of int, optional
        Simulate exactly these sizes (no refinement).
    refine : int
        Bisection steps between the last size below ``power`` and the first above it.
    unlabelled_probs : ndarray of shape (m, k), optional
        The model's answers on unlabelled items (see the module docstring).
    confidence : float in (0, 1)
        The recommendation is this quantile of the N each bootstrap replicate of the pilot needs
        (default 0.9: enough in 90 % of the replicates), not the N of the pooled curve.
    n_replicates : int
        Bootstrap replicates of the pilot (each its own population; at most ``n_draws``).

    Returns
    -------
    LabelPlan
    """
    from workbench.metrics.recalibrate import apply_calibrator, fit_calibrator
    from workbench.thresholds.options import ThresholdOptions, calibration_size_needed
    from workbench.thresholds.rules import rule_coordinates
    from workbench.thresholds.surface import bin_index, default_grids

    opts = options if options is not None else ThresholdOptions()
    reporter = reporter or LogReporter()
    if opts.costs is not None or opts.constraints:
        raise OptionError(
            "plan-labels plans the error-rate guarantee; misroute costs and critical options are not planned",
            hint="drop the `costs` and `constraints` (the plan for the error rate is a lower bound on the labels needed)",
            parameter="costs" if opts.costs is not None else "constraints",
        )
    if opts.per_class:
        raise OptionError(
            "plan-labels plans the pooled guarantee; per-class planning is not supported",
            hint="drop `per_class` (the pooled plan is a lower bound on the labels per-class rules need)",
            parameter="per_class",
        )
    if not (0 < power < 1):
        raise OptionError(f"power must be in (0, 1), got {power}", hint="e.g. 0.8", parameter="power")
    if target_coverage is not None and not (0 < target_coverage <= 1):
        raise OptionError(
            f"target_coverage must be in (0, 1], got {target_coverage}", hint="e.g. 0.5", parameter="target_coverage"
        )
    if n_draws < 10:
        raise OptionError(f"n_draws must be at least 10, got {n_draws}", parameter="n_draws")
    if not (0 < confidence < 1):
        raise OptionError(f"confidence must be in (0, 1), got {confidence}", hint="e.g. 0.9", parameter="confidence")
    if n_replicates < 5:
        raise OptionError(f"n_replicates must be at least 5, got {n_replicates}", parameter="n_replicates")
    if max_labels < 10:
        raise OptionError(f"max_labels must be at least 10, got {max_labels}", parameter="max_labels")
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    labels = np.asarray(labels).astype(int)
    if len(labels) == 0:
        raise ThresholdError(
            f"question {question!r} has no labelled pilot items",
            hint="label some items of the pilot split first (datasets import with a label column)",
        )
    if (labels < 0).any():
        raise ThresholdError("pilot labels must all be >= 0 (drop unlabelled items first)")
    alpha, delta = opts.alpha, opts.delta

    if errors not in ERROR_MODELS:
        raise OptionError(f"errors must be one of {', '.join(ERROR_MODELS)}, got {errors!r}", parameter="errors")

    # 1. the pilot (and unlabelled) items, calibrated once on the whole pilot: the pilot's own surface
    answered = np.isfinite(probs).all(axis=1)
    if answered.sum() < 2:
        raise ThresholdError(f"question {question!r}: the pilot has fewer than 2 answered items")
    x_grid, y_grid = default_grids(qtype, opts.grid)
    A, B = len(x_grid), len(y_grid)
    abstain = [list(option_ids).index(o) for o in opts.abstain_options] if option_ids else []
    pool_probs = probs
    if unlabelled_probs is not None and len(unlabelled_probs):
        pool_probs = np.concatenate([probs, np.atleast_2d(np.asarray(unlabelled_probs, dtype=float))])
    n_pilot, n_pool = len(labels), len(pool_probs)

    def fit(method: str, rows: np.ndarray):
        ok = rows[answered[rows]]
        return fit_calibrator(method, probs[ok], labels[ok])

    def cells(calibrator, error_model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Grid cell (-1: never accepted), accepted option and P(wrong) of every pool item."""
        coords = rule_coordinates(
            qtype, apply_calibrator(calibrator, pool_probs), abstain_options=abstain, level=opts.level
        )
        ix, iy = bin_index(coords.x, x_grid), bin_index(coords.y, y_grid)
        cell = np.where((ix >= 0) & (iy >= 0), ix * B + iy, -1)
        em = np.nan_to_num(apply_calibrator(error_model, pool_probs))
        p_ok = np.take_along_axis(em, np.maximum(coords.predicted, 0)[:, None], 1)[:, 0]
        return cell, coords.predicted, np.clip(1.0 - p_ok, 0.0, 1.0)

    def error_model_for(calibrator, rows: np.ndarray):
        return calibrator if opts.calibrate == "temperature" else fit("temperature", rows)

    everyone = np.arange(n_pilot)
    calibrator = fit(opts.calibrate, everyone)
    cell_all, pred_all, _ = cells(calibrator, error_model_for(calibrator, everyone))
    cell_l = cell_all[:n_pilot]
    wrong_l = pred_all[:n_pilot] != labels

    # the pilot's own surface: its best rule at α, the criteria
    keep = cell_l >= 0
    acc_p = reverse_cumsum(np.bincount(cell_l[keep], minlength=A * B).reshape(A, B))
    err_p = reverse_cumsum(np.bincount(cell_l[keep], weights=wrong_l[keep], minlength=A * B).reshape(A, B))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate_p = np.where(acc_p > 0, err_p / np.maximum(acc_p, 1), np.inf)
    need_cov = max(MIN_USEFUL_ACCEPTED, math.ceil((target_coverage or 0.0) * n_pilot - 1e-9))
    useful = acc_p >= need_cov
    best_at_alpha = best_by_coverage(acc_p, err_p, (acc_p >= MIN_USEFUL_ACCEPTED) & (rate_p <= alpha))
    below = useful & (rate_p < alpha)
    pilot: dict[str, Any] = {
        "n_items": int(n_pilot),
        "n_answered": int(answered.sum()),
        "n_errors_top": int((wrong_l & answered).sum()),
        "n_unlabelled": int(n_pool - n_pilot),
        "calibrator": calibrator.to_dict(),
        "best_rule_at_alpha": None,
        "lowest_useful_error": float(rate_p[useful].min()) if useful.any() else None,
    }
    if best_at_alpha is not None:
        i, j = best_at_alpha
        a, e = int(acc_p[i, j]), int(err_p[i, j])
        params = (
            {"tau_yes": float(x_grid[i]), "tau_no": float(-y_grid[j])}
            if qtype == "noul"
            else {"tau": float(x_grid[i]), "margin": float(y_grid[j])}
        )
        pilot["best_rule_at_alpha"] = {
            **params,
            "accepted": a,
            "errors": e,
            "coverage": a / n_pilot,
            "error_rate": e / a,
        }

    messages: list[str] = []
    status = "ok"
    min_acc = math.ceil(MIN_EXPECTED_ERRORS / alpha - 1e-9)
    if n_pilot < MIN_PILOT_ITEMS:
        status = "pilot_too_small"
        messages.append(
            f"the pilot is too small to plan from: {n_pilot} labelled items, fewer than {MIN_PILOT_ITEMS}; "
            "the curve is a rough guide only"
        )
    elif not below.any():
        status = "unreachable"
        low = pilot["lowest_useful_error"]
        where = f" with coverage ≥ {target_coverage:g}" if target_coverage is not None else ""
        messages.append(
            f"even very many labels will not certify: at every rule accepting ≥ {need_cov} pilot items{where} the "
            f"pilot's error is at least α = {alpha:g}"
            + (f" (the lowest is {low:.3f})" if low is not None and np.isfinite(low) else "")
            + "; more labels narrow the uncertainty, they do not lower the error — improve the model or relax α"
        )
    elif best_at_alpha is None or pilot["best_rule_at_alpha"]["accepted"] < min_acc:
        status = "pilot_too_small"
        got = pilot["best_rule_at_alpha"]["accepted"] if best_at_alpha is not None else 0
        cov = max(pilot["best_rule_at_alpha"]["coverage"] if best_at_alpha is not None else 0.0, 1.0 / n_pilot)
        more = max(math.ceil(min_acc / cov) - n_pilot, 1)
        messages.append(
            f"the pilot is too small to plan from: its best rule at α = {alpha:g} accepts {got} pilot items, "
            f"fewer than {MIN_EXPECTED_ERRORS}/α = {min_acc} (at an error of α they would hold fewer than "
            f"{MIN_EXPECTED_ERRORS} errors, so the pilot cannot tell that rule from an error-free one); label about "
            f"{more} more pilot items. The curve is a rough guide only"
        )

    # 2. the sizes
    n_lo = max(10, calibration_size_needed(opts)["n_calibration"])
    share_fit = opts.calibrator_fraction if opts.calibrate not in ("none", "identity") else 0.0
    share_order = opts.order_fraction if opts.method == "fixed-sequence" else 0.0
    use_order = share_order > 0
    if sizes is not None:
        todo = sorted({int(s) for s in sizes if int(s) > 0})
        if not todo:
            raise OptionError("sizes must hold at least one positive size", parameter="sizes")
        refine = 0
    else:
        todo = _sizes(min(n_lo, max_labels), max_labels, n_sizes)

    # 2. one population per bootstrap replicate, shared by all sizes: Bayesian-bootstrap weights over
    # the pool; the calibrator (and the error model) re-fitted on a resample of the pilot drawn from
    # those weights. Each replicate gets `per_rep` splits per size, so that P(success | population) is
    # estimated per replicate (the pooled curve averages it over replicates: the predictive probability).
    n_rep = min(n_replicates, n_draws)
    per_rep = max(1, n_draws // n_rep)
    n_draws = n_rep * per_rep
    root = np.random.default_rng([seed, 7])
    weights_r = root.dirichlet(np.ones(n_pool), size=n_rep)
    cell_r = np.empty((n_rep, n_pool), dtype=np.int64)
    p_wrong_r = np.empty((n_rep, n_pool))
    pilot_w = weights_r[:, :n_pilot] / weights_r[:, :n_pilot].sum(axis=1, keepdims=True)
    resample = root.multinomial(n_pilot, pilot_w)  # (R, n_pilot): the pilot resample of each replicate
    wrong_r = np.empty((n_rep, n_pilot), dtype=bool)
    with reporter.task("fitting the calibrator on resampled pilots", total=n_rep) as task:
        for d in range(n_rep):  # one small fit per replicate (the calibrator's own optimiser)
            rows = np.repeat(everyone, resample[d])
            cal_d = fit(opts.calibrate, rows)
            cell_r[d], pred_d, p_wrong_r[d] = cells(cal_d, error_model_for(cal_d, rows))
            wrong_r[d] = pred_d[:n_pilot] != labels
            if (d + 1) % 10 == 0:
                task.update(d + 1)
    if errors == "logistic":
        p_wrong_r = logistic_errors(p_wrong_r, wrong_r & answered, resample * answered)
    else:  # observed: labelled items keep their observed correctness
        p_wrong_r[:, :n_pilot] = wrong_r
    rep = np.repeat(np.arange(n_rep), per_rep)  # draw -> replicate
    cell_d, p_wrong_d, weights = cell_r[rep], p_wrong_r[rep], weights_r[rep]
    target = target_coverage

    def simulate(n_labels: int) -> tuple[dict, np.ndarray]:
        rng = np.random.default_rng([seed, 7, n_labels])
        roles = rng.multinomial(
            n_labels, [share_fit, (1 - share_fit) * share_order, (1 - share_fit) * (1 - share_order)], size=n_draws
        )
        n_used = roles[:, 1] + roles[:, 2]
        counts = rng.multinomial(n_used, weights)  # (D, n_pool) copies of each item
        held = (
            rng.binomial(counts, roles[:, 1:2] / np.maximum(n_used, 1)[:, None]) if use_order else np.zeros_like(counts)
        )
        cert = counts - held

        ok = cell_d >= 0
        idx = (np.arange(n_draws)[:, None] * (A * B) + cell_d)[ok]

        def surf(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            wrong = rng.binomial(c, p_wrong_d)
            acc = np.bincount(idx, weights=c[ok], minlength=n_draws * A * B)
            err = np.bincount(idx, weights=wrong[ok], minlength=n_draws * A * B)
            shape = (n_draws, A, B)
            return (
                reverse_cumsum(acc.round().astype(np.int32).reshape(shape)),
                reverse_cumsum(err.round().astype(np.int32).reshape(shape)),
            )

        acc, err = surf(cert)
        o_acc = o_err = None
        if use_order:
            o_acc, o_err = surf(held)
        certified, best = certify_batch(
            acc,
            err,
            alpha=alpha,
            delta=delta,
            method=opts.method,
            order_accepted=o_acc,
            order_errors=o_err,
            n_paths=opts.n_paths,
            n_starts=opts.n_starts,
        )
        n_cert = roles[:, 2] if use_order else n_used
        acc_best = np.where(certified, acc.reshape(n_draws, -1)[np.arange(n_draws), np.maximum(best, 0)], 0)
        coverage = acc_best / np.maximum(n_cert, 1)
        success = certified & (coverage >= target - 1e-12) if target is not None else certified
        row = {
            "n_labels": int(n_labels),
            "n_certifying": float(n_cert.mean()),
            "p_certify": float(certified.mean()),
            "p_target": float(success.mean()),
            "expected_coverage": float(coverage.mean()),
            "coverage_if_certified": float(coverage[certified].mean()) if certified.any() else None,
        }
        return row, success.reshape(n_rep, per_rep).sum(axis=1)

    curve: dict[int, dict] = {}
    wins: dict[int, np.ndarray] = {}  # size -> successes per replicate

    def needed() -> np.ndarray:
        """The N each replicate needs (inf: more than the largest size simulated)."""
        done = sorted(wins)
        if len(done) < 2:  # one size: a replicate is enough there or not
            return np.where(wins[done[0]] >= power * per_rep, done[0], np.inf)
        log_n = np.log(np.array(done, dtype=float))
        c, e = success_curves(log_n, np.stack([wins[n] for n in done], axis=1), per_rep)
        return sizes_needed(c, e, log_n, power, done[0], done[-1])

    def quantile(v: np.ndarray, q: float) -> int | None:
        x = float(np.quantile(v, q, method="inverted_cdf"))
        return int(x) if np.isfinite(x) else None

    with reporter.task(f"simulating {n_draws} calibration splits per size", total=len(todo) + refine + 1) as task:
        for k, n in enumerate(todo):
            curve[n], wins[n] = simulate(n)
            task.update(k + 1, f"{n} labels")
        if refine:  # more sizes where the replicates cross `power`: between the 10 % and the high quantile
            need = needed()
            lo_n, hi_n = quantile(need, 0.1), quantile(need, max(confidence, 0.9))
            if lo_n is not None:
                top = hi_n if hi_n is not None else max_labels
                extra = _sizes(max(todo[0], int(lo_n * 0.8)), min(max_labels, int(top * 1.25) + 1), refine + 2)
                for r, n in enumerate(v for v in extra if v not in curve):
                    curve[n], wins[n] = simulate(n)
                    task.update(len(todo) + r + 1, f"{n} labels")
        need = needed()
        recommended = quantile(need, confidence)
        if sizes is not None:  # exactly the sizes asked: the smallest where `confidence` of the replicates suffice
            recommended = next((n for n in sorted(curve) if (need <= n).mean() >= confidence), None)
        elif recommended is not None and recommended not in curve:
            curve[recommended], wins[recommended] = simulate(recommended)
        task.update(len(todo) + refine + 1)
    for n, row in curve.items():
        row["share_sufficient"] = float((need <= n).mean())
    table = [curve[n] for n in sorted(curve)]
    share_beyond = float(np.isinf(need).mean())
    labels_range: dict[str, Any] = {
        "low": quantile(need, 0.1),
        "median": quantile(need, 0.5),
        "high": quantile(need, 0.9),
        "confidence": confidence,
        "replicates": int(n_rep),
        "share_beyond": share_beyond,
    }
    if recommended is None and status == "ok":
        status = "beyond_max_labels"
        messages.append(
            f"in {100 * share_beyond:.0f}% of the pilot's {n_rep} bootstrap replicates even "
            f"{table[-1]['n_labels']} labels do not reach probability {power:g} (the pooled probability there is "
            f"{table[-1]['p_target']:.2f}), more than the {100 * (1 - confidence):g}% the recommendation allows: "
            "relax α or the target coverage, or raise `max_labels`"
        )

    # 3. is the pilot's decisive rule within its own noise of α?
    warnings: list[str] = []
    if target_coverage is not None and useful.any() and status != "unreachable":
        masked = np.where(useful, rate_p, np.inf)
        ti, tj = np.unravel_index(int(np.argmin(np.where(masked == masked.min(), -acc_p, 0))), masked.shape)
        a, e = int(acc_p[ti, tj]), int(err_p[ti, tj])
        lo, hi = clopper_pearson(e, a, 0.9)  # a >= MIN_USEFUL_ACCEPTED: never the empty interval
        pilot["target_rule"] = {
            "accepted": a,
            "errors": e,
            "coverage": a / n_pilot,
            "error_rate": e / a,
            "error_interval_90": [lo, hi],
        }
        if lo <= alpha <= hi:
            warnings.append(
                f"the pilot cannot tell whether its best rule with coverage ≥ {target_coverage:g} has an error below "
                f"α = {alpha:g}: that rule errs on {e} of {a} accepted pilot items ({100 * e / a:.1f}%, 90% interval "
                f"{100 * lo:.1f}–{100 * hi:.1f}%, which contains α), so the number of labels rests on the pilot's noise "
                f"({range_text(labels_range)}); label more pilot items or lower the target coverage"
            )
    med = labels_range["median"]
    if recommended is not None and med and recommended > WIDE_SPREAD * med:
        warnings.append(
            f"the pilot's bootstrap replicates disagree: the recommended {recommended:,} labels are "
            f"{recommended / med:.1f}× the median {med:,} ({range_text(labels_range)}); the recommendation rests on "
            "the few replicates whose best rule sits close to α, where N grows like 1 / (α − error)². Label more pilot "
            "items to narrow the spread before buying calibration labels"
            + (", or lower the target coverage" if target_coverage is not None else ", or relax α")
        )
    if n_pool > n_pilot:
        messages.append(
            f"{n_pool - n_pilot} unlabelled items widen the population; their errors are drawn from the "
            "pilot-calibrated probabilities (a model-based estimate)"
        )
    settings = {
        **opts.settings(),
        "calibrator_fraction": opts.calibrator_fraction,
        "order_fraction": opts.order_fraction,
    }
    note = (
        f"{n_draws} simulated calibration splits per size from the pilot ({n_rep} Bayesian-bootstrap replicates × "
        f"{per_rep}; errors: {errors}; N: the {100 * confidence:g}% quantile over the replicates), "
        f"certified as `workbench thresholds` certifies ({opts.describe()}); a prediction given the pilot, "
        "not a guarantee"
    )
    reporter.log(note)
    return LabelPlan(
        question,
        qtype,
        settings,
        power,
        target_coverage,
        n_draws,
        seed,
        pilot,
        table,
        recommended,
        status,
        messages,
        note,
        labels_range,
        warnings,
    )
