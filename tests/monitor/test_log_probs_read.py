"""The monitor reads ``probs`` as the file holds it (issue 25): an array of finite JSON numbers is kept as written,
any other value (strings such as ``"0.25"``, booleans, nulls, nested arrays, a number too large for a double,
a bare value or an object) reads as NULL, never converted (``TRY_CAST(<its JSON text> AS DOUBLE[])``, the
earlier reading, turned ``"0.25"`` into 0.25 and ``true`` into 1.0)."""

from __future__ import annotations

import json
import math

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


def _strict(text: str) -> list[float] | None:
    """What a strict reader keeps: a list of finite JSON numbers (not booleans), else nothing."""
    v = json.loads(text)
    ok = isinstance(v, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v
    )
    return [float(x) for x in v] if ok else None


def test_probs_read_as_the_file_holds_them(tmp_path):
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
    for i, p in enumerate(PROBS):
        assert got[f"d{i}"] == _strict(p), (p, got[f"d{i}"])
    assert got["d0"] == [0.1, 0.9] and got["d1"] == [0.0, 1.0] and got["d8"] == []
    assert got["d2"] is None and got["d3"] is None and got["d4"] is None and got["d7"] is None
    assert got["d10"] is None and got["d12"] is None
