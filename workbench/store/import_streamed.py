"""The streamed path of a dataset import: DuckDB reads, validates and writes the files in bounded memory.

:func:`streamed_import` plans the import, builds its SQL and writes the version in one transaction;
it returns None where only the pandas path (:mod:`workbench.store.import_frames`) can import the files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError
from workbench.schema import DecisionSchema
from workbench.store.db import duckdb_settings, transaction
from workbench.store.fingerprints import HASH_BATCH_ROWS, fingerprint_of
from workbench.store.import_files import (
    READERS,
    check_delimited,
    check_header,
    check_json,
    check_regular_file,
    csv_reader,
    file_split,
    first_line,
    json_reader,
    parquet_names,
    sql_name,
    sql_text,
)
from workbench.store.import_frames import check_label_question, is_blank, map_labels
from workbench.store.import_spec import (
    GOLD_LABELS,
    REPEATED_VOTES,
    SINGLE_ANNOTATOR,
    SPLIT_ALIASES,
    SPLITS,
    DatasetInfo,
    ImportSpec,
    import_params,
)
from workbench.store.schemas import save_schema

#: Plain printable-ASCII text whose first and last characters are visible: trimming and NFC leave it as is.
_PLAIN_ID = "[!-~]([ -~]*[!-~])?"
#: DuckDB's types of a JSON(L) key the streamed path reads: text, or integers (read as their text, as the pandas
#: path reads them).
_TEXT_TYPES = {"VARCHAR", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT"}
#: Rows (all files together) from which ``import_dataset`` takes the streamed path (tests set it high to compare
#: the two paths; 0: every import the streamed path can take takes it).
FAST_PATH_MIN_ROWS = 0
#: DuckDB memory limit while the streamed path runs (restored afterwards). A cap, not an allocation: committing
#: the items' primary-key index needs more than 1 GB at 10M items (``bench/scale_data.py --import-bench``).
FAST_PATH_MEMORY_LIMIT = "1500MB"
#: Distinct values of one label or split column the streamed path maps in Python (more: the pandas path).
STREAMED_MAX_DISTINCT = 100_000
#: The streamed path reads a CSV with records up to this many times its longest line (DuckDB's ``max_line_size``).
STREAMED_LINE_FACTOR = 4
#: Values spelled out in one SQL ``CASE`` or ``NOT IN`` of the streamed path (more: the pandas path).
STREAMED_MAX_CASES = 2_000


def streamed_import(
    con: duckdb.DuckDBPyConnection, files: list[Path], spec: ImportSpec, schema: DecisionSchema | None
) -> DatasetInfo | None:
    """The import done by DuckDB over the files (streamed, bounded memory), or None for the pandas path.

    CSV, TSV (every column as text), JSON and JSONL files are first copied once into a temporary Parquet file by the
    same DuckDB reader, so the checks and the inserts scan columns instead of parsing the text again. Taken when it
    provably stores what the pandas path stores (:func:`_streamed_plan`); anything else, and every error, goes
    the pandas path, which names the offending file, row and field.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="workbench-import-") as tmp:
        plan = _streamed_plan(con, files, spec, schema, Path(tmp))
        if plan is None:
            return None
        con.execute(f"CREATE OR REPLACE TEMP VIEW _fast_items AS {plan.items_sql}")
        con.execute(f"CREATE OR REPLACE TEMP VIEW _fast_labels AS {plan.labels_sql}")
        questions = sorted(spec.labels)
        try:
            # one row per item and question (unique ids, one label column each): no item has two votes
            return write_version(
                con,
                files,
                spec,
                schema,
                ("_fast_items", "_fast_labels"),
                plan.n,
                questions,
                {q: [] for q in questions},
                unlabelled=plan.unlabelled,
                gold_sql=plan.gold_sql,
            )
        finally:
            con.execute("DROP VIEW IF EXISTS _fast_items")
            con.execute("DROP VIEW IF EXISTS _fast_labels")


@dataclass
class _StreamedPlan:
    """What :func:`write_version` inserts: SQL over the (staged) Parquet files and what the checks found."""

    n: int
    items_sql: str
    labels_sql: str
    gold_sql: str
    unlabelled: dict[str, int]


def _streamed_plan(
    con: duckdb.DuckDBPyConnection,
    files: list[Path],
    spec: ImportSpec,
    schema: DecisionSchema | None,
    tmp: Path,
) -> _StreamedPlan | None:
    """The SQL of a streamed import, or None when the pandas path must do it.

    Taken for CSV, TSV, Parquet, JSON and JSONL files whose ``text_column``, ``labels`` (with or without
    ``schema``, any question type, ``positive``) and optional ``id_column`` (else ids ``STEM-00001`` as the
    pandas path numbers them), ``group_column``, ``image_column`` and ``meta_columns`` are text columns, with any
    split source (a column, ``split``, file names, the fractions), when every id is printable ASCII with visible
    first and last characters (trimming and NFC change nothing) and unique, every text holds a visible character,
    image and metadata values are printable ASCII, and the label and split columns have few enough distinct
    values: those are mapped in Python by the pandas path's own code (:func:`map_labels`), so the stored labels,
    the unlabelled counts and the splits are the same. A label or split the pandas path refuses sends the import
    there to be named with its row.
    """
    import pyarrow.parquet as pq

    if (
        not spec.text_column
        or not spec.labels
        or spec.state_column
        or spec.annotator_column
        or spec.label_votes
        or spec.append
    ):
        return None
    kinds = [READERS.get(f.suffix.lower()) for f in files]
    if any(k is None for k in kinds):
        return None
    # the split of each row, chosen as the pandas path chooses it
    file_splits: dict[str, str] = {}
    if spec.split_column or spec.test_fraction is not None:
        pass
    elif spec.split:
        if SPLIT_ALIASES.get(spec.split.lower(), spec.split) not in SPLITS:
            return None
    else:
        for f in files:
            named = file_split(f) if len(files) > 1 else None
            chosen = named or ("train" if spec.calibration_fraction is not None else None)
            if chosen is None:
                return None
            file_splits[str(f)] = chosen
    cols = [
        *([spec.id_column] if spec.id_column else []),
        spec.text_column,
        *spec.labels.values(),
        *(c for c in (spec.split_column, spec.group_column, spec.image_column) if c),
        *spec.meta_columns,
    ]
    sources: list[str] = []
    ints: set[str] = set()
    try:
        for i, (f, kind) in enumerate(zip(files, kinds, strict=True)):
            try:
                size = check_regular_file(f)
                if kind in ("csv", "tsv"):
                    longest = check_delimited(f, "," if kind == "csv" else "\t")
                elif kind in ("json", "jsonl"):
                    check_json(con, f)
            except DataImportError:
                if i == 0:
                    raise  # the pandas path refuses the first file with the same error before anything else
                return None
            if kind == "parquet":
                check_header(parquet_names(f), f)
                src = f
            else:
                src = tmp / f"{i}.parquet"
                if kind in ("csv", "tsv"):
                    # a record spanning lines (quoted newlines) longer than this is refused by DuckDB: the pandas path
                    reader = csv_reader(f, kind, size, min(size + 1, STREAMED_LINE_FACTOR * longest))
                else:
                    reader = json_reader(f)
                    types = dict(
                        (str(d[0]), str(d[1])) for d in con.execute(f"SELECT * FROM {reader} LIMIT 0").description
                    )
                    if any(types.get(c) not in _TEXT_TYPES for c in cols):
                        return None  # e.g. a key of mixed types: JSON text the pandas path decodes
                con.execute(f"COPY (SELECT * FROM {reader}) TO {sql_text(str(src))} (FORMAT parquet)")
            file_schema = pq.read_schema(src)
            for c in cols:
                kind_of = file_schema.field(c).type if c in file_schema.names else pa.null()
                if pa.types.is_integer(kind_of):
                    ints.add(c)  # the pandas path's text of an integer is Python's str, which is DuckDB's cast
                elif not (pa.types.is_string(kind_of) or pa.types.is_large_string(kind_of)):
                    return None
            if pq.read_metadata(src).num_rows == 0:
                return None
            sources.append(str(src))
        by_file = bool(file_splits) or not spec.id_column
        if by_file and any({"filename", "file_row_number"} & set(pq.read_schema(s).names) for s in sources):
            return None  # the columns DuckDB adds for the file's name and row number
        return _streamed_sql(con, files, sources, file_splits, spec, schema, sorted(ints))
    except DataImportError:
        if not sources and files:
            raise
        return None
    except (duckdb.Error, pa.ArrowException, OSError):
        return None  # the pandas path names the problem


def _streamed_sql(
    con: duckdb.DuckDBPyConnection,
    files: list[Path],
    sources: list[str],
    file_splits: dict[str, str],
    spec: ImportSpec,
    schema: DecisionSchema | None,
    ints: list[str],
) -> _StreamedPlan | None:
    """:func:`_streamed_plan`'s checks (one DuckDB query each) and SQL over the Parquet ``sources`` (the columns
    ``ints``, integers, read as their text; a null in one sends the import to the pandas path)."""
    assert spec.text_column
    by_source = dict(zip(sources, (str(f) for f in files), strict=True))
    by_file = bool(file_splits) or not spec.id_column
    src = (
        "read_parquet(["
        + ", ".join(sql_text(s) for s in sources)
        + "]"
        + (", filename = true, file_row_number = true" if by_file else "")
        + ")"
    )
    if ints:
        casts = ", ".join(f"CAST({sql_name(c)} AS VARCHAR) AS {sql_name(c)}" for c in ints)
        src = f"(SELECT * REPLACE ({casts}) FROM {src})"
    if spec.id_column:
        idc = sql_name(spec.id_column)
    else:  # the pandas path's ids: the file's stem and the row's number in its file, from 00001
        stem = "CASE filename " + " ".join(
            f"WHEN {sql_text(s)} THEN {sql_text(Path(by_source[s]).stem)}" for s in sources
        )
        idc = f"printf('%s-%05d', {stem} END, file_row_number + 1)"
    textc = sql_name(spec.text_column)
    # image and metadata values: printable ASCII, so Python's strip is SQL's trim and json.dumps escapes only " and \
    extras = [sql_name(c) for c in (spec.image_column, *spec.meta_columns) if c]
    checks = con.execute(
        f"SELECT count(*), count(DISTINCT {idc}),"
        f" count(*) FILTER (WHERE {idc} IS NULL OR NOT regexp_full_match({idc}, '{_PLAIN_ID}')),"
        f" count(*) FILTER (WHERE {textc} IS NULL), count(*) FILTER (WHERE NOT regexp_matches({textc}, '[!-~]'))"
        + "".join(f", count(*) FILTER (WHERE NOT regexp_full_match({c}, '[ -~]*'))" for c in extras)
        + "".join(f", count(*) FILTER (WHERE {sql_name(c)} IS NULL)" for c in ints)
        + f" FROM {src}"
    ).fetchone()
    assert checks is not None
    n, n_distinct, bad_ids, no_text, not_ascii, *not_plain = (int(v) for v in checks)
    if n == 0 or n < FAST_PATH_MIN_ROWS or n != n_distinct or bad_ids or no_text or any(not_plain):
        return None
    # a text without a visible ASCII character may still be blank (whitespace, invisible characters only): those
    # few are checked by the pandas path's own pattern, a batch at a time
    if not_ascii:
        query = f"SELECT {textc} FROM {src} WHERE NOT regexp_matches({textc}, '[!-~]')"
        for batch in con.execute(query).fetch_record_batch(HASH_BATCH_ROWS):
            if batch.num_rows and is_blank(pd.Series(batch.column(0).to_pylist(), dtype=object)).any():
                return None

    def distinct(c: str) -> list[tuple[Any, int]] | None:
        rows = con.execute(
            f"SELECT {sql_name(c)}, count(*) FROM {src} GROUP BY ALL LIMIT {STREAMED_MAX_DISTINCT + 1}"
        ).fetchall()
        return None if len(rows) > STREAMED_MAX_DISTINCT else [(r[0], int(r[1])) for r in rows]

    def cases(expr: str, mapping: dict[str, str]) -> str:
        return (
            "CASE "
            + expr
            + " "
            + " ".join(f"WHEN {sql_text(k)} THEN {sql_text(v)}" for k, v in mapping.items())
            + " END"
        )

    # splits (carved by the group, else the id, as the pandas path carves)
    key = f"coalesce({sql_name(spec.group_column)}, {idc})" if spec.group_column else idc
    if spec.split_column:
        found = distinct(spec.split_column)
        if found is None:
            return None
        spelled = {v: SPLIT_ALIASES.get((v or "").strip().lower()) for v, _ in found}
        if any(m is None for m in spelled.values()) or len(spelled) > STREAMED_MAX_CASES:
            return None
        split_sql = cases(sql_name(spec.split_column), {k: v for k, v in spelled.items() if k is not None and v})
    elif spec.split:
        split_sql = sql_text(SPLIT_ALIASES.get(spec.split.lower(), spec.split))
    elif spec.test_fraction is not None:
        split_sql = f"CASE WHEN {_unit_sql(key, spec.seed, 'test')} < {_double_sql(spec.test_fraction)} THEN 'test' ELSE 'train' END"
    else:
        split_sql = cases("filename", {s: file_splits[by_source[s]] for s in sources})
    if spec.calibration_fraction:
        split_sql = (
            f"CASE WHEN ({split_sql}) = 'train' AND {_unit_sql(key, spec.seed, 'calibration')}"
            f" < {_double_sql(spec.calibration_fraction)} THEN 'calibration' ELSE ({split_sql}) END"
        )

    # labels: each column's distinct values mapped by the pandas path's code
    labels_sql, gold_sql, unlabelled = [], [], {}
    for question, c in spec.labels.items():
        check_label_question(question, c, schema)
        found = distinct(c)
        if found is None:
            return None
        raw = pd.Series([v for v, _ in found], dtype=object)
        mapped, absent = map_labels(raw, question, c, schema, spec, lambda i: f"value {i}")
        counts = np.array([k for _, k in found], dtype=np.int64)
        if absent.any():
            unlabelled[question] = int(counts[absent.to_numpy(dtype=bool)].sum())
        stored = mapped.notna().to_numpy(dtype=bool)  # pandas may spell "no label" NaN as well as None
        kept = {str(r): str(m) for r, m, k in zip(raw, mapped, stored, strict=True) if k}
        dropped = [str(r) for r, k in zip(raw, stored, strict=True) if not k and r is not None]
        if all(k == v for k, v in kept.items()) and len(dropped) <= STREAMED_MAX_CASES:
            option = sql_name(c)
            where = f"{option} IS NOT NULL" + (
                f" AND {option} NOT IN ({', '.join(map(sql_text, dropped))})" if dropped else ""
            )
        elif len(kept) <= STREAMED_MAX_CASES:
            option = cases(sql_name(c), kept)
            where = f"({option}) IS NOT NULL"
        else:
            return None
        labels_sql.append(
            f"SELECT {idc} AS item_id, {sql_text(question)} AS question, {option} AS option_id,"
            f" {sql_text(SINGLE_ANNOTATOR)} AS annotator FROM {src} WHERE {where}"
        )
        # one vote per item: each label row with its item's split, from the same file rows (no join)
        gold_sql.append(
            f"SELECT {sql_text(question)} AS question, {idc} AS item_id, {split_sql} AS split, {option} AS gold"
            f" FROM {src} WHERE {where}"
        )
    grp = sql_name(spec.group_column) if spec.group_column else "NULL::VARCHAR"
    images = "NULL::VARCHAR[]"
    if spec.image_column:
        c = sql_name(spec.image_column)
        images = f"CASE WHEN {c} <> '' THEN [trim(p) for p in string_split({c}, ';') if trim(p) <> ''] END"
    meta = "NULL::VARCHAR"
    if spec.meta_columns:
        bs, q = "\\", '"'
        fields = [
            f"{sql_text(json.dumps(c, ensure_ascii=False) + ': ')} || coalesce({sql_text(q)} || replace(replace("
            f"nullif(trim({sql_name(c)}), ''), {sql_text(bs)}, {sql_text(bs * 2)}), {sql_text(q)}, {sql_text(bs + q)})"
            f" || {sql_text(q)}, 'null')"
            for c in spec.meta_columns
        ]
        meta = "'{' || " + " || ', ' || ".join(fields) + " || '}'"
    items_sql = (
        f"SELECT {idc} AS item_id, {textc} AS state_text, NULL::VARCHAR AS state_json, {images} AS images,"
        f" {split_sql} AS split, {grp} AS grp, {meta} AS meta FROM {src}"
    )
    return _StreamedPlan(n, items_sql, " UNION ALL ".join(labels_sql), " UNION ALL ".join(gold_sql), unlabelled)


def _unit_sql(key: str, seed: int, salt: str) -> str:
    """:func:`hash_unit` of the SQL expression ``key``, in SQL."""
    return (
        f"(CAST(('0x' || left(md5({key} || ':' || {sql_text(str(seed))} || ':' || {sql_text(salt)}), 8))::UBIGINT"
        " AS DOUBLE) / 4294967296.0)"
    )


def _double_sql(x: float) -> str:
    """``x`` as an SQL DOUBLE, exactly (a bare ``0.3`` would be a DECIMAL)."""
    return f"CAST({sql_text(repr(float(x)))} AS DOUBLE)"


def write_version(
    con: duckdb.DuckDBPyConnection,
    files: list[Path],
    spec: ImportSpec,
    schema: DecisionSchema | None,
    relations: tuple[str, str],
    n: int,
    questions: list[str],
    repeated: dict[str, list[str]],
    *,
    unlabelled: dict[str, int],
    ids_normalised: int = 0,
    gold_sql: str | None = None,
) -> DatasetInfo:
    """Fingerprint the checked ``relations`` (the names of an items and a labels view or registered table, in the
    store's columns) and write them as the next version of ``spec.name``, in one transaction: every import path's
    write. ``repeated``: :data:`REPEATED_VOTES` per question; ``unlabelled`` (rows per question) and
    ``ids_normalised`` are told as notices. ``gold_sql`` selects the ``gold_labels`` rows (question, item_id, split, gold)
    from the file rows; without it they are joined from the rows just written. Nothing is written when the
    content equals the latest version's (``created`` False) or when the store refuses a row (rolled back)."""
    items, labels = relations
    notices = []
    if ids_normalised:
        notices.append(f"{ids_normalised:,} item id(s) were trimmed or NFC-normalised (e.g. 'a1 ' is stored as 'a1')")
    notices += [
        f"{k:,} row(s) have an empty or NaN label for {q!r} and were imported unlabelled"
        for q, k in sorted(unlabelled.items())
    ]
    extra: dict[str, Any] = {
        "shared_ids": None,
        "unlabelled": unlabelled,
        "ids_normalised": ids_normalised,
        "notices": notices,
    }
    params = import_params(spec, files) | {REPEATED_VOTES: repeated}
    params[GOLD_LABELS] = [q for q in questions if repeated[q] == []]
    with duckdb_settings(con, {"memory_limit": FAST_PATH_MEMORY_LIMIT}):  # DuckDB's buffer pool counts in RSS
        try:
            fingerprint = fingerprint_of(con, items, labels)
            previous = con.execute(
                "SELECT version, fingerprint FROM datasets WHERE name = ? ORDER BY version DESC LIMIT 1", [spec.name]
            ).fetchone()
            if previous is not None:
                extra["shared_ids"] = int(
                    con.execute(
                        f"SELECT count(DISTINCT n.item_id) FROM {items} n JOIN items i"
                        " ON i.dataset = ? AND i.version = ? AND i.item_id = n.item_id",
                        [spec.name, int(previous[0])],
                    ).fetchone()[0]  # type: ignore[index]
                )
            if previous is not None and previous[1] == fingerprint:
                return DatasetInfo(spec.name, int(previous[0]), fingerprint, False, n, questions, **extra)
            version = int(previous[0]) + 1 if previous else 1
            with transaction(con):
                h = save_schema(con, schema) if schema is not None else None
                con.execute(
                    "INSERT INTO datasets (name, version, fingerprint, questions, schema_hash, n_items, params)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [spec.name, version, fingerprint, questions, h, n, json.dumps(params)],
                )
                con.execute(
                    "INSERT INTO items (dataset, version, item_id, state_text, state_json, images, split, grp, meta)"
                    f" SELECT ?, ?, item_id, state_text, state_json::JSON, images, split, grp, meta::JSON FROM {items}",
                    [spec.name, version],
                )
                con.execute(
                    f"INSERT INTO labels SELECT ?, ?, item_id, question, option_id, annotator FROM {labels}",
                    [spec.name, version],
                )
                if gold_sql is None:
                    write_gold_labels(con, spec.name, version, params[GOLD_LABELS])
                else:
                    con.execute(
                        "INSERT INTO gold_labels (dataset, version, question, item_id, split, gold)"
                        f" SELECT ?, ?, question, item_id, split, gold FROM ({gold_sql})",
                        [spec.name, version],
                    )
        except duckdb.Error as exc:  # rolled back: nothing was written
            raise DataImportError(
                f"dataset {spec.name!r}: the store refused the rows: {first_line(exc)}",
                hint="fix the input named above",
            ) from None
    return DatasetInfo(spec.name, version, fingerprint, True, n, questions, **extra)


def write_gold_labels(con: duckdb.DuckDBPyConnection, name: str, version: int, questions: Sequence[str]) -> None:
    """``gold_labels`` of a version being imported (inside its transaction): each label row of
    ``questions`` (one per labelled item) with its item's split, joined from the rows just written (the
    streamed path writes them from the file rows instead)."""
    if not questions:
        return
    con.execute(
        "INSERT INTO gold_labels (dataset, version, question, item_id, split, gold)"
        " SELECT l.dataset, l.version, l.question, l.item_id, i.split, l.option_id FROM labels l"
        " JOIN items i ON i.dataset = l.dataset AND i.version = l.version AND i.item_id = l.item_id"
        " WHERE l.dataset = $n AND l.version = $v AND list_contains($qs, l.question)",
        {"n": name, "v": int(version), "qs": list(questions)},
    )
