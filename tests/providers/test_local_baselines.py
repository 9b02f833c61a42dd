"""In-process baselines: tfidf-logreg (cross-checked against scikit-learn), rules, replay, registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.baselines import LOGREG_PARAMS, TFIDF_PARAMS, UNSEEN_FLOOR, RulesProvider, build_tfidf_logreg
from workbench.providers.registry import ProviderContext, get_provider, public_spec
from workbench.runner import run_experiment
from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import get_run, load_answers

ROOT = Path(__file__).resolve().parents[2]
BANKING = next(
    p
    for p in (ROOT / "datasets" / "banking77", ROOT.parent / "shared" / "datasets" / "banking77")
    if (p / "test.csv").exists()
)
CATEGORIES = json.loads((BANKING / "categories.json").read_text())


def schema_with(options: list[str]) -> DecisionSchema:
    return DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {"type": "choice", "instructions": "Which intent?", "criteria": {o: None for o in options}}
            }
        }
    )


@pytest.fixture
def store(tmp_path):
    """A real store with every 5th train row and every 10th test row of BANKING77."""
    frames = {}
    for split, every in (("train", 5), ("test", 10)):
        frames[split] = pd.read_csv(BANKING / f"{split}.csv").iloc[::every].reset_index(drop=True)
        frames[split].to_csv(tmp_path / f"{split}.csv", index=False)
    con = connect(tmp_path / "wb.duckdb")
    import_dataset(
        con,
        [tmp_path / "train.csv", tmp_path / "test.csv"],
        ImportSpec(name="b77", text_column="text", labels={"intent": "category"}),
    )
    return con, frames


# -- baseline:tfidf-logreg -------------------------------------------------------------------------
def test_tfidf_logreg_equals_a_scikit_learn_pipeline_fitted_on_train_only(store):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    con, frames = store
    provider = build_tfidf_logreg(con, "b77")
    schema = schema_with(CATEGORIES)
    texts = frames["test"]["text"].tolist()
    ours = np.array(
        [r.answers["intent"].probs for r in provider.decide_batch([DecisionRequest(schema, t) for t in texts])]
    )
    vec = TfidfVectorizer(**TFIDF_PARAMS)
    clf = LogisticRegression(**LOGREG_PARAMS).fit(
        vec.fit_transform(frames["train"]["text"]), frames["train"]["category"]
    )
    ref = clf.predict_proba(vec.transform(texts))
    cols = [CATEGORIES.index(c) for c in clf.classes_]
    expected = np.full_like(ours, UNSEEN_FLOOR)
    expected[:, cols] = ref
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ours, expected, atol=1e-12)
    assert (ours.argmax(1) == [CATEGORIES.index(c) for c in frames["test"]["category"]]).mean() > 0.6


def test_tfidf_option_never_seen_in_training_is_present_with_almost_no_mass(store):
    con, frames = store
    provider = build_tfidf_logreg(con, "b77")
    schema = schema_with([*CATEGORIES[:5], "never_seen_option"])
    (res,) = provider.decide_batch([DecisionRequest(schema, frames["test"]["text"][0])])
    p = res.answers["intent"].probs
    assert p.shape == (6,) and abs(p.sum() - 1) < 1e-12
    assert 0 < p[-1] < 1e-5
    # the model identity is the training data: relabelling a test item keeps it
    before = provider.model
    con.execute(
        "UPDATE labels SET option_id = 'card_linking' WHERE item_id = (SELECT min(item_id) FROM items"
        " WHERE split = 'test')"
    )
    assert build_tfidf_logreg(con, "b77").model == before


def test_tfidf_refuses_a_question_without_training_labels(store):
    con, frames = store
    provider = build_tfidf_logreg(con, "b77")
    schema = DecisionSchema.from_dict({"questions": {"spam": {"type": "noul", "instructions": "Spam?"}}})
    (out,) = provider.decide_batch([DecisionRequest(schema, "hello")])
    assert isinstance(out, ProviderError) and out.kind is ErrorKind.INVALID and not out.sent


# -- rules:PATH ---------------------------------------------------------------------------------------
def write_rules(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "rules.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_rules_first_match_wins_default_and_uniform(tmp_path):
    path = write_rules(
        tmp_path,
        {
            "questions": {
                "intent": {
                    "match_probability": 0.8,
                    "rules": [
                        {"option": "lost_or_stolen_card", "keywords": ["stolen"]},
                        {"option": "card_arrival", "patterns": [r"\bcard\b.*\barrive"]},
                    ],
                },
                "urgent": {"default": "no", "rules": [{"option": "yes", "keywords": ["right now", "asap"]}]},
            }
        },
    )
    provider = RulesProvider(path)
    schema = DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {
                    "type": "choice",
                    "instructions": "Which?",
                    "criteria": {"card_arrival": None, "lost_or_stolen_card": None, "exchange_rate": None},
                },
                "urgent": {"type": "noul", "instructions": "Urgent?"},
            }
        }
    )
    texts = ["My STOLEN card will never arrive", "When will my card arrive? ASAP please", "hello there"]
    out = provider.decide_batch([DecisionRequest(schema, t) for t in texts])
    intent = np.array([r.answers["intent"].probs for r in out])
    np.testing.assert_allclose(intent[0], [0.1, 0.8, 0.1])  # first rule wins
    np.testing.assert_allclose(intent[1], [0.8, 0.1, 0.1])
    np.testing.assert_allclose(intent[2], [1 / 3, 1 / 3, 1 / 3])  # nothing matched, no default
    urgent = np.array([r.answers["urgent"].probs for r in out])
    np.testing.assert_allclose(urgent[:, 0], [0.1, 0.9, 0.1])  # default "no" with match_probability 0.9


def test_rules_missing_block_and_unknown_option(tmp_path):
    path = write_rules(tmp_path, {"questions": {"intent": {"rules": [{"option": "nope", "keywords": ["x"]}]}}})
    provider = RulesProvider(path)
    (out,) = provider.decide_batch([DecisionRequest(schema_with(["a", "b"]), "x")])
    assert isinstance(out, ProviderError) and out.kind is ErrorKind.INVALID and "nope" in str(out)
    other = DecisionSchema.from_dict({"questions": {"spam": {"type": "noul", "instructions": "Spam?"}}})
    (res,) = provider.decide_batch([DecisionRequest(other, "x")])
    assert res.answers == {} and res.failures["spam"][0] is ErrorKind.MISSING
    with pytest.raises(ProviderError, match="bad regex"):
        RulesProvider(write_rules(tmp_path, {"questions": {"q": {"rules": [{"option": "a", "patterns": ["("]}]}}}))


def test_shipped_banking77_rules_cover_real_intents_with_useful_precision():
    provider = RulesProvider(ROOT / "experiments" / "rules" / "banking77.yaml")
    rule_options = {o for o, _ in provider._questions["intent"]["rules"]}
    assert rule_options <= set(CATEGORIES)
    df = pd.read_csv(BANKING / "test.csv")
    p = provider.predict_proba("intent", schema_with(CATEGORIES).questions["intent"], df["text"].tolist())
    matched = p.max(1) > 0.5
    correct = np.array(CATEGORIES)[p.argmax(1)] == df["category"].to_numpy()
    assert 0.2 < matched.mean() < 0.9 and correct[matched].mean() > 0.6


# -- replay:PATH --------------------------------------------------------------------------------------
def test_replay_jsonl_and_parquet_through_the_runner(store, tmp_path):
    con, frames = store
    ids = con.execute("SELECT item_id FROM items WHERE split = 'test' ORDER BY item_id").fetchnumpy()["item_id"]
    schema = schema_with(CATEGORIES)
    rng = np.random.default_rng(0)
    recorded, rows = {}, []
    for i, item in enumerate(ids):
        if i == 0:
            continue  # not in the log: missing_answer
        if i == 1:
            rows.append({"item_id": item, "error": {"kind": "timeout", "message": "upstream timed out"}})
            continue
        p = rng.dirichlet(np.ones(len(CATEGORIES)))
        p = np.round(p, 4)
        recorded[item] = p / p.sum()
        rows.append(
            {
                "item_id": item,
                "latency_ms": 120.0 + i,
                "cost_usd": 1e-5,
                "response": {
                    "model": "clef-2026-10",
                    "usage": {"input_tokens": 50},
                    "answers": {
                        "intent": {
                            "type": "choice",
                            "choice": CATEGORIES[int(p.argmax())],
                            "probabilities": dict(zip(CATEGORIES, p.tolist())),
                        }
                    },
                },
            }
        )
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    parquet = tmp_path / "log.parquet"
    pd.DataFrame(
        [
            {
                **r,
                "response": json.dumps(r.get("response")) if "response" in r else None,
                "error": json.dumps(r["error"]) if "error" in r else None,
            }
            for r in rows
        ]
    ).to_parquet(parquet)
    run_ids = run_experiment(con, dataset="b77", schema=schema, provider_specs=[f"replay:{jsonl}", f"replay:{parquet}"])
    for run_id in run_ids:
        ra = load_answers(con, run_id, "intent")
        by_id = dict(zip(ra.item_ids, range(len(ra.item_ids))))
        for item, p in recorded.items():
            np.testing.assert_allclose(ra.probs[by_id[item]], p, atol=1e-12)
        assert ra.failure_kind[by_id[ids[0]]] == "missing_answer"
        assert ra.failure_kind[by_id[ids[1]]] == "timeout"
        s = get_run(con, run_id)["summary"]
        assert s["answered"] == len(ids) - 2 and s["failed"] == 2
        assert s["cost_usd"] == pytest.approx(1e-5 * (len(ids) - 2))


# -- registry ---------------------------------------------------------------------------------------
def test_public_spec_strips_credentials():
    assert public_spec("cloudflare:clef") == "cloudflare:clef"
    spec = public_spec("systemone:https://bob:hunter2@h.example/v1/systemone?model=m&api_key=abc123&x=1")
    assert "hunter2" not in spec and "abc123" not in spec and "model=m" in spec and "x=1" in spec


def test_registry_errors_are_typed_and_nothing_is_sent():
    with pytest.raises(ProviderError) as exc:
        get_provider("minilm")
    assert exc.value.kind is ErrorKind.INVALID and not exc.value.sent
    with pytest.raises(ProviderError, match="unknown local model"):
        get_provider("local:gpt-9")
    with pytest.raises(ProviderError, match="needs a dataset"):
        get_provider("baseline:tfidf-logreg", context=ProviderContext())
