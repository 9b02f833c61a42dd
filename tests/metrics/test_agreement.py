"""Agreement figures (workbench.metrics.agreement) against the reference implementations.

Our functions read vote *counts* (items × options) and the named votes; the references here read the
raw ratings (``krippendorff.alpha(reliability_data=…)``, statsmodels' ``fleiss_kappa`` on
``aggregate_raters``, scikit-learn's ``cohen_kappa_score`` per pair), so each figure is computed twice
from different inputs.
"""

from __future__ import annotations

from itertools import combinations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

from workbench.metrics.agreement import (
    agreement_report,
    fleiss_kappa,
    krippendorff_alpha,
    named_votes,
    pair_kappas,
    pairwise_agreement,
    vote_counts,
)

# scikit-learn warns where κ is 0/0 (both raters constant on their shared items); we return NaN there too
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")

# Krippendorff's worked example as the krippendorff package documents it (3 coders, 15 units, gaps):
# nominal α = 0.691, interval α = 0.811.
KRIPP_EXAMPLE = np.array(
    [
        [np.nan, np.nan, np.nan, np.nan, np.nan, 3, 4, 1, 2, 1, 1, 3, 3, np.nan, 3],
        [1, np.nan, 2, 1, 3, 3, 4, 3, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan],
        [np.nan, np.nan, 2, 1, 3, 4, 4, np.nan, 2, 1, 1, 3, 3, np.nan, 4],
    ]
)


def _from_ratings(ratings: np.ndarray, k: int) -> tuple[np.ndarray, tuple, list[str]]:
    """(counts, named votes, ids) through the same helpers the store path uses."""
    n, m = ratings.shape
    item, ann = np.nonzero(ratings >= 0)
    counts = vote_counts(item, ratings[item, ann], n, k)
    votes, ids = named_votes(item, np.char.add("a", ann.astype(str)), ratings[item, ann])
    return counts, votes, ids


def simulate(n: int, m: int, k: int, flip: float, seed: int, coverage: float = 1.0):
    """Gold uniform over k options; each annotator flips to a random other option w.p. ``flip``."""
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, k, n)
    flipped = rng.random((n, m)) < flip
    ratings = np.where(flipped, (gold[:, None] + rng.integers(1, k, (n, m))) % k, gold[:, None])
    missing = rng.random((n, m)) >= coverage
    missing[:, :2] = False  # every item keeps two votes
    return gold, np.where(missing, -1, ratings)


def test_krippendorff_published_example():
    ratings = np.where(np.isnan(KRIPP_EXAMPLE), 0, KRIPP_EXAMPLE).astype(int).T - 1  # items × coders, -1 missing
    counts, _, _ = _from_ratings(ratings, 4)
    assert krippendorff_alpha(counts, "nominal") == pytest.approx(0.691, abs=5e-4)
    assert krippendorff_alpha(counts, "interval") == pytest.approx(0.811, abs=5e-4)
    ordinal = krippendorff.alpha(reliability_data=KRIPP_EXAMPLE, level_of_measurement="ordinal")
    assert krippendorff_alpha(counts, "ordinal") == pytest.approx(ordinal, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("qtype", ["choice", "score"])
def test_report_matches_references_with_gaps(seed: int, qtype: str):
    k, m = 4, 5
    gold, ratings = simulate(400, m, k, flip=0.3, seed=seed, coverage=0.7)
    counts, votes, ids = _from_ratings(ratings, k)
    model = np.where(np.random.default_rng(seed + 10).random(gold.size) < 0.8, gold, (gold + 1) % k)
    rep = agreement_report(counts, votes=votes, annotator_ids=ids, model=model, qtype=qtype)
    assert rep.n_items == 400 and rep.n_annotators == m and rep.n_votes == int((ratings >= 0).sum())
    reliability = np.where(ratings >= 0, ratings, np.nan).T.astype(float)  # coders × items
    with_model = np.vstack([reliability, model[None, :].astype(float)])
    levels = ["nominal", "ordinal", "interval"] if qtype == "score" else ["nominal"]
    for level in levels:
        ref = krippendorff.alpha(reliability_data=reliability, level_of_measurement=level, value_domain=range(k))
        ref_model = krippendorff.alpha(reliability_data=with_model, level_of_measurement=level, value_domain=range(k))
        assert rep.annotators[f"krippendorff_alpha_{level}"] == pytest.approx(ref, abs=1e-12)
        assert rep.model[f"krippendorff_alpha_{level}"] == pytest.approx(ref_model, abs=1e-12)
    # Cohen: mean over annotator pairs (Light's kappa) and model vs each annotator, scikit-learn per pair
    weights = [None, "quadratic"] if qtype == "score" else [None]
    for w, name in zip(weights, ["cohen_kappa", "quadratic_weighted_kappa"]):
        pairs = []
        for i, j in combinations(range(m), 2):
            both = (ratings[:, i] >= 0) & (ratings[:, j] >= 0)
            pairs.append(cohen_kappa_score(ratings[both, i], ratings[both, j], weights=w))
        assert rep.annotators[name] == pytest.approx(np.mean(pairs), abs=1e-12)
        vs_model = []
        for j in range(m):
            mine = ratings[:, j] >= 0
            vs_model.append(cohen_kappa_score(model[mine], ratings[mine, j], weights=w))
        assert rep.model[name] == pytest.approx(np.mean(vs_model), abs=1e-12)
        assert [r[f"{name}_model"] for r in rep.per_annotator] == pytest.approx(vs_model, abs=1e-12)
    # Fleiss' kappa: only the items with the most common vote count enter
    n_votes = (ratings >= 0).sum(axis=1)
    values, freq = np.unique(n_votes, return_counts=True)
    usual = n_votes == values[np.argmax(freq)]
    table = np.stack([(ratings[usual] == j).sum(axis=1) for j in range(k)], axis=1)
    assert rep.annotators["fleiss_kappa"] == pytest.approx(sm_fleiss(table), abs=1e-12)
    assert any("Fleiss" in note for note in rep.notes)


def test_fleiss_full_table_and_model_as_one_more_rater():
    k = 3
    gold, ratings = simulate(300, 4, k, flip=0.25, seed=5)
    counts, votes, ids = _from_ratings(ratings, k)
    kappa, used = fleiss_kappa(counts)
    assert used == 300
    table, _ = aggregate_raters(ratings, n_cat=k)
    assert kappa == pytest.approx(sm_fleiss(table), abs=1e-12)
    rep = agreement_report(counts, votes=votes, annotator_ids=ids, model=gold)
    table_m, _ = aggregate_raters(np.column_stack([ratings, gold]), n_cat=k)
    assert rep.model["fleiss_kappa"] == pytest.approx(sm_fleiss(table_m), abs=1e-12)
    # the model is the gold label: it agrees with a random annotator w.p. 1 - flip (0.75 ± 3 s.e.)
    assert rep.model["pairwise_agreement"] == pytest.approx(0.75, abs=3 * np.sqrt(0.75 * 0.25 / 1200))


def test_pairwise_agreement_matches_the_flip_model():
    """Two independent annotators agree w.p. (1 - p)² + p²/(k - 1): 0.68 for p = 0.2, k = 2."""
    k, p = 2, 0.2
    _, ratings = simulate(20_000, 3, k, flip=p, seed=3)
    counts, _, _ = _from_ratings(ratings, k)
    expected = (1 - p) ** 2 + p**2 / (k - 1)
    assert pairwise_agreement(counts) == pytest.approx(expected, abs=0.01)


def test_two_annotators_give_cohens_kappa_and_anonymous_votes_give_none():
    k = 3
    gold, ratings = simulate(200, 2, k, flip=0.2, seed=7)
    counts, votes, ids = _from_ratings(ratings, k)
    rep = agreement_report(counts, votes=votes, annotator_ids=ids)
    assert rep.annotators["cohen_kappa"] == pytest.approx(cohen_kappa_score(ratings[:, 0], ratings[:, 1]))
    assert rep.model == {} and rep.per_annotator == []
    anon = agreement_report(counts, model=gold)
    assert "cohen_kappa" not in anon.annotators and any("anonymous" in n for n in anon.notes)
    assert anon.annotators["krippendorff_alpha_nominal"] == pytest.approx(rep.annotators["krippendorff_alpha_nominal"])
    frame = anon.to_frame()
    assert list(frame["figure"]) == ["pairwise_agreement", "krippendorff_alpha_nominal", "fleiss_kappa"]


def test_single_votes_have_no_agreement():
    counts = np.eye(3)[[0, 1, 2, 0]]
    rep = agreement_report(counts, model=np.array([0, 1, 2, 0]))
    assert rep.n_items == 0 and rep.annotators == {} and rep.notes
    assert np.isnan(krippendorff_alpha(counts))


@pytest.mark.parametrize("weights", [None, "quadratic"])
def test_pair_kappas_equal_sklearn_pair_by_pair(weights):
    """The vectorised κ of many pairs at once equals scikit-learn's, including degenerate pairs."""
    rng = np.random.default_rng(12)
    k, pairs = 4, 60
    sizes = rng.integers(1, 40, pairs)
    pair = np.repeat(np.arange(pairs) * 7, sizes)  # arbitrary pair ids
    a = rng.integers(0, k, pair.size)
    b = np.where(rng.random(pair.size) < 0.6, a, rng.integers(0, k, pair.size))
    a[pair == 0] = 2  # one pair where both raters always say 2: κ is 0/0
    b[pair == 0] = 2
    ids, shared, kappa = pair_kappas(pair, a, b, k, weights)
    assert list(ids) == list(np.arange(pairs) * 7) and list(shared) == list(sizes)
    for p, value in zip(ids, kappa):
        rows = pair == p
        with np.errstate(invalid="ignore", divide="ignore"):
            ref = cohen_kappa_score(a[rows], b[rows], labels=range(k), weights=weights)
        if np.isfinite(ref):
            assert value == pytest.approx(ref, abs=1e-12)
        else:
            assert np.isnan(value)


def test_many_annotators_few_items_each():
    """A crowd: 400 annotators, each item labelled by 3 of them; pairs that share < 2 items are left out."""
    rng = np.random.default_rng(13)
    n, k, crowd = 3000, 3, 400
    gold = rng.integers(0, k, n)
    who = np.stack([rng.choice(crowd, 3, replace=False) for _ in range(n)])
    opts = np.where(rng.random((n, 3)) < 0.2, (gold[:, None] + rng.integers(1, k, (n, 3))) % k, gold[:, None])
    item = np.repeat(np.arange(n), 3)
    counts = vote_counts(item, opts.ravel(), n, k)
    votes, ids = named_votes(item, np.char.add("w", who.ravel().astype(str)), opts.ravel())
    rep = agreement_report(counts, votes=votes, annotator_ids=ids, model=gold)
    # reference: every annotator pair sharing >= 2 items, scikit-learn on the items they share
    frame = pd.DataFrame({"item": item, "who": who.ravel(), "opt": opts.ravel()})
    wide = frame.pivot(index="item", columns="who", values="opt")
    cols = wide.to_numpy()
    shared = (~np.isnan(cols)).astype(int)
    co = shared.T @ shared
    refs = []
    for i, j in zip(*np.nonzero(np.triu(co, 1) >= 2)):
        both = ~np.isnan(cols[:, i]) & ~np.isnan(cols[:, j])
        with np.errstate(invalid="ignore", divide="ignore"):
            refs.append(cohen_kappa_score(cols[both, i], cols[both, j], labels=range(k)))
    refs = np.asarray(refs)
    assert rep.annotators["cohen_kappa"] == pytest.approx(np.nanmean(refs), abs=1e-12)
    assert rep.n_annotators == crowd and len(rep.per_annotator) == crowd
