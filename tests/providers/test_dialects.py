"""System One presets, OpenAI Decisions and Vercel evaluation-model dialects against the emulator."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.dialects.openai import from_openai_answers, to_openai_questions
from workbench.providers.dialects.vercel import from_vercel_answers, to_vercel_questions
from workbench.providers.remote import ProviderSpecError, build_http_provider, endpoint_url
from workbench.schema import DecisionSchema, option_ids

from .conftest import SECRET, run, three_type_schema

STOLEN = "Someone stole my card yesterday and I think money was lost, please block the card"


def env_for(emu) -> dict[str, str]:
    b = emu.base_url
    env = {"WORKBENCH_SYSTEMONE_API_KEY": SECRET}
    for var in ("TYPESAFE", "OPENROUTER", "PERPLEXITY", "SUBQ", "SARVAM", "OPENAI", "PRIME", "LAYA", "XOR"):
        env[f"{var}_BASE_URL"] = b
        env[f"{var}_API_KEY"] = SECRET
    env["AI_GATEWAY_BASE_URL"] = b
    env["AI_GATEWAY_API_KEY"] = SECRET
    return env


async def _decide(spec, env, request, **settings):
    provider = build_http_provider(spec, env=env, **settings)
    try:
        return provider, await provider.decide(request)
    finally:
        await provider.aclose()


async def _call_and_close(provider, request):
    try:
        return await provider.decide(request)
    finally:
        await provider.aclose()


SPECS = [
    # spec, dialect, path on the emulator, model that answered, priced?
    ("typesafe:jev-1.13.0", "systemone", "/v1/systemone", "jev-1.13.0", True),
    ("openrouter:typesafe/jev-1.13", "systemone", "/api/alpha/decisions", "typesafe/jev-1.13", True),
    ("perplexity:pplx-decider-v1-27b", "systemone", "/v1/decisions", "pplx-decider-v1-27b", True),
    ("subq:subq-snap-preview", "systemone", "/v1/systemone", "subq-snap-preview", False),
    ("sarvam:sarvam-prism", "systemone", "/v2/systemone", "sarvam-prism", False),
    ("laya:typed-decisions", "systemone", "/v1/systemone", "typed-decisions", False),
    ("xor:xor-1.1", "systemone", "/v1/systemone", "xor-1.1", False),
    ("openai:gpt-6-luna", "openai", "/v1/decisions", "gpt-6-luna-2026-09-14", True),
    ("vercel:typesafe-ai/jev", "vercel", "/v4/ai/evaluation-model", "typesafe-ai/jev", False),
    ("prime:cloudflare/clef", "vercel", "/v4/ai/evaluation-model", "cloudflare/clef", False),
]


@pytest.mark.parametrize("spec, dialect, path, answered, priced", SPECS)
def test_every_preset_answers_every_question_type(emu, spec, dialect, path, answered, priced):
    emu.require_token = SECRET  # every preset sends its key the vendor's way
    schema = three_type_schema()
    provider, result = run(_decide(spec, env_for(emu), DecisionRequest(schema, STOLEN)))
    assert provider.dialect == dialect and provider.spec == spec
    assert result.failures == {}
    for qid, ans in result.answers.items():
        assert ans.probs.shape == (len(option_ids(schema.questions[qid])),)
        assert abs(ans.probs.sum() - 1) < 1e-12
    assert option_ids(schema.questions["intent"])[int(result.answers["intent"].probs.argmax())] == "lost_or_stolen_card"
    assert int(result.answers["severity"].probs.argmax()) == 2
    assert result.model == answered
    assert result.input_tokens > 0 and result.request_id
    assert (result.cost_usd is not None) is priced  # unknown price -> None, never 0
    assert set(result.raw["answers"]) == {"intent", "stolen", "severity"}
    assert result.raw["answers"]["stolen"]["type"] == "noul"  # raw is always System One shaped
    assert emu.stats["by_path"] == {path: 1}


def test_generic_systemone_spec_has_unknown_cost(emu):
    spec = f"systemone:{emu.base_url}/v1/systemone?model=clef-flash"
    provider, result = run(_decide(spec, {}, DecisionRequest(three_type_schema(), STOLEN)))
    assert provider.model == "clef-flash" and provider.endpoint.url == f"{emu.base_url}/v1/systemone"
    assert result.input_tokens > 0 and result.cost_usd is None
    assert emu.request_count(model="clef-flash", path="/v1/systemone") == 1


def test_generic_systemone_optional_key(emu):
    emu.require_token = SECRET
    spec = f"systemone:{emu.base_url}?model=m1"
    with pytest.raises(ProviderError) as info:
        run(_decide(spec, {}, DecisionRequest(three_type_schema(), "x")))
    assert info.value.kind is ErrorKind.AUTH and info.value.sent
    _, result = run(_decide(spec, {"WORKBENCH_SYSTEMONE_API_KEY": SECRET}, DecisionRequest(three_type_schema(), "x")))
    assert result.model == "m1"


def test_generic_systemone_profile_from_query(emu):
    provider = build_http_provider(f"systemone:{emu.base_url}/v1/systemone?model=x&profile=perplexity")
    assert provider.limits.max_questions == 128
    run(provider.aclose())


def test_perplexity_sends_images_inside_an_array_state(emu):
    png = "data:image/png;base64,iVBORw0KGgo="
    provider = build_http_provider("perplexity:pplx-decider-v1-27b", env=env_for(emu))
    body = provider.build_body(DecisionRequest(three_type_schema(), "hello", images=(png, png)))
    assert "images" not in body
    assert body["state"][0] == "hello" and body["state"][1] == {"type": "image_url", "image_url": {"url": png}}
    result = run(_call_and_close(provider, DecisionRequest(three_type_schema(), STOLEN, images=(png,) * 8)))
    assert result.failures == {}


def test_typesafe_refuses_images_locally(emu):
    png = "data:image/png;base64,iVBORw0KGgo="
    with pytest.raises(ProviderError) as info:
        run(_decide("typesafe:jev-latest", env_for(emu), DecisionRequest(three_type_schema(), "x", images=(png,))))
    assert info.value.sent is False and emu.stats["total"] == 0


# -- error envelopes of each dialect classify the same way ------------------------------------------
ERROR_SPECS = ["typesafe:jev-latest", "openai:gpt-6-luna", "vercel:typesafe-ai/jev", "perplexity:pplx-decider-v1-27b"]


@pytest.mark.parametrize("spec", ERROR_SPECS)
@pytest.mark.parametrize(
    "faults, kind",
    [
        ({"rate_limit": 1.0}, ErrorKind.RATE_LIMIT),
        ({"quota": 1.0}, ErrorKind.QUOTA),
        ({"server_error": 1.0}, ErrorKind.SERVER),
        ({"overloaded": 1.0}, ErrorKind.SERVER),
        ({"malformed": 1.0}, ErrorKind.MALFORMED),
        ({"reset": 1.0}, ErrorKind.NETWORK),
        ({"force_status": 403}, ErrorKind.INVALID),
        ({"force_status": 413}, ErrorKind.MAX_TOKENS),
    ],
)
def test_error_kinds_per_dialect(emu, spec, faults, kind):
    emu.set_faults(**faults)
    with pytest.raises(ProviderError) as info:
        run(_decide(spec, env_for(emu), DecisionRequest(three_type_schema(), "x")))
    assert info.value.kind is kind and SECRET not in str(info.value)


@pytest.mark.parametrize("spec", ERROR_SPECS)
def test_401_per_dialect_disables_provider(emu, spec):
    emu.require_token = "another-token"
    provider = build_http_provider(spec, env=env_for(emu))

    async def twice():
        out = []
        for _ in range(2):
            try:
                await provider.decide(DecisionRequest(three_type_schema(), "x"))
            except ProviderError as exc:
                out.append(exc)
        await provider.aclose()
        return out

    first, second = run(twice())
    assert first.kind is ErrorKind.AUTH and first.sent and second.kind is ErrorKind.AUTH and not second.sent
    assert emu.stats["total"] == 1
    assert SECRET not in str(first) + str(second) + repr(provider)


@pytest.mark.parametrize("spec", ERROR_SPECS)
def test_service_validation_is_invalid_request(emu, spec):
    schema = DecisionSchema.from_dict(
        {"questions": {"q": {"type": "score", "instructions": "rate", "criteria": [str(i) for i in range(11)]}}}
    )
    with pytest.raises(ProviderError) as info:  # local limits relaxed: the emulator refuses 11 levels
        run(_decide(spec, env_for(emu), DecisionRequest(schema, "x"), profile="self-hosted"))
    assert info.value.kind is ErrorKind.INVALID and info.value.sent and info.value.status in (400, 422)


# -- OpenAI Decisions translation ------------------------------------------------------------------
def test_openai_translation_both_ways():
    wire = three_type_schema().to_wire()
    qs = to_openai_questions(wire)
    assert [q["type"] for q in qs] == ["choice", "predicate", "score"]
    assert [q["name"] for q in qs] == ["intent", "stolen", "severity"]
    assert qs[0]["choices"][0] == {
        "value": "card_arrival",
        "description": "The customer asks when their new card will arrive",
    }
    assert qs[0]["choices"][2] == {"value": "exchange_rate"}  # null description omitted
    assert "the card was stolen or lost" in qs[1]["instructions"]  # criteria reach the model
    assert [lv["label"] for lv in qs[2]["levels"]] == wire["severity"]["criteria"]
    answers = [  # unnamed answers map by position; score levels by their index
        {
            "type": "choice",
            "name": None,
            "choice": "exchange_rate",
            "confidence": 0.5,
            "probabilities": [
                {"value": "card_arrival", "probability": 0.2},
                {"value": "lost_or_stolen_card", "probability": 0.3},
                {"value": "exchange_rate", "probability": 0.5},
            ],
        },
        {"type": "refusal", "name": "stolen"},
        {
            "type": "score",
            "name": "severity",
            "score": 1.2,
            "confidence": 0.6,
            "probabilities": [
                {"label": "x", "probability": 0.2, "value": 0},
                {"label": "y", "probability": 0.4, "value": 1},
                {"label": "z", "probability": 0.4, "value": 2},
            ],
        },
    ]
    s1 = from_openai_answers(wire, answers)
    assert s1["intent"]["probabilities"] == {"card_arrival": 0.2, "lost_or_stolen_card": 0.3, "exchange_rate": 0.5}
    assert s1["stolen"] == {"type": "refusal"}
    assert s1["severity"]["probabilities"] == {"0": 0.2, "1": 0.4, "2": 0.4}


def test_openai_refusal_is_a_failure_not_a_probability(emu):
    emu.set_faults(refusal=0.5)
    schema = DecisionSchema.from_dict(
        {"questions": {f"q{i}": {"type": "noul", "instructions": f"is it {i}?"} for i in range(40)}}
    )
    _, result = run(_decide("openai:gpt-6-luna", env_for(emu), DecisionRequest(schema, "x")))
    refused = {q for q, (kind, _) in result.failures.items() if kind is ErrorKind.REFUSED}
    assert 5 < len(refused) < 35  # about half, drawn per question
    assert refused.isdisjoint(result.answers)  # a refused question has no probability
    assert len(refused) + len(result.answers) == 40
    assert all(result.raw["answers"][q] == {"type": "refusal"} for q in refused)


def test_openai_images_travel_as_input_image_parts(emu):
    png = "data:image/png;base64,iVBORw0KGgo="
    provider = build_http_provider("openai:gpt-6-luna", env=env_for(emu))
    body = provider.build_body(DecisionRequest(three_type_schema(), "hello", images=(png,)))
    assert body["input"] == [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "hello"}, {"type": "input_image", "image_url": png}],
        }
    ]
    result = run(_call_and_close(provider, DecisionRequest(three_type_schema(), STOLEN, images=(png,))))
    assert result.failures == {}


def test_openai_and_systemone_agree_on_the_same_answerer(emu):
    """The emulator answers both dialects with one model: the translation must not change the choice."""
    schema = DecisionSchema.from_dict({"questions": {"intent": three_type_schema().to_wire()["intent"]}})
    env = env_for(emu)
    _, a = run(_decide("openai:gpt-6-luna", env, DecisionRequest(schema, STOLEN)))
    _, b = run(_decide("typesafe:jev-latest", env, DecisionRequest(schema, STOLEN)))
    np.testing.assert_allclose(a.answers["intent"].probs, b.answers["intent"].probs, atol=1e-4)


# -- Vercel translation ------------------------------------------------------------------------------
def test_vercel_translation_and_headers(emu):
    wire = three_type_schema().to_wire()
    assert to_vercel_questions(wire)["stolen"]["type"] == "boolean"
    s1 = from_vercel_answers(
        {
            "answers": {
                "stolen": {"type": "boolean", "probability": 0.9},
                "intent": {"type": "choice", "choice": "a", "probabilities": {"a": 1.0}},
            },
            "providerMetadata": {"typesafe": {"confidence": {"intent": 0.7}}},
        }
    )
    assert s1["stolen"] == {"type": "noul", "noul": 0.9} and s1["intent"]["confidence"] == 0.7
    provider = build_http_provider("vercel:typesafe-ai/jev", env=env_for(emu))
    body = provider.build_body(DecisionRequest(three_type_schema(), "x"))
    assert "model" not in body
    headers = provider._headers()
    assert headers["ai-gateway-protocol-version"] == "0.0.1" and headers["ai-model-id"] == "typesafe-ai/jev"
    run(provider.aclose())


def test_vercel_usage_camelcase_and_confidence(emu):
    _, result = run(_decide("vercel:typesafe-ai/jev", env_for(emu), DecisionRequest(three_type_schema(), STOLEN)))
    assert result.input_tokens > 0
    assert result.answers["intent"].vendor_confidence is not None  # moved back from providerMetadata


# -- spec parsing -------------------------------------------------------------------------------------
def test_endpoint_url_joining():
    assert endpoint_url("http://h:1", "/v1/systemone") == "http://h:1/v1/systemone"
    assert endpoint_url("http://h:1/", "/v1/systemone") == "http://h:1/v1/systemone"
    assert endpoint_url("https://api.openai.com/v1", "/v1/decisions") == "https://api.openai.com/v1/decisions"
    assert endpoint_url("http://h/custom/systemone", "/v1/systemone") == "http://h/custom/systemone"


def test_unknown_spec_and_self_hosted_without_url():
    with pytest.raises(ProviderSpecError):
        build_http_provider("nosuch:model", env={})
    with pytest.raises(ProviderSpecError, match="LAYA_BASE_URL"):
        build_http_provider("laya:typed-decisions", env={})


def test_default_urls_of_presets():
    env = {}
    expected = {
        "typesafe:jev-latest": "https://api.typesafe.ai/v1/systemone",
        "openrouter:typesafe/jev-1.13": "https://openrouter.ai/api/alpha/decisions",
        "perplexity:pplx-decider-v1-27b": "https://api.perplexity.ai/v1/decisions",
        "openai:gpt-6-luna": "https://api.openai.com/v1/decisions",
        "vercel:typesafe-ai/jev": "https://ai-gateway.vercel.sh/v4/ai/evaluation-model",
        "subq:subq-snap-preview": "https://api.subq.ai/v1/systemone",
        "sarvam:sarvam-prism": "https://api.sarvam.ai/v2/systemone",
        "cloudflare:clef": "https://api.cloudflare.com/client/v4/accounts/acc/ai/run/@cf/cloudflare/clef",
    }
    for spec, url in expected.items():
        p = build_http_provider(spec, env={**env, "CLOUDFLARE_ACCOUNT_ID": "acc"})
        assert p.endpoint.url == url
        run(p.aclose())


def test_perplexity_429_carries_retry_after(emu):
    emu.set_faults(rate_limit=1.0)
    with pytest.raises(ProviderError) as info:
        run(_decide("perplexity:pplx-decider-v1-27b", env_for(emu), DecisionRequest(three_type_schema(), "x")))
    assert info.value.kind is ErrorKind.RATE_LIMIT and info.value.retry_after == 1.0


def test_query_string_of_a_generic_url_is_not_shown(emu):
    provider = build_http_provider(f"systemone:{emu.base_url}/v1/systemone?model=m&key=hidden-value")
    assert "hidden-value" not in repr(provider) and "hidden-value" not in repr(provider.endpoint)
    assert "key=hidden-value" in provider.endpoint.url  # still sent: the server may need it
    run(provider.aclose())
