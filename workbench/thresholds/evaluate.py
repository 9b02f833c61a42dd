"""Judge a chosen rule on held-out items: realised error, coverage, review load, confusion with review.

The rule is applied through its own ``decide`` (the same code the policy runtime uses), not through
the surface, so the test figures describe what production will do.
"""

from __future__ import annotations

import numpy as np

from workbench.thresholds.bounds import clopper_pearson, wilson
from workbench.thresholds.rules import ChoiceRule, NoulRule, Rule, RuleCoordinates


def confusion_with_review(labels: np.ndarray, accepted: np.ndarray, option: np.ndarray, n_options: int) -> np.ndarray:
    """Confusion matrix with a review column.

    Parameters
    ----------
    labels : ndarray of shape (n_items,), int in [0, K)
    accepted : ndarray of shape (n_items,), bool
    option : ndarray of shape (n_items,), int
        Accepted option (ignored where not accepted).
    n_options : int

    Returns
    -------
    matrix : ndarray of shape (K, K + 1), int
        ``[true, accepted option]`` counts; the last column counts items routed to review.
    """
    labels = np.asarray(labels).astype(int)
    col = np.where(accepted, np.asarray(option).astype(int), n_options)
    cell = labels * (n_options + 1) + col
    return np.bincount(cell, minlength=n_options * (n_options + 1)).reshape(n_options, n_options + 1)


def rate_interval(k: int, n: int, how: str, confidence: float) -> dict:
    """``k / n`` with its ``how`` (``clopper-pearson`` or ``wilson``) interval, as a JSON-ready dict."""
    lo, hi = (clopper_pearson if how == "clopper-pearson" else wilson)(k, n, confidence)
    return {
        "value": (k / n) if n else None,
        "low": lo if n else None,
        "high": hi if n else None,
        "k": int(k),
        "n": int(n),
        "interval": how,
        "confidence": confidence,
    }


def evaluate_rule(
    rule: Rule,
    probs: np.ndarray,
    labels: np.ndarray,
    *,
    option_ids: list[str] | None = None,
    confidence: float = 0.95,
) -> dict:
    """Test-split figures of ``rule``.

    Parameters
    ----------
    rule : ChoiceRule | NoulRule | ScoreRule
    probs : ndarray of shape (n_items, n_options)
        NaN rows are failures (always routed to the fallback).
    labels : ndarray of shape (n_items,), int in [0, K)

    Returns
    -------
    report : dict
        ``error`` (Clopper–Pearson), ``coverage`` and ``review_rate`` (Wilson) with intervals,
        ``confusion`` (K × (K+1), last column = review) and counts.
    """
    counts = rule_counts(rule, probs, labels)
    return rule_report_from_counts(counts, option_ids=option_ids, confidence=confidence)


def rule_counts(rule: Rule, probs: np.ndarray, labels: np.ndarray) -> dict:
    """What :func:`evaluate_rule` reports, as sums over rows: ``confusion`` (K, K+1) int, ``n_items``
    and ``n_failed``. Counts of row batches add up (:func:`add_rule_counts`), so a streamed test
    split gives the same report as the whole matrix."""
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    dec = rule.decide(probs)
    return {
        "confusion": confusion_with_review(labels, dec.accepted, dec.option, probs.shape[1]),
        "n_items": int(probs.shape[0]),
        "n_failed": int((~np.isfinite(probs).all(axis=1)).sum()),
    }


def add_rule_counts(a: dict | None, b: dict) -> dict:
    """The :func:`rule_counts` of two row sets together (``a`` may be None)."""
    if a is None:
        return b
    return {key: a[key] + b[key] for key in ("confusion", "n_items", "n_failed")}


def accepted_at(rule: Rule, coords: RuleCoordinates) -> np.ndarray:
    """``rule.decide(probs).accepted`` from the :func:`~workbench.thresholds.rules.rule_coordinates`
    of those ``probs`` (the same comparisons; per-class overrides looked up by the predicted option),
    so a page can keep three small arrays per item instead of the probability matrix."""
    if isinstance(rule, NoulRule):
        return (coords.x >= rule.tau_yes) & (coords.y >= -rule.tau_no)
    top = np.maximum(np.asarray(coords.predicted), 0)  # failures: x = y = -inf, never accepted
    n_options = max(int(top.max(initial=0)), *(int(k) for k in rule.per_class), 0) + 1
    tau, margin = ChoiceRule(rule.tau, rule.margin, rule.per_class).thresholds_for(top, n_options)
    return (coords.x >= tau) & (coords.y >= margin)


def evaluate_rule_at(
    rule: Rule,
    coords: RuleCoordinates,
    labels: np.ndarray,
    *,
    n_options: int,
    option_ids: list[str] | None = None,
    confidence: float = 0.95,
) -> dict:
    """:func:`evaluate_rule` from per-item coordinates instead of probabilities: the same dict,
    figure for figure (``coords`` = :func:`~workbench.thresholds.rules.rule_coordinates` of the
    probabilities ``evaluate_rule`` would get; failures have ``predicted == -1``)."""
    labels = np.asarray(labels).astype(int)
    predicted = np.asarray(coords.predicted)
    counts = {
        "confusion": confusion_with_review(labels, accepted_at(rule, coords), predicted, n_options),
        "n_items": int(len(labels)),
        "n_failed": int((predicted < 0).sum()),
    }
    return rule_report_from_counts(counts, option_ids=option_ids, confidence=confidence)


def rule_report_from_counts(counts: dict, *, option_ids: list[str] | None = None, confidence: float = 0.95) -> dict:
    """:func:`evaluate_rule`'s report from :func:`rule_counts`."""
    conf = np.asarray(counts["confusion"])
    k = conf.shape[0]
    n_total = int(counts["n_items"])
    acc = int(conf[:, :k].sum())
    wrong = acc - int(np.trace(conf[:, :k]))
    return {
        "n_items": n_total,
        "n_accepted": acc,
        "n_errors": wrong,
        "n_review": n_total - acc,
        "n_failed": int(counts["n_failed"]),
        "error": rate_interval(wrong, acc, "clopper-pearson", confidence),
        "coverage": rate_interval(acc, n_total, "wilson", confidence),
        "review_rate": rate_interval(n_total - acc, n_total, "wilson", confidence),
        "confusion": {
            "labels": list(option_ids or [str(i) for i in range(k)]),
            "columns": list(option_ids or [str(i) for i in range(k)]) + ["review"],
            "matrix": conf.tolist(),
        },
    }


def error_above_alpha(report: dict | None, alpha: float) -> bool:
    """True when the error interval of an :func:`evaluate_rule` report lies entirely above ``alpha``."""
    low = ((report or {}).get("error") or {}).get("low")
    return low is not None and low > alpha


def error_above_alpha_sentence(where: str, report: dict, alpha: float, confidence: float) -> str:
    """The one warning, in the same words on every surface, for an error interval entirely above α
    (a slice of the test split, or the whole of it: then the test split contradicts the certificate)."""
    err = report["error"]
    return (
        f"{where}: error among accepted {err['value']:.1%} ({int(round(100 * confidence))}% interval "
        f"[{err['low']:.1%}, {err['high']:.1%}], {report['n_errors']}/{report['n_accepted']}) lies entirely "
        f"above α = {alpha:g}"
    )


def certificate_contradicted_sentence(where: str, report: dict, alpha: float, delta: float, confidence: float) -> str:
    """The warning every surface (thresholds, cascade, compare, the gate, the UI) prints when a certified
    rule's error interval on a whole test split lies entirely above α: the slice sentence plus why."""
    return (
        error_above_alpha_sentence(where, report, alpha, confidence)
        + f", although the rule is certified at α = {alpha:g}, δ = {delta:g} on the calibration split: the test"
        " split may differ from the calibration split (shift), or this is the ≤ δ chance the certificate allows"
    )


def evaluate_rule_by_slice(
    result,
    test,
    values: np.ndarray,
    *,
    order: list[str] | None = None,
) -> dict:
    """Test-split figures of a chosen rule on each slice of the items (the same rule, calibrator and
    :func:`evaluate_rule` as the whole test split, on each slice's rows).

    Parameters
    ----------
    result : ThresholdResult
        From :func:`workbench.thresholds.choose.choose_thresholds` (its rule and fitted calibrator).
    test : RunAnswers
        The test answers ``result`` was judged on.
    values : ndarray of shape (n_items,), object
        Slice value of each row of ``test`` (None = missing, :data:`workbench.metrics.slices.MISSING`).
    order : list of str, optional
        Display order of the values (others follow, sorted).

    Returns
    -------
    report : dict
        ``alpha``, ``slices`` (one dict per slice: ``slice``, ``n_items``, ``n_accepted``, ``n_errors``,
        ``coverage`` (Wilson) and ``error`` (Clopper–Pearson) intervals, ``error_above_alpha``: the
        error interval lies entirely above α) and ``warnings`` (one sentence per such slice). With
        misroute costs α is in cost units, so no error-rate comparison is made (``None``).
    """
    from workbench.metrics.recalibrate import apply_calibrator
    from workbench.metrics.slices import slice_groups

    labelled = test.labels >= 0  # as the whole-split figures: labelled items, failures never accepted
    probs = apply_calibrator(result.fitted_calibrator, test.probs[labelled])
    labels = test.labels[labelled]
    vals = np.asarray(values, dtype=object)[labelled]
    opts = result.options
    alpha = float(opts.alpha)
    comparable = opts.costs is None
    rows, warnings = [], []
    for value, mask in slice_groups(vals, order):
        fig = evaluate_rule(
            result.rule, probs[mask], labels[mask], option_ids=result.option_ids, confidence=opts.confidence
        )
        low = fig["error"]["low"]
        above = (low is not None and low > alpha) if comparable else None
        rows.append(
            {
                "slice": value,
                "n_items": fig["n_items"],
                "n_accepted": fig["n_accepted"],
                "n_errors": fig["n_errors"],
                "n_failed": fig["n_failed"],
                "coverage": fig["coverage"],
                "error": fig["error"],
                "error_above_alpha": above,
            }
        )
        if above:
            warnings.append(
                error_above_alpha_sentence(f"{result.question}, slice {value!r}", fig, alpha, opts.confidence)
            )
    return {"alpha": alpha, "confidence": opts.confidence, "slices": rows, "warnings": warnings}
