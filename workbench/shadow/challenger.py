"""Calling the challenger in shadow mode: one call in, one journal record out, never an exception.

Shared by the live mirror (:mod:`workbench.shadow.mirror`) and any other front that sees a copy of
the traffic (a collector behind a gateway's ``mirror`` directive):

    client = ChallengerClient("http://host/v1/systemone?model=clef-flash", timeout=5.0)
    await client.start()
    result = await client.call(body, headers)          # never raises (bar cancellation)
    journal.append(challenger_record(pair, result))
    await client.aclose()

A challenger given as a System One URL is called with aiohttp (one pooled session); a ``?model=NAME``
query rewrites the body's ``model`` for the challenger only. Any other spec (``cloudflare:clef-flash``,
``local:minilm-zeroshot``, ``rules:PATH``...) goes through the provider layer on its own event-loop
thread, so a CPU-heavy local model or a slow client cannot hold up the loop that serves the champion;
its answer is logged in System One form.

Whatever goes wrong — a timeout, a refused connection, a body that is not JSON, a request so deeply
nested that parsing it raises ``RecursionError``, a bug — comes back as a failed result with an
``error`` kind and a ``reason``, so the pair is journaled as a failure and never lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import aiohttp

from workbench.shadow.journal import MAX_JOURNAL_BODY, body_fields

#: Request headers the challenger receives (the caller's credentials belong to the champion).
CHALLENGER_PASS = frozenset({"content-type", "accept", "x-item-id", "x-request-id"})


def endpoint_url(spec: str) -> str:
    """``systemone:http://…`` or ``http://…`` → the URL; anything else is refused."""
    from workbench.errors import WorkbenchError

    url = spec.split(":", 1)[1] if spec.startswith("systemone:") else spec
    if not url.startswith(("http://", "https://")):
        raise WorkbenchError(
            f"shadow serve needs a System One endpoint URL, got {spec!r}",
            hint="e.g. http://127.0.0.1:8787/v1/systemone or systemone:https://…/v1/systemone",
        )
    return url


def is_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://", "systemone:"))


def split_model(url: str) -> tuple[str, str | None]:
    """``…?model=NAME`` → (URL without it, NAME)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    model = query.pop("model", [None])[0]
    rest = "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
    return urlunsplit(parts._replace(query=rest)), model


@dataclass
class ChallengerResult:
    """One challenger call: ``status``/``body`` when it answered, ``error`` (+ ``reason``) when not."""

    status: int | None
    body: str | None
    latency_ms: float
    error: str | None = None
    reason: str | None = None

    @property
    def failed(self) -> bool:
        """No answer (``error``) or an HTTP error status: what the stats count as a challenger error."""
        return bool(self.error) or (self.status or 0) >= 400


def challenger_record(pair: str, result: ChallengerResult, *, max_body: int = MAX_JOURNAL_BODY) -> dict[str, Any]:
    """The journal line of the challenger half of ``pair`` (an answer over ``max_body`` bytes as a reference)."""
    record: dict[str, Any] = {
        "kind": "challenger",
        "pair": pair,
        "status": result.status,
        "body": result.body,
        "latency_ms": result.latency_ms,
        "error": result.error,
    }
    if result.body is not None and 4 * len(result.body) > max_body:  # may be over: measure the UTF-8 bytes
        record.update(body_fields("body", result.body.encode("utf-8"), result.body, max_body=max_body))
    if result.reason is not None:
        record["reason"] = result.reason
    return record


def failure(error: str, exc: BaseException | None = None, t0: float | None = None) -> ChallengerResult:
    reason = f"{type(exc).__name__}: {exc}"[:500] if exc is not None else None
    latency = (time.perf_counter() - t0) * 1000.0 if t0 is not None else 0.0
    return ChallengerResult(None, None, latency, error, reason)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class ChallengerClient:
    """A challenger endpoint or provider spec, called once per mirrored request (see the module docstring).

    Parameters
    ----------
    spec : str
        System One URL (``?model=NAME`` allowed) or a provider spec of the registry.
    timeout : float
        Seconds per call (connection included).
    headers : dict
        Extra headers for a URL challenger (e.g. its own ``Authorization``); never logged.
    trust_env : bool, default=False
        Reach a URL challenger through ``HTTPS_PROXY``/``HTTP_PROXY`` (``NO_PROXY`` honoured), as
        aiohttp reads them. The mirror and the collector both pass ``True``: a challenger is usually a
        hosted model reached through the team's proxy (``NO_PROXY`` keeps local endpoints direct). The
        mirror's champion call never uses a proxy: it is the production path.
    """

    def __init__(self, spec: str, *, timeout: float, headers: dict[str, str] | None = None, trust_env: bool = False):
        self.spec = spec
        self.timeout = timeout
        self.is_url = is_url(spec)
        self.url: str | None = None
        self.model: str | None = None
        if self.is_url:
            self.url, self.model = split_model(endpoint_url(spec))
        self._extra_headers = dict(headers or {})
        self._trust_env = trust_env
        self._session: aiohttp.ClientSession | None = None
        self._proxy: Any = None
        self._proxy_auth: Any = None
        self._provider: Any = None
        self._side_loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        if self.is_url:
            from workbench.providers.http import tls_context

            # the same trust as every provider client: SSL_CERT_FILE/SSL_CERT_DIR, else the OS store
            ssl_ctx = tls_context() if self.url and self.url.startswith("https") else None
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0, ssl=ssl_ctx if ssl_ctx else True),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                skip_auto_headers=("User-Agent", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,  # the proxy is resolved once below, not per request (~0.7 ms CPU each)
            )
            if self._trust_env:
                from aiohttp.helpers import get_env_proxy_for_url
                from yarl import URL

                assert self.url is not None  # set for a URL challenger
                try:  # HTTPS_PROXY/HTTP_PROXY/ALL_PROXY with NO_PROXY, as aiohttp's trust_env reads them
                    self._proxy, self._proxy_auth = get_env_proxy_for_url(URL(self.url))
                except LookupError:
                    pass
        else:
            self._start_provider()
            warm = getattr(self._provider, "warm", None)
            if callable(warm):  # a provider that loads a model on first use loads it now, off the loop
                try:
                    await asyncio.to_thread(warm)
                except Exception:  # e.g. no weights: each call then fails and is journaled with its reason
                    pass

    def _start_provider(self) -> None:
        from workbench.providers.registry import ProviderContext, get_provider

        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name="shadow-challenger", daemon=True).start()
        ready.wait(5)
        self._side_loop = loop
        context = ProviderContext(env=dict(os.environ), timeout=self.timeout)
        self._provider = get_provider(self.spec, context=context)
        _warm_provider_imports()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._side_loop is not None:
            if self._provider is not None:
                try:
                    await asyncio.wait_for(
                        asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._provider.aclose(), self._side_loop)),
                        5.0,
                    )
                except Exception:
                    pass
            self._side_loop.call_soon_threadsafe(self._side_loop.stop)

    async def call(self, body: bytes, headers: Iterable[tuple[str, str]] = ()) -> ChallengerResult:
        """Send one request body to the challenger; every failure is a result, never an exception."""
        t0 = time.perf_counter()
        try:
            if self.is_url:
                return await self._call_url(body, headers, t0)
            return await self._call_provider(body, t0)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # RecursionError, MemoryError, a bug: journaled, never lost
            return failure(f"internal: {type(exc).__name__}", exc, t0)

    async def _call_url(self, body: bytes, headers: Iterable[tuple[str, str]], t0: float) -> ChallengerResult:
        sent = {k: v for k, v in headers if k.lower() in CHALLENGER_PASS}
        sent.update(self._extra_headers)
        if self.model is not None:
            try:
                doc = json.loads(body)
                doc["model"] = self.model
                body = json.dumps(doc, ensure_ascii=False).encode("utf-8")
            except (ValueError, TypeError):
                pass  # not JSON: forward as is, the challenger will refuse it like the champion
        assert self._session is not None and self.url is not None  # set by start()
        try:
            async with self._session.post(
                self.url, data=body, headers=sent, proxy=self._proxy, proxy_auth=self._proxy_auth
            ) as response:
                raw = await response.read()
                return ChallengerResult(response.status, _text(raw), (time.perf_counter() - t0) * 1000.0)
        except TimeoutError as exc:
            return failure("timeout", exc, t0)
        except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as exc:
            # as the provider clients classify it: the fix is SSL_CERT_FILE, not a retry
            return failure("certificate", exc, t0)
        except (aiohttp.ClientError, OSError) as exc:
            return failure("network", exc, t0)

    async def _call_provider(self, body: bytes, t0: float) -> ChallengerResult:
        """Challenger through the provider layer; its answer is logged in System One form."""
        from workbench.providers.base import DecisionRequest, ProviderError

        try:
            doc = json.loads(body)
            request = DecisionRequest(
                schema=_schema_of(doc), state=doc.get("state"), images=tuple(doc.get("images") or ())
            )
        except Exception as exc:  # unparsable request: the challenger never saw it
            return failure(f"invalid_request: {type(exc).__name__}", exc, t0)
        assert self._provider is not None and self._side_loop is not None  # set by start()
        future = asyncio.run_coroutine_threadsafe(self._provider.decide(request), self._side_loop)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout=self.timeout)
        except TimeoutError as exc:
            return failure("timeout", exc, t0)
        except ProviderError as exc:
            return failure(exc.kind.value, exc, t0)
        text = json.dumps(_system_one_body(request.schema, result), ensure_ascii=False)
        return ChallengerResult(200, text, (time.perf_counter() - t0) * 1000.0)


def _warm_provider_imports() -> None:
    """Import now what a provider call would import on the first request: pandas (the local providers'
    text handling), the System One answer writer and the schema parser.

    The first call paid for them inside its timeout: ~0.2 s on an idle machine (against ~1 ms for the
    next calls), seconds on a loaded one, so the first requests of a session were journaled as challenger
    timeouts (``tests/shadow/test_mirror.py::test_challenger_given_as_a_provider_spec`` failed so once).
    """
    import pandas  # noqa: F401

    from workbench.providers import local  # noqa: F401
    from workbench.schema import DecisionSchema  # noqa: F401


def _schema_of(doc: dict):
    from workbench.schema import DecisionSchema

    return DecisionSchema.from_dict({"questions": doc.get("questions")}, source="mirrored request")


def _system_one_body(schema, result) -> dict:
    """A provider result as a System One response (failed questions are left out: missing answers)."""
    from workbench.providers.local import wire_answer

    if result.raw and isinstance(result.raw.get("answers"), dict):
        body = dict(result.raw)
    else:
        body = {
            "model": result.model,
            "answers": {q: wire_answer(schema.questions[q], a.probs) for q, a in result.answers.items()},
        }
    if result.input_tokens is not None:
        body.setdefault("usage", {"input_tokens": result.input_tokens, "output_tokens": 0})
    return body
