"""The files of a dataset import, checked before any row is trusted, and read with DuckDB's readers.

A regular file of sane size (``max_import_bytes``), UTF-8, every delimited row with the header's number of
fields, column names unique ignoring case, JSON records without duplicate keys or constants: refused in
one line naming the file otherwise. Also the SQL quoting the readers' statements use.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError
from workbench.store.db import memory_connection
from workbench.store.import_spec import SPLIT_ALIASES

READERS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".txt": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}


#: Largest file `datasets import` reads (bytes); a sanity check against the wrong path (a disk image,
#: a log that never ends). Override with WORKBENCH_MAX_IMPORT_BYTES.
MAX_IMPORT_BYTES = 4 * 1024**3


def max_import_bytes() -> int:
    try:
        return int(os.environ.get("WORKBENCH_MAX_IMPORT_BYTES", MAX_IMPORT_BYTES))
    except ValueError:
        return MAX_IMPORT_BYTES


def check_regular_file(path: Path) -> int:
    """Refuse anything but a regular, non-empty file of sane size, before opening it. Returns its size.

    A FIFO, ``/dev/zero`` or a directory named ``x.csv`` would block, never end, or fail mid-read.
    """
    if str(path) == "-":
        raise DataImportError("reading a dataset from stdin ('-') is not supported", hint="save it to a file first")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataImportError(f"{path}: file does not exist", hint="check the path") from None
    except OSError as exc:
        raise DataImportError(f"{path}: cannot read: {exc.strerror}", hint="check the path and permissions") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataImportError(f"{path}: is a directory", hint="give the data file(s) inside it")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) else "not a file"
        raise DataImportError(f"{path}: {kind}, not a regular file", hint="import a regular file")
    if st.st_size == 0:
        raise DataImportError(f"{path}: empty file", hint="the file needs a header row and data")
    limit = max_import_bytes()
    if st.st_size > limit:
        raise DataImportError(
            f"{path}: {st.st_size:,} bytes is larger than the import limit ({limit:,})",
            hint="check the path, split the file, or raise WORKBENCH_MAX_IMPORT_BYTES",
        )
    return st.st_size


def read_file(path: Path) -> pd.DataFrame:
    """One checked file (CSV, TSV, Parquet, JSON or JSONL) read into a frame; ``DataImportError`` naming the file when it cannot be read faithfully."""

    size = check_regular_file(path)
    kind = READERS.get(path.suffix.lower())
    if kind is None:
        raise DataImportError(
            f"{path}: unknown file type {path.suffix!r}", hint="use .csv, .tsv, .parquet, .json or .jsonl"
        )
    if kind in ("csv", "tsv"):
        check_delimited(path, "," if kind == "csv" else "\t")
    con = memory_connection()
    try:
        p = str(path)
        if kind in ("csv", "tsv"):
            rel = con.execute(f"SELECT * FROM {csv_reader(path, kind, size)}")
        elif kind == "parquet":
            check_header(parquet_names(path), path)
            rel = con.execute("SELECT * FROM read_parquet(?)", [p])
        else:
            check_json(con, path)
            rel = con.execute(f"SELECT * FROM {json_reader(path)}")
        json_columns = [str(d[0]) for d in rel.description or () if str(d[1]) == "JSON"]
        df = rel.df()
    except duckdb.Error as exc:
        raise DataImportError(
            f"{path}: cannot read: {first_line(exc)}",
            hint="fix the file (encoding must be UTF-8; every row needs the same columns)",
        ) from None
    finally:
        con.close()
    if df.empty:
        raise DataImportError(f"{path}: no rows", hint="the file has a header but no data")
    for col in json_columns:
        # a key whose values mix types (a string in one record, a number or a list in another) comes back as
        # JSON text ('"a"', '1', '["a"]'): decoded here, each record's value is what it is in a plain column
        df[col] = [None if not isinstance(v, str) else json.loads(v) for v in df[col].tolist()]
    return df


def csv_reader(path: Path, kind: str, size: int, max_line: int | None = None) -> str:
    """DuckDB's reader of a delimited file as ``datasets import`` reads it (every column as text), as SQL.

    A record may be as long as the file unless ``max_line`` says otherwise (DuckDB's read buffers are 16 times
    that size: a bound known from the file keeps them small; a longer record is an error, never a cut).
    """
    sep = "," if kind == "csv" else "\t"
    return (
        f"read_csv({sql_text(str(path))}, header = true, all_varchar = true, delim = {sql_text(sep)},"
        " quote = '\"', strict_mode = true, null_padding = false, ignore_errors = false, auto_detect = true,"
        f" max_line_size = {max(2_097_152, size + 1 if max_line is None else max_line)})"
    )


def json_reader(path: Path) -> str:
    """DuckDB's reader of a JSON (``.json``: records, or an array of them) or JSONL file as ``datasets import`` reads it, as SQL."""
    return f"read_json({sql_text(str(path))}, format = {sql_text(_json_format(path))})"


def check_json(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """A JSON(L) file's records have keys unique ignoring case and hold no ``NaN``/``Infinity`` (named by record)."""
    _check_json_keys(con, str(path), _json_format(path), path)
    _check_json_constants(con, str(path), _json_format(path), path)


def _json_format(path: Path) -> str:
    return "newline_delimited" if READERS.get(path.suffix.lower()) == "jsonl" else "auto"


def sql_text(v: str) -> str:
    """``v`` as an SQL string literal."""
    return "'" + v.replace("'", "''") + "'"


def sql_name(c: str) -> str:
    """``c`` as an SQL identifier."""
    return '"' + c.replace('"', '""') + '"'


def check_header(names: Sequence[str], path: Path) -> None:
    """Column names must be unique ignoring case and surrounding spaces (DuckDB would rename one)."""
    seen: dict[str, str] = {}
    for name in names:
        key = str(name).strip().casefold()
        if key in seen:
            raise DataImportError(
                f"{path}: column {name!r} appears twice in the header (as {seen[key]!r} and {name!r})",
                hint="rename one of the columns",
            )
        seen[key] = str(name)


def parquet_names(path: Path) -> list[str]:
    """The column names of a Parquet file, from its footer (no rows read); ``DataImportError`` if it is not Parquet."""

    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError) as exc:
        raise DataImportError(f"{path}: cannot read: {first_line(exc)}", hint="is it a Parquet file?") from None


def _check_json_keys(con: duckdb.DuckDBPyConnection, p: str, fmt: str, path: Path) -> None:
    """Every record's keys are unique ignoring case (one pass in DuckDB over the distinct key lists)."""
    rows = con.execute(
        "SELECT DISTINCT json_keys(json) FROM read_json_objects(?, format = ?) WHERE json_type(json) = 'OBJECT'",
        [p, fmt],
    ).fetchall()
    for (keys,) in rows:
        check_header(keys or [], path)


class _Constant:
    """A ``NaN``/``Infinity`` token met while parsing a record (found by :func:`_check_json_constants`)."""

    def __init__(self, token: str):
        self.token = token


def _constant_at(value: Any, where: tuple = ()) -> tuple[tuple, str] | None:
    """(path, token) of the first :class:`_Constant` inside a parsed record, or None."""
    if isinstance(value, _Constant):
        return where, value.token
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _constant_at(v, (*where, k))
        if found is not None:
            return found
    return None


def _check_json_constants(con: duckdb.DuckDBPyConnection, p: str, fmt: str, path: Path) -> None:
    """No record holds ``NaN``/``Infinity``: they are not JSON (the runtime refuses them), and DuckDB's reader
    would read them, then type a key mixing them with text as JSON text, blaming the valid records.

    A byte search skips the check when neither token occurs; otherwise DuckDB lists the records whose text
    holds one (a string may, too) and the first with a real token is named with its field.
    """
    import mmap

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(b"NaN") < 0 and data.find(b"Infinity") < 0:
            return
    rows = con.execute(
        "SELECT n, json FROM (SELECT row_number() OVER () AS n, json FROM read_json_objects(?, format = ?))"
        " WHERE contains(json, 'NaN') OR contains(json, 'Infinity') ORDER BY n",
        [p, fmt],
    ).fetchall()
    for n, text in rows:
        try:
            record = json.loads(text, parse_constant=_Constant)
        except (ValueError, RecursionError):
            continue  # not this check's business: the reader names it
        found = _constant_at(record)
        if found is not None:
            keys, token = found
            field = ".".join(str(k) for k in keys) or "(the record)"
            raise DataImportError(
                f"{path}: record {n}: field {field!r} holds {token}, which is not a JSON number",
                hint="write null for a missing value (JSON has no NaN or Infinity)",
            )


def check_delimited(path: Path, sep: str) -> int:
    """Every row has the header's number of fields, the header has no duplicate, and the bytes are UTF-8.

    One pass with the C csv reader; its field size limit is raised to the file size for this call (a
    long document in one field is a legitimate state), then restored. Returns the longest line in bytes.
    """
    import csv

    size, longest = _check_utf8(path)
    line = 1
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, min(size + 1, 2**31 - 1)))
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, delimiter=sep)
            header = next(reader, None)
            if header is None:
                raise DataImportError(f"{path}: empty file", hint="the file needs a header row and data")
            check_header(header, path)
            width = len(header)
            for row in reader:
                line = reader.line_num
                if len(row) != width and row:
                    raise DataImportError(
                        f"{path}: line {line} has {len(row)} fields, the header has {width}",
                        hint="quote fields that contain the delimiter, or fix the row",
                    )
    except csv.Error as exc:
        raise DataImportError(f"{path}: line {line + 1}: {exc}", hint="fix the CSV quoting") from None
    finally:
        csv.field_size_limit(old_limit)
    return longest


#: Bytes decoded at a time by :func:`_check_utf8`.
UTF8_CHECK_BLOCK = 1 << 24


def _check_utf8(path: Path) -> tuple[int, int]:
    """The file is UTF-8 (read a block at a time: bounded memory); names the line and byte where it is not.

    Returns the file's size and its longest line in bytes (newline included)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    size = newlines = longest = run = 0
    with path.open("rb") as fh:
        while True:
            block = fh.read(UTF8_CHECK_BLOCK)
            pending = decoder.getstate()[0]  # an unfinished character from the previous block (never a newline)
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                data = pending + block
                line = newlines + data.count(b"\n", 0, exc.start) + 1
                raise DataImportError(
                    f"{path}: not valid UTF-8 at line {line} (byte 0x{data[exc.start]:02x})",
                    hint="re-save the file as UTF-8",
                ) from None
            if not block:
                return size, max(longest, run)
            size += len(block)
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            newlines += len(ends)
            if len(ends):
                longest = max(longest, run + int(ends[0]) + 1, int(np.diff(ends).max(initial=0)))
                run = len(block) - int(ends[-1]) - 1
            else:
                run += len(block)


def first_line(exc: Exception) -> str:
    """``exc``'s message on one line (whitespace collapsed), at most 300 characters: for an error that names a file."""

    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text[:300]


def file_split(path: Path) -> str | None:
    """The split a file's stem names (``train``, ``dev`` -> ``calibration`` …, see ``SPLIT_ALIASES``), or None."""

    stem = path.stem.lower()
    return SPLIT_ALIASES.get(stem)
