"""Store-backed evaluation workflows, one floor above the pure maths of :mod:`workbench.metrics`.

Each function loads a run's answers from the store (:func:`workbench.store.runs.load_answers`), calls
the pure metrics on the arrays, and — for :func:`calibrate_run` — writes the result back:

``report_run``            every metric of every question of a run on a split (a :class:`RunReport`)
``calibrate_run``         fit calibrators on the calibration split and store a calibrated view run
``label_issues_for_runs`` confident-learning label issues from one run or the consensus of several
``reliability_display``   :class:`ReliabilityDisplay` of a stored run (a calibrated view with its parent)
``confusion_display``     :class:`ConfusionDisplay` of a stored run
``agreement_for_run``     agreement among annotators and of the run's top option with them (the noise floor)

``workbench report``, ``workbench calibrate``, ``workbench label-issues``, the UI and notebooks call
these, so a figure on any surface comes from the same code path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from workbench.answers import RunAnswers
from workbench.errors import WorkbenchError
from workbench.metrics.agreement import AgreementReport, agreement_report, named_votes, vote_counts
from workbench.metrics.displays import ConfusionDisplay, ReliabilityDisplay
from workbench.metrics.label_issues import LabelIssues, consensus_probs, find_label_issues
from workbench.metrics.recalibrate import CalibrationFitError, make_calibrator
from workbench.metrics.reliability import top_label_ece
from workbench.metrics.report import LABEL_MODES, RunReport, question_report
from workbench.metrics.scores import log_loss
from workbench.metrics.slices import SliceReports, length_buckets, slice_reports
from workbench.schema.answers import entropy, top_two
from workbench.store.datasets import load_item_meta, load_votes
from workbench.store.db import transaction
from workbench.store.runs import (
    create_run,
    get_run,
    load_answers,
    load_calibrators,
    load_stored_schema,
    run_questions,
    save_calibrator,
    update_run,
    write_answers,
)

# -- reports ----------------------------------------------------------------------------------------
_RUN_FIELDS = (
    "run_id",
    "name",
    "kind",
    "parent_run_id",
    "dataset",
    "dataset_version",
    "provider",
    "model",
    "status",
    "schema_hash",
    "experiment",
    "variant",
    "emulated",
)


def report_run(
    con: Any,
    run_id: str,
    question: str | None = None,
    split: str | None = "test",
    *,
    n_bins: int = 15,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    exclude_items: dict[str, Iterable[str]] | None = None,
    with_before: bool = True,
    smooth: bool = True,
    labels: str = "majority",
    slices: Sequence[str] | str | None = None,
) -> RunReport:
    """Load a run's answers (``split=None`` or ``"all"``: every split) and report each question.

    ``slices`` names item metadata columns (kept at import with ``--meta-column``) or the built-in
    ``state_length``: each question is also reported on each slice's items
    (:func:`workbench.metrics.slices.slice_reports`, the same report function on
    ``answers.select(mask)``), in ``RunReport.slices[column]``.

    ``exclude_items`` maps a question to item ids left out (suspected label errors). For a
    calibrated view (``kind='calibrated'``) the parent run's report on the same items is attached
    as ``before``. ``labels``: ``"majority"`` scores against each item's majority label,
    ``"soft"`` against its vote distribution (:mod:`workbench.metrics.soft`). A question whose
    items have several votes also gets ``agreement`` (:func:`agreement_for_answers`).
    """
    if labels not in LABEL_MODES:
        raise WorkbenchError(
            f"--labels {labels!r} is not one of {', '.join(LABEL_MODES)}", hint="--labels soft|majority"
        )
    run = get_run(con, run_id)
    questions = [question] if question else run_questions(con, run["run_id"])
    splits = None if split in (None, "all") else [split]
    slice_list = [slices] if isinstance(slices, str) else list(dict.fromkeys(slices or []))
    sliced: dict[str, SliceReports] = {}
    reports = []
    for q in questions:
        answers = with_votes(con, load_answers(con, run["run_id"], q, splits), splits)
        # the whole split and each slice go through one report function with the same options
        report_of = partial(
            question_report,
            exclude_items=(exclude_items or {}).get(q),
            labels=labels,
            n_bins=n_bins,
            n_boot=n_boot,
            seed=seed,
            level=level,
            smooth=smooth,
        )
        rep = report_of(answers)
        rep.agreement = agreement_for_answers(answers, splits=splits, con=con)
        reports.append(rep)
        for column in slice_list:
            values, order = slice_values(con, answers, column)
            per_slice = slice_reports(answers, values, order=order, report=partial(_sliced_report, report_of))
            sliced.setdefault(column, SliceReports(column, list(per_slice))).questions[q] = per_slice
    info = {k: run.get(k) for k in _RUN_FIELDS}
    # what the run cost; for an emulated run, what the real service would have billed (nothing was)
    info["cost_usd"] = (run.get("summary") or {}).get("cost_usd")
    before = None
    calibrators = {}
    if with_before and run.get("kind") == "calibrated" and run.get("parent_run_id"):
        before = report_run(
            con,
            run["parent_run_id"],
            question,
            split,
            n_bins=n_bins,
            n_boot=n_boot,
            seed=seed,
            level=level,
            exclude_items=exclude_items,
            with_before=False,
            smooth=smooth,
            labels=labels,
        )
        calibrators = load_calibrators(con, run["run_id"])
    out = RunReport(info, split, reports, before, calibrators)
    for sr in sliced.values():  # values in display order over every question
        sr.values = list(dict.fromkeys(v for per in sr.questions.values() for v in per))
    out.slices = sliced
    return out


def _sliced_report(report_of: Callable[[RunAnswers], Any], answers: RunAnswers):
    """One slice's report: the report of the filtered answers, as :func:`report_run` makes it."""
    rep = report_of(answers)
    rep.agreement = agreement_for_answers(answers) if answers.votes is not None else None
    return rep


def slice_values(con: Any, answers: RunAnswers, column: str) -> tuple[np.ndarray, list[str]]:
    """Slice value of each row of ``answers`` (n,) object (None when missing) and the display order.

    ``column`` is a metadata column of the run's dataset version (``--meta-column`` at import) or
    ``state_length`` (quartile buckets of the state's length over the whole version,
    :func:`workbench.metrics.slices.length_buckets`).
    """
    run = answers.extra.get("run") or get_run(con, answers.run_id)
    meta = load_item_meta(con, run["dataset"], int(run["dataset_version"]), column)
    if column == "state_length":
        labels, order = length_buckets(meta["value"].to_numpy(dtype=float))
        meta = meta.assign(value=labels)
    else:
        order = []
    row = pd.Index(meta["item_id"].astype(str)).get_indexer(pd.Index(answers.item_ids.astype(str)))
    values = np.full(len(answers.item_ids), None, dtype=object)
    ok = row >= 0
    values[ok] = meta["value"].to_numpy(dtype=object)[row[ok]]
    return values, order


# -- annotators: votes, soft labels, agreement -------------------------------------------------------
def _votes_of(con: Any, answers: RunAnswers, splits: Sequence[str] | None) -> dict[str, np.ndarray]:
    run = answers.extra.get("run") or get_run(con, answers.run_id)
    return load_votes(con, run["dataset"], int(run["dataset_version"]), answers.question, answers.option_ids, splits)


def with_votes(con: Any, answers: RunAnswers, splits: Sequence[str] | None = None) -> RunAnswers:
    """``answers`` with ``votes`` (n, k): every stored vote of its items (one DuckDB read, one bincount)."""
    v = _votes_of(con, answers, splits)
    row = pd.Index(answers.item_ids.astype(str)).get_indexer(v["item_id"].astype(str))
    ok = row >= 0
    answers.votes = vote_counts(row[ok], v["option"][ok], len(answers.item_ids), len(answers.option_ids))
    answers.extra["vote_annotators"] = (row[ok], v["annotator"][ok], v["option"][ok])
    return answers


def agreement_for_answers(
    answers: RunAnswers, *, splits: Sequence[str] | None = None, con: Any = None, with_model: bool = True
) -> AgreementReport | None:
    """Agreement among the annotators of ``answers``' items and of the run's top option with them.

    Only items the model answered enter (so the two columns compare the same items); ``None`` when
    no item has more than one vote. ``answers`` must carry its votes (:func:`with_votes`; loaded
    here from ``con`` otherwise).
    """
    if answers.votes is None or "vote_annotators" not in answers.extra:
        answers = with_votes(con, answers, splits)
    assert answers.votes is not None
    if not (answers.votes.sum(axis=1) > 1).any():
        return None
    rows, annotators, options = answers.extra["vote_annotators"]
    answered = ~answers.failed
    keep = np.flatnonzero(answered)
    new_index = np.full(len(answers.item_ids), -1)
    new_index[keep] = np.arange(keep.size)
    sel = new_index[rows] >= 0
    votes, ids = named_votes(new_index[rows][sel], annotators[sel], options[sel])
    model = answers.probs[keep].argmax(axis=1) if with_model else None
    return agreement_report(
        answers.votes[keep],
        votes=votes if ids else None,
        annotator_ids=ids,
        model=model,
        qtype=answers.qtype,
        question=answers.question,
    )


def agreement_for_run(
    con: Any, run_id: str, question: str | None = None, split: str | None = "test"
) -> dict[str, AgreementReport | None]:
    """{question: agreement among annotators and of the run with them} on ``split`` (``"all"``: every split)."""
    from workbench.store.datasets import has_repeated_votes

    run = get_run(con, run_id)
    questions = [question] if question else run_questions(con, run["run_id"])
    splits = None if split in (None, "all") else [split]
    ds, version = run["dataset"], int(run["dataset_version"])
    return {  # no item with two votes: no agreement, and no need to load the run's answers
        q: agreement_for_answers(load_answers(con, run["run_id"], q, splits), splits=splits, con=con)
        if has_repeated_votes(con, ds, version, q, splits)
        else None
        for q in questions
    }


# -- calibrated views of stored runs ------------------------------------------------------------
def _probs_column(probs: np.ndarray):
    """(n, k) float with NaN rows -> Arrow list<double> column with nulls for the NaN rows."""
    import pyarrow as pa

    n, k = probs.shape
    failed = ~np.isfinite(probs).all(axis=1)
    values = pa.array(np.where(failed[:, None], 0.0, probs).ravel())
    offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values, mask=pa.array(failed))


def calibrate_run(
    con: Any,
    run_id: str,
    method: str,
    *,
    questions: list[str] | None = None,
    fit_split: str = "calibration",
    eval_split: str = "test",
    name: str | None = None,
) -> dict:
    """Fit ``method`` per question on ``fit_split`` and store a calibrated view of the run.

    The view is a new run (``kind='calibrated'``, ``parent_run_id=run_id``) whose answers are the
    parent's answers on every split, transformed by the question's calibrator (failures stay
    failures); the calibrators go to the ``calibrators`` table. Returns a summary with the new run id,
    the calibrators and the top-label ECE (15 equal-width bins) and log loss on ``eval_split``
    before and after.
    """
    import pyarrow as pa

    run = get_run(con, run_id)
    schema = load_stored_schema(con, run["schema_hash"])
    qs = questions or schema.question_ids
    if method == "platt":
        not_binary = [q for q in qs if schema.questions[q].type != "noul"]
        if not_binary:
            raise CalibrationFitError(
                f"Platt scaling is for yes/no questions; {', '.join(not_binary)} are not",
                hint="pass --question for the yes/no questions, or use --method temperature",
            )
    fitted, tables, summary = {}, [], {}
    for q in qs:
        ans = load_answers(con, run["run_id"], q)
        fit_rows = (ans.splits == fit_split) & ~ans.failed & (ans.labels >= 0)
        if fit_rows.sum() < 2:
            raise CalibrationFitError(
                f"run {run['run_id']} has {int(fit_rows.sum())} answered, labelled items on "
                f"split {fit_split!r} for question {q!r}",
                hint="run the provider on the calibration split first",
            )
        cal = make_calibrator(method).fit(ans.probs[fit_rows], ans.labels[fit_rows])
        fitted[q] = cal
        new = cal.transform(ans.probs)
        ok = ~ans.failed
        top, p1, p2 = top_two(np.where(ok[:, None], new, 0.0))
        ev = (ans.splits == eval_split) & ok & (ans.labels >= 0)
        summary[q] = {"calibrator": cal.to_dict()["type"], "n_fit": int(fit_rows.sum()), "n_eval": int(ev.sum())}
        if ev.any():
            summary[q].update(
                {
                    "ece_before": top_label_ece(ans.probs[ev], ans.labels[ev]),
                    "ece_after": top_label_ece(new[ev], ans.labels[ev]),
                    "log_loss_before": log_loss(ans.probs[ev], ans.labels[ev]),
                    "log_loss_after": log_loss(new[ev], ans.labels[ev]),
                }
            )
        if method == "temperature":
            summary[q]["temperature"] = cal.temperature
        n = len(ans.item_ids)
        tables.append(
            pa.table(
                {
                    "item_id": pa.array(ans.item_ids.astype(str)),
                    "question": pa.array([q] * n),
                    "probs": _probs_column(new),
                    "p_top": pa.array(np.where(ok, p1, np.nan), from_pandas=True),
                    "margin": pa.array(np.where(ok, p1 - p2, np.nan), from_pandas=True),
                    "entropy": pa.array(
                        np.where(ok, entropy(np.where(ok[:, None], new, 0.0)), np.nan), from_pandas=True
                    ),
                    "failure_kind": pa.array(list(ans.failure_kind), type=pa.string()),
                    "model": pa.array([run.get("model")] * n, type=pa.string()),
                    "latency_ms": pa.array(ans.latency_ms, from_pandas=True),
                    "cost_usd": pa.array(ans.cost_usd, from_pandas=True),
                }
            )
        )
    new_id = create_run(
        con,
        dataset=run["dataset"],
        dataset_version=int(run["dataset_version"]),
        schema=schema,
        provider=run["provider"],
        splits=list(run["splits"]),
        name=name or f"{run.get('name') or run['run_id']}+{method}",
        model=run.get("model"),
        dialect=run.get("dialect"),
        kind="calibrated",
        parent_run_id=run["run_id"],
        params={"calibrated_from": run["run_id"], "method": method, "fit_split": fit_split},
        experiment=run.get("experiment"),
        variant=run.get("variant"),
        status="running",
        emulated=bool(run.get("emulated")),  # a view of an emulated run is emulated too
    )
    try:
        table = pa.concat_tables(tables)
        table = table.append_column("run_id", pa.array([new_id] * table.num_rows))
        write_answers(con, table, replace=False)
        with transaction(con):
            for q, cal in fitted.items():
                save_calibrator(con, new_id, q, cal.kind, cal.to_dict())
        update_run(con, new_id, status="done", summary={"calibration": summary})
    except BaseException:
        with transaction(con):
            for table_name in ("answers", "calibrators", "runs"):
                con.execute(f"DELETE FROM {table_name} WHERE run_id = ?", [new_id])
        raise
    return {
        "run_id": new_id,
        "parent_run_id": run["run_id"],
        "method": method,
        "fit_split": fit_split,
        "eval_split": eval_split,
        "questions": summary,
        "calibrators": {q: c.to_dict() for q, c in fitted.items()},
    }


def label_issues_for_runs(
    con: Any,
    run_ids: Iterable[str],
    question: str | None = None,
    splits: Sequence[str] | None = None,
    rank_by: str = "self_confidence",
) -> dict[str, LabelIssues]:
    """Label issues per question from one run or the consensus (mean probabilities) of several runs.

    All runs must be on the same dataset version. ``splits=None`` looks at every split.
    """
    runs = [get_run(con, r) for r in run_ids]
    datasets = {(r["dataset"], int(r["dataset_version"])) for r in runs}
    if len(datasets) > 1:
        raise WorkbenchError(
            "label issues across runs need the same dataset version", hint=f"runs cover {sorted(datasets)}"
        )
    ids = [r["run_id"] for r in runs]
    if question:
        questions = [question]
    else:
        common = set(run_questions(con, ids[0]))
        for r in ids[1:]:
            common &= set(run_questions(con, r))
        questions = [q for q in run_questions(con, ids[0]) if q in common]
    out = {}
    for q in questions:
        answer_sets = [load_answers(con, r, q, splits) for r in ids]
        item_ids, spl, labels, probs, n_runs = consensus_probs(answer_sets)
        out[q] = find_label_issues(
            probs,
            labels,
            answer_sets[0].option_ids,
            item_ids=item_ids,
            splits=spl,
            rank_by=rank_by,
            question=q,
            run_ids=ids,
            n_runs=n_runs,
        )
    return out


# -- displays ---------------------------------------------------------------------------------------
def reliability_display(
    con: Any,
    run_id: str,
    question: str,
    *,
    split: str | None = "test",
    n_bins: int = 15,
    strategy: str = "uniform",
    kind: str | None = None,
    option: int | None = None,
    smooth: bool = True,
    with_parent: bool = True,
) -> ReliabilityDisplay:
    """Reliability diagram of a stored run (yes/no questions default to P(yes)); a calibrated view
    also draws its parent run, so before/after share the axes."""
    run = get_run(con, run_id)
    splits = None if split in (None, "all") else [split]
    runs = [(f"{run.get('name') or run['run_id']}", load_answers(con, run["run_id"], question, splits))]
    if with_parent and run.get("kind") == "calibrated" and run.get("parent_run_id"):
        parent = get_run(con, run["parent_run_id"])
        label = f"{parent.get('name') or parent['run_id']} (before)"
        runs.insert(0, (label, load_answers(con, parent["run_id"], question, splits)))
    return ReliabilityDisplay.from_answers(
        runs, question, split=split, n_bins=n_bins, strategy=strategy, kind=kind, option=option, smooth=smooth
    )


def confusion_display(
    con: Any,
    run_id: str,
    question: str,
    *,
    split: str | None = "test",
    accept: np.ndarray | None = None,
    normalize: str | None = None,
) -> ConfusionDisplay:
    """Confusion matrix of a stored run on ``split`` (``None``/``"all"``: every split)."""
    ans = load_answers(con, run_id, question, None if split in (None, "all") else [split])
    return ConfusionDisplay.from_answers(ans, split=split, accept=accept, normalize=normalize)
