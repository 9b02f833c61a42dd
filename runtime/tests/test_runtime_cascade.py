"""A format-2 cascade policy, built by hand from the shipped fixture: ``decide(..., stage=s)``.

Stage 0 (``sim-model-1.0``) accepts when ``p_top >= 0.9`` and escalates the rest; stage 1
(``big-model``) accepts when ``p_top >= 0.6`` and sends the rest to review. Identity calibrators, so
the figures of the responses are the ones the rule sees.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from workbench_runtime import Policy
from workbench_runtime.errors import PolicyError
from workbench_runtime.model import content_hash

DATA = Path(__file__).with_name("data")
BASE = json.loads((DATA / "workbench-policy.json").read_text())
OPTIONS = BASE["questions"]["intent"]["options"]
IDENTITY = {"type": "identity", "params": {}}


def _rule(tau: float, fallback: str) -> dict:
    return {
        "kind": "top_margin",
        "tau": tau,
        "margin": 0.0,
        "per_class": {},
        "abstain_options": [],
        "fallback": fallback,
    }


def cascade_doc() -> dict:
    doc = copy.deepcopy(BASE)
    doc["format_version"] = 2
    q = doc["questions"]["intent"]
    q["calibrator"], q["rule"] = IDENTITY, _rule(0.9, "escalate")
    stages = []
    for model, rule in (("sim-model-1.0", _rule(0.9, "escalate")), ("big-model", _rule(0.6, "review"))):
        src = {"run_id": None, "provider": "test", "model": model, "dialect": None}
        stages.append({"source": src, "price_per_call_usd": 0.001, "calibrator": IDENTITY, "rule": rule})
    doc["cascade"] = {"question": "intent", "stages": stages, "objective": q["objective"], "expected_test": None}
    doc["validity"]["models"] = ["sim-model-1.0", "big-model"]
    doc.pop("signature", None)
    doc["content_hash"] = content_hash(doc)
    return doc


def response(model: str, p_top: float) -> dict:
    rest = (1 - p_top) / (len(OPTIONS) - 1)
    probs = {o: (p_top if i == 0 else rest) for i, o in enumerate(OPTIONS)}
    return {"model": model, "answers": {"intent": {"type": "choice", "choice": OPTIONS[0], "probabilities": probs}}}


def test_stage_by_stage_accept_escalate_review():
    pol = Policy.from_dict(cascade_doc())
    assert len(pol.stages) == 2
    assert pol.decide(response("sim-model-1.0", 0.95), stage=0)["intent"].action == "accept"
    first = pol.decide(response("sim-model-1.0", 0.7), stage=0)
    assert first["intent"].action == "escalate" and "urgent" in first  # other questions are decided at stage 0
    second = pol.decide(response("big-model", 0.7), stage=1)
    assert list(second) == ["intent"] and second["intent"].action == "accept"
    assert second["intent"].option == OPTIONS[0]
    assert pol.decide(response("big-model", 0.5), stage=1)["intent"].action == "review"
    # the stage's own model only; a failure is never accepted
    assert pol.decide(response("sim-model-1.0", 0.99), stage=1)["intent"].action == "review"
    assert pol.decide({"error": {"kind": "timeout"}}, stage=0)["intent"].action == "escalate"
    # without stage=: stage 0 (a reader that ignores stages still never accepts below stage 0's band)
    assert pol.decide(response("sim-model-1.0", 0.7))["intent"].action == "escalate"
    with pytest.raises(ValueError, match="stage must be"):
        pol.decide(response("big-model", 0.7), stage=2)
    with pytest.raises(ValueError, match="cascade policies only"):
        Policy.from_dict(BASE).decide(response("sim-model-1.0", 0.7), stage=0)


def test_cascade_documents_are_checked_and_need_format_2():
    doc = cascade_doc()
    doc["format_version"] = 1
    doc["content_hash"] = content_hash(doc)
    with pytest.raises(PolicyError, match="needs format_version 2"):
        Policy.from_dict(doc)
    doc = cascade_doc()
    doc["cascade"]["stages"][1]["rule"]["fallback"] = "escalate"  # nothing after the last stage
    doc["content_hash"] = content_hash(doc)
    with pytest.raises(PolicyError, match="last stage"):
        Policy.from_dict(doc)
    doc = cascade_doc()
    doc["questions"]["intent"]["rule"]["tau"] = 0.5  # the question must carry stage 0's rule
    doc["content_hash"] = content_hash(doc)
    with pytest.raises(PolicyError, match="stage 0 rule"):
        Policy.from_dict(doc)
    doc = cascade_doc()
    doc["format_version"] = 3
    doc["content_hash"] = content_hash(doc)
    with pytest.raises(PolicyError, match="newer than this runtime reads"):
        Policy.from_dict(doc)
