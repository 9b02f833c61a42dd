"""The per-window aggregates of ``workbench monitor`` over decision logs, on DuckDB or Spark.

The same SQL as :mod:`workbench.monitor.logs` / :mod:`workbench.monitor.report` (decisions of one
policy joined with outcomes, a window key, per-window counts and the drift histograms), written once
for both engines through the dialect layer of :mod:`workbench.engines.sessions`:

- per window and question: first/last decision time and index, traffic, accepted, reviewed,
  accepted with override information, overrides, accepted with a known outcome, errors among them,
  model and schema mismatches;
- per window the counts of ``p_top`` bins, margin bins and the predicted option (drift inputs).

Decision logs are JSON Lines (the runtime's ``DecisionLog``) or Parquet with the same fields; outcomes
are Parquet, JSON Lines or CSV with ``decision_id``, ``question``, ``outcome`` and/or ``override``,
**one row per decision and question** (``workbench monitor`` lets a later file override an earlier
one; deduplicate upstream before handing a lake of outcomes to Spark). Windows: a count of decisions
(``"500"``) or a period (``"1D"``, ``"6h"``, ``"15min"``, ``"1W"``: buckets aligned to Monday
2000-01-03 00:00 UTC, DuckDB's ``time_bucket`` origin). Lines that are not JSON objects are skipped.
The alarm, drift statistics and recertification stay in :func:`workbench.monitor.report.monitor`;
they need only these counts and the (small) sequence of known outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.engines.sessions import DuckDBEngine, Engine, SparkEngine, open_engine
from workbench.errors import OptionError

DECISION_FIELDS = [
    ("decision_id", "string"),
    ("time", "string"),
    ("policy_hash", "string"),
    ("model", "string"),
    ("schema_hash", "string"),
    ("question", "string"),
    ("action", "string"),
    ("option", "string"),
    ("p_top", "double"),
    ("margin", "double"),
    ("probs", "array<double>"),
]
_ORIGIN_US = 946857600 * 1_000_000  # 2000-01-03 00:00:00 UTC in microseconds since the epoch
_UNIT_US = {"minute": 60_000_000, "hour": 3_600_000_000, "day": 86_400_000_000, "week": 604_800_000_000}


def _sql_str(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _fmt(t: Any) -> str | None:
    return None if t is None else (t if isinstance(t, str) else t.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _load(e: Engine, decisions: Sequence[str], outcomes: Sequence[str]) -> None:
    """Views ``wb_dec`` (typed decisions, UTC ``time``) and ``wb_out`` on engine ``e``."""
    parquet = all(str(f).endswith(".parquet") for f in decisions)
    if isinstance(e, DuckDBEngine):
        listing = "[" + ", ".join(_sql_str(str(f)) for f in decisions) + "]"
        if parquet:
            src = f"read_parquet({listing}, union_by_name = true)"
        else:
            cols = ", ".join(
                f"'{n}': '{'DOUBLE[]' if t.startswith('array') else t.upper().replace('STRING', 'VARCHAR')}'"
                for n, t in DECISION_FIELDS
            )
            src = f"read_json({listing}, format = 'newline_delimited', ignore_errors = true, columns = {{{cols}}})"
        e.con.execute(
            "CREATE OR REPLACE TEMP VIEW wb_dec AS SELECT * REPLACE "
            "(CAST(timezone('UTC', TRY_CAST(time AS TIMESTAMPTZ)) AS TIMESTAMP) AS time) "
            f"FROM {src} WHERE decision_id IS NOT NULL AND question IS NOT NULL AND action IS NOT NULL"
        )
        parts = []
        for f in outcomes:
            s = str(f)
            rel = (
                f"read_parquet({_sql_str(s)})"
                if s.endswith(".parquet")
                else f"read_csv({_sql_str(s)}, header = true, all_varchar = true)"
                if s.endswith((".csv", ".csv.gz"))
                else f"read_json({_sql_str(s)}, format = 'newline_delimited', ignore_errors = true)"
            )
            names = [r[0] for r in e.con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()]
            parts.append(_outcome_select(rel, names, "TRY_CAST(override AS BOOLEAN)"))
        _union_outcomes(e, parts)
    elif isinstance(e, SparkEngine):
        ddl = ", ".join(f"{n} {t}" for n, t in DECISION_FIELDS)
        files = [str(f) for f in decisions]
        df = e.spark.read.parquet(*files) if parquet else e.spark.read.schema(ddl).json(files)
        df.createOrReplaceTempView("wb_dec_raw")
        e.spark.sql(
            "SELECT decision_id, try_cast(time AS TIMESTAMP) AS time, policy_hash, model, schema_hash, question, "
            "action, option, p_top, margin, probs FROM wb_dec_raw "
            "WHERE decision_id IS NOT NULL AND question IS NOT NULL AND action IS NOT NULL"
        ).createOrReplaceTempView("wb_dec")
        parts = []
        for i, f in enumerate(outcomes):
            s = str(f)
            reader = e.spark.read
            odf = (
                reader.parquet(s)
                if s.endswith(".parquet")
                else reader.option("header", "true").csv(s)
                if s.endswith((".csv", ".csv.gz"))
                else reader.json(s)
            )
            odf.createOrReplaceTempView(f"wb_out_{i}")
            parts.append(_outcome_select(f"wb_out_{i}", odf.columns, "try_cast(override AS BOOLEAN)"))
        _union_outcomes(e, parts)
    else:  # pragma: no cover - only the two engines exist
        raise OptionError(f"engine {e.name!r} cannot read decision logs")


def _outcome_select(rel: str, names: Sequence[str], bool_cast: str) -> str:
    if "decision_id" not in names or not ({"outcome", "override"} & set(names)) or "question" not in names:
        raise OptionError(
            f"outcomes {rel}: needs columns decision_id, question and outcome and/or override (has {', '.join(names)})"
        )
    o = "CAST(outcome AS STRING)" if "outcome" in names else "CAST(NULL AS STRING)"
    v = bool_cast if "override" in names else "CAST(NULL AS BOOLEAN)"
    return (
        f"SELECT CAST(decision_id AS STRING) AS decision_id, CAST(question AS STRING) AS question, "
        f"{o} AS outcome, {v} AS override FROM {rel}"
    )


def _union_outcomes(e: Engine, parts: list[str]) -> None:
    body = (
        " UNION ALL ".join(parts)
        if parts
        else "SELECT CAST(NULL AS STRING) AS decision_id, CAST(NULL AS STRING) AS question, "
        "CAST(NULL AS STRING) AS outcome, CAST(NULL AS BOOLEAN) AS override WHERE false"
    )
    sql = (
        "SELECT decision_id, question, max(outcome) AS outcome, max(CASE WHEN override THEN 1 WHEN NOT override "
        f"THEN 0 END) AS override FROM ({body}) u WHERE decision_id IS NOT NULL GROUP BY decision_id, question"
    )
    if isinstance(e, DuckDBEngine):
        e.con.execute(f"CREATE OR REPLACE TEMP VIEW wb_out AS {sql.replace('STRING', 'VARCHAR')}")
    else:
        e.spark.sql(sql).createOrReplaceTempView("wb_out")  # type: ignore[attr-defined]


def _window_key(e: Engine, window: str | int) -> str:
    from workbench.monitor.logs import parse_window

    period = parse_window(window)
    if isinstance(period, int):
        return e.int_div("x.idx", str(int(period)))
    n, unit = period.split()
    width = int(n) * _UNIT_US[unit]
    us = "epoch_us(x.time)" if isinstance(e, DuckDBEngine) else "unix_micros(x.time)"
    back = "make_timestamp" if isinstance(e, DuckDBEngine) else "timestamp_micros"
    # integer microseconds throughout: a double cannot hold 2026's epoch microseconds exactly
    return f"{back}({_ORIGIN_US} + {e.int_div(f'{us} - {_ORIGIN_US}', str(width))} * {width})"


def window_aggregates(
    decisions: Sequence[str | Path],
    outcomes: Sequence[str | Path] = (),
    *,
    policy_hash: str,
    options: dict[str, list[str]],
    models: Sequence[str] = (),
    schema_hashes: Sequence[str] = (),
    window: str | int = "1D",
    n_bins: int = 20,
    engine: str | Engine = "duckdb",
    spark_master: str | None = None,
) -> dict[str, dict]:
    """Per question: ``windows`` (one dict per window, the counts of ``workbench monitor``) and the
    drift histograms ``p_bins`` / ``m_bins`` / ``options`` (arrays of shape (n_windows, n))."""
    eng = engine if isinstance(engine, Engine) else open_engine(engine, spark_master=spark_master)
    try:
        _load(eng, [str(d) for d in decisions], [str(o) for o in outcomes])
        eng.register_rows(
            "_wb_mon_options",
            [("question", "string"), ("option_id", "string"), ("idx", "int"), ("k", "int")],
            [(q, o, j, len(opts)) for q, opts in options.items() for j, o in enumerate(opts)],
        )
        qlist = ", ".join(_sql_str(q) for q in options)
        model_bad = (
            f"(model IS NOT NULL AND model NOT IN ({', '.join(_sql_str(m) for m in models)}))" if models else "false"
        )
        schema_bad = (
            f"(schema_hash IS NOT NULL AND schema_hash NOT IN ({', '.join(_sql_str(h) for h in schema_hashes)}))"
            if schema_hashes
            else "(schema_hash IS NOT NULL)"
        )
        wkey = _window_key(eng, window)
        pos = eng.list_position("x.probs", eng.list_max("x.probs"))
        nb = int(n_bins)
        base = f"""
WITH x AS (
    SELECT dec.*, o.outcome, o.override,
           row_number() OVER (PARTITION BY dec.question ORDER BY dec.time ASC NULLS LAST, dec.decision_id) - 1 AS idx
    FROM wb_dec dec LEFT JOIN wb_out o ON o.decision_id = dec.decision_id AND o.question = dec.question
    WHERE dec.policy_hash = {_sql_str(policy_hash)} AND dec.question IN ({qlist})
), d AS (
    SELECT x.question, x.time, x.idx, {wkey} AS win,
           x.action = 'accept' AS accepted,
           x.action = 'accept' AND (x.outcome IS NOT NULL OR x.override IS NOT NULL) AS known,
           CASE WHEN x.outcome IS NOT NULL THEN x.outcome <> x.option ELSE x.override = 1 END AS wrong,
           x.override,
           {model_bad} AS model_mismatch,
           {schema_bad} AS schema_mismatch,
           CAST(least(floor(x.p_top * {nb}), {nb - 1}) AS INT) AS p_bin,
           CAST(least(floor(greatest(x.margin, 0) * {nb}), {nb - 1}) AS INT) AS m_bin,
           po.option_id AS predicted
    FROM x
    LEFT JOIN _wb_mon_options po
      ON po.question = x.question AND po.k = {eng.list_len("x.probs")} AND po.idx = {pos} - 1
)"""
        rows = eng.query(
            base
            + """
SELECT question, win, min(time), max(time), min(idx), max(idx), count(*),
       sum(CASE WHEN accepted THEN 1 ELSE 0 END),
       sum(CASE WHEN NOT accepted THEN 1 ELSE 0 END),
       sum(CASE WHEN accepted AND override IS NOT NULL THEN 1 ELSE 0 END),
       sum(CASE WHEN accepted AND override = 1 THEN 1 ELSE 0 END),
       sum(CASE WHEN known THEN 1 ELSE 0 END),
       sum(CASE WHEN known AND wrong THEN 1 ELSE 0 END),
       sum(CASE WHEN model_mismatch THEN 1 ELSE 0 END),
       sum(CASE WHEN schema_mismatch THEN 1 ELSE 0 END)
FROM d GROUP BY question, win"""
        )
        hist = eng.query(
            base
            + """
SELECT question, win, p_bin, m_bin, predicted, GROUPING(p_bin), GROUPING(m_bin), count(*) FROM d
GROUP BY GROUPING SETS ((question, win, p_bin), (question, win, m_bin), (question, win, predicted))"""
        )
    finally:
        if not isinstance(engine, Engine):
            eng.close()
    out: dict[str, dict] = {}
    for q, opts in options.items():
        mine = sorted((r for r in rows if r[0] == q), key=lambda r: (r[1] is None, r[1] if r[1] is not None else 0))
        index = {r[1]: i for i, r in enumerate(mine)}
        p_bins, m_bins = np.zeros((len(mine), nb)), np.zeros((len(mine), nb))
        o_counts = np.zeros((len(mine), len(opts)))
        opos = {o: j for j, o in enumerate(opts)}
        for _, win, pb, mb, pred, g_p, g_m, n in (h for h in hist if h[0] == q):
            i = index.get(win)
            if i is None:
                continue
            if g_p == 0 and pb is not None:
                p_bins[i, int(pb)] = n
            elif g_m == 0 and g_p == 1 and mb is not None:
                m_bins[i, int(mb)] = n
            elif g_p == 1 and g_m == 1 and pred is not None and pred in opos:
                o_counts[i, opos[pred]] = n
        windows = []
        for r in mine:
            _, win, t0, t1, i0, i1, n, n_acc, n_rev, n_ovk, n_ov, n_k, n_e, n_model, n_schema = r
            windows.append(
                {
                    "window": win if win is None or isinstance(win, int) else _fmt(win),
                    "start": _fmt(t0),
                    "end": _fmt(t1),
                    "first_decision": int(i0),
                    "last_decision": int(i1),
                    "traffic": int(n),
                    "n_accepted": int(n_acc),
                    "review_load": int(n_rev),
                    "n_override_known": int(n_ovk),
                    "n_overrides": int(n_ov),
                    "n_known": int(n_k),
                    "n_errors": int(n_e),
                    "n_model_mismatch": int(n_model),
                    "n_schema_mismatch": int(n_schema),
                }
            )
        out[q] = {"windows": windows, "p_bins": p_bins, "m_bins": m_bins, "options": o_counts}
    return out
