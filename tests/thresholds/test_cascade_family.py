"""Cascades on equal footing with single models (issue 28 §2): every stage alone is a configuration of the
same Learn-then-Test family as the cascades, so a single stage that is cheaper is recommended, and the
family-wise correction counts every configuration, single stages included.

Checked against brute force: every configuration of a small family routed item by item
(:func:`route`), its p-value from :func:`hoeffding_bentkus_p_values`, Bonferroni–Holm over all of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.answers import RunAnswers
from workbench.thresholds.cascade import (
    AlignedStages,
    CascadeOptions,
    choose_cascade,
    decode_configuration,
    evaluate_cascade,
    route,
    search_family,
    structures,
)
from workbench.thresholds.guarantees import hoeffding_bentkus_p_values

K = 4


def _answers(run_id: str, labels: np.ndarray, accuracy: float, sharp: float, seed: int, price: float) -> RunAnswers:
    """A run whose top option is right with probability ``accuracy``; right answers are confident
    (p_top around ``sharp``), wrong ones less so."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    right = rng.random(n) < accuracy
    top = np.where(right, labels, (labels + rng.integers(1, K, n)) % K)
    p_top = np.where(right, rng.uniform(sharp - 0.1, sharp + 0.04, n), rng.uniform(0.3, 0.75, n)).clip(0.3, 0.99)
    probs = np.full((n, K), 0.0)
    probs[np.arange(n), top] = p_top
    rest = (1 - p_top) / (K - 1)
    probs += np.where(probs == 0, rest[:, None], 0.0)
    return RunAnswers(
        run_id=run_id,
        question="intent",
        qtype="choice",
        option_ids=[f"o{k}" for k in range(K)],
        item_ids=np.array([f"i{i:05d}" for i in range(n)]),
        splits=np.array(["calibration"] * n),
        probs=probs,
        labels=labels,
        failed=np.zeros(n, dtype=bool),
        failure_kind=np.array([None] * n, dtype=object),
        latency_ms=np.full(n, 5.0),
        cost_usd=np.full(n, price),
        input_tokens=np.zeros(n),
    )


def test_a_single_stage_that_is_cheaper_and_covers_more_is_the_recommendation():
    """Stage 0 is cheap and good, stage 1 expensive and poor: stage 0 alone is certified, covers more and
    costs less than every cascade, so it is recommended (the old joint grid could only pick a cascade)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, K, 6000)
    cheap = _answers("run-cheap", labels, 0.97, 0.93, 1, 0.00001)
    dear = _answers("run-dear", labels, 0.6, 0.7, 2, 0.01)
    cal = [a.select(np.arange(6000) < 3000) for a in (cheap, dear)]
    test = [a.select(np.arange(6000) >= 3000) for a in (cheap, dear)]
    res = choose_cascade(cal, test, CascadeOptions(alpha=0.05, delta=0.1, review_cost=0.05))
    doc = res.to_dict()
    assert res.certified and res.structure == [0]
    assert doc["chosen"] == {"structure": "run-cheap alone", "kind": "single", "run_ids": ["run-cheap"]}
    assert len(doc["stages"]) == 1 and doc["stages"][0]["rule"]["fallback"] == "review"
    assert doc["stages"][0]["calibrator"]["type"] == "temperature"  # recalibrated like choose_thresholds
    by = {c["structure"]: c for c in doc["configurations"]}
    assert set(by) == {"run-cheap alone", "run-dear alone", "run-cheap → run-dear"}
    chosen = by["run-cheap alone"]
    assert chosen["chosen"] and chosen["certified"]
    for c in doc["configurations"]:  # no certified configuration is cheaper on calibration
        if c["certified"]:
            assert chosen["calibration"]["expected_cost_per_1000"] <= c["calibration"]["expected_cost_per_1000"]
    # and on test the recommendation is dominated by no other configuration (cost and coverage)
    t = chosen["test"]
    for c in doc["configurations"]:
        o = c["test"]
        assert not (o["cost_per_1000"] < t["cost_per_1000"] and o["coverage"]["value"] > t["coverage"]["value"])
    # the single-stage alternatives are listed with cost and coverage side by side
    assert [s["run_id"] for s in doc["singles"]] == ["run-cheap", "run-dear"]
    assert doc["singles"][0]["chosen"] and doc["singles"][0]["coverage"] == t["coverage"]
    assert doc["test"]["error"]["value"] <= 0.05


def _aligned(n: int, seed: int) -> AlignedStages:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    al = AlignedStages(np.arange(n).astype(str), labels, [], [], [], [], [])
    for acc in (0.8, 0.9):
        x = rng.random(n)
        al.x.append(np.where(rng.random(n) < 0.03, np.nan, x))  # a few failures: never pass
        al.y.append(x * rng.random(n))
        right = rng.random(n) < np.clip(acc + 0.4 * (x - 0.5), 0, 1)
        al.predicted.append(np.where(right, labels, (labels + 1) % 4))
        al.latency_ms.append(rng.gamma(2.0, 10.0, n))
        al.cost_usd.append(np.zeros(n))
    return al


def _brute(al: AlignedStages, opts: CascadeOptions, prices: np.ndarray, rows: np.ndarray) -> list[dict]:
    """Every configuration of the family routed item by item on ``rows``."""
    total = sum((4 ** (2 * (len(st) - 1)) if len(st) > 1 else 1) * opts.grid**2 for st in structures(len(al.x)))
    out = []
    for g in range(total):
        st, rules = decode_configuration(g, len(al.x), opts)
        sub = al.select(rows, stages=st)
        where = route(sub, rules)
        pred = np.choose(np.minimum(where, len(st) - 1), sub.predicted)
        acc = where < len(st)
        out.append(
            {
                "g": g,
                "structure": st,
                "rules": rules,
                "acc": int(acc.sum()),
                "err": int((acc & (pred != sub.labels)).sum()),
                "cost": evaluate_cascade(sub, rules, prices[list(st)], opts)["cost_per_1000"] / 1000.0,
            }
        )
    return out


def test_holm_counts_every_configuration_single_stages_included():
    """Holm over the family equals brute-force Holm over all 16 + 16 + 256 configurations (grid 4: each
    stage alone, and every first-stage rule × every second-stage rule) — the single stages are part of
    the count, and copies (rules accepting the same items) are counted too."""
    al = _aligned(1500, 3)
    opts = CascadeOptions(alpha=0.2, delta=0.1, method="holm", grid=4, max_early=16, review_cost=0.05)
    prices = np.array([0.001, 0.01])
    res = search_family(al, np.zeros(1500, dtype=bool), prices, opts)
    assert res.n_configurations == [16, 16, 256] and res.level == pytest.approx(0.1 / 288)
    brute = _brute(al, opts, prices, np.arange(1500))
    p = hoeffding_bentkus_p_values(np.array([b["err"] for b in brute]), np.array([b["acc"] for b in brute]), 0.2)
    order = np.argsort(p, kind="stable")
    ok = np.cumprod(p[order] <= 0.1 / (288 - np.arange(288))).astype(bool)
    rejected = np.zeros(288, dtype=bool)
    rejected[order[ok]] = True
    for k, st in enumerate(res.structures):
        in_st = np.array([b["structure"] == st for b in brute])
        assert res.n_certified[k] == int((rejected & in_st).sum())
    assert rejected.any() and sum(res.n_certified) == int(rejected.sum())
    best = min((b for b in brute if rejected[b["g"]]), key=lambda b: (b["cost"], -b["acc"], b["g"]))
    assert res.structures[res.chosen] == best["structure"]
    assert res.best[res.chosen]["rules"] == best["rules"]
    assert res.best[res.chosen]["cost"] == pytest.approx(best["cost"], rel=1e-12)
    # with the single stages left out, Holm would divide by 256 and certify more: they are counted
    ok256 = np.cumprod(np.sort(p[32:]) <= 0.1 / (256 - np.arange(256))).astype(bool)
    assert ok256.sum() >= (rejected[32:]).sum()


def test_fixed_sequence_tests_single_stages_and_cascades_in_one_sequence():
    """The tested configurations (picked and ordered on held-apart items) have the counts of their routing,
    hold the single stages, are each the cheapest held-apart configuration of their held-apart counts, and
    the certified ones are the prefix whose p-values are at most the level; the choice is the cheapest of them."""
    n = 2000
    al = _aligned(n, 5)
    opts = CascadeOptions(alpha=0.2, delta=0.1, grid=4, max_early=16, review_cost=0.05)
    prices = np.array([0.001, 0.0001])  # the second, better stage is also the cheaper one
    held = np.random.default_rng(7).random(n) < 0.3
    res = search_family(al, held, prices, opts)
    q = res.sequence
    assert sum(res.n_configurations) == 288
    assert res.levels == pytest.approx([0.08, 0.08, 0.02])  # Bonferroni: single stages 0.8 δ, cascades 0.2 δ
    h_rows, c_rows = np.flatnonzero(held), np.flatnonzero(~held)
    on_h = {b["g"]: b for b in _brute(al, opts, prices, h_rows)}
    on_c = {b["g"]: b for b in _brute(al, opts, prices, c_rows)}
    tested = {res.structures[k] for k in q["k"]}
    assert (1,) in tested and (0, 1) in tested  # single stages and cascades are both tested
    single = np.array([len(res.structures[k]) == 1 for k in q["k"]])
    assert single[: single.sum()].all()  # the single stages' sequence, then the cascades'
    for part in (single, ~single):  # each configuration cheaper (held apart) than those before it
        assert (np.diff(q["cost_h"][part]) < 0).all()
    for i, g in enumerate(q["gidx"]):
        h, c = on_h[int(g)], on_c[int(g)]
        assert (q["ah"][i], q["eh"][i], q["ac"][i], q["ec"][i]) == (h["acc"], h["err"], c["acc"], c["err"])
        assert res.structures[q["k"][i]] == h["structure"]
        same = [
            b
            for b in on_h.values()
            if (b["acc"], b["err"]) == (h["acc"], h["err"]) and b["structure"] == h["structure"]
        ]
        assert h["cost"] == pytest.approx(min(b["cost"] for b in same), rel=1e-12)
    p = hoeffding_bentkus_p_values(q["ec"], q["ac"], 0.2)
    for part, level in ((single, 0.08), (~single, 0.02)):  # each sequence stops at its first non-rejection
        assert np.array_equal(q["rejected"][part], np.cumprod(p[part] <= level + 1e-15).astype(bool))
    assert q["rejected"].any()
    every = _brute(al, opts, prices, np.arange(n))
    cert = [every[int(g)] for g in q["gidx"][q["rejected"]]]
    best = min(cert, key=lambda b: (b["cost"], -b["acc"], b["g"]))
    assert res.structures[res.chosen] == best["structure"] and res.best[res.chosen]["rules"] == best["rules"]


def test_cli_recommends_one_model_alone_and_writes_its_plain_policy(tmp_path):
    """Through the real CLI on a real store: a cascade of a run with itself can only cost more than the
    run alone, so the run alone wins; the text says so, and --policy-out writes a plain (format 1) policy
    whose decisions on the run's test answers (its fitted calibrator applied by the runtime) give the
    reported test figures."""
    import json

    import pandas as pd

    from tests.conftest import ROOT, choice_responses, dataset_path, import_banking77, run_cli
    from workbench.policy.runtime import Policy
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    pd.read_csv(dataset_path("banking77", "test.csv")).sample(600, random_state=0).to_csv(
        tmp_path / "test.csv", index=False
    )
    db = tmp_path / "wb.duckdb"
    train = dataset_path("banking77", "train.csv")
    import_banking77(
        db,
        train,
        tmp_path / "test.csv",
        "--calibration-fraction",
        "0.15",
        "--seed",
        "0",
        check=True,
    )
    schema = str(ROOT / "experiments" / "schemas" / "banking77.yaml")
    run_cli(
        "run",
        "--dataset",
        "b77",
        "--schema",
        schema,
        "--provider",
        "baseline:tfidf-logreg",
        "--run-name",
        "tfidf",
        "--no-progress",
        "--json",
        db=db,
        check=True,
    )
    policy = tmp_path / "p.json"
    args = ["cascade", "--stage", "tfidf", "--stage", "tfidf", "--question", "intent", "--max-error", "0.1"]
    args += ["--cost-per-call", "tfidf=0.001", "--policy-out", str(policy)]
    doc = json.loads(run_cli(*args, "--json", db=db, check=True).stdout)
    assert doc["certified"] and doc["chosen"]["kind"] == "single" and doc["stages"][0]["rule"]["fallback"] == "review"
    text = run_cli(*args[:-2], db=db, check=True).stdout
    assert "alone recommended, certified" in text and "a single stage is the cheapest certified configuration" in text
    assert "own certificate" in text  # each stage under its own certificate, side by side
    pol = Policy.load(policy)
    assert pol.model.format_version == 1 and pol.model.cascade is None
    assert pol.model.questions["intent"].calibrator.type == "temperature"
    con = connect(db, read_only=True)
    try:
        ans = load_answers(con, doc["chosen"]["run_ids"][0], "intent", splits=["test"])
    finally:
        con.close()
    resp = choice_responses(pol.model.source.model, "intent", ans.option_ids, ans.probs)
    final = [d["intent"] for d in pol.decide_many(resp)]
    accepted = np.array([d.action == "accept" for d in final])
    wrong = np.array([d.accepted and d.option != ans.option_ids[ans.labels[i]] for i, d in enumerate(final)])
    assert accepted.sum() == doc["test"]["n_accepted"] and wrong.sum() == doc["test"]["n_errors"]


def test_a_cascade_must_be_cheaper_than_the_best_single_stage_beyond_noise():
    """A certified cascade that saves less than ``prefer_single_z`` standard errors of the paired per-item
    cost difference over the cheapest certified single stage is not recommended; with z = 0 the cheapest
    certified configuration is."""
    from dataclasses import replace

    from workbench.thresholds.cascade import FamilySearch, _prefer_single, per_item_cost

    al = _aligned(3000, 11)
    prices = np.array([0.001, 0.00001])
    opts = CascadeOptions(review_cost=0.05)
    single_rules, cascade_rules = [(0.5, 0.0)], [(0.5, 0.0), (0.999, 0.0)]  # the second stage takes a few items
    c1 = per_item_cost(al.select(stages=(0,)), single_rules, prices[[0]], opts)
    c2 = per_item_cost(al.select(stages=(0, 1)), cascade_rules, prices, opts)
    d = c1 - c2
    assert 0 < d.mean() < 1.645 * d.std(ddof=1) / np.sqrt(len(d))  # cheaper, but within the noise
    best = [
        {"key": (float(c1.mean()), 0, 0), "rules": single_rules},
        None,
        {"key": (float(c2.mean()), 0, 1), "rules": cascade_rules},
    ]
    found = FamilySearch([(0,), (1,), (0, 1)], [1, 1, 1], [1, 1, 1], [1, 0, 1], best, 2, 0.1, [0.08, 0.08, 0.02])
    chosen, margin = _prefer_single(found, al, prices, opts)
    assert chosen == 0 and margin["saving"] == pytest.approx(d.mean(), rel=1e-12)
    assert _prefer_single(found, al, prices, replace(opts, prefer_single_z=0.0)) == (2, None)
