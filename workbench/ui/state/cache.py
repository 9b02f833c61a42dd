"""What the UI keeps between calls, sessions and servers, and the size decision behind it.

Cached values stay small whatever the run's size. The n × k probability matrix is never cached by
Streamlit (``st.cache_data`` pickles a copy per entry and unpickles one per hit): it is loaded when an
aggregate is computed, through a process-wide memo bounded in bytes (:data:`ARRAY_MEMO_BYTES`) so
that one page's aggregates share one load. Aggregates of a large run are kept in the store's
aggregate directory (:func:`kept`, :func:`kept_store`), so a later session or another server reads
them back instead of streaming the run again; :func:`reads_in_batches` decides which runs are large.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

import streamlit as st

from workbench.ui.state.store import read_connection

#: A store file at least this large keeps its store-wide aggregates (:func:`kept_store`) between servers.
KEEP_STORE_BYTES = 256 * 1024**2


def kept_store(path: str, token: tuple, description: tuple, compute: Any) -> Any:
    """Like :func:`kept`, for an aggregate of the whole store: keyed by the store's token (any write
    changes it), kept only for a store of :data:`KEEP_STORE_BYTES` or more (a small one is read in
    milliseconds, and a store that a run is writing would leave one file per token)."""
    from workbench.store import aggregate_cache as ac

    if int(token[1]) < KEEP_STORE_BYTES:
        return compute()
    return _kept_under(path, ac.aggregate_key(("store", tuple(token)), *description), compute)


#: Aggregates being written to the aggregate directory, by (store, key): the file is written by a thread
#: (hundreds of MB for a large run's grid points: a few tenths of a second the page need not wait for);
#: a read of the same key in this process waits for it.
_writing: dict[tuple[str, str], threading.Thread] = {}
_writing_lock = threading.Lock()


def _kept_under(path: str, key: str, compute: Any) -> Any:
    """The value kept under ``key`` in the store's aggregate directory, else ``compute()``'s (then kept,
    written in the background: :data:`_writing`); with ``compute=None`` the kept value or None. A value
    that cannot be read back (another pickle format) is computed again and rewritten."""
    import pickle

    from workbench.store import aggregate_cache as ac

    with _writing_lock:
        pending = _writing.get((path, key))
    if pending is not None:
        pending.join()
    raw = ac.load(path, key)
    if raw is not None:
        try:
            return pickle.loads(raw)  # noqa: S301 - written by this code next to the user's own store
        except Exception:  # noqa: BLE001 - an unreadable entry is recomputed (and rewritten)
            pass
    if compute is None:
        return None
    value = compute()
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def write() -> None:
        try:
            ac.save(path, key, payload)  # atomic: a reader sees the whole file or none
        finally:
            with _writing_lock:
                if _writing.get((path, key)) is threading.current_thread():
                    del _writing[(path, key)]

    writer = threading.Thread(target=write, name="workbench-keep", daemon=False)
    with _writing_lock:
        _writing[(path, key)] = writer
    writer.start()
    return value


#: Bytes of loaded answer arrays kept between calls (process-wide, least recently used first out);
#: an array set larger than this is not kept at all. ``WORKBENCH_UI_ARRAY_MEMO_MB`` overrides it.
ARRAY_MEMO_BYTES = int(float(os.environ.get("WORKBENCH_UI_ARRAY_MEMO_MB", "700")) * 1024**2)
_memo: OrderedDict[tuple, Any] = OrderedDict()
_memo_lock = threading.Lock()


def _nbytes(ans) -> int:
    return sum(int(getattr(v, "nbytes", 0)) for v in vars(ans).values())


def run_answers(path: str, token: tuple, run_id: str, question: str, splits: tuple[str, ...] | None = None):
    """:class:`workbench.answers.RunAnswers` of one run and question (n × k arrays).

    Not a Streamlit cache: kept in a process-wide memo bounded by :data:`ARRAY_MEMO_BYTES`, so a
    page's aggregates share one load and a run of any size costs at most one load's memory.
    Callers compute an aggregate from it and cache that, never the arrays.
    """
    from workbench.store.runs import load_answers

    key = (path, token, run_id, question, tuple(splits) if splits else None)
    with _memo_lock:
        if key in _memo:
            _memo.move_to_end(key)
            return _memo[key]
    with read_connection(path) as con:
        ans = load_answers(con, run_id, question, list(splits) if splits else None)
    size = _nbytes(ans)
    with _memo_lock:
        for old in [k for k in _memo if k[:2] != (path, token)]:  # the store changed: older loads are stale
            del _memo[old]
        while _memo and sum(_nbytes(v) for v in _memo.values()) + size > ARRAY_MEMO_BYTES:
            _memo.popitem(last=False)
        if size <= ARRAY_MEMO_BYTES:
            _memo[key] = ans
    return ans


@st.cache_data(show_spinner=False, max_entries=64)
def _run_state(path: str, token: tuple, run_id: str, question: str) -> tuple:
    """:func:`workbench.store.aggregate_cache.run_state`, read once per store token (a count over the run's answers)."""
    from workbench.store import aggregate_cache as ac

    with read_connection(path) as con:
        return ac.run_state(con, run_id, question)


def kept(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    description: tuple,
    compute: Any = None,
) -> Any:
    """The aggregate ``compute()`` returns, kept in the store's aggregate directory
    (:mod:`workbench.store.aggregate_cache`) under a key of the run's inputs, the code version and
    ``description`` (the loader's name and arguments): a later session, or another server, reads it
    back instead of streaming the run again. With ``compute=None`` only a kept value is returned
    (None when there is none): for figures a page computes on demand.

    Only what a library call returned is kept (a report, a surface, a display, a selection's dict);
    a value that cannot be read back (another pickle format) is computed again.
    """
    from workbench.store import aggregate_cache as ac

    return _kept_under(path, ac.aggregate_key(_run_state(path, token, run_id, question), *description), compute)


def reads_in_batches(path: str, token: tuple, run_id: str, question: str, split: str) -> bool:
    """Whether the library reads the split in batches (:func:`workbench.answers.reads_in_batches`, the decision
    ``workbench report`` and ``thresholds`` make): state functions then get aggregates and per-item figures from
    the streamed library functions, never the matrix. Pages do not ask: each figure's state function does."""
    from workbench.answers import stream_cells

    return _reads_in_batches(path, token, run_id, question, split, stream_cells())


@st.cache_data(show_spinner=False, max_entries=64)
def _reads_in_batches(path: str, token: tuple, run_id: str, question: str, split: str, cells: int) -> bool:
    """:func:`reads_in_batches` (``cells``, the library's cut-off, keys the cache), with bounds on the split's
    answers the library needs no count for: at most the run's own answer count (:func:`_run_state`), at least
    that count less the items of the other splits (a count joined with the items takes seconds on millions)."""
    from workbench.answers import reads_in_batches as decide
    from workbench.store.sources import StoreSource

    answers = _run_state(path, token, run_id, question)[4]  # ((run, count, latest), ...) of the run (and parent)
    bound = max((int(c) for _, c, _ in answers), default=0)
    with read_connection(path) as con:
        source = StoreSource(con, run_id)
        others = sum(
            int(v)
            for s, v in _split_sizes(path, token, source.run["dataset"], int(source.run["dataset_version"])).items()
            if s != split
        )
        return bool(decide(source, question, [split], at_most=bound, at_least=bound - others))


@st.cache_data(show_spinner=False, max_entries=16)
def _split_sizes(path: str, token: tuple, dataset: str, version: int) -> dict[str, int]:
    """:func:`workbench.store.aggregates.split_sizes` (items per split; not :func:`dataset_info`, whose label
    distributions take seconds on millions of items)."""
    from workbench.store.aggregates import split_sizes

    with read_connection(path) as con:
        return split_sizes(con, dataset, version)


def forget_answers() -> None:
    """Empty the process-wide memo of loaded answer arrays (:func:`run_answers`); the sidebar's Refresh."""
    with _memo_lock:
        _memo.clear()
