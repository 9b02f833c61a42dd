"""Store-backed workflows one floor above the pure maths: load a run's answers, call the library.

``thresholds_for_run`` is the one "load calibration and test answers, choose thresholds" step behind
``workbench thresholds``, ``workbench compare``, the demo, the UI's Thresholds page and
``workbench.choose_thresholds``, so the same run, question and :class:`ThresholdOptions` give the same
rule, coverage and error on every surface. Imports only the store and the thresholds layer.
"""

from __future__ import annotations

from workbench.thresholds.choose import ThresholdOptions, ThresholdResult, choose_thresholds


def thresholds_for_run(
    con,
    run_id: str,
    question: str,
    options: ThresholdOptions | None = None,
    *,
    calibration_split: str = "calibration",
    test_split: str | None = "test",
) -> ThresholdResult:
    """Choose thresholds for ``question`` of ``run_id`` on its calibration split; judge them on test.

    Parameters
    ----------
    con : duckdb connection
    run_id : str
        Run id or name.
    question : str
    options : ThresholdOptions, optional
        Default ``ThresholdOptions()`` (α 0.05, δ 0.1, temperature scaling, fixed-sequence, grid 100).
    calibration_split, test_split : str
        Splits used to choose and to judge (``test_split=None``: no test report).

    Returns
    -------
    ThresholdResult
    """
    from workbench.store.runs import load_answers

    options = options if options is not None else ThresholdOptions()
    calibration = load_answers(con, run_id, question, splits=[calibration_split])
    test = load_answers(con, run_id, question, splits=[test_split]) if test_split else None
    return choose_thresholds(calibration, test, options)


def threshold_slices_for_run(
    con,
    run_id: str,
    result: ThresholdResult,
    column: str,
    *,
    test_split: str = "test",
) -> dict:
    """Coverage and error of ``result``'s rule per slice of ``column`` on the test split.

    ``column`` is an item metadata column (``datasets import --meta-column``) or ``state_length``;
    returns :func:`workbench.thresholds.evaluate.evaluate_rule_by_slice`'s report with ``column`` added
    (a warning names each slice whose error interval lies entirely above α).
    """
    from workbench.evaluation import slice_values
    from workbench.store.runs import load_answers
    from workbench.thresholds.evaluate import evaluate_rule_by_slice

    test = load_answers(con, run_id, result.question, splits=[test_split])
    values, order = slice_values(con, test, column)
    return {"column": column, "split": test_split, **evaluate_rule_by_slice(result, test, values, order=order)}
