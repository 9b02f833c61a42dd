"""Compare runs (provider × schema variant) on the same items, against a chosen baseline.

For every run and question, on the comparison split (default ``test``):

- headline metrics with bootstrap intervals (accuracy, macro-F1, log loss, Brier) and top-label ECE,
  all computed by :mod:`workbench.metrics`;
- cost per 1,000 items (unknown when the provider has no price — never 0) and latency p50/p95 of
  the calls;
- coverage and error at the policy chosen by the experiment's threshold objective (on the
  calibration split, judged on the comparison split) via :func:`workbench.thresholds.choose.choose_thresholds`;
- item-paired differences against the baseline run on the items both answered: paired bootstrap
  intervals and p-values of each metric difference (:func:`workbench.metrics.bootstrap.paired_bootstrap`)
  and McNemar's test on top-choice correctness (:func:`workbench.metrics.bootstrap.mcnemar`).

Runs are named by run id, by experiment name (its latest run of every pair), or by an experiment file.

Every figure is computed from a few numbers per answered, labelled item (:class:`CompareItems`:
correctness, confidence, log loss, Brier, RPS, P(yes), the chosen rule's decisions), built as each run
is read in batches (:func:`stream_sides`) at every size: one path, and no run is ever held as an (n, k)
matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.answers import RunAnswers
from workbench.errors import NotFoundError, WorkbenchError
from workbench.metrics import registry
from workbench.metrics.bootstrap import (
    bootstrap_many,
    bootstrap_shared,
    mcnemar,
    paired_bootstrap,
    paired_from_replicates,
)
from workbench.metrics.confusion import macro_f1_from_matrix
from workbench.metrics.reliability import calibration_error, top_label
from workbench.metrics.scores import expected_level, item_brier, item_log_loss, item_rps, weighted_mean
from workbench.schema import option_ids
from workbench.store.runs import (  # the SQL of the readers: compare ranks and pairs ids in DuckDB
    answer_source,
    get_run,
    iter_answer_batches,
    load_answer_keys,
    load_stored_schema,
    paired_positions,
    shared_keys,
    split_cost_figures,
)
from workbench.thresholds.options import ThresholdOptions


def experiment_options(objective: Any) -> ThresholdOptions:
    """ThresholdOptions of an experiment file's ``objective:`` (fields it leaves out keep the defaults)."""
    if objective is None:
        return ThresholdOptions()
    set_fields = getattr(objective, "model_fields_set", None)
    values = {k: getattr(objective, k) for k in (set_fields if set_fields is not None else ())}
    rename = {"kind": "objective", "max_error": "alpha"}
    return ThresholdOptions(
        **{rename.get(k, k): v for k, v in values.items() if k != "calibration_split" and v is not None}
    )


# -- which runs ------------------------------------------------------------------------------------
def resolve_runs(con, names: list[str]) -> tuple[list[dict], Any]:
    """Run rows for run ids, experiment names or experiment files; plus the experiment (or None)."""
    from workbench.workflows.experiments import experiment_runs, load_experiment

    runs: list[dict] = []
    experiment = None
    for name in names:
        if name.endswith((".yaml", ".yml")) and Path(name).exists():
            experiment = load_experiment(name)
            rows = experiment_runs(con, experiment.name)
        else:
            try:
                rows = [get_run(con, name)]
            except NotFoundError:
                try:
                    rows = experiment_runs(con, name)
                except NotFoundError:
                    raise NotFoundError(
                        f"{name!r} is neither a run id, a run name nor an experiment", hint="see `workbench runs list`"
                    ) from None
                experiment = experiment or _experiment_by_name(name)
        for r in rows:
            full = get_run(con, r["run_id"])
            if full["run_id"] not in {x["run_id"] for x in runs}:
                runs.append(full)
    if not runs:
        raise NotFoundError("no runs to compare", hint="name run ids or an experiment")
    datasets = {(r["dataset"], int(r["dataset_version"])) for r in runs}
    if len(datasets) > 1:
        raise WorkbenchError(
            "runs are on different datasets or dataset versions: "
            + ", ".join(f"{d} v{v}" for d, v in sorted(datasets)),
            hint="compare runs of one dataset version (item-paired)",
        )
    return runs, experiment


def _experiment_by_name(name: str):
    from workbench.workflows.experiments import load_experiment

    for folder in (Path("experiments"), Path(__file__).resolve().parents[1] / "experiments"):
        path = folder / f"{name}.yaml"
        if path.exists():
            try:
                exp = load_experiment(path)
            except WorkbenchError:
                continue
            if exp.name == name:
                return exp
    return None


def label(run: dict) -> str:
    """``provider@variant`` (or ``provider@run_id`` outside an experiment)."""
    return f"{run['provider']}@{run.get('variant') or run['run_id']}"


def _pick_baseline(runs: list[dict], baseline: str | None, experiment: Any) -> dict:
    if baseline is None and experiment is not None and experiment.baseline is not None:
        baseline = f"{experiment.baseline.provider}@{experiment.baseline.variant}"
    if baseline is None:
        return runs[0]
    for r in runs:
        if baseline in (r["run_id"], r.get("name"), label(r)):
            return r
    raise NotFoundError(
        f"baseline {baseline!r} is not among the compared runs",
        hint="use a run id or PROVIDER@VARIANT of: " + ", ".join(label(r) for r in runs),
    )


# -- per-run figures -------------------------------------------------------------------------------
@dataclass
class CompareItems:
    """Per-item figures of one run's answered, labelled rows (item-id order): all compare's metrics read.

    Built batch by batch from a streamed run (:func:`stream_sides`, rows written at their positions).
    ``accepted``/``option`` are the decisions of the run's chosen rule (after its calibrator), when any.
    Options are int32 (every figure counts them; none needs 64 bits). The items hold no ids: they stay
    in DuckDB, which pairs runs by position (:func:`_pairs`).
    """

    labels: np.ndarray  # (m,) int32
    pred: np.ndarray  # (m,) int32, arg-max option
    conf: np.ndarray  # (m,) float, top-label confidence
    log_loss: np.ndarray  # (m,) float
    brier: np.ndarray  # (m,) float: Σ over options; yes/no questions: of P(yes) (as the report's)
    rps: np.ndarray | None = None  # score questions
    abs_level_error: np.ndarray | None = None  # score questions: |E[level] − label|
    p_yes: np.ndarray | None = None  # yes/no questions: P(option 0)
    accepted: np.ndarray | None = None  # (m,) bool
    option: np.ndarray | None = None  # (m,) int32

    _ARRAYS = ("labels", "pred", "conf", "log_loss", "brier", "rps", "abs_level_error", "p_yes")

    def take(self, index: np.ndarray) -> CompareItems:
        """The items at ``index`` (positions or a boolean mask), in that order."""
        out: dict[str, Any] = {}
        for f in (*self._ARRAYS, "accepted", "option"):
            out[f] = None if getattr(self, f) is None else getattr(self, f)[index]
        return CompareItems(**out)

    def __len__(self) -> int:
        return len(self.labels)

    @classmethod
    def empty(cls, m: int, qtype: str, with_rule: bool) -> CompareItems:
        def f():
            return np.full(m, np.nan)

        return cls(
            labels=np.full(m, -1, dtype=np.int32),
            pred=np.full(m, -1, dtype=np.int32),
            conf=f(),
            log_loss=f(),
            brier=f(),
            rps=f() if qtype == "score" else None,
            abs_level_error=f() if qtype == "score" else None,
            p_yes=f() if qtype == "noul" else None,
            accepted=np.zeros(m, bool) if with_rule else None,
            option=np.full(m, -1, dtype=np.int32) if with_rule else None,
        )

    def put(self, at: np.ndarray, part: CompareItems) -> None:
        """Write ``part``'s rows at positions ``at``."""
        for f in (*self._ARRAYS, "accepted", "option"):
            mine = getattr(self, f)
            if mine is not None:
                mine[at] = getattr(part, f)


def _items_counted(probs: np.ndarray, labels: np.ndarray, qtype: str, rule=None) -> tuple[CompareItems, dict | None]:
    """(:class:`CompareItems` of answered, labelled rows ``probs`` (m, k), ``labels`` (m,); the rule's
    :func:`~workbench.thresholds.evaluate.rule_counts` of these rows, from the same decisions, None without
    a rule). ``rule``: ``(rule, calibrator dict or None)`` whose decisions are kept (:func:`_decide_counted`)."""
    conf, _ = top_label(probs, labels)
    out = CompareItems(
        labels=np.asarray(labels, dtype=np.int32),
        pred=probs.argmax(axis=1).astype(np.int32),
        conf=conf,
        log_loss=item_log_loss(probs, labels),
        brier=item_brier(probs, labels),
    )
    if qtype == "score":
        out.rps = item_rps(probs, labels)
        out.abs_level_error = np.abs(expected_level(probs) - np.asarray(labels))
    if qtype == "noul":
        out.p_yes = np.asarray(probs[:, 0], dtype=float)
        # a yes/no question's Brier score is that of P(yes), in [0, 1], as the report's (half the two-option sum)
        out.brier = (out.p_yes - (np.asarray(labels) == 0)) ** 2
    counts = None
    if rule is not None:
        from workbench.thresholds.evaluate import confusion_with_review

        dec, n_nonfinite = _decide_counted(rule, probs)
        out.accepted, out.option = np.asarray(dec.accepted, dtype=bool), np.asarray(dec.option, dtype=np.int32)
        k = probs.shape[1]
        counts = {
            "confusion": confusion_with_review(labels, out.accepted, out.option, k),
            "n_items": int(probs.shape[0]),
            "n_failed": n_nonfinite,
        }
    return out, counts


def _with_failed_rows(counts: dict | None, failed_labels: np.ndarray, k: int) -> dict | None:
    """``counts`` of the answered, labelled rows plus the failed labelled rows (labels ``failed_labels``):
    a failure is never accepted (its row is NaN), so it is counted under review, as failed."""
    n = int(failed_labels.size)
    if counts is None:
        counts = {"confusion": np.zeros((k, k + 1), dtype=np.int64), "n_items": 0, "n_failed": 0}
    confusion = counts["confusion"].copy()
    confusion[:, k] += np.bincount(np.asarray(failed_labels, dtype=np.int64), minlength=k)[:k]
    return {"confusion": confusion, "n_items": counts["n_items"] + n, "n_failed": counts["n_failed"] + n}


def _item_stats(items: CompareItems, k: int, qtype: str = "choice"):
    """Bootstrap-able headline metrics of ``items`` (weights = resampling counts); ordinal ones for ``score``.

    The same sums as :func:`workbench.metrics.scores.accuracy`, ``log_loss``, ``brier_score``, … on
    the matrix the items came from."""
    stats = _items_stats([(items, k, qtype)])
    return lambda w: stats(w)[0]


def _items_stats(sets: Sequence[tuple[CompareItems, int, str]]):
    """:func:`_item_stats` of several runs' items (``(items, k, qtype)`` each) as one function of the
    resampling counts ``w`` returning one dict per run (for :func:`~workbench.metrics.bootstrap.bootstrap_shared`):
    Σw is summed once, and runs whose items fall in the same confusion cells (a recalibration that
    keeps every arg-max) share one weighted count of them. Each dict holds exactly the numbers
    ``_item_stats`` of that run gives."""
    # confusion cell of each item (as :func:`~workbench.metrics.confusion.confusion_matrix` numbers
    # them): one bincount per replicate, no per-replicate casts of the int32 labels and predictions
    cells: list[np.ndarray] = []
    same_as: list[int] = []  # per run: the first run with the same cells (itself when none)
    for i, (items, k, _) in enumerate(sets):
        cell = items.labels.astype(np.int64) * (k + 1) + items.pred
        same_as.append(
            next(
                (j for j in range(i) if sets[j][1] == k and np.array_equal(cells[j], cell)),
                i,
            )
        )
        cells.append(cells[same_as[i]] if same_as[i] != i else cell)
    # every run's per-item figures as the rows of one matrix: a replicate's weighted sums are one
    # matrix-vector product (each row's Σ x·w, one read of w) instead of a dot product per figure
    names: list[list[str]] = []
    rows: list[np.ndarray] = []
    # the metrics of the top choice's confidence ranking (AURC, …), from the table of metrics
    per_item = [registry.per_item_stats(items, qtype, k) for items, k, qtype in sets]
    for items, k, qtype in sets:
        # the metrics that are means of a per-item figure, as the table of metrics declares them
        got = {name: getattr(items, per) for name, per in registry.mean_metrics(qtype, k).items()}
        names.append(list(got))
        rows.extend(got.values())
    n_rows = len(sets[0][0].labels) if sets else 0
    matrix = np.empty((len(rows), n_rows))
    for r, x in enumerate(rows):
        matrix[r] = x

    def stats(w: np.ndarray | None) -> list[dict[str, float]]:
        # w: resampling counts of n draws (integers), so Σw is exactly n
        total = float(n_rows) if w is not None else None
        sums = matrix @ w if w is not None and n_rows else None
        # per first run of each set of confusion cells: (accuracy, macro-F1), the same for every run sharing them
        counted: dict[int, dict[str, float]] = {}
        out = []
        r = 0
        for i, (items, k, _) in enumerate(sets):
            j = same_as[i]
            if j not in counted:
                counts = np.bincount(cells[j], weights=w, minlength=k * (k + 1)).reshape(k, k + 1)[:, :k]
                n = len(items.labels)
                counted[j] = {
                    # hits are the confusion matrix's diagonal: with integer resampling counts, exactly Σ w·correct
                    "accuracy": float(np.trace(counts) / (total if total is not None else n)) if n else float("nan"),
                    "macro_f1": macro_f1_from_matrix(counts.astype(float)),
                }
            fig = dict(counted[j])
            for name in names[i]:
                if sums is None or total is None:
                    fig[name] = weighted_mean(rows[r], None)
                else:
                    fig[name] = float(sums[r] / total)
                r += 1
            out.append(fig | per_item[i](w))
        return out

    return stats


def _item_point_metrics(items: CompareItems, qtype: str) -> dict[str, float]:
    """Metrics without weights support: top-label ECE (15 equal-width bins) for all; ROC-AUC and
    average precision of P(yes) for noul."""
    from workbench.metrics.scores import average_precision, roc_auc

    out = {"ece": calibration_error((items.pred == items.labels).astype(float), items.conf, 15, "uniform", "l1")}
    if qtype == "noul":
        assert items.p_yes is not None
        out["roc_auc"] = roc_auc(items.labels == 0, items.p_yes)
        out["average_precision"] = average_precision(items.labels == 0, items.p_yes)
    return out


def _run_costs(con, run: dict, split: str, memo: dict | None = None) -> dict:
    """Items, calls, cost per 1,000 items and latency of ``run``'s rows on ``split``; ``memo``: figures
    already read, by the rows they were read from (a calibrated view's are its run's rows)."""
    key = (answer_source(con, run)[0], run["dataset"], int(run["dataset_version"]), split)
    if memo is not None and key in memo:
        return dict(memo[key])
    out = _read_costs(con, run, split)
    if memo is not None:
        memo[key] = dict(out)
    return out


def _read_costs(con, run: dict, split: str) -> dict:
    n_items, cost, n_unpriced, p50, p95, n_calls = split_cost_figures(con, run, split)
    known = n_items and cost is not None and n_unpriced == 0
    return {
        "n_items": int(n_items or 0),
        "n_calls": int(n_calls or 0),
        "cost_per_1000_items": (float(cost) / n_items * 1000.0) if known else None,
        "cost_known": bool(known),
        "latency_p50_ms": p50,
        "latency_p95_ms": p95,
    }


def _policy_at_options(
    con,
    run_id: str,
    question: str,
    options: ThresholdOptions,
    calibration_split: str,
    *,
    test_from_side: bool = False,
) -> dict:
    """Coverage and error on the comparison split at the rule ``options`` choose on the calibration split.

    The same call as ``workbench thresholds`` (:func:`workbench.workflows.thresholds.thresholds_for_run`), so
    with the same options the figures are the same as there. ``test_from_side``: the rule is chosen
    without reading the test split; its test figures are then counted in the comparison's own pass
    over that split (:func:`_policy_test`, the same counts as ``thresholds_for_run``'s test pass) and
    the result is kept under ``"_result"`` until then.
    """
    from workbench.workflows.thresholds import thresholds_for_run

    try:
        result = thresholds_for_run(
            con,
            run_id,
            question,
            options,
            calibration_split=calibration_split,
            test_split=None if test_from_side else "test",
        )
    except WorkbenchError as exc:
        return {"not_chosen": str(exc)}
    out = _policy_figures(result, options)
    if test_from_side:
        out["_result"] = result
    return out


def _policies(
    con,
    runs: list[dict],
    question: str,
    options: ThresholdOptions,
    calibration_split: str,
    *,
    test_from_side: bool,
) -> list[dict]:
    """:func:`_policy_at_options` of each run; runs that read the same answer rows (a run and
    its calibrated views) are prepared together, one pass of those rows serving all
    (:func:`workbench.workflows.thresholds.streamed_thresholds_many`: each run's result is the one it gets alone)."""
    from workbench.workflows.thresholds import streamed_thresholds_many

    out: list[dict | None] = [None] * len(runs)
    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(_read_key(con, run), []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        try:
            results = streamed_thresholds_many(
                con,
                [runs[i]["run_id"] for i in members],
                question,
                options,
                calibration_split,
                None if test_from_side else "test",
            )
        except WorkbenchError:
            continue  # each run alone: each gets its own error
        for i, result in zip(members, results, strict=True):
            fig = _policy_figures(result, options)
            if test_from_side:
                fig["_result"] = result
            out[i] = fig
    return [
        fig
        if fig is not None
        else _policy_at_options(con, run["run_id"], question, options, calibration_split, test_from_side=test_from_side)
        for fig, run in zip(out, runs, strict=True)
    ]


def _policy_figures(result, options: ThresholdOptions) -> dict:
    """What compare reports of a :class:`~workbench.thresholds.result.ThresholdResult` (test figures
    from ``result.test``), with the rule and calibrator under ``"_rule"`` / ``"_calibrator"``."""
    t = result.test or {}
    return {
        "objective": options.objective,
        "certified": result.certified,
        "warnings": result.warnings,
        "feasible": result.selection.feasible,
        "settings": options.settings(),
        "rule": result.rule_dict(),
        "coverage": t.get("coverage"),
        "error": t.get("error"),
        "n_accepted": t.get("n_accepted"),
        "n_items": t.get("n_items"),
        "calibration_size_needed": result.needed,
        "_rule": result.rule,
        "_calibrator": result.calibrator,
    }


def _policy_test(result, options: ThresholdOptions, counts: dict | None) -> dict:
    """:func:`_policy_figures` of ``result`` judged on the test split from the side's rule counts
    (:func:`~workbench.thresholds.evaluate.rule_counts` summed over its labelled rows, as
    ``thresholds_for_run`` judges it; None: no labelled row, no test report)."""
    from workbench.thresholds.evaluate import rule_report_from_counts

    if counts is not None:
        result.attach_test(rule_report_from_counts(counts, option_ids=result.option_ids, confidence=options.confidence))
    out = _policy_figures(result, options)
    out.pop("_rule"), out.pop("_calibrator")
    return out


def _decide_counted(rule_and_calibrator: tuple, probs: np.ndarray):
    """(the rule's decisions on ``probs`` after the calibrator it was chosen with, as a policy applies it;
    how many rows are not finite after the calibrator: what :func:`~workbench.thresholds.evaluate.rule_counts`
    counts as failed)."""
    from workbench.metrics.recalibrate import apply_calibrator, calibrator_from_dict

    rule, calibrator = rule_and_calibrator
    if calibrator is not None:
        probs = apply_calibrator(calibrator_from_dict(calibrator), probs)
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    return rule.decide(probs), int((~np.isfinite(probs).all(axis=1)).sum())


def _paired(
    base: CompareItems,
    other: CompareItems,
    *,
    k: int,
    qtypes: tuple[str, str],
    n_boot: int,
    seed: int,
    level: float,
    replicates: tuple[dict, dict, dict, dict] | None = None,
) -> dict:
    """Paired differences other − base on items both answered and labelled.

    ``base``/``other``: the runs' :class:`CompareItems` of the same items in the same order (the
    pairs of :func:`_pairs`; ``qtypes``: their question types); the policy differences need both
    runs' rule decisions. ``replicates``: ``(estimates, replicates)`` of base then other from their
    own intervals (:func:`bootstrap_many` with ``keep_replicates``), when those were drawn over
    exactly these items with the same labels, ``n_boot`` and ``seed``: the paired differences are then
    theirs (:func:`paired_from_replicates`, the same numbers) instead of a second draw."""
    out: dict[str, Any] = {"n_pairs": len(base)}
    if len(base) == 0:
        return out
    a, b = base, other
    y = a.labels
    b = replace(b, labels=y)  # one dataset version: the same gold labels
    if replicates is not None:
        diffs = paired_from_replicates(*replicates, level=level)
    else:
        diffs = paired_bootstrap(
            _item_stats(a, k, qtypes[0]),
            _item_stats(b, k, qtypes[1]),
            len(a),
            n_boot=n_boot,
            seed=seed,
            level=level,
        )
    out["metrics"] = {name: d.to_dict() for name, d in diffs.items()}
    out["mcnemar"] = mcnemar(a.pred == y, b.pred == y).to_dict()
    if a.accepted is not None and b.accepted is not None:
        assert a.option is not None and b.option is not None
        # an item is one of 16 cells (accepted, wrong-and-accepted in a and in b): a replicate's
        # weighted counts are its draws counted per cell (the same integers as per-item weights)
        err_a, err_b = a.accepted & (a.option != y), b.accepted & (b.option != y)
        cell = (a.accepted.astype(np.int64) + 2 * err_a + 4 * b.accepted + 8 * err_b).astype(np.int8)
        bits = np.arange(16)
        point = np.bincount(cell, minlength=16).astype(float)

        def policy_stats(bit_acc: int, bit_err: int):
            acc, err = ((bits >> bit_acc) & 1).astype(float), ((bits >> bit_err) & 1).astype(float)

            def stats(w):
                ww = point if w is None else w
                n_acc = ww @ acc
                return {
                    "coverage": float(ww @ acc / ww.sum()),
                    "error_among_accepted": float(ww @ err / n_acc) if n_acc > 0 else 0.0,
                }

            return stats

        pol = paired_bootstrap(
            policy_stats(0, 1),
            policy_stats(2, 3),
            len(a),
            n_boot=n_boot,
            seed=seed + 1,
            level=level,
            cells=(cell, 16),
        )
        out["policy"] = {name: d.to_dict() for name, d in pol.items()}
    return out


@dataclass
class _RunSide:
    """One run and question on the comparison split: counts of every row (answered or failed), the
    positions (item-id order) of its answered, labelled rows and their :class:`CompareItems`.

    ``keys`` (ids, splits, failures of every row) is held by the in-memory path; a streamed side
    reads it only when slices ask for it (:meth:`get_keys`)."""

    run_id: str
    question: str
    split: str
    qtype: str
    option_ids: list[str]
    n_items: int  # rows, answered or failed
    n_failed: int
    n_gold: int  # rows with a label, answered or failed (the risk–coverage curve's denominator)
    labelled: np.ndarray  # (m,) int64 positions (item-id order) of the rows in items
    items: CompareItems
    keys: RunAnswers | None = None
    #: with a rule: its :func:`~workbench.thresholds.evaluate.rule_counts` over the labelled rows
    #: (answered or failed), what ``thresholds_for_run`` counts on the same split (None: no labelled row)
    rule_counts: dict | None = None

    def get_keys(self, con) -> RunAnswers:
        if self.keys is None:
            self.keys = load_answer_keys(con, self.run_id, self.question, [self.split])
        return self.keys

    def curve(self):
        """Risk–coverage curve of the top probability (:func:`~workbench.metrics.selective.risk_coverage_curve`
        of the run's matrix), from the items."""
        from workbench.metrics.selective import risk_coverage_from_top

        return risk_coverage_from_top(self.items.conf, self.items.pred != self.items.labels, self.n_gold)


#: Rows of a streamed batch turned into items at a time (bounds the calibrator's and the rule's copies).
ITEM_ROWS = 20_000


def _read_key(con, run: dict) -> tuple:
    """Runs with the same key read the same answer rows (:func:`workbench.workflows.thresholds.read_together`)."""
    return (answer_source(con, run)[0], run["dataset"], int(run["dataset_version"]), run["schema_hash"])


def stream_sides(con, runs: Sequence[tuple[str, Any]], question: str, split: str) -> list[_RunSide]:
    """:class:`_RunSide` of each ``(run id, rule)`` read in batches (:func:`~workbench.store.runs.iter_answer_batches`):
    memory is a few compact numbers per item plus one batch, never the (n, k) matrix nor the ids (they
    stay in DuckDB); rows are written at their item-id positions, so the items equal the in-memory ones.
    Runs that read the same answer rows (a run and its calibrated views:
    :func:`workbench.workflows.thresholds.read_together`) are read in one pass over those rows: each
    batch is read once and turned into every run's items as that run reads it."""
    from workbench.thresholds.evaluate import add_rule_counts
    from workbench.workflows.thresholds import as_read, read_together, read_transforms

    source, calibrators = read_together(con, [r for r, _ in runs])
    transforms = read_transforms(calibrators, question)
    run = get_run(con, runs[0][0])
    keys = load_answer_keys(con, runs[0][0], question, [split], ids=False)  # names an unknown question
    q = load_stored_schema(con, run["schema_hash"]).questions[question]
    labels, failed = keys.labels.astype(np.int32), keys.failed
    del keys
    ok = ~failed & (labels >= 0)
    rows = np.flatnonzero(ok)
    index = np.cumsum(ok, dtype=np.int64) - 1  # position -> slot in items (valid where ok)
    every = []
    for _, rule in runs:
        items = CompareItems.empty(rows.size, q.type, rule is not None)
        items.labels = labels[rows]
        every.append(items)
    n_items, n_failed, n_gold = len(labels), int(failed.sum()), int((labels >= 0).sum())
    failed_labels = labels[failed & (labels >= 0)]
    del labels, failed
    counts: list[dict | None] = [None] * len(runs)
    for pos, batch in iter_answer_batches(con, source, question, [split]):
        keep = np.flatnonzero(ok[pos])
        # slices of the batch: the calibrator and the rule copy the rows they get a few times
        for start in range(0, keep.size, ITEM_ROWS):
            sub = keep[start : start + ITEM_ROWS]
            raw, sub_labels, at = batch.probs[sub], batch.labels[sub], index[pos[sub]]
            for i, (t, (_, rule)) in enumerate(zip(transforms, runs, strict=True)):
                part, part_counts = _items_counted(as_read(t, raw), sub_labels, batch.qtype, rule)
                every[i].put(at, part)
                if part_counts is not None:
                    counts[i] = add_rule_counts(counts[i], part_counts)
    sides = []
    for (run_id, rule), items, c in zip(runs, every, counts, strict=True):
        if rule is not None and n_gold:
            c = _with_failed_rows(c, failed_labels, len(option_ids(q)))
        sides.append(
            _RunSide(
                run_id, question, split, q.type, option_ids(q), n_items, n_failed, n_gold, rows, items, rule_counts=c
            )
        )
    return sides


def _pairs(con, base: _RunSide, other: _RunSide) -> tuple[np.ndarray, np.ndarray]:
    """(ia, ib): slots in ``base.items`` and ``other.items`` of the items both answered and labelled,
    in item-id order. DuckDB joins the runs' item ids and returns each pair's row positions (the
    positions of :func:`~workbench.store.runs.iter_answer_batches`), so no id reaches Python."""
    run_a, run_b = get_run(con, base.run_id), get_run(con, other.run_id)
    if answer_source(con, run_a)[0] == answer_source(con, run_b)[0]:
        # the same rows (a calibrated view and its run): positions are the same items
        _, ia, ib = np.intersect1d(base.labelled, other.labelled, assume_unique=True, return_indices=True)
        return ia, ib
    pa_, pb_ = paired_positions(con, run_a, run_b, base.question, base.split)

    def slots(labelled: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.searchsorted(labelled, pos)
        hit = at < labelled.size
        hit[hit] = labelled[at[hit]] == pos[hit]
        return at, hit

    sa, ha = slots(base.labelled, pa_)
    sb, hb = slots(other.labelled, pb_)
    both = ha & hb
    return sa[both], sb[both]


def _aligned(
    base: CompareItems, other: CompareItems, ia: np.ndarray, ib: np.ndarray
) -> tuple[CompareItems, CompareItems]:
    """The two runs' items at the pairs ``(ia, ib)``; no copy when every item of both is paired."""
    every = np.arange(len(ia))
    if len(ia) == len(base) == len(other) and np.array_equal(ia, every) and np.array_equal(ib, every):
        return base, other
    return base.take(ia), other.take(ib)


def _get(d: dict, *keys: str) -> Any:
    """``d[k1][k2]…``, ``None`` where a level is missing or ``None``."""
    v: Any = d
    for k in keys:
        v = (v or {}).get(k)
    return v


@dataclass
class Comparison:
    """Result of :func:`compare_runs`: one entry per (run, question) and the paired differences."""

    dataset: str
    split: str
    baseline: str
    objective: dict  # ThresholdOptions.settings() of the rules whose coverage/error are reported
    rows: list[dict] = field(default_factory=list)
    experiment: str | None = None
    settings_text: str = ""  # ThresholdOptions.describe(): printed next to coverage/error
    #: (run id, question) -> RiskCoverageCurve, with ``compare_runs(curves=True)`` (not serialised)
    curves: dict = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {
            "experiment": self.experiment,
            "dataset": self.dataset,
            "split": self.split,
            "baseline": self.baseline,
            "objective": self.objective,
            "settings": self.objective,
            "settings_text": self.settings_text,
            "rows": self.rows,
        }

    def to_frame(self) -> pd.DataFrame:
        """Flat table: one row per (run, question), headline figures and differences vs the baseline."""
        flat = []
        for r in self.rows:
            m, p = r.get("metrics") or {}, r.get("policy") or {}
            d = r.get("vs_baseline") or {}
            dm = d.get("metrics") or {}
            flat.append(
                {
                    "provider": r["provider"],
                    "variant": r["variant"],
                    "question": r["question"],
                    "run_id": r["run_id"],
                    "emulated": bool(r.get("emulated")),
                    "n": r["n_labelled"],
                    "failed": r["n_failed"],
                    "accuracy": _get(m, "accuracy", "estimate"),
                    "accuracy_low": _get(m, "accuracy", "low"),
                    "accuracy_high": _get(m, "accuracy", "high"),
                    "macro_f1": _get(m, "macro_f1", "estimate"),
                    "log_loss": _get(m, "log_loss", "estimate"),
                    "brier": _get(m, "brier", "estimate"),
                    "ece": r.get("ece"),
                    "cost_per_1000": r["cost"]["cost_per_1000_items"],
                    "latency_p50_ms": r["cost"]["latency_p50_ms"],
                    "latency_p95_ms": r["cost"]["latency_p95_ms"],
                    "coverage": _get(p, "coverage", "value"),
                    "error": _get(p, "error", "value"),
                    "d_accuracy": _get(dm, "accuracy", "difference"),
                    "d_accuracy_low": _get(dm, "accuracy", "low"),
                    "d_accuracy_high": _get(dm, "accuracy", "high"),
                    "p_bootstrap": _get(dm, "accuracy", "p_value"),
                    "p_mcnemar": _get(d, "mcnemar", "p_exact"),
                    "d_log_loss": _get(dm, "log_loss", "difference"),
                    "d_coverage": _get(d, "policy", "coverage", "difference"),
                    "is_baseline": r["is_baseline"],
                }
                # every metric of the top choice's confidence ranking (the table of metrics), with its difference
                | {
                    f"{pre}{name}{suf}": _get(src, name, key)
                    for name in registry.PER_ITEM_METRICS
                    for pre, src, key, suf in (
                        ("", m, "estimate", ""),
                        ("", m, "low", "_low"),
                        ("", m, "high", "_high"),
                        ("d_", dm, "difference", ""),
                    )
                }
            )
        return pd.DataFrame(flat)


@shared_keys()
def compare_runs(
    con,
    names: list[str],
    *,
    baseline: str | None = None,
    questions: list[str] | None = None,
    split: str | None = None,
    options: ThresholdOptions | None = None,
    objective: ThresholdOptions | None = None,
    calibration_split: str | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
    level: float = 0.95,
    policy: bool = True,
    slices: Sequence[str] | None = None,
    curves: bool = False,
) -> Comparison:
    """Compare runs named by id, experiment name or experiment file (see the module docstring).

    Parameters
    ----------
    names : list of str
        Run ids/names, experiment names or experiment files.
    baseline : str, optional
        Run id or ``PROVIDER@VARIANT``; default the experiment's baseline, else the first run.
    questions : list of str, optional
        Questions to compare (default: every question of the baseline's schema).
    split : str, default the experiment's compare split, else ``"test"``
    options : ThresholdOptions, optional
        How the rule whose coverage/error is reported is chosen (default: the experiment file's
        ``objective:``, else ``ThresholdOptions()`` — the defaults of ``workbench thresholds``).
    objective : ThresholdOptions, optional
        Older name of ``options``.
    calibration_split : str, default the experiment's, else ``"calibration"``
    n_boot, seed : int
        Bootstrap replicates and seed (defaults: the experiment's, else 1000 and 0).
    policy : bool, default=True
        Choose a policy per run and question (skip for speed).
    slices : list of str, optional
        Item metadata columns (``--meta-column`` at import) or ``state_length``: each row then has
        ``slices[column]``: per slice value, its counts, metrics with intervals and the paired
        differences against the baseline on the slice's items (the same functions on the slice's rows).
    curves : bool, default=False
        Keep each (run, question)'s risk–coverage curve in ``Comparison.curves`` (what
        :func:`workbench.workflows.figures.comparison_figure` draws), computed from the items: the figure then
        needs no probability matrix.

    Memory: every run's policy is chosen first (streamed runs that read the same answer rows — a run
    and its calibrated views — share those passes: :func:`_policies`); then the runs are read one
    after the other, holding the baseline's items and one other run's (a few compact numbers per
    item: :class:`CompareItems`), plus the items of later runs that read the same rows as the one
    being read (one pass serves them all: :func:`stream_sides`); runs are paired by DuckDB on their
    item ids (:func:`_pairs`). The chosen rules are judged on the test split in that same pass, and the
    baseline's bootstrap draws serve the next run of as many items (:func:`~workbench.metrics.bootstrap.bootstrap_shared`).
    """
    runs, exp = resolve_runs(con, names)
    settings = exp.compare if exp is not None else None
    split = split or (settings.split if settings else "test")
    n_boot = n_boot if n_boot is not None else (settings.n_boot if settings else 1000)
    seed = seed if seed is not None else (settings.seed if settings else 0)
    options = options if options is not None else objective
    if options is None:
        options = experiment_options(exp.objective) if exp is not None else ThresholdOptions()
    if calibration_split is None:
        calibration_split = exp.objective.calibration_split if exp is not None else "calibration"
    base = _pick_baseline(runs, baseline, exp)
    base_schema = load_stored_schema(con, base["schema_hash"])
    qids = questions or (settings.questions if settings and settings.questions else None) or base_schema.question_ids
    unknown = [q for q in qids if q not in base_schema.questions]
    if unknown:
        raise NotFoundError(
            f"the baseline run has no question {unknown[0]!r}", hint=f"questions: {', '.join(base_schema.question_ids)}"
        )

    # baseline first, so its items are known when the others are paired with it
    ordered = [base] + [r for r in runs if r["run_id"] != base["run_id"]]
    schemas = {r["run_id"]: load_stored_schema(con, r["schema_hash"]) for r in ordered}
    # the policies first: each streams its run on its own, before any run's items are held
    policies: dict[tuple[str, str], tuple[Any, Any]] = {}
    if policy:
        for q in qids:
            members = [run for run in ordered if q in schemas[run["run_id"]].questions]
            # on the test split, the rule is judged in the pass that reads the run's items
            for run, pol in zip(
                members,
                _policies(con, members, q, options, calibration_split, test_from_side=split == "test"),
                strict=True,
            ):
                rule = pol.pop("_rule", None)
                calibrator = pol.pop("_calibrator", None)
                policies[(run["run_id"], q)] = (None if rule is None else (rule, calibrator), pol)
    #: (run id, question) -> its side, read in the pass of an earlier run that reads the same rows
    read_ahead: dict[tuple[str, str], _RunSide] = {}
    base_sides: dict[str, _RunSide] = {}
    #: question -> (estimates, replicates) of the baseline's intervals (reused by exactly paired runs)
    base_reps: dict[str, tuple[dict, dict]] = {}
    rows = []
    curve_of: dict[tuple[str, str], Any] = {}
    #: question -> the baseline's row and (items, k, qtype), until its intervals are drawn
    waiting: dict[str, tuple[dict, tuple[CompareItems, int, str]]] = {}
    cost_memo: dict = {}

    def _intervals(into: list[dict], sets: list[tuple[CompareItems, int, str]]) -> list[tuple[dict, dict]]:
        """Bootstrap intervals of runs with as many items (one draw of the counts for all: the same
        counts each run's own :func:`bootstrap_many` draws), written to their rows' ``metrics``;
        returns each run's (estimates, replicates)."""
        got = bootstrap_shared(_items_stats(sets), len(sets[0][0].labels), n_boot=n_boot, seed=seed, level=level)
        out = []
        for row_, (ci, kept) in zip(into, got, strict=True):
            row_["metrics"] = {name: iv.to_dict() for name, iv in ci.items()}
            out.append(({name: iv.estimate for name, iv in ci.items()}, kept))
        return out

    for run in ordered:
        schema = schemas[run["run_id"]]
        costs = _run_costs(con, run, split, cost_memo)
        for q in qids:
            if q not in schema.questions:
                continue
            qtype = schema.questions[q].type
            k = len(option_ids(schema.questions[q]))
            # the rule's decisions are gathered in the same pass as the metrics
            rule, pol = policies.get((run["run_id"], q), (None, None))
            if (run["run_id"], q) in read_ahead:
                side = read_ahead.pop((run["run_id"], q))
            else:
                # the later runs that read the same rows are read in the same pass (their sides wait)
                together = [run] + [
                    r
                    for r in ordered[ordered.index(run) + 1 :]
                    if q in schemas[r["run_id"]].questions and _read_key(con, r) == _read_key(con, run)
                ]
                sides = stream_sides(
                    con, [(r["run_id"], policies.get((r["run_id"], q), (None, None))[0]) for r in together], q, split
                )
                side = sides[0]
                read_ahead.update({(r["run_id"], q): other for r, other in zip(together[1:], sides[1:], strict=True)})
            items = side.items
            n_lab = side.labelled.size
            row: dict[str, Any] = {
                "run_id": run["run_id"],
                "provider": run["provider"],
                "emulated": bool(run.get("emulated")),  # cost is the real service's price, not a bill
                "variant": run.get("variant"),
                "label": label(run),
                "question": q,
                "model": run.get("model"),
                "schema_hash": run["schema_hash"],
                "is_baseline": run["run_id"] == base["run_id"],
                "n_items": side.n_items,
                "n_labelled": int(n_lab),
                "n_failed": side.n_failed,
                "cost": costs,
            }
            reps: tuple[dict, dict] | None = None
            is_base = run["run_id"] == base["run_id"]
            if not is_base and q in waiting:  # the baseline's intervals, with this run's when of its size
                wait_row, wait_set = waiting.pop(q)
                join = bool(n_lab) and len(wait_set[0].labels) == n_lab
                got = _intervals(
                    [wait_row, row] if join else [wait_row], [wait_set, (items, k, qtype)] if join else [wait_set]
                )
                base_reps[q] = got[0]
                if join:
                    reps = got[1]
            if n_lab:
                if is_base:  # drawn with the next run of the same size (the same counts): one draw for both
                    row["metrics"] = None
                    waiting[q] = (row, (items, k, qtype))
                elif reps is None:
                    reps = _intervals([row], [(items, k, qtype)])[0]
                point = _item_point_metrics(items, qtype)
                row["ece"] = point.pop("ece")
                row["point_metrics"] = point
            if pol is not None and "_result" in pol:
                pol = _policy_test(pol["_result"], options, side.rule_counts)
            if pol is not None:
                row["policy"] = pol
            if curves:
                curve_of[(run["run_id"], q)] = side.curve()
            base_side = base_sides.get(q)
            pairs = None
            if is_base:
                base_sides[q] = side
            elif base_side is not None and option_ids(schema.questions[q]) == base_side.option_ids:
                pairs = _pairs(con, base_side, side)
                pa, pb = _aligned(base_side.items, items, *pairs)
                # every item of both paired, same labels: the paired replicates are the two runs' own
                same = (
                    pa is base_side.items
                    and pb is items
                    and q in base_reps
                    and reps is not None
                    and np.array_equal(pa.labels, pb.labels)
                )
                row["vs_baseline"] = _paired(
                    pa,
                    pb,
                    k=k,
                    qtypes=(base_side.qtype, qtype),
                    n_boot=n_boot,
                    seed=seed,
                    level=level,
                    replicates=(base_reps[q][0], reps[0], base_reps[q][1], reps[1]) if same and reps else None,
                )
            elif base_side is not None:
                row["vs_baseline"] = {"n_pairs": 0, "note": "options differ from the baseline's: not paired"}
            paired = pairs is not None and len(pairs[0]) > 0
            row["slices"] = {
                column: _slice_figures(
                    con,
                    side,
                    column,
                    base=base_side if paired else None,
                    pairs=pairs if paired else None,
                    n_boot=n_boot,
                    seed=seed,
                    level=level,
                )
                for column in dict.fromkeys(slices or [])
            }
            rows.append(row)
            del side, items, pairs  # one other run's items at a time
    for wait_row, wait_set in waiting.values():  # baselines compared with no run of their size
        _intervals([wait_row], [wait_set])
    return Comparison(
        dataset=base["dataset"],
        split=split,
        baseline=label(base),
        objective=options.settings(),
        settings_text=options.describe(),
        rows=rows,
        experiment=exp.name if exp else None,
        curves=curve_of,
    )


def _slice_figures(
    con,
    side: _RunSide,
    column: str,
    *,
    base: _RunSide | None,
    pairs: tuple[np.ndarray, np.ndarray] | None,
    n_boot: int,
    seed: int,
    level: float,
) -> dict:
    """Per slice of ``column``: counts, metrics with intervals and (``base`` given) the paired differences
    against the baseline on the slice's items — :func:`_item_stats` and :func:`_paired` on the slice's rows.

    ``pairs``: the runs' pairs (:func:`_pairs`); a slice's pairs are those of its items (an item's
    slice value is the same in both runs). Reads the runs' keys (ids) for the slice values: a
    streamed side reads them now."""
    from workbench.metrics.slices import slice_groups
    from workbench.workflows.evaluation import slice_values

    keys = side.get_keys(con)
    k, qtype = len(side.option_ids), side.qtype
    values, order = slice_values(con, keys, column)
    base_masks = dict(slice_groups(slice_values(con, base.get_keys(con), column)[0])) if base is not None else {}
    out: dict[str, dict] = {}
    for value, mask in slice_groups(values, order):
        items = side.items.take(np.flatnonzero(mask[side.labelled]))
        fig: dict[str, Any] = {
            "n_items": int(mask.sum()),
            "n_labelled": int(len(items.labels)),
            "n_failed": int(keys.failed[mask].sum()),
        }
        if len(items.labels):
            ci = bootstrap_many(_item_stats(items, k, qtype), len(items.labels), n_boot=n_boot, seed=seed, level=level)
            fig["metrics"] = {name: iv.to_dict() for name, iv in ci.items()}
        if base is not None and pairs is not None and value in base_masks:
            ia, ib = pairs
            in_slice = mask[side.labelled][ib]
            fig["vs_baseline"] = _paired(
                base.items.take(ia[in_slice]),
                side.items.take(ib[in_slice]),
                k=k,
                qtypes=(base.qtype, qtype),
                n_boot=n_boot,
                seed=seed,
                level=level,
            )
        out[value] = fig
    return {"values": list(out), "slices": out}
