"""Runs, answers, the call cache and typed array reads for metrics.

Readers return numpy arrays (``fetchnumpy``), never per-row Python objects, so metrics over a
million answers stay vectorised.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.answers import RunAnswers
from workbench.errors import NotFoundError
from workbench.schema import DecisionSchema, option_ids
from workbench.store.db import transaction


# -- schemas -------------------------------------------------------------------------------------
def save_schema(con: duckdb.DuckDBPyConnection, schema: DecisionSchema) -> str:
    """Store ``schema`` by hash (idempotent) and return the hash."""
    h = schema.hash
    con.execute(
        "INSERT INTO schemas (schema_hash, name, body) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        [h, schema.name, json.dumps(schema.to_file_dict(), ensure_ascii=False)],
    )
    return h


def load_stored_schema(con: duckdb.DuckDBPyConnection, schema_hash: str) -> DecisionSchema:
    row = con.execute("SELECT body FROM schemas WHERE schema_hash = ?", [schema_hash]).fetchone()
    if row is None:
        raise NotFoundError(f"schema {schema_hash[:12]} is not in the store")
    return DecisionSchema.from_dict(json.loads(row[0]), source=f"schema {schema_hash[:12]}")


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


def create_run(
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
    """Insert a run row and return its id. ``emulated``: answered by ``workbench emulator`` (cost not billed)."""
    run_id = run_id or new_run_id()
    with transaction(con):
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


def failure_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Provider failures of one run per (question, failure_kind), counted in DuckDB:
    columns ``question``, ``failure_kind``, ``count`` (most frequent first)."""
    return con.execute(
        "SELECT question, failure_kind, count(*) AS count FROM answers "
        "WHERE run_id = ? AND failure_kind IS NOT NULL GROUP BY ALL ORDER BY question, count DESC, failure_kind",
        [get_run(con, run_id)["run_id"]],
    ).df()


def list_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per run with answer/failure counts, cost, median latency and ``emulated`` (bool)."""
    return con.execute(
        "SELECT r.run_id, r.name, r.kind, r.dataset, r.dataset_version, r.provider, r.model, r.status,"
        " coalesce(r.emulated, false) AS emulated,"
        " left(r.schema_hash, 12) AS schema, r.experiment, r.variant, r.created_at,"
        " count(a.item_id) AS n_answers, count(a.failure_kind) AS n_failed,"
        " sum(a.cost_usd) AS cost_usd, quantile_cont(a.latency_ms, 0.5) AS latency_p50_ms"
        " FROM runs r LEFT JOIN answers a USING (run_id)"
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
                    "DELETE FROM answers WHERE (run_id, item_id, question) IN "
                    "(SELECT run_id, item_id, question FROM _incoming_answers)"
                )
            con.execute(f"INSERT INTO answers ({', '.join(cols)}) SELECT {', '.join(cols)} FROM _incoming_answers")
    finally:
        con.unregister("_incoming_answers")
    return table.num_rows


def run_questions(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    run = get_run(con, run_id)
    schema = load_stored_schema(con, run["schema_hash"])
    return schema.question_ids


def load_answers(
    con: duckdb.DuckDBPyConnection, run_id: str, question: str, splits: Iterable[str] | None = None
) -> RunAnswers:
    """Answers of ``run_id`` for ``question`` joined with items (split) and gold labels."""
    run = get_run(con, run_id)
    run_id = run["run_id"]
    schema = load_stored_schema(con, run["schema_hash"])
    if question not in schema.questions:
        raise NotFoundError(
            f"run {run_id} has no question {question!r}", hint=f"questions: {', '.join(schema.question_ids)}"
        )
    q = schema.questions[question]
    opts = option_ids(q)
    split_list = list(splits) if splits else None
    rel = con.execute(
        """
        WITH gold AS (
            SELECT item_id, option_id, count(*) AS votes
            FROM labels WHERE dataset = $ds AND version = $v AND question = $q
            GROUP BY ALL
        ), best AS (
            SELECT item_id, arg_max(option_id, votes * 1000000 - coalesce(list_position($opts, option_id), 999999))
                   AS gold
            FROM gold GROUP BY item_id
        )
        SELECT a.item_id, i.split, a.probs, b.gold, a.failure_kind,
               a.latency_ms, a.cost_usd, a.input_tokens
        FROM answers a
        JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id
        LEFT JOIN best b ON b.item_id = a.item_id
        WHERE a.run_id = $run AND a.question = $q
          AND ($splits IS NULL OR list_contains($splits, i.split))
        ORDER BY a.item_id
        """,
        {
            "ds": run["dataset"],
            "v": int(run["dataset_version"]),
            "q": question,
            "run": run_id,
            "opts": opts,
            "splits": split_list,
        },
    )
    tbl = rel.fetch_arrow_table()
    n, k = tbl.num_rows, len(opts)
    probs_col = tbl.column("probs")
    failed = np.asarray(probs_col.is_null().to_numpy(zero_copy_only=False), dtype=bool) if n else np.zeros(0, bool)
    probs = np.full((n, k), np.nan)
    if n and (~failed).any():
        flat = (
            pa.concat_arrays([c.flatten() for c in probs_col.drop_null().chunks])
            if probs_col.null_count
            else pa.concat_arrays([c.flatten() for c in probs_col.chunks])
        )
        probs[~failed] = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=float).reshape(-1, k)
    gold = tbl.column("gold").to_pandas()
    index = {o: i for i, o in enumerate(opts)}
    labels = gold.map(index).fillna(-1).astype(int).to_numpy() if n else np.zeros(0, int)

    def num(name: str) -> np.ndarray:
        return tbl.column(name).to_pandas().to_numpy(dtype=float, na_value=np.nan) if n else np.zeros(0)

    return RunAnswers(
        run_id=run_id,
        question=question,
        qtype=q.type,
        option_ids=opts,
        item_ids=np.asarray(tbl.column("item_id").to_pylist(), dtype=object),
        splits=np.asarray(tbl.column("split").to_pylist(), dtype=object),
        probs=probs,
        labels=labels,
        failed=failed,
        failure_kind=np.asarray(tbl.column("failure_kind").to_pylist(), dtype=object),
        latency_ms=num("latency_ms"),
        cost_usd=num("cost_usd"),
        input_tokens=num("input_tokens"),
        extra={"run": run, "schema_hash": run["schema_hash"]},
    )


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
