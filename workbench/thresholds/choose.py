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
:meth:`~workbench.thresholds.result.ThresholdResult.attach_test` with the test report however it was computed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from workbench.answers import RunAnswers
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
from workbench.thresholds.options import OBJECTIVES, ThresholdOptions, calibration_size_needed, needed_sentence
from workbench.thresholds.result import ThresholdResult
from workbench.thresholds.rules import Rule, make_rule
from workbench.thresholds.surface import Surface, risk_coverage_surface


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
    if sel.x is not None and sel.y is not None:  # class-conditional: the loose rule, the strict group's overrides
        per = {k: (v if v is not None else (inf, inf)) for k, v in sel.per_class.items()}
        return make_rule(
            qtype, sel.x, sel.y, per_class=per, abstain_options=abstain_idx, level=opts.level, fallback=opts.fallback
        )
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
    #: (n, m) calibrated probabilities of the critical options (``opts.constraints`` order) on the certifying
    #: rows, for class-conditional rules when ``probs`` is None (a streamed run keeps only these columns)
    critical_probs: np.ndarray | None = None
    #: class-conditional rules: the calibrator's carve (its calibrated coordinates, labels, losses, critical
    #: probabilities), on which the strict group and the test chain are learned (None: no carve)
    order_rows: Any = None


def check_question(question: str, qtype: str, opt_ids: list[str], n_labelled: int, opts: ThresholdOptions) -> list[int]:
    """Check the options against the question; return the abstain options' indices."""
    if opts.objective not in OBJECTIVES:
        raise ThresholdError(f"unknown objective {opts.objective!r}", hint=f"use one of {', '.join(OBJECTIVES)}")
    if opts.fallback == "accept":
        raise ThresholdError("the fallback action cannot be 'accept'", hint="use review (default) or escalate")
    if n_labelled == 0:
        raise ThresholdError(
            f"question {question!r} has no labelled calibration items",
            hint="import the dataset with a `calibration_fraction` or a calibration split",
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
    if fit_mask is not None and opts.class_conditional:
        carve = apply_calibrator(calibrator, cal.probs[fit_mask])
        prep.order_rows = carve_order_rows(
            qtype,
            opt_ids,
            rule_coordinates(qtype, carve, abstain_options=abstain_idx, level=opts.level),
            cal.labels[fit_mask],
            carve[:, [opt_ids.index(o) for o in _critical_options(opts, opt_ids)]],
            opts,
        )
    return prep


def carve_order_rows(
    qtype: str, opt_ids: list[str], coords: Any, labels: np.ndarray, critical_probs: np.ndarray, opts: ThresholdOptions
) -> Any:
    """The :class:`~workbench.thresholds.classwise.OrderRows` of the calibrator's carve (its calibrated rule
    coordinates, labels (n,), and the critical options' calibrated probabilities (n, m)): class-conditional
    rules learn their strict group and test chain on these rows, which are apart from the certifying ones,
    so every certifying row certifies. Losses as the certifying surface's (the guarantee's cost matrix)."""
    from workbench.thresholds.classwise import OrderRows
    from workbench.thresholds.risks import cost_matrix

    matrix = cost_matrix(opts.costs, opt_ids)
    loss = None
    if matrix is not None:  # the same per-item loss as the certifying rows' surface
        loss = risk_coverage_surface(
            qtype, None, labels, coordinates=coords, n_options=len(opt_ids), grid=2, cost_matrix=matrix
        ).extra.get("loss")
    return OrderRows(coords, np.asarray(labels, dtype=np.int64), loss, critical_probs)


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
        if opts.class_conditional:
            sel = _class_conditional(prep, opts, classes, alpha, delta)
        else:
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
            raise ThresholdError("`objective` coverage needs a `target_coverage`")
        return select_target(prep.surface, target_coverage=opts.target_coverage)
    if opts.target_error is None:
        raise ThresholdError("`objective` error needs a `target_error`")
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


def _class_conditional(
    prep: PreparedQuestion, opts: ThresholdOptions, classes: list[int], alpha: float, delta: float
) -> Selection:
    """The class-conditional selection (:mod:`workbench.thresholds.classwise`) of a prepared question."""
    from workbench.thresholds.classwise import select_class_conditional

    if prep.qtype not in ("choice", "score"):
        raise ThresholdError(
            f"class-conditional rules apply to choice and score questions, not {prep.qtype!r}",
            hint="a yes/no rule already has a threshold per side",
            parameter="class_conditional",
        )
    ids = prep.option_ids
    unknown = [o for o in opts.confusable or [] if o not in ids]
    if unknown:
        raise ThresholdError(
            f"confusable option {unknown[0]!r} is not an option of this question",
            hint=f"options: {', '.join(ids[:20])}",
            parameter="confusable",
        )
    critical = [ids.index(o) for o in opts.constraints or {}]
    critical_probs = prep.critical_probs
    if critical_probs is None and prep.probs is not None:
        critical_probs = np.asarray(prep.probs)[:, critical]
    return select_class_conditional(
        prep.surface,
        alpha=alpha,
        delta=delta,
        constraints=[(ids.index(o), float(b)) for o, b in (opts.constraints or {}).items()],
        classes=classes,
        confusable=None if opts.confusable is None else [ids.index(o) for o in opts.confusable],
        critical_probs=critical_probs,
        order_fraction=opts.order_fraction,
        seed=opts.seed,
        order_rows=prep.order_rows,
    )


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
    cc = (sel.guarantee or {}).get("class_conditional")
    if cc is not None and cc.get("strict") and isinstance(cc["strict"][0], (int, np.integer)):
        cc["strict"] = [opt_ids[int(o)] for o in cc["strict"]]
    per_class_point = None
    if cc is not None:
        per_class_point = _class_conditional_point(sel, surface, opt_ids)
    elif (
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


def _class_conditional_point(sel: Selection, surface: Surface, opt_ids: list[str]) -> dict | None:
    """Per-option calibration counts of a class-conditional selection, each option at its own rule's point."""
    if not sel.feasible or surface.class_accepted is None or surface.class_errors is None or sel.per_class is None:
        return None
    out = {}
    for c in range(len(opt_ids)):
        pt = sel.per_class[c] if c in sel.per_class else (sel.x, sel.y)
        if pt is None or pt[0] is None or pt[1] is None or not np.isfinite(pt[0]):
            continue
        i, j = int(np.searchsorted(surface.x_grid, pt[0])), int(np.searchsorted(surface.y_grid, pt[1]))
        if surface.class_accepted[c, i, j] > 0:
            out[opt_ids[c]] = {
                "accepted": int(surface.class_accepted[c, i, j]),
                "errors": int(surface.class_errors[c, i, j]),
            }
    return out


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
