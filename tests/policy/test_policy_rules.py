"""Runtime details: calibrated policies apply exactly what was measured; score, abstain and per-class rules."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.policy.conftest import OPTIONS
from tests.policy.test_policy_roundtrip import _response
from workbench.policy import Policy
from workbench.policy.io import to_jev_thresholds
from workbench.policy.model import Policy as PolicyModel
from workbench.schema import DecisionSchema
from workbench.thresholds.rules import ScoreRule


@pytest.mark.parametrize("method", ["isotonic", "temperature"])
def test_calibrated_policy_runtime_reproduces_exported_test_figures(sim_store, tmp_path, method):
    out = tmp_path / f"{method}.json"
    run_cli(
        "policy",
        "export",
        "run-sim",
        "-q",
        "intent",
        "-q",
        "urgent",
        "--out",
        str(out),
        "--calibrate",
        method,
        "--max-error",
        "0.05",
        db=sim_store["db"],
        check=True,
    )
    policy = Policy.load(out)
    assert policy.model.questions["intent"].calibrator.type == method
    assert policy.model.questions["intent"].objective.n_calibrator_fit > 0
    test_idx = np.flatnonzero((sim_store["split"] == "test") & ~sim_store["failed"])
    decisions = policy.decide_many([_response(sim_store, i) for i in test_idx])
    for q, opts in (("intent", OPTIONS), ("urgent", ["yes", "no"])):
        labels = sim_store["labels"][q][test_idx]
        acc = sum(d[q].accepted for d in decisions)
        wrong = sum(d[q].accepted and d[q].option != opts[labels[k]] for k, d in enumerate(decisions))
        exp = policy.model.questions[q].expected_test
        assert (acc, wrong) == (exp.n_accepted, exp.n_errors), q


def _hand_policy(questions: dict, rules: dict) -> Policy:
    schema = DecisionSchema.from_dict({"questions": questions})
    doc = {
        "created_at": "2026-11-29T00:00:00+00:00",
        "workbench_version": "0.1.0",
        "source": {"provider": "hand"},
        "decision_schema": {"hash": schema.hash, "questions": schema.to_wire()},
        "dataset": {"name": "none"},
        "questions": {
            q: {
                "type": questions[q]["type"],
                "options": opts,
                "calibrator": {"type": "identity"},
                "rule": rule,
                "objective": {"kind": "coverage", "certified": False},
            }
            for q, (opts, rule) in rules.items()
        },
        "validity": {"schema_hashes": [schema.hash]},
    }
    return Policy(PolicyModel.model_validate(doc).with_hash())


def score_and_per_class_policy() -> Policy:
    """A score question (expected level) and a choice question with per-class rules and an abstain option."""
    levels = ["low", "mid", "high"]
    return _hand_policy(
        {
            "urgency": {"type": "score", "instructions": "How urgent?", "criteria": levels},
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"a": None, "b": None, "other": None},
            },
        },
        {
            "urgency": (["0", "1", "2"], {"kind": "score", "level": "expected", "tau": 0.6, "margin": 0.2}),
            "team": (
                ["a", "b", "other"],
                {
                    "kind": "top_margin",
                    "tau": 0.5,
                    "margin": 0.0,
                    "per_class": {"b": {"tau": 0.9, "margin": 0.5}, "a": {"tau": None}},
                    "abstain_options": ["other"],
                },
            ),
        },
    )


def test_score_abstain_and_per_class_rules_in_the_runtime():
    policy = score_and_per_class_policy()

    def resp(score_p, team_p):
        return {
            "answers": {
                "urgency": {"type": "score", "probabilities": dict(zip("012", score_p))},
                "team": {"type": "choice", "probabilities": dict(zip(["a", "b", "other"], team_p))},
            }
        }

    cases = [
        ((0.1, 0.7, 0.2), (0.95, 0.05, 0.0)),
        ((0.05, 0.15, 0.8), (0.02, 0.93, 0.05)),
        ((0.4, 0.2, 0.4), (0.1, 0.8, 0.1)),
        ((0.0, 0.3, 0.7), (0.1, 0.1, 0.8)),
    ]
    got = [policy.decide(resp(s, t)) for s, t in cases]
    # score: the expected level's probability and margin, same as ScoreRule
    ref = ScoreRule(0.6, 0.2, level="expected").decide(np.array([c[0] for c in cases]))
    assert [g["urgency"].accepted for g in got] == ref.accepted.tolist() == [True, True, False, True]
    assert got[1]["urgency"].option == "2" and got[0]["urgency"].option == "1"
    # team: "a" never accepted (null tau), "b" needs 0.9 and margin 0.5, "other" always review
    assert [g["team"].action for g in got] == ["review", "accept", "review", "review"]
    assert got[1]["team"].option == "b"
    assert "abstain_option" in got[3]["team"].reason and "below_tau" in got[0]["team"].reason
    # jev-eval export: per-class uses the strictest usable class; abstain options are listed as lost
    doc, _ = to_jev_thresholds(policy.model)
    assert any("per-class" in s for s in doc["workbench"]["cannotCarry"]["team"])
    assert doc["questions"]["team"]["threshold"] == pytest.approx((3 * 0.9 - 1) / 2)


def test_policy_refuses_rules_naming_unknown_options():
    from workbench.errors import PolicyError

    with pytest.raises(PolicyError, match="unknown option"):
        _hand_policy(
            {"team": {"type": "choice", "instructions": "Which?", "criteria": {"a": None, "b": None}}},
            {"team": (["a", "b"], {"kind": "top_margin", "tau": 0.5, "per_class": {"zzz": {"tau": 0.9}}})},
        )


def test_export_refuses_accept_as_fallback(sim_store, tmp_path):
    r = run_cli(
        "policy",
        "export",
        "run-sim",
        "-q",
        "intent",
        "--out",
        str(tmp_path / "x.json"),
        "--fallback",
        "accept",
        db=sim_store["db"],
    )
    assert r.returncode == 2 and "never be 'accept'" in r.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "args,words",
    [
        (["thresholds", "nope", "-q", "intent"], ["run 'nope' does not exist"]),
        (["thresholds", "run-sim", "-q", "nope"], ["no question 'nope'", "intent, urgent"]),
        (["thresholds", "run-sim", "-q", "intent", "--max-error", "1.5"], ["--max-error", "(0, 1)"]),
        (["thresholds", "run-sim", "-q", "intent", "--objective", "coverage"], ["needs --target-coverage"]),
        (["thresholds", "run-sim", "-q", "intent", "--abstain-option", "zzz"], ["abstain option 'zzz'"]),
        (["thresholds", "run-sim", "-q", "intent", "--method", "bonferroni"], ["--method"]),
        (
            ["policy", "export", "run-sim", "-q", "intent", "--out", "{tmp}/p.json", "--policy-version", "1.x"],
            ["not a semantic version"],
        ),
        (["policy", "apply", "{tmp}/missing.json", "--answers", "{tmp}/a.json"], ["does not exist"]),
    ],
)
def test_cli_errors_are_one_line_with_a_hint(sim_store, tmp_path, args, words):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = run_cli(*args, db=sim_store["db"])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "p.json").exists()


def test_request_with_a_reworded_question_routes_that_question_to_review(sim_store, tmp_path):
    from tests.policy.conftest import SCHEMA
    from tests.policy.test_policy_roundtrip import _response

    out = tmp_path / "p.json"
    run_cli(
        "policy", "export", "run-sim", "-q", "intent", "-q", "urgent", "--out", str(out), db=sim_store["db"], check=True
    )
    policy = Policy.load(out)
    i = int(np.argmax(sim_store["probs"]["intent"].max(axis=1)))
    resp = _response(sim_store, i)
    request = {"state": "x", "questions": SCHEMA.to_wire()}
    assert policy.decide(resp, request=request)["intent"].accepted
    reworded = {
        "state": "x",
        "questions": {
            **SCHEMA.to_wire(),
            "intent": {**SCHEMA.to_wire()["intent"], "instructions": "Pick any intent you like."},
        },
    }
    d = policy.decide(resp, request=reworded)
    assert d["intent"].action == "review" and "differs" in d["intent"].reason
    assert d["urgent"].reason != d["intent"].reason  # the unchanged question is judged on its own
    reordered = {
        "questions": {
            **SCHEMA.to_wire(),
            "intent": {
                **SCHEMA.to_wire()["intent"],
                "criteria": dict(reversed(list(SCHEMA.to_wire()["intent"]["criteria"].items()))),
            },
        }
    }
    assert policy.decide(resp, request=reordered)["intent"].action == "review"
    only_urgent = {"questions": {"urgent": SCHEMA.to_wire()["urgent"]}}
    assert "not asked" in policy.decide(resp, request=only_urgent)["intent"].reason
