"""First-paint figures of a large run from one DuckDB query over the store (:mod:`workbench.store.aggregates`).

The same figures as the library's in-memory and streamed paths, finished by the library's own functions:

- :func:`point_report`: the point estimates a report gets from sums (accuracy, macro F1, log loss,
  Brier, top-label ECE/MCE on equal-width bins), the top-label reliability curve, the confusion matrix
  and the row counts, as a :class:`~workbench.metrics.report.QuestionReport` with ``n_boot = 0``
  (``params["aggregate"]`` says the other metrics come from the full report);
- :func:`grid_points`: each labelled item's rule coordinates (from the two floats stored with its
  probabilities, as :func:`workbench_runtime.rules.rule_coordinates` computes them) and the threshold
  grid: acceptance, the surface, the certificate and the test figures of any rule;
- :func:`certified_from_points`: ``workbench thresholds --calibrate none``'s result (guarantee objective)
  from those points, as :func:`workbench.workflows.thresholds.streamed_thresholds` builds it.

They are a stored run's (:class:`~workbench.store.sources.StoreSource`) own way to answer those figures: each
takes an :class:`~workbench.answers.AnswerSource` and returns None when the source cannot answer from stored
summaries (answers in memory, a calibrated view whose probabilities are computed on read, a question type not
handled here, rows without stored summaries): callers use the library's batched path then. They stay beside
that path because at a million items they paint the UI's first figures several times faster than a pass over
every probability (``bench/scale_ui.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.store.sources import StoreSource

#: Question types whose point report is computed here (other types: the streamed report).
REPORT_TYPES = ("choice",)
#: Question types whose grid points are computed here.
GRID_TYPES = ("choice", "noul")


def point_report(source: Any, question: str, split: str, *, n_bins: int = 15, level: float = 0.95):
    """The report's sum-based point estimates of one split of ``source`` (see the module doc), or None."""
    from workbench.metrics import reliability as rel
    from workbench.metrics.bootstrap import Interval
    from workbench.metrics.confusion import confusion_result, macro_f1_from_matrix
    from workbench.metrics.report import QuestionReport
    from workbench.metrics.scores import LOG_LOSS_FLOOR
    from workbench.store import aggregates as ag

    if not isinstance(source, StoreSource) or source.question_type(question) not in REPORT_TYPES:
        return None
    con, run_id = source.con, source.run_id
    if not ag.summaries_trusted(con, run_id):
        return None
    edges = rel.bin_edges(np.zeros(0), n_bins, "uniform")
    s = ag.metric_sums(con, run_id, question, split, edges=edges, log_loss_floor=LOG_LOSS_FLOOR)
    if s["n_untrusted"]:
        return None
    opts, n = list(s["option_ids"]), int(s["n_labelled"])
    total = int(s["n"])
    counts = {
        "n_attempted": total,
        "n_answered": total - int(s["n_failed"]),
        "n_failed": int(s["n_failed"]),
        "n_labelled": n,
        "n_unlabelled": int(s["n_unlabelled"]),
        "n_excluded": 0,
        "coverage": (total - int(s["n_failed"])) / total if total else float("nan"),
        "failures_by_kind": s["failures_by_kind"],
    }
    params = {"n_bins": n_bins, "n_boot": 0, "seed": 0, "level": level, "aggregate": True}
    report = QuestionReport(question, s["qtype"], opts, counts, params=params)
    if n == 0:
        return report
    k = len(opts)
    cm = s["confusion"]
    cells = np.repeat(np.arange(k * k), cm.reshape(-1))  # the labelled items' (label, arg-max) pairs
    report.confusion = confusion_result(cells // k, cells % k, opts)
    stats = rel.BinStats(edges, s["bins"][0], s["bins"][1], s["bins"][2])
    metrics = {
        "accuracy": s["n_correct"] / n,
        "macro_f1": float(macro_f1_from_matrix(np.asarray(cm, dtype=float))),
        "log_loss": s["sum_log_loss"] / n,
        "brier": s["sum_brier"] / n,
        "ece_uniform": rel.ece_from_stats(stats),
        "mce_uniform": rel.mce_from_stats(stats),
    }
    report.metrics = {name: Interval(float(v), level=level) for name, v in metrics.items()}
    report.curves = {"top_label_uniform": rel.curve_from_stats(stats, "uniform", "top-label")}
    return report


@dataclass(frozen=True)
class GridPoints:
    """Labelled items of one split (item-id order): their rule coordinates
    (:class:`~workbench.thresholds.rules.RuleCoordinates`, exact) and labels, with the threshold grid."""

    qtype: str
    option_ids: tuple[str, ...]
    coords: Any
    labels: np.ndarray
    x_grid: np.ndarray
    y_grid: np.ndarray


def grid_points(source: Any, question: str, splits: tuple[str, ...], *, grid: int = 100):
    """{split: :class:`GridPoints`} of ``source`` from one query, or None when the source does not qualify."""
    from workbench.store import aggregates as ag
    from workbench.thresholds.rules import RuleCoordinates
    from workbench.thresholds.surface import default_grids

    qtype = source.question_type(question) if isinstance(source, StoreSource) else None
    if qtype not in GRID_TYPES:
        return None
    con, run_id = source.con, source.run_id
    if not ag.summaries_trusted(con, run_id):
        return None
    gx, gy = default_grids(qtype, grid)
    parts = ag.grid_points(con, run_id, question, list(splits))
    if any(p["n_untrusted"] for p in parts.values()):
        return None
    names = ("tau_yes", "tau_no") if qtype == "noul" else ("tau", "margin")
    out = {}
    for split, p in parts.items():
        out[split] = GridPoints(
            qtype, tuple(p["option_ids"]), RuleCoordinates(p["predicted"], p["x"], p["y"], *names), p["labels"], gx, gy
        )
    return out


def certified_from_points(
    question: str, calibration: GridPoints, test: GridPoints | None, options: Any, *, surface: Any = None
):
    """``thresholds_for_run(con, run, question, options)`` of a run with ``options.calibrate == "none"``
    and the guarantee objective (not class-conditional), from its :class:`GridPoints` (None for other
    options).

    ``surface``: the calibration points' risk–coverage surface if the caller has drawn it (see
    :func:`workbench.thresholds.choose.prepare_from_coordinates`, which checks that it fits)."""
    from workbench.metrics.recalibrate import fit_calibrator
    from workbench.thresholds.choose import check_question, finish_result, prepare_from_coordinates, select_prepared
    from workbench.thresholds.evaluate import evaluate_rule_at

    if options.calibrate not in ("none", "identity") or options.objective != "guarantee" or options.abstain_options:
        return None
    if options.class_conditional:  # needs the critical options' probabilities, which grid points do not hold
        return None
    if options.level != "top":
        return None
    opt_ids = list(calibration.option_ids)
    k = len(opt_ids)
    labels = np.asarray(calibration.labels, dtype=np.int64)
    abstain = check_question(question, calibration.qtype, opt_ids, len(labels), options)
    calibrator = fit_calibrator("none", np.zeros((0, k)), np.zeros(0, int))
    coords = _int64(calibration.coords)
    prep = prepare_from_coordinates(
        question, calibration.qtype, opt_ids, abstain, calibrator, 0, coords, labels, options, surface=surface
    )
    sel = select_prepared(prep, options)  # the guarantee objective: no API cost is read
    result = finish_result(prep, sel, options, question=question, n_calibration=len(labels))
    if test is not None and len(test.labels):
        result.attach_test(
            evaluate_rule_at(
                result.rule,
                _int64(test.coords),
                np.asarray(test.labels, dtype=np.int64),
                n_options=k,
                option_ids=opt_ids,
                confidence=options.confidence,
            )
        )
    return result


def _int64(coords: Any) -> Any:
    from dataclasses import replace

    return replace(coords, predicted=np.asarray(coords.predicted, dtype=np.int64))
