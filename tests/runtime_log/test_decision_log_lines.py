"""The decision log's lines are byte for byte what the JSON encoder writes (issue 29 §4).

``DecisionLog.log_decisions`` writes a float64 ``probs`` array from remembered ``repr`` texts instead of
passing the list through ``json``. Properties, for any array (finite or not, ``-0.0``, subnormals, values
outside [0, 1], repeated values that hit the remembered texts) and any decision fields:

- the bytes written equal ``json``'s encoding of the record (the encoder the log used before, and that
  :meth:`DecisionLog.append` still uses), so every reader sees the same text;
- reading a line back gives the same floats, bit for bit;
- what the encoder refuses (NaN, infinities) is refused the same way: counted, nothing written.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from workbench_runtime.decision_log import DecisionLog, read_decision_log

from tests.fuzz import fuzz_settings

FUZZ = fuzz_settings(scale=0.5)
WHEN = datetime(2026, 12, 7, 5, 0, 0, 123456, tzinfo=UTC)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


@dataclass(frozen=True)
class D:
    action: str
    option: str | None
    p_top: float | None
    margin: float | None
    would_accept: str | None = None


def _reference(decisions: dict, probs: dict, **kw) -> bytes | None:
    """The line(s) as the log wrote them before: the records through ``json`` (None: the encoder refuses)."""
    out = []
    model = kw["model"]
    for q, d in decisions.items():
        p = probs.get(q)
        rec = {
            "decision_id": str(kw["decision_id"]),
            "time": WHEN.isoformat(timespec="microseconds"),
            "policy_hash": kw["policy_hash"],
            "policy_version": kw["policy_version"],
            "model": model if isinstance(model, str) or model is None else str(model),
            "schema_hash": kw["schema_hash"],
            "question": q,
            "action": d.action,
            "option": d.option,
            "would_accept": d.would_accept,
            "p_top": None if d.p_top is None or not math.isfinite(d.p_top) else float(d.p_top),
            "margin": None if d.margin is None or not math.isfinite(d.margin) else float(d.margin),
            "probs": None if p is None else (p.tolist() if hasattr(p, "tolist") else [float(v) for v in p]),
        }
        try:
            out.append(_dumps(rec) + "\n")
        except ValueError:
            return None
    return "".join(out).encode("utf-8")


probabilities = st.floats(0, 1) | st.sampled_from([0.0, -0.0, 1.0, 5e-324, 0.1, 1 / 3, 0.0016000000000000003])
anything = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
prob_arrays = arrays(np.float64, st.integers(1, 80), elements=probabilities | anything)
texts = st.text(max_size=12)
decisions = st.builds(
    D,
    action=st.sampled_from(["accept", "review", "escalate"]) | texts | st.integers() | st.none(),
    option=st.none() | texts | st.integers(),
    p_top=st.none() | anything,
    margin=st.none() | anything,
    would_accept=st.none() | texts,
)


def _write(decs: dict, probs: dict, **kw) -> tuple[bytes, DecisionLog]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.jsonl"
        log = DecisionLog(path, clock=lambda: WHEN)
        log.log_decisions(decs, probs=probs, **kw)
        log.close()
        return (path.read_bytes() if path.exists() else b""), log


@FUZZ
@given(
    st.lists(st.tuples(texts, decisions, st.none() | prob_arrays), min_size=1, max_size=3, unique_by=lambda t: t[0]),
    texts | st.integers(),
    st.none() | texts | st.integers(),
    st.none() | texts,
    st.booleans(),
)
def test_lines_are_the_json_encoders_bytes(questions, decision_id, model, schema_hash, twice):
    decs = {q: d for q, d, _ in questions}
    probs = {q: p for q, _, p in questions}
    kw = dict(
        decision_id=decision_id,
        policy_hash="sha256:" + "ab" * 32,
        policy_version="1.0.0",
        model=model,
        schema_hash=None,
    )
    want = _reference(decs, probs, **kw)
    for _ in range(2 if twice else 1):  # the second time, every finite value's text is a remembered one
        got, log = _write(decs, probs, **kw)
        if want is None:
            assert (got, log.n_records, log.n_errors) == (b"", 0, 1)
            continue
        assert got == want and (log.n_records, log.n_errors) == (len(decs), 0)
        for line, q in zip(got.decode("utf-8").split("\n")[:-1], decs, strict=True):  # not splitlines: \x85
            back = json.loads(line)["probs"]
            p = probs[q]
            assert back is None if p is None else np.array(back, dtype=float).tobytes() == p.tobytes()


def test_negative_zero_is_not_written_as_a_remembered_zero(tmp_path):
    kw = dict(decision_id="d", policy_hash="h", policy_version="1", model=None, schema_hash=None)
    d = {"q": D("review", None, None, None)}
    with DecisionLog(tmp_path / "d.jsonl", clock=lambda: WHEN) as log:
        for p in ([0.0, 1.0], [-0.0, 1.0], [0.0, 1.0], [0.5, 0.5]):
            assert log.log_decisions(d, probs={"q": np.array(p)}, **kw)
    got = [r["probs"] for r in read_decision_log(tmp_path / "d.jsonl")]
    assert [[math.copysign(1, v) for v in p] for p in got] == [[1, 1], [-1, 1], [1, 1], [1, 1]]
    assert (tmp_path / "d.jsonl").read_text().count('"probs":[-0.0,1.0]') == 1


def test_other_sequences_and_dtypes_keep_the_encoders_text(tmp_path):
    kw = dict(decision_id="d", policy_hash="h", policy_version="1", model="m", schema_hash="s")
    d = {"a": D("accept", "x", 0.9, 0.5), "b": D("review", None, None, None), "c": D("review", None, None, None)}
    probs = {"a": [0.25, 0.75], "b": np.array([1, 0]), "c": np.array([0.5, 0.5], dtype=np.float32)}
    with DecisionLog(tmp_path / "d.jsonl", clock=lambda: WHEN) as log:
        assert log.log_decisions(d, probs=probs, **kw)
    assert (tmp_path / "d.jsonl").read_bytes() == _reference(d, probs, **kw)
    assert [r["probs"] for r in read_decision_log(tmp_path / "d.jsonl")] == [[0.25, 0.75], [1, 0], [0.5, 0.5]]


def test_nan_and_infinities_are_refused_as_the_encoder_refuses_them(tmp_path):
    kw = dict(decision_id="d", policy_hash="h", policy_version="1", model=None, schema_hash=None)
    d = {"q": D("review", None, None, None)}
    with DecisionLog(tmp_path / "d.jsonl", clock=lambda: WHEN) as log:
        for bad in (np.nan, np.inf, -np.inf):
            assert not log.log_decisions(d, probs={"q": np.array([0.5, bad])}, **kw)
        assert log.log_decisions(d, probs={"q": np.array([0.5, 0.5])}, **kw)
    assert (log.n_errors, log.n_records) == (3, 1)
    assert (tmp_path / "d.jsonl").read_bytes() == _reference(d, {"q": np.array([0.5, 0.5])}, **kw)


def test_the_default_time_is_now_in_utc_with_microseconds(tmp_path):
    import re
    from datetime import timedelta

    kw = dict(decision_id="d", policy_hash="h", policy_version="1", model=None, schema_hash=None)
    d = {"q": D("review", None, None, None)}
    with DecisionLog(tmp_path / "d.jsonl") as log:
        before = datetime.now(UTC)
        for _ in range(3):
            assert log.log_decisions(d, probs={"q": None}, **kw)
        after = datetime.now(UTC)
    for rec in read_decision_log(tmp_path / "d.jsonl"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", rec["time"])
        at = datetime.fromisoformat(rec["time"])
        assert before - timedelta(microseconds=1) <= at <= after + timedelta(microseconds=1)
