"""The emulator itself, over real HTTP: validation codes, headers, admin API, faults, answers."""

from __future__ import annotations

import asyncio
import csv
import json
import random
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from tests.conftest import ROOT, dataset_path
from workbench.emulator import FaultConfig, LexicalAnswerer, run_emulator, server_token_count, truncate_tokens
from workbench.providers.base import DecisionRequest
from workbench.providers.remote import build_http_provider

from .conftest import three_type_schema

CF_PATH = "/client/v4/accounts/acc/ai/run/@cf/cloudflare/clef"


def body(n_questions=1, **over):
    b = {
        "model": "clef",
        "state": "hello",
        "questions": {f"q{i}": {"type": "noul", "instructions": "ok?"} for i in range(n_questions)},
    }
    b.update(over)
    return b


_CLIENT = httpx.Client(timeout=5)  # one client: building one costs an SSL context (~30 ms)


def post(emu, path, payload=None, *, content=None, headers=None):
    if content is None:
        content = json.dumps(payload).encode()
    return _CLIENT.post(
        emu.base_url + path, content=content, headers={"content-type": "application/json", **(headers or {})}
    )


def cf_error(resp):
    data = resp.json()
    assert data["success"] is False and data["result"] == {} and data["messages"] == []
    return resp.status_code, data["errors"][0]["code"]


# -- Cloudflare validation exactly as documented ----------------------------------------------------
@pytest.mark.parametrize(
    "payload, expected",
    [
        (body(64), (200, None)),
        (body(65), (422, 5012)),
        (body(questions={"a b": {"type": "noul", "instructions": "x"}}), (422, 5012)),
        (body(questions={"x" * 101: {"type": "noul", "instructions": "x"}}), (422, 5012)),
        (body(questions={"x" * 100: {"type": "noul", "instructions": "x"}}), (200, None)),
        (body(questions={"q": {"type": "choice", "instructions": "x", "criteria": {"a": None}}}), (422, 5012)),
        (
            body(
                questions={
                    "q": {"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(255)}}
                }
            ),
            (200, None),
        ),
        (
            body(
                questions={
                    "q": {"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(256)}}
                }
            ),
            (422, 5012),
        ),
        (body(questions={"q": {"type": "score", "instructions": "x", "criteria": ["a"] * 10}}), (200, None)),
        (body(questions={"q": {"type": "score", "instructions": "x", "criteria": ["a"] * 11}}), (422, 5012)),
        (body(questions={"q": {"type": "score", "instructions": "x", "criteria": ["a"]}}), (422, 5012)),
        (body(questions={"q": {"type": "noul", "instructions": "  "}}), (422, 5012)),
        (body(questions={"q": {"type": "noul", "instructions": "x", "extra": 1}}), (422, 5012)),
        (body(unknown_field=1), (422, 5012)),
        (body(questions={"q": {"type": "maybe", "instructions": "x"}}), (400, 5006)),
        (body(questions={}), (400, 5006)),
        ({"model": "clef", "state": "x"}, (400, 5006)),
        (body(model="clef-flash"), (400, 5006)),  # body model must match the URL model
        (body(images=["data:image/png;base64,AAAA"] * 4), (200, None)),
        (body(images=["data:image/png;base64,AAAA"] * 5), (422, 5012)),
        (body(images=["https://example.com/x.png"]), (422, 5012)),
        (body(images=[{"content_type": "image/webp", "base64": "AAAA"}]), (200, None)),
    ],
)
def test_cloudflare_validation(emu, payload, expected):
    resp = post(emu, CF_PATH, payload)
    if expected[0] == 200:
        assert resp.status_code == 200, resp.text
        assert resp.json()["success"] is True
    else:
        assert cf_error(resp) == expected


def test_non_json_body_is_6003(emu):
    assert cf_error(post(emu, CF_PATH, content=b"{not json")) == (400, 6003)


def test_wrong_route_is_7000(emu):
    assert cf_error(post(emu, "/client/v4/accounts/acc/ai/run/@cf/cloudflare/clef-max", body())) == (400, 7000)
    assert cf_error(post(emu, "/nowhere", body())) == (400, 7000)


def test_body_too_big_is_413_5021(emu):
    resp = post(emu, CF_PATH, body(state="a" * 600_000))
    assert cf_error(resp) == (413, 5021)


def test_auth_401_10000_when_token_required(emu):
    emu.require_token = "t0k"
    assert cf_error(post(emu, CF_PATH, body())) == (401, 10000)
    assert cf_error(post(emu, CF_PATH, body(), headers={"authorization": "Bearer nope"})) == (401, 10000)
    assert post(emu, CF_PATH, body(), headers={"authorization": "Bearer t0k"}).status_code == 200


def test_cloudflare_headers_and_model_side_error_nesting(emu):
    ok = post(emu, CF_PATH, body())
    for h in ("cf-ai-req-id", "cf-ray", "cf-ai-neurons", "api-version"):
        assert h in ok.headers
    assert ok.headers["cache-control"] == "no-store"
    tokens = ok.json()["result"]["usage"]["input_tokens"]
    assert float(ok.headers["cf-ai-neurons"]) == pytest.approx(tokens * 21_818 / 1e6, abs=0.006)
    bad = post(emu, CF_PATH, body(65))
    assert "cf-ai-neurons" not in bad.headers  # errors are not billed
    msg = bad.json()["errors"][0]["message"]
    assert msg.startswith("AiError: AiError: {") and msg.endswith(f"({bad.headers['cf-ai-req-id']})")


def test_body_without_model_is_answered_by_clef_flash(emu):
    payload = body()
    del payload["model"]
    assert post(emu, CF_PATH, payload).json()["result"]["model"] == "clef-flash"  # measured 2026-10-03


def test_systemone_validation_envelope(emu):
    resp = post(emu, "/v1/systemone", body(65))
    assert resp.status_code == 422
    detail = resp.json()["detail"]
    assert detail[0]["loc"][:2] == ["body", "questions"] and "input" not in detail[0]


def test_perplexity_route_allows_128_questions_and_openai_route_detects_arrays(emu):
    assert post(emu, "/v1/decisions", body(128, model="pplx-decider-v1-27b")).status_code == 200
    assert post(emu, "/v1/decisions", body(129, model="pplx-decider-v1-27b")).status_code == 422
    resp = post(
        emu,
        "/v1/decisions",
        {
            "model": "gpt-6-luna",
            "input": "hi",
            "questions": [{"type": "predicate", "name": "p", "instructions": "ok?"}],
        },
    )
    assert resp.status_code == 200 and resp.json()["answers"][0]["type"] == "predicate"


def test_vercel_route_requires_protocol_header_and_no_body_model(emu):
    payload = {"state": "x", "questions": {"q": {"type": "boolean", "instructions": "ok?"}}}
    assert post(emu, "/v4/ai/evaluation-model", payload, headers={"ai-model-id": "m"}).status_code == 400
    good = {"ai-model-id": "m", "ai-gateway-protocol-version": "0.0.1"}
    assert post(emu, "/v4/ai/evaluation-model", payload, headers=good).status_code == 200
    assert post(emu, "/v4/ai/evaluation-model", {**payload, "model": "m"}, headers=good).status_code == 400


# -- answers ---------------------------------------------------------------------------------------
def test_answers_are_deterministic_and_rounded_to_4_decimals(emu):
    schema = three_type_schema()
    payload = {"model": "clef", "state": "my card was stolen", "questions": schema.to_wire()}
    a = post(emu, CF_PATH, payload).json()["result"]["answers"]
    b = post(emu, CF_PATH, payload).json()["result"]["answers"]
    assert a == b
    for ans in (a["intent"], a["severity"]):
        assert all(round(v, 4) == v for v in ans["probabilities"].values())
    # hosted Clef's confidence is the normalised Gini purity (providers.md §5)
    p = np.array(list(a["intent"]["probabilities"].values()))
    n = len(p)
    assert a["intent"]["confidence"] == pytest.approx((np.sum(p**2) - 1 / n) / (1 - 1 / n), abs=2e-4)
    assert a["severity"]["score"] == pytest.approx(
        sum(i * v for i, v in enumerate(a["severity"]["probabilities"].values())), abs=2e-4
    )


def test_lexical_answerer_beats_chance_on_banking77():
    """Id-only option texts still give far above the 1/77 chance accuracy on BANKING77 text."""
    from sklearn.metrics import accuracy_score

    cats = json.loads(dataset_path("banking77", "categories.json").read_text())
    with dataset_path("banking77", "test.csv").open() as f:
        rows = list(csv.DictReader(f))
    rows = random.Random(0).sample(rows, 600)
    q = {
        "intent": {
            "type": "choice",
            "instructions": "Which banking intent is this?",
            "criteria": {c: None for c in cats},
        }
    }
    answerer = LexicalAnswerer()
    pred = [int(np.argmax(answerer(q, r["text"])["intent"])) for r in rows]
    acc = accuracy_score([cats.index(r["category"]) for r in rows], pred)
    assert acc > 0.3, acc  # chance is 0.013


def test_custom_answerer_hook_over_http():
    calls = []

    def answerer(questions, state):
        calls.append(state)
        return {
            qid: ([0.9, 0.1] if q["type"] == "noul" else [1.0] + [0.0] * (len(q["criteria"]) - 1))
            for qid, q in questions.items()
        }

    with run_emulator(port=0, answerer=answerer) as emu:
        r = post(emu, "/v1/systemone", body(2, state="s1"))
    assert r.json()["answers"]["q0"] == {"type": "noul", "noul": 0.9}
    assert calls == ["s1"]


# -- faults ----------------------------------------------------------------------------------------
def test_fault_draws_are_seeded_and_retries_get_fresh_draws():
    def sequence(seed):
        with run_emulator(port=0, rate_limit=0.5, seed=seed) as emu:
            return [post(emu, CF_PATH, body(state=f"s{i % 5}")).status_code for i in range(40)]

    a, b, c = sequence(1), sequence(1), sequence(2)
    assert a == b and a != c
    assert 5 < a.count(429) < 35
    # the same body (s0) was sent 8 times: not all of its attempts share one outcome
    assert len({a[i] for i in range(0, 40, 5)}) == 2


def test_fault_mix_fractions(emu):
    emu.set_faults(rate_limit=0.1, server_error=0.02, malformed=0.05)
    codes = [post(emu, CF_PATH, body(state=f"item {i}")).status_code for i in range(400)]
    assert 20 <= codes.count(429) <= 65
    assert codes.count(500) <= 20
    assert emu.stats["by_fault"]["rate_limit"] == codes.count(429)
    assert emu.stats["total"] == 400


def test_latency_distribution_matches_published_clef_flash():
    cfg = FaultConfig(latency_profile="published")
    rng = random.Random(0)
    draws = np.array([cfg.latency_for("clef-flash", rng) for _ in range(20_000)]) * 1000
    assert np.median(draws) == pytest.approx(38.8, rel=0.03)
    assert np.percentile(draws, 95) == pytest.approx(122.4, rel=0.05)
    assert FaultConfig(latency_ms=100).latency_for("x", rng) == pytest.approx(0.1)


def test_latency_is_applied_over_http(emu):
    emu.set_faults(latency_ms=120)
    t0 = time.perf_counter()
    post(emu, CF_PATH, body())
    assert time.perf_counter() - t0 >= 0.12


def test_silent_truncation_reads_and_bills_only_the_head(emu):
    schema = three_type_schema()
    state = "the weather was fine and we talked about holidays " * 40 + "my card was stolen"
    payload = {"model": "clef", "state": state, "questions": schema.to_wire()}
    full = post(emu, CF_PATH, payload).json()["result"]
    emu.set_faults(truncate_state_tokens=64)
    cut = post(emu, CF_PATH, payload).json()["result"]
    assert full["usage"]["input_tokens"] - cut["usage"]["input_tokens"] == server_token_count(state) - 64
    assert full["answers"]["intent"]["choice"] == "lost_or_stolen_card"
    assert (
        cut["answers"]["intent"]["probabilities"]["lost_or_stolen_card"]
        < full["answers"]["intent"]["probabilities"]["lost_or_stolen_card"]
    )
    assert server_token_count(truncate_tokens(state, 64)) == 64


# -- stats and admin API -----------------------------------------------------------------------------
def test_stats_count_per_model_and_path_and_reset(emu):
    post(emu, CF_PATH, body())
    post(emu, CF_PATH.replace("clef", "clef-flash"), body(model="clef-flash"))
    post(emu, "/v1/systemone", body(model="jev-1"))
    with httpx.Client(base_url=emu.base_url) as c:
        stats = c.get("/_emulator/stats").json()
        assert stats["total"] == 3 and stats["by_model"] == {"clef": 1, "clef-flash": 1, "jev-1": 1}
        assert stats["by_path"]["/v1/systemone"] == 1
        assert emu.request_count(model="clef", path="/ai/run/") == 1
        assert c.post("/_emulator/faults", json={"rate_limit": 1.0}).json()["rate_limit"] == 1.0
        assert post(emu, CF_PATH, body()).status_code == 429
        assert c.post("/_emulator/faults", json={"rate_limit": 2.0}).status_code == 400
        assert c.post("/_emulator/faults", json={"nonsense": 1}).status_code == 400
        c.post("/_emulator/faults", json={"rate_limit": 0.0})
        assert c.post("/_emulator/reset").status_code == 200
        assert c.get("/_emulator/stats").json()["total"] == 0  # admin calls are never counted


def test_no_duplicate_calls_under_concurrency(emu, cf_env):
    """100 concurrent decisions through one provider: exactly 100 requests reach the emulator."""
    provider = build_http_provider("cloudflare:clef-flash", env=cf_env)

    async def go():
        try:
            return await asyncio.gather(
                *[provider.decide(DecisionRequest(three_type_schema(), f"item {i}")) for i in range(100)]
            )
        finally:
            await provider.aclose()

    results = asyncio.run(go())
    assert len(results) == 100 and all(not r.failures for r in results)
    assert emu.request_count(model="clef-flash") == 100 and emu.stats["answered"] == 100


def test_cli_serves_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from workbench.cli import main; main()",
            "emulator",
            "--port",
            "0",
            "--json",
            "--fault-429",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        lines = []
        while True:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(line)
            if line.startswith("}"):
                break
        info = json.loads("".join(lines))
        assert info["base_url"].startswith("http://127.0.0.1:")
        resp = httpx.post(info["cloudflare_base_url"] + "/accounts/a/ai/run/@cf/cloudflare/clef", json=body())
        assert (resp.status_code, resp.json()["errors"][0]["code"]) == (429, 3040)
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0
    assert "1 request served" in proc.stderr.read()


def test_emulator_process_handle_has_the_same_surface(cf_env):
    """`run_emulator_process` runs `workbench emulator` in a child process (no GIL sharing)."""
    from workbench.emulator import run_emulator_process

    with run_emulator_process(port=0, rate_limit=1.0, require_token="tok") as emu:
        r = _CLIENT.post(
            emu.cloudflare_base_url + "/accounts/a/ai/run/@cf/cloudflare/clef",
            json=body(),
            headers={"authorization": "Bearer tok"},
        )
        assert (r.status_code, r.json()["errors"][0]["code"]) == (429, 3040)
        assert emu.request_count(model="clef") == 1 and emu.stats["by_fault"] == {"rate_limit": 1}
        emu.set_faults(rate_limit=0.0)
        env = {**cf_env, "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url, "CLOUDFLARE_API_KEY": "tok"}
        provider = build_http_provider("cloudflare:clef", env=env)

        async def go():
            try:
                return await provider.decide(DecisionRequest(three_type_schema(), "card stolen"))
            finally:
                await provider.aclose()

        assert asyncio.run(go()).failures == {}
        emu.reset_stats()
        assert emu.stats["total"] == 0
    assert emu.process.poll() is not None  # the child is gone after the block


@pytest.mark.slow
def test_emulator_answers_with_a_local_provider():
    """`--answerer local:minilm-zeroshot`: the emulator answers through a real local model."""
    pytest.importorskip("sentence_transformers")
    from workbench.emulator import answerer_from_spec

    schema = three_type_schema()
    with run_emulator(port=0, answerer=answerer_from_spec("local:minilm-zeroshot")) as emu:
        r = post(emu, "/v1/systemone", {"model": "m", "state": "Someone stole my card", "questions": schema.to_wire()})
    answers = r.json()["answers"]
    assert r.status_code == 200 and answers["intent"]["choice"] == "lost_or_stolen_card"
    assert set(answers) == {"intent", "stolen", "severity"}
