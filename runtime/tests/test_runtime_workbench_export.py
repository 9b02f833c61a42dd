"""A policy exported by the workbench loads and decides with the runtime alone.

``data/`` holds a policy the workbench exported (``tests/policy/runtime_fixture.py`` in the
workbench), responses, and the decisions the workbench took on them. ``WORKBENCH_RUNTIME_FIXTURES``
points at a freshly exported set instead (CI does this in the clean venv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from workbench_runtime import Policy

DATA = Path(os.environ.get("WORKBENCH_RUNTIME_FIXTURES") or Path(__file__).with_name("data"))


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def exported() -> tuple[Policy, list[dict], list[dict]]:
    return (
        Policy.load(DATA / "workbench-policy.json"),
        _jsonl("workbench-responses.jsonl"),
        _jsonl("workbench-decisions.jsonl"),
    )


def test_exported_policy_decides_as_the_workbench_did(exported):
    policy, responses, expected = exported
    got = policy.decide_many(responses)
    assert len(got) == len(expected) == len(responses)
    n_accept = 0
    for dec, exp in zip(got, expected):
        assert set(dec) == set(exp)
        for q, d in dec.items():
            assert (d.action, d.option, d.reason) == (exp[q]["action"], exp[q]["option"], exp[q]["reason"])
            for k in ("p_top", "margin"):
                assert (getattr(d, k) is None) == (exp[q][k] is None)
                if exp[q][k] is not None:
                    assert getattr(d, k) == pytest.approx(exp[q][k], rel=1e-12, abs=1e-12)
            n_accept += d.accepted
    # the fixture exercises both outcomes, and failures never accept
    assert 0 < n_accept < 2 * len(responses)
    assert all(not d.accepted for d in got[-2].values())


def test_single_decide_matches_batch(exported):
    policy, responses, _ = exported
    batch = policy.decide_many(responses[:5])
    for r, b in zip(responses[:5], batch):
        assert policy.decide(r) == b


def test_runtime_imports_only_numpy_and_pydantic():
    code = (
        "import sys, json; from workbench_runtime import Policy; "
        f"p = Policy.load({str(DATA / 'workbench-policy.json')!r}); "
        "p.decide({'model': 'x', 'answers': {}}); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    import workbench_runtime

    # the interpreter finds this very runtime (installed or a checkout), and nothing else is added to its path
    env = {**os.environ, "PYTHONPATH": str(Path(workbench_runtime.__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    top = set(json.loads(out.stdout))
    heavy = {"workbench", "pandas", "scipy", "sklearn", "duckdb", "pyarrow", "plotly", "streamlit", "yaml", "httpx"}
    assert not (top & heavy), top & heavy
    assert {"numpy", "pydantic", "workbench_runtime"} <= top
