"""The monitor reads ``probs`` straight into a list of doubles (one JSON parse a line): every value reads as
``TRY_CAST(<its JSON text> AS DOUBLE[])`` did when it was read as JSON text first, odd values included."""

from __future__ import annotations

import math

import duckdb

from workbench.monitor.logs import MonitorStore

PROBS = [
    "[0.1, 0.9]",
    "[0, 1]",
    '["0.25", "0.75"]',
    "[true, false]",
    '[0.2, "x"]',
    "[null, 0.5]",
    "[[0.2], [0.8]]",
    "[1e400, -0.0]",
    "[]",
    '"[0.1, 0.9]"',
    '"oops"',
    "5",
    '{"a": 1}',
    "null",
]


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and (x == y or math.isnan(x) and math.isnan(y)))
        for x, y in zip(a, b, strict=True)
    )


def test_probs_read_as_before(tmp_path):
    log = tmp_path / "d.jsonl"
    lines = [
        f'{{"decision_id": "d{i}", "time": "2026-11-01T00:00:0{i % 10}+00:00", "question": "q", "action": "review",'
        f' "probs": {p}}}'
        for i, p in enumerate(PROBS)
    ]
    log.write_text("\n".join([*lines, '{"decision_id": "d99", "question": "q", "action": "review"}', "torn{"]) + "\n")
    with MonitorStore() as store:
        summary = store.load_decisions([str(log)])
        got = dict(store.con.execute("SELECT decision_id, probs FROM decisions").fetchall())
    assert summary.n_records == len(PROBS) + 1 and summary.skipped == {str(log): 1}
    assert got["d99"] is None  # no probs field
    # the reference: the JSON text of each value, cast as the reader used to
    ref = duckdb.connect()
    for i, p in enumerate(PROBS):
        want = ref.execute("SELECT TRY_CAST(?::JSON AS DOUBLE[])", [p]).fetchone()[0]
        assert _same(got[f"d{i}"], want), (p, got[f"d{i}"], want)
    assert got["d0"] == [0.1, 0.9] and got["d2"] == [0.25, 0.75] and got["d4"] == [0.2, None]
    assert got["d10"] is None and got["d12"] is None and got["d8"] == []
