"""Store-backed evaluation workflows, one floor above the pure maths of :mod:`workbench.metrics`.

Each function loads a run's answers from the store (:func:`workbench.store.runs.load_answers`), calls
the pure metrics on the arrays, and — for :func:`calibrate_run` — writes the result back:

``report_run``            every metric of every question of a run on a split (a :class:`RunReport`)
``calibrate_run``         fit calibrators on the calibration split and store a calibrated view run
``label_issues_for_runs`` confident-learning label issues from one run or the consensus of several
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

from workbench.answers import AnswerSource, RunAnswers, reads_in_batches, stream_cells
from workbench.errors import WorkbenchError
from workbench.metrics.agreement import AgreementReport, agreement_report, named_votes, vote_counts
from workbench.metrics.label_issues import LabelIssues, consensus_probs, find_label_issues
from workbench.metrics.recalibrate import CalibrationFitError, make_calibrator
from workbench.metrics.reliability import calibration_error, top_label
from workbench.metrics.report import LABEL_MODES, RunReport, question_report
from workbench.metrics.scores import item_log_loss
from workbench.metrics.slices import SliceReports, length_buckets, slice_reports
from workbench.store.datasets import load_item_meta, load_votes
from workbench.store.db import transaction
from workbench.store.runs import (
    create_run,
    delete_run,
    gather_answer_rows,
    get_run,
    load_answer_keys,
    load_answers,
    load_calibrators,
    load_stored_schema,
    run_questions,
    save_calibrator,
    shared_keys,
    update_run,
)
from workbench.store.sources import StoreSource
from workbench.wording import plural

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


@shared_keys()
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
    stream: bool | None = None,
) -> RunReport:
    """Load a run's answers (``split=None`` or ``"all"``: every split) and report each question.

    ``slices`` names item metadata columns (kept at import with ``--meta-column``) or the built-in
    ``state_length``: each question is also reported on each slice's items
    (:func:`workbench.metrics.slices.slice_reports`, the same report function on
    ``answers.select(mask)``), in ``RunReport.slices[column]``.

    ``exclude_items`` maps a question to item ids left out (suspected label errors). For a
    calibrated view (``kind='calibrated'``) the parent run's report on the same items is attached
    as ``before``. Majority-label reports of every size read the answers in batches
    (:func:`stream_question_report`, agreement from :func:`agreement_for_source`); ``--labels soft`` and
    ``slices`` load the (n, k) matrix, which ``stream=True`` (or ``None`` and a question
    :func:`~workbench.answers.reads_in_batches` finds large) refuses. ``labels``: ``"majority"`` scores against each item's majority label,
    ``"soft"`` against its vote distribution (:mod:`workbench.metrics.soft`). A question whose
    items have several votes also gets ``agreement`` (:func:`agreement_for_answers`).
    """
    if labels not in LABEL_MODES:
        raise WorkbenchError(
            f"`labels` {labels!r} is not one of {', '.join(LABEL_MODES)}", hint="`labels` soft|majority"
        )
    run = get_run(con, run_id)
    source = StoreSource(con, run)
    questions = [question] if question else run_questions(con, run["run_id"])
    splits = None if split in (None, "all") else [split]
    slice_list = [slices] if isinstance(slices, str) else list(dict.fromkeys(slices or []))
    sliced: dict[str, SliceReports] = {}
    reports = []
    for q in questions:
        options: dict[str, Any] = {"n_bins": n_bins, "n_boot": n_boot, "seed": seed, "level": level, "smooth": smooth}
        excluded = (exclude_items or {}).get(q)
        if labels == "majority" and not slice_list:
            # one path for every size: the source read in batches (a small run is a source with few batches)
            rep = stream_question_report(source, q, splits, exclude_items=excluded, **options)
            rep.agreement = agreement_for_source(con, source, q, splits)
            reports.append(rep)
            continue
        # soft labels and slices need every probability in memory (the vote distribution, each slice's rows)
        if reads_in_batches(source, q, splits, stream):
            raise WorkbenchError(
                f"{run['run_id']} is too large to report {q!r} with "
                + ("`labels` soft" if labels != "majority" else "`slices`")
                + " (that needs every probability in memory)",
                hint=f"report it without them, or raise WORKBENCH_STREAM_CELLS (now {stream_cells():,})",
            )
        answers = with_votes(con, source.load(q, splits), splits)
        # the whole split and each slice go through one report function with the same options
        report_of = partial(_question_report, options | {"exclude_items": excluded, "labels": labels})
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
            stream=stream,
        )
        calibrators = load_calibrators(con, run["run_id"])
    out = RunReport(info, split, reports, before, calibrators)
    for sr in sliced.values():  # values in display order over every question
        sr.values = list(dict.fromkeys(v for per in sr.questions.values() for v in per))
    out.slices = sliced
    return out


# -- streamed reports (runs larger than memory) --------------------------------------------------------
def stream_question_report(
    source: AnswerSource,
    question: str,
    splits: Sequence[str] | None = None,
    *,
    exclude_items: Iterable[str] | None = None,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
    **kwargs: Any,
):
    """The :func:`~workbench.metrics.report.question_report` of one question, reading ``source``'s answers in
    batches (:meth:`~workbench.answers.AnswerSource.batches`, each batch's probabilities passed through
    ``transform`` (m, k) -> (m, k) when given, e.g. a recalibration) instead of the whole matrix.

    Choice questions keep a few numbers per item (:class:`~workbench.metrics.report.ChoiceItems`)
    and the (option, bin) sums, so memory is O(n + batch · k); yes/no and score questions (k of 2 to
    ~10) assemble their small matrix. Rows are placed at their item-id positions, so every figure
    equals the in-memory report's (the same arrays in the same order, sums up to rounding).
    """
    from workbench.metrics.report import (
        CLASSWISE_BOOT_LIMIT,
        REPORTERS,
        ChoiceItems,
        choice_items,
        choice_report_from_items,
        row_counts,
    )

    n = source.count(question, splits)
    choice = source.question_type(question) == "choice"
    # per item: 3 bytes for a choice question (failed, labelled, excluded); the failure kinds are
    # counted per batch. Other types keep their labels and kinds (their (n, k) matrix dwarfs them).
    failed = np.zeros(n, bool)
    labels = np.full(n if not choice else 0, -1, dtype=np.int64)
    labelled = np.zeros(n, bool)
    excluded = np.zeros(n, bool)
    kinds = np.full(n if not choice else 0, None, dtype=object)
    kind_counts: dict[str, int] = {}
    exclude = np.asarray(list(exclude_items), dtype=str) if exclude_items is not None else None
    parts, at, kept_rows = [], [], []
    n_kept = 0  # rows kept for the class-wise interval: dropped once they pass its limit, as the report decides
    matrix = None
    meta = None
    n_bins = int(kwargs.get("n_bins", 15))
    for pos, b in source.batches(question, splits):
        meta = b
        if transform is not None:
            b.probs = transform(b.probs)
        failed[pos], labelled[pos] = b.failed, b.labels >= 0
        if choice:
            for kind in b.failure_kind[b.failed]:
                kind_counts[str(kind)] = kind_counts.get(str(kind), 0) + 1
        else:
            labels[pos] = b.labels
            kinds[pos[b.failed]] = b.failure_kind[b.failed]
        if exclude is not None:
            excluded[pos] = np.isin(b.item_ids.astype(str), exclude)
        if b.qtype == "choice":
            keep_b = ~b.failed & (b.labels >= 0) & ~excluded[pos]
            parts.append(choice_items(b.probs[keep_b], b.labels[keep_b], n_bins))
            at.append(pos[keep_b])
            if n_kept >= 0:  # keep the rows for that interval while n_labelled × k stays within its limit
                n_kept += int(keep_b.sum())
                if n_kept * b.probs.shape[1] <= CLASSWISE_BOOT_LIMIT:
                    kept_rows.append(b.probs[keep_b])
                else:
                    n_kept, kept_rows = -1, []
        else:
            if matrix is None:
                matrix = np.full((n, b.probs.shape[1]), np.nan)
            matrix[pos] = b.probs
    if meta is None:  # no rows: the in-memory path on an empty load gives the same empty report
        return question_report(source.load(question, splits), exclude_items=exclude_items, **kwargs)
    if meta.qtype != "choice":
        return REPORTERS[meta.qtype](
            matrix,
            labels,
            meta.option_ids,
            question=question,
            failure_kinds=kinds,
            exclude=excluded if exclude is not None else None,
            **kwargs,
        )
    counts = row_counts(failed, np.where(labelled, 0, -1).astype(np.int8), excluded, dict(sorted(kind_counts.items())))
    keep = ~failed & labelled & ~excluded
    del failed, labelled, excluded
    order = np.argsort(np.concatenate(at), kind="stable")
    at.clear()
    items = ChoiceItems.concat(parts, order)
    parts.clear()
    probs = np.concatenate(kept_rows)[order] if kept_rows else None
    del order
    return choice_report_from_items(items, keep, counts, meta.option_ids, question=question, probs=probs, **kwargs)


def _question_report(options: dict[str, Any], answers: RunAnswers):
    """:func:`question_report` of ``answers`` with keyword ``options``."""
    return question_report(answers, **options)


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


def agreement_for_source(
    con: Any, source: StoreSource, question: str, splits: Sequence[str] | None
) -> AgreementReport | None:
    """:func:`agreement_for_answers` of a stored run without its matrix: the item keys, the votes and the top
    option of each answered row read in batches; None (nothing read) when no item has two votes."""
    from workbench.store.datasets import has_repeated_votes

    run = source.run
    if not has_repeated_votes(con, run["dataset"], int(run["dataset_version"]), question, splits):
        return None
    keys = load_answer_keys(con, source.run_id, question, splits)
    top = np.zeros(len(keys.labels), dtype=np.int64)
    for pos, b in source.batches(question, splits):
        ok = ~b.failed
        top[pos[ok]] = b.probs[ok].argmax(axis=1)
    return agreement_for_answers(with_votes(con, keys, splits), splits=splits, con=con, top=top)


def agreement_for_answers(
    answers: RunAnswers,
    *,
    splits: Sequence[str] | None = None,
    con: Any = None,
    top: np.ndarray | None = None,
) -> AgreementReport | None:
    """Agreement among the annotators of ``answers``' items and of the run's top option with them.

    Only items the model answered enter (so the two columns compare the same items); ``None`` when
    no item has more than one vote. ``answers`` must carry its votes (:func:`with_votes`; loaded
    here from ``con`` otherwise). ``top`` (n,): the run's top option per row when ``answers`` has no
    probabilities (:func:`agreement_for_source`).
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
    model = top[keep] if top is not None else answers.probs[keep].argmax(axis=1)
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
    source = StoreSource(con, run)
    questions = [question] if question else run_questions(con, run["run_id"])
    splits = None if split in (None, "all") else [split]
    ds, version = run["dataset"], int(run["dataset_version"])
    return {  # no item with two votes: no agreement, and no need to load the run's answers
        q: agreement_for_answers(source.load(q, splits), splits=splits, con=con)
        if has_repeated_votes(con, ds, version, q, splits)
        else None
        for q in questions
    }


# -- calibrated views of stored runs ------------------------------------------------------------
#: At most this many rows fit a calibrator (``calibrate``, ``thresholds --calibrate``, the UI's
#: recalibration); a larger fit set is subsampled (seeded, said in the output). A temperature or
#: Platt fit on 100k rows is far tighter than the calibration error it corrects.
FIT_ROWS_MAX = 100_000


def fit_sample(con: Any, run_id: str, question: str, split: str, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(probs (m, k), labels (m,) in [0, k)) of the answered, labelled rows of ``split`` in item-id order,
    and how many such rows there were (>= m): what a calibrator is fitted on.

    One read without probabilities (labels, failures) and one streamed pass; when there are more than
    :data:`FIT_ROWS_MAX` such rows, a seeded sample of that many is kept (so memory is bounded by
    the sample, not the run).
    """
    keys = load_answer_keys(con, run_id, question, [split], ids=False)
    usable = ~keys.failed & (keys.labels >= 0)
    available = int(usable.sum())
    rows = usable
    if available > FIT_ROWS_MAX:
        rows = np.zeros(len(usable), bool)
        rows[np.random.default_rng(seed).choice(np.flatnonzero(usable), FIT_ROWS_MAX, replace=False)] = True
    probs, labels = gather_answer_rows(con, run_id, question, split, rows)
    return probs, labels, available


def _top_label_items(con: Any, run_id: str, question: str, split: str, transform) -> dict[str, np.ndarray]:
    """Per-item confidence, correctness and log loss of the answered, labelled rows of ``split`` in
    item-id order, before and after ``transform``: what the ECE / log loss before-after figures need
    (six numbers per item instead of the (n, k) matrix)."""
    source = StoreSource(con, run_id)
    n = source.count(question, [split])
    # correctness as bool (1 byte, not 8, per item); floats again once the used rows are taken
    out = {k: np.full(n, False) if k.startswith("ok") else np.full(n, np.nan) for k in _TOP_LABEL_FIELDS}
    use = np.zeros(n, bool)
    for pos, batch in source.batches(question, [split]):
        keep = ~batch.failed & (batch.labels >= 0)
        if not keep.any():
            continue
        p, y, at = batch.probs[keep], batch.labels[keep], pos[keep]
        use[at] = True
        for tag, q in (("0", p), ("1", transform(p))):
            conf, ok = top_label(q, y)
            out["conf" + tag][at], out["ok" + tag][at] = conf, ok
            out["ll" + tag][at] = item_log_loss(q, y)
    # one field at a time, so no more than one full-length array is copied at once
    return {k: (out.pop(k)[use]).astype(float) for k in _TOP_LABEL_FIELDS}


_TOP_LABEL_FIELDS = ("conf0", "ok0", "ll0", "conf1", "ok1", "ll1")


@shared_keys()
def calibrate_run(
    con: Any,
    run_id: str,
    method: str,
    *,
    questions: list[str] | None = None,
    fit_split: str = "calibration",
    eval_split: str = "test",
    name: str | None = None,
    seed: int = 0,
) -> dict:
    """Fit ``method`` per question on ``fit_split`` and store a calibrated view of the run.

    The view is a new run (``kind='calibrated'``, ``parent_run_id=run_id``) whose answers are the
    parent's answers on every split transformed by the question's calibrator (failures stay
    failures). Only the calibrators are stored (``calibrators`` table, ``params["on_read"]``):
    readers apply them when they load the view (:func:`workbench.store.runs.answer_source`), so a
    view costs kilobytes, not a second copy of the run. The fit and the figures stream the run in
    batches; a fit split larger than :data:`FIT_ROWS_MAX` rows is fitted on a seeded sample of that
    many rows (``n_fit`` / ``n_fit_available`` / ``fit_subsampled`` in the summary). Returns a
    summary with the new run id, the calibrators and the top-label ECE (15 equal-width bins) and
    log loss on ``eval_split`` before and after.
    """
    run = get_run(con, run_id)
    schema = load_stored_schema(con, run["schema_hash"])
    qs = questions or schema.question_ids
    if method == "platt":
        not_binary = [q for q in qs if schema.questions[q].type != "noul"]
        if not_binary:
            raise CalibrationFitError(
                f"Platt scaling is for yes/no questions; {', '.join(not_binary)} are not",
                hint="pass `questions` for the yes/no questions, or use `method` temperature",
            )
    fitted, summary = {}, {}
    for q in qs:
        probs, labels, available = fit_sample(con, run["run_id"], q, fit_split, seed)
        if len(labels) < 2:
            raise CalibrationFitError(
                f"{run['run_id']} has {plural(len(labels), 'answered, labelled item')} on "
                f"split {fit_split!r} for question {q!r}",
                hint="run the provider on the calibration split first",
            )
        cal = make_calibrator(method).fit(probs, labels)
        del probs, labels
        fitted[q] = cal
        items = _top_label_items(con, run["run_id"], q, eval_split, cal.transform)
        n_fit = min(available, FIT_ROWS_MAX)
        summary[q] = {
            "calibrator": cal.to_dict()["type"],
            "n_fit": n_fit,
            "n_fit_available": available,
            "fit_subsampled": available > n_fit,
            "n_eval": int(items["ok0"].size),
        }
        if items["ok0"].size:
            summary[q].update(
                {
                    "ece_before": calibration_error(items["ok0"], items["conf0"], 15, "uniform", "l1"),
                    "ece_after": calibration_error(items["ok1"], items["conf1"], 15, "uniform", "l1"),
                    "log_loss_before": float(items["ll0"].mean()),
                    "log_loss_after": float(items["ll1"].mean()),
                }
            )
        if method == "temperature":
            summary[q]["temperature"] = cal.temperature
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
        params={"calibrated_from": run["run_id"], "method": method, "fit_split": fit_split, "on_read": True},
        experiment=run.get("experiment"),
        variant=run.get("variant"),
        status="running",
        emulated=bool(run.get("emulated")),  # a view of an emulated run is emulated too
    )
    try:
        with transaction(con):
            for q, cal in fitted.items():
                save_calibrator(con, new_id, q, cal.kind, cal.to_dict())
        update_run(con, new_id, status="done", summary={"calibration": summary})
    except BaseException:
        delete_run(con, new_id)
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
