"""Store-backed workflows one floor above the pure maths: load a run's answers, call the library.

``thresholds_for_run`` is the one "load calibration and test answers, choose thresholds" step behind
``workbench thresholds``, ``workbench compare``, the demo, the UI's Thresholds page and
``workbench.choose_thresholds``, so the same run, question and :class:`ThresholdOptions` give the same
rule, coverage and error on every surface. ``plan_labels_for_run`` is the label budget planner behind
``workbench plan-labels`` and ``workbench.plan_labels``. Imports only the store and the thresholds layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.reporting import Reporter
from workbench.store.runs import shared_keys
from workbench.thresholds.options import ThresholdOptions
from workbench.thresholds.result import ThresholdResult


@shared_keys()
def thresholds_for_run(
    con,
    run_id: str,
    question: str,
    options: ThresholdOptions | None = None,
    *,
    calibration_split: str = "calibration",
    test_split: str | None = "test",
) -> ThresholdResult:
    """Choose thresholds for ``question`` of ``run_id`` on its calibration split; judge them on test.

    One path for every size: the run is read in batches (:func:`streamed_thresholds`), so memory is O(n)
    small numbers, never the (n, k) matrix, and a calibrator is fitted on at most
    :data:`~workbench.workflows.evaluation.FIT_ROWS_MAX` rows (a seeded sample beyond, as ``workbench
    calibrate`` fits it; said in the selection's notes). Every figure equals
    :func:`~workbench.thresholds.choose.choose_thresholds` on the loaded splits when the calibrator's rows
    are at most that many (``tests/scale/test_streamed_equals_in_memory.py``).

    Parameters
    ----------
    con : duckdb connection
    run_id : str
        Run id or name.
    question : str
    options : ThresholdOptions, optional
        Default ``ThresholdOptions()`` (α 0.05, δ 0.1, temperature scaling, fixed-sequence, grid 100).
    calibration_split, test_split : str
        Splits used to choose and to judge (``test_split=None``: no test report).

    Returns
    -------
    ThresholdResult
    """
    options = options if options is not None else ThresholdOptions()
    return streamed_thresholds(con, run_id, question, options, calibration_split, test_split)


def streamed_prepare(
    con, run_id: str, question: str, options: ThresholdOptions, calibration_split: str = "calibration"
):
    """``(prepared question, keys-only calibration answers, note or None)``: what
    :func:`~workbench.thresholds.choose.prepare_question` builds, from a run read in batches
    (see :func:`streamed_thresholds`)."""
    return streamed_prepare_many(con, [run_id], question, options, calibration_split)[0]


def read_together(con, run_ids: Sequence[str]) -> tuple[str, list]:
    """``(run whose rows all of ``run_ids`` read, each run's on-read transform (n, k) -> (n, k) of
    ``question``'s probabilities or None)`` as a function of the question, for runs one streamed pass
    can serve: a run and its calibrated views (:func:`~workbench.store.runs.answer_source`) on one
    dataset version and schema. Raises ``ValueError`` for runs that read different rows."""
    from workbench.store.runs import answer_source, get_run

    runs = [get_run(con, r) for r in run_ids]
    sources = [answer_source(con, r) for r in runs]
    shared = {(s, r["dataset"], int(r["dataset_version"]), r["schema_hash"]) for (s, _), r in zip(sources, runs)}
    if len(shared) != 1:
        raise ValueError(f"runs {', '.join(run_ids)} do not read the same answer rows")
    return sources[0][0], [c for _, c in sources]


def read_transforms(calibrators: list, question: str) -> list:
    """Each run's on-read transform of ``question``, (n, k) -> (n, k) (None: its rows are read as stored), from
    the calibrators of :func:`read_together`: what :func:`~workbench.store.runs.iter_answer_batches` applies."""
    from workbench.store.runs import on_read_transform  # the transform iter_answer_batches applies

    return [on_read_transform(c, question) for c in calibrators]


def as_read(transform, probs: np.ndarray) -> np.ndarray:
    """``probs`` (n, k) (rows of the answer source) as the run reads them: through ``transform`` (one of
    :func:`read_transforms`) when it is not None."""
    return probs if transform is None else transform(probs)


def streamed_prepare_many(
    con, run_ids: Sequence[str], question: str, options: ThresholdOptions, calibration_split: str = "calibration"
) -> list:
    """:func:`streamed_prepare` of several runs that read the same answer rows (a run and its
    calibrated views, :func:`read_together`), from one pass of their rows per step: the carve's rows
    are gathered once (each run fits its calibrator on them as it reads them) and one pass computes
    every run's rule coordinates. Each run's result is the one :func:`streamed_prepare` gives it alone."""
    from workbench.metrics.recalibrate import apply_calibrator, fit_calibrator
    from workbench.store.runs import gather_answer_rows, iter_answer_batches, load_answer_keys
    from workbench.thresholds.choose import (
        calibrator_carve,
        carve_order_rows,
        check_question,
        prepare_from_coordinates,
    )
    from workbench.thresholds.rules import RuleCoordinates, rule_coordinates
    from workbench.workflows.evaluation import FIT_ROWS_MAX

    source, calibrators = read_together(con, run_ids)
    transforms = read_transforms(calibrators, question)
    # the keys read is the source's (every run reads the same rows, ids, splits and gold labels)
    keys = load_answer_keys(con, run_ids[0], question, [calibration_split], ids=False)
    opt_ids, qtype, k = list(keys.option_ids), keys.qtype, len(keys.option_ids)
    labelled = np.flatnonzero(keys.labels >= 0)  # positions of the rows the in-memory path keeps
    abstain_idx = check_question(question, qtype, opt_ids, labelled.size, options)
    carve = calibrator_carve(labelled.size, options)
    role = np.full(len(keys.labels), -1, dtype=np.int8)  # -1 unlabelled, 0 certifies, 1 fits
    role[labelled] = 0
    n_fit, note = 0, None
    order_rows: list = []  # per run, class-conditional rules only: the carve's rows (carve_order_rows)
    if carve is not None:
        role[labelled[carve]] = 1
        n_fit = int(carve.sum())
        fit_rows = role == 1
        if n_fit > FIT_ROWS_MAX:
            rng = np.random.default_rng(options.seed + 1)
            fit_rows = np.zeros(len(role), bool)
            fit_rows[rng.choice(labelled[carve], FIT_ROWS_MAX, replace=False)] = True
            note = (
                f"the calibrator was fitted on a seeded sample of {FIT_ROWS_MAX:,} of the {n_fit:,} rows "
                "of its carve (the run is streamed)"
            )
        probs, labels = gather_answer_rows(con, source, question, calibration_split, fit_rows)
        fitted = [fit_calibrator(options.calibrate, as_read(t, probs), labels) for t in transforms]
        if options.class_conditional:  # the carve also learns the class-conditional group and test chain
            crit_idx = [opt_ids.index(o) for o in options.constraints or {} if o in opt_ids]
            for t, calibrator in zip(transforms, fitted, strict=True):
                carve_probs = apply_calibrator(calibrator, as_read(t, probs))
                c = rule_coordinates(qtype, carve_probs, abstain_options=abstain_idx, level=options.level)
                order_rows.append(carve_order_rows(qtype, opt_ids, c, labels, carve_probs[:, crit_idx], options))
        del probs, labels
    else:
        fitted = [fit_calibrator("none", np.zeros((0, k)), np.zeros(0, int)) for _ in transforms]
        fit_rows = None
    del labelled, carve, fit_rows
    certify = np.flatnonzero(role == 0)
    index = np.full(len(role), -1, dtype=np.int32)  # int32 positions and options: 4 bytes less per item each
    index[certify] = np.arange(certify.size)
    certify_labels = keys.labels[certify]
    del certify
    m = certify_labels.size
    xs, ys = [np.full(m, np.nan) for _ in run_ids], [np.full(m, np.nan) for _ in run_ids]
    predicted = [np.full(m, -1, dtype=np.int32) for _ in run_ids]
    names = [("x", "y") for _ in run_ids]
    # class-conditional rules also read the critical options' calibrated probabilities (n × m, m small)
    crit = [opt_ids.index(o) for o in options.constraints or {} if o in opt_ids] if options.class_conditional else []
    crit_probs = [np.full((m, len(crit)), np.nan) for _ in run_ids] if crit else None
    for pos, b in iter_answer_batches(con, source, question, [calibration_split]):
        rows = role[pos] == 0
        if not rows.any():
            continue
        at = index[pos[rows]]
        for i, (t, calibrator) in enumerate(zip(transforms, fitted, strict=True)):
            calibrated = apply_calibrator(calibrator, as_read(t, b.probs[rows]))
            c = rule_coordinates(qtype, calibrated, abstain_options=abstain_idx, level=options.level)
            xs[i][at], ys[i][at], predicted[i][at] = c.x, c.y, c.predicted
            if crit_probs is not None:
                crit_probs[i][at] = calibrated[:, crit]
            names[i] = (c.x_name, c.y_name)
    out = []
    for i, calibrator in enumerate(fitted):
        coords = RuleCoordinates(predicted[i], xs[i], ys[i], *names[i])
        prep = prepare_from_coordinates(
            question, qtype, opt_ids, abstain_idx, calibrator, n_fit, coords, certify_labels, options
        )
        prep.critical_probs = None if crit_probs is None else crit_probs[i]
        prep.order_rows = order_rows[i] if order_rows else None
        out.append((prep, keys, note))
    return out


def streamed_thresholds(
    con,
    run_id: str,
    question: str,
    options: ThresholdOptions,
    calibration_split: str = "calibration",
    test_split: str | None = "test",
) -> ThresholdResult:
    """:func:`~workbench.thresholds.choose.choose_thresholds` on a run read in batches.

    Memory is O(n) small numbers (ids, labels, the rule coordinates of the certifying rows), never
    the (n, k) matrix: the item-id order, labels and the calibrator carve come from a read without
    probabilities; one streamed pass gathers the carve's rows and fits the calibrator (at most
    :data:`workbench.workflows.evaluation.FIT_ROWS_MAX` of them, a seeded sample beyond, said in the selection's notes); a second
    pass computes the certifying rows' rule coordinates; the test split is judged batch by batch
    (:func:`~workbench.thresholds.evaluate.rule_counts`). With a carve of at most
    :data:`workbench.workflows.evaluation.FIT_ROWS_MAX` rows every figure equals the in-memory path's.
    """
    return streamed_thresholds_many(con, [run_id], question, options, calibration_split, test_split)[0]


def streamed_thresholds_many(
    con,
    run_ids: Sequence[str],
    question: str,
    options: ThresholdOptions,
    calibration_split: str = "calibration",
    test_split: str | None = "test",
) -> list[ThresholdResult]:
    """:func:`streamed_thresholds` of several runs that read the same answer rows (:func:`read_together`),
    each pass over those rows serving every run (:func:`streamed_prepare_many`); each run's result is
    the one ``streamed_thresholds`` gives it alone."""
    from workbench.metrics.recalibrate import apply_calibrator
    from workbench.store.runs import iter_answer_batches
    from workbench.thresholds.choose import finish_result, select_prepared
    from workbench.thresholds.evaluate import add_rule_counts, rule_counts, rule_report_from_counts

    results = []
    for prep, keys, note in streamed_prepare_many(con, run_ids, question, options, calibration_split):
        sel = select_prepared(prep, options, keys)
        if note:
            sel.notes.append(note)
        n_calibration = int(np.count_nonzero(keys.labels >= 0))
        results.append((prep, finish_result(prep, sel, options, question=question, n_calibration=n_calibration)))
    if test_split:
        source, calibrators = read_together(con, run_ids)
        transforms = read_transforms(calibrators, question)
        counts: list[dict | None] = [None] * len(results)
        for _, b in iter_answer_batches(con, source, question, [test_split]):
            rows = b.labels >= 0
            if not rows.any():
                continue
            for i, (t, (prep, result)) in enumerate(zip(transforms, results, strict=True)):
                probs = apply_calibrator(prep.calibrator, as_read(t, b.probs[rows]))
                counts[i] = add_rule_counts(counts[i], rule_counts(result.rule, probs, b.labels[rows]))
        for (prep, result), c in zip(results, counts, strict=True):
            if c is not None:
                result.attach_test(
                    rule_report_from_counts(c, option_ids=prep.option_ids, confidence=options.confidence)
                )
    return [result for _, result in results]


def split_calibrator(con, run_id: str, question: str, method: str, *, seed: int = 0):
    """A ``method`` calibrator fitted on the answered, labelled rows of the run's calibration split
    (at most ``evaluation.FIT_ROWS_MAX`` of them, a seeded sample beyond), read in batches."""
    from workbench.metrics.recalibrate import make_calibrator
    from workbench.workflows.evaluation import fit_sample

    probs, labels, _ = fit_sample(con, run_id, question, "calibration", seed)
    return make_calibrator(method).fit(probs, labels)


@dataclass
class LabelledItems:
    """Per-item figures of a split's labelled rows (failed ones included), in item-id order, read in
    batches: what a page or a figure needs instead of the (n, k) matrix (about 40 bytes per item).

    ``coords`` are the rows' :class:`~workbench.thresholds.rules.RuleCoordinates` (failures at
    −inf, predicted −1); ``top`` the top option's probability (NaN on failures); ``column`` the
    probability of option ``option`` when one was asked for."""

    qtype: str
    option_ids: list[str]
    labels: np.ndarray
    coords: Any
    top: np.ndarray
    column: np.ndarray | None = None


def labelled_items(
    con, run_id: str, question: str, split: str, *, calibrator: Any = None, option: int | None = None
) -> LabelledItems:
    """:class:`LabelledItems` of ``split`` (probabilities passed through ``calibrator`` when given)."""
    from workbench.metrics.recalibrate import apply_calibrator
    from workbench.store.runs import iter_answer_batches, load_answer_keys
    from workbench.thresholds.rules import RuleCoordinates, rule_coordinates

    keys = load_answer_keys(con, run_id, question, [split], ids=False)
    keep = keys.labels >= 0
    slot = np.cumsum(keep) - 1
    m = int(keep.sum())
    x, y, top = np.full(m, -np.inf), np.full(m, -np.inf), np.full(m, np.nan)
    predicted = np.full(m, -1, dtype=np.int64)
    column = np.full(m, np.nan) if option is not None else None
    names = ("x", "y")
    for pos, b in iter_answer_batches(con, run_id, question, [split]):
        rows = keep[pos]
        if not rows.any():
            continue
        p = b.probs[rows] if calibrator is None else apply_calibrator(calibrator, b.probs[rows])
        c = rule_coordinates(keys.qtype, p)
        at = slot[pos[rows]]
        x[at], y[at], predicted[at], names = c.x, c.y, c.predicted, (c.x_name, c.y_name)
        top[at] = np.max(p, axis=1)  # NaN rows stay NaN
        if column is not None:
            column[at] = p[:, option]
    return LabelledItems(
        keys.qtype,
        list(keys.option_ids),
        keys.labels[keep],
        RuleCoordinates(predicted, x, y, *names),
        top,
        column,
    )


@shared_keys()
def frontier_for_run(con, run_id: str, question: str, options: ThresholdOptions, alphas) -> list:
    """The certified frontier of a stored run's calibration split: the guarantee selection
    (:func:`~workbench.thresholds.choose.select_prepared`) at each α, prepared once from the run read in
    batches (as ``thresholds_for_run``)."""
    from dataclasses import replace

    from workbench.thresholds.choose import select_prepared

    opts = replace(options, objective="guarantee")
    prep, keys, _ = streamed_prepare(con, run_id, question, opts)
    return [select_prepared(prep, replace(opts, alpha=float(a)), keys) for a in alphas]


#: The α grid of :func:`smallest_certified_alpha`: 0.5 % steps up to 10 %, then 1 % steps up to 50 %.
ALPHA_STEPS: tuple[float, ...] = tuple(round(0.005 * i, 3) for i in range(1, 21)) + tuple(
    round(0.01 * i, 2) for i in range(11, 51)
)


def smallest_certified_alpha(
    con, run_id: str, question: str, options: ThresholdOptions, alphas: Sequence[float] = ALPHA_STEPS
) -> float | None:
    """The smallest α of ``alphas`` at which ``question`` of ``run_id`` certifies a rule (other settings
    as ``options``), or ``None`` when none of them does.

    Certification is monotone in α (the fixed-sequence order does not depend on α), so this is the edge
    of :func:`frontier_for_run` over ``alphas``, found by bisection on one prepared question: about
    log2(len(alphas)) + 1 selections instead of one per α."""
    from dataclasses import replace

    from workbench.thresholds.choose import select_prepared

    grid = sorted(float(a) for a in alphas)
    if not grid:
        return None
    opts = replace(options, objective="guarantee")
    prep, keys, _ = streamed_prepare(con, run_id, question, opts)

    def certifies(i: int) -> bool:
        sel = select_prepared(prep, replace(opts, alpha=grid[i]), keys)
        return bool(sel.certified and sel.feasible)

    if not certifies(len(grid) - 1):
        return None
    lo, hi = -1, len(grid) - 1  # grid[hi] certifies; grid[lo] does not (lo = -1: below the grid)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if certifies(mid):
            hi = mid
        else:
            lo = mid
    return grid[hi]


def plan_labels_for_run(
    con,
    run_id: str,
    question: str,
    options: ThresholdOptions | None = None,
    *,
    pilot_split: str = "calibration",
    pilot_size: int | None = None,
    unlabelled_splits: Sequence[str] = (),
    target_coverage: float | None = None,
    power: float = 0.8,
    confidence: float = 0.9,
    n_draws: int = 200,
    max_labels: int = 20000,
    sizes: Sequence[int] | None = None,
    errors: str = "logistic",
    seed: int = 0,
    reporter: Reporter | None = None,
):
    """How many calibration labels ``question`` of ``run_id`` needs to certify at ``options.alpha``.

    The pilot is the run's labelled items on ``pilot_split`` (answered or failed; with ``pilot_size``,
    a seeded random subset of that many, listed in ``plan.pilot["item_ids"]``); the model's answers on
    the unlabelled items of ``pilot_split`` and of ``unlabelled_splits`` widen the simulated
    population. See :func:`workbench.thresholds.planning.plan_labels_from_pilot` for the simulation.

    Returns
    -------
    LabelPlan
    """
    from workbench.errors import OptionError
    from workbench.store.runs import load_answers
    from workbench.thresholds.planning import plan_labels_from_pilot

    options = options if options is not None else ThresholdOptions()
    ans = load_answers(con, run_id, question, splits=[pilot_split])
    labelled = ans.labels >= 0
    pilot = ans.select(labelled)
    chosen = None
    if pilot_size is not None:
        if pilot_size < 1:
            raise OptionError(f"pilot_size must be at least 1, got {pilot_size}", parameter="pilot_size")
        if pilot_size < len(pilot.labels):
            pick = np.zeros(len(pilot.labels), dtype=bool)
            pick[np.random.default_rng([seed, 3]).choice(len(pilot.labels), pilot_size, replace=False)] = True
            pilot = pilot.select(pick)
            chosen = [str(i) for i in pilot.item_ids]
    unlabelled = [ans.probs[~labelled & ~ans.failed]]
    for split in unlabelled_splits:
        if split == pilot_split:
            continue
        other = load_answers(con, run_id, question, splits=[split])
        unlabelled.append(other.probs[(other.labels < 0) & ~other.failed])
    extra = np.concatenate(unlabelled) if any(len(u) for u in unlabelled) else None
    plan = plan_labels_from_pilot(
        pilot.probs,
        pilot.labels,
        ans.qtype,
        options,
        question=question,
        option_ids=list(ans.option_ids),
        target_coverage=target_coverage,
        power=power,
        confidence=confidence,
        n_draws=n_draws,
        max_labels=max_labels,
        sizes=sizes,
        seed=seed,
        unlabelled_probs=extra,
        errors=errors,
        reporter=reporter,
    )
    plan.pilot["split"] = pilot_split
    plan.pilot["run_id"] = run_id
    if chosen is not None:
        plan.pilot["item_ids"] = chosen
    return plan


def threshold_slices_for_run(
    con,
    run_id: str,
    result: ThresholdResult,
    column: str,
) -> dict:
    """Coverage and error of ``result``'s rule per slice of ``column`` on the test split.

    ``column`` is an item metadata column (``datasets import --meta-column``) or ``state_length``;
    returns :func:`workbench.thresholds.evaluate.evaluate_rule_by_slice`'s report with ``column`` added
    (a warning names each slice whose error interval lies entirely above α).
    """
    from workbench.store.runs import load_answers
    from workbench.thresholds.evaluate import evaluate_rule_by_slice
    from workbench.workflows.evaluation import slice_values

    test = load_answers(con, run_id, result.question, splits=["test"])
    values, order = slice_values(con, test, column)
    return {"column": column, "split": "test", **evaluate_rule_by_slice(result, test, values, order=order)}


def cascade_for_runs(
    con,
    run_ids: Sequence[str],
    question: str,
    options=None,
):
    """The cheapest certified configuration of ``run_ids`` (in stage order) for ``question``: a cascade
    of them or one of them alone, each priced as its own model.

    Loads each stage's answers of the calibration and test splits and chooses with
    :func:`workbench.thresholds.cascade.choose_cascade` (one Learn-then-Test family holding every single
    stage and every cascade, each stage recalibrated as ``choose_thresholds`` does); the test figures are
    on the items every stage answered.

    Returns
    -------
    CascadeResult
        ``configurations``: every structure's cheapest certified configuration; ``singles`` the
        single-stage ones (certified in the same family), with calibration and test cost and coverage.
    """
    from workbench.store.runs import get_run, load_answers
    from workbench.thresholds.cascade import CascadeOptions, choose_cascade

    opts = options if options is not None else CascadeOptions()
    ids = [str(get_run(con, r)["run_id"]) for r in run_ids]
    cal = [load_answers(con, r, question, splits=["calibration"]) for r in ids]
    test = [load_answers(con, r, question, splits=["test"]) for r in ids]
    return choose_cascade(cal, test, opts)
