"""Bulk import of answers computed elsewhere (``workbench runs import``): Parquet or JSONL, wide or long.

Two layouts (docs/answer-files.md has the full contract):

- **wide**: one row per item; ``item_id`` (string) and, per schema question, a column named after the
  question holding ``list<double>`` (or ``fixed_size_list<double>[k]``) probabilities in schema option
  order; NULL = the provider failed for that item. Optional: ``<question>__failure_kind`` and
  ``<question>__failure_message`` (a NULL vector without a kind fails as ``unknown``), ``split``
  (ignored: items own their splits).
- **long** (what ``workbench export`` writes): one row per item × question with ``item_id``, ``question``,
  ``probs`` and optionally ``failure_kind``, ``failure_message``, ``model``, ``latency_ms``,
  ``input_tokens``, ``cost_usd``, ``cached``; the export's other columns (``run_id``, ``split``,
  ``label``, ``p_top``, ``margin``, ``provider``, ``option_ids``) are ignored — summaries are recomputed.

The layout is detected from the columns (``question`` and ``probs`` → long). Every vector is checked as
a provider's answer is (:func:`workbench_runtime.answers.normalise_answer`): one value per option,
finite, within [0, 1] (1e-9 slack, then clipped), summing to 1 within :data:`SUM_TOLERANCE`. The values
are stored as given (clipped), with ``normalise_on_read`` where the sum is more than 1e-12 from 1: the
store's ``answers`` view divides them by it (:data:`workbench.store.db.NORMALISED_PROBS`), so readers get
the vectors re-normalised as the runtime does, and DuckDB compresses the file's short decimals (ALP) instead
of full-precision quotients. Types are as strict as the runtime's: Parquet by its column types, JSONL by
each value's JSON type (a string or boolean probability is refused, never converted; Arrow's typed JSON
reader reads the file, and DuckDB's strict reader takes over from the first value it must name). Ids must be items of the dataset
version, once per question; in the long layout every item needs every question. Any violation raises
one :class:`DataImportError` naming the first offending row (file order), how many rows are bad and the
fix; nothing is written (one transaction).

Vectorised: the source's ``item_id`` column is checked against the dataset version by DuckDB first;
then Arrow record batches of :data:`BATCH_ROWS` rows are checked, normalised and summarised with numpy by
:data:`WORKERS` threads (numpy releases the GIL) and handed, in file order, to one
``INSERT … SELECT … FROM <Arrow stream>`` inside the import's one transaction, which DuckDB runs on its
own threads meanwhile. Nothing is staged (only the id column is read twice); memory stays bounded by :data:`IN_FLIGHT`
batches plus DuckDB's ``memory_limit`` (docs/answer-files.md, "How it streams").
"""

from __future__ import annotations

import glob
import json
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workbench.errors import DataImportError
from workbench.schema import DecisionSchema, option_ids
from workbench.schema.answers import SUM_TOLERANCE
from workbench.store.calls import ANSWER_SCHEMA
from workbench.store.db import ANSWERS_TABLE, duckdb_settings, fetch_scalar, memory_connection, transaction

#: Rows per Arrow batch (65,536 × 77 doubles ≈ 40 MB per temporary).
BATCH_ROWS = 65_536
#: Rows a check computes on at once (1,024 × 77 doubles ≈ 0.6 MB: the block stays in the core's cache
#: across the sum, min, max, division, top two and entropy instead of streaming 40 MB from memory each time).
CACHE_ROWS = 1_024
#: A vector whose sum is within this of 1 is stored as given (no re-normalisation: exports round-trip exactly).
EXACT_SUM = 1e-12
#: Slack outside [0, 1] before a value is refused (the providers' check), then clipped.
RANGE_SLACK = 1e-9
#: Failure kind of a NULL vector that names none.
UNKNOWN_FAILURE = "unknown"
#: Parquet schema metadata key (and JSONL/CSV side-car key) holding {question: [option ids in order]}.
OPTION_IDS_KEY = "workbench.option_ids"
#: Threads checking batches ahead of DuckDB's insert (the machine's cores, at most 4: the insert needs some).
WORKERS = max(1, min(4, (os.cpu_count() or 2)))
#: Checked batches handed to DuckDB and not yet released by it (bounds the memory of its read-ahead).
IN_FLIGHT = 6
#: Seconds to wait for DuckDB to release a batch before handing on the next one anyway.
IN_FLIGHT_WAIT = 30.0
#: DuckDB memory limit while importing (its buffer pool counts in the process's RSS).
DEFAULT_MEMORY_LIMIT = "1500MB"

_PARQUET = {".parquet", ".pq"}
_JSONL = {".jsonl", ".ndjson", ".json"}
#: Long-layout columns that are read, with their Arrow types.
_LONG_EXTRAS = {
    "model": pa.string(),
    "latency_ms": pa.float64(),
    "input_tokens": pa.int64(),
    "cost_usd": pa.float64(),
    "cached": pa.bool_(),
}
#: Long-layout columns written by `workbench export` that the import ignores (it recomputes summaries).
_LONG_IGNORED = {"run_id", "split", "label", "p_top", "margin", "entropy", "provider", "option_ids", "deviation"}
#: The answers columns an import writes (the run id is a parameter; no vendor figure, cache key): the
#: store's own answer schema (:mod:`workbench.store.calls`) without those.
#: Plus ``normalise_on_read``: the vectors are stored as given and normalised by the store's ``answers`` view
#: (:data:`workbench.store.db.ANSWERS_VIEW`).
_OUT_SCHEMA = pa.schema(
    [f for f in ANSWER_SCHEMA if f.name not in ("run_id", "vendor_confidence", "cache_key")]
    + [pa.field("normalise_on_read", pa.bool_())]
)
_OUT_COLUMNS = [f.name for f in _OUT_SCHEMA]


# -- files ---------------------------------------------------------------------------------------
def resolve_answer_files(path: str | Path) -> tuple[list[Path], str]:
    """The files behind ``path`` (a file, a directory of part files, or a glob) and their format.

    Returns ``(files, "parquet" | "jsonl")``; a directory contributes its ``*.parquet``/``*.pq`` (or
    ``*.jsonl``) files, recursively, skipping hidden and ``_``-prefixed files (Spark's ``_SUCCESS``).
    """
    text = str(path)
    p = Path(text)
    if any(c in text for c in "*?["):
        files = [Path(f) for f in sorted(glob.glob(text, recursive=True)) if Path(f).is_file()]
        where = f"the pattern {text!r}"
    elif p.is_dir():
        files = sorted(
            f
            for f in p.rglob("*")
            if f.is_file()
            and not f.name.startswith((".", "_"))
            and f.suffix.lower() in _PARQUET | _JSONL
            and not f.name.endswith(".options.json")
        )
        where = f"directory {text}"
    elif p.is_file():
        files = [p]
        where = text
    else:
        raise DataImportError(
            f"{text}: no such file or directory", hint="give a Parquet/JSONL file, a directory or a glob"
        )
    if not files:
        raise DataImportError(f"{where}: no Parquet or JSONL file", hint="answer files end in .parquet or .jsonl")
    kinds = {
        "parquet" if f.suffix.lower() in _PARQUET else "jsonl" if f.suffix.lower() in _JSONL else "?" for f in files
    }
    if "?" in kinds:
        bad = next(f for f in files if f.suffix.lower() not in _PARQUET | _JSONL)
        raise DataImportError(f"{bad}: unknown answer file type {bad.suffix!r}", hint="use .parquet or .jsonl")
    if len(kinds) > 1:
        raise DataImportError(f"{where}: mixes Parquet and JSONL files", hint="import one format at a time")
    return files, kinds.pop()


def _sidecar_option_ids(files: Sequence[Path]) -> dict | None:
    """``OUT.options.json`` written next to a JSONL/CSV export: {question: [option ids]} or None."""
    for f in files:
        side = f.with_name(f.name + ".options.json")
        if side.is_file():
            try:
                doc = json.loads(side.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise DataImportError(
                    f"{side}: not readable JSON ({exc})", hint="fix or delete the side-car file"
                ) from None
            found = doc.get(OPTION_IDS_KEY) if isinstance(doc, dict) else None
            return found if isinstance(found, dict) else None
    return None


@dataclass
class _Source:
    files: list[Path]
    fmt: str
    names: list[str]
    types: dict[str, pa.DataType]
    option_ids: dict | None  # from Parquet metadata or the JSONL side-car

    def label(self) -> str:
        return str(self.files[0]) if len(self.files) == 1 else f"{self.files[0].parent} ({len(self.files)} files)"


def _open_source(files: list[Path], fmt: str) -> _Source:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(files[0])
        except (pa.ArrowException, OSError) as exc:
            raise DataImportError(
                f"{files[0]}: cannot read: {_first_line(exc)}", hint="is it a Parquet file?"
            ) from None
        meta = schema.metadata or {}
        raw = meta.get(OPTION_IDS_KEY.encode())
        opts = None
        if raw is not None:
            try:
                opts = json.loads(raw)
            except json.JSONDecodeError:
                opts = None
        return _Source(files, fmt, list(schema.names), {f.name: f.type for f in schema}, opts)
    con = memory_connection()
    try:
        rows = con.execute(
            "SELECT DISTINCT unnest(json_keys(json)) FROM read_json_objects(?, format = 'newline_delimited')",
            [[str(f) for f in files]],
        ).fetchall()
    except duckdb.Error as exc:
        raise DataImportError(
            f"{files[0]}: cannot read JSONL: {_first_line(exc)}", hint="one JSON object per line"
        ) from None
    finally:
        con.close()
    names = sorted(r[0] for r in rows)
    return _Source(files, fmt, names, {}, _sidecar_option_ids(files))


# -- layout --------------------------------------------------------------------------------------
@dataclass
class _Layout:
    kind: str  # wide | long
    read: dict[str, pa.DataType | None]  # column -> wanted type (None: probability list)


def _layout(src: _Source, schema: DecisionSchema) -> _Layout:
    names = {n for n in src.names if not n.startswith("__index_level_")}  # a pandas index written by to_parquet
    where = src.label()
    if "item_id" not in names:
        raise DataImportError(
            f"{where}: no 'item_id' column (columns: {', '.join(src.names[:12])})",
            hint="answers files need an item_id column naming the dataset's items",
        )
    questions = schema.question_ids
    read: dict[str, pa.DataType | None] = {"item_id": pa.string()}
    if "question" in names and "probs" in names:
        read |= {"question": pa.string(), "probs": None, "failure_kind": pa.string(), "failure_message": pa.string()}
        read |= _LONG_EXTRAS
        unknown = sorted(names - set(read) - _LONG_IGNORED)
        if unknown:
            raise DataImportError(
                f"{where}: column {unknown[0]!r} is not a column of the long layout",
                hint="long layout: item_id, question, probs[, failure_kind, failure_message, model, latency_ms,"
                " input_tokens, cost_usd, cached]; drop the column",
            )
        return _Layout("long", {k: v for k, v in read.items() if k in names})
    missing = [q for q in questions if q not in names]
    if missing:
        raise DataImportError(
            f"{where}: no column for question {missing[0]!r} ({len(missing)} of {len(questions)} questions missing)",
            hint=f"wide layout: one list<double> column per question ({', '.join(questions)}); a NULL vector"
            " marks a failure",
        )
    read["split"] = pa.string()
    for q in questions:
        read[q] = None
        read[f"{q}__failure_kind"] = pa.string()
        read[f"{q}__failure_message"] = pa.string()
    unknown = sorted(names - set(read))
    if unknown:
        raise DataImportError(
            f"{where}: column {unknown[0]!r} is neither item_id, split nor a question of schema {schema.name!r}",
            hint=f"questions: {', '.join(questions)} (plus optional <question>__failure_kind / __failure_message);"
            " rename or drop the column",
        )
    return _Layout("wide", {k: v for k, v in read.items() if k in names})


def _check_types(src: _Source, layout: _Layout) -> None:
    """Parquet columns must have the layout's types (lists of numbers for probabilities)."""
    for col, want in layout.read.items():
        t = src.types.get(col)
        if t is None:
            continue
        if want is None:
            ok = (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and (
                pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)
            )
            if not ok:
                raise DataImportError(
                    f"{src.label()}: column {col!r} is {t}, not a list of probabilities",
                    hint="write it as list<double> (or fixed_size_list<double>[k]) in schema option order",
                )
        elif pa.types.is_string(want) and not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or (pa.types.is_integer(t) and col == "item_id")  # integer ids are read as their text
            or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
            or pa.types.is_null(t)
        ):
            raise DataImportError(
                f"{src.label()}: column {col!r} is {t}, not text", hint=f"write {col} as a string column"
            )
        elif (pa.types.is_floating(want) or pa.types.is_integer(want)) and not (
            pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_null(t) or pa.types.is_decimal(t)
        ):
            raise DataImportError(f"{src.label()}: column {col!r} is {t}, not a number", hint=f"write {col} as numbers")
        elif pa.types.is_boolean(want) and not (pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise DataImportError(
                f"{src.label()}: column {col!r} is {t}, not true/false", hint=f"write {col} as booleans"
            )


def _check_option_ids(src: _Source, schema: DecisionSchema) -> None:
    """The file's recorded option order (export metadata) must be the schema's: else every vector is permuted."""
    if not src.option_ids:
        return
    for q, opts in src.option_ids.items():
        if q in schema.questions and list(opts) != option_ids(schema.questions[q]):
            ours = option_ids(schema.questions[q])
            diff = next((i for i, (a, b) in enumerate(zip(opts, ours)) if a != b), min(len(opts), len(ours)))
            raise DataImportError(
                f"{src.label()}: question {q!r} was written with options in another order than schema "
                f"{schema.name!r} (position {diff + 1}: {opts[diff] if diff < len(opts) else '-'!r} vs "
                f"{ours[diff] if diff < len(ours) else '-'!r})",
                hint="import with the schema the answers were exported with",
            )


def _batches(src: _Source, layout: _Layout) -> Iterator[pa.RecordBatch]:
    """The source's columns, in batches of :data:`BATCH_ROWS` rows (streamed; bounded memory)."""
    cols = list(layout.read)
    if src.fmt == "parquet":
        import pyarrow.parquet as pq

        # file by file, row group by row group, without pre-buffering: the dataset scanner's read-ahead
        # and pre-buffer cache held ~0.85 GB of decoded pages at 10M rows (this reader: < 0.1 GB)
        for f in src.files:
            pf = pq.ParquetFile(f, pre_buffer=False)
            try:
                have = set(pf.schema_arrow.names)
                missing = [c for c in cols if c not in have]
                for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[c for c in cols if c in have]):
                    for c in missing:  # a part file without an optional column: NULLs, as a dataset reads it
                        batch = batch.append_column(c, pa.nulls(batch.num_rows, src.types.get(c) or pa.null()))
                    yield batch
            finally:
                pf.close()
        return
    # Arrow's JSON reader first (typed, 3-4x less CPU): it refuses a value of another JSON type than the column's,
    # which is what the strict reader below refuses too. It accepts NaN and null inside lists, which the strict
    # reader names as type errors: from the first batch holding one (or Arrow's first refusal) on, the strict
    # reader takes over at that row, so every error is named by it, with its row number
    done = 0
    try:
        for batch in _arrow_jsonl(src, layout):
            if not _plain_json_values(batch, layout):
                break
            yield batch
            done += batch.num_rows
        else:
            return
    except pa.ArrowInvalid:
        pass
    # every value is read as JSON and converted by type (DuckDB's typed reader would turn "0.5" and true into
    # numbers, and any value into text); a value of the wrong JSON type comes out as NULL, with its JSON text
    # in the column TYPE_ERROR_PREFIX + name (NULL when the value is fine), which the checks report
    spec = "{" + ", ".join(f"'{c}': 'JSON'" for c in cols) + "}"
    select = []
    for c, t in layout.read.items():
        value, ok = _json_conversion(_quote(c), t, item_id=c == "item_id")
        select += [f"CASE WHEN {ok} THEN {value} END AS {_quote(c)}"]
        select += [f"CASE WHEN NOT ({ok}) THEN {_quote(c)}::VARCHAR END AS {_quote(TYPE_ERROR_PREFIX + c)}"]
    con = memory_connection()
    try:
        reader = con.execute(
            f"SELECT {', '.join(select)} FROM read_json(?, format = 'newline_delimited', columns = {spec})"
            + (f" OFFSET {done}" if done else ""),
            [[str(f) for f in src.files]],
        ).fetch_record_batch(BATCH_ROWS)
        yield from reader
    finally:
        con.close()


#: Bytes of JSONL Arrow's reader parses at a time (one batch; ~40k rows of 77 probabilities). A line longer
#: than this makes it refuse the file, and the strict reader reads it.
ARROW_JSON_BLOCK = 16 << 20


def _object_lines_only(path: Path | str) -> bool:
    """True when every non-empty line of the file starts with ``{`` (a JSON object), checked on the raw bytes
    block by block with numpy. Arrow's JSON reader is only given such files: it crashes the process on a
    top-level ``null`` line (pyarrow 26), and anything but an object is the strict reader's to name."""
    ok_first = np.zeros(256, dtype=bool)
    ok_first[[ord("{"), ord("\n"), ord("\r")]] = True
    line_start = True  # the next byte starts a line
    with open(path, "rb") as fh:
        while block := fh.read(ARROW_JSON_BLOCK):
            a = np.frombuffer(block, dtype=np.uint8)
            starts = np.flatnonzero(a[:-1] == ord("\n")) + 1
            if line_start and not ok_first[a[0]]:
                return False
            if not ok_first[a[starts]].all():
                return False
            line_start = bool(a[-1] == ord("\n"))
    return True


def _arrow_jsonl(src: _Source, layout: _Layout) -> Iterator[pa.RecordBatch]:
    """The JSONL files' columns of ``layout`` read by Arrow with their types (probabilities: list<double>), file
    by file in file order; raises ``pa.ArrowInvalid`` at a value of another JSON type (or unreadable JSON)."""
    import pyarrow.json as pj

    types = {c: pa.list_(pa.float64()) if t is None else t for c, t in layout.read.items()}
    schema = pa.schema(list(types.items()))
    parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    for f in src.files:
        if not _object_lines_only(f):  # pyarrow 26 crashes (SIGSEGV) on a top-level null line: the strict reader
            raise pa.ArrowInvalid(f"{f}: a line that is not a JSON object")
        reader = pj.open_json(f, read_options=pj.ReadOptions(block_size=ARROW_JSON_BLOCK), parse_options=parse)
        try:
            for batch in reader:
                if batch.schema != schema:
                    batch = pa.RecordBatch.from_arrays([batch.column(c) for c in types], schema=schema)
                yield batch
        finally:
            reader.close()


def _plain_json_values(batch: pa.RecordBatch, layout: _Layout) -> bool:
    """No value the strict reader refuses as a type error and Arrow's accepts: NaN/Infinity in a number or list
    column, null inside a probability list."""
    for c, t in layout.read.items():
        col = batch.column(c)
        if t is None:
            col = col.flatten()  # the values of the non-null lists
            if col.null_count:
                return False
        elif pa.types.is_floating(t):
            col = col.drop_null()
        else:
            continue
        if len(col) and not np.isfinite(np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)).all():
            return False
    return True


#: JSONL: a column holding the JSON text of each value of the wrong type (NULL elsewhere), per column read.
TYPE_ERROR_PREFIX = "__type_error__:"
#: JSON text of an array of numbers only (DuckDB parsed the value, so this is a full match on valid JSON):
#: no string, true/false/null, NaN/Infinity, nested array or object.
_NUMBER_ARRAY = r"\[[-+0-9.eE,\s]*\]"
#: JSON number types as DuckDB's json_type names them.
_JSON_NUMBERS = "('BIGINT', 'UBIGINT', 'DOUBLE', 'HUGEINT')"


def _json_conversion(col: str, t: pa.DataType | None, *, item_id: bool) -> tuple[str, str]:
    """(value, ok) SQL of a JSON column read for type ``t`` (None: a probability list); NULL is always ok.

    As strict as the runtime's answer parsing: probabilities are JSON numbers (not strings, booleans or
    null), text is a JSON string (an item id may also be an integer, read as its text), numbers are JSON
    numbers (integers for an integer column), booleans are true/false.
    """
    kind = f"json_type({col})"
    if t is None:
        return (
            f"json_transform({col}, '[\"DOUBLE\"]')",
            f"{col} IS NULL OR regexp_full_match({col}::VARCHAR, '{_NUMBER_ARRAY}')",
        )
    if pa.types.is_string(t):
        text = f"CASE {kind} WHEN 'VARCHAR' THEN {col} ->> '$' ELSE {col}::VARCHAR END"
        allowed = "('VARCHAR', 'BIGINT', 'UBIGINT')" if item_id else "('VARCHAR')"
        return text, f"{col} IS NULL OR {kind} IN {allowed}"
    if pa.types.is_floating(t):
        return f"{col}::DOUBLE", f"{col} IS NULL OR {kind} IN {_JSON_NUMBERS}"
    if pa.types.is_integer(t):
        return f"{col}::BIGINT", f"{col} IS NULL OR {kind} IN ('BIGINT', 'UBIGINT')"
    return f"{col}::BOOLEAN", f"{col} IS NULL OR {kind} = 'BOOLEAN'"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text[:300]


# -- checks --------------------------------------------------------------------------------------
def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not np.isfinite(value):
        return repr(value).replace("nan", "NaN").replace("inf", "Infinity")
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def _shown(value: Any) -> str:
    """A JSON value as written in the file, cut to 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except ValueError:  # NaN/Infinity
        text = repr(value).replace("nan", "NaN").replace("inf", "Infinity")
    return text if len(text) <= 40 else text[:37] + "..."


def _type_error(column: str, text: str, want: pa.DataType | None) -> str:
    """What is wrong with the JSON value ``text`` of ``column`` (the error path only)."""
    try:
        value = json.loads(text)
    except ValueError:  # NaN/Infinity (Python reads them; kept as text here)
        value = text
    if want is None:
        if not isinstance(value, list):
            return f"column {column!r} holds {_json_kind(value)} ({_shown(value)}), not a list of probabilities"
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
                return (
                    f"column {column!r}: probability {_shown(v)} at option {i + 1} is {_json_kind(v)}, "
                    "not a finite JSON number"
                )
        return f"column {column!r} holds {_shown(text)}, not a list of JSON numbers"
    what = (
        "a string"
        if pa.types.is_string(want)
        else "a number"
        if pa.types.is_floating(want)
        else "an integer"
        if pa.types.is_integer(want)
        else "true or false"
    )
    return f"column {column!r} holds {_json_kind(value)} ({_shown(value)}), not {what}"


_HINTS = {
    "type": "write each value as its JSON type: probabilities as numbers (not strings or booleans), ids and"
    " failure kinds as strings",
    "item_id": "every row needs the id of an item of the dataset",
    "question": "use the schema's question ids",
    "length": "write one probability per schema option, in schema order",
    "value": "probabilities are finite numbers in [0, 1]",
    "sum": f"each vector must sum to 1 within {SUM_TOLERANCE} (it is then re-normalised)",
    "both": "a failed answer has a NULL vector; drop its failure kind when it has probabilities",
    "read": "fix the file",
    "figure": "latency_ms, input_tokens and cost_usd are finite numbers >= 0 (or null when unknown)",
}


@dataclass
class _Problems:
    """Bad rows found while streaming: counts per check and the first offending row in file order."""

    counts: dict[str, int] = field(default_factory=dict)
    first: tuple[int, str, str] | None = None  # (row, check, message)

    def add(self, check: str, rows: np.ndarray, base: int, describe, positions: np.ndarray | None = None) -> None:
        """Record the rows (positions in the batch, ascending) failing ``check``; ``describe(pos)`` names one.

        ``positions``: the same rows as positions in the arrays ``describe`` reads, when those are a subset of
        the batch (the long layout checks one question's rows at a time); by default ``rows``.
        """
        if rows.size == 0:
            return
        self.counts[check] = self.counts.get(check, 0) + int(rows.size)
        row = base + int(rows[0])
        if self.first is None or row < self.first[0]:
            self.first = (row, check, describe(int((rows if positions is None else positions)[0])))

    def merge(self, other: _Problems) -> None:
        """Fold in the problems another batch found (counts add; the earliest row stays first)."""
        for check, n in other.counts.items():
            self.counts[check] = self.counts.get(check, 0) + n
        if other.first is not None and (self.first is None or other.first[0] < self.first[0]):
            self.first = other.first

    def __bool__(self) -> bool:
        return bool(self.counts)

    def error(self, where: str) -> DataImportError:
        assert self.first is not None
        row, check, message = self.first
        total = sum(self.counts.values())
        others = ", ".join(f"{n:,} {k}" for k, n in sorted(self.counts.items()))
        return DataImportError(
            f"{where}: row {row + 1:,}: {message} ({total:,} bad row{'s' if total != 1 else ''}: {others};"
            " nothing was imported)",
            hint=_HINTS.get(check, "fix the file"),
        )


def _text(col: pa.Array | None, n: int) -> pa.Array:
    if col is None:
        return pa.nulls(n, pa.string())
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col if col.type == pa.string() else pc.cast(col, pa.string())


def _vectors(
    question: str,
    k: int,
    ids: pa.Array,
    probs: pa.Array,
    kinds: pa.Array,
    messages: pa.Array,
    extras: dict[str, pa.Array],
    rows: np.ndarray,
    base: int,
    problems: _Problems,
) -> tuple[pa.RecordBatch, np.ndarray] | None:
    """Check and summarise one question's vectors; the answers rows (and the array holding their
    probabilities, which Arrow does not copy), or None when a check failed.

    ``rows`` are the vectors' positions in the source batch (for the file row named in errors).
    """
    n = len(probs)
    if pa.types.is_fixed_size_list(probs.type):
        lengths = np.full(n, probs.type.list_size)
    else:
        lengths = pc.fill_null(pc.list_value_length(probs), 0).to_numpy(zero_copy_only=False)
    valid = probs.is_valid().to_numpy(zero_copy_only=False)

    def describe(what: Callable[[int], str]) -> Callable[[int], str]:
        def f(pos: int) -> str:  # only called on the error path
            return f"item {ids[pos].as_py()!r}, question {question!r}: {what(pos)}"

        return f

    bad_len = np.flatnonzero(valid & (lengths != k))
    problems.add(
        "length",
        rows[bad_len],
        base,
        describe(lambda p: f"{lengths[p]} probabilities, the schema has {k} options"),
        bad_len,
    )
    kind_given = kinds.is_valid().to_numpy(zero_copy_only=False)
    both = np.flatnonzero(valid & kind_given)
    problems.add(
        "both",
        rows[both],
        base,
        describe(lambda p: f"a probability vector and failure kind {kinds[p].as_py()!r}"),
        both,
    )
    if bad_len.size:
        return None
    n_ok = int(valid.sum())
    flat = probs.flatten() if not pa.types.is_fixed_size_list(probs.type) else probs.filter(probs.is_valid()).flatten()
    if len(flat) != n_ok * k:  # a NULL vector with hidden values: take the valid rows' values only
        flat = probs.filter(probs.is_valid()).flatten()
    values = flat.cast(pa.float64()) if flat.type != pa.float64() else flat
    m = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64).reshape(n_ok, k)
    ok_rows = np.flatnonzero(valid)
    s, lo, hi = np.empty(n_ok), np.empty(n_ok), np.empty(n_ok)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(0, n_ok, CACHE_ROWS):  # row by row the same figures; a block stays in cache for all three
            block, b = m[a : a + CACHE_ROWS], min(a + CACHE_ROWS, n_ok)
            block.sum(axis=1, out=s[a:b])
            block.min(axis=1, out=lo[a:b])
            block.max(axis=1, out=hi[a:b])
    nonfinite = ~np.isfinite(s)
    out_of_range = ~nonfinite & ((lo < -RANGE_SLACK) | (hi > 1 + RANGE_SLACK))

    def value_detail(p: int) -> str:
        j = int(np.searchsorted(ok_rows, p))
        vec = m[j]
        bad = np.flatnonzero(~np.isfinite(vec) | (vec < -RANGE_SLACK) | (vec > 1 + RANGE_SLACK))
        return f"probability {float(vec[bad[0]])!r} at option {int(bad[0]) + 1} is not a finite number in [0, 1]"

    bad_value = ok_rows[nonfinite | out_of_range]
    problems.add("value", rows[bad_value], base, describe(value_detail), bad_value)
    clip = ~nonfinite & ~out_of_range & ((lo < 0) | (hi > 1))
    if clip.any():
        m = m.copy()
        m[clip] = np.clip(m[clip], 0.0, 1.0)
        s[clip] = m[clip].sum(axis=1)
    dev = s - 1.0
    bad_sum = ~nonfinite & ~out_of_range & (np.abs(dev) > SUM_TOLERANCE)
    problems.add(
        "sum",
        rows[ok_rows[bad_sum]],
        base,
        describe(
            lambda p: f"probabilities sum to {s[np.searchsorted(ok_rows, p)]:.4f}, more than {SUM_TOLERANCE} from 1"
        ),
        ok_rows[bad_sum],
    )
    if problems:
        return None
    # the values are stored as given (clipped), with normalise_on_read where they need dividing by their sum
    # s = 1 + dev (the store's answers view divides them as this did before: the same doubles). The figures
    # are of the normalised vector, a block at a time in a scratch buffer (rows within EXACT_SUM of 1 are
    # divided by 1.0, which leaves every value as it is)
    need = np.abs(dev) > EXACT_SUM
    divisor = np.where(need, s, 1.0)
    p1, p2, ent = np.empty(n_ok), np.empty(n_ok), np.empty(n_ok)
    top = np.empty(n_ok, dtype=np.int32)
    scratch = getattr(_SCRATCH, "block", None)
    if scratch is None or scratch.size < CACHE_ROWS * k:
        scratch = _SCRATCH.block = np.empty(CACHE_ROWS * k)
    for a in range(0, n_ok, CACHE_ROWS):  # divide, top two and entropy of a block while it is in cache
        b = min(a + CACHE_ROWS, n_ok)
        block = np.divide(m[a:b], divisor[a:b, None], out=scratch[: (b - a) * k].reshape(b - a, k))
        top[a:b], p1[a:b], p2[a:b] = _top_two(block)
        ent[a:b] = _entropy(block)

    def full(x: np.ndarray) -> pa.Array:
        out = np.full(n, np.nan)
        out[valid] = x
        return pa.array(out, type=pa.float64(), from_pandas=True)

    top_option_column = np.full(n, -1, dtype=np.int32)  # -1: a failure (the checked rows are finite)
    top_option_column[valid] = top
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(valid, k, 0), out=offsets[1:])
    given = m.reshape(-1)  # the batch's values buffer holds this very array (the owner returned)
    vectors = pa.ListArray.from_arrays(pa.array(offsets), pa.array(given), mask=pa.array(~valid))
    renormalise = np.zeros(n, dtype=bool)
    renormalise[valid] = need
    failed_kind = pc.if_else(pa.array(valid), pa.nulls(n, pa.string()), pc.fill_null(kinds, UNKNOWN_FAILURE))
    cols = {
        "item_id": ids,
        "question": pa.repeat(pa.scalar(question, pa.string()), n),
        "probs": vectors,
        "p_top": full(p1),
        "margin": full(p1 - p2),
        "top_option": pa.array(top_option_column, type=pa.int32()),
        "entropy": full(ent),
        "deviation": full(dev),
        "failure_kind": failed_kind,
        "failure_message": pc.if_else(pa.array(valid), pa.nulls(n, pa.string()), messages),
        "normalise_on_read": pa.array(renormalise, type=pa.bool_()),
    }
    for name, typ in _LONG_EXTRAS.items():
        col = extras.get(name)
        cols[name] = pa.nulls(n, typ) if col is None else (col if col.type == typ else pc.cast(col, typ))
    return pa.RecordBatch.from_arrays([cols[c] for c in _OUT_COLUMNS], schema=_OUT_SCHEMA), given


def _entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats per row, as :func:`workbench_runtime.answers.entropy` (to ~1e-16), faster.

    ``p`` holds checked probabilities (in [0, 1]): a zero entry's logarithm is taken of the smallest
    normal double instead (finite, and multiplied by 0 it adds nothing), so ``log`` runs its unmasked
    SIMD loop (``where=`` would not), and the row sums are one ``einsum``: the same figures as taking the
    logarithm of the positive entries only, bit for bit.
    """
    scratch = getattr(_SCRATCH, "logs", None)
    if scratch is None or scratch.size < p.size:  # one buffer per checking thread: no fresh pages per batch
        scratch = _SCRATCH.logs = np.empty(p.size)
    logs = scratch[: p.size].reshape(p.shape)
    np.maximum(p, np.finfo(np.float64).tiny, out=logs)
    np.log(logs, out=logs)
    return -np.einsum("ij,ij->i", p, logs)


#: Per-thread scratch arrays of the checks.
_SCRATCH = threading.local()


def _top_two(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index of the top option, top and runner-up probability per row of finite ``p`` (modified, then
    restored exactly).

    The values :func:`workbench.schema.answers.top_two` returns, in two passes over ``p`` instead of four
    (no NaN check: the rows are checked; no copy: the top entry is masked in place and put back).
    """
    n, k = p.shape
    rows = np.arange(n)
    top = p.argmax(axis=1)
    p1 = p[rows, top]
    if k < 2:
        return top, p1, np.zeros(n)
    p[rows, top] = -np.inf
    p2 = p.max(axis=1)
    p[rows, top] = p1
    return top, p1, p2


def _value_counts(col: pa.Array) -> list[tuple[Any, int]]:
    """(value, rows) of the non-null values of ``col``, in order of first appearance."""
    vc = pc.value_counts(col.drop_null())
    return list(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True))


@dataclass
class _Tally:
    """:func:`workbench.store.calls.run_summary`'s figures, summed over the rows handed to DuckDB (file order)."""

    count_models: bool = False
    answered: int = 0
    failed: int = 0
    failed_by_kind: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    cost: float | None = None
    cost_paid: float | None = None
    unknown_cost: int = 0
    models: dict[str, int] = field(default_factory=dict)  # model -> rows (insertion order: first seen first)

    def add(self, out: pa.RecordBatch) -> None:
        probs = out.column("probs")
        n_failed = probs.null_count
        self.answered += len(probs) - n_failed
        self.failed += n_failed
        if n_failed:
            for kind, n in _value_counts(out.column("failure_kind")):
                self.failed_by_kind[kind] = self.failed_by_kind.get(kind, 0) + n
        tokens = out.column("input_tokens")
        if tokens.null_count < len(tokens):
            self.input_tokens += int(pc.sum(tokens).as_py() or 0)
        cost = out.column("cost_usd")
        if cost.null_count < len(cost):
            self.cost = (self.cost or 0.0) + float(pc.sum(cost).as_py())
            paid = pc.filter(cost, pc.invert(pc.fill_null(out.column("cached"), False)))
            if paid.null_count < len(paid):
                self.cost_paid = (self.cost_paid or 0.0) + float(pc.sum(paid).as_py())
        self.unknown_cost += int(pc.sum(pc.and_(cost.is_null(), probs.is_valid())).as_py() or 0)
        if self.count_models:
            for model, n in _value_counts(out.column("model")):
                self.models[model] = self.models.get(model, 0) + n

    def mode_model(self) -> str | None:
        """The most frequent model (ties: the first seen), or None."""
        return max(self.models, key=self.models.__getitem__) if self.models else None

    def summary(self, items: int) -> dict[str, Any]:
        """The figures :func:`~workbench.store.calls.run_summary` reads back from ``answers`` for this run.

        An import pays no call (no cache key, nothing billed unanswered), so the latency quantiles are
        None and the billed-unanswered figures 0, as there.
        """
        return {
            "billed_unanswered_calls": 0,
            "billed_unanswered_cost_usd": 0.0,
            "billed_unanswered_unknown_cost": 0,
            "cost_billed_usd": self.cost_paid,
            "items": int(items),
            "answered": self.answered,
            "failed": self.failed,
            "failed_by_kind": dict(sorted(self.failed_by_kind.items(), key=lambda kv: -kv[1])),
            "input_tokens": self.input_tokens,
            "cost_usd": self.cost,
            "cost_paid_usd": self.cost_paid,
            "answers_with_unknown_cost": self.unknown_cost,
            "latency_p50_ms": None,
            "latency_p95_ms": None,
        }


class _Stream:
    """The checked answers rows of a source, as an Arrow stream DuckDB pulls from, and the run's tallies."""

    def __init__(self, src: _Source, layout: _Layout, schema: DecisionSchema, model: str | None):
        self.src, self.layout, self.schema, self.model = src, layout, schema, model
        self.problems = _Problems()
        self.rows = 0
        self.k = {q: len(option_ids(schema.questions[q])) for q in schema.question_ids}
        self.tally = _Tally(count_models=layout.kind == "long" and not model)
        self._in_flight = threading.Semaphore(IN_FLIGHT)
        self._gen: Iterator[pa.RecordBatch] | None = None

    def reader(self) -> pa.RecordBatchReader:
        """The checked rows as one Arrow stream (DuckDB's ``INSERT`` pulls it); see :meth:`drain`."""
        self._gen = self.batches()
        return pa.RecordBatchReader.from_batches(_OUT_SCHEMA, self._gen)

    def drain(self) -> None:
        """Check the rest of the source without handing rows on (after the reader stopped, or instead of
        it), so that :attr:`problems` counts every bad row of the file."""
        gen = self._gen if self._gen is not None else self.batches()
        self._gen = None
        for _ in gen:
            pass

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Batches checked by :data:`WORKERS` threads (numpy and Arrow release the GIL), yielded in file order.

        At most ``WORKERS + 1`` batches are in flight, so memory stays bounded; DuckDB inserts one batch
        while the next ones are checked. After the first bad row nothing more is yielded, but every batch
        is still checked (the error counts every check's bad rows).
        """
        pending: deque[tuple[Future, _Problems, int]] = deque()
        submitted = 0
        try:
            with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="answer-import") as pool:
                batches = _batches(self.src, self.layout)
                exhausted = False
                while True:
                    while not exhausted and len(pending) <= WORKERS:
                        batch = next(batches, None)
                        if batch is None:
                            exhausted = True
                            break
                        found = _Problems()
                        pending.append((pool.submit(self._checked, batch, submitted, found), found, batch.num_rows))
                        submitted += batch.num_rows
                    if not pending:
                        break
                    future, found, n = pending.popleft()
                    outs = future.result()
                    del future  # the result list must not outlive the rows handed on
                    self.problems.merge(found)
                    self.rows += n
                    while outs and not self.problems:  # after the first bad row: keep counting, stop handing on
                        out, owner = outs.pop(0)
                        self.tally.add(out)
                        # DuckDB reads the stream through a pyarrow scanner that reads ahead without bound
                        # (1.6 GB of batches at 4M rows): hand on a batch only while fewer than
                        # IN_FLIGHT are alive (the timeout only guards against a stall)
                        self._in_flight.acquire(timeout=IN_FLIGHT_WAIT)
                        weakref.finalize(owner, self._in_flight.release)
                        del owner
                        yield out
                    del outs
        except (pa.ArrowException, duckdb.Error, OSError) as exc:
            for future, _, _ in pending:
                future.cancel()
            self.problems.counts["unreadable"] = 1
            self.problems.first = (self.rows, "read", f"cannot read: {_first_line(exc)}")

    def _checked(
        self, batch: pa.RecordBatch, base: int, problems: _Problems
    ) -> list[tuple[pa.RecordBatch, np.ndarray]]:
        return list(self._one(batch, base, problems))

    def _one(
        self, batch: pa.RecordBatch, base: int, problems: _Problems
    ) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        n = batch.num_rows
        names = batch.schema.names
        ids = _text(batch.column("item_id"), n)
        for name in names:  # JSONL: values of the wrong JSON type (first, so they are named before what follows)
            if name.startswith(TYPE_ERROR_PREFIX):
                col, texts = name[len(TYPE_ERROR_PREFIX) :], batch.column(name)
                bad = np.flatnonzero(texts.is_valid().to_numpy(zero_copy_only=False))
                problems.add(
                    "type",
                    bad,
                    base,
                    lambda p: (
                        (f"item {ids[p].as_py()!r}, " if ids[p].is_valid else "")
                        + _type_error(col, texts[p].as_py(), self.layout.read[col])
                    ),
                )
        id_type_error = TYPE_ERROR_PREFIX + "item_id"
        bad_type = batch.column(id_type_error).is_valid() if id_type_error in names else pa.repeat(False, n)
        null_ids = np.flatnonzero(~pc.or_(ids.is_valid(), bad_type).to_numpy(zero_copy_only=False))
        problems.add("item_id", null_ids, base, lambda p: "item_id is empty")
        model = pa.repeat(pa.scalar(self.model, pa.string()), n) if self.model else None
        rows = np.arange(n)
        if self.layout.kind == "wide":
            extras = {"model": model} if model is not None else {}
            for q in self.schema.question_ids:
                kinds = _text(batch.column(f"{q}__failure_kind") if f"{q}__failure_kind" in names else None, n)
                msgs = _text(batch.column(f"{q}__failure_message") if f"{q}__failure_message" in names else None, n)
                out = _vectors(q, self.k[q], ids, batch.column(q), kinds, msgs, extras, rows, base, problems)
                if out is not None:
                    yield out
            return
        questions = _text(batch.column("question"), n)
        known = pc.is_in(questions, value_set=pa.array(self.schema.question_ids, type=pa.string()))
        unknown = np.flatnonzero(~pc.fill_null(known, False).to_numpy(zero_copy_only=False))
        problems.add(
            "question",
            unknown,
            base,
            lambda p: f"question {questions[p].as_py()!r} is not in schema {self.schema.name!r}",
        )
        kinds = _text(batch.column("failure_kind") if "failure_kind" in names else None, n)
        msgs = _text(batch.column("failure_message") if "failure_message" in names else None, n)
        extras = {c: batch.column(c) for c in _LONG_EXTRAS if c in names}
        for c in ("latency_ms", "input_tokens", "cost_usd"):  # figures of a call: finite and >= 0
            if c in extras:
                v = extras[c].cast(pa.float64()).to_numpy(zero_copy_only=False)
                with np.errstate(invalid="ignore"):
                    bad = np.flatnonzero(
                        extras[c].is_valid().to_numpy(zero_copy_only=False) & ~(v >= 0) | (v == np.inf)
                    )
                problems.add(
                    "figure",
                    bad,
                    base,
                    lambda p, c=c, v=v: f"item {ids[p].as_py()!r}: {c} {v[p]!r} is not a number >= 0",
                )
        if model is not None:
            extras["model"] = pc.coalesce(_text(extras.get("model"), n), model)
        probs = batch.column("probs")
        for q in self.schema.question_ids:
            mask = pc.fill_null(pc.equal(questions, q), False)
            sel = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
            if sel.size == 0:
                continue
            take = pa.array(sel)
            out = _vectors(
                q,
                self.k[q],
                ids.take(take),
                probs.take(take),
                kinds.take(take),
                msgs.take(take),
                {c: a.take(take) for c, a in extras.items()},
                rows[sel],
                base,
                problems,
            )
            if out is not None:
                yield out


# -- the import ----------------------------------------------------------------------------------
def import_answers(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    *,
    dataset: str,
    schema: DecisionSchema,
    name: str,
    version: int | None = None,
    model: str | None = None,
    provider_label: str | None = None,
    memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
) -> str:
    """Create a raw run (status ``done``) from an answers file and return its id; all or nothing.

    ``path`` is a Parquet or JSONL file, a directory of part files or a glob, in the wide or long
    layout (module docstring). The run's provider is ``provider_label`` (default ``"imported"``), its
    splits those of the items it answers. ``memory_limit`` caps DuckDB's buffer pool for the import
    (restored afterwards; None leaves it). Raises :class:`DataImportError` (nothing written) on bad input.
    """
    from workbench.store.datasets import latest_version
    from workbench.store.runs import insert_run, new_run_id

    t0 = time.perf_counter()
    files, fmt = resolve_answer_files(path)
    src = _open_source(files, fmt)
    layout = _layout(src, schema)
    _check_types(src, layout)
    _check_option_ids(src, schema)
    if version is None:
        version = latest_version(con, dataset)
    elif not fetch_scalar(con, "SELECT count(*) FROM datasets WHERE name = ? AND version = ?", [dataset, version]):
        raise DataImportError(f"dataset {dataset!r} has no version {version}", hint="see `workbench datasets show`")
    where = src.label()
    run_id = new_run_id()
    stream = _Stream(src, layout, schema, model)
    settings = dict(_IMPORT_SETTINGS, **({"memory_limit": memory_limit} if memory_limit else {}))
    with duckdb_settings(con, settings):
        # item ids first, from the source's id column alone (outside the transaction: a join with 10M
        # uncommitted rows ran out of DuckDB's memory)
        ids = _source_items(con, src, layout, dataset, version, schema)
        if ids.unknown or ids.repeated:
            stream.drain()  # a bad row is reported before an unknown item or a repeated key, as it is found first
            if stream.problems:
                raise stream.problems.error(where)
            raise ids.error(where, dataset, version) if ids.unknown else _duplicates(src, layout, where)
        with transaction(con):
            view = f"_answer_import_{run_id.replace('-', '_')}"
            con.register(view, stream.reader())
            try:
                con.execute(
                    f"INSERT INTO {ANSWERS_TABLE} (run_id, {', '.join(_OUT_COLUMNS)})"
                    f" SELECT $run, {', '.join(_OUT_COLUMNS)} FROM {view}",
                    {"run": run_id},
                )
            except duckdb.Error as exc:
                stream.drain()  # the error names the earliest bad row of the whole file, as before the insert
                if stream.problems:
                    raise stream.problems.error(where) from None
                raise DataImportError(f"{where}: cannot import: {_first_line(exc)}", hint="fix the file") from None
            finally:
                con.unregister(view)
            if stream.problems:  # the stream stopped handing rows on at the first bad row
                raise stream.problems.error(where)
            if stream.rows == 0:
                raise DataImportError(f"{where}: no rows", hint="the file holds no answers")
            n_items = stream.rows if layout.kind == "wide" else ids.items
            if layout.kind == "long" and stream.rows != n_items * len(schema.question_ids):
                raise _incomplete(src, schema, where)  # repeated keys were refused: a question is missing
            run_model = model or stream.tally.mode_model()
            insert_run(
                con,
                run_id=run_id,
                dataset=dataset,
                dataset_version=version,
                schema=schema,
                provider=provider_label or "imported",
                splits=ids.splits,
                name=name,
                model=run_model,
                params={"imported_from": [str(f) for f in files], "format": fmt, "layout": layout.kind},
                status="done",
            )
            summary = {
                "run_id": run_id,
                "name": name,
                "provider": provider_label or "imported",
                "dataset": dataset,
                "dataset_version": int(version),
                "schema_hash": schema.hash,
                "splits": ids.splits,
                "status": "done",
                "emulated": False,
                "model": run_model,
                **stream.tally.summary(n_items),
                "imported": {
                    "rows": stream.rows,
                    "format": fmt,
                    "layout": layout.kind,
                    "files": len(files),
                    "seconds": round(time.perf_counter() - t0, 3),
                },
            }
            con.execute(
                "UPDATE runs SET summary = ?, finished_at = current_timestamp WHERE run_id = ?",
                [json.dumps(summary), run_id],
            )
    return run_id


#: DuckDB settings while importing (restored afterwards). The insert's rows arrive on one Arrow stream:
#: without order to keep, both threads append; each completed row group is compressed and written to
#: the store file at once (DuckDB's default buffers 5 row groups per thread, ~0.8 GB uncompressed here).
_IMPORT_SETTINGS: dict[str, Any] = {"preserve_insertion_order": False, "write_buffer_row_group_count": 1}


def _source_reader(src: _Source, columns: dict[str, str]) -> tuple[str, list]:
    """DuckDB table function reading ``columns`` ({name: DuckDB type}) of the source files, and its parameter."""
    files = [str(f) for f in src.files]
    if src.fmt == "parquet":
        return "read_parquet(?)", [files]
    spec = ", ".join(f"'{c}': '{t}'" for c, t in columns.items())
    return f"read_json(?, format = 'newline_delimited', columns = {{{spec}}})", [files]


@dataclass
class _Items:
    unknown: int
    example: str | None
    splits: list[str]
    items: int  # distinct item ids (the long layout's item count)
    repeated: int  # rows beyond the first of their key (item id; long layout: item id and question)

    def error(self, where: str, dataset: str, version: int) -> DataImportError:
        return DataImportError(
            f"{where}: item {self.example!r} is not an item of dataset {dataset!r} v{version} ({self.unknown:,} row"
            f"{'s' if self.unknown != 1 else ''} name unknown items; nothing was imported)",
            hint="import the answers against the dataset version they answer (`dataset`/`version`), or drop those rows",
        )


def _source_items(
    con: duckdb.DuckDBPyConnection,
    src: _Source,
    layout: _Layout,
    dataset: str,
    version: int,
    schema: DecisionSchema,
) -> _Items:
    """Item ids of the source (its ``item_id`` column only) against the dataset version: how many rows name
    unknown items (the long layout counts one question's rows), the first such id, the splits covered, the
    distinct ids and how many rows repeat a key (the store's answers table has no key constraint: this is
    what keeps (run, item, question) unique). Empty ids are left to the row checks."""
    long = layout.kind == "long"
    cols = {"item_id": "VARCHAR", **({"question": "VARCHAR"} if long else {})}
    reader, params = _source_reader(src, cols)
    one_q = "a.question::VARCHAR = ?" if long else "true"
    try:
        row = con.execute(
            f"SELECT count(*) FILTER (WHERE i.item_id IS NULL AND {one_q}),"
            f" min(a.item_id) FILTER (WHERE i.item_id IS NULL AND {one_q}),"
            f" list(DISTINCT i.split) FILTER (WHERE i.split IS NOT NULL AND {one_q}),"
            f" {'count(DISTINCT a.item_id)' if long else '0'},"
            f" count(*) - count(DISTINCT {'(a.item_id, a.question)' if long else 'a.item_id'})"
            f" FROM (SELECT item_id::VARCHAR AS item_id{', question' if long else ''} FROM {reader}) a"
            " LEFT JOIN items i ON i.dataset = ? AND i.version = ? AND i.item_id = a.item_id"
            " WHERE a.item_id IS NOT NULL",
            [*([schema.question_ids[0]] * 3 if long else []), *params, dataset, int(version)],
        ).fetchone()
    except duckdb.Error as exc:
        raise DataImportError(f"{src.label()}: cannot read: {_first_line(exc)}", hint="fix the file") from None
    assert row is not None
    return _Items(int(row[0] or 0), row[1], sorted(row[2] or []), int(row[3] or 0), int(row[4] or 0))


def _incomplete(src: _Source, schema: DecisionSchema, where: str) -> DataImportError:
    """Long layout: the first item (by id) lacking a question's row, and how many do (the error path only)."""
    questions = schema.question_ids
    reader, params = _source_reader(src, {"item_id": "VARCHAR", "question": "VARCHAR"})
    con = memory_connection()
    try:
        row = con.execute(
            "WITH short AS (SELECT item_id, list(question) AS qs FROM"
            f" (SELECT item_id::VARCHAR AS item_id, question::VARCHAR AS question FROM {reader})"
            " GROUP BY item_id HAVING count(*) < ?)"
            " SELECT (SELECT count(*) FROM short), item_id, qs FROM short ORDER BY item_id LIMIT 1",
            [*params, len(questions)],
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    n_short, item, have = int(row[0]), row[1], set(row[2])
    missing = [q for q in questions if q not in have]
    return DataImportError(
        f"{where}: item {item!r} has no row for question {missing[0]!r} ({n_short:,} item"
        f"{'s lack' if n_short != 1 else ' lacks'} a question; nothing was imported)",
        hint="every item needs a row per schema question (probs NULL with a failure_kind for a failure)",
    )


def _duplicates(src: _Source, layout: _Layout, where: str) -> DataImportError:
    """The duplicate-key error, named (a second pass over the file, only on this failure path)."""
    keys = ["item_id"] if layout.kind == "wide" else ["item_id", "question"]
    con = memory_connection()
    files = [str(f) for f in src.files]
    reader = (
        "read_parquet(?)"
        if src.fmt == "parquet"
        else "read_json(?, format = 'newline_delimited', columns = {"
        + ", ".join(f"'{k}': 'VARCHAR'" for k in keys)
        + "})"
    )
    try:
        row = con.execute(
            f"SELECT count(*), sum(n), min({keys[0]}), arg_min({keys[-1]}, {keys[0]}) FROM ("
            f" SELECT {', '.join(k + '::VARCHAR AS ' + k for k in keys)}, count(*) AS n FROM {reader}"
            f" GROUP BY ALL HAVING count(*) > 1)",
            [files],
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    what = f"item {row[2]!r}" + (f", question {row[3]!r}" if len(keys) == 2 else "")
    return DataImportError(
        f"{where}: {what} appears more than once ({int(row[0] or 0):,} duplicated key"
        f"{'s' if (row[0] or 0) != 1 else ''} over {int(row[1] or 0):,} rows; nothing was imported)",
        hint="one row per item" + (" and question" if len(keys) == 2 else "") + "; drop the repeated rows",
    )
