"""Run a schema over a dataset through providers: concurrency, rate, retries, cache, resume.

One run = one provider × one schema × the dataset's chosen splits. The loop:

1. plan (:mod:`workbench.runner.plan`): work units (item × question slice) and cache keys;
2. skip units already answered in this run (resume), answer units whose key is in ``calls``
   from the cache (no call), and ask the rest;
3. remote providers: ``concurrency`` asyncio workers share the provider's one HTTP client, a
   token bucket (``rate`` requests/s), retries by :class:`ErrorKind` with jittered backoff and a
   per-call timeout; in-process providers answer chunks through ``decide_batch``;
4. answers and calls are written in batches (one transaction per :data:`BATCH_ROWS` answers or
   :data:`BATCH_SECONDS`), and every response is journaled at once (before its worker sends the
   next request) so a SIGKILL loses only the calls in flight (see :mod:`workbench.store.calls`);
   the writes run in the recorder's own thread and are never cancelled (a taken batch is written
   or, when its write fails, put back and the error raised);
5. at the end the store is counted: the run is ``done`` (or ``stopped``) only when every planned
   item × question has its row; otherwise this session's leftover journal is folded in and the
   pairs answered again from the cache, and what still has no row makes the run ``incomplete``
   (exit code 7, :mod:`workbench.runner.outcome`).

Every item × question ends as an answer or a failure row (``failure_kind`` + message, ``probs``
NULL) — a failure is never written as a probability. ``authentication`` and ``quota`` failures
and ``--max-cost`` stop further calls; the units left are recorded as ``not_asked`` so that
``workbench run --resume RUN_ID`` asks them later.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from workbench.errors import AnswerError, WorkbenchError
from workbench.providers.base import DecisionRequest, DecisionResult, ErrorKind, ProviderError
from workbench.providers.registry import ProviderContext, check_ready, get_provider, public_spec
from workbench.reporting import Reporter, default_reporter
from workbench.runner.plan import KEY_VERSION, QuestionSlice, WorkUnit, build_units, plan_slices
from workbench.schema import DecisionSchema
from workbench.schema.answers import normalise_answer
from workbench.store import calls as calls_store
from workbench.store.db import duckdb_settings
from workbench.wording import article

#: Answers per write transaction, and the longest time an answer waits in memory (its call is in the
#: journal meanwhile). A transaction costs ~13 ms of CPU whatever its size (registering the Arrow
#: batches, planning both INSERTs, the commit) and ~30 µs per answer row: at 320 calls/s, one
#: transaction a second spent ~45 µs per call on the fixed part, one every 4 s ~12 µs.
BATCH_ROWS = 4096
BATCH_SECONDS = 4.0
#: Requests per ``decide_batch`` call for in-process providers.
LOCAL_CHUNK = 256
#: Attempts per error kind (first try included); kinds not listed are never retried.
RETRY_ATTEMPTS: dict[ErrorKind, int] = {
    ErrorKind.RATE_LIMIT: 6,
    ErrorKind.SERVER: 2,
    ErrorKind.TIMEOUT: 2,
    ErrorKind.NETWORK: 2,
}
#: First backoff and its cap, seconds; the delay doubles per attempt with "equal jitter".
BACKOFF_BASE_S: dict[ErrorKind, float] = {ErrorKind.RATE_LIMIT: 0.5}
BACKOFF_DEFAULT_BASE_S = 0.25
BACKOFF_CAP_S = 8.0
#: Workers start spread over this many seconds ("slow start"): responses of a steady-latency
#: server then arrive spread out instead of in one burst of ``concurrency`` that queues behind
#: the event loop (measured: 85 % → 90+ % of the ideal rate at 100 ms, concurrency 32).
RAMP_UP_S = 0.1
#: DuckDB settings while the run asks and writes (put back afterwards). One thread: the loop's only
#: queries are the recorder's batch writes (a few hundred rows each), which a second DuckDB thread
#: does not speed up but costs CPU in scheduling (bench/runner.py: ~0.1 ms of CPU per call less).
LOOP_SETTINGS: dict[str, Any] = {"threads": 1}
#: Least seconds between two progress updates (a rich bar redraws 4 times a second; an update per
#: call cost the CLI more than the bar shows). The last update is always made.
PROGRESS_EVERY_S = 0.1
#: Kinds after which no further call is made in this run.
STOP_KINDS = {ErrorKind.AUTH, ErrorKind.QUOTA}
NOT_ASKED = "not_asked"
INTERNAL = "internal_error"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: everything answered so far is committed; ``run_id`` can be resumed."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        super().__init__(f"{run_id} interrupted; continue with `workbench run --resume {run_id}`")


@dataclass
class RunOptions:
    """How to run (stored in ``runs.params`` so ``--resume`` repeats it; no secrets here)."""

    splits: list[str] | None = None  # None: every split but train
    limit: int | None = None  # first N items by id (after the split filter)
    concurrency: int = 8
    rate: float | None = None  # requests per second (token bucket)
    max_cost: float | None = None  # USD; stop before exceeding
    timeout: float = 5.0  # per call, seconds
    questions_per_request: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise WorkbenchError(f"`concurrency` {self.concurrency} must be at least 1")
        if self.rate is not None and self.rate <= 0:
            raise WorkbenchError(f"`rate` {self.rate} must be > 0 requests per second")
        if self.timeout <= 0:
            raise WorkbenchError(f"`timeout` {self.timeout} must be > 0 seconds")
        if self.max_cost is not None and self.max_cost < 0:
            raise WorkbenchError(f"`max_cost` {self.max_cost} must be ≥ 0 USD")
        if self.limit is not None and self.limit < 1:
            raise WorkbenchError(f"`limit` {self.limit} must be at least 1")


# -- retry policy and rate limit ------------------------------------------------------------------
def backoff_delay(
    kind: ErrorKind, attempt: int, *, retry_after: float | None = None, rng: random.Random | None = None
) -> float:
    """Seconds to wait before attempt ``attempt + 1``.

    ``Retry-After`` wins when the provider sent one (capped at 60 s). Otherwise
    ``d = min(cap, base * 2**(attempt-1))`` and the delay is uniform in ``[d/2, d]`` ("equal
    jitter": spreads retries of many workers without ever retrying immediately).
    """
    if retry_after is not None and retry_after >= 0:
        return min(float(retry_after), 60.0)
    base = BACKOFF_BASE_S.get(kind, BACKOFF_DEFAULT_BASE_S)
    d = min(BACKOFF_CAP_S, base * 2 ** max(attempt - 1, 0))
    return d / 2 + (rng or random).uniform(0, d / 2)


class TokenBucket:
    """At most ``rate`` acquisitions per second on average, bursts up to ``capacity``.

    Waiters are served in arrival order; the bucket holds no thread, only timestamps.
    """

    def __init__(self, rate: float, capacity: float = 1.0):
        self.rate = float(rate)
        self.capacity = max(float(capacity), 1.0)
        self._tokens = self.capacity
        self._last = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens < 1.0:
                await asyncio.sleep((1.0 - self._tokens) / self.rate)
                self._last = time.monotonic()
                self._tokens = 0.0
            else:
                self._tokens -= 1.0


_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


class _Scrubber:
    """Removes credential values found in the environment from any text that may be stored."""

    def __init__(self, env: Mapping[str, str] | None):
        self.secrets = sorted(
            {v for k, v in (env or {}).items() if _SECRET_ENV.search(k) and v and len(v) >= 6}, key=len, reverse=True
        )

    def __call__(self, text: str | None) -> str | None:
        """``text`` as stored: scrubbed and cut to 500 characters."""
        return None if text is None else self.full(text)[:500]

    def full(self, text: str) -> str:
        """``text`` with every credential value replaced by ``***``, whole (for the run summary)."""
        for s in self.secrets:
            text = text.replace(s, "***")
        return text


# -- recording ------------------------------------------------------------------------------------
@dataclass
class _Counters:
    units_total: int = 0
    units_skipped: int = 0  # already answered earlier in this run
    cache_hits: int = 0
    requests: int = 0  # requests that left the process (retries included)
    new_calls: int = 0  # successful calls this time
    retries: int = 0
    answered: int = 0
    failed: int = 0
    cost_paid: float = 0.0
    cost_unknown: int = 0
    tokens: int = 0
    units_done: int = 0
    reused_own_calls: int = 0  # answered from calls this run paid for before an interruption
    emulated: bool = False  # some answer came from `workbench emulator` (this session or its cache)
    t_start: float = field(default_factory=time.perf_counter)


@dataclass
class _Batch:
    """Rows taken from the recorder's buffers, and the journal segments that hold their calls."""

    calls: list[dict]
    answers: list[dict]
    segments: list[Path]


class _Recorder:
    """Buffers answer and call rows and writes them in batches (one transaction each).

    Every write runs in the recorder's own writer thread, one at a time, in the order taken. A
    batch taken from the buffers is never dropped: its write is never cancelled (a caller that is
    cancelled while it waits leaves the write to finish; :meth:`flush_now` and :meth:`close` wait
    for it), and a write that fails puts its rows back for the next one and raises. Journal
    segments are deleted only once the rows they cover are committed.
    """

    def __init__(
        self,
        con,
        run_id: str,
        spec: str,
        model: str | None,
        slices: Sequence[QuestionSlice],
        scrub: _Scrubber,
        journal: calls_store.CallJournal,
    ):
        self.con = con.cursor()  # the flush thread's own connection to the same database
        self.run_id, self.spec, self.model = run_id, spec, model
        self.slices = slices
        self.scrub = scrub
        self.journal = journal
        self.answers: list[dict] = []
        self.calls: list[dict] = []
        self.counters = _Counters()
        self.last_flush = time.monotonic()
        # one thread of our own: a write never queues behind other work of the loop's default
        # executor, and writes commit in the order they were taken
        self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-write")
        self._failed: list[_Batch] = []  # batches whose write raised: retried by the next write
        self._failed_lock = threading.Lock()
        self.progress_cb: Callable[[], None] | None = None  # the reporter's tick
        self.replace = True  # False for a run with no rows yet: no earlier answers to delete
        self.first_failures: dict[str, str] = {}  # failure kind -> its first message, whole and scrubbed

    # rows -----------------------------------------------------------------------------------------
    def failure(
        self,
        unit: WorkUnit,
        kind: str,
        message: str,
        *,
        latency_ms: float | None = None,
        questions: Sequence[str] | None = None,
    ) -> None:
        qids = questions if questions is not None else self.slices[unit.slice_index].question_ids
        msg = self.scrub(message)
        if kind not in self.first_failures:
            self.first_failures[kind] = self.scrub.full(message)
        for qid in qids:
            self.answers.append(
                {
                    "run_id": self.run_id,
                    "item_id": unit.item_id,
                    "question": qid,
                    "probs": None,
                    "failure_kind": kind,
                    "failure_message": msg,
                    "latency_ms": latency_ms,
                    "model": None,
                    "cache_key": unit.cache_key,
                    "cached": False,
                }
            )
        self.counters.failed += len(qids)
        self.counters.units_done += 1
        self._tick()

    def result(
        self, unit: WorkUnit, result: DecisionResult, *, cached: bool, call_row: dict | None, fresh: bool = True
    ) -> None:
        """Answer rows for one response.

        ``cached`` (stored) says another run paid for the call; ``fresh`` (counters) says the call
        was made just now — a call this run paid for before a crash is neither.
        """
        sl = self.slices[unit.slice_index]
        n_q = len(sl.question_ids)
        cost = result.cost_usd
        if result.emulated:
            self.counters.emulated = True
        tokens = result.input_tokens
        share_cost = None if cost is None else cost / n_q
        model = result.model or self.model
        for pos, qid in enumerate(sl.question_ids):
            base: dict[str, Any] = {
                "run_id": self.run_id,
                "item_id": unit.item_id,
                "question": qid,
                "model": model,
                "latency_ms": result.latency_ms,
                "cache_key": unit.cache_key,
                "cached": cached,
                "cost_usd": share_cost,
                "input_tokens": None if tokens is None else tokens // n_q + (tokens % n_q if pos == 0 else 0),
            }
            ans = result.answers.get(qid)
            if ans is not None:
                # the vector itself (never changed in place): answers_table hands it to Arrow as it is,
                # ten times cheaper per row than a list of Python floats
                base.update(probs=ans.probs, deviation=float(ans.deviation), vendor_confidence=ans.vendor_confidence)
                self.counters.answered += 1
            else:
                kind, msg = result.failures.get(qid, (ErrorKind.MISSING, f"no answer for question {qid!r}"))
                kind_name = str(getattr(kind, "value", kind))
                base.update(probs=None, failure_kind=kind_name, failure_message=self.scrub(msg))
                if kind_name not in self.first_failures:
                    self.first_failures[kind_name] = self.scrub.full(msg)
                self.counters.failed += 1
            self.answers.append(base)
        self.counters.units_done += 1
        if fresh:
            self.counters.new_calls += 1
            if cost is None:
                self.counters.cost_unknown += 1
            else:
                self.counters.cost_paid += cost
            self.counters.tokens += tokens or 0
            if call_row is not None:
                self.calls.append(call_row)
                self.journal.append(call_row)
        elif cached:
            self.counters.cache_hits += 1
        else:
            self.counters.reused_own_calls += 1
        self._tick()

    def _tick(self) -> None:
        if self.progress_cb is not None:
            self.progress_cb()

    # writes -----------------------------------------------------------------------------------------
    def due(self) -> bool:
        return len(self.answers) >= BATCH_ROWS or (
            bool(self.answers) and time.monotonic() - self.last_flush >= BATCH_SECONDS
        )

    def take(self) -> _Batch:
        """The buffered rows (with those of failed writes) and the journal segments covering them."""
        with self._failed_lock:
            failed, self._failed = self._failed, []
        calls, answers = self.calls, self.answers
        self.calls, self.answers = [], []
        segment = self.journal.rotate()
        self.last_flush = time.monotonic()
        return _Batch(
            calls=[r for b in failed for r in b.calls] + calls,
            answers=[r for b in failed for r in b.answers] + answers,
            segments=[p for b in failed for p in b.segments] + ([segment] if segment is not None else []),
        )

    def _write(self, batch: _Batch) -> None:
        """One transaction (in the writer thread); on failure the batch goes back for the next write."""
        try:
            calls_store.write_batch(self.con, batch.calls, batch.answers, replace=self.replace)
        except BaseException:
            with self._failed_lock:
                self._failed.append(batch)
            raise
        for segment in batch.segments:
            segment.unlink(missing_ok=True)

    def submit(self) -> concurrent.futures.Future:
        """Take the buffered rows and queue their write; the returned future is never cancelled."""
        return self._writer.submit(self._write, self.take())

    async def flush_async(self) -> None:
        """Write the buffered rows without blocking the event loop.

        The write is shielded: cancelling the caller does not cancel it (the next :meth:`flush_now`
        or :meth:`close` waits for it). A failed write raises here, its rows kept for the next write.
        """
        await asyncio.shield(asyncio.wrap_future(self.submit()))

    def flush_now(self) -> None:
        """Write the buffered rows and wait: every write taken before this one has finished too."""
        self.submit().result()

    def close(self) -> None:
        """Wait for queued writes and stop the writer thread."""
        self._writer.shutdown(wait=True)


def call_row(unit: WorkUnit, spec: str, model: str | None, run_id: str, result: DecisionResult) -> dict | None:
    """The ``calls`` row for a fresh response; None when it must not be cached.

    Only complete responses are cached: one with a refused, missing or malformed question is
    asked again by ``--resume``.
    """
    if result.raw is None or result.failures:
        return None
    return {
        "cache_key": unit.cache_key,
        "provider": spec,
        "model": model,
        # as received when the body was System One already (json.loads reads it back to ``raw``)
        "response": (
            result.raw_text
            if result.raw_text is not None
            else json.dumps(result.raw, ensure_ascii=False, separators=(",", ":"))
        ),
        "model_answered": result.model,
        "request_id": result.request_id,
        "latency_ms": result.latency_ms,
        "input_tokens": result.input_tokens,
        "cost_usd": result.cost_usd,
        "run_id": run_id,
        "emulated": result.emulated,
    }


def result_from_cache(sl: QuestionSlice, row: dict) -> DecisionResult:
    """Rebuild a :class:`DecisionResult` from a cached System One body (same normalisation)."""
    raw = json.loads(row["response"])
    answers, failures = {}, {}
    recorded = raw.get("answers") or {}
    for qid, q in sl.schema.questions.items():
        try:
            answers[qid] = normalise_answer(q, recorded.get(qid), question_id=qid)
        except AnswerError as exc:
            failures[qid] = (ErrorKind.MALFORMED, str(exc))
    tokens = row.get("input_tokens")
    return DecisionResult(
        answers=answers,
        failures=failures,
        model=row.get("model_answered"),
        request_id=row.get("request_id"),
        input_tokens=None if tokens is None else int(tokens),
        cost_usd=row.get("cost_usd"),
        latency_ms=row.get("latency_ms"),
        raw=raw,
        emulated=bool(row.get("emulated")),
    )


# -- budget ---------------------------------------------------------------------------------------
class _Budget:
    """``--max-cost``: reserve an estimate before each call, stop when it would exceed the cap.

    The estimate is the price table × the token estimate when the provider exposes its vendor,
    else the largest cost seen so far; before any cost is known only one call is in flight.
    """

    def __init__(self, max_cost: float | None, provider: Any):
        self.max_cost = max_cost
        self.provider = provider
        self.spent = 0.0
        self.reserved = 0.0
        self.max_seen: float | None = None
        self.in_flight = 0
        self.first_done = asyncio.Event()

    def _estimate(self, request: DecisionRequest) -> float | None:
        endpoint = getattr(self.provider, "endpoint", None)
        vendor = getattr(endpoint, "vendor", None)
        if vendor:
            try:
                from workbench.providers.prices import cost_usd
                from workbench.providers.tokens import estimate_request_tokens

                est = cost_usd(
                    vendor,
                    getattr(self.provider, "model", None),
                    estimate_request_tokens(request.state, request.schema.to_wire()),
                )
                if est is not None:
                    return max(est, self.max_seen or 0.0)
            except Exception:  # an estimate is a courtesy; fall back to what was observed
                pass
        return self.max_seen

    async def reserve(self, request: DecisionRequest) -> tuple[bool, float]:
        if self.max_cost is None:
            return True, 0.0
        est = self._estimate(request)
        while est is None and self.in_flight > 0 and not self.first_done.is_set():
            await self.first_done.wait()
            est = self._estimate(request)
        est = est or 0.0
        if self.spent + self.reserved + est > self.max_cost:
            return False, 0.0
        self.reserved += est
        self.in_flight += 1
        return True, est

    def settle(self, reserved: float, actual: float | None) -> str | None:
        """Book a call; return a stop message when the cap cannot be enforced or is reached."""
        if self.max_cost is None:
            return None
        self.in_flight -= 1
        self.reserved -= reserved
        self.first_done.set()
        if actual is None:
            return "the price of this model is unknown, so the cost limit cannot be enforced"
        self.spent += actual
        self.max_seen = max(self.max_seen or 0.0, actual)
        return None


# -- the loop -------------------------------------------------------------------------------------
@dataclass
class _Stop:
    kind: str | None = None
    message: str = ""


def _unexpected(exc: BaseException) -> ProviderError:
    err = ProviderError(ErrorKind.MALFORMED, f"{type(exc).__name__}: {exc}")
    err.kind_override = INTERNAL  # type: ignore[attr-defined]
    return err


def _kind_name(err: ProviderError) -> str:
    return getattr(err, "kind_override", None) or err.kind.value


async def _ask(
    provider,
    request: DecisionRequest,
    *,
    timeout: float,
    bucket: TokenBucket | None,
    rec: _Recorder,
    stop: _Stop,
    rng: random.Random,
) -> tuple[DecisionResult | None, ProviderError | None]:
    attempt = 0
    while True:
        attempt += 1
        if bucket is not None:
            await bucket.acquire()
        try:
            async with asyncio.timeout(timeout):  # cheaper than wait_for: no task per call
                result = await provider.decide(request)
            rec.counters.requests += 1
            return result, None
        except ProviderError as exc:
            err = exc
        except TimeoutError:
            err = ProviderError(ErrorKind.TIMEOUT, f"no answer within {timeout:g} s")
        except Exception as exc:  # a bug or an unmapped library error: stored, never retried
            err = _unexpected(exc)
        if err.sent:
            rec.counters.requests += 1
        if (
            attempt >= RETRY_ATTEMPTS.get(err.kind, 1)
            or not err.sent
            or stop.kind is not None
            or getattr(err, "kind_override", None)
        ):
            return None, err
        rec.counters.retries += 1
        await asyncio.sleep(backoff_delay(err.kind, attempt, retry_after=err.retry_after, rng=rng))


async def _drive_remote(
    provider, units: list[WorkUnit], rec: _Recorder, opts: RunOptions, stop: _Stop, spec: str, run_id: str
) -> None:
    bucket = TokenBucket(opts.rate) if opts.rate else None
    budget = _Budget(opts.max_cost, provider)
    rng = random.Random(0x5EED)
    pending = iter(units)
    model = getattr(provider, "model", None)

    workers_done = asyncio.Event()

    async def flusher() -> None:
        # stopped through ``workers_done``, never cancelled: a cancellation could land while a taken
        # batch waits for its write (a cancelled executor job never runs: the batch was lost)
        while not workers_done.is_set():
            await asyncio.sleep(0.05)
            if rec.due():
                await rec.flush_async()

    async def worker(position: int) -> None:
        await asyncio.sleep(RAMP_UP_S * position / opts.concurrency)
        for unit in pending:
            if stop.kind is not None:
                rec.failure(unit, NOT_ASKED, f"not asked: {stop.message}")
                continue
            sl = rec.slices[unit.slice_index]
            request = DecisionRequest(schema=sl.schema, state=unit.state, images=unit.images, item_id=unit.item_id)
            ok, reserved = await budget.reserve(request)
            if not ok:
                if stop.kind is None:
                    stop.kind, stop.message = (
                        "budget",
                        (f"the cost limit of {opts.max_cost:g} USD reached (spent {budget.spent:.6f} USD)"),
                    )
                rec.failure(unit, NOT_ASKED, f"not asked: {stop.message}")
                continue
            t0 = time.perf_counter()
            rec.journal.sent(unit.cache_key)  # before it leaves: a SIGKILL now leaves a billed, unanswered call
            result, err = await _ask(
                provider, request, timeout=opts.timeout, bucket=bucket, rec=rec, stop=stop, rng=rng
            )
            if err is not None:
                rec.journal.settled(unit.cache_key)
                budget.settle(reserved, 0.0)
                rec.failure(unit, _kind_name(err), str(err), latency_ms=(time.perf_counter() - t0) * 1000)
                if err.kind in STOP_KINDS and stop.kind is None and not getattr(err, "kind_override", None):
                    stop.kind, stop.message = err.kind.value, f"the run stopped after {article(err.kind.value)} failure"
                continue
            assert result is not None  # _ask returns a result or an error
            row = call_row(unit, spec, model, run_id, result)
            rec.result(unit, result, cached=False, call_row=row)  # journals the call row (lands the marker)
            if row is None:
                rec.journal.settled(unit.cache_key)
            why = budget.settle(reserved, result.cost_usd)
            if why and stop.kind is None:
                stop.kind, stop.message = "budget", why

    flush_task: asyncio.Future[None] = asyncio.create_task(flusher())
    work: asyncio.Future[Any] = asyncio.gather(*(worker(i) for i in range(opts.concurrency)))
    try:
        await asyncio.wait([work, flush_task], return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            # the flusher ends early only when a write failed: raise its error, and stop asking in
            # the ``finally`` (nothing more could be stored; the journal keeps what was answered)
            flush_task.result()
        await work
    finally:
        if not work.done():  # a write failed, or this task was cancelled (Ctrl-C)
            work.cancel()
            await asyncio.wait([work])
            if not work.cancelled():
                work.exception()  # retrieved: the workers' cancellation is not an error to log
        workers_done.set()
        try:
            await flush_task  # its last write finishes; a write error propagates
        finally:
            try:
                await provider.aclose()
            except Exception:
                pass


async def _drive_local(provider, units: list[WorkUnit], rec: _Recorder, spec: str, run_id: str) -> None:
    model = getattr(provider, "model", None)
    for start in range(0, len(units), LOCAL_CHUNK):
        chunk = units[start : start + LOCAL_CHUNK]
        requests = [
            DecisionRequest(schema=rec.slices[u.slice_index].schema, state=u.state, images=u.images, item_id=u.item_id)
            for u in chunk
        ]
        t0 = time.perf_counter()
        try:
            outcomes = await asyncio.to_thread(provider.decide_batch, requests)
        except ProviderError as exc:
            outcomes = [exc] * len(chunk)
        except Exception as exc:
            outcomes = [_unexpected(exc)] * len(chunk)
        ms = (time.perf_counter() - t0) * 1000 / max(len(chunk), 1)
        rec.counters.requests += len(chunk)
        for unit, out in zip(chunk, outcomes):
            if isinstance(out, ProviderError):
                rec.failure(unit, _kind_name(out), str(out), latency_ms=ms)
            else:
                rec.result(unit, out, cached=False, call_row=call_row(unit, spec, model, run_id, out))
        if rec.due():
            await rec.flush_async()


# -- public entry points --------------------------------------------------------------------------
def _run_task(reporter: Reporter, enabled: bool, description: str, total: int):
    """The reporter's progress task for one run (a no-op task when progress is off)."""
    from workbench.reporting import SilentReporter

    return (reporter if enabled else SilentReporter()).task(description, total)


def build_provider(
    con,
    spec: str,
    *,
    dataset: str,
    dataset_version: int,
    options: RunOptions,
    env: Mapping[str, str] | None = None,
    transport: Any = None,
    settings: dict | None = None,
):
    """The provider named by ``spec``, with what its factory may need (training data, env, timeout).

    HTTP providers make their own client (:func:`workbench.providers.http.build_client`: httpx on
    aiohttp's pool, proxies and CA settings from the environment) unless a transport is injected.
    A provider that could only fail (no API key, an unknown model: :func:`check_ready`) raises here,
    before any run is created or resumed.
    """
    provider = get_provider(
        spec,
        context=ProviderContext(
            con=con,
            dataset=dataset,
            dataset_version=dataset_version,
            env=env,
            timeout=options.timeout,
            transport=transport,
            settings={"max_connections": max(options.concurrency, 1), **(settings or {})},
        ),
    )
    try:
        check_ready(provider)
    except WorkbenchError:
        _run_coroutine(provider.aclose())  # its HTTP client, never used
        raise
    return provider


def execute_run(
    con,
    run_id: str,
    *,
    env: Mapping[str, str] | None = None,
    transport: Any = None,
    progress: bool = True,
    provider: Any = None,
    settings: dict | None = None,
    reporter: Reporter | None = None,
) -> dict:
    """Run (or continue) ``run_id`` until every item × question has an answer or a failure.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The store (read-write).
    run_id : str
        A run made by :func:`start_run`; its ``params`` hold the :class:`RunOptions`.
    env : mapping, optional
        Credentials and base URLs for HTTP providers (default ``os.environ``); never stored.
    transport : httpx.AsyncBaseTransport, optional
        Injected into HTTP providers (tests).
    progress : bool, default=True
        Report progress (units done, rate, failures, cost) through ``reporter``.
    reporter : Reporter, optional
        Where progress goes (:mod:`workbench.reporting`; default: the ``workbench`` logger, no bar).
    provider : Provider, optional
        A ready provider instance (else built from the run's spec).

    Returns
    -------
    summary : dict
        Also stored in ``runs.summary``: counts, failures by kind, tokens, cost, latency p50/p95.
    """
    import os

    from workbench.store.datasets import load_items
    from workbench.store.runs import get_run, load_stored_schema, update_run

    run = get_run(con, run_id)
    run_id = run["run_id"]
    params = dict(run["params"] or {})
    opts = RunOptions(**{k: v for k, v in params.get("options", {}).items() if k in RunOptions.__dataclass_fields__})
    env = os.environ if env is None else env
    schema = load_stored_schema(con, run["schema_hash"])
    spec = run["provider"]
    if provider is None:
        provider = build_provider(
            con,
            spec,
            dataset=run["dataset"],
            dataset_version=int(run["dataset_version"]),
            options=opts,
            env=env,
            transport=transport,
            settings=settings,
        )
        probe = params.get("probe")
        if probe:
            # a probed run (experiment `probes:`) resumes with its probe: the transformed request is
            # sent and the answers mapped back, exactly as its first session did (same cache keys)
            from workbench.probes import Probe, ProbedProvider

            provider = ProbedProvider(provider, Probe(probe["name"], int(probe.get("seed", 0))))
    model = getattr(provider, "model", None)
    dialect = getattr(provider, "dialect", None)
    limits = getattr(provider, "limits", None)
    slices = plan_slices(
        schema, max_questions=getattr(limits, "max_questions", None), questions_per_request=opts.questions_per_request
    )

    recovered = calls_store.recover_journal(con)
    items = load_items(con, run["dataset"], int(run["dataset_version"]), splits=run["splits"] or None, limit=opts.limit)
    render = getattr(provider, "render_body", None)  # the body text exactly as the dialect sends it

    # The endpoint is part of the key: answers from an emulator or a proxy must never be served
    # as answers of the real service (the public URL has no query string, so no secret).
    endpoint = getattr(getattr(provider, "endpoint", None), "public_url", None)
    key_spec = f"{spec}@{endpoint}" if endpoint else spec
    units = build_units(
        items,
        slices,
        spec=key_spec,
        model=model,
        dialect=dialect,
        keyed_by_item=bool(getattr(provider, "keyed_by_item", False)),
        render=render if callable(render) else None,
    )

    done = calls_store.answered_questions(con, run_id)
    todo = [u for u in units if not set(slices[u.slice_index].question_ids) <= done.get(u.item_id, set())]
    journal = calls_store.CallJournal(calls_store.journal_dir(con), run_id)
    rec = _Recorder(con, run_id, spec, model, slices, _Scrubber(env), journal)
    rec.replace = calls_store.has_answers(con, run_id)
    rec.counters.units_total = len(units)
    rec.counters.units_skipped = len(units) - len(todo)
    update_run(con, run_id, status="running", model=model, dialect=dialect)

    cached = calls_store.lookup_calls(con, [u.cache_key for u in todo])
    reporter = reporter or default_reporter()
    to_ask: list[WorkUnit] = []
    stop = _Stop()
    status = "done"
    with _run_task(reporter, progress, spec, len(todo)) as task, duckdb_settings(con, LOOP_SETTINGS):
        shown = [0.0]  # when the progress was last updated

        def tick(*, last: bool = False) -> None:
            # at most PROGRESS_EVERY_S apart (a bar redraws 4 times a second), and once at the end
            now = time.perf_counter()
            if now - shown[0] < PROGRESS_EVERY_S and not last:
                return
            shown[0] = now
            c = rec.counters
            elapsed = max(now - c.t_start, 1e-9)
            task.update(c.units_done, f"{c.units_done / elapsed:7.1f}/s fail {c.failed} ${c.cost_paid:.4f}")

        rec.progress_cb = tick if progress else None
        try:
            for u in todo:
                row = cached.get(u.cache_key)
                if row is None:
                    to_ask.append(u)
                    continue
                res = result_from_cache(slices[u.slice_index], row)
                rec.result(u, res, cached=row.get("run_id") != run_id, call_row=None, fresh=False)
                if rec.due():
                    rec.flush_now()
            if to_ask and hasattr(provider, "decide_batch"):
                _run_coroutine(_drive_local(provider, to_ask, rec, spec, run_id))
            elif to_ask:
                _run_coroutine(_drive_remote(provider, to_ask, rec, opts, stop, spec, run_id))
            else:
                _run_coroutine(provider.aclose())  # nothing to ask: release the HTTP client
        except BaseException as exc:
            status = "interrupted"
            if progress:
                tick(last=True)
            try:
                rec.flush_now()  # also retries a batch whose write failed; if this raises, the journal stays
            finally:
                rec.close()
            journal.close(delete=True)
            summary = _summary(con, run, rec, stop, recovered, status)
            update_run(con, run_id, status=status, summary=summary, emulated=summary["emulated"])
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
                raise RunInterrupted(run_id) from None
            raise
        try:
            rec.flush_now()
            journal.close(delete=True)
            # "done" only when the store holds a row for every planned item × question
            item_ids = list(dict.fromkeys(u.item_id for u in units))
            question_ids = [q for sl in slices for q in sl.question_ids]
            missing = calls_store.count_missing_answers(con, run_id, item_ids, question_ids)
            if missing:
                reporter.log(
                    f"{run_id}: {missing} item × question(s) have no row after the last write; "
                    "folding in this session's journal"
                )
                recovered += _fold_in(con, rec, units, item_ids, question_ids)
                missing = calls_store.count_missing_answers(con, run_id, item_ids, question_ids)
        finally:
            if progress:
                tick(last=True)
            rec.close()
    if stop.kind is not None:
        status = "stopped"
    if missing:
        status = "incomplete"
    answered = calls_store.answered_model(con, run_id)
    summary = _summary(con, run, rec, stop, recovered, status)
    summary["model"] = answered or model
    summary["planned"] = len(item_ids) * len(question_ids)
    summary["missing"] = missing
    from datetime import datetime

    update_run(
        con,
        run_id,
        status=status,
        summary=summary,
        model=answered or model,
        finished_at=datetime.now(UTC).replace(tzinfo=None),
        emulated=summary["emulated"],
    )
    return summary


def _fold_in(con, rec: _Recorder, units: Sequence[WorkUnit], item_ids: list[str], question_ids: list[str]) -> int:
    """Answer the planned pairs that have no row from this session's leftover journal segments and
    the cache (no new call); return the calls recovered from the journal.

    A batch lost on its way to the store leaves its calls in a journal segment; the answers are
    rebuilt from them as ``--resume`` would. Failures of a lost batch have no call to rebuild from:
    they stay missing, and the run does not end ``done``.
    """
    recovered = calls_store.recover_journal(con, writer=rec.journal.writer, in_flight_billed=False)
    holes = calls_store.missing_answers(con, rec.run_id, item_ids, question_ids)
    todo = [u for u in units if holes.get(u.item_id, set()) & set(rec.slices[u.slice_index].question_ids)]
    cached = calls_store.lookup_calls(con, [u.cache_key for u in todo])
    counters, tick = rec.counters, rec.progress_cb
    rec.counters, rec.progress_cb = _Counters(), None  # the session's figures stay those of its requests
    rec.replace = True  # some questions of a unit may have their row
    try:
        for u in todo:
            row = cached.get(u.cache_key)
            if row is not None:
                res = result_from_cache(rec.slices[u.slice_index], row)
                rec.result(u, res, cached=row.get("run_id") != rec.run_id, call_row=None, fresh=False)
        rec.flush_now()
    finally:
        rec.counters, rec.progress_cb = counters, tick
    return recovered


def _summary(con, run: dict, rec: _Recorder, stop: _Stop, recovered: int, status: str) -> dict:
    c = rec.counters
    wall = time.perf_counter() - c.t_start
    out = {
        "run_id": run["run_id"],
        "name": run.get("name"),
        "provider": run["provider"],
        "dataset": run["dataset"],
        "dataset_version": int(run["dataset_version"]),
        "schema_hash": run["schema_hash"],
        "splits": run["splits"],
        "status": status,
        # answered by `workbench emulator`: cost_usd is what the real service would bill, not a bill
        "emulated": bool(c.emulated or run.get("emulated") or calls_store.run_is_emulated(con, run["run_id"])),
        "stop_reason": stop.message or None,
        "stop_kind": stop.kind,  # authentication | quota | budget | None (workbench.runner.outcome)
        # the first message of each failure kind of this session, whole (the store keeps 500 characters)
        "first_failures": dict(rec.first_failures),
        **calls_store.run_summary(con, run["run_id"]),
        "this_session": {
            "units": c.units_total,
            "units_already_answered": c.units_skipped,
            "cache_hits": c.cache_hits,
            "reused_own_calls": c.reused_own_calls,
            "requests_sent": c.requests,
            "new_calls": c.new_calls,
            "retries": c.retries,
            "calls_recovered_from_journal": recovered,
            "cost_paid_usd": c.cost_paid,
            "calls_with_unknown_cost": c.cost_unknown,
            "input_tokens": c.tokens,
            "wall_seconds": wall,
            "requests_per_second": c.requests / wall if wall > 0 else None,
        },
    }
    return out


def start_run(
    con,
    *,
    dataset: str,
    schema: DecisionSchema,
    provider_spec: str,
    options: RunOptions,
    dataset_version: int | None = None,
    run_name: str | None = None,
    experiment: str | None = None,
    variant: str | None = None,
) -> str:
    """Create the run row (status ``running``) and return its id; :func:`execute_run` fills it."""
    from workbench.store.datasets import latest_version
    from workbench.store.runs import create_run, default_run_splits

    version = dataset_version or latest_version(con, dataset)
    splits = options.splits or default_run_splits(con, dataset, version)
    if not splits:
        raise WorkbenchError(
            f"dataset {dataset!r} v{version} has no split to run on",
            hint="pass `splits` train to run on the training split",
        )
    spec = public_spec(provider_spec.strip())
    opts = asdict(options)
    opts["splits"] = splits
    return create_run(
        con,
        dataset=dataset,
        dataset_version=version,
        schema=schema,
        provider=spec,
        splits=splits,
        name=run_name,
        params={"options": opts, "key_version": KEY_VERSION},
        experiment=experiment,
        variant=variant,
    )


def _run_coroutine(coro):
    """``asyncio.run`` — or, inside a running event loop (Jupyter, Streamlit), the same in a worker
    thread, so the library call stays synchronous for its caller."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-run") as pool:
        return pool.submit(asyncio.run, coro).result()


def run_experiment(
    con,
    *,
    dataset: str,
    schema: DecisionSchema,
    provider_specs: Sequence[Any],
    splits: Sequence[str] | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    rate: float | None = None,
    max_cost: float | None = None,
    run_name: str | None = None,
    experiment: str | None = None,
    variant: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 5.0,
    questions_per_request: int | None = None,
    dataset_version: int | None = None,
    transport: Any = None,
    progress: bool = True,
    reporter: Reporter | None = None,
) -> list[str]:
    """Run ``schema`` over ``dataset`` with each provider in turn; return the run ids.

    Parameters mirror ``workbench run``. ``max_cost`` applies to each run. ``run_name`` gets
    the provider spec appended when several providers run. A ``provider_specs`` entry is a spec
    string, or an already built provider (run as it is, its ``spec`` recorded).
    """
    import os

    from workbench.store.datasets import latest_version

    opts = RunOptions(
        splits=list(splits) if splits else None,
        limit=limit,
        concurrency=concurrency,
        rate=rate,
        max_cost=max_cost,
        timeout=timeout,
        questions_per_request=questions_per_request,
    )
    if not provider_specs:
        raise WorkbenchError("no provider given", hint="pass `provider` SPEC, e.g. local:minilm-zeroshot")
    env = os.environ if env is None else env
    version = dataset_version or latest_version(con, dataset)
    # build (or check) every provider first: a bad spec or a missing setting fails before any run is created
    for built in (p for p in provider_specs if not isinstance(p, str)):
        check_ready(built)
    providers = [
        build_provider(con, spec, dataset=dataset, dataset_version=version, options=opts, env=env, transport=transport)
        if isinstance(spec, str)
        else spec
        for spec in provider_specs
    ]
    run_ids = []
    for spec, provider in zip(provider_specs, providers):
        spec = spec if isinstance(spec, str) else provider.spec
        name = run_name if (run_name is None or len(provider_specs) == 1) else f"{run_name}:{spec}"
        run_id = start_run(
            con,
            dataset=dataset,
            schema=schema,
            provider_spec=spec,
            options=opts,
            dataset_version=version,
            run_name=name,
            experiment=experiment,
            variant=variant,
        )
        run_ids.append(run_id)
        execute_run(con, run_id, env=env, transport=transport, progress=progress, provider=provider, reporter=reporter)
    return run_ids


def resume_run(
    con,
    run_id: str,
    *,
    env: Mapping[str, str] | None = None,
    transport: Any = None,
    progress: bool = True,
    reporter: Reporter | None = None,
    concurrency: int | None = None,
    rate: float | None = None,
    max_cost: float | None = None,
    timeout: float | None = None,
) -> dict:
    """Continue ``run_id``: ask only what has no answer yet (failures included); return the summary.

    Calls already paid for are answered from the cache (and from the crash journal), so an
    interrupted run is never paid twice. Options given here override the stored ones.
    """
    from workbench.store.runs import get_run, update_run

    run = get_run(con, run_id)
    params = dict(run["params"] or {})
    opts = dict(params.get("options", {}))
    for k, v in (("concurrency", concurrency), ("rate", rate), ("max_cost", max_cost), ("timeout", timeout)):
        if v is not None:
            opts[k] = v
    RunOptions(**{k: v for k, v in opts.items() if k in RunOptions.__dataclass_fields__})  # validate
    params["options"] = opts
    update_run(con, run["run_id"], params=params)
    return execute_run(con, run["run_id"], env=env, transport=transport, progress=progress, reporter=reporter)
