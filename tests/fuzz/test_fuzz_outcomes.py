"""Fuzz: outcome files for `workbench monitor` (issue 25). Every line is kept exactly when it is a valid outcome,
every other line is counted, and a file is refused only with one OutcomeError/OptionError line — never a
traceback, never a lenient accept (a value that is not an option scored as an error, a torn line lost).

Lines are built from good and hostile values (ids, questions, options mis-cased or padded, numbers, lists,
booleans as text), written as JSON Lines (with duplicate keys, NaN tokens, torn and non-UTF-8 lines, bare
values, blank lines mixed in) or as CSV. The oracle classifies each line independently, from the rules in
docs/monitoring.md, and the reader must keep exactly its valid rows, in order, and count exactly its invalid
ones. A smaller sample goes through the whole monitor (store source and engine source), whose error counts
must equal the oracle's (the last valid report of each decision wins).

Examples per test: ``WORKBENCH_FUZZ_EXAMPLES`` (300 in the suite; 2,000 for the bench-sized run), see budget.py;
the whole-monitor test (two monitor runs an example) a tenth of that.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import fuzz_settings
from tests.policy import runtime_fixture as fx
from workbench.errors import OptionError, OutcomeError, WorkbenchError
from workbench.monitor.outcomes import read_outcomes

POLICY = fx.DATA / fx.POLICY_NAME
OPTIONS = {"intent": ["card_arrival", "lost_card", "refund", "top_up", "other"], "urgent": ["yes", "no"]}
IDS = [f"d{i:06d}" for i in range(fx.N_RESPONSES + 2)]
ABSENT = object()

hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.sampled_from(["refund", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["a", "outcome"]), st.integers(0, 1), max_size=1),
)
option_like = st.one_of(
    st.sampled_from([o for opts in OPTIONS.values() for o in opts]),
    st.sampled_from(["LOST_CARD", "lost_card ", " refund", "Yes", "card arrival", "", "None", "null"]),
)


@st.composite
def records(draw) -> dict:
    rec: dict = {}
    for key, good in (
        ("decision_id", st.sampled_from(IDS)),
        ("question", st.sampled_from(["intent", "urgent", "intent", "urgent", "other", "Intent"])),
        ("outcome", option_like),
        ("override", st.booleans()),
    ):
        v = draw(st.one_of(good, good, good, st.just(ABSENT), hostile))
        if v is not ABSENT:
            rec[key] = v
    return rec


@st.composite
def jsonl_lines(draw) -> bytes:
    rec = draw(records())
    form = draw(st.sampled_from(["json"] * 6 + ["dup", "torn", "nan", "bare", "blank", "latin1", "garbage"]))
    text = json.dumps(rec)
    if form == "dup" and rec:
        k = draw(st.sampled_from(sorted(rec)))
        return (text[:-1] + (", " if len(rec) else "") + f"{json.dumps(k)}: {json.dumps(draw(option_like))}}}").encode()
    if form == "torn":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))].encode()
    if form == "nan":
        return (text[:-1] + (", " if rec else "") + '"x": NaN}').encode()
    if form == "bare":
        return json.dumps(draw(st.one_of(hostile, st.lists(st.just(rec), max_size=1)))).encode()
    if form == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t"]))
    if form == "latin1":
        return text.replace('"}', '\xe9"}').encode("latin-1") if '"}' in text else b"\xff" + text.encode()
    if form == "garbage":
        return draw(st.binary(max_size=20)).replace(b"\n", b" ").replace(b"\r", b" ")
    return text.encode()


@st.composite
def good_lines(draw) -> bytes:
    """A valid outcome line (an option of its question, and/or an override)."""
    q = draw(st.sampled_from(sorted(OPTIONS)))
    rec = {"decision_id": draw(st.sampled_from(IDS)), "question": q}
    what = draw(st.sampled_from(["outcome", "outcome", "override", "both"]))
    if what != "override":
        rec["outcome"] = draw(st.sampled_from(OPTIONS[q]))
    if what != "outcome":
        rec["override"] = draw(st.booleans())
    return json.dumps(rec).encode()


#: Mostly valid lines with hostile ones mixed in (a file of only hostile lines is refused as a whole).
mixed_lines = st.one_of(good_lines(), good_lines(), good_lines(), jsonl_lines())


def _strict_json(raw: bytes):
    def pairs(ps):
        keys = [k for k, _ in ps]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate")
        return dict(ps)

    def const(name):
        raise ValueError(name)

    return json.loads(raw.decode("utf-8"), object_pairs_hook=pairs, parse_constant=const)


def expect(rec, *, text: bool) -> tuple[str, tuple | None]:
    """The rules, written out once more: ("valid", row) | ("invalid", None) | ("ignored", None)."""
    if not isinstance(rec, dict):
        return "invalid", None

    def get(k):
        v = rec.get(k)
        return None if text and v == "" else v

    did, q, o, v = get("decision_id"), get("question"), get("outcome"), get("override")
    if text and isinstance(v, str):
        v = None if not v.strip() else {"true": True, "false": False, "1": True, "0": False}.get(v.strip().lower(), v)
    if not isinstance(did, str) or did == "" or not isinstance(q, str):
        return "invalid", None
    if q not in OPTIONS:
        return "ignored", None
    if o is not None and (not isinstance(o, str) or o not in OPTIONS[q]):
        return "invalid", None
    if v is not None and type(v) is not bool:
        return "invalid", None
    if o is None and v is None:
        return "ignored", None
    return "valid", (did, q, o, v)


def oracle_jsonl(lines: list[bytes]) -> dict:
    out: dict = {"valid": [], "invalid": 0, "ignored": 0, "lines": 0}
    for raw in lines:
        if not raw.strip():
            continue
        out["lines"] += 1
        try:
            rec = _strict_json(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            out["invalid"] += 1
            continue
        kind, row = expect(rec, text=False)
        if kind == "valid":
            out["valid"].append(row)
        else:
            out[kind] += 1
    return out


def _check(path: Path, want: dict, share: float) -> tuple | None:
    """read_outcomes on ``path`` against the oracle's ``want``; returns the valid rows when accepted."""
    try:
        table, check = read_outcomes([str(path)], OPTIONS, default_question=None, max_invalid_share=share)
    except OutcomeError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        assert want["invalid"] > share * want["lines"], (want["invalid"], want["lines"], str(exc))
        return None
    assert not (want["invalid"] > share * want["lines"]), "more invalid lines than allowed, yet accepted"
    rows = [(r["decision_id"], r["question"], r["outcome"], r["override"]) for r in table.to_pylist()]
    assert rows == want["valid"]
    assert check.n_lines == want["lines"] and check.n_invalid == want["invalid"]
    assert sum(v for k, v in check.ignored.items() if k != "blank") == want["ignored"]
    assert check.n_valid == len(rows) and len(check.examples) == min(5, want["invalid"])
    return tuple(rows)


@fuzz_settings()
@given(st.lists(st.one_of(jsonl_lines(), mixed_lines), max_size=25), st.sampled_from([0.0, 0.01, 0.3, 1.0]))
def test_jsonl_outcome_lines_are_kept_exactly_when_valid(tmp_path_factory, lines, share):
    path = tmp_path_factory.mktemp("o") / "o.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    _check(path, oracle_jsonl(lines), share)


COLUMNS = ["decision_id", "question", "outcome", "override", "note"]
text_values = st.one_of(
    st.sampled_from(IDS),
    option_like,
    st.sampled_from(["intent", "urgent", "other", "", "true", "False", "1", "0", "yes", "TRUE ", "a,b", 'q"q', "x\ny"]),
    st.text(max_size=5),
)


@fuzz_settings()
@given(
    st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=5, unique=True),
    st.lists(st.lists(text_values, min_size=5, max_size=5), max_size=20),
    st.sampled_from([0.0, 0.01, 0.3, 1.0]),
)
def test_csv_outcome_rows_are_kept_exactly_when_valid(tmp_path_factory, header, rows, share):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for r in rows:
        w.writerow([v.replace("\x00", "") for v in r[: len(header)]])
    path = tmp_path_factory.mktemp("o") / "o.csv"
    path.write_text(buf.getvalue(), encoding="utf-8", newline="")
    if "decision_id" not in header or not {"outcome", "override"} & set(header) or "question" not in header:
        with pytest.raises(OptionError) as info:  # a file that cannot hold outcomes of this policy at all
            read_outcomes([str(path)], OPTIONS, default_question=None, max_invalid_share=share)
        assert "\n" not in str(info.value)
        return
    want: dict = {"valid": [], "invalid": 0, "ignored": 0, "lines": 0}
    for r in rows:
        rec = dict(zip(header, (v.replace("\x00", "") for v in r)))
        if all(not v.strip() for v in rec.values()):
            continue  # a blank row
        want["lines"] += 1
        kind, row = expect(rec, text=True)
        if kind == "valid":
            want["valid"].append(row)
        else:
            want[kind] += 1
    _check(path, want, share)


# -- through the whole monitor -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def log(tmp_path_factory) -> dict:
    from tests.monitor.conftest import replay
    from workbench.policy.runtime import Policy

    tmp = tmp_path_factory.mktemp("fuzz_monitor")
    responses = [json.loads(line) for line in (fx.DATA / fx.RESPONSES_NAME).read_text().splitlines()]
    decisions = replay(Policy.load(POLICY), responses, tmp / "decisions.jsonl")
    accepted = {
        (f"d{i:06d}", q): d.option for i, dec in enumerate(decisions) for q, d in dec.items() if d.action == "accept"
    }
    return {"path": tmp / "decisions.jsonl", "accepted": accepted}


def _errors_by_oracle(valid: list[tuple], accepted: dict) -> dict:
    """(known, errors) per question among accepted decisions: the last valid outcome and override of each wins."""
    last_o: dict = {}
    last_v: dict = {}
    for did, q, o, v in valid:
        if o is not None:
            last_o[(did, q)] = o
        if v is not None:
            last_v[(did, q)] = v
    out = {q: [0, 0] for q in OPTIONS}
    for key, option in accepted.items():
        o, v = last_o.get(key), last_v.get(key)
        if o is None and v is None:
            continue
        out[key[1]][0] += 1
        out[key[1]][1] += int(o != option) if o is not None else int(v)
    return out


@fuzz_settings(scale=1 / 10)
@given(st.lists(mixed_lines, min_size=1, max_size=40))
def test_the_monitor_scores_exactly_the_valid_outcomes_on_both_sources(log, tmp_path_factory, lines):
    from workbench.engines.monitoring import monitor_on_engine
    from workbench.monitor.report import MonitorOptions, monitor

    path = tmp_path_factory.mktemp("o") / "o.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    want = oracle_jsonl(lines)
    opts = MonitorOptions(window="20", recertify_min=10**6, max_invalid_outcomes=0.5)
    reports = []
    for run in (monitor, lambda *a: monitor_on_engine(*a, engine="duckdb")):
        try:
            reports.append(run(POLICY, [log["path"]], [path], opts))
        except WorkbenchError as exc:
            assert isinstance(exc, OutcomeError) and "\n" not in str(exc)
            assert want["invalid"] > 0.5 * want["lines"]
            reports.append(None)
    assert (reports[0] is None) == (reports[1] is None)
    if reports[0] is None:
        return
    truth = _errors_by_oracle(want["valid"], log["accepted"])
    for rep in reports:
        d = rep.to_dict()
        assert d["inputs"]["outcome_lines_invalid"] == want["invalid"]
        for q, (known, errors) in truth.items():
            overall = d["questions"][q]["overall"]
            assert (overall["n_known"], overall["n_errors"]) == (known, errors), (q, lines)
