"""Decision schemas in the store, by hash: what datasets, runs and shadow sessions refer to.

Below :mod:`workbench.store.datasets` and :mod:`workbench.store.runs`, which both save and load them.
"""

from __future__ import annotations

import json

import duckdb

from workbench.errors import NotFoundError
from workbench.schema import DecisionSchema


def save_schema(con: duckdb.DuckDBPyConnection, schema: DecisionSchema) -> str:
    """Store ``schema`` by hash (idempotent) and return the hash."""
    h = schema.hash
    con.execute(
        "INSERT INTO schemas (schema_hash, name, body) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        [h, schema.name, json.dumps(schema.to_file_dict(), ensure_ascii=False)],
    )
    return h


def load_stored_schema(con: duckdb.DuckDBPyConnection, schema_hash: str) -> DecisionSchema:
    """The schema stored under ``schema_hash`` (raises :class:`~workbench.errors.NotFoundError` when none is)."""
    row = con.execute("SELECT body FROM schemas WHERE schema_hash = ?", [schema_hash]).fetchone()
    if row is None:
        raise NotFoundError(f"schema {schema_hash[:12]} is not in the store")
    return DecisionSchema.from_dict(json.loads(row[0]), source=f"schema {schema_hash[:12]}")
