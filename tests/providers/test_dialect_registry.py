"""The dialect registry: one object per wire format, both halves, and a new format added as one module.

A toy format defined here (as a contributor's new module would be) is registered, and with no other
code the provider speaks it and the real emulator serves it over loopback HTTP: answers, refusals
found by its emulator half, and errors worded its way and classified by the shared HTTP code.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from workbench.providers import dialects
from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.dialects import base
from workbench.providers.dialects.systemone import CLEF_LIMITS, system_one_answers, validate_system_one
from workbench.providers.http import Endpoint, HttpProvider
from workbench.providers.remote import PRESETS, build_http_provider, endpoint_url
from workbench.schema import PROFILES, option_ids

from .conftest import run, three_type_schema

STOLEN = "Someone stole my card yesterday and I think money was lost, please block the card"


class Toy(dialects.Dialect):
    """A made-up format: ``{"m": model, "s": state, "q": questions}`` → ``{"a": answers, "n": tokens}``."""

    name = "toy"
    paths = frozenset({"/toy/v1/ask"})

    def headers(self, provider: Any) -> dict[str, str]:
        return {"x-toy-model": provider.model or ""}

    def build_body(self, provider: Any, request: DecisionRequest) -> dict:
        return {"m": provider.model, "s": request.state, "q": request.schema.to_wire()}

    def to_system_one(self, provider: Any, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
        if not isinstance(data, dict) or not isinstance(data.get("a"), dict):
            raise ProviderError(ErrorKind.MALFORMED, "toy: no 'a' object")
        return {"model": data.get("m"), "answers": data["a"], "usage": {"input_tokens": data.get("n")}}

    def route_model(self, path: str, headers: Mapping[str, str], body: bytes) -> str | None:
        return headers.get("x-toy-model")

    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> dialects.Served:
        if not isinstance(body, dict) or set(body) != {"m", "s", "q"}:
            raise dialects.Reject("schema", "a toy body has exactly m, s and q")
        state, questions, images = validate_system_one(
            {"state": body["s"], "questions": body["q"]}, CLEF_LIMITS, allowed_fields=frozenset({"state", "questions"})
        )
        return dialects.Served(state, questions, images, {"answered_model": body["m"]})

    def render_answer(self, a: dialects.Answer) -> dialects.Reply:
        answers = system_one_answers(a.questions, a.probs, confidence="pmax")
        return 200, {"a": answers, "m": a.ctx["answered_model"], "n": a.tokens}, {"x-toy-id": a.rid}

    def render_error(self, e: dialects.Error) -> dialects.Reply:
        return e.status, {"error": {"message": f"toy says: {e.message}", "code": e.code}}, {"x-toy-id": e.rid}


@pytest.fixture
def toy(monkeypatch):
    """The toy dialect registered for one test (the registry is restored afterwards)."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    return dialects.register(Toy())


def _toy_provider(emu) -> HttpProvider:
    endpoint = Endpoint(
        vendor="toy",
        url=f"{emu.base_url}/toy/v1/ask",
        model="toy-1",
        key_required=False,
        request_id_headers=("x-toy-id",),
    )
    return HttpProvider("toy:toy-1", endpoint, PROFILES["cloudflare-clef"], wire=dialects.get("toy"))


async def _decide(provider: HttpProvider, request: DecisionRequest):
    try:
        return await provider.decide(request)
    finally:
        await provider.aclose()


def test_a_new_dialect_is_spoken_and_served_with_no_other_code(emu, toy):
    schema = three_type_schema()
    result = run(_decide(_toy_provider(emu), DecisionRequest(schema, STOLEN)))
    assert result.failures == {} and result.model == "toy-1" and result.request_id
    assert result.input_tokens > 0
    intent = result.answers["intent"].probs
    assert abs(intent.sum() - 1) < 1e-12
    assert option_ids(schema.questions["intent"])[int(intent.argmax())] == "lost_or_stolen_card"
    assert emu.stats["by_path"] == {"/toy/v1/ask": 1} and emu.stats["by_model"] == {"toy-1": 1}


def test_a_new_dialect_words_its_own_errors_and_they_classify(emu, toy):
    emu.set_faults(rate_limit=1.0)
    with pytest.raises(ProviderError) as info:
        run(_decide(_toy_provider(emu), DecisionRequest(three_type_schema(), STOLEN)))
    assert info.value.kind is ErrorKind.RATE_LIMIT and info.value.status == 429 and info.value.sent
    assert "toy says: Capacity temporarily exceeded" in str(info.value)


def test_a_new_dialects_emulator_half_refuses_a_body_it_does_not_read(emu, toy):
    with httpx.Client() as client:
        response = client.post(f"{emu.base_url}/toy/v1/ask", json={"m": "toy-1", "s": "x"})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "toy says: a toy body has exactly m, s and q", "code": 5006}}


def test_the_registry_refuses_a_second_dialect_of_the_same_name_and_names_the_known_ones(toy):
    with pytest.raises(ValueError, match="already registered"):
        dialects.register(Toy())
    with pytest.raises(KeyError, match="unknown dialect 'nope'.*systemone.*toy"):
        dialects.get("nope")


def test_every_registered_dialect_has_both_halves():
    names = [d.name for d in dialects.registered()]
    assert names == ["systemone", "cloudflare", "openai", "perplexity", "vercel"]
    for d in dialects.registered():
        for member in ("build_body", "to_system_one", "parse_request", "render_answer"):
            assert getattr(type(d), member) is not getattr(dialects.Dialect, member), (d.name, member)
        assert d.recorded in ("systemone", "cloudflare", "openai", "vercel")


@pytest.mark.parametrize("vendor", sorted(PRESETS))
def test_every_preset_names_a_dialect_that_serves_its_default_path(vendor):
    preset = PRESETS[vendor]
    path = httpx.URL(endpoint_url("http://127.0.0.1:1", preset.default_path)).path
    assert dialects.get(preset.dialect).serves(path)
    provider = build_http_provider(f"{vendor}:m", env={f"{preset.url_env[0]}": "http://127.0.0.1:1"})
    assert provider.wire is dialects.get(preset.dialect)
    run(provider.aclose())


@pytest.mark.parametrize("name", ["systemone", "cloudflare", "openai", "perplexity", "vercel"])
def test_each_dialect_reads_back_the_body_its_client_half_builds(name):
    """Client half → emulator half on the same object: the questions the service reads are the ones asked."""
    wire = dialects.get(name)
    provider = build_http_provider(
        {
            "systemone": "systemone:http://127.0.0.1:1/v1/systemone?model=m",
            "cloudflare": "cloudflare:clef",
            "openai": "openai:gpt-6-luna",
            "perplexity": "perplexity:pplx-decider-v1-27b",
            "vercel": "vercel:typesafe-ai/jev",
        }[name],
        env={"CLOUDFLARE_ACCOUNT_ID": "acc"},
    )
    schema = three_type_schema()
    request = DecisionRequest(schema, STOLEN)
    headers = httpx.Headers(wire.headers(provider))
    served = wire.parse_request(wire.build_body(provider, request), headers, provider.model)
    assert served.state == STOLEN
    assert list(served.questions) == list(schema.questions)
    for qid, q in served.questions.items():
        n = 2 if q["type"] == "noul" else len(q["criteria"])
        assert n == len(option_ids(schema.questions[qid]))
    probs = {qid: np.full(len(option_ids(schema.questions[qid])), 1.0) for qid in schema.questions}
    probs = {qid: p / p.sum() for qid, p in probs.items()}
    answer = dialects.Answer(served.questions, probs, 7, served.ctx, "r", random.Random(0), 0.0)
    status, body, _ = wire.render_answer(answer)
    raw = wire.to_system_one(provider, body, httpx.Response(status), request)
    assert set(raw["answers"]) == set(schema.questions)
    run(provider.aclose())


def test_a_shared_path_words_errors_generically_until_the_body_says_which_format(emu):
    """``/v1/decisions`` is OpenAI's and Perplexity's: a body that is not JSON gets the plain error object."""
    with httpx.Client() as client:
        response = client.post(f"{emu.base_url}/v1/decisions", content=b"[1,")
        openai = client.post(f"{emu.base_url}/v1/decisions", json={"model": "m", "input": "x", "questions": [{}]})
        pplx = client.post(f"{emu.base_url}/v1/decisions", json={"state": "x", "questions": {}})
    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": "Invalid request: body is not valid JSON", "type": "invalid_request_error", "code": 6003}
    }
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "questions.0"  # OpenAI's wording
    assert pplx.status_code == 400 and pplx.json()["detail"]["error_type"] == "invalid_request"  # System One's


def test_no_module_outside_the_dialects_switches_on_a_dialect_name():
    """The formats are told apart by their objects only: no ``x == "vercel"`` or ``x in ("openai", ...)``."""
    names = {d.name for d in dialects.registered()} | {d.recorded for d in dialects.registered()}
    package = Path(dialects.__file__).resolve().parents[2]
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "dialects" and path.parent.parent.name == "providers":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            for side in (node.left, *node.comparators):
                elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(e, ast.Constant) and e.value in names for e in elts):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
