"""Cloudflare Workers AI, for Clef and Clef-flash (providers.md §3.1): System One in the v4 envelope.

``POST {base}/accounts/{account_id}/ai/run/@cf/cloudflare/{model}`` with a Bearer token, a System
One body that also names ``model``, and the v4 envelope ``{result, success, errors, messages}``
around the answer. The request id is ``cf-ai-req-id`` (present whenever the model was reached),
else ``cf-ray``.

Refused locally, before anything is sent (``ProviderError.sent is False``):

* missing or malformed account id (the id is part of the URL path) → ``invalid_request``;
* a model name that is not a plain name (``clef/../x``) → ``invalid_request``;
* more questions, options or levels than Workers AI accepts (the runner splits by ``limits``)
  → ``invalid_request``;
* more than 4 images, or one that is not a PNG/JPEG/WebP data URL → ``invalid_request``;
* a state whose estimated tokens exceed ``window_tokens`` (a setting, default 65,536: the hosted
  window changed in October 2026, §7) → ``max_tokens_exceeded``;
* a body over ``max_body_bytes`` (default 256,000; the hosted 413/5021 estimate fires at about
  twice that, §3.1) → ``max_tokens_exceeded``.

The emulated service answers unknown URIs, and models it does not serve, 400/7000 in this envelope;
refusals by the model nest a second error object in the message and carry ``cf-ai-req-id``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any

import httpx

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.dialects.base import Answer, Error, Reject, Reply, Served
from workbench.providers.dialects.systemone import (
    SystemOne,
    system_one_answers,
)
from workbench.providers.http import HttpProvider, classify_http_error, error_fields
from workbench.providers.prices import NEURONS_PER_M

DEFAULT_BASE_URL = "https://api.cloudflare.com/client/v4"
DEFAULT_WINDOW_TOKENS = 65_536
DEFAULT_MAX_BODY_BYTES = 256_000
MAX_IMAGES = 4

#: Where the API token is read, first found wins: NeuroLink's name, then Polyglot/MemberJunction's, then the
#: one in Cloudflare's own examples (providers.md §3.1).
KEY_ENV = ("CLOUDFLARE_API_KEY", "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_AUTH_TOKEN")
#: The models Workers AI serves as ``@cf/cloudflare/{model}`` (the input schema's ``model`` pattern, providers.md §3.1).
MODELS = ("clef", "clef-flash")

_ROUTE = re.compile(r"^/client/v4/accounts/([^/]+)/ai/run/@cf/cloudflare/([^/]+)$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Account ids are 32 hex digits; we accept any token without '/ . ? whitespace' (providers.md §3.1).
_ACCOUNT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def cloudflare_url(base_url: str, account_id: str, model: str) -> str:
    """The Workers AI run URL for ``model`` (``base_url`` ends with ``/client/v4``)."""
    return f"{base_url.rstrip('/')}/accounts/{account_id}/ai/run/@cf/cloudflare/{model}"


class Cloudflare(SystemOne):
    """Clef on Workers AI. Account id problems are refused at call time, never sent."""

    name = "cloudflare"
    known_models = MODELS

    # -- client half -----------------------------------------------------------------------------
    def setting_problem(self, provider: HttpProvider) -> str | None:
        account, model = provider.endpoint.account_id, provider.model
        if not account:
            return "no account id: set CLOUDFLARE_ACCOUNT_ID"
        if not _ACCOUNT_ID.match(account):
            return "account id (CLOUDFLARE_ACCOUNT_ID) must be letters/digits only (no '/', '.', '?' or spaces)"
        if not model or ".." in model or not _MODEL_NAME.match(model):
            return f"model name {model!r} is not a plain name (expected e.g. clef or clef-flash)"
        return None

    def preflight(self, provider: HttpProvider, request: DecisionRequest) -> None:
        problem = self.setting_problem(provider)
        if problem:
            raise ProviderError(ErrorKind.INVALID, f"{provider.spec}: {problem}", sent=False)

    def to_system_one(
        self, provider: HttpProvider, data: Any, response: httpx.Response, request: DecisionRequest
    ) -> dict:
        if isinstance(data, dict) and "success" in data:
            if data.get("success") is not True:  # fail closed: a 200 without success is not an answer
                code, etype, message = error_fields(data)
                kind = (
                    classify_http_error(
                        response.status_code if response.status_code >= 400 else 400, code, etype, message
                    )
                    if code is not None
                    else ErrorKind.MALFORMED
                )
                raise ProviderError(
                    kind,
                    f"{provider.spec}: envelope success is not true"
                    + (f" (code {code}: {message[:200]})" if code is not None else ""),
                    status=response.status_code,
                    code=code,
                )
            data = data.get("result")
        return super().to_system_one(provider, data, response, request)

    # -- emulator half ---------------------------------------------------------------------------
    def serves(self, path: str) -> bool:
        return _ROUTE.match(path) is not None

    def route_model(self, path: str, headers: Mapping[str, str], body: bytes) -> str | None:
        m = _ROUTE.match(path)
        return m.group(2) if m else None

    def route_problem(self, model: str | None) -> str | None:
        return None if model in MODELS else "No route for that URI"

    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> Served:
        if isinstance(body, dict) and "model" in body:
            named = body["model"]
            if not isinstance(named, str) or named.strip() not in MODELS:
                raise Reject("schema", "model must be one of clef, clef-flash", ("model",))
            if named.strip() != model:
                raise Reject("schema", f"model {named.strip()!r} does not match the URL model {model!r}", ("model",))
            answered = model
        else:
            answered = "clef-flash"  # measured 2026-10-03: a body without model was answered by clef-flash
        return super().parse_request(body, headers, model)._replace(ctx={"answered_model": answered})

    def render_answer(self, a: Answer) -> Reply:
        model = a.ctx["answered_model"]
        result = {
            "model": model,
            "answers": system_one_answers(a.questions, a.probs, confidence="gini"),
            "usage": {"input_tokens": a.tokens, "output_tokens": 0},
        }
        neurons = a.tokens * NEURONS_PER_M[model] / 1e6
        headers = {**_ray_headers(a.rng), "cf-ai-req-id": a.rid, "cf-ai-neurons": f"{neurons:.2f}"}
        return 200, {"result": result, "success": True, "errors": [], "messages": []}, headers

    def render_error(self, e: Error) -> Reply:
        headers, message = _ray_headers(e.rng), e.message
        if e.model_side:  # model-side refusals nest a second envelope and end with the request uuid
            inner = {
                "error": {
                    "type": "invalid_request" if e.status == 422 else "server_error",
                    "message": message,
                    "details": {"path": list(map(str, e.loc))},
                }
            }
            message = f"AiError: AiError: {json.dumps(inner)} ({e.rid})"
            headers["cf-ai-req-id"] = e.rid
        envelope = {"success": False, "errors": [{"code": e.code, "message": message}], "result": {}, "messages": []}
        return e.status, envelope, headers


def _ray_headers(rng: random.Random) -> dict[str, str]:
    return {"cf-ray": f"{rng.getrandbits(64):016x}-IAD", "api-version": "2026-10-01.epoch", "cache-control": "no-store"}
