"""How routing thresholds are chosen: :class:`ThresholdOptions` (the one options type of the workbench),
its allowed values (``OBJECTIVES``, ``METHODS``, ``RECALIBRATIONS``, ``LEVELS``, ``GUARANTEE_FOR``) and
the smallest calibration split that could certify a rule at given options
(:func:`calibration_size_needed`, in plain words :func:`needed_sentence`).

The selection itself is in :mod:`workbench.thresholds.choose`; its result in :mod:`workbench.thresholds.result`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from workbench_runtime.model import FALLBACK_ACTIONS

from workbench.errors import OptionError

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
      risk at ``delta`` (guarantee objective; not with ``per_class``).
    - ``class_conditional`` — with ``constraints``: instead of one global rule, a strict ``(τ, m)`` for the
      options the critical ones are confused with (``confusable``, or learned on the held-apart items) and a
      loose one for the rest, both risks certified jointly at ``delta``
      (:mod:`workbench.thresholds.classwise`). Needs fixed-sequence testing with ``order_fraction > 0``.

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
    # with constraints: a strict (tau, margin) for the options the critical ones are confused with, a loose one
    # for the rest, certified jointly (thresholds.classwise)
    class_conditional: bool = False
    confusable: list[str] | None = None  # the strict group, named; None = learned on held-apart items

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
                    "(critical options) are certified for one global rule or class-conditional rules, not for "
                    "per-class rules",
                    "drop per_class, and add class_conditional for a strict rule where the critical option is "
                    "confused and a loose one elsewhere, certified jointly",
                )
        self._validate_class_conditional(bad)

    def _validate_class_conditional(self, bad) -> None:
        if self.confusable is not None:
            if not isinstance(self.confusable, list) or not all(isinstance(o, str) and o for o in self.confusable):
                raise bad("confusable", "must be a list of option ids", "e.g. ['offensive']")
            if not self.class_conditional:
                raise bad("confusable", "names the strict group of class-conditional rules", "set class_conditional")
        if not self.class_conditional:
            return
        if not self.constraints:
            raise bad(
                "class_conditional",
                "needs a critical option (constraints): the strict group is where it is confused",
                "e.g. constraints={'hate': 0.1}",
            )
        if self.method != "fixed-sequence" or not self.order_fraction > 0:
            raise bad(
                "class_conditional",
                "needs fixed-sequence testing with order_fraction > 0: the strict group and the test order are "
                "learned on the held-apart items",
                "keep method fixed-sequence and order_fraction 0.3 (the defaults)",
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
        if self.class_conditional:
            out["class_conditional"] = True
            if self.confusable is not None:
                out["confusable"] = self.confusable
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
            if self.class_conditional:
                crit += (
                    ", class-conditional (strict: "
                    + (", ".join(self.confusable) if self.confusable else "learned")
                    + ")"
                )
        if self.objective == "guarantee":
            scope = f", for the next {self.batch} accepted" if self.guarantee_for == "batch" else ""
            return f"{a}, δ = {self.delta:g}{scope}, {recal}, {self.method}, grid {self.grid}{crit}"
        costs = ", misroute costs" if self.costs is not None else ""
        return f"objective {self.objective} (NOT certified), {a}, {recal}, grid {self.grid}{costs}"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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
