"""Every metric a report can carry, declared once: name, question types, direction, wording, and — for a
metric of the top choice's confidence and correctness — how it is computed.

``workbench report`` (the descriptions it prints), ``workbench compare`` (its mean and per-item metrics, the
CLI's table of them), the gate (which names it accepts per type, which it can pair with a baseline) and the
slice tables read this table instead of keeping lists of names; ``tests/gate/test_requirements_file.py``
checks that each report carries exactly the metrics declared for its type and option count.

Two kinds of entries:

- **built-in** metrics (``per_item`` None) are computed by the per-type replicate functions of
  :mod:`workbench.metrics.report` (they share weighted sums: bins, one confusion ``bincount``), and
  :mod:`workbench.workflows.compare` computes the headline ones from its per-item figures;
- **per-item** metrics (``per_item`` set) are functions of the top choice per answered, labelled item —
  its label, arg-max and confidence (:class:`TopItems`) — and of integer resampling weights. The report
  (every question type, in memory and streamed), compare (every run, its paired differences, its slices)
  and the gate compute them from this table with no further code: adding one is an entry here and its
  maths in a ``metrics/`` module (AURC: :mod:`workbench.metrics.selective`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from workbench.metrics.selective import ConfidenceRanking

#: Question types a majority-label report covers.
QTYPES = ("choice", "noul", "score")
_ALL = QTYPES
_BINARY = ("noul",)

Replicate = Callable[[np.ndarray | None], float]


@dataclass
class TopItems:
    """The top choice of each answered, labelled item: ``labels``, ``pred`` (arg-max) and ``conf`` (its
    probability), each (n,), in one item order. Per-item metrics read these and derived quantities
    computed once (cached): ``wrong`` and ``ranking`` (items by decreasing confidence)."""

    labels: np.ndarray
    pred: np.ndarray
    conf: np.ndarray
    #: figures shared by the metrics of one replicate (cleared by :func:`per_item_stats` before each)
    memo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, items: Any) -> TopItems:
        """From any per-item record with ``labels``, ``pred`` and ``conf`` (the report's
        :class:`~workbench.metrics.report.ChoiceItems`, compare's ``CompareItems``)."""
        return cls(items.labels, items.pred, items.conf)

    @cached_property
    def wrong(self) -> np.ndarray:
        return np.asarray(self.pred != self.labels)

    @cached_property
    def ranking(self) -> ConfidenceRanking:
        return ConfidenceRanking(self.conf, self.wrong)

    def ranked(self, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`ConfidenceRanking.ends` of this replicate's weights, gathered once for every metric."""
        if "ranked" not in self.memo:
            self.memo["ranked"] = self.ranking.ends(w)
        return self.memo["ranked"]


@dataclass(frozen=True)
class Metric:
    """One metric of a per-question report (majority labels unless ``labels="soft"``).

    ``computed``: ``"replicate"`` — in the report's shared replicate function (bootstrap intervals from the
    same resamples; the gate can pair it with a baseline); ``"smooth"`` — the kernel-smoothed ECE, with its
    own resamples, only when the report is asked for smooth curves; ``"separate"`` — its own interval outside
    the replicate function (no paired comparison).
    ``per_item(top) -> replicate(weights or None) -> value``: given, the metric is computed from
    :class:`TopItems` wherever per-item figures are (report, compare, gate); ``weights`` are integer
    resampling counts (n,), ``None`` the plain estimate.
    """

    name: str
    title: str
    info: str
    higher_is_better: bool
    qtypes: tuple[str, ...] = _ALL
    labels: Literal["majority", "soft"] = "majority"
    min_options: int = 0
    computed: Literal["replicate", "smooth", "separate"] = "replicate"
    #: the metric is the (weighted) mean of this per-item figure: a field of the per-item records that
    #: keep it (compare's ``CompareItems``; ``log_loss``/``brier`` also of the report's ``ChoiceItems``)
    mean_of: str | None = None
    #: position in compact tables (slices, the UI's slice view); 0: not shown there
    headline: int = 0
    per_item: Callable[[TopItems], Replicate] | None = None

    def applies(self, qtype: str, n_options: int, labels: str = "majority") -> bool:
        return labels == self.labels and qtype in self.qtypes and n_options >= self.min_options


def _aurc(top: TopItems) -> Replicate:
    return lambda w: top.ranking.aurc(ends=top.ranked(w))


def _risk_at(coverage: float) -> Callable[[TopItems], Replicate]:
    def prepare(top: TopItems) -> Replicate:
        return lambda w: top.ranking.risk_at_coverage(coverage, ends=top.ranked(w))

    return prepare


METRICS: tuple[Metric, ...] = (
    Metric("accuracy", "Accuracy", "arg-max option == label", True, headline=1),
    Metric("within_one_accuracy", "Within-one accuracy", "arg-max level within one level of the label", True, ("score",)),
    Metric("qwk", "QWK", "quadratic weighted kappa (arg-max level vs label)", True, ("score",), headline=5),
    Metric("macro_f1", "Macro F1", "mean F1 over options", True, headline=3),
    Metric("top_2_accuracy", "Top-2 accuracy", "label among the 2 most probable options", True, ("choice",), min_options=3),
    Metric("top_3_accuracy", "Top-3 accuracy", "label among the 3 most probable options", True, ("choice",), min_options=4),
    Metric("log_loss", "Log loss", "mean −log p(label), nats (lower is better)", False, headline=6, mean_of="log_loss"),
    Metric(
        "brier", "Brier score", "Brier score (multiclass: Σ over options, in [0, 2]; yes/no: on P(yes), in [0, 1])",
        False, headline=8, mean_of="brier",
    ),
    Metric(
        "rps", "RPS", "ranked probability score, normalised to [0, 1]", False, ("score",), mean_of="rps",
    ),
    Metric(
        "mae_expected_level", "MAE of E[level]", "mean |E[level] − label| in levels", False, ("score",),
        mean_of="abs_level_error",
    ),
    Metric("roc_auc", "ROC-AUC", "ROC-AUC of P(yes)", True, _BINARY, headline=4),
    Metric("pr_auc", "PR-AUC", "average precision of P(yes)", True, _BINARY),
    Metric("ece_yes_uniform", "ECE of P(yes)", "ECE of P(yes), equal-width bins", False, _BINARY, headline=10),
    Metric("ece_yes_quantile", "ECE of P(yes), equal mass", "ECE of P(yes), equal-mass bins", False, _BINARY),
    Metric("mce_yes_uniform", "MCE of P(yes)", "max calibration error of P(yes), equal-width bins", False, _BINARY),
    Metric(
        "debiased_ece_yes", "Debiased ECE of P(yes)", "debiased L2 calibration error of P(yes), equal-mass bins",
        False, _BINARY,
    ),
    Metric("ece_uniform", "ECE", "top-label ECE, equal-width bins", False, headline=9),
    Metric("ece_quantile", "ECE, equal mass", "top-label ECE, equal-mass bins", False),
    Metric("mce_uniform", "MCE", "top-label max calibration error, equal-width bins", False),
    Metric(
        "debiased_ece", "Debiased ECE", "top-label debiased L2 calibration error (Kumar 2019), equal-mass bins", False
    ),
    Metric(
        "cumulative_ece", "Cumulative ECE", "mean over k of the ECE of P(level ≥ k), equal-width bins", False,
        ("score",),
    ),
    Metric(
        "aurc", "AURC",
        "area under the risk–coverage curve of the top option (ties accepted together; lower is better)",
        False, per_item=_aurc,
    ),
    Metric(
        "selective_risk_80", "Selective risk at 80% coverage",
        "error rate among the 80% most confident items (ties accepted together)", False, per_item=_risk_at(0.8),
    ),
    Metric("smece_yes", "smECE of P(yes)", "smooth ECE of P(yes)", False, _BINARY, computed="smooth"),
    Metric("smece", "smECE", "smooth ECE (Błasiok & Nakkiran), top-label", False, computed="smooth"),
    Metric(
        "classwise_ece", "Class-wise ECE",
        "class-wise ECE, equal-width bins, mean over options (resampling bias: CI may lie above)", False, ("choice",),
        computed="separate",
    ),
    # against the vote distribution (``labels="soft"``; workbench.metrics.soft)
    Metric(
        "soft_accuracy", "Soft accuracy", "vote share of the top option (chance it matches a random annotator)", True,
        labels="soft", headline=2,
    ),
    Metric(
        "soft_log_loss", "Soft log loss", "cross-entropy with the vote distribution, nats (lower is better)", False,
        labels="soft", headline=7,
    ),
    Metric(
        "soft_brier", "Soft Brier", "Brier score averaged over the item's votes (same scale as brier)", False,
        labels="soft",
    ),
    Metric(
        "soft_ece_uniform", "Soft ECE",
        "top-label ECE, accuracy = vote share of the predicted option, equal-width bins", False, labels="soft",
    ),
    Metric(
        "soft_ece_quantile", "Soft ECE, equal mass",
        "top-label ECE, accuracy = vote share of the predicted option, equal-mass bins", False, labels="soft",
    ),
    Metric(
        "soft_log_loss_floor", "Soft log-loss floor",
        "mean entropy of the votes: the soft log loss of a forecast equal to the votes", False, labels="soft",
    ),
    Metric(
        "soft_brier_floor", "Soft Brier floor",
        "the soft Brier of a forecast equal to the votes (annotator disagreement)", False, labels="soft",
    ),
)  # fmt: skip

#: name -> :class:`Metric`
BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}
#: Description of every metric a report can carry (shown by ``workbench report``).
METRIC_INFO: Mapping[str, str] = {m.name: m.info for m in METRICS}


def mean_metrics(qtype: str, n_options: int) -> dict[str, str]:
    """``{metric: per-item figure}`` of the metrics of a ``qtype`` question that are the mean of a per-item figure."""
    return {m.name: m.mean_of for m in METRICS if m.mean_of is not None and m.applies(qtype, n_options)}


#: Metrics computed from :class:`TopItems` (``per_item``), in table order.
PER_ITEM_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.per_item is not None)
#: Metrics shown in compact tables (a slice table), in this order, when the report has them.
HEADLINE_METRICS: tuple[str, ...] = tuple(m.name for m in sorted(METRICS, key=lambda m: m.headline) if m.headline)


def report_metrics(qtype: str, n_options: int | None = None, labels: str = "majority") -> tuple[str, ...]:
    """Names of the metrics a report of a ``qtype`` question carries (``n_options`` None: any option count)."""
    k = 1 << 30 if n_options is None else n_options
    return tuple(m.name for m in METRICS if m.applies(qtype, k, labels))


def pairable(name: str) -> bool:
    """Whether ``name`` is in the report's replicate function (so it has a paired comparison)."""
    m = BY_NAME.get(name)
    return m is not None and m.computed == "replicate"


def needs_smooth(name: str) -> bool:
    """Whether ``name`` is computed only when the report is asked for smooth curves."""
    m = BY_NAME.get(name)
    return m is not None and m.computed == "smooth"


def higher_is_better(name: str) -> bool:
    """The direction of ``name`` (a :class:`KeyError` names an unknown metric)."""
    return BY_NAME[name].higher_is_better


def per_item_stats(items: Any, qtype: str, n_options: int) -> Callable[[np.ndarray | None], dict[str, float]]:
    """The per-item metrics of a ``qtype`` question (:attr:`Metric.per_item`) over ``items`` (anything with
    ``labels``, ``pred``, ``conf`` (n,)), as one replicate function ``weights or None -> {name: value}``.
    Preparation (a sort by confidence) is done once, here; a replicate is O(n)."""
    chosen = [m for m in METRICS if m.per_item is not None and m.applies(qtype, n_options)]
    if not chosen or len(items.labels) == 0:
        return lambda w: {}
    top = TopItems.of(items)
    fns = [(m.name, m.per_item(top)) for m in chosen if m.per_item is not None]

    def stats(w: np.ndarray | None) -> dict[str, float]:
        top.memo.clear()  # a new replicate (or the same array changed since): nothing shared is reused
        out = {name: float(f(w)) for name, f in fns}
        top.memo.clear()
        return out

    return stats
