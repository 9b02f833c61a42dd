"""Provider spec string -> provider instance, through lazy factories.

Specs name providers on the CLI and in the store: ``cloudflare:clef``, ``local:minilm-zeroshot``,
``baseline:tfidf-logreg``, ``rules:experiments/rules/banking77.yaml``, ``replay:logs.jsonl``,
``systemone:http://127.0.0.1:8012/v1/systemone?model=clef-flash``. A spec never holds a secret:
credentials come from the environment (``context.env``) and :func:`public_spec` strips anything
that looks like one before a spec is stored or printed.

The in-process prefixes (``local``, ``baseline``, ``rules``, ``replay``) are built here; every
other prefix goes to the HTTP dialects' factory ``workbench.providers.remote.build_http_provider``.
Heavy imports (torch, scikit-learn, httpx) happen only when a provider is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from workbench.providers.base import ErrorKind, Provider, ProviderError

#: Query parameters and the like that must never be stored (matched case-insensitively).
_SECRET_NAMES = re.compile(r"(key|token|secret|password|passwd|auth|signature|sig)", re.IGNORECASE)


@dataclass
class ProviderContext:
    """What factories may need. Passed down explicitly; nothing is read from globals.

    ``con``/``dataset``/``dataset_version`` let trained baselines read their ``train`` split;
    ``env`` holds credentials for HTTP providers (never stored); ``transport`` lets tests inject
    an httpx transport; ``timeout`` is the per-call timeout in seconds.
    """

    con: Any = None
    dataset: str | None = None
    dataset_version: int | None = None
    env: Mapping[str, str] | None = None
    timeout: float = 5.0
    transport: Any = None
    settings: dict[str, Any] = field(default_factory=dict)


def split_spec(spec: str) -> tuple[str, str]:
    """``"cloudflare:clef"`` -> ``("cloudflare", "clef")``; the part after the first colon is kept whole."""
    prefix, sep, rest = spec.strip().partition(":")
    if not sep or not prefix:
        raise ProviderError(
            ErrorKind.INVALID,
            f"provider spec {spec!r} has no prefix; write PREFIX:NAME, e.g. "
            "cloudflare:clef, local:minilm-zeroshot, baseline:tfidf-logreg",
            sent=False,
        )
    return prefix.lower(), rest


def public_spec(spec: str) -> str:
    """The spec with credentials removed: URL user-info and secret-looking query values.

    >>> public_spec("systemone:https://user:pw@host/v1/systemone?model=x&api_key=abc")
    'systemone:https://host/v1/systemone?model=x&api_key=%2A%2A%2A'
    """
    prefix, rest = spec.partition(":")[0], spec.partition(":")[2]
    if "://" not in rest:
        return spec
    parts = urlsplit(rest)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode(
        [(k, "***" if _SECRET_NAMES.search(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    )
    return f"{prefix}:{urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))}"


def _local(rest: str, context: ProviderContext) -> Provider:
    from workbench.providers.local import build_local_provider

    name, _, query = rest.partition("?")
    return build_local_provider(name, **dict(parse_qsl(query)), **context.settings)


def _baseline(rest: str, context: ProviderContext) -> Provider:
    from workbench.providers.baselines import build_tfidf_logreg

    if rest != "tfidf-logreg":
        raise ProviderError(ErrorKind.INVALID, f"unknown baseline {rest!r}; known: tfidf-logreg", sent=False)
    if context.con is None or not context.dataset:
        raise ProviderError(ErrorKind.INVALID, "baseline:tfidf-logreg needs a dataset to train on", sent=False)
    return build_tfidf_logreg(context.con, context.dataset, context.dataset_version)


def _rules(rest: str, context: ProviderContext) -> Provider:
    from workbench.providers.baselines import RulesProvider

    return RulesProvider(rest, spec=f"rules:{rest}")


def _replay(rest: str, context: ProviderContext) -> Provider:
    from workbench.providers.baselines import ReplayProvider

    return ReplayProvider(rest, spec=f"replay:{rest}")


LOCAL_FACTORIES: dict[str, Callable[[str, ProviderContext], Provider]] = {
    "local": _local,
    "baseline": _baseline,
    "rules": _rules,
    "replay": _replay,
}


def get_provider(spec: str, *, context: ProviderContext | None = None) -> Provider:
    """Build the provider named by ``spec``.

    Raises :class:`ProviderError` (kind ``invalid_request``, nothing sent) for an unknown or
    malformed spec; HTTP specs are validated by their dialect's factory.
    """
    context = context or ProviderContext()
    prefix, rest = split_spec(spec)
    factory = LOCAL_FACTORIES.get(prefix)
    if factory is not None:
        return factory(rest, context)
    try:
        from workbench.providers.remote import build_http_provider
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("workbench.providers"):
            raise ProviderError(
                ErrorKind.INVALID, f"HTTP providers are not available ({exc.name} missing)", sent=False
            ) from None
        raise
    return build_http_provider(
        spec, env=context.env, transport=context.transport, timeout=context.timeout, **context.settings
    )


def check_ready(provider: Provider) -> None:
    """Raise a :class:`~workbench.errors.WorkbenchError` (nothing sent) when ``provider`` could only fail:
    an HTTP provider without its API key or account id, or a model its vendor does not serve
    (:func:`workbench.providers.remote.check_ready`). In-process providers are checked when built."""
    if getattr(provider, "endpoint", None) is None:
        return
    from workbench.providers.remote import check_ready as check_remote

    check_remote(provider)  # type: ignore[arg-type]
