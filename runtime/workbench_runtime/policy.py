"""The dependency-light policy runtime for production code::

    from workbench_runtime import Policy           # or, inside the workbench: from workbench.policy import Policy
    policy = Policy.load("policy.json")          # fails closed on a corrupt/tampered/newer file
    policy = Policy.load("policy.json", verify_key="policy.pub")   # ... and on an unsigned or wrongly signed one
    decision = policy.decide(response)            # a System One response dict (or its raw JSON text)
    decision["intent"].action                     # "accept" or the fallback ("review")

Imports numpy and pydantic only. Every path that is not a clean, complete answer of a question the
policy knows — a provider failure (any ``error`` field other than ``null``), a missing, partial or
self-contradicting answer, duplicate keys, a refusal, a schema-hash or model mismatch, a state over
the token limit — yields the question's fallback action with a reason, never an accepted answer, and
``decide`` never raises on a response, whatever it holds.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from workbench_runtime.errors import AnswerError, PolicyError, WorkbenchError
from workbench_runtime.jsonio import DuplicateKeysDict, StrictJSONError, duplicate_keys, loads_marked, loads_strict
from workbench_runtime.model import FORMAT, FORMAT_VERSION, QuestionPolicy
from workbench_runtime.model import Policy as PolicyModel
from workbench_runtime.questions import DecisionSchema, option_ids

#: A policy file larger than this is refused before parsing (a real one is a few hundred KB at most).
MAX_POLICY_BYTES = 64 * 1024 * 1024
#: The rule kind each question type must use.
_RULE_FOR_TYPE = {"noul": "noul_two_sided", "choice": "top_margin", "score": "score"}


@dataclass(frozen=True)
class QuestionDecision:
    """What to do with one question's answer.

    ``action`` is ``accept`` (then ``option`` is the accepted option id) or the fallback action.
    ``reason`` says why in one short phrase; ``p_top``/``margin`` are the calibrated figures the
    rule looked at (None when there was no usable answer). ``would_accept`` is the option the rule
    would have auto-accepted when the rollout held it back (``mode: shadow`` or an option not in
    ``enabled_options``); None otherwise.
    """

    question: str
    action: str
    option: str | None
    reason: str
    p_top: float | None = None
    margin: float | None = None
    would_accept: str | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    def to_dict(self) -> dict:
        return asdict(self)


_new_object = object.__new__


def _decision(
    question: str,
    action: str,
    option: str | None,
    reason: str,
    p_top: float | None = None,
    margin: float | None = None,
    would_accept: str | None = None,
) -> QuestionDecision:
    """``QuestionDecision(...)`` without the frozen dataclass's seven ``object.__setattr__`` calls (an equal object)."""
    d = _new_object(QuestionDecision)
    d.__dict__.update(
        question=question,
        action=action,
        option=option,
        reason=reason,
        p_top=p_top,
        margin=margin,
        would_accept=would_accept,
    )
    return d


def _inf(v: float | None, sign: float = 1.0) -> float:
    return sign * np.inf if v is None else float(v)


class _CompiledQuestion:
    """A question's schema, calibrator and rule, built and cross-checked once at load time."""

    def __init__(self, qid: str, qp: QuestionPolicy, schema_question: Any, *, shadow: bool, source: str):
        from workbench_runtime.calibrators import calibrator_from_dict
        from workbench_runtime.rules import ChoiceRule, ClassThreshold, NoulRule, Rule, ScoreRule

        where = f"{source}: question {qid!r}"
        self.qid, self.qp, self.question = qid, qp, schema_question
        if qp.type != schema_question.type:
            raise PolicyError(
                f"{where}: type {qp.type!r} differs from the embedded decision schema's {schema_question.type!r}"
            )
        # Option order is what maps probability positions to option ids; the schema's order is pinned by its hash.
        if list(qp.options) != option_ids(schema_question):
            raise PolicyError(
                f"{where}: options differ from the embedded decision schema (order or ids)",
                hint="the file was edited; re-export it",
            )
        if qp.rule.kind != _RULE_FOR_TYPE[qp.type]:
            raise PolicyError(f"{where}: rule kind {qp.rule.kind!r} does not fit a {qp.type} question")
        self.options = list(qp.options)
        index = {o: i for i, o in enumerate(self.options)}
        #: for the batch reader (_read_answers): option id -> position, the id set, a getter of the values in order
        self.index, self.id_set = index, frozenset(self.options)
        self.values_of = operator.itemgetter(*self.options) if len(self.options) >= 2 else None
        self.fallback = qp.rule.fallback
        self.shadow = shadow
        enabled = qp.enabled_options
        if enabled is not None:
            unknown = [o for o in enabled if o not in index]
            if unknown or len(set(enabled)) != len(enabled):
                raise PolicyError(
                    f"{where}: enabled_options names {'unknown option ' + repr(unknown[0]) if unknown else 'an option twice'}"
                )
        self.enabled = None if enabled is None else np.isin(np.arange(len(self.options)), [index[o] for o in enabled])
        try:
            self.calibrator = calibrator_from_dict(qp.calibrator.model_dump())
        except WorkbenchError as exc:
            raise PolicyError(f"{where}: calibrator cannot be rebuilt: {exc.message}") from None
        self._check_calibrator(where)
        r = qp.rule
        self.rule: Rule
        if r.kind == "noul_two_sided":
            # null disables a side: tau_yes=+inf never accepts yes, tau_no=-inf never accepts no
            self.rule = NoulRule(_inf(r.tau_yes), _inf(r.tau_no, -1.0), fallback=r.fallback)
        else:
            unknown = [o for o in [*r.per_class, *r.abstain_options] if o not in index]
            if unknown:
                raise PolicyError(f"{where}: rule names unknown option {unknown[0]!r}")
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

    def _check_calibrator(self, where: str) -> None:
        """The calibrator must map valid probability rows of this question to valid probability rows."""
        k = len(self.options)
        probe = np.vstack([np.full(k, 1.0 / k), np.eye(k)[0] * 0.9 + 0.1 / k])
        try:
            out = np.asarray(self.calibrator.transform(probe), dtype=float)
        except (WorkbenchError, ValueError, IndexError, TypeError, FloatingPointError) as exc:
            raise PolicyError(f"{where}: calibrator does not apply to {k} options ({exc})") from None
        if out.shape != probe.shape or not np.isfinite(out).all() or not np.allclose(out.sum(axis=1), 1.0, atol=1e-6):
            raise PolicyError(f"{where}: calibrator does not return probability vectors over {k} options")

    def fallback_decision(self, reason: str) -> QuestionDecision:
        return _decision(self.qid, self.fallback, None, reason)

    def _rule_on(self, probs: np.ndarray) -> tuple[np.ndarray, Any, np.ndarray]:
        """(usable rows (n,) bool, the rule's decision arrays, calibrated probabilities (n, k)) of raw
        ``probs`` (n, k): the calibrator, then the rule; a row that is not finite before or after the
        calibrator is unusable (NaN)."""
        cal = np.full_like(probs, np.nan, dtype=float)
        ok = np.isfinite(probs).all(axis=1)
        if ok.any():
            with np.errstate(all="ignore"):
                cal[ok] = self.calibrator.transform(probs[ok])
        ok &= np.isfinite(cal).all(axis=1)
        cal[~ok] = np.nan
        return ok, self.rule.decide(cal), cal

    def accepted_options(self, probs: np.ndarray) -> np.ndarray:
        """(n,) int64: the option index each row of raw ``probs`` (n, k) is auto-accepted as, -1 where
        :meth:`decide_probs` does not accept (the rule's fallback, an unusable row, shadow mode, or an
        option the rollout has not enabled) — its decisions as arrays, for batch figures."""
        ok, dec, _ = self._rule_on(probs)
        option = np.asarray(dec.option, dtype=np.int64)
        accepted = ok & np.asarray(dec.accepted, dtype=bool) & (option >= 0) & (not self.shadow)
        if self.enabled is not None:
            accepted &= np.asarray(self.enabled, dtype=bool)[np.where(option >= 0, option, 0)]
        return np.where(accepted, option, -1)

    def decide_probs(self, probs: np.ndarray) -> list[QuestionDecision]:
        """Vectorised: ``probs`` (n, k) raw probabilities in option order (NaN rows = no usable answer)."""
        from workbench_runtime.rules import top_two_fast

        ok, dec, cal = self._rule_on(probs)
        _, p1, p2 = top_two_fast(cal)
        # Python lists once (numpy scalar indexing per row costs more than the decision itself);
        # p1 - p2 elementwise is the same IEEE subtraction as the per-row float(p1[i] - p2[i])
        oks, accepted, option, why = ok.tolist(), dec.accepted.tolist(), dec.option.tolist(), dec.reason.tolist()
        p_tops, margins = p1.tolist(), (p1 - p2).tolist()
        qid, fallback, options, shadow = self.qid, self.fallback, self.options, self.shadow
        enabled = None if self.enabled is None else self.enabled.tolist()
        out: list[QuestionDecision] = []
        append = out.append
        for good, acc, o, reason, p_top, margin in zip(oks, accepted, option, why, p_tops, margins, strict=True):
            if not good:
                p_top = margin = None
            opt = options[o] if good and o >= 0 else None
            if not acc:
                append(
                    _decision(
                        qid, fallback, None, f"{reason} (would have been {opt!r})" if opt else reason, p_top, margin
                    )
                )
                continue
            figures = f"p_top {p_top:.4f}, margin {margin:.4f}"
            if shadow:
                reason = f"shadow mode: the rule would have accepted {opt!r} ({figures})"
                append(_decision(qid, fallback, None, reason, p_top, margin, opt))
            elif enabled is not None and not enabled[o]:
                reason = f"rollout: {opt!r} is not enabled for auto-accept; the rule would have accepted it ({figures})"
                append(_decision(qid, fallback, None, reason, p_top, margin, opt))
            else:
                append(_decision(qid, "accept", opt, f"accepted {opt!r}: {figures} clear the rule", p_top, margin))
        return out


def _answers_map(response: Mapping[str, Any]) -> tuple[dict[str, Any] | None, set[str]]:
    """System One answers keyed by question id (an OpenAI-dialect array with ``name`` is accepted), and the
    ids answered more than once (an array naming a question twice, or duplicate keys in the JSON text)."""
    answers = response.get("answers")
    if isinstance(answers, dict):
        return answers, set(duplicate_keys(answers))
    if isinstance(answers, list):
        out: dict[str, Any] = {}
        twice: set[str] = set()
        for a in answers:
            name = a.get("name") if isinstance(a, dict) else None
            if isinstance(name, str):
                if name in out:
                    twice.add(name)
                out[name] = a
        return out, twice
    return None, set()


def _describe(value: Any) -> str:
    from workbench_runtime.answers import _short

    return _short(value)


class Policy:
    """A loaded, verified policy that turns decision-model responses into actions."""

    def __init__(self, model: PolicyModel, *, source: str = "<policy>"):
        self.model = model
        self.source = source
        try:
            schema = DecisionSchema.from_dict({"questions": model.decision_schema.questions}, source=source)
        except WorkbenchError as exc:
            raise PolicyError(f"{source}: the decision schema inside the policy is invalid: {exc.message}") from None
        if schema.hash != model.decision_schema.hash:
            raise PolicyError(
                f"{source}: the embedded decision schema does not match its hash",
                hint="the file was edited; re-export it",
            )
        self.schema = schema
        #: per-question hash of the definition the policy was measured with (reworded -> fallback)
        self._question_hashes = {q: schema.subset([q]).hash for q in model.questions if q in schema.questions}
        self.questions: dict[str, _CompiledQuestion] = {}
        for qid, qp in model.questions.items():
            if qid not in schema.questions:
                raise PolicyError(f"{source}: question {qid!r} is not in the policy's decision schema")
            self.questions[qid] = _CompiledQuestion(
                qid, qp, schema.questions[qid], shadow=model.mode == "shadow", source=source
            )
        #: compiled cascade stages (format 2), stage 0 first; empty without a cascade section
        self.stages: list[_CompiledQuestion] = []
        self._stage_models: list[str | None] = []
        if model.cascade is not None:
            self._compile_cascade(model, source)

    def _compile_cascade(self, model: PolicyModel, source: str) -> None:
        """Each stage as a question of its own (same options, the stage's calibrator and rule), checked."""
        cas = model.cascade
        assert cas is not None
        qid = cas.question
        if qid not in self.questions:
            raise PolicyError(f"{source}: the cascade's question {qid!r} is not one of the policy's questions")
        top = model.questions[qid]
        last = len(cas.stages) - 1
        for s, st in enumerate(cas.stages):
            where = f"{source}: cascade stage {s}"
            if (st.rule.fallback == "escalate") != (s < last):
                raise PolicyError(
                    f"{where}: rule fallback {st.rule.fallback!r} does not fit "
                    + (
                        "a stage before the last (must be 'escalate')"
                        if s < last
                        else "the last stage (review or hold)"
                    )
                )
            qp = top.model_copy(update={"calibrator": st.calibrator, "rule": st.rule, "enabled_options": None})
            self.stages.append(
                _CompiledQuestion(qid, qp, self.schema.questions[qid], shadow=model.mode == "shadow", source=where)
            )
            self._stage_models.append(st.source.model)
        if top.rule != cas.stages[0].rule or top.calibrator != cas.stages[0].calibrator:
            raise PolicyError(f"{source}: question {qid!r} must carry the cascade's stage 0 rule and calibrator")

    # -- loading ----------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, verify_key: Any = None) -> Policy:
        """Read and verify a policy file; raises :class:`PolicyError` (fail closed) on any problem.

        Parameters
        ----------
        path : str or Path
        verify_key : str, Path or :class:`~workbench_runtime.signing.PolicyKey`, optional
            A key file (Ed25519 public or private PEM, or an HMAC secret). When given, a file that
            is unsigned, signed with another key or changed after signing is refused.
        """
        path = Path(path)
        try:
            if not path.is_file():
                raise PolicyError(
                    f"{path}: policy file does not exist" if not path.exists() else f"{path}: not a regular file"
                )
            if path.stat().st_size > MAX_POLICY_BYTES:
                raise PolicyError(f"{path}: {path.stat().st_size} bytes is too large for a policy file")
            data = path.read_bytes()
        except OSError as exc:
            raise PolicyError(f"{path}: cannot read policy file ({type(exc).__name__})") from None
        return cls.from_text(data, source=str(path), verify_key=verify_key)

    @classmethod
    def from_text(cls, text: str | bytes, *, source: str = "<policy>", verify_key: Any = None) -> Policy:
        """Parse and verify a policy document given as text (duplicate keys, NaN and non-UTF-8 are refused)."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PolicyError(f"{source}: not UTF-8 text (byte {exc.start})") from None
        try:
            doc = loads_strict(text)
        except StrictJSONError as exc:
            raise PolicyError(
                f"{source}: corrupt policy file ({exc})", hint="re-export it with `workbench policy export`"
            ) from None
        return cls.from_dict(doc, source=source, verify_key=verify_key)

    @classmethod
    def from_dict(cls, doc: Any, *, source: str = "<policy>", verify_key: Any = None) -> Policy:
        return cls(verify_document(doc, source=source, verify_key=verify_key), source=source)

    # -- deciding ---------------------------------------------------------------------------------
    @property
    def content_hash(self) -> str:
        return self.model.content_hash or ""

    @property
    def version(self) -> str:
        return self.model.policy_version

    def _global_refusal(self, response: Any, schema_hash: str | None, state_tokens: int | None) -> str | None:
        """Why no question of this response may be accepted (None: look at each answer)."""
        if not isinstance(response, Mapping):
            return f"provider failure: response is {type(response).__name__}, not an object"
        twice = duplicate_keys(response)
        if twice:
            return f"invalid response: key {twice[0][:60]!r} appears more than once"
        if "error" in response and response["error"] is not None:
            err = response["error"]
            kind = next((err[k] for k in ("kind", "type", "code") if isinstance(err, Mapping) and err.get(k)), None)
            if kind is not None:
                return f"provider failure ({_describe(kind)})"
            return f"provider failure: the response carries an 'error' field ({_describe(err)})"
        v = self.model.validity
        if schema_hash is not None and schema_hash not in v.schema_hashes:
            return f"schema hash mismatch: {str(schema_hash)[:12]} is not accepted by this policy"
        if v.models:
            model = response.get("model")
            if not isinstance(model, str) or model not in v.models:
                return f"model mismatch: answered by {_describe(model)}, policy is valid for {', '.join(v.models)}"
        if v.max_state_tokens is not None and state_tokens is not None and state_tokens > v.max_state_tokens:
            return f"state has {state_tokens} tokens, over the policy's limit of {v.max_state_tokens}"
        if _answers_map(response)[0] is None:
            return "provider failure: response has no 'answers'"
        return None

    def _refusals(self, responses: list, schema_hash: str | None, state_tokens: list | None) -> list[str | None]:
        """:meth:`_global_refusal` per response (guarded); a plainly clean response is passed without the call.

        Clean: a plain ``dict`` (no duplicate keys) without an ``error``, answered by a model the policy
        accepts (a ``str``), a state size within the limit (an ``int``) and an ``answers`` object — exactly
        the responses for which :meth:`_global_refusal` returns None without looking further; anything
        else takes the full check, which says what is wrong.
        """
        v = self.model.validity
        models = frozenset(v.models) if v.models else None
        limit = v.max_state_tokens
        try:
            refused = schema_hash is not None and schema_hash not in v.schema_hashes
        except Exception:  # a hostile schema_hash: the guarded full check reports it per response
            refused = True
        if refused:  # no response is clean: the full check says why (a provider failure before the hash)
            models, limit = frozenset(), 0
        out: list[str | None] = []
        for i, r in enumerate(responses):
            tokens = None if state_tokens is None else state_tokens[i]
            if (
                type(r) is dict
                and r.get("error") is None
                and type(r.get("answers")) is dict
                and (models is None or (type(m := r.get("model")) is str and m in models))
                and (limit is None or tokens is None or (type(tokens) is int and tokens <= limit))
            ):
                out.append(None)
            elif isinstance(r, _Unreadable):
                out.append(f"provider failure: response is not JSON ({r.why})")
            else:
                out.append(_guarded(self._global_refusal, r, schema_hash, tokens))
        return out

    def _request_mismatches(self, request: Any) -> dict[str, str]:
        """Questions whose definition in ``request`` differs from the policy's (reason per question)."""
        if isinstance(request, (str, bytes)):
            try:
                request = loads_strict(request)
            except StrictJSONError as exc:
                return {q: f"request is not valid JSON ({exc})" for q in self.questions}
        questions = request.get("questions") if isinstance(request, Mapping) else None
        if not isinstance(questions, Mapping):
            return {q: "request has no 'questions'" for q in self.questions}
        if duplicate_keys(questions):
            return {q: "request names a question twice" for q in self.questions}
        out = {}
        for q in self.questions:
            if q not in questions:
                out[q] = "question was not asked in the request"
                continue
            if duplicate_keys(questions[q]) or duplicate_keys(
                questions[q].get("criteria") if isinstance(questions[q], Mapping) else None
            ):
                out[q] = "question definition in the request has duplicate keys"
                continue
            try:
                h = DecisionSchema.from_dict({"questions": {q: questions[q]}}, source="request").hash
            except (WorkbenchError, ValueError, TypeError):
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
        stage: int | None = None,
    ) -> dict[str, QuestionDecision]:
        """Action per policy question for one response; never raises on a bad response.

        Parameters
        ----------
        response : dict, str or bytes
            A System One response (``{"model": ..., "answers": {...}}``), a failure (``{"error": ...}``),
            or its raw JSON text (then duplicate keys are detected and refused).
        schema_hash : str, optional
            Hash of the decision schema the request was sent with; must be one the policy accepts.
        request : dict or str, optional
            The request that was sent; each question's definition must equal the policy's
            (a reworded question or changed options routes that question to fallback).
        state_tokens : int, optional
            Size of the state sent; over ``validity.max_state_tokens`` routes everything to fallback.
        decision_id : str, optional
            The caller's id of this decision (logged; outcomes refer to it). A random id when omitted.
        log : DecisionLog, optional
            Append one line per question decision (errors are counted by the log, never raised).
        stage : int, optional
            Cascade policies (format 2): which stage answered ``response``. The cascade's question is
            decided with that stage's rule — ``accept``, ``escalate`` (ask stage ``stage + 1``) or, at
            the last stage, ``review`` — and the response's model must be the stage's. Other
            questions are decided at stage 0 only. ``None``: stage 0 (or a plain policy).

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
            stage=stage,
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
        stage: int | None = None,
    ) -> list[dict[str, QuestionDecision]]:
        """:meth:`decide` over a batch; the rule is applied vectorised per question.

        A bad response only affects its own decisions, never the rest of the batch. ``stage``: as in
        :meth:`decide`, for every response of the batch.
        """
        questions = self._questions_at(stage)
        responses = [_parse_response(r) for r in responses]
        n = len(responses)
        if requests is not None and len(requests) != n:
            raise ValueError(f"{len(requests)} requests for {n} responses")
        if state_tokens is not None and len(state_tokens) != n:
            raise ValueError(f"{len(state_tokens)} state sizes for {n} responses")
        if decision_ids is not None and len(decision_ids) != n:
            raise ValueError(f"{len(decision_ids)} decision ids for {n} responses")
        refusals = self._refusals(responses, schema_hash, state_tokens)
        mismatches = (
            [_guarded_map(self._request_mismatches, r, self.questions) for r in requests]
            if requests is not None
            else None
        )
        out: list[dict[str, QuestionDecision]] = [{} for _ in range(n)]
        logged: dict[str, np.ndarray] = {}
        for qid, cq in questions.items():
            probs = np.full((n, len(cq.options)), np.nan)
            reasons: list[str | None] = list(refusals)
            if mismatches is not None:
                reasons = [r if r is not None else mismatches[i].get(qid) for i, r in enumerate(reasons)]
            if stage is not None and self.stages and qid == self.model.cascade.question:  # type: ignore[union-attr]
                want = self._stage_models[stage]
                reasons = [
                    r if r is not None or want is None else _stage_model_mismatch(responses[i], want, stage)
                    for i, r in enumerate(reasons)
                ]
            pending = [i for i, why in enumerate(reasons) if why is None]
            # clean answers are read for the whole batch at once; the rest (and any answer the batch reader
            # is not sure of) one by one, by the reader that names what is wrong
            for i in _read_answers(cq, responses, pending, probs):
                reasons[i] = _guarded(_read_answer, cq, responses[i], probs, i)
            live = [i for i in pending if reasons[i] is None]
            try:
                decided = cq.decide_probs(probs[live]) if live else []
            except Exception as exc:  # fail closed: never accept, never break the caller
                decided = [cq.fallback_decision(f"internal error applying the rule ({type(exc).__name__})")] * len(live)
            for i, d in zip(live, decided, strict=True):
                out[i][qid] = d
            fallback = cq.fallback_decision
            for i, why in enumerate(reasons):
                if why is not None:
                    out[i][qid] = fallback(why)
            if log is not None:
                logged[qid] = probs
        if log is not None:
            self._log(log, responses, out, logged, schema_hash, decision_ids)
        return out

    def _questions_at(self, stage: int | None) -> dict[str, _CompiledQuestion]:
        """The compiled questions that decide a response of ``stage`` (see :meth:`decide`)."""
        if stage is None:
            return self.questions
        if not self.stages:
            raise ValueError("stage= applies to cascade policies only (this policy has no cascade section)")
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < len(self.stages):
            raise ValueError(f"stage must be an integer in 0..{len(self.stages) - 1}, got {stage!r}")
        qid = self.model.cascade.question  # type: ignore[union-attr]
        if stage == 0:
            return {**self.questions, qid: self.stages[0]}
        return {qid: self.stages[stage]}

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


def _stage_model_mismatch(response: Any, want: str, stage: int) -> str | None:
    model = response.get("model") if isinstance(response, Mapping) else None
    if model == want:
        return None
    return f"model mismatch: cascade stage {stage} is {want}, answered by {_describe(model)}"


def _parse_response(response: Any) -> Any:
    """Raw JSON text becomes data with duplicate keys marked; anything else is used as given."""
    if isinstance(response, (str, bytes, bytearray)):
        try:
            return loads_marked(bytes(response) if isinstance(response, bytearray) else response)
        except StrictJSONError as exc:
            return _Unreadable(str(exc))
    return response


class _Unreadable:
    """A response whose text could not be parsed (kept so its decisions say why)."""

    def __init__(self, why: str):
        self.why = why


_ABSENT = object()
#: Fewest answers of one question read by the batch reader (below, its numpy calls cost more than they save).
_BATCH_READ_MIN = 2
#: Answers per block of the batch reader.
_BATCH_READ_ROWS = 4096


def _read_answers(cq: _CompiledQuestion, responses: list, rows: list[int], probs: np.ndarray) -> list[int]:
    """Read the clean answers of ``rows`` into ``probs`` at once; return the rows :func:`_read_answer` must read.

    A row is read here only when :func:`_read_answer` would accept it and store the same floats: plain
    dicts all the way down (no duplicate keys), no ``error``, the question's ``type`` (or none), for
    choice and score questions a ``probabilities`` object over exactly the options whose values are all
    ``float`` (bool, int, numpy scalars and others take the checked path) within [0, 1] ± 1e-9 and summing
    to within the tolerance of 1, and a stated ``choice``/``score`` that agrees with them; for noul
    questions a ``float`` in [0, 1]. The probabilities are clipped, summed per row and divided as
    :func:`~workbench_runtime.answers.normalise_answer` does (same IEEE operations on the same
    contiguous rows, so the same floats). Anything else — or anything this reader is not sure of, such
    as a stated score within 1e-9 of the tolerance — is left to the one-by-one reader, so the refusals
    and their messages are the ones it gives.
    """
    if len(rows) < _BATCH_READ_MIN:  # one answer (a decide call): the one-by-one reader is faster
        return list(rows)
    slow: list[int] = []
    for start in range(0, len(rows), _BATCH_READ_ROWS):  # bounded memory: a few MB per block at 77 options
        block = rows[start : start + _BATCH_READ_ROWS]
        try:
            slow += _read_clean(cq, responses, block, probs)
        except Exception:  # a hostile object (e.g. a key whose __eq__ raises): the block goes the checked way
            probs[block] = np.nan
            slow += block
    return slow


def _read_clean(cq: _CompiledQuestion, responses: list, rows: list[int], probs: np.ndarray) -> list[int]:
    from workbench_runtime.answers import SCORE_TOLERANCE, SUM_TOLERANCE

    qid, qtype = cq.qid, cq.question.type
    slow: list[int] = []
    fast: list[int] = []
    values: list = []
    if qtype == "noul":
        for i in rows:
            answers = responses[i]["answers"]  # rows are clean responses or ones _global_refusal passed
            ans = answers.get(qid) if type(answers) is dict else None
            if (
                type(ans) is dict
                and ans.get("error") is None
                and type(t := ans.get("type", "noul")) is str
                and t == "noul"
                and not isinstance(ans.get("probabilities"), DuplicateKeysDict)
                and type(p := ans.get("noul")) is float
                and 0.0 <= p <= 1.0
            ):
                fast.append(i)
                values.append(p)
            else:
                slow.append(i)
        if fast:
            p_yes = np.array(values)
            probs[fast, 0] = p_yes
            probs[fast, 1] = 1.0 - p_yes
        return slow
    getter, id_set, index, k = cq.values_of, cq.id_set, cq.index, len(cq.options)
    if getter is None:
        return list(rows)
    j: Any
    stated: list = []  # choice: option index (-1: none stated); score: the stated score (nan: none)
    add, extend, state = fast.append, values.extend, stated.append
    for i in rows:
        answers = responses[i]["answers"]
        ans = answers.get(qid) if type(answers) is dict else None
        if not (
            type(ans) is dict
            and ans.get("error") is None
            and type(t := ans.get("type", qtype)) is str
            and t == qtype
            and type(raw := ans.get("probabilities")) is dict
            and raw.keys() == id_set
        ):
            slow.append(i)
            continue
        if qtype == "choice":
            c = ans.get("choice", _ABSENT)
            if c is _ABSENT:
                j = -1
            elif type(c) is str and c in index:
                j = index[c]
            else:
                slow.append(i)
                continue
        else:
            c = ans.get("score", _ABSENT)
            if c is _ABSENT:
                j = np.nan
            elif type(c) is float and np.isfinite(c):
                j = c
            else:
                slow.append(i)
                continue
        add(i)
        extend(getter(raw))
        state(j)
    if not fast:
        return slow
    m = len(fast)
    if set(map(type, values)) == {float}:
        floats = np.ones(m, dtype=bool)
    else:  # rare: some value is not a float; those rows take the checked path
        floats = np.array([all(type(v) is float for v in values[r * k : (r + 1) * k]) for r in range(m)])
        values = [v if f else 0.0 for r, f in enumerate(floats.tolist()) for v in values[r * k : (r + 1) * k]]
    vec = np.array(values, dtype=float).reshape(m, k)
    with np.errstate(invalid="ignore"):
        ok = floats & np.isfinite(vec).all(axis=1) & (vec >= -1e-9).all(axis=1) & (vec <= 1 + 1e-9).all(axis=1)
        vec = np.clip(vec, 0.0, 1.0)
        total = vec.sum(axis=1)
        ok &= ~(np.abs(total - 1.0) > SUM_TOLERANCE)
        vec /= np.where(ok, total, 1.0)[:, None]
        if qtype == "choice":
            chosen = np.array(stated, dtype=np.intp)
            has = chosen >= 0
            if has.any():
                ok &= ~has | (vec[np.arange(m), np.where(has, chosen, 0)] >= vec.max(axis=1) - 1e-9)
        else:
            s = np.array(stated, dtype=float)
            has = ~np.isnan(s)
            if has.any():
                # a few ulps from the one-by-one dot product: rows within 1e-9 of the tolerance are re-checked there
                expected = vec @ np.arange(k, dtype=float)
                ok &= ~has | (np.abs(s - expected) <= SCORE_TOLERANCE - 1e-9)
    good = ok.tolist()
    take = [i for i, g in zip(fast, good, strict=True) if g]
    if take:
        probs[take] = vec[ok]
    slow.extend(i for i, g in zip(fast, good, strict=True) if not g)
    return slow


def _read_answer(cq: _CompiledQuestion, response: Mapping[str, Any], probs: np.ndarray, i: int) -> str | None:
    """Put this question's answer into ``probs[i]``; return why it cannot be used, or None."""
    from workbench_runtime.answers import normalise_answer

    answers, twice = _answers_map(response)
    if answers is None:
        return "provider failure: response has no 'answers'"
    if cq.qid in twice:
        return "invalid answer: this question is answered more than once"
    ans = answers.get(cq.qid)
    if ans is None:
        return "missing answer for this question"
    if isinstance(ans, Mapping):
        if "error" in ans and ans["error"] is not None:
            return "provider failure for this question"
        dup = duplicate_keys(ans) or duplicate_keys(ans.get("probabilities"))
        if dup:
            return f"invalid answer: key {dup[0][:60]!r} appears more than once"
    try:
        probs[i] = normalise_answer(cq.question, ans, question_id=cq.qid, strict=True).probs
    except AnswerError as exc:
        return f"invalid answer: {exc.message}"
    return None


def _guarded(fn, *args) -> str | None:
    """``fn(*args)``, but an unexpected exception becomes a refusal reason (fail closed, never raise)."""
    try:
        return fn(*args)
    except Exception as exc:
        return f"internal error reading the response ({type(exc).__name__})"


def _guarded_map(fn, arg, questions) -> dict[str, str]:
    try:
        return fn(arg)
    except Exception as exc:
        return {q: f"internal error reading the request ({type(exc).__name__})" for q in questions}


def verify_document(doc: Any, *, source: str = "<policy>", verify_key: Any = None) -> PolicyModel:
    """Check type, format version, signature (when ``verify_key`` is given), content hash and structure;
    return the validated model. Raises :class:`PolicyError` (fail closed)."""
    from workbench_runtime.model import content_hash

    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: corrupt policy file (expected a JSON object)")
    if doc.get("format") != FORMAT:
        raise PolicyError(
            f"{source}: not a workbench policy file (format is {_describe(doc.get('format'))})",
            hint=f"expected format {FORMAT!r}",
        )
    fv = doc.get("format_version")
    if not isinstance(fv, int) or isinstance(fv, bool):
        raise PolicyError(f"{source}: corrupt policy file (format_version {_describe(fv)} is not an integer)")
    if fv > FORMAT_VERSION:
        raise PolicyError(
            f"{source}: policy format version {fv} is newer than this runtime reads ({FORMAT_VERSION})",
            hint="upgrade decision-workbench-runtime to load it",
        )
    if verify_key is not None:
        from workbench_runtime.signing import verify_signature

        try:
            verify_signature(doc, verify_key, source=source)
        except (TypeError, ValueError) as exc:  # e.g. content that has no canonical JSON form
            raise PolicyError(f"{source}: corrupt policy file ({exc})") from None
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
        # a key may be any string: quote one that is empty or unprintable so the message stays one line
        loc = ".".join(str(p) if str(p).isprintable() and str(p) else repr(str(p)) for p in e["loc"])
        raise PolicyError(f"{source}: invalid policy: {loc[:200]}: {e['msg'][:200]}") from None
    return model
