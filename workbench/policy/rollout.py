"""Gradual rollout of a policy file: shadow mode and the options auto-accept is enabled for.

A policy is rolled out route by route: start in ``mode: shadow`` (every answer goes to its fallback,
and each decision records what the rule would have accepted), then go ``live`` with a reversible
subset of options in ``enabled_options``, and widen it. Every change here bumps the minor version and
keeps the content hash right (the caller writes the file with :func:`workbench.policy.io.write_policy`,
which re-signs when given a key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.errors import OptionError
from workbench.policy.model import Policy as PolicyModel
from workbench.policy.model import semver_tuple


@dataclass(frozen=True)
class RolloutChange:
    """What a rollout command changed: ``model`` is the new document (unchanged when ``changed`` is false)."""

    model: PolicyModel
    changed: bool
    question: str | None
    enabled_before: list[str] | None
    enabled_after: list[str] | None
    mode_before: str
    mode_after: str


def bump_minor(version: str) -> str:
    """``1.4.2`` -> ``1.5.0`` (pre-release and build suffixes are dropped)."""
    major, minor, _ = semver_tuple(version)
    return f"{major}.{minor + 1}.0"


def _resolve_question(model: PolicyModel, question: str | None, options: Sequence[str]) -> str:
    if question is not None:
        if question not in model.questions:
            raise OptionError(
                f"`question` {question!r} is not in the policy", hint=f"use one of {', '.join(model.questions)}"
            )
        return question
    if len(model.questions) == 1:
        return next(iter(model.questions))
    having = [q for q, qp in model.questions.items() if options and all(o in qp.options for o in options)]
    if len(having) == 1:
        return having[0]
    if options and not having:
        raise OptionError(
            f"`options` {', '.join(options)}: no question of the policy has {'it' if len(options) == 1 else 'them all'}",
            hint=f"the policy's questions are {', '.join(model.questions)}",
        )
    where = f"options {', '.join(options)} are in questions {', '.join(having)}" if having else "name the question"
    raise OptionError(f"`question` is needed: {where}", hint=f"the policy has {', '.join(model.questions)}")


def set_enabled(
    model: PolicyModel,
    options: Sequence[str],
    *,
    enable: bool,
    question: str | None = None,
    all_options: bool = False,
) -> RolloutChange:
    """Enable (or disable) auto-accept of ``options`` (or of every option with ``all_options``) for one question.

    ``enabled_options`` is ``None`` when every option is enabled; otherwise the enabled options in schema order.
    Raises :class:`OptionError` for an unknown question or option.
    """
    if not options and not all_options:
        raise OptionError("give `options` (repeatable) or `all_options`")
    qid = _resolve_question(model, question, options)
    qp = model.questions[qid]
    unknown = [o for o in options if o not in qp.options]
    if unknown:
        raise OptionError(
            f"`options` {unknown[0]!r} is not an option of question {qid!r}",
            hint=f"options: {', '.join(qp.options[:20])}{' …' if len(qp.options) > 20 else ''}",
        )
    before = qp.enabled_options
    current = set(qp.options if before is None else before)
    chosen = set(qp.options) if all_options else set(options)
    after_set = current | chosen if enable else current - chosen
    after = None if after_set == set(qp.options) else [o for o in qp.options if o in after_set]
    if after == before:
        return RolloutChange(model, False, qid, before, before, model.mode, model.mode)
    new_q = qp.model_copy(update={"enabled_options": after})
    new = model.model_copy(
        update={
            "questions": {**model.questions, qid: new_q},
            "policy_version": bump_minor(model.policy_version),
            "content_hash": None,
            "signature": None,
        }
    )
    return RolloutChange(new, True, qid, before, after, model.mode, model.mode)


def set_mode(model: PolicyModel, mode: str) -> RolloutChange:
    """Switch between ``live`` and ``shadow`` (every answer to the fallback, would-be decisions recorded)."""
    if mode not in ("live", "shadow"):
        raise OptionError(f"mode {mode!r} is not live or shadow")
    if mode == model.mode:
        return RolloutChange(model, False, None, None, None, model.mode, mode)
    new = model.model_copy(
        update={
            "mode": mode,
            "policy_version": bump_minor(model.policy_version),
            "content_hash": None,
            "signature": None,
        }
    )
    return RolloutChange(new, True, None, None, None, model.mode, mode)
