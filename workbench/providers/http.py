"""HTTP plumbing shared by every remote dialect: one client builder, one error classifier, one call loop.

* :func:`build_client` is the only place an ``httpx.AsyncClient`` is made (explicit ``Timeout``
  and ``Limits``, aiohttp's pool underneath through ``httpx-aiohttp``, proxies from the environment,
  TLS from :func:`tls_context`; the caller may inject a transport, e.g. a fault-injecting wrapper in tests).
* :func:`transport_error` names a failed connection ``network``, ``timeout`` or ``certificate``.
* :func:`classify_http_error` maps (status, vendor code, vendor error type) onto :class:`ErrorKind`
  exactly as providers.md's Cloudflare table and issue 3 say: 401 → authentication; 403 →
  invalid_request; 413 or code 5021 → max_tokens_exceeded; 429 with code 4006 (or a quota type)
  → quota, other 429 → rate_limit; 5xx and 529 → server; other 4xx → invalid_request.
* :class:`HttpProvider` runs one call in the wire format of its dialect object
  (:mod:`workbench.providers.dialects`): local refusals (``sent=False``), POST, latency, request
  id, error classification, answer normalisation and cost. The dialect builds the body and headers
  and translates the response into the System One shape.

Secrets are :class:`pydantic.SecretStr`; their value is read only where a header is built and is
scrubbed from every error message. Providers do no retries, caching or storage (the runner does).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import re
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import yarl
from httpx_aiohttp import HttpxAiohttpClient
from httpx_aiohttp.transport import AiohttpTransport, map_aiohttp_exceptions
from pydantic import SecretStr

from workbench.errors import AnswerError, OptionError
from workbench.providers.base import EMULATOR_HEADER, DecisionRequest, DecisionResult, ErrorKind, ProviderError
from workbench.providers.prices import cost_usd
from workbench.schema import DecisionSchema, LimitProfile, normalise_answer, validate_limits

#: Per-call timeout in seconds (issue 3: default 5 s, configurable).
DEFAULT_TIMEOUT_S = 5.0
#: Connection pool: enough for the runner's default concurrency with headroom.
DEFAULT_MAX_CONNECTIONS = 64
#: Set to ``0`` (or ``false``/``no``/``off``) to verify TLS against certifi's Mozilla bundle instead of
#: the operating system's trust store (``truststore``, the default).
TRUSTSTORE_ENV = "WORKBENCH_TRUSTSTORE"

_DATA_URL = re.compile(r"^data:(image/(?:png|jpeg|jpg|webp));base64,", re.IGNORECASE)
_PLAIN_NAME = re.compile(r"^~?[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9][A-Za-z0-9._:-]*)?$")


def build_client(
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    transport: httpx.AsyncBaseTransport | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    headers: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """The one constructor of HTTP clients in the workbench.

    The client is httpx's, on the ``httpx-aiohttp`` transport: aiohttp's connection pool, where
    httpx's own (httpcore) costs 2-5x the CPU per call at 32 calls in flight (``bench/runner.py``).
    It honours the process environment as curl and pip do: ``HTTPS_PROXY``/``HTTP_PROXY``/
    ``ALL_PROXY``/``NO_PROXY`` (http:// proxies; an https URL goes through a ``CONNECT`` tunnel) and
    ``SSL_CERT_FILE``/``REQUESTS_CA_BUNDLE``/``SSL_CERT_DIR`` (see :func:`tls_context`).

    Parameters
    ----------
    timeout : float, default=5.0
        Seconds for connect, read, write and pool waits (one ``httpx.Timeout`` for all four).
    transport : httpx.AsyncBaseTransport, optional
        Injected transport (tests, fault injection); it then carries every request, proxies included.
    max_connections : int, default=64
        Pool size; keep-alive connections are capped at the same number.
    headers : mapping, optional
        Default headers sent with every request.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=30.0
    )
    if transport is None:
        _check_env_proxies()
    # an injected transport does its own TLS: do not load the CA bundle for a pool never made
    return StatelessClient(
        timeout=httpx.Timeout(timeout),
        limits=limits,
        transport=transport,
        headers=dict(headers or {}),
        follow_redirects=False,
        trust_env=True,  # proxies from the environment (the TLS context below is explicit)
        verify=True if transport is not None else tls_context(),
    )


def _check_env_proxies() -> None:
    """Refuse a proxy the transport cannot speak (aiohttp: http:// and https:// proxies, no SOCKS).

    The URL is not repeated (it may carry a password); only the variable and the scheme are named.
    """
    for scheme, url in urllib.request.getproxies_environment().items():
        if scheme == "no" or "://" not in url:
            continue
        proxy_scheme = url.split("://", 1)[0].lower()
        if proxy_scheme not in ("http", "https"):
            raise OptionError(
                f"{scheme.upper()}_PROXY: a {proxy_scheme}:// proxy is not supported",
                hint="point it at an HTTP proxy (http://host:port), or unset it",
            )


class _NoCookies(httpx.Cookies):
    """A cookie store that stays empty: ``Set-Cookie`` from a response is ignored."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


_DECODER = json.JSONDecoder()  # json.loads' own configuration
_RESULT_FIRST = '{"result":'


def _loads_envelope(text: str) -> tuple[Any, str | None]:
    """``json.loads(text)``, and the exact text of its ``result`` member when the body is an envelope
    written compactly with ``result`` first (``{"result":{...},"success":true,...}``, Cloudflare's).

    The member is parsed where it stands (``raw_decode``), then the other members: the same objects,
    in the same order, as ``json.loads`` of the whole, at the cost of one parse. Anything else (spaces
    after the key, a second ``result`` member, ...) is ``json.loads(text)`` with no member text.
    """
    if not text.startswith(_RESULT_FIRST):
        return json.loads(text), None
    try:
        result, end = _DECODER.raw_decode(text, len(_RESULT_FIRST))
    except ValueError:
        return json.loads(text), None
    tail = text[end:]
    if tail.startswith(",") and tail[1:].lstrip(" \t\n\r").startswith('"'):  # another member follows
        rest = json.loads("{" + tail[1:])
    elif tail.rstrip(" \t\n\r") == "}":
        rest = {}
    else:
        return json.loads(text), None
    if not isinstance(rest, dict) or "result" in rest:  # a repeated key: the last wins, in the first's place
        return json.loads(text), None
    return {"result": result, **rest}, text[len(_RESULT_FIRST) : end]


class WholeBodyTransport(AiohttpTransport):
    """httpx-aiohttp's transport, reading each response body whole before handing it to httpx.

    The stock transport gives httpx a stream that ``AsyncClient.send`` then reads through four
    nested async iterators (aiohttp chunks, the transport's wrapper, httpx's bound stream, its
    decoders) and closes with another round trip through aiohttp's context manager. A decision
    response is a few kB, always read whole: here it is read inside the same exception mapping
    (a failure while reading is the same ``httpx`` error as before), the connection goes back to
    aiohttp's pool at once, and httpx gets a response that is already read — its
    ``Content-Encoding`` decoded by httpx as before, the headers exactly the server's.

    A request whose body is not in memory (a streamed upload) takes the stock path.

    Its aiohttp session keeps no cookies either (:class:`StatelessClient`): the stock session's
    cookie jar stored a ``Set-Cookie`` from a named host and sent it back with the next call.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timeouts: dict[tuple[Any, Any, Any], aiohttp.ClientTimeout] = {}
        # httpx URL object -> (that object, its yarl URL): a provider sends to one URL object
        self._urls: dict[int, tuple[httpx.URL, yarl.URL]] = {}

    def get_client(self) -> aiohttp.ClientSession:
        """The stock session (aiohttp's pool with the same limits and TLS), without a cookie jar."""
        if self.client is not None or self.uds:
            return super().get_client()
        limit = {"limit": self.limits.max_connections} if self.limits.max_connections is not None else {}
        connector = aiohttp.TCPConnector(
            keepalive_timeout=self.limits.keepalive_expiry,
            ssl=self.ssl_context,
            local_addr=(self.local_address, 0) if self.local_address else None,
            **limit,  # type: ignore[arg-type]
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    def _url(self, url: httpx.URL) -> yarl.URL:
        """The yarl URL aiohttp would parse from ``str(url)``, parsed once per URL object."""
        hit = self._urls.get(id(url))
        if hit is None or hit[0] is not url:
            if len(self._urls) >= 64:
                self._urls.clear()
            hit = self._urls[id(url)] = (url, yarl.URL(str(url)))
        return hit[1]

    def _timeout(self, timeout: Mapping[str, Any]) -> aiohttp.ClientTimeout:
        key = (timeout.get("connect"), timeout.get("read"), timeout.get("pool"))
        found = self._timeouts.get(key)
        if found is None:
            found = self._timeouts[key] = aiohttp.ClientTimeout(sock_connect=key[0], sock_read=key[1], connect=key[2])
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, httpx.ByteStream):
            return await super().handle_async_request(request)
        return await self.send_whole(
            request.method,
            self._url(request.url),
            request.headers,
            request.read(),
            self._timeout(request.extensions.get("timeout", {})),
            request.extensions.get("sni_hostname"),
            request,
        )

    async def send_whole(
        self,
        method: str,
        url: yarl.URL,
        headers: Mapping[str, str],
        content: bytes,
        timeout: aiohttp.ClientTimeout,
        sni_hostname: str | None,
        request: httpx.Request | Callable[[], httpx.Request],
    ) -> httpx.Response:
        """Send one request whose body is ``content`` and read its response whole.

        ``request`` is the httpx request it stands for, or a function that makes it (the provider's
        direct path: the request object is built only if someone asks the response for it).
        """
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        t0 = time.perf_counter()
        proxy = self.proxy
        with map_aiohttp_exceptions():
            async with self.client.request(
                method=method,
                url=url,
                headers=headers,
                data=content or None,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=timeout,
                server_hostname=sni_hostname,
                proxy=str(proxy.url) if proxy else None,
                proxy_auth=aiohttp.BasicAuth(proxy.auth[0], proxy.auth[1]) if proxy and proxy.auth else None,
                proxy_headers=proxy.headers if proxy else None,
            ) as aio:
                body = await aio.read()
        version = aio.version or aiohttp.HttpVersion11
        extensions: dict[str, Any] = {"http_version": b"HTTP/%d.%d" % (version.major, version.minor)}
        if aio.reason:
            extensions["reason_phrase"] = aio.reason.encode()
        response: httpx.Response
        if isinstance(request, httpx.Request):
            response = httpx.Response(
                status_code=aio.status,
                headers=aio.raw_headers,
                stream=httpx.ByteStream(body),
                request=request,
                extensions=extensions,
            )
        else:
            response = _LazyRequestResponse(
                status_code=aio.status, headers=aio.raw_headers, stream=httpx.ByteStream(body), extensions=extensions
            )
            response.make_request = request
        if "Content-Encoding" in aio.headers:
            response.read()  # httpx decodes it (and closes): AsyncClient.send finds it read
        else:  # what read() leaves, without its decoder and chunker (a tenth of the CPU)
            response._content = body
            response._num_bytes_downloaded = len(body)
            response.is_stream_consumed = response.is_closed = True
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - t0)
        return response


class _LazyRequestResponse(httpx.Response):
    """An ``httpx.Response`` whose ``request`` is built when first asked for (see :meth:`HttpProvider.decide`)."""

    make_request: Callable[[], httpx.Request] | None = None

    @property
    def request(self) -> httpx.Request:
        if self._request is None and self.make_request is not None:
            self._request, self.make_request = self.make_request(), None
        return super().request

    @request.setter
    def request(self, value: httpx.Request) -> None:
        self._request = value


class StatelessClient(HttpxAiohttpClient):
    """``httpx.AsyncClient`` (on aiohttp's transport) that keeps no cookies between calls.

    A decision call must not depend on an earlier one (the cache key is the request alone), so
    a ``Set-Cookie`` (e.g. a CDN's bot-management cookie) is never sent back. It also saves
    httpx's cookie extraction, which wraps every response in urllib/email objects (~0.1 ms of
    CPU per call). Cookies passed explicitly per request are still sent.

    Its pool transports are :class:`WholeBodyTransport`.
    """

    # httpx passes the pool options (verify, cert, trust_env, http1, http2, limits) as keywords, and
    # the proxy alone by position
    def _init_transport(self, *args: Any, **options: Any) -> httpx.AsyncBaseTransport:
        transport = options.pop("transport", None)
        return transport if transport is not None else WholeBodyTransport(*args, **options)

    def _init_proxy_transport(self, *args: Any, **options: Any) -> httpx.AsyncBaseTransport:
        (proxy,) = args
        return WholeBodyTransport(proxy=proxy, **options)

    @property
    def cookies(self) -> httpx.Cookies:
        return _NoCookies()

    @cookies.setter
    def cookies(self, value: Any) -> None:
        if value:
            raise ValueError("StatelessClient keeps no cookies; pass them per request")


def tls_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """The verifying TLS context of every provider client, chosen from the environment.

    1. ``SSL_CERT_FILE`` (or requests' ``REQUESTS_CA_BUNDLE``, a file or a directory) and/or
       ``SSL_CERT_DIR`` set: exactly those CAs (a company bundle; as httpx, requests and curl do, it
       replaces the default trust). ``SSL_CERT_FILE`` wins when both file variables are set.
    2. otherwise the operating system's trust store through ``truststore`` (macOS Keychain, Windows
       certificate store, the distribution's bundle on Linux), unless ``WORKBENCH_TRUSTSTORE=0``;
    3. otherwise (switched off, or truststore unusable here) certifi's Mozilla bundle.

    One context per setting is made and shared (loading a CA bundle costs ~50 ms).
    """
    env = os.environ if environ is None else environ
    file_var = next((n for n in CA_FILE_ENV if env.get(n)), CA_FILE_ENV[0])
    cafile = env.get(file_var) or None
    capath = env.get("SSL_CERT_DIR") or None
    use_truststore = env.get(TRUSTSTORE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    return _tls_context(cafile, capath, use_truststore, file_var)


#: Variables naming a CA bundle file, first found wins: the OpenSSL/httpx/curl name, then requests'
#: (which may also name a directory of certificates, as ``SSL_CERT_DIR`` does).
CA_FILE_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


@functools.lru_cache(maxsize=8)
def _tls_context(
    cafile: str | None, capath: str | None, use_truststore: bool, file_var: str = "SSL_CERT_FILE"
) -> ssl.SSLContext:
    if cafile and file_var == "REQUESTS_CA_BUNDLE" and os.path.isdir(cafile):
        cafile, capath = None, capath or cafile  # requests takes a directory here too
    if cafile or capath:
        for name, path, ok in ((file_var, cafile, os.path.isfile), ("SSL_CERT_DIR", capath, os.path.isdir)):
            if path and not ok(path):
                raise OptionError(
                    f"{name}={path!r}: no such {'directory' if name == 'SSL_CERT_DIR' else 'file'}",
                    hint=f"point {name} at your CA bundle (PEM), or unset it to use the system's trust store",
                )
        try:
            return ssl.create_default_context(cafile=cafile, capath=capath)
        except ssl.SSLError as exc:
            raise OptionError(
                f"{file_var}={cafile!r} / SSL_CERT_DIR={capath!r}: not a usable CA bundle ({exc.reason or exc})",
                hint="point it at PEM certificates of the certificate authorities to trust",
            ) from None
    if use_truststore:
        try:
            import truststore

            return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        except (ImportError, OSError, ssl.SSLError, NotImplementedError):  # no usable OS store here
            pass
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


# -- error classification -------------------------------------------------------------------------
_QUOTA_TYPES = {"insufficient_quota", "quota_exceeded", "quota", "billing_limit", "budget_exceeded"}
_RATE_TYPES = {"rate_limit", "rate_limit_exceeded", "rate_limit_error", "capacity_exceeded"}
_AUTH_TYPES = {"authentication_error", "invalid_api_key", "unauthorized"}
_TOKEN_TYPES = {"max_tokens_exceeded", "context_length_exceeded", "request_too_large"}
_SERVER_TYPES = {"internal_server_error", "server_error", "overloaded_error", "overloaded"}


def classify_http_error(
    status: int, code: int | str | None = None, error_type: str | None = None, message: str = ""
) -> ErrorKind:
    """Map an HTTP error onto an :class:`ErrorKind` (vendor type first, then code, then status)."""
    etype = (error_type or "").lower()
    code_s = str(code) if code is not None else ""
    if status == 403:
        return ErrorKind.INVALID  # issue 3: 403 is a request/permission problem, not a bad credential
    if status == 401 or etype in _AUTH_TYPES or code_s == "10000":
        return ErrorKind.AUTH
    if status == 413 or code_s == "5021" or etype in _TOKEN_TYPES or "maximum context length" in message.lower():
        return ErrorKind.MAX_TOKENS
    if code_s == "4006" or etype in _QUOTA_TYPES or status == 402:
        return ErrorKind.QUOTA
    if status == 429 or code_s == "3040" or etype in _RATE_TYPES:
        return ErrorKind.RATE_LIMIT
    if status == 408:
        return ErrorKind.TIMEOUT
    if status >= 500 or etype in _SERVER_TYPES:
        return ErrorKind.SERVER
    if 400 <= status < 500:
        return ErrorKind.INVALID  # 400, 403, 404, 405, 422 and the rest: never retried
    return ErrorKind.MALFORMED


def error_fields(body: Any) -> tuple[int | str | None, str | None, str]:
    """(code, type, message) from any vendor error envelope; never the echoed request input.

    Understands Cloudflare ``{"errors": [{"code", "message"}]}``, TypeSafe/FastAPI
    ``{"detail": {"error_type", "message"}}`` and ``{"detail": [{"msg", "loc"}]}``, OpenAI/Vercel/
    LiteLLM ``{"error": {"message", "type", "code"}}`` and XOR ``{"error": "..."}``.
    """
    if not isinstance(body, dict):
        return None, None, ""
    errs = body.get("errors")
    if isinstance(errs, list) and errs and isinstance(errs[0], dict):
        e = errs[0]
        return e.get("code"), e.get("type"), str(e.get("message") or "")
    detail = body.get("detail")
    if isinstance(detail, dict):
        return detail.get("code"), detail.get("error_type") or detail.get("type"), str(detail.get("message") or "")
    if isinstance(detail, list):  # FastAPI validation: keep loc + msg, drop "input" (it may echo the state)
        parts = []
        for d in detail[:3]:
            if isinstance(d, dict):
                loc = ".".join(str(p) for p in d.get("loc", []) if p != "body")
                parts.append(f"{loc}: {d.get('msg', '')}".strip(": "))
        return None, "validation_error", "; ".join(parts)
    if isinstance(detail, str):
        return None, None, detail
    err = body.get("error")
    if isinstance(err, dict):
        return err.get("code"), err.get("type"), str(err.get("message") or "")
    if isinstance(err, str):
        return None, None, err
    return None, None, str(body.get("message") or "")


#: Longest failure message kept (whole messages are a few hundred characters; this bounds a vendor
#: that returns a huge error text). The runner prints the first message of each kind whole.
MAX_MESSAGE_CHARS = 2_000


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret replaced by ``***``, cut to ``MAX_MESSAGE_CHARS``."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text[:MAX_MESSAGE_CHARS]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (``__cause__``, else ``__context__``), outermost first."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < 16 and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def transport_error(exc: Exception, secrets: list[str]) -> ProviderError:
    """Map a transport failure onto a ``certificate``, ``timeout`` or ``network`` :class:`ProviderError`.

    The transport (aiohttp) exception the httpx one was raised from decides: httpx-aiohttp maps
    e.g. a server that hung up mid-response onto ``httpx.ConnectTimeout``, which is no timeout.
    A certificate that does not verify is named as such, with the settings that fix it.
    """
    chain = _chain(exc)
    cert = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
    if cert is not None:
        reason = getattr(cert, "verify_message", None) or getattr(cert, "reason", None) or str(cert)
        return ProviderError(
            ErrorKind.CERTIFICATE,
            scrub(
                f"the server's TLS certificate is not trusted ({reason}); if a company CA or proxy signs it, "
                f"set SSL_CERT_FILE (or REQUESTS_CA_BUNDLE) to that CA bundle (PEM) or add the CA to the system's "
                "trust store",
                secrets,
            ),
        )
    inner = next((e for e in chain if isinstance(e, aiohttp.ClientError)), None)
    if inner is not None:
        timed_out = isinstance(inner, TimeoutError)
        detail = f"{type(inner).__name__}: {inner}"
    else:
        timed_out = isinstance(exc, httpx.TimeoutException)
        detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.ProxyError) or isinstance(
        inner, (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError)
    ):
        detail = f"{detail} (the proxy set in HTTPS_PROXY/HTTP_PROXY/ALL_PROXY is unreachable or refused the call)"
    elif any(isinstance(e, socket.gaierror) for e in chain):
        detail = f"{detail} (the host name does not resolve here; behind a proxy, set HTTPS_PROXY/HTTP_PROXY)"
    return ProviderError(ErrorKind.TIMEOUT if timed_out else ErrorKind.NETWORK, scrub(detail, secrets))


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Seconds from ``Retry-After`` (seconds) or ``retry-after-ms``; ``None`` when absent or unparsable."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra:
        try:
            return max(float(ra), 0.0)
        except ValueError:
            return None
    return None


def check_images(images: tuple[str, ...] | list[str], *, max_images: int | None, dialect: str) -> None:
    """Refuse (``sent=False``) too many images or one that is not a PNG/JPEG/WebP data URL."""
    if not images:
        return
    if max_images is not None and len(images) > max_images:
        raise ProviderError(
            ErrorKind.INVALID, f"{len(images)} images; {dialect} accepts at most {max_images}", sent=False
        )
    for i, img in enumerate(images):
        if not isinstance(img, str) or not _DATA_URL.match(img):
            head = img[:30] if isinstance(img, str) else type(img).__name__
            raise ProviderError(
                ErrorKind.INVALID,
                f"image {i}: only PNG/JPEG/WebP base64 data URLs are accepted (got {head!r}...)",
                sent=False,
            )


def is_plain_name(name: str) -> bool:
    """True for a model name that can be put in a URL path or header (no ``..``, spaces, ``?``)."""
    return bool(name) and ".." not in name and bool(_PLAIN_NAME.match(name))


# -- the call loop -------------------------------------------------------------------------------
@dataclass
class Endpoint:
    """Where and how one provider instance calls. ``api_key`` is never printed."""

    vendor: str  # price-table vendor: cloudflare, typesafe, openrouter, ...
    url: str
    model: str | None
    api_key: SecretStr | None = None
    key_env: str | None = None  # env var named in messages when the key is missing
    key_required: bool = True
    auth_header: str = "authorization"  # or "api-subscription-key" (Sarvam)
    extra_headers: dict[str, str] = field(default_factory=dict)
    request_id_headers: tuple[str, ...] = ("x-request-id",)
    account_id: str | None = None  # Cloudflare: part of the URL path, checked before any call

    @property
    def public_url(self) -> str:
        """The URL without its query string (a self-hosted server may take a key there)."""
        return self.url.split("?", 1)[0]

    def __repr__(self) -> str:  # no secrets, ever
        return f"Endpoint(vendor={self.vendor!r}, url={self.public_url!r}, model={self.model!r})"


#: httpx's own logger: the direct path logs each request as ``AsyncClient.send`` does
_HTTPX_LOG = logging.getLogger("httpx")


@dataclass(frozen=True)
class _Direct:
    """What every call of one provider sends through its client's transport (:meth:`HttpProvider._prepare`)."""

    transport: WholeBodyTransport
    url: yarl.URL
    headers: dict[str, str]  # as aiohttp received them from httpx's request: lower-case names, in order
    timeout: aiohttp.ClientTimeout


class HttpProvider:
    """A remote decision model behind one HTTP endpoint, speaking the wire format ``wire``.

    Members used by the runner: ``spec``, ``model``, ``dialect`` (``wire.recorded``), ``limits``,
    :meth:`decide`, :meth:`aclose`. After a 401 the instance refuses further calls
    (``authentication``, not sent).
    """

    def __init__(
        self,
        spec: str,
        endpoint: Endpoint,
        limits: LimitProfile | None,
        *,
        wire: Any,  # a workbench.providers.dialects.Dialect (not imported: the dialects import this module)
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_images: int | None = 4,
        max_body_bytes: int | None = None,
        window_tokens: int | None = None,
    ):
        self.spec = spec
        self.endpoint = endpoint
        self.wire = wire
        self.dialect = wire.recorded
        self.model = endpoint.model
        self.limits = limits
        self.timeout = timeout
        self.max_images = max_images
        self.max_body_bytes = max_body_bytes
        self.window_tokens = window_tokens
        self._client = build_client(timeout=timeout, transport=transport, max_connections=max_connections)
        self._disabled: str | None = None
        # per-call constants, made on the first call (an invalid URL fails there, as before)
        self._prepared: tuple[httpx.URL, list[tuple[bytes, bytes]], dict] | None = None
        self._direct: _Direct | None = None
        # schema object -> (schema, its wire ``questions`` JSON, limit violations); the runner
        # sends one slice object thousands of times. Strong refs keep the ids from being reused.
        self._schema_cache: dict[int, tuple[DecisionSchema, str, list]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(spec={self.spec!r}, model={self.model!r}, url={self.endpoint.public_url!r})"

    # -- what the dialect decides -----------------------------------------------------------------
    def build_body(self, request: DecisionRequest) -> dict:
        return self.wire.build_body(self, request)

    def render_body(self, request: DecisionRequest) -> str:
        """The request body exactly as sent (the runner hashes this text for the cache key)."""
        return self.wire.render_body(self, request)

    def to_system_one(self, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
        """Translate a 2xx body into ``{"model", "answers": {qid: answer}, "usage": {...}}``."""
        return self.wire.to_system_one(self, data, response, request)

    # -- shared machinery -------------------------------------------------------------------------
    @property
    def _secrets(self) -> list[str]:
        key = self.endpoint.api_key
        return [key.get_secret_value()] if key is not None else []

    def _headers(self) -> dict[str, str]:
        h = {"content-type": "application/json", "accept": "application/json", "user-agent": "decision-workbench/0.1"}
        key = self.endpoint.api_key
        if key is not None and key.get_secret_value():
            if self.endpoint.auth_header == "authorization":
                h["authorization"] = f"Bearer {key.get_secret_value()}"
            else:
                h[self.endpoint.auth_header] = key.get_secret_value()
        h.update(self.endpoint.extra_headers)
        h.update(self.wire.headers(self))
        return h

    def _prepare(self, client: httpx.AsyncClient) -> tuple[httpx.URL, list[tuple[bytes, bytes]], dict]:
        """(URL, raw headers but Content-Length, extensions) of every call, as ``client.build_request``
        makes them: ``Host`` first, then the client's defaults updated with :meth:`_headers`."""
        url = httpx.URL(self.endpoint.url)
        headers = httpx.Headers(client.headers)
        headers.update(self._headers())
        self._prepared = (url, [(b"Host", url.netloc)] + headers.raw, {"timeout": client.timeout.as_dict()})
        # the direct path (see :meth:`decide`): the client's own transport for this URL (a proxy's when the
        # environment names one), when nothing of httpx's client would act between it and the request
        transport = client._transport_for_url(url)
        self._direct = None
        if isinstance(transport, WholeBodyTransport) and client.auth is None and not any(client.event_hooks.values()):
            self._direct = _Direct(
                transport,
                transport._url(url),
                dict(httpx.Headers(self._prepared[1]).items()),  # what aiohttp got from httpx's headers
                transport._timeout(self._prepared[2]["timeout"]),
            )
        return self._prepared

    def schema_facts(self, schema: DecisionSchema) -> tuple[str, list]:
        """(``questions`` JSON as sent, limit violations) of one schema object, computed once."""
        hit = self._schema_cache.get(id(schema))
        if hit is None or hit[0] is not schema:
            if len(self._schema_cache) >= 256:
                self._schema_cache.clear()
            wire = json.dumps(schema.to_wire(), ensure_ascii=False, separators=(",", ":"))
            violations = validate_limits(schema, self.limits) if self.limits is not None else []
            hit = self._schema_cache[id(schema)] = (schema, wire, violations)
        return hit[1], hit[2]

    def _refuse(self, kind: ErrorKind, message: str) -> ProviderError:
        return ProviderError(kind, f"{self.spec}: {message}", sent=False)

    def _check_common(self, request: DecisionRequest) -> None:
        if self._disabled:
            raise self._refuse(ErrorKind.AUTH, self._disabled)
        ep = self.endpoint
        if ep.key_required and (ep.api_key is None or not ep.api_key.get_secret_value()):
            raise self._refuse(ErrorKind.AUTH, f"no API key: set {ep.key_env or 'the API key'}")
        if self.model is not None and not is_plain_name(self.model):
            raise self._refuse(ErrorKind.INVALID, f"model name {self.model!r} is not a plain name")
        if self.limits is not None:
            violations = self.schema_facts(request.schema)[1]
            if violations:
                more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
                raise self._refuse(ErrorKind.INVALID, f"{violations[0]}{more}")
        check_images(request.images, max_images=self.max_images, dialect=self.dialect)
        if self.window_tokens is not None:
            from workbench.providers.tokens import MAX_TOKENS_PER_CHAR, estimate_tokens, render_state

            text = render_state(request.state)
            # fast path: a state too short to exceed the window even at the costliest weight
            n = 0 if len(text) * MAX_TOKENS_PER_CHAR <= self.window_tokens else estimate_tokens(text)
            if n > self.window_tokens:
                raise self._refuse(
                    ErrorKind.MAX_TOKENS,
                    f"state is ~{n:,} estimated tokens, over the "
                    f"configured window of {self.window_tokens:,} (setting window_tokens)",
                )

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """One call. Raises :class:`ProviderError` for a whole-call failure; per-question
        failures (refusal, missing or malformed answer) go to ``result.failures``."""
        self._check_common(request)
        self.wire.preflight(self, request)
        content = self.wire.render_body(self, request).encode("utf-8")
        if self.max_body_bytes is not None and len(content) > self.max_body_bytes:
            raise self._refuse(
                ErrorKind.MAX_TOKENS, f"request body is {len(content):,} bytes, over {self.max_body_bytes:,}"
            )
        t0 = time.perf_counter()
        try:
            client = self._client
            url, head, extensions = self._prepared or self._prepare(client)
            # what client.post() would build (same headers in the same order), without re-parsing
            # the URL or re-merging headers on every call
            make_request = functools.partial(
                httpx.Request,
                "POST",
                url,
                headers=head + [(b"Content-Length", b"%d" % len(content))],
                stream=httpx.ByteStream(content),
                extensions=extensions,
            )
            direct = self._direct
            if direct is None or client.is_closed:
                response = await client.send(make_request())
            else:
                # what client.send() does for this client (no auth, hooks, cookies or redirects), without
                # its layers and without the httpx.Request (made only if the response is asked for it)
                response = await direct.transport.send_whole(
                    "POST",
                    direct.url,
                    {**direct.headers, "content-length": str(len(content))},
                    content,
                    direct.timeout,
                    None,
                    make_request,
                )
                response.default_encoding = client._default_encoding
                if _HTTPX_LOG.isEnabledFor(logging.INFO):
                    _HTTPX_LOG.info(
                        'HTTP Request: %s %s "%s %d %s"',
                        "POST",
                        url,
                        response.http_version,
                        response.status_code,
                        response.reason_phrase,
                    )
        except httpx.HTTPError as exc:
            raise transport_error(exc, self._secrets) from None
        latency_ms = (time.perf_counter() - t0) * 1000.0
        request_id = None
        for h in self.endpoint.request_id_headers:
            request_id = response.headers.get(h) or None
            if request_id:
                break
        if response.status_code >= 300:
            raise self._http_error(response, request_id)
        # the body's text, kept for the call cache when it is the System One body itself (the stored
        # response is then the text as received, not a re-serialisation of what it parsed to)
        text: str | None
        try:
            text = response.content.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        result_text = None
        try:
            data, result_text = _loads_envelope(text) if text is not None else (None, None)
        except ValueError:  # not JSON as UTF-8 text: a BOM or UTF-16/32 are httpx's (json.loads of bytes) to read
            text = None
        try:
            if text is None:
                data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            raise ProviderError(
                ErrorKind.MALFORMED,
                f"{self.spec}: response is not JSON ({len(response.content)} bytes)",
                status=response.status_code,
                request_id=request_id,
            ) from None
        try:
            raw = self.wire.to_system_one(self, data, response, request)
        except ProviderError as exc:
            exc.request_id = exc.request_id or request_id
            raise
        result = self._result(request, raw, latency_ms=latency_ms, request_id=request_id)
        result.emulated = EMULATOR_HEADER in response.headers
        if text is not None:
            if raw is data:
                result.raw_text = text
            elif result_text is not None and isinstance(data, dict) and raw is data.get("result"):
                result.raw_text = result_text  # an envelope's System One body (Cloudflare), as received
        return result

    def _http_error(self, response: httpx.Response, request_id: str | None) -> ProviderError:
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            body = None
        code, etype, message = error_fields(body)
        kind = classify_http_error(response.status_code, code, etype, message)
        if kind is ErrorKind.AUTH:
            self._disabled = (
                f"disabled after HTTP {response.status_code} (authentication); "
                f"fix {self.endpoint.key_env or 'the credential'} and start again"
            )
        text = (
            f"HTTP {response.status_code}"
            + (f" code {code}" if code is not None else "")
            + (f" {etype}" if etype else "")
            + (f": {message}" if message else "")
        )
        return ProviderError(
            kind,
            scrub(f"{self.spec}: {text}", self._secrets),
            status=response.status_code,
            code=code,
            retry_after=retry_after_seconds(response.headers),
            request_id=request_id,
        )

    def _result(
        self, request: DecisionRequest, raw: dict, *, latency_ms: float, request_id: str | None
    ) -> DecisionResult:
        return system_one_result(
            request,
            raw,
            vendor=self.endpoint.vendor,
            requested_model=self.model,
            latency_ms=latency_ms,
            request_id=request_id,
        )

    async def aclose(self) -> None:
        await self._client.aclose()


def system_one_result(
    request: DecisionRequest,
    raw: dict,
    *,
    vendor: str,
    requested_model: str | None,
    latency_ms: float | None,
    request_id: str | None,
) -> DecisionResult:
    """Normalise a System One body into a :class:`DecisionResult` (one entry per asked question).

    A question whose answer is absent → ``missing_answer``; ``{"type": "refusal"}`` → ``refused``;
    an answer that does not normalise (wrong type, unknown option, sum off by > 0.02) → ``malformed``.
    """
    answers_raw = raw.get("answers") if isinstance(raw, dict) else None
    if not isinstance(answers_raw, dict):
        raise ProviderError(ErrorKind.MALFORMED, "response has no 'answers' object", request_id=request_id)
    answers, failures = {}, {}
    for qid, question in request.schema.questions.items():
        if qid not in answers_raw:
            failures[qid] = (ErrorKind.MISSING, f"no answer for question {qid!r}")
            continue
        ans = answers_raw[qid]
        if isinstance(ans, dict) and ans.get("type") == "refusal":
            failures[qid] = (ErrorKind.REFUSED, f"the model refused question {qid!r}")
            continue
        try:
            answers[qid] = normalise_answer(question, ans, question_id=qid)
        except AnswerError as exc:
            failures[qid] = (ErrorKind.MALFORMED, str(exc)[:MAX_MESSAGE_CHARS])
    usage: dict = raw["usage"] if isinstance(raw.get("usage"), dict) else {}
    tokens = usage.get("input_tokens")
    tokens = int(tokens) if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) else None
    model = raw.get("model") if isinstance(raw.get("model"), str) else None
    reported_cost = usage.get("cost")  # OpenRouter: exact credits charged, in USD
    cost: float | None
    if isinstance(reported_cost, (int, float)) and not isinstance(reported_cost, bool):
        cost = float(reported_cost)
    else:
        cost = cost_usd(vendor, model, tokens, requested_model=requested_model)
    return DecisionResult(
        answers=answers,
        failures=failures,
        model=model or requested_model,
        request_id=request_id,
        input_tokens=tokens,
        cost_usd=cost,
        latency_ms=latency_ms,
        raw=raw,
    )
