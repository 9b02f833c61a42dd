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

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError, NotFoundError
from workbench.schema import DecisionSchema, option_ids
from workbench.store.db import memory_connection, transaction
from workbench.store.runs import save_schema

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
    annotator_column: str | None = None
    append: bool = False


# -- reading -------------------------------------------------------------------------------------
def _read_file(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataImportError(f"{path}: file does not exist", hint="check the path")
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
            sep = "," if kind == "csv" else "\t"
            rel = con.execute(
                "SELECT * FROM read_csv(?, header = true, all_varchar = true, delim = ?, quote = '\"',"
                " strict_mode = true, null_padding = false, ignore_errors = false, "
                " auto_detect = true)",
                [p, sep],
            )
        elif kind == "parquet":
            rel = con.execute("SELECT * FROM read_parquet(?)", [p])
        else:
            fmt = "newline_delimited" if kind == "jsonl" else "auto"
            rel = con.execute("SELECT * FROM read_json(?, format = ?)", [p, fmt])
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
    return df


def _check_delimited(path: Path, sep: str) -> None:
    """Every row has the header's number of fields, and the bytes are UTF-8 (C csv reader, one pass)."""
    import csv

    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataImportError(
            f"{path}: not valid UTF-8 at line {line} (byte 0x{data[exc.start]:02x})", hint="re-save the file as UTF-8"
        ) from None
    del data
    line = 1
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh, delimiter=sep)
            header = next(reader, None)
            if header is None:
                raise DataImportError(f"{path}: empty file", hint="the file needs a header row and data")
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


def _first_line(exc: Exception) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text[:300]


def _column(df: pd.DataFrame, col: str, path: Path, option: str) -> pd.Series:
    if col not in df.columns:
        raise DataImportError(
            f"{path}: no column {col!r} (for {option})", hint=f"columns are: {', '.join(map(str, df.columns))}"
        )
    return df[col]


def _as_text(series: pd.Series) -> pd.Series:
    return series.map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))


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


def _frame_for_file(
    path: Path, spec: ImportSpec, schema: DecisionSchema | None, n_files: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Validate one file; return (items, labels) frames in the store's columns."""
    kind = _READERS.get(path.suffix.lower(), "csv")
    df = _read_file(path)
    if (spec.text_column is None) == (spec.state_column is None):
        raise DataImportError(
            "give exactly one of --text-column or --state-column",
            hint="--text-column for text states, --state-column for JSON states",
        )
    items = pd.DataFrame(index=df.index)
    if spec.id_column:
        ids = _as_text(_column(df, spec.id_column, path, "--id-column"))
        missing = ids.isna() | (ids.str.strip() == "")
        if missing.any():
            i = int(np.flatnonzero(missing.to_numpy())[0])
            raise DataImportError(
                f"{_row_ref(path, i, kind)}: empty id in column {spec.id_column!r}", hint="every row needs an id"
            )
    else:
        prefix = path.stem
        ids = pd.Series([f"{prefix}-{i + 1:05d}" for i in range(len(df))], index=df.index)
    items["item_id"] = ids
    if spec.text_column:
        text = _as_text(_column(df, spec.text_column, path, "--text-column"))
        empty = text.isna() | (text.str.strip() == "")
        if empty.any():
            i = int(np.flatnonzero(empty.to_numpy())[0])
            raise DataImportError(
                f"{_row_ref(path, i, kind)}: empty text in column {spec.text_column!r} (item {ids.iloc[i]!r})",
                hint="remove the row or fill in its text",
            )
        items["state_text"] = text
        items["state_json"] = None
    else:
        raw = _column(df, spec.state_column, path, "--state-column")
        states = []
        for i, v in enumerate(raw.tolist()):
            if isinstance(v, str):
                try:
                    v = json.loads(v)
                except json.JSONDecodeError:
                    raise DataImportError(
                        f"{_row_ref(path, i, kind)}: column {spec.state_column!r} is not JSON",
                        hint="use --text-column for plain text",
                    ) from None
            if v is None:
                raise DataImportError(f"{_row_ref(path, i, kind)}: empty state", hint="fill in the state")
            states.append(json.dumps(v, ensure_ascii=False, sort_keys=False))
        items["state_text"] = None
        items["state_json"] = states
    if spec.image_column:
        imgs = _as_text(_column(df, spec.image_column, path, "--image-column"))
        items["images"] = imgs.map(lambda s: [p.strip() for p in s.split(";") if p.strip()] if s else None)
    else:
        items["images"] = None
    items["grp"] = _as_text(_column(df, spec.group_column, path, "--group-column")) if spec.group_column else None

    # splits: column, fixed value, file name, or carved later from fractions
    if spec.split_column:
        raw = _as_text(_column(df, spec.split_column, path, "--split-column")).fillna("").str.strip().str.lower()
        mapped = raw.map(SPLIT_ALIASES)
        bad = mapped.isna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataImportError(
                f"{_row_ref(path, i, kind)}: split {raw.iloc[i]!r} is not one of train, calibration, test",
                hint="fix the split column or carve splits with --test-fraction",
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

    # labels
    label_rows = []
    for question, col in spec.labels.items():
        if schema is not None and question not in schema.questions:
            raise DataImportError(
                f"--label {question}={col}: the schema has no question {question!r}",
                hint=f"schema questions: {', '.join(schema.question_ids)}",
            )
        values = _as_text(_column(df, col, path, f"--label {question}")).str.strip()
        qtype = schema.questions[question].type if schema is not None else None
        pos = spec.positive.get(question)
        if pos is not None:
            qtype = qtype or "noul"
            mapped = values.map(lambda v: None if v is None or v == "" else ("yes" if v == pos else "no"))
        elif qtype == "noul":
            low = values.str.lower()
            mapped = low.map(
                lambda v: None if v is None or v == "" else ("yes" if v in _TRUE else "no" if v in _FALSE else "?" + v)
            )
        else:
            mapped = values.map(lambda v: None if v is None or v == "" else v)
        bad_noul = mapped.fillna("").str.startswith("?")
        if bad_noul.any():
            i = int(np.flatnonzero(bad_noul.to_numpy())[0])
            raise DataImportError(
                f"{_row_ref(path, i, kind)}: label {values.iloc[i]!r} for yes/no question {question!r}",
                hint=f"use yes/no/true/false/1/0, or --positive {question}=VALUE",
            )
        if schema is not None and qtype in ("choice", "score"):
            allowed = set(option_ids(schema.questions[question]))
            if qtype == "score":
                levels = [str(c) for c in schema.questions[question].criteria]
                # a score label may be the level index or the level's text
                mapped = mapped.map(
                    lambda v: v if v is None or v in allowed else (str(levels.index(v)) if v in levels else v)
                )
            unknown = mapped.notna() & ~mapped.isin(allowed)
            if unknown.any():
                i = int(np.flatnonzero(unknown.to_numpy())[0])
                raise DataImportError(
                    f"{_row_ref(path, i, kind)}: label {mapped.iloc[i]!r} in column {col!r} is not an option of "
                    f"question {question!r}",
                    hint="add the option to the schema or fix the label",
                )
        ann = _as_text(df[spec.annotator_column]) if spec.annotator_column else pd.Series("import", index=df.index)
        lab = pd.DataFrame({"item_id": ids, "question": question, "option_id": mapped, "annotator": ann})
        label_rows.append(lab[lab["option_id"].notna()])
    labels = (
        pd.concat(label_rows, ignore_index=True)
        if label_rows
        else pd.DataFrame(columns=["item_id", "question", "option_id", "annotator"])
    )
    return items.reset_index(drop=True), labels


# -- import ---------------------------------------------------------------------------------------
@dataclass
class DatasetInfo:
    name: str
    version: int
    fingerprint: str
    created: bool  # False when the content equalled the latest version (nothing written)
    n_items: int
    questions: list[str]

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def import_dataset(
    con: duckdb.DuckDBPyConnection, paths: Sequence[str | Path], spec: ImportSpec, schema: DecisionSchema | None = None
) -> DatasetInfo:
    """Validate ``paths`` and write a new version of dataset ``spec.name`` in one transaction.

    Raises :class:`DataImportError` naming the file, line/record or field and the fix; the
    database is unchanged afterwards.
    """
    if not spec.name or not spec.name.strip():
        raise DataImportError("--name is empty", hint="name the dataset, e.g. --name banking77")
    if not spec.labels:
        raise DataImportError("no --label given", hint="pass --label QUESTION=COLUMN (repeatable)")
    for f, opt in ((spec.test_fraction, "--test-fraction"), (spec.calibration_fraction, "--calibration-fraction")):
        if f is not None and not (0.0 <= f < 1.0):
            raise DataImportError(f"{opt} {f} is outside [0, 1)", hint="e.g. 0.3")
    if schema is not None:
        missing = [q for q in schema.questions if q not in spec.labels]
        # questions without labels are allowed (the schema may ask more than is labelled)
        del missing
    paths = [Path(p) for p in paths]
    if not paths:
        raise DataImportError("no file given", hint="workbench datasets import PATH --name NAME ...")
    frames = [_frame_for_file(p, spec, schema, len(paths)) for p in paths]
    items = pd.concat([f[0] for f in frames], ignore_index=True)
    labels = pd.concat([f[1] for f in frames], ignore_index=True)

    dup = items["item_id"].duplicated(keep=False)
    if dup.any():
        first = items.loc[dup, "item_id"].iloc[0]
        raise DataImportError(
            f"duplicate item id {first!r} ({int(dup.sum())} rows share an id)",
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
            raise DataImportError(
                f"--append: item id {items.loc[clash, 'item_id'].iloc[0]!r} already exists in "
                f"{spec.name} v{previous[0]}",
                hint="use distinct ids or import without --append",
            )
        items = pd.concat([old_items, items], ignore_index=True)
        labels = pd.concat([old_labels, labels], ignore_index=True)

    questions = sorted(
        set(labels["question"].unique().tolist())
        | set(spec.labels)
        | (set(previous[2]) if (spec.append and previous) else set())
    )
    params = {
        "seed": spec.seed,
        "test_fraction": spec.test_fraction,
        "calibration_fraction": spec.calibration_fraction,
        "files": [str(p) for p in paths],
        "text_column": spec.text_column,
        "state_column": spec.state_column,
        "labels": spec.labels,
        "group_column": spec.group_column,
        "split_column": spec.split_column,
        "split": spec.split,
    }

    items_tbl = pa.Table.from_pandas(
        items[["item_id", "state_text", "state_json", "images", "split", "grp"]].astype(
            {"item_id": object, "split": object}
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
            ]
        ),
    )
    labels_tbl = pa.Table.from_pandas(
        labels[["item_id", "question", "option_id", "annotator"]].astype(object),
        preserve_index=False,
        schema=pa.schema([(c, pa.string()) for c in ("item_id", "question", "option_id", "annotator")]),
    )
    fingerprint = _fingerprint(con, items_tbl, labels_tbl)
    if previous is not None and previous[1] == fingerprint:
        return DatasetInfo(spec.name, int(previous[0]), fingerprint, False, len(items), questions)
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
                "INSERT INTO items SELECT $n, $v, item_id, state_text, state_json::JSON, images, split, grp"
                " FROM _items",
                {"n": spec.name, "v": version},
            )
            con.execute(
                "INSERT INTO labels SELECT $n, $v, item_id, question, option_id, annotator FROM _labels",
                {"n": spec.name, "v": version},
            )
    finally:
        con.unregister("_items")
        con.unregister("_labels")
    return DatasetInfo(spec.name, version, fingerprint, True, len(items), questions)


def _version_frames(con: duckdb.DuckDBPyConnection, name: str, version: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    items = con.execute(
        "SELECT item_id, state_text, CAST(state_json AS VARCHAR) AS state_json, images, split, grp "
        "FROM items WHERE dataset = ? AND version = ?",
        [name, version],
    ).df()
    items["images"] = items["images"].map(lambda v: list(v) if v is not None and not isinstance(v, float) else None)
    labels = con.execute(
        "SELECT item_id, question, option_id, annotator FROM labels WHERE dataset = ? AND version = ?", [name, version]
    ).df()
    return items, labels


def _fingerprint(con: duckdb.DuckDBPyConnection, items: pa.Table, labels: pa.Table) -> str:
    """sha256 over items (id, state, images, split, group) and labels, in a canonical order."""
    con.register("_fi", items)
    con.register("_fl", labels)
    try:
        a = con.execute(
            "SELECT coalesce(sha256(string_agg(concat_ws(chr(31), item_id, coalesce(state_text, ''),"
            " coalesce(state_json, ''), coalesce(array_to_string(images, ';'), ''), split, coalesce(grp, '')),"
            " chr(30) ORDER BY item_id)), '') FROM _fi"
        ).fetchone()[0]
        b = con.execute(
            "SELECT coalesce(sha256(string_agg(concat_ws(chr(31), item_id, question, option_id, annotator),"
            " chr(30) ORDER BY item_id, question, annotator, option_id)), '') FROM _fl"
        ).fetchone()[0]
    finally:
        con.unregister("_fi")
        con.unregister("_fl")
    import hashlib

    return hashlib.sha256(f"v1|{a}|{b}".encode()).hexdigest()


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
    for q in row[1]:
        counts = con.execute(
            "SELECT option_id, count(DISTINCT item_id) FROM labels WHERE dataset = ? AND version = ? AND question = ?"
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
        per_q[q] = {
            "n_labels": len(counts),
            "labelled_items_per_split": per_split,
            "label_counts": {k: int(v) for k, v in counts},
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
        "created_at": row[5],
        "versions": history,
    }


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


def load_labels(
    con: duckdb.DuckDBPyConnection,
    name: str,
    version: int | None = None,
    question: str | None = None,
    splits: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Majority label per (item, question) — ties to the alphabetically first option."""
    version = version or latest_version(con, name)
    return con.execute(
        "WITH votes AS ("
        "  SELECT item_id, question, option_id, count(*) AS n FROM labels"
        "  WHERE dataset = $n AND version = $v AND ($q IS NULL OR question = $q) GROUP BY ALL"
        "), ranked AS ("
        "  SELECT *, row_number() OVER (PARTITION BY item_id, question ORDER BY n DESC, option_id) AS r FROM votes"
        ")"
        " SELECT r.item_id, r.question, r.option_id, i.split FROM ranked r"
        " JOIN items i ON i.dataset = $n AND i.version = $v AND i.item_id = r.item_id"
        " WHERE r.r = 1 AND ($s IS NULL OR list_contains($s, i.split))"
        " ORDER BY r.item_id, r.question",
        {"n": name, "v": version, "q": question, "s": list(splits) if splits else None},
    ).df()
