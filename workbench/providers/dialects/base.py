"""The :class:`Dialect` interface (one object per wire format, both halves) and its registry.

A dialect's **client half** is what an :class:`~workbench.providers.http.HttpProvider` delegates to:
the headers, local refusals, the request body (as a dict and as the exact text sent) and the
translation of a 2xx body into the System One shape. Its **emulator half** is what
:mod:`workbench.emulator.server` delegates to: which paths it serves, the request as the server
sees it (validated, or refused with :class:`Reject`), and the answer or error rendered in the
format. Providers never import the emulator; the emulator imports the dialects from here.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import httpx
import numpy as np

from workbench.providers.base import DecisionRequest

#: ``(status, JSON body, headers)`` of one emulated response.
Reply = tuple[int, Any, dict[str, str]]


class Served(NamedTuple):
    """A decision request as the emulated service read it: the System One view plus the dialect's context."""

    state: Any
    questions: dict  # System One question map
    images: list
    ctx: dict  # what rendering needs: ``answered_model``, and any dialect-specific keys


class Answer(NamedTuple):
    """What the emulator answers one request with, for :meth:`Dialect.render_answer`."""

    questions: dict  # System One question map, as :meth:`Dialect.parse_request` read it
    probs: dict[str, np.ndarray]  # per question, probabilities in option order
    tokens: int  # input tokens billed
    ctx: dict  # :attr:`Served.ctx`
    rid: str  # request id
    rng: random.Random  # this request's draws (reproducible per body and attempt)
    refusal: float  # OpenAI: chance that one question is refused


class Error(NamedTuple):
    """One error to word, for :meth:`Dialect.render_error`."""

    status: int
    code: int | None  # Cloudflare's numeric code (e.g. 3040 rate limit, 4006 quota, 5006 schema)
    message: str
    loc: tuple  # where in the body, for a validation error
    model_side: bool  # refused by the model (422/529), not the gateway
    rid: str
    rng: random.Random


class Reject(Exception):
    """A request refused by validation: ``kind`` is 'schema' (400/5006) or 'model' (422/5012)."""

    def __init__(self, kind: str, message: str, loc: tuple = ()):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.loc = loc


def dumps(value: Any) -> str:
    """Compact JSON as sent on the wire."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def r4(x: float) -> float:
    return round(float(x), 4)


_MODEL_IN_BODY = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')


def peek_model(body: bytes) -> str | None:
    """The body's ``model`` string, read from its head without parsing (request counters)."""
    m = _MODEL_IN_BODY.search(body[:4096])
    return m.group(1).decode("utf-8", "replace") if m else None


class Dialect:
    """One wire format. Subclasses override what their format does differently from these defaults.

    ``name`` is the registry key (a :class:`~workbench.providers.remote.Preset` names it);
    ``recorded`` is what a provider reports as its ``dialect`` (stored with runs and hashed into the
    call cache key), the same but for a variant of another format (Perplexity speaks System One).
    """

    name: str = ""
    recorded: str = ""
    #: Request paths served by the emulator (a dialect with a path pattern overrides :meth:`serves`).
    paths: frozenset[str] = frozenset()
    #: Models the vendor serves when its list is closed (a misspelled model is refused before a run).
    known_models: tuple[str, ...] | None = None

    # -- client half -----------------------------------------------------------------------------
    def headers(self, provider: Any) -> dict[str, str]:
        """Headers every call of ``provider`` adds to the shared ones (auth, content type)."""
        return {}

    def setting_problem(self, provider: Any) -> str | None:
        """Why no call of ``provider`` can succeed with its settings, or ``None``."""
        return None

    def preflight(self, provider: Any, request: DecisionRequest) -> None:
        """Refuse locally (raise ``ProviderError(sent=False)``) what the vendor would refuse."""

    def build_body(self, provider: Any, request: DecisionRequest) -> dict:
        raise NotImplementedError

    def render_body(self, provider: Any, request: DecisionRequest) -> str:
        """The body exactly as sent (the runner hashes it for the cache key): compact JSON of :meth:`build_body`."""
        return dumps(self.build_body(provider, request))

    def to_system_one(self, provider: Any, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
        """Translate a 2xx body into ``{"model", "answers": {qid: answer}, "usage": {...}}``."""
        raise NotImplementedError

    # -- emulator half ---------------------------------------------------------------------------
    def serves(self, path: str) -> bool:
        return path in self.paths

    def route_model(self, path: str, headers: Mapping[str, str], body: bytes) -> str | None:
        """The model a request names, before its body is parsed (request counters, latency profiles)."""
        return peek_model(body)

    def route_problem(self, model: str | None) -> str | None:
        """Why the service has no route for this model (answered 400/7000), or ``None``."""
        return None

    def claims(self, body: Any) -> bool:
        """Whether this parsed body is in this format (a path several dialects serve: ``/v1/decisions``)."""
        return True

    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> Served:
        """Validate the parsed JSON body; raise :class:`Reject` as the service would."""
        raise NotImplementedError

    def render_answer(self, a: Answer) -> Reply:
        """The 200 answer to ``questions`` with probability vectors ``probs`` (option order)."""
        raise NotImplementedError

    def render_error(self, e: Error) -> Reply:
        """An error as the vendor words it; the default is the ``{"error": {message, type, code}}`` object."""
        return e.status, {"error": error_object(e.status, e.code, e.message)}, {"x-request-id": e.rid}


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    500: "internal_server_error",
    529: "overloaded_error",
}


def error_object(status: int, code: int | None, message: str) -> dict[str, Any]:
    """``{message, type, code}`` with OpenAI's error types (also the evaluation-model gateways')."""
    if status == 429:
        etype = "insufficient_quota" if code == 4006 else "rate_limit_exceeded"
    else:
        etype = _ERROR_TYPES.get(status, "error")
    return {"message": message, "type": etype, "code": code}


# ------------------------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------------------------
_REGISTRY: dict[str, Dialect] = {}


def register(dialect: Dialect) -> Dialect:
    """Add ``dialect`` under its ``name`` (registration order is the emulator's order of routes)."""
    if not dialect.name:
        raise ValueError(f"{type(dialect).__name__} has no name")
    if dialect.name in _REGISTRY:
        raise ValueError(f"dialect {dialect.name!r} is already registered")
    if not dialect.recorded:
        dialect.recorded = dialect.name
    _REGISTRY[dialect.name] = dialect
    return dialect


def get(name: str) -> Dialect:
    """The dialect registered as ``name``; ``KeyError`` naming the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(_REGISTRY)}") from None


def registered() -> tuple[Dialect, ...]:
    """Every dialect, in registration order."""
    return tuple(_REGISTRY.values())
