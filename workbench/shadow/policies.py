"""What each side *would do*: a routing policy per side, applied to a matrix of answers at once.

A :class:`SidePolicy` holds, per question, an optional calibrator and a rule from
:mod:`workbench.thresholds.rules` (so the shadow report takes exactly the decisions the policy
runtime and the threshold surface take). It comes from a policy file (:func:`load_side_policy`), from
CLI rule options (:func:`parse_rule_options`, e.g. ``intent:tau=0.9,margin=0.1``), or is certified on
a stored run with :class:`~workbench.thresholds.options.ThresholdOptions` (:func:`certified_side_policy`,
what ``workbench shadow report`` uses when no rule is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.schema import DecisionSchema
from workbench.thresholds.rules import ChoiceRule, Decisions, NoulRule, ScoreRule

#: Logged actions that mean "the answer was used without a human" (case-insensitive).
ACCEPT_ACTIONS = frozenset({"accept", "accepted", "auto", "auto_accept", "auto-accept", "automate", "automated"})


def is_accept(actions: np.ndarray) -> np.ndarray:
    """Vectorised: which logged action strings mean auto-accept (None → False)."""
    import pandas as pd

    lowered = pd.Series(np.asarray(actions, dtype=object), dtype="string").str.strip().str.lower()
    return lowered.isin(ACCEPT_ACTIONS).fillna(False).to_numpy(dtype=bool)


@dataclass
class SidePolicy:
    """Per-question rules (and calibrators) of one side.

    Attributes
    ----------
    rules : dict
        Question id (or ``"*"`` for every question) → rule with ``decide(probs) -> Decisions``, or a
        callable ``qtype -> rule`` for ``"*"`` rules that depend on the question type.
    calibrators : dict
        Question id → object with ``transform(probs)`` applied before the rule.
    schema : DecisionSchema or None
        The schema the policy was made for (policy files carry it).
    source : str
        Where it came from (file name or ``"rules"``), for the report.
    """

    rules: dict[str, Any] = field(default_factory=dict)
    calibrators: dict[str, Any] = field(default_factory=dict)
    schema: DecisionSchema | None = None
    source: str = "rules"
    valid_models: tuple[str, ...] = ()  # when set, answers from other models are never accepted
    valid_schema_hashes: tuple[str, ...] = ()  # when set, requests sent with another schema are never accepted
    settings: dict | None = None  # the ThresholdOptions settings a certified policy was chosen with

    def has_rule(self, question: str) -> bool:
        return question in self.rules or "*" in self.rules

    def rule_for(self, question: str, qtype: str):
        rule = self.rules.get(question, self.rules.get("*"))
        return rule(qtype) if callable(rule) and not hasattr(rule, "decide") else rule

    def schema_refusal(self, schema_hash: str | None) -> str | None:
        """Why this side's policy refuses requests sent with ``schema_hash`` (None: it accepts them)."""
        if self.valid_schema_hashes and schema_hash is not None and schema_hash not in self.valid_schema_hashes:
            return f"schema hash mismatch: {schema_hash[:12]} is not accepted by this policy"
        return None

    def decide(
        self,
        question: str,
        qtype: str,
        probs: np.ndarray,
        models: np.ndarray | None = None,
        schema_hash: str | None = None,
    ) -> Decisions | None:
        """Decisions for ``probs`` (n, k) of ``question``; None when this side has no rule for it.

        ``models`` (n,) names the model that answered each row; with ``valid_models`` set, rows
        answered by another model are treated as failures (never accepted), as the runtime does.
        ``schema_hash`` is the hash of the schema the requests were sent with; with
        ``valid_schema_hashes`` set and a different hash, no row is accepted (the runtime's check).
        """
        if not self.has_rule(question):
            return None
        probs = np.asarray(probs, dtype=float)
        if self.schema_refusal(schema_hash) is not None:
            probs = np.full_like(probs, np.nan)
        if self.valid_models and models is not None and len(probs):
            wrong_model = ~np.isin(np.asarray(models, dtype=object), list(self.valid_models))
            if wrong_model.any():
                probs = np.where(wrong_model[:, None], np.nan, probs)
        cal = self.calibrators.get(question)
        if cal is not None and len(probs):
            ok = np.isfinite(probs).all(axis=1)
            out = probs.copy()
            if ok.any():
                out[ok] = cal.transform(probs[ok])
            probs = out
        return self.rule_for(question, qtype).decide(probs)

    def describe(self) -> dict:
        return {
            "source": self.source,
            "settings": self.settings,
            "valid_models": list(self.valid_models),
            "valid_schema_hashes": list(self.valid_schema_hashes),
            "rules": {
                q: (repr(r) if not callable(r) or hasattr(r, "decide") else "per type") for q, r in self.rules.items()
            },
            "calibrated": sorted(self.calibrators),
        }


def _rule_from_numbers(qtype: str, values: Mapping[str, float]):
    tau = float(values.get("tau", 0.0))
    margin = float(values.get("margin", 0.0))
    if qtype == "noul":
        if "tau_yes" in values or "tau_no" in values:
            return NoulRule(tau_yes=float(values.get("tau_yes", 1.0)), tau_no=float(values.get("tau_no", 0.0)))
        # a single tau on a yes/no question: accept either side at that confidence
        return NoulRule(tau_yes=tau, tau_no=1.0 - tau) if "tau" in values else NoulRule(0.5, 0.5)
    if qtype == "score":
        return ScoreRule(tau=tau, margin=margin)
    return ChoiceRule(tau=tau, margin=margin)


def parse_rule_options(options: list[str] | None) -> SidePolicy | None:
    """``["intent:tau=0.9,margin=0.1", "tau=0.8"]`` → a :class:`SidePolicy` (None when empty).

    Without a ``QUESTION:`` prefix the rule applies to every question (``tau`` on a noul question
    accepts yes at ``p >= tau`` and no at ``p <= 1 - tau``).
    """
    if not options:
        return None
    rules: dict[str, Any] = {}
    for text in options:
        question, sep, body = text.rpartition(":")
        if not sep:
            question, body = "*", text
        values: dict[str, float] = {}
        for part in body.split(","):
            key, eq, val = part.partition("=")
            try:
                values[key.strip()] = float(val)
            except ValueError:
                raise WorkbenchError(
                    f"rule {text!r}: {part!r} is not NAME=NUMBER",
                    hint="e.g. intent:tau=0.9,margin=0.1 or urgent:tau_yes=0.9,tau_no=0.1",
                ) from None
            if not eq or key.strip() not in ("tau", "margin", "tau_yes", "tau_no"):
                raise WorkbenchError(
                    f"rule {text!r}: unknown setting {key.strip()!r}", hint="settings: tau, margin, tau_yes, tau_no"
                )
        rules[question.strip() or "*"] = lambda qtype, v=values: _rule_from_numbers(qtype, v)
    return SidePolicy(rules=rules, source="rules")


def load_side_policy(path: str | Path) -> SidePolicy:
    """Read a policy file (``workbench policy export``) into a :class:`SidePolicy`.

    Uses the policy runtime (which verifies the format version and content hash, failing closed);
    its per-question rules and calibrators are taken as they are.
    """
    from workbench.policy import Policy  # the policy layer validates and fails closed

    return side_policy_from(Policy.load(path), source=Path(path).name)


def side_policy_from(policy: Any, *, source: str, settings: dict | None = None) -> SidePolicy:
    """A :class:`SidePolicy` from a loaded runtime ``Policy``: its rules, calibrators, schema and
    validity (models and schema hashes, which the report enforces as the runtime does)."""
    rules, calibrators = {}, {}
    for qid in _policy_questions(policy):
        rules[qid] = _policy_rule(policy, qid)
        cal = _policy_calibrator(policy, qid)
        if cal is not None:
            calibrators[qid] = cal
    schema = getattr(policy, "schema", None)
    if schema is not None and not isinstance(schema, DecisionSchema):
        schema = DecisionSchema.from_dict(schema if isinstance(schema, dict) else {"questions": schema}, source=source)
    validity = getattr(getattr(policy, "model", None), "validity", None)
    models = tuple(getattr(validity, "models", None) or ())
    hashes = tuple(getattr(validity, "schema_hashes", None) or ())
    return SidePolicy(
        rules=rules,
        calibrators=calibrators,
        schema=schema,
        source=source,
        valid_models=models,
        valid_schema_hashes=hashes,
        settings=settings,
    )


def certified_side_policy(con, run_id: str, questions: list[str], options: Any = None) -> SidePolicy:
    """The policy ``workbench policy export RUN --question Q ...`` would write, certified on the run's
    calibration split with ``options`` (default :class:`~workbench.thresholds.options.ThresholdOptions`)."""
    from workbench.policy import Policy
    from workbench.policy.build import build_policy
    from workbench.thresholds.options import ThresholdOptions

    options = options if options is not None else ThresholdOptions()
    model, _ = build_policy(con, run_id, questions, options, created_by="workbench shadow report")
    return side_policy_from(Policy(model), source=f"certified on {model.source.run_id}", settings=options.settings())


# -- adapters to the policy runtime (kept in one place) ---------------------------------------------
def _policy_questions(policy: Any) -> list[str]:
    questions = getattr(policy, "questions", None)
    if isinstance(questions, Mapping):
        return list(questions)
    rules = getattr(policy, "rules", None)
    if isinstance(rules, Mapping):
        return list(rules)
    raise WorkbenchError("this policy object exposes no per-question rules", hint="upgrade the workbench")


def _policy_rule(policy: Any, qid: str):
    rules = getattr(policy, "rules", None)
    if isinstance(rules, Mapping) and qid in rules:
        return rules[qid]
    entry = policy.questions[qid]
    rule = getattr(entry, "rule", None) if not isinstance(entry, Mapping) else entry.get("rule")
    if rule is None or not hasattr(rule, "decide"):
        raise WorkbenchError(f"policy question {qid!r} has no applicable rule")
    return rule


def _policy_calibrator(policy: Any, qid: str):
    cals = getattr(policy, "calibrators", None)
    if isinstance(cals, Mapping):
        return cals.get(qid)
    entry = policy.questions[qid]
    cal = getattr(entry, "calibrator", None) if not isinstance(entry, Mapping) else entry.get("calibrator")
    return cal if hasattr(cal, "transform") else None
