"""What choosing thresholds for one question gives: :class:`ThresholdResult` (the rule, its selection,
calibrator and surface, test figures), and :func:`rule_to_dict`, a rule in policy-file form.

Built by :func:`workbench.thresholds.choose.finish_result`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.thresholds.guarantees import Selection
from workbench.thresholds.options import ThresholdOptions, needed_sentence
from workbench.thresholds.rules import NoulRule, Rule, ScoreRule
from workbench.thresholds.surface import Surface


@dataclass
class ThresholdResult:
    question: str
    qtype: str
    option_ids: list[str]
    options: ThresholdOptions
    calibrator: dict
    selection: Selection
    rule: Rule
    surface: Surface
    test: dict | None
    n_calibrator_fit: int
    chosen_point_per_class: dict | None = None
    needed: dict | None = None  # guarantee objective, nothing certified: calibration_size_needed()
    batch: dict | None = None  # the finite-batch view of the chosen rule (thresholds.batch.batch_view)
    test_risks: dict | None = None  # with costs/constraints: test cost and critical misroute rates
    #: the fitted calibrator the rule is applied after (test figures per slice re-apply it)
    fitted_calibrator: Any = field(default=None, repr=False, compare=False)

    def attach_test(self, report: dict | None) -> None:
        """Set the rule's report on the test split (``None``: no labelled test item) and the misroute cost
        and critical-option rates it implies (with costs or constraints).

        ``report`` is a :func:`~workbench.thresholds.evaluate.evaluate_rule` dict, however computed: in
        memory (:func:`evaluate_on`), from counts summed over batches
        (:func:`~workbench.thresholds.evaluate.rule_report_from_counts`) or from rule coordinates
        (:func:`~workbench.thresholds.evaluate.evaluate_rule_at`)."""
        self.test = report
        self.test_risks = None if report is None else _test_risks(report, self.options, self.option_ids)

    @property
    def certified(self) -> bool:
        """True only when the guarantee objective certified a rule that accepts something."""
        return bool(self.selection.certified and self.selection.feasible)

    @property
    def warnings(self) -> list[str]:
        """Sentences every surface prints next to the verdict: today one, when the whole test split's error
        interval lies entirely above α although a rule was certified (the test split contradicts the
        certificate: a shifted test split, or the rare 1-in-1/δ calibration draw)."""
        from workbench.thresholds.evaluate import certificate_contradicted_sentence, error_above_alpha

        opts = self.options
        if not self.certified or opts.costs is not None or not error_above_alpha(self.test, opts.alpha):
            return []
        assert self.test is not None
        where = f"{self.question}, whole test split"
        return [certificate_contradicted_sentence(where, self.test, opts.alpha, opts.delta, opts.confidence)]

    def summary(self) -> str:
        """One line: certified or not, coverage and error on test, with the settings (α, δ, recalibration)."""
        t = self.test or {}
        cov, err = (t.get("coverage") or {}).get("value"), (t.get("error") or {}).get("value")
        figures = f"test coverage {_pct(cov)}, error among accepted {_pct(err)}" if self.test else "no test split"
        if self.certified:
            head = "certified"
        elif self.options.objective == "guarantee":
            head = "nothing certified"
        else:
            head = "NOT certified (point estimate)"
        line = f"{self.question}: {head}; {figures} [{self.options.describe()}]"
        if self.needed:
            line += f"; {needed_sentence(self.needed)}"
        for w in self.warnings:
            line += f"; WARNING {w}"
        return line

    def rule_dict(self) -> dict:
        """The rule in policy-file form (option ids, not indices; ``None`` = never accept)."""
        return rule_to_dict(self.rule, self.option_ids)

    def to_dict(self) -> dict:
        sel = self.selection.to_dict()
        if self.selection.per_class is not None:
            sel["per_class"] = {self.option_ids[int(k)]: v for k, v in sel["per_class"].items()}
            if sel.get("guarantee") and "classes" in sel["guarantee"]:
                sel["guarantee"]["classes"] = {
                    self.option_ids[int(k)]: v for k, v in sel["guarantee"]["classes"].items()
                }
        return {
            "question": self.question,
            "type": self.qtype,
            "objective": self.options.objective,
            "certified": self.certified,
            "warnings": self.warnings,
            "feasible": self.selection.feasible,
            "settings": self.options.settings(),
            "calibration_size_needed": self.needed,
            "rule": self.rule_dict(),
            "calibrator": self.calibrator,
            "n_calibrator_fit": self.n_calibrator_fit,
            "selection": sel,
            "calibration": self.selection.calibration,
            "guarantee": self.selection.guarantee,
            "cost": self.selection.cost,
            "target": self.selection.target,
            "test": self.test,
            "test_risks": self.test_risks,
            "per_class_at_point": self.chosen_point_per_class,
            "batch": self.batch,
            "grid": {
                "points": [len(self.surface.x_grid), len(self.surface.y_grid)],
                "x": self.surface.x_name,
                "y": self.surface.y_name,
            },
            "notes": self.selection.notes,
            "options": self.options.to_dict(),
        }


def _pct(v: float | None) -> str:
    return "–" if v is None or v != v else f"{100 * v:.1f}%"


def _num(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)


def rule_to_dict(rule: Rule, option_ids: list[str]) -> dict:
    """Policy-file form of a rule; infinite thresholds (a disabled side/class) become ``null``."""
    if isinstance(rule, NoulRule):
        return {
            "kind": rule.kind,
            "tau_yes": _num(rule.tau_yes),
            "tau_no": _num(rule.tau_no),
            "fallback": rule.fallback,
        }
    d: dict[str, Any] = {
        "kind": rule.kind,
        "tau": _num(rule.tau),
        "margin": _num(rule.margin),
        "per_class": {
            option_ids[int(k)]: {"tau": _num(ct.tau), "margin": _num(ct.margin)}
            for k, ct in sorted(rule.per_class.items())
        },
        "fallback": rule.fallback,
    }
    if isinstance(rule, ScoreRule):
        d["level"] = rule.level
        d["abstain_options"] = []
    else:
        d["abstain_options"] = [option_ids[int(k)] for k in rule.abstain_options]
    return d


def _test_risks(test_report: dict, opts: ThresholdOptions, opt_ids: list[str]) -> dict | None:
    """Misroute cost and critical-option misroute rates of the rule on the test split (from its confusion)."""
    from workbench.thresholds.bounds import clopper_pearson
    from workbench.thresholds.risks import cost_matrix

    if opts.costs is None and not opts.constraints:
        return None
    conf = np.asarray(test_report["confusion"]["matrix"], dtype=float)
    k = len(opt_ids)
    accepted = conf[:, :k]
    out: dict[str, Any] = {}
    matrix = cost_matrix(opts.costs, opt_ids)
    if matrix is not None:
        n_acc = accepted.sum()
        out["cost"] = {
            "expected_cost_among_accepted": float((accepted * matrix).sum() / n_acc) if n_acc else None,
            "n_accepted": int(n_acc),
        }
    rows = []
    for o, beta in (opts.constraints or {}).items():
        c = opt_ids.index(o)
        n_c, mis = int(conf[c].sum()), int(accepted[c].sum() - accepted[c, c])
        lo, hi = clopper_pearson(mis, n_c, opts.confidence)
        rows.append(
            {
                "option": o,
                "beta": float(beta),
                "n_true": n_c,
                "misrouted": mis,
                "rate": mis / n_c if n_c else None,
                "low": None if n_c == 0 else lo,
                "high": None if n_c == 0 else hi,
                "reviewed": int(conf[c, k]),
            }
        )
    if rows:
        out["constraints"] = rows
    return out
