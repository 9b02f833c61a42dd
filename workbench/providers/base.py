"""The provider contract: one async method, typed results, typed failures.

A provider turns (schema slice, one item's state, images) into normalised answers, or raises
:class:`ProviderError` with an :class:`ErrorKind`. Providers do no retries, caching or storage:
the runner does those for all of them, acting on the kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from workbench.errors import WorkbenchError
from workbench.schema import DecisionSchema, LimitProfile
from workbench.schema.answers import NormalisedAnswer


class ErrorKind(StrEnum):
    """Failure kinds, named as in providers.md's Cloudflare error table."""

    AUTH = "authentication"  # 401: fix the credential; the provider refuses further calls
    INVALID = "invalid_request"  # 400/403/422 or refused locally before sending; never retried
    MAX_TOKENS = "max_tokens_exceeded"  # 413/5021 or local token/size estimate; never retried
    RATE_LIMIT = "rate_limit"  # 429/3040: retried with jittered backoff
    QUOTA = "quota"  # 429/4006: daily allocation used up; not retried
    SERVER = "server"  # 5xx/529: retried once
    TIMEOUT = "timeout"  # per-call timeout
    NETWORK = "network"  # connection refused/reset, name not resolved, proxy unreachable
    CERTIFICATE = "certificate"  # the server's TLS certificate does not verify; not retried (fix the CA settings)
    MALFORMED = "malformed"  # unparsable or inconsistent response body
    REFUSED = "refused"  # the model refused one question (OpenAI `refusal`)
    MISSING = "missing_answer"  # the response lacks a question that was asked


class ProviderError(WorkbenchError):
    """A typed provider failure. ``message`` never contains a secret or the request state."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        code: int | str | None = None,
        retry_after: float | None = None,
        request_id: str | None = None,
        sent: bool = True,
    ):
        self.kind = kind
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self.request_id = request_id
        self.sent = sent  # False when refused locally: nothing reached the network
        super().__init__(f"{kind.value}: {message}")


@dataclass(frozen=True)
class DecisionRequest:
    """One call: the question slice as sent, one item's state, optional images (data URLs)."""

    schema: DecisionSchema
    state: Any  # str or JSON value
    images: tuple[str, ...] = ()
    item_id: str | None = None  # for providers that look items up (replay); never sent


#: Response header by which ``workbench emulator`` announces itself; a provider that sees it marks its
#: result ``emulated`` so that the run is recorded (and its cost shown) as emulated, never as billed.
EMULATOR_HEADER = "x-workbench-emulator"


@dataclass
class DecisionResult:
    """What came back from one call.

    ``answers`` maps question id -> :class:`NormalisedAnswer`; ``failures`` maps question id ->
    (kind, message) for questions answered badly or refused inside an otherwise good response.
    """

    answers: dict[str, NormalisedAnswer]
    failures: dict[str, tuple[ErrorKind, str]] = field(default_factory=dict)
    model: str | None = None  # the model that actually answered
    request_id: str | None = None
    input_tokens: int | None = None
    cost_usd: float | None = None  # None when the price is unknown (never 0 by default)
    latency_ms: float | None = None
    raw: dict | None = None  # the response body in System One form (for the cache/replay)
    emulated: bool = False  # answered by workbench's emulator: its cost is an estimate, nothing was billed
    #: the response body as received when ``raw`` is that body parsed (a System One service), else None
    raw_text: str | None = None


@runtime_checkable
class Provider(Protocol):
    """Five members at most. ``spec`` is the CLI spec string (never contains a secret)."""

    spec: str
    dialect: str
    limits: LimitProfile | None  # per-request limits; the runner splits questions to fit

    async def decide(self, request: DecisionRequest) -> DecisionResult: ...

    async def aclose(self) -> None: ...
