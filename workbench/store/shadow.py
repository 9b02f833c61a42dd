"""Shadow-mode tables: sessions, traffic (one row per request), per-question answers, outcomes.

Three ways in, one layout out, so that one report serves them all:

- :func:`import_traffic` — a production log file (JSONL, Parquet or CSV), read by DuckDB itself;
- :func:`ingest_journal` — the live mirror's JSON-lines journal (:mod:`workbench.shadow.journal`);
- :func:`replay_runs` — two stored runs on the same dataset items (champion run, challenger run).

Requests are keyed by a ``request_id`` (a journal's pair id; the item id for imports and replays), so an
item decided by several requests keeps each of them; outcomes and slices are per ``item_id``.
Responses are kept as received (``shadow_requests``); :func:`extract_answers` turns them into one
probability vector per request × question × side in schema order (``shadow_answers``) with SQL over
JSON pointers, so no Python loop runs per row. A failed side (transport error, HTTP error, missing
or malformed answer) gets a ``failure_kind`` and NULL probabilities, never a probability.

Import file columns (aliases in brackets; every column but ``item_id`` is optional):

``item_id`` [``id``], ``request_id`` (one per row: then an item may be decided by several rows; without
it item ids must be unique), ``timestamp`` [``ts``, ``time``] (ISO text or epoch seconds), ``state``,
``champion`` [``champion_response``, ``champion_answers``] and ``challenger`` [...]: a System One
response or just its ``answers`` object (a Cloudflare envelope is accepted too),
``champion_action`` [``champion_actions``, ``action``]: ``"accept"``/``"review"``/... or a map
question → action, ``outcome`` [``outcomes``, ``label``]: the option that proved right (or a map
question → option), ``final_queue``, ``human_override``, and ``{champion,challenger}_{latency_ms,
cost_usd,error,model,status}``. In CSV cells, nested values are JSON text. A file with an
``item_id`` and outcome columns but no answers is an outcome file: its rows join an existing
session by item id.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.errors import DataImportError, NotFoundError, WorkbenchError
from workbench.schema import DecisionSchema, option_ids
from workbench.store.db import duckdb_settings, fetch_scalar, no_progress_bar, transaction
from workbench.store.runs import answers_relation, get_run, load_answers, load_stored_schema, save_schema

SIDES = ("champion", "challenger")
#: |sum(p) - 1| beyond which a probability vector is malformed (as in schema.answers).
SUM_TOLERANCE = 0.02

_ALIASES: dict[str, tuple[str, ...]] = {
    "item_id": ("item_id", "id"),
    "request_id": ("request_id",),
    "ts": ("timestamp", "ts", "time"),
    "state": ("state",),
    "champion": ("champion", "champion_response", "champion_answers"),
    "challenger": ("challenger", "challenger_response", "challenger_answers"),
    "champion_action": ("champion_action", "champion_actions", "action"),
    "outcome": ("outcome", "outcomes", "label"),
    "final_queue": ("final_queue",),
    "human_override": ("human_override",),
    **{
        f"{side}_{what}": (f"{side}_{what}",)
        for side in SIDES
        for what in ("latency_ms", "cost_usd", "error", "model", "status")
    },
}


# -- sessions -------------------------------------------------------------------------------------
def session_exists(con: duckdb.DuckDBPyConnection, shadow: str) -> bool:
    return fetch_scalar(con, "SELECT count(*) FROM shadow_sessions WHERE shadow = ?", [shadow]) > 0


def get_session(con: duckdb.DuckDBPyConnection, shadow: str) -> dict:
    df = con.execute("SELECT * FROM shadow_sessions WHERE shadow = ?", [shadow]).df()
    if df.empty:
        raise NotFoundError(
            f"shadow session {shadow!r} does not exist",
            hint="see `workbench shadow list`, or create one with `workbench shadow import`",
        )
    row = df.iloc[0].to_dict()
    row["params"] = json.loads(row["params"]) if isinstance(row["params"], str) else (row["params"] or {})
    return row


def list_sessions(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    return con.execute(
        "SELECT s.shadow, s.source, s.champion, s.challenger, left(s.schema_hash, 12) AS schema, s.created_at,"
        " count(r.item_id) AS n_requests FROM shadow_sessions s LEFT JOIN shadow_requests r USING (shadow)"
        " GROUP BY ALL ORDER BY s.created_at"
    ).df()


def session_schema(con: duckdb.DuckDBPyConnection, shadow: str) -> DecisionSchema:
    return load_stored_schema(con, get_session(con, shadow)["schema_hash"])


def _create_session(
    con,
    shadow: str,
    *,
    source: str,
    schema: DecisionSchema,
    champion: str | None,
    challenger: str | None,
    params: dict | None,
    replace: bool,
) -> None:
    """Create (or, with ``replace``, empty and recreate) a session. Call inside a transaction."""
    if session_exists(con, shadow):
        if not replace:
            raise WorkbenchError(
                f"shadow session {shadow!r} already exists",
                hint="pass `replace` to overwrite it, or choose another `name`",
            )
        for table in ("shadow_outcomes", "shadow_answers", "shadow_requests", "shadow_sessions"):
            con.execute(f"DELETE FROM {table} WHERE shadow = ?", [shadow])
    h = save_schema(con, schema)
    con.execute(
        "INSERT INTO shadow_sessions (shadow, source, champion, challenger, schema_hash, params)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [shadow, source, champion, challenger, h, json.dumps(params or {})],
    )


# -- answers from responses -----------------------------------------------------------------------
def _pointer(*parts: str) -> str:
    """JSON pointer (RFC 6901) to ``parts``: option ids may hold dots or slashes."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def extract_answers(con: duckdb.DuckDBPyConnection, shadow: str, schema: DecisionSchema) -> int:
    """(Re)build ``shadow_answers`` of ``shadow`` from its stored responses; returns rows written.

    Call inside a transaction. Probabilities are re-normalised when their sum is within
    :data:`SUM_TOLERANCE` of 1 (providers round); otherwise the answer is ``malformed``.
    """
    con.execute("DELETE FROM shadow_answers WHERE shadow = ?", [shadow])
    total = 0
    for qid, question in schema.questions.items():
        opts = option_ids(question)
        if question.type == "noul":
            values = (
                "[TRY_CAST(json_extract_string(a, '/noul') AS DOUBLE),"
                " 1 - TRY_CAST(json_extract_string(a, '/noul') AS DOUBLE)]"
            )
            unknown = "false"
        else:
            values = "list_transform($paths, p -> TRY_CAST(json_extract_string(a, p) AS DOUBLE))"
            unknown = (
                "coalesce(len(list_filter(json_keys(json_extract(a, '/probabilities')),"
                " k -> NOT list_contains($opts, k))) > 0, false)"
            )
        con.execute(
            f"""
            INSERT INTO shadow_answers (shadow, request_id, item_id, question, side, probs, failure_kind,
                                        logged_action)
            WITH base AS (
                SELECT request_id, item_id, 'champion' AS side, champion_response AS resp, champion_status AS status,
                       champion_error AS err, champion_actions AS act
                FROM shadow_requests WHERE shadow = $shadow
                UNION ALL
                SELECT request_id, item_id, 'challenger', challenger_response, challenger_status, challenger_error,
                       NULL::JSON
                FROM shadow_requests WHERE shadow = $shadow
            ), located AS (
                SELECT *, CASE WHEN json_exists(resp, '$.answers') THEN json_extract(resp, '$.answers')
                               WHEN json_exists(resp, '$.result.answers') THEN json_extract(resp, '$.result.answers')
                               ELSE resp END AS answers
                FROM base
            ), picked AS (
                SELECT *, json_extract(answers, $qptr) AS a FROM located
            ), valued AS (
                SELECT *, {values} AS raw, {unknown} AS has_unknown FROM picked
            ), summed AS (
                SELECT *, list_transform(raw, x -> coalesce(x, 0.0)) AS filled,
                       list_sum(list_transform(raw, x -> coalesce(x, 0.0))) AS total,
                       list_count(raw) AS n_values,
                       coalesce(list_min(raw) < -1e-9 OR list_max(raw) > 1 + 1e-9, false) AS out_of_range
                FROM valued
            ), judged AS (
                SELECT *, CASE
                    WHEN err IS NOT NULL THEN err
                    WHEN status IS NOT NULL AND (status < 200 OR status >= 300) THEN 'http_' || status
                    WHEN resp IS NULL THEN 'missing_response'
                    WHEN a IS NULL OR json_type(a) <> 'OBJECT' THEN 'missing_answer'
                    WHEN json_extract_string(a, '/type') = 'refusal' THEN 'refused'
                    WHEN json_extract_string(a, '/type') IS NOT NULL
                         AND json_extract_string(a, '/type') <> $qtype THEN 'malformed'
                    WHEN has_unknown THEN 'malformed'
                    WHEN n_values = 0 THEN 'missing_answer'
                    WHEN out_of_range OR abs(total - 1) > $tol THEN 'malformed'
                    END AS failure_kind
                FROM summed
            )
            SELECT $shadow, request_id, item_id, $q, side,
                   CASE WHEN failure_kind IS NULL
                        THEN list_transform(filled, x -> least(greatest(x, 0.0), 1.0) / total) END,
                   failure_kind,
                   CASE WHEN act IS NULL THEN NULL
                        WHEN json_type(act) = 'VARCHAR' THEN json_extract_string(act, '$')
                        ELSE json_extract_string(act, $qptr) END
            FROM judged
            """,
            {
                "shadow": shadow,
                "q": qid,
                "qptr": _pointer(qid),
                "qtype": question.type,
                "tol": SUM_TOLERANCE,
                **(
                    {"paths": [_pointer("probabilities", o) for o in opts], "opts": opts}
                    if question.type != "noul"
                    else {}
                ),
            },
        )
        total += fetch_scalar(
            con, "SELECT count(*) FROM shadow_answers WHERE shadow = ? AND question = ?", [shadow, qid]
        )
    return total


# -- import of a traffic log ----------------------------------------------------------------------
def _reader(path: Path) -> str:
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix.lower() in (".gz", ".zst") else path.suffix.lower()
    if suffix.startswith((".jsonl", ".ndjson", ".json")):
        return "json"
    if suffix.startswith(".parquet") or suffix == ".pq":
        return "parquet"
    if suffix.startswith((".csv", ".tsv", ".txt")):
        return "csv"
    raise DataImportError(f"{path}: unknown log format {path.suffix!r}", hint="use .jsonl, .parquet or .csv")


def _stage(con: duckdb.DuckDBPyConnection, path: Path, table: str) -> list[str]:
    """Load ``path`` into temp ``table`` with every column as JSON; return the column names."""
    kind = _reader(path)
    p = str(path)
    try:
        if kind == "json":
            cols = [
                r[0]
                for r in con.execute(
                    "DESCRIBE SELECT * FROM read_json_auto(?, format='newline_delimited', sample_size=-1)", [p]
                ).fetchall()
            ]
            spec = "{" + ", ".join(f"'{c.replace(chr(39), chr(39) * 2)}': 'JSON'" for c in cols) + "}"
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM "
                f"read_json(?, format='newline_delimited', columns={spec})",
                [p],
            )
        else:
            src = "read_parquet(?)" if kind == "parquet" else "read_csv(?, header=true, all_varchar=true)"
            described = con.execute(f"DESCRIBE SELECT * FROM {src}", [p]).fetchall()
            cols = [r[0] for r in described]
            exprs = []
            for name, ctype, *_ in described:
                q = '"' + name.replace('"', '""') + '"'
                if ctype == "VARCHAR":  # nested values arrive as JSON text; plain text stays a string
                    exprs.append(
                        f"CASE WHEN json_valid({q}) AND ltrim({q})[1] IN ('{{', '[')"
                        f" THEN {q}::JSON ELSE to_json({q}) END AS {q}"
                    )
                else:
                    exprs.append(f"to_json({q}) AS {q}")
            con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT {', '.join(exprs)} FROM {src}", [p])
    except duckdb.Error as exc:
        raise DataImportError(
            f"{path}: cannot read: {str(exc).splitlines()[0]}",
            hint="one JSON object per line, or a Parquet/CSV file with a header",
        ) from None
    return cols


def _resolve(cols: list[str]) -> dict[str, str | None]:
    lower = {c.lower(): c for c in cols}
    return {key: next((lower[a] for a in aliases if a in lower), None) for key, aliases in _ALIASES.items()}


def _col(found: dict, key: str) -> str:
    name = found.get(key)
    return "NULL::JSON" if name is None else '"' + name.replace('"', '""') + '"'


def _text(found: dict, key: str) -> str:
    return f"json_extract_string({_col(found, key)}, '$')"


def _number(found: dict, key: str) -> str:
    return f"TRY_CAST(json_extract_string({_col(found, key)}, '$') AS DOUBLE)"


def _outcome_rows_sql(found: dict, schema: DecisionSchema, staged: str) -> str:
    """SELECT of (shadow, item_id, question, outcome, final_queue, human_override, _row) from a staged file
    (``_row``: the file's row order)."""
    single = len(schema.questions) == 1
    parts = []
    for qid in schema.questions:
        ptr = _pointer(qid).replace("'", "''")

        def per_question(key: str) -> str:
            col = _col(found, key)
            value = f"CASE WHEN json_type({col}) = 'OBJECT' THEN json_extract({col}, '{ptr}')" + (
                f" ELSE {col} END" if single else " END"
            )
            # noul outcomes may be booleans; score outcomes may be level numbers
            return (
                f"CASE WHEN json_type({value}) = 'BOOLEAN' THEN"
                f" CASE WHEN json_extract_string({value}, '$') = 'true' THEN 'yes' ELSE 'no' END"
                f" WHEN json_type({value}) IN ('UBIGINT', 'BIGINT') THEN json_extract_string({value}, '$')"
                f" ELSE json_extract_string({value}, '$') END"
            )

        parts.append(
            f"SELECT $shadow AS shadow, {_text(found, 'item_id')} AS item_id, '{qid.replace(chr(39), chr(39) * 2)}'"
            f" AS question, {per_question('outcome')} AS outcome, {per_question('final_queue')} AS final_queue,"
            f" {per_question('human_override')} AS human_override, rowid AS _row FROM {staged}"
        )
    union = " UNION ALL ".join(parts)
    return (
        f"SELECT * FROM ({union}) WHERE item_id IS NOT NULL"
        " AND (outcome IS NOT NULL OR final_queue IS NOT NULL OR human_override IS NOT NULL)"
    )


def _upsert_outcomes(con, select_sql: str, params: dict) -> int:
    """Write the outcomes of :func:`_outcome_rows_sql`; for an item on several rows (requests), its last row's."""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _shadow_outcomes_in AS SELECT * EXCLUDE (_row) FROM ({select_sql})
            QUALIFY row_number() OVER (PARTITION BY shadow, item_id, question ORDER BY _row DESC) = 1""",
        params,
    )
    con.execute(
        "DELETE FROM shadow_outcomes WHERE (shadow, item_id, question) IN "
        "(SELECT shadow, item_id, question FROM _shadow_outcomes_in)"
    )
    con.execute(
        "INSERT INTO shadow_outcomes (shadow, item_id, question, outcome, final_queue, human_override)"
        " SELECT shadow, item_id, question, coalesce(outcome, human_override), final_queue, human_override"
        " FROM _shadow_outcomes_in"
    )
    n = fetch_scalar(con, "SELECT count(*) FROM _shadow_outcomes_in")
    con.execute("DROP TABLE _shadow_outcomes_in")
    return n


def import_traffic(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    *,
    shadow: str,
    schema: DecisionSchema | None = None,
    champion: str | None = None,
    challenger: str | None = None,
    replace: bool = False,
) -> dict:
    """Import a production log (see the module docstring) as session ``shadow``.

    A file with outcomes but no answers adds outcomes to the existing session ``shadow``.
    A mirror journal (records with ``kind`` and ``pair``) is handed to :func:`ingest_journal`.

    Returns
    -------
    summary : dict
        ``{"shadow", "kind": "traffic" | "outcomes" | "journal", "n_requests", "n_outcomes"}``.
    """
    path = Path(path)
    if not path.exists():
        raise DataImportError(f"{path}: file does not exist", hint="check the path")
    if _reader(path) == "json" and _is_journal(path):
        return ingest_journal(con, path, shadow=shadow, schema=schema, champion=champion, challenger=challenger)
    cols = _stage(con, path, "_shadow_in")
    found = _resolve(cols)
    try:
        if found["item_id"] is None:
            raise DataImportError(f"{path}: no item_id column", hint=f"columns found: {', '.join(cols)}")
        n_null = fetch_scalar(con, f"SELECT count(*) FROM _shadow_in WHERE {_text(found, 'item_id')} IS NULL")
        if n_null:
            raise DataImportError(f"{path}: {n_null} rows have no item_id", hint="every row needs an item id")
        outcome_only = found["champion"] is None and found["challenger"] is None
        if outcome_only:
            if found["outcome"] is None and found["final_queue"] is None and found["human_override"] is None:
                raise DataImportError(
                    f"{path}: neither answers (champion/challenger) nor outcomes",
                    hint="see `workbench shadow import --help` for the columns",
                )
            session = get_session(con, shadow)
            schema = load_stored_schema(con, session["schema_hash"])
            with transaction(con):
                n = _upsert_outcomes(con, _outcome_rows_sql(found, schema, "_shadow_in"), {"shadow": shadow})
            return {"shadow": shadow, "kind": "outcomes", "n_requests": 0, "n_outcomes": n}
        if schema is None:
            raise DataImportError(
                f"{path}: a traffic import needs the decision schema (option order)",
                hint="pass `schema` FILE (or `policy`, whose schema is used)",
            )
        # an item may be decided by several requests when each row names its request (request_id column)
        key = "request_id" if found["request_id"] is not None else "item_id"
        n_null = fetch_scalar(con, f"SELECT count(*) FROM _shadow_in WHERE {_text(found, key)} IS NULL")
        if n_null:
            raise DataImportError(f"{path}: {n_null} rows have no {key}", hint="every row needs a request id")
        dup = fetch_scalar(con, f"SELECT count(*) - count(DISTINCT {_text(found, key)}) FROM _shadow_in")
        if dup:
            raise DataImportError(
                f"{path}: {dup} duplicate {'request' if key == 'request_id' else 'item'} ids",
                hint="each row is one request: an item decided by several requests needs a request_id column"
                " (unique per row)"
                if key == "item_id"
                else "each row needs its own request_id",
            )
        ts = _col(found, "ts")
        # epoch seconds (a JSON number, or digits in a CSV cell) or ISO text
        ts_sql = (
            f"CASE WHEN json_type({ts}) IN ('UBIGINT', 'BIGINT', 'DOUBLE')"
            f" OR regexp_full_match(coalesce(json_extract_string({ts}, '$'), ''), '[0-9]+(\\.[0-9]*)?') THEN"
            f" (to_timestamp(TRY_CAST(json_extract_string({ts}, '$') AS DOUBLE)) AT TIME ZONE 'UTC')"
            f" ELSE (TRY_CAST(json_extract_string({ts}, '$') AS TIMESTAMPTZ) AT TIME ZONE 'UTC') END"
        )
        side_cols = []
        for side in SIDES:
            resp = _col(found, side)
            side_cols += [
                f"TRY_CAST({_number(found, side + '_status')} AS INTEGER)",
                _text(found, f"{side}_error"),
                _number(found, f"{side}_latency_ms"),
                _number(found, f"{side}_cost_usd"),
                f"coalesce({_text(found, side + '_model')}, json_extract_string({resp}, '$.model'),"
                f" json_extract_string({resp}, '$.result.model'))",
                resp,
            ]
            if side == "champion":
                side_cols.append(_col(found, "champion_action"))
        with transaction(con):
            _create_session(
                con,
                shadow,
                source="import",
                schema=schema,
                champion=champion,
                challenger=challenger,
                params={"file": path.name},
                replace=replace,
            )
            con.execute(
                f"""INSERT INTO shadow_requests (shadow, request_id, item_id, seq, ts, state,
                        champion_status, champion_error, champion_latency_ms, champion_cost_usd, champion_model,
                        champion_response, champion_actions,
                        challenger_status, challenger_error, challenger_latency_ms, challenger_cost_usd,
                        challenger_model, challenger_response)
                    SELECT $shadow, {_text(found, key)}, {_text(found, "item_id")}, row_number() OVER (), {ts_sql},
                           {_col(found, "state")}, {", ".join(side_cols)}
                    FROM _shadow_in""",
                {"shadow": shadow},
            )
            extract_answers(con, shadow, schema)
            n_out = 0
            if any(found[k] is not None for k in ("outcome", "final_queue", "human_override")):
                n_out = _upsert_outcomes(con, _outcome_rows_sql(found, schema, "_shadow_in"), {"shadow": shadow})
        n = fetch_scalar(con, "SELECT count(*) FROM shadow_requests WHERE shadow = ?", [shadow])
        return {
            "shadow": shadow,
            "kind": "traffic",
            "n_requests": n,
            "n_outcomes": n_out,
            **repeated_items(con, shadow),
        }
    finally:
        con.execute("DROP TABLE IF EXISTS _shadow_in")


# -- the live mirror's journal --------------------------------------------------------------------
def _is_journal(path: Path) -> bool:
    with open(path, "rb") as fh:
        first = fh.readline()
    try:
        rec = json.loads(first)
    except ValueError:
        return False
    return isinstance(rec, dict) and rec.get("kind") in SIDES and "pair" in rec


_JOURNAL_COLUMNS = (
    "{'kind': 'VARCHAR', 'pair': 'VARCHAR', 'item_id': 'VARCHAR', 'ts': 'VARCHAR',"
    " 'request': 'VARCHAR', 'status': 'INTEGER', 'body': 'VARCHAR', 'latency_ms': 'DOUBLE',"
    " 'error': 'VARCHAR', 'sampled': 'BOOLEAN'}"
)


#: Longest journal line ingest reads. The mirror keeps bodies over 1 MiB as references, so its
#: lines are small; journals written before that held bodies up to 64 MiB whole (a line of up to
#: ~770 MiB with JSON escapes), which DuckDB's default of 16 MiB refused, failing the whole ingest.
#: The limit only caps one object: DuckDB allocates per line, not this much up front.
_MAX_JOURNAL_LINE = 1 << 30


def ingest_journal(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    *,
    shadow: str,
    schema: DecisionSchema | None = None,
    champion: str | None = None,
    challenger: str | None = None,
) -> dict:
    """Load a mirror journal into session ``shadow`` (replacing its traffic; the journal is the truth).

    Every champion record is one request (it was fsynced before the caller got its answer), keyed by its
    ``pair`` id (the request id), except those the mirror did not sample for the challenger
    (``--sample-rate``). Several requests may carry the same item id (a ticket decided twice): each is
    kept, and the summary counts the items with several requests (``n_items_repeated``; the most requests
    of one item in ``max_requests_per_item``). A request whose challenger record is missing (the mirror
    was killed while the challenger ran) gets ``challenger_error = 'lost'``. Without ``schema``, the
    questions of the first request are the session's schema. Outcomes already imported for the session
    are kept (they are per item: every request of an item shares its outcome).
    """
    path = Path(path)
    # DuckDB reserves twice the largest JSON line per reading thread (2 GiB for a 1 GiB line),
    # beyond the store's buffer-pool cap: lift the cap for this read only (the pages a small journal
    # never touches are never resident)
    threads = int(fetch_scalar(con, "SELECT current_setting('threads')") or 1)
    with duckdb_settings(con, {"memory_limit": f"{((2 * threads + 1) * _MAX_JOURNAL_LINE) >> 20}MB"}):
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE _journal AS
                        SELECT * FROM read_json(?, format='newline_delimited', columns={_JOURNAL_COLUMNS},
                                                ignore_errors=true, maximum_object_size={_MAX_JOURNAL_LINE})
                        WHERE kind IN ('champion', 'challenger') AND pair IS NOT NULL""",
            [str(path)],
        )
    try:
        if schema is None:
            # only the question map is parsed in Python: a request can be anything a caller sent
            rows = con.execute(
                "SELECT json_extract(request, '$.questions')::VARCHAR FROM _journal WHERE kind = 'champion'"
                " AND json_valid(request) AND json_exists(request, '$.questions') ORDER BY ts LIMIT 20"
            ).fetchall()
            if not rows:
                raise DataImportError(f"{path}: no request with questions in the journal", hint="pass `schema` FILE")
            first_error: Exception | None = None
            for (questions,) in rows:  # the first request whose questions make a schema
                try:
                    schema = DecisionSchema.from_dict(
                        {"questions": json.loads(questions)}, source=f"{path} (first request)"
                    )
                    break
                except (WorkbenchError, ValueError, RecursionError) as exc:
                    first_error = first_error or exc
            else:
                assert first_error is not None
                raise first_error
        with transaction(con):
            if session_exists(con, shadow):
                old = get_session(con, shadow)
                if old["source"] != "mirror":
                    raise WorkbenchError(
                        f"shadow session {shadow!r} exists and is not a mirror session", hint="choose another `name`"
                    )
                con.execute("DELETE FROM shadow_answers WHERE shadow = ?", [shadow])
                con.execute("DELETE FROM shadow_requests WHERE shadow = ?", [shadow])
                con.execute(
                    "UPDATE shadow_sessions SET schema_hash = ? WHERE shadow = ?", [save_schema(con, schema), shadow]
                )
            else:
                _create_session(
                    con,
                    shadow,
                    source="mirror",
                    schema=schema,
                    champion=champion,
                    challenger=challenger,
                    params={"journal": str(path)},
                    replace=False,
                )
            con.execute(
                """INSERT INTO shadow_requests (shadow, request_id, item_id, seq, ts, state,
                       champion_status, champion_error, champion_latency_ms, champion_model, champion_response,
                       challenger_status, challenger_error, challenger_latency_ms, challenger_model,
                       challenger_response)
                   WITH ch AS (
                       SELECT * FROM _journal WHERE kind = 'champion' AND coalesce(sampled, true)
                       QUALIFY row_number() OVER (PARTITION BY pair) = 1
                   ), cl AS (
                       SELECT * FROM _journal WHERE kind = 'challenger'
                       QUALIFY row_number() OVER (PARTITION BY pair) = 1
                   )
                   SELECT $shadow, ch.pair, coalesce(ch.item_id, ch.pair), row_number() OVER (ORDER BY ch.ts, ch.pair),
                          TRY_CAST(ch.ts AS TIMESTAMPTZ) AT TIME ZONE 'UTC',
                          CASE WHEN json_valid(ch.request) THEN json_extract(ch.request, '$.state') END,
                          ch.status, ch.error, ch.latency_ms,
                          CASE WHEN json_valid(ch.body) THEN json_extract_string(ch.body, '$.model') END,
                          CASE WHEN json_valid(ch.body) THEN ch.body::JSON END,
                          cl.status, CASE WHEN cl.pair IS NULL THEN 'lost' ELSE cl.error END, cl.latency_ms,
                          CASE WHEN json_valid(cl.body) THEN json_extract_string(cl.body, '$.model') END,
                          CASE WHEN json_valid(cl.body) THEN cl.body::JSON END
                   FROM ch LEFT JOIN cl USING (pair)""",
                {"shadow": shadow},
            )
            extract_answers(con, shadow, schema)
        counts = con.execute(
            """SELECT count(*), count(*) FILTER (WHERE challenger_error = 'lost'), count(DISTINCT item_id)
               FROM shadow_requests WHERE shadow = $shadow""",
            {"shadow": shadow},
        ).fetchone() or (0, 0, 0)
        repeated = repeated_items(con, shadow)
        return {
            "shadow": shadow,
            "kind": "journal",
            "n_requests": counts[0],
            "n_challenger_lost": counts[1],
            "n_items": counts[2],
            **repeated,
            "n_outcomes": 0,
        }
    finally:
        con.execute("DROP TABLE IF EXISTS _journal")


def repeated_items(con: duckdb.DuckDBPyConnection, shadow: str, *, examples: int = 5) -> dict:
    """Items of session ``shadow`` decided by several requests: ``n_items_repeated``, the requests they
    hold (``n_requests_of_repeated_items``), ``max_requests_per_item`` and up to ``examples`` of them
    (``repeated_examples``: item id and request count, most requests first)."""
    rows = con.execute(
        """SELECT item_id, count(*) AS n FROM shadow_requests WHERE shadow = ? GROUP BY item_id HAVING count(*) > 1
           ORDER BY n DESC, item_id""",
        [shadow],
    ).fetchall()
    return {
        "n_items_repeated": len(rows),
        "n_requests_of_repeated_items": int(sum(n for _, n in rows)),
        "max_requests_per_item": int(max((n for _, n in rows), default=1)),
        "repeated_examples": [{"item_id": item, "requests": int(n)} for item, n in rows[:examples]],
    }


def repeated_items_note(summary: dict) -> str | None:
    """One line about the items with several requests of an ingest summary (None when there are none)."""
    n = summary.get("n_items_repeated") or 0
    if not n:
        return None
    shown = ", ".join(f"{e['item_id']} ({e['requests']})" for e in summary.get("repeated_examples", []))
    return (
        f"{n} items were decided by several requests ({summary['n_requests_of_repeated_items']} requests, at most "
        f"{summary['max_requests_per_item']} for one item; each request is kept, outcomes are per item): {shown}"
    )


# -- replay of two stored runs ---------------------------------------------------------------------
def replay_runs(
    con: duckdb.DuckDBPyConnection,
    *,
    shadow: str,
    champion_run: str,
    challenger_run: str,
    splits: Iterable[str] | None = None,
    replace: bool = False,
) -> dict:
    """Make session ``shadow`` from two runs over the same dataset (items answered by either run).

    Each item is one request: probabilities come from the runs' answers, latency is the slowest
    question's call and cost the sum over questions; gold labels become known outcomes. A dataset
    has no arrival order, and files are often sorted by label, so ``seq`` is a fixed shuffle (items
    ordered by ``md5(item_id)``): drift windows then compare exchangeable slices, not classes.
    """
    a, b = get_run(con, champion_run), get_run(con, challenger_run)
    if (a["dataset"], a["dataset_version"]) != (b["dataset"], b["dataset_version"]):
        raise WorkbenchError(
            f"runs {a['run_id']} and {b['run_id']} are on different datasets",
            hint="shadow replay compares two runs over the same items",
        )
    schema_a = load_stored_schema(con, a["schema_hash"])
    schema_b = load_stored_schema(con, b["schema_hash"])
    shared = [
        q
        for q in schema_a.question_ids
        if q in schema_b.questions and option_ids(schema_a.questions[q]) == option_ids(schema_b.questions[q])
    ]
    if not shared:
        raise WorkbenchError(
            "the two runs share no question with the same options",
            hint="compare runs whose schemas have common question ids",
        )
    schema = schema_a.subset(shared)
    split_list = list(splits) if splits else None
    with transaction(con), answers_relation(con, [a["run_id"], b["run_id"]]) as answers:
        _create_session(
            con,
            shadow,
            source="replay",
            schema=schema,
            champion=a["run_id"],
            challenger=b["run_id"],
            params={"splits": split_list},
            replace=replace,
        )
        con.execute(
            f"""INSERT INTO shadow_requests (shadow, request_id, item_id, seq, ts, state,
                   champion_latency_ms, champion_cost_usd, champion_model,
                   challenger_latency_ms, challenger_cost_usd, challenger_model)
               WITH per AS (
                   SELECT item_id,
                          max(latency_ms) FILTER (WHERE run_id = $a) AS la, sum(cost_usd) FILTER (WHERE run_id = $a) AS ca,
                          any_value(model) FILTER (WHERE run_id = $a) AS ma,
                          max(latency_ms) FILTER (WHERE run_id = $b) AS lb, sum(cost_usd) FILTER (WHERE run_id = $b) AS cb,
                          any_value(model) FILTER (WHERE run_id = $b) AS mb
                   FROM {answers} WHERE run_id IN ($a, $b) AND list_contains($qs, question) GROUP BY item_id
               )
               SELECT $shadow, per.item_id, per.item_id, row_number() OVER (ORDER BY md5(per.item_id), per.item_id), NULL,
                      coalesce(i.state_json, to_json(i.state_text)), la, ca, ma, lb, cb, mb
               FROM per JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = per.item_id
               WHERE $splits IS NULL OR list_contains($splits, i.split)""",
            {
                "a": a["run_id"],
                "b": b["run_id"],
                "qs": shared,
                "shadow": shadow,
                "ds": a["dataset"],
                "v": int(a["dataset_version"]),
                "splits": split_list,
            },
        )
        con.execute(
            f"""INSERT INTO shadow_answers (shadow, request_id, item_id, question, side, probs, failure_kind)
               SELECT $shadow, r.request_id, a.item_id, a.question, CASE WHEN a.run_id = $a THEN 'champion' ELSE 'challenger' END,
                      a.probs, CASE WHEN a.probs IS NULL THEN coalesce(a.failure_kind, 'failed') END
               FROM {answers} a JOIN shadow_requests r ON r.shadow = $shadow AND r.item_id = a.item_id
               WHERE a.run_id IN ($a, $b) AND list_contains($qs, a.question)""",
            {"a": a["run_id"], "b": b["run_id"], "qs": shared, "shadow": shadow},
        )
        # a side that never answered an item of the other side is a failure of that side
        con.execute(
            """INSERT INTO shadow_answers (shadow, request_id, item_id, question, side, probs, failure_kind)
               SELECT r.shadow, r.request_id, r.item_id, q.question, s.side, NULL, 'missing_answer'
               FROM shadow_requests r, (SELECT unnest($qs) AS question) q, (SELECT unnest(['champion', 'challenger']) AS side) s
               WHERE r.shadow = $shadow AND NOT EXISTS (SELECT 1 FROM shadow_answers x WHERE x.shadow = r.shadow
                     AND x.request_id = r.request_id AND x.question = q.question AND x.side = s.side)""",
            {"qs": shared, "shadow": shadow},
        )
        n_out = 0
        for q in shared:
            gold = load_answers(con, a["run_id"], q, split_list)
            known = gold.labels >= 0
            opts = np.asarray(gold.option_ids, dtype=object)
            table = pa.table(
                {
                    "item_id": pa.array(gold.item_ids[known].tolist(), pa.string()),
                    "outcome": pa.array(opts[gold.labels[known]].tolist(), pa.string()),
                }
            )
            con.register("_replay_gold", table)
            try:
                con.execute(
                    "INSERT INTO shadow_outcomes (shadow, item_id, question, outcome)"
                    " SELECT $shadow, g.item_id, $q, g.outcome FROM _replay_gold g"
                    " JOIN shadow_requests r ON r.shadow = $shadow AND r.item_id = g.item_id",
                    {"shadow": shadow, "q": q},
                )
            finally:
                con.unregister("_replay_gold")
            n_out += int(known.sum())
    n = fetch_scalar(con, "SELECT count(*) FROM shadow_requests WHERE shadow = ?", [shadow])
    return {"shadow": shadow, "kind": "replay", "n_requests": n, "n_outcomes": n_out}


# -- export ----------------------------------------------------------------------------------------
def export_session(con: duckdb.DuckDBPyConnection, shadow: str, path: str | Path) -> int:
    """Write session ``shadow`` as a traffic file that :func:`import_traffic` reads back.

    The format follows the suffix (``.jsonl``, ``.parquet``, ``.csv``; nested values are JSON text
    in Parquet and CSV). Stored responses are written as received; a replayed session's answers are
    written as System One responses rebuilt from its probabilities. Returns the number of rows.
    """
    path = Path(path)
    kind = _reader(path)
    schema = session_schema(con, shadow)
    qtable = pa.table(
        {
            "question": schema.question_ids,
            "qtype": [schema.questions[q].type for q in schema.question_ids],
            "opts": [option_ids(schema.questions[q]) for q in schema.question_ids],
        }
    )
    con.register("_export_questions", qtable)
    answers = """(SELECT json_group_object(a.question,
                    CASE WHEN q.qtype = 'noul' THEN json_object('type', 'noul', 'noul', a.probs[1])
                         ELSE json_object('type', q.qtype, 'probabilities', to_json(map(q.opts, a.probs))) END)
                FROM shadow_answers a JOIN _export_questions q USING (question)
                WHERE a.shadow = r.shadow AND a.request_id = r.request_id AND a.side = '{side}' AND a.probs IS NOT NULL)"""
    built = (
        "CASE WHEN " + answers + " IS NOT NULL THEN json_object('model', {side_model}, 'answers', " + answers + ") END"
    )
    text = "" if kind == "json" else "::VARCHAR"
    select = f"""
        SELECT r.item_id, r.request_id, strftime(r.ts, '%Y-%m-%dT%H:%M:%S.%fZ') AS "timestamp", r.state{text} AS state,
               coalesce(r.champion_response, {built.format(side="champion", side_model="r.champion_model")}){text}
                   AS champion,
               r.champion_actions{text} AS champion_action,
               coalesce(r.challenger_response, {built.format(side="challenger", side_model="r.challenger_model")}){text}
                   AS challenger,
               r.champion_status, r.champion_error, r.champion_latency_ms, r.champion_cost_usd, r.champion_model,
               r.challenger_status, r.challenger_error, r.challenger_latency_ms, r.challenger_cost_usd,
               r.challenger_model,
               (SELECT json_group_object(o.question, o.outcome) FROM shadow_outcomes o
                WHERE o.shadow = r.shadow AND o.item_id = r.item_id AND o.outcome IS NOT NULL){text} AS outcome
        FROM shadow_requests r WHERE r.shadow = ? ORDER BY r.ts NULLS LAST, r.seq, r.item_id, r.request_id"""
    fmt = {"json": "FORMAT json", "parquet": "FORMAT parquet", "csv": "FORMAT csv, HEADER true"}[kind]
    try:
        target = str(path).replace("'", "''")
        con.execute(f"COPY ({select}) TO '{target}' ({fmt})", [shadow])
    finally:
        con.unregister("_export_questions")
    return fetch_scalar(con, "SELECT count(*) FROM shadow_requests WHERE shadow = ?", [shadow])


# -- typed reads for the report --------------------------------------------------------------------
@dataclass
class ShadowAnswers:
    """One question of one session, both sides aligned by request (shapes in brackets).

    ``*_probs`` are NaN on failed rows; ``outcome`` is the index of the option that proved right or
    -1 when unknown; ``champion_logged`` holds the logged champion action (None when not logged).
    Rows are in arrival order (``ts`` then ``seq``).
    """

    shadow: str
    question: str
    qtype: str
    option_ids: list[str]
    item_ids: np.ndarray  # (n,) object
    ts: np.ndarray  # (n,) datetime64[us], NaT when unknown
    seq: np.ndarray  # (n,) int
    champion_probs: np.ndarray  # (n, k)
    challenger_probs: np.ndarray  # (n, k)
    champion_failure: np.ndarray  # (n,) object, None when answered
    challenger_failure: np.ndarray  # (n,) object
    champion_logged: np.ndarray  # (n,) object
    outcome: np.ndarray  # (n,) int
    champion_latency_ms: np.ndarray  # (n,) float, NaN unknown
    challenger_latency_ms: np.ndarray
    champion_cost_usd: np.ndarray
    challenger_cost_usd: np.ndarray
    champion_model: np.ndarray | None = None  # (n,) object: the model that answered, when known
    challenger_model: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.item_ids)


def _failure_kinds(kinds: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Failure kind per row: the recorded kind (``missing_answer`` if none) where ``probs`` has NaN, else None."""
    out = np.where(pd.isna(kinds), "missing_answer", kinds).astype(object)
    out[~np.isnan(probs).any(axis=1)] = None
    return out


def _matrix(column: pa.ChunkedArray, n: int, k: int) -> np.ndarray:
    out = np.full((n, k), np.nan)
    if n == 0:
        return out
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if valid.any():
        flat = pa.concat_arrays([c.flatten() for c in column.drop_null().chunks])
        out[valid] = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=float).reshape(-1, k)
    return out


def _question_of(con: duckdb.DuckDBPyConnection, shadow: str, question: str) -> tuple[dict, DecisionSchema, list[str]]:
    session = get_session(con, shadow)
    schema = load_stored_schema(con, session["schema_hash"])
    if question not in schema.questions:
        raise NotFoundError(
            f"shadow session {shadow!r} has no question {question!r}",
            hint=f"questions: {', '.join(schema.question_ids)}",
        )
    return session, schema, option_ids(schema.questions[question])


#: Arrival order of a session's requests (the report's windows and the ``pos`` of streamed chunks).
_ORDER = "r.ts NULLS LAST, r.seq, r.item_id, r.request_id"

_ROWS_SQL = """SELECT r.item_id, r.ts, r.seq, c.probs AS cp, d.probs AS dp, c.failure_kind AS cf, d.failure_kind AS df,
                  c.logged_action, list_position($opts, o.outcome) - 1 AS outcome_idx,
                  r.champion_latency_ms, r.challenger_latency_ms, r.champion_cost_usd, r.challenger_cost_usd,
                  r.champion_model, r.challenger_model{extra}
           FROM {requests} r
           LEFT JOIN shadow_answers c ON c.shadow = r.shadow AND c.request_id = r.request_id AND c.question = $q
                AND c.side = 'champion'
           LEFT JOIN shadow_answers d ON d.shadow = r.shadow AND d.request_id = r.request_id AND d.question = $q
                AND d.side = 'challenger'
           LEFT JOIN shadow_outcomes o ON o.shadow = r.shadow AND o.item_id = r.item_id AND o.question = $q
           WHERE r.shadow = $shadow"""


def _answers_from_table(
    tbl: pa.Table | pa.RecordBatch, shadow: str, question: str, qtype: str, opts: list[str], session: dict
) -> ShadowAnswers:
    """A :class:`ShadowAnswers` from rows of :data:`_ROWS_SQL` (extra columns go to ``extra``)."""
    n, k = tbl.num_rows, len(opts)

    def col(name: str) -> pa.ChunkedArray:
        c = tbl.column(name)
        return c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c])

    def num(name: str) -> np.ndarray:
        return col(name).to_pandas().to_numpy(dtype=float, na_value=np.nan) if n else np.zeros(0)

    def obj(name: str) -> np.ndarray:
        return np.asarray(col(name).to_pylist(), dtype=object)

    outcome = col("outcome_idx").to_pandas().fillna(-1).to_numpy(dtype=int) if n else np.zeros(0, int)
    ts = col("ts").to_pandas().to_numpy(dtype="datetime64[us]") if n else np.zeros(0, "datetime64[us]")
    cf, df = obj("cf"), obj("df")
    cp, dp = _matrix(col("cp"), n, k), _matrix(col("dp"), n, k)
    # a row without probabilities is a failure even when no kind was recorded: never a silent gap
    cf, df = _failure_kinds(cf, cp), _failure_kinds(df, dp)
    extra: dict = {"session": session}
    for name in tbl.schema.names:
        if name == "pos":
            extra["pos"] = col(name).to_numpy().astype(np.int64)
        elif name == "grp":
            extra["group"] = obj(name)
    return ShadowAnswers(
        shadow=shadow,
        question=question,
        qtype=qtype,
        option_ids=opts,
        item_ids=obj("item_id"),
        ts=ts,
        seq=num("seq").astype(int) if n else np.zeros(0, int),
        champion_probs=cp,
        challenger_probs=dp,
        champion_failure=cf,
        challenger_failure=df,
        champion_logged=obj("logged_action"),
        outcome=outcome,
        champion_latency_ms=num("champion_latency_ms"),
        challenger_latency_ms=num("challenger_latency_ms"),
        champion_cost_usd=num("champion_cost_usd"),
        challenger_cost_usd=num("challenger_cost_usd"),
        champion_model=obj("champion_model"),
        challenger_model=obj("challenger_model"),
        extra=extra,
    )


def load_shadow(con: duckdb.DuckDBPyConnection, shadow: str, question: str) -> ShadowAnswers:
    """Arrays of ``question`` in session ``shadow`` for the report (all rows in memory: small sessions,
    notebooks; :func:`iter_shadow_chunks` streams them)."""
    session, schema, opts = _question_of(con, shadow, question)
    tbl = con.execute(
        _ROWS_SQL.format(extra="", requests="shadow_requests") + f" ORDER BY {_ORDER}",
        {"opts": opts, "q": question, "shadow": shadow},
    ).fetch_arrow_table()
    return _answers_from_table(tbl, shadow, question, schema.questions[question].type, opts, session)


_SPILL_DIR: str | None = None


def _spill_dir() -> str:
    """One spill directory per process (DuckDB cannot switch it once used), removed at exit."""
    global _SPILL_DIR
    if _SPILL_DIR is None:
        import atexit
        import shutil

        _SPILL_DIR = tempfile.mkdtemp(prefix="workbench-spill-")
        atexit.register(shutil.rmtree, _SPILL_DIR, True)
    return _SPILL_DIR


@contextmanager
def bounded_memory(con: duckdb.DuckDBPyConnection, memory_limit: str = "1GB"):
    """Run a streaming read with DuckDB's buffer pool capped (``memory_limit``), spilling to a temporary
    directory, insertion order not preserved and no progress bar; the settings are restored afterwards
    (except a spill directory already in use, which DuckDB cannot switch)."""
    with duckdb_settings(con, {"memory_limit": memory_limit, "preserve_insertion_order": False}):
        try:
            con.execute(f"SET temp_directory = '{_spill_dir()}'")
        except duckdb.NotImplementedException:  # the connection already spilled somewhere: keep that directory
            pass
        no_progress_bar(con)  # stdout may carry a JSON document
        yield con


def iter_side_answers(
    con: duckdb.DuckDBPyConnection, shadow: str, question: str, side: str, *, batch_rows: int = 50_000
) -> Iterator[dict]:
    """One side's stored answers of ``question`` in chunks (a plain scan, no join, any order):
    ``{"request_id": pa.Array, "probs": (m, k) NaN when failed, "failure_kind": (m,) object, "logged": (m,) object}``.

    Read through a cursor of its own, so the caller may write its per-row results through ``con``
    (:func:`side_rows_writer`) while the scan streams.
    """
    _, _, opts = _question_of(con, shadow, question)
    k = len(opts)
    cur = con.cursor()
    try:
        reader = cur.execute(
            "SELECT request_id, probs, failure_kind, logged_action FROM shadow_answers"
            " WHERE shadow = ? AND question = ? AND side = ?",
            [shadow, question, side],
        ).fetch_record_batch(batch_rows)
        for batch in reader:
            if not batch.num_rows:
                continue
            probs = batch.column(1)
            yield {
                "request_id": batch.column(0),
                "probs": _matrix(pa.chunked_array([probs]), batch.num_rows, k),
                "failure_kind": np.asarray(batch.column(2).to_pylist(), dtype=object),
                "logged": np.asarray(batch.column(3).to_pylist(), dtype=object),
            }
    finally:
        cur.close()


#: Per-row results of one side that :func:`shadow_pair_aggregates` pairs: the top choice and p_top of
#: the raw answer, the policy's decision before the model check, the logged action, the failure.
SIDE_ROWS_COLUMNS = {
    "request_id": "VARCHAR",
    "top": "INTEGER",
    "ptop": "DOUBLE",
    "acc_policy": "BOOLEAN",
    "opt_policy": "INTEGER",
    "has_log": "BOOLEAN",
    "log_accept": "BOOLEAN",
    "failed": "BOOLEAN",
    "kind": "VARCHAR",
}


@contextmanager
def side_rows_tables(con: duckdb.DuckDBPyConnection, sides: Iterable[str]):
    """Temporary tables (one per side, :data:`SIDE_ROWS_COLUMNS`) for per-row results; yields
    ``{side: append(pa.Table)}`` and ``{side: table name}``; dropped afterwards."""
    names = {side: f"_shadow_rows_{side}_{id(con):x}" for side in sides}
    cols = ", ".join(f"{c} {t}" for c, t in SIDE_ROWS_COLUMNS.items())
    for name in names.values():
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} ({cols})")

    def appender(name: str):
        def append(table: pa.Table) -> None:
            view = f"{name}_in"
            con.register(view, table)
            try:
                con.execute(f"INSERT INTO {name} SELECT {', '.join(SIDE_ROWS_COLUMNS)} FROM {view}")
            finally:
                con.unregister(view)

        return append

    try:
        yield {side: appender(n) for side, n in names.items()}, names
    finally:
        for name in names.values():
            con.execute(f"DROP TABLE IF EXISTS {name}")


def shadow_pair_aggregates(
    con: duckdb.DuckDBPyConnection,
    shadow: str,
    question: str,
    tables: dict[str, str],
    *,
    valid_models: dict[str, list[str]],
    window_starts: Callable[[int], list[int]] | None,
    period_us: int | None,
    groups: str | None = None,
) -> dict:
    """Pair both sides' per-row results with the session's requests and outcomes, and aggregate in SQL.

    A request without a row of a side is a failure of that side (``missing_answer``). A side with
    ``valid_models`` accepts nothing answered by another model (its top choice stands as the option),
    unless a logged action decided the row. Windows of the arrival order (per group) start at the
    positions ``window_starts(n)`` gives for a group of n requests, or are calendar periods of
    ``period_us`` microseconds since the epoch.

    Returns ``{group: {...counts...}}`` (group None without ``groups``): see the keys below.
    """
    _, _, opts = _question_of(con, shadow, question)
    part = "PARTITION BY g.value " if groups else ""
    join = f" LEFT JOIN {groups} g ON g.item_id = r.item_id" if groups else ""
    grp = "g.value" if groups else "NULL::VARCHAR"
    ok = {
        side: (f"coalesce(list_contains($models_{side}, r.{side}_model), false)" if valid_models.get(side) else "true")
        for side in SIDES
    }
    pair = f"_shadow_pair_{id(con):x}"
    c, d = tables["champion"], tables["challenger"]
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {pair} AS
        WITH r AS (
            SELECT r.request_id, r.item_id, r.ts, r.seq, r.champion_model, r.challenger_model, {grp} AS grp,
                   row_number() OVER ({part}ORDER BY {_ORDER}) - 1 AS pos
            FROM shadow_requests r{join} WHERE r.shadow = $shadow
        )
        SELECT r.grp, r.pos, r.seq, r.ts,
               coalesce(c.failed, true) AS fc, coalesce(d.failed, true) AS fd,
               CASE WHEN coalesce(c.failed, true) THEN coalesce(c.kind, 'missing_answer') END AS kc,
               CASE WHEN coalesce(d.failed, true) THEN coalesce(d.kind, 'missing_answer') END AS kd,
               coalesce(c.top, -1) AS tc, coalesce(d.top, -1) AS td, c.ptop AS pc, d.ptop AS pd,
               coalesce(c.has_log, false) AS lc, coalesce(d.has_log, false) AS ld,
               CASE WHEN coalesce(c.has_log, false) THEN c.log_accept
                    ELSE coalesce(c.acc_policy, false) AND {ok["champion"]} END
                   AND NOT coalesce(c.failed, true) AS ac,
               CASE WHEN coalesce(d.has_log, false) THEN d.log_accept
                    ELSE coalesce(d.acc_policy, false) AND {ok["challenger"]} END
                   AND NOT coalesce(d.failed, true) AS ad,
               coalesce(CASE WHEN coalesce(c.has_log, false) OR NOT {ok["champion"]} THEN c.top ELSE c.opt_policy END, -1)
                   AS oc,
               coalesce(CASE WHEN coalesce(d.has_log, false) OR NOT {ok["challenger"]} THEN d.top ELSE d.opt_policy END, -1)
                   AS od,
               coalesce(list_position($opts, o.outcome) - 1, -1) AS y
        FROM r LEFT JOIN {c} c ON c.request_id = r.request_id LEFT JOIN {d} d ON d.request_id = r.request_id
        LEFT JOIN shadow_outcomes o ON o.shadow = $shadow AND o.item_id = r.item_id AND o.question = $q""",
        {
            "shadow": shadow,
            "q": question,
            "opts": opts,
            **{f"models_{side}": list(valid_models[side]) for side in SIDES if valid_models.get(side)},
        },
    )
    try:
        out: dict = {}
        for row in con.execute(
            f"""SELECT grp, count(*), count(*) FILTER (WHERE fc), count(*) FILTER (WHERE fd),
                       count(*) FILTER (WHERE NOT fc AND NOT fd), count(*) FILTER (WHERE NOT fc AND NOT fd AND tc = td),
                       bool_or(lc), bool_or(ld),
                       count(*) FILTER (WHERE ad AND NOT ac), count(*) FILTER (WHERE ac AND NOT ad),
                       count(*) FILTER (WHERE ac AND ad AND oc = od), count(*) FILTER (WHERE ac AND ad AND oc <> od),
                       count(*) FILTER (WHERE NOT ac AND NOT ad), count(*) FILTER (WHERE y >= 0),
                       count(*) FILTER (WHERE fc AND NOT fd), count(*) FILTER (WHERE fd AND NOT fc)
                FROM {pair} GROUP BY grp"""
        ).fetchall():
            out[row[0]] = {
                "n": row[1],
                "n_failed": [row[2], row[3]],
                "n_both": row[4],
                "agree": row[5],
                "has_log": [bool(row[6]), bool(row[7])],
                "directional": list(row[8:13]),
                "n_known": row[13],
                "n_failed_alone": [row[14], row[15]],
                "kinds": [{}, {}],
                "flips": [],
                "load_cells": [],
                "error_cells": [],
                "windows": {},
            }

        def rows(sql: str) -> list:
            return con.execute(sql).fetchall()

        for i, (f, kcol) in enumerate((("fc", "kc"), ("fd", "kd"))):
            for g, kind, n in rows(f"SELECT grp, {kcol}, count(*) FROM {pair} WHERE {f} GROUP BY ALL"):
                out[g]["kinds"][i][str(kind)] = int(n)
        for g, tc, td, n in rows(f"SELECT grp, tc, td, count(*) FROM {pair} WHERE NOT fc AND NOT fd GROUP BY ALL"):
            out[g]["flips"].append((int(tc), int(td), int(n)))
        for g, ac, ad, n in rows(f"SELECT grp, ac, ad, count(*) FROM {pair} GROUP BY ALL"):
            out[g]["load_cells"].append((int(ac) * 2 + int(ad), int(n)))
        cell = "({a}::INTEGER + ({a} AND {o} <> y)::INTEGER + 3 * ({t} = y)::INTEGER)"
        for g, cc, cd, n in rows(
            f"SELECT grp, {cell.format(a='ac', o='oc', t='tc')}, {cell.format(a='ad', o='od', t='td')}, count(*)"
            f" FROM {pair} WHERE y >= 0 GROUP BY ALL"
        ):
            out[g]["error_cells"].append((int(cc), int(cd), int(n)))
        # windows: equal-count (edges of each group's arrival order) or calendar periods
        if period_us is not None:
            win = f"CASE WHEN ts IS NOT NULL THEN (epoch_us(ts) // {int(period_us)}) * {int(period_us)} END"
            wsrc = f"(SELECT *, {win} AS win FROM {pair})"
        else:
            assert window_starts is not None
            lists = [(g, starts) for g, starts in ((g, window_starts(v["n"])) for g, v in out.items()) if starts]
            starts_tbl = pa.table(
                {"g": pa.array([g for g, _ in lists], pa.string()), "starts": pa.array([s for _, s in lists])}
            )
            con.register(f"{pair}_starts", starts_tbl)
            wsrc = (
                f"(SELECT p.*, list_count(list_filter(s.starts, e -> e <= p.pos)) - 1 AS win FROM {pair} p"
                f" JOIN {pair}_starts s ON s.g IS NOT DISTINCT FROM p.grp)"
            )
        try:
            for g, w, n, first_pos, first_seq, lo, hi in rows(
                f"SELECT grp, win, count(*), min(pos), arg_min(seq, pos), epoch_us(min(ts)), epoch_us(max(ts))"
                f" FROM {wsrc} WHERE win IS NOT NULL GROUP BY ALL"
            ):
                out[g]["windows"][int(w)] = {
                    "n": int(n),
                    "first_pos": int(first_pos),
                    "first_seq": int(first_seq),
                    "ts_lo": np.iinfo(np.int64).max if lo is None else int(lo),
                    "ts_hi": np.iinfo(np.int64).min if hi is None else int(hi),
                    "hist": [np.zeros(10, np.int64), np.zeros(10, np.int64)],
                    "psum": [0.0, 0.0],
                }
            for i, p in enumerate(("pc", "pd")):
                for g, w, b, n, total in rows(
                    f"SELECT grp, win, least(floor(least(greatest({p}, 0.0), 1.0) * 10), 9)::INTEGER, count(*),"
                    # an exact DECIMAL sum and a fixed row order: DuckDB's parallel double sum
                    # changes in the last bit from run to run, so two surfaces disagreed
                    f" sum({p}::DECIMAL(38, 18))::DOUBLE"
                    f" FROM {wsrc} WHERE win IS NOT NULL AND isfinite({p}) GROUP BY ALL ORDER BY ALL"
                ):
                    entry = out[g]["windows"][int(w)]
                    entry["hist"][i][int(b)] += int(n)
                    entry["psum"][i] += float(total)
        finally:
            if period_us is None:
                con.unregister(f"{pair}_starts")
        return out
    finally:
        con.execute(f"DROP TABLE IF EXISTS {pair}")


@contextmanager
def register_slice_values(con: duckdb.DuckDBPyConnection, values: pd.DataFrame):
    """Register ``values`` (``item_id``, ``value``; the first value of an item wins, values as text) as a
    relation for :func:`iter_shadow_chunks`'s ``groups``; yields its name, unregisters it afterwards."""
    frame = values[["item_id", "value"]].drop_duplicates("item_id", keep="first")
    v = frame["value"].to_numpy(dtype=object)
    missing = pd.isna(pd.Series(v, dtype=object)).to_numpy()
    table = pa.table(
        {
            "item_id": pa.array(frame["item_id"].astype(str).tolist(), pa.string()),
            "value": pa.array([None if m else str(x) for m, x in zip(missing, v)], pa.string()),
        }
    )
    name = f"_shadow_slice_{id(table):x}"
    con.register(name, table)
    try:
        yield name
    finally:
        con.unregister(name)


def shadow_request_figures(con: duckdb.DuckDBPyConnection, shadow: str, groups: str | None = None) -> dict:
    """Per group (``None`` = the whole session): request count, latency p50/p95/mean and count per side
    (linear interpolation, as numpy's percentile), mean cost per side (finite values only)."""
    join = f" LEFT JOIN {groups} g ON g.item_id = r.item_id" if groups else ""
    key = "g.value" if groups else "NULL"
    sides = []
    for side in SIDES:
        lat = f"CASE WHEN isfinite(r.{side}_latency_ms) THEN r.{side}_latency_ms END"
        cost = f"CASE WHEN isfinite(r.{side}_cost_usd) THEN r.{side}_cost_usd END"
        sides.append(f"count({lat}), quantile_cont({lat}, 0.5), quantile_cont({lat}, 0.95), avg({lat}), avg({cost})")
    rows = con.execute(
        f"SELECT {key}, count(*), {', '.join(sides)} FROM shadow_requests r{join} WHERE r.shadow = ? GROUP BY 1",
        [shadow],
    ).fetchall()
    out = {}
    for row in rows:
        fig: dict = {"n": int(row[1])}
        for i, side in enumerate(SIDES):
            n_lat, p50, p95, mean, cost = row[2 + 5 * i : 7 + 5 * i]
            fig[side] = {
                "latency": {"n": int(n_lat), "p50": p50, "p95": p95, "mean": mean}
                if n_lat
                else {"n": 0, "p50": None, "p95": None, "mean": None},
                "cost_mean": cost,
            }
        out[row[0]] = fig
    return out


def request_state_lengths(con: duckdb.DuckDBPyConnection, shadow: str) -> pd.DataFrame:
    """``item_id``, ``value``: each logged request's state length in characters (the text of a string
    state, the JSON text otherwise, as ``state_length`` on a dataset), None when no state was logged."""
    get_session(con, shadow)
    return con.execute(
        """SELECT item_id, CASE WHEN json_type(state) = 'VARCHAR' THEN length(state->>'$')
                                ELSE length(CAST(state AS VARCHAR)) END AS value
           FROM shadow_requests WHERE shadow = ? ORDER BY item_id""",
        [shadow],
    ).df()


# -- a new challenger over a session's logged states ---------------------------------------------
#: The id a rerun gives each request of a session: its item id, or its request id when the item was
#: decided by several requests (each may carry another state, and each gets its own answer).
_RERUN_ID = "CASE WHEN count(*) OVER (PARTITION BY item_id) > 1 THEN request_id ELSE item_id END"


def session_states(con: duckdb.DuckDBPyConnection, shadow: str) -> tuple[pd.DataFrame, str]:
    """The states session ``shadow`` logged, as an importable frame, and which column holds them.

    Columns: ``item_id`` (the request id for an item with several requests), the state (``text`` when every state is a JSON string, else ``state``
    as JSON text), and ``outcome__<question>`` (the known outcome, empty when unknown) per question.
    """
    schema = session_schema(con, shadow)
    outcome_cols = ", ".join(
        f'max(o.outcome) FILTER (WHERE o.question = ${i}) AS "outcome__{q}"'
        for i, q in enumerate(schema.question_ids, start=2)
    )
    params = [shadow, *schema.question_ids]
    frame = con.execute(
        f"""SELECT r.rerun_id AS item_id, r.state::VARCHAR AS state, json_type(r.state) = 'VARCHAR' AS is_text,
                   r.state->>'$' AS text{", " + outcome_cols if outcome_cols else ""}
            FROM (SELECT *, {_RERUN_ID} AS rerun_id FROM shadow_requests WHERE shadow = $1) r
            LEFT JOIN shadow_outcomes o ON o.shadow = r.shadow AND o.item_id = r.item_id
            WHERE r.state IS NOT NULL
            GROUP BY ALL ORDER BY min(r.seq), r.rerun_id""",
        params,
    ).df()
    if frame.empty:
        raise WorkbenchError(
            f"shadow session {shadow!r} logged no states", hint="only sessions with logged states can be rerun"
        )
    text = bool(frame["is_text"].all())
    frame = frame.drop(columns=["is_text", "state" if text else "text"])
    return frame.fillna(""), ("text" if text else "state")


def rechallenge_session(
    con: duckdb.DuckDBPyConnection, *, source: str, target: str, challenger_run: str, replace: bool = False
) -> dict:
    """Make session ``target``: the champion side of ``source`` as logged, the challenger side from the
    answers of ``challenger_run`` (a run over ``source``'s states, item ids kept). Outcomes are copied."""
    session = get_session(con, source)
    schema = session_schema(con, source)
    run = get_run(con, challenger_run)
    qs = schema.question_ids
    with transaction(con):
        _create_session(
            con,
            target,
            source="rerun",
            schema=schema,
            champion=session["champion"],
            challenger=run["run_id"],
            params={"from_session": source, "challenger_run": run["run_id"]},
            replace=replace,
        )
        con.execute(
            f"""INSERT INTO shadow_requests BY NAME
               WITH per AS (
                   SELECT item_id, max(latency_ms) AS lat, sum(cost_usd) AS cost, any_value(model) AS model,
                          bool_or(probs IS NULL) AS failed, any_value(failure_kind) AS kind
                   FROM answers WHERE run_id = $run AND list_contains($qs, question) GROUP BY item_id
               )
               SELECT r.* EXCLUDE (rerun_id) REPLACE ($target AS shadow, per.lat AS challenger_latency_ms, per.cost AS challenger_cost_usd,
                                   per.model AS challenger_model, NULL AS challenger_response,
                                   CASE WHEN per.item_id IS NULL OR per.failed THEN NULL ELSE 200 END AS challenger_status,
                                   CASE WHEN per.item_id IS NULL THEN 'missing_answer' WHEN per.failed THEN per.kind END
                                       AS challenger_error)
               FROM (SELECT *, {_RERUN_ID} AS rerun_id FROM shadow_requests WHERE shadow = $source) r
               LEFT JOIN per ON per.item_id = r.rerun_id""",
            {"run": run["run_id"], "qs": qs, "target": target, "source": source},
        )
        con.execute(
            """INSERT INTO shadow_answers BY NAME
               SELECT * REPLACE ($target AS shadow) FROM shadow_answers WHERE shadow = $source AND side = 'champion'""",
            {"target": target, "source": source},
        )
        con.execute(
            f"""INSERT INTO shadow_answers (shadow, request_id, item_id, question, side, probs, failure_kind)
               SELECT $target, r.request_id, r.item_id, q.question, 'challenger', a.probs,
                      CASE WHEN a.probs IS NULL THEN coalesce(a.failure_kind, 'missing_answer') END
               FROM (SELECT *, {_RERUN_ID} AS rerun_id FROM shadow_requests WHERE shadow = $target) r
               CROSS JOIN (SELECT unnest($qs) AS question) q
               LEFT JOIN answers a ON a.run_id = $run AND a.item_id = r.rerun_id AND a.question = q.question""",
            {"run": run["run_id"], "qs": qs, "target": target},
        )
        con.execute(
            """INSERT INTO shadow_outcomes BY NAME
               SELECT * REPLACE ($target AS shadow) FROM shadow_outcomes WHERE shadow = $source""",
            {"target": target, "source": source},
        )
    n, n_out = con.execute(
        "SELECT (SELECT count(*) FROM shadow_requests WHERE shadow = $t),"
        " (SELECT count(*) FROM shadow_outcomes WHERE shadow = $t AND outcome IS NOT NULL)",
        {"t": target},
    ).fetchone() or (0, 0)
    return {"shadow": target, "kind": "rerun", "n_requests": int(n), "n_outcomes": int(n_out)}
