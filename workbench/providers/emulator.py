"""A real loopback HTTP server that speaks every decision dialect, for offline pipelines and tests.

Endpoints (all on one port, plain HTTP/1.1 with keep-alive; bind 127.0.0.1 by default)
----------------------------------------------------------------------------------------
``POST /client/v4/accounts/{account}/ai/run/@cf/cloudflare/{clef|clef-flash}``
    Cloudflare Workers AI: v4 envelope ``{result, success, errors, messages}``, headers
    ``cf-ai-req-id`` (when the model was reached), ``cf-ray``, ``cf-ai-neurons`` (answers only),
    ``api-version``, ``cache-control: no-store``; error codes as in providers.md §3.1:
    400/5006 bad input, 400/6003 body not JSON, 400/7000 no route (also any unknown path),
    401/10000 bad token, 413/5021 body over the size estimate, 422/5012 validation (65 questions,
    id pattern, 2–255 options, 2–10 levels, empty instructions, unknown field, 5th image, bad
    image), 429/3040 capacity, 429/4006 daily allocation, 529/5012 inference failed.
``POST /v1/systemone`` (also ``/v2/systemone``, ``/api/alpha/decisions``)
    Plain System One (TypeSafe/self-hosted style errors ``{"detail": ...}``), Clef limits.
``POST /v1/decisions``
    OpenAI Decisions when ``questions`` is an array (``predicate``/``choices``/``levels``, answers
    as an ordered array, errors ``{"error": {message, type, code, param}}``); Perplexity-style
    System One when ``questions`` is an object (1–128 questions, images as ``image_url`` parts
    of an array ``state``).
``POST /v4/ai/evaluation-model`` (also ``/api/v1/evaluations``)
    Vercel AI Gateway evaluation-model v4 (``boolean``/``probability``, camelCase usage, no body
    ``model``; requires ``ai-gateway-protocol-version: 0.0.1`` and ``ai-model-id``).

Admin API (never counted, never faulted)
----------------------------------------
``GET /_emulator/stats``      request counts: total, by path, by model, by "model path", by status,
                               by fault, answered.
``POST /_emulator/reset``     zero the counts (and the per-request attempt counters).
``GET|POST /_emulator/faults`` read / merge the fault configuration (JSON object, same names as
                               :class:`FaultConfig` fields).
``GET /_emulator/health``     ``{"status": "ok"}``.

Answers come from a pluggable answerer ``answerer(questions_wire, state) -> {qid: [p, ...]}``
(probabilities in option order: noul ``[yes, no]``, choice in request order, score levels); the
default :class:`LexicalAnswerer` is a cheap deterministic token-overlap model. Probabilities are
rounded to 4 decimals as Clef does. Usage is counted with the emulator's own crude tokenizer
(deliberately not the client's estimator).

Faults (constructor ``faults=``, CLI flags, or the admin API): latency fixed or lognormal from a
median and p95 (``latency_profile="published"`` uses Cloudflare's clef 209.3/238.6 ms and
clef-flash 38.8/122.4 ms), and fractions of 429/3040, 429/4006, 500, 529, timeouts (the server
sleeps ``timeout_sleep_s``), connection resets (TCP RST), malformed JSON (a truncated 200 body),
OpenAI per-question refusals, and silent truncation of the state past ``truncate_state_tokens``
tokens (the answer then reads only the head, and only the head is billed). Fault draws and
latencies are seeded from (seed, request body, how many times that exact body was seen), so a run
is reproducible while a retry of the same body gets a fresh draw.

CLI: ``workbench emulator --port 8787 [--host 127.0.0.1] [--latency-ms 100] [--latency-p95-ms ..]
[--latency-profile published] [--fault-429 0.1] [--fault-quota ..] [--fault-500 ..] [--fault-529 ..]
[--fault-timeout ..] [--fault-reset ..] [--fault-malformed ..] [--truncate-state-tokens N]
[--require-token TOKEN] [--answerer lexical|local:minilm-zeroshot] [--seed 0]``.

In Python: ``with run_emulator(port=0, rate_limit=0.1) as emu: emu.base_url, emu.stats`` (a thread of
the calling process), or ``with run_emulator_process(port=0, latency_ms=100) as emu: ...`` (a child
``workbench emulator`` process with the same handle surface; use it for throughput benchmarks, since
an in-thread server shares the caller's GIL).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import math
import random
import re
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from workbench.schema.questions import PROFILES

# ------------------------------------------------------------------------------------------------
# Fault configuration
# ------------------------------------------------------------------------------------------------
#: Cloudflare's published per-model latency (median, p95) in ms (providers.md §3.1 / §6.1).
PUBLISHED_LATENCY_MS: dict[str, tuple[float, float]] = {
    "clef": (209.3, 238.6),
    "clef-flash": (38.8, 122.4),
    "jev": (524.1, 536.0),
    "laya": (5.8, 222.5),
}
_Z95 = 1.6448536269514722  # standard normal 95th percentile

_FAULT_ORDER = ("rate_limit", "quota", "server_error", "overloaded", "timeout", "reset", "malformed")


@dataclass
class FaultConfig:
    """What the emulator does wrong, and how slowly. Fractions are per request, in [0, 1]."""

    latency_ms: float = 0.0  # median (or fixed) added latency
    latency_p95_ms: float | None = None  # lognormal when set (> latency_ms), fixed otherwise
    latency_profile: str | None = None  # "published": per-model figures, overriding latency_ms
    rate_limit: float = 0.0  # 429 / 3040 capacity temporarily exceeded
    quota: float = 0.0  # 429 / 4006 daily allocation used up
    server_error: float = 0.0  # 500
    overloaded: float = 0.0  # 529 / 5012 inference failed
    timeout: float = 0.0  # sleep timeout_sleep_s before answering
    reset: float = 0.0  # TCP reset, no response
    malformed: float = 0.0  # 200 with a truncated JSON body
    refusal: float = 0.0  # OpenAI dialect: per-question {"type": "refusal"}
    truncate_state_tokens: int | None = None  # silently read only the first N state tokens
    force_status: int | None = None  # answer every valid request with this HTTP error status
    force_code: int | None = None  # ... and this vendor code (e.g. 403 / None, 408, 402)
    timeout_sleep_s: float = 30.0
    seed: int = 0

    def validate(self) -> FaultConfig:
        for name in (*_FAULT_ORDER, "refusal"):
            v = getattr(self, name)
            if not (0.0 <= float(v) <= 1.0):
                raise ValueError(f"fault fraction {name}={v} is outside [0, 1]")
        if sum(getattr(self, n) for n in _FAULT_ORDER) > 1.0 + 1e-9:
            raise ValueError("fault fractions add up to more than 1")
        if self.latency_ms < 0 or (self.latency_p95_ms is not None and self.latency_p95_ms < self.latency_ms):
            raise ValueError("latency must be >= 0 and p95 >= median")
        if self.latency_profile not in (None, "published"):
            raise ValueError("latency_profile must be 'published' or None")
        if self.force_status is not None and not (400 <= int(self.force_status) <= 599):
            raise ValueError("force_status must be an HTTP error status (400-599)")
        if self.truncate_state_tokens is not None and self.truncate_state_tokens < 0:
            raise ValueError("truncate_state_tokens must be >= 0")
        return self

    def merged(self, **changes: Any) -> FaultConfig:
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown fault option(s): {', '.join(sorted(unknown))}")
        return FaultConfig(**{**asdict(self), **changes}).validate()

    def latency_for(self, model: str | None, rng: random.Random) -> float:
        """Sampled latency in seconds for one request to ``model``."""
        median, p95 = self.latency_ms, self.latency_p95_ms
        if self.latency_profile == "published" and model:
            key = next((k for k in sorted(PUBLISHED_LATENCY_MS, key=len, reverse=True) if model.startswith(k)), None)
            if key:
                median, p95 = PUBLISHED_LATENCY_MS[key]
        if median <= 0:
            return 0.0
        if p95 is None or p95 <= median:
            return median / 1000.0
        sigma = math.log(p95 / median) / _Z95
        return median * math.exp(sigma * rng.gauss(0.0, 1.0)) / 1000.0

    def draw_fault(self, rng: random.Random) -> str | None:
        u = rng.random()
        acc = 0.0
        for name in _FAULT_ORDER:
            acc += getattr(self, name)
            if u < acc:
                return name
        return None


# ------------------------------------------------------------------------------------------------
# Tokenizer (the server's own; deliberately cruder and different from the client's estimator)
# ------------------------------------------------------------------------------------------------
_SERVER_TOKEN = re.compile(r" ?[A-Za-z]{1,6}| ?\d{1,3}|\s+|[^\sA-Za-z\d]")
_FIXED_TOKENS = 397  # Clef's fixed per-request tokens for a one-question schema (providers.md §7)


def render(value: Any) -> str:
    """A string as is, any other JSON value compact with sorted keys (Clef's renderer, §8)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def server_token_count(text: str) -> int:
    return len(_SERVER_TOKEN.findall(text))


def truncate_tokens(text: str, n: int) -> str:
    """The head of ``text`` holding its first ``n`` server tokens."""
    if n <= 0:
        return ""
    end = 0
    for i, m in enumerate(_SERVER_TOKEN.finditer(text)):
        if i >= n:
            break
        end = m.end()
    return text[:end]


# ------------------------------------------------------------------------------------------------
# Answerers
# ------------------------------------------------------------------------------------------------
Answerer = Callable[[dict, Any], dict[str, list[float]]]

_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being am
i me my we our you your he she it its they them their this that these those there here what which who whom
whose when where why how do does did doing done have has had having can could would should will shall may might
must not no yes so than too very just also about into over under again further then once all any both each few
more most other some such only own same s t don now please hi hello help want need get got im ive id""".split()
)
_NOUL_TRUE = "The proposition is true or the answer is yes."
_NOUL_FALSE = "The proposition is false or the answer is no."


def _stem(word: str) -> str:
    # Crude but deterministic: fold plural/tense endings, then keep a 6-letter prefix so that
    # "activate"/"activated"/"activation" and "card"/"cards" meet.
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word[:6]


def lexical_terms(text: str) -> list[str]:
    """Lower-cased, stop-word-free, stemmed word terms of ``text`` (ids split on ``_ - .``)."""
    words = re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))
    return [_stem(w) for w in words if w not in _STOP and len(w) > 1]


def option_texts(question: dict) -> list[str]:
    """One text per option, in the answer's option order (noul: yes, no)."""
    qtype = question.get("type")
    crit = question.get("criteria")
    instr = render(question.get("instructions", ""))
    if qtype == "noul":
        crit = crit if isinstance(crit, dict) else {}
        t = crit.get("true")
        f = crit.get("false")
        return [instr + " " + render(t if t is not None else _NOUL_TRUE), render(f if f is not None else _NOUL_FALSE)]
    if qtype == "choice":
        return [f"{k} {render(v) if v is not None else ''}" for k, v in crit.items()]
    return [render(level) for level in crit]


class LexicalAnswerer:
    """Token overlap between the state and each option's text, turned into probabilities.

    For each option, ``score = sum(idf of shared terms) / sqrt(1 + n_option_terms)`` where a term's
    idf is ``log(1 + n_options / n_options_with_term)`` within the question; probabilities are
    ``softmax(score / temperature)``. Deterministic, no state between calls, ~0.1 ms per question.
    """

    def __init__(self, temperature: float = 0.35, cache_size: int = 256):
        if temperature <= 0:
            raise ValueError("temperature must be > 0")
        self.temperature = temperature
        self._cache: dict[str, tuple[dict[str, np.ndarray], int]] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _index(self, question: dict) -> tuple[dict[str, np.ndarray], int]:
        key = json.dumps(question, sort_keys=True, ensure_ascii=False, default=str)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        texts = option_texts(question)
        k = len(texts)
        term_sets = [set(lexical_terms(t)) for t in texts]
        df = Counter(t for s in term_sets for t in s)
        norms = np.array([math.sqrt(1.0 + len(s)) for s in term_sets])
        index: dict[str, np.ndarray] = {}
        for term, n in df.items():
            w = np.zeros(k)
            idf = math.log(1.0 + k / n)
            for j, s in enumerate(term_sets):
                if term in s:
                    w[j] = idf / norms[j]
            index[term] = w
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = (index, k)
        return index, k

    def __call__(self, questions_wire: dict, state: Any) -> dict[str, list[float]]:
        state_terms = set(lexical_terms(render(state)))
        out: dict[str, list[float]] = {}
        for qid, q in questions_wire.items():
            index, k = self._index(q)
            score = np.zeros(k)
            for t in state_terms:
                w = index.get(t)
                if w is not None:
                    score += w
            z = score / self.temperature
            p = np.exp(z - z.max())
            out[qid] = (p / p.sum()).tolist()
        return out


def answerer_from_spec(spec: str) -> Answerer:
    """``lexical`` (default) or a local provider spec such as ``local:minilm-zeroshot``.

    A provider is wrapped so that the emulator can call it from its worker thread.
    """
    if spec in ("", "lexical"):
        return LexicalAnswerer()
    from workbench.providers import registry  # written alongside; imported only when asked

    get = getattr(registry, "get_provider", None) or registry.build_provider
    provider = get(spec)
    return ProviderAnswerer(provider)


class ProviderAnswerer:
    """Adapt any workbench ``Provider`` (e.g. ``local:minilm-zeroshot``) to the answerer hook."""

    def __init__(self, provider: Any):
        self.provider = provider
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    def __call__(self, questions_wire: dict, state: Any) -> dict[str, list[float]]:
        from workbench.providers.base import DecisionRequest
        from workbench.schema import DecisionSchema

        schema = DecisionSchema.from_dict({"questions": questions_wire}, source="emulator request")
        with self._lock:  # one event loop, one call at a time: local models are CPU-bound anyway
            result = self._loop.run_until_complete(self.provider.decide(DecisionRequest(schema, state)))
        if result.failures:
            qid, (kind, msg) = next(iter(result.failures.items()))
            raise RuntimeError(f"answerer failed on {qid}: {kind}: {msg}")
        return {qid: np.asarray(a.probs, dtype=float).tolist() for qid, a in result.answers.items()}


# ------------------------------------------------------------------------------------------------
# Validation (shared System One rules; limits per route)
# ------------------------------------------------------------------------------------------------
_ID = re.compile(f"^{PROFILES['cloudflare-clef'].id_pattern}$")
_IMG = re.compile(r"^data:image/(png|jpeg|jpg|webp);base64,([A-Za-z0-9+/=\s]*)$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Limits:
    max_questions: int = 64
    min_options: int = 2
    max_options: int = 255
    min_levels: int = 2
    max_levels: int = 10
    max_images: int = 4

    @classmethod
    def from_profile(cls, name: str, *, max_images: int) -> Limits:
        """The hosted service's limits, from the same profiles the client validates with."""
        p = PROFILES[name]
        return cls(
            max_questions=p.max_questions,
            min_options=p.min_options,
            max_options=p.max_options,
            min_levels=p.min_levels,
            max_levels=p.max_levels,
            max_images=max_images,
        )


CLEF_LIMITS = Limits.from_profile("cloudflare-clef", max_images=4)
PERPLEXITY_LIMITS = Limits.from_profile("perplexity", max_images=8)


class Reject(Exception):
    """A request refused by validation: ``kind`` is 'schema' (400/5006) or 'model' (422/5012)."""

    def __init__(self, kind: str, message: str, loc: tuple = ()):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.loc = loc


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, (list, dict)) and not v)


def validate_system_one(body: Any, limits: Limits, *, allowed_fields: frozenset[str]) -> tuple[Any, dict, list[str]]:
    """Check a System One body; return (state, questions, images). Raises :class:`Reject`."""
    if not isinstance(body, dict):
        raise Reject("schema", "request body must be a JSON object")
    missing = [f for f in ("state", "questions") if f not in body]
    if missing:
        raise Reject("schema", "required properties at '/' are 'model,state,questions'", (missing[0],))
    unknown = sorted(set(body) - allowed_fields)
    if unknown:
        raise Reject("model", f"Unrecognized key(s) in object: '{unknown[0]}'", (unknown[0],))
    questions = body["questions"]
    if not isinstance(questions, dict) or not questions:
        raise Reject("schema", "questions must be an object with at least 1 question", ("questions",))
    if len(questions) > limits.max_questions:
        raise Reject(
            "model", f"questions: at most {limits.max_questions} questions (got {len(questions)})", ("questions",)
        )
    for qid, q in questions.items():
        loc = ("questions", qid)
        if not _ID.match(qid):
            raise Reject("model", f"question id {qid[:40]!r} must match [A-Za-z0-9_.-]{{1,100}}", loc)
        if not isinstance(q, dict) or q.get("type") not in ("noul", "choice", "score"):
            raise Reject("schema", f"question {qid}: type must be one of noul, choice, score", loc)
        extra = set(q) - {"type", "instructions", "criteria"}
        if extra:
            raise Reject("model", f"question {qid}: unrecognized key '{sorted(extra)[0]}'", loc)
        if "instructions" not in q:
            raise Reject("schema", f"question {qid}: missing required property 'instructions'", loc)
        if _empty(q["instructions"]) or not isinstance(q["instructions"], (str, dict, list)):
            raise Reject("model", f"question {qid}: instructions must be non-empty", (*loc, "instructions"))
        crit = q.get("criteria")
        if q["type"] == "noul":
            if crit is not None and (not isinstance(crit, dict) or set(crit) - {"true", "false"}):
                raise Reject(
                    "model", f"question {qid}: noul criteria may only have 'true' and 'false'", (*loc, "criteria")
                )
        elif q["type"] == "choice":
            if crit is None:
                raise Reject("schema", f"question {qid}: missing required property 'criteria'", loc)
            if not isinstance(crit, dict):
                raise Reject("model", f"question {qid}: choice criteria must be an object", (*loc, "criteria"))
            if not (limits.min_options <= len(crit) <= limits.max_options):
                raise Reject(
                    "model",
                    f"question {qid}: {limits.min_options} to {limits.max_options} options (got {len(crit)})",
                    (*loc, "criteria"),
                )
            if any(not str(k).strip() for k in crit):
                raise Reject("model", f"question {qid}: option ids must be non-empty", (*loc, "criteria"))
        else:
            if crit is None:
                raise Reject("schema", f"question {qid}: missing required property 'criteria'", loc)
            if not isinstance(crit, list):
                raise Reject("model", f"question {qid}: score criteria must be an array", (*loc, "criteria"))
            if not (limits.min_levels <= len(crit) <= limits.max_levels):
                raise Reject(
                    "model",
                    f"question {qid}: {limits.min_levels} to {limits.max_levels} levels (got {len(crit)})",
                    (*loc, "criteria"),
                )
    images = body.get("images") or []
    if not isinstance(images, list):
        raise Reject("model", "images must be an array", ("images",))
    _check_images(images, limits)
    return body["state"], questions, images


def _check_images(images: list, limits: Limits) -> None:
    if len(images) > limits.max_images:
        raise Reject("model", f"images: at most {limits.max_images} images (got {len(images)})", ("images",))
    for i, img in enumerate(images):
        if isinstance(img, dict) and {"content_type", "base64"} <= set(img):
            ok = str(img["content_type"]).lower() in ("image/png", "image/jpeg", "image/jpg", "image/webp")
        else:
            ok = isinstance(img, str) and bool(_IMG.match(img))
        if not ok:
            raise Reject("model", "image payload is invalid", ("images", i))


# ------------------------------------------------------------------------------------------------
# Answer rendering per dialect
# ------------------------------------------------------------------------------------------------
def _r4(x: float) -> float:
    return round(float(x), 4)


def _gini_confidence(p: np.ndarray) -> float:
    n = len(p)
    return 0.0 if n < 2 else float((np.sum(p**2) - 1.0 / n) / (1.0 - 1.0 / n))


def system_one_answers(questions: dict, probs: dict[str, np.ndarray], *, confidence: str) -> dict:
    """System One answers from probability vectors; ``confidence`` 'gini' (hosted Clef) or 'pmax'."""
    out: dict[str, dict] = {}
    for qid, q in questions.items():
        p = probs[qid]
        if q["type"] == "noul":
            out[qid] = {"type": "noul", "noul": _r4(p[0])}
            continue
        conf = _gini_confidence(p) if confidence == "gini" else float(p.max())
        top = int(np.argmax(p))  # ties go to the first option in request order
        if q["type"] == "choice":
            keys = [str(k) for k in q["criteria"]]
            out[qid] = {
                "type": "choice",
                "choice": keys[top],
                "probabilities": {k: _r4(v) for k, v in zip(keys, p)},
                "confidence": _r4(conf),
            }
        else:
            levels = q["criteria"]
            out[qid] = {
                "type": "score",
                "score": _r4(float(np.dot(np.arange(len(p)), p))),
                "legend": {str(i): lv for i, lv in enumerate(levels)},
                "probabilities": {str(i): _r4(v) for i, v in enumerate(p)},
                "confidence": _r4(conf),
            }
    return out


# ------------------------------------------------------------------------------------------------
# HTTP plumbing
# ------------------------------------------------------------------------------------------------
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    529: "Site Overloaded",
}
_HARD_MAX_BODY = 16 * 1024 * 1024  # beyond the documented 13 MiB body cap: refuse without reading


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    reset: bool = False  # abort the connection with a TCP RST instead of answering

    @classmethod
    def json(cls, status: int, obj: Any, headers: dict[str, str] | None = None) -> HttpResponse:
        return cls(
            status,
            json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
            {"content-type": "application/json", **(headers or {})},
        )


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> HttpRequest | HttpResponse | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        return HttpResponse.json(400, {"error": "request header too large"})
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        return HttpResponse.json(400, {"error": "bad request line"})
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    path, _, query = target.partition("?")
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            n = int(line.split(b";")[0].strip() or b"0", 16)
            if n == 0:
                await reader.readuntil(b"\r\n")
                break
            size += n
            if size > _HARD_MAX_BODY:
                return HttpResponse(413, b"", {"connection": "close"})
            chunks.append(await reader.readexactly(n))
            await reader.readexactly(2)
        body = b"".join(chunks)
    else:
        try:
            length = int(headers.get("content-length", "0") or "0")
        except ValueError:
            return HttpResponse.json(400, {"error": "bad content-length"})
        if length > _HARD_MAX_BODY:
            return HttpResponse(413, b"", {"connection": "close"})
        body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), path, query, headers, body)


def _encode_response(resp: HttpResponse, *, keep_alive: bool) -> bytes:
    head = [f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, 'Status')}"]
    hdrs = {
        "content-length": str(len(resp.body)),
        "server": "workbench-emulator",
        "connection": "keep-alive" if keep_alive else "close",
        **resp.headers,
    }
    hdrs["content-length"] = str(len(resp.body))
    head += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body


# ------------------------------------------------------------------------------------------------
# Stats
# ------------------------------------------------------------------------------------------------
class EmulatorStats:
    """Thread-safe request counters (the server thread writes, tests read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.total = 0
            self.answered = 0
            self.by_path: Counter = Counter()
            self.by_model: Counter = Counter()
            self.by_model_path: Counter = Counter()
            self.by_status: Counter = Counter()
            self.by_fault: Counter = Counter()

    def arrived(self, path: str, model: str | None) -> None:
        """Count a request when it arrives (a request that later hangs or is reset still counts)."""
        m = model or "-"
        with self._lock:
            self.total += 1
            self.by_path[path] += 1
            self.by_model[m] += 1
            self.by_model_path[f"{m} {path}"] += 1

    def finished(self, status: int | str, fault: str | None) -> None:
        with self._lock:
            self.by_status[str(status)] += 1
            if fault:
                self.by_fault[fault] += 1
            if status == 200 and fault is None:
                self.answered += 1

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "total": self.total,
                "answered": self.answered,
                "by_path": dict(self.by_path),
                "by_model": dict(self.by_model),
                "by_model_path": dict(self.by_model_path),
                "by_status": dict(self.by_status),
                "by_fault": dict(self.by_fault),
            }


# ------------------------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------------------------
_CF_ROUTE = re.compile(r"^/client/v4/accounts/([^/]+)/ai/run/@cf/cloudflare/([^/]+)$")
_SYSTEMONE_PATHS = {"/v1/systemone", "/v2/systemone", "/api/alpha/decisions"}
_VERCEL_PATHS = {"/v4/ai/evaluation-model", "/api/v1/evaluations"}
_CF_MODELS = {"clef", "clef-flash"}


@dataclass
class _Call:
    """One decision request being handled: its route and what the fault draw decided."""

    route: str  # cloudflare | systemone | perplexity | openai | vercel
    path: str
    model: str | None
    rng: random.Random
    fault: str | None = None


class EmulatorServer:
    """The emulator; run it with :func:`run_emulator` (background thread) or :meth:`serve` (CLI).

    Parameters
    ----------
    host, port : str, int
        Bind address; port 0 picks a free port (read :attr:`port` after start).
    answerer : callable, optional
        ``answerer(questions_wire, state) -> {qid: [p, ...]}``; default :class:`LexicalAnswerer`.
        Non-default answerers run in a worker thread so that slow models do not block the server.
    faults : FaultConfig or dict, optional
    require_token : str, optional
        When set, every dialect route needs ``Authorization: Bearer <token>`` (401 otherwise).
    max_body_bytes : int, default=524,288
        Bodies above this get 413/5021 (the hosted estimate fired near 520–525 kB, §3.1).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        answerer: Answerer | None = None,
        faults: FaultConfig | dict | None = None,
        require_token: str | None = None,
        max_body_bytes: int = 524_288,
        answerer_workers: int = 1,
    ):
        self.host = host
        self.port = port
        self.answerer = answerer or LexicalAnswerer()
        self._inline = isinstance(self.answerer, LexicalAnswerer)
        self._executor = (
            None
            if self._inline
            else ThreadPoolExecutor(max_workers=answerer_workers, thread_name_prefix="emulator-answerer")
        )
        if isinstance(faults, dict):
            faults = FaultConfig().merged(**faults)
        self.faults = (faults or FaultConfig()).validate()
        self.require_token = require_token  # may be changed while running (tests)
        self.max_body_bytes = max_body_bytes
        self._stats = EmulatorStats()
        self._attempts: dict[bytes, int] = {}
        self._attempt_lock = threading.Lock()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- public helpers ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def cloudflare_base_url(self) -> str:
        """Value for ``CLOUDFLARE_CLEF_BASE_URL``."""
        return f"{self.base_url}/client/v4"

    @property
    def stats(self) -> dict:
        return self._stats.snapshot()

    def request_count(self, *, model: str | None = None, path: str | None = None) -> int:
        """Requests received (all outcomes), optionally for one model and/or a path substring."""
        snap = self.stats
        if model is None and path is None:
            return snap["total"]
        total = 0
        for key, n in snap["by_model_path"].items():
            m, _, p = key.partition(" ")
            if (model is None or m == model) and (path is None or path in p):
                total += n
        return total

    def reset_stats(self) -> None:
        self._stats.reset()
        with self._attempt_lock:
            self._attempts.clear()

    def set_faults(self, **changes: Any) -> FaultConfig:
        self.faults = self.faults.merged(**changes)
        return self.faults

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle_connection, self.host, self.port, limit=256 * 1024, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve(self) -> None:
        """Start (if needed) and serve until cancelled."""
        if self._server is None:
            await self.start()
        try:
            await self._server.serve_forever()
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- connection loop ---------------------------------------------------------------------------
    async def _handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            while True:
                req = await _read_request(reader, writer)
                if req is None:
                    break
                if isinstance(req, HttpResponse):
                    writer.write(_encode_response(req, keep_alive=False))
                    await writer.drain()
                    break
                resp = await self._dispatch(req)
                if resp.reset:
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                keep = req.headers.get("connection", "").lower() != "close"
                writer.write(_encode_response(resp, keep_alive=keep))
                await writer.drain()
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    # -- dispatch ----------------------------------------------------------------------------------
    async def _dispatch(self, req: HttpRequest) -> HttpResponse:
        if req.path.startswith("/_emulator/"):
            return self._admin(req)
        cf = _CF_ROUTE.match(req.path)
        if cf:
            route, model = "cloudflare", cf.group(2)
        elif req.path in _SYSTEMONE_PATHS:
            route, model = "systemone", None
        elif req.path == "/v1/decisions":
            route, model = "decisions", None
        elif req.path in _VERCEL_PATHS:
            route, model = "vercel", req.headers.get("ai-model-id")
        else:
            route, model = "none", None
        if route != "none" and route != "cloudflare" and route != "vercel":
            model = _peek_model(req.body)
        call = _Call(route, req.path, model, self._rng_for(req.body))
        self._stats.arrived(req.path, model)
        try:
            resp = await self._route(req, call)
        except Exception as exc:  # an answerer bug must not kill the connection loop
            resp = self._error(call, 500, 5000, f"emulator error: {type(exc).__name__}")
        self._stats.finished("reset" if resp.reset else resp.status, call.fault)
        return resp

    def _rng_for(self, body: bytes) -> random.Random:
        digest = hashlib.sha256(body).digest()
        with self._attempt_lock:
            n = self._attempts.get(digest, 0)
            self._attempts[digest] = n + 1
        seed = hashlib.sha256(f"{self.faults.seed}|{n}|".encode() + digest).digest()
        return random.Random(int.from_bytes(seed[:8], "big"))

    async def _route(self, req: HttpRequest, call: _Call) -> HttpResponse:
        t0 = time.perf_counter()
        if call.route == "none" or req.method != "POST":
            call.route = "cloudflare"  # Cloudflare's API answers unknown URIs this way
            return self._error(call, 400, 7000, "No route for that URI")
        if call.route == "cloudflare" and call.model not in _CF_MODELS:
            return self._error(call, 400, 7000, "No route for that URI")
        if self.require_token is not None and not self._authorised(req):
            return self._error(call, 401, 10000, "Authentication error")
        if len(req.body) > self.max_body_bytes:
            return self._error(call, 413, 5021, "Request is too large: the estimated input exceeds the limit")
        try:
            body = json.loads(req.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return self._error(call, 400, 6003, "Invalid request: body is not valid JSON")
        if call.route == "decisions":
            call.route = (
                "openai" if isinstance(body, dict) and isinstance(body.get("questions"), list) else "perplexity"
            )
        try:
            state, questions, images, ctx = self._parse(req, call, body)
        except Reject as rej:
            status, code = (400, 5006) if rej.kind == "schema" else (422, 5012)
            return self._error(call, status, code, rej.message, loc=rej.loc, model_side=rej.kind == "model")
        if self.faults.force_status is not None:
            call.fault = f"forced_{self.faults.force_status}"
            return self._error(
                call, int(self.faults.force_status), self.faults.force_code, f"forced status {self.faults.force_status}"
            )
        # faults and latency (after validation: a bad request is refused at once)
        call.fault = self.faults.draw_fault(call.rng)
        delay = self.faults.latency_for(call.model, call.rng)
        if call.fault == "timeout":
            await asyncio.sleep(self.faults.timeout_sleep_s)
        elif delay > 0 and call.fault is not None:
            await _sleep_rest(t0, delay)
        if call.fault == "reset":
            return HttpResponse(0, reset=True)
        if call.fault == "rate_limit":
            return self._error(call, 429, 3040, "Capacity temporarily exceeded, please try again.")
        if call.fault == "quota":
            return self._error(
                call,
                429,
                4006,
                "you have used up your daily free allocation of 10,000 neurons, "
                "please upgrade to Cloudflare's Workers Paid plan",
            )
        if call.fault == "server_error":
            return self._error(call, 500, 5000, "Internal server error")
        if call.fault == "overloaded":
            return self._error(call, 529, 5012, "Clef inference failed", model_side=True)
        # answer
        text_state = render(state) if not isinstance(state, str) else state
        billed_state = text_state
        if self.faults.truncate_state_tokens is not None:
            billed_state = truncate_tokens(text_state, self.faults.truncate_state_tokens)
            state = billed_state  # the model silently reads only the head
        probs = await self._answer(questions, state)
        tokens = (
            _FIXED_TOKENS
            + server_token_count(billed_state)
            + server_token_count(render(questions))
            + 1000 * len(images)
        )
        resp = self._render(call, questions, probs, tokens, ctx)
        if call.fault == "malformed":
            resp.body = resp.body[: max(1, len(resp.body) // 2)]
        if delay > 0 and call.fault is None:
            # the latency is the service time: answering counts towards it, as on a real server
            await _sleep_rest(t0, delay)
        return resp

    def _authorised(self, req: HttpRequest) -> bool:
        auth = req.headers.get("authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip() == self.require_token:
            return True
        return req.headers.get("api-subscription-key") == self.require_token

    def _parse(self, req: HttpRequest, call: _Call, body: Any) -> tuple[Any, dict, list, dict]:
        if call.route == "cloudflare":
            if isinstance(body, dict) and "model" in body:
                if not isinstance(body["model"], str) or body["model"].strip() not in _CF_MODELS:
                    raise Reject("schema", "model must be one of clef, clef-flash", ("model",))
                if body["model"].strip() != call.model:
                    raise Reject(
                        "schema",
                        f"model {body['model'].strip()!r} does not match the URL model {call.model!r}",
                        ("model",),
                    )
                answered = call.model
            else:
                answered = "clef-flash"  # measured 2026-10-03: a body without model was answered by clef-flash
            state, questions, images = validate_system_one(
                body, CLEF_LIMITS, allowed_fields=frozenset({"model", "state", "questions", "images"})
            )
            return state, questions, images, {"answered_model": answered}
        if call.route == "systemone":
            state, questions, images = validate_system_one(
                body, CLEF_LIMITS, allowed_fields=frozenset({"model", "state", "questions", "images"})
            )
            return state, questions, images, {"answered_model": (body.get("model") or "systemone-emulator")}
        if call.route == "perplexity":
            if not isinstance(body, dict) or not body.get("model"):
                raise Reject("schema", "model is required", ("model",))
            state, questions, _ = validate_system_one(
                body, PERPLEXITY_LIMITS, allowed_fields=frozenset({"model", "state", "questions"})
            )
            images: list = []
            if isinstance(state, list):
                parts = [p for p in state if isinstance(p, dict) and p.get("type") == "image_url"]
                images = [(p.get("image_url") or {}).get("url") for p in parts]
                _check_images(images, PERPLEXITY_LIMITS)
                rest = [p for p in state if p not in parts]
                state = rest[0] if len(rest) == 1 else rest
            return state, questions, images, {"answered_model": body["model"]}
        if call.route == "openai":
            return _parse_openai(body)
        return _parse_vercel(req, body)

    async def _answer(self, questions: dict, state: Any) -> dict[str, np.ndarray]:
        if self._inline:
            raw = self.answerer(questions, state)
        elif inspect.iscoroutinefunction(self.answerer):
            raw = await self.answerer(questions, state)
        else:
            loop = asyncio.get_running_loop()
            raw = await loop.run_in_executor(self._executor, self.answerer, questions, state)
        out: dict[str, np.ndarray] = {}
        for qid, q in questions.items():
            n = 2 if q["type"] == "noul" else len(q["criteria"])
            p = np.asarray(raw[qid], dtype=float)
            if p.shape != (n,) or not np.all(np.isfinite(p)) or p.min() < 0 or p.sum() <= 0:
                raise ValueError(f"answerer gave an invalid vector for {qid}")
            out[qid] = p / p.sum()
        return out

    # -- rendering ---------------------------------------------------------------------------------
    def _render(
        self, call: _Call, questions: dict, probs: dict[str, np.ndarray], tokens: int, ctx: dict
    ) -> HttpResponse:
        rid = str(uuid.UUID(int=call.rng.getrandbits(128)))
        if call.route == "cloudflare":
            model = ctx["answered_model"]
            result = {
                "model": model,
                "answers": system_one_answers(questions, probs, confidence="gini"),
                "usage": {"input_tokens": tokens, "output_tokens": 0},
            }
            neurons = tokens * {"clef": 21_818.0, "clef-flash": 8_182.0}[model] / 1e6
            return HttpResponse.json(
                200,
                {"result": result, "success": True, "errors": [], "messages": []},
                {**self._cf_headers(call, reached=True), "cf-ai-req-id": rid, "cf-ai-neurons": f"{neurons:.2f}"},
            )
        if call.route in ("systemone", "perplexity"):
            body = {
                "model": ctx["answered_model"],
                "answers": system_one_answers(questions, probs, confidence="pmax"),
                "usage": {"input_tokens": tokens, "output_tokens": 0},
            }
            return HttpResponse.json(200, body, {"x-request-id": rid})
        if call.route == "openai":
            return HttpResponse.json(
                200, _render_openai(ctx, questions, probs, tokens, call, self.faults.refusal), {"x-request-id": rid}
            )
        return HttpResponse.json(
            200, _render_vercel(questions, probs, tokens), {"x-request-id": rid, "x-inference-id": rid}
        )

    def _cf_headers(self, call: _Call, *, reached: bool) -> dict[str, str]:
        ray = f"{call.rng.getrandbits(64):016x}-IAD"
        return {"cf-ray": ray, "api-version": "2026-10-01.epoch", "cache-control": "no-store"}

    def _error(
        self, call: _Call, status: int, code: int | None, message: str, *, loc: tuple = (), model_side: bool = False
    ) -> HttpResponse:
        rid = str(uuid.UUID(int=call.rng.getrandbits(128)))
        if call.route == "cloudflare":
            msg = message
            headers = self._cf_headers(call, reached=model_side)
            if model_side:  # model-side refusals nest a second envelope and end with the request uuid
                inner = {
                    "error": {
                        "type": "invalid_request" if status == 422 else "server_error",
                        "message": message,
                        "details": {"path": list(map(str, loc))},
                    }
                }
                msg = f"AiError: AiError: {json.dumps(inner)} ({rid})"
                headers["cf-ai-req-id"] = rid
            return HttpResponse.json(
                status,
                {"success": False, "errors": [{"code": code, "message": msg}], "result": {}, "messages": []},
                headers,
            )
        if call.route in ("systemone", "perplexity"):
            if status == 422:
                return HttpResponse.json(
                    422,
                    {"detail": [{"type": "value_error", "loc": ["body", *loc], "msg": message}]},
                    {"x-request-id": rid},
                )
            etype = {
                400: "invalid_request",
                401: "authentication_error",
                413: "max_tokens_exceeded",
                429: "quota_exceeded" if code == 4006 else "rate_limit",
                500: "internal_server_error",
                529: "overloaded",
            }.get(status, "error")
            headers = {"x-request-id": rid}
            if call.route == "perplexity" and status == 429:
                headers["retry-after"] = "1"  # Perplexity sends Retry-After: 1 (seconds) on 429 (§3.6)
            return HttpResponse.json(
                status, {"detail": {"error_type": etype, "message": message, "code": code}}, headers
            )
        etype = {
            400: "invalid_request_error",
            401: "authentication_error",
            413: "invalid_request_error",
            422: "invalid_request_error",
            429: "insufficient_quota" if code == 4006 else "rate_limit_exceeded",
            500: "internal_server_error",
            529: "overloaded_error",
        }.get(status, "error")
        err: dict[str, Any] = {"message": message, "type": etype, "code": code}
        if call.route == "openai":
            err["param"] = ".".join(map(str, loc)) or None
        return HttpResponse.json(status, {"error": err}, {"x-request-id": rid})

    # -- admin -------------------------------------------------------------------------------------
    def _admin(self, req: HttpRequest) -> HttpResponse:
        if req.path == "/_emulator/stats":
            return HttpResponse.json(200, self.stats)
        if req.path == "/_emulator/health":
            return HttpResponse.json(200, {"status": "ok"})
        if req.path == "/_emulator/reset" and req.method == "POST":
            self.reset_stats()
            return HttpResponse.json(200, {"status": "reset"})
        if req.path == "/_emulator/faults":
            if req.method == "POST":
                try:
                    changes = json.loads(req.body or b"{}")
                    if not isinstance(changes, dict):
                        raise ValueError("expected a JSON object")
                    self.set_faults(**changes)
                except (ValueError, TypeError) as exc:
                    return HttpResponse.json(400, {"error": str(exc)})
            return HttpResponse.json(200, asdict(self.faults))
        return HttpResponse.json(404, {"error": "unknown admin endpoint"})


def _peek_model(body: bytes) -> str | None:
    m = re.search(rb'"model"\s*:\s*"([^"\\]{1,200})"', body[:4096])
    return m.group(1).decode("utf-8", "replace") if m else None


# -- OpenAI Decisions ------------------------------------------------------------------------------
def _parse_openai(body: Any) -> tuple[Any, dict, list, dict]:
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
        raise Reject("schema", "model is required", ("model",))
    if "input" not in body:
        raise Reject("schema", "input is required", ("input",))
    unknown = sorted(set(body) - {"model", "input", "questions", "safety_identifier"})
    if unknown:
        raise Reject("schema", f"Unrecognized request argument supplied: {unknown[0]}", (unknown[0],))
    state, images = _openai_input(body["input"])
    qs = body["questions"]
    if not qs:
        raise Reject("schema", "questions must be a non-empty array", ("questions",))
    questions: dict[str, dict] = {}
    values: dict[str, list] = {}
    names: list[str | None] = []
    for i, q in enumerate(qs):
        loc = ("questions", i)
        if not isinstance(q, dict) or q.get("type") not in ("predicate", "choice", "score"):
            raise Reject("schema", f"questions[{i}].type must be predicate, choice or score", loc)
        instr = q.get("instructions")
        if not isinstance(instr, str) or not instr.strip():
            raise Reject("schema", f"questions[{i}].instructions must be a non-empty string", (*loc, "instructions"))
        name = q.get("name")
        qid = name if isinstance(name, str) and name else f"q{i}"
        if qid in questions:
            raise Reject("schema", f"questions[{i}].name {qid!r} is not unique", (*loc, "name"))
        names.append(name if isinstance(name, str) else None)
        if q["type"] == "predicate":
            questions[qid] = {"type": "noul", "instructions": instr}
        elif q["type"] == "choice":
            choices = q.get("choices")
            if not isinstance(choices, list) or not (2 <= len(choices) <= 255):
                raise Reject("schema", f"questions[{i}].choices must hold 2 to 255 entries", (*loc, "choices"))
            vals = [c.get("value") if isinstance(c, dict) else None for c in choices]
            if any(not isinstance(v, (str, bool)) or v == "" for v in vals):
                raise Reject("schema", f"questions[{i}].choices[].value must be a string or boolean", (*loc, "choices"))
            keys = [f"{type(v).__name__}:{v}" for v in vals]  # "true" and True are distinct values
            if len(set(keys)) != len(keys):
                raise Reject("schema", f"questions[{i}].choices values must be unique", (*loc, "choices"))
            questions[qid] = {
                "type": "choice",
                "instructions": instr,
                "criteria": {
                    f"{v}" if isinstance(v, str) else str(v).lower(): c.get("description")
                    for v, c in zip(vals, choices)
                },
            }
            if len(questions[qid]["criteria"]) != len(vals):  # "true" and True both present
                questions[qid]["criteria"] = {k: c.get("description") for k, c in zip(keys, choices)}
            values[qid] = vals
        else:
            levels = q.get("levels")
            if not isinstance(levels, list) or not (2 <= len(levels) <= 10):
                raise Reject("schema", f"questions[{i}].levels must hold 2 to 10 entries", (*loc, "levels"))
            if any(not isinstance(lv, dict) or not isinstance(lv.get("label"), str) for lv in levels):
                raise Reject("schema", f"questions[{i}].levels[].label must be a string", (*loc, "levels"))
            questions[qid] = {
                "type": "score",
                "instructions": instr,
                "criteria": [
                    f"{lv['label']}: {lv['description']}" if lv.get("description") else lv["label"] for lv in levels
                ],
            }
            values[qid] = [lv["label"] for lv in levels]
    return (
        state,
        questions,
        images,
        {"answered_model": body["model"], "values": values, "names": names, "types": [q["type"] for q in qs]},
    )


def _openai_input(inp: Any) -> tuple[Any, list]:
    if isinstance(inp, str):
        return inp, []
    if not isinstance(inp, list) or not inp:
        raise Reject("schema", "input must be a string or a non-empty array of messages", ("input",))
    texts, images = [], []
    for m in inp:
        if not isinstance(m, dict) or m.get("role") not in ("user", "system", "developer"):
            raise Reject("schema", "input messages need a role", ("input",))
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            if isinstance(part, dict) and part.get("type") == "input_text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, dict) and part.get("type") == "input_image":
                images.append(part.get("image_url"))
            else:
                raise Reject("schema", "unsupported input part", ("input",))
    if len(images) > 128:
        raise Reject("schema", "at most 128 images", ("input",))
    _check_images(images, Limits(max_images=128))
    return "\n\n".join(texts), images


def _render_openai(
    ctx: dict, questions: dict, probs: dict[str, np.ndarray], tokens: int, call: _Call, refusal: float
) -> dict:
    answers = []
    for (qid, q), name in zip(questions.items(), ctx["names"]):
        p = probs[qid]
        if refusal > 0 and call.rng.random() < refusal:
            answers.append({"type": "refusal", "name": name})
            continue
        if q["type"] == "noul":
            answers.append({"type": "predicate", "name": name, "probability": _r4(p[0])})
            continue
        vals = ctx["values"][qid]
        top = int(np.argmax(p))
        if q["type"] == "choice":
            answers.append(
                {
                    "type": "choice",
                    "name": name,
                    "choice": vals[top],
                    "confidence": _r4(p.max()),
                    "probabilities": [{"value": v, "probability": _r4(x)} for v, x in zip(vals, p)],
                }
            )
        else:
            answers.append(
                {
                    "type": "score",
                    "name": name,
                    "score": _r4(float(np.dot(np.arange(len(p)), p))),
                    "confidence": _r4(p.max()),
                    "probabilities": [
                        {"label": v, "probability": _r4(x), "value": i} for i, (v, x) in enumerate(zip(vals, p))
                    ],
                }
            )
    return {
        "model": f"{ctx['answered_model']}-2026-09-14",
        "answers": answers,
        "usage": {
            "input_tokens": tokens,
            "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens,
        },
    }


# -- Vercel evaluation-model -----------------------------------------------------------------------
def _parse_vercel(req: HttpRequest, body: Any) -> tuple[Any, dict, list, dict]:
    if req.headers.get("ai-gateway-protocol-version") != "0.0.1":
        raise Reject("schema", "Unsupported gateway protocol version")
    model = req.headers.get("ai-model-id")
    if not model:
        raise Reject("schema", "ai-model-id header is required")
    if isinstance(body, dict) and "model" in body:
        raise Reject("schema", "model must not be sent in the body (use the ai-model-id header)", ("model",))
    if not isinstance(body, dict) or not isinstance(body.get("questions"), dict):
        raise Reject("schema", "questions must be an object", ("questions",))
    translated = {
        qid: ({**q, "type": "noul"} if isinstance(q, dict) and q.get("type") == "boolean" else q)
        for qid, q in body["questions"].items()
    }
    if any(isinstance(q, dict) and q.get("type") == "noul" for q in body["questions"].values()):
        raise Reject("schema", "unknown question type 'noul' (use 'boolean')")
    state, questions, _ = validate_system_one(
        {**body, "questions": translated}, CLEF_LIMITS, allowed_fields=frozenset({"state", "questions"})
    )
    return state, questions, [], {"answered_model": model}


def _render_vercel(questions: dict, probs: dict[str, np.ndarray], tokens: int) -> dict:
    s1 = system_one_answers(questions, probs, confidence="pmax")
    answers, conf = {}, {}
    for qid, a in s1.items():
        if a["type"] == "noul":
            answers[qid] = {"type": "boolean", "probability": a["noul"]}
            continue
        conf[qid] = a.pop("confidence")
        answers[qid] = a
    return {
        "answers": answers,
        "usage": {"inputTokens": tokens, "outputTokens": 0},
        "providerMetadata": {"typesafe": {"confidence": conf}},
    }


# ------------------------------------------------------------------------------------------------
# Running it
# ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def run_emulator(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    answerer: Answerer | None = None,
    require_token: str | None = None,
    max_body_bytes: int = 524_288,
    faults: FaultConfig | dict | None = None,
    **fault_options: Any,
) -> Iterator[EmulatorServer]:
    """Run an :class:`EmulatorServer` in a background thread for the duration of a ``with`` block.

    Fault options may be given as keywords (``rate_limit=0.1, latency_ms=100``) or as ``faults``.

    Examples
    --------
    >>> with run_emulator(port=0) as emu:          # doctest: +SKIP
    ...     env = {"CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url, ...}
    """
    config = faults if isinstance(faults, FaultConfig) else FaultConfig().merged(**(faults or {}))
    if fault_options:
        config = config.merged(**fault_options)
    server = EmulatorServer(
        host, port, answerer=answerer, faults=config, require_token=require_token, max_body_bytes=max_body_bytes
    )
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    error: list[BaseException] = []

    def _main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # e.g. port in use: reported to the caller below
            error.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=_main, name=f"emulator-{port}", daemon=True)
    thread.start()
    ready.wait(10)
    if error:
        raise error[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


class EmulatorProcess:
    """Handle on an emulator running as a separate ``workbench emulator`` process.

    Same read/write surface as :class:`EmulatorServer` for callers (``base_url``,
    ``cloudflare_base_url``, ``stats``, ``request_count``, ``reset_stats``, ``set_faults``), through
    the admin API. A separate process does not share the GIL with the caller, which matters for
    throughput benchmarks (an in-thread emulator halves a 2-core machine's client throughput).
    """

    def __init__(self, base_url: str, process: Any):
        self.base_url = base_url
        self.process = process
        self.port = int(base_url.rsplit(":", 1)[1])

    @property
    def cloudflare_base_url(self) -> str:
        return f"{self.base_url}/client/v4"

    def _admin(self, method: str, path: str, payload: dict | None = None) -> dict:
        import httpx

        with httpx.Client(timeout=10, trust_env=False) as client:
            resp = client.request(method, f"{self.base_url}/_emulator/{path}", json=payload)
        if resp.status_code >= 400:
            raise ValueError(resp.json().get("error", resp.text))
        return resp.json()

    @property
    def stats(self) -> dict:
        return self._admin("GET", "stats")

    def request_count(self, *, model: str | None = None, path: str | None = None) -> int:
        snap = self.stats
        if model is None and path is None:
            return snap["total"]
        return sum(
            n
            for key, n in snap["by_model_path"].items()
            if (model is None or key.partition(" ")[0] == model) and (path is None or path in key.partition(" ")[2])
        )

    def reset_stats(self) -> None:
        self._admin("POST", "reset")

    def set_faults(self, **changes: Any) -> dict:
        return self._admin("POST", "faults", changes)


@contextlib.contextmanager
def run_emulator_process(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    require_token: str | None = None,
    answerer: str = "lexical",
    startup_timeout_s: float = 60.0,
    **fault_options: Any,
) -> Iterator[EmulatorProcess]:
    """Run ``workbench emulator`` in a child process for the duration of a ``with`` block.

    ``fault_options`` use :class:`FaultConfig` names (``latency_ms=100``, ``rate_limit=0.1``) and
    are applied through the admin API once the server listens. The child is terminated (SIGTERM,
    then SIGKILL) on exit.
    """
    import os
    import subprocess
    import sys

    FaultConfig().merged(**fault_options)  # validate before starting anything
    cmd = [
        sys.executable,
        "-c",
        "from workbench.cli import main; main()",
        "emulator",
        "--host",
        host,
        "--port",
        str(port),
        "--json",
        "--answerer",
        answerer,
    ]
    env = dict(os.environ)
    if require_token:
        env["WORKBENCH_EMULATOR_TOKEN"] = require_token  # not on the command line (visible in ps)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        lines: list[str] = []
        deadline = threading.Event()
        timer = threading.Timer(startup_timeout_s, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"emulator process exited with {proc.wait()} before listening")
                lines.append(line)
                if line.startswith("}"):
                    break
        finally:
            timer.cancel()
        info = json.loads("".join(lines))
        handle = EmulatorProcess(info["base_url"], proc)
        if fault_options:
            handle.set_faults(**fault_options)
        yield handle
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
            proc.wait(5)


async def _sleep_rest(t0: float, delay: float) -> None:
    """Sleep what is left of ``delay`` seconds since ``t0`` (work done so far counts)."""
    rest = delay - (time.perf_counter() - t0)
    if rest > 0:
        await asyncio.sleep(rest)
