"""One DuckDB query per (run, question, split) for what the UI paints first on a run of millions of answers.

The UI's Calibration and Thresholds pages need, for a split, either a few sums (metric totals, top-label
reliability bins, the confusion counts) or where each labelled item falls on the threshold grid. Both
are computed here by DuckDB over the store's ``answers`` rows (joined with items and gold labels exactly
as :func:`workbench.store.runs.load_answers` picks them: the majority vote, ties to the option listed
first, a label that is not an option = unlabelled), without reading the probability matrix into Python.

The answers table keeps ``p_top`` (the top probability) and ``margin`` (top − runner-up) per answer,
written from the stored probabilities by every writer (the runner through
:func:`workbench.store.calls.answers_table`, ``runs import`` through its own top-two): the values
:func:`workbench_runtime.rules.rule_coordinates` computes from the same row (a selection of two stored
floats and one subtraction). So per row:

- arg-max (ties to the first option) = ``list_position(probs, p_top) - 1``;
- p(label) = ``probs[label + 1]``; Σ p² = ``list_inner_product(probs, probs)``;
- a failure: ``probs`` NULL, or a non-finite ``p_top`` (a NaN anywhere in a row makes the writers'
  ``p_top`` NaN), as the in-memory path's ``~isfinite(row).all()``.

Only raw runs qualify (:func:`summaries_trusted`): a calibrated view computes its probabilities on
read, and a row written without its summaries (``write_answers`` of a bare frame) cannot be trusted;
callers read those through the streamed library functions instead.

The threshold grid's cells are not computed here: :func:`grid_points` returns the exact rule
coordinates (two stored floats per item) and :func:`workbench.thresholds.surface.surface_from_coordinates`
bins them as it bins the in-memory path's.

Nothing here finishes a figure: :mod:`workbench.engines.store_aggregates` turns the counts into the
library's reports, displays, surfaces and selections.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb
import numpy as np

from workbench.schema import option_ids
from workbench.store.db import duckdb_settings
from workbench.store.runs import ITEMS_WITH_GOLD_SQL, answer_source, answers_params, get_run, gold_cte, question_of

#: DuckDB's memory limit while one of these queries runs (``WORKBENCH_AGGREGATE_MEMORY`` overrides it). Its
#: joins hold the item ids of a whole dataset version: at 10M items they need about 2 GB to run without
#: spilling to disk (under 1 GB the same query takes 2.5x the CPU); the limit is put back afterwards and
#: what the query cached is released.
AGGREGATE_MEMORY_LIMIT = "2GB"


@contextmanager
def query_memory(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DuckDB's memory limit set to ``WORKBENCH_AGGREGATE_MEMORY`` (default :data:`AGGREGATE_MEMORY_LIMIT`;
    raised or lowered) inside the block, then what the query cached is released and the limit put back."""
    want = os.environ.get("WORKBENCH_AGGREGATE_MEMORY") or AGGREGATE_MEMORY_LIMIT
    with duckdb_settings(con, {"memory_limit": want}, release=True):
        yield


def _lit(v: float) -> str:
    # quoted: the same text in DuckDB and Spark SQL (the engines' count_le is this one)
    return f"CAST('{float(v)!r}' AS DOUBLE)"


def count_le(values: Sequence[Any] | np.ndarray, x: str, *, literal: Callable[[Any], str] = _lit) -> str:
    """SQL for how many of the ascending ``values`` are <= ``x`` (``np.searchsorted(values, x, 'right')``):
    a balanced tree of CASE comparisons, ~log2(len(values)) per row; NULL/NaN count 0 (NaN compares
    greater than everything in DuckDB, so callers pass finite values or guard the failures first).
    ``literal`` writes a value as SQL (default: a double; e.g. a quoted string for text bounds)."""
    lits = [literal(v) for v in values]

    def tree(lo: int, hi: int) -> str:
        if lo == hi:
            return str(lo)
        mid = (lo + hi + 1) // 2
        return f"CASE WHEN {x} >= {lits[mid - 1]} THEN {tree(mid, hi)} ELSE {tree(lo, mid - 1)} END"

    return tree(0, len(lits))


def summaries_trusted(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """The run's stored rows are its probabilities (a raw run, or a calibrated view that stored its rows),
    so ``p_top``/``margin`` describe what :func:`~workbench.store.runs.load_answers` returns."""
    run = get_run(con, run_id)
    source, calibrators = answer_source(con, run)
    return calibrators is None


#: The rows of :data:`workbench.store.runs._ANSWERS_SQL` with the stored summaries (a label that is not an
#: option gives ``y`` NULL): the answers matched against the items with their gold label, joined first
#: (:data:`workbench.store.runs.ITEMS_WITH_GOLD_SQL`, the CTE every reader shares).
_ROWS_SQL = (
    """
        WITH {gold}, k AS ("""
    + ITEMS_WITH_GOLD_SQL
    + """)
        SELECT a.item_id, k.split, a.probs, a.p_top AS p1, a.margin, {top_option} AS top_option, k.label AS y,
               a.failure_kind
        FROM answers a JOIN k ON k.item_id = a.item_id
        WHERE a.run_id = $run AND a.question = $q
"""
)


#: :data:`_ROWS_SQL` of the labelled items only, from the ``gold_labels`` rows the dataset import wrote
#: (one table scan instead of items joined with labels); an item whose label is not an option has ``y`` NULL.
_LABELLED_ROWS_SQL = """
        WITH b AS (
            SELECT item_id, split, list_position($opts, gold) - 1 AS y FROM gold_labels
            WHERE dataset = $ds AND version = $v AND question = $q
              AND ($splits IS NULL OR list_contains($splits, split))
        )
        SELECT a.item_id, b.split, a.probs, a.p_top AS p1, a.margin, {top_option} AS top_option, b.y, a.failure_kind
        FROM answers a JOIN b ON b.item_id = a.item_id
        WHERE a.run_id = $run AND a.question = $q
"""


def _rows_sql(
    con: duckdb.DuckDBPyConnection, run: dict, question: str, *, top_option: bool = False, labelled: bool = False
) -> str:
    """:data:`_ROWS_SQL` for the run's dataset version: without the majority vote when its import recorded
    that no item has two votes for ``question``; ``top_option``: with the stored column (else NULL).
    ``labelled``: the caller keeps only labelled rows (``y`` not NULL), so the import's ``gold_labels``
    rows are read when it wrote them (:data:`_LABELLED_ROWS_SQL`)."""
    from workbench.store.datasets import recorded_gold_labels

    top = "a.top_option" if top_option else "NULL"
    if labelled and recorded_gold_labels(con, run["dataset"], int(run["dataset_version"]), question):
        return _LABELLED_ROWS_SQL.format(top_option=top)
    return _ROWS_SQL.format(gold=gold_cte(con, run, question), top_option=top)


def _run_split(con: duckdb.DuckDBPyConnection, run_id: str, question: str, split: str) -> tuple[dict, str, list, dict]:
    run = get_run(con, run_id)
    q = question_of(con, run, question)
    opts = option_ids(q)
    source, _ = answer_source(con, run)
    return run, q.type, opts, answers_params(run, question, source, opts, [split])


def metric_sums(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    question: str,
    split: str,
    *,
    edges: np.ndarray,
    log_loss_floor: float,
) -> dict:
    """Metric sums of one split (see the module doc) in one query, as Python/numpy values.

    ``edges``: the top-label reliability bin edges (ascending, bin ``b`` holds ``edges[b] <= p_top <
    edges[b+1]``, the last bin closed); ``log_loss_floor``: p(label) is clipped to [floor, 1].

    Returns a dict: ``n`` answers, ``n_failed``, ``n_labelled`` (answered and labelled: the rows metrics
    use), ``n_unlabelled`` (answered, no label), ``n_untrusted`` (answered rows without a stored ``p_top``, or
    whose ``p_top`` is none of their probabilities: the figures must not be used then), ``n_correct``, ``sum_brier``, ``sum_log_loss``,
    ``failures_by_kind`` {kind: count}, ``bins`` (3, n_bins) = count, Σ p_top, Σ correct per bin,
    ``confusion`` (k, k) int64 counts [label, arg-max], ``option_ids``, ``qtype``.
    """
    run, qtype, opts, params = _run_split(con, run_id, question, split)
    k, nb = len(opts), len(edges) - 1
    rbin = _bin_sql(np.asarray(edges, dtype=float), "conf")
    eps = _lit(log_loss_floor)
    # one grouping by every key a figure needs (a few thousand groups), rolled up here
    sql = f"""
WITH rows AS ({_rows_sql(con, run, question)}),
f AS (
    SELECT probs, p1, y, failure_kind,
           probs IS NULL OR p1 IS NULL OR NOT isfinite(p1) AS failed,
           probs IS NOT NULL AND p1 IS NULL AS untrusted
    FROM rows
), m AS (
    SELECT failed, untrusted, failure_kind,
           NOT failed AND y IS NOT NULL AS metric,
           CASE WHEN NOT failed AND y IS NOT NULL THEN y END AS ym,
           CASE WHEN NOT failed AND y IS NOT NULL THEN list_position(probs, p1) - 1 END AS pred,
           CASE WHEN NOT failed AND y IS NOT NULL THEN p1 END AS conf,
           CASE WHEN NOT failed AND y IS NOT NULL THEN probs[y + 1] END AS p_label,
           CASE WHEN NOT failed AND y IS NOT NULL THEN list_inner_product(probs, probs) END AS sq
    FROM f
), g AS (
    SELECT *, CASE WHEN metric THEN {rbin} END AS rbin, CASE WHEN failed THEN failure_kind END AS fkind FROM m
)
SELECT failed, untrusted, metric, rbin, ym, pred, fkind,
       count(*) AS n,
       sum(sq - 2 * p_label + 1) AS sum_brier,
       sum(-ln(greatest(least(p_label, CAST(1 AS DOUBLE)), {eps}))) AS sum_ll,
       sum(conf) AS sum_conf
FROM g
GROUP BY ALL
"""
    with query_memory(con):
        rows = con.execute(sql, params).fetchall()
    bins = np.zeros((3, nb))
    confusion = np.zeros((k, k), dtype=np.int64)
    kinds: dict[str, int] = {}
    n = n_failed = n_metric = n_unl = n_untr = n_corr = 0
    s_b = s_ll = s_c = 0.0
    for failed, untrusted, metric, b, y, pred, fkind, cnt, g_b, g_ll, g_c in rows:
        n += cnt
        s_b += g_b or 0.0
        s_ll += g_ll or 0.0
        s_c += g_c or 0.0
        if failed:
            n_failed += cnt
            if fkind is not None:
                kinds[str(fkind)] = kinds.get(str(fkind), 0) + cnt
        elif not metric:
            n_unl += cnt
        if untrusted or (metric and pred is None):
            n_untr += cnt
        if not metric:
            continue
        n_metric += cnt
        hit = cnt if pred == y else 0
        n_corr += hit
        if b is not None:
            bins[:, int(b)] += (float(cnt), float(g_c or 0.0), float(hit))
        if pred is not None:
            confusion[int(y), int(pred)] += cnt
    out: dict = {
        "qtype": qtype,
        "option_ids": opts,
        "bins": bins,
        "confusion": confusion,
        "n": n,
        "n_failed": n_failed,
        "n_labelled": n_metric,
        "n_unlabelled": n_unl,
        "n_untrusted": n_untr,
        "n_correct": n_corr,
        "sum_brier": s_b,
        "sum_log_loss": s_ll,
        "sum_conf": s_c,
    }
    if n_failed and sum(kinds.values()) < n_failed:
        # failed rows without a kind (NaN probabilities): the in-memory path names them by their stored kind
        kinds["None"] = n_failed - sum(kinds.values())
    out["failures_by_kind"] = dict(sorted(kinds.items()))
    return out


def _bin_sql(edges: np.ndarray, x: str) -> str:
    """SQL for the bin of ``x`` among ``edges`` (:func:`count_le` of the inner edges). Equal-width edges over
    [0, 1] (``np.linspace``) take ``floor(x · n)`` except within 1e-9 of an edge, where the comparisons
    decide (as :func:`workbench.metrics.reliability.uniform_bin_index`): a tree of CASE comparisons per row
    costs seconds at millions of rows."""
    nb = len(edges) - 1
    tree = count_le(edges[1:-1], x)
    if nb < 2 or not np.array_equal(edges, np.linspace(0.0, 1.0, nb + 1)):
        return tree
    t = f"({x} * {nb})"
    return (
        f"CASE WHEN abs({t} - round({t})) < 1e-9 OR NOT isfinite({x}) THEN {tree}"
        f" ELSE least(greatest(CAST(floor({t}) AS INTEGER), 0), {nb - 1}) END"
    )


def grid_points(con: duckdb.DuckDBPyConnection, run_id: str, question: str, splits: Sequence[str]) -> dict[str, dict]:
    """The rule coordinates of each labelled item of ``splits``, in item-id order per split.

    One query (the join with items and gold labels is made once for every split). Per split, arrays
    (n_labelled,): ``x``/``y`` float64, the item's rule coordinates as
    :func:`workbench_runtime.rules.rule_coordinates` computes them from its probabilities (``-inf`` for a
    failure; noul: ``+inf`` on the axis the predicted side does not constrain), ``predicted`` (the
    option the rule would accept, ``-1`` for a failure) and ``labels``, both int16 (int32 beyond 32k
    options); plus ``n_untrusted`` (answered rows without a stored ``p_top``: the arrays must not be used
    then), ``option_ids`` and ``qtype``. Choice questions read ``p_top``/``margin``; noul questions
    ``p_yes = probs[1]``; the predicted option of a choice question is the stored ``top_option`` when every
    row of the run has one (no probability list is read), else ``list_position(probs, p_top) - 1``.
    """
    run = get_run(con, run_id)
    q = question_of(con, run, question)
    qtype, opts = q.type, option_ids(q)
    source, _ = answer_source(con, run)
    params = answers_params(run, question, source, opts, list(splits))
    inf, minus_inf = "CAST('inf' AS DOUBLE)", "CAST('-inf' AS DOUBLE)"
    # a choice question's stored arg-max, when every row of the run has one: no probability list is read
    stored = qtype == "choice" and _top_option_written(con, source, question)
    if qtype == "noul":  # as rule_coordinates: x = p(yes) on predicted-yes rows, y = -p(yes) on predicted-no rows
        sel = f"""CASE WHEN failed THEN {minus_inf} WHEN probs[1] >= 0.5 THEN probs[1] ELSE {inf} END AS x,
                  CASE WHEN failed THEN {minus_inf} WHEN probs[1] >= 0.5 THEN {inf} ELSE -probs[1] END AS cy,
                  CASE WHEN failed THEN -1 WHEN probs[1] >= 0.5 THEN 0 ELSE 1 END AS predicted"""
    elif qtype == "choice":
        sel = f"""CASE WHEN failed THEN {minus_inf} ELSE p1 END AS x,
                  CASE WHEN failed THEN {minus_inf} ELSE margin END AS cy,
                  CASE WHEN failed THEN -1 ELSE {"top_option" if stored else "list_position(probs, p1) - 1"} END
                  AS predicted"""
    else:
        raise ValueError(f"grid points of {qtype} questions are not computed here")
    failed = (
        # rows written with top_option: -1 marks a failure or a non-finite row; p_top is written with it
        "top_option < 0 AS failed, false AS untrusted"
        if stored
        else "probs IS NULL OR p1 IS NULL OR NOT isfinite(p1) AS failed, probs IS NOT NULL AND p1 IS NULL AS untrusted"
    )
    small = np.int16 if len(opts) < 2**15 - 1 else np.int32
    small_sql = "SMALLINT" if small is np.int16 else "INTEGER"
    codes = {s: j for j, s in enumerate(splits)}
    split_code = "CASE split " + " ".join(f"WHEN {_sql_str(s)} THEN {j}" for s, j in codes.items()) + " END"
    rows = _rows_sql(con, run, question, top_option=stored, labelled=True)
    sql = f"""
WITH rows AS ({rows}),
f AS (
    SELECT item_id, split, {"" if stored else "probs, "}p1, margin, top_option, y, {failed}
    FROM rows WHERE y IS NOT NULL
), c AS (
    SELECT item_id, {split_code} AS s, untrusted, y, {sel} FROM f
)
SELECT CAST(s AS TINYINT) AS s, x, cy AS y, CAST(coalesce(predicted, -1) AS {small_sql}) AS predicted,
       CAST(y AS {small_sql}) AS labels, untrusted OR predicted IS NULL AS untrusted
FROM c ORDER BY s, item_id
"""
    with query_memory(con):
        tbl = con.execute(sql, params).fetch_arrow_table()
    empty = {"s": np.int8, "x": float, "y": float, "predicted": small, "labels": small, "untrusted": bool}
    cols = {
        name: (tbl.column(name).combine_chunks().to_numpy(zero_copy_only=False) if tbl.num_rows else np.zeros(0, dtype))
        for name, dtype in empty.items()
    }
    del tbl
    # ordered by split code: each split's rows are one slice
    ends = np.searchsorted(cols["s"], np.arange(len(codes) + 1), side="left")
    out: dict[str, dict] = {}
    for s, j in codes.items():
        at = slice(int(ends[j]), int(ends[j + 1]))
        part: dict = {name: cols[name][at] for name in ("x", "y", "predicted", "labels")}
        part.update(qtype=qtype, option_ids=opts, n_untrusted=int(np.count_nonzero(cols["untrusted"][at])))
        out[s] = part
    return out


def _top_option_written(con: duckdb.DuckDBPyConnection, source: str, question: str) -> bool:
    """Every stored row of the run's ``question`` has ``top_option`` (written by this version's writers;
    rows written before the column was added hold NULL): one scan of an integer column."""
    try:
        row = con.execute(
            "SELECT count(*) FILTER (top_option IS NULL) FROM answers WHERE run_id = ? AND question = ?",
            [source, question],
        ).fetchone()
    except duckdb.BinderException:  # a store of an older schema opened read-only (not migrated): no column
        return False
    return row is not None and int(row[0]) == 0


def _sql_str(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def split_sizes(con: duckdb.DuckDBPyConnection, dataset: str, version: int) -> dict[str, int]:
    """{split: items} of a dataset version (one scan of the items' split column)."""
    rows = con.execute(
        "SELECT split, count(*) FROM items WHERE dataset = ? AND version = ? GROUP BY split", [dataset, int(version)]
    ).fetchall()
    return {str(s): int(c) for s, c in rows}


def run_choices(con: duckdb.DuckDBPyConnection):
    """The runs of the store as a frame for a run picker (the ``runs`` table only): the columns of
    :func:`workbench.store.runs.list_runs` that name a run, without its answer counts and latency median,
    which read every answer (seconds on tens of millions)."""
    return con.execute(
        "SELECT run_id, name, kind, dataset, dataset_version, provider, model, status,"
        " coalesce(emulated, false) AS emulated, left(schema_hash, 12) AS schema, experiment, variant, created_at"
        " FROM runs ORDER BY created_at"
    ).df()
