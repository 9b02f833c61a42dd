"""Per-question reports: every metric of a question type with bootstrap intervals, curves, confusion.

``choice_report``, ``noul_report`` and ``score_report`` take arrays; ``question_report`` takes a
:class:`~workbench.answers.RunAnswers`; :func:`workbench.workflows.evaluation.report_run` loads a run's answers
from the store and builds one report per question (a :class:`RunReport`). Results are tidy objects with
``.to_frame()`` (one row per metric) and ``.to_dict()`` (JSON-ready).

Failures and unlabelled items never enter a metric: a failed row (NaN probabilities) is counted in
``counts["n_failed"]`` and the share of attempted items that were answered is ``coverage``.

Speed: per-item quantities (correctness, per-item losses, bin indices) are computed once; each
bootstrap replicate is a few weighted ``bincount``/dot products over them (see ``bootstrap.py``).
Bin edges of equal-mass ECE are fixed from the full sample (the replicate only reweights items).

Intervals are 95% percentile bootstrap intervals. Binned calibration errors are biased upwards,
and a resample (which duplicates items) is more so, so for small calibration errors — class-wise
ECE in particular — the interval can sit just above the plug-in estimate; ``debiased_ece`` is the
estimator that corrects for this bias.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.metrics import registry
from workbench.metrics import reliability as rel
from workbench.metrics import scores as sc
from workbench.metrics.bootstrap import Interval, bootstrap_many
from workbench.metrics.confusion import ConfusionResult, confusion_result, macro_f1_from_matrix
from workbench.metrics.soft import item_soft_brier, item_soft_floors, item_soft_log_loss, vote_shares

#: What a report scores against: the majority label of an item's votes, or the vote distribution.
LABEL_MODES = ("majority", "soft")
#: Class-wise ECE is bootstrapped only when n × k stays below this (it touches every probability).
CLASSWISE_BOOT_LIMIT = 2_000_000
#: smECE is bootstrapped (at the fixed-point bandwidth of the full sample) below this many items.
SMECE_BOOT_LIMIT = 200_000

#: Descriptions shown by the CLI: every metric a report can carry, from the one table of them
#: (:mod:`workbench.metrics.registry`, which also gives each one's question types and direction).
METRIC_INFO = registry.METRIC_INFO


@dataclass
class QuestionReport:
    """All metrics of one question on one split.

    ``metrics`` maps a metric name (see :data:`METRIC_INFO`) to an :class:`Interval`; ``curves``
    holds binned reliability curves, ``smooth`` kernel-smoothed ones, ``classwise`` one curve per
    option (choice) or per cumulative level (score).
    """

    question: str
    qtype: str
    option_ids: list[str]
    counts: dict
    metrics: dict[str, Interval] = field(default_factory=dict)
    curves: dict[str, rel.ReliabilityCurve] = field(default_factory=dict)
    smooth: dict[str, rel.SmoothReliabilityCurve] = field(default_factory=dict)
    classwise: list[rel.ReliabilityCurve] = field(default_factory=list)
    decomposition: sc.BrierDecomposition | None = None
    confusion: ConfusionResult | None = None
    params: dict = field(default_factory=dict)
    #: ``(kept, stats)``: the mask (n_attempted,) of items that entered the metrics and the replicate
    #: function ``stats(weights (n_kept,) or None) -> {metric: value}`` behind ``metrics`` (paired comparisons)
    replicate: tuple | None = field(default=None, repr=False, compare=False)
    #: agreement among annotators and of the model with them (an ``AgreementReport``), when items have
    #: several votes; set by :func:`workbench.workflows.evaluation.report_run`
    agreement: Any = None

    def __getstate__(self) -> dict:
        """Pickle (the UI's Streamlit cache does) without ``replicate``: its function is a closure."""
        return {**self.__dict__, "replicate": None}

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: question, type, metric, estimate, low, high, n."""
        rows = [
            {
                "question": self.question,
                "type": self.qtype,
                "metric": name,
                "estimate": iv.estimate,
                "low": iv.low,
                "high": iv.high,
                "n": self.counts.get("n_labelled"),
            }
            for name, iv in self.metrics.items()
        ]
        if self.decomposition is not None:
            for part in ("reliability", "resolution", "uncertainty"):
                rows.append(
                    {
                        "question": self.question,
                        "type": self.qtype,
                        "metric": f"brier_{part}",
                        "estimate": getattr(self.decomposition, part),
                        "low": np.nan,
                        "high": np.nan,
                        "n": self.counts.get("n_labelled"),
                    }
                )
        return pd.DataFrame(rows, columns=["question", "type", "metric", "estimate", "low", "high", "n"])

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "type": self.qtype,
            "options": self.option_ids,
            "counts": self.counts,
            "params": self.params,
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "brier_decomposition": self.decomposition.to_dict() if self.decomposition else None,
            "reliability": {k: v.to_dict() for k, v in self.curves.items()},
            "smooth_reliability": {k: v.to_dict() for k, v in self.smooth.items()},
            "classwise_reliability": [c.to_dict() for c in self.classwise],
            "confusion": self.confusion.to_dict() if self.confusion else None,
            "agreement": self.agreement.to_dict() if self.agreement is not None else None,
        }


# -- shared preparation ---------------------------------------------------------------------------
class _Bins:
    """A binary problem sorted by score once, so per-bin sums of any reweighting are segment sums.

    Bins (equal-width and/or equal-mass) are contiguous runs of the sorted scores; a replicate's
    per-bin count, Σ w·score and Σ w·outcome are ``np.add.reduceat`` over those runs (exact sums,
    no cancellation), and all binnings share one gather of the weights into sorted order.
    """

    def __init__(
        self,
        y_true: np.ndarray,
        y_score: np.ndarray,
        n_bins: int,
        strategies: tuple[str, ...] = ("uniform", "quantile"),
    ):
        s = np.asarray(y_score, dtype=float)
        self.order = np.argsort(s, kind="stable")
        self.s = s[self.order]
        self.y = np.asarray(y_true, dtype=float)[self.order]
        self.nb = n_bins
        self.binnings = []
        for strategy in strategies:
            edges = rel.bin_edges(self.s, n_bins, strategy)
            # bin b holds edges[b] <= s < edges[b+1] (last closed): its run starts at the first s >= edges[b]
            cut = np.r_[0, np.searchsorted(self.s, edges[1:-1], side="left"), s.size]
            nonempty = cut[1:] > cut[:-1]
            self.binnings.append((edges, nonempty, cut[:-1][nonempty]))

    def _segment_sums(self, x: np.ndarray, nonempty: np.ndarray, starts: np.ndarray) -> np.ndarray:
        out = np.zeros(self.nb)
        if starts.size:
            out[nonempty] = np.add.reduceat(x, starts)
        return out

    def stats(self, w: np.ndarray | None) -> list[rel.BinStats]:
        """One :class:`BinStats` per strategy, for weights ``w`` (n,) in the caller's item order."""
        if w is None:
            ws, wss, wsy = np.ones_like(self.s), self.s, self.y
        else:
            ws = np.take(w, self.order)
            wss, wsy = ws * self.s, ws * self.y
        return [
            rel.BinStats(
                edges, self._segment_sums(ws, ne, st), self._segment_sums(wss, ne, st), self._segment_sums(wsy, ne, st)
            )
            for edges, ne, st in self.binnings
        ]


class _Ranks:
    """Items grouped by distinct score (descending) for weighted ROC-AUC / average precision."""

    def __init__(self, y_true: np.ndarray, y_score: np.ndarray):
        self.y = np.asarray(y_true, dtype=float)
        s = np.asarray(y_score, dtype=float)
        order = np.argsort(-s, kind="mergesort")
        new_group = np.r_[True, np.diff(s[order]) != 0]
        self.group = np.empty(s.size, dtype=np.int64)
        self.group[order] = np.cumsum(new_group) - 1
        self.ng = int(new_group.sum()) if s.size else 0

    def _pos_neg(self, w):
        ww = np.ones_like(self.y) if w is None else w
        pos = np.bincount(self.group, weights=ww * self.y, minlength=self.ng)
        neg = np.bincount(self.group, weights=ww * (1.0 - self.y), minlength=self.ng)
        return pos, neg

    def auc_ap(self, w: np.ndarray | None) -> tuple[float, float]:
        pos, neg = self._pos_neg(w)
        p, n = pos.sum(), neg.sum()
        if p == 0 or n == 0:
            return float("nan"), float("nan") if p == 0 else 1.0
        neg_below = n - np.cumsum(neg)  # groups are in descending score order
        auc = float(np.sum(pos * (neg_below + 0.5 * neg)) / (p * n))
        tp, fp = np.cumsum(pos), np.cumsum(neg)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(tp + fp > 0, tp / (tp + fp), 0.0)
        ap = float(np.sum(pos / p * precision))
        return auc, ap


def _take_rows(probs: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``probs[keep]`` without copying the matrix when every row is kept (a 1M × 77 copy is 600 MB)."""
    return probs if keep.all() else probs[keep]


def _kept_rows(
    probs: np.ndarray, labels: np.ndarray, failure_kinds: Iterable | None, exclude: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``(p, y, keep, counts)``: the rows of ``probs`` (n, k) and integer ``labels`` (n,) that enter the metrics,
    with the mask and counts of :func:`_split_rows`."""
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels).astype(np.int64)
    keep, counts = _split_rows(probs, labels, failure_kinds, exclude)
    return _take_rows(probs, keep), labels[keep], keep, counts


def _top_choice(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The arg-max option of each row of ``p`` (n, k) (ties: first) and its probability, each (n,)."""
    pred = p.argmax(axis=1)
    return pred, p[np.arange(len(p)), pred]


def _calibration_errors(stats: Sequence[rel.BinStats], of: str = "") -> dict[str, float]:
    """The binned calibration errors of one score from the stats of its equal-width and equal-mass bins (as
    :meth:`_Bins.stats` gives them): ECE of both, MCE of equal width, debiased ECE of equal mass; ``of``
    (``"_yes"``) names the score in the metric names."""
    uniform, quantile = stats
    return {
        f"ece{of}_uniform": rel.ece_from_stats(uniform),
        f"ece{of}_quantile": rel.ece_from_stats(quantile),
        f"mce{of}_uniform": rel.mce_from_stats(uniform),
        f"debiased_ece{of}": rel.debiased_ece_from_stats(quantile),
    }


def _curves(bins: _Bins, name: str, label: str) -> dict[str, rel.ReliabilityCurve]:
    """The equal-width and equal-mass reliability curves (``{name}_uniform``, ``{name}_quantile``) of ``bins``."""
    uniform, quantile = bins.stats(None)
    return {
        f"{name}_uniform": rel.curve_from_stats(uniform, "uniform", label),
        f"{name}_quantile": rel.curve_from_stats(quantile, "quantile", label),
    }


def _label_rank(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """0-based rank of the label among the options (ties count options listed before the label first)."""
    rows = np.arange(len(y))
    p_true = p[rows, y]
    rank = np.count_nonzero(p > p_true[:, None], axis=1)
    tied = np.flatnonzero(np.count_nonzero(p == p_true[:, None], axis=1) > 1)
    if tied.size:  # rare: only rows with exact ties pay for the second comparison
        sub = p[tied]
        rank[tied] += np.count_nonzero((sub == p_true[tied, None]) & (np.arange(p.shape[1]) < y[tied, None]), axis=1)
    return rank


def _split_rows(
    probs: np.ndarray, labels: np.ndarray, failure_kinds: Iterable | None, exclude: np.ndarray | None
) -> tuple[np.ndarray, dict]:
    """Mask of rows that enter metrics, and the counts that explain the rest."""
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels)
    failed = ~np.isfinite(probs).all(axis=1)
    excluded = np.zeros(len(labels), bool) if exclude is None else np.asarray(exclude, bool)
    keep = ~failed & (labels >= 0) & ~excluded
    kinds: dict[str, int] = {}
    if failure_kinds is not None:
        fk = np.asarray(list(failure_kinds), dtype=object)
        values, n_kind = np.unique(fk[failed].astype(str), return_counts=True)
        kinds = {str(v): int(c) for v, c in zip(values, n_kind)}
    elif failed.any():
        kinds = {"unknown": int(failed.sum())}
    return keep, row_counts(failed, labels, excluded, kinds)


def row_counts(failed: np.ndarray, labels: np.ndarray, excluded: np.ndarray, kinds: dict[str, int]) -> dict:
    """The counts that explain which rows enter metrics (all arrays (n,); ``kinds``: failures by kind)."""
    keep = ~failed & (labels >= 0) & ~excluded
    n = len(labels)
    return {
        "n_attempted": n,
        "n_answered": int((~failed).sum()),
        "n_failed": int(failed.sum()),
        "n_labelled": int(keep.sum()),
        "n_unlabelled": int(((labels < 0) & ~failed).sum()),
        "n_excluded": int((excluded & ~failed & (labels >= 0)).sum()),
        "coverage": float((~failed).mean()) if n else float("nan"),
        "failures_by_kind": kinds,
    }


def _intervals(stats: Callable, n: int, n_boot: int, seed: int, level: float) -> dict[str, Interval]:
    if n == 0:
        return {}
    return bootstrap_many(stats, n, n_boot=n_boot, seed=seed, level=level)


def _smooth_interval(
    y: np.ndarray, s: np.ndarray, n_boot: int, seed: int, level: float, label: str
) -> tuple[Interval, rel.SmoothReliabilityCurve]:
    curve = rel.smooth_reliability_curve(y, s, label=label)
    iv = Interval(curve.smece, level=level)
    if 0 < y.size <= SMECE_BOOT_LIMIT and n_boot:
        reps = []
        from workbench.metrics.bootstrap import resample_counts

        for w in resample_counts(y.size, n_boot, seed + 1):
            reps.append(rel.smooth_ece_sigma(y, s, curve.sigma, sample_weight=w))
        lo, hi = np.quantile(reps, [(1 - level) / 2, 1 - (1 - level) / 2])
        iv = Interval(curve.smece, float(lo), float(hi), level, n_boot)
    return iv, curve


def _finish(
    report: QuestionReport,
    stats: Callable,
    keep: np.ndarray,
    top: _Bins,
    labels: np.ndarray,
    pred: np.ndarray,
    conf: np.ndarray,
    accept: np.ndarray | None,
    *,
    n_boot: int,
    seed: int,
    level: float,
    smooth: bool,
    binary: tuple[np.ndarray, np.ndarray, _Bins] | None = None,
) -> None:
    """What every report of hard labels ends with: the intervals of ``stats`` (one replicate's metrics), the smooth
    ECE of the top label, its reliability curves (``top``: its bins) and the confusion matrix with the review
    column of ``accept`` (over all rows; ``keep`` selects the report's). ``binary`` (outcome, score, bins) of
    P(yes) adds its smooth ECE and curves before the top label's."""
    report.metrics = _intervals(stats, len(labels), n_boot, seed, level)
    report.replicate = (keep, stats)
    curves = {}
    if binary is not None:
        y, s, bins = binary
        if smooth:
            report.metrics["smece_yes"], report.smooth["p_yes"] = _smooth_interval(
                y.astype(float), s, n_boot, seed, level, "P(yes)"
            )
        curves = _curves(bins, "p_yes", "P(yes)")
    if smooth:
        report.metrics["smece"], report.smooth["top_label"] = _smooth_interval(
            (pred == labels).astype(float), conf, n_boot, seed, level, "top-label"
        )
    report.curves = curves | _curves(top, "top_label", "top-label")
    acc = None if accept is None else np.asarray(accept, bool)[keep]
    report.confusion = confusion_result(labels, pred, report.option_ids, acc)


# -- choice ---------------------------------------------------------------------------------------
def choice_report(
    probs: np.ndarray,
    labels: np.ndarray,
    option_ids: list[str] | None = None,
    *,
    question: str = "",
    n_bins: int = 15,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    accept: np.ndarray | None = None,
    failure_kinds: Iterable | None = None,
    exclude: np.ndarray | None = None,
    smooth: bool = True,
    qtype: str = "choice",
) -> QuestionReport:
    """Report of a choice question.

    Parameters
    ----------
    probs : (n, k) probabilities in option order; NaN rows are provider failures
    labels : (n,) option index, -1 when unlabelled
    accept : (n,) bool, optional routing decision; rejected items go to the confusion matrix's review column
    exclude : (n,) bool, optional items left out (e.g. suspected label errors)
    """
    p, y, keep, counts = _kept_rows(probs, labels, failure_kinds, exclude)
    return choice_report_from_items(
        choice_items(p, y, n_bins),
        keep,
        counts,
        option_ids or [str(j) for j in range(p.shape[1])],
        question=question,
        n_bins=n_bins,
        n_boot=n_boot,
        seed=seed,
        level=level,
        accept=accept,
        smooth=smooth,
        qtype=qtype,
        probs=p,
    )


@dataclass
class ChoiceItems:
    """What every choice metric needs from the (n, k) matrix of the kept rows: per-item figures (n,)
    and the (option, equal-width bin) sums (k, n_bins) of :func:`~workbench.metrics.reliability.option_bin_sums`.

    :func:`choice_items` builds it from a matrix; a streamed report builds one per batch of rows and
    joins them (:meth:`concat`), so the report never holds the whole matrix.
    """

    labels: np.ndarray  # (n,) int32 gold option
    pred: np.ndarray  # (n,) int32 arg-max option (ties: first)
    conf: np.ndarray  # (n,) probability of pred
    log_loss: np.ndarray  # (n,) -log p(label), floored
    brier: np.ndarray  # (n,) Σ_j (p_j - 1[label = j])²
    rank: np.ndarray  # (n,) int16 0-based rank of the label
    bin_sums: tuple[np.ndarray, np.ndarray, np.ndarray]

    FIELDS = ("labels", "pred", "conf", "log_loss", "brier", "rank")

    @classmethod
    def concat(cls, parts: list[ChoiceItems], order: np.ndarray | None = None) -> ChoiceItems:
        """Rows of ``parts`` one after the other (then permuted by ``order`` when given); sums added."""
        k, nb = parts[0].bin_sums[0].shape
        arrays = {}
        for f in cls.FIELDS:
            a = np.concatenate([getattr(x, f) for x in parts])
            arrays[f] = a if order is None else a[order]
        sums = tuple(np.sum([x.bin_sums[i] for x in parts], axis=0) for i in range(3))
        return cls(**arrays, bin_sums=cast(tuple[np.ndarray, np.ndarray, np.ndarray], sums))


def choice_items(p: np.ndarray, y: np.ndarray, n_bins: int = 15) -> ChoiceItems:
    """:class:`ChoiceItems` of answered, labelled rows ``p`` (n, k) with labels ``y`` (n,)."""
    y = np.asarray(y).astype(np.int64)
    pred, conf = _top_choice(p)
    return ChoiceItems(  # option indices as int32: 8 bytes less per item each (a streamed run keeps them)
        labels=y.astype(np.int32),
        pred=pred.astype(np.int32),
        conf=conf,
        log_loss=sc.item_log_loss(p, y),
        brier=sc.item_brier(p, y),
        rank=_label_rank(p, y).astype(np.int16),
        bin_sums=rel.option_bin_sums(p, y, n_bins),
    )


def choice_report_from_items(
    items: ChoiceItems,
    keep: np.ndarray,
    counts: dict,
    option_ids: list[str],
    *,
    question: str = "",
    n_bins: int = 15,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    accept: np.ndarray | None = None,
    smooth: bool = True,
    qtype: str = "choice",
    probs: np.ndarray | None = None,
) -> QuestionReport:
    """The choice report of :func:`choice_report` from its :class:`ChoiceItems` (``keep`` and ``counts``
    as :func:`_split_rows` gives them). ``probs`` (the kept rows' matrix) only adds the bootstrap
    interval of the class-wise ECE on small questions (n·k ≤ ``CLASSWISE_BOOT_LIMIT``)."""
    opts = list(option_ids)
    k = len(opts)
    params = {"n_bins": n_bins, "n_boot": n_boot, "seed": seed, "level": level}
    report = QuestionReport(question, qtype, opts, counts, params=params)
    y, pred, conf = items.labels, items.pred, items.conf
    n = len(y)
    if n == 0:
        return report
    correct = (pred == y).astype(float)
    ll, ib = items.log_loss, items.brier
    top = _Bins(correct, conf, n_bins)
    # one bincount per replicate gives the confusion matrix and the top-2/top-3 hits: an item's cell
    # is its (label, prediction) within a block of its label's rank (0-1, 2, 3 or more). Resampling
    # counts are integers, so the per-block sums are exactly the weighted means' sums.
    rank_block = (items.rank >= 2).astype(np.int64) + (items.rank >= 3)
    cm_cell = rank_block * (k * k) + y.astype(np.int64) * k + pred
    del rank_block
    per_item = registry.per_item_stats(items, qtype, k)

    def stats(w: np.ndarray | None) -> dict[str, float]:
        su, sq = top.stats(w)
        total = float(n) if w is None else float(w.sum())
        blocks = np.bincount(cm_cell, weights=w, minlength=3 * k * k).reshape(3, k, k)
        cm = blocks.sum(axis=0)
        top2 = blocks[0].sum()
        out = {
            "accuracy": float(su.sum_true.sum() / total),
            "macro_f1": macro_f1_from_matrix(cm),
            "top_2_accuracy": float(top2 / total),
            "top_3_accuracy": float((top2 + blocks[1].sum()) / total),
            "log_loss": sc.weighted_mean(ll, w, total),
            "brier": sc.weighted_mean(ib, w, total),
            **_calibration_errors((su, sq)),
        }
        if k <= 2:
            out.pop("top_2_accuracy")
        if k <= 3:
            out.pop("top_3_accuracy")
        return out | per_item(w)

    _finish(report, stats, keep, top, y, pred, conf, accept, n_boot=n_boot, seed=seed, level=level, smooth=smooth)
    sums = items.bin_sums  # shared by class-wise ECE and the Brier decomposition
    cw = rel.classwise_stats(None, y, n_bins, "uniform", sums=sums)
    report.metrics["classwise_ece"] = Interval(float(np.mean([rel.ece_from_stats(s) for s in cw])), level=level)
    if probs is not None and n * k <= CLASSWISE_BOOT_LIMIT and n_boot:
        col_bins = [_Bins((y == j), probs[:, j], n_bins, ("uniform",)) for j in range(k)]
        iv = _intervals(
            lambda w: {"classwise_ece": float(np.mean([rel.ece_from_stats(b.stats(w)[0]) for b in col_bins]))},
            n,
            n_boot,
            seed,
            level,
        )
        report.metrics["classwise_ece"] = iv["classwise_ece"]
    report.classwise = [rel.curve_from_stats(s, "uniform", opts[j]) for j, s in enumerate(cw)]
    report.decomposition = sc.brier_decomposition(None, y, n_bins, bin_sums=sums, item_briers=ib)
    return report


# -- yes/no -----------------------------------------------------------------------------------------
def noul_report(
    probs: np.ndarray,
    labels: np.ndarray,
    option_ids: list[str] | None = None,
    *,
    question: str = "",
    n_bins: int = 15,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    accept: np.ndarray | None = None,
    failure_kinds: Iterable | None = None,
    exclude: np.ndarray | None = None,
    smooth: bool = True,
) -> QuestionReport:
    """Report of a yes/no question: ``probs`` (n, 2) in the order (yes, no), labels 0 = yes, 1 = no.

    The positive class of the binary metrics (Brier, ECE of P(yes), ROC-AUC, PR-AUC) is "yes".
    """
    p, lab, keep, counts = _kept_rows(probs, labels, failure_kinds, exclude)
    params = {"n_bins": n_bins, "n_boot": n_boot, "seed": seed, "level": level}
    report = QuestionReport(question, "noul", list(option_ids or ["yes", "no"]), counts, params=params)
    if len(lab) == 0:
        return report
    s = p[:, 0]
    y = (lab == 0).astype(np.int64)  # 1 = yes
    pred, conf = _top_choice(p)
    correct = (pred == lab).astype(np.int64)
    ll = sc.item_log_loss(p, lab)
    sq_err = (s - y) ** 2
    yes_bins = _Bins(y, s, n_bins)
    top_bins = _Bins(correct, conf, n_bins)
    ranks = _Ranks(y, s)
    cm_cell = lab * 2 + pred
    per_item = registry.per_item_stats(registry.TopItems(lab, pred, conf), "noul", 2)

    def stats(w: np.ndarray | None) -> dict[str, float]:
        auc, ap = ranks.auc_ap(w)
        cm = np.bincount(cm_cell, weights=w, minlength=4).reshape(2, 2)
        return {
            "accuracy": sc.weighted_mean(correct.astype(float), w),
            "macro_f1": macro_f1_from_matrix(cm),
            "log_loss": sc.weighted_mean(ll, w),
            "brier": sc.weighted_mean(sq_err, w),
            "roc_auc": auc,
            "pr_auc": ap,
            **_calibration_errors(yes_bins.stats(w), of="_yes"),
            **_calibration_errors(top_bins.stats(w)),
        } | per_item(w)

    _finish(
        report, stats, keep, top_bins, lab, pred, conf, accept,
        n_boot=n_boot, seed=seed, level=level, smooth=smooth, binary=(y, s, yes_bins),
    )  # fmt: skip
    report.decomposition = sc.binary_brier_decomposition(y, s, n_bins)
    return report


# -- score (ordinal) ------------------------------------------------------------------------------
def score_report(
    probs: np.ndarray,
    labels: np.ndarray,
    option_ids: list[str] | None = None,
    *,
    question: str = "",
    n_bins: int = 15,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    accept: np.ndarray | None = None,
    failure_kinds: Iterable | None = None,
    exclude: np.ndarray | None = None,
    smooth: bool = True,
) -> QuestionReport:
    """Report of an ordinal question: option j is level j (lowest first).

    Adds RPS, MAE of the expected level, quadratic weighted kappa, within-one accuracy and the
    reliability of the cumulative probabilities P(level ≥ j), j = 1..k−1 (``classwise`` curves).
    """
    p, y, keep, counts = _kept_rows(probs, labels, failure_kinds, exclude)
    k = p.shape[1]
    opts = option_ids or [str(j) for j in range(k)]
    params = {"n_bins": n_bins, "n_boot": n_boot, "seed": seed, "level": level}
    report = QuestionReport(question, "score", list(opts), counts, params=params)
    if len(y) == 0:
        return report
    pred, conf = _top_choice(p)
    correct = (pred == y).astype(np.int64)
    within = (np.abs(pred - y) <= 1).astype(float)
    abs_err = np.abs(sc.expected_level(p) - y)
    rps = sc.item_rps(p, y)
    ll = sc.item_log_loss(p, y)
    ib = sc.item_brier(p, y)
    top_bins = _Bins(correct, conf, n_bins)
    survival = 1.0 - np.cumsum(p, axis=1)[:, :-1]  # P(level >= j) for j = 1..k-1
    cum = [_Bins((y >= j), np.clip(survival[:, j - 1], 0.0, 1.0), n_bins, ("uniform",)) for j in range(1, k)]
    cm_cell = y * k + pred
    idx = np.arange(k)
    qw = (idx[:, None] - idx[None, :]) ** 2 / max((k - 1) ** 2, 1)
    per_item = registry.per_item_stats(registry.TopItems(y, pred, conf), "score", k)

    def stats(w: np.ndarray | None) -> dict[str, float]:
        cm = np.bincount(cm_cell, weights=w, minlength=k * k).reshape(k, k)
        total = cm.sum()
        expected = np.outer(cm.sum(axis=1), cm.sum(axis=0)) / total
        denom = float(np.sum(qw * expected))
        return {
            "accuracy": sc.weighted_mean(correct.astype(float), w),
            "within_one_accuracy": sc.weighted_mean(within, w),
            "mae_expected_level": sc.weighted_mean(abs_err, w),
            "rps": sc.weighted_mean(rps, w),
            "qwk": float(1.0 - np.sum(qw * cm) / denom) if denom > 0 else float("nan"),
            "macro_f1": macro_f1_from_matrix(cm),
            "log_loss": sc.weighted_mean(ll, w),
            "brier": sc.weighted_mean(ib, w),
            **_calibration_errors(top_bins.stats(w)),
            "cumulative_ece": float(np.mean([rel.ece_from_stats(b.stats(w)[0]) for b in cum])),
        } | per_item(w)

    _finish(report, stats, keep, top_bins, y, pred, conf, accept, n_boot=n_boot, seed=seed, level=level, smooth=smooth)
    report.classwise = [
        rel.curve_from_stats(b.stats(None)[0], "uniform", f"P(level >= {opts[j]})") for j, b in zip(range(1, k), cum)
    ]
    report.decomposition = sc.brier_decomposition(p, y, n_bins)
    return report


REPORTERS: dict[str, Callable[..., QuestionReport]] = {
    "choice": choice_report,
    "noul": noul_report,
    "score": score_report,
}


def soft_report(
    probs: np.ndarray,
    counts: np.ndarray,
    option_ids: list[str] | None = None,
    *,
    qtype: str = "choice",
    question: str = "",
    n_bins: int = 15,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    failure_kinds: Iterable | None = None,
    exclude: np.ndarray | None = None,
):
    """A :class:`QuestionReport` of the soft scores (:mod:`workbench.metrics.soft`) with bootstrap intervals.

    ``counts`` (n, k) are the votes per item (an item without votes counts as unlabelled); the
    reliability curves are top-label with the vote share of the predicted option as accuracy.
    """
    probs = np.asarray(probs, dtype=float)
    counts = np.asarray(counts, dtype=float)
    k = probs.shape[1]
    opts = option_ids or [str(j) for j in range(k)]
    has_votes = np.where(counts.sum(axis=1) > 0, 0, -1)
    keep, tallies = _split_rows(probs, has_votes, failure_kinds, exclude)
    tallies["n_votes"] = int(counts[keep].sum())
    params = {"n_bins": n_bins, "n_boot": n_boot, "seed": seed, "level": level, "labels": "soft"}
    report = QuestionReport(question, qtype, list(opts), tallies, params=params)
    p, c = _take_rows(probs, keep), counts[keep]
    n = p.shape[0]
    if n == 0:
        return report
    q = vote_shares(c)
    pred, conf = _top_choice(p)
    share = q[np.arange(n), pred]
    ll = item_soft_log_loss(p, q)
    br = item_soft_brier(p, q, qtype)
    ent, br_floor = item_soft_floors(q, qtype)
    top = _Bins(share, conf, n_bins)

    def stats(w: np.ndarray | None) -> dict[str, float]:
        su, sq = top.stats(w)
        return {
            "soft_accuracy": sc.weighted_mean(share, w),
            "soft_log_loss": sc.weighted_mean(ll, w),
            "soft_brier": sc.weighted_mean(br, w),
            "soft_ece_uniform": rel.ece_from_stats(su),
            "soft_ece_quantile": rel.ece_from_stats(sq),
            "soft_log_loss_floor": sc.weighted_mean(ent, w),
            "soft_brier_floor": sc.weighted_mean(br_floor, w),
        }

    report.metrics = _intervals(stats, n, n_boot, seed, level)
    report.replicate = (keep, stats)
    report.curves = _curves(top, "top_label", "top-label (vote share)")
    return report


def question_report(
    answers: Any, *, exclude_items: Iterable[str] | None = None, labels: str = "majority", **kwargs: Any
) -> QuestionReport:
    """Report of one :class:`~workbench.answers.RunAnswers` (any question type).

    ``labels="majority"`` scores against the majority label (every metric of the type);
    ``labels="soft"`` against the vote distribution ``answers.votes`` (the soft scores of
    :mod:`workbench.metrics.soft`).
    """
    exclude = None
    if exclude_items is not None:
        exclude = np.isin(answers.item_ids.astype(str), np.asarray(list(exclude_items), dtype=str))
    if labels not in LABEL_MODES:
        raise WorkbenchError(
            f"labels={labels!r} is not one of {', '.join(LABEL_MODES)}", hint="`labels` soft or majority"
        )
    if labels == "soft":
        if answers.votes is None:
            raise WorkbenchError(
                f"question {answers.question!r}: no votes loaded for soft labels",
                hint="load the answers with their votes (workbench.workflows.evaluation.report_run does)",
            )
        kwargs.pop("smooth", None)
        kwargs.pop("accept", None)
        return soft_report(
            answers.probs,
            answers.votes,
            answers.option_ids,
            qtype=answers.qtype,
            question=answers.question,
            failure_kinds=answers.failure_kind,
            exclude=exclude,
            **kwargs,
        )
    return REPORTERS[answers.qtype](
        answers.probs,
        answers.labels,
        answers.option_ids,
        question=answers.question,
        failure_kinds=answers.failure_kind,
        exclude=exclude,
        **kwargs,
    )


# -- runs -------------------------------------------------------------------------------------------
@dataclass
class RunReport:
    """Reports of every question of one run on one split (and of its parent when it is a calibrated view)."""

    run: dict
    split: str | None
    questions: list[QuestionReport]
    before: RunReport | None = None
    calibrators: dict = field(default_factory=dict)
    #: ``{column: SliceReports}`` (:mod:`workbench.metrics.slices`) when slices were asked for
    slices: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        frames = [q.to_frame() for q in self.questions]
        df = (
            pd.concat(frames, ignore_index=True)
            if frames
            else pd.DataFrame(columns=["question", "type", "metric", "estimate", "low", "high", "n"])
        )
        df.insert(0, "provider", self.run.get("provider"))
        df.insert(0, "run_id", self.run.get("run_id"))
        if self.before is not None:
            b = self.before.to_frame()[["question", "metric", "estimate", "low", "high"]]
            df = df.merge(b, on=["question", "metric"], how="left", suffixes=("", "_before"))
        return df

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "split": self.split,
            "questions": {q.question: q.to_dict() for q in self.questions},
            "calibrators": self.calibrators,
            "before": self.before.to_dict() if self.before is not None else None,
            "slices": {col: sr.to_dict() for col, sr in self.slices.items()},
        }
