"""Dataset import, validation, splits and versioning.

An import reads CSV, TSV, Parquet, JSON or JSONL with DuckDB's readers, validates everything
before writing, and writes one new dataset version in one transaction — or nothing at all.

Split roles are used the same way everywhere: ``train`` (only trained baselines learn from it),
``calibration`` (recalibration and thresholds are fitted on it), ``test`` (reported figures).
Deterministic carving hashes ``id`` (or ``group``) with the seed, so the same item lands in the
same split on every machine and every re-import.

A dataset's *fingerprint* is a content hash of items, labels and splits (not of its name or
version): the same content gives the same fingerprint, and re-importing it adds no version.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError, NotFoundError
from workbench.schema import DecisionSchema, option_ids
from workbench.schema.questions import parse_json_text
from workbench.store.db import duckdb_settings, memory_connection, transaction
from workbench.store.schemas import save_schema

SPLITS = ("train", "calibration", "test")
#: Other spellings accepted in a split column or a file name.
SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "calibration": "calibration",
    "calib": "calibration",
    "cal": "calibration",
    "validation": "calibration",
    "valid": "calibration",
    "val": "calibration",
    "dev": "calibration",
    "test": "test",
    "testing": "test",
    "eval": "test",
}
_READERS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".txt": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
_TRUE = {"yes", "true", "1", "y", "t"}
_FALSE = {"no", "false", "0", "n", "f"}


@dataclass
class ImportSpec:
    """What to read from the files (the CLI options of ``workbench datasets import``)."""

    name: str
    text_column: str | None = None
    state_column: str | None = None  # a JSON state instead of text
    labels: dict[str, str] = field(default_factory=dict)  # question -> column
    id_column: str | None = None
    split_column: str | None = None
    split: str | None = None  # every row of the file(s) gets this split
    test_fraction: float | None = None
    calibration_fraction: float | None = None
    seed: int = 0
    group_column: str | None = None
    image_column: str | None = None
    positive: dict[str, str] = field(default_factory=dict)  # noul question -> value meaning "yes"
    #: long format: one row per (item, annotator); the item's fields must agree across its rows
    annotator_column: str | None = None
    #: wide format: question -> {option: column holding that option's vote count} (anonymous votes)
    label_votes: dict[str, dict[str, str]] = field(default_factory=dict)
    #: item metadata kept for slices (``--meta-column``): each column's text per item, in ``items.meta``
    meta_columns: list[str] = field(default_factory=list)
    append: bool = False


#: Largest file `datasets import` reads (bytes); a sanity check against the wrong path (a disk image,
#: a log that never ends). Override with WORKBENCH_MAX_IMPORT_BYTES.
MAX_IMPORT_BYTES = 4 * 1024**3
#: Dataset names: printable, no surrounding whitespace, at most this long.
MAX_NAME_LENGTH = 128
#: Whitespace, control and format characters a reader cannot see (zero-width space, BOM, fillers, tags):
#: text or an id made only of these is empty.
_INVISIBLE_CLASS = (
    "\\s\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_BLANK = f"[{_INVISIBLE_CLASS}]*"
_EDGES = f"^[{_INVISIBLE_CLASS}]+|[{_INVISIBLE_CLASS}]+$"
#: The annotator of a label imported with --label (one label per item, annotator not known).
SINGLE_ANNOTATOR = "import"
#: The annotator of a vote imported from a --label-votes count column (who voted is not known).
ANONYMOUS_ANNOTATOR = ""
#: Largest vote count one --label-votes cell may hold (a sanity check against a wrong column).
MAX_VOTES_PER_CELL = 10_000
#: Slice names computed by the workbench (``report --slice state_length``); no metadata column may take them.
BUILTIN_SLICES = ("state_length",)
#: Label spellings that mean "no label" (pandas writes NaN this way), unless the schema has such an option.
_MISSING_LABELS = {"nan", "<na>"}


def max_import_bytes() -> int:
    try:
        return int(os.environ.get("WORKBENCH_MAX_IMPORT_BYTES", MAX_IMPORT_BYTES))
    except ValueError:
        return MAX_IMPORT_BYTES


def _check_regular_file(path: Path) -> int:
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


def _read_file(path: Path) -> pd.DataFrame:
    size = _check_regular_file(path)
    kind = _READERS.get(path.suffix.lower())
    if kind is None:
        raise DataImportError(
            f"{path}: unknown file type {path.suffix!r}", hint="use .csv, .tsv, .parquet, .json or .jsonl"
        )
    if kind in ("csv", "tsv"):
        _check_delimited(path, "," if kind == "csv" else "\t")
    con = memory_connection()
    try:
        p = str(path)
        if kind in ("csv", "tsv"):
            rel = con.execute(f"SELECT * FROM {_csv_reader(path, kind, size)}")
        elif kind == "parquet":
            _check_header(_parquet_names(path), path)
            rel = con.execute("SELECT * FROM read_parquet(?)", [p])
        else:
            fmt = "newline_delimited" if kind == "jsonl" else "auto"
            _check_json_keys(con, p, fmt, path)
            _check_json_constants(con, p, fmt, path)
            rel = con.execute("SELECT * FROM read_json(?, format = ?)", [p, fmt])
        json_columns = [str(d[0]) for d in rel.description or () if str(d[1]) == "JSON"]
        df = rel.df()
    except duckdb.Error as exc:
        raise DataImportError(
            f"{path}: cannot read: {_first_line(exc)}",
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


def _csv_reader(path: Path, kind: str, size: int, max_line: int | None = None) -> str:
    """DuckDB's reader of a delimited file as ``datasets import`` reads it (every column as text), as SQL.

    A record may be as long as the file unless ``max_line`` says otherwise (DuckDB's read buffers are 16 times
    that size: a bound known from the file keeps them small; a longer record is an error, never a cut).
    """
    sep = "," if kind == "csv" else "\t"
    return (
        f"read_csv({_sql_text(str(path))}, header = true, all_varchar = true, delim = {_sql_text(sep)},"
        " quote = '\"', strict_mode = true, null_padding = false, ignore_errors = false, auto_detect = true,"
        f" max_line_size = {max(2_097_152, size + 1 if max_line is None else max_line)})"
    )


def _sql_text(v: str) -> str:
    """``v`` as an SQL string literal."""
    return "'" + v.replace("'", "''") + "'"


def _sql_name(c: str) -> str:
    """``c`` as an SQL identifier."""
    return '"' + c.replace('"', '""') + '"'


def _check_header(names: Sequence[str], path: Path) -> None:
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


def _parquet_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError) as exc:
        raise DataImportError(f"{path}: cannot read: {_first_line(exc)}", hint="is it a Parquet file?") from None


def _check_json_keys(con: duckdb.DuckDBPyConnection, p: str, fmt: str, path: Path) -> None:
    """Every record's keys are unique ignoring case (one pass in DuckDB over the distinct key lists)."""
    rows = con.execute(
        "SELECT DISTINCT json_keys(json) FROM read_json_objects(?, format = ?) WHERE json_type(json) = 'OBJECT'",
        [p, fmt],
    ).fetchall()
    for (keys,) in rows:
        _check_header(keys or [], path)


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


def _check_delimited(path: Path, sep: str) -> int:
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
            _check_header(header, path)
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


def _first_line(exc: Exception) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text[:300]


def _column(df: pd.DataFrame, col: str, path: Path, option: str) -> pd.Series:
    if col not in df.columns:
        raise DataImportError(
            f"{path}: no column {col!r} (for {option})", hint=f"columns are: {', '.join(map(str, df.columns))}"
        )
    return df[col]


def _as_text(series: pd.Series, where: str = "", ref: Callable[[int], str] | None = None) -> pd.Series:
    """A column as text (None for missing). Strings pass through; numbers and booleans become their
    text; bytes are decoded when they are valid UTF-8 (unambiguous) and refused otherwise; lists,
    maps and other objects are refused rather than stored as Python reprs.

    ``where`` (``"path: column 'x'"``) names the column in errors; ``ref(i)`` (``"path: record 3"``), when
    given, names the record of a refused value instead of the file.
    """
    inferred = pd.api.types.infer_dtype(series, skipna=True)
    if inferred in ("string", "empty"):
        return series.astype(object).where(series.notna(), None)
    values = series.tolist()
    out: list[str | None] = []
    for v in values:
        try:
            out.append(_cell_text(v, where))
        except DataImportError as exc:
            if ref is None:
                raise
            column = where.rsplit(": ", 1)[-1]
            raise DataImportError(f"{ref(len(out))}: {column}{exc.message[len(where) :]}", hint=exc.hint) from None
    return pd.Series(out, index=series.index, dtype=object)


def _cell_text(v: Any, where: str) -> str | None:
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (float, np.floating)):
        return None if np.isnan(v) else str(v)
    if isinstance(v, (bool, int, np.integer, np.bool_)):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise DataImportError(
                f"{where} holds binary data that is not UTF-8 text", hint="store text in a string column"
            ) from None
    if isinstance(v, (pd.Timestamp, np.datetime64)) or hasattr(v, "isoformat"):
        return str(v)
    # named as the file has them (JSON objects/lists, Parquet structs/maps), not as Python types ("dict values")
    kind = (
        "lists"
        if isinstance(v, (list, tuple, np.ndarray))
        else "objects (JSON objects or Parquet structs/maps)"
        if isinstance(v, dict)
        else f"values of type {type(v).__name__}"
    )
    raise DataImportError(
        f"{where} holds {kind}, not text", hint="use a string column (or --state-column for JSON states)"
    )


def _blank(text: pd.Series) -> pd.Series:
    """True where the text is missing or made only of whitespace/invisible characters."""
    return text.isna() | text.fillna("").str.fullmatch(_BLANK)


def _refuse_first(mask: pd.Series, row_ref: Callable[[int], str], what: Callable[[int], str], hint: str) -> None:
    """A DataImportError naming the first row where ``mask`` holds (``row_ref(i)``: ``what(i)``), if any."""
    if mask.any():
        i = int(np.flatnonzero(mask.to_numpy())[0])
        raise DataImportError(f"{row_ref(i)}: {what(i)}", hint=hint)


def normalise_ids(ids: pd.Series) -> pd.Series:
    """Item ids as stored: surrounding whitespace/invisible characters removed, Unicode NFC.

    So ``"a1 "`` and ``"a1"``, or an NFD and an NFC spelling, are one id (duplicates are then refused).
    """
    return ids.str.replace(_EDGES, "", regex=True).str.normalize("NFC")


def validate_dataset_name(name: str | None) -> str:
    """A dataset name is 1–128 printable characters without surrounding whitespace; returns it."""
    if not name or not name.strip():
        raise DataImportError("--name is empty", hint="name the dataset, e.g. --name banking77")
    if name != name.strip():
        raise DataImportError(f"--name {name!r} has surrounding whitespace", hint=f"use --name {name.strip()!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise DataImportError(
            f"--name is {len(name):,} characters long (limit {MAX_NAME_LENGTH})", hint="use a short name"
        )
    bad = next((c for c in name if unicodedata.category(c)[0] in ("C", "Z") and c != " "), None)
    if bad is not None:
        raise DataImportError(
            f"--name {name[:40]!r} contains U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')})",
            hint="use letters, digits, spaces and punctuation",
        )
    return name


# -- validation helpers ------------------------------------------------------------------------
def _row_ref(path: Path, row_index: int, kind: str) -> str:
    # CSV line numbers count the header; other formats are referred to by record number
    return f"{path}: line {row_index + 2}" if kind in ("csv", "tsv") else f"{path}: record {row_index + 1}"


def _file_split(path: Path) -> str | None:
    stem = path.stem.lower()
    return SPLIT_ALIASES.get(stem)


def _hash_unit(con: duckdb.DuckDBPyConnection, keys: pd.Series, seed: int, salt: str) -> np.ndarray:
    """Uniform [0, 1) per key from md5(key:seed:salt) — stable across machines and DuckDB versions."""
    tbl = pa.table({"k": pa.array(keys.astype(str).tolist(), type=pa.string())})
    con.register("_keys", tbl)
    try:
        out = con.execute(
            "SELECT CAST(('0x' || left(md5(k || ':' || $s || ':' || $salt), 8))::UBIGINT AS DOUBLE)"
            " / 4294967296.0 FROM _keys",
            {"s": str(seed), "salt": salt},
        ).fetchnumpy()
    finally:
        con.unregister("_keys")
    return np.asarray(next(iter(out.values())), dtype=float)


@dataclass
class _FileStats:
    """What one file's validation changed or skipped (reported as notices, never silent)."""

    ids_normalised: int = 0
    unlabelled: dict[str, int] = field(default_factory=dict)  # question -> rows without a label


def _frame_for_file(
    path: Path, spec: ImportSpec, schema: DecisionSchema | None, n_files: int
) -> tuple[pd.DataFrame, pd.DataFrame, _FileStats]:
    """Validate one file; return (items, labels) frames in the store's columns and what was normalised."""
    kind = _READERS.get(path.suffix.lower(), "csv")
    df = _read_file(path)
    stats = _FileStats()
    if (spec.text_column is None) == (spec.state_column is None):
        raise DataImportError(
            "give exactly one of --text-column or --state-column",
            hint="--text-column for text states, --state-column for JSON states",
        )

    def row_ref(i: int) -> str:
        return _row_ref(path, i, kind)

    def text_of(col: str, option: str) -> pd.Series:
        return _as_text(_column(df, col, path, option), f"{path}: column {col!r}", row_ref)

    def filled_text_of(col: str, option: str, what: str, hint: str) -> pd.Series:
        """:func:`text_of` a column no row may leave blank (the first blank row refused, naming its item)."""
        values = text_of(col, option)
        _refuse_first(_blank(values), row_ref, lambda i: f"empty {what} in column {col!r} (item {ids.iloc[i]!r})", hint)
        return values

    items = pd.DataFrame(index=df.index)
    if spec.id_column:
        raw_ids = text_of(spec.id_column, "--id-column")
        _refuse_first(
            _blank(raw_ids), row_ref, lambda i: f"empty id in column {spec.id_column!r}", "every row needs an id"
        )
        ids = normalise_ids(raw_ids)
        stats.ids_normalised = int((ids != raw_ids).sum())
    else:
        prefix = path.stem
        ids = pd.Series([f"{prefix}-{i + 1:05d}" for i in range(len(df))], index=df.index)
    items["item_id"] = ids
    if spec.text_column:
        text = filled_text_of(
            spec.text_column,
            "--text-column",
            "text",
            "remove the row or fill in its text (whitespace and invisible characters do not count)",
        )
        items["state_text"] = text
        items["state_json"] = None
    else:
        assert spec.state_column is not None  # exactly one of the two was checked above
        raw = _column(df, spec.state_column, path, "--state-column")
        states = []
        for i, v in enumerate(raw.tolist()):
            ref = _row_ref(path, i, kind)
            if isinstance(v, (bytes, bytearray, memoryview)):
                v = _cell_text(v, f"{ref}: column {spec.state_column!r}")
            if isinstance(v, str):
                v = parse_json_text(v, source=f"{ref}: column {spec.state_column!r}", error=DataImportError)
            v = None if isinstance(v, float) and np.isnan(v) else _plain_json(v)  # NaN: a missing cell (pandas)
            if v is None:
                raise DataImportError(f"{ref}: empty state", hint="fill in the state")
            try:
                states.append(json.dumps(v, ensure_ascii=False, sort_keys=False, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise DataImportError(
                    f"{ref}: the state in column {spec.state_column!r} is not JSON ({_first_line(exc)})",
                    hint="states must be JSON objects, arrays or strings (no NaN, no binary)",
                ) from None
        items["state_text"] = None
        items["state_json"] = states
    if spec.image_column:
        imgs = text_of(spec.image_column, "--image-column")
        items["images"] = imgs.map(lambda s: [p.strip() for p in s.split(";") if p.strip()] if s else None)
    else:
        items["images"] = None
    items["grp"] = text_of(spec.group_column, "--group-column") if spec.group_column else None

    # splits: column, fixed value, file name, or carved later from fractions
    if spec.split_column:
        raw = text_of(spec.split_column, "--split-column").fillna("").str.strip().str.lower()
        mapped = raw.map(SPLIT_ALIASES)
        _refuse_first(
            mapped.isna(),
            row_ref,
            lambda i: f"split {raw.iloc[i]!r} is not one of train, calibration, test",
            "fix the split column or carve splits with --test-fraction",
        )
        items["split"] = mapped
    elif spec.split:
        items["split"] = SPLIT_ALIASES.get(spec.split.lower(), spec.split)
    elif spec.test_fraction is not None:
        items["split"] = None  # carved below, over all files together
    elif n_files > 1 and _file_split(path):
        items["split"] = _file_split(path)
    elif spec.calibration_fraction is not None:
        items["split"] = "train"
    else:
        raise DataImportError(
            f"{path}: no split given",
            hint="pass --split-column COL, --split train|calibration|test, or --test-fraction F",
        )

    # item metadata (slices): {column: text or null} per row, as JSON text; NULL without --meta-column
    if spec.meta_columns:
        texts = [text_of(c, "--meta-column").str.strip() for c in spec.meta_columns]
        texts = [t.where(~_blank(t), None) for t in texts]
        items["meta"] = [
            json.dumps(dict(zip(spec.meta_columns, row, strict=True)), ensure_ascii=False)
            for row in zip(*(t.tolist() for t in texts), strict=True)
        ]
    else:
        items["meta"] = None

    # annotators (long format): one id per row, never blank
    if spec.annotator_column:
        hint = "every row of the long format names its annotator"
        ann = filled_text_of(spec.annotator_column, "--annotator-column", "annotator", hint)
        ann = normalise_ids(ann)
        items["annotator"] = ann
    else:
        ann = pd.Series(SINGLE_ANNOTATOR, index=df.index)

    # labels
    label_rows = []
    for question, col in spec.labels.items():
        _check_label_question(question, col, schema)
        mapped, absent = _map_labels(text_of(col, f"--label {question}"), question, col, schema, spec, row_ref)
        if absent.any():
            stats.unlabelled[question] = int(absent.sum())
        lab = pd.DataFrame({"item_id": ids, "question": question, "option_id": mapped, "annotator": ann})
        label_rows.append(lab[lab["option_id"].notna()])
    for question, columns in spec.label_votes.items():
        label_rows.append(_vote_count_rows(df, ids, question, columns, schema, path, kind, stats))
    labels = (
        pd.concat(label_rows, ignore_index=True)
        if label_rows
        else pd.DataFrame(columns=["item_id", "question", "option_id", "annotator"])
    )
    return items.reset_index(drop=True), labels, stats


def _check_label_question(question: str, col: str, schema: DecisionSchema | None) -> None:
    if schema is not None and question not in schema.questions:
        raise DataImportError(
            f"--label {question}={col}: the schema has no question {question!r}",
            hint=f"schema questions: {', '.join(schema.question_ids)}",
        )


def _map_labels(
    texts: pd.Series,
    question: str,
    col: str,
    schema: DecisionSchema | None,
    spec: ImportSpec,
    ref: Callable[[int], str],
) -> tuple[pd.Series, pd.Series]:
    """A ``--label`` column's text (None for missing) as stored option ids: ``(mapped, absent)``; ``mapped`` is
    None where no label is stored, ``absent`` marks the values that mean "no label" (counted in a notice).

    Stripped; blank, null and NaN spellings are absent; yes/no questions (or ``--positive``) map to yes/no;
    score labels may be the level's text. Raises naming ``ref(i)`` (the i-th value's row) for a value that is
    not an option. Vectorised over the values, so it maps a whole column or its distinct values alike.
    """
    values = texts.str.strip()
    qtype = schema.questions[question].type if schema is not None else None
    allowed = set(option_ids(schema.questions[question])) if schema is not None else set()
    # missing: null/NaN, blank, or a NaN spelling that is not an option of the schema
    absent = _blank(values) | (values.str.lower().isin(_MISSING_LABELS) & ~values.isin(allowed))
    values = values.where(~absent, None)
    pos = spec.positive.get(question)
    if pos is not None:
        qtype = qtype or "noul"
        mapped = values.map(lambda v: None if v is None else ("yes" if v == pos else "no"))
    elif qtype == "noul":
        low = values.str.lower()
        mapped = low.map(lambda v: None if v is None else ("yes" if v in _TRUE else "no" if v in _FALSE else "?" + v))
    else:
        mapped = values
    bad_noul = mapped.fillna("").str.startswith("?")
    if bad_noul.any():
        i = int(np.flatnonzero(bad_noul.to_numpy())[0])
        raise DataImportError(
            f"{ref(i)}: label {values.iloc[i]!r} for yes/no question {question!r}",
            hint=f"use yes/no/true/false/1/0, or --positive {question}=VALUE",
        )
    if schema is not None and qtype in ("choice", "score"):
        if qtype == "score":
            levels = [str(c) for c in schema.questions[question].criteria or []]
            # a score label may be the level index or the level's text
            mapped = mapped.map(
                lambda v: v if v is None or v in allowed else (str(levels.index(v)) if v in levels else v)
            )
        unknown = mapped.notna() & ~mapped.isin(allowed)
        if unknown.any():
            i = int(np.flatnonzero(unknown.to_numpy())[0])
            raise DataImportError(
                f"{ref(i)}: label {mapped.iloc[i]!r} in column {col!r} is not an option of question {question!r}",
                hint="add the option to the schema or fix the label",
            )
    return mapped, absent


def _vote_count_rows(
    df: pd.DataFrame,
    ids: pd.Series,
    question: str,
    columns: dict[str, str],
    schema: DecisionSchema | None,
    path: Path,
    kind: str,
    stats: _FileStats,
) -> pd.DataFrame:
    """Wide format: each column holds how many annotators chose one option; one label row per vote.

    Blank cells count 0 votes; a count must be a whole number >= 0. The votes are anonymous
    (annotator :data:`ANONYMOUS_ANNOTATOR`).
    """
    option_of = _vote_options(question, columns, schema)
    counts = []
    for option, col in option_of.items():
        raw = _as_text(
            _column(df, col, path, f"--label-votes {question}"),
            f"{path}: column {col!r}",
            lambda i: _row_ref(path, i, kind),
        )
        raw = raw.where(~_blank(raw), "0").str.strip()
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() | (num < 0) | (num != np.floor(num.fillna(0))) | (num > MAX_VOTES_PER_CELL)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataImportError(
                f"{_row_ref(path, i, kind)}: vote count {raw.iloc[i]!r} in column {col!r} (option {option!r} of "
                f"question {question!r}, item {ids.iloc[i]!r}) is not a whole number of votes",
                hint=f"each --label-votes column holds how many annotators chose that option: 0..{MAX_VOTES_PER_CELL:,}",
            )
        counts.append(num.to_numpy(dtype=np.int64))
    matrix = np.stack(counts, axis=1)  # (rows, options)
    none = matrix.sum(axis=1) == 0
    if none.any():
        stats.unlabelled[question] = stats.unlabelled.get(question, 0) + int(none.sum())
    opts = np.asarray(list(option_of), dtype=object)
    flat = matrix.ravel()
    row_of = np.repeat(np.repeat(np.arange(len(ids)), len(opts)), flat)
    opt_of = np.repeat(np.tile(np.arange(len(opts)), len(ids)), flat)
    return pd.DataFrame(
        {
            "item_id": ids.to_numpy(dtype=object)[row_of],
            "question": question,
            "option_id": opts[opt_of],
            "annotator": ANONYMOUS_ANNOTATOR,
        }
    )


def _vote_options(question: str, columns: dict[str, str], schema: DecisionSchema | None) -> dict[str, str]:
    """{option id: column} for ``--label-votes``; option names are checked against the schema and
    spelled as the store spells them (yes/no for yes/no questions, the level index for score levels)."""
    if not columns:
        raise DataImportError(
            f"--label-votes {question}= names no column", hint=f"e.g. --label-votes {question}=yes:n_yes,no:n_no"
        )
    if schema is None:
        return dict(columns)
    if question not in schema.questions:
        raise DataImportError(
            f"--label-votes {question}: the schema has no question {question!r}",
            hint=f"schema questions: {', '.join(schema.question_ids)}",
        )
    q = schema.questions[question]
    allowed = option_ids(q)
    levels = [str(c) for c in q.criteria or []] if q.type == "score" else []
    out: dict[str, str] = {}
    for name, col in columns.items():
        key = name.strip()
        if key not in allowed and q.type == "noul":
            key = "yes" if key.lower() in _TRUE else "no" if key.lower() in _FALSE else key
        if key not in allowed and key in levels:
            key = str(levels.index(key))
        if key not in allowed:
            raise DataImportError(
                f"--label-votes {question}: {name!r} (column {col!r}) is not an option of question {question!r}",
                hint=f"options: {', '.join(allowed)}; write OPTION:COLUMN when the column is named otherwise",
            )
        if key in out:
            raise DataImportError(
                f"--label-votes {question}: option {key!r} is given twice (columns {out[key]!r} and {col!r})",
                hint="one count column per option",
            )
        out[key] = col
    return out


def _check_meta_columns(columns: Sequence[str]) -> None:
    """``--meta-column`` names: not blank, not repeated, not a built-in slice name."""
    seen: set[str] = set()
    for c in columns:
        if not c or not c.strip():
            raise DataImportError(
                "--meta-column is empty", hint="name a column of the file, e.g. --meta-column language"
            )
        if c in BUILTIN_SLICES:
            raise DataImportError(
                f"--meta-column {c!r} is the name of a built-in slice",
                hint=f"rename the column in the file; {c} is computed for every dataset",
            )
        if c in seen:
            raise DataImportError(f"--meta-column {c!r} is given twice", hint="name each metadata column once")
        seen.add(c)


def _plain_json(v: Any) -> Any:
    """Nested values as DuckDB hands them over (numpy arrays, numpy scalars) as plain JSON values."""
    if isinstance(v, np.ndarray):
        return [_plain_json(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_plain_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain_json(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    return v  # a NaN or infinity inside a state stays one: JSON has none, so the state is refused


# -- import ---------------------------------------------------------------------------------------
@dataclass
class DatasetInfo:
    name: str
    version: int
    fingerprint: str
    created: bool  # False when the content equalled the latest version (nothing written)
    n_items: int
    questions: list[str]
    #: ids also present in the previous version (None for a first import)
    shared_ids: int | None = None
    #: question -> rows whose label was empty/NaN (imported as unlabelled)
    unlabelled: dict[str, int] = field(default_factory=dict)
    #: ids changed by normalisation (surrounding whitespace, Unicode NFC)
    ids_normalised: int = 0
    #: one line per thing the user should know (normalised ids, unlabelled rows)
    notices: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
            for k, v in self.__dict__.items()
        }


def import_dataset(
    con: duckdb.DuckDBPyConnection, paths: Sequence[str | Path], spec: ImportSpec, schema: DecisionSchema | None = None
) -> DatasetInfo:
    """Validate ``paths`` and write a new version of dataset ``spec.name`` in one transaction.

    Raises :class:`DataImportError` naming the file, line/record or field and the fix; the
    database is unchanged afterwards.
    """
    validate_dataset_name(spec.name)
    if not spec.labels and not spec.label_votes:
        raise DataImportError(
            "no --label given", hint="pass --label QUESTION=COLUMN (repeatable) or --label-votes QUESTION=COL1,COL2,…"
        )
    both = sorted(set(spec.labels) & set(spec.label_votes))
    if both:
        raise DataImportError(
            f"question {both[0]!r} is given by both --label and --label-votes", hint="use one of the two per question"
        )
    if spec.annotator_column:
        if spec.label_votes:
            raise DataImportError(
                "--annotator-column (one row per annotator) and --label-votes (vote counts per row) do not mix",
                hint="long format: --annotator-column with --label; wide format: --label-votes alone",
            )
        if not spec.id_column:
            raise DataImportError(
                "--annotator-column needs --id-column: the rows of one item are found by its id",
                hint="pass --id-column COL naming the item id column",
            )
    _check_meta_columns(spec.meta_columns)
    for f, opt in ((spec.test_fraction, "--test-fraction"), (spec.calibration_fraction, "--calibration-fraction")):
        if f is not None and not (0.0 <= f < 1.0):
            raise DataImportError(f"{opt} {f} is outside [0, 1)", hint="e.g. 0.3")
    files = [Path(p) for p in paths]
    if not files:
        raise DataImportError("no file given", hint="workbench datasets import PATH --name NAME ...")
    fast = _streamed_import(con, files, spec, schema)
    if fast is not None:
        return fast
    frames = [_frame_for_file(p, spec, schema, len(files)) for p in files]
    items = pd.concat([fr[0] for fr in frames], ignore_index=True)
    labels = pd.concat([fr[1] for fr in frames], ignore_index=True)
    unlabelled: dict[str, int] = {}
    for fr in frames:
        for q, n in fr[2].unlabelled.items():
            unlabelled[q] = unlabelled.get(q, 0) + n
    ids_normalised = sum(fr[2].ids_normalised for fr in frames)
    if spec.annotator_column:
        items = _merge_annotator_rows(items, spec)

    dup = items["item_id"].duplicated(keep=False)
    if dup.any():
        first = items.loc[dup, "item_id"].iloc[0]
        n_ids = items.loc[dup, "item_id"].nunique()
        raise DataImportError(
            f"duplicate item id {first!r}: {n_ids:,} id{'s' if n_ids != 1 else ''} appear more than once "
            f"({int(dup.sum()):,} rows), after trimming whitespace and Unicode NFC normalisation",
            hint="ids must be unique; fix --id-column or drop duplicates",
        )

    # carve splits deterministically (group keeps related items together)
    key = items["grp"].fillna(items["item_id"]) if spec.group_column else items["item_id"]
    if spec.test_fraction is not None and items["split"].isna().any():
        u = _hash_unit(con, key, spec.seed, "test")
        items.loc[items["split"].isna(), "split"] = np.where(u < spec.test_fraction, "test", "train")[
            items["split"].isna().to_numpy()
        ]
    if spec.calibration_fraction:
        u = _hash_unit(con, key, spec.seed, "calibration")
        carve = (items["split"] == "train").to_numpy() & (u < spec.calibration_fraction)
        items.loc[carve, "split"] = "calibration"
    bad_split = ~items["split"].isin(SPLITS)
    if bad_split.any():
        raise DataImportError(
            f"split {items.loc[bad_split, 'split'].iloc[0]!r} is not one of train, calibration, test",
            hint="use --split train|calibration|test",
        )

    previous = con.execute(
        "SELECT version, fingerprint, questions FROM datasets WHERE name = ? ORDER BY version DESC LIMIT 1", [spec.name]
    ).fetchone()
    if spec.append:
        if previous is None:
            raise DataImportError(f"--append: dataset {spec.name!r} does not exist yet", hint="drop --append")
        old_items, old_labels = _version_frames(con, spec.name, previous[0])
        clash = items["item_id"].isin(set(old_items["item_id"]))
        if clash.any():
            n = int(clash.sum())
            raise DataImportError(
                f"--append: {n:,} item id{'s' if n != 1 else ''} (e.g. {items.loc[clash, 'item_id'].iloc[0]!r}) "
                f"already exist in {spec.name} v{previous[0]}",
                hint="use distinct ids or import without --append",
            )
        items = pd.concat([old_items, items], ignore_index=True)
        labels = pd.concat([old_labels, labels], ignore_index=True)

    questions = sorted(
        set(labels["question"].unique().tolist())
        | set(spec.labels)
        | set(spec.label_votes)
        | (set(previous[2]) if (spec.append and previous) else set())
    )
    params = _import_params(spec, files)
    params[REPEATED_VOTES] = _repeated_votes(items, labels, questions)
    params[GOLD_LABELS] = [q for q in questions if params[REPEATED_VOTES][q] == []]

    items_tbl = pa.Table.from_pandas(
        items[["item_id", "state_text", "state_json", "images", "split", "grp", "meta"]].astype(
            {"item_id": object, "split": object, "meta": object}
        ),
        preserve_index=False,
        schema=pa.schema(
            [
                ("item_id", pa.string()),
                ("state_text", pa.string()),
                ("state_json", pa.string()),
                ("images", pa.list_(pa.string())),
                ("split", pa.string()),
                ("grp", pa.string()),
                ("meta", pa.string()),
            ]
        ),
    )
    labels_tbl = pa.Table.from_pandas(
        labels[["item_id", "question", "option_id", "annotator"]].astype(object),
        preserve_index=False,
        schema=pa.schema([(c, pa.string()) for c in ("item_id", "question", "option_id", "annotator")]),
    )
    fingerprint = _fingerprint(con, items_tbl, labels_tbl)
    shared = None if previous is None else _count_shared_ids(con, spec.name, int(previous[0]), items_tbl)
    notices = []
    if ids_normalised:
        notices.append(f"{ids_normalised:,} item id(s) were trimmed or NFC-normalised (e.g. 'a1 ' is stored as 'a1')")
    for q, n in sorted(unlabelled.items()):
        notices.append(f"{n:,} row(s) have an empty or NaN label for {q!r} and were imported unlabelled")
    extra: dict[str, Any] = {
        "shared_ids": shared,
        "unlabelled": unlabelled,
        "ids_normalised": ids_normalised,
        "notices": notices,
    }
    if previous is not None and previous[1] == fingerprint:
        return DatasetInfo(spec.name, int(previous[0]), fingerprint, False, len(items), questions, **extra)
    version = int(previous[0]) + 1 if previous else 1
    con.register("_items", items_tbl)
    con.register("_labels", labels_tbl)
    try:
        with transaction(con):
            h = save_schema(con, schema) if schema is not None else None
            con.execute(
                "INSERT INTO datasets (name, version, fingerprint, questions, schema_hash, n_items, params)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [spec.name, version, fingerprint, questions, h, len(items), json.dumps(params)],
            )
            con.execute(
                "INSERT INTO items (dataset, version, item_id, state_text, state_json, images, split, grp, meta)"
                " SELECT $n, $v, item_id, state_text, state_json::JSON, images, split, grp, meta::JSON FROM _items",
                {"n": spec.name, "v": version},
            )
            con.execute(
                "INSERT INTO labels SELECT $n, $v, item_id, question, option_id, annotator FROM _labels",
                {"n": spec.name, "v": version},
            )
            _write_gold_labels(con, spec.name, version, params[GOLD_LABELS])
    except duckdb.Error as exc:  # rolled back: nothing was written
        raise DataImportError(
            f"dataset {spec.name!r}: the store refused the rows: {_first_line(exc)}", hint="fix the input named above"
        ) from None
    finally:
        con.unregister("_items")
        con.unregister("_labels")
    return DatasetInfo(spec.name, version, fingerprint, True, len(items), questions, **extra)


#: Item fields that must agree across the rows of one item in the long (annotator) format.
_ITEM_FIELDS = {
    "state_text": "--text-column",
    "state_json": "--state-column",
    "images": "--image-column",
    "split": "--split-column / file split",
    "grp": "--group-column",
    "meta": "--meta-column",
}


#: Key of ``datasets.params`` recording, per question, the splits in which some item has two or more
#: votes (label rows), sorted; ``[]``: every item has at most one. A version's labels never change
#: (only an import writes them), so this is computed once there; versions imported before it was
#: recorded have no such key and readers count the votes instead (:func:`has_repeated_votes`).
REPEATED_VOTES = "repeated_votes"


def _repeated_votes(items: pd.DataFrame, labels: pd.DataFrame, questions: Sequence[str]) -> dict[str, list[str]]:
    """{question: sorted splits with an item of two or more votes} of the label rows of a new version."""
    out: dict[str, list[str]] = {str(q): [] for q in questions}
    if len(labels):
        several = labels[labels.duplicated(["question", "item_id"], keep=False)][["question", "item_id"]]
        if len(several):
            split_of = pd.Series(items["split"].to_numpy(dtype=object), index=items["item_id"].to_numpy(dtype=object))
            pairs = pd.DataFrame({"question": several["question"], "split": several["item_id"].map(split_of)})
            for q, group in pairs.dropna().drop_duplicates().groupby("question"):
                out[str(q)] = sorted(str(v) for v in group["split"])
    return out


#: Key of ``datasets.params`` listing the questions whose ``gold_labels`` rows the import wrote: those
#: whose items have one vote each (:data:`REPEATED_VOTES` ``[]``), so that vote is the gold label under any
#: option order. Versions imported before the table existed have no such key (readers join items with
#: labels instead).
GOLD_LABELS = "gold_labels"


def _write_gold_labels(con: duckdb.DuckDBPyConnection, name: str, version: int, questions: Sequence[str]) -> None:
    """``gold_labels`` of a version being imported (inside its transaction): each label row of
    ``questions`` (one per labelled item) with its item's split, joined from the rows just written (the
    fast path of plain files writes them from the file rows instead)."""
    if not questions:
        return
    con.execute(
        "INSERT INTO gold_labels (dataset, version, question, item_id, split, gold)"
        " SELECT l.dataset, l.version, l.question, l.item_id, i.split, l.option_id FROM labels l"
        " JOIN items i ON i.dataset = l.dataset AND i.version = l.version AND i.item_id = l.item_id"
        " WHERE l.dataset = $n AND l.version = $v AND list_contains($qs, l.question)",
        {"n": name, "v": int(version), "qs": list(questions)},
    )


def _import_record(con: duckdb.DuckDBPyConnection, name: str, version: int, key: str) -> Any:
    """``datasets.params[key]`` of a version as its import recorded it (None when absent)."""
    row = con.execute(
        "SELECT json_extract(params, $path) FROM datasets WHERE name = $n AND version = $v",
        {"path": f"$.{key}", "n": name, "v": int(version)},
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return json.loads(row[0]) if isinstance(row[0], str) else row[0]


def recorded_gold_labels(con: duckdb.DuckDBPyConnection, name: str, version: int, question: str) -> bool:
    """The import wrote the ``gold_labels`` rows of ``question`` (:data:`GOLD_LABELS`)."""
    recorded = _import_record(con, name, version, GOLD_LABELS)
    return isinstance(recorded, list) and question in recorded


def recorded_repeated_votes(con: duckdb.DuckDBPyConnection, name: str, version: int, question: str) -> list[str] | None:
    """The splits in which some item has two or more votes for ``question``, as recorded at import
    (:data:`REPEATED_VOTES`; ``[]``: none anywhere), or None when the version predates the record."""
    recorded = _import_record(con, name, version, REPEATED_VOTES)
    if not isinstance(recorded, dict) or question not in recorded:
        return None
    return [str(s) for s in recorded[question]]


def _import_params(spec: ImportSpec, files: Sequence[Path]) -> dict[str, Any]:
    return {
        "seed": spec.seed,
        "test_fraction": spec.test_fraction,
        "calibration_fraction": spec.calibration_fraction,
        "files": [str(p) for p in files],
        "text_column": spec.text_column,
        "state_column": spec.state_column,
        "labels": spec.labels,
        "group_column": spec.group_column,
        "split_column": spec.split_column,
        "split": spec.split,
        "annotator_column": spec.annotator_column,
        "label_votes": spec.label_votes,
        "meta_columns": list(spec.meta_columns),
    }


#: Plain printable-ASCII text whose first and last characters are visible: trimming and NFC leave it as is.
_PLAIN_ID = "[!-~]([ -~]*[!-~])?"
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


def _streamed_import(
    con: duckdb.DuckDBPyConnection, files: list[Path], spec: ImportSpec, schema: DecisionSchema | None
) -> DatasetInfo | None:
    """The import done by DuckDB over the files (streamed, bounded memory), or None for the pandas path.

    CSV and TSV files are first copied once into a temporary Parquet file by the same DuckDB reader (every column
    as text), so the checks and the inserts scan columns instead of parsing the text again. Taken when it
    provably stores what the pandas path stores (:func:`_streamed_plan`); anything else, and every error, goes
    the pandas path, which names the offending file, row and field.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="workbench-import-") as tmp:
        plan = _streamed_plan(con, files, spec, schema, Path(tmp))
        if plan is None:
            return None
        return _streamed_write(con, files, spec, schema, plan)


@dataclass
class _StreamedPlan:
    """What :func:`_streamed_write` inserts: SQL over the (staged) Parquet files and what the checks found."""

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

    Taken for ``--id-column``, ``--text-column`` and ``--label`` columns (with or without ``--schema``, any
    question type, ``--positive``) and any split source (a column, ``--split``, file names, the fractions), when
    every id is printable ASCII with visible first and last characters (trimming and NFC change nothing) and
    unique, every text holds a visible character, and the label and split columns have few enough distinct
    values: those are mapped in Python by the pandas path's own code (:func:`_map_labels`), so the stored
    labels, the unlabelled counts and the splits are the same. A label or split the pandas path refuses sends
    the import there to be named with its row.
    """
    import pyarrow.parquet as pq

    if (
        not spec.id_column
        or not spec.text_column
        or not spec.labels
        or spec.state_column
        or spec.image_column
        or spec.group_column
        or spec.annotator_column
        or spec.label_votes
        or spec.meta_columns
        or spec.append
    ):
        return None
    kinds = [_READERS.get(f.suffix.lower()) for f in files]
    if any(k not in ("parquet", "csv", "tsv") for k in kinds):
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
            named = _file_split(f) if len(files) > 1 else None
            chosen = named or ("train" if spec.calibration_fraction is not None else None)
            if chosen is None:
                return None
            file_splits[str(f)] = chosen
    cols = [
        spec.id_column,
        spec.text_column,
        *spec.labels.values(),
        *([spec.split_column] if spec.split_column else []),
    ]
    sources: list[str] = []
    try:
        for i, (f, kind) in enumerate(zip(files, kinds, strict=True)):
            try:
                size = _check_regular_file(f)
                longest = _check_delimited(f, "," if kind == "csv" else "\t") if kind in ("csv", "tsv") else 0
            except DataImportError:
                if i == 0:
                    raise  # the pandas path refuses the first file with the same error before anything else
                return None
            if kind == "parquet":
                _check_header(_parquet_names(f), f)
                src = f
            else:
                assert kind is not None
                src = tmp / f"{i}.parquet"
                # a record spanning lines (quoted newlines) longer than this is refused by DuckDB: the pandas path
                reader = _csv_reader(f, kind, size, min(size + 1, STREAMED_LINE_FACTOR * longest))
                con.execute(f"COPY (SELECT * FROM {reader}) TO {_sql_text(str(src))} (FORMAT parquet)")
            file_schema = pq.read_schema(src)
            if any(
                c not in file_schema.names
                or not (
                    pa.types.is_string(file_schema.field(c).type) or pa.types.is_large_string(file_schema.field(c).type)
                )
                for c in cols
            ):
                return None
            if pq.read_metadata(src).num_rows == 0:
                return None
            sources.append(str(src))
        if file_splits and "filename" in pq.read_schema(sources[0]).names:
            return None
        return _streamed_sql(con, files, sources, file_splits, spec, schema)
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
) -> _StreamedPlan | None:
    """:func:`_streamed_plan`'s checks (one DuckDB query each) and SQL over the Parquet ``sources``."""
    assert spec.id_column and spec.text_column
    by_source = dict(zip(sources, (str(f) for f in files), strict=True))
    src = (
        "read_parquet(["
        + ", ".join(_sql_text(s) for s in sources)
        + "]"
        + (", filename = true" if file_splits else "")
        + ")"
    )
    idc, textc = _sql_name(spec.id_column), _sql_name(spec.text_column)
    checks = con.execute(
        f"SELECT count(*), count(DISTINCT {idc}),"
        f" count(*) FILTER (WHERE {idc} IS NULL OR NOT regexp_full_match({idc}, '{_PLAIN_ID}')),"
        f" count(*) FILTER (WHERE {textc} IS NULL), count(*) FILTER (WHERE NOT regexp_matches({textc}, '[!-~]'))"
        f" FROM {src}"
    ).fetchone()
    assert checks is not None
    n, n_distinct, bad_ids, no_text, not_ascii = (int(v) for v in checks)
    if n == 0 or n < FAST_PATH_MIN_ROWS or n != n_distinct or bad_ids or no_text:
        return None
    # a text without a visible ASCII character may still be blank (whitespace, invisible characters only): those
    # few are checked by the pandas path's own pattern, a batch at a time
    if not_ascii:
        query = f"SELECT {textc} FROM {src} WHERE NOT regexp_matches({textc}, '[!-~]')"
        for batch in con.execute(query).fetch_record_batch(HASH_BATCH_ROWS):
            if batch.num_rows and _blank(pd.Series(batch.column(0).to_pylist(), dtype=object)).any():
                return None

    def distinct(c: str) -> list[tuple[Any, int]] | None:
        rows = con.execute(
            f"SELECT {_sql_name(c)}, count(*) FROM {src} GROUP BY ALL LIMIT {STREAMED_MAX_DISTINCT + 1}"
        ).fetchall()
        return None if len(rows) > STREAMED_MAX_DISTINCT else [(r[0], int(r[1])) for r in rows]

    def cases(expr: str, mapping: dict[str, str]) -> str:
        return (
            "CASE "
            + expr
            + " "
            + " ".join(f"WHEN {_sql_text(k)} THEN {_sql_text(v)}" for k, v in mapping.items())
            + " END"
        )

    # splits
    if spec.split_column:
        found = distinct(spec.split_column)
        if found is None:
            return None
        spelled = {v: SPLIT_ALIASES.get((v or "").strip().lower()) for v, _ in found}
        if any(m is None for m in spelled.values()) or len(spelled) > STREAMED_MAX_CASES:
            return None
        split_sql = cases(_sql_name(spec.split_column), {k: v for k, v in spelled.items() if k is not None and v})
    elif spec.split:
        split_sql = _sql_text(SPLIT_ALIASES.get(spec.split.lower(), spec.split))
    elif spec.test_fraction is not None:
        split_sql = f"CASE WHEN {_unit_sql(idc, spec.seed, 'test')} < {_double_sql(spec.test_fraction)} THEN 'test' ELSE 'train' END"
    else:
        split_sql = cases("filename", {s: file_splits[by_source[s]] for s in sources})
    if spec.calibration_fraction:
        split_sql = (
            f"CASE WHEN ({split_sql}) = 'train' AND {_unit_sql(idc, spec.seed, 'calibration')}"
            f" < {_double_sql(spec.calibration_fraction)} THEN 'calibration' ELSE ({split_sql}) END"
        )

    # labels: each column's distinct values mapped by the pandas path's code
    labels_sql, gold_sql, unlabelled = [], [], {}
    for question, c in spec.labels.items():
        _check_label_question(question, c, schema)
        found = distinct(c)
        if found is None:
            return None
        raw = pd.Series([v for v, _ in found], dtype=object)
        mapped, absent = _map_labels(raw, question, c, schema, spec, lambda i: f"value {i}")
        counts = np.array([k for _, k in found], dtype=np.int64)
        if absent.any():
            unlabelled[question] = int(counts[absent.to_numpy(dtype=bool)].sum())
        stored = mapped.notna().to_numpy(dtype=bool)  # pandas may spell "no label" NaN as well as None
        kept = {str(r): str(m) for r, m, k in zip(raw, mapped, stored, strict=True) if k}
        dropped = [str(r) for r, k in zip(raw, stored, strict=True) if not k and r is not None]
        if all(k == v for k, v in kept.items()) and len(dropped) <= STREAMED_MAX_CASES:
            option = _sql_name(c)
            where = f"{option} IS NOT NULL" + (
                f" AND {option} NOT IN ({', '.join(map(_sql_text, dropped))})" if dropped else ""
            )
        elif len(kept) <= STREAMED_MAX_CASES:
            option = cases(_sql_name(c), kept)
            where = f"({option}) IS NOT NULL"
        else:
            return None
        labels_sql.append(
            f"SELECT {idc} AS item_id, {_sql_text(question)} AS question, {option} AS option_id,"
            f" {_sql_text(SINGLE_ANNOTATOR)} AS annotator FROM {src} WHERE {where}"
        )
        # one vote per item: each label row with its item's split, from the same file rows (no join)
        gold_sql.append(
            f"SELECT {_sql_text(question)} AS question, {idc} AS item_id, {split_sql} AS split, {option} AS gold"
            f" FROM {src} WHERE {where}"
        )
    items_sql = (
        f"SELECT {idc} AS item_id, {textc} AS state_text, NULL::VARCHAR AS state_json, NULL::VARCHAR[] AS images,"
        f" {split_sql} AS split, NULL::VARCHAR AS grp, NULL::VARCHAR AS meta FROM {src}"
    )
    return _StreamedPlan(n, items_sql, " UNION ALL ".join(labels_sql), " UNION ALL ".join(gold_sql), unlabelled)


def _unit_sql(key: str, seed: int, salt: str) -> str:
    """:func:`_hash_unit` of the SQL expression ``key``, in SQL."""
    return (
        f"(CAST(('0x' || left(md5({key} || ':' || {_sql_text(str(seed))} || ':' || {_sql_text(salt)}), 8))::UBIGINT"
        " AS DOUBLE) / 4294967296.0)"
    )


def _double_sql(x: float) -> str:
    """``x`` as an SQL DOUBLE, exactly (a bare ``0.3`` would be a DECIMAL)."""
    return f"CAST({_sql_text(repr(float(x)))} AS DOUBLE)"


def _streamed_write(
    con: duckdb.DuckDBPyConnection,
    files: list[Path],
    spec: ImportSpec,
    schema: DecisionSchema | None,
    plan: _StreamedPlan,
) -> DatasetInfo:
    """Fingerprint and write (one transaction) what :func:`_streamed_plan` checked."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW _fast_items AS {plan.items_sql}")
    con.execute(f"CREATE OR REPLACE TEMP VIEW _fast_labels AS {plan.labels_sql}")
    n, questions = plan.n, sorted(spec.labels)
    notices = [
        f"{k:,} row(s) have an empty or NaN label for {q!r} and were imported unlabelled"
        for q, k in sorted(plan.unlabelled.items())
    ]
    extra: dict[str, Any] = {"shared_ids": None, "unlabelled": plan.unlabelled, "ids_normalised": 0, "notices": notices}
    with duckdb_settings(con, {"memory_limit": FAST_PATH_MEMORY_LIMIT}):  # DuckDB's buffer pool counts in RSS
        try:
            fingerprint = _fingerprint_of(con, "_fast_items", "_fast_labels")
            previous = con.execute(
                "SELECT version, fingerprint FROM datasets WHERE name = ? ORDER BY version DESC LIMIT 1", [spec.name]
            ).fetchone()
            if previous is not None:
                extra["shared_ids"] = int(
                    con.execute(
                        "SELECT count(DISTINCT n.item_id) FROM _fast_items n JOIN items i"
                        " ON i.dataset = ? AND i.version = ? AND i.item_id = n.item_id",
                        [spec.name, int(previous[0])],
                    ).fetchone()[0]  # type: ignore[index]
                )
            if previous is not None and previous[1] == fingerprint:
                return DatasetInfo(spec.name, int(previous[0]), fingerprint, False, n, questions, **extra)
            version = int(previous[0]) + 1 if previous else 1
            # one row per item and question (unique ids, one label column each): no item has two votes
            params = _import_params(spec, files) | {REPEATED_VOTES: {q: [] for q in questions}}
            params[GOLD_LABELS] = questions
            with transaction(con):
                h = save_schema(con, schema) if schema is not None else None
                con.execute(
                    "INSERT INTO datasets (name, version, fingerprint, questions, schema_hash, n_items, params)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [spec.name, version, fingerprint, questions, h, n, json.dumps(params)],
                )
                con.execute(
                    "INSERT INTO items (dataset, version, item_id, state_text, state_json, images, split, grp, meta)"
                    " SELECT ?, ?, item_id, state_text, state_json::JSON, images, split, grp, meta::JSON FROM _fast_items",
                    [spec.name, version],
                )
                con.execute(
                    "INSERT INTO labels SELECT ?, ?, item_id, question, option_id, annotator FROM _fast_labels",
                    [spec.name, version],
                )
                con.execute(
                    "INSERT INTO gold_labels (dataset, version, question, item_id, split, gold)"
                    f" SELECT ?, ?, question, item_id, split, gold FROM ({plan.gold_sql})",
                    [spec.name, version],
                )
        except duckdb.Error as exc:  # rolled back: nothing was written
            raise DataImportError(
                f"dataset {spec.name!r}: the store refused the rows: {_first_line(exc)}",
                hint="fix the input named above",
            ) from None
        finally:
            con.execute("DROP VIEW IF EXISTS _fast_items")
            con.execute("DROP VIEW IF EXISTS _fast_labels")
    return DatasetInfo(spec.name, version, fingerprint, True, n, questions, **extra)


def _merge_annotator_rows(items: pd.DataFrame, spec: ImportSpec) -> pd.DataFrame:
    """Long format: one row per (item, annotator) becomes one item; its fields must agree across rows.

    Raises naming the item, the field and two of the values when they disagree, and the item and the
    annotator when one annotator has two rows for one item. Vectorised: one ``groupby().nunique()``.
    """
    dup = items.duplicated(["item_id", "annotator"], keep=False)
    if dup.any():
        row = items.loc[dup].iloc[0]
        n = int(items.loc[dup, ["item_id", "annotator"]].drop_duplicates().shape[0])
        raise DataImportError(
            f"item {row['item_id']!r} has more than one row from annotator {row['annotator']!r} "
            f"({n:,} (item, annotator) pair{'s repeat' if n != 1 else ' repeats'})",
            hint="one row per annotator per item; drop the repeated rows or fix --annotator-column",
        )
    view = items[list(_ITEM_FIELDS)].copy()
    view["images"] = view["images"].map(lambda v: None if v is None else "\x1f".join(v))
    view["item_id"] = items["item_id"]
    distinct = view.groupby("item_id", sort=False).nunique(dropna=False)
    bad = distinct > 1
    if bad.to_numpy().any():
        at = int(bad.any(axis=1).to_numpy().argmax())
        item = str(bad.index[at])
        fld = str(bad.columns[int(bad.iloc[at].to_numpy().argmax())])
        values = view.loc[view["item_id"] == item, fld].drop_duplicates().tolist()[:2]
        shown = " vs ".join(repr(v if v is None or len(str(v)) <= 60 else str(v)[:57] + "...") for v in values)
        column = {"state_text": spec.text_column, "state_json": spec.state_column, "images": spec.image_column}.get(
            fld
        ) or {"split": spec.split_column, "grp": spec.group_column, "meta": ", ".join(spec.meta_columns)}.get(fld)
        what = f"column {column!r}" if column else _ITEM_FIELDS[fld]
        raise DataImportError(
            f"item {item!r}: its annotators' rows disagree on {fld.replace('state_', '')} ({what}): {shown}",
            hint="in the long format every row of an item carries the same item fields; only labels may differ",
        )
    return items.drop_duplicates("item_id", keep="first").drop(columns="annotator").reset_index(drop=True)


def _count_shared_ids(con: duckdb.DuckDBPyConnection, name: str, version: int, items: pa.Table) -> int:
    """How many of the new version's ids the previous version also has (one join in DuckDB)."""
    con.register("_new_ids", items.select(["item_id"]))
    try:
        row = con.execute(
            "SELECT count(DISTINCT n.item_id) FROM _new_ids n JOIN items i"
            " ON i.dataset = ? AND i.version = ? AND i.item_id = n.item_id",
            [name, version],
        ).fetchone()
    finally:
        con.unregister("_new_ids")
    return int(row[0]) if row else 0


def _version_frames(con: duckdb.DuckDBPyConnection, name: str, version: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    items = con.execute(
        "SELECT item_id, state_text, CAST(state_json AS VARCHAR) AS state_json, images, split, grp,"
        " CAST(meta AS VARCHAR) AS meta FROM items WHERE dataset = ? AND version = ?",
        [name, version],
    ).df()
    items["images"] = items["images"].map(lambda v: list(v) if isinstance(v, (list, tuple, np.ndarray)) else None)
    labels = con.execute(
        "SELECT item_id, question, option_id, annotator FROM labels WHERE dataset = ? AND version = ?", [name, version]
    ).df()
    return items, labels


def _fingerprint(con: duckdb.DuckDBPyConnection, items: pa.Table, labels: pa.Table) -> str:
    """sha256 over items (id, state, images, split, group, metadata) and labels, in a canonical order.

    Metadata enters only when some item has it, so a dataset imported without ``--meta-column``
    keeps the fingerprint it had before metadata existed (re-importing it adds no version).
    """
    con.register("_fi", items)
    con.register("_fl", labels)
    try:
        return _fingerprint_of(con, "_fi", "_fl")
    finally:
        con.unregister("_fi")
        con.unregister("_fl")


def _fingerprint_of(con: duckdb.DuckDBPyConnection, items: str, labels: str) -> str:
    """:func:`_fingerprint` of the relations named ``items`` and ``labels`` (registered tables or views)."""
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


# -- reading back --------------------------------------------------------------------------------
def latest_version(con: duckdb.DuckDBPyConnection, name: str) -> int:
    row = con.execute("SELECT max(version) FROM datasets WHERE name = ?", [name]).fetchone()
    if row is None or row[0] is None:
        raise NotFoundError(f"dataset {name!r} does not exist", hint="see `workbench datasets list`")
    return int(row[0])


def list_datasets(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per dataset (latest version) with its number of versions."""
    return con.execute(
        "SELECT name, max(version) AS version, count(*) AS versions, arg_max(fingerprint, version) AS fingerprint,"
        " arg_max(n_items, version) AS n_items, arg_max(questions, version) AS questions,"
        " max(created_at) AS updated_at FROM datasets GROUP BY name ORDER BY name"
    ).df()


def dataset_info(con: duckdb.DuckDBPyConnection, name: str, version: int | None = None) -> dict[str, Any]:
    """Counts per split and per label, questions, fingerprint and the version history."""
    version = version or latest_version(con, name)
    row = con.execute(
        "SELECT fingerprint, questions, schema_hash, n_items, params, created_at FROM datasets "
        "WHERE name = ? AND version = ?",
        [name, version],
    ).fetchone()
    if row is None:
        raise NotFoundError(f"dataset {name!r} has no version {version}")
    splits = dict(
        con.execute(
            "SELECT split, count(*) FROM items WHERE dataset = ? AND version = ? GROUP BY split ORDER BY split",
            [name, version],
        ).fetchall()
    )
    per_q: dict[str, Any] = {}
    schema = _stored_schema(con, row[2])
    for q in row[1]:
        opts = option_ids(schema.questions[q]) if schema is not None and q in schema.questions else []
        # items per majority label (ties: first option in schema order, else alphabetical), as the metrics use
        counts = con.execute(
            "WITH v AS (SELECT item_id, option_id, count(*) AS n FROM labels"
            "  WHERE dataset = $n AND version = $v AND question = $q GROUP BY ALL),"
            " r AS (SELECT option_id, row_number() OVER (PARTITION BY item_id ORDER BY n DESC,"
            "  coalesce(nullif(list_position($opts, option_id), 0), 1000000000), option_id) AS rk FROM v)"
            " SELECT option_id, count(*) FROM r WHERE rk = 1 GROUP BY option_id ORDER BY 2 DESC, 1",
            {"n": name, "v": version, "q": q, "opts": opts},
        ).fetchall()
        vote_counts = con.execute(
            "SELECT option_id, count(*) FROM labels WHERE dataset = ? AND version = ? AND question = ?"
            " GROUP BY option_id ORDER BY 2 DESC, 1",
            [name, version, q],
        ).fetchall()
        per_split = dict(
            con.execute(
                "SELECT i.split, count(DISTINCT l.item_id) FROM labels l JOIN items i USING (dataset, version, item_id)"
                " WHERE l.dataset = ? AND l.version = ? AND l.question = ? GROUP BY 1 ORDER BY 1",
                [name, version, q],
            ).fetchall()
        )
        votes = con.execute(
            "SELECT count(*), count(DISTINCT item_id), count(DISTINCT annotator) FILTER (WHERE annotator <> ''),"
            " count(*) FILTER (WHERE annotator = '') FROM labels WHERE dataset = ? AND version = ? AND question = ?",
            [name, version, q],
        ).fetchone()
        several = con.execute(
            "SELECT count(*) FROM (SELECT item_id FROM labels WHERE dataset = ? AND version = ? AND question = ?"
            " GROUP BY item_id HAVING count(*) > 1)",
            [name, version, q],
        ).fetchone()
        n_votes, n_voted, n_named, n_anon = votes if votes else (0, 0, 0, 0)
        per_q[q] = {
            "n_votes": int(n_votes),
            "votes_per_item": float(n_votes / n_voted) if n_voted else 0.0,
            "items_with_several_votes": int(several[0]) if several else 0,
            "n_annotators": int(n_named),  # named annotators ('import' for a plain --label import)
            "anonymous_votes": int(n_anon),  # from --label-votes count columns
            "n_labels": len(vote_counts),
            "labelled_items_per_split": per_split,
            "label_counts": {k: int(v) for k, v in counts},  # items per majority label
            "vote_counts": {k: int(v) for k, v in vote_counts},  # votes per option (= label_counts with one vote)
        }
    history = (
        con.execute(
            "SELECT version, fingerprint, n_items, created_at FROM datasets WHERE name = ? ORDER BY version", [name]
        )
        .df()
        .to_dict(orient="records")
    )
    return {
        "name": name,
        "version": version,
        "fingerprint": row[0],
        "questions": list(row[1]),
        "schema_hash": row[2],
        "n_items": int(row[3]),
        "splits": {k: int(v) for k, v in splits.items()},
        "labels": per_q,
        "params": json.loads(row[4]) if row[4] else {},
        "meta_columns": meta_columns(con, name, version),  # for `report --slice` (and state_length)
        "created_at": row[5],
        "versions": history,
    }


def _stored_schema(con: duckdb.DuckDBPyConnection, schema_hash: str | None) -> DecisionSchema | None:
    if not schema_hash:
        return None
    from workbench.store.schemas import load_stored_schema

    return load_stored_schema(con, schema_hash)


def load_items(
    con: duckdb.DuckDBPyConnection,
    name: str,
    version: int | None = None,
    splits: Sequence[str] | None = None,
    limit: int | None = None,
) -> pd.DataFrame:
    """Items of one version (item_id, state, images, split, grp), ordered by item_id.

    ``state`` is the text, or the parsed JSON value for JSON states.
    """
    version = version or latest_version(con, name)
    df = con.execute(
        "SELECT item_id, state_text, CAST(state_json AS VARCHAR) AS state_json, images, split, grp FROM items"
        " WHERE dataset = $n AND version = $v AND ($s IS NULL OR list_contains($s, split)) ORDER BY item_id"
        + (" LIMIT $lim" if limit else ""),
        {"n": name, "v": version, "s": list(splits) if splits else None, **({"lim": limit} if limit else {})},
    ).df()
    df["state"] = [
        t if t is not None and not (isinstance(t, float)) else json.loads(j)
        for t, j in zip(df["state_text"], df["state_json"])
    ]
    return df


def meta_columns(con: duckdb.DuckDBPyConnection, name: str, version: int) -> list[str]:
    """The metadata columns stored with a dataset version's items (``--meta-column``), sorted."""
    rows = con.execute(
        "SELECT DISTINCT unnest(json_keys(meta)) AS k FROM items WHERE dataset = ? AND version = ? AND meta IS NOT NULL"
        " ORDER BY k",
        [name, version],
    ).fetchall()
    return [str(r[0]) for r in rows]


def load_item_meta(con: duckdb.DuckDBPyConnection, name: str, version: int, column: str) -> pd.DataFrame:
    """``item_id``, ``value`` (text, or None when the item has no value) of one metadata column, by item_id.

    ``column`` ``"state_length"`` gives each state's length in characters (the JSON text for JSON
    states) as ``value``; any other name must be a stored metadata column.
    """
    if column == "state_length":
        return con.execute(
            "SELECT item_id, length(coalesce(state_text, CAST(state_json AS VARCHAR))) AS value FROM items"
            " WHERE dataset = ? AND version = ? ORDER BY item_id",
            [name, version],
        ).df()
    known = meta_columns(con, name, version)
    if column not in known:
        raise NotFoundError(
            f"dataset {name!r} v{version} has no metadata column {column!r}",
            hint=(
                f"slice by one of: {', '.join([*BUILTIN_SLICES, *known])}; metadata columns are kept at import "
                "with `workbench datasets import … --meta-column COL`"
            ),
        )
    pointer = "/" + column.replace("~", "~0").replace("/", "~1")  # a JSON pointer: any column name is safe
    return con.execute(
        "SELECT item_id, json_extract_string(meta, ?) AS value FROM items WHERE dataset = ? AND version = ?"
        " ORDER BY item_id",
        [pointer, name, version],
    ).df()


def load_labels(
    con: duckdb.DuckDBPyConnection,
    name: str,
    version: int | None = None,
    question: str | None = None,
    splits: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Majority label per (item, question) over every annotator's vote — ties to the first option in
    the order of the dataset's stored schema (as the metrics' gold label), else the alphabetically first."""
    version = version or latest_version(con, name)
    row = con.execute("SELECT schema_hash FROM datasets WHERE name = ? AND version = ?", [name, version]).fetchone()
    schema = _stored_schema(con, row[0] if row else None)
    order = [f"{qid}\x1f{o}" for qid, qq in (schema.questions.items() if schema else []) for o in option_ids(qq)]
    return con.execute(
        "WITH votes AS ("
        "  SELECT item_id, question, option_id, count(*) AS n FROM labels"
        "  WHERE dataset = $n AND version = $v AND ($q IS NULL OR question = $q) GROUP BY ALL"
        "), ranked AS ("
        "  SELECT *, row_number() OVER (PARTITION BY item_id, question ORDER BY n DESC,"
        "   coalesce(nullif(list_position($order, question || chr(31) || option_id), 0), 1000000000), option_id)"
        "   AS r FROM votes"
        ")"
        " SELECT r.item_id, r.question, r.option_id, i.split FROM ranked r"
        " JOIN items i ON i.dataset = $n AND i.version = $v AND i.item_id = r.item_id"
        " WHERE r.r = 1 AND ($s IS NULL OR list_contains($s, i.split))"
        " ORDER BY r.item_id, r.question",
        {"n": name, "v": version, "q": question, "s": list(splits) if splits else None, "order": order},
    ).df()


def has_repeated_votes(
    con: duckdb.DuckDBPyConnection, name: str, version: int, question: str, splits: Sequence[str] | None = None
) -> bool:
    """True when some item of ``splits`` has two or more stored votes for ``question`` (counted in
    DuckDB, so callers can skip loading a run's answers when there is no agreement to measure).

    Answered from the import's record (:func:`recorded_repeated_votes`) when the version has one,
    else by counting the votes."""
    recorded = recorded_repeated_votes(con, name, version, question)
    if recorded is not None:
        return bool(set(recorded) & set(splits)) if splits else bool(recorded)
    row = con.execute(
        "SELECT 1 FROM labels l JOIN items i ON i.dataset = l.dataset AND i.version = l.version AND i.item_id = l.item_id"
        " WHERE l.dataset = $n AND l.version = $v AND l.question = $q AND ($s IS NULL OR list_contains($s, i.split))"
        " GROUP BY l.item_id HAVING count(*) > 1 LIMIT 1",
        {"n": name, "v": version, "q": question, "s": list(splits) if splits else None},
    ).fetchone()
    return row is not None


def load_votes(
    con: duckdb.DuckDBPyConnection,
    name: str,
    version: int,
    question: str,
    option_ids: Sequence[str],
    splits: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Every stored vote of ``question`` as aligned arrays, ordered by (item, annotator).

    Returns ``item_id`` (object), ``annotator`` (object; ``""`` for anonymous count votes) and
    ``option`` (int64 index into ``option_ids``; votes for an option the list lacks are left out).
    """
    tbl = con.execute(
        "SELECT l.item_id, l.annotator, CAST(list_position($opts, l.option_id) - 1 AS BIGINT) AS option"
        " FROM labels l JOIN items i ON i.dataset = l.dataset AND i.version = l.version AND i.item_id = l.item_id"
        " WHERE l.dataset = $n AND l.version = $v AND l.question = $q AND list_position($opts, l.option_id) > 0"
        " AND ($s IS NULL OR list_contains($s, i.split)) ORDER BY l.item_id, l.annotator",
        {"n": name, "v": version, "q": question, "opts": list(option_ids), "s": list(splits) if splits else None},
    ).fetch_arrow_table()
    return {
        "item_id": np.asarray(tbl.column("item_id").to_pylist(), dtype=object),
        "annotator": np.asarray(tbl.column("annotator").to_pylist(), dtype=object),
        "option": np.asarray(tbl.column("option").to_numpy(), dtype=np.int64),
    }
