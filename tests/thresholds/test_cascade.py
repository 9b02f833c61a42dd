"""Certified cascades (issue 16 item 2): the guarantee, the CLI, the format-2 policy
and the runtime applying it stage by stage.

The acceptance runs the tf-idf → MiniLM cascade on a seeded BANKING77 subset (all 9,415 training
rows kept so tf-idf is trained as usual; 6% of train as calibration = 588 items, 300 seeded test
items — MiniLM over every calibration and test item would take minutes on 2 cores).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from tests.conftest import ROOT, choice_responses, dataset_path, import_banking77, run_cli
from workbench.errors import PolicyError
from workbench.policy.model import content_hash
from workbench.policy.runtime import Policy

ALPHA, DELTA = 0.1, 0.1
PRICES = {"tfidf": 0.00001, "minilm": 0.0005}
REVIEW_COST = 0.05


@pytest.fixture(scope="module")
def b77_cascade(tmp_path_factory):
    """BANKING77 (full train, 6% of it as calibration, 300 seeded test items) answered by tf-idf and MiniLM."""
    tmp = tmp_path_factory.mktemp("cascade")
    pd.read_csv(dataset_path("banking77", "test.csv")).sample(300, random_state=0).to_csv(tmp / "test.csv", index=False)
    db = tmp / "wb.duckdb"
    import_banking77(
        db,
        dataset_path("banking77", "train.csv"),
        tmp / "test.csv",
        "--calibration-fraction",
        "0.06",
        "--seed",
        "0",
        check=True,
    )
    for name, provider in (("tfidf", "baseline:tfidf-logreg"), ("minilm", "local:minilm-zeroshot")):
        run_cli(
            "run",
            "--dataset",
            "b77",
            "--schema",
            str(ROOT / "experiments" / "schemas" / "banking77.yaml"),
            "--provider",
            provider,
            "--run-name",
            name,
            "--no-progress",
            "--json",
            db=db,
            check=True,
        )
    policy = tmp / "cascade.json"
    args = ["cascade", "--stage", "tfidf", "--stage", "minilm", "--question", "intent"]
    args += ["--max-error", str(ALPHA), "--delta", str(DELTA), "--review-cost", str(REVIEW_COST)]
    for run, usd in PRICES.items():
        args += ["--cost-per-call", f"{run}={usd}"]
    out = run_cli(*args, "--json", "--policy-out", str(policy), db=db, check=True)
    runs = json.loads(run_cli("runs", "list", "--json", db=db, check=True).stdout)["runs"]
    names = {r["name"]: r["run_id"] for r in runs}
    return {"db": db, "doc": json.loads(out.stdout), "policy": policy, "names": names}


@pytest.mark.slow  # builds the store and runs MiniLM over 888 items (~30 s on 2 cores)
def test_acceptance_tfidf_to_minilm_cascade_is_certified_and_cheaper(b77_cascade):
    doc = b77_cascade["doc"]
    t = doc["test"]
    single = {s["price_per_call_usd"]: s for s in doc["singles"]}
    minilm, tfidf = single[PRICES["minilm"]], single[PRICES["tfidf"]]
    print(
        "\ncascade tf-idf -> MiniLM on BANKING77 (alpha 0.1, delta 0.1, $0.00001 / $0.0005 per call, review $0.05):"
        f"\n  rules {[s['rule'] for s in doc['stages']]}"
        f"\n  calibration n={doc['calibration']['n_items']}, guarantee {doc['guarantee']}"
        f"\n  cascade: coverage {t['coverage']['value']:.3f}, error {t['error']['value']:.4f} "
        f"[{t['error']['low']:.4f}, {t['error']['high']:.4f}], escalated {t['escalated_at_stage']}, "
        f"cost/1000 ${t['cost_per_1000']:.4f}, p95 latency {t['latency_ms_p95']:.1f} ms"
    )
    for name, s in (("tf-idf", tfidf), ("MiniLM", minilm)):
        print(
            f"  {name} alone: certified {s['certified']}, coverage {s['coverage']['value']:.3f}, "
            f"error {s['error']['value']}, cost/1000 ${s['cost_per_1000']:.4f}, p95 latency {s['latency_ms_p95']:.1f} ms"
        )
    assert doc["certified"] and doc["guarantee"]["risk_upper_bound"] <= ALPHA
    assert doc["guarantee"]["p_value"] <= DELTA  # the chosen configuration was rejected in the sequence
    assert t["n_items"] == 300 and t["error"]["value"] <= ALPHA
    # the interval is the exact (Clopper-Pearson) one
    lo, hi = proportion_confint(t["n_errors"], t["n_accepted"], alpha=0.05, method="beta")
    assert (t["error"]["low"], t["error"]["high"]) == pytest.approx((lo, hi), abs=1e-9)
    # cost per 1,000 items recomputed from the routing shares: every item pays the first chosen stage,
    # escalated ones the next (a single stage: its price alone)
    chosen = [PRICES[{v: k for k, v in b77_cascade["names"].items()}[r]] for r in doc["chosen"]["run_ids"]]
    reach = [1.0, *t["escalated_at_stage"]]
    expected = 1000 * (sum(p * r for p, r in zip(chosen, reach, strict=True)) + REVIEW_COST * t["review_rate"])
    assert t["cost_per_1000"] == pytest.approx(expected, rel=1e-9)
    assert t["cost_per_1000"] < minilm["cost_per_1000"]  # the acceptance: cheaper than the expensive stage alone
    assert t["api_cost_per_1000"] < 1000 * PRICES["minilm"]
    # issue 28: never a configuration that a single stage of the same family beats on cost and coverage
    for s in doc["singles"]:
        if s["certified"]:
            assert not (s["cost_per_1000"] < t["cost_per_1000"] and s["coverage"]["value"] > t["coverage"]["value"])
    assert sum(t["accepted_at_stage"]) + t["review_rate"] == pytest.approx(1.0)


@pytest.mark.slow
def test_runtime_applies_the_cascade_policy_stage_by_stage(b77_cascade):
    """The written policy (format 2), loaded by the runtime: stage 0's decisions on tf-idf's answers,
    then stage 1's on MiniLM's answers for what was escalated, give the CLI's test figures."""
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    doc, path = b77_cascade["doc"], b77_cascade["policy"]
    pol = Policy.load(path)
    con = connect(b77_cascade["db"], read_only=True)
    try:
        answers = [load_answers(con, r, "intent", splits=["test"]) for r in ("tfidf", "minilm")]
    finally:
        con.close()
    if doc["chosen"]["kind"] == "single":
        # one model alone is the cheapest certified configuration: a plain (format 1) policy of it, whose
        # decisions on that model's test answers (its calibrator applied by the runtime) give the test figures
        assert pol.model.format_version == 1 and pol.model.cascade is None
        ans = answers[[b77_cascade["names"][n] for n in ("tfidf", "minilm")].index(doc["chosen"]["run_ids"][0])]
        order = np.argsort(ans.item_ids.astype(str))
        resp = choice_responses(pol.model.source.model, "intent", ans.option_ids, ans.probs[order])
        final = [d["intent"] for d in pol.decide_many(resp)]
        accepted = np.array([d.action == "accept" for d in final])
        wrong = np.array([d.accepted and d.option != ans.option_ids[ans.labels[order][i]] for i, d in enumerate(final)])
        assert {d.action for d in final} <= {"accept", "review"}
        assert accepted.sum() == doc["test"]["n_accepted"] and wrong.sum() == doc["test"]["n_errors"]
        return
    assert pol.model.format_version == 2 and len(pol.stages) == 2
    models = [s.source.model for s in pol.model.cascade.stages]

    def responses(ans, model):
        order = np.argsort(ans.item_ids.astype(str))
        return (
            choice_responses(model, "intent", ans.option_ids, ans.probs[order]),
            ans.labels[order],
            np.asarray(ans.option_ids),
        )

    r0, labels, opts = responses(answers[0], models[0])
    r1, _, _ = responses(answers[1], models[1])
    d0 = [d["intent"] for d in pol.decide_many(r0, stage=0)]
    assert {d.action for d in d0} <= {"accept", "escalate"}
    up = [i for i, d in enumerate(d0) if d.action == "escalate"]
    d1 = {i: d["intent"] for i, d in zip(up, pol.decide_many([r1[i] for i in up], stage=1), strict=True)}
    assert {d.action for d in d1.values()} <= {"accept", "review"}
    final = [d1.get(i, d) for i, d in enumerate(d0)]
    accepted = np.array([d.action == "accept" for d in final])
    wrong = np.array([d.accepted and d.option != opts[labels[i]] for i, d in enumerate(final)])
    t = doc["test"]
    assert len(up) / len(d0) == pytest.approx(t["escalated_at_stage"][0], abs=1e-12)
    assert accepted.sum() == t["n_accepted"] and wrong.sum() == t["n_errors"]
    # one decide() call on an escalated item: stage 0 escalates, stage 1 continues
    assert pol.decide(r0[up[0]], stage=0)["intent"].action == "escalate"
    assert pol.decide(r1[up[0]], stage=1)["intent"].action in ("accept", "review")
    # a stage-1 answer from the stage-0 model is not accepted
    assert pol.decide({**r1[up[0]], "model": models[0]}, stage=1)["intent"].action == "review"
    with pytest.raises(ValueError, match="stage must be"):
        pol.decide(r0[0], stage=2)

    # format: a cascade needs format 2; a reader of format 1 refuses it as newer, never half-reads it
    raw = json.loads(path.read_text())
    assert raw["format_version"] == 2 and "cascade" in raw
    old = json.loads(path.read_text())
    old["format_version"] = 1
    old["content_hash"] = content_hash(old)
    with pytest.raises(PolicyError, match="needs format_version 2"):
        Policy.from_dict(old)
    newer = json.loads(path.read_text())
    newer["format_version"] = 3
    newer["content_hash"] = content_hash(newer)
    with pytest.raises(PolicyError, match="newer than this runtime reads"):
        Policy.from_dict(newer)


def test_cli_refuses_a_malformed_price_with_exit_code_2(tmp_path):
    proc = run_cli(
        "cascade", "--stage", "a", "--stage", "b", "--question", "q", "--cost-per-call", "a", db=tmp_path / "wb.duckdb"
    )
    assert proc.returncode == 2 and "--cost-per-call 'a' is not RUN=USD" in proc.stderr
