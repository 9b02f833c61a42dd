"""The call cache, the runner's batched writes, its crash journal, and run export.

Every successful provider response is a row of ``calls`` keyed by ``cache_key`` (computed by
``workbench.runner.plan.cache_key``). The runner writes calls and answers together in one
transaction per batch (:func:`write_batch`).

Between two batches, responses live in memory; so that a SIGKILL does not make the next
``--resume`` pay for them again, each response is also appended to a small journal file next to
the database (``<db>.journal/<run_id>.<n>.jsonl``, one JSON line per call — its response text on the
line after, as received — no secrets: the same fields as ``calls``). A batch commit deletes the
journal segment it covered; on start-up, :func:`recover_journal` moves any leftover segment into
``calls`` (DuckDB's file lock means any leftover belongs to a process that is gone).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from workbench.schema.answers import entropy, top_two
from workbench.store.db import ANSWERS_TABLE, transaction

CALL_FIELDS = [
    "cache_key",
    "provider",
    "model",
    "response",
    "model_answered",
    "request_id",
    "latency_ms",
    "input_tokens",
    "cost_usd",
    "run_id",
    "emulated",
]
_CALL_SCHEMA = pa.schema(
    [
        ("cache_key", pa.string()),
        ("provider", pa.string()),
        ("model", pa.string()),
        ("response", pa.string()),
        ("model_answered", pa.string()),
        ("request_id", pa.string()),
        ("latency_ms", pa.float64()),
        ("input_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("run_id", pa.string()),
        ("emulated", pa.bool_()),
    ]
)
#: The Arrow schema of a batch of answer rows as written to the answers table (one row per item and question).
ANSWER_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("item_id", pa.string()),
        ("question", pa.string()),
        ("probs", pa.list_(pa.float64())),
        ("p_top", pa.float64()),
        ("margin", pa.float64()),
        ("top_option", pa.int32()),
        ("entropy", pa.float64()),
        ("deviation", pa.float64()),
        ("vendor_confidence", pa.float64()),
        ("failure_kind", pa.string()),
        ("failure_message", pa.string()),
        ("model", pa.string()),
        ("latency_ms", pa.float64()),
        ("input_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("cache_key", pa.string()),
        ("cached", pa.bool_()),
    ]
)
ANSWER_FIELDS = [f.name for f in ANSWER_SCHEMA]


# -- paths ---------------------------------------------------------------------------------------
def database_path(con: duckdb.DuckDBPyConnection) -> Path | None:
    """The file behind ``con``, or None for an in-memory database."""
    row = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return Path(row[0]) if row and row[0] else None


def journal_dir(con: duckdb.DuckDBPyConnection) -> Path | None:
    db = database_path(con)
    return None if db is None else db.with_name(db.name + ".journal")


# -- cache lookups -------------------------------------------------------------------------------
def lookup_calls(con: duckdb.DuckDBPyConnection, keys: Sequence[str]) -> dict[str, dict]:
    """Cached calls for ``keys`` -> {cache_key: row dict}; keys not cached are absent."""
    if len(keys) == 0:
        return {}
    con.register("_wanted_keys", pa.table({"k": pa.array(list(keys), type=pa.string())}))
    try:
        tbl = con.execute(
            "SELECT c.cache_key, CAST(c.response AS VARCHAR) AS response, c.model_answered, c.request_id,"
            " c.latency_ms, c.input_tokens, c.cost_usd, c.run_id, coalesce(c.emulated, false) AS emulated FROM calls c"
            " JOIN (SELECT DISTINCT k FROM _wanted_keys) w ON w.k = c.cache_key"
        ).fetch_arrow_table()
    finally:
        con.unregister("_wanted_keys")
    rows = tbl.to_pylist()
    return {r["cache_key"]: r for r in rows}


def answered_questions(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, set[str]]:
    """For a run: item id -> questions that have an answer (failures excluded)."""
    tbl = con.execute(
        "SELECT item_id, list(question) AS qs FROM answers WHERE run_id = ? AND probs IS NOT NULL GROUP BY item_id",
        [run_id],
    ).fetch_arrow_table()
    return {i: set(q) for i, q in zip(tbl.column("item_id").to_pylist(), tbl.column("qs").to_pylist())}


def _missing_rows(
    con: duckdb.DuckDBPyConnection, run_id: str, item_ids: Sequence[str], questions: Sequence[str], select: str
) -> list[tuple]:
    """``SELECT {select}`` over the planned pairs of ``run_id`` without a row (the plan registered meanwhile)."""
    con.register("_planned_items", pa.table({"item_id": pa.array(list(dict.fromkeys(item_ids)), type=pa.string())}))
    con.register(
        "_planned_questions", pa.table({"question": pa.array(list(dict.fromkeys(questions)), type=pa.string())})
    )
    try:
        return con.execute(f"SELECT {select} {_MISSING_SQL}", [run_id]).fetchall()
    finally:
        con.unregister("_planned_items")
        con.unregister("_planned_questions")


_MISSING_SQL = (
    "FROM _planned_items CROSS JOIN _planned_questions p"
    " ANTI JOIN (SELECT item_id, question FROM answers WHERE run_id = ?) a"
    " ON a.item_id = _planned_items.item_id AND a.question = p.question"
)


def count_missing_answers(
    con: duckdb.DuckDBPyConnection, run_id: str, item_ids: Sequence[str], questions: Sequence[str]
) -> int:
    """How many planned item × question pairs of ``run_id`` have no row in ``answers`` (neither an answer
    nor a failure); 0 when every pair of ``item_ids`` × ``questions`` has its row."""
    if len(item_ids) == 0 or len(questions) == 0:
        return 0
    rows = _missing_rows(con, run_id, item_ids, questions, "count(*)")
    return int(rows[0][0]) if rows else 0


def missing_answers(
    con: duckdb.DuckDBPyConnection, run_id: str, item_ids: Sequence[str], questions: Sequence[str]
) -> dict[str, set[str]]:
    """The planned pairs counted by :func:`count_missing_answers`: item id -> questions without a row."""
    if len(item_ids) == 0 or len(questions) == 0:
        return {}
    rows = _missing_rows(con, run_id, item_ids, questions, "_planned_items.item_id, p.question")
    out: dict[str, set[str]] = {}
    for item_id, question in rows:
        out.setdefault(item_id, set()).add(question)
    return out


# -- writes ---------------------------------------------------------------------------------------
def has_answers(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether ``run_id`` has any answer or failure row yet (a resumed run must replace, not append)."""
    row = con.execute("SELECT EXISTS (SELECT 1 FROM answers WHERE run_id = ?)", [run_id]).fetchone()
    return bool(row and row[0])


def answered_model(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The model most answers of ``run_id`` name (the service may answer with another than asked)."""
    row = con.execute("SELECT mode(model) FROM answers WHERE run_id = ? AND model IS NOT NULL", [run_id]).fetchone()
    return row[0] if row and row[0] else None


def run_is_emulated(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether any answer of ``run_id`` came from a call that ``workbench emulator`` answered."""
    row = con.execute(
        "SELECT coalesce(bool_or(c.emulated), false) FROM answers a JOIN calls c ON c.cache_key = a.cache_key"
        " WHERE a.run_id = ?",
        [run_id],
    ).fetchone()
    return bool(row[0]) if row else False


def top_option(top: np.ndarray, p_top: np.ndarray) -> np.ndarray:
    """The ``answers.top_option`` column (int32, shape (n,)): the arg-max ``top`` (ties to the first option)
    where the row's top probability ``p_top`` is finite, -1 where it is not (a row holding a NaN or an
    infinity, which every reader counts as a failure, as it counts a missing vector)."""
    return np.where(np.isfinite(p_top), top, -1).astype(np.int32)


def answers_table(rows: Sequence[dict]) -> pa.Table:
    """Arrow table of answer rows; ``p_top``/``margin``/``top_option``/``entropy`` computed here, vectorised.

    Each row has the keys of :data:`ANSWER_FIELDS` (summaries may be absent). Rows with
    ``probs is None`` are failures and get NULL summaries. ``probs`` is a float vector: a numpy array
    (what the runner buffers; Arrow converts it without a Python float per value) or a list.
    """
    n = len(rows)
    p_top_, margin_, entropy_ = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    top_ = np.full(n, -1, dtype=np.int32)
    by_width: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        if r.get("probs") is not None:
            by_width.setdefault(len(r["probs"]), []).append(i)
    for idx in by_width.values():
        m = np.array([rows[i]["probs"] for i in idx], dtype=float)
        top, p1, p2 = top_two(m)
        p_top_[idx], margin_[idx], entropy_[idx] = p1, p1 - p2, entropy(m)
        top_[idx] = top_option(top, p1)
    cols: dict[str, Any] = {}
    for f in ANSWER_SCHEMA:
        if f.name == "p_top":
            cols[f.name] = pa.array(p_top_, type=pa.float64(), from_pandas=True)
        elif f.name == "margin":
            cols[f.name] = pa.array(margin_, type=pa.float64(), from_pandas=True)
        elif f.name == "top_option":
            cols[f.name] = pa.array(top_, type=pa.int32())
        elif f.name == "entropy":
            cols[f.name] = pa.array(entropy_, type=pa.float64(), from_pandas=True)
        else:
            cols[f.name] = pa.array([r.get(f.name) for r in rows], type=f.type)
    return pa.table(cols, schema=ANSWER_SCHEMA)


def calls_table(rows: Sequence[dict]) -> pa.Table:
    return pa.table(
        {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in _CALL_SCHEMA}, schema=_CALL_SCHEMA
    )


def write_batch(
    con: duckdb.DuckDBPyConnection, calls: Sequence[dict], answers: Sequence[dict], *, replace: bool = True
) -> None:
    """Insert new calls (ignoring keys already cached) and answers in one transaction.

    ``replace=True`` first deletes earlier rows of the same (run, item, question) — needed when a
    run is resumed; a fresh run skips that scan.
    """
    if not calls and not answers:
        return
    ctbl, atbl = calls_table(calls), answers_table(answers)
    con.register("_new_calls", ctbl)
    con.register("_new_answers", atbl)
    try:
        with transaction(con):
            if calls:
                # one row per key (a key twice in one INSERT fails even with OR IGNORE); a batch whose keys
                # are distinct, as a runner's are, skips the DISTINCT ON that copies every response text
                distinct = len({r.get("cache_key") for r in calls}) == len(calls)
                con.execute(
                    f"INSERT OR IGNORE INTO calls ({', '.join(CALL_FIELDS)}) SELECT cache_key, provider,"
                    " model, response::JSON, model_answered, request_id, latency_ms, input_tokens, cost_usd,"
                    " run_id, coalesce(emulated, false) FROM "
                    + ("_new_calls" if distinct else "(SELECT DISTINCT ON (cache_key) * FROM _new_calls)")
                )
            if answers and replace:
                con.execute(
                    f"DELETE FROM {ANSWERS_TABLE} WHERE (run_id, item_id, question) IN "
                    "(SELECT run_id, item_id, question FROM _new_answers)"
                )
            if answers:
                con.execute(
                    f"INSERT INTO {ANSWERS_TABLE} ({', '.join(ANSWER_FIELDS)}) SELECT {', '.join(ANSWER_FIELDS)}"
                    " FROM _new_answers"
                )
    finally:
        con.unregister("_new_calls")
        con.unregister("_new_answers")


# -- journal -------------------------------------------------------------------------------------
#: A JSON string literal exactly as ``json.dumps(..., ensure_ascii=False)`` writes it (the C encoder).
_json_str = json.encoder.encode_basestring


class CallJournal:
    """Append-only segments of call rows written between two batch commits (see module docstring).

    Writes go straight to the OS (unbuffered ``os.write``): a killed process loses at most the
    record being written, which :func:`recover_journal` skips. (The page cache survives SIGKILL; no
    fsync per call.)

    Besides responses the journal records ``{"sent": key}`` before a request leaves and
    ``{"settled": key}`` when it ended without a response worth keeping (an error status): a
    ``sent`` marker with neither is a call in flight. :meth:`rotate` carries the markers of calls
    still in flight into the new segment, so deleting a committed segment never loses them.
    """

    def __init__(self, directory: Path | None, run_id: str):
        self.directory = directory
        self.run_id = run_id
        #: segment names are ``<writer>.<n>.jsonl`` (see :func:`recover_journal`'s ``writer``)
        self.writer = f"{run_id}.{os.getpid()}"
        self._seq = 0
        self._fd: int | None = None
        self._path: Path | None = None
        self.in_flight: dict[str, int] = {}  # cache_key -> requests in flight with that key
        # the tail of a marker line: the bytes json.dumps writes for ``"run_id": run_id`` and the end
        self._marker_tail = f',"run_id":{_json_str(run_id)}}}\n'
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._open()

    def _open(self) -> None:
        assert self.directory is not None
        self._seq += 1
        self._path = self.directory / f"{self.writer}.{self._seq}.jsonl"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _write(self, doc: dict) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode())

    def _marker(self, kind: str, cache_key: str) -> None:
        """``{kind: cache_key, "run_id": run_id}`` as :meth:`_write` would write it, without building a dict."""
        if self._fd is not None:
            os.write(self._fd, f'{{"{kind}":{_json_str(cache_key)}{self._marker_tail}'.encode())

    def sent(self, cache_key: str) -> None:
        """Record that a request for ``cache_key`` is about to leave (call before sending)."""
        self.in_flight[cache_key] = self.in_flight.get(cache_key, 0) + 1
        self._marker("sent", cache_key)

    def _land(self, cache_key: str | None) -> None:
        n = self.in_flight.get(cache_key or "", 0)
        if n > 1:
            self.in_flight[cache_key or ""] = n - 1
        else:
            self.in_flight.pop(cache_key or "", None)

    def settled(self, cache_key: str) -> None:
        """The request for ``cache_key`` ended without a response to keep (an error, a partial answer)."""
        if cache_key in self.in_flight:
            self._land(cache_key)
            self._marker("settled", cache_key)

    def append(self, call: dict) -> None:
        """Journal a call row. Its ``response`` text goes on a line of its own, as it is (no JSON string
        escaping of a few kB per call), after the row's other fields and ``response_chars`` (its length:
        a torn record is told from a whole one); a text holding a line break is written inside the row."""
        self._land(call.get("cache_key"))
        text = call.get("response")
        if self._fd is None or not isinstance(text, str) or "\n" in text or "\r" in text:
            self._write(call)
            return
        head = {k: v for k, v in call.items() if k != "response"}
        head["response_chars"] = len(text)
        line = json.dumps(head, ensure_ascii=False, separators=(",", ":"))
        os.write(self._fd, f"{line}\n{text}\n".encode())  # one write: a kill leaves a prefix of the record

    def rotate(self) -> Path | None:
        """Start a new segment; return the finished one (delete it after its batch commits)."""
        if self._fd is None:
            return None
        os.close(self._fd)
        done = self._path
        self._open()
        for key, n in self.in_flight.items():  # still in flight: their markers move to the new segment
            for _ in range(n):
                self._marker("sent", key)
        return done

    def close(self, *, delete: bool) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if delete and self._path is not None:
                self._path.unlink(missing_ok=True)
                try:
                    self._path.parent.rmdir()  # only when empty: other runs' segments stay
                except OSError:
                    pass


def recover_journal(con: duckdb.DuckDBPyConnection, *, writer: str | None = None, in_flight_billed: bool = True) -> int:
    """Move calls left in journal segments by a killed process into ``calls``; return how many.

    Requests the segments show as sent but never answered nor settled were in flight when the
    process died: the provider billed them and ``--resume`` sends them again, so they are recorded
    in ``billed_unanswered`` (and counted by :func:`run_summary`).

    ``writer`` (a :attr:`CallJournal.writer`) limits the recovery to that writer's segments: the
    runner folds in its own leftovers at the end of a session, while other runs of the same store
    may be writing theirs. ``in_flight_billed=False`` is for that case: every request of the session
    has settled, so a ``sent`` marker left without its answer in an older segment is not a call in
    flight (its answer went to a later segment, already committed and deleted).
    """
    directory = journal_dir(con)
    if directory is None or not directory.exists():
        return 0
    segments = sorted(directory.glob("*.jsonl"))
    if writer is not None:
        segments = [s for s in segments if s.stem.rpartition(".")[0] == writer]
    rows: list[dict] = []
    lost: list[tuple[str, str, str]] = []
    # a writer's newest segment carries the markers of every call still in flight at its last
    # rotation (rotate() rewrites them), so in-flight calls are read from that segment alone
    newest: dict[str, tuple[int, Path]] = {}
    for seg in segments:
        writer, _, seq = seg.stem.rpartition(".")
        n = int(seq) if seq.isdigit() else 0
        if writer not in newest or n > newest[writer][0]:
            newest[writer] = (n, seg)
    last_segments = {p for _, p in newest.values()}
    for seg in segments:
        sent: dict[tuple[str, str], int] = {}
        # lines end at "\n" only: a JSON string may hold U+2028 or another character splitlines() breaks at
        lines = iter(seg.read_bytes().decode("utf-8", errors="replace").split("\n"))
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the torn last line of a killed writer
            if not isinstance(row, dict):
                continue
            if "response_chars" in row:  # CallJournal.append: the response text is the next line
                chars, text = row.pop("response_chars"), next(lines, None)
                if text is None or type(chars) is not int or len(text) != chars:
                    continue  # a torn record: its call counts as in flight
                row["response"] = text
            run = str(row.get("run_id") or "")
            if row.get("sent"):
                key = (run, str(row["sent"]))
                sent[key] = sent.get(key, 0) + 1
            elif row.get("settled") or (row.get("cache_key") and row.get("response") is not None):
                key = (run, str(row.get("settled") or row["cache_key"]))
                if sent.get(key):
                    sent[key] -= 1
                if row.get("cache_key") and row.get("response") is not None:
                    rows.append(row)
        if seg in last_segments and in_flight_billed:
            lost += [(run, key, f"{seg.name}#{i}") for (run, key), n in sent.items() for i in range(n)]
    if rows:
        write_batch(con, rows, [])
    if lost:
        con.executemany(
            "INSERT INTO billed_unanswered (run_id, cache_key, segment) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [list(x) for x in lost],
        )
    for seg in segments:
        seg.unlink(missing_ok=True)
    return len(rows)


def run_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """Answered / failed by kind, tokens, cost (all and paid by this run), latency p50/p95 of calls.

    A calibrated view that applies its calibrators on read reports its parent's answers.
    """
    from workbench.store.runs import answer_source, get_run

    run_id = answer_source(con, get_run(con, run_id))[0]
    row = con.execute(
        "SELECT count(*) FILTER (WHERE probs IS NOT NULL), count(*) FILTER (WHERE probs IS NULL),"
        " sum(input_tokens), sum(cost_usd), sum(cost_usd) FILTER (WHERE NOT coalesce(cached, false)),"
        " count(*) FILTER (WHERE cost_usd IS NULL AND probs IS NOT NULL),"
        " count(DISTINCT item_id)"
        " FROM answers WHERE run_id = ?",
        [run_id],
    ).fetchone()
    assert row is not None  # an aggregate query always returns one row
    kinds = dict(
        con.execute(
            "SELECT failure_kind, count(*) FROM answers WHERE run_id = ? AND probs IS NULL GROUP BY 1 ORDER BY 2 DESC",
            [run_id],
        ).fetchall()
    )
    lat = con.execute(
        "SELECT quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95) FROM ("
        " SELECT cache_key, any_value(latency_ms) AS latency_ms FROM answers"
        " WHERE run_id = ? AND cache_key IS NOT NULL AND latency_ms IS NOT NULL GROUP BY cache_key)",
        [run_id],
    ).fetchone()
    lost = con.execute(
        "SELECT count(*), sum(c.cost_usd), count(*) FILTER (WHERE c.cost_usd IS NULL)"
        " FROM billed_unanswered b LEFT JOIN calls c USING (cache_key) WHERE b.run_id = ?",
        [run_id],
    ).fetchone()
    n_lost = int(lost[0] or 0) if lost else 0
    # an in-flight call's price is the price of the identical request --resume sent again
    lost_cost = float(lost[1]) if lost and lost[1] is not None else (0.0 if n_lost == 0 else None)
    paid = float(row[4]) if row[4] is not None else None
    return {
        "billed_unanswered_calls": n_lost,
        "billed_unanswered_cost_usd": lost_cost,
        "billed_unanswered_unknown_cost": int(lost[2] or 0) if lost and n_lost else 0,
        "cost_billed_usd": None if paid is None and not lost_cost else (paid or 0.0) + (lost_cost or 0.0),
        "items": int(row[6] or 0),
        "answered": int(row[0] or 0),
        "failed": int(row[1] or 0),
        "failed_by_kind": {str(k): int(v) for k, v in kinds.items()},
        "input_tokens": int(row[2]) if row[2] is not None else 0,
        "cost_usd": float(row[3]) if row[3] is not None else None,
        "cost_paid_usd": float(row[4]) if row[4] is not None else None,
        "answers_with_unknown_cost": int(row[5] or 0),
        "latency_p50_ms": float(lat[0]) if lat and lat[0] is not None else None,
        "latency_p95_ms": float(lat[1]) if lat and lat[1] is not None else None,
    }


# -- training data for in-process baselines ------------------------------------------------------
def majority_labels(con: duckdb.DuckDBPyConnection, dataset: str, version: int, splits: Sequence[str]):
    """Majority gold option per (item, question) for items of ``splits`` (ties: smallest option id).

    Returns a DataFrame with columns item_id, question, option_id (used by the UI's loaders).
    """
    from workbench.store.datasets import load_labels

    return load_labels(con, dataset, int(version), splits=list(splits))[["item_id", "question", "option_id"]]
