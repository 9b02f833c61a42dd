"""Thin Streamlit loaders over the library: which store, cached reads, session keys, widgets.

Reads go through :mod:`workbench.store.snapshot` (the live file read-only for one read when no
writer holds it, else a read-only copy taken when the store changed), so the UI never holds a lock
on the store a run is writing, and never copies a large store that nobody is writing.

Cached values stay small whatever the run's size: reports, binned reliability, confusion counts,
threshold surfaces without per-item coordinates, and at most three small arrays per item for the
Thresholds page (:func:`rule_points`). The n × k probability matrix is never cached by Streamlit
(``st.cache_data`` pickles a copy per entry and unpickles one per hit): it is loaded when an
aggregate is computed, through a process-wide memo bounded in bytes (:data:`ARRAY_MEMO_BYTES`) so
that one page's aggregates share one load.

Loaders are ``st.cache_data`` functions whose keys are small hashable ids: the store path, its
*token* (:func:`workbench.store.snapshot.store_token`, so a write invalidates the cache) and ids
such as a run id or a question. Each loader opens a snapshot and calls one library function
(``workbench.store``, ``workbench.metrics``, ``workbench.thresholds``, ``workbench.comparison``,
``workbench.shadow``); no figure is computed here, so the CLI computes the same numbers through
the same calls.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import streamlit as st

from workbench.errors import NotFoundError, WorkbenchError
from workbench.store import snapshot as _snap
from workbench.store.snapshot import store_token
from workbench.thresholds.choose import ThresholdOptions

#: Session-state keys shared across pages (one choice per browser tab).
KEY_DB = "db_path"
KEY_RUN = "run_id"
KEY_QUESTION = "question"
KEY_DATASET = "dataset"


# -- which store -----------------------------------------------------------------------------------
def _db_from_argv(argv: list[str]) -> str | None:
    """``streamlit run streamlit_app.py -- --db PATH`` puts ``--db PATH`` into ``sys.argv``."""
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return None


def default_db() -> str:
    """Store path from ``-- --db PATH``, else ``$WORKBENCH_DB``, else ``./workbench.duckdb``."""
    from workbench.store.db import default_db_path

    return str(Path(_db_from_argv(sys.argv[1:]) or default_db_path()).expanduser().resolve())


def db_path() -> str:
    """The store this tab reads (set once per session, changeable in the sidebar)."""
    if KEY_DB not in st.session_state or not st.session_state[KEY_DB]:
        st.session_state[KEY_DB] = default_db()
    return str(st.session_state[KEY_DB])


@contextmanager
def read_connection(path: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`workbench.store.snapshot.read_connection` of ``path`` (default: this tab's store)."""
    with _snap.read_connection(path or db_path()) as con:
        yield con


_preloading: set[str] = set()
_preload_lock = threading.Lock()


def preload(*modules: str) -> None:
    """Import ``modules`` in a background thread, once per server process: a page calls it first thing
    for the modules its figures import on first use and that take a second to load (the Thresholds page:
    ``scipy.stats``, for the exact binomial bounds), so they load while its first DuckDB query runs (the
    query releases the GIL) instead of after it. Only the page that needs them pays the CPU."""
    with _preload_lock:
        todo = [m for m in modules if m not in _preloading and m not in sys.modules]
        _preloading.update(todo)
    if not todo:
        return

    def load() -> None:
        for name in todo:
            try:
                importlib.import_module(name)
            except ImportError:  # the figure that needs it reports the missing module itself
                pass

    threading.Thread(target=load, name="workbench-preload", daemon=True).start()


def refresh() -> None:
    """Forget cached reads (the sidebar's Refresh button)."""
    st.cache_data.clear()
    rule_points.clear()
    with _memo_lock:
        _memo.clear()


# -- cached loaders (keys: path, token, ids) ---------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=64)
def datasets_frame(path: str, token: tuple) -> pd.DataFrame:
    from workbench.store.datasets import list_datasets

    with read_connection(path) as con:
        return list_datasets(con)


@st.cache_data(show_spinner=False, max_entries=64)
def dataset_info(path: str, token: tuple, name: str, version: int | None = None) -> dict:
    from workbench.store.datasets import dataset_info as _info

    with read_connection(path) as con:
        return _info(con, name, version)


@st.cache_data(show_spinner=False, max_entries=64)
def sample_items(path: str, token: tuple, name: str, version: int, split: str | None, n: int) -> pd.DataFrame:
    from workbench.store.calls import majority_labels
    from workbench.store.datasets import load_items

    with read_connection(path) as con:
        items = load_items(con, name, version, splits=[split] if split else None, limit=n)
        labels = majority_labels(con, name, version, [split] if split else ["train", "calibration", "test"])
    out = items[["item_id", "split", "state"]].copy()
    out["state"] = out["state"].astype(str)
    labels = labels.loc[labels["item_id"].isin(out["item_id"])]
    if labels.empty:
        return out
    wide = labels.pivot_table(index="item_id", columns="question", values="option_id", aggfunc="first")
    return out.join(wide, on="item_id")


@st.cache_data(show_spinner=False, max_entries=64)
def runs_frame(path: str, token: tuple) -> pd.DataFrame:
    """:func:`workbench.store.runs.list_runs` (its counts and latency median read every answer: seconds on
    tens of millions, so a large store keeps the frame between servers, see :func:`kept_store`)."""
    from workbench.store.runs import list_runs

    def compute() -> pd.DataFrame:
        with read_connection(path) as con:
            return list_runs(con)

    return kept_store(path, token, ("runs_frame",), compute)


@st.cache_data(show_spinner=False, max_entries=64)
def run_choices(path: str, token: tuple) -> pd.DataFrame:
    """The store's runs for a run picker (:func:`workbench.store.aggregates.run_choices`: the ``runs`` table
    only, no answer counts): what the Calibration and Thresholds pages need to name and pick a run."""
    from workbench.store.aggregates import run_choices as _choices

    with read_connection(path) as con:
        return _choices(con)


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


@st.cache_data(show_spinner=False, max_entries=64)
def run_record(path: str, token: tuple, run_id: str) -> dict:
    from workbench.store.runs import get_run, load_stored_schema

    with read_connection(path) as con:
        run = get_run(con, run_id)
        schema = load_stored_schema(con, run["schema_hash"])
    run["questions"] = schema.question_ids
    run["question_types"] = {q: schema.questions[q].type for q in schema.question_ids}
    run["schema_wire"] = schema.to_file_dict()
    return run


@st.cache_data(show_spinner=False, max_entries=32)
def robustness(
    path: str, token: tuple, base_run: str, probe_runs: tuple[str, ...], question: str, split: str, n_boot: int
) -> dict:
    """:func:`workbench.probe_report.robustness` of probed runs against their base run (``workbench robustness``)."""
    from workbench.workflows.robustness import robustness as _robustness

    with read_connection(path) as con:
        return _robustness(con, base_run, list(probe_runs), question=question, splits=[split], n_boot=n_boot)


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


@st.cache_data(show_spinner=False, max_entries=32)
def failures_by_kind(path: str, token: tuple, run_id: str) -> pd.DataFrame:
    """Failure counts per (question, kind) of one run (:func:`workbench.store.runs.failure_counts`)."""
    from workbench.store.runs import failure_counts

    with read_connection(path) as con:
        return failure_counts(con, run_id)


@dataclass(frozen=True)
class QuestionArrays:
    """Labelled items of one run, question and split (failures kept as NaN rows).

    ``probs`` (n, k) float, NaN rows = provider failures; ``labels`` (n,) int in [0, k).
    ``calibrator`` is the fitted calibrator's ``to_dict()`` when recalibrated, else None.
    """

    qtype: str
    option_ids: tuple[str, ...]
    probs: Any
    labels: Any
    calibrator: dict | None = None


def question_arrays(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None = None
) -> QuestionArrays:
    """Probabilities and labels of one split; optionally recalibrated with a calibrator fitted on
    the run's *calibration* split (``recalibrate`` = ``temperature``, ``isotonic`` or ``platt``).

    Not cached (n × k floats): callers cache what they compute from it."""
    ans = run_answers(path, token, run_id, question, (split,))
    keep = ans.labels >= 0
    probs, labels = ans.probs[keep], ans.labels[keep]
    cal_dict = None
    if recalibrate:
        from workbench.metrics.recalibrate import make_calibrator

        fit_on = ans if split == "calibration" else run_answers(path, token, run_id, question, ("calibration",))
        fit = fit_on.labels >= 0
        cal = make_calibrator(recalibrate).fit(fit_on.probs[fit], fit_on.labels[fit])
        probs = cal.transform(probs)
        cal_dict = cal.to_dict()
    return QuestionArrays(ans.qtype, tuple(ans.option_ids), probs, labels, cal_dict)


def is_large(path: str, token: tuple, run_id: str, question: str, split: str) -> bool:
    """The split is read in batches (:func:`workbench.evaluation.is_large`): pages get aggregates and
    per-item figures from the streamed library functions, never the matrix."""
    from workbench.workflows.evaluation import stream_cells

    return _is_large(path, token, run_id, question, split, stream_cells())


@st.cache_data(show_spinner=False, max_entries=64)
def _is_large(path: str, token: tuple, run_id: str, question: str, split: str, cells: int) -> bool:
    """The library's answer (a count joined with the items: seconds on millions of answers), after a
    bound from the run's own answer count (:func:`_run_state`): a run whose answers on *every* split
    fit is small; for a larger one the answer is kept between sessions like the page's aggregates."""
    from workbench.workflows.evaluation import is_large as _large

    def exact() -> bool:
        with read_connection(path) as con:
            return bool(_large(con, run_id, question, [split]))

    answers = _run_state(path, token, run_id, question)[4]  # ((run, count, latest), ...) of the run (and parent)
    try:
        n_options = max(len(option_names(path, token, run_id, question)), 2)
    except KeyError:  # not a question of the run's schema: the library's answer (it names the questions)
        return exact()
    if max((int(c) for _, c, _ in answers), default=0) * n_options <= cells:
        return False
    try:  # answers of the run, less the items of the other splits, are on this split: enough to decide
        run = run_record(path, token, run_id)
        per_split = _split_sizes(path, token, run["dataset"], int(run["dataset_version"]))
        others = sum(int(v) for s, v in per_split.items() if s != split)
        if (max((int(c) for _, c, _ in answers), default=0) - others) * n_options > cells:
            return True
    except Exception:  # noqa: BLE001 - the bound is a shortcut; the library's count decides otherwise
        pass
    return bool(kept(path, token, run_id, question, ("is_large", split, cells), exact))


@st.cache_data(show_spinner=False, max_entries=16)
def _split_sizes(path: str, token: tuple, dataset: str, version: int) -> dict[str, int]:
    """:func:`workbench.store.aggregates.split_sizes` (items per split; not :func:`dataset_info`, whose label
    distributions take seconds on millions of items)."""
    from workbench.store.aggregates import split_sizes

    with read_connection(path) as con:
        return split_sizes(con, dataset, version)


@st.cache_resource(show_spinner=False, max_entries=8)
def split_calibrator(path: str, token: tuple, run_id: str, question: str, method: str):
    """:func:`workbench.workflows.split_calibrator` of a large run, fitted once per (run, question, method)
    and shared by every figure of every session that needs it (one streamed pass instead of one per figure)."""
    from workbench.workflows.thresholds import split_calibrator as _fit

    with read_connection(path) as con:
        return _fit(con, run_id, question, method)


@st.cache_resource(show_spinner=False, max_entries=2)
def labelled_items(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, option: int | None = None
):
    """:func:`workbench.workflows.labelled_items` of a large split (recalibrated with a calibrator fitted
    on the calibration split, as :func:`question_arrays` does).

    ``st.cache_resource`` with two entries: the figures of one page that need the same items (the
    top-label reliability and the confusion matrix) share one streamed pass, and no more than two
    item sets (about 40 bytes per item each) stay in memory."""
    from workbench.workflows.thresholds import labelled_items as _items

    cal = split_calibrator(path, token, run_id, question, recalibrate) if recalibrate else None
    with read_connection(path) as con:
        return _items(con, run_id, question, split, calibrator=cal, option=option)


# -- aggregates kept between sessions (large runs) -------------------------------------------------------
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


@dataclass(frozen=True)
class RulePoints:
    """What the Thresholds page needs per item to judge any (τ, m) rule: the labelled items' rule
    coordinates (:func:`workbench.thresholds.rules.rule_coordinates`: predicted option, x, y) and
    labels — about 20 bytes per item instead of 8 k."""

    qtype: str
    option_ids: tuple[str, ...]
    coords: Any
    labels: Any


@st.cache_resource(show_spinner=False, max_entries=2)
def grid_points(path: str, token: tuple, run_id: str, question: str) -> dict | None:
    """{split: :class:`workbench.engines.store_aggregates.GridPoints`} of the calibration and test splits
    of a run as answered, from one DuckDB query over the store; None when the run does not qualify
    (a calibrated view, a score question). Kept between sessions (about 20 bytes per item)."""
    from workbench.engines import store_aggregates as sa

    def compute():
        with read_connection(path) as con:
            return sa.grid_points(con, run_id, question, ("calibration", "test"), grid=GRID_POINTS)

    return kept(path, token, run_id, question, ("grid_points", GRID_POINTS), compute)


@st.cache_resource(show_spinner=False, max_entries=8)
def rule_points(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None = None,
) -> RulePoints:
    """:class:`RulePoints` of one split (optionally recalibrated as in :func:`question_arrays`).

    Of a large run as answered, the points come from :func:`grid_points` (one DuckDB query over the
    probabilities' stored summaries: the exact coordinates, for any rule).

    ``st.cache_resource``: one shared read-only copy, not a pickled copy per session and per rerun.
    Of a large run, kept between sessions (:func:`kept`): about 20 bytes per item, read back instead
    of streaming the split again.
    """
    if is_large(path, token, run_id, question, split):
        from_query = None if recalibrate else grid_points(path, token, run_id, question)
        if from_query is not None and split in from_query:
            g = from_query[split]
            points = RulePoints(g.qtype, g.option_ids, g.coords, g.labels)
        else:
            points = kept(
                path,
                token,
                run_id,
                question,
                ("rule_points", split, recalibrate),
                lambda: _rule_points(path, token, run_id, question, split, recalibrate, large=True),
            )
    else:
        points = _rule_points(path, token, run_id, question, split, recalibrate, large=False)
    for a in (points.coords.predicted, points.coords.x, points.coords.y, points.labels):
        a.setflags(write=False)
    return points


def _rule_points(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, *, large: bool
) -> RulePoints:
    from workbench.thresholds.rules import RuleCoordinates, rule_coordinates

    if large:
        items = labelled_items(path, token, run_id, question, split, recalibrate)
        arr: Any = QuestionArrays(items.qtype, tuple(items.option_ids), None, items.labels, None)
        c = items.coords
    else:
        arr = question_arrays(path, token, run_id, question, split, recalibrate)
        c = rule_coordinates(arr.qtype, arr.probs)
    small = np.int16 if len(arr.option_ids) < 2**15 else np.int32
    coords = RuleCoordinates(c.predicted.astype(small), c.x, c.y, c.x_name, c.y_name)
    labels = arr.labels.astype(small)
    return RulePoints(arr.qtype, arr.option_ids, coords, labels)


#: Points per axis of the threshold grid the sliders move over: the CLI's default ``--grid``
#: (:class:`workbench.thresholds.choose.ThresholdOptions`), so a certified (τ, m) is a slider position.
GRID_POINTS: int = int(ThresholdOptions().grid)


@st.cache_data(show_spinner=False, max_entries=32)
def threshold_surface(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str = "calibration",
    recalibrate: str | None = None,
    error_cost: float | None = None,
):
    """Risk–coverage surface of one split (``workbench.thresholds.surface``), cached per run.

    With ``error_cost`` the surface also carries the wrong-accept cost per grid point (for the
    cost objective). Per-item coordinates are dropped so the cached value stays small. Of a large
    run, kept between sessions (:func:`kept`).
    """
    if is_large(path, token, run_id, question, split):
        return kept(
            path,
            token,
            run_id,
            question,
            ("threshold_surface", split, recalibrate, error_cost, GRID_POINTS),
            lambda: _threshold_surface(path, token, run_id, question, split, recalibrate, error_cost),
        )
    return _threshold_surface(path, token, run_id, question, split, recalibrate, error_cost)


def _threshold_surface(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, error_cost: float | None
):
    from workbench.thresholds.guarantees import error_cost_weights
    from workbench.thresholds.surface import risk_coverage_surface

    points = rule_points(path, token, run_id, question, split, recalibrate)
    labels = np.asarray(points.labels, dtype=np.int64)
    coords = points.coords
    weights = None
    if error_cost is not None:
        predicted = np.asarray(coords.predicted, dtype=np.int64)
        weights = error_cost_weights(labels, predicted, len(points.option_ids), error_cost)
    surf = risk_coverage_surface(
        points.qtype,
        None,
        labels,
        coordinates=replace(coords, predicted=np.asarray(coords.predicted, dtype=np.int64)),
        n_options=len(points.option_ids),
        grid=GRID_POINTS,
        weights=weights,
    )
    surf.extra.pop("coordinates", None)
    return surf


def threshold_defaults():
    """The one set of threshold defaults (:class:`workbench.thresholds.choose.ThresholdOptions`):
    every page starts its α, δ, method and recalibration widgets here, never from literals."""
    return ThresholdOptions()


def settings_caption(alpha: float, delta: float, calibrate: str | None, method: str | None = None) -> str:
    """One line stating the options behind a threshold figure (α, δ, recalibration[, method])."""
    d = threshold_defaults()
    cal = calibrate or "none"
    parts = [f"α = {alpha:g}", f"δ = {delta:g}", f"recalibration {cal}"] + ([f"{method}"] if method else [])
    same = alpha == d.alpha and delta == d.delta and cal == d.calibrate and (method in (None, d.method))
    return (
        "Threshold options: "
        + ", ".join(parts)
        + (" (the defaults)" if same else f" (defaults: α = {d.alpha:g}, δ = {d.delta:g}, recalibration {d.calibrate})")
    )


@st.cache_data(show_spinner=False, max_entries=32)
def certified_region(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    recalibrate: str | None,
    alpha: float,
    delta: float,
    method: str,
) -> np.ndarray:
    """(A, B) bool mask of the exploration surface's grid points certified at (α, δ):
    :func:`workbench.figures.certified_region` (the region ``workbench thresholds --html`` draws)."""
    from workbench.workflows.figures import certified_region as _region

    def region() -> np.ndarray:
        surf = threshold_surface(path, token, run_id, question, "calibration", recalibrate)
        d = threshold_defaults()
        return _region(surf, alpha=alpha, delta=delta, method=method, n_paths=d.n_paths, n_starts=d.n_starts)

    if is_large(path, token, run_id, question, "calibration"):
        description = ("certified_region", recalibrate, alpha, delta, method, GRID_POINTS)
        return kept(path, token, run_id, question, description, region)
    return region()


@st.cache_data(show_spinner=False, max_entries=32)
def question_report(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None = None,
    n_bins: int = 15,
    n_boot: int = 200,
):
    """:mod:`workbench.metrics.report` of one question on one split (metrics with bootstrap intervals).

    Of a large run, kept between sessions (:func:`kept`); see :func:`kept_question_report` for a
    lookup that computes nothing."""
    from workbench.metrics.report import REPORTERS

    if is_large(path, token, run_id, question, split):
        return kept(
            path,
            token,
            run_id,
            question,
            ("question_report", split, recalibrate, n_bins, n_boot),
            lambda: _streamed_report(path, token, run_id, question, split, recalibrate, n_bins, n_boot),
        )
    arr = question_arrays(path, token, run_id, question, split, recalibrate)
    rep = REPORTERS[arr.qtype](
        arr.probs, arr.labels, list(arr.option_ids), question=question, n_bins=n_bins, n_boot=n_boot, smooth=True
    )
    return replace(rep, replicate=None)  # the replicate closure (for paired comparisons) cannot be cached


@st.cache_data(show_spinner=False, max_entries=32)
def point_report(path: str, token: tuple, run_id: str, question: str, split: str, n_bins: int = 15):
    """:func:`workbench.engines.store_aggregates.point_report` of a large run as answered (the report's
    sum-based point estimates, top-label reliability, confusion, counts from one DuckDB query), kept
    between sessions; None when the run or question does not qualify."""
    from workbench.engines import store_aggregates as sa

    def compute():
        with read_connection(path) as con:
            return sa.point_report(con, run_id, question, split, n_bins=n_bins)

    return kept(path, token, run_id, question, ("point_report", split, n_bins), compute)


def kept_question_report(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None = None,
    n_bins: int = 15,
    n_boot: int = 200,
):
    """The :func:`question_report` of a large run if a session already computed it, else None (nothing is computed)."""
    return kept(path, token, run_id, question, ("question_report", split, recalibrate, n_bins, n_boot))


def _streamed_report(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, n_bins: int, n_boot: int
):
    from workbench.thresholds.choose import apply_calibrator
    from workbench.workflows.evaluation import stream_question_report

    cal = split_calibrator(path, token, run_id, question, recalibrate) if recalibrate else None
    with read_connection(path) as con:
        rep = stream_question_report(
            con,
            run_id,
            question,
            [split],
            transform=None if cal is None else (lambda p: apply_calibrator(cal, p)),
            n_bins=n_bins,
            n_boot=n_boot,
            smooth=True,
        )
    return replace(rep, replicate=None)


@st.cache_data(show_spinner=False, max_entries=32)
def agreement_frame(path: str, token: tuple, run_id: str, question: str, split: str) -> tuple[pd.DataFrame, str]:
    """Agreement among annotators next to the run's (:func:`workbench.evaluation.agreement_for_run`,
    what ``workbench report`` prints) as (table, caption); an empty table when no item has several votes."""
    from workbench.workflows.evaluation import agreement_for_run

    def compute() -> tuple[pd.DataFrame, str]:
        with read_connection(path) as con:
            ag = agreement_for_run(con, run_id, question, split)[question]
        if ag is None:
            return pd.DataFrame(), ""
        caption = (
            f"{ag.n_items:,} items with two or more votes ({ag.votes_per_item:.2f} per item, "
            f"{ag.n_annotators} named annotators). " + " ".join(ag.notes)
        )
        return ag.to_frame().drop(columns="question"), caption

    if is_large(path, token, run_id, question, split):  # a count over every vote: kept between sessions
        return kept(path, token, run_id, question, ("agreement_frame", split), compute)
    return compute()


@st.cache_data(show_spinner=False, max_entries=64)
def reliability_display(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None,
    n_bins: int,
    strategy: str,
    option: int | None = None,
    compute: bool = True,
):
    """:class:`~workbench.metrics.displays.ReliabilityDisplay` of the answers as given and, with
    ``recalibrate``, after recalibration (one figure). ``option`` = None: top label; else the
    one-vs-rest column of that option. None when no answered labelled item is left. Of a large run,
    kept between sessions (:func:`kept`); the top-label figure of its answers as given (equal-width
    bins) comes from :func:`point_report` (without the smooth curve); ``compute=False`` returns None
    instead of streaming the run for a figure nobody kept yet."""
    if is_large(path, token, run_id, question, split):
        description = ("reliability_display", split, recalibrate, n_bins, strategy, option)
        done = kept(path, token, run_id, question, description)
        if done is not None:
            return done
        if recalibrate is None and strategy == "uniform" and option is None:
            rep = point_report(path, token, run_id, question, split, n_bins)
            if rep is not None:
                return _report_reliability(rep, question, split, n_bins)
        if not compute:
            return None
        return kept(
            path,
            token,
            run_id,
            question,
            description,
            lambda: _reliability_display(
                path, token, run_id, question, split, recalibrate, n_bins, strategy, option, True
            ),
        )
    return _reliability_display(path, token, run_id, question, split, recalibrate, n_bins, strategy, option, False)


def _report_reliability(rep, question: str, split: str, n_bins: int):
    """The top-label :class:`~workbench.metrics.displays.ReliabilityDisplay` of a point report's binned curve."""
    from workbench.metrics.displays import ReliabilityDisplay

    if "top_label_uniform" not in rep.curves:
        return None
    curve = replace(rep.curves["top_label_uniform"], label="as answered")
    d = ReliabilityDisplay(
        [("as answered", curve, None)],
        f"{question} on {split}: reliability of the top label (uniform bins)",
        "top-label confidence",
    )
    d.plot()
    return d


def _reliability_display(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str,
    recalibrate: str | None,
    n_bins: int,
    strategy: str,
    option: int | None,
    large: bool,
):
    from workbench.metrics.displays import ReliabilityDisplay

    kind = "top-label" if option is None else "option"
    parts = []
    for name, method in [("as answered", None)] + ([(recalibrate, recalibrate)] if recalibrate else []):
        if large:  # per-item figures read in batches, never the matrix
            items = labelled_items(path, token, run_id, question, split, method, option)
            ok = np.isfinite(items.top)
            if not ok.any():
                return None
            if option is None:
                y, s, x_t = (items.coords.predicted == items.labels)[ok], items.top[ok], "top-label confidence"
            else:
                assert items.column is not None
                y, s, x_t = (items.labels == option)[ok], items.column[ok], f"P(option {option})"
            parts.append(ReliabilityDisplay.from_scores(y, s, n_bins=n_bins, strategy=strategy, name=name, x_title=x_t))
            continue
        arr = question_arrays(path, token, run_id, question, split, method)
        if not np.isfinite(arr.probs).all(axis=1).any():
            return None
        parts.append(
            ReliabilityDisplay.from_predictions(
                arr.labels, arr.probs, n_bins=n_bins, strategy=strategy, kind=kind, option=option, name=name
            )
        )
    x_title = parts[0].x_title if option is None else f"P({option_names(path, token, run_id, question)[option]})"
    d = ReliabilityDisplay(
        [c for part in parts for c in part.curves],
        f"{question} on {split}: reliability of {'the top label' if option is None else x_title} ({strategy} bins)",
        x_title,
    )
    d.plot()
    return d


@st.cache_data(show_spinner=False, max_entries=64)
def confusion_display(path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None):
    """:class:`~workbench.metrics.displays.ConfusionDisplay` of the top option (no routing)."""
    from workbench.metrics.displays import ConfusionDisplay

    title = f"{question} on {split}: top option vs gold"
    if is_large(path, token, run_id, question, split):

        def confusion():
            items = labelled_items(path, token, run_id, question, split, recalibrate)
            return ConfusionDisplay.from_decisions(items.labels, items.coords.predicted, items.option_ids, title=title)

        description = ("confusion_display", split, recalibrate)
        done = kept(path, token, run_id, question, description)
        if done is not None:
            return done
        rep = point_report(path, token, run_id, question, split) if recalibrate is None else None
        if rep is not None and rep.confusion is not None:
            return ConfusionDisplay.from_result(rep.confusion, title=title)
        return kept(path, token, run_id, question, description, confusion)
    arr = question_arrays(path, token, run_id, question, split, recalibrate)
    return ConfusionDisplay.from_predictions(arr.labels, arr.probs, list(arr.option_ids), title=title)


def option_names(path: str, token: tuple, run_id: str, question: str) -> list[str]:
    """The question's option ids, in schema order (from the run's stored schema)."""
    from workbench.schema import option_ids
    from workbench.store.runs import get_run, load_stored_schema

    with read_connection(path) as con:
        return option_ids(load_stored_schema(con, get_run(con, run_id)["schema_hash"]).questions[question])


@st.cache_data(show_spinner=False, max_entries=16)
def run_headlines(path: str, token: tuple, split: str = "test") -> pd.DataFrame:
    """Accuracy and top-label ECE of every run and question on ``split`` (point estimates), from
    :func:`workbench.metrics.report.report_run` — what ``workbench report RUN`` prints."""
    from workbench.workflows.evaluation import report_run

    runs = runs_frame(path, token)
    rows = []
    with read_connection(path) as con:
        for run_id in runs["run_id"]:
            try:
                rep = report_run(con, run_id, split=split, n_boot=0, with_before=False, smooth=False)
            except Exception:  # noqa: BLE001 - a run without this split (or still empty) has no headline
                continue
            for q in rep.questions:
                m = q.metrics
                ece = m.get("ece_uniform") or m.get("ece_yes_uniform")
                rows.append(
                    {
                        "run_id": run_id,
                        "question": q.question,
                        "accuracy": m["accuracy"].estimate if "accuracy" in m else None,
                        "ece": ece.estimate if ece is not None else None,
                    }
                )
    return pd.DataFrame(rows, columns=["run_id", "question", "accuracy", "ece"])


def is_emulated(runs: pd.DataFrame) -> pd.Series:
    """True for runs answered by ``workbench emulator``: the store's ``emulated`` column
    (:func:`workbench.store.runs.list_runs`, recorded by the runner from the emulator's header)."""
    if "emulated" not in runs:  # a frame built without list_runs: nothing is known to be emulated
        return pd.Series(False, index=runs.index)
    return runs["emulated"].fillna(False).astype(bool)


@st.cache_data(show_spinner=False, max_entries=16)
def risk_coverage_display(
    path: str,
    token: tuple,
    run_ids: tuple[str, ...],
    labels: tuple[str, ...],
    question: str,
    split: str,
    points: tuple = (),
):
    """:class:`~workbench.metrics.displays.RiskCoverageDisplay` overlay of several runs on one split
    (top-probability ranking); ``labels`` name the curves; ``points`` = ((coverage, error) | None per run)."""
    from workbench.metrics.displays import RiskCoverageDisplay

    parts = []
    for k, (run_id, label) in enumerate(zip(run_ids, labels)):
        ans = run_answers(path, token, run_id, question, (split,))
        pt = points[k] if k < len(points) else None
        parts.append(RiskCoverageDisplay.from_predictions(ans.labels, ans.probs, name=label, point=pt))
    return RiskCoverageDisplay.overlay(parts, title=f"{question} on {split}: error among accepted vs coverage")


@st.cache_data(show_spinner="Comparing runs…", max_entries=16)
def comparison(
    path: str,
    token: tuple,
    run_ids: tuple[str, ...],
    baseline: str,
    question: str,
    split: str,
    objective: tuple,
    n_boot: int,
):
    """:func:`workbench.comparison.compare_runs` (paired bootstrap, McNemar) as a frame + the raw rows.

    ``objective`` = (kind, alpha, delta, calibrate): the :class:`ThresholdOptions` fields the page sets
    (the others keep their defaults, as ``workbench compare`` does).
    """
    from workbench.workflows.compare import compare_runs

    kind, alpha, delta, calibrate = objective
    with read_connection(path) as con:
        comp = compare_runs(
            con,
            list(run_ids),
            baseline=baseline,
            questions=[question],
            split=split,
            options=ThresholdOptions(objective=kind, alpha=alpha, delta=delta, calibrate=calibrate),
            n_boot=n_boot,
        )
    return comp.to_frame(), comp.to_dict()


@st.cache_data(show_spinner=False, max_entries=16)
def shadow_sessions(path: str, token: tuple) -> pd.DataFrame:
    from workbench.store.shadow import list_sessions

    with read_connection(path) as con:
        try:
            return list_sessions(con)
        except duckdb.CatalogException:  # a store made before the shadow tables existed
            return pd.DataFrame(
                columns=["shadow", "source", "champion", "challenger", "schema", "created_at", "n_requests"]
            )


@st.cache_data(show_spinner="Building the shadow report…", max_entries=16)
def shadow_report(
    path: str, token: tuple, shadow: str, champion: tuple, challenger: tuple, criteria: tuple, n_boot: int = 1000
) -> dict:
    """:func:`workbench.shadow.report.shadow_report` as a dict (+ ``frame``).

    ``champion``/``challenger`` = ("file", PATH) for a policy file, ("rule", "tau=..,margin=..") or
    ("none", "") for the policy the library certifies on that side's run at ``ThresholdOptions()`` (what
    ``workbench shadow report SESSION`` does without routing flags); ``criteria`` = sorted (name, value)
    pairs of :class:`Criteria`.
    """
    from workbench.shadow.policies import load_side_policy, parse_rule_options
    from workbench.shadow.report import Criteria
    from workbench.shadow.report import shadow_report as _report

    def side(spec: tuple):
        kind, value = spec
        if kind == "file":
            return load_side_policy(value)
        if kind == "rule":
            return parse_rule_options([value]) if value else None
        return None

    with read_connection(path) as con:
        rep = _report(
            con,
            shadow,
            champion_policy=side(champion),
            challenger_policy=side(challenger),
            criteria=Criteria(**dict(criteria)),
            n_boot=n_boot,
            options=threshold_defaults(),
        )
    out = rep.to_dict()
    out["frame"] = rep.to_frame()
    return out


def threshold_settings(**settings) -> tuple:
    """Hashable cache key of threshold settings: sorted ``(name, value)`` pairs whose names are
    :class:`ThresholdOptions` fields (``alpha``, ``delta``, ``method``, ``calibrate``, ``per_class`` …),
    turned into options by ``ThresholdOptions(**dict(settings))``."""
    return tuple(sorted(settings.items()))


#: ThresholdOptions fields the UI has no control for, with the reason (every other field has one:
#: tests/cli/test_options_declared_once.py checks the pages against the dataclass).
THRESHOLD_FIELDS_NOT_IN_UI: dict[str, str] = {
    "grid": "the sliders move on the certified grid, so the UI keeps its 100 points (GRID_POINTS)",
    **{
        f: "advanced Learn-then-Test tuning: kept at the defaults every surface shares (the CLI and API set it)"
        for f in ("n_paths", "n_starts", "calibrator_fraction", "order_fraction", "seed", "confidence")
    },
    "abstain_options": "per-option routing is edited in the policy file (policy enable/disable), not on the page",
    "level": "score questions are certified at their top level; the expected level is a CLI/API choice",
    "fallback": "the policy's fallback is edited in the policy file; the page shows review",
    "batch": "the finite-batch view is printed by workbench thresholds; the page shows calibration and test",
    "costs": "a misroute cost matrix is a file (workbench thresholds --costs): no page control yet",
    "constraints": "critical options (workbench thresholds --critical): no page control yet",
}


@st.cache_data(show_spinner="Certifying thresholds…", max_entries=64)
def certified_thresholds(path: str, token: tuple, run_id: str, question: str, settings: tuple) -> dict:
    """``choose_thresholds(...).to_dict()`` — exactly what ``workbench thresholds ... --json`` reports
    for the question (same option builder, same calibration/test loads, same library call).

    ``settings`` comes from :func:`threshold_settings`. Only the small result dict is cached (not
    the surface), so a cache hit on every slider move stays cheap.
    """
    from workbench.workflows.thresholds import thresholds_for_run

    def certify() -> dict:
        with read_connection(path) as con:
            return thresholds_for_run(con, run_id, question, ThresholdOptions(**dict(settings))).to_dict()

    def from_points() -> dict:
        from workbench.engines.store_aggregates import certified_from_points

        opts = ThresholdOptions(**dict(settings))
        pts = grid_points(path, token, run_id, question) if opts.grid == GRID_POINTS else None
        res = None
        if pts is not None and "calibration" in pts and len(pts["calibration"].labels):
            # the page's own calibration surface (drawn from the same points): reused when it fits the options
            drawn = threshold_surface(path, token, run_id, question, "calibration")
            res = certified_from_points(question, pts["calibration"], pts.get("test"), opts, surface=drawn)
        return res.to_dict() if res is not None else certify()

    if is_large(path, token, run_id, question, "calibration"):  # kept between sessions
        return kept(path, token, run_id, question, ("certified_thresholds", settings), from_points)
    return certify()


@st.cache_data(show_spinner="Certifying the frontier…", max_entries=32)
def certified_frontier(
    path: str, token: tuple, run_id: str, question: str, settings: tuple, alphas: tuple[float, ...]
) -> pd.DataFrame:
    """Certified calibration coverage for each α (others as ``settings``), from
    :func:`workbench.thresholds.choose.certified_frontier`: each point is the selection
    ``choose_thresholds`` makes at that α (0 where nothing is certified). Of a large run, kept between
    sessions (:func:`kept`; :func:`kept_frontier` looks it up without computing)."""
    from workbench.workflows.thresholds import frontier_for_run

    def frontier() -> pd.DataFrame:
        opts = ThresholdOptions(**dict(settings))
        with read_connection(path) as con:
            sels = frontier_for_run(con, run_id, question, opts, [float(a) for a in alphas])
        coverage = [s.calibration["coverage"] if s.feasible else 0.0 for s in sels]
        return pd.DataFrame({"alpha": list(alphas), "certified coverage": coverage})

    if is_large(path, token, run_id, question, "calibration"):
        return kept(path, token, run_id, question, ("certified_frontier", settings, alphas), frontier)
    return frontier()


def kept_frontier(
    path: str, token: tuple, run_id: str, question: str, settings: tuple, alphas: tuple[float, ...]
) -> pd.DataFrame | None:
    """The :func:`certified_frontier` of a large run if a session already computed it, else None."""
    return kept(path, token, run_id, question, ("certified_frontier", settings, alphas))


@st.cache_data(show_spinner="Simulating calibration splits…", max_entries=16)
def label_plan(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    settings: tuple,
    pilot_size: int | None = None,
    target_coverage: float | None = None,
    power: float = 0.8,
) -> dict:
    """``workbench plan-labels`` for the question: :func:`workbench.workflows.plan_labels_for_run` with
    the options of ``settings``; the plan's ``to_dict()`` plus its figure (``"figure"``)."""
    from workbench.workflows.figures import label_plan_figure
    from workbench.workflows.thresholds import plan_labels_for_run

    with read_connection(path) as con:
        plan = plan_labels_for_run(
            con,
            run_id,
            question,
            ThresholdOptions(**dict(settings)),
            pilot_size=pilot_size,
            target_coverage=target_coverage,
            power=power,
        )
    return {**plan.to_dict(), "figure": label_plan_figure(plan)}


@st.cache_data(show_spinner=False, max_entries=64)
def dataset_schema_file(path: str, token: tuple, name: str) -> str | None:
    """The schema stored with dataset ``name`` (``--schema`` at import), written to a temp JSON file."""
    import json

    from workbench.store.runs import load_stored_schema

    info = dataset_info(path, token, name)
    if not info.get("schema_hash"):
        return None
    with read_connection(path) as con:
        schema = load_stored_schema(con, info["schema_hash"])
    out = _snap.SNAPSHOT_DIR / f"schema-{info['schema_hash'][:16]}.json"
    _snap.SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(schema.to_file_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
    return str(out)


def planned_answers(path: str, token: tuple, run: dict) -> int | None:
    """Item × question answers a run will have when done (its splits, ``--limit``, its questions)."""
    try:
        info = dataset_info(path, token, run["dataset"], int(run["dataset_version"]))
    except Exception:  # noqa: BLE001 - progress is best effort
        return None
    n_items = sum(int(info["splits"].get(s, 0)) for s in run.get("splits") or [])
    limit = ((run.get("params") or {}).get("options") or {}).get("limit")
    if limit:
        n_items = min(n_items, int(limit))
    return n_items * max(len(run.get("questions") or []), 1)


# -- helpers for pages -------------------------------------------------------------------------------
def current() -> tuple[str, tuple]:
    """(store path, token) for this rerun."""
    path = db_path()
    return path, store_token(path)


def store_ready() -> bool:
    """Show a friendly message (and return False) when the store does not exist yet."""
    path = db_path()
    if not Path(path).exists():
        st.info(
            f"No store at `{path}`. Run `workbench demo` (offline) and open the UI with "
            "`workbench ui --db PATH`, or change the store path in the sidebar."
        )
        return False
    return True


def run_label(runs: pd.DataFrame, run_id: str) -> str:
    """``name · provider · run id`` for select boxes."""
    row = runs.loc[runs["run_id"] == run_id]
    if row.empty:
        return run_id
    r = row.iloc[0]
    mark = " · EMULATED" if bool(is_emulated(row).iloc[0]) and "EMULATED" not in str(r["name"]) else ""
    if isinstance(r["name"], str) and r["name"]:
        return f"{r['name']}{mark} · {run_id}"
    return f"{r['provider']}{mark} · {r['dataset']} · {run_id}"


def pick_run(
    runs: pd.DataFrame, *, key: str = KEY_RUN, label: str = "Run", only_done: bool = False, container: Any = None
) -> str | None:
    """A run select box bound to session state (shared across pages by default)."""
    box = container or st
    if runs.empty:
        box.info("No runs in this store yet. `workbench demo` creates some offline.")
        return None
    ids = runs["run_id"].tolist()
    if only_done:
        ids = runs.loc[runs["status"] != "running", "run_id"].tolist() or ids
    if key in st.session_state and st.session_state[key] not in ids:
        del st.session_state[key]
    return box.selectbox(label, ids, key=key, format_func=lambda r: run_label(runs, r))


def pick_question(run: dict, *, key: str = KEY_QUESTION, container: Any = None) -> str:
    box = container or st
    qs = run["questions"]
    if key in st.session_state and st.session_state[key] not in qs:
        del st.session_state[key]
    return box.selectbox("Question", qs, key=key, format_func=lambda q: f"{q} ({run['question_types'][q]})")


def show_error(exc: Exception) -> None:
    """One readable line for a WorkbenchError (message + hint), never a traceback."""
    message, hint = getattr(exc, "message", str(exc)), getattr(exc, "hint", None)
    st.error(f"{message}" + (f"  \n*{hint}*" if hint else ""))


@contextmanager
def stop_on_error() -> Iterator[None]:
    """The block's WorkbenchError shown as :func:`show_error` does, and the page stopped there."""
    try:
        yield
    except WorkbenchError as exc:
        show_error(exc)
        st.stop()


__all__ = [
    "KEY_DB",
    "KEY_RUN",
    "KEY_QUESTION",
    "KEY_DATASET",
    "default_db",
    "db_path",
    "store_token",
    "read_connection",
    "refresh",
    "datasets_frame",
    "dataset_info",
    "sample_items",
    "runs_frame",
    "run_record",
    "run_answers",
    "run_headlines",
    "is_emulated",
    "failures_by_kind",
    "question_arrays",
    "rule_points",
    "threshold_defaults",
    "settings_caption",
    "threshold_surface",
    "certified_region",
    "reliability_display",
    "confusion_display",
    "risk_coverage_display",
    "current",
    "store_ready",
    "pick_run",
    "pick_question",
    "show_error",
    "stop_on_error",
    "NotFoundError",
]


# -- slices (issue 16): item metadata columns and the built-in state_length -----------------------------
@st.cache_data(show_spinner=False, max_entries=64)
def slice_columns(path: str, token: tuple, run_id: str) -> list[str]:
    """Columns a run can be sliced by: ``state_length`` and the metadata kept at import (``--meta-column``)."""
    from workbench.store.datasets import BUILTIN_SLICES, meta_columns
    from workbench.store.runs import get_run

    with read_connection(path) as con:
        run = get_run(con, run_id)
        return [*BUILTIN_SLICES, *meta_columns(con, run["dataset"], int(run["dataset_version"]))]


@st.cache_data(show_spinner="Reporting each slice…", max_entries=32)
def slice_table(path: str, token: tuple, run_id: str, question: str, split: str, column: str, n_bins: int = 15):
    """Per-slice report of one question (``workbench report --slice COLUMN``): one row per slice with
    its labelled count and headline metrics as ``estimate [low, high]``; and the long frame for download."""
    from workbench.metrics.slices import HEADLINE_METRICS
    from workbench.workflows.evaluation import report_run

    with read_connection(path) as con:
        rep = report_run(con, run_id, question, split, n_bins=n_bins, slices=[column], with_before=False)
    sr = rep.slices[column]
    per_value = sr.questions.get(question, {})
    names = [m for m in HEADLINE_METRICS if any(m in r.metrics for r in per_value.values())]
    rows = []
    for value, r in per_value.items():
        row: dict = {column: value, "labelled": r.counts.get("n_labelled", 0), "failed": r.counts.get("n_failed", 0)}
        for m in names:
            iv = r.metrics.get(m)
            row[m] = "—" if iv is None else f"{iv.estimate:.4f}  [{iv.low:.4f}, {iv.high:.4f}]"
        rows.append(row)
    return pd.DataFrame(rows), sr.to_frame()


@st.cache_data(show_spinner="Judging the rule per slice…", max_entries=32)
def certified_threshold_slices(
    path: str, token: tuple, run_id: str, question: str, settings: tuple, column: str
) -> dict:
    """``workbench thresholds --slice COLUMN --json``'s slice section for the question: test coverage and
    error of the certified rule per slice, with intervals and warnings."""
    from workbench.workflows.thresholds import threshold_slices_for_run, thresholds_for_run

    opts = ThresholdOptions(**dict(settings))
    with read_connection(path) as con:
        res = thresholds_for_run(con, run_id, question, opts)
        return threshold_slices_for_run(con, run_id, res, column)
