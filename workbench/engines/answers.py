"""Metric sufficient statistics and threshold-surface counts of answer files, on DuckDB or Spark.

Input: Parquet in the **long** layout of ``workbench export`` (one row per item × question with
``question``, ``label`` (the gold option id, NULL when unlabelled) and ``probs`` (probabilities in
schema option order, NULL when the provider failed; a row holding NaN or inf counts as failed, as in
the in-memory path); other columns are ignored; ``split`` filters when asked). A directory is read recursively, with hive partitions (``split=test/part-0.parquet``).

One ``GROUP BY GROUPING SETS`` query (one scan of the data) returns, per question:

- totals: rows, failures, labelled answers, unlabelled answers, labels that are not options;
  Σ correct (arg-max = label, ties to the first option), Σ Brier (Σ_j (p_j − y_j)², as
  Σ p_j² − 2 p_label + 1), Σ log loss (−ln clip(p_label, eps, 1), eps =
  :data:`workbench.metrics.scores.LOG_LOSS_FLOOR`);
- top-label reliability: per uniform bin (bin ``b`` holds ``edges[b] <= p_top < edges[b+1]``, the
  last bin closed, numpy's histogram rule) count, Σ p_top, Σ correct;
- the confusion counts (label × arg-max);
- the threshold-surface cells: per (x, y) grid cell of :func:`workbench.thresholds.surface.default_grids`
  (cell = largest grid index with grid <= coordinate, the rule coordinates of
  :func:`workbench.thresholds.rules.rule_coordinates`) the labelled answers and the wrong ones.

The figures are then finished in numpy by the in-memory path's own functions (ECE/MCE from
:class:`~workbench.metrics.reliability.BinStats`, the surface's reverse cumulative sums).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.engines.sessions import Engine, open_engine
from workbench.errors import OptionError, WorkbenchError

REQUIRED_COLUMNS = ("question", "label", "probs")


@dataclass
class QuestionAggregate:
    """Figures of one question, from sufficient statistics (see the module doc)."""

    question: str
    qtype: str
    option_ids: list[str]
    n_rows: int
    n_failed: int
    n_labelled: int
    n_unlabelled: int
    accuracy: float
    brier: float
    log_loss: float
    ece: float
    mce: float
    reliability: Any  # workbench.metrics.reliability.BinStats (top label, uniform bins)
    confusion: np.ndarray  # (k, k) counts, [label, arg-max]
    surface: Any  # workbench.thresholds.surface.Surface
    sums: dict[str, float] = field(default_factory=dict)

    def surface_summary(self, max_error: float = 0.05) -> dict:
        """The widest grid point whose observed error among accepted answers is <= ``max_error``.

        An observed figure on these answers, not a certificate (``workbench thresholds`` certifies).
        """
        s = self.surface
        ok = (s.accepted > 0) & (s.errors <= max_error * s.accepted)
        out: dict[str, Any] = {
            "n_total": int(s.n_total),
            "grid": [len(s.x_grid), len(s.y_grid)],
            "max_error": max_error,
            "accept_all": s.point(0, 0),
        }
        if ok.any():
            i, j = np.unravel_index(int(np.argmax(np.where(ok, s.accepted, -1))), s.accepted.shape)
            out["widest"] = s.point(int(i), int(j))
        else:
            out["widest"] = None
        return out

    def to_dict(self) -> dict:
        rel = self.reliability
        return {
            "question": self.question,
            "type": self.qtype,
            "options": self.option_ids,
            "n_rows": self.n_rows,
            "n_failed": self.n_failed,
            "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled,
            "accuracy": self.accuracy,
            "brier": self.brier,
            "log_loss": self.log_loss,
            "ece": self.ece,
            "mce": self.mce,
            "reliability": {
                "edges": rel.edges.tolist(),
                "count": rel.count.tolist(),
                "sum_p_top": rel.sum_score.tolist(),
                "sum_correct": rel.sum_true.tolist(),
            },
            "confusion": self.confusion.astype(int).tolist(),
            "surface": self.surface_summary(),
        }


@dataclass
class AggregateReport:
    engine: str
    paths: list[str]
    questions: dict[str, QuestionAggregate]
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "paths": self.paths,
            "params": self.params,
            "questions": {q: a.to_dict() for q, a in self.questions.items()},
        }


def _sql_str(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def aggregate_sql(
    e: Engine,
    questions: dict[str, str],
    *,
    n_bins: int,
    grids: dict[str, tuple[np.ndarray, np.ndarray]],
    splits: Sequence[str] = (),
) -> str:
    """The one query (in ``e``'s dialect) over views ``answers`` and ``_wb_options``; see the module doc."""
    from workbench.metrics.reliability import bin_edges
    from workbench.metrics.scores import LOG_LOSS_FLOOR

    qlist = ", ".join(_sql_str(q) for q in questions)
    where = f"question IN ({qlist})"
    if splits:
        where += f" AND split IN ({', '.join(_sql_str(s) for s in splits)})"
    noul = [q for q, t in questions.items() if t == "noul"]
    is_noul = f"question IN ({', '.join(_sql_str(q) for q in noul)})" if noul else "false"
    edges = bin_edges(np.zeros(0), n_bins, "uniform")
    gx_c, gy_c = grids["choice"]
    gx_n, gy_n = grids["noul"]
    eps = repr(LOG_LOSS_FLOOR)
    # rule coordinates (workbench_runtime.rules.rule_coordinates): choice/score x = p_top, y = p_top - p_2nd;
    # noul x = p_yes on predicted-yes rows (+inf elsewhere), y = -p_yes on predicted-no rows (+inf elsewhere)
    ix = (
        f"CASE WHEN {is_noul} THEN (CASE WHEN p_yes >= 0.5 THEN {e.count_le(gx_n, 'p_yes')} ELSE {len(gx_n)} END) "
        f"ELSE {e.count_le(gx_c, 'p1')} END - 1"
    )
    iy = (
        f"CASE WHEN {is_noul} THEN (CASE WHEN p_yes >= 0.5 THEN {len(gy_n)} ELSE {e.count_le(gy_n, 'neg_yes')} END) "
        f"ELSE {e.count_le(gy_c, 'margin')} END - 1"
    )
    return f"""
WITH src AS (
    SELECT a.question, a.probs, a.label, o.idx AS y
    FROM (SELECT question, probs, label FROM answers WHERE {where}) a
    LEFT JOIN _wb_options o ON o.question = a.question AND o.option_id = a.label
), f0 AS (
    SELECT question, probs, label, y, {e.list_position("probs", e.list_max("probs"))} AS pos FROM src
), f AS (
    SELECT question,
           -- a failure: NULL probabilities, or a NaN/inf among them (NaN sorts above every number in both
           -- engines, so it must not reach the comparisons; numpy's rule is ~isfinite(row).all())
           probs IS NULL OR NOT coalesce({e.list_sumsq("probs")} <= CAST(1e300 AS DOUBLE), false) AS failed,
           label IS NOT NULL AND y IS NULL AS unknown, y,
           pos - 1 AS pred,
           {e.list_max("probs")} AS p1,
           CASE WHEN {e.list_len("probs")} >= 2 THEN {e.list_second("probs", "pos")} ELSE CAST(0 AS DOUBLE) END AS p2,
           {e.list_at0("probs", "0")} AS p_yes,
           {e.list_sumsq("probs")} AS sq,
           {e.list_at0("probs", "y")} AS p_label,
           label
    FROM f0
), g AS (
    SELECT *, p1 - p2 AS margin, -p_yes AS neg_yes FROM f
), m AS (
    SELECT question, failed, unknown, label, y, pred, p1, sq, p_label,
           NOT failed AND y IS NOT NULL AS metric,
           CASE WHEN NOT failed AND y IS NOT NULL THEN {e.count_le(edges[1:-1], "p1")} END AS rbin,
           CASE WHEN NOT failed AND y IS NOT NULL THEN y END AS cy,
           CASE WHEN NOT failed AND y IS NOT NULL THEN pred END AS cpred,
           CASE WHEN NOT failed AND y IS NOT NULL THEN {ix} END AS sx,
           CASE WHEN NOT failed AND y IS NOT NULL THEN {iy} END AS sy,
           CASE WHEN {is_noul} THEN (CASE WHEN p_yes >= 0.5 THEN 0 ELSE 1 END) ELSE pred END AS spred
    FROM g
)
SELECT question, rbin, cy, cpred, sx, sy,
       GROUPING(rbin) AS g_rbin, GROUPING(cy) AS g_cy, GROUPING(sx) AS g_sx,
       count(*) AS n,
       sum(CASE WHEN failed THEN 1 ELSE 0 END) AS n_failed,
       sum(CASE WHEN metric THEN 1 ELSE 0 END) AS n_metric,
       sum(CASE WHEN NOT failed AND label IS NULL THEN 1 ELSE 0 END) AS n_unlabelled,
       sum(CASE WHEN unknown THEN 1 ELSE 0 END) AS n_unknown,
       sum(CASE WHEN failed AND y IS NOT NULL THEN 1 ELSE 0 END) AS n_failed_labelled,
       sum(CASE WHEN metric AND pred = y THEN 1 ELSE 0 END) AS n_correct,
       sum(CASE WHEN metric THEN sq - 2 * p_label + 1 END) AS sum_brier,
       sum(CASE WHEN metric THEN -ln(greatest(least(p_label, CAST(1 AS DOUBLE)), CAST('{eps}' AS DOUBLE))) END) AS sum_ll,
       sum(CASE WHEN metric THEN p1 END) AS sum_p1,
       sum(CASE WHEN metric AND spred <> y THEN 1 ELSE 0 END) AS n_wrong_s,
       min(CASE WHEN unknown THEN label END) AS unknown_example
FROM m
GROUP BY GROUPING SETS ((question), (question, rbin), (question, cy, cpred), (question, sx, sy))
"""


def aggregate_answers(
    paths: str | Path | Sequence[str | Path],
    schema: Any,
    *,
    questions: Sequence[str] | None = None,
    splits: Sequence[str] = (),
    engine: str | Engine = "duckdb",
    spark_master: str | None = None,
    n_bins: int = 15,
    grid: int = 100,
) -> AggregateReport:
    """Per-question metrics and threshold-surface counts of answer files, computed by ``engine``.

    Parameters
    ----------
    paths : Parquet file(s), directories (read recursively, hive partitions) or globs; ``s3://``/``hdfs://``
        URLs are passed to the engine as they are
    schema : the decision schema (a :class:`workbench.schema.DecisionSchema` or a schema file path): option order
    questions : questions to aggregate (default: every question of the schema found in the files)
    splits : keep only these ``split`` values (the files need a ``split`` column or partition)
    engine : ``"duckdb"`` (default), ``"spark"``, or an open :class:`~workbench.engines.sessions.Engine`
    spark_master : with ``engine="spark"``: ``local[2]`` (default), ``spark://host:7077``, ``yarn``, ``k8s://…``
    n_bins : uniform top-label reliability bins (15, as ``workbench report``)
    grid : points per threshold axis (100, as ``workbench thresholds``)

    Returns
    -------
    AggregateReport
        ``questions[q]`` holds accuracy, Brier, log loss, ECE/MCE, the reliability bins, the confusion
        matrix and the :class:`~workbench.thresholds.surface.Surface` (accepted / wrong accepted counts).
    """
    from workbench.metrics.reliability import BinStats, bin_edges, ece_from_stats, mce_from_stats
    from workbench.schema import load_schema, option_ids
    from workbench.thresholds.surface import default_grids, surface_from_cell_counts

    if isinstance(schema, str | Path):
        schema = load_schema(schema)
    path_list = [str(p) for p in ([paths] if isinstance(paths, str | Path) else paths)]
    if not path_list:
        raise OptionError("no answer files given", parameter="paths")
    if n_bins < 1:
        raise OptionError(f"n_bins {n_bins} must be >= 1", parameter="n_bins")
    if grid < 2:
        raise OptionError(f"grid {grid} must be >= 2", parameter="grid")
    wanted = list(questions) if questions else list(schema.questions)
    unknown = [q for q in wanted if q not in schema.questions]
    if unknown:
        raise OptionError(
            f"questions: {unknown[0]!r} is not in schema {schema.name!r}",
            hint=f"use one of {', '.join(schema.questions)}",
            parameter="questions",
        )
    qtypes = {q: schema.questions[q].type for q in wanted}
    opts = {q: option_ids(schema.questions[q]) for q in wanted}
    grids = {"choice": default_grids("choice", grid), "noul": default_grids("noul", grid)}
    eng = engine if isinstance(engine, Engine) else open_engine(engine, spark_master=spark_master)
    try:
        columns = eng.read_parquet("answers", path_list)
        missing = [c for c in REQUIRED_COLUMNS if c not in columns] + (
            ["split"] if splits and "split" not in columns else []
        )
        if missing:
            raise WorkbenchError(
                f"{', '.join(path_list)}: no column {', '.join(missing)} (has {', '.join(columns)})",
                hint="give answers in the long layout of `workbench export` (question, label, probs per row)",
            )
        eng.register_rows(
            "_wb_options",
            [("question", "string"), ("option_id", "string"), ("idx", "int")],
            [(q, o, j) for q in wanted for j, o in enumerate(opts[q])],
        )
        rows = eng.query(aggregate_sql(eng, qtypes, n_bins=n_bins, grids=grids, splits=splits))
    finally:
        if not isinstance(engine, Engine):
            eng.close()
    edges = bin_edges(np.zeros(0), n_bins, "uniform")
    by_q: dict[str, dict[str, list]] = {q: {"tot": [], "rel": [], "cm": [], "surf": []} for q in wanted}
    for r in rows:
        q, rbin, cy, cpred, sx, sy, g_rbin, g_cy, g_sx = r[:9]
        vals = r[9:]
        if g_rbin == 0:
            if rbin is not None:
                by_q[q]["rel"].append((int(rbin), vals))
        elif g_cy == 0:
            if cy is not None:
                by_q[q]["cm"].append((int(cy), int(cpred), vals))
        elif g_sx == 0:
            if sx is not None and sx >= 0 and sy >= 0:
                by_q[q]["surf"].append((int(sx), int(sy), vals))
        else:
            by_q[q]["tot"].append(vals)
    out: dict[str, QuestionAggregate] = {}
    for q in wanted:
        parts = by_q[q]
        if not parts["tot"]:
            continue  # not in these files
        (n, n_failed, n_metric, n_unl, n_unknown, n_failed_lab, n_correct, s_brier, s_ll, s_p1, _, example) = parts[
            "tot"
        ][0]
        if n_unknown:
            raise WorkbenchError(
                f"question {q!r}: {n_unknown} answer(s) have a label that is not an option (e.g. {example!r})",
                hint=f"labels must be option ids of the schema: {', '.join(opts[q][:8])}{' …' if len(opts[q]) > 8 else ''}",
            )
        k = len(opts[q])
        count, s_score, s_true = np.zeros(n_bins), np.zeros(n_bins), np.zeros(n_bins)
        for b, v in parts["rel"]:
            count[b], s_score[b], s_true[b] = float(v[2]), float(v[9] or 0.0), float(v[6])
        stats = BinStats(edges, count, s_score, s_true)
        cm = np.zeros((k, k), dtype=np.int64)
        for y, p, v in parts["cm"]:
            cm[y, p] = int(v[2])
        x_grid, y_grid = grids["noul" if qtypes[q] == "noul" else "choice"]
        A, B = len(x_grid), len(y_grid)
        cell_acc = np.zeros((A, B), dtype=np.int64)
        cell_err = np.zeros((A, B), dtype=np.int64)
        for i, j, v in parts["surf"]:
            cell_acc[i, j], cell_err[i, j] = int(v[2]), int(v[10])
        names = ("tau_yes", "tau_no") if qtypes[q] == "noul" else ("tau", "margin")
        surf = surface_from_cell_counts(
            cell_acc,
            cell_err,
            x_grid=x_grid,
            y_grid=y_grid,
            n_total=int(n_metric) + int(n_failed_lab),
            x_name=names[0],
            y_name=names[1],
        )
        nm = int(n_metric)
        out[q] = QuestionAggregate(
            question=q,
            qtype=qtypes[q],
            option_ids=opts[q],
            n_rows=int(n),
            n_failed=int(n_failed),
            n_labelled=nm,
            n_unlabelled=int(n_unl),
            accuracy=float(n_correct) / nm if nm else float("nan"),
            brier=float(s_brier) / nm if nm else float("nan"),
            log_loss=float(s_ll) / nm if nm else float("nan"),
            ece=ece_from_stats(stats),
            mce=mce_from_stats(stats),
            reliability=stats,
            confusion=cm,
            surface=surf,
            sums={
                "n_correct": int(n_correct),
                "sum_brier": float(s_brier or 0.0),
                "sum_log_loss": float(s_ll or 0.0),
                "sum_p_top": float(s_p1 or 0.0),
            },
        )
    if not out:
        raise WorkbenchError(
            f"{', '.join(path_list)}: no answers to {', '.join(wanted)}"
            + (f" on split {', '.join(splits)}" if splits else ""),
            hint="check `questions`/`splits` against the files' question and split columns",
        )
    return AggregateReport(
        eng.name, path_list, out, {"n_bins": n_bins, "grid": grid, "splits": list(splits), "questions": wanted}
    )
