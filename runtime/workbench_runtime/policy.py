"""The dependency-light policy runtime for production code::

    from workbench.policy import Policy
    policy = Policy.load("policy.json")          # fails closed on a corrupt/tampered/newer file
    decision = policy.decide(response)            # a System One response dict, or {"error": ...}
    decision["intent"].action                     # "accept" or the fallback ("review")

Imports numpy, pydantic and the workbench's own schema/rule/calibrator modules only (no duckdb,
pandas, scikit-learn, scipy or plotly). Every path that is not a clean, valid answer of a question
the policy knows — a provider failure, a missing or malformed answer, a refusal, a schema-hash or
model mismatch, a state over the token limit — yields the question's fallback action, never an
accepted answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from workbench_runtime.errors import AnswerError, PolicyError
from workbench_runtime.model import FORMAT, FORMAT_VERSION, QuestionPolicy
from workbench_runtime.model import Policy as PolicyModel


@dataclass(frozen=True)
class QuestionDecision:
    """What to do with one question's answer.

    ``action`` is ``accept`` (then ``option`` is the accepted option id) or the fallback action.
    ``reason`` says why in one short phrase; ``p_top``/``margin`` are the calibrated figures the
    rule looked at (None when there was no usable answer).
    """

    question: str
    action: str
    option: str | None
    reason: str
    p_top: float | None = None
    margin: float | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    def to_dict(self) -> dict:
        return asdict(self)


def _inf(v: float | None, sign: float = 1.0) -> float:
    return sign * math.inf if v is None else float(v)


class _CompiledQuestion:
    """A question's schema, calibrator and rule, built once at load time."""

    def __init__(self, qid: str, qp: QuestionPolicy, schema_question: Any):
        from workbench_runtime.calibrators import calibrator_from_dict
        from workbench_runtime.rules import ChoiceRule, ClassThreshold, NoulRule, ScoreRule

        self.qid, self.qp, self.question = qid, qp, schema_question
        self.options = list(qp.options)
        self.fallback = qp.rule.fallback
        try:
            self.calibrator = calibrator_from_dict(qp.calibrator.model_dump())
        except Exception as exc:  # any bad parameter: refuse the whole file
            raise PolicyError(f"question {qid!r}: calibrator cannot be rebuilt: {exc}") from None
        index = {o: i for i, o in enumerate(self.options)}
        r = qp.rule
        if r.kind == "noul_two_sided":
            # null disables a side: tau_yes=+inf never accepts yes, tau_no=-inf never accepts no
            self.rule = NoulRule(_inf(r.tau_yes), _inf(r.tau_no, -1.0), fallback=r.fallback)
        else:
            unknown = [o for o in [*r.per_class, *r.abstain_options] if o not in index]
            if unknown:
                raise PolicyError(f"question {qid!r}: rule names unknown option {unknown[0]!r}")
            per = {index[o]: ClassThreshold(_inf(c.tau), _inf(c.margin)) for o, c in r.per_class.items()}
            if r.kind == "score":
                self.rule = ScoreRule(_inf(r.tau), _inf(r.margin), level=r.level, per_class=per, fallback=r.fallback)
            else:
                self.rule = ChoiceRule(
                    _inf(r.tau),
                    _inf(r.margin),
                    per_class=per,
                    abstain_options=tuple(index[o] for o in r.abstain_options),
                    fallback=r.fallback,
                )

    def fallback_decision(self, reason: str) -> QuestionDecision:
        return QuestionDecision(self.qid, self.fallback, None, reason)

    def decide_probs(self, probs: np.ndarray) -> list[QuestionDecision]:
        """Vectorised: ``probs`` (n, k) raw probabilities in option order (NaN rows = failures)."""
        from workbench_runtime.rules import top_two_fast

        cal = np.full_like(probs, np.nan, dtype=float)
        ok = np.isfinite(probs).all(axis=1)
        if ok.any():
            cal[ok] = self.calibrator.transform(probs[ok])
        dec = self.rule.decide(cal)
        _, p1, p2 = top_two_fast(cal)
        out = []
        for i in range(len(cal)):
            acc = bool(dec.accepted[i])
            opt = self.options[int(dec.option[i])] if dec.option[i] >= 0 else None
            why = str(dec.reason[i])
            reason = f"accepted: {why}" if acc else why
            out.append(
                QuestionDecision(
                    self.qid,
                    "accept" if acc else self.fallback,
                    opt if acc else None,
                    reason if acc else f"{why} (would have been {opt!r})" if opt else why,
                    None if not ok[i] else float(p1[i]),
                    None if not ok[i] else float(p1[i] - p2[i]),
                )
            )
        return out


def _answers_map(response: Mapping[str, Any]) -> dict[str, Any] | None:
    """System One answers keyed by question id (an OpenAI-dialect array with ``name`` is accepted)."""
    answers = response.get("answers")
    if isinstance(answers, dict):
        return answers
    if isinstance(answers, list):
        return {a.get("name"): a for a in answers if isinstance(a, dict) and "name" in a}
    return None


class Policy:
    """A loaded, verified policy that turns decision-model responses into actions."""

    def __init__(self, model: PolicyModel, *, source: str = "<policy>"):
        from workbench_runtime.questions import DecisionSchema

        self.model = model
        self.source = source
        try:
            schema = DecisionSchema.from_dict({"questions": model.decision_schema.questions}, source=source)
        except Exception as exc:
            raise PolicyError(f"{source}: the decision schema inside the policy is invalid: {exc}") from None
        if schema.hash != model.decision_schema.hash:
            raise PolicyError(
                f"{source}: the embedded decision schema does not match its hash",
                hint="the file was edited; re-export it",
            )
        self.schema = schema
        #: per-question hash of the definition the policy was measured with (reworded -> fallback)
        self._question_hashes = {q: schema.subset([q]).hash for q in model.questions}
        self.questions: dict[str, _CompiledQuestion] = {}
        for qid, qp in model.questions.items():
            if qid not in schema.questions:
                raise PolicyError(f"{source}: question {qid!r} is not in the policy's decision schema")
            self.questions[qid] = _CompiledQuestion(qid, qp, schema.questions[qid])

    # -- loading ----------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read and verify a policy file; raises :class:`PolicyError` (fail closed) on any problem."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PolicyError(f"{path}: policy file does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{path}: cannot read policy file: {exc}") from None
        return cls.from_text(text, source=str(path))

    @classmethod
    def from_text(cls, text: str, *, source: str = "<policy>") -> Policy:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(
                f"{source}: corrupt policy file (not JSON: {exc.msg} at line {exc.lineno})",
                hint="re-export it with `workbench policy export`",
            ) from None
        return cls.from_dict(doc, source=source)

    @classmethod
    def from_dict(cls, doc: Any, *, source: str = "<policy>") -> Policy:
        return cls(verify_document(doc, source=source), source=source)

    # -- deciding ---------------------------------------------------------------------------------
    @property
    def content_hash(self) -> str:
        return self.model.content_hash or ""

    @property
    def version(self) -> str:
        return self.model.policy_version

    def _global_refusal(self, response: Any, schema_hash: str | None, state_tokens: int | None) -> str | None:
        if not isinstance(response, Mapping):
            return f"provider failure: response is {type(response).__name__}, not an object"
        err = response.get("error")
        if err:
            kind = err.get("kind") or err.get("type") or err.get("code") if isinstance(err, Mapping) else None
            return f"provider failure{f' ({kind})' if kind else ''}"
        v = self.model.validity
        if schema_hash is not None and schema_hash not in v.schema_hashes:
            return f"schema hash mismatch: {schema_hash[:12]} is not accepted by this policy"
        if v.models:
            model = response.get("model")
            if model not in v.models:
                return f"model mismatch: answered by {model!r}, policy is valid for {', '.join(v.models)}"
        if v.max_state_tokens is not None and state_tokens is not None and state_tokens > v.max_state_tokens:
            return f"state has {state_tokens} tokens, over the policy's limit of {v.max_state_tokens}"
        if _answers_map(response) is None:
            return "provider failure: response has no 'answers'"
        return None

    def _request_mismatches(self, request: Any) -> dict[str, str]:
        """Questions whose definition in ``request`` differs from the policy's (reason per question)."""
        from workbench_runtime.questions import DecisionSchema

        questions = request.get("questions") if isinstance(request, Mapping) else None
        if not isinstance(questions, Mapping):
            return {q: "request has no 'questions'" for q in self.questions}
        out = {}
        for q in self.questions:
            if q not in questions:
                out[q] = "question was not asked in the request"
                continue
            try:
                h = DecisionSchema.from_dict({"questions": {q: questions[q]}}, source="request").hash
            except Exception:
                out[q] = "question definition in the request is invalid"
                continue
            if h != self._question_hashes[q]:
                out[q] = "question definition differs from the policy's (reworded or options changed)"
        return out

    def decide(
        self,
        response: Any,
        *,
        schema_hash: str | None = None,
        request: Any = None,
        state_tokens: int | None = None,
        decision_id: str | None = None,
        log: Any = None,
    ) -> dict[str, QuestionDecision]:
        """Action per policy question for one response.

        Parameters
        ----------
        response : dict
            A System One response (``{"model": ..., "answers": {...}}``) or a failure (``{"error": ...}``).
        schema_hash : str, optional
            Hash of the decision schema the request was sent with; must be one the policy accepts.
        request : dict, optional
            The request that was sent; each question's definition must equal the policy's
            (a reworded question or changed options routes that question to fallback).
        state_tokens : int, optional
            Size of the state sent; over ``validity.max_state_tokens`` routes everything to fallback.
        decision_id : str, optional
            The caller's id of this decision (logged; outcomes refer to it). A random id when omitted.
        log : DecisionLog, optional
            Append one line per question decision (errors are counted by the log, never raised).

        Returns
        -------
        decisions : dict of question id -> QuestionDecision
        """
        return self.decide_many(
            [response],
            schema_hash=schema_hash,
            requests=None if request is None else [request],
            state_tokens=None if state_tokens is None else [state_tokens],
            decision_ids=None if decision_id is None else [decision_id],
            log=log,
        )[0]

    def decide_many(
        self,
        responses: Iterable[Any],
        *,
        schema_hash: str | None = None,
        requests: list[Any] | None = None,
        state_tokens: list[int | None] | None = None,
        decision_ids: list[str] | None = None,
        log: Any = None,
    ) -> list[dict[str, QuestionDecision]]:
        """:meth:`decide` over a batch; the rule is applied vectorised per question."""
        from workbench_runtime.answers import normalise_answer

        responses = list(responses)
        n = len(responses)
        refusals = [
            self._global_refusal(r, schema_hash, None if state_tokens is None else state_tokens[i])
            for i, r in enumerate(responses)
        ]
        mismatches = [self._request_mismatches(r) for r in requests] if requests is not None else None
        out: list[dict[str, QuestionDecision]] = [{} for _ in range(n)]
        logged: dict[str, np.ndarray] = {}
        for qid, cq in self.questions.items():
            k = len(cq.options)
            probs = np.full((n, k), np.nan)
            reasons: list[str | None] = list(refusals)
            if mismatches is not None:
                reasons = [r if r is not None else mismatches[i].get(qid) for i, r in enumerate(reasons)]
            for i, r in enumerate(responses):
                if reasons[i] is not None:
                    continue
                ans = _answers_map(r).get(qid)
                if ans is None:
                    reasons[i] = "missing answer for this question"
                    continue
                if isinstance(ans, Mapping) and ans.get("error"):
                    reasons[i] = "provider failure for this question"
                    continue
                try:
                    probs[i] = normalise_answer(cq.question, ans, question_id=qid).probs
                except AnswerError as exc:
                    reasons[i] = f"invalid answer: {exc.message}"
            decided = cq.decide_probs(probs)
            for i in range(n):
                out[i][qid] = cq.fallback_decision(reasons[i]) if reasons[i] is not None else decided[i]
            if log is not None:
                logged[qid] = probs
        if log is not None:
            self._log(log, responses, out, logged, schema_hash, decision_ids)
        return out

    def _log(self, log: Any, responses: list, out: list, probs: dict, schema_hash: str | None, ids: Any) -> None:
        """One decision-log line per question decision; never raises (the log counts its own errors)."""
        try:
            for i, r in enumerate(responses):
                row = {q: (p[i] if np.isfinite(p[i]).all() else None) for q, p in probs.items()}
                log.log_decisions(
                    out[i],
                    decision_id=None if ids is None else ids[i],
                    policy_hash=self.content_hash,
                    policy_version=self.version,
                    model=r.get("model") if isinstance(r, Mapping) else None,
                    schema_hash=schema_hash,
                    probs=row,
                )
        except Exception:  # a broken log object must not break the caller's decision
            pass


def verify_document(doc: Any, *, source: str = "<policy>") -> PolicyModel:
    """Check type, format version, structure and content hash; return the validated model."""
    from workbench_runtime.model import content_hash

    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: corrupt policy file (expected a JSON object)")
    if doc.get("format") != FORMAT:
        raise PolicyError(
            f"{source}: not a workbench policy file (format is {doc.get('format')!r})",
            hint=f"expected format {FORMAT!r}",
        )
    fv = doc.get("format_version")
    if not isinstance(fv, int) or isinstance(fv, bool):
        raise PolicyError(f"{source}: corrupt policy file (format_version {fv!r} is not an integer)")
    if fv > FORMAT_VERSION:
        raise PolicyError(
            f"{source}: policy format version {fv} is newer than this workbench reads ({FORMAT_VERSION})",
            hint="upgrade decision-workbench to load it",
        )
    stored = doc.get("content_hash")
    if not isinstance(stored, str):
        raise PolicyError(f"{source}: policy has no content_hash", hint="export it with `workbench policy export`")
    try:
        actual = content_hash(doc)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{source}: corrupt policy file ({exc})") from None
    if actual != stored:
        raise PolicyError(
            f"{source}: content hash mismatch — the file was modified after export "
            f"(stored {stored[:19]}…, actual {actual[:19]}…)",
            hint="re-export the policy; never edit a policy file by hand",
        )
    try:
        model = PolicyModel.model_validate(doc)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(p) for p in e["loc"])
        raise PolicyError(f"{source}: invalid policy: {loc}: {e['msg']}") from None
    return model
