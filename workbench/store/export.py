"""``workbench export``: a run's answers to Parquet, CSV or JSONL, ordered by item, in bounded memory and linear time.

The file holds one row per item × question, ordered by ``item_id`` then the schema's question order.
Sorting a run of tens of millions of rows with their probability lists in one ``ORDER BY`` is an
external sort of the whole payload: at 10M × 77 DuckDB's sort under a 1 GB pool spilled and took 17×
the CPU of 1M. The export is a distribution sort instead, two linear passes:

1. **Partition.** The item-id quantiles of the run split it into buckets of about
   :data:`BUCKET_BYTES` of rows (one ``quantile_disc`` over the ids, no probabilities). One unsorted
   DuckDB scan of the rows (joined with items and gold labels, never ordered) appends each batch's
   rows to its bucket's Arrow IPC file (LZ4) in a temporary directory.
2. **Sort each bucket, in bucket order.** A bucket is read back, ordered by (item id, question) and
   written out: Parquet by one ``pyarrow.parquet.ParquetWriter``; CSV and JSONL by DuckDB's own
   writer, one part per bucket, appended to the output (the CSV header once).

Buckets are ranges of item ids, so their concatenation is in item-id order: the same rows, in the
same order, as ``ORDER BY item_id, question order`` (DuckDB and Arrow both compare strings byte by
byte). Memory holds one batch in pass 1 and one bucket in pass 2 at any run size; the temporary
directory (under ``TMPDIR``) needs about the rows' uncompressed size and is removed afterwards.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workbench.errors import StoreError, WorkbenchError
from workbench.store.aggregates import count_le
from workbench.store.db import duckdb_settings, fetch_scalar, release_memory
from workbench.store.runs import gold_rank_sql

EXPORT_FORMATS = ("parquet", "csv", "jsonl")

#: DuckDB memory limit while exporting (its buffer pool counts in RSS; pass 1's joins spill past it).
EXPORT_MEMORY_LIMIT = "1GB"
#: Target size of one bucket's rows in memory (pass 2 holds one bucket, sorted: about twice this).
BUCKET_BYTES = 128 * 2**20
#: Rows per Arrow batch of pass 1.
BATCH_ROWS = 65_536
#: Bytes of a row besides its probabilities (ids, split, label, summaries, provider, model, …).
_ROW_BYTES = 160

_COLUMNS = (
    "run_id",
    "item_id",
    "split",
    "question",
    "label",
    "probs",
    "p_top",
    "margin",
    "provider",
    "model",
    "latency_ms",
    "input_tokens",
    "cost_usd",
    "cached",
    "failure_kind",
    "failure_message",
)


def _quote(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def export_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    fmt: str,
    out: str | Path,
    *,
    memory_limit: str | None = EXPORT_MEMORY_LIMIT,
    bucket_bytes: int = BUCKET_BYTES,
) -> int:
    """Write one row per item × question of ``run_id`` to ``out``; return the row count.

    Columns: run_id, item_id, split, question, label (majority gold option or NULL), probs (NULL when
    failed, in schema option order), p_top, margin, provider, model, latency_ms, input_tokens, cost_usd,
    cached, failure_kind, failure_message; rows ordered by item_id, then the schema's question order.
    The option ids are stored once, not per row: in the Parquet file's key-value metadata under
    ``workbench.option_ids`` (JSON ``{question: [option ids in order]}``), and for CSV/JSONL in a side-car
    file ``OUT.options.json`` holding ``{"workbench.option_ids": {...}}``. In CSV ``probs`` is JSON text.

    Bounded memory at any run size (module docstring: two linear passes through a temporary
    directory); ``memory_limit`` caps DuckDB's pool meanwhile (restored afterwards), ``bucket_bytes``
    the rows held at once. ``out`` appears complete or not at all (written beside it, then renamed).
    """
    from workbench.schema import option_ids
    from workbench.store.answer_import import OPTION_IDS_KEY
    from workbench.store.runs import answers_relation, get_run, load_stored_schema

    if fmt not in EXPORT_FORMATS:
        raise WorkbenchError(f"unknown export format {fmt!r}", hint=f"use one of {', '.join(EXPORT_FORMATS)}")
    run = get_run(con, run_id)
    schema = load_stored_schema(con, run["schema_hash"])
    opts = {q: option_ids(schema.questions[q]) for q in schema.question_ids}
    order = pa.table(
        {
            "question": pa.array(list(opts), type=pa.string()),
            "qpos": pa.array(range(len(opts)), type=pa.int32()),
            "option_ids": pa.array(list(opts.values()), type=pa.list_(pa.string())),
        }
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps(opts, ensure_ascii=False)
    params = {"ds": run["dataset"], "v": int(run["dataset_version"]), "run": run["run_id"], "provider": run["provider"]}
    # pass 1 needs no order; pass 2's CSV/JSON parts must keep the bucket's sorted order
    settings: dict[str, Any] = {
        "preserve_insertion_order": True,
        **({"memory_limit": memory_limit} if memory_limit else {}),
    }
    tmp = out.with_name(out.name + ".partial")
    with duckdb_settings(con, settings), answers_relation(con, [run["run_id"]]) as answers:
        con.register("_export_options", order)
        work = Path(tempfile.mkdtemp(prefix="workbench-export-"))
        try:
            n_rows = int(
                fetch_scalar(con, f"SELECT count(*) FROM {answers} WHERE run_id = $run", {"run": run["run_id"]})
            )
            k_max = max((len(o) for o in opts.values()), default=1)
            per_bucket = max(1, bucket_bytes // (8 * k_max + _ROW_BYTES))
            bounds = _bounds(con, answers, run["run_id"], math.ceil(n_rows / per_bucket))
            parts = _partition(con, answers, params, bounds, work)
            release_memory(con)  # pass 2 holds a bucket in Arrow: not on top of the blocks pass 1 cached
            key_params = {name: params[name] for name in ("ds", "v", "run")}
            keys = _Rows(con.execute(_KEYS_SQL.format(answers=answers), key_params).fetch_record_batch(BATCH_ROWS))
            _write_buckets(con, parts, keys, fmt, tmp, {OPTION_IDS_KEY: meta})
            if fmt != "parquet":
                side = out.with_name(out.name + ".options.json")
                side.write_text(
                    json.dumps({OPTION_IDS_KEY: opts}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
                )
            tmp.replace(out)
        finally:
            con.unregister("_export_options")
            tmp.unlink(missing_ok=True)
            shutil.rmtree(work, ignore_errors=True)
    return n_rows


def _bounds(con: duckdb.DuckDBPyConnection, answers: str, run_id: str, buckets: int) -> list[str]:
    """Item ids splitting the run's rows into ``buckets`` ranges of about equal size (ascending, distinct)."""
    if buckets <= 1:
        return []
    qs = [j / buckets for j in range(1, buckets)]
    row = con.execute(f"SELECT quantile_disc(item_id, ?) FROM {answers} WHERE run_id = ?", [qs, run_id]).fetchone()
    return sorted({str(b) for b in (row[0] if row and row[0] else [])})


def _partition(con: duckdb.DuckDBPyConnection, answers: str, params: dict, bounds: list[str], work: Path) -> list[Path]:
    """Pass 1: the export's rows, unordered, appended to one Arrow IPC file per item-id range; the files in order."""
    sql = f"""
        SELECT a.run_id, a.item_id, a.question, a.probs, a.p_top, a.margin, $provider AS provider, a.model,
               a.latency_ms, a.input_tokens, a.cost_usd, a.cached, a.failure_kind, a.failure_message,
               o.qpos AS _qpos, CAST({count_le(bounds, "a.item_id", literal=_quote)} AS INTEGER) AS _bucket
        FROM {answers} a JOIN _export_options o ON o.question = a.question
        WHERE a.run_id = $run
    """
    params = {"run": params["run"], "provider": params["provider"]}
    paths = [work / f"bucket-{b:05d}.arrow" for b in range(len(bounds) + 1)]
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with duckdb_settings(con, {"preserve_insertion_order": False}):
        reader = con.execute(sql, params).fetch_record_batch(BATCH_ROWS)
        try:
            for batch in reader:
                buckets = batch.column("_bucket").to_numpy(zero_copy_only=False)
                if len(bounds) == 0:
                    groups: list[tuple[int, pa.RecordBatch]] = [(0, batch)]
                else:
                    by = np.argsort(buckets, kind="stable")
                    sorted_batch = batch.take(pa.array(by))
                    values, starts = np.unique(buckets[by], return_index=True)
                    ends = [*starts[1:], len(by)]
                    groups = [
                        (int(v), sorted_batch.slice(s, e - s)) for v, s, e in zip(values, starts, ends, strict=True)
                    ]
                for b, part in groups:
                    if b not in writers:
                        writers[b] = pa.ipc.new_file(paths[b], part.schema, options=options)
                    writers[b].write_batch(part)
        finally:
            for w in writers.values():
                w.close()
    return [p for p in paths if p.exists()]


#: Each row's split and gold label (majority of the votes, ties to the option listed first), in the
#: export's order: the joins with items and labels carry ids only, never the probabilities (at 10M
#: rows a join carrying them spilled every list to disk). Pass 2 sets them beside the sorted buckets.
_KEYS_SQL = (
    """
    WITH votes AS (
        SELECT item_id, question, option_id, count(*) AS n FROM labels
        WHERE dataset = $ds AND version = $v GROUP BY ALL
    ), gold AS (
        SELECT v.item_id, v.question,
               arg_max(v.option_id, """
    + gold_rank_sql("v.n", "v.option_id", "o.option_ids")
    + """)
               AS label
        FROM votes v JOIN _export_options o USING (question) GROUP BY ALL
    )
    SELECT a.item_id, i.split, g.label
    FROM {answers} a
    JOIN _export_options o ON o.question = a.question
    LEFT JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id
    LEFT JOIN gold g ON g.item_id = a.item_id AND g.question = a.question
    WHERE a.run_id = $run
    ORDER BY a.item_id, o.qpos
"""
)


class _Rows:
    """The next ``n`` rows of a record batch stream, as a table (reads ahead one batch at most)."""

    def __init__(self, reader: pa.RecordBatchReader):
        self.reader = reader
        self.held: list[pa.RecordBatch] = []

    def take(self, n: int) -> pa.Table:
        have = sum(b.num_rows for b in self.held)
        while have < n:
            batch = self.reader.read_next_batch()  # StopIteration: fewer keys than rows (cannot happen)
            self.held.append(batch)
            have += batch.num_rows
        tbl = pa.Table.from_batches(self.held, schema=self.reader.schema)
        self.held = tbl.slice(n).to_batches()
        return tbl.slice(0, n)


def _sorted_bucket(path: Path, keys: _Rows) -> pa.Table:
    """One bucket's rows ordered by (item id, question order), with their split and label, in the export's columns."""
    with pa.memory_map(str(path)) as source:
        tbl = pa.ipc.open_file(source).read_all()
    tbl = tbl.take(pc.sort_indices(tbl, sort_keys=[("item_id", "ascending"), ("_qpos", "ascending")]))
    k = keys.take(tbl.num_rows)
    if not k.column("item_id").equals(tbl.column("item_id")):
        raise StoreError("export: the keys and the rows of a bucket are not in the same order", hint="report this bug")
    cols = {name: tbl.column(name) for name in tbl.column_names}
    cols.update(split=k.column("split"), label=k.column("label"))
    return pa.table({name: cols[name] for name in _COLUMNS})


def _write_buckets(
    con: duckdb.DuckDBPyConnection, parts: list[Path], keys: _Rows, fmt: str, tmp: Path, metadata: dict[str, str]
) -> None:
    """Pass 2: each bucket sorted and appended to ``tmp`` in bucket (item-id) order."""
    if fmt == "parquet":
        writer: pq.ParquetWriter | None = None
        try:
            for path in parts:
                tbl = _sorted_bucket(path, keys)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, tbl.schema.with_metadata(metadata))
                writer.write_table(tbl.replace_schema_metadata(metadata))
                del tbl
            if writer is None:  # a run without rows: an empty file with the columns
                empty = _empty_table(con)
                writer = pq.ParquetWriter(tmp, empty.schema.with_metadata(metadata))
                writer.write_table(empty.replace_schema_metadata(metadata))
        finally:
            if writer is not None:
                writer.close()
        return
    options = "FORMAT json" if fmt == "jsonl" else "FORMAT csv, HEADER true"
    writer_con = con.cursor()  # `con` is streaming the keys: DuckDB writes each part on its own connection
    try:
        with tmp.open("wb") as sink:
            buckets: list[Path | None] = list(parts) or [None]
            for j, bucket in enumerate(buckets):
                tbl = _sorted_bucket(bucket, keys) if bucket is not None else _empty_table(writer_con)
                part = tmp.with_name(f"{tmp.name}.{j}")
                writer_con.register("_export_part", tbl)
                try:
                    writer_con.execute(f"COPY (SELECT * FROM _export_part) TO {_quote(str(part))} ({options})")
                finally:
                    writer_con.unregister("_export_part")
                del tbl
                with part.open("rb") as src:
                    if j and fmt == "csv":
                        src.readline()  # the header is written once, by the first part
                    shutil.copyfileobj(src, sink, 16 * 2**20)
                part.unlink()
    finally:
        writer_con.close()


def _empty_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The export's columns without rows (the schema of a run that has none)."""
    return con.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM (SELECT a.*, ''::VARCHAR AS split, ''::VARCHAR AS label, ''::VARCHAR AS provider"
        " FROM answers a WHERE false)"
    ).fetch_arrow_table()
