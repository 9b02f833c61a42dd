"""Reading and checking outcome files for ``workbench monitor``: every line is accepted, or rejected and counted.

An outcome says what a logged decision should have been: ``decision_id`` (a non-empty string),
``question`` (optional when the policy has one question), ``outcome`` (an option id of that question,
exactly as the policy spells it) and/or ``override`` (true when a human changed an auto-accepted
decision). Files are JSON Lines (``.jsonl``/``.json``/``.ndjson``, optionally ``.gz``), CSV (``.csv``,
``.csv.gz``; every field is text, ``override`` is ``true``/``false``/``1``/``0`` or empty) or Parquet.

A line that is not such an outcome is never scored: it is rejected and counted by reason
(:data:`REASONS`), with the first few examples as ``file:line`` (``file:row N`` for Parquet). When
more than ``max_invalid_share`` (default :data:`MAX_INVALID_OUTCOME_SHARE`) of the lines read are
rejected, the whole read fails with one :class:`~workbench.errors.OutcomeError` line naming the
first bad lines: a file written with mis-cased options must not turn into 100% errors and an alarm.

Lines that are well-formed but say nothing usable are counted apart, not as invalid: blank lines,
outcomes of a question the policy does not have (another policy's file), and lines with neither an
outcome nor an override. Several reports of one decision and question are allowed (a later file, then
a later line, wins); the earlier ones are counted as ``superseded``.

One reader serves both monitor sources (the scratch DuckDB database of
:func:`workbench.monitor.report.monitor` and the engines of
:func:`workbench.engines.monitoring.monitor_on_engine`), so both see the same outcomes.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import OptionError, OutcomeError

#: Largest share of invalid outcome lines that is reported and skipped; above it the read fails (exit 2).
MAX_INVALID_OUTCOME_SHARE = 0.01
#: Examples of rejected lines kept per read (and named in an error).
N_EXAMPLES = 5
#: Why a line was rejected (counted towards the invalid share).
REASONS = {
    "not_json": "not JSON (a torn or corrupt line)",
    "not_an_object": "not a JSON object",
    "duplicate_key": "a key given twice",
    "missing_decision_id": "no decision_id (missing, null or empty)",
    "bad_decision_id": "decision_id is not a string",
    "bad_question": "question is not a string (or missing with several questions)",
    "not_an_option": "outcome is not an option of its question",
    "outcome_not_a_string": "outcome is not a string",
    "bad_override": "override is not a boolean",
}
#: Lines counted but neither scored nor invalid.
IGNORED = {
    "blank": "blank line",
    "other_question": "a question the policy does not have",
    "nothing_reported": "neither an outcome nor an override",
}
_ORD_SHIFT = 40  # ord = file index << 40 | line number: later files win, then later lines
_CSV_BOOL = {"true": True, "false": False, "1": True, "0": False}


@dataclass
class OutcomeCheck:
    """What reading the outcome files found: lines read, kept, rejected (by reason) and ignored."""

    files: list[str] = field(default_factory=list)
    n_lines: int = 0
    n_valid: int = 0
    n_superseded: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    @property
    def n_invalid(self) -> int:
        return sum(self.rejected.values())

    def _reject(self, reason: str, where: str, message: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if len(self.examples) < N_EXAMPLES:
            self.examples.append(f"{where}: {message}")

    def to_dict(self) -> dict:
        return {
            "outcome_lines": self.n_lines,
            "outcome_lines_valid": self.n_valid,
            "outcome_lines_invalid": self.n_invalid,
            "outcome_lines_rejected": dict(sorted(self.rejected.items())),
            "outcome_lines_ignored": dict(sorted(self.ignored.items())),
            "outcome_lines_superseded": self.n_superseded,
            "outcome_examples": list(self.examples),
        }

    def warnings(self) -> list[str]:
        out = []
        if self.rejected:
            by = ", ".join(f"{n} {REASONS[r]}" for r, n in sorted(self.rejected.items(), key=lambda x: -x[1]))
            out.append(
                f"outcomes: rejected {self.n_invalid} of {self.n_lines} line(s), not scored ({by}); "
                f"first: {'; '.join(self.examples[:3])}"
            )
        ignored = {k: v for k, v in self.ignored.items() if k != "blank"}
        if ignored:
            by = ", ".join(f"{n} {IGNORED[r]}" for r, n in sorted(ignored.items()))
            out.append(f"outcomes: ignored {sum(ignored.values())} line(s) ({by})")
        if self.n_superseded:
            out.append(
                f"outcomes: {self.n_superseded} report(s) superseded by a later report of the same decision "
                "(the last file, then the last line, wins)"
            )
        return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class _Rows:
    """Columns of the valid outcome rows, built while checking; every :data:`_CHUNK` rows they move into an
    Arrow batch (a few bytes a row instead of five Python objects)."""

    def __init__(self) -> None:
        self.batches: list[Any] = []
        self.n = 0
        self._reset()

    def _reset(self) -> None:
        self.decision_id: list[str] = []
        self.question: list[str] = []
        self.outcome: list[str | None] = []
        self.override: list[bool | None] = []
        self.ord: list[int] = []

    def add(self, did: str, q: str, o: str | None, v: bool | None, ord_: int) -> None:
        self.decision_id.append(did)
        self.question.append(q)
        self.outcome.append(o)
        self.override.append(v)
        self.ord.append(ord_)
        self.n += 1
        if len(self.ord) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        self.batches.append(
            pa.record_batch(
                [
                    pa.array(self.decision_id, pa.string()),
                    pa.array(self.question, pa.string()),
                    pa.array(self.outcome, pa.string()),
                    pa.array(self.override, pa.bool_()),
                    pa.array(self.ord, pa.int64()),
                ],
                schema=_SCHEMA(),
            )
        )
        self._reset()

    def table(self) -> Any:
        import pyarrow as pa

        self.flush()
        return pa.Table.from_batches(self.batches, schema=_SCHEMA())


_CHUNK = 100_000


def _SCHEMA() -> Any:  # noqa: N802 - a constant built lazily (pyarrow is imported on use)
    import pyarrow as pa

    return pa.schema(
        [
            ("decision_id", pa.string()),
            ("question", pa.string()),
            ("outcome", pa.string()),
            ("override", pa.bool_()),
            ("ord", pa.int64()),
        ]
    )


def _value(rec: dict, name: str, text: bool) -> Any:
    """Field ``name`` of ``rec``; an empty cell of a text format (CSV) is no value."""
    v = rec.get(name)
    return None if text and v == "" else v


def _check_row(
    rec: dict,
    where: str,
    ord_: int,
    options: dict[str, list[str]],
    option_sets: dict[str, set[str]],
    default_question: str | None,
    text: bool,
    check: OutcomeCheck,
    rows: _Rows,
) -> None:
    """One record (a JSON object, or a CSV/Parquet row as a dict): kept in ``rows`` or counted in ``check``."""
    did = _value(rec, "decision_id", text)
    if did is None or did == "":
        check._reject("missing_decision_id", where, "no decision_id")
        return
    if not isinstance(did, str):
        check._reject("bad_decision_id", where, f"decision_id {_short(did)} is not a string")
        return
    q = _value(rec, "question", text)
    if q is None:
        if default_question is None:
            check._reject("bad_question", where, "no question, and the policy has several")
            return
        q = default_question
    elif not isinstance(q, str):
        check._reject("bad_question", where, f"question {_short(q)} is not a string")
        return
    o = _value(rec, "outcome", text)
    v = rec.get("override")
    if text and isinstance(v, str):
        v = None if v.strip() == "" else _CSV_BOOL.get(v.strip().lower(), v)
    if q not in option_sets:
        check.ignored["other_question"] = check.ignored.get("other_question", 0) + 1
        return
    if o is not None:
        if not isinstance(o, str):
            check._reject("outcome_not_a_string", where, f"outcome {_short(o)} is not a string")
            return
        if o not in option_sets[q]:
            near = [x for x in options[q] if x.strip().casefold() == o.strip().casefold()]
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            check._reject("not_an_option", where, f"outcome {_short(o)} is not an option of {q!r}{hint}")
            return
    if v is not None and not isinstance(v, bool):
        check._reject("bad_override", where, f"override {_short(v)} is not true or false")
        return
    if o is None and v is None:
        check.ignored["nothing_reported"] = check.ignored.get("nothing_reported", 0) + 1
        return
    rows.add(did, q, o, v, ord_)


def _open_text(path: str) -> Any:
    """A binary file object (decompressed for ``.gz``)."""
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _json_lines(path: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, object, None) or (line number, None, reason) per non-blank line; blank lines as (n, None, "blank")."""
    from workbench_runtime.jsonio import StrictJSONError, loads_strict

    with _open_text(path) as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                yield n, None, "blank"
                continue
            try:
                rec = loads_strict(raw.decode("utf-8"))
            except UnicodeDecodeError:
                yield n, None, "not_json"
                continue
            except StrictJSONError as exc:
                yield n, None, "duplicate_key" if str(exc).startswith("duplicate key") else "not_json"
                continue
            if not isinstance(rec, dict):
                yield n, None, "not_an_object"
                continue
            yield n, rec, None


def _columns_ok(path: str, names: Sequence[str], default_question: str | None) -> None:
    if "decision_id" not in names or not ({"outcome", "override"} & set(names)):
        raise OptionError(
            f"`outcomes` {path}: needs columns decision_id and outcome and/or override (has {', '.join(names)})"
        )
    if "question" not in names and default_question is None:
        raise OptionError(
            f"`outcomes` {path}: no question column and the policy has several questions", hint="add a question column"
        )


def _format(path: str) -> str:
    s = path.lower()
    if s.endswith(".parquet"):
        return "parquet"
    if s.endswith((".csv", ".csv.gz")):
        return "csv"
    if s.endswith((".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")):
        return "jsonl"
    raise OptionError(f"`outcomes` {path}: unknown format", hint="use .jsonl, .csv or .parquet")


def read_outcomes(
    files: Sequence[str],
    options: dict[str, list[str]],
    *,
    default_question: str | None,
    max_invalid_share: float = MAX_INVALID_OUTCOME_SHARE,
) -> tuple[Any, OutcomeCheck]:
    """Check every line of ``files``; return (a pyarrow table of the valid rows ``decision_id``, ``question``,
    ``outcome``, ``override``, ``ord`` — every report, in file and line order — and the :class:`OutcomeCheck`).

    Raises :class:`~workbench.errors.OutcomeError` when more than ``max_invalid_share`` of the lines read are
    invalid, and :class:`~workbench.errors.OptionError` for a file that cannot be read as outcomes at all.
    """
    import pyarrow as pa

    if not (0.0 <= max_invalid_share <= 1.0) or math.isnan(max_invalid_share):
        raise OptionError(f"`max_invalid_outcomes` {max_invalid_share} must be between 0 and 1")
    check = OutcomeCheck(list(files))
    rows = _Rows()
    option_sets = {q: set(o) for q, o in options.items()}
    for i, f in enumerate(files):
        fmt = _format(f)
        if "://" in f:
            raise OptionError(
                f"`outcomes` {f}: outcome files are read and checked on this machine", hint="copy the file here"
            )
        base = i << _ORD_SHIFT
        try:
            if fmt == "jsonl":
                for n, rec, reason in _json_lines(f):
                    if reason == "blank":
                        check.ignored["blank"] = check.ignored.get("blank", 0) + 1
                        continue
                    check.n_lines += 1
                    if rec is None:
                        check._reject(str(reason), f"{f}:{n}", REASONS[str(reason)])
                        continue
                    _check_row(rec, f"{f}:{n}", base + n, options, option_sets, default_question, False, check, rows)
            elif fmt == "csv":
                with _open_text(f) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as fh:
                    reader = csv.reader(fh, strict=True)
                    header = next(reader, None) or []
                    _columns_ok(f, header, default_question)
                    if len(set(header)) != len(header):
                        raise OptionError(f"`outcomes` {f}: a column is named twice in the header")
                    while True:
                        try:
                            row = next(reader)
                        except StopIteration:
                            break
                        except csv.Error as exc:
                            check.n_lines += 1
                            check._reject("not_json", f"{f}:{reader.line_num}", f"not a CSV row ({exc})")
                            continue
                        n = reader.line_num
                        if not row or all(not c.strip() for c in row):
                            check.ignored["blank"] = check.ignored.get("blank", 0) + 1
                            continue
                        check.n_lines += 1
                        if len(row) != len(header):
                            check._reject(
                                "not_an_object", f"{f}:{n}", f"{len(row)} fields where the header has {len(header)}"
                            )
                            continue
                        _check_row(
                            dict(zip(header, row)), f"{f}:{n}", base + n, options, option_sets, default_question, True,
                            check, rows,
                        )  # fmt: skip
            else:
                import pyarrow.parquet as pq

                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                _columns_ok(f, names, default_question)
                wanted = [c for c in ("decision_id", "question", "outcome", "override") if c in names]
                r = 0
                for batch in pf.iter_batches(batch_size=65_536, columns=wanted):
                    cols = {c: batch.column(c).to_pylist() for c in wanted}
                    for k in range(batch.num_rows):
                        r += 1
                        check.n_lines += 1
                        rec = {c: v[k] for c, v in cols.items()}
                        where = f"{f}:row {r}"
                        _check_row(rec, where, base + r, options, option_sets, default_question, False, check, rows)
        except UnicodeDecodeError as exc:
            raise OptionError(
                f"`outcomes` {f}: not valid UTF-8 (byte {exc.start})", hint="save the file as UTF-8"
            ) from None
        except OptionError:
            raise
        except (OSError, EOFError, ValueError, pa.ArrowException) as exc:
            msg = " ".join(str(exc).split())[:200]
            raise OptionError(f"`outcomes` {f}: cannot read ({type(exc).__name__}: {msg})") from None
    table = rows.table()
    check.n_valid = table.num_rows
    check.n_superseded = check.n_valid - table.group_by(["decision_id", "question"]).aggregate([]).num_rows
    if check.n_lines and check.n_invalid > max_invalid_share * check.n_lines:
        raise OutcomeError(
            f"`outcomes`: {check.n_invalid:,} of {check.n_lines:,} outcome line(s) "
            f"({100 * check.n_invalid / check.n_lines:.1f}%) are invalid, more than the {100 * max_invalid_share:g}% "
            f"allowed; first: {'; '.join(check.examples[:3])}",
            hint="an outcome is an option id of its question exactly as the policy spells it; fix the file "
            "(or raise `max_invalid_outcomes`)",
        )
    return table, check
