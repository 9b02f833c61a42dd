"""Runs, answers, the call cache and typed array reads for metrics.

Readers return numpy arrays (``fetchnumpy``), never per-row Python objects, so metrics over a
million answers stay vectorised.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.answers import RunAnswers
from workbench.errors import NotFoundError, StoreError
from workbench.schema import DecisionSchema, option_ids
from workbench.store.db import ANSWERS_TABLE, KEYS_MEMORY_LIMIT, normalise_rows, stream_memory, transaction
from workbench.store.schemas import load_stored_schema, save_schema


# -- runs ----------------------------------------------------------------------------------------
def new_run_id() -> str:
    return "run-" + uuid.uuid4().hex[:10]


def default_run_splits(con: duckdb.DuckDBPyConnection, dataset: str, version: int) -> list[str]:
    """The splits a run covers when none are named: every split of the dataset version but ``train``."""
    rows = con.execute(
        "SELECT DISTINCT split FROM items WHERE dataset = ? AND version = ? AND split <> 'train' ORDER BY split",
        [dataset, version],
    ).fetchall()
    return [r[0] for r in rows]


def create_run(con: duckdb.DuckDBPyConnection, **fields: Any) -> str:
    """Insert a run row in its own transaction and return its id (keyword arguments: :func:`insert_run`'s)."""
    with transaction(con):
        return insert_run(con, **fields)


def insert_run(
    con: duckdb.DuckDBPyConnection,
    *,
    dataset: str,
    dataset_version: int,
    schema: DecisionSchema,
    provider: str,
    splits: list[str],
    run_id: str | None = None,
    name: str | None = None,
    model: str | None = None,
    dialect: str | None = None,
    params: dict | None = None,
    kind: str = "raw",
    parent_run_id: str | None = None,
    experiment: str | None = None,
    variant: str | None = None,
    status: str = "running",
    emulated: bool = False,
) -> str:
    """Insert a run row inside the caller's transaction and return its id (``runs import`` writes the run and
    its answers in one). ``emulated``: answered by ``workbench emulator`` (cost not billed)."""
    run_id = run_id or new_run_id()
    h = save_schema(con, schema)
    con.execute(
        "INSERT INTO runs (run_id, name, kind, parent_run_id, dataset, dataset_version, schema_hash, provider,"
        " model, dialect, splits, status, params, experiment, variant, emulated)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            run_id,
            name,
            kind,
            parent_run_id,
            dataset,
            dataset_version,
            h,
            provider,
            model,
            dialect,
            splits,
            status,
            json.dumps(params or {}),
            experiment,
            variant,
            bool(emulated),
        ],
    )
    return run_id


def update_run(con: duckdb.DuckDBPyConnection, run_id: str, **fields: Any) -> None:
    allowed = {"status", "model", "summary", "finished_at", "params", "name", "dialect", "emulated"}
    sets, values = [], []
    for k, v in fields.items():
        if k not in allowed:
            raise ValueError(f"cannot update run field {k!r}")
        sets.append(f"{k} = ?")
        values.append(json.dumps(v) if k in ("summary", "params") and v is not None else v)
    if sets:
        con.execute(f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ?", [*values, run_id])


def get_run(con: duckdb.DuckDBPyConnection, run_id: str) -> dict:
    df = con.execute(
        "SELECT * REPLACE (coalesce(emulated, false) AS emulated) FROM runs WHERE run_id = ? OR name = ?"
        " ORDER BY created_at DESC LIMIT 1",
        [run_id, run_id],
    ).df()
    if df.empty:
        raise NotFoundError(f"run {run_id!r} does not exist", hint="see `workbench runs list`")
    row = df.iloc[0].to_dict()
    for k in ("params", "summary"):
        row[k] = json.loads(row[k]) if isinstance(row[k], str) else (row[k] or {})
    row["splits"] = list(row["splits"]) if row["splits"] is not None else []
    row["emulated"] = bool(row["emulated"])
    return row


#: SQL expression of the run whose ``answers`` rows a run ``{r}`` reads (see :func:`answer_source`).
SOURCE_RUN_SQL = (
    "(CASE WHEN {r}.kind = 'calibrated' AND coalesce(json_extract({r}.params, '$.on_read')::BOOLEAN, false)"
    " THEN {r}.parent_run_id ELSE {r}.run_id END)"
)


def failure_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Provider failures of one run per (question, failure_kind), counted in DuckDB:
    columns ``question``, ``failure_kind``, ``count`` (most frequent first). A calibrated view read
    on the fly counts its parent's rows (:func:`answer_source`): the same answers, the same failures."""
    source, _ = answer_source(con, get_run(con, run_id))
    return con.execute(
        "SELECT question, failure_kind, count(*) AS count FROM answers "
        "WHERE run_id = ? AND failure_kind IS NOT NULL GROUP BY ALL ORDER BY question, count DESC, failure_kind",
        [source],
    ).df()


def list_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per run with answer/failure counts, cost, median latency and ``emulated`` (bool)."""
    return con.execute(
        "SELECT r.run_id, r.name, r.kind, r.dataset, r.dataset_version, r.provider, r.model, r.status,"
        " coalesce(r.emulated, false) AS emulated,"
        " left(r.schema_hash, 12) AS schema, r.experiment, r.variant, r.created_at,"
        " count(a.item_id) AS n_answers, count(a.failure_kind) AS n_failed,"
        " sum(a.cost_usd) AS cost_usd, quantile_cont(a.latency_ms, 0.5) AS latency_p50_ms"
        " FROM runs r LEFT JOIN answers a ON a.run_id = " + SOURCE_RUN_SQL.format(r="r") + ""
        " GROUP BY ALL ORDER BY r.created_at"
    ).df()


# -- answers ------------------------------------------------------------------------------------
ANSWER_COLUMNS = [
    "run_id",
    "item_id",
    "question",
    "probs",
    "p_top",
    "margin",
    "top_option",
    "entropy",
    "deviation",
    "vendor_confidence",
    "failure_kind",
    "failure_message",
    "model",
    "latency_ms",
    "input_tokens",
    "cost_usd",
    "cache_key",
    "cached",
]


def experiment_run_rows(con: duckdb.DuckDBPyConnection, name: str) -> pd.DataFrame:
    """One row (run_id, variant, provider, status, created_at) per (variant, provider) of experiment
    ``name``'s raw runs: the latest finished run, else the latest; oldest first."""
    return con.execute(
        "SELECT run_id, variant, provider, status, created_at FROM runs WHERE experiment = ? AND kind = 'raw'"
        " QUALIFY row_number() OVER (PARTITION BY variant, provider"
        "                            ORDER BY (status = 'done') DESC, created_at DESC) = 1"
        " ORDER BY created_at",
        [name],
    ).df()


def split_cost_figures(con: duckdb.DuckDBPyConnection, run: dict, split: str) -> tuple:
    """(items, cost in USD, rows without a cost that did not fail, p50 latency ms, p95 latency ms, calls) of
    ``run``'s answers on ``split`` (a calibrated view reads its run's rows). A call is a cache key (one per
    item and question without one), so a call answering several questions counts once."""
    row = con.execute(
        """WITH a AS (
               SELECT a.* FROM answers a JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id
               WHERE a.run_id = $run AND i.split = $split
           ), calls AS (
               SELECT DISTINCT coalesce(cache_key, item_id || question) AS k, latency_ms FROM a
           )
           SELECT (SELECT count(DISTINCT item_id) FROM a), (SELECT sum(cost_usd) FROM a),
                  (SELECT count(*) FILTER (WHERE cost_usd IS NULL AND failure_kind IS NULL) FROM a),
                  (SELECT quantile_cont(latency_ms, 0.5) FROM calls),
                  (SELECT quantile_cont(latency_ms, 0.95) FROM calls),
                  (SELECT count(*) FROM calls)""",
        {"ds": run["dataset"], "v": int(run["dataset_version"]), "run": answer_source(con, run)[0], "split": split},
    ).fetchone()
    assert row is not None  # an aggregate query always returns one row
    return row


_PAIR_SQL = """
    WITH ka AS (
        SELECT a.item_id, (row_number() OVER (ORDER BY a.item_id) - 1)::BIGINT AS pos
        FROM answers a JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id
        WHERE a.run_id = $ra AND a.question = $q AND i.split = $split
    ), kb AS (
        SELECT a.item_id, (row_number() OVER (ORDER BY a.item_id) - 1)::BIGINT AS pos
        FROM answers a JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id
        WHERE a.run_id = $rb AND a.question = $q AND i.split = $split
    )
    SELECT ka.pos AS pa, kb.pos AS pb FROM ka JOIN kb ON ka.item_id = kb.item_id ORDER BY ka.pos
"""


def paired_positions(
    con: duckdb.DuckDBPyConnection, run_a: dict, run_b: dict, question: str, split: str
) -> tuple[np.ndarray, np.ndarray]:
    """(pa, pb) int64: for each item both runs answered ``question`` on ``split``, in item-id order, its row
    position in each run's :func:`iter_answer_batches` order (so no item id reaches Python)."""
    tbl = con.execute(
        _PAIR_SQL,
        {
            "ds": run_a["dataset"],
            "v": int(run_a["dataset_version"]),
            "q": question,
            "split": split,
            "ra": answer_source(con, run_a)[0],
            "rb": answer_source(con, run_b)[0],
        },
    ).fetch_arrow_table()
    return (
        np.asarray(tbl.column("pa").to_numpy(), dtype=np.int64),
        np.asarray(tbl.column("pb").to_numpy(), dtype=np.int64),
    )


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Remove run ``run_id``, its answers and its calibrators, in one transaction (e.g. a view whose
    creation failed half-way)."""
    with transaction(con):
        for table_name in (ANSWERS_TABLE, "calibrators", "runs"):
            con.execute(f"DELETE FROM {table_name} WHERE run_id = ?", [run_id])


def write_answers(con: duckdb.DuckDBPyConnection, rows: pd.DataFrame | pa.Table, *, replace: bool = True) -> int:
    """Insert a batch of answers in one transaction (replacing earlier rows for the same keys).

    ``rows`` has (a subset of) :data:`ANSWER_COLUMNS`; ``probs`` is a list of floats or None.
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows, preserve_index=False)
    cols = [c for c in ANSWER_COLUMNS if c in table.column_names]
    con.register("_incoming_answers", table)
    try:
        with transaction(con):
            if replace:
                con.execute(
                    f"DELETE FROM {ANSWERS_TABLE} WHERE (run_id, item_id, question) IN "
                    "(SELECT run_id, item_id, question FROM _incoming_answers)"
                )
            con.execute(
                f"INSERT INTO {ANSWERS_TABLE} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM _incoming_answers"
            )
    finally:
        con.unregister("_incoming_answers")
    return table.num_rows


def run_questions(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    run = get_run(con, run_id)
    schema = load_stored_schema(con, run["schema_hash"])
    return schema.question_ids


# -- calibrated views whose probabilities are computed on read -------------------------------------
def answer_source(con: duckdb.DuckDBPyConnection, run: dict) -> tuple[str, dict[str, dict] | None]:
    """(run whose ``answers`` rows hold the probabilities, {question: calibrator dict} to apply on read).

    A calibrated view written by ``workbench calibrate`` stores only its calibrators
    (``params["on_read"]``): its probabilities are the parent's, transformed when read, so a view
    adds kilobytes to the store instead of a second copy of the run. Older views (rows stored) and
    raw runs read their own rows with nothing applied.
    """
    params = run.get("params") or {}
    if run.get("kind") == "calibrated" and params.get("on_read") and run.get("parent_run_id"):
        return str(run["parent_run_id"]), load_calibrators(con, run["run_id"])
    return str(run["run_id"]), None


def on_read_transform(calibrators: dict[str, dict] | None, question: str):
    """The stored calibrator of ``question`` as a function (n, k) -> (n, k), or None (nothing to apply)."""
    if calibrators is None or question not in calibrators:
        return None
    from workbench_runtime.calibrators import calibrator_from_dict

    cal = calibrator_from_dict(calibrators[question])

    def transform(probs: np.ndarray) -> np.ndarray:
        out = np.full_like(probs, np.nan, dtype=float)
        ok = np.isfinite(probs).all(axis=1)
        if ok.any():
            out[ok] = cal.transform(probs[ok])
        return out

    return transform


def answers_params(run: dict, question: str, source: str, opts: list[str], splits) -> dict:
    """The named parameters of the answer readers' SQL (:data:`_ANSWERS_SQL`, :func:`gold_cte`): dataset,
    version, question, ``source`` (the run whose rows are read), ``opts`` (the option ids, in schema
    order) and ``splits`` (None: every split)."""
    return {
        "ds": run["dataset"],
        "v": int(run["dataset_version"]),
        "q": question,
        "run": source,
        "opts": opts,
        "splits": list(splits) if splits else None,
    }


def gold_rank_sql(votes: str = "votes", option: str = "option_id", opts: str = "$opts") -> str:
    """SQL ranking an option's ``votes`` for an item's gold label: the majority, ties to the option listed
    first in ``opts`` (an option the question lacks ranks below every listed one). ``arg_max(option, rank)``
    per item is the gold label, the one rule of every reader (load_answers, the keys read, the UI's
    aggregates, export)."""
    return f"{votes} * 1000000 - coalesce(list_position({opts}, {option}), 999999)"


#: Labels of the run's dataset version and question (a clause the gold CTEs share).
_LABELS_OF = "labels WHERE dataset = $ds AND version = $v AND question = $q"
#: Items of the splits read (``$splits`` NULL: all), to count only their votes.
_OF_SPLITS = (
    " AND item_id IN (SELECT item_id FROM items WHERE dataset = $ds AND version = $v"
    " AND ($splits IS NULL OR list_contains($splits, split)))"
)


def gold_cte(con: duckdb.DuckDBPyConnection, run: dict, question: str, *, of_splits: bool = False) -> str:
    """SQL defining ``best(item_id, gold)``: each labelled item's gold option (the majority of its votes,
    ties to the option listed first, :func:`gold_rank_sql`), the one definition every reader joins.

    When the version's import recorded that no item has two votes for ``question``
    (:func:`~workbench.store.datasets.recorded_repeated_votes`), each item's one label row is its gold
    label and nothing is grouped (at 10M items the grouping was ~4 CPU s of every read). Otherwise, in two
    steps: an item whose votes all name one option has it (one grouping by item, no arg-max); only items
    with differing votes are counted per option. ``of_splits``: count only the votes of the items of
    ``$splits``."""
    from workbench.store.datasets import recorded_repeated_votes

    if recorded_repeated_votes(con, run["dataset"], int(run["dataset_version"]), question) == []:
        return f"best AS (SELECT item_id, option_id AS gold FROM {_LABELS_OF})"
    labels = _LABELS_OF + (_OF_SPLITS if of_splits else "")
    return f"""one AS (
            SELECT item_id, min(option_id) AS lo, max(option_id) AS hi FROM {labels} GROUP BY item_id
        ), multi AS (
            SELECT item_id, option_id, count(*) AS votes
            FROM {labels} AND item_id IN (SELECT item_id FROM one WHERE lo <> hi)
            GROUP BY ALL
        ), best AS (
            SELECT item_id, lo AS gold FROM one WHERE lo = hi
            UNION ALL
            SELECT item_id, arg_max(option_id, {gold_rank_sql()}) FROM multi GROUP BY item_id
        )"""


#: The items of the splits read with their gold label (``k``: item id, split, label; no probabilities),
#: the CTE every reader joins first: the run's rows, lists and all, are then matched against it, so they
#: pass through one join as the side DuckDB probes with, never as the one it hashes (with the one-vote gold
#: labels, joined the other way round, the lists went into the hash table: 10M items ran out of 1 GB).
ITEMS_WITH_GOLD_SQL = """
            SELECT i.item_id, i.split, list_position($opts, b.gold) - 1 AS label
            FROM items i LEFT JOIN best b ON b.item_id = i.item_id
            WHERE i.dataset = $ds AND i.version = $v AND ($splits IS NULL OR list_contains($splits, i.split))
"""


_ANSWERS_SQL = (
    """
        WITH {gold}, k AS ("""
    + ITEMS_WITH_GOLD_SQL
    + """)
        SELECT a.item_id, k.split, a.probs, k.label, a.failure_kind, a.latency_ms, a.cost_usd, a.input_tokens
        FROM answers a JOIN k ON k.item_id = a.item_id
        WHERE a.run_id = $run AND a.question = $q
        ORDER BY a.item_id
"""
)


def question_of(con: duckdb.DuckDBPyConnection, run: dict, question: str):
    """The schema question ``question`` of ``run`` (a run row); raises NotFoundError naming the run's questions."""
    schema = load_stored_schema(con, run["schema_hash"])
    if question not in schema.questions:
        raise NotFoundError(
            f"{run['run_id']} has no question {question!r}", hint=f"questions: {', '.join(schema.question_ids)}"
        )
    return schema.questions[question]


def _answers_from_arrow(
    tbl: pa.Table | pa.RecordBatch,
    run: dict,
    question: str,
    qtype: str,
    opts: list[str],
    transform,
    labels: np.ndarray | None = None,
    splits: np.ndarray | None = None,
) -> RunAnswers:
    """A :class:`RunAnswers` from rows of :data:`_ANSWERS_SQL` (a whole run or one batch of it);
    ``labels`` and ``splits`` (n,) when the rows carry none (a streamed batch: they come from the keys)."""
    n, k = tbl.num_rows, len(opts)
    probs_col = tbl.column("probs")
    failed = np.asarray(probs_col.is_null().to_numpy(zero_copy_only=False), dtype=bool) if n else np.zeros(0, bool)
    probs = np.full((n, k), np.nan)
    if n and (~failed).any():
        chunks = probs_col.chunks if isinstance(probs_col, pa.ChunkedArray) else [probs_col]
        flat = pa.concat_arrays([c.drop_null().flatten() if c.null_count else c.flatten() for c in chunks])
        probs[~failed] = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=float).reshape(-1, k)
        if "normalise_on_read" in tbl.column_names:  # rows of the table itself (iter_answer_batches)
            probs = normalise_rows(probs, tbl.column("normalise_on_read"), tbl.column("deviation"))
    if transform is not None:
        probs = transform(probs)
    if labels is None:
        label = tbl.column("label")
        labels = (
            np.asarray(pa.array(label).fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            if isinstance(label, pa.Array)
            else np.asarray(label.fill_null(-1).to_numpy(), dtype=np.int64)
        )

    def num(name: str) -> np.ndarray:
        return tbl.column(name).to_pandas().to_numpy(dtype=float, na_value=np.nan) if n else np.zeros(0)

    return RunAnswers(
        run_id=run["run_id"],
        question=question,
        qtype=qtype,
        option_ids=opts,
        item_ids=np.asarray(tbl.column("item_id").to_numpy(zero_copy_only=False), dtype=object),
        splits=splits if splits is not None else np.asarray(tbl.column("split").to_pylist(), dtype=object),
        probs=probs,
        labels=labels if n else np.zeros(0, int),
        failed=failed,
        failure_kind=np.asarray(tbl.column("failure_kind").to_pylist(), dtype=object),
        latency_ms=num("latency_ms"),
        cost_usd=num("cost_usd"),
        input_tokens=num("input_tokens"),
        extra={"run": run, "schema_hash": run["schema_hash"]},
    )


def load_answers(
    con: duckdb.DuckDBPyConnection, run_id: str, question: str, splits: Iterable[str] | None = None
) -> RunAnswers:
    """Answers of ``run_id`` for ``question`` joined with items (split) and gold labels, in item id order.

    The whole (n, k) matrix is held in memory; :func:`iter_answer_batches` streams it instead.
    """
    run = get_run(con, run_id)
    q = question_of(con, run, question)
    opts = option_ids(q)
    source, calibrators = answer_source(con, run)
    split_list = list(splits) if splits else None
    rel = con.execute(
        _ANSWERS_SQL.format(gold=gold_cte(con, run, question)),
        answers_params(run, question, source, opts, split_list),
    )
    tbl = rel.fetch_arrow_table()
    return _answers_from_arrow(tbl, run, question, q.type, opts, on_read_transform(calibrators, question))


#: The keys read: every answer row of the run and question on the splits with its row id in
#: ``answers`` (``rid``), split, failure, gold label and cost, in item-id order (no probabilities).
#: Gold labels are counted only for the items of the splits read (half the labels for one split of two).
_KEYS_SQL = (
    """
        WITH {gold}, k AS ("""
    + ITEMS_WITH_GOLD_SQL
    + """), a AS (
            -- "failed" is computed on the scan: the join carries a boolean, never the lists
            SELECT rowid AS rid, item_id, probs IS NULL AS failed, failure_kind, cost_usd
            FROM """
    + ANSWERS_TABLE
    + """ WHERE run_id = $run AND question = $q
        )
        SELECT {ids}a.rid, k.split, a.failed, k.label, a.failure_kind, a.cost_usd
        FROM a JOIN k ON k.item_id = a.item_id
        ORDER BY a.item_id
"""
)


@dataclass
class _Keys:
    """The keys read of one (source run, question, splits): arrays (n,) in item-id order, plus the
    row ids sorted (``srid``) with their positions (``order``), which place a streamed row."""

    item_ids: np.ndarray | None  # object, when read with ids
    srid: np.ndarray  # int64 row ids in ``answers``, sorted
    order: np.ndarray  # position (item-id order) of each srid
    split_values: np.ndarray  # object, the distinct splits (+ None)
    split_codes: np.ndarray  # index into split_values
    failed: np.ndarray  # bool
    labels: np.ndarray  # int64, -1 unlabelled
    kind_values: np.ndarray  # object, distinct failure kinds (+ None)
    kind_codes: np.ndarray
    cost_usd: np.ndarray  # float

    def __len__(self) -> int:
        return len(self.srid)


#: Keys kept while a command runs (:func:`shared_keys`): {(connection, source, dataset, version,
#: question, splits, ids): _Keys}; ``None`` outside such a block (every read is fresh).
_KEYS_SCOPE: ContextVar[dict | None] = ContextVar("workbench_keys_scope", default=None)
#: Keys reads kept at once in a :func:`shared_keys` block (a command reads one or two splits of a run at a time).
KEYS_KEPT = 2


@contextmanager
def shared_keys() -> Iterator[None]:
    """Inside the block, the keys read of a (run, question, splits) — ids ranked, gold labels chosen,
    sorted by item id — is made once and shared by :func:`count_answers`, :func:`load_answer_keys` and
    every :func:`iter_answer_batches` pass (a command streams a run two or three times). Only for
    blocks that do not write answers or labels: the keys are not read again. Re-entrant."""
    if _KEYS_SCOPE.get() is not None:
        yield
        return
    token = _KEYS_SCOPE.set({})
    try:
        yield
    finally:
        _KEYS_SCOPE.reset(token)


def _coded(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values (object, last None), codes) of a string column: repeated values share one object."""
    coded = column.combine_chunks().dictionary_encode()
    values = np.asarray([*coded.dictionary.to_pylist(), None], dtype=object)
    codes = coded.indices.fill_null(len(coded.dictionary)).to_numpy(zero_copy_only=False)
    return values, np.asarray(codes, dtype=np.int32 if len(values) > 127 else np.int8)


def _read_keys(
    con: duckdb.DuckDBPyConnection, run: dict, question: str, opts: list[str], splits: list[str] | None, ids: bool
) -> _Keys:
    """:class:`_Keys` of ``run``'s question on ``splits`` (shared inside :func:`shared_keys`)."""
    source, _ = answer_source(con, run)
    scope = _KEYS_SCOPE.get()
    base = (id(con), source, run["dataset"], int(run["dataset_version"]), question, tuple(splits or ()) or None)
    if scope is not None:
        for want in (True,) if ids else (False, True):
            if (*base, want) in scope:
                return scope[(*base, want)]
    sql = _KEYS_SQL.format(gold=gold_cte(con, run, question, of_splits=True), ids="a.item_id, " if ids else "")
    with stream_memory(con, KEYS_MEMORY_LIMIT):  # the sort needs only its own memory; nothing stays cached after it
        tbl = con.execute(sql, answers_params(run, question, source, opts, splits)).fetch_arrow_table()
    rid = np.asarray(tbl.column("rid").to_numpy(), dtype=np.int64)
    order = np.argsort(rid, kind="stable")
    split_values, split_codes = _coded(tbl.column("split"))
    kind_values, kind_codes = _coded(tbl.column("failure_kind"))
    keys = _Keys(
        item_ids=np.asarray(tbl.column("item_id").to_numpy(zero_copy_only=False), dtype=object) if ids else None,
        srid=rid[order],
        order=order.astype(np.int32) if len(rid) < 2**31 else order,
        split_values=split_values,
        split_codes=split_codes,
        failed=np.asarray(tbl.column("failed").to_numpy(), dtype=bool),
        labels=np.asarray(tbl.column("label").fill_null(-1).to_numpy(), dtype=np.int64),
        kind_values=kind_values,
        kind_codes=kind_codes,
        cost_usd=tbl.column("cost_usd").to_pandas().to_numpy(dtype=float, na_value=np.nan),
    )
    del tbl
    if scope is not None:
        while len(scope) >= KEYS_KEPT:
            scope.pop(next(iter(scope)))
        scope[(*base, ids)] = keys
    return keys


def load_answer_keys(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    question: str,
    splits: Iterable[str] | None = None,
    *,
    ids: bool = True,
) -> RunAnswers:
    """:func:`load_answers` without the probabilities: ``probs`` is (n, 0), ``failed`` says which rows
    have none, latency and tokens are not read (NaN). Ids, splits, labels and costs of a run of millions of items, in item-id order, for
    callers that then stream the probabilities (:func:`iter_answer_batches`).

    ``ids=False``: the item ids stay in DuckDB (``item_ids`` is a read-only view of ``None`` that
    costs no memory): callers that address rows by position need only the order, and a Python
    string per item is ~70 bytes (700 MB at 10M items). With one split, ``splits`` is likewise a
    view of that split's name."""
    run = get_run(con, run_id)
    q = question_of(con, run, question)
    opts = option_ids(q)
    split_list = list(splits) if splits else None
    keys = _read_keys(con, run, question, opts, split_list, ids)
    n = len(keys)
    unread = np.broadcast_to(np.nan, (n,))  # latency and tokens are not read: a read-only view, no memory
    return RunAnswers(
        run_id=run["run_id"],
        question=question,
        qtype=q.type,
        option_ids=opts,
        item_ids=(
            keys.item_ids if ids and keys.item_ids is not None else np.broadcast_to(np.array(None, dtype=object), (n,))
        ),
        splits=(
            np.broadcast_to(np.array(split_list[0], dtype=object), (n,))
            if not ids and split_list is not None and len(split_list) == 1
            else keys.split_values[keys.split_codes]
        ),
        probs=np.zeros((n, 0)),
        labels=keys.labels.copy(),
        failed=keys.failed.copy(),
        failure_kind=keys.kind_values[keys.kind_codes],
        latency_ms=unread,
        cost_usd=keys.cost_usd.copy(),
        input_tokens=unread,
        extra={"run": run, "schema_hash": run["schema_hash"], "keys_only": True},
    )


#: Rows per streamed batch: 32k × 77 options is 20 MB of float64, so the handful of temporary
#: copies a calibrator and the rule coordinates make of a batch stay small next to DuckDB's pool.
BATCH_ROWS = 32_768


def count_answers(
    con: duckdb.DuckDBPyConnection, run_id: str, question: str, splits: Iterable[str] | None = None
) -> int:
    """How many answer rows (answered or failed) ``run_id`` has for ``question`` on ``splits``
    (inside :func:`shared_keys`, the length of the shared keys read)."""
    run = get_run(con, run_id)
    source, _ = answer_source(con, run)
    if _KEYS_SCOPE.get() is not None:
        schema = load_stored_schema(con, run["schema_hash"])
        if question in schema.questions:
            opts = option_ids(schema.questions[question])
            return len(_read_keys(con, run, question, opts, list(splits) if splits else None, False))
    row = con.execute(
        "SELECT count(*) FROM answers a JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id"
        " WHERE a.run_id = $run AND a.question = $q AND ($splits IS NULL OR list_contains($splits, i.split))",
        {
            "ds": run["dataset"],
            "v": int(run["dataset_version"]),
            "run": source,
            "q": question,
            "splits": list(splits) if splits else None,
        },
    ).fetchone()
    return int(row[0]) if row else 0


def iter_answer_batches(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    question: str,
    splits: Iterable[str] | None = None,
    *,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[tuple[np.ndarray, RunAnswers]]:
    """Stream the answers :func:`load_answers` returns, ``batch_rows`` rows at a time, in no fixed order.

    Yields ``(pos, batch)``: ``pos`` (m,) int64 is each row's position in :func:`load_answers`'
    item-id order, so a caller that writes per-row figures at ``pos`` gets exactly the arrays the
    in-memory path gets, whatever order DuckDB's parallel scan delivers. Memory is one batch plus
    DuckDB's own buffers (bounded by the connection's ``memory_limit``) plus the keys read.

    Two queries: the keys read (:func:`_read_keys`: row ids, splits and labels in item-id order,
    no probabilities; shared inside :func:`shared_keys`), then a scan of the run's rows with their
    probabilities, kept to the keys' row ids by a semi-join on integers (only when the splits leave
    rows out). A row's position is looked up from its row id in numpy. The scan never joins the
    probability lists to a table of strings: at 10M items that join outgrew DuckDB's pool and spilled
    every probability to disk.
    """
    run = get_run(con, run_id)
    q = question_of(con, run, question)
    opts = option_ids(q)
    source, calibrators = answer_source(con, run)
    transform = on_read_transform(calibrators, question)
    split_list = list(splits) if splits else None
    keys = _read_keys(con, run, question, opts, split_list, False)
    n = len(keys)
    if n == 0:
        return
    params = {"run": source, "q": question}
    total = con.execute("SELECT count(*) FROM answers WHERE run_id = $run AND question = $q", params).fetchone()
    view = None
    # the table itself (row ids, which the answers view has not): its probabilities as stored, normalised as the
    # view reads them by db.normalise_rows in _answers_from_arrow (numpy divides 10x faster than list_transform)
    sql = (
        "SELECT rowid AS rid, item_id, probs, normalise_on_read, deviation, failure_kind, latency_ms, cost_usd,"
        f" input_tokens FROM {ANSWERS_TABLE} WHERE run_id = $run AND question = $q"
    )
    if total is None or int(total[0]) != n:  # the splits leave rows out: keep the keys' rows
        view = f"_wb_rids_{uuid.uuid4().hex[:10]}"
        con.register(view, pa.table({"rid": keys.srid}))
        sql += f" AND rowid IN (SELECT rid FROM {view})"
    seen = 0
    # DuckDB keeps its join tables, not the blocks it has read, and hands all back after the pass
    # (db.stream_memory): the caller's numpy work after a pass does not sit on top of DuckDB's cache
    try:
        with stream_memory(con):
            reader = con.execute(sql, params).to_arrow_reader(batch_rows)
            try:
                for batch in reader:
                    if batch.num_rows == 0:
                        continue
                    rid = np.asarray(batch.column("rid").to_numpy(zero_copy_only=False), dtype=np.int64)
                    at = np.minimum(np.searchsorted(keys.srid, rid), n - 1)
                    if not np.array_equal(keys.srid[at], rid):
                        raise StoreError(
                            f"the answers of run {run['run_id']} changed while they were read",
                            hint="run the command again when nothing writes to the store",
                        )
                    pos = keys.order[at].astype(np.int64)
                    seen += len(pos)
                    yield (
                        pos,
                        _answers_from_arrow(
                            batch,
                            run,
                            question,
                            q.type,
                            opts,
                            transform,
                            keys.labels[pos],
                            keys.split_values[keys.split_codes[pos]],
                        ),
                    )
            finally:
                reader.close()
    finally:
        if view is not None:
            con.unregister(view)
    if seen != n:
        raise StoreError(
            f"the answers of run {run['run_id']} changed while they were read ({seen:,} rows of {n:,})",
            hint="run the command again when nothing writes to the store",
        )


def gather_answer_rows(
    con: duckdb.DuckDBPyConnection, run_id: str, question: str, split: str, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(probs (m, k), labels (m,)) of the rows at positions ``rows`` ((n,) bool over ``split`` in
    item-id order), in that order: one streamed pass filling one preallocated matrix."""
    k = len(option_ids(question_of(con, get_run(con, run_id), question)))
    slot = np.cumsum(rows) - 1  # position -> row of the output
    probs, labels = np.empty((int(rows.sum()), k)), np.empty(int(rows.sum()), dtype=np.int64)
    for pos, b in iter_answer_batches(con, run_id, question, [split]):
        take = rows[pos]
        probs[slot[pos[take]]], labels[slot[pos[take]]] = b.probs[take], b.labels[take]
    return probs, labels


def _on_read_udf(calibrators: dict[str, dict]):
    """A DuckDB Arrow function (question, probs) -> calibrated probs applying each question's stored calibrator."""
    from workbench_runtime.calibrators import calibrator_from_dict

    fitted = {q: calibrator_from_dict(d) for q, d in calibrators.items()}

    def apply(questions: pa.Array, probs: pa.ListArray | pa.ChunkedArray) -> pa.Array:
        # one DuckDB vector (≤ 2,048 rows): lengths never change, so the calibrated rows are written
        # into a copy of the values buffer at each row's offsets
        if isinstance(probs, pa.ChunkedArray):
            probs = probs.combine_chunks()
        qs = np.asarray(questions.to_numpy(zero_copy_only=False), dtype=object)
        valid = ~np.asarray(probs.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        offsets = np.asarray(probs.offsets.to_numpy(), dtype=np.int64)
        values = np.array(probs.values.to_numpy(zero_copy_only=False), dtype=float)
        for q, cal in fitted.items():
            rows = np.flatnonzero((qs == q) & valid)
            if rows.size == 0:
                continue
            k = int(offsets[rows[0] + 1] - offsets[rows[0]])
            at = offsets[rows][:, None] + np.arange(k)[None, :]
            values[at] = cal.transform(values[at])
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values), mask=probs.is_null())

    return apply


@contextmanager
def answers_relation(con: duckdb.DuckDBPyConnection, run_ids: Iterable[str]) -> Iterator[str]:
    """The name of a temporary view with the ``answers`` rows of ``run_ids`` as each run reads them.

    A raw run (or an older calibrated view) is its own rows; a calibrated view that applies its
    calibrators on read (:func:`answer_source`) is its parent's rows under its own ``run_id``, with
    the probabilities calibrated by a DuckDB Arrow function as the query streams (``p_top`` and
    ``margin`` recomputed). SQL that aggregates answers (export, shadow replay) reads this view
    instead of the table, so it sees what :func:`load_answers` sees.
    """
    from duckdb import func, sqltypes

    tag = uuid.uuid4().hex[:10]
    view, parts, functions = f"_answers_{tag}", [], []
    for i, rid in enumerate(dict.fromkeys(run_ids)):
        run = get_run(con, rid)
        source, calibrators = answer_source(con, run)
        me, src = run["run_id"].replace("'", "''"), source.replace("'", "''")
        if calibrators is None:
            parts.append(f"SELECT * FROM answers WHERE run_id = '{me}'")
            continue
        name = f"_wb_on_read_{tag}_{i}"
        con.create_function(
            name,
            _on_read_udf(calibrators),
            [sqltypes.VARCHAR, duckdb.list_type(sqltypes.DOUBLE)],
            duckdb.list_type(sqltypes.DOUBLE),
            type=func.PythonUDFType.ARROW,
        )
        functions.append(name)
        parts.append(
            f"SELECT * REPLACE ('{me}' AS run_id, p AS probs, list_max(p) AS p_top,"
            " list_max(p) - coalesce(list_sort(p, 'DESC')[2], 0) AS margin, NULL::INTEGER AS top_option)"
            f" FROM (SELECT *, {name}(question, probs) AS p FROM answers WHERE run_id = '{src}')"
        )
    # `SELECT * REPLACE` of the calibrated parts keeps the helper column p: list the table's columns
    columns = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'answers' ORDER BY ordinal_position"
        ).fetchall()
    ]
    body = (
        " UNION ALL ".join(f"SELECT {', '.join(columns)} FROM ({p})" for p in parts)
        or "SELECT * FROM answers WHERE false"
    )
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {body}")
    try:
        yield view
    finally:
        con.execute(f"DROP VIEW IF EXISTS {view}")
        for name in functions:
            con.remove_function(name)


# -- calibrators of calibrated views (written by `workbench calibrate`) ---------------------------
def save_calibrator(con: duckdb.DuckDBPyConnection, run_id: str, question: str, method: str, params: dict) -> None:
    """Store (replace) the fitted calibrator of ``question`` in the calibrated view ``run_id``."""
    con.execute("DELETE FROM calibrators WHERE run_id = ? AND question = ?", [run_id, question])
    con.execute(
        "INSERT INTO calibrators (run_id, question, method, params) VALUES (?, ?, ?, ?)",
        [run_id, question, method, json.dumps(params)],
    )


def load_calibrators(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict]:
    """{question: calibrator dict (``{"type", "params"}``)} stored for ``run_id`` (empty for raw runs)."""
    rows = con.execute(
        "SELECT question, params FROM calibrators WHERE run_id = ? ORDER BY question", [run_id]
    ).fetchall()
    return {q: json.loads(p) for q, p in rows}
