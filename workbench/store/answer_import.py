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
finite, within [0, 1] (1e-9 slack, then clipped), summing to 1 within :data:`SUM_TOLERANCE` and
re-normalised (vectors already within 1e-12 of 1 are stored as given, so an exported run re-imports
bit for bit). Ids must be items of the dataset version, once per question; in the long layout every
item needs every question. Any violation raises one :class:`DataImportError` naming the first
offending row (file order), how many rows are bad and the fix; nothing is written (one transaction).

Vectorised: Arrow record batches of :data:`BATCH_ROWS` rows are checked and summarised with numpy by
:data:`WORKERS` threads (numpy releases the GIL) and written, in file order, to a hidden staged Parquet
file next to the store; the item-id check and the run's summary read that file, and one
``INSERT … FROM read_parquet`` inside the import's one transaction stores the rows. Memory stays bounded by
a few batches plus DuckDB's ``memory_limit`` (one ``INSERT`` over a Python Arrow stream made DuckDB hold
~0.5 GB per million rows until the statement ended). The staged file is removed afterwards, on error too.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
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
from workbench.store.calls import _ANSWER_SCHEMA
from workbench.store.db import fetch_scalar, memory_connection, transaction

#: Rows per Arrow batch (65,536 × 77 doubles ≈ 40 MB per temporary).
BATCH_ROWS = 65_536
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
#: DuckDB memory limit while importing (its buffer pool counts in the process's RSS).
DEFAULT_MEMORY_LIMIT = "2GB"

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
_OUT_SCHEMA = pa.schema([f for f in _ANSWER_SCHEMA if f.name not in ("run_id", "vendor_confidence", "cache_key")])
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
            or pa.types.is_integer(t)
            or pa.types.is_dictionary(t)
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
        import pyarrow.dataset as pads

        dataset = pads.dataset([str(f) for f in src.files], format="parquet")
        yield from dataset.to_batches(columns=cols, batch_size=BATCH_ROWS, batch_readahead=2, fragment_readahead=1)
        return
    duck_types = {c: ("DOUBLE[]" if t is None else _duck_type(t)) for c, t in layout.read.items()}
    spec = "{" + ", ".join(f"'{c}': '{t}'" for c, t in duck_types.items()) + "}"
    con = memory_connection()
    try:
        reader = con.execute(
            f"SELECT {', '.join(_quote(c) for c in cols)} FROM read_json(?, format = 'newline_delimited',"
            f" columns = {spec})",
            [[str(f) for f in src.files]],
        ).fetch_record_batch(BATCH_ROWS)
        yield from reader
    finally:
        con.close()


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_integer(t):
        return "BIGINT"
    return "BOOLEAN"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text[:300]


# -- checks --------------------------------------------------------------------------------------
_HINTS = {
    "item_id": "every row needs the id of an item of the dataset",
    "question": "use the schema's question ids",
    "length": "write one probability per schema option, in schema order",
    "value": "probabilities are finite numbers in [0, 1]",
    "sum": f"each vector must sum to 1 within {SUM_TOLERANCE} (it is then re-normalised)",
    "both": "a failed answer has a NULL vector; drop its failure kind when it has probabilities",
    "read": "fix the file",
}


@dataclass
class _Problems:
    """Bad rows found while streaming: counts per check and the first offending row in file order."""

    counts: dict[str, int] = field(default_factory=dict)
    first: tuple[int, str, str] | None = None  # (row, check, message)

    def add(self, check: str, rows: np.ndarray, base: int, describe) -> None:
        """Record the rows (positions in the batch, ascending) failing ``check``; ``describe(pos)`` names one."""
        if rows.size == 0:
            return
        self.counts[check] = self.counts.get(check, 0) + int(rows.size)
        row = base + int(rows[0])
        if self.first is None or row < self.first[0]:
            self.first = (row, check, describe(int(rows[0])))

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
) -> pa.RecordBatch | None:
    """Check and summarise one question's vectors; the answers rows, or None when a check failed.

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
        "length", rows[bad_len], base, describe(lambda p: f"{lengths[p]} probabilities, the schema has {k} options")
    )
    kind_given = kinds.is_valid().to_numpy(zero_copy_only=False)
    both = np.flatnonzero(valid & kind_given)
    problems.add(
        "both", rows[both], base, describe(lambda p: f"a probability vector and failure kind {kinds[p].as_py()!r}")
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
    with np.errstate(invalid="ignore", over="ignore"):
        s = m.sum(axis=1)
        lo, hi = m.min(axis=1), m.max(axis=1)
    nonfinite = ~np.isfinite(s)
    out_of_range = ~nonfinite & ((lo < -RANGE_SLACK) | (hi > 1 + RANGE_SLACK))

    def value_detail(p: int) -> str:
        j = int(np.searchsorted(ok_rows, p))
        vec = m[j]
        bad = np.flatnonzero(~np.isfinite(vec) | (vec < -RANGE_SLACK) | (vec > 1 + RANGE_SLACK))
        return f"probability {float(vec[bad[0]])!r} at option {int(bad[0]) + 1} is not a finite number in [0, 1]"

    problems.add("value", rows[ok_rows[nonfinite | out_of_range]], base, describe(value_detail))
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
    )
    if problems:
        return None
    need = np.abs(dev) > EXACT_SUM
    if need.all():
        p = m / s[:, None]
    elif need.any():
        p = m.copy()
        p[need] /= s[need, None]
    else:
        p = m.copy() if not m.flags.writeable else m
    p1, p2 = _top_two(p)
    ent = _entropy(p)

    def full(x: np.ndarray) -> pa.Array:
        out = np.full(n, np.nan)
        out[valid] = x
        return pa.array(out, type=pa.float64(), from_pandas=True)

    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(valid, k, 0), out=offsets[1:])
    vectors = pa.ListArray.from_arrays(pa.array(offsets), pa.array(p.reshape(-1)), mask=pa.array(~valid))
    failed_kind = pc.if_else(pa.array(valid), pa.nulls(n, pa.string()), pc.fill_null(kinds, UNKNOWN_FAILURE))
    cols = {
        "item_id": ids,
        "question": pa.array(np.full(n, question, dtype=object), type=pa.string()),
        "probs": vectors,
        "p_top": full(p1),
        "margin": full(p1 - p2),
        "entropy": full(ent),
        "deviation": full(dev),
        "failure_kind": failed_kind,
        "failure_message": pc.if_else(pa.array(valid), pa.nulls(n, pa.string()), messages),
    }
    for name, typ in _LONG_EXTRAS.items():
        col = extras.get(name)
        cols[name] = pa.nulls(n, typ) if col is None else (col if col.type == typ else pc.cast(col, typ))
    return pa.RecordBatch.from_arrays([cols[c] for c in _OUT_COLUMNS], schema=_OUT_SCHEMA)


def _entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats per row, as :func:`workbench_runtime.answers.entropy` (to ~1e-16), faster.

    ``p`` holds checked probabilities (in [0, 1]): a zero entry's logarithm is taken of the smallest
    normal double instead (finite, and multiplied by 0 it adds nothing), so ``log`` runs its unmasked
    SIMD loop (``where=`` would not), and the row sums are one ``einsum``: the same figures as taking the
    logarithm of the positive entries only, bit for bit.
    """
    logs = np.maximum(p, np.finfo(np.float64).tiny)
    np.log(logs, out=logs)
    return -np.einsum("ij,ij->i", p, logs)


def _top_two(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top and runner-up probability per row of finite ``p`` (modified, then restored exactly).

    The values :func:`workbench.schema.answers.top_two` returns, in two passes over ``p`` instead of four
    (no NaN check: the rows are checked; no copy: the top entry is masked in place and put back).
    """
    n, k = p.shape
    rows = np.arange(n)
    top = p.argmax(axis=1)
    p1 = p[rows, top]
    if k < 2:
        return p1, np.zeros(n)
    p[rows, top] = -np.inf
    p2 = p.max(axis=1)
    p[rows, top] = p1
    return p1, p2


class _Stream:
    """The checked answers rows of a source, as an Arrow stream DuckDB pulls from."""

    def __init__(self, src: _Source, layout: _Layout, schema: DecisionSchema, model: str | None):
        self.src, self.layout, self.schema, self.model = src, layout, schema, model
        self.problems = _Problems()
        self.rows = 0
        self.k = {q: len(option_ids(schema.questions[q])) for q in schema.question_ids}

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Batches checked by :data:`WORKERS` threads (numpy and Arrow release the GIL), yielded in file order.

        At most ``WORKERS + 1`` batches are in flight, so memory stays bounded; DuckDB inserts one batch
        while the next ones are checked.
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
                    self.problems.merge(found)
                    self.rows += n
                    if not self.problems:  # after the first bad row: keep counting, stop writing
                        yield from outs
        except (pa.ArrowException, duckdb.Error, OSError) as exc:
            for future, _, _ in pending:
                future.cancel()
            self.problems.counts["unreadable"] = 1
            self.problems.first = (self.rows, "read", f"cannot read: {_first_line(exc)}")

    def _checked(self, batch: pa.RecordBatch, base: int, problems: _Problems) -> list[pa.RecordBatch]:
        return list(self._one(batch, base, problems))

    def _one(self, batch: pa.RecordBatch, base: int, problems: _Problems) -> Iterator[pa.RecordBatch]:
        n = batch.num_rows
        names = batch.schema.names
        ids = _text(batch.column("item_id"), n)
        null_ids = np.flatnonzero(~ids.is_valid().to_numpy(zero_copy_only=False))
        problems.add("item_id", null_ids, base, lambda p: "item_id is empty")
        model = pa.array(np.full(n, self.model, dtype=object), type=pa.string()) if self.model else None
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
def _setting(con: duckdb.DuckDBPyConnection, name: str) -> Any:
    row = con.execute("SELECT current_setting(?)", [name]).fetchone()
    return row[0] if row else None


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
    saved = {s: _setting(con, s) for s in ("memory_limit", "preserve_insertion_order")} if memory_limit else {}
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
        con.execute("SET preserve_insertion_order = false")
    staged = _staging_path(con)
    try:
        _stage(stream, staged)
        if stream.problems:
            raise stream.problems.error(where)
        if stream.rows == 0:
            raise DataImportError(f"{where}: no rows", hint="the file holds no answers")
        # before the insert: joined with a transaction's 10M uncommitted rows this ran out of DuckDB's memory
        splits = _check_items(con, staged, dataset, version, schema, layout, where)
        # before the insert too: at 10M rows the transaction's primary-key index fills DuckDB's memory
        figures = _staged_summary(con, staged)
        run_model = model or _mode_model(con, staged)
        with transaction(con):
            try:
                con.execute(
                    f"INSERT INTO answers (run_id, {', '.join(_OUT_COLUMNS)})"
                    f" SELECT $run, {', '.join(_OUT_COLUMNS)} FROM read_parquet($staged)",
                    {"run": run_id, "staged": str(staged)},
                )
            except duckdb.ConstraintException:
                if stream.problems:
                    raise stream.problems.error(where) from None
                raise _duplicates(src, layout, where) from None
            except duckdb.Error as exc:
                if stream.problems:
                    raise stream.problems.error(where) from None
                raise DataImportError(f"{where}: cannot import: {_first_line(exc)}", hint="fix the file") from None
            if stream.problems:
                raise stream.problems.error(where)
            if layout.kind == "long":
                _check_complete(con, run_id, schema, where)
            insert_run(
                con,
                run_id=run_id,
                dataset=dataset,
                dataset_version=version,
                schema=schema,
                provider=provider_label or "imported",
                splits=splits,
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
                "splits": splits,
                "status": "done",
                "emulated": False,
                "model": run_model,
                **figures,
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
    finally:
        staged.unlink(missing_ok=True)
        for s, v in saved.items():
            con.execute(f"SET {s} = '{v}'" if isinstance(v, str) else f"SET {s} = {str(v).lower()}")
    return run_id


def _staging_path(con: duckdb.DuckDBPyConnection) -> Path:
    """A new hidden file next to the store (the system's temp directory for an in-memory store)."""
    from workbench.store.calls import database_path

    db = database_path(con)
    fd, name = tempfile.mkstemp(
        prefix=f".{db.name if db else 'workbench'}.import-", suffix=".parquet", dir=db.parent if db else None
    )
    os.close(fd)
    return Path(name)


def _stage(stream: _Stream, path: Path) -> None:
    """Write the checked rows to ``path`` (uncompressed Parquet, a row group per batch); stop writing at the
    first bad row but keep counting (the error reports every check's count)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(
        path,
        _OUT_SCHEMA,
        compression="none",
        use_dictionary=["question", "model", "failure_kind"],
        write_statistics=False,
    ) as writer:
        for out in stream.batches():
            writer.write_batch(out)


def _mode_model(con: duckdb.DuckDBPyConnection, staged: Path) -> str | None:
    row = con.execute("SELECT mode(model) FROM read_parquet(?) WHERE model IS NOT NULL", [str(staged)]).fetchone()
    return row[0] if row and row[0] else None


def _staged_summary(con: duckdb.DuckDBPyConnection, staged: Path) -> dict[str, Any]:
    """:func:`workbench.store.calls.run_summary` of the new run, read from the staged file.

    Read from ``answers`` inside the transaction, at 10M rows those figures ran out of DuckDB's memory
    (the uncommitted rows hold the buffer pool). An import pays no call (no cache key, nothing billed
    unanswered), so the latency quantiles are None and the billed-unanswered figures 0, as there.
    """
    row = con.execute(
        "SELECT count(*) FILTER (WHERE probs IS NOT NULL), count(*) FILTER (WHERE probs IS NULL),"
        " sum(input_tokens), sum(cost_usd), sum(cost_usd) FILTER (WHERE NOT coalesce(cached, false)),"
        " count(*) FILTER (WHERE cost_usd IS NULL AND probs IS NOT NULL), count(DISTINCT item_id)"
        " FROM read_parquet(?)",
        [str(staged)],
    ).fetchone()
    assert row is not None
    kinds = con.execute(
        "SELECT failure_kind, count(*) FROM read_parquet(?) WHERE probs IS NULL GROUP BY 1 ORDER BY 2 DESC",
        [str(staged)],
    ).fetchall()
    paid = float(row[4]) if row[4] is not None else None
    return {
        "billed_unanswered_calls": 0,
        "billed_unanswered_cost_usd": 0.0,
        "billed_unanswered_unknown_cost": 0,
        "cost_billed_usd": paid,
        "items": int(row[6] or 0),
        "answered": int(row[0] or 0),
        "failed": int(row[1] or 0),
        "failed_by_kind": {str(k): int(v) for k, v in kinds},
        "input_tokens": int(row[2]) if row[2] is not None else 0,
        "cost_usd": float(row[3]) if row[3] is not None else None,
        "cost_paid_usd": paid,
        "answers_with_unknown_cost": int(row[5] or 0),
        "latency_p50_ms": None,
        "latency_p95_ms": None,
    }


def _check_items(
    con: duckdb.DuckDBPyConnection,
    staged: Path,
    dataset: str,
    version: int,
    schema: DecisionSchema,
    layout: _Layout,
    where: str,
) -> list[str]:
    """Ids of the staged rows must be items of the version; returns the splits covered."""
    one_q = layout.kind == "wide"  # every question has a row per file row: look at one
    row = con.execute(
        "SELECT count(*) FILTER (WHERE i.item_id IS NULL), min(a.item_id) FILTER (WHERE i.item_id IS NULL),"
        " list(DISTINCT i.split) FILTER (WHERE i.split IS NOT NULL)"
        " FROM read_parquet($staged) a"
        " LEFT JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id"
        " WHERE $q IS NULL OR a.question = $q",
        {"ds": dataset, "v": int(version), "staged": str(staged), "q": schema.question_ids[0] if one_q else None},
    ).fetchone()
    assert row is not None
    n_unknown, example, splits = int(row[0]), row[1], sorted(row[2] or [])
    if n_unknown:
        raise DataImportError(
            f"{where}: item {example!r} is not an item of dataset {dataset!r} v{version} ({n_unknown:,} row"
            f"{'s' if n_unknown != 1 else ''} name unknown items; nothing was imported)",
            hint="import the answers against the dataset version they answer (--dataset/--version), or drop those rows",
        )
    return splits


def _check_complete(con: duckdb.DuckDBPyConnection, run_id: str, schema: DecisionSchema, where: str) -> None:
    """Long layout: every item answers every question (after the insert: the key has refused duplicates)."""
    questions = schema.question_ids
    row = con.execute("SELECT count(DISTINCT item_id), count(*) FROM answers WHERE run_id = ?", [run_id]).fetchone()
    assert row is not None
    if int(row[1]) != int(row[0]) * len(questions):
        short = con.execute(
            "SELECT item_id, list(question) FROM answers WHERE run_id = ? GROUP BY item_id HAVING count(*) < ?"
            " ORDER BY item_id LIMIT 1",
            [run_id, len(questions)],
        ).fetchone()
        n_short = con.execute(
            "SELECT count(*) FROM (SELECT item_id FROM answers WHERE run_id = ? GROUP BY item_id HAVING count(*) < ?)",
            [run_id, len(questions)],
        ).fetchone()[0]  # type: ignore[index]
        assert short is not None
        missing = [q for q in questions if q not in set(short[1])]
        raise DataImportError(
            f"{where}: item {short[0]!r} has no row for question {missing[0]!r} ({n_short:,} item"
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
