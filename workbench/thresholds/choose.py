"""One question end to end: (re)calibrate, build the surface, pick a rule, judge it on test.

Used by ``workbench thresholds`` and ``workbench policy export`` so both report the same figures.

When a calibrator is fitted, it is fitted on a fixed, seeded part of the calibration split
(``calibrator_fraction``) and the guarantee is computed on the rest: Learn-then-Test needs scores that
were fixed before the items it tests, so the same items must not serve both purposes. With the
fixed-sequence method a further seeded share (``order_fraction``) of the remaining items only learns
the test order. Calibration figures of a guarantee are those of the certifying items.

The steps are public, so that every path to a threshold figure takes the same ones: in memory
(:func:`choose_thresholds`), over a run read in batches (:mod:`workbench.workflows.thresholds`) and from the
store's SQL points (:mod:`workbench.engines.store_aggregates`) — :func:`prepare_question` (or
:func:`prepare_from_coordinates`), :func:`select_prepared`, :func:`finish_result`, then
:meth:`ThresholdResult.attach_test` with the test report however it was computed.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import numpy as np
from workbench_runtime.model import FALLBACK_ACTIONS

from workbench.answers import RunAnswers
from workbench.errors import OptionError
from workbench.metrics.recalibrate import apply_calibrator, fit_calibrator
from workbench.thresholds.evaluate import evaluate_rule
from workbench.thresholds.guarantees import (
    Selection,
    ThresholdError,
    certify_surface,
    error_cost_weights,
    select_cost,
    select_manual,
    select_target,
)
from workbench.thresholds.rules import NoulRule, Rule, ScoreRule, make_rule
from workbench.thresholds.surface import Surface, risk_coverage_surface

OBJECTIVES = ("guarantee", "cost", "coverage", "error", "manual")
METHODS = ("fixed-sequence", "holm")
RECALIBRATIONS = ("none", "temperature", "isotonic", "platt")
LEVELS = ("top", "expected")
GUARANTEE_FOR = ("population", "batch")


@dataclass
class ThresholdOptions:
    """How routing thresholds are chosen — the one options type of the workbench.

    The API, ``workbench thresholds``, ``workbench policy export``, ``workbench compare``,
    ``workbench shadow report``, the demo and the UI's Thresholds page all take their defaults from
    here, so the same run and question give the same rule and figures everywhere.

    Defaults: ``alpha`` (the largest error rate among auto-accepted items, ``--max-error``) 0.05,
    ``delta`` (the allowed probability that the true error exceeds ``alpha``) 0.1, recalibration
    ``temperature`` (fitted on a seeded ``calibrator_fraction`` of the calibration split, the
    guarantee computed on the rest), ``fixed-sequence`` family-wise control with a learned order,
    ``grid`` 100 points per threshold axis.

    Misroute costs and critical options (:mod:`workbench.thresholds.risks`):

    - ``costs`` — ``{true option: {accepted option: cost}}`` (``"*"`` as the accepted option = every
      other option); unlisted misroutes cost 1, a correct accept 0. With the guarantee objective the
      certified risk becomes the expected misroute cost among auto-accepted items and ``alpha`` is in
      cost units (below the largest cost). With the ``cost`` objective a wrong accept of ``true`` as
      ``accepted`` costs ``error_cost × costs[true][accepted]`` (``error_cost`` must then be a number):
      ``costs`` says how bad each mistake is relative to the others, ``error_cost`` what one unit costs
      relative to a review (``review_cost``).
    - ``constraints`` — ``{critical option: beta}``: of the items whose true option is the critical
      one, at most ``beta`` may be auto-accepted as another option. Certified jointly with the main
      risk at ``delta`` (guarantee objective, global rule; not with ``per_class``).

    The guarantee is for the population error rate by default. ``guarantee_for="batch"`` certifies the
    rule so that the error rate among the next ``batch`` accepted items exceeds ``alpha`` with probability
    at most ``delta`` (:func:`~workbench.thresholds.batch.batch_certificate_levels`): stricter, as a
    weekly batch judged on its own needs.

    Every value is checked on construction; a bad one raises :class:`~workbench.errors.OptionError`
    naming the parameter (the CLI shows it as its flag, e.g. ``alpha`` as ``--max-error``).

    Examples
    --------
    >>> import workbench as wb
    >>> wb.ThresholdOptions().describe()
    'α = 0.05, δ = 0.1, recalibration temperature, fixed-sequence, grid 100'
    >>> wb.ThresholdOptions(alpha=0.01, calibrate="none").settings()["alpha"]
    0.01
    >>> wb.ThresholdOptions(alpha=1.5)
    Traceback (most recent call last):
    ...
    workbench.errors.OptionError: alpha must be in (0, 1), got 1.5 — alpha is the largest error rate among auto-accepted items, e.g. 0.05
    >>> wb.ThresholdOptions(alpha=0.1, costs={"hate": {"*": 10}}, constraints={"hate": 0.05}).describe()
    'α = 0.1 (expected misroute cost, largest cost 10), δ = 0.1, recalibration temperature, fixed-sequence, grid 100, critical hate ≤ 0.05 (joint)'
    """

    objective: str = "guarantee"
    alpha: float = 0.05
    delta: float = 0.1
    method: str = "fixed-sequence"
    calibrate: str = "temperature"
    per_class: bool = False
    review_cost: float = 1.0
    error_cost: float | dict | list = 10.0
    api_cost_per_item: float | None = None
    target_coverage: float | None = None
    target_error: float | None = None
    manual_rule: dict[str, float] | None = None  # objective "manual": tau/margin or tau_yes/tau_no, uncertified
    grid: int = 100
    n_paths: int = 10
    n_starts: int = 10
    abstain_options: list[str] = field(default_factory=list)
    level: str = "top"
    fallback: str = "review"
    calibrator_fraction: float = 0.3
    order_fraction: float = 0.3
    seed: int = 0
    confidence: float = 0.95
    batch: int = 1000  # the finite-batch view: the next `batch` accepted items (thresholds.batch)
    # "batch": certify that the next `batch` accepted items' error rate exceeds alpha with probability at
    # most delta (thresholds.batch.batch_certificate_levels), instead of the population error rate
    guarantee_for: str = "population"
    costs: dict[str, dict[str, float]] | None = None  # misroute cost [true][accepted]; unlisted 1, diagonal 0
    constraints: dict[str, float] | None = None  # critical option -> beta (largest share misrouted)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every value (called on construction and by :func:`dataclasses.replace`).

        Raises
        ------
        OptionError
            Naming the parameter (``parameter`` attribute) and the allowed values.
        """

        def bad(name: str, message: str, hint: str | None = None) -> OptionError:
            return OptionError(f"{name} {message}", hint=hint, parameter=name)

        if self.objective not in OBJECTIVES:
            raise bad("objective", f"{self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        self._validate_costs(bad)
        if self.costs is not None and self.objective == "guarantee":
            top = self.max_cost()
            if not (0 < self.alpha < top):
                raise bad(
                    "alpha",
                    f"must be in (0, {top:g}) with costs (the largest cost), got {self.alpha}",
                    "with a cost matrix alpha is the largest expected misroute cost per auto-accepted item",
                )
        elif not (0 < self.alpha < 1):
            raise bad(
                "alpha",
                f"must be in (0, 1), got {self.alpha}",
                "alpha is the largest error rate among auto-accepted items, e.g. 0.05",
            )
        if not (0 < self.delta < 1):
            raise bad("delta", f"must be in (0, 1), got {self.delta}", "e.g. 0.1")
        if self.method not in METHODS:
            raise bad("method", f"{self.method!r} is not one of {', '.join(METHODS)}")
        if self.calibrate not in RECALIBRATIONS:
            raise bad("calibrate", f"{self.calibrate!r} is not one of {', '.join(RECALIBRATIONS)}")
        if self.fallback not in FALLBACK_ACTIONS:
            raise bad(
                "fallback",
                f"{self.fallback!r} is not one of {', '.join(FALLBACK_ACTIONS)}",
                "the fallback can never be 'accept'",
            )
        if not (2 <= self.grid <= 1000):
            raise bad("grid", f"must be between 2 and 1000, got {self.grid}")
        if not (0 < self.calibrator_fraction < 1):
            raise bad("calibrator_fraction", f"must be in (0, 1), got {self.calibrator_fraction}")
        if not (0 <= self.order_fraction < 1):
            raise bad("order_fraction", f"must be in [0, 1), got {self.order_fraction}")
        if self.level not in LEVELS:
            raise bad("level", f"{self.level!r} is not one of {', '.join(LEVELS)}")
        if self.batch < 1:
            raise bad(
                "batch", f"must be at least 1, got {self.batch}", "the number of accepted items in a batch, e.g. 1000"
            )
        if self.guarantee_for not in GUARANTEE_FOR:
            raise bad("guarantee_for", f"{self.guarantee_for!r} is not one of {', '.join(GUARANTEE_FOR)}")
        if self.guarantee_for == "batch" and self.costs is not None:
            raise bad(
                "guarantee_for",
                "'batch' bounds the share of wrong accepts in a batch, not an expected misroute cost",
                "drop costs, or keep the population guarantee",
            )
        if self.n_paths < 1 or self.n_starts < 1:
            raise bad("n_paths" if self.n_paths < 1 else "n_starts", "must be at least 1")
        if self.objective == "coverage" and self.target_coverage is None:
            raise OptionError("objective 'coverage' needs target_coverage", parameter="target_coverage")
        if self.objective == "error" and self.target_error is None:
            raise OptionError("objective 'error' needs target_error", parameter="target_error")
        if self.objective == "manual" and not self.manual_rule:
            raise OptionError(
                "objective 'manual' needs manual_rule (the rule's thresholds: tau/margin or tau_yes/tau_no)",
                parameter="manual_rule",
            )

    def _validate_costs(self, bad) -> None:
        if self.costs is not None:
            if not isinstance(self.costs, dict) or not all(isinstance(r, dict) for r in self.costs.values()):
                raise bad("costs", "must map a true option to {accepted option: cost}", "e.g. {'hate': {'*': 10}}")
            for true, row in self.costs.items():
                for acc, v in row.items():
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < float("inf")):
                        raise bad("costs", f"{true}:{acc} must be a finite number >= 0, got {v!r}")
                    if acc == true and v != 0:
                        raise bad("costs", f"{true}:{acc} must be 0: a correct auto-accept costs nothing")
            if self.max_cost() <= 0:
                raise bad("costs", "has no positive cost")
            if self.objective not in ("guarantee", "cost"):
                raise bad("costs", f"apply to the guarantee and cost objectives, not {self.objective!r}")
            if self.objective == "cost" and isinstance(self.error_cost, (dict, list)):
                raise bad(
                    "costs",
                    "and a per-option or matrix error_cost cannot both be given",
                    "give the misroute matrix as costs and the price of one unit as a number error_cost",
                )
        if self.constraints is not None:
            if not isinstance(self.constraints, dict) or not self.constraints:
                raise bad("constraints", "must map a critical option to beta", "e.g. {'hate': 0.05}")
            for o, beta in self.constraints.items():
                if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not (0 < beta < 1):
                    raise bad("constraints", f"{o}: beta must be in (0, 1), got {beta!r}", "e.g. hate:0.05")
            if self.objective != "guarantee":
                raise bad("constraints", f"(critical options) need the guarantee objective, not {self.objective!r}")
            if self.per_class:
                raise bad(
                    "constraints",
                    "(critical options) are certified for one global rule, not for per-class rules",
                    "drop per_class: the constraint makes the one rule as strict as the critical option needs",
                )

    def max_cost(self) -> float:
        """The largest misroute cost: the largest given one, or 1 (what unlisted misroutes cost)."""
        return max([1.0, *(float(v) for row in (self.costs or {}).values() for v in row.values())])

    def settings(self) -> dict:
        """The settings every threshold figure is printed with: objective, α, δ, recalibration, method, grid
        (and ``costs``/``constraints`` when given)."""
        out: dict[str, Any] = {
            "objective": self.objective,
            "alpha": self.alpha,
            "delta": self.delta,
            "calibrate": self.calibrate,
            "method": self.method,
            "grid": self.grid,
        }
        if self.costs is not None:
            out["costs"] = self.costs
        if self.constraints is not None:
            out["constraints"] = self.constraints
        if self.guarantee_for == "batch":
            out["guarantee_for"] = "batch"
            out["batch"] = self.batch
        return out

    def describe(self) -> str:
        """One line stating the settings, to print next to any coverage/error figure (CLI, demo, UI)."""
        recal = f"recalibration {self.calibrate}"
        a = f"α = {self.alpha:g}"
        if self.costs is not None and self.objective == "guarantee":
            a += f" (expected misroute cost, largest cost {self.max_cost():g})"
        crit = ""
        if self.constraints:
            crit = ", critical " + ", ".join(f"{o} ≤ {b:g}" for o, b in self.constraints.items()) + " (joint)"
        if self.objective == "guarantee":
            scope = f", for the next {self.batch} accepted" if self.guarantee_for == "batch" else ""
            return f"{a}, δ = {self.delta:g}{scope}, {recal}, {self.method}, grid {self.grid}{crit}"
        costs = ", misroute costs" if self.costs is not None else ""
        return f"objective {self.objective} (NOT certified), {a}, {recal}, grid {self.grid}{costs}"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


#: The defaults, for callers that print or compare them.
DEFAULTS = ThresholdOptions()


def calibration_size_needed(opts: ThresholdOptions, n_options: int | None = None) -> dict:
    """The smallest calibration split that could certify a rule at ``opts``' α and δ.

    Even a rule whose accepted items are all correct is certified only when the Hoeffding–Bentkus
    p-value of 0 errors among its ``n`` accepted items is at most the level of the first test
    (:func:`~workbench.thresholds.guarantees.min_items_to_certify`, the guarantee's own p-value).
    That level is δ for fixed-sequence testing with a learned order, δ divided by the number of
    sequences without one, δ / grid² for Holm, and a further ``1 / n_options`` per class. The
    certifying items are the share of the calibration split left after the calibrator fit and the
    order-learning carve, so the split needs ``n / share`` items (rounded up).

    Returns
    -------
    dict
        ``n_calibration`` (the split size), ``n_certifying`` (accepted certifying items with no
        error), ``test_level``, ``alpha``, ``delta``.
    """
    from workbench.thresholds.bounds import min_items_to_certify
    from workbench.thresholds.guarantees import strict_to_lax_paths

    if opts.method == "holm":
        level = opts.delta / opts.grid**2
    elif opts.order_fraction > 0:
        level = opts.delta
    else:
        level = opts.delta / len(strict_to_lax_paths((opts.grid, opts.grid), opts.n_paths, opts.n_starts))
    if opts.per_class and n_options:
        level /= max(n_options - len(opts.abstain_options), 1)
    # with costs, a misroute may cost the largest cost: the rate that must be certified is alpha / that
    n = min_items_to_certify(opts.alpha / opts.max_cost() if opts.costs is not None else opts.alpha, level)
    share = 1.0
    if opts.calibrate not in ("none", "identity"):
        share *= 1.0 - opts.calibrator_fraction
    if opts.method == "fixed-sequence" and opts.order_fraction > 0:
        share *= 1.0 - opts.order_fraction
    out: dict[str, Any] = {
        "n_calibration": int(np.ceil(n / share - 1e-9)),
        "n_certifying": int(n),
        "test_level": float(level),
        "alpha": opts.alpha,
        "delta": opts.delta,
    }
    if opts.constraints:
        # a constraint's p-value is over the items of its true option, accepted or not
        out["n_true_certifying"] = {o: min_items_to_certify(b, level) for o, b in opts.constraints.items()}
    return out


@dataclass
class ThresholdResult:
    question: str
    qtype: str
    option_ids: list[str]
    options: ThresholdOptions
    calibrator: dict
    selection: Selection
    rule: Rule
    surface: Surface
    test: dict | None
    n_calibrator_fit: int
    chosen_point_per_class: dict | None = None
    needed: dict | None = None  # guarantee objective, nothing certified: calibration_size_needed()
    batch: dict | None = None  # the finite-batch view of the chosen rule (thresholds.batch.batch_view)
    test_risks: dict | None = None  # with costs/constraints: test cost and critical misroute rates
    #: the fitted calibrator the rule is applied after (test figures per slice re-apply it)
    fitted_calibrator: Any = field(default=None, repr=False, compare=False)

    def attach_test(self, report: dict | None) -> None:
        """Set the rule's report on the test split (``None``: no labelled test item) and the misroute cost
        and critical-option rates it implies (with costs or constraints).

        ``report`` is a :func:`~workbench.thresholds.evaluate.evaluate_rule` dict, however computed: in
        memory (:func:`evaluate_on`), from counts summed over batches
        (:func:`~workbench.thresholds.evaluate.rule_report_from_counts`) or from rule coordinates
        (:func:`~workbench.thresholds.evaluate.evaluate_rule_at`)."""
        self.test = report
        self.test_risks = None if report is None else _test_risks(report, self.options, self.option_ids)

    @property
    def certified(self) -> bool:
        """True only when the guarantee objective certified a rule that accepts something."""
        return bool(self.selection.certified and self.selection.feasible)

    @property
    def warnings(self) -> list[str]:
        """Sentences every surface prints next to the verdict: today one, when the whole test split's error
        interval lies entirely above α although a rule was certified (the test split contradicts the
        certificate: a shifted test split, or the rare 1-in-1/δ calibration draw)."""
        from workbench.thresholds.evaluate import certificate_contradicted_sentence, error_above_alpha

        opts = self.options
        if not self.certified or opts.costs is not None or not error_above_alpha(self.test, opts.alpha):
            return []
        assert self.test is not None
        where = f"{self.question}, whole test split"
        return [certificate_contradicted_sentence(where, self.test, opts.alpha, opts.delta, opts.confidence)]

    def summary(self) -> str:
        """One line: certified or not, coverage and error on test, with the settings (α, δ, recalibration)."""
        t = self.test or {}
        cov, err = (t.get("coverage") or {}).get("value"), (t.get("error") or {}).get("value")
        figures = f"test coverage {_pct(cov)}, error among accepted {_pct(err)}" if self.test else "no test split"
        if self.certified:
            head = "certified"
        elif self.options.objective == "guarantee":
            head = "nothing certified"
        else:
            head = "NOT certified (point estimate)"
        line = f"{self.question}: {head}; {figures} [{self.options.describe()}]"
        if self.needed:
            line += f"; {needed_sentence(self.needed)}"
        for w in self.warnings:
            line += f"; WARNING {w}"
        return line

    def rule_dict(self) -> dict:
        """The rule in policy-file form (option ids, not indices; ``None`` = never accept)."""
        return rule_to_dict(self.rule, self.option_ids)

    def to_dict(self) -> dict:
        sel = self.selection.to_dict()
        if self.selection.per_class is not None:
            sel["per_class"] = {self.option_ids[int(k)]: v for k, v in sel["per_class"].items()}
            if sel.get("guarantee") and "classes" in sel["guarantee"]:
                sel["guarantee"]["classes"] = {
                    self.option_ids[int(k)]: v for k, v in sel["guarantee"]["classes"].items()
                }
        return {
            "question": self.question,
            "type": self.qtype,
            "objective": self.options.objective,
            "certified": self.certified,
            "warnings": self.warnings,
            "feasible": self.selection.feasible,
            "settings": self.options.settings(),
            "calibration_size_needed": self.needed,
            "rule": self.rule_dict(),
            "calibrator": self.calibrator,
            "n_calibrator_fit": self.n_calibrator_fit,
            "selection": sel,
            "calibration": self.selection.calibration,
            "guarantee": self.selection.guarantee,
            "cost": self.selection.cost,
            "target": self.selection.target,
            "test": self.test,
            "test_risks": self.test_risks,
            "per_class_at_point": self.chosen_point_per_class,
            "batch": self.batch,
            "grid": {
                "points": [len(self.surface.x_grid), len(self.surface.y_grid)],
                "x": self.surface.x_name,
                "y": self.surface.y_name,
            },
            "notes": self.selection.notes,
            "options": self.options.to_dict(),
        }


def _pct(v: float | None) -> str:
    return "–" if v is None or v != v else f"{100 * v:.1f}%"


def needed_sentence(needed: dict) -> str:
    """Plain words for :func:`calibration_size_needed` (what the CLI, demo and UI print)."""
    now = ""
    if needed.get("n_calibration_now") is not None:
        now = f" (this one has {needed['n_calibration_now']}"
        if needed.get("n_certifying_now") is not None:
            now += f", {needed['n_certifying_now']} of them certifying"
        now += ")"
    crit = ""
    if needed.get("n_true_certifying"):
        crit = "; each critical option also needs, with none misrouted, this many certifying items of its own: " + (
            ", ".join(f"{o} {n}" for o, n in needed["n_true_certifying"].items())
        )
    return (
        f"nothing was certified at α = {needed['alpha']:g}, δ = {needed['delta']:g}: even with no error among "
        f"the accepted items a rule needs {needed['n_certifying']} accepted certifying items, i.e. a calibration "
        f"split of at least {needed['n_calibration']} items{now}{crit}"
    )


def _num(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)


def rule_to_dict(rule: Rule, option_ids: list[str]) -> dict:
    """Policy-file form of a rule; infinite thresholds (a disabled side/class) become ``null``."""
    if isinstance(rule, NoulRule):
        return {
            "kind": rule.kind,
            "tau_yes": _num(rule.tau_yes),
            "tau_no": _num(rule.tau_no),
            "fallback": rule.fallback,
        }
    d: dict[str, Any] = {
        "kind": rule.kind,
        "tau": _num(rule.tau),
        "margin": _num(rule.margin),
        "per_class": {
            option_ids[int(k)]: {"tau": _num(ct.tau), "margin": _num(ct.margin)}
            for k, ct in sorted(rule.per_class.items())
        },
        "fallback": rule.fallback,
    }
    if isinstance(rule, ScoreRule):
        d["level"] = rule.level
        d["abstain_options"] = []
    else:
        d["abstain_options"] = [option_ids[int(k)] for k in rule.abstain_options]
    return d


def _labelled(ans: RunAnswers) -> RunAnswers:
    """Labelled items, answered or failed (failures stay as NaN rows: never accepted)."""
    return ans.select(ans.labels >= 0)


def selection_to_rule(
    sel: Selection, qtype: str, n_options: int, opts: ThresholdOptions, abstain_idx: list[int]
) -> Rule:
    """The rule a selection stands for (per-class: one override per option, ``inf`` = never)."""
    inf = float("inf")
    if not sel.feasible and sel.per_class is None:
        # nothing certified: a rule that accepts nothing
        if qtype == "noul":
            return make_rule("noul", inf, inf, fallback=opts.fallback)
        return make_rule(qtype, inf, inf, abstain_options=abstain_idx, level=opts.level, fallback=opts.fallback)
    if sel.per_class is None:
        assert sel.x is not None and sel.y is not None  # a feasible selection has a grid point
        return make_rule(qtype, sel.x, sel.y, abstain_options=abstain_idx, level=opts.level, fallback=opts.fallback)
    if qtype == "noul":
        yes, no = sel.per_class.get(0), sel.per_class.get(1)
        return make_rule("noul", yes[0] if yes else inf, no[1] if no else inf, fallback=opts.fallback)
    per = {k: (v if v is not None else (inf, inf)) for k, v in sel.per_class.items()}
    return make_rule(
        qtype, inf, inf, per_class=per, abstain_options=abstain_idx, level=opts.level, fallback=opts.fallback
    )


@dataclass
class PreparedQuestion:
    """What every selection of one question starts from: the calibrator, the items it did not see and
    their risk–coverage surface (with per-item coordinates). Shapes: ``probs`` (n, k) (``None`` when
    the coordinates were computed from a streamed run), ``labels`` (n,)."""

    qtype: str
    option_ids: list[str]
    abstain_idx: list[int]
    calibrator: Any  # a fitted calibrator (workbench.metrics.recalibrate)
    n_fit: int
    probs: np.ndarray | None
    labels: np.ndarray
    surface: Surface


def check_question(question: str, qtype: str, opt_ids: list[str], n_labelled: int, opts: ThresholdOptions) -> list[int]:
    """Check the options against the question; return the abstain options' indices."""
    if opts.objective not in OBJECTIVES:
        raise ThresholdError(f"unknown objective {opts.objective!r}", hint=f"use one of {', '.join(OBJECTIVES)}")
    if opts.fallback == "accept":
        raise ThresholdError("the fallback action cannot be 'accept'", hint="use review (default) or escalate")
    if n_labelled == 0:
        raise ThresholdError(
            f"question {question!r} has no labelled calibration items",
            hint="import the dataset with --calibration-fraction or a calibration split",
        )
    unknown = [o for o in opts.abstain_options if o not in opt_ids]
    if unknown:
        raise ThresholdError(
            f"abstain option {unknown[0]!r} is not an option of {question!r}",
            hint=f"options: {', '.join(opt_ids[:20])}",
        )
    if opts.abstain_options and qtype != "choice":
        raise ThresholdError("abstain_options apply to choice questions only", parameter="abstain_options")
    return [opt_ids.index(o) for o in opts.abstain_options]


def calibrator_carve(n_labelled: int, opts: ThresholdOptions) -> np.ndarray | None:
    """(n_labelled,) bool: the labelled calibration rows (in item-id order) that fit the calibrator;
    the others certify. ``None`` when no calibrator is fitted."""
    if opts.calibrate in ("none", "identity"):
        return None
    rng = np.random.default_rng(opts.seed)
    return rng.random(n_labelled) < opts.calibrator_fraction


def prepare_question(calibration: RunAnswers, opts: ThresholdOptions) -> PreparedQuestion:
    """Check the options against the question, fit the calibrator on its carve and build the surface.

    The surface depends on the calibration, grid, abstain options, level and (cost objective) error
    costs, never on α/δ, so one prepared question serves every α of a frontier.
    """
    cal = _labelled(calibration)
    qtype, opt_ids = calibration.qtype, list(calibration.option_ids)
    abstain_idx = check_question(calibration.question, qtype, opt_ids, len(cal.labels), opts)
    probs, labels = cal.probs, cal.labels
    n_fit = 0
    fit_mask = calibrator_carve(len(labels), opts)
    if fit_mask is not None:
        n_fit = int(fit_mask.sum())
        calibrator = fit_calibrator(opts.calibrate, probs[fit_mask], labels[fit_mask])
        probs, labels = probs[~fit_mask], labels[~fit_mask]
    else:
        calibrator = fit_calibrator("none", probs, labels)
    probs = apply_calibrator(calibrator, probs)
    from workbench.thresholds.rules import rule_coordinates

    coords = rule_coordinates(qtype, probs, abstain_options=abstain_idx, level=opts.level)
    prep = prepare_from_coordinates(
        calibration.question, qtype, opt_ids, abstain_idx, calibrator, n_fit, coords, labels, opts
    )
    prep.probs = probs
    return prep


def prepare_from_coordinates(
    question: str,
    qtype: str,
    opt_ids: list[str],
    abstain_idx: list[int],
    calibrator: Any,
    n_fit: int,
    coords: Any,
    labels: np.ndarray,
    opts: ThresholdOptions,
    *,
    surface: Surface | None = None,
) -> PreparedQuestion:
    """The :class:`PreparedQuestion` of the certifying rows' rule coordinates (``coords``, a
    :class:`~workbench.thresholds.rules.RuleCoordinates` of the calibrated probabilities) and labels.

    ``surface``: the caller's :func:`~workbench.thresholds.surface.risk_coverage_surface` of the same
    ``coords`` and ``labels`` on the default grids of ``opts.grid``, with per-class counts and nothing else
    (the UI has drawn it already: one pass over millions of items saved). It is used when the options add
    nothing to it (no weights, costs, critical options or abstain options) and its grids and size match;
    otherwise the surface is computed here."""
    from workbench.thresholds.risks import cost_matrix
    from workbench.thresholds.surface import default_grids

    k = len(opt_ids)
    matrix = cost_matrix(opts.costs, opt_ids)
    critical = [opt_ids.index(o) for o in _critical_options(opts, opt_ids)]
    weights = None
    if opts.objective == "cost":
        ec: Any = opts.error_cost
        if isinstance(ec, dict):
            bad = [o for o in ec if o not in opt_ids]
            if bad:
                raise ThresholdError(f"error_cost names unknown option {bad[0]!r}", parameter="error_cost")
            ec = {opt_ids.index(o): v for o, v in ec.items()}
        if matrix is not None:  # error_cost is a number here (ThresholdOptions checks it)
            ec = float(cast(float, ec)) * matrix
        weights = error_cost_weights(labels, coords.predicted, k, cast(Any, ec))  # a list is a [true][accepted] matrix
    guarantee_costs = None
    if matrix is not None and opts.objective == "guarantee":
        if not opts.alpha < matrix.max():
            raise ThresholdError(
                f"alpha {opts.alpha:g} is not below the largest misroute cost {matrix.max():g} of {question!r}",
                hint="with costs, alpha is the largest expected misroute cost per auto-accepted item",
            )
        guarantee_costs = matrix
    if surface is not None:
        gx, gy = default_grids(qtype, opts.grid)
        same = (
            weights is None
            and guarantee_costs is None
            and not critical
            and not abstain_idx
            and surface.n_total == len(labels)
            and surface.class_accepted is not None
            and surface.weighted is None
            and surface.loss is None
            and np.array_equal(surface.x_grid, gx)
            and np.array_equal(surface.y_grid, gy)
        )
        if same:  # a shallow copy: the caller's surface keeps its own extras
            surface = copy.copy(surface)
            surface.extra = {**surface.extra, "coordinates": coords, "correct": coords.predicted == labels}
            return PreparedQuestion(qtype, opt_ids, abstain_idx, calibrator, n_fit, None, labels, surface)
    surface = risk_coverage_surface(
        qtype,
        None,
        labels,
        coordinates=coords,
        n_options=k,
        grid=opts.grid,
        abstain_options=abstain_idx,
        level=opts.level,
        per_class=True,
        weights=weights,
        cost_matrix=guarantee_costs,
        critical=critical,
    )
    return PreparedQuestion(qtype, opt_ids, abstain_idx, calibrator, n_fit, None, labels, surface)


def _critical_options(opts: ThresholdOptions, opt_ids: list[str]) -> list[str]:
    """The constraint options, checked against the question's options."""
    for o in opts.constraints or {}:
        if o not in opt_ids:
            raise ThresholdError(
                f"critical option {o!r} is not an option of this question",
                hint=f"options: {', '.join(opt_ids[:20])}",
            )
    return list(opts.constraints or {})


def certified_levels(opts: ThresholdOptions) -> tuple[float, float]:
    """The (α, δ) the guarantee objective certifies the population error rate at: ``opts.alpha`` and
    ``opts.delta``, or with ``guarantee_for="batch"`` the stricter levels that bound the next batch."""
    if opts.guarantee_for == "batch":
        from workbench.thresholds.batch import batch_certificate_levels

        return batch_certificate_levels(opts.alpha, opts.delta, opts.batch)
    return opts.alpha, opts.delta


def select_prepared(prep: PreparedQuestion, opts: ThresholdOptions, calibration: RunAnswers | None = None) -> Selection:
    """The objective's selection on a prepared question: the step every path shares (in memory, a run
    read in batches, the store's SQL points), between :func:`prepare_question` (or
    :func:`prepare_from_coordinates`) and :func:`finish_result`.

    ``calibration``: the calibration answers, read only by the cost objective without
    ``opts.api_cost_per_item``, for the mean API cost per item (the answers' known ``cost_usd``; 0 when
    none is known or ``calibration`` is None)."""
    if opts.objective == "guarantee":
        classes = [c for c in range(len(prep.option_ids)) if c not in prep.abstain_idx]
        alpha, delta = certified_levels(opts)
        sel = certify_surface(
            prep.surface,
            alpha=alpha,
            delta=delta,
            method=cast(Literal["fixed-sequence", "holm"], opts.method),  # checked by ThresholdOptions
            per_class=opts.per_class,
            classes=classes,
            order_fraction=opts.order_fraction,
            seed=opts.seed,
            n_paths=opts.n_paths,
            n_starts=opts.n_starts,
            constraints=[(prep.option_ids.index(o), float(b)) for o, b in (opts.constraints or {}).items()],
        )
        if opts.guarantee_for == "batch" and sel.guarantee is not None:
            sel.guarantee["for"] = {
                "batch": opts.batch,
                "alpha": opts.alpha,
                "delta": opts.delta,
                "alpha_population": alpha,
                "delta_population": delta,
            }
        return sel
    if opts.objective == "cost":
        api = opts.api_cost_per_item
        if api is None:
            c = calibration.cost_usd if calibration is not None else np.zeros(0)
            api = float(np.nanmean(c)) if np.isfinite(c).any() else 0.0
        return select_cost(prep.surface, review_cost=opts.review_cost, api_cost_per_item=api)
    if opts.objective == "manual":
        if not opts.manual_rule:
            raise ThresholdError("objective manual needs manual_rule (tau/margin or tau_yes/tau_no)")
        return select_manual(prep.surface, opts.manual_rule)
    if opts.objective == "coverage":
        if opts.target_coverage is None:
            raise ThresholdError("--objective coverage needs --target-coverage")
        return select_target(prep.surface, target_coverage=opts.target_coverage)
    if opts.target_error is None:
        raise ThresholdError("--objective error needs --target-error")
    return select_target(prep.surface, target_error=opts.target_error)


def choose_thresholds(
    calibration: RunAnswers, test: RunAnswers | None = None, opts: ThresholdOptions | None = None
) -> ThresholdResult:
    """Pick the rule for one question and judge it on the test split.

    Parameters
    ----------
    calibration : RunAnswers
        Answers of the calibration split (labelled items are used; failures count as reviews).
    test : RunAnswers, optional
        Answers of the test split.
    opts : ThresholdOptions

    Returns
    -------
    result : ThresholdResult
    """
    opts = opts or ThresholdOptions()
    prep = prepare_question(calibration, opts)
    sel = select_prepared(prep, opts, calibration)
    result = finish_result(
        prep, sel, opts, question=calibration.question, n_calibration=int(np.count_nonzero(calibration.labels >= 0))
    )
    if test is not None:
        result.attach_test(evaluate_on(result, test))
    return result


def certified_frontier(calibration: RunAnswers, opts: ThresholdOptions, alphas: Sequence[float]) -> list[Selection]:
    """Guarantee selections for each α in ``alphas`` (other options as ``opts``).

    Element ``i`` equals ``choose_thresholds(calibration, None, replace(opts, objective="guarantee",
    alpha=alphas[i])).selection``; the calibrator and surface are built once for all of them.
    """
    opts = replace(opts, objective="guarantee")
    prep = prepare_question(calibration, opts)
    return [select_prepared(prep, replace(opts, alpha=float(a)), calibration) for a in alphas]


def finish_result(
    prep: PreparedQuestion, sel: Selection, opts: ThresholdOptions, *, question: str, n_calibration: int
) -> ThresholdResult:
    """The :class:`ThresholdResult` of a selection (:func:`select_prepared`) on a prepared question, not
    yet judged on test: the rule it stands for, the per-class counts at the chosen grid point, the
    calibration size needed when the guarantee certified nothing, and the finite-batch view.

    The one finishing step of every path: :func:`choose_thresholds` (in memory),
    :func:`workbench.workflows.thresholds.streamed_thresholds` (a run read in batches) and
    :func:`workbench.engines.store_aggregates.certified_from_points` (the store's SQL points). Each
    then judges the rule on the test split its own way and hands the report to
    :meth:`ThresholdResult.attach_test` (in memory: :func:`evaluate_on`).

    Parameters
    ----------
    question : str
        The question id.
    n_calibration : int
        Labelled items (answered or failed) of the calibration split, reported next to the size needed.

    ``sel`` is finished in place: critical options' indices in its guarantee become option ids, and the
    sentence on the size needed joins its notes.
    """
    surface, opt_ids, k = prep.surface, prep.option_ids, len(prep.option_ids)
    rule = selection_to_rule(sel, prep.qtype, k, opts, prep.abstain_idx)
    if sel.guarantee is not None and (opts.costs is not None or opts.constraints):
        for c in sel.guarantee.get("constraints") or []:  # option ids, as everywhere in the output
            c["option"] = opt_ids[int(c["option"])]
        if opts.costs is not None:
            sel.guarantee["costs"] = opts.costs
    per_class_point = None
    if (
        sel.x is not None
        and sel.y is not None
        and surface.class_accepted is not None
        and surface.class_errors is not None
    ):
        i = int(np.searchsorted(surface.x_grid, sel.x))
        j = int(np.searchsorted(surface.y_grid, sel.y))
        per_class_point = {
            opt_ids[c]: {"accepted": int(surface.class_accepted[c, i, j]), "errors": int(surface.class_errors[c, i, j])}
            for c in range(k)
            if surface.class_accepted[c, i, j] > 0
        }

    needed = None
    if opts.objective == "guarantee" and not (sel.certified and sel.feasible):
        needed = {
            **calibration_size_needed(opts, k),
            "n_calibration_now": int(n_calibration),
            "n_certifying_now": sel.calibration.get("n_items"),
        }
        sel.notes.append(needed_sentence(needed))
    batch = None
    acc, err = sel.calibration.get("n_accepted"), sel.calibration.get("n_errors")
    if sel.feasible and acc and opts.costs is None:  # a batch of 0/1 errors (not a misroute cost)
        from workbench.thresholds.batch import batch_view

        certified = opts.objective == "guarantee" and sel.certified
        alpha_pop, delta_pop = certified_levels(opts) if certified else (opts.alpha, opts.delta)
        batch = batch_view(
            alpha=opts.alpha,
            delta=delta_pop if certified else None,
            population_alpha=alpha_pop if opts.guarantee_for == "batch" else None,
            n_batch=opts.batch,
            accepted=int(acc),
            errors=int(err or 0),
            confidence=opts.confidence,
        )
    return ThresholdResult(
        question,
        prep.qtype,
        opt_ids,
        opts,
        prep.calibrator.to_dict(),
        sel,
        rule,
        surface,
        None,
        prep.n_fit,
        per_class_point,
        needed,
        batch,
        None,
        prep.calibrator,
    )


def evaluate_on(result: ThresholdResult, test: RunAnswers) -> dict | None:
    """The test report (:func:`~workbench.thresholds.evaluate.evaluate_rule`) of ``result``'s rule on the
    labelled items of ``test`` (failures count as reviews), after the calibrator the rule was chosen
    with; None when ``test`` has no labelled item."""
    t = _labelled(test)
    if not len(t.labels):
        return None
    return evaluate_rule(
        result.rule,
        apply_calibrator(result.fitted_calibrator, t.probs),
        t.labels,
        option_ids=result.option_ids,
        confidence=result.options.confidence,
    )


def _test_risks(test_report: dict, opts: ThresholdOptions, opt_ids: list[str]) -> dict | None:
    """Misroute cost and critical-option misroute rates of the rule on the test split (from its confusion)."""
    from workbench.thresholds.bounds import clopper_pearson
    from workbench.thresholds.risks import cost_matrix

    if opts.costs is None and not opts.constraints:
        return None
    conf = np.asarray(test_report["confusion"]["matrix"], dtype=float)
    k = len(opt_ids)
    accepted = conf[:, :k]
    out: dict[str, Any] = {}
    matrix = cost_matrix(opts.costs, opt_ids)
    if matrix is not None:
        n_acc = accepted.sum()
        out["cost"] = {
            "expected_cost_among_accepted": float((accepted * matrix).sum() / n_acc) if n_acc else None,
            "n_accepted": int(n_acc),
        }
    rows = []
    for o, beta in (opts.constraints or {}).items():
        c = opt_ids.index(o)
        n_c, mis = int(conf[c].sum()), int(accepted[c].sum() - accepted[c, c])
        lo, hi = clopper_pearson(mis, n_c, opts.confidence)
        rows.append(
            {
                "option": o,
                "beta": float(beta),
                "n_true": n_c,
                "misrouted": mis,
                "rate": mis / n_c if n_c else None,
                "low": None if n_c == 0 else lo,
                "high": None if n_c == 0 else hi,
                "reviewed": int(conf[c, k]),
            }
        )
    if rows:
        out["constraints"] = rows
    return out
