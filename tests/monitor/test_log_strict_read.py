"""The monitor reads decision logs as strictly as ``workbench_runtime.jsonio.loads_strict`` (issue 25): lines that
strict JSON refuses but DuckDB's parser accepts (NaN/Infinity, a key named twice, also in a nested object, a
trailing comma) are skipped and counted, text that merely looks like them inside a string is not, a value of
another JSON type is NULL, and a line torn mid-value does not take the next line with it."""

from __future__ import annotations

import json
import math
import warnings

import pytest
from workbench_runtime.decision_log import iter_decision_log
from workbench_runtime.jsonio import StrictJSONError, loads_strict

from workbench.engines.monitoring import _load, _summary
from workbench.engines.sessions import open_engine
from workbench.monitor.logs import MonitorStore

HEAD = '"time": "2026-11-01T00:00:00+00:00", "policy_hash": "h", "question": "q", "action": "accept"'
LINES = [
    ('{"decision_id": "ok", %s, "p_top": 0.5, "margin": 0.1, "probs": [0.5, 0.5]}', "kept"),
    ('{"decision_id": "nan", %s, "p_top": 0.5, "would_accept": NaN}', "skipped"),
    ('{"decision_id": "inf", %s, "p_top": 0.5, "probs": [-Infinity, 1]}', "skipped"),
    ('{"decision_id": "dup", %s, "p_top": 0.5, "p_top": 0.9}', "skipped"),
    ('{"decision_id": "nested-dup", %s, "x": [{"k": 1}, {"j": {"z": 1, "z": 2}}]}', "skipped"),
    ('{"decision_id": "comma", %s, "p_top": 0.5,}', "skipped"),
    ('{"decision_id": "comma-list", %s, "probs": [0.5, 0.5,]}', "skipped"),
    ('{"decision_id": "torn", %s, "p_top":', "skipped"),  # the next line is whole and must be read
    ('{"decision_id": "after-torn", %s, "p_top": 1, "margin": 12345678901234567890}', "kept"),
    ('{"decision_id": "in-string", %s, "model": "x:NaN, inf,]", "option": "a\\"b,}", "probs": []}', "kept"),
    ('{"decision_id": "nested-ok", %s, "x": [{"k": 1}, {"j": {"z": 1, "y": 2}}]}', "kept"),
    ('{"decision_id": "types", %s, "p_top": "0.5", "margin": true, "probs": ["0.5", 0.5], "option": 3}', "kept"),
    ('{"decision_id": "overflow", %s, "p_top": 1e400, "probs": [1e400, 0]}', "kept"),
    ('{"decision_id": "crlf", %s}\r', "kept"),
    ('{"decision_id": 7, %s}', "incomplete"),
]


def _number(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _strict(line: str):
    try:
        return loads_strict(line)
    except StrictJSONError:
        return None


def test_monitor_and_runtime_read_exactly_the_strict_records(tmp_path):
    log = tmp_path / "d.jsonl"
    lines = [text % HEAD for text, _ in LINES]
    log.write_text("\n".join(lines) + "\n")
    with MonitorStore() as store:
        summary = store.load_decisions([str(log)])
        got = {
            r[0]: r[1:]
            for r in store.con.execute('SELECT decision_id, p_top, margin, probs, "option" FROM decisions').fetchall()
        }
    kept = {json.loads(t % HEAD)["decision_id"] for t, how in LINES if how == "kept"}
    assert set(got) == kept
    assert summary.skipped == {str(log): sum(how == "skipped" for _, how in LINES)}
    assert summary.incomplete == 1
    for line in lines:
        rec = _strict(line)
        if rec is None or rec.get("decision_id") not in got:
            continue
        p_top, margin, probs, option = got[rec["decision_id"]]
        assert p_top == _number(rec.get("p_top")) and margin == _number(rec.get("margin")), line
        written = rec.get("probs")
        ok = isinstance(written, list) and all(_number(v) is not None for v in written)
        assert probs == ([float(v) for v in written] if ok else None), line
        assert option == (rec.get("option") if isinstance(rec.get("option"), str) else None), line
    assert got["types"] == (None, None, None, None) and got["overflow"][0] is None and got["overflow"][2] is None
    assert got["in-string"][3] == 'a"b,}' and got["after-torn"][:2] == (1.0, 12345678901234567890.0)
    # the runtime's reader keeps the same lines (and the incomplete record: it checks no fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runtime = [r["decision_id"] for r in iter_decision_log(log)]
    assert runtime == [json.loads(t % HEAD)["decision_id"] for t, how in LINES if how in ("kept", "incomplete")]


@pytest.fixture(scope="module", params=["duckdb", "spark"])
def engine(request):
    if request.param == "duckdb":
        yield "duckdb"
        return
    from tests.engines.test_engines import _spark_skip_reason

    reason = _spark_skip_reason()
    if reason:
        pytest.skip(reason)
    from workbench.engines.sessions import SparkEngine, spark_session

    session = spark_session(
        "local[1]",
        {
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield SparkEngine(session=session)
    session.stop()


def test_engines_read_the_same_records_and_values(tmp_path, engine):
    """``workbench monitor --engine duckdb|spark`` keep the same records with the same values and count the same
    lines as ``workbench monitor``."""
    from workbench.engines.sessions import Engine
    from workbench.monitor.outcomes import read_outcomes

    log = tmp_path / "d.jsonl"
    log.write_text("\n".join(text % HEAD for text, _ in LINES) + "\n   \n")
    rows, check = read_outcomes([], {"q": ["a", "b"]}, default_question="q")
    eng = engine if isinstance(engine, Engine) else open_engine(engine)
    try:
        _load(eng, [str(log)], rows)
        summary = _summary(eng, [str(log)], check)
        got = {r[0]: tuple(r[1:]) for r in eng.query("SELECT decision_id, p_top, margin, probs, option FROM wb_dec")}
    finally:
        if not isinstance(engine, Engine):
            eng.close()
    with MonitorStore() as store:
        ref = store.load_decisions([str(log)])
        want = {
            r[0]: tuple(r[1:])
            for r in store.con.execute('SELECT decision_id, p_top, margin, probs, "option" FROM decisions').fetchall()
        }
    got = {d: (p, m, None if v is None else [float(x) for x in v], o) for d, (p, m, v, o) in got.items()}
    assert got == want
    skipped = list(summary.skipped.values())  # (Spark names a file by its URI, file:/…)
    assert (summary.n_lines, skipped, summary.incomplete) == (ref.n_lines, list(ref.skipped.values()), ref.incomplete)
