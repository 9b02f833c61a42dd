"""Build a policy from a stored run, and measure how two policies route a run's items.

This is the workbench side (store, calibrator fitting, threshold selection); production code only
needs :mod:`workbench.policy.runtime`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np

from workbench import __version__ as workbench_version
from workbench.errors import NotFoundError, PolicyError
from workbench.policy.model import (
    CalibratorSpec,
    ClassConstraint,
    DatasetSpec,
    Objective,
    QuestionPolicy,
    SchemaSpec,
    Source,
    TestMetrics,
    Validity,
)
from workbench.policy.model import (
    Policy as PolicyModel,
)
from workbench.thresholds.choose import choose_thresholds
from workbench.thresholds.options import ThresholdOptions
from workbench.thresholds.result import ThresholdResult


def _objective(res: ThresholdResult) -> Objective:
    sel = res.selection
    g = sel.guarantee or {}
    details = {
        k: v
        for k, v in g.items()
        if k
        not in {
            "alpha",
            "delta",
            "method",
            "per_class",
            "class_correction",
            "n_calibration",
            "n_accepted_calibration",
            "certified_bound",
            "risk_upper_bound",
            "expected_coverage",
            "risk",
            "costs",
            "constraints",
            "joint",
        }
    }
    if sel.cost:
        details["cost"] = sel.cost
    if sel.target:
        details["target"] = sel.target
    if sel.notes:
        details["notes"] = sel.notes
    if res.batch:
        details["batch"] = res.batch  # the finite-batch view (thresholds.batch): population vs next N
    if res.options.objective != "guarantee":
        details["warning"] = "point estimate on the calibration split: NOT certified"
    if "classes" in details:  # option ids rather than indices
        details["classes"] = {res.option_ids[int(k)]: v for k, v in details["classes"].items()}
    if res.test_risks:
        details["test_risks"] = res.test_risks
    constraints = None
    if g.get("constraints"):
        certified = bool(sel.certified and sel.feasible)
        constraints = [
            ClassConstraint(
                certified=certified and "n_true" in c,
                **{
                    k: c[k]
                    for k in ("option", "beta", "n_true", "misrouted", "rate", "p_value", "risk_upper_bound")
                    if k in c
                },
            )
            for c in g["constraints"]
        ]
    extra: dict[str, Any] = {}
    if g.get("risk"):
        extra["risk"] = g["risk"]
    return Objective(
        **extra,
        kind=cast(Any, res.options.objective),  # one of OBJECTIVES, checked by ThresholdOptions
        certified=sel.certified,
        feasible=sel.feasible,
        alpha=g.get("alpha"),
        delta=g.get("delta"),
        method=g.get("method"),
        per_class=bool(g.get("per_class")),
        class_correction=g.get("class_correction"),
        n_calibration=sel.calibration.get("n_items"),
        n_calibrator_fit=res.n_calibrator_fit,
        n_accepted_calibration=sel.calibration.get("n_accepted"),
        certified_bound=g.get("certified_bound"),
        risk_upper_bound=g.get("risk_upper_bound"),
        expected_coverage=g.get("expected_coverage", sel.calibration.get("coverage")),
        calibration_error=sel.calibration.get("error_rate"),
        costs=res.options.costs if res.options.objective in ("guarantee", "cost") else None,
        constraints=constraints,
        joint=g.get("joint"),
        details=details,
    )


def question_policy(res: ThresholdResult) -> QuestionPolicy:
    """The policy entry of one question from a threshold result."""
    return QuestionPolicy(
        type=cast(Any, res.qtype),  # noul | choice | score, from the stored schema
        options=res.option_ids,
        calibrator=CalibratorSpec(**res.calibrator),
        rule=cast(Any, res.rule_dict()),  # validated into the rule model matching its "kind"
        objective=_objective(res),
        expected_test=TestMetrics(**res.test) if res.test else None,
    )


def _reference(cal, res: ThresholdResult) -> dict:
    """Drift reference of ``workbench monitor``: the calibration split through the policy's calibrator."""
    from workbench.metrics.recalibrate import calibrator_from_dict
    from workbench.policy.reference import reference_histograms

    probs = np.asarray(cal.probs, dtype=float)
    ok = np.isfinite(probs).all(axis=1)
    calibrated = np.full_like(probs, np.nan)
    if ok.any():
        calibrated[ok] = calibrator_from_dict(res.calibrator).transform(probs[ok])
    return {"split": "calibration", **reference_histograms(probs, calibrated, list(res.option_ids))}


def _dataset_spec(con, run: dict) -> DatasetSpec:
    """The dataset version ``run`` was made on (fingerprint and split seed unknown when it is not stored)."""
    from workbench.store.datasets import dataset_info

    try:
        info = dataset_info(con, run["dataset"], int(run["dataset_version"]))
    except NotFoundError:
        info = {"fingerprint": None, "params": {}}
    return DatasetSpec(
        name=str(run["dataset"]),
        version=int(run["dataset_version"]),
        fingerprint=info.get("fingerprint"),
        split_seed=(info.get("params") or {}).get("seed"),
    )


def build_policy(
    con,
    run_id: str,
    questions: Sequence[str],
    opts: ThresholdOptions | dict[str, ThresholdOptions],
    *,
    policy_version: str = "1.0.0",
    max_state_tokens: int | None = None,
    created_by: str | None = None,
    bind_model: bool = True,
) -> tuple[PolicyModel, dict[str, ThresholdResult]]:
    """Choose thresholds for ``questions`` of ``run_id`` and assemble a hashed policy.

    Parameters
    ----------
    con : duckdb connection
    run_id : str
    questions : sequence of str
        Questions to put in the policy (each must be in the run's schema).
    opts : ThresholdOptions or mapping question -> ThresholdOptions
    policy_version : str
        Semantic version written into the file.
    max_state_tokens : int, optional
        Validity condition: larger states route to fallback.
    bind_model : bool, default=True
        Only answers from the model that answered the run are auto-accepted.

    Returns
    -------
    policy, results
    """
    from workbench.store.runs import get_run, load_answers, load_stored_schema

    if not questions:
        raise PolicyError("no `questions` given", hint="name one or more `questions`")
    run = get_run(con, run_id)
    schema = load_stored_schema(con, run["schema_hash"])
    for q in questions:
        if q not in schema.questions:
            raise NotFoundError(
                f"{run['run_id']} has no question {q!r}", hint=f"questions: {', '.join(schema.question_ids)}"
            )
    results: dict[str, ThresholdResult] = {}
    qpolicies: dict[str, QuestionPolicy] = {}
    for q in questions:
        o = opts[q] if isinstance(opts, dict) else opts
        cal = load_answers(con, run["run_id"], q, splits=["calibration"])
        test = load_answers(con, run["run_id"], q, splits=["test"])
        res = choose_thresholds(cal, test, o)
        results[q] = res
        qpolicies[q] = question_policy(res).model_copy(update={"reference": _reference(cal, res)})
    model_name = run.get("model")
    model_name = (
        None if (model_name is None or (isinstance(model_name, float) and np.isnan(model_name))) else str(model_name)
    )
    notes = []
    if any(not qp.objective.certified for qp in qpolicies.values()):
        notes.append("some questions use uncertified point-estimate thresholds (see objective.certified)")
    policy = PolicyModel(
        policy_version=policy_version,
        created_at=datetime.now(UTC).replace(microsecond=0).isoformat(),
        created_by=created_by,
        workbench_version=workbench_version,
        source=Source(
            run_id=run["run_id"],
            provider=str(run["provider"]),
            model=model_name,
            dialect=None if run.get("dialect") is None else str(run["dialect"]),
        ),
        decision_schema=SchemaSpec(hash=schema.hash, name=schema.name, questions=schema.to_wire()),
        dataset=_dataset_spec(con, run),
        questions=qpolicies,
        validity=Validity(
            schema_hashes=[schema.hash],
            models=[model_name] if (bind_model and model_name) else [],
            max_state_tokens=max_state_tokens,
        ),
        notes=notes,
    ).with_hash()
    return policy, results


def routing_on_run(con, policy_model: PolicyModel, run_id: str, *, splits: Sequence[str] = ("test",)) -> dict:
    """Apply a policy's rules to a run's stored answers (vectorised) and report coverage and error.

    Validity conditions about the request (model, schema hash) are not applied here: this measures
    the rules themselves on the run's items, per question present in both.
    """
    from workbench.policy.runtime import Policy
    from workbench.store.runs import load_answers, run_questions
    from workbench.thresholds.evaluate import evaluate_rule

    pol = Policy(policy_model)
    available = set(run_questions(con, run_id))
    out: dict[str, dict[str, Any]] = {}
    for q, cq in pol.questions.items():
        if q not in available:
            out[q] = {"missing": True}
            continue
        ans = load_answers(con, run_id, q, splits=list(splits))
        ans = ans.select(ans.labels >= 0)
        if list(ans.option_ids) != cq.options:
            out[q] = {"missing": True, "reason": "options differ between the run and the policy"}
            continue
        probs = ans.probs.copy()
        ok = np.isfinite(probs).all(axis=1)
        if ok.any():
            probs[ok] = cq.calibrator.transform(probs[ok])
        rep = evaluate_rule(cq.rule, probs, ans.labels, option_ids=cq.options)
        rep.pop("confusion", None)
        out[q] = rep
    return out


def diff_on_run(con, a: PolicyModel, b: PolicyModel, run_id: str, *, splits: Sequence[str] = ("test",)) -> dict:
    """How coverage and error move from policy ``a`` to ``b`` on a run's items."""
    ra, rb = routing_on_run(con, a, run_id, splits=splits), routing_on_run(con, b, run_id, splits=splits)
    moves = {}
    for q in sorted(set(ra) | set(rb)):
        qa, qb = ra.get(q, {"missing": True}), rb.get(q, {"missing": True})
        if qa.get("missing") or qb.get("missing"):
            moves[q] = {"a": qa, "b": qb}
            continue

        def val(r: dict, k: str):
            return r[k]["value"]

        moves[q] = {
            "a": {k: qa[k] for k in ("coverage", "error", "review_rate")},
            "b": {k: qb[k] for k in ("coverage", "error", "review_rate")},
            "coverage_change": val(qb, "coverage") - val(qa, "coverage"),
            "error_change": (
                None if val(qa, "error") is None or val(qb, "error") is None else val(qb, "error") - val(qa, "error")
            ),
            "accepted_change": qb["n_accepted"] - qa["n_accepted"],
        }
    return {"run_id": run_id, "splits": list(splits), "questions": moves}


def jev_gate_metrics_on_run(con, run_id: str):
    """A ``gate_metrics`` callback for :func:`workbench.policy.io.to_jev_thresholds`: the jev-eval gate's
    own accuracy, coverage and n on a run's labelled test items (raw probabilities, as jev-eval gates them)."""
    from workbench.policy.io import jev_gate_accepts
    from workbench.store.runs import load_answers

    def measure(question: str, qtype: str, threshold: float) -> dict | None:
        ans = load_answers(con, run_id, question, splits=["test"])
        ans = ans.select(ans.labels >= 0)
        if len(ans.labels) == 0:
            return None
        acc = jev_gate_accepts(qtype, ans.probs, threshold)
        top = np.nan_to_num(ans.probs, nan=0.0).argmax(axis=1)
        n_acc = int(acc.sum())
        correct = int((acc & (top == ans.labels)).sum())
        return {
            "accuracy": correct / n_acc if n_acc else None,
            "coverage": n_acc / len(ans.labels),
            "n": int(len(ans.labels)),
        }

    return measure


def build_cascade_policy(con, result) -> PolicyModel:
    """The policy of a :class:`~workbench.thresholds.cascade.CascadeResult`'s chosen configuration.

    A cascade of two or more stages gives a format-2 policy with a ``cascade`` section:
    ``questions[result.question]`` carries the first chosen stage's calibrator and rule (fallback
    ``escalate``), so the file is also a plain policy of the first model; ``cascade.stages`` carry every
    chosen stage's model, price, fitted calibrator and rule. When one stage alone is the cheapest
    certified configuration the policy is a plain (format 1) policy of that model with its calibrator
    and rule (fallback ``review``) and the family's guarantee. The runtime accepts a stage's answer only
    from that stage's model (version 1.0.0, no creator, no limit on the state's tokens).
    """
    from workbench.policy.model import CASCADE_FORMAT_VERSION, CascadeSpec, CascadeStage
    from workbench.store.runs import get_run, load_stored_schema

    runs = [get_run(con, r) for r in result.chosen_run_ids]
    hashes = {r["schema_hash"] for r in runs}
    if len(hashes) != 1:
        raise PolicyError(
            "the cascade's stage runs used different decision schemas",
            hint="run every stage with the same schema file so one policy can check every stage's answers",
        )
    first = runs[0]
    schema = load_stored_schema(con, first["schema_hash"])

    def source(run) -> Source:
        m = run.get("model")
        m = None if (m is None or (isinstance(m, float) and np.isnan(m))) else str(m)
        d = run.get("dialect")
        return Source(
            run_id=run["run_id"], provider=str(run["provider"]), model=m, dialect=None if d is None else str(d)
        )

    g, cal = result.guarantee, result.calibration
    single = len(runs) == 1
    objective = Objective(
        kind="guarantee",
        certified=result.certified,
        feasible=result.certified,
        risk=(
            "error rate among auto-accepted items (the cheapest certified configuration of a cascade family: "
            "this model alone)"
            if single
            else "error rate among items auto-accepted at any stage of the cascade"
        ),
        alpha=g["alpha"],
        delta=g["delta"],
        method=g["method"],
        n_calibration=cal["n_items"],
        n_calibrator_fit=int(cal.get("n_calibrator_fit") or 0),
        n_accepted_calibration=g["accepted"],
        risk_upper_bound=g["risk_upper_bound"],
        expected_coverage=cal["coverage"],
        calibration_error=cal["error_rate"],
        details={"cascade": {k: v for k, v in g.items() if k not in ("alpha", "delta", "method")}, **cal},
    )
    calibrators = [CalibratorSpec(**result.calibrators[s]) for s in result.structure]
    prices = [result.prices[s] for s in result.structure]
    rules = result.stage_rule_dicts()
    stages = [
        CascadeStage(source=source(r), price_per_call_usd=p, calibrator=c, rule=cast(Any, rule))
        for r, p, c, rule in zip(runs, prices, calibrators, rules, strict=True)
    ]
    qpolicy = QuestionPolicy(
        type=cast(Any, result.qtype),
        options=result.option_ids,
        calibrator=calibrators[0],
        rule=cast(Any, rules[0]),
        objective=objective,
    )
    models = [s.source.model for s in stages if s.source.model]
    if single:
        notes = [
            f"one model alone ({result.chosen_label}) is the cheapest certified configuration of the cascade family "
            f"of {len(result.run_ids)} stages: a plain policy of that model"
        ]
    else:
        notes = [f"certified cascade of {len(stages)} stages: decide(response, stage=s) for the answer of stage s"]
    if not result.certified:
        notes.append("nothing certified: every item is escalated to review")
    return PolicyModel(
        format_version=1 if single else CASCADE_FORMAT_VERSION,
        policy_version="1.0.0",
        created_at=datetime.now(UTC).replace(microsecond=0).isoformat(),
        workbench_version=workbench_version,
        source=stages[0].source,
        decision_schema=SchemaSpec(hash=schema.hash, name=schema.name, questions=schema.to_wire()),
        dataset=_dataset_spec(con, first),
        questions={result.question: qpolicy},
        validity=Validity(
            schema_hashes=[schema.hash],
            # every stage's model, when each has one (a stage without a model is checked by stage only)
            models=list(dict.fromkeys(models)) if len(models) == len(stages) else [],
        ),
        notes=notes,
        cascade=None
        if single
        else CascadeSpec(question=result.question, stages=stages, objective=objective, expected_test=result.test),
    ).with_hash()
