"""Cloudflare Workers AI dialect for Clef and Clef-flash (providers.md §3.1).

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
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.http import classify_http_error, error_fields
from workbench.providers.systemone import SystemOneProvider

DEFAULT_BASE_URL = "https://api.cloudflare.com/client/v4"
DEFAULT_WINDOW_TOKENS = 65_536
DEFAULT_MAX_BODY_BYTES = 256_000
MAX_IMAGES = 4

#: Where the API token is read, first found wins: NeuroLink's name, then Polyglot/MemberJunction's, then the
#: one in Cloudflare's own examples (providers.md §3.1).
KEY_ENV = ("CLOUDFLARE_API_KEY", "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_AUTH_TOKEN")
#: The models Workers AI serves as ``@cf/cloudflare/{model}`` (the input schema's ``model`` pattern, providers.md §3.1).
MODELS = ("clef", "clef-flash")

_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Account ids are 32 hex digits; we accept any token without '/ . ? whitespace' (providers.md §3.1).
_ACCOUNT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def cloudflare_url(base_url: str, account_id: str, model: str) -> str:
    """The Workers AI run URL for ``model`` (``base_url`` ends with ``/client/v4``)."""
    return f"{base_url.rstrip('/')}/accounts/{account_id}/ai/run/@cf/cloudflare/{model}"


class CloudflareProvider(SystemOneProvider):
    """Clef on Workers AI. ``account_id`` problems are refused at call time, never sent."""

    dialect = "cloudflare"

    def __init__(self, *args: Any, account_id: str | None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.account_id = account_id

    def setting_problem(self) -> str | None:
        """Why no call can succeed with these settings (account id, model name), or ``None``."""
        if not self.account_id:
            return "no account id: set CLOUDFLARE_ACCOUNT_ID"
        if not _ACCOUNT_ID.match(self.account_id):
            return "account id (CLOUDFLARE_ACCOUNT_ID) must be letters/digits only (no '/', '.', '?' or spaces)"
        if not self.model or ".." in self.model or not _MODEL_NAME.match(self.model):
            return f"model name {self.model!r} is not a plain name (expected e.g. clef or clef-flash)"
        return None

    def preflight(self, request: DecisionRequest) -> None:
        problem = self.setting_problem()
        if problem:
            raise self._refuse(ErrorKind.INVALID, problem)

    def to_system_one(self, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
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
                    f"{self.spec}: envelope success is not true"
                    + (f" (code {code}: {message[:200]})" if code is not None else ""),
                    status=response.status_code,
                    code=code,
                )
            data = data.get("result")
        return super().to_system_one(data, response, request)
