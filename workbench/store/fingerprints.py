"""A dataset version's fingerprint: a content hash of its items, labels and splits.

The same content gives the same fingerprint whatever the dataset's name or version, and whichever
import path wrote it; the hash runs in DuckDB in batches, in a canonical order.
"""

from __future__ import annotations

import hashlib

import duckdb
import numpy as np
import pyarrow as pa


def fingerprint_of(con: duckdb.DuckDBPyConnection, items: str, labels: str) -> str:
    """sha256 over the relations named ``items`` (id, state, images, split, group, metadata) and ``labels``
    (registered tables or views in the store's columns), in a canonical order.

    Metadata enters only when some item has it, so a dataset imported without ``--meta-column``
    keeps the fingerprint it had before metadata existed (re-importing it adds no version).
    """
    a = _sha256_agg(
        con,
        "concat_ws(chr(31), item_id, coalesce(state_text, ''), coalesce(state_json, ''),"
        " coalesce(array_to_string(images, ';'), ''), split, coalesce(grp, ''))",
        items,
        "item_id",
    )
    b = _sha256_agg(
        con,
        "concat_ws(chr(31), item_id, question, option_id, annotator)",
        labels,
        "item_id, question, annotator, option_id",
    )
    m = _sha256_agg(
        con, "concat_ws(chr(31), item_id, meta)", f"(SELECT * FROM {items} WHERE meta IS NOT NULL)", "item_id"
    )
    return hashlib.sha256((f"v1|{a}|{b}" + (f"|meta:{m}" if m else "")).encode()).hexdigest()


#: Rows hashed per Arrow batch by :func:`_sha256_agg`.
HASH_BATCH_ROWS = 1 << 16


def _sha256_agg(con: duckdb.DuckDBPyConnection, row_sql: str, relation: str, order: str) -> str:
    """``sha256(string_agg(row_sql, chr(30) ORDER BY order))`` of ``relation`` (hex; ``''`` when empty), streamed.

    DuckDB's own ``string_agg`` builds the whole string in memory (0.5 GB for 10M items, more than the store's
    memory cap); here the ordered rows arrive in Arrow batches (DuckDB's sort spills to disk) and each batch's
    contiguous string buffer, every row prefixed with the separator, goes into one running hash."""
    reader = con.execute(f"SELECT chr(30) || ({row_sql}) AS s FROM {relation} ORDER BY {order}").fetch_record_batch(
        HASH_BATCH_ROWS
    )
    digest = hashlib.sha256()
    first = True
    for batch in reader:
        if batch.num_rows == 0:
            continue
        col = batch.column(0).cast(pa.large_binary())
        offsets = np.frombuffer(col.buffers()[1], dtype=np.int64)[col.offset : col.offset + len(col) + 1]
        data = memoryview(col.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
        digest.update(data[1:] if first else data)  # string_agg puts no separator before the first row
        first = False
    return "" if first else digest.hexdigest()
