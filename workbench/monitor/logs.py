"""Reading decision logs and outcome files with DuckDB (streamed, aggregated in SQL).

Decision log: JSON Lines, one object per question decision, as written by the runtime's
``DecisionLog``::

    {"decision_id": "...", "time": "2026-12-01T04:05:06.123456+00:00", "policy_hash": "sha256:...",
     "policy_version": "1.0.0", "model": "...", "schema_hash": "...", "question": "intent",
     "action": "accept", "option": "card_arrival", "p_top": 0.93, "margin": 0.71, "probs": [...]}

``probs`` are the provider's probabilities in the policy's option order (``null`` when the
answer failed); ``p_top``/``margin`` are the calibrated figures the rule looked at. Rotated files
(``decisions.jsonl.00000001`` …, or ``decisions.jsonl.1`` … in the runtime's older layout) are simply
more paths; a glob's files are read oldest first (:func:`rotation_order`), each once, and the log's
hidden lock file (``.decisions.jsonl.lock``) is not matched by ``decisions.jsonl*``. A line that is
not a strict JSON object (a torn last line after a crash; NaN/Infinity, a key named twice) is skipped and
counted, never a failed load; a field holding a value of another JSON type is NULL, never converted
(:func:`decision_lines_sql`).

Outcomes: JSON Lines, CSV or Parquet with ``decision_id``, ``question`` (optional when the policy
has one question) and ``outcome`` (the true option) and/or ``override`` (true when a human changed
an auto-accepted decision), checked line by line by :mod:`workbench.monitor.outcomes`. A decision
record logged more than once counts once (the copies are counted).

Everything is loaded into a DuckDB database in a temporary directory (disk-backed, so memory stays
bounded whatever the log size); the per-window figures are SQL aggregates.
"""

from __future__ import annotations

import glob
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench_runtime.decision_log import BACKUP_DIGITS

from workbench.errors import OptionError
from workbench.store.db import no_progress_bar

#: Fields of a decision record and their JSON type: a field keeps its value only when the file holds a value
#: of that JSON type (a string ``"0.9"`` or ``true`` is not a number, a number is not a string); any other
#: value reads as NULL, exactly what a strict reader keeps (``workbench_runtime.jsonio.loads_strict``).
_TEXT_FIELDS = (
    "decision_id",
    "time",
    "policy_hash",
    "policy_version",
    "model",
    "schema_hash",
    "question",
    "action",
    "option",
    "would_accept",
)
_NUMBER_FIELDS = ("p_top", "margin")
_READ = (*_TEXT_FIELDS, *_NUMBER_FIELDS, "probs")
#: Text DuckDB's JSON parser accepts but strict JSON does not, outside strings: a NaN/Infinity literal
#: (``NaN``, ``Infinity``, ``inf``, ``nan``, any case) or a trailing comma (``[1,]``, ``{"a": 1,}``). Tested on
#: the line with its strings emptied, only for the (rare) lines where it matches the raw text.
_LAX = r"(?i)[\[:,]\s*[-+]?(nan|inf)|,\s*[\]}]"
_STRING = r'"([^"\\]|\\.)*"'
#: A ``probs`` array that holds numbers only (DuckDB writes an extracted value minified: no string, literal,
#: nested array or object can hide in these characters).
_NUMBERS_ONLY = r"^\[[-+0-9.eE,\s]*\]$"


def decision_lines_sql(files: Sequence[str]) -> str:
    """A SELECT over decision log files: one row per non-blank line with the record's fields (``time`` as the
    file's text) and ``filename``, in DuckDB SQL (streamed; no per-line Python).

    Strict like ``workbench_runtime.jsonio.loads_strict``: a line that is not UTF-8 or not JSON (a torn line),
    a JSON value that is not an object, an object with a key named twice (two readers could see two different
    records), a NaN/Infinity literal or a trailing comma has every field NULL (the callers count it as an
    unreadable line, as they do an object with none of the record's fields). In an object a field holding a
    value of another JSON type is NULL, never converted: :data:`_TEXT_FIELDS` are JSON strings, ``p_top`` and
    ``margin`` finite JSON numbers, ``probs`` an array of finite JSON numbers.

    Each line is parsed on its own by ``read_json_objects`` (``read_json``'s parser runs on past a line torn
    mid-value and takes the next line with it), then once for its keys and once for the fields."""
    paths = ", ".join(f"'$.\"{n}\"'" for n in _READ)
    fields = []
    for i, n in enumerate(_READ, 1):
        v = f"v[{i}]"
        # DuckDB writes an extracted value as JSON text: a string starts with ", a number with - or a digit
        if n in _TEXT_FIELDS:
            fields.append(f"CASE WHEN starts_with({v}, '\"') THEN json_extract_string({v}, '$') END AS {n}")
        elif n in _NUMBER_FIELDS:
            num = f"TRY_CAST({v} AS DOUBLE)"
            fields.append(f"CASE WHEN regexp_matches({v}, '^-?[0-9]') AND isfinite({num}) THEN {num} END AS {n}")
        else:  # an element of 1e400 reads as infinity (in Python too): no finite number, so no vector
            fields.append(
                f"CASE WHEN len({n}) = 0 OR isfinite(list_sum({n})) THEN {n} "
                f"WHEN isfinite(list_min({n})) AND isfinite(list_max({n})) THEN {n} END AS {n}"
            )
    # the line's first non-blank byte is { (the parser accepted it): an object
    # (an AND evaluates both sides on every row: the costly tests run in a CASE, on the rows that need them)
    lax = (
        f"CASE WHEN regexp_matches(j, '{_LAX}') THEN regexp_matches(regexp_replace(j, '{_STRING}', '\"\"', 'g'), "
        f"'{_LAX}') ELSE false END"
    )
    strict = (
        "starts_with(ltrim(j, E' \\t\\r\\n'), '{') AND len(k) = list_unique(k) "
        f"AND NOT ({lax}) AND NOT ({_NESTED_DUPLICATE})"
    )
    p = f"v[{len(_READ)}]"
    probs = f"CASE WHEN regexp_full_match(CAST({p} AS VARCHAR), '{_NUMBERS_ONLY}') THEN TRY_CAST({p} AS DOUBLE[]) END"
    return (
        f"SELECT {', '.join(fields)}, filename FROM ("
        f"SELECT v, {probs} AS probs, filename FROM ("
        f"SELECT CASE WHEN {strict} THEN json_extract(j, [{paths}]) END AS v, filename FROM ("
        f"SELECT json AS j, json_keys(json) AS k, filename FROM read_json_objects({_sql_list(files)}, "
        "format='newline_delimited', ignore_errors=true, filename=true))))"
    )


#: A key named twice in an object nested in the line (looked for only in lines with a ``{`` past their first
#: byte: a decision record nests no object).
_NESTED_DUPLICATE = (
    "CASE WHEN strpos(substr(j, 2), '{') > 0 THEN list_bool_or(list_transform(json_keys(j, '$..*'), "
    "ks -> len(ks) <> list_unique(ks))) IS true ELSE false END"
)

_FIELDS = {
    "decision_id": "decision_id",
    "time": "CAST(timezone('UTC', TRY_CAST(\"time\" AS TIMESTAMPTZ)) AS TIMESTAMP)",
    "time_text": '"time"',
    "policy_hash": "policy_hash",
    "policy_version": "policy_version",
    "model": "model",
    "schema_hash": "schema_hash",
    "question": "question",
    "action": "action",
    "option": '"option"',
    "would_accept": "would_accept",
    "p_top": "p_top",
    "margin": "margin",
    "probs": "probs",
}
_REQUIRED = ("decision_id", "question", "action")
#: Which copy of a decision record logged more than once counts (the same rule on every engine): the
#: earliest, then the smallest by these fields; every other copy is counted in ``duplicate_records``.
DEDUP_ORDER = (
    "time ASC NULLS LAST, action ASC NULLS LAST, option ASC NULLS LAST, would_accept ASC NULLS LAST, "
    "p_top ASC NULLS LAST, margin ASC NULLS LAST, model ASC NULLS LAST, schema_hash ASC NULLS LAST"
)


_ROTATED = re.compile(r"^(.*)\.([0-9]+)$")


def rotation_order(path: str) -> tuple[str, str, int, int]:
    """Sort key putting a rotated log's files oldest first: the older layout's ``NAME.N`` … ``NAME.1``,
    the numbered backups ``NAME.00000001`` …, then ``NAME`` (other files: by directory and name)."""
    p = Path(path)
    m = _ROTATED.match(p.name)
    if m is None:
        return (str(p.parent), p.name, 2, 0)
    digits = m.group(2)
    if len(digits) >= BACKUP_DIGITS:
        return (str(p.parent), m.group(1), 1, int(digits))
    return (str(p.parent), m.group(1), 0, -int(digits))


def expand_paths(patterns: Sequence[str | Path], what: str) -> list[str]:
    """Regular files named by paths or glob patterns (a glob's files in :func:`rotation_order`), each existing
    and listed once; one-line error otherwise.

    A path (or a glob match) that is a FIFO, socket or device is refused, never read (a FIFO would block,
    ``/dev/zero`` never ends); a named directory is refused, directories matched by a glob are skipped, and
    a glob that matches no regular file is an error: no named input is dropped silently."""
    import stat

    out: list[str] = []
    for p in patterns:
        s = str(p)
        pattern = any(c in s for c in "*?[")
        hits = sorted(glob.glob(s), key=rotation_order) if pattern else ([s] if Path(s).exists() else [])
        if not hits:
            raise OptionError(f"{what} {s}: no such file", hint="give existing files (globs allowed)")
        files = []
        for h in hits:
            mode = Path(h).stat().st_mode
            if stat.S_ISREG(mode):
                files.append(h)
            elif not (pattern and stat.S_ISDIR(mode)):
                kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
                raise OptionError(f"{what} {h}: {kind}", hint="give regular files (globs allowed)")
        if not files:
            raise OptionError(f"{what} {s}: matches no regular file", hint="give existing files (globs allowed)")
        out += files
    return list(dict.fromkeys(out))


def _sql_list(items: Sequence[str]) -> str:
    return "[" + ", ".join("'" + str(s).replace("'", "''") + "'" for s in items) + "]"


@dataclass
class LoadSummary:
    """What was read: record counts and the lines skipped (torn/invalid) per file."""

    files: list[str]
    n_lines: int = 0
    n_records: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    incomplete: int = 0
    duplicate_records: int = 0
    outcome_files: list[str] = field(default_factory=list)
    n_outcomes: int = 0
    n_outcomes_unmatched: int = 0
    outcome_check: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "decision_files": self.files,
            "n_lines": self.n_lines,
            "n_records": self.n_records,
            "skipped_lines": self.skipped,
            "incomplete_records": self.incomplete,
            "duplicate_records": self.duplicate_records,
            "outcome_files": self.outcome_files,
            "n_outcomes": self.n_outcomes,
            "n_outcomes_unmatched": self.n_outcomes_unmatched,
            **self.outcome_check,
        }

    def add_duplicates(self, n: int) -> None:
        self.duplicate_records = n
        if n:
            self.warnings.append(
                f"{n} decision record(s) logged more than once (same policy, decision_id and question); "
                "each decision counts once"
            )


class MonitorStore:
    """A scratch DuckDB database (temporary directory) holding ``decisions`` and ``outcomes`` tables."""

    def __init__(self, memory_limit: str = "512MB"):
        import duckdb

        self._tmp = tempfile.TemporaryDirectory(prefix="workbench-monitor-")
        self.con = duckdb.connect(str(Path(self._tmp.name) / "monitor.duckdb"))
        self.con.execute(f"SET memory_limit = '{memory_limit}'")
        self.con.execute(f"SET temp_directory = '{Path(self._tmp.name) / 'spill'}'")
        self.con.execute("SET preserve_insertion_order = true")
        self.con.execute("SET TimeZone = 'UTC'")
        no_progress_bar(self.con)  # stdout carries results only

    def close(self) -> None:
        self.con.close()
        self._tmp.cleanup()

    def __enter__(self) -> MonitorStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- decisions --------------------------------------------------------------------------------
    def load_decisions(self, files: Sequence[str]) -> LoadSummary:
        """Parse the decision logs into table ``decisions``; count and skip lines that are not JSON objects.

        Lines are read by :func:`decision_lines_sql`: a line that is not a strict JSON object (a torn last
        line, an array, a bare value, NaN, a key named twice) comes back without any field and counts as
        skipped, as does an object with none of the record's fields (``{}``) or none of the right type.
        """
        con = self.con
        cols = ", ".join(f"{expr} AS {name}" for name, expr in _FIELDS.items())
        empty = " AND ".join(f'"{n}" IS NULL' for n in _READ)
        con.execute(
            f"CREATE TABLE decisions AS SELECT {cols}, {empty} AS unreadable, filename FROM ({decision_lines_sql(files)})"
        )
        counts = con.execute(
            "SELECT filename, count(*), count(*) FILTER (WHERE unreadable) FROM decisions GROUP BY 1 ORDER BY 1"
        ).fetchall()
        con.execute("DELETE FROM decisions WHERE unreadable")
        con.execute("ALTER TABLE decisions DROP COLUMN unreadable")
        con.execute("ALTER TABLE decisions DROP COLUMN filename")
        summary = LoadSummary(list(files))
        summary.n_lines = sum(int(n) for _, n, _ in counts)
        summary.skipped = {str(f): int(bad) for f, _, bad in counts if bad}
        missing = " OR ".join(f"{c} IS NULL" for c in _REQUIRED)
        n_missing = int(con.execute(f"SELECT count(*) FROM decisions WHERE {missing}").fetchone()[0])  # type: ignore[index]
        summary.incomplete = n_missing
        con.execute(f"DELETE FROM decisions WHERE {missing}")
        n_dup = con.execute(
            "DELETE FROM decisions WHERE rowid IN (SELECT r FROM (SELECT rowid AS r, row_number() OVER "
            f"(PARTITION BY policy_hash, decision_id, question ORDER BY {DEDUP_ORDER}, rowid) AS k FROM decisions) "
            "WHERE k > 1)"
        ).fetchone()
        summary.n_records = int(con.execute("SELECT count(*) FROM decisions").fetchone()[0])  # type: ignore[index]
        for f, n in summary.skipped.items():
            summary.warnings.append(f"{f}: skipped {n} line(s) that are not a JSON object (a torn line after a crash?)")
        if summary.incomplete:
            summary.warnings.append(
                f"skipped {summary.incomplete} record(s) without {', '.join(_REQUIRED)} (not decision records)"
            )
        summary.add_duplicates(int(n_dup[0]) if n_dup else 0)
        bad_time = con.execute("SELECT count(*), any_value(time_text) FROM decisions WHERE time IS NULL").fetchone()
        if bad_time and bad_time[0]:
            summary.warnings.append(
                f"{bad_time[0]} record(s) have no readable UTC time (e.g. {bad_time[1]!r}); they sort last"
            )
        return summary

    # -- outcomes ---------------------------------------------------------------------------------
    def load_outcomes(self, raw: Any, check: Any, summary: LoadSummary) -> None:
        """Table ``outcomes`` from the checked rows ``raw`` of :func:`workbench.monitor.outcomes.read_outcomes`
        (``check`` its counts): one row per decision/question, the last report that says something."""
        con = self.con
        con.register("_outcomes_raw", raw)
        # several reports of one decision: the last file (and row) that says something wins
        con.execute(
            "CREATE TABLE outcomes AS SELECT decision_id, question, "
            "last(outcome ORDER BY ord) FILTER (WHERE outcome IS NOT NULL) AS outcome, "
            "last(override ORDER BY ord) FILTER (WHERE override IS NOT NULL) AS override "
            "FROM _outcomes_raw GROUP BY decision_id, question"
        )
        con.unregister("_outcomes_raw")
        summary.outcome_files = list(check.files)
        summary.n_outcomes = int(con.execute("SELECT count(*) FROM outcomes").fetchone()[0])  # type: ignore[index]
        summary.n_outcomes_unmatched = int(
            con.execute(
                "SELECT count(*) FROM outcomes o ANTI JOIN decisions d "
                "ON d.decision_id = o.decision_id AND d.question = o.question"
            ).fetchone()[0]  # type: ignore[index]
        )
        add_outcome_summary(summary, check)

    # -- the joined view ----------------------------------------------------------------------------
    def build_view(
        self,
        *,
        policy_hash: str,
        options: dict[str, list[str]],
        models: list[str],
        schema_hashes: list[str],
        window: str,
        n_bins: int,
    ) -> None:
        """Table ``d``: this policy's decisions joined with outcomes, with per-row flags and a window key.

        ``window`` is a count (``"500"``: that many decisions per question) or a calendar period
        (``"1D"``, ``"6h"``, ``"15min"``, ``"1W"``).
        """
        con = self.con
        opt_rows = [(q, i, o) for q, opts in options.items() for i, o in enumerate(opts)]
        import pyarrow as pa

        con.register(
            "_options",
            pa.table(
                {
                    "question": pa.array([r[0] for r in opt_rows], pa.string()),
                    "idx": pa.array([r[1] for r in opt_rows], pa.int64()),
                    "opt": pa.array([r[2] for r in opt_rows], pa.string()),
                    "n_opts": pa.array([len(options[r[0]]) for r in opt_rows], pa.int64()),
                }
            ),
        )
        model_bad = f"(model IS NOT NULL AND NOT list_contains({_sql_list(models)}, model))" if models else "false"
        schema_bad = f"(schema_hash IS NOT NULL AND NOT list_contains({_sql_list(schema_hashes)}, schema_hash))"
        period = parse_window(window)
        order = "x.time NULLS LAST, x.decision_id"
        if isinstance(period, int):
            wkey = f"(row_number() OVER (PARTITION BY x.question ORDER BY {order}) - 1) // {period}"
        else:
            wkey = f"time_bucket(INTERVAL '{period}', x.time)"
        # no probability vectors (nor option lists) per row: the predicted option and the outcome's index
        # come from a join with the small option table; the recertification reads the vectors by ``drow``
        con.execute(
            f"""
            CREATE TABLE d AS
            WITH x AS (
                SELECT dec.* EXCLUDE (probs), dec.rowid AS drow, o.outcome, o.override,
                       dec.probs IS NOT NULL AS has_probs,
                       list_position(dec.probs, list_max(dec.probs)) - 1 AS pidx, len(dec.probs) AS plen
                FROM decisions dec LEFT JOIN outcomes o
                  ON o.decision_id = dec.decision_id AND o.question = dec.question
                WHERE dec.policy_hash = '{_q(policy_hash)}' AND dec.question IN (SELECT unnest({_sql_list(list(options))}))
            )
            SELECT x.* EXCLUDE (pidx, plen),
                   row_number() OVER (PARTITION BY x.question ORDER BY {order}) - 1 AS idx,
                   {wkey} AS win,
                   action = 'accept' AS accepted,
                   action = 'accept' AND (outcome IS NOT NULL OR override IS NOT NULL) AS known,
                   CASE WHEN outcome IS NOT NULL THEN outcome <> option ELSE override END AS wrong,
                   {HELD_SQL} AS held,
                   {HELD_SQL} AND outcome IS NOT NULL AS held_known,
                   outcome <> would_accept AS held_wrong,
                   {model_bad} AS model_mismatch,
                   {schema_bad} AS schema_mismatch,
                   least(floor(p_top * {n_bins}), {n_bins - 1})::INTEGER AS p_bin,
                   least(floor(greatest(margin, 0) * {n_bins}), {n_bins - 1})::INTEGER AS m_bin,
                   CASE WHEN x.plen = p.n_opts THEN p.opt END AS predicted,
                   CASE WHEN outcome IS NOT NULL THEN l.idx END AS label
            FROM x
            LEFT JOIN _options p ON p.question = x.question AND p.idx = x.pidx
            LEFT JOIN _options l ON l.question = x.question AND l.opt = x.outcome
            """
        )
        con.unregister("_options")

    def other_policies(self, policy_hash: str) -> list[tuple[str, int]]:
        return [
            (str(h), int(n))
            for h, n in self.con.execute(
                "SELECT coalesce(policy_hash, '(none)'), count(*) FROM decisions "
                f"WHERE policy_hash IS DISTINCT FROM '{_q(policy_hash)}' GROUP BY 1 ORDER BY 2 DESC"
            ).fetchall()
        ]


#: A decision the rule accepted but the rollout held back (``mode: shadow`` or an option not enabled): the
#: runtime logs the fallback action with ``would_accept`` = the option. Its outcome is shadow evidence.
HELD_SQL = "(action <> 'accept' AND would_accept IS NOT NULL)"


def add_outcome_summary(summary: LoadSummary, check: Any) -> None:
    """Fold an :class:`~workbench.monitor.outcomes.OutcomeCheck` into ``summary`` (counts and warnings)."""
    summary.outcome_check = check.to_dict()
    summary.warnings += check.warnings()
    if summary.n_outcomes_unmatched:
        summary.warnings.append(
            f"{summary.n_outcomes_unmatched} outcome(s) match no logged decision (other logs or policies?)"
        )


def _q(s: str) -> str:
    return str(s).replace("'", "''")


_PERIOD = re.compile(r"^\s*(\d+)\s*(min|m|h|H|D|d|W|w)\s*$")
_UNITS = {"min": "minute", "m": "minute", "h": "hour", "H": "hour", "D": "day", "d": "day", "W": "week", "w": "week"}


def parse_window(window: str | int) -> int | str:
    """``"500"`` → 500 decisions per window; ``"1D"``/``"6h"``/``"15min"``/``"1W"`` → a DuckDB interval text."""
    s = str(window).strip()
    if s.isdigit():
        n = int(s)
        if n < 1:
            raise OptionError(f"`window` {window}: a count must be >= 1")
        return n
    m = _PERIOD.match(s)
    if not m or int(m.group(1)) < 1:
        raise OptionError(
            f"`window` {window!r} is neither a count nor a period", hint="e.g. `window` 1D, 6h, 15min, 1W or 500"
        )
    return f"{int(m.group(1))} {_UNITS[m.group(2)]}"
