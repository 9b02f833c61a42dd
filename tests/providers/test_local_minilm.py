"""`local:minilm-zeroshot`: the real all-MiniLM-L6-v2 weights, offline, reading the schema."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.providers.base import DecisionRequest
from workbench.providers.local import TEMPERATURE, MiniLMZeroShot, model_path, option_texts
from workbench.providers.registry import ProviderContext, get_provider
from workbench.schema import DecisionSchema

ROOT = Path(__file__).resolve().parents[2]
BANKING = next(
    p
    for p in (ROOT / "datasets" / "banking77", ROOT.parent / "shared" / "datasets" / "banking77")
    if (p / "test.csv").exists()
)
CATEGORIES = json.loads((BANKING / "categories.json").read_text())


@pytest.fixture(scope="module")
def model() -> MiniLMZeroShot:
    return MiniLMZeroShot()


def intent_schema(
    descriptions: dict[str, str | None] | None = None, instructions: str = "Which intent?"
) -> DecisionSchema:
    criteria = {c: (descriptions or {}).get(c) for c in CATEGORIES}
    return DecisionSchema.from_dict(
        {"questions": {"intent": {"type": "choice", "instructions": instructions, "criteria": criteria}}}
    )


def probs_of(model, schema, texts, qid="intent") -> np.ndarray:
    out = model.decide_batch([DecisionRequest(schema, t) for t in texts])
    return np.array([r.answers[qid].probs for r in out])


def test_option_texts_read_instructions_ids_descriptions_criteria_and_levels():
    s = DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {
                    "type": "choice",
                    "instructions": "Which intent?",
                    "criteria": {"card_arrival": "when the card comes", "other": None},
                },
                "stolen": {"type": "noul", "instructions": "Was it stolen?", "criteria": {"true": "thief took it"}},
                "severity": {"type": "score", "instructions": "How bad?", "criteria": ["fine", "awful"]},
            }
        }
    )
    choice = option_texts(s.questions["intent"])
    assert choice == ["Which intent? card arrival: when the card comes", "Which intent? other"]
    noul = option_texts(s.questions["stolen"])
    assert "thief took it" in noul[0] and noul[0].startswith("Was it stolen? Yes") and "No" in noul[1]
    levels = option_texts(s.questions["severity"])
    assert levels == ["How bad? Level 0 of 1: fine", "How bad? Level 1 of 1: awful"]


def test_probabilities_equal_an_independent_sentence_transformers_computation(model):
    """Cross-check against sentence-transformers called directly (cosine, softmax at T)."""
    from sentence_transformers import SentenceTransformer, util

    schema = intent_schema()
    texts = pd.read_csv(BANKING / "test.csv")["text"].iloc[::97].tolist()
    ours = probs_of(model, schema, texts)
    ref_model = SentenceTransformer(model_path(), device="cpu")
    s_emb = ref_model.encode(texts, convert_to_tensor=True)
    o_emb = ref_model.encode(option_texts(schema.questions["intent"]), convert_to_tensor=True)
    cos = util.cos_sim(s_emb, o_emb).numpy().astype(float)
    logits = cos / TEMPERATURE
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    assert ours.shape == (len(texts), len(CATEGORIES))
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(ours, ref, atol=2e-4)


def test_changing_option_descriptions_changes_the_answers(model):
    texts = [
        "My card still has not arrived after two weeks",
        "Somebody stole my card yesterday",
        "What is the exchange rate for euros?",
    ]
    terse = probs_of(model, intent_schema(), texts)
    again = probs_of(model, intent_schema(), texts)
    np.testing.assert_array_equal(terse, again)  # deterministic
    described = probs_of(
        model,
        intent_schema(
            {
                "card_arrival": "The customer is still waiting for a card that was ordered and has not been delivered",
                "lost_or_stolen_card": "The customer's card was stolen or lost",
            }
        ),
        texts,
    )
    assert np.abs(described - terse).max() > 0.01
    k_arrival = CATEGORIES.index("card_arrival")
    # a description that paraphrases the message pulls mass towards its option
    assert described[0, k_arrival] > terse[0, k_arrival]
    # changing only the instructions changes answers too
    other_instr = probs_of(model, intent_schema(instructions="Route this banking support ticket."), texts)
    assert np.abs(other_instr - terse).max() > 1e-3


def test_zero_shot_is_far_above_chance_on_banking77_and_temperature_sharpens(model):
    df = pd.read_csv(BANKING / "test.csv").iloc[::10]
    p = probs_of(model, intent_schema(), df["text"].tolist())
    accuracy = float((np.array(CATEGORIES)[p.argmax(1)] == df["category"].to_numpy()).mean())
    assert accuracy > 0.4, accuracy  # chance is 1/77 ≈ 0.013
    sharp = MiniLMZeroShot(temperature=TEMPERATURE / 2)
    sharp._encoder = model._load()  # same weights, no second load
    p_sharp = probs_of(sharp, intent_schema(), df["text"].tolist())
    assert p_sharp.max(1).mean() > p.max(1).mean()
    np.testing.assert_array_equal(p_sharp.argmax(1), p.argmax(1))  # same ranking, sharper


def test_option_embeddings_are_cached_per_question(model):
    schema = intent_schema({"card_arrival": "cache check"})
    q = schema.questions["intent"]
    first = model.option_embeddings(q)
    assert model.option_embeddings(q) is first
    probs_of(model, schema, ["hello"])
    assert model.option_embeddings(q) is first


def test_noul_and_score_answers_are_well_formed(model):
    s = DecisionSchema.from_dict(
        {
            "questions": {
                "stolen": {
                    "type": "noul",
                    "instructions": "Was the card stolen?",
                    "criteria": {"true": "the card was stolen", "false": "the card is safe"},
                },
                "severity": {
                    "type": "score",
                    "instructions": "How severe is the problem?",
                    "criteria": ["a simple question", "a problem", "money was lost"],
                },
            }
        }
    )
    (res,) = model.decide_batch([DecisionRequest(s, "A thief stole my card and took all my money")])
    assert set(res.answers) == {"stolen", "severity"} and not res.failures
    assert res.answers["stolen"].probs.shape == (2,) and res.answers["severity"].probs.shape == (3,)
    assert res.answers["stolen"].probs[0] > 0.5
    assert res.raw["answers"]["severity"]["type"] == "score"


def test_answerer_hook_serves_the_emulator_over_http(model, emu, cf_env):
    """The emulator answering with this model (``--answerer local:minilm-zeroshot``: the provider behind
    the answerer hook) returns the model's own probabilities (4 decimals)."""
    import asyncio

    from workbench.emulator import run_emulator
    from workbench.emulator.answering import ProviderAnswerer

    schema = intent_schema()
    text = "I want to know when my new card will arrive"
    (own,) = model.decide_batch([DecisionRequest(schema, text)])
    direct = own.answers["intent"].probs
    with run_emulator(port=0, answerer=ProviderAnswerer(model)) as server:
        env = {**cf_env, "CLOUDFLARE_CLEF_BASE_URL": server.cloudflare_base_url}
        provider = get_provider("cloudflare:clef-flash", context=ProviderContext(env=env))

        async def ask():
            try:
                return await provider.decide(DecisionRequest(schema, text))
            finally:
                await provider.aclose()

        res = asyncio.run(ask())
        assert server.request_count() == 1
    np.testing.assert_allclose(res.answers["intent"].probs, direct, atol=2e-4)


@pytest.mark.slow
def test_full_banking77_test_split_is_answered_in_one_batch_call(model):
    texts = pd.read_csv(BANKING / "test.csv")["text"].tolist()
    fresh = MiniLMZeroShot()
    fresh._encoder = model._load()
    t0 = time.perf_counter()
    out = fresh.decide_batch([DecisionRequest(intent_schema(), t) for t in texts])
    elapsed = time.perf_counter() - t0
    assert len(out) == 3080 and all(not isinstance(r, Exception) for r in out)
    # speed is a benchmark figure, not a pass/fail condition here (CI machines are shared)
    print(f"MiniLM: 3,080 BANKING77 items in {elapsed:.1f} s")
