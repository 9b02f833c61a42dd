"""A real loopback HTTP server that speaks every decision dialect, for offline pipelines and tests.

Endpoints (all on one port, HTTP/1.1 with keep-alive on aiohttp's server, HTTPS when given a
certificate; bind 127.0.0.1 by default)
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
tokens (the answer then reads only the head, and only the head is billed). One switchable model flaw
rides along: ``position_bias=b`` (``--position-bias``, default 0 = off) turns every choice answer
into ``(1 - b)·p + b·e_first``, boosting the option listed first, so that the ``option_order``
robustness probe (:mod:`workbench.workflows.robustness`) has a real position bias to find. Fault draws and
latencies are seeded from (seed, request body, how many times that exact body was seen), so a run
is reproducible while a retry of the same body gets a fresh draw.

CLI: ``workbench emulator --port 8787 [--host 127.0.0.1] [--latency-ms 100] [--latency-p95-ms ..]
[--latency-profile published] [--fault-429 0.1] [--fault-quota ..] [--fault-500 ..] [--fault-529 ..]
[--fault-timeout ..] [--fault-reset ..] [--fault-malformed ..] [--truncate-state-tokens N]
[--position-bias B] [--require-token TOKEN] [--answerer lexical|local:minilm-zeroshot] [--seed 0]
[--tls-cert cert.pem --tls-key key.pem]``.

Modules: :mod:`~workbench.emulator.server` (routing, faults, admin API on aiohttp's HTTP server,
``run_emulator``; validation and rendering per wire format are the emulator halves of
:mod:`workbench.providers.dialects`),
:mod:`~workbench.emulator.faults` (:class:`FaultConfig`), :mod:`~workbench.emulator.answering`
(tokenizer and answerers) and :mod:`~workbench.emulator.process` (``run_emulator_process``).

In Python: ``with run_emulator(port=0, rate_limit=0.1) as emu: emu.base_url, emu.stats`` (a thread of
the calling process; ``ssl_certfile=, ssl_keyfile=`` serve HTTPS), or ``with run_emulator_process(port=0, latency_ms=100) as emu: ...`` (a child
``workbench emulator`` process with the same handle surface; use it for throughput benchmarks, since
an in-thread server shares the caller's GIL).
"""

from workbench.emulator.answering import (
    Answerer,
    LexicalAnswerer,
    ProviderAnswerer,
    answerer_from_spec,
    render,
    server_token_count,
    truncate_tokens,
)
from workbench.emulator.faults import PUBLISHED_LATENCY_MS, FaultConfig
from workbench.emulator.process import EmulatorProcess, run_emulator_process
from workbench.emulator.server import EmulatorServer, EmulatorStats, run_emulator
from workbench.providers.dialects import Reject
from workbench.providers.dialects.perplexity import PERPLEXITY_LIMITS
from workbench.providers.dialects.systemone import CLEF_LIMITS, Limits, validate_system_one

__all__ = [
    "CLEF_LIMITS",
    "PERPLEXITY_LIMITS",
    "PUBLISHED_LATENCY_MS",
    "Answerer",
    "EmulatorProcess",
    "EmulatorServer",
    "EmulatorStats",
    "FaultConfig",
    "LexicalAnswerer",
    "Limits",
    "ProviderAnswerer",
    "Reject",
    "answerer_from_spec",
    "render",
    "run_emulator",
    "run_emulator_process",
    "server_token_count",
    "truncate_tokens",
    "validate_system_one",
]
