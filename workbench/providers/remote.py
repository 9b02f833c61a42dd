"""Spec string → remote provider: one preset per vendor on top of the wire formats of :mod:`~workbench.providers.dialects`.

Specs (``prefix:model``; the model part may be empty to use the vendor default or env var)::

    cloudflare:clef | cloudflare:clef-flash       Workers AI (env CLOUDFLARE_API_KEY, _API_TOKEN or _AUTH_TOKEN,
                                                  CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_CLEF_MODEL,
                                                  CLOUDFLARE_CLEF_BASE_URL)
    typesafe:jev-latest                           TypeSafe direct (TYPESAFE_API_KEY, TYPESAFE_BASE_URL)
    openrouter:typesafe/jev-1.13                  OpenRouter Decisions (OPENROUTER_API_KEY)
    perplexity:pplx-decider-v1-27b                Perplexity Decisions (PERPLEXITY_API_KEY)
    subq:subq-snap-preview | sarvam:sarvam-prism  SubQ / Sarvam (SUBQ_API_KEY / SARVAM_API_KEY)
    laya:typed-decisions | xor:xor-1.1            self-hosted (LAYA_BASE_URL / XOR_BASE_URL, optional keys)
    openai:gpt-6-luna                             OpenAI Decisions (OPENAI_API_KEY)
    vercel:typesafe-ai/jev | prime:cloudflare/clef  evaluation-model v4 (AI_GATEWAY_API_KEY / PRIME_API_KEY)
    systemone:http://host:port/v1/systemone?model=NAME[&profile=PROFILE]
                                                  any System One server (WORKBENCH_SYSTEMONE_API_KEY optional)

Every vendor's base URL can be overridden with ``<VENDOR>_BASE_URL`` (or the ``base_url``
setting), which is how tests and users point a preset at ``workbench emulator``. A bare base URL
gets the vendor's path appended; a URL that already ends in a decision path is used as is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
from pydantic import SecretStr

from workbench.errors import WorkbenchError
from workbench.providers import dialects
from workbench.providers.dialects.cloudflare import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_WINDOW_TOKENS,
    MAX_IMAGES,
    cloudflare_url,
)
from workbench.providers.dialects.cloudflare import KEY_ENV as CLOUDFLARE_KEY_ENV
from workbench.providers.http import DEFAULT_MAX_CONNECTIONS, DEFAULT_TIMEOUT_S, Endpoint, HttpProvider
from workbench.schema import PROFILES


class ProviderSpecError(WorkbenchError):
    """A provider spec string cannot be turned into a provider."""


@dataclass(frozen=True)
class Preset:
    """How one vendor is reached; the dialect (a name in :mod:`~workbench.providers.dialects`) decides the wire format."""

    vendor: str
    dialect: str
    default_url: str | None  # None: self-hosted, the base URL env var is required
    url_env: tuple[str, ...]
    key_env: tuple[str, ...]
    key_required: bool
    default_model: str | None
    model_env: tuple[str, ...]
    profile: str
    default_path: str
    request_id_headers: tuple[str, ...] = ("x-request-id",)
    auth_header: str = "authorization"
    max_images: int | None = 4


PRESETS: dict[str, Preset] = {
    "typesafe": Preset(
        "typesafe",
        "systemone",
        "https://api.typesafe.ai/v1/systemone",
        ("TYPESAFE_BASE_URL",),
        ("TYPESAFE_API_KEY",),
        True,
        "jev-latest",
        ("TYPESAFE_MODEL",),
        "typesafe-jev",
        "/v1/systemone",
        ("x-typesafe-request-id", "x-request-id"),
        max_images=0,
    ),
    "openrouter": Preset(
        "openrouter",
        "systemone",
        "https://openrouter.ai/api/alpha/decisions",
        ("OPENROUTER_BASE_URL",),
        ("OPENROUTER_API_KEY",),
        True,
        "typesafe/jev-1.13",
        (),
        "cloudflare-clef",
        "/api/alpha/decisions",
        ("x-request-id",),
    ),
    "perplexity": Preset(
        "perplexity",
        "perplexity",
        "https://api.perplexity.ai/v1/decisions",
        ("PERPLEXITY_DECIDER_BASE_URL", "PERPLEXITY_BASE_URL"),
        ("PERPLEXITY_API_KEY",),
        True,
        "pplx-decider-v1-27b",
        ("PERPLEXITY_DECIDER_MODEL",),
        "perplexity",
        "/v1/decisions",
        ("x-request-id",),
        max_images=8,
    ),
    "laya": Preset(
        "laya",
        "systemone",
        None,
        ("LAYA_BASE_URL",),
        ("LAYA_API_KEY",),
        False,
        "typed-decisions",
        ("LAYA_MODEL",),
        "laya",
        "/v1/systemone",
        ("x-litellm-call-id", "x-request-id"),
        max_images=0,
    ),
    "xor": Preset(
        "xor",
        "systemone",
        None,
        ("XOR_BASE_URL",),
        ("XOR_API_KEY",),
        False,
        "xor-1.1",
        ("XOR_MODEL",),
        "typesafe-jev",
        "/v1/systemone",
        ("x-request-id", "x-typesafe-request-id"),
        max_images=8,
    ),
    "subq": Preset(
        "subq",
        "systemone",
        "https://api.subq.ai/v1/systemone",
        ("SUBQ_BASE_URL",),
        ("SUBQ_API_KEY",),
        True,
        "subq-snap-preview",
        ("SUBQ_SNAP_MODEL",),
        "subq",
        "/v1/systemone",
        ("x-request-id",),
    ),
    "sarvam": Preset(
        "sarvam",
        "systemone",
        "https://api.sarvam.ai/v2/systemone",
        ("SARVAM_BASE_URL",),
        ("SARVAM_API_KEY",),
        True,
        "sarvam-prism",
        (),
        "typesafe-jev",
        "/v2/systemone",
        ("x-request-id",),
        auth_header="api-subscription-key",
    ),
    "openai": Preset(
        "openai",
        "openai",
        "https://api.openai.com/v1/decisions",
        ("OPENAI_BASE_URL",),
        ("OPENAI_API_KEY",),
        True,
        "gpt-6-luna",
        (),
        "openai",
        "/v1/decisions",
        ("x-request-id",),
        max_images=128,
    ),
    "vercel": Preset(
        "vercel",
        "vercel",
        "https://ai-gateway.vercel.sh/v4/ai/evaluation-model",
        ("AI_GATEWAY_BASE_URL", "TYPESAFE_GATEWAY_URL"),
        ("AI_GATEWAY_API_KEY",),
        True,
        "typesafe-ai/jev",
        (),
        "typesafe-jev",
        "/v4/ai/evaluation-model",
        ("x-request-id", "x-vercel-id"),
        max_images=0,
    ),
    "prime": Preset(
        "prime",
        "vercel",
        "https://api.pinference.ai/v4/ai/evaluation-model",
        ("PRIME_BASE_URL",),
        ("PRIME_API_KEY",),
        True,
        "cloudflare/clef",
        (),
        "cloudflare-clef",
        "/v4/ai/evaluation-model",
        ("x-inference-id", "x-request-id"),
        max_images=0,
    ),
}

#: Spec prefixes this module builds (the registry routes these here).
HTTP_PREFIXES = ("cloudflare", "systemone", *PRESETS)

_DECISION_SUFFIXES = ("/systemone", "/decisions", "/evaluation-model", "/evaluations", "/predict")
_KNOWN_SETTINGS = {
    "base_url",
    "api_key",
    "account_id",
    "window_tokens",
    "max_body_bytes",
    "max_images",
    "max_connections",
    "profile",
    "model",
    "team_id",
}


def endpoint_url(base: str, default_path: str) -> str:
    """``base`` as is when it already names a decision path, else ``base`` + ``default_path``.

    A base ending in the path's version segment (``…/v1`` with ``/v1/decisions``) is not doubled.
    """
    parts = urlsplit(base.strip())
    if not parts.scheme or not parts.netloc:
        raise ProviderSpecError(
            f"base URL {base!r} is not an absolute http(s) URL",
            hint="e.g. http://127.0.0.1:8787 or https://api.example.com",
        )
    path = parts.path.rstrip("/")
    if not path.endswith(_DECISION_SUFFIXES):
        first = "/" + default_path.strip("/").split("/")[0]
        if path.endswith(first) and first in ("/v1", "/v2", "/v4"):
            path = path[: -len(first)]
        path = path + default_path
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        v = env.get(n)
        if v:
            return v
    return None


def _secret(value: Any) -> SecretStr | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, SecretStr) else SecretStr(str(value))


def _profile(name: str):
    if name not in PROFILES:
        raise ProviderSpecError(f"unknown limit profile {name!r}", hint=f"use one of {', '.join(sorted(PROFILES))}")
    return PROFILES[name]


def build_http_provider(
    spec: str,
    *,
    env: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    **settings: Any,
) -> HttpProvider:
    """Build the remote provider named by ``spec``.

    Parameters
    ----------
    spec : str
        ``prefix:model`` (see the module docstring); never contains a secret.
    env : mapping, optional
        Where credentials and base URLs are read (default ``os.environ``); tests pass a dict.
    transport : httpx.AsyncBaseTransport, optional
        Injected into the provider's single ``httpx.AsyncClient``.
    timeout : float, default=5.0
        Per-call timeout in seconds.
    **settings
        ``base_url``, ``api_key``, ``account_id``, ``model``, ``profile``, ``window_tokens``
        (Cloudflare state window, default 65,536), ``max_body_bytes`` (Cloudflare default
        256,000), ``max_images``, ``max_connections``, ``team_id`` (Prime). Unknown keys are
        ignored so that a runner can pass its settings through.

    Returns
    -------
    provider : HttpProvider
        With ``spec``, ``model``, ``dialect``, ``limits``, async ``decide`` and ``aclose``.
    """
    env = os.environ if env is None else env
    settings = {k: v for k, v in settings.items() if k in _KNOWN_SETTINGS and v is not None}
    prefix, sep, rest = spec.partition(":")
    prefix = prefix.strip().lower()
    common = dict(
        timeout=timeout,
        transport=transport,
        max_connections=int(settings.get("max_connections", DEFAULT_MAX_CONNECTIONS)),
    )
    own_builder = {"cloudflare": _cloudflare, "systemone": _generic_systemone}.get(prefix)  # URL built from the spec
    if own_builder is not None:
        return own_builder(spec, rest.strip(), env, settings, common)
    if prefix not in PRESETS:
        raise ProviderSpecError(
            f"unknown provider spec {spec!r}", hint=f"use one of {', '.join(p + ':MODEL' for p in HTTP_PREFIXES)}"
        )
    return _preset(spec, PRESETS[prefix], rest.strip(), env, settings, common)


def _cloudflare(spec: str, model: str, env: Mapping[str, str], settings: dict, common: dict) -> HttpProvider:
    model = settings.get("model") or model or env.get("CLOUDFLARE_CLEF_MODEL") or "clef"
    key = _secret(settings.get("api_key") or _first(env, CLOUDFLARE_KEY_ENV))
    account = settings.get("account_id") or env.get("CLOUDFLARE_ACCOUNT_ID") or None
    base = settings.get("base_url") or env.get("CLOUDFLARE_CLEF_BASE_URL") or DEFAULT_BASE_URL
    window = settings.get("window_tokens") or env.get("CLOUDFLARE_CLEF_WINDOW_TOKENS") or DEFAULT_WINDOW_TOKENS
    endpoint = Endpoint(
        vendor="cloudflare",
        url=cloudflare_url(base, account or "-", model),
        model=model,
        api_key=key,
        key_env=f"{CLOUDFLARE_KEY_ENV[0]} (or {', '.join(CLOUDFLARE_KEY_ENV[1:])})",
        request_id_headers=("cf-ai-req-id", "cf-ray"),
        account_id=account,
    )
    return HttpProvider(
        spec,
        endpoint,
        _profile(settings.get("profile", "cloudflare-clef")),
        wire=dialects.get("cloudflare"),
        window_tokens=int(window),
        max_body_bytes=int(settings.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES)),
        max_images=int(settings.get("max_images", MAX_IMAGES)),
        **common,
    )


def check_ready(provider: HttpProvider) -> None:
    """Raise :class:`ProviderSpecError` when no call of ``provider`` could succeed; send nothing.

    The runner calls this before it creates a run, so that a missing credential or a misspelled model
    is one line and exit code 2, not a run of ``authentication`` or ``invalid_request`` failures. It
    looks at what :func:`build_http_provider` resolved (the key from any of the variables the vendor
    accepts, or the ``api_key`` setting), so it accepts exactly what a call would. A model is refused
    only where the library knows the vendor's closed list (Cloudflare's ``clef``, ``clef-flash``);
    other vendors add models, and self-hosted servers take any name.
    """
    spec, ep, known = provider.spec, provider.endpoint, provider.wire.known_models
    if known is not None and provider.model not in known:
        raise ProviderSpecError(f"{spec}: unknown model {provider.model!r}", hint=f"known models: {', '.join(known)}")
    if ep.key_required and (ep.api_key is None or not ep.api_key.get_secret_value()):
        raise ProviderSpecError(f"{spec}: no API key", hint=f"set {ep.key_env or 'the API key'}; nothing was run")
    problem = provider.wire.setting_problem(provider)
    if problem:
        raise ProviderSpecError(f"{spec}: {problem}; nothing was run")


_SECRET_PARAM = re.compile(r"(key|token|secret|password|passwd|auth|signature|sig)", re.IGNORECASE)


def public_url(url: str) -> str:
    """``url`` without user-info and with secret-looking query values replaced by ``***``."""
    parts = urlsplit(url)
    query = urlencode(
        [(k, "***" if _SECRET_PARAM.search(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    )
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, query, ""))


def _generic_systemone(spec: str, url: str, env: Mapping[str, str], settings: dict, common: dict) -> HttpProvider:
    if not url:
        raise ProviderSpecError(f"{spec!r}: no URL", hint="use systemone:http://HOST:PORT/v1/systemone?model=NAME")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    model = settings.get("model") or query.pop("model", None)
    profile = settings.get("profile") or query.pop("profile", "cloudflare-clef")
    clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))
    full = endpoint_url(clean, "/v1/systemone")
    key = _secret(settings.get("api_key") or env.get("WORKBENCH_SYSTEMONE_API_KEY"))
    endpoint = Endpoint(
        vendor="systemone",
        url=full,
        model=model,
        api_key=key,
        key_env="WORKBENCH_SYSTEMONE_API_KEY",
        key_required=False,
        request_id_headers=("x-request-id", "x-typesafe-request-id", "cf-ai-req-id"),
    )
    # the provider's spec is what gets stored and printed: never with a credential in it
    return HttpProvider(
        f"systemone:{public_url(url)}",
        endpoint,
        _profile(profile),
        wire=dialects.get("systemone"),
        max_images=int(settings.get("max_images", 4)),
        **common,
    )


def _preset(spec: str, p: Preset, model: str, env: Mapping[str, str], settings: dict, common: dict) -> HttpProvider:
    chosen = settings.get("model") or model or _first(env, p.model_env) or p.default_model
    base = settings.get("base_url") or _first(env, p.url_env) or p.default_url
    if base is None:
        raise ProviderSpecError(
            f"{spec!r}: {p.vendor} is self-hosted and has no default URL",
            hint=f"set {p.url_env[0]} to your server, e.g. http://127.0.0.1:8000",
        )
    key = _secret(settings.get("api_key") or _first(env, p.key_env))
    extra: dict[str, str] = {}
    team = settings.get("team_id") or (env.get("PRIME_TEAM_ID") if p.vendor == "prime" else None)
    if team:
        extra["x-prime-team-id"] = str(team)
    endpoint = Endpoint(
        vendor=p.vendor,
        url=endpoint_url(base, p.default_path),
        model=chosen,
        api_key=key,
        key_env=" or ".join(p.key_env),
        key_required=p.key_required,
        auth_header=p.auth_header,
        extra_headers=extra,
        request_id_headers=p.request_id_headers,
    )
    limits = _profile(settings.get("profile", p.profile))
    max_images = int(settings.get("max_images", p.max_images if p.max_images is not None else 4))
    return HttpProvider(spec, endpoint, limits, wire=dialects.get(p.dialect), max_images=max_images, **common)
