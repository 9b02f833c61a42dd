"""The runtime distribution's committed fixture is what today's workbench exports, and it validates."""

from __future__ import annotations

import json

import pytest

from tests.policy import runtime_fixture as fx
from workbench.policy.io import validate_file


def test_committed_fixture_validates_with_the_workbench():
    report = validate_file(fx.DATA / fx.POLICY_NAME)
    assert report["valid"] and set(report["questions"]) == {"intent", "urgent"}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh-fixture")
    fx.export(out)
    return out


def test_fresh_export_takes_the_committed_decisions(fresh):
    """If this fails the builder or the format changed: regenerate with `python -m tests.policy.runtime_fixture`."""

    def rows(d):
        return [json.loads(x) for x in (d / fx.DECISIONS_NAME).read_text().splitlines()]

    committed, now = rows(fx.DATA), rows(fresh)
    assert [{q: (v["action"], v["option"], v["reason"]) for q, v in r.items()} for r in now] == [
        {q: (v["action"], v["option"], v["reason"]) for q, v in r.items()} for r in committed
    ]
    a = json.loads((fx.DATA / fx.POLICY_NAME).read_text())
    b = json.loads((fresh / fx.POLICY_NAME).read_text())
    for doc in (a, b):
        for k in ("content_hash", "created_at", "workbench_version", "signature"):
            doc.pop(k, None)
    # floats to 1e-9: a fitted temperature moves in its 11th digit between CPUs (numpy's exp and log differ
    # in the last bit between AVX2 and AVX-512 builds), which is not a change of the builder or the format
    assert _approx(a) == _approx(b)


def _approx(doc):
    """``doc`` with every float wrapped in ``pytest.approx(rel=1e-9)`` (dicts and lists walked)."""
    if isinstance(doc, dict):
        return {k: _approx(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_approx(v) for v in doc]
    return pytest.approx(doc, rel=1e-9, abs=1e-12) if isinstance(doc, float) else doc
