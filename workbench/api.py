"""The front door: thin functions named for what a data scientist does, over the library.

``import workbench as wb`` exposes these (lazily: ``import workbench`` stays light). Each takes an
open store (``wb.connect``) and plain values, and calls the same library functions the CLI and the
UI call, so a figure computed here is the figure ``workbench …`` prints and the UI shows.

The examples run as doctests (``tests/test_public_api.py``) one after another in a temporary folder
``tmp``, on the bundled SMS Spam Collection and the offline ``baseline:tfidf-logreg`` provider.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.thresholds.options import ThresholdOptions


def connect(path: str | Path | None = None, *, read_only: bool = False):
    """Open (and migrate) the DuckDB store at ``path`` (default ``$WORKBENCH_DB`` or ``./workbench.duckdb``).

    Returns a DuckDB connection; close it with ``con.close()`` (or use it in a ``with`` block).

    Examples
    --------
    >>> import workbench as wb
    >>> con = wb.connect(tmp / "workbench.duckdb")
    >>> con.execute("SELECT count(*) FROM runs").fetchone()
    (0,)
    """
    from workbench.store.db import connect as _connect

    return _connect(path, read_only=read_only)


def import_dataset(
    con,
    paths: str | Path | Sequence[str | Path],
    *,
    name: str,
    labels: Mapping[str, str] | None = None,
    text_column: str | None = None,
    state_column: str | None = None,
    id_column: str | None = None,
    split_column: str | None = None,
    split: str | None = None,
    test_fraction: float | None = None,
    calibration_fraction: float | None = None,
    seed: int = 0,
    positive: Mapping[str, str] | None = None,
    schema: Any = None,
    annotator_column: str | None = None,
    label_votes: Mapping[str, Mapping[str, str]] | None = None,
    meta_columns: Sequence[str] | None = None,
    **more: Any,
):
    """Import labelled files (CSV, TSV, Parquet, JSON, JSONL) as a new version of dataset ``name``.

    Parameters
    ----------
    paths : path or list of paths
    name : str
        Dataset name in the store.
    labels : mapping
        Question id → label column (``{"intent": "category"}``).
    text_column, state_column : str
        Where the state is: plain text, or a JSON state.
    id_column, split_column, split : str, optional
        Item ids, a split column, or one split for every row.
    test_fraction, calibration_fraction : float, optional
        Seeded carve-outs: ``test`` from the rows without a split, ``calibration`` from ``train``.
    positive : mapping, optional
        Yes/no question → the label value meaning "yes".
    schema : DecisionSchema or path, optional
        Stored with the dataset (option order, label checks).
    annotator_column : str, optional
        Long format: one row per annotator per item (needs ``id_column``); the item's fields must
        agree across its rows, and every annotator's label is kept as a vote.
    label_votes : mapping, optional
        Wide format: question → {option: column holding how many annotators chose it}
        (``{"spam": {"yes": "n_spam", "no": "n_ham"}}``); the votes are kept, anonymously.
    meta_columns : list of str, optional
        Columns kept as item metadata (text per item), part of the version's content; slice reports
        by them (``wb.report(con, run_id, slices=["language"])``). ``state_length`` is built in.
    **more
        Other :class:`workbench.store.import_spec.ImportSpec` fields (``group_column``, ``append`` …).

    Returns
    -------
    DatasetInfo
        ``name``, ``version``, ``fingerprint``, ``n_items``, ``questions``, ``created``.

    Examples
    --------
    >>> info = wb.import_dataset(con, **wb.bundled_dataset("sms_spam"))
    >>> info.name, info.n_items, info.questions
    ('sms_spam', 5574, ['spam'])
    """
    from workbench.store.datasets import import_dataset as _import
    from workbench.store.import_spec import ImportSpec

    files = [paths] if isinstance(paths, (str, Path)) else list(paths)
    spec = ImportSpec(
        name=name,
        text_column=text_column,
        state_column=state_column,
        labels=dict(labels or {}),
        label_votes={q: dict(cols) for q, cols in (label_votes or {}).items()},
        annotator_column=annotator_column,
        meta_columns=list(meta_columns or []),
        id_column=id_column,
        split_column=split_column,
        split=split,
        test_fraction=test_fraction,
        calibration_fraction=calibration_fraction,
        seed=seed,
        positive=dict(positive or {}),
        **more,
    )
    return _import(con, files, spec, _as_schema(schema))


def _as_schema(schema: Any):
    if schema is None or hasattr(schema, "questions"):
        return schema
    from workbench.schema import load_schema

    return load_schema(schema)


def run(
    con,
    dataset: str,
    schema: Any,
    provider: Any,
    *,
    splits: Sequence[str] | None = ("calibration", "test"),
    limit: int | None = None,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    concurrency: int = 8,
    progress: bool = False,
    **options: Any,
) -> str:
    """Run ``provider`` (a spec such as ``baseline:tfidf-logreg``) over ``dataset`` with ``schema``.

    Answers are cached and journaled as ``workbench run`` does; keys come from ``env`` (default the
    environment) and are never stored.

    Parameters
    ----------
    provider : str or provider object
        A spec string, or an already built provider (its ``spec`` is recorded), e.g. one reused
        across runs.
    schema : DecisionSchema or path of a schema file
    splits : sequence of str, default ("calibration", "test")
        ``None``: every split but ``train``.
    limit : int, optional
        First N items per run (by id, after the split filter).
    name : str, optional
        Run name (shown in ``workbench runs list`` and the UI).
    **options
        Other ``workbench run`` settings: ``rate``, ``max_cost``, ``timeout``, ``experiment``,
        ``variant``, ``questions_per_request``, ``transport``, ``reporter`` (progress and log lines,
        :mod:`workbench.reporting`).

    Returns
    -------
    run_id : str

    Examples
    --------
    >>> schema = wb.load_schema(wb.bundled_schema_file("sms_spam"))
    >>> run_id = wb.run(con, "sms_spam", schema, "baseline:tfidf-logreg", name="tfidf")
    >>> wb.get_run(con, run_id)["status"]
    'done'
    """
    from workbench.runner import run_experiment

    (run_id,) = run_experiment(
        con,
        dataset=dataset,
        schema=_as_schema(schema),
        provider_specs=[provider],
        splits=splits,
        limit=limit,
        run_name=name,
        env=env,
        concurrency=concurrency,
        progress=progress,
        **options,
    )
    return run_id


def import_answers(
    con,
    path: str | Path,
    *,
    dataset: str,
    schema: Any,
    name: str,
    version: int | None = None,
    model: str | None = None,
    provider_label: str | None = None,
) -> str:
    """Create a run from answers computed elsewhere (``workbench runs import``); returns its run id.

    ``path``: a Parquet or JSONL file, a directory of part files or a glob, in the **wide** layout (one
    row per item: ``item_id`` and a ``list<double>`` column per question, NULL for a failed call) or the
    **long** layout ``workbench export`` writes. Every vector is checked like a provider's answer (one
    value per option, in [0, 1], sum within 0.02 of 1, then re-normalised); unknown or repeated ids and
    missing questions raise one ``WorkbenchError`` and nothing is written. See docs/answer-files.md.

    Examples
    --------
    >>> _ = wb.export_run(con, run_id, "parquet", tmp / "answers.parquet")
    >>> again = wb.import_answers(con, tmp / "answers.parquet", dataset="sms_spam", schema=schema, name="again")
    >>> bool((wb.load_answers(con, again, "spam").probs == wb.load_answers(con, run_id, "spam").probs).all())
    True
    """
    from workbench.store.answer_import import import_answers as _import

    return _import(
        con,
        path,
        dataset=dataset,
        schema=_as_schema(schema),
        name=name,
        version=version,
        model=model,
        provider_label=provider_label,
    )


def export_run(con, run_id: str, fmt: str, out: str | Path) -> int:
    """Write a run's answers, one row per item × question (``workbench export``); returns the row count.

    ``fmt``: ``parquet`` (option ids once, in the file's metadata key ``workbench.option_ids``), ``jsonl``
    or ``csv`` (option ids in the side-car ``OUT.options.json``). Streamed: bounded memory at any size.

    Examples
    --------
    >>> wb.export_run(con, run_id, "jsonl", tmp / "answers.jsonl") == len(wb.load_answers(con, run_id, "spam").probs)
    True
    """
    from workbench.store.export import export_run as _export

    return _export(con, run_id, fmt, out)


def load_answers(con, run_id: str, question: str, splits: Sequence[str] | None = None):
    """A run's answers to one question as arrays (:class:`RunAnswers`).

    ``probs`` (n, k) with NaN rows for failed calls, ``labels`` (n,) option indices (-1 unlabelled),
    ``item_ids``, ``splits``, ``option_ids``, ``cost_usd``, ``latency_ms``; ``.labelled()`` keeps
    the labelled, answered items.

    Examples
    --------
    >>> test = wb.load_answers(con, run_id, "spam", ["test"])
    >>> test.option_ids, test.probs.shape[1], bool((test.labels >= 0).all())
    (['yes', 'no'], 2, True)
    """
    from workbench.store.runs import load_answers as _load

    return _load(con, run_id, question, list(splits) if splits is not None else None)


def report(
    con,
    run_id: str,
    question: str | None = None,
    split: str | None = "test",
    *,
    slices: str | Sequence[str] | None = None,
    **kwargs: Any,
):
    """Calibration and accuracy metrics of a run, with bootstrap intervals (``workbench report``).

    ``kwargs``: ``n_bins`` (15), ``n_boot`` (200), ``seed``, ``level`` (0.95), ``smooth``, ``labels``
    (``"majority"``: against each item's majority label; ``"soft"``: against its annotators' vote
    distribution — soft log loss, Brier, ECE). Returns a ``RunReport``; ``.to_frame()`` has one row per
    (question, metric); a question whose items have several votes carries ``.agreement`` (see
    :func:`agreement`).

    ``slices`` (alias ``slice``): metadata columns kept at import (``meta_columns``) or the built-in
    ``state_length`` (quartile buckets of the state's length); ``.slices[column]`` then holds each
    slice's report, computed by the same function on the slice's rows (``.to_frame()`` per slice).

    Examples
    --------
    >>> frame = wb.report(con, run_id, "spam", n_boot=50).to_frame()
    >>> sorted({"accuracy", "ece_uniform", "brier"} & set(frame["metric"]))
    ['accuracy', 'brier', 'ece_uniform']
    >>> sliced = wb.report(con, run_id, "spam", n_boot=50, slices="state_length")
    >>> len(sliced.slices["state_length"].values)
    4
    """
    from workbench.workflows.evaluation import report_run

    if "slice" in kwargs:
        slices = kwargs.pop("slice")
    return report_run(con, run_id, question, split, slices=slices, **kwargs)


def agreement(con, run_id: str, question: str | None = None, split: str | None = "test") -> dict:
    """Agreement among the annotators of a run's items, next to the run's agreement with them.

    For each question: ``None`` when no item has two or more votes, else an ``AgreementReport`` with
    ``annotators`` and ``model`` figures (pairwise agreement, Krippendorff's α, Fleiss' κ, Cohen's κ;
    ordinal/interval α and quadratic-weighted κ for score questions), ``per_annotator``,
    ``.to_frame()`` and ``.to_dict()``. The same figures ``workbench report`` prints.

    Examples
    --------
    >>> wb.agreement(con, run_id)  # sms_spam has one label per message
    {'spam': None}
    """
    from workbench.workflows.evaluation import agreement_for_run

    return agreement_for_run(con, run_id, question, split)


def calibrate(con, run_id: str, method: str = "temperature", **kwargs: Any) -> dict:
    """Fit ``method`` (temperature, isotonic, platt) per question on the calibration split and store a
    calibrated view of the run (a new run, ``workbench calibrate``).

    Returns a summary: the new ``run_id``, the calibrators, and test ECE / log loss before and after.

    Examples
    --------
    >>> calibrated = wb.calibrate(con, run_id, "temperature")
    >>> calibrated["parent_run_id"] == run_id, calibrated["run_id"] != run_id
    (True, True)
    """
    from workbench.workflows.evaluation import calibrate_run

    return calibrate_run(con, run_id, method, **kwargs)


def choose_thresholds(con, run_id: str, question: str, options: ThresholdOptions | None = None):
    """Pick routing thresholds for one question of a run and judge them on its test split.

    The same call as ``workbench thresholds RUN -q QUESTION``, ``workbench compare``, the demo and
    the UI's Thresholds page make (:func:`workbench.workflows.thresholds.thresholds_for_run`).

    Parameters
    ----------
    options : ThresholdOptions, optional
        α, δ, recalibration, method, grid …; default ``ThresholdOptions()``.

    Returns
    -------
    ThresholdResult
        ``certified`` (True only when a rule was certified), ``rule_dict()``, ``selection``,
        ``test`` (coverage and error with intervals), ``needed`` (when nothing was certified: the
        smallest calibration split that could be), ``summary()``, ``to_dict()``.

    Examples
    --------
    >>> result = wb.choose_thresholds(con, run_id, "spam")
    >>> result.certified
    True
    >>> print(result.summary())  # doctest: +ELLIPSIS
    spam: certified; test coverage ...%, error among accepted ...% [α = 0.05, δ = 0.1, recalibration temperature, ...]
    >>> strict = wb.choose_thresholds(con, run_id, "spam", wb.ThresholdOptions(alpha=0.0005))
    >>> strict.certified, strict.needed["n_certifying"], strict.needed["n_calibration"]
    (False, 4605, 9398)
    """
    from workbench.workflows.thresholds import thresholds_for_run

    return thresholds_for_run(con, run_id, question, options)


def plan_labels(
    con,
    run_id: str,
    question: str,
    options: ThresholdOptions | None = None,
    **kwargs: Any,
):
    """How many calibration labels certify at ``options.alpha`` with probability ≥ 0.8, simulated from
    a labelled pilot of the run (``workbench plan-labels``).

    ``kwargs``: ``pilot_split`` ("calibration"), ``pilot_size`` (a seeded subset), ``unlabelled_splits``,
    ``target_coverage``, ``power`` (0.8), ``confidence`` (0.9), ``n_draws`` (200), ``max_labels``
    (20000), ``errors`` ("logistic" | "observed"), ``seed``, ``reporter``.

    Returns
    -------
    LabelPlan
        ``recommended_labels`` (the N that ``confidence`` of the pilot's bootstrap replicates need; None
        when that is beyond ``max_labels``), ``labels_range`` (10 % / median / 90 % of N over the
        replicates), ``warnings`` (the pilot's best rule within its own noise of α), ``status`` (``ok``,
        ``pilot_too_small``, ``unreachable``, ``beyond_max_labels``), ``curve``, ``messages``,
        ``summary()``, ``to_frame()``, ``to_dict()``.

    Examples
    --------
    >>> plan = wb.plan_labels(con, run_id, "spam", pilot_size=300, n_draws=50)
    >>> plan.status, plan.pilot["n_items"], plan.recommended_labels is not None
    ('ok', 300, True)
    >>> print(plan.summary())  # doctest: +ELLIPSIS
    spam: about ... calibration labels to certify at α = 0.05, δ = 0.1 with probability ≥ 0.8 (simulated from a 300-item pilot; N over 40 pilot bootstraps: 10% ..., median ..., 90% ...; recommended: the 90% quantile)
    """
    from workbench.workflows.thresholds import plan_labels_for_run

    return plan_labels_for_run(con, run_id, question, options, **kwargs)


def build_policy(
    con,
    run_id: str,
    questions: str | Sequence[str],
    options: ThresholdOptions | None = None,
    *,
    out: str | Path | None = None,
    version: str = "1.0.0",
    **kwargs: Any,
):
    """Choose thresholds for ``questions`` of a run and assemble the versioned, hashed policy
    (``workbench policy export``); write it to ``out`` when given.

    ``kwargs``: ``max_state_tokens``, ``created_by``, ``bind_model`` (True: only the run's model is
    auto-accepted). Returns the runtime :class:`workbench.Policy` (``.decide(response)``, ``.model``).

    Examples
    --------
    >>> policy = wb.build_policy(con, run_id, "spam", out=tmp / "policy.json")
    >>> policy.model.questions["spam"].objective.certified
    True
    >>> response = {"model": policy.model.source.model, "answers": {"spam": {"type": "noul", "noul": 0.999}}}
    >>> policy.decide(response, schema_hash=schema.hash)["spam"].action
    'accept'
    >>> wb.Policy.load(tmp / "policy.json").content_hash == policy.content_hash
    True
    """
    from workbench.policy import Policy
    from workbench.policy.build import build_policy as _build
    from workbench.policy.io import write_policy

    qs = [questions] if isinstance(questions, str) else list(questions)
    model, _ = _build(
        con, run_id, qs, options if options is not None else ThresholdOptions(), policy_version=version, **kwargs
    )
    if out is not None:
        model = write_policy(model, out)
    return Policy(model)


def compare(
    con,
    runs: str | Sequence[str],
    *,
    baseline: str | None = None,
    options: ThresholdOptions | None = None,
    questions: Sequence[str] | None = None,
    split: str | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
    policy: bool = True,
):
    """Compare runs on the same items against a baseline (``workbench compare``).

    Per run and question: metrics with bootstrap intervals, cost and latency, coverage and error at
    the thresholds ``options`` certify (the figures :func:`choose_thresholds` gives), and paired
    differences against the baseline (paired bootstrap, McNemar).

    Parameters
    ----------
    runs : run ids, an experiment name or an experiment file
    baseline : run id or ``PROVIDER@VARIANT``, default the experiment's or the first run

    Returns
    -------
    Comparison
        ``.to_frame()`` (one row per run and question), ``.to_dict()``, ``.settings``.

    Examples
    --------
    >>> comparison = wb.compare(con, [run_id, calibrated["run_id"]], n_boot=100)
    >>> frame = comparison.to_frame()
    >>> len(frame), bool(frame["coverage"][0] == result.test["coverage"]["value"])
    (2, True)
    """
    from workbench.workflows.compare import compare_runs

    names = [runs] if isinstance(runs, str) else list(runs)
    return compare_runs(
        con,
        names,
        baseline=baseline,
        options=options,
        questions=list(questions) if questions else None,
        split=split,
        n_boot=n_boot,
        seed=seed,
        policy=policy,
    )


def robustness(
    con,
    base_run: str,
    probe_runs: str | Sequence[str],
    *,
    question: str | None = None,
    splits: Sequence[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    """How a schema's answers move under robustness probes (``workbench robustness``).

    ``probe_runs`` are runs of the same dataset and schema made by an experiment's ``probes:``
    (``option_order``, ``option_ids_only``, ``irrelevant_context``, ``instruction_paraphrase``,
    ``yes_no_inversion``; answers stored in the original option order). Per probe run against
    ``base_run``: flip rate of the top option (Wilson interval), paired accuracy change (paired
    bootstrap interval, McNemar's exact p) and, for ``option_order``, the position bias of the option
    listed first / last (its win share minus the same option's share in the base run, with a paired
    bootstrap interval).

    Returns
    -------
    dict
        ``{"base_run", "question", "probes": [{"run_id", "probe", "flip_rate", "flip_rate_ci",
        "accuracy_change", "accuracy_change_ci", "mcnemar_p", "position_bias", …}]}``.
    """
    from workbench.workflows.robustness import robustness as _robustness

    runs = [probe_runs] if isinstance(probe_runs, str) else list(probe_runs)
    return _robustness(con, base_run, runs, question=question, splits=splits, n_boot=n_boot, seed=seed)


def cascade(
    con,
    stages: Sequence[str],
    question: str,
    *,
    alpha: float = 0.05,
    delta: float = 0.1,
    prices: Mapping[str, float] | None = None,
    review_cost: float = 0.05,
    latency_weight: float = 0.0,
    method: str = "fixed-sequence",
    out: str | Path | None = None,
    **options: Any,
):
    """The cheapest certified configuration of a cascade of runs (``workbench cascade``): accept at a
    stage, escalate, review after the last — or one of the runs alone when that is cheaper.

    ``stages`` are run ids (or names) of the same dataset and question, cheapest first. Each stage is
    recalibrated as :func:`thresholds` does and every rule is on its grid; one Learn-then-Test family
    holds each stage alone (priced as its own model) and every cascade of the stages
    (:mod:`workbench.thresholds.cascade`). Its cheapest certified configuration by expected cost per
    item (``prices`` USD per call by run, else each run's recorded cost; ``review_cost`` per reviewed
    item; ``latency_weight`` USD per second) wins, with error among auto-accepted items (all stages
    together) ≤ ``alpha`` with probability ≥ 1 − ``delta`` over the whole family. ``options``: other
    :class:`~workbench.thresholds.cascade.CascadeOptions` fields (``calibrate``, ``grid``, ``seed``, …).
    With ``out``, also writes the policy of the chosen configuration (format 2 with a ``cascade``
    section for a cascade, a plain policy for one run alone).

    Returns
    -------
    CascadeResult
        ``.to_dict()``: ``chosen`` (which configuration won), its stages, rules and calibrators,
        guarantee, test figures (coverage, error, share escalated, cost per 1,000 items, p95 latency),
        ``configurations`` (every structure's cheapest certified configuration with calibration and test
        figures) and ``singles`` (each run alone in the family, and under its own certificate).
    """
    from workbench.store.runs import get_run
    from workbench.thresholds.cascade import CascadeOptions
    from workbench.workflows.thresholds import cascade_for_runs

    ids = [str(get_run(con, r)["run_id"]) for r in stages]
    by_id = {str(get_run(con, k)["run_id"]): float(v) for k, v in (prices or {}).items()}
    opts = CascadeOptions(
        alpha=alpha,
        delta=delta,
        method=method,
        prices=[by_id.get(r) for r in ids],
        review_cost=review_cost,
        latency_weight=latency_weight,
        **options,
    )
    result = cascade_for_runs(con, ids, question, opts)
    if out is not None:
        from workbench.policy.build import build_cascade_policy
        from workbench.policy.io import write_policy

        write_policy(build_cascade_policy(con, result), out)
    return result


def replay_shadow(
    con,
    name: str,
    champion_run: str,
    challenger_run: str,
    *,
    splits: Sequence[str] | None = None,
    replace: bool = False,
) -> dict:
    """Make shadow session ``name`` from two runs over the same items (``workbench shadow replay``).

    Examples
    --------
    >>> session = wb.replay_shadow(con, "raw-vs-calibrated", run_id, calibrated["run_id"], splits=["test"])
    >>> session["n_requests"] == len(test.labels)
    True
    """
    from workbench.store.shadow import replay_runs

    return replay_runs(
        con,
        shadow=name,
        champion_run=champion_run,
        challenger_run=challenger_run,
        splits=list(splits) if splits else None,
        replace=replace,
    )


def shadow_report(
    con,
    session: str,
    *,
    champion_policy: Any = None,
    challenger_policy: Any = None,
    options: ThresholdOptions | None = None,
    criteria: Any = None,
    questions: Sequence[str] | None = None,
    n_boot: int = 1000,
    **kwargs: Any,
):
    """What would change if the challenger replaced the champion, and a verdict (``workbench shadow report``).

    A side without a policy (a policy file path, a ``SidePolicy``, or rules such as
    ``"tau=0.9,margin=0.1"``) routes with the policy certified on its run with ``options`` — the
    same defaults as everywhere else. ``criteria``: a :class:`workbench.shadow.report.Criteria` or a
    mapping of its fields (``max_error_increase``, ``min_coverage_gain`` …).

    Returns
    -------
    ShadowReport
        ``.verdict`` (PROMOTE / HOLD / REJECT), ``.reasons``, ``.to_frame()``, ``.to_dict()``.

    Examples
    --------
    >>> shadow = wb.shadow_report(con, "raw-vs-calibrated", n_boot=100)
    >>> shadow.verdict in ("PROMOTE", "HOLD", "REJECT"), shadow.policies["challenger"]["source"].startswith("certified")
    (True, True)
    """
    from workbench.shadow.report import Criteria
    from workbench.shadow.report import shadow_report as _report

    if isinstance(criteria, Mapping):
        criteria = Criteria(**criteria)
    return _report(
        con,
        session,
        champion_policy=_side(champion_policy),
        challenger_policy=_side(challenger_policy),
        options=options,
        criteria=criteria,
        questions=list(questions) if questions else None,
        n_boot=n_boot,
        **kwargs,
    )


def aggregate_answers(
    paths: Any,
    schema: Any,
    *,
    questions: Sequence[str] | None = None,
    splits: Sequence[str] = (),
    engine: str = "duckdb",
    spark_master: str | None = None,
    n_bins: int = 15,
    grid: int = 100,
):
    """Metrics and threshold-surface counts of exported answer files, computed where they live (``workbench aggregate``).

    ``paths`` are Parquet files, directories or globs in the long layout of ``workbench export``
    (``s3://``/``hdfs://`` URLs go to the engine as they are). ``engine="duckdb"`` (default) runs on
    this machine in bounded memory; ``engine="spark"`` runs the same SQL on ``spark_master``
    (``local[2]`` by default, ``spark://host:7077``, ``yarn``, ``k8s://…``; see ``docs/scale.md``).
    Returns an :class:`~workbench.engines.answers.AggregateReport`: per question accuracy, Brier, log
    loss, ECE/MCE with their reliability bins, the confusion counts and the threshold surface, equal
    to the in-memory metrics on the same answers.

    Example (not run here)::

        agg = wb.aggregate_answers("exports/run-1/", "schema.yaml", engine="spark", spark_master="yarn")
        agg.questions["intent"].ece, agg.questions["intent"].surface.coverage
    """
    from workbench.engines.answers import aggregate_answers as _aggregate

    return _aggregate(
        paths,
        schema,
        questions=questions,
        splits=splits,
        engine=engine,
        spark_master=spark_master,
        n_bins=n_bins,
        grid=grid,
    )


def _side(policy: Any):
    """A side policy from a SidePolicy, a policy file path, or rule text (``"tau=0.9,margin=0.1"``)."""
    if policy is None or hasattr(policy, "decide"):
        return policy
    from workbench.shadow.policies import load_side_policy, parse_rule_options

    if isinstance(policy, Path) or (isinstance(policy, str) and policy.endswith(".json")):
        return load_side_policy(policy)
    return parse_rule_options([policy] if isinstance(policy, str) else list(policy))
