"""Compare runs (provider × schema variant) on the same items, against a chosen baseline.

For every run and question, on the comparison split (default ``test``):

- headline metrics with bootstrap intervals (accuracy, macro-F1, log loss, Brier) and top-label ECE,
  all computed by :mod:`workbench.metrics`;
- cost per 1,000 items (unknown when the provider has no price — never 0) and latency p50/p95 of
  the calls;
- coverage and error at the policy chosen by the experiment's threshold objective (on the
  calibration split, judged on the comparison split) via :func:`workbench.thresholds.choose.choose_thresholds`;
- item-paired differences against the baseline run on the items both answered: paired bootstrap
  intervals and p-values of each metric difference (:func:`workbench.metrics.bootstrap.paired_bootstrap`)
  and McNemar's test on top-choice correctness (:func:`workbench.metrics.bootstrap.mcnemar`).

Runs are named by run id, by experiment name (its latest run of every pair), or by an experiment file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.answers import RunAnswers
from workbench.errors import NotFoundError, WorkbenchError
from workbench.metrics.bootstrap import bootstrap_many, mcnemar, paired_bootstrap
from workbench.metrics.confusion import macro_f1
from workbench.metrics.reliability import top_label_ece
from workbench.metrics.scores import accuracy, brier_score, log_loss
from workbench.schema import option_ids
from workbench.store.runs import answer_source, get_run, load_answers, load_stored_schema
from workbench.thresholds.choose import ThresholdOptions


def ObjectiveSpec(
    kind: str = "guarantee",
    max_error: float | None = None,
    delta: float | None = None,
    calibrate: str | None = None,
    **fields: Any,
) -> ThresholdOptions:
    """:class:`ThresholdOptions` from the older objective keywords (kept for callers of the first
    wave; ``None`` keeps ThresholdOptions' default). New code passes ``options=ThresholdOptions(...)``."""
    given = {"alpha": max_error, "delta": delta, "calibrate": calibrate, **fields}
    fields_ok = {k: v for k, v in given.items() if v is not None and k != "calibration_split"}
    return ThresholdOptions(objective=kind, **fields_ok)


def experiment_options(objective: Any) -> ThresholdOptions:
    """ThresholdOptions of an experiment file's ``objective:`` (fields it leaves out keep the defaults)."""
    if objective is None:
        return ThresholdOptions()
    set_fields = getattr(objective, "model_fields_set", None)
    values = {k: getattr(objective, k) for k in (set_fields if set_fields is not None else ())}
    rename = {"kind": "objective", "max_error": "alpha"}
    return ThresholdOptions(
        **{rename.get(k, k): v for k, v in values.items() if k != "calibration_split" and v is not None}
    )


# -- which runs ------------------------------------------------------------------------------------
def resolve_runs(con, names: list[str]) -> tuple[list[dict], Any]:
    """Run rows for run ids, experiment names or experiment files; plus the experiment (or None)."""
    from workbench.experiments import experiment_runs, load_experiment

    runs: list[dict] = []
    experiment = None
    for name in names:
        if name.endswith((".yaml", ".yml")) and Path(name).exists():
            experiment = load_experiment(name)
            rows = experiment_runs(con, experiment.name)
        else:
            try:
                rows = [get_run(con, name)]
            except NotFoundError:
                try:
                    rows = experiment_runs(con, name)
                except NotFoundError:
                    raise NotFoundError(
                        f"{name!r} is neither a run id, a run name nor an experiment", hint="see `workbench runs list`"
                    ) from None
                experiment = experiment or _experiment_by_name(name)
        for r in rows:
            full = get_run(con, r["run_id"])
            if full["run_id"] not in {x["run_id"] for x in runs}:
                runs.append(full)
    if not runs:
        raise NotFoundError("no runs to compare", hint="name run ids or an experiment")
    datasets = {(r["dataset"], int(r["dataset_version"])) for r in runs}
    if len(datasets) > 1:
        raise WorkbenchError(
            "runs are on different datasets or dataset versions: "
            + ", ".join(f"{d} v{v}" for d, v in sorted(datasets)),
            hint="compare runs of one dataset version (item-paired)",
        )
    return runs, experiment


def _experiment_by_name(name: str):
    from workbench.experiments import load_experiment

    for folder in (Path("experiments"), Path(__file__).resolve().parents[1] / "experiments"):
        path = folder / f"{name}.yaml"
        if path.exists():
            try:
                exp = load_experiment(path)
            except WorkbenchError:
                continue
            if exp.name == name:
                return exp
    return None


def label(run: dict) -> str:
    """``provider@variant`` (or ``provider@run_id`` outside an experiment)."""
    return f"{run['provider']}@{run.get('variant') or run['run_id']}"


def _pick_baseline(runs: list[dict], baseline: str | None, experiment: Any) -> dict:
    if baseline is None and experiment is not None and experiment.baseline is not None:
        baseline = f"{experiment.baseline.provider}@{experiment.baseline.variant}"
    if baseline is None:
        return runs[0]
    for r in runs:
        if baseline in (r["run_id"], r.get("name"), label(r)):
            return r
    raise NotFoundError(
        f"baseline {baseline!r} is not among the compared runs",
        hint="use a run id or PROVIDER@VARIANT of: " + ", ".join(label(r) for r in runs),
    )


# -- per-run figures -------------------------------------------------------------------------------
def _metric_stats(probs: np.ndarray, labels: np.ndarray, k: int, qtype: str = "choice"):
    """Bootstrap-able headline metrics (weights = resampling counts); ordinal ones for ``score``."""
    from workbench.metrics.scores import mae_expected_level, ranked_probability_score

    pred = probs.argmax(axis=1)

    def stats(w: np.ndarray | None) -> dict[str, float]:
        out = {
            "accuracy": accuracy(probs, labels, w),
            "macro_f1": macro_f1(labels, pred, k, w),
            "log_loss": log_loss(probs, labels, w),
            "brier": brier_score(probs, labels, w),
        }
        if qtype == "score":
            out["rps"] = ranked_probability_score(probs, labels, w)
            out["mae_expected_level"] = mae_expected_level(probs, labels, w)
        return out

    return stats


def _point_metrics(probs: np.ndarray, labels: np.ndarray, qtype: str) -> dict[str, float]:
    """Metrics without weights support: ECE for all; ROC-AUC and average precision of P(yes) for noul."""
    from workbench.metrics.scores import average_precision, roc_auc

    out = {"ece": top_label_ece(probs, labels)}
    if qtype == "noul":
        out["roc_auc"] = roc_auc(labels == 0, probs[:, 0])
        out["average_precision"] = average_precision(labels == 0, probs[:, 0])
    return out


def _run_costs(con, run: dict, split: str) -> dict:
    row = con.execute(
        """WITH a AS (
               SELECT a.* FROM answers a JOIN items i ON i.dataset = $ds AND i.version = $v AND i.item_id = a.item_id
               WHERE a.run_id = $run AND i.split = $split
           ), calls AS (
               SELECT DISTINCT coalesce(cache_key, item_id || question) AS k, latency_ms FROM a
           )
           SELECT (SELECT count(DISTINCT item_id) FROM a), (SELECT sum(cost_usd) FROM a),
                  (SELECT count(*) FILTER (WHERE cost_usd IS NULL AND failure_kind IS NULL) FROM a),
                  (SELECT quantile_cont(latency_ms, 0.5) FROM calls),
                  (SELECT quantile_cont(latency_ms, 0.95) FROM calls),
                  (SELECT count(*) FROM calls)""",
        {"ds": run["dataset"], "v": int(run["dataset_version"]), "run": answer_source(con, run)[0], "split": split},
    ).fetchone()
    n_items, cost, n_unpriced, p50, p95, n_calls = row
    known = n_items and cost is not None and n_unpriced == 0
    return {
        "n_items": int(n_items or 0),
        "n_calls": int(n_calls or 0),
        "cost_per_1000_items": (float(cost) / n_items * 1000.0) if known else None,
        "cost_known": bool(known),
        "latency_p50_ms": p50,
        "latency_p95_ms": p95,
    }


def _policy_at_options(con, run_id: str, question: str, options: ThresholdOptions, calibration_split: str) -> dict:
    """Coverage and error on the comparison split at the rule ``options`` choose on the calibration split.

    The same call as ``workbench thresholds`` (:func:`workbench.workflows.thresholds_for_run`), so
    with the same options the figures are the same as there.
    """
    from workbench.workflows import thresholds_for_run

    try:
        result = thresholds_for_run(con, run_id, question, options, calibration_split=calibration_split)
    except WorkbenchError as exc:
        return {"not_chosen": str(exc)}
    t = result.test or {}
    return {
        "objective": options.objective,
        "certified": result.certified,
        "feasible": result.selection.feasible,
        "settings": options.settings(),
        "rule": result.rule_dict(),
        "coverage": t.get("coverage"),
        "error": t.get("error"),
        "n_accepted": t.get("n_accepted"),
        "n_items": t.get("n_items"),
        "calibration_size_needed": result.needed,
        "_rule": result.rule,
        "_calibrator": result.calibrator,
    }


def _decide(rule_and_calibrator: tuple, probs: np.ndarray):
    """The rule's decisions on ``probs`` after the calibrator it was chosen with (as a policy applies it)."""
    from workbench.metrics.recalibrate import calibrator_from_dict
    from workbench.thresholds.choose import apply_calibrator

    rule, calibrator = rule_and_calibrator
    if calibrator is not None:
        probs = apply_calibrator(calibrator_from_dict(calibrator), probs)
    return rule.decide(probs)


def _paired(
    base: RunAnswers, other: RunAnswers, *, base_rule, other_rule, n_boot: int, seed: int, level: float
) -> dict:
    """Paired differences other − base on items both answered and labelled."""
    a, b = base.labelled(), other.labelled()
    common, ia, ib = np.intersect1d(a.item_ids.astype(str), b.item_ids.astype(str), return_indices=True)
    out: dict[str, Any] = {"n_pairs": int(common.size)}
    if common.size == 0:
        return out
    pa, pb, y = a.probs[ia], b.probs[ib], a.labels[ia]
    k = pa.shape[1]
    diffs = paired_bootstrap(
        _metric_stats(pa, y, k, a.qtype),
        _metric_stats(pb, y, k, b.qtype),
        common.size,
        n_boot=n_boot,
        seed=seed,
        level=level,
    )
    out["metrics"] = {name: d.to_dict() for name, d in diffs.items()}
    out["mcnemar"] = mcnemar(pa.argmax(axis=1) == y, pb.argmax(axis=1) == y).to_dict()
    if base_rule is not None and other_rule is not None:
        da, db = _decide(base_rule, pa), _decide(other_rule, pb)

        def policy_stats(dec):
            acc = dec.accepted.astype(float)
            err = (dec.accepted & (dec.option != y)).astype(float)

            def stats(w):
                ww = np.ones_like(acc) if w is None else w
                n_acc = ww @ acc
                return {
                    "coverage": float(ww @ acc / ww.sum()),
                    "error_among_accepted": float(ww @ err / n_acc) if n_acc > 0 else 0.0,
                }

            return stats

        pol = paired_bootstrap(
            policy_stats(da), policy_stats(db), common.size, n_boot=n_boot, seed=seed + 1, level=level
        )
        out["policy"] = {name: d.to_dict() for name, d in pol.items()}
    return out


@dataclass
class Comparison:
    """Result of :func:`compare_runs`: one entry per (run, question) and the paired differences."""

    dataset: str
    split: str
    baseline: str
    objective: dict  # ThresholdOptions.settings() of the rules whose coverage/error are reported
    rows: list[dict] = field(default_factory=list)
    experiment: str | None = None
    settings_text: str = ""  # ThresholdOptions.describe(): printed next to coverage/error

    def to_dict(self) -> dict:
        return {
            "experiment": self.experiment,
            "dataset": self.dataset,
            "split": self.split,
            "baseline": self.baseline,
            "objective": self.objective,
            "settings": self.objective,
            "settings_text": self.settings_text,
            "rows": self.rows,
        }

    def to_frame(self) -> pd.DataFrame:
        """Flat table: one row per (run, question), headline figures and differences vs the baseline."""
        flat = []
        for r in self.rows:
            m, p = r.get("metrics") or {}, r.get("policy") or {}
            d = r.get("vs_baseline") or {}
            dm = d.get("metrics") or {}
            flat.append(
                {
                    "provider": r["provider"],
                    "variant": r["variant"],
                    "question": r["question"],
                    "run_id": r["run_id"],
                    "emulated": bool(r.get("emulated")),
                    "n": r["n_labelled"],
                    "failed": r["n_failed"],
                    "accuracy": (m.get("accuracy") or {}).get("estimate"),
                    "accuracy_low": (m.get("accuracy") or {}).get("low"),
                    "accuracy_high": (m.get("accuracy") or {}).get("high"),
                    "macro_f1": (m.get("macro_f1") or {}).get("estimate"),
                    "log_loss": (m.get("log_loss") or {}).get("estimate"),
                    "brier": (m.get("brier") or {}).get("estimate"),
                    "ece": r.get("ece"),
                    "cost_per_1000": r["cost"]["cost_per_1000_items"],
                    "latency_p50_ms": r["cost"]["latency_p50_ms"],
                    "latency_p95_ms": r["cost"]["latency_p95_ms"],
                    "coverage": (p.get("coverage") or {}).get("value"),
                    "error": (p.get("error") or {}).get("value"),
                    "d_accuracy": (dm.get("accuracy") or {}).get("difference"),
                    "d_accuracy_low": (dm.get("accuracy") or {}).get("low"),
                    "d_accuracy_high": (dm.get("accuracy") or {}).get("high"),
                    "p_bootstrap": (dm.get("accuracy") or {}).get("p_value"),
                    "p_mcnemar": (d.get("mcnemar") or {}).get("p_exact"),
                    "d_log_loss": (dm.get("log_loss") or {}).get("difference"),
                    "d_coverage": ((d.get("policy") or {}).get("coverage") or {}).get("difference"),
                    "is_baseline": r["is_baseline"],
                }
            )
        return pd.DataFrame(flat)


def compare_runs(
    con,
    names: list[str],
    *,
    baseline: str | None = None,
    questions: list[str] | None = None,
    split: str | None = None,
    options: ThresholdOptions | None = None,
    objective: ThresholdOptions | None = None,
    calibration_split: str | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
    level: float = 0.95,
    policy: bool = True,
    slices: Sequence[str] | None = None,
) -> Comparison:
    """Compare runs named by id, experiment name or experiment file (see the module docstring).

    Parameters
    ----------
    names : list of str
        Run ids/names, experiment names or experiment files.
    baseline : str, optional
        Run id or ``PROVIDER@VARIANT``; default the experiment's baseline, else the first run.
    questions : list of str, optional
        Questions to compare (default: every question of the baseline's schema).
    split : str, default the experiment's compare split, else ``"test"``
    options : ThresholdOptions, optional
        How the rule whose coverage/error is reported is chosen (default: the experiment file's
        ``objective:``, else ``ThresholdOptions()`` — the defaults of ``workbench thresholds``).
    objective : ThresholdOptions, optional
        Older name of ``options``.
    calibration_split : str, default the experiment's, else ``"calibration"``
    n_boot, seed : int
        Bootstrap replicates and seed (defaults: the experiment's, else 1000 and 0).
    policy : bool, default=True
        Choose a policy per run and question (skip for speed).
    slices : list of str, optional
        Item metadata columns (``--meta-column`` at import) or ``state_length``: each row then has
        ``slices[column]``: per slice value, its counts, metrics with intervals and the paired
        differences against the baseline on the slice's items (the same functions on the slice's rows).
    """
    runs, exp = resolve_runs(con, names)
    settings = exp.compare if exp is not None else None
    split = split or (settings.split if settings else "test")
    n_boot = n_boot if n_boot is not None else (settings.n_boot if settings else 1000)
    seed = seed if seed is not None else (settings.seed if settings else 0)
    options = options if options is not None else objective
    if options is None:
        options = experiment_options(exp.objective) if exp is not None else ThresholdOptions()
    if calibration_split is None:
        calibration_split = exp.objective.calibration_split if exp is not None else "calibration"
    base = _pick_baseline(runs, baseline, exp)
    base_schema = load_stored_schema(con, base["schema_hash"])
    qids = questions or (settings.questions if settings and settings.questions else None) or base_schema.question_ids
    unknown = [q for q in qids if q not in base_schema.questions]
    if unknown:
        raise NotFoundError(
            f"the baseline run has no question {unknown[0]!r}", hint=f"questions: {', '.join(base_schema.question_ids)}"
        )
    # baseline first, so its rule is known when the others are paired with it
    ordered = [base] + [r for r in runs if r["run_id"] != base["run_id"]]
    base_answers: dict[str, RunAnswers] = {}
    base_rules: dict[str, Any] = {}
    rows = []
    for run in ordered:
        schema = load_stored_schema(con, run["schema_hash"])
        costs = _run_costs(con, run, split)
        for q in qids:
            if q not in schema.questions:
                continue
            ans = load_answers(con, run["run_id"], q, [split])
            lab = ans.labelled()
            k = len(ans.option_ids)
            row: dict[str, Any] = {
                "run_id": run["run_id"],
                "provider": run["provider"],
                "emulated": bool(run.get("emulated")),  # cost is the real service's price, not a bill
                "variant": run.get("variant"),
                "label": label(run),
                "question": q,
                "model": run.get("model"),
                "schema_hash": run["schema_hash"],
                "is_baseline": run["run_id"] == base["run_id"],
                "n_items": int(len(ans.item_ids)),
                "n_labelled": int(len(lab.labels)),
                "n_failed": int(ans.failed.sum()),
                "cost": costs,
            }
            if len(lab.labels):
                ci = bootstrap_many(
                    _metric_stats(lab.probs, lab.labels, k, ans.qtype),
                    len(lab.labels),
                    n_boot=n_boot,
                    seed=seed,
                    level=level,
                )
                row["metrics"] = {name: iv.to_dict() for name, iv in ci.items()}
                point = _point_metrics(lab.probs, lab.labels, ans.qtype)
                row["ece"] = point.pop("ece")
                row["point_metrics"] = point
            rule = None
            if policy:
                pol = _policy_at_options(con, run["run_id"], q, options, calibration_split)
                rule = pol.pop("_rule", None)
                calibrator = pol.pop("_calibrator", None)
                rule = None if rule is None else (rule, calibrator)
                row["policy"] = pol
            if run["run_id"] == base["run_id"]:
                base_answers[q], base_rules[q] = ans, rule
            elif q in base_answers and option_ids(schema.questions[q]) == base_answers[q].option_ids:
                row["vs_baseline"] = _paired(
                    base_answers[q],
                    ans,
                    base_rule=base_rules.get(q),
                    other_rule=rule,
                    n_boot=n_boot,
                    seed=seed,
                    level=level,
                )
            elif q in base_answers:
                row["vs_baseline"] = {"n_pairs": 0, "note": "options differ from the baseline's: not paired"}
            paired = "vs_baseline" in row and row["vs_baseline"].get("n_pairs", 0) > 0
            row["slices"] = {
                column: _slice_figures(
                    con,
                    ans,
                    column,
                    base=base_answers[q] if paired else None,
                    base_rule=base_rules.get(q),
                    rule=rule,
                    n_boot=n_boot,
                    seed=seed,
                    level=level,
                )
                for column in dict.fromkeys(slices or [])
            }
            rows.append(row)
    return Comparison(
        dataset=base["dataset"],
        split=split,
        baseline=label(base),
        objective=options.settings(),
        settings_text=options.describe(),
        rows=rows,
        experiment=exp.name if exp else None,
    )


def _slice_figures(
    con,
    ans: RunAnswers,
    column: str,
    *,
    base: RunAnswers | None,
    base_rule,
    rule,
    n_boot: int,
    seed: int,
    level: float,
) -> dict:
    """Per slice of ``column``: counts, metrics with intervals and (``base`` given) the paired differences
    against the baseline on the slice's items — :func:`_metric_stats` and :func:`_paired` on the slice's rows."""
    from workbench.evaluation import slice_values
    from workbench.metrics.slices import slice_groups

    values, order = slice_values(con, ans, column)
    base_masks = dict(slice_groups(slice_values(con, base, column)[0])) if base is not None else {}
    out: dict[str, dict] = {}
    for value, mask in slice_groups(values, order):
        sel = ans.select(mask)
        lab = sel.labelled()
        fig: dict[str, Any] = {
            "n_items": int(mask.sum()),
            "n_labelled": int(len(lab.labels)),
            "n_failed": int(sel.failed.sum()),
        }
        if len(lab.labels):
            ci = bootstrap_many(
                _metric_stats(lab.probs, lab.labels, len(ans.option_ids), ans.qtype),
                len(lab.labels),
                n_boot=n_boot,
                seed=seed,
                level=level,
            )
            fig["metrics"] = {name: iv.to_dict() for name, iv in ci.items()}
        if base is not None and value in base_masks:
            fig["vs_baseline"] = _paired(
                base.select(base_masks[value]),
                sel,
                base_rule=base_rule,
                other_rule=rule,
                n_boot=n_boot,
                seed=seed,
                level=level,
            )
        out[value] = fig
    return {"values": list(out), "slices": out}
