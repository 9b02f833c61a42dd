"""Dataset import, validation, splits and versioning.

An import reads CSV, TSV, Parquet, JSON or JSONL with DuckDB's readers, validates everything
before writing, and writes one new dataset version in one transaction — or nothing at all.

Split roles are used the same way everywhere: ``train`` (only trained baselines learn from it),
``calibration`` (recalibration and thresholds are fitted on it), ``test`` (reported figures).
Deterministic carving hashes ``id`` (or ``group``) with the seed, so the same item lands in the
same split on every machine and every re-import.

A dataset's *fingerprint* is a content hash of items, labels and splits (not of its name or
version): the same content gives the same fingerprint, and re-importing it adds no version.

This module is the entry (:func:`import_dataset`) and the reads of stored datasets; the import's parts
are :mod:`~workbench.store.import_spec` (the spec), :mod:`~workbench.store.import_files` (file checks),
:mod:`~workbench.store.import_frames` (the pandas path), :mod:`~workbench.store.import_streamed` (the
DuckDB path) and :mod:`~workbench.store.fingerprints`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError, NotFoundError
from workbench.schema import DecisionSchema, option_ids
from workbench.store.import_frames import frame_for_file, hash_unit
from workbench.store.import_spec import (
    BUILTIN_SLICES,
    GOLD_LABELS,
    LABEL_COLUMNS,
    REPEATED_VOTES,
    SPLITS,
    DatasetInfo,
    ImportSpec,
    validate_dataset_name,
)
from workbench.store.import_streamed import streamed_import, write_version


def _check_meta_columns(columns: Sequence[str]) -> None:
    """``--meta-column`` names: not blank, not repeated, not a built-in slice name."""
    seen: set[str] = set()
    for c in columns:
        if not c or not c.strip():
            raise DataImportError(
                "`meta_columns` is empty", hint="name a column of the file, e.g. `meta_columns` language"
            )
        if c in BUILTIN_SLICES:
            raise DataImportError(
                f"`meta_columns` {c!r} is the name of a built-in slice",
                hint=f"rename the column in the file; {c} is computed for every dataset",
            )
        if c in seen:
            raise DataImportError(f"`meta_columns` {c!r} is given twice", hint="name each metadata column once")
        seen.add(c)


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
            "no `labels` given", hint="pass `labels` QUESTION=COLUMN (repeatable) or `label_votes` QUESTION=COL1,COL2,…"
        )
    both = sorted(set(spec.labels) & set(spec.label_votes))
    if both:
        raise DataImportError(
            f"question {both[0]!r} is given by both `labels` and `label_votes`", hint="use one of the two per question"
        )
    if spec.annotator_column:
        if spec.label_votes:
            raise DataImportError(
                "`annotator_column` (one row per annotator) and `label_votes` (vote counts per row) do not mix",
                hint="long format: `annotator_column` with `labels`; wide format: `label_votes` alone",
            )
        if not spec.id_column:
            raise DataImportError(
                "`annotator_column` needs `id_column`: the rows of one item are found by its id",
                hint="pass `id_column` COL naming the item id column",
            )
    _check_meta_columns(spec.meta_columns)
    for f, opt in ((spec.test_fraction, "`test_fraction`"), (spec.calibration_fraction, "`calibration_fraction`")):
        if f is not None and not (0.0 <= f < 1.0):
            raise DataImportError(f"{opt} {f} is outside [0, 1)", hint="e.g. 0.3")
    files = [Path(p) for p in paths]
    if not files:
        raise DataImportError("no file given", hint="`workbench datasets import PATH --name NAME ...`")
    fast = streamed_import(con, files, spec, schema)
    if fast is not None:
        return fast
    frames = [frame_for_file(p, spec, schema, len(files)) for p in files]
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
            hint="ids must be unique; fix `id_column` or drop duplicates",
        )

    # carve splits deterministically (group keeps related items together)
    key = items["grp"].fillna(items["item_id"]) if spec.group_column else items["item_id"]
    if spec.test_fraction is not None and items["split"].isna().any():
        u = hash_unit(con, key, spec.seed, "test")
        items.loc[items["split"].isna(), "split"] = np.where(u < spec.test_fraction, "test", "train")[
            items["split"].isna().to_numpy()
        ]
    if spec.calibration_fraction:
        u = hash_unit(con, key, spec.seed, "calibration")
        carve = (items["split"] == "train").to_numpy() & (u < spec.calibration_fraction)
        items.loc[carve, "split"] = "calibration"
    bad_split = ~items["split"].isin(SPLITS)
    if bad_split.any():
        raise DataImportError(
            f"split {items.loc[bad_split, 'split'].iloc[0]!r} is not one of train, calibration, test",
            hint="use `split` train|calibration|test",
        )

    previous = con.execute(
        "SELECT version, fingerprint, questions FROM datasets WHERE name = ? ORDER BY version DESC LIMIT 1", [spec.name]
    ).fetchone()
    if spec.append:
        if previous is None:
            raise DataImportError(f"`append`: dataset {spec.name!r} does not exist yet", hint="drop `append`")
        old_items, old_labels = _version_frames(con, spec.name, previous[0])
        clash = items["item_id"].isin(set(old_items["item_id"]))
        if clash.any():
            n = int(clash.sum())
            raise DataImportError(
                f"`append`: {n:,} item id{'s' if n != 1 else ''} (e.g. {items.loc[clash, 'item_id'].iloc[0]!r}) "
                f"already exist in {spec.name} v{previous[0]}",
                hint="use distinct ids or import without `append`",
            )
        items = pd.concat([old_items, items], ignore_index=True)
        labels = pd.concat([old_labels, labels], ignore_index=True)

    questions = sorted(
        set(labels["question"].unique().tolist())
        | set(spec.labels)
        | set(spec.label_votes)
        | (set(previous[2]) if (spec.append and previous) else set())
    )
    item_columns = ["item_id", "state_text", "state_json", "images", "split", "grp", "meta"]
    items_tbl = pa.Table.from_pandas(
        items[item_columns].astype({"item_id": object, "split": object, "meta": object}),
        preserve_index=False,
        schema=pa.schema([(c, pa.list_(pa.string()) if c == "images" else pa.string()) for c in item_columns]),
    )
    labels_tbl = pa.Table.from_pandas(
        labels[list(LABEL_COLUMNS)].astype(object),
        preserve_index=False,
        schema=pa.schema([(c, pa.string()) for c in LABEL_COLUMNS]),
    )
    con.register("_items", items_tbl)
    con.register("_labels", labels_tbl)
    try:
        repeated = _repeated_votes(items, labels, questions)
        return write_version(
            con, files, spec, schema, ("_items", "_labels"), len(items), questions, repeated,
            unlabelled=unlabelled, ids_normalised=ids_normalised,
        )  # fmt: skip
    finally:
        con.unregister("_items")
        con.unregister("_labels")


#: Item fields that must agree across the rows of one item in the long (annotator) format.
_ITEM_FIELDS = {
    "state_text": "`text_column`",
    "state_json": "`state_column`",
    "images": "`image_column`",
    "split": "`split_column` / file split",
    "grp": "`group_column`",
    "meta": "`meta_columns`",
}


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
            hint="one row per annotator per item; drop the repeated rows or fix `annotator_column`",
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
            "SELECT count(*), count(DISTINCT item_id), count(DISTINCT item_id) FILTER (WHERE several),"
            " count(DISTINCT annotator) FILTER (WHERE annotator <> ''), count(*) FILTER (WHERE annotator = '')"
            " FROM (SELECT item_id, annotator, count(*) OVER (PARTITION BY item_id) > 1 AS several FROM labels"
            " WHERE dataset = ? AND version = ? AND question = ?)",
            [name, version, q],
        ).fetchone()
        n_votes, n_voted, n_several, n_named, n_anon = votes if votes else (0, 0, 0, 0, 0)
        per_q[q] = {
            "n_votes": int(n_votes),
            "votes_per_item": float(n_votes / n_voted) if n_voted else 0.0,
            "items_with_several_votes": int(n_several),
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
