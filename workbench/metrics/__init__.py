"""Metrics layer: pure functions over (probabilities, labels) arrays, plus per-question reports.

Modules::

    registry      the table of every report metric (name, types, direction, wording, per-item computation)
    reliability   reliability curves, ECE (equal-width / equal-mass), MCE, debiased ECE, smooth ECE, class-wise
    scores        accuracy, log loss, Brier + decomposition, AUC/AP; per-item log loss, Brier, RPS, expected level
    confusion     confusion matrix with a review column, per-class P/R/F1 with Wilson intervals, review_rate
    bootstrap     seeded vectorised bootstrap intervals, paired run comparison, McNemar
    recalibrate   temperature / isotonic / Platt calibrators (numpy-only transform, exact JSON round trip)
    report        choice_report, noul_report, score_report, question_report, RunReport
    label_issues  confident-learning label-issue queue
    displays      plotly ReliabilityDisplay, ConfusionDisplay, RiskCoverageDisplay, ThresholdSurfaceDisplay
    selective     risk_coverage_curve, risk_coverage_from_top, ConfidenceRanking (weighted AURC, selective risk)
    soft          scores against the annotators' vote distribution: soft log loss, Brier, ECE, accuracy
    agreement     Krippendorff's α, Fleiss' κ, Cohen's / quadratic-weighted κ; the model next to the annotators

Nothing here reads or writes the store: the store-backed workflows (``report_run``, ``calibrate_run``,
``label_issues_for_runs``, displays of a stored run) live one floor up in :mod:`workbench.workflows.evaluation`.

Names below are imported lazily: ``workbench.metrics.recalibrate`` is used by the policy runtime,
which must not pull pandas or plotly into production processes.
"""

from __future__ import annotations

from workbench.lazy import lazy_exports

_LAZY = {
    "choice_report": "report",
    "noul_report": "report",
    "score_report": "report",
    "QuestionReport": "report",
    "RunReport": "report",
    "question_report": "report",
    "reliability_curve": "reliability",
    "top_label_ece": "reliability",
    "classwise_ece": "reliability",
    "smooth_ece": "reliability",
    "calibration_error": "reliability",
    "brier_score": "scores",
    "brier_decomposition": "scores",
    "log_loss": "scores",
    "accuracy": "scores",
    "confusion_matrix": "confusion",
    "confusion_result": "confusion",
    "review_rate": "confusion",
    "bootstrap_many": "bootstrap",
    "paired_bootstrap": "bootstrap",
    "mcnemar": "bootstrap",
    "TemperatureScaling": "recalibrate",
    "IsotonicCalibrator": "recalibrate",
    "PlattCalibrator": "recalibrate",
    "IdentityCalibrator": "recalibrate",
    "calibrator_from_dict": "recalibrate",
    "make_calibrator": "recalibrate",
    "find_label_issues": "label_issues",
    "ReliabilityDisplay": "displays",
    "ConfusionDisplay": "displays",
    "RiskCoverageDisplay": "displays",
    "ThresholdSurfaceDisplay": "displays",
    "soft_report": "report",
    "soft_log_loss": "soft",
    "soft_brier": "soft",
    "soft_ece": "soft",
    "agreement_report": "agreement",
    "AgreementReport": "agreement",
    "krippendorff_alpha": "agreement",
    "fleiss_kappa": "agreement",
    "risk_coverage_curve": "selective",
    "risk_coverage_from_top": "selective",
    "RiskCoverageCurve": "selective",
}


__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.{module}" for name, module in _LAZY.items()})


__all__ = sorted(_LAZY)
