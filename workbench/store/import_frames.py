"""The pandas path of a dataset import: one file's rows as the store's items and labels frames.

Text cleaning (blank and invisible characters, ids), labels mapped to option ids, wide vote-count
columns, item metadata, and the deterministic split carving by hashed id or group.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError
from workbench.schema import DecisionSchema, option_ids
from workbench.schema.questions import parse_json_text
from workbench.store.import_files import READERS, file_split, first_line, read_file
from workbench.store.import_spec import (
    ANONYMOUS_ANNOTATOR,
    LABEL_COLUMNS,
    MAX_VOTES_PER_CELL,
    SINGLE_ANNOTATOR,
    SPLIT_ALIASES,
    ImportSpec,
)

_TRUE = {"yes", "true", "1", "y", "t"}
_FALSE = {"no", "false", "0", "n", "f"}
#: Whitespace, control and format characters a reader cannot see (zero-width space, BOM, fillers, tags):
#: text or an id made only of these is empty.
_INVISIBLE_CLASS = (
    "\\s\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_BLANK = f"[{_INVISIBLE_CLASS}]*"
_EDGES = f"^[{_INVISIBLE_CLASS}]+|[{_INVISIBLE_CLASS}]+$"
#: Label spellings that mean "no label" (pandas writes NaN this way), unless the schema has such an option.
_MISSING_LABELS = {"nan", "<na>"}


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
        f"{where} holds {kind}, not text", hint="use a string column (or `state_column` for JSON states)"
    )


def is_blank(text: pd.Series) -> pd.Series:
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


# -- validation helpers ------------------------------------------------------------------------
def _row_ref(path: Path, row_index: int, kind: str) -> str:
    # CSV line numbers count the header; other formats are referred to by record number
    return f"{path}: line {row_index + 2}" if kind in ("csv", "tsv") else f"{path}: record {row_index + 1}"


def hash_unit(con: duckdb.DuckDBPyConnection, keys: pd.Series, seed: int, salt: str) -> np.ndarray:
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


def frame_for_file(
    path: Path, spec: ImportSpec, schema: DecisionSchema | None, n_files: int
) -> tuple[pd.DataFrame, pd.DataFrame, _FileStats]:
    """Validate one file; return (items, labels) frames in the store's columns and what was normalised."""
    kind = READERS.get(path.suffix.lower(), "csv")
    df = read_file(path)
    stats = _FileStats()
    if (spec.text_column is None) == (spec.state_column is None):
        raise DataImportError(
            "give exactly one of `text_column` or `state_column`",
            hint="`text_column` for text states, `state_column` for JSON states",
        )

    def row_ref(i: int) -> str:
        return _row_ref(path, i, kind)

    def text_of(col: str, option: str) -> pd.Series:
        return _as_text(_column(df, col, path, option), f"{path}: column {col!r}", row_ref)

    def filled_text_of(col: str, option: str, what: str, hint: str) -> pd.Series:
        """:func:`text_of` a column no row may leave blank (the first blank row refused, naming its item)."""
        values = text_of(col, option)
        _refuse_first(
            is_blank(values), row_ref, lambda i: f"empty {what} in column {col!r} (item {ids.iloc[i]!r})", hint
        )
        return values

    items = pd.DataFrame(index=df.index)
    if spec.id_column:
        raw_ids = text_of(spec.id_column, "`id_column`")
        _refuse_first(
            is_blank(raw_ids), row_ref, lambda i: f"empty id in column {spec.id_column!r}", "every row needs an id"
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
            "`text_column`",
            "text",
            "remove the row or fill in its text (whitespace and invisible characters do not count)",
        )
        items["state_text"] = text
        items["state_json"] = None
    else:
        assert spec.state_column is not None  # exactly one of the two was checked above
        raw = _column(df, spec.state_column, path, "`state_column`")
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
                    f"{ref}: the state in column {spec.state_column!r} is not JSON ({first_line(exc)})",
                    hint="states must be JSON objects, arrays or strings (no NaN, no binary)",
                ) from None
        items["state_text"] = None
        items["state_json"] = states
    if spec.image_column:
        imgs = text_of(spec.image_column, "`image_column`")
        items["images"] = imgs.map(lambda s: [p.strip() for p in s.split(";") if p.strip()] if s else None)
    else:
        items["images"] = None
    items["grp"] = text_of(spec.group_column, "`group_column`") if spec.group_column else None

    # splits: column, fixed value, file name, or carved later from fractions
    if spec.split_column:
        raw = text_of(spec.split_column, "`split_column`").fillna("").str.strip().str.lower()
        mapped = raw.map(SPLIT_ALIASES)
        _refuse_first(
            mapped.isna(),
            row_ref,
            lambda i: f"split {raw.iloc[i]!r} is not one of train, calibration, test",
            "fix the split column or carve splits with `test_fraction`",
        )
        items["split"] = mapped
    elif spec.split:
        items["split"] = SPLIT_ALIASES.get(spec.split.lower(), spec.split)
    elif spec.test_fraction is not None:
        items["split"] = None  # carved below, over all files together
    elif n_files > 1 and file_split(path):
        items["split"] = file_split(path)
    elif spec.calibration_fraction is not None:
        items["split"] = "train"
    else:
        raise DataImportError(
            f"{path}: no split given",
            hint="pass `split_column` COL, `split` train|calibration|test, or `test_fraction` F",
        )

    # item metadata (slices): {column: text or null} per row, as JSON text; NULL without --meta-column
    if spec.meta_columns:
        texts = [text_of(c, "`meta_columns`").str.strip() for c in spec.meta_columns]
        texts = [t.where(~is_blank(t), None) for t in texts]
        items["meta"] = [
            json.dumps(dict(zip(spec.meta_columns, row, strict=True)), ensure_ascii=False)
            for row in zip(*(t.tolist() for t in texts), strict=True)
        ]
    else:
        items["meta"] = None

    # annotators (long format): one id per row, never blank
    if spec.annotator_column:
        hint = "every row of the long format names its annotator"
        ann = filled_text_of(spec.annotator_column, "`annotator_column`", "annotator", hint)
        ann = normalise_ids(ann)
        items["annotator"] = ann
    else:
        ann = pd.Series(SINGLE_ANNOTATOR, index=df.index)

    # labels
    label_rows = []
    for question, col in spec.labels.items():
        check_label_question(question, col, schema)
        mapped, absent = map_labels(text_of(col, f"`labels` {question}"), question, col, schema, spec, row_ref)
        if absent.any():
            stats.unlabelled[question] = int(absent.sum())
        lab = pd.DataFrame({"item_id": ids, "question": question, "option_id": mapped, "annotator": ann})
        label_rows.append(lab[lab["option_id"].notna()])
    for question, columns in spec.label_votes.items():
        label_rows.append(_vote_count_rows(df, ids, question, columns, schema, path, kind, stats))
    labels = pd.concat(label_rows, ignore_index=True) if label_rows else pd.DataFrame(columns=list(LABEL_COLUMNS))
    return items.reset_index(drop=True), labels, stats


def check_label_question(question: str, col: str, schema: DecisionSchema | None) -> None:
    """Refuse a ``--label`` question that the schema (when there is one) does not declare."""

    if schema is not None and question not in schema.questions:
        raise DataImportError(
            f"`labels` {question}={col}: the schema has no question {question!r}",
            hint=f"schema questions: {', '.join(schema.question_ids)}",
        )


def map_labels(
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
    absent = is_blank(values) | (values.str.lower().isin(_MISSING_LABELS) & ~values.isin(allowed))
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
            hint=f"use yes/no/true/false/1/0, or `positive` {question}=VALUE",
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
            _column(df, col, path, f"`label_votes` {question}"),
            f"{path}: column {col!r}",
            lambda i: _row_ref(path, i, kind),
        )
        raw = raw.where(~is_blank(raw), "0").str.strip()
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() | (num < 0) | (num != np.floor(num.fillna(0))) | (num > MAX_VOTES_PER_CELL)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataImportError(
                f"{_row_ref(path, i, kind)}: vote count {raw.iloc[i]!r} in column {col!r} (option {option!r} of "
                f"question {question!r}, item {ids.iloc[i]!r}) is not a whole number of votes",
                hint=f"each `label_votes` column holds how many annotators chose that option: 0..{MAX_VOTES_PER_CELL:,}",
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
            f"`label_votes` {question}= names no column", hint=f"e.g. `label_votes` {question}=yes:n_yes,no:n_no"
        )
    if schema is None:
        return dict(columns)
    if question not in schema.questions:
        raise DataImportError(
            f"`label_votes` {question}: the schema has no question {question!r}",
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
                f"`label_votes` {question}: {name!r} (column {col!r}) is not an option of question {question!r}",
                hint=f"options: {', '.join(allowed)}; write OPTION:COLUMN when the column is named otherwise",
            )
        if key in out:
            raise DataImportError(
                f"`label_votes` {question}: option {key!r} is given twice (columns {out[key]!r} and {col!r})",
                hint="one count column per option",
            )
        out[key] = col
    return out


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
