"""Routing rules: auto-accept an answer or send it to the fallback action (``review``).

Three rule kinds, one per question type, all vectorised over a matrix of probabilities:

- :class:`ChoiceRule` (``choice``): accept the top option when ``p_top >= tau`` **and**
  ``p_top - p_second >= margin``; optional per-option ``(tau_k, margin_k)`` overrides keyed by the
  top option; "abstain options" (e.g. ``other``) always go to the fallback.
- :class:`NoulRule` (``noul``): two-sided. The predicted answer is ``yes`` when ``p_yes >= 0.5``
  (ties go to ``yes``, the first option), else ``no``. A predicted ``yes`` is accepted when
  ``p_yes >= tau_yes``; a predicted ``no`` is accepted when ``p_yes <= tau_no``. Everything else
  goes to the fallback.
- :class:`ScoreRule` (``score``): the same two conditions as a choice rule, applied to the top
  level (``level="top"``) or to the level nearest the expected level (``level="expected"``),
  whose confidence is its own probability and whose margin is that probability minus the largest
  other level's.

A NaN row (a provider failure) is never accepted. Every rule reduces to "accept when
``x >= x_threshold`` and ``y >= y_threshold``" on two per-item coordinates (:func:`rule_coordinates`),
which is what lets the workbench's threshold surface evaluate a whole grid of rules at once and
guarantees that the surface and the runtime take exactly the same decisions.

This module imports numpy (and the schema layer's top_two) only: the policy runtime uses it in production code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from workbench_runtime.answers import top_two

#: The fallback action when a rule does not accept (or cannot be applied).
DEFAULT_FALLBACK = "review"

RuleKind = Literal["top_margin", "noul_two_sided", "score"]


# -- per-item summaries --------------------------------------------------------------------------
#: The blocked, NaN-aware top-two of the schema layer (kept under this name for callers).
top_two_fast = top_two


def _rows_failed(probs: np.ndarray) -> np.ndarray:
    return ~np.isfinite(probs).all(axis=1)


# -- rules ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassThreshold:
    """A per-option override: the top option ``k`` is accepted when ``p >= tau`` and margin ``>= margin``."""

    tau: float
    margin: float = 0.0


@dataclass(frozen=True)
class Decisions:
    """Vectorised outcome of a rule.

    Attributes
    ----------
    accepted : ndarray of shape (n_items,), bool
        True where the answer is auto-accepted.
    option : ndarray of shape (n_items,), int
        Index of the accepted option, or of the would-be option when not accepted (-1 on failures).
    reason : ndarray of shape (n_items,), object
        Short machine-readable reason: ``accepted``, ``below_tau``, ``below_margin``,
        ``abstain_option``, ``provider_failure``.
    """

    accepted: np.ndarray
    option: np.ndarray
    reason: np.ndarray


@dataclass(frozen=True)
class ChoiceRule:
    """Accept the top option when ``p_top >= tau`` and ``p_top - p_second >= margin``.

    Parameters
    ----------
    tau : float in [0, 1], default=0.0
        Lowest top probability accepted.
    margin : float in [0, 1], default=0.0
        Lowest gap between the top and the runner-up probability accepted.
    per_class : mapping of option index -> ClassThreshold
        Overrides applied when that option is on top.
    abstain_options : sequence of int
        Option indices that always go to the fallback when they are on top.
    fallback : str, default="review"
        Action for everything not accepted. Never ``accept``.
    """

    tau: float = 0.0
    margin: float = 0.0
    per_class: Mapping[int, ClassThreshold] = field(default_factory=dict)
    abstain_options: Sequence[int] = ()
    fallback: str = DEFAULT_FALLBACK
    kind: RuleKind = "top_margin"

    def thresholds_for(self, top: np.ndarray, n_options: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-item ``(tau, margin)`` after per-class overrides, shape (n_items,) each."""
        taus = np.full(n_options, float(self.tau))
        margins = np.full(n_options, float(self.margin))
        for k, ct in self.per_class.items():
            taus[int(k)] = ct.tau
            margins[int(k)] = ct.margin
        return taus[top], margins[top]

    def decide(self, probs: np.ndarray) -> Decisions:
        """Apply the rule to ``probs`` of shape (n_items, n_options)."""
        probs = np.atleast_2d(np.asarray(probs, dtype=float))
        failed = _rows_failed(probs)
        top, p1, p2 = top_two_fast(probs)
        tau, m = self.thresholds_for(top, probs.shape[1])
        gap = p1 - p2
        abstain = np.isin(top, np.asarray(list(self.abstain_options), dtype=int))
        ok_tau = p1 >= tau
        ok_margin = gap >= m
        accepted = ok_tau & ok_margin & ~abstain & ~failed
        reason = np.where(
            failed,
            "provider_failure",
            np.where(
                abstain,
                "abstain_option",
                np.where(~ok_tau, "below_tau", np.where(~ok_margin, "below_margin", "accepted")),
            ),
        ).astype(object)
        return Decisions(accepted, np.where(failed, -1, top), reason)


@dataclass(frozen=True)
class NoulRule:
    """Two-sided yes/no rule on ``p_yes`` (option 0).

    Predicted ``yes`` (``p_yes >= 0.5``) is accepted when ``p_yes >= tau_yes``; predicted ``no``
    is accepted when ``p_yes <= tau_no``. ``tau_yes > 1`` disables the yes side and
    ``tau_no < 0`` the no side.
    """

    tau_yes: float = 1.0
    tau_no: float = 0.0
    fallback: str = DEFAULT_FALLBACK
    kind: RuleKind = "noul_two_sided"

    def decide(self, probs: np.ndarray) -> Decisions:
        probs = np.atleast_2d(np.asarray(probs, dtype=float))
        failed = _rows_failed(probs)
        p_yes = np.where(failed, 0.5, probs[:, 0])
        pred_yes = p_yes >= 0.5
        accept_yes = pred_yes & (p_yes >= self.tau_yes)
        accept_no = ~pred_yes & (p_yes <= self.tau_no)
        accepted = (accept_yes | accept_no) & ~failed
        option = np.where(failed, -1, np.where(pred_yes, 0, 1))
        reason = np.where(
            failed,
            "provider_failure",
            np.where(accepted, "accepted", np.where(pred_yes, "below_tau_yes", "above_tau_no")),
        ).astype(object)
        return Decisions(accepted, option, reason)


@dataclass(frozen=True)
class ScoreRule:
    """Accept a level of an ordered scale when its probability and margin clear ``tau`` and ``margin``.

    ``level="top"`` uses the most probable level; ``level="expected"`` uses the level nearest
    ``sum_i i * p_i``, whose margin is its probability minus the largest other level's (negative
    when it is not the top level, so any ``margin >= 0`` then refuses it).
    """

    tau: float = 0.0
    margin: float = 0.0
    level: Literal["top", "expected"] = "top"
    per_class: Mapping[int, ClassThreshold] = field(default_factory=dict)
    fallback: str = DEFAULT_FALLBACK
    kind: RuleKind = "score"

    def decide(self, probs: np.ndarray) -> Decisions:
        probs = np.atleast_2d(np.asarray(probs, dtype=float))
        failed = _rows_failed(probs)
        level, conf, gap = score_level_features(probs, self.level)
        as_choice = ChoiceRule(self.tau, self.margin, self.per_class)
        tau, m = as_choice.thresholds_for(np.where(failed, 0, level), probs.shape[1])
        ok_tau = conf >= tau
        ok_margin = gap >= m
        accepted = ok_tau & ok_margin & ~failed
        reason = np.where(
            failed, "provider_failure", np.where(~ok_tau, "below_tau", np.where(~ok_margin, "below_margin", "accepted"))
        ).astype(object)
        return Decisions(accepted, np.where(failed, -1, level), reason)


Rule = ChoiceRule | NoulRule | ScoreRule


def score_level_features(probs: np.ndarray, level: str = "top") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted level, its probability and its margin over the best other level, per row."""
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    if level == "top":
        top, p1, p2 = top_two_fast(probs)
        return top, p1, p1 - p2
    if level != "expected":
        raise ValueError(f"level must be 'top' or 'expected', got {level!r}")
    n, k = probs.shape
    failed = _rows_failed(probs)
    safe = np.where(failed[:, None], 0.0, probs)
    expected = safe @ np.arange(k, dtype=float)
    lvl = np.clip(np.rint(expected), 0, k - 1).astype(int)
    rows = np.arange(n)
    conf = safe[rows, lvl]
    rest = safe.copy()
    rest[rows, lvl] = -np.inf
    gap = conf - rest.max(axis=1)
    return lvl, np.where(failed, np.nan, conf), np.where(failed, np.nan, gap)


# -- the shared coordinates of surface and runtime ----------------------------------------------
@dataclass(frozen=True)
class RuleCoordinates:
    """Per-item coordinates such that a rule accepts exactly when ``x >= x_thr and y >= y_thr``.

    ``x``/``y`` are ``-inf`` where nothing can accept the item (failures, abstain options) and ``+inf``
    on the axis a rule does not constrain for that item (the other side of a noul rule).

    Attributes
    ----------
    predicted : ndarray of shape (n_items,), int
        Option index the rule would accept (-1 on failures).
    x, y : ndarray of shape (n_items,), float
    x_name, y_name : str
        Rule parameters the thresholds map to (``tau``/``margin`` or ``tau_yes``/``tau_no``).
    """

    predicted: np.ndarray
    x: np.ndarray
    y: np.ndarray
    x_name: str
    y_name: str

    def thresholds_to_params(self, x_thr: float, y_thr: float) -> dict[str, float]:
        """Rule parameters for a grid point (``tau_no = -y`` because ``y = -p_yes`` on the no side)."""
        if self.y_name == "tau_no":
            return {"tau_yes": float(x_thr), "tau_no": float(-y_thr)}
        return {self.x_name: float(x_thr), self.y_name: float(y_thr)}


def rule_coordinates(
    qtype: str, probs: np.ndarray, *, abstain_options: Sequence[int] = (), level: str = "top"
) -> RuleCoordinates:
    """Map probabilities to the two acceptance coordinates of the question's rule.

    - choice/score: ``x = p(level)``, ``y = margin``; thresholds ``tau``, ``margin``.
    - noul: ``x = p_yes`` on predicted-yes rows (``+inf`` elsewhere) and ``y = -p_yes`` on
      predicted-no rows (``+inf`` elsewhere); thresholds ``tau_yes`` and ``-tau_no``. Negation is
      exact in floating point, so ``-p >= -tau_no`` holds exactly when ``p <= tau_no``.
    """
    probs = np.atleast_2d(np.asarray(probs, dtype=float))
    failed = _rows_failed(probs)
    if qtype == "noul":
        p_yes = np.where(failed, 0.5, probs[:, 0])
        pred_yes = p_yes >= 0.5
        x = np.where(pred_yes, p_yes, np.inf)
        y = np.where(pred_yes, np.inf, -p_yes)
        predicted = np.where(pred_yes, 0, 1)
        x_name, y_name = "tau_yes", "tau_no"
    else:
        if qtype == "score":
            predicted, x, y = score_level_features(probs, level)
        else:
            predicted, p1, p2 = top_two_fast(probs)
            x, y = p1, p1 - p2
        if len(abstain_options):
            abstain = np.isin(predicted, np.asarray(list(abstain_options), dtype=int))
            x = np.where(abstain, -np.inf, x)
        x_name, y_name = "tau", "margin"
    x = np.where(failed, -np.inf, x)
    y = np.where(failed, -np.inf, y)
    return RuleCoordinates(np.where(failed, -1, predicted), x, y, x_name, y_name)


def make_rule(
    qtype: str,
    x_thr: float,
    y_thr: float,
    *,
    per_class: Mapping[int, tuple[float, float]] | None = None,
    abstain_options: Sequence[int] = (),
    level: str = "top",
    fallback: str = DEFAULT_FALLBACK,
) -> Rule:
    """Build the rule for a grid point ``(x_thr, y_thr)`` in :func:`rule_coordinates` units."""
    overrides = {int(k): ClassThreshold(float(t), float(m)) for k, (t, m) in (per_class or {}).items()}
    if qtype == "noul":
        return NoulRule(tau_yes=float(x_thr), tau_no=float(-y_thr), fallback=fallback)
    if qtype == "score":
        return ScoreRule(
            float(x_thr),
            float(y_thr),
            level="expected" if level == "expected" else "top",
            per_class=overrides,
            fallback=fallback,
        )
    return ChoiceRule(
        float(x_thr), float(y_thr), per_class=overrides, abstain_options=tuple(abstain_options), fallback=fallback
    )
