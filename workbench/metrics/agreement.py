"""Agreement between annotators, and between the model and the annotators: the noise floor.

Inputs are arrays, no store access:

- ``counts`` (n, k): votes per item and option (every vote, named or anonymous);
- ``ratings`` (n, m) int, optional: the option each *named* annotator chose per item, −1 where that
  annotator did not label the item (absent when votes are anonymous counts);
- ``model`` (n,) int, optional: the model's top option per item.

Figures (each for the annotators, and next to it for the model):

===============================  ==============================================================
``pairwise_agreement``           annotators: the chance that two distinct annotators of an item
                                 agree (mean over items); model: the chance that the model agrees
                                 with a random annotator of the item (mean vote share of its option)
``krippendorff_alpha_nominal``   Krippendorff's α (``krippendorff`` package, value counts);
                                 model: α with the model as one more annotator on every item
``krippendorff_alpha_ordinal``   score questions: α with the ordinal metric (levels in order)
``krippendorff_alpha_interval``  score questions: α with the interval metric (level index)
``fleiss_kappa``                 Fleiss' κ on the items with the most common number of votes
                                 (it needs the same number per item); model: one more rater
``cohen_kappa``                  two annotators: Cohen's κ; more: the mean over annotator pairs
                                 (Light's κ); model: the mean over annotators of κ(model, annotator)
``quadratic_weighted_kappa``     score questions: the same with quadratic weights
===============================  ==============================================================

Cohen's κ comes from scikit-learn's ``cohen_kappa_score``, α from ``krippendorff``; Fleiss' κ is
the textbook formula (cross-checked against ``statsmodels.stats.inter_rater.fleiss_kappa`` in the
tests: statsmodels is a large dependency for a six-line formula).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd

#: Descriptions shown by the CLI next to each agreement figure.
AGREEMENT_INFO: dict[str, str] = {
    "pairwise_agreement": "2 annotators agree (model: model agrees with 1 annotator)",
    "krippendorff_alpha_nominal": "Krippendorff's α, nominal",
    "krippendorff_alpha_ordinal": "Krippendorff's α, ordinal levels",
    "krippendorff_alpha_interval": "Krippendorff's α, interval (level index)",
    "fleiss_kappa": "Fleiss' κ, items with the usual vote count",
    "cohen_kappa": "Cohen's κ, mean over pairs (model: vs each annotator)",
    "quadratic_weighted_kappa": "quadratic-weighted κ, mean over pairs (model: vs each)",
}
#: How the model column is formed, printed once under the table.
MODEL_COLUMN_NOTE = (
    "model column: the run's top option as one more annotator (α, Fleiss' κ), or its mean κ against each annotator"
)
#: Pairs of raters sharing fewer items than this are left out of the pairwise means.
MIN_SHARED_ITEMS = 2


def vote_counts(item_index: np.ndarray, option: np.ndarray, n_items: int, k: int) -> np.ndarray:
    """(n_items, k) float counts of votes from aligned (item index, option index) arrays."""
    item_index = np.asarray(item_index, dtype=np.int64)
    option = np.asarray(option, dtype=np.int64)
    return np.bincount(item_index * k + option, minlength=n_items * k).reshape(n_items, k).astype(float)


def ratings_matrix(
    item_index: np.ndarray, annotator: np.ndarray, option: np.ndarray, n_items: int
) -> tuple[np.ndarray, list[str]]:
    """(n_items, m) option per (item, named annotator), −1 where not labelled; and the annotator ids.

    ``annotator`` holds ids; votes with an empty id (anonymous counts) are left out.
    """
    annotator = np.asarray(annotator, dtype=object).astype(str)
    named = annotator != ""
    ids, col = np.unique(annotator[named], return_inverse=True)
    out = np.full((n_items, len(ids)), -1, dtype=np.int64)
    out[np.asarray(item_index)[named], col] = np.asarray(option)[named]
    return out, [str(i) for i in ids]


def pairwise_agreement(counts: np.ndarray) -> float:
    """Mean over items (≥ 2 votes) of the share of agreeing pairs Σ_j c_j(c_j − 1) / (n(n − 1))."""
    c = np.asarray(counts, dtype=float)
    n = c.sum(axis=1)
    use = n >= 2
    if not use.any():
        return float("nan")
    return float(np.mean((c[use] * (c[use] - 1)).sum(axis=1) / (n[use] * (n[use] - 1))))


def model_vote_share(counts: np.ndarray, model: np.ndarray) -> float:
    """Mean over items of the share of votes for the model's option (agreement with a random annotator)."""
    c = np.asarray(counts, dtype=float)
    n = c.sum(axis=1)
    use = n > 0
    if not use.any():
        return float("nan")
    return float(np.mean(c[use, np.asarray(model)[use]] / n[use]))


def krippendorff_alpha(counts: np.ndarray, level: str = "nominal") -> float:
    """Krippendorff's α from value counts (n, k) with the ``krippendorff`` package.

    ``level``: nominal, ordinal or interval; for the last two option j is level j (lowest first).
    Items with fewer than two votes do not enter (α's pairable values). NaN without disagreement
    possible (fewer than two pairable values, or a single option used).
    """
    import krippendorff

    c = np.asarray(counts, dtype=float)
    c = c[c.sum(axis=1) >= 2]
    if c.shape[0] == 0 or np.count_nonzero(c.sum(axis=0)) < 2:
        return float("nan")
    k = c.shape[1]
    return float(
        krippendorff.alpha(value_counts=c, value_domain=list(range(k)), level_of_measurement=level)  # type: ignore[arg-type]
    )


def fleiss_kappa(counts: np.ndarray) -> tuple[float, int]:
    """Fleiss' κ over the items with the most common number of votes (≥ 2); returns (κ, items used)."""
    c = np.asarray(counts, dtype=float)
    n = c.sum(axis=1)
    several = n[n >= 2]
    if several.size == 0:
        return float("nan"), 0
    values, freq = np.unique(several, return_counts=True)
    r = values[np.argmax(freq)]  # ties: the smaller count (np.unique sorts)
    t = c[n == r]
    p_j = t.sum(axis=0) / t.sum()
    p_i = ((t * t).sum(axis=1) - r) / (r * (r - 1))
    p_e = float(np.sum(p_j * p_j))
    if p_e >= 1.0:
        return float("nan"), int(t.shape[0])
    return float((p_i.mean() - p_e) / (1.0 - p_e)), int(t.shape[0])


def cohen_kappa(a: np.ndarray, b: np.ndarray, k: int, weights: str | None = None) -> float:
    """Cohen's κ between two raters' option indices (scikit-learn), NaN when undefined."""
    from sklearn.metrics import cohen_kappa_score

    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        value = cohen_kappa_score(a, b, labels=list(range(k)), weights=weights)
    return float(value)


def pairwise_kappa(ratings: np.ndarray, k: int, weights: str | None = None) -> tuple[float, int]:
    """Mean Cohen's κ over annotator pairs sharing ≥ :data:`MIN_SHARED_ITEMS` items; (mean, pairs used)."""
    r = np.asarray(ratings)
    values = []
    for i, j in combinations(range(r.shape[1]), 2):
        both = (r[:, i] >= 0) & (r[:, j] >= 0)
        if both.sum() >= MIN_SHARED_ITEMS:
            values.append(cohen_kappa(r[both, i], r[both, j], k, weights))
    finite = [v for v in values if np.isfinite(v)]
    return (float(np.mean(finite)) if finite else float("nan")), len(finite)


@dataclass
class AgreementReport:
    """Agreement figures of one question: annotators among themselves, and the model against them.

    ``annotators`` and ``model`` map a figure of :data:`AGREEMENT_INFO` to its value (``model`` is
    empty without model answers); ``per_annotator`` has, per named annotator, how many items it
    labelled and κ (and quadratic-weighted κ for score questions) between the model and it.
    """

    question: str
    qtype: str
    n_items: int  # items with >= 2 votes (and a model answer, when a model is given)
    n_votes: int
    n_annotators: int  # named annotators (0 when every vote is an anonymous count)
    votes_per_item: float
    annotators: dict[str, float] = field(default_factory=dict)
    model: dict[str, float] = field(default_factory=dict)
    per_annotator: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        clean = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in self.__dict__.items()}
        for key in ("annotators", "model"):
            clean[key] = {k: (v if np.isfinite(v) else None) for k, v in getattr(self, key).items()}
        return clean

    def to_frame(self) -> pd.DataFrame:
        """One row per figure: question, figure, annotators, model, meaning."""
        rows = [
            {
                "question": self.question,
                "figure": name,
                "annotators": value,
                "model": self.model.get(name, np.nan),
                "meaning": AGREEMENT_INFO.get(name, ""),
            }
            for name, value in self.annotators.items()
        ]
        return pd.DataFrame(rows, columns=["question", "figure", "annotators", "model", "meaning"])


def agreement_report(
    counts: np.ndarray,
    *,
    ratings: np.ndarray | None = None,
    annotator_ids: list[str] | None = None,
    model: np.ndarray | None = None,
    qtype: str = "choice",
    question: str = "",
) -> AgreementReport:
    """Agreement among annotators and of the model with them, on the items with at least two votes.

    Parameters
    ----------
    counts : (n, k) votes per item and option
    ratings : (n, m) option per named annotator (−1 = not labelled), optional (anonymous votes: None)
    model : (n,) the model's top option per item, optional; items are the same rows as ``counts``
    qtype : ``score`` adds ordinal/interval α and quadratic-weighted κ
    """
    c = np.asarray(counts, dtype=float)
    k = c.shape[1]
    use = c.sum(axis=1) >= 2
    c = c[use]
    r = None if ratings is None or np.asarray(ratings).shape[1] == 0 else np.asarray(ratings)[use]
    mdl = None if model is None else np.asarray(model, dtype=np.int64)[use]
    rep = AgreementReport(
        question,
        qtype,
        n_items=int(use.sum()),
        n_votes=int(c.sum()),
        n_annotators=0 if r is None else int(r.shape[1]),
        votes_per_item=float(c.sum(axis=1).mean()) if use.any() else 0.0,
    )
    if not use.any():
        rep.notes.append("no item has two or more votes: agreement needs several annotators per item")
        return rep
    levels = ["nominal"] + (["ordinal", "interval"] if qtype == "score" else [])
    one_hot = None if mdl is None else np.eye(k)[mdl]
    rep.annotators["pairwise_agreement"] = pairwise_agreement(c)
    if mdl is not None:
        rep.model["pairwise_agreement"] = model_vote_share(c, mdl)
    for level in levels:
        rep.annotators[f"krippendorff_alpha_{level}"] = krippendorff_alpha(c, level)
        if one_hot is not None:
            rep.model[f"krippendorff_alpha_{level}"] = krippendorff_alpha(c + one_hot, level)
    rep.annotators["fleiss_kappa"], n_fleiss = fleiss_kappa(c)
    if n_fleiss < rep.n_items:
        rep.notes.append(
            f"Fleiss' κ uses the {n_fleiss:,} of {rep.n_items:,} items with the most common number of votes"
        )
    if one_hot is not None:
        rep.model["fleiss_kappa"] = fleiss_kappa(c + one_hot)[0]
    if r is None:
        rep.notes.append("anonymous votes (counts): Cohen's κ needs annotator ids")
        return rep
    kappas = [("cohen_kappa", None)] + ([("quadratic_weighted_kappa", "quadratic")] if qtype == "score" else [])
    for name, weights in kappas:
        rep.annotators[name], n_pairs = pairwise_kappa(r, k, weights)
        if r.shape[1] > 2:
            rep.notes.append(f"{name}: mean over {n_pairs} annotator pairs sharing ≥ {MIN_SHARED_ITEMS} items")
    ids = annotator_ids or [str(j) for j in range(r.shape[1])]
    if mdl is not None:
        per: dict[str, list[float]] = {name: [] for name, _ in kappas}
        for j, ann in enumerate(ids):
            mine = r[:, j] >= 0
            row: dict = {"annotator": ann, "n_items": int(mine.sum())}
            for name, weights in kappas:
                value = (
                    cohen_kappa(mdl[mine], r[mine, j], k, weights) if mine.sum() >= MIN_SHARED_ITEMS else float("nan")
                )
                row[f"{name}_model"] = value if np.isfinite(value) else None
                if np.isfinite(value):
                    per[name].append(value)
            rep.per_annotator.append(row)
        for name, _ in kappas:
            rep.model[name] = float(np.mean(per[name])) if per[name] else float("nan")
    return rep
