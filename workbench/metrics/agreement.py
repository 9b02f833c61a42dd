"""Agreement between annotators, and between the model and the annotators: the noise floor.

Inputs are arrays, no store access:

- ``counts`` (n, k): votes per item and option (every vote, named or anonymous);
- ``votes`` (item index, annotator index, option) aligned int arrays, optional: the *named*
  annotators' votes (absent when votes are anonymous counts); sparse, so crowds of many annotators
  who each label a few items cost memory in proportion to the votes;
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

α comes from the ``krippendorff`` package. Cohen's κ (plain and quadratic-weighted) is computed for
every annotator pair at once from bincounts over the pairs of votes that share an item (a loop over
scikit-learn calls would cost one call per pair: 500k pairs for 1,000 annotators) and is
cross-checked against scikit-learn's ``cohen_kappa_score`` pair by pair in the tests; Fleiss' κ is the
textbook formula, cross-checked against ``statsmodels.stats.inter_rater.fleiss_kappa`` (statsmodels is
a large dependency for a six-line formula).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def named_votes(
    item_index: np.ndarray, annotator: np.ndarray, option: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[str]]:
    """The named annotators' votes as ``(item index, annotator index, option)`` and the annotator ids.

    ``annotator`` holds ids; votes with an empty id (anonymous counts) are left out.
    """
    annotator = np.asarray(annotator, dtype=object).astype(str)
    named = annotator != ""
    ids, col = np.unique(annotator[named], return_inverse=True)
    votes = (
        np.asarray(item_index, dtype=np.int64)[named],
        col.astype(np.int64),
        np.asarray(option, dtype=np.int64)[named],
    )
    return votes, [str(i) for i in ids]


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


def pair_kappas(
    pair: np.ndarray, option_a: np.ndarray, option_b: np.ndarray, k: int, weights: str | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cohen's κ of many rater pairs at once, from one row per item both raters of a pair labelled.

    ``pair`` (r,) identifies the pair of each row; returns (pair ids, items shared, κ per pair).
    ``weights``: None or ``"quadratic"`` (scikit-learn's ``cohen_kappa_score`` conventions;
    NaN where the chance term leaves nothing to correct, as scikit-learn's 0/0).
    """
    ids, pid = np.unique(np.asarray(pair), return_inverse=True)
    p = ids.size
    a, b = np.asarray(option_a, dtype=np.int64), np.asarray(option_b, dtype=np.int64)
    total = np.bincount(pid, minlength=p).astype(float)
    row = np.bincount(pid * k + a, minlength=p * k).reshape(p, k).astype(float)
    col = np.bincount(pid * k + b, minlength=p * k).reshape(p, k).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        if weights is None:
            po = np.bincount(pid, weights=(a == b).astype(float), minlength=p) / total
            pe = np.einsum("pk,pk->p", row, col) / total**2
            kappa = (po - pe) / (1.0 - pe)
        elif weights == "quadratic":  # 1 - Σ w·O / Σ w·E with w = (i - j)²; E = outer(row, col) / total
            lv = np.arange(k, dtype=float)
            observed = np.bincount(pid, weights=((a - b) ** 2).astype(float), minlength=p)
            expected = (row @ lv**2 + col @ lv**2 - 2.0 * (row @ lv) * (col @ lv) / total) if p else np.zeros(0)
            kappa = 1.0 - observed / expected
        else:
            raise ValueError(f"weights={weights!r}: None or 'quadratic'")
    return ids, total.astype(np.int64), np.where(np.isfinite(kappa), kappa, np.nan)


def _vote_pairs(item: np.ndarray, rater: np.ndarray, option: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every pair of votes on the same item from two raters (rater_a < rater_b): 4 aligned arrays."""
    order = np.lexsort((rater, item))
    item, rater, option = item[order], rater[order], option[order]
    parts: list[tuple[np.ndarray, ...]] = []
    for d in range(1, item.size):
        same = item[d:] == item[:-d]
        if not same.any():
            break
        parts.append((rater[:-d][same], rater[d:][same], option[:-d][same], option[d:][same]))
    if not parts:
        return tuple(np.zeros(0, np.int64) for _ in range(4))
    return tuple(np.concatenate([part[j] for part in parts]) for j in range(4))


def pairwise_kappa(
    votes: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, weights: str | None = None
) -> tuple[float, int]:
    """Mean Cohen's κ over annotator pairs sharing ≥ :data:`MIN_SHARED_ITEMS` items (Light's κ); (mean, pairs)."""
    item, rater, option = (np.asarray(v, dtype=np.int64) for v in votes)
    ra, rb, oa, ob = _vote_pairs(item, rater, option)
    if ra.size == 0:
        return float("nan"), 0
    _, shared, kappa = pair_kappas(ra * (int(rater.max()) + 1) + rb, oa, ob, k, weights)
    use = (shared >= MIN_SHARED_ITEMS) & np.isfinite(kappa)
    return (float(kappa[use].mean()) if use.any() else float("nan")), int(use.sum())


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
    votes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    annotator_ids: list[str] | None = None,
    model: np.ndarray | None = None,
    qtype: str = "choice",
    question: str = "",
) -> AgreementReport:
    """Agreement among annotators and of the model with them, on the items with at least two votes.

    Parameters
    ----------
    counts : (n, k) votes per item and option (named and anonymous)
    votes : (item index into ``counts``, annotator index, option), the named annotators' votes
        (:func:`named_votes`); None when every vote is an anonymous count (no Cohen's κ then)
    model : (n,) the model's top option per item, optional; same rows as ``counts``
    qtype : ``score`` adds ordinal/interval α and quadratic-weighted κ
    """
    c = np.asarray(counts, dtype=float)
    k = c.shape[1]
    use = c.sum(axis=1) >= 2
    new_row = np.cumsum(use) - 1  # row of each kept item in c[use]
    c = c[use]
    mdl = None if model is None else np.asarray(model, dtype=np.int64)[use]
    named = None
    n_annotators = 0
    if votes is not None and len(votes[0]):
        item, ann, opt = (np.asarray(v, dtype=np.int64) for v in votes)
        keep = use[item]
        named = (new_row[item[keep]], ann[keep], opt[keep])
        n_annotators = len(annotator_ids) if annotator_ids is not None else int(ann.max()) + 1
    rep = AgreementReport(
        question,
        qtype,
        n_items=int(use.sum()),
        n_votes=int(c.sum()),
        n_annotators=n_annotators,
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
    if named is None:
        rep.notes.append("anonymous votes (counts): Cohen's κ needs annotator ids")
        return rep
    kappas = [("cohen_kappa", None)] + ([("quadratic_weighted_kappa", "quadratic")] if qtype == "score" else [])
    for name, weights in kappas:
        rep.annotators[name], n_pairs = pairwise_kappa(named, k, weights)
        if rep.n_annotators > 2:
            rep.notes.append(f"{name}: mean over {n_pairs:,} annotator pairs sharing ≥ {MIN_SHARED_ITEMS} items")
    if mdl is None:
        return rep
    ids = annotator_ids or [str(j) for j in range(rep.n_annotators)]
    item, ann, opt = named
    labelled = np.bincount(ann, minlength=len(ids))
    per = {}
    for name, weights in kappas:  # κ(model, annotator j) over the items j labelled, every j at once
        who, shared, kappa = pair_kappas(ann, mdl[item], opt, k, weights)
        value = np.full(len(ids), np.nan)
        value[who] = np.where(shared >= MIN_SHARED_ITEMS, kappa, np.nan)
        per[name] = value
        rep.model[name] = float(np.nanmean(value)) if np.isfinite(value).any() else float("nan")
    for j, annotator in enumerate(ids):
        row: dict = {"annotator": annotator, "n_items": int(labelled[j])}
        for name, _ in kappas:
            row[f"{name}_model"] = float(per[name][j]) if np.isfinite(per[name][j]) else None
        rep.per_annotator.append(row)
    return rep
