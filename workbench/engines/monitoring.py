"""The per-window aggregates of ``workbench monitor`` over decision logs, on DuckDB or Spark.

The same SQL as :mod:`workbench.monitor.logs` / :mod:`workbench.monitor.report` (decisions of one
policy joined with outcomes, a window key, per-window counts and the drift histograms), written once
for both engines through the dialect layer of :mod:`workbench.engines.sessions`:

- per window and question: first/last decision time and index, traffic, accepted, reviewed,
  accepted with override information, overrides, accepted with a known outcome, errors among them,
  model and schema mismatches;
- per window the counts of ``p_top`` bins, margin bins and the predicted option (drift inputs).

Decision logs are JSON Lines (the runtime's ``DecisionLog``) or Parquet with the same fields (files,
hive-partitioned directories, globs, remote prefixes); outcomes are Parquet, JSON Lines or CSV with
``decision_id``, ``question`` (optional for a one-question policy), ``outcome`` and/or ``override``,
local files read and checked line by line on this machine by :func:`workbench.monitor.outcomes.read_outcomes`
(the reader of ``workbench monitor``: invalid lines rejected and counted, never scored) and handed to the
engine. Several reports of one decision and question: the last one that says something wins (the last file,
then the last row of the file). A decision record logged twice counts once (``DEDUP_ORDER``).
Windows: a count of decisions (``"500"``) or a period (``"1D"``, ``"6h"``, ``"15min"``, ``"1W"``: buckets
aligned to Monday 2000-01-03 00:00 UTC, DuckDB's ``time_bucket`` origin). Log lines that are not JSON
objects are skipped and counted.

:func:`monitor_on_engine` is ``workbench monitor --engine spark``: the whole report, with the engine
returning these counts, the (wrong, decision index) sequence the alarm reads and the labelled vectors of
the recertification hint; :func:`workbench.monitor.report.report_from_source` finishes it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.engines.sessions import DuckDBEngine, Engine, SparkEngine, is_remote, open_engine
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
    ("would_accept", "string"),
    ("p_top", "double"),
    ("margin", "double"),
    ("probs", "array<double>"),
]
_ORIGIN_US = 946857600 * 1_000_000  # 2000-01-03 00:00:00 UTC in microseconds since the epoch
_UNIT_US = {"minute": 60_000_000, "hour": 3_600_000_000, "day": 86_400_000_000, "week": 604_800_000_000}


def _sql_str(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _load(e: Engine, decisions: Sequence[str], outcome_rows: Any) -> None:
    """Views ``wb_dec_raw`` (every line read, with its file), ``wb_dec_all`` (typed complete decision records,
    UTC ``time``), ``wb_dec`` (each record once: :data:`~workbench.monitor.logs.DEDUP_ORDER`) and ``wb_out``
    (one row per decision and question) on engine ``e``. ``outcome_rows`` are the checked outcome rows of
    :func:`workbench.monitor.outcomes.read_outcomes` (read on this machine for every engine, so every engine
    scores the same outcomes)."""
    from workbench.monitor.logs import DEDUP_ORDER

    parquet = all(_is_parquet(str(f)) for f in decisions)
    dedup = (
        "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY policy_hash, decision_id, question "
        f"ORDER BY {DEDUP_ORDER}) AS wb_k FROM wb_dec_all) t WHERE wb_k = 1"
    )
    if isinstance(e, DuckDBEngine):
        decisions = [str(Path(f) / "**" / "*.parquet") if Path(f).is_dir() else str(f) for f in decisions]
        e.con.execute("SET preserve_insertion_order = true")
        e.con.execute("SET TimeZone = 'UTC'")
        listing = "[" + ", ".join(_sql_str(str(f)) for f in decisions) + "]"
        if parquet:
            src = f"read_parquet({listing}, union_by_name = true, filename = true)"
            have = {r[0] for r in e.con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
            missing = [n for n, _ in DECISION_FIELDS if n not in have]  # e.g. would_accept in older logs
            if missing:
                src = f"(SELECT *, {', '.join(f'CAST(NULL AS VARCHAR) AS {n}' for n in missing)} FROM {src})"
        else:  # the strict reader of `workbench monitor` (a value of another JSON type is NULL, never converted)
            from workbench.monitor.logs import decision_lines_sql

            names = ", ".join(f'"{n}"' for n, _ in DECISION_FIELDS)
            src = f"(SELECT {names}, filename FROM ({decision_lines_sql(decisions)}))"
        e.con.execute(f"CREATE OR REPLACE TEMP VIEW wb_dec_raw AS SELECT * RENAME (filename AS wb_file) FROM {src}")
        e.con.execute(
            "CREATE OR REPLACE TEMP VIEW wb_dec_all AS SELECT * EXCLUDE (wb_file) REPLACE "
            "(CAST(timezone('UTC', TRY_CAST(time AS TIMESTAMPTZ)) AS TIMESTAMP) AS time) "
            f"FROM wb_dec_raw WHERE {_COMPLETE}"
        )
        e.con.execute(f"CREATE OR REPLACE TEMP VIEW wb_dec AS SELECT * EXCLUDE (wb_k) FROM ({dedup})")
        e.con.register("wb_out_rows", outcome_rows)
    elif isinstance(e, SparkEngine):
        files = [str(f) for f in decisions]
        if parquet:
            df = e.spark.read.parquet(*files)
            extra = [f"CAST(NULL AS STRING) AS {n}" for n, _ in DECISION_FIELDS if n not in df.columns]
            df.selectExpr("*", *extra, "_metadata.file_path AS wb_file").createOrReplaceTempView("wb_dec_raw")
        else:  # lines as text, each parsed strictly (as the DuckDB reader does)
            lines = e.spark.read.option("lineSep", "\n").text(files)
            df = lines.selectExpr("try_parse_json(value) AS wb_v", "_metadata.file_path AS wb_file", "value").where(
                "NOT value RLIKE '^[ \\t\\r]*$'"
            )
            for stage in _spark_strict_stages():
                df = df.selectExpr(*stage)
            df.createOrReplaceTempView("wb_dec_raw")
        e.spark.sql(
            "SELECT decision_id, try_cast(time AS TIMESTAMP) AS time, policy_hash, model, schema_hash, question, "
            f"action, option, would_accept, p_top, margin, probs FROM wb_dec_raw WHERE {_COMPLETE}"
        ).createOrReplaceTempView("wb_dec_all")
        e.spark.sql(dedup).drop("wb_k").createOrReplaceTempView("wb_dec")
        if outcome_rows.num_rows:
            e.spark.createDataFrame(outcome_rows).createOrReplaceTempView("wb_out_rows")
        else:
            e.spark.sql(
                "SELECT CAST(NULL AS STRING) AS decision_id, CAST(NULL AS STRING) AS question, "
                "CAST(NULL AS STRING) AS outcome, CAST(NULL AS BOOLEAN) AS override, CAST(0 AS BIGINT) AS ord WHERE false"
            ).createOrReplaceTempView("wb_out_rows")
    else:  # pragma: no cover - only the two engines exist
        raise OptionError(f"engine {e.name!r} cannot read decision logs")
    _union_outcomes(e)


_SPARK_NUMBER = "(TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL[(][0-9]+,[0-9]+[)])"  # [(] not a backslash: Spark SQL unescapes its string literals


def _spark_strict_stages() -> list[list[str]]:
    """Projections (applied in turn to ``wb_v``, the line parsed by Spark's ``try_parse_json``: NULL for
    malformed JSON, NaN, a key named twice or a trailing comma; ``value``; ``wb_file``) giving the decision
    fields kept only when of the right JSON type, as :func:`workbench.monitor.logs.decision_lines_sql` keeps
    them: strings, finite numbers, arrays of finite numbers; a line that is not an object has every field NULL
    (an unreadable line). Each sub-value is extracted once per stage (Spark keeps a projection whose costly
    expression is used twice apart), and there are no lambdas (Spark runs them row by row): an array's merged
    variant type says whether all its elements are numbers, and a null element shows in ``array_compact``."""

    def finite(x: str) -> str:
        return f"(NOT isnan({x}) AND abs({x}) < double('inf'))"

    names = [n for n, _ in DECISION_FIELDS]
    # parsed, and it opens with {: an object
    first = ["wb_file", "CASE WHEN value RLIKE '^[ \\t\\r]*[{]' THEN wb_v END AS wb_o"]
    raw = ["wb_file", *(f"variant_get(wb_o, '$.{n}') AS wb_r_{n}" for n in names)]
    typed = ["wb_file"]
    for n, t in DECISION_FIELDS:
        typed.append(f"schema_of_variant(wb_r_{n}) AS wb_k_{n}")
        spark_type = "array<double>" if t.startswith("array") else t
        typed.append(f"try_variant_get(wb_r_{n}, '$', '{spark_type}') AS wb_t_{n}")
    out = ["wb_file"]
    for n, t in DECISION_FIELDS:
        k, v = f"wb_k_{n}", f"wb_t_{n}"
        if t == "string":
            out.append(f"CASE WHEN {k} = 'STRING' THEN {v} END AS {n}")
        elif t == "double":
            out.append(f"CASE WHEN {k} RLIKE '^{_SPARK_NUMBER}$' AND {finite(v)} THEN {v} END AS {n}")
        else:
            out.append(
                f"CASE WHEN {k} = 'ARRAY<VOID>' AND size({v}) = 0 THEN {v} "
                f"WHEN {k} RLIKE '^ARRAY<{_SPARK_NUMBER}>$' AND size({v}) = size(array_compact({v})) "
                f"AND {finite(f'array_max({v})')} AND {finite(f'array_min({v})')} THEN {v} END AS {n}"
            )
    return [first, raw, typed, out]


def _is_parquet(path: str) -> bool:
    """A Parquet file, a directory of them (hive partitions), or a remote prefix that is not JSON Lines."""
    if path.endswith(".parquet"):
        return True
    if is_remote(path):
        return not path.endswith((".jsonl", ".json", ".ndjson", ".gz"))
    return Path(path).is_dir() and next(Path(path).rglob("*.parquet"), None) is not None


_COMPLETE = "decision_id IS NOT NULL AND question IS NOT NULL AND action IS NOT NULL"


def _union_outcomes(e: Engine) -> None:
    """``wb_out``: several reports of one decision and question → the last one that says something wins
    (the last file in the list, then the last row of the file), as ``workbench monitor`` reads them."""
    sql = (
        "SELECT decision_id, question, max_by(outcome, ord) FILTER (WHERE outcome IS NOT NULL) AS outcome, "
        "max_by(CASE WHEN override THEN 1 ELSE 0 END, ord) FILTER (WHERE override IS NOT NULL) AS override "
        "FROM wb_out_rows GROUP BY decision_id, question"
    )
    if isinstance(e, DuckDBEngine):
        e.con.execute(f"CREATE OR REPLACE TEMP VIEW wb_out AS {sql}")
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


def _decision_view(
    eng: Engine,
    *,
    policy_hash: str,
    options: dict[str, list[str]],
    models: Sequence[str],
    schema_hashes: Sequence[str],
    window: str | int,
    n_bins: int,
) -> None:
    """View ``wb_mon_d``: the policy's decisions joined with their outcomes, one row per decision, with the
    decision index, window key and per-row flags of ``workbench monitor`` (:meth:`MonitorStore.build_view`)."""
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
    from workbench.monitor.logs import HELD_SQL

    held = HELD_SQL.replace("action", "x.action").replace("would_accept", "x.would_accept")
    wkey = _window_key(eng, window)
    pos = eng.list_position("x.probs", eng.list_max("x.probs"))
    nb = int(n_bins)
    sql = f"""
WITH x AS (
    SELECT dec.*, o.outcome, o.override,
           row_number() OVER (PARTITION BY dec.question ORDER BY dec.time ASC NULLS LAST, dec.decision_id) - 1 AS idx
    FROM wb_dec dec LEFT JOIN wb_out o ON o.decision_id = dec.decision_id AND o.question = dec.question
    WHERE dec.policy_hash = {_sql_str(policy_hash)} AND dec.question IN ({qlist})
)
SELECT x.question, x.decision_id, x.time, x.idx, {wkey} AS win,
       x.action = 'accept' AS accepted,
       x.action = 'accept' AND (x.outcome IS NOT NULL OR x.override IS NOT NULL) AS known,
       CASE WHEN x.outcome IS NOT NULL THEN x.outcome <> x.option ELSE x.override = 1 END AS wrong,
       {held} AS held,
       {held} AND x.outcome IS NOT NULL AS held_known,
       x.outcome <> x.would_accept AS held_wrong,
       x.override,
       {model_bad} AS model_mismatch,
       {schema_bad} AS schema_mismatch,
       CAST(least(floor(x.p_top * {nb}), {nb - 1}) AS INT) AS p_bin,
       CAST(least(floor(greatest(x.margin, 0) * {nb}), {nb - 1}) AS INT) AS m_bin,
       po.option_id AS predicted,
       CASE WHEN x.outcome IS NOT NULL THEN lo.idx END AS label,
       x.probs IS NOT NULL AS has_probs,
       x.probs
FROM x
LEFT JOIN _wb_mon_options po
  ON po.question = x.question AND po.k = {eng.list_len("x.probs")} AND po.idx = {pos} - 1
LEFT JOIN _wb_mon_options lo ON lo.question = x.question AND lo.option_id = x.outcome"""
    if isinstance(eng, DuckDBEngine):
        eng.con.execute(f"CREATE OR REPLACE TEMP VIEW wb_mon_d AS {sql}")
    else:
        eng.spark.sql(sql).createOrReplaceTempView("wb_mon_d")  # type: ignore[attr-defined]


def _time_text(eng: Engine, expr: str, fraction: bool = False) -> str:
    """``expr`` (a UTC timestamp) as ``2026-11-02T06:00:00Z`` (with ``.%f`` microseconds when ``fraction``)."""
    if isinstance(eng, DuckDBEngine):
        return f"strftime({expr}, '%Y-%m-%dT%H:%M:%S{'.%f' if fraction else ''}Z')"
    return f"date_format({expr}, \"yyyy-MM-dd'T'HH:mm:ss{'.SSSSSS' if fraction else ''}'Z'\")"


_WINDOW_SQL = """
SELECT question, {label}, {t0}, {t1}, min(idx), max(idx), count(*),
       sum(CASE WHEN accepted THEN 1 ELSE 0 END),
       sum(CASE WHEN NOT accepted THEN 1 ELSE 0 END),
       sum(CASE WHEN accepted AND override IS NOT NULL THEN 1 ELSE 0 END),
       sum(CASE WHEN accepted AND override = 1 THEN 1 ELSE 0 END),
       sum(CASE WHEN known THEN 1 ELSE 0 END),
       sum(CASE WHEN known AND wrong THEN 1 ELSE 0 END),
       sum(CASE WHEN model_mismatch THEN 1 ELSE 0 END),
       sum(CASE WHEN schema_mismatch THEN 1 ELSE 0 END),
       sum(CASE WHEN held THEN 1 ELSE 0 END),
       sum(CASE WHEN held_known THEN 1 ELSE 0 END),
       sum(CASE WHEN held_known AND held_wrong THEN 1 ELSE 0 END)
FROM wb_mon_d GROUP BY question, win ORDER BY question, win NULLS LAST"""

_HIST_SQL = """
SELECT question, {label}, p_bin, m_bin, predicted, GROUPING(p_bin), GROUPING(m_bin), count(*) FROM wb_mon_d
GROUP BY GROUPING SETS ((question, win, p_bin), (question, win, m_bin), (question, win, predicted))"""


def _window_label(eng: Engine, window: str | int) -> str:
    from workbench.monitor.logs import parse_window

    return "win" if isinstance(parse_window(window), int) else _time_text(eng, "win")


def _window_counts(
    eng: Engine, options: dict[str, list[str]], window: str | int, n_bins: int
) -> dict[str, tuple[list[tuple], np.ndarray, np.ndarray, np.ndarray]]:
    """Per question: the window rows of :meth:`~workbench.monitor.report.MonitorSource.windows` and the
    p_top-bin, margin-bin and predicted-option counts per window (rows in window order)."""
    label = _window_label(eng, window)
    rows = eng.query(_WINDOW_SQL.format(label=label, t0=_time_text(eng, "min(time)"), t1=_time_text(eng, "max(time)")))
    hist = eng.query(_HIST_SQL.format(label=label))
    out = {}
    nb = int(n_bins)
    for q, opts in options.items():
        mine = [tuple(int(v) if isinstance(v, np.integer) else v for v in r[1:]) for r in rows if r[0] == q]
        index = {r[0]: i for i, r in enumerate(mine)}
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
        out[q] = (mine, p_bins, m_bins, o_counts)
    return out


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
    from workbench.monitor.outcomes import read_outcomes

    qids = list(options)
    rows, _ = read_outcomes(
        _files(outcomes, "`outcomes`") if outcomes else [],
        options,
        default_question=qids[0] if len(qids) == 1 else None,
    )
    eng = engine if isinstance(engine, Engine) else open_engine(engine, spark_master=spark_master)
    try:
        _load(eng, [str(d) for d in decisions], rows)
        _decision_view(
            eng,
            policy_hash=policy_hash,
            options=options,
            models=models,
            schema_hashes=schema_hashes,
            window=window,
            n_bins=n_bins,
        )
        counts = _window_counts(eng, options, window, n_bins)
    finally:
        if not isinstance(engine, Engine):
            eng.close()
    out: dict[str, dict] = {}
    for q, (rows, p_bins, m_bins, o_counts) in counts.items():
        windows = []
        for r in rows:
            win, t0, t1, i0, i1, n, n_acc, n_rev, n_ovk, n_ov, n_k, n_e, n_model, n_schema, n_held, n_hk, n_he = r
            windows.append(
                {
                    "window": win,
                    "start": t0,
                    "end": t1,
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
                    "n_would_accept": int(n_held),
                    "n_would_accept_known": int(n_hk),
                    "n_would_accept_errors": int(n_he),
                }
            )
        out[q] = {"windows": windows, "p_bins": p_bins, "m_bins": m_bins, "options": o_counts}
    return out


class EngineSource:
    """:class:`~workbench.monitor.report.MonitorSource` over the views of :func:`_decision_view` on an engine."""

    def __init__(self, eng: Engine, options: dict[str, list[str]], window: str | int, n_bins: int):
        self.eng, self.options, self.window, self.n_bins = eng, options, window, n_bins
        self._counts: dict | None = None

    def _all(self) -> dict:
        if self._counts is None:
            self._counts = _window_counts(self.eng, self.options, self.window, self.n_bins)
        return self._counts

    def windows(self, question: str) -> list[tuple]:
        return list(self._all()[question][0])

    def histograms(self, question: str, options: list[str], n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _, p, m, o = self._all()[question]
        return p, m, o

    def _arrow(self, sql: str) -> Any:
        if isinstance(self.eng, DuckDBEngine):
            return self.eng.con.execute(sql).fetch_arrow_table()
        return self.eng.spark.sql(sql).toArrow()  # type: ignore[attr-defined]

    def outcome_batches(self, question: str, shadow: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        from workbench.monitor.report import OUTCOME_BATCH

        wrong, known = ("held_wrong", "held_known") if shadow else ("wrong", "known")
        sql = (
            f"SELECT CAST(CASE WHEN {wrong} THEN 1 ELSE 0 END AS TINYINT) AS e, idx FROM wb_mon_d "
            f"WHERE question = {_sql_str(question)} AND {known} ORDER BY idx"
        )
        if isinstance(self.eng, DuckDBEngine):
            for b in self.eng.con.execute(sql).fetch_record_batch(OUTCOME_BATCH):
                yield b.column(0).to_numpy(), b.column(1).to_numpy()
            return
        t = self._arrow(sql)  # (1 + 8 bytes) per known outcome reach the driver
        e, idx = t.column(0).to_numpy(), t.column(1).to_numpy()
        for i in range(0, len(e), OUTCOME_BATCH):
            yield e[i : i + OUTCOME_BATCH], idx[i : i + OUTCOME_BATCH]

    def _recert_where(self, question: str) -> str:
        return f"question = {_sql_str(question)} AND label >= 0 AND has_probs"

    def recertification_count(self, question: str) -> int:
        return int(self.eng.query(f"SELECT count(*) FROM wb_mon_d WHERE {self._recert_where(question)}")[0][0])

    def recertification_rows(self, question: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
        t = self._arrow(
            f"SELECT probs, label, idx FROM wb_mon_d WHERE {self._recert_where(question)} "
            f"ORDER BY idx DESC LIMIT {int(limit)}"
        )
        order = np.argsort(t.column("idx").to_numpy())
        k = len(self.options[question])
        flat = t.column("probs").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        probs = np.asarray(flat, dtype=float).reshape(len(order), k)[order]
        return probs, np.asarray(t.column("label").to_numpy(), dtype=np.int64)[order]

    def decision_at(self, question: str, idx: int) -> tuple[str | None, str | None]:
        rows = self.eng.query(
            f"SELECT decision_id, {_time_text(self.eng, 'time', fraction=True)} FROM wb_mon_d "
            f"WHERE question = {_sql_str(question)} AND idx = {int(idx)}"
        )
        return (rows[0][0], rows[0][1]) if rows else (None, None)


def _summary(eng: Engine, dec_files: list[str], check: Any) -> Any:
    """The :class:`~workbench.monitor.logs.LoadSummary` of ``workbench monitor`` from the engine's views
    (``check``: the :class:`~workbench.monitor.outcomes.OutcomeCheck` of the outcome files)."""
    from workbench.monitor.logs import LoadSummary, add_outcome_summary

    summary = LoadSummary(list(dec_files))
    unreadable = " AND ".join(f"{n} IS NULL" for n, _ in DECISION_FIELDS)
    per_file = eng.query(
        f"SELECT wb_file, count(*), sum(CASE WHEN {unreadable} THEN 1 ELSE 0 END), "
        f"sum(CASE WHEN {_COMPLETE} THEN 1 ELSE 0 END) FROM wb_dec_raw GROUP BY wb_file ORDER BY wb_file"
    )
    summary.n_lines = sum(int(n) for _, n, _, _ in per_file)
    summary.skipped = {str(f): int(bad) for f, _, bad, _ in per_file if bad}
    complete = sum(int(ok) for *_, ok in per_file)
    summary.incomplete = summary.n_lines - sum(summary.skipped.values()) - complete
    summary.n_records = int(eng.query("SELECT count(*) FROM wb_dec")[0][0])
    for f, n in summary.skipped.items():
        summary.warnings.append(f"{f}: skipped {n} line(s) that are not a JSON object (a torn line after a crash?)")
    if summary.incomplete:
        summary.warnings.append(
            f"skipped {summary.incomplete} record(s) without decision_id, question, action (not decision records)"
        )
    summary.add_duplicates(complete - summary.n_records)
    bad_time = eng.query("SELECT count(*), min(decision_id) FROM wb_dec WHERE time IS NULL")[0]
    if bad_time[0]:
        summary.warnings.append(f"{bad_time[0]} record(s) have no readable UTC time; they sort last")
    summary.outcome_files = list(check.files)
    summary.n_outcomes = int(eng.query("SELECT count(*) FROM wb_out")[0][0])
    summary.n_outcomes_unmatched = int(
        eng.query(
            "SELECT count(*) FROM wb_out o WHERE NOT EXISTS "
            "(SELECT 1 FROM wb_dec d WHERE d.decision_id = o.decision_id AND d.question = o.question)"
        )[0][0]
    )
    add_outcome_summary(summary, check)
    return summary


def _files(paths: Sequence[str | Path], what: str) -> list[str]:
    """Local paths and globs expanded (each must exist); remote URLs (``s3a://…``) and directories as given."""
    from workbench.monitor.logs import expand_paths

    local = [str(p) for p in paths if not is_remote(str(p)) and not Path(str(p)).is_dir()]
    out = expand_paths(local, what) if local else []
    return out + [str(p) for p in paths if is_remote(str(p)) or Path(str(p)).is_dir()]


def monitor_on_engine(
    policy_path: str | Path,
    decisions: Sequence[str | Path],
    outcomes: Sequence[str | Path] = (),
    opts: Any = None,
    *,
    engine: str | Engine = "spark",
    spark_master: str | None = None,
) -> Any:
    """:func:`workbench.monitor.report.monitor` with the aggregations on ``engine`` (``"spark"``, ``"duckdb"``
    or an open :class:`Engine`), where the logs live: the decision logs (JSON Lines or Parquet; files,
    directories, globs, ``s3a://`` …) are scanned by the engine, which returns per-window counts and
    histograms, the (wrong, decision index) pairs of the accepted decisions with a known outcome (the
    alarm) and the last ``recertify_max`` labelled probability vectors (the recertification hint).
    The report equals :func:`~workbench.monitor.report.monitor`'s on the same files (tests/engines)."""
    from workbench.monitor.outcomes import read_outcomes
    from workbench.monitor.report import MonitorOptions, report_from_source, view_settings
    from workbench.policy.runtime import Policy

    opts = opts or MonitorOptions()
    policy = Policy.load(policy_path)
    model = policy.model
    qids = list(model.questions)
    options = {q: list(model.questions[q].options) for q in qids}
    dec_files = _files(decisions, "`decisions`")
    out_files = _files(outcomes, "`outcomes`") if outcomes else []
    # outcomes are read and checked on this machine (the same reader as `workbench monitor`), before the logs
    rows, check = read_outcomes(
        out_files,
        options,
        default_question=qids[0] if len(qids) == 1 else None,
        max_invalid_share=opts.max_invalid_outcomes,
    )
    eng = engine if isinstance(engine, Engine) else open_engine(engine, spark_master=spark_master)
    try:
        _load(eng, dec_files, rows)
        _decision_view(eng, **view_settings(policy, model, options, opts))
        summary = _summary(eng, dec_files, check)
        others = [
            (str(h), int(n))
            for h, n in eng.query(
                "SELECT coalesce(policy_hash, '(none)'), count(*) FROM wb_dec "
                f"WHERE policy_hash IS NULL OR policy_hash <> {_sql_str(policy.content_hash)} GROUP BY 1 ORDER BY 2 DESC"
            )
        ]
        source = EngineSource(eng, options, opts.window, opts.n_bins)
        return report_from_source(policy, policy_path, opts, summary, source, others, dec_files)
    finally:
        if not isinstance(engine, Engine):
            eng.close()
