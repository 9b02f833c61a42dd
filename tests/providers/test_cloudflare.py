"""Cloudflare Workers AI dialect against the real emulator over loopback."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.prices import PRICES_USD_PER_M
from workbench.providers.remote import build_http_provider
from workbench.runner.execute import RETRY_ATTEMPTS
from workbench.schema import DecisionSchema, option_ids

from .conftest import SECRET, run, three_type_schema

STOLEN = "Someone stole my card yesterday and I think money was lost, please block the card"


async def _decide(spec, env, request, **settings):
    provider = build_http_provider(spec, env=env, **settings)
    try:
        return await provider.decide(request)
    finally:
        await provider.aclose()


def _expect_error(spec, env, request, **settings) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        run(_decide(spec, env, request, **settings))
    return info.value


@pytest.mark.parametrize("model", ["clef", "clef-flash"])
def test_happy_path_every_question_type(emu, cf_env, model):
    schema = three_type_schema()
    result = run(_decide(f"cloudflare:{model}", cf_env, DecisionRequest(schema, STOLEN)))
    assert result.failures == {}
    assert set(result.answers) == {"intent", "stolen", "severity"}
    for qid, ans in result.answers.items():
        assert ans.probs.shape == (len(option_ids(schema.questions[qid])),)
        assert abs(ans.probs.sum() - 1.0) < 1e-12
    # the lexical emulator reads the state: the stolen-card option wins each question
    assert option_ids(schema.questions["intent"])[int(result.answers["intent"].probs.argmax())] == "lost_or_stolen_card"
    assert result.answers["stolen"].probs[0] > 0.5
    assert int(result.answers["severity"].probs.argmax()) == 2
    assert result.model == model
    assert result.request_id and len(result.request_id) == 36  # cf-ai-req-id is a uuid
    assert result.input_tokens > 0
    # cost derived independently from the documented price per million input tokens
    assert result.cost_usd == pytest.approx(result.input_tokens * PRICES_USD_PER_M[("cloudflare", model)] / 1e6)
    assert result.latency_ms > 0
    assert result.raw["answers"]["intent"]["type"] == "choice"  # raw in System One shape (unwrapped)
    assert emu.request_count(model=model) == 1


def test_body_carries_model_and_envelope_is_unwrapped(emu, cf_env):
    """The emulator refuses a body whose model does not match the URL, so a 200 proves `model` was sent."""
    result = run(_decide("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "hello")))
    assert result.model == "clef" and "success" not in result.raw


def test_rounded_probabilities_are_renormalised(emu, cf_env):
    schema = DecisionSchema.from_dict(
        {
            "questions": {
                "q": {"type": "choice", "instructions": "Pick one", "criteria": {"a": None, "b": None, "c": None}}
            }
        }
    )
    result = run(_decide("cloudflare:clef", cf_env, DecisionRequest(schema, "nothing in common")))
    wire = result.raw["answers"]["q"]["probabilities"]
    assert all(round(v, 4) == v for v in wire.values())  # 4 decimals on the wire, like Clef
    raw_sum = sum(wire.values())
    assert raw_sum != 1.0  # 3 x 0.3333
    ans = result.answers["q"]
    assert ans.deviation == pytest.approx(raw_sum - 1.0)
    assert ans.probs.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(ans.probs, np.array(list(wire.values())) / raw_sum)


def test_request_id_falls_back_to_cf_ray(emu, cf_env):
    emu.set_faults(force_status=500)  # server errors carry cf-ray but no cf-ai-req-id
    err = _expect_error("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.SERVER and err.request_id.endswith("-IAD")


@pytest.mark.parametrize(
    "faults, kind, status, code",
    [
        ({"rate_limit": 1.0}, ErrorKind.RATE_LIMIT, 429, 3040),
        ({"quota": 1.0}, ErrorKind.QUOTA, 429, 4006),
        ({"server_error": 1.0}, ErrorKind.SERVER, 500, 5000),
        ({"overloaded": 1.0}, ErrorKind.SERVER, 529, 5012),
        ({"force_status": 403}, ErrorKind.INVALID, 403, None),
        ({"force_status": 413, "force_code": 5021}, ErrorKind.MAX_TOKENS, 413, 5021),
        ({"force_status": 422, "force_code": 5012}, ErrorKind.INVALID, 422, 5012),
    ],
)
def test_error_classification(emu, cf_env, faults, kind, status, code):
    emu.set_faults(**faults)
    err = _expect_error("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "hi"))
    assert (err.kind, err.status, err.code, err.sent) == (kind, status, code, True)
    assert SECRET not in str(err)
    assert emu.stats["total"] == 1
    assert (RETRY_ATTEMPTS.get(err.kind, 1) > 1) is (
        kind in (ErrorKind.RATE_LIMIT, ErrorKind.SERVER)
    )  # the runner retries


def test_validation_422_from_the_service(emu, cf_env):
    """With local checks relaxed, the emulator itself answers 422/5012 for 65 questions."""
    schema = DecisionSchema.from_dict(
        {"questions": {f"q{i}": {"type": "noul", "instructions": "ok?"} for i in range(65)}}
    )
    err = _expect_error("cloudflare:clef", cf_env, DecisionRequest(schema, "x"), profile="self-hosted")
    assert (err.kind, err.status, err.code) == (ErrorKind.INVALID, 422, 5012)
    assert emu.stats["total"] == 1


def test_timeout(emu, cf_env):
    emu.set_faults(timeout=1.0, timeout_sleep_s=2.0)
    provider = build_http_provider("cloudflare:clef", env=cf_env, timeout=0.3)

    async def go():
        try:
            await provider.decide(DecisionRequest(three_type_schema(), "x"))
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as info:
        run(go())
    assert info.value.kind is ErrorKind.TIMEOUT


def test_connection_reset_is_network(emu, cf_env):
    emu.set_faults(reset=1.0)
    err = _expect_error("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.NETWORK


def test_connection_refused_is_network(cf_env):
    env = {**cf_env, "CLOUDFLARE_CLEF_BASE_URL": "http://127.0.0.1:9/client/v4"}
    err = _expect_error("cloudflare:clef", env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.NETWORK


def test_malformed_json_is_malformed_not_an_answer(emu, cf_env):
    emu.set_faults(malformed=1.0)
    err = _expect_error("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.MALFORMED


def test_401_disables_the_provider_and_hides_the_token(emu, cf_env):
    emu.require_token = "the-right-token"
    provider = build_http_provider("cloudflare:clef", env=cf_env)
    request = DecisionRequest(three_type_schema(), "x")

    async def twice():
        errors = []
        for _ in range(2):
            try:
                await provider.decide(request)
            except ProviderError as exc:
                errors.append(exc)
        await provider.aclose()
        return errors

    first, second = run(twice())
    assert (first.kind, first.status, first.code, first.sent) == (ErrorKind.AUTH, 401, 10000, True)
    assert (second.kind, second.sent) == (ErrorKind.AUTH, False)
    assert emu.stats["total"] == 1  # the second call never left the process
    for text in (str(first), str(second), repr(provider), repr(provider.endpoint), repr(provider.endpoint.api_key)):
        assert SECRET not in text


def test_right_token_is_accepted(emu, cf_env):
    emu.require_token = SECRET
    result = run(_decide("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x")))
    assert result.failures == {}


def test_api_token_env_alias(emu, cf_env):
    env = {k: v for k, v in cf_env.items() if k != "CLOUDFLARE_API_KEY"} | {"CLOUDFLARE_API_TOKEN": SECRET}
    emu.require_token = SECRET
    assert run(_decide("cloudflare:clef-flash", env, DecisionRequest(three_type_schema(), "x"))).model == "clef-flash"


def test_model_from_env_when_spec_has_none(emu, cf_env):
    result = run(
        _decide(
            "cloudflare:", {**cf_env, "CLOUDFLARE_CLEF_MODEL": "clef-flash"}, DecisionRequest(three_type_schema(), "x")
        )
    )
    assert result.model == "clef-flash"


def test_envelope_without_success_fails_closed():
    """`success: false` inside a 200 is never an answer (checked on the dialect's parser)."""
    import httpx

    provider = build_http_provider("cloudflare:clef", env={"CLOUDFLARE_API_KEY": "k", "CLOUDFLARE_ACCOUNT_ID": "a"})
    body = {"success": False, "errors": [{"code": 3040, "message": "Capacity"}], "result": {"answers": {}}}
    with pytest.raises(ProviderError) as info:
        provider.to_system_one(body, httpx.Response(200), DecisionRequest(three_type_schema(), "x"))
    assert info.value.kind is ErrorKind.RATE_LIMIT
    with pytest.raises(ProviderError) as info:
        provider.to_system_one(
            {"success": "yes", "result": {"answers": {}}},
            httpx.Response(200),
            DecisionRequest(three_type_schema(), "x"),
        )
    assert info.value.kind is ErrorKind.MALFORMED
    run(provider.aclose())


# -- local refusals: nothing reaches the emulator --------------------------------------------------
def _refused(emu, spec, env, request, **settings) -> ProviderError:
    before = emu.stats["total"]
    err = _expect_error(spec, env, request, **settings)
    assert err.sent is False
    assert emu.stats["total"] == before, "a locally refused call reached the emulator"
    assert SECRET not in str(err)
    return err


def test_refuses_state_over_the_token_window(emu, cf_env):
    err = _refused(
        emu, "cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "word " * 400), window_tokens=100
    )
    assert err.kind is ErrorKind.MAX_TOKENS and "window" in str(err)


def test_default_window_is_65536_tokens(emu, cf_env):
    provider = build_http_provider("cloudflare:clef", env=cf_env)
    assert provider.window_tokens == 65_536
    run(provider.aclose())
    # ~70k estimated tokens of prose is refused with the default window (before the body-size check)
    err = _refused(emu, "cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "abcd " * 60_000))
    assert err.kind is ErrorKind.MAX_TOKENS and "window" in str(err)


def test_refuses_more_questions_than_allowed_and_exposes_limits(emu, cf_env):
    provider = build_http_provider("cloudflare:clef", env=cf_env)
    assert provider.limits.max_questions == 64
    run(provider.aclose())
    schema = DecisionSchema.from_dict(
        {"questions": {f"q{i}": {"type": "noul", "instructions": "ok?"} for i in range(65)}}
    )
    err = _refused(emu, "cloudflare:clef", cf_env, DecisionRequest(schema, "x"))
    assert err.kind is ErrorKind.INVALID and "64" in str(err)


def test_refuses_body_over_256000_bytes(emu, cf_env):
    err = _refused(
        emu, "cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "a" * 260_000), window_tokens=10**9
    )
    assert err.kind is ErrorKind.MAX_TOKENS and "bytes" in str(err)


def test_refuses_five_images_and_non_png_jpeg_webp(emu, cf_env):
    png = "data:image/png;base64,iVBORw0KGgo="
    err = _refused(emu, "cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x", images=(png,) * 5))
    assert err.kind is ErrorKind.INVALID and "4" in str(err)
    err = _refused(
        emu,
        "cloudflare:clef",
        cf_env,
        DecisionRequest(three_type_schema(), "x", images=("data:image/gif;base64,R0lGOD==",)),
    )
    assert err.kind is ErrorKind.INVALID
    err = _refused(
        emu, "cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x", images=("https://example.com/a.png",))
    )
    assert err.kind is ErrorKind.INVALID


def test_four_png_images_are_sent(emu, cf_env):
    png = "data:image/png;base64,iVBORw0KGgo="
    result = run(_decide("cloudflare:clef", cf_env, DecisionRequest(three_type_schema(), "x", images=(png,) * 4)))
    assert result.failures == {} and emu.stats["total"] == 1


@pytest.mark.parametrize("model", ["clef/../x", "../clef", "clef flash", "clef?x=1"])
def test_refuses_model_names_that_are_not_plain(emu, cf_env, model):
    err = _refused(emu, f"cloudflare:{model}", cf_env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.INVALID


@pytest.mark.parametrize("account", [None, "abc/def", "a.b", "abc def"])
def test_refuses_missing_or_bad_account_id(emu, cf_env, account):
    env = {k: v for k, v in cf_env.items() if k != "CLOUDFLARE_ACCOUNT_ID"}
    if account is not None:
        env["CLOUDFLARE_ACCOUNT_ID"] = account
    err = _refused(emu, "cloudflare:clef", env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.INVALID and "account" in str(err)


def test_refuses_missing_key(emu, cf_env):
    env = {k: v for k, v in cf_env.items() if k != "CLOUDFLARE_API_KEY"}
    err = _refused(emu, "cloudflare:clef", env, DecisionRequest(three_type_schema(), "x"))
    assert err.kind is ErrorKind.AUTH and "CLOUDFLARE_API_KEY" in str(err)


def test_refuses_too_many_options(emu, cf_env):
    schema = DecisionSchema.from_dict(
        {
            "questions": {
                "q": {"type": "choice", "instructions": "pick", "criteria": {f"o{i}": None for i in range(256)}}
            }
        }
    )
    err = _refused(emu, "cloudflare:clef", cf_env, DecisionRequest(schema, "x"))
    assert err.kind is ErrorKind.INVALID and "255" in str(err)
