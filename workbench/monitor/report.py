"""Monitoring a live policy: per-window figures, drift, the anytime-valid alarm, a recertification hint.

:func:`monitor` reads decision logs and outcome files (see :mod:`workbench.monitor.logs`) and
returns a :class:`MonitorReport` whose ``to_dict()`` is the ``workbench monitor --json`` document::

    {"alarm": bool, "first_alarm_at": {...} | null, "windows": [...], "reasons": [...], ...}

Per window and question: traffic, coverage (auto-accept rate), review load, override rate among
accepted decisions with override information, error among accepted decisions with a known outcome
(Wilson 95% interval), PSI / Jensen–Shannon drift of ``p_top``, margin and the predicted option
against the policy's calibration-time reference, and the share of decisions whose model or schema
hash the policy does not accept.

The alarm is the betting e-process of :mod:`workbench.monitor.sequential` on the errors of
accepted decisions in decision-time order, at the policy's α and false-alarm probability δ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from workbench.errors import OptionError
from workbench.monitor.logs import LoadSummary, MonitorStore, expand_paths
from workbench.monitor.sequential import AlarmStream, AlarmSummary

#: PSI above this is a "large shift" (the usual rule of thumb).
PSI_LARGE = 0.25


@dataclass
class MonitorOptions:
    """Settings of :func:`monitor` (``None`` = take it from the policy)."""

    window: str = "1D"
    alpha: float | None = None
    delta: float | None = None
    drift_alarm_psi: float | None = None
    recertify_min: int = 1000
    recertify_max: int = 50_000
    half_life: float = 100.0
    n_bins: int = 20


@dataclass
class MonitorReport:
    policy: dict
    options: MonitorOptions
    inputs: LoadSummary
    windows: list[dict]
    questions: dict[str, dict]
    alarms: dict[str, AlarmSummary]
    reasons: list[str]
    first_alarm_at: dict | None
    warnings: list[str] = field(default_factory=list)

    @property
    def alarm(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> dict:
        return {
            "alarm": self.alarm,
            "first_alarm_at": self.first_alarm_at,
            "windows": self.windows,
            "reasons": self.reasons,
            "policy": self.policy,
            "options": dict(self.options.__dict__),
            "questions": self.questions,
            "inputs": self.inputs.to_dict(),
            "warnings": self.warnings,
        }


def _share(num: float, den: float) -> float | None:
    return float(num) / float(den) if den else None


def _drift(ref: dict | None, cur: np.ndarray, names: list) -> dict:
    """PSI and JS of the shares ``cur`` (counts) against the reference counts (``None`` when unknown)."""
    from workbench.shadow.drift import js_divergence, psi

    if ref is None or cur.sum() == 0:
        return {"psi": None, "js": None, "n": int(cur.sum())}
    r = np.asarray([ref.get(n, 0) for n in names] if isinstance(ref, dict) else ref, dtype=float)
    if r.sum() == 0:
        return {"psi": None, "js": None, "n": int(cur.sum())}
    # half a pseudo-count per bin (Jeffreys) rather than a floor: sparse option counts stay finite and comparable
    rs, cs = (r + 0.5) / (r.sum() + 0.5 * r.size), (cur + 0.5) / (cur.sum() + 0.5 * cur.size)
    return {"psi": psi(rs, cs), "js": js_divergence(rs, cs), "n": int(cur.sum())}


#: Known outcomes per chunk the alarm reads (memory of the alarm is independent of the stream's length).
OUTCOME_BATCH = 100_000


class MonitorSource(Protocol):
    """Where :func:`report_from_source` reads the figures of one policy's decisions: the scratch DuckDB
    database of :func:`monitor` (:class:`StoreSource`) or an engine over the log files
    (:func:`workbench.engines.monitoring.monitor_on_engine`). Decision index ``idx`` is the 0-based
    position of a decision in its question's order (time, then decision id; no time last)."""

    def windows(self, question: str) -> list[tuple]:
        """Per window, in order (the window without a time last): (label, first time text, last time text,
        first idx, last idx, traffic, accepted, reviewed, accepted with override information, overrides,
        accepted with a known outcome, errors among them, model mismatches, schema mismatches)."""
        ...

    def histograms(self, question: str, options: list[str], n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n_windows, n_bins) counts of p_top bins and margin bins and (n_windows, k) of predicted
        options, rows in the order of :meth:`windows`."""
        ...

    def outcome_batches(self, question: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(wrong 0/1, idx) of the accepted decisions with a known outcome, in idx order, in chunks."""
        ...

    def recertification_count(self, question: str) -> int:
        """Decisions with probabilities and an outcome among the policy's options."""
        ...

    def recertification_rows(self, question: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """The last ``limit`` of those (probs (m, k), label index (m,)), in idx order."""
        ...

    def decision_at(self, question: str, idx: int) -> tuple[str | None, str | None]:
        """(decision id, time as ``%Y-%m-%dT%H:%M:%S.%fZ``) of decision ``idx``."""
        ...


class StoreSource:
    """:class:`MonitorSource` over table ``d`` of a :class:`MonitorStore` (after ``build_view``)."""

    def __init__(self, con: Any):
        self.con = con
        self._keys: dict[str, dict] = {}

    def windows(self, question: str) -> list[tuple]:
        rows = self.con.execute(
            """
            SELECT win, strftime(min(time), '%Y-%m-%dT%H:%M:%SZ'), strftime(max(time), '%Y-%m-%dT%H:%M:%SZ'), min(idx), max(idx), count(*),
                   count(*) FILTER (WHERE accepted),
                   count(*) FILTER (WHERE NOT accepted),
                   count(*) FILTER (WHERE accepted AND override IS NOT NULL),
                   count(*) FILTER (WHERE accepted AND override),
                   count(*) FILTER (WHERE known),
                   count(*) FILTER (WHERE known AND wrong),
                   count(*) FILTER (WHERE model_mismatch),
                   count(*) FILTER (WHERE schema_mismatch)
            FROM d WHERE question = ? GROUP BY win ORDER BY win NULLS LAST
            """,
            [question],
        ).fetchall()
        self._keys[question] = {r[0]: i for i, r in enumerate(rows)}
        return [(w if isinstance(w, int) or w is None else w.strftime("%Y-%m-%dT%H:%M:%SZ"), *r) for w, *r in rows]

    def _counts(self, question: str, col: str, keys: list) -> np.ndarray:
        win_index = self._keys[question]
        out = np.zeros((len(win_index), len(keys)))
        pos = {k: j for j, k in enumerate(keys)}
        rows = self.con.execute(
            f"SELECT win, {col}, count(*) FROM d WHERE question = ? AND {col} IS NOT NULL GROUP BY 1, 2", [question]
        ).fetchall()
        for w, k, n in rows:
            if k in pos and w in win_index:
                out[win_index[w], pos[k]] = n
        return out

    def histograms(self, question: str, options: list[str], n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bins = list(range(n_bins))
        return (
            self._counts(question, "p_bin", bins),
            self._counts(question, "m_bin", bins),
            self._counts(question, "predicted", options),
        )

    def outcome_batches(self, question: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        reader = self.con.execute(
            "SELECT coalesce(wrong, false)::TINYINT AS e, idx FROM d WHERE question = ? AND known ORDER BY idx",
            [question],
        ).fetch_record_batch(OUTCOME_BATCH)
        for b in reader:
            yield b.column(0).to_numpy(), b.column(1).to_numpy()

    def recertification_count(self, question: str) -> int:
        return int(
            self.con.execute(
                "SELECT count(*) FROM d WHERE question = ? AND label >= 0 AND has_probs", [question]
            ).fetchone()[0]
        )

    def recertification_rows(self, question: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.con.execute(
            "SELECT dec.probs, t.label FROM (SELECT drow, label, idx FROM d WHERE question = ? AND label >= 0 "
            "AND has_probs ORDER BY idx DESC LIMIT ?) t JOIN decisions dec ON dec.rowid = t.drow ORDER BY t.idx",
            [question, limit],
        ).fetchnumpy()
        return np.asarray(np.stack(list(rows["probs"])), dtype=float), np.asarray(rows["label"], dtype=np.int64)

    def decision_at(self, question: str, idx: int) -> tuple[str | None, str | None]:
        row = self.con.execute(
            "SELECT decision_id, strftime(time, '%Y-%m-%dT%H:%M:%S.%fZ') FROM d WHERE question = ? AND idx = ?",
            [question, idx],
        ).fetchone()
        return (row[0], row[1]) if row else (None, None)


def _recertify(
    source: MonitorSource, policy: Any, question: str, alpha: float, delta: float, opts: MonitorOptions
) -> dict:
    """The thresholds that fresh outcomes would certify today (``choose_thresholds``, as ``workbench thresholds``)."""
    from workbench.answers import RunAnswers
    from workbench.thresholds.choose import ThresholdOptions, choose_thresholds

    n = source.recertification_count(question)
    current = policy.model.questions[question].rule.model_dump()
    if n < opts.recertify_min:
        return {
            "available": False,
            "n_outcomes": n,
            "needed": opts.recertify_min,
            "current_rule": current,
            "message": f"{n} decisions with a known outcome; {opts.recertify_min} needed to recertify",
        }
    probs, labels = source.recertification_rows(question, opts.recertify_max)
    m = len(labels)
    qp = policy.model.questions[question]
    cal_type = qp.calibrator.type
    calibrate = "none" if cal_type in ("identity", "none") else cal_type
    answers = RunAnswers(
        run_id="decision-log",
        question=question,
        qtype=qp.type,
        option_ids=list(qp.options),
        item_ids=np.arange(m).astype(str),
        splits=np.full(m, "calibration"),
        probs=probs,
        labels=labels,
        failed=np.zeros(m, bool),
        failure_kind=np.full(m, None, dtype=object),
        latency_ms=np.full(m, np.nan),
        cost_usd=np.full(m, np.nan),
        input_tokens=np.full(m, np.nan),
    )
    try:
        res = choose_thresholds(answers, None, ThresholdOptions(alpha=alpha, delta=delta, calibrate=calibrate))
    except Exception as exc:  # e.g. a calibrator that cannot be fitted on these outcomes
        return {"available": False, "n_outcomes": m, "current_rule": current, "message": f"cannot recertify: {exc}"}
    sel = res.selection
    g = sel.guarantee or {}
    return {
        "available": True,
        "n_outcomes": m,
        "alpha": alpha,
        "delta": delta,
        "calibrate": calibrate,
        "certified": bool(sel.certified and sel.feasible),
        "rule": res.rule_dict(),
        "current_rule": current,
        "expected_coverage": g.get("expected_coverage", sel.calibration.get("coverage")),
        "risk_upper_bound": g.get("risk_upper_bound"),
        "note": "outcomes of logged decisions (reviewed items and audited accepts); "
        "a sample that over-represents reviewed items biases these figures",
    }


def monitor(
    policy_path: str | Path,
    decisions: Sequence[str | Path],
    outcomes: Sequence[str | Path] = (),
    opts: MonitorOptions | None = None,
) -> MonitorReport:
    """Monitor a policy on its decision logs (and outcomes, when they have arrived).

    Parameters
    ----------
    policy_path : the policy file the decisions were made with (only decisions carrying its content hash count)
    decisions : decision log files (JSON Lines; globs allowed; rotated files are more paths)
    outcomes : outcome files (JSON Lines, CSV or Parquet)
    opts : window, α/δ overrides, drift alarm, recertification sizes

    Returns
    -------
    MonitorReport

    The figures are computed with DuckDB on this machine; :func:`workbench.engines.monitoring.monitor_on_engine`
    computes the same report on Spark (``workbench monitor --engine spark``).
    """
    from workbench.policy.runtime import Policy

    opts = opts or MonitorOptions()
    policy = Policy.load(policy_path)
    model = policy.model
    dec_files = expand_paths(decisions, "--decisions")
    out_files = expand_paths(outcomes, "--outcomes") if outcomes else []
    qids = list(model.questions)
    with MonitorStore() as store:
        summary = store.load_decisions(dec_files)
        store.load_outcomes(out_files, summary, default_question=qids[0] if len(qids) == 1 else None)
        store.build_view(
            policy_hash=policy.content_hash,
            options={q: list(model.questions[q].options) for q in qids},
            models=list(model.validity.models),
            schema_hashes=list(model.validity.schema_hashes),
            window=opts.window,
            n_bins=opts.n_bins,
        )
        others = store.other_policies(policy.content_hash)
        return report_from_source(policy, policy_path, opts, summary, StoreSource(store.con), others, dec_files)


def report_from_source(
    policy: Any,
    policy_path: str | Path,
    opts: MonitorOptions,
    summary: LoadSummary,
    source: MonitorSource,
    others: list[tuple[str, int]],
    dec_files: Sequence[str],
) -> MonitorReport:
    """The :class:`MonitorReport` of ``policy`` from the aggregates of ``source``; ``others`` are
    (policy hash, decisions) of other policies in the logs (left out, named in a warning)."""
    from workbench.metrics.reliability import wilson_interval

    model = policy.model
    qids = list(model.questions)
    warnings: list[str] = list(summary.warnings)
    if others:
        warnings.append("left out decisions of other policies: " + ", ".join(f"{h[:19]}… ({n})" for h, n in others[:5]))
    per_q = {q: source.windows(q) for q in qids}
    if not any(r[5] for rows in per_q.values() for r in rows):
        raise OptionError(
            f"no decision in {', '.join(dec_files)} was made by policy {policy.content_hash[:19]}…",
            hint="give the policy file the decisions were logged with",
        )
    windows: list[dict] = []
    questions: dict[str, dict] = {}
    alarms: dict[str, AlarmSummary] = {}
    reasons: list[str] = []
    first: list[dict] = []
    for q in qids:
        qp = model.questions[q]
        alpha = opts.alpha if opts.alpha is not None else qp.objective.alpha
        delta = opts.delta if opts.delta is not None else (qp.objective.delta or 0.05)
        if alpha is None:
            raise OptionError(
                f"policy question {q!r} has no promised error rate (objective {qp.objective.kind})",
                hint="pass --alpha",
            )
        agg = per_q[q]
        ref = qp.reference or None
        bins = list(range(opts.n_bins))
        p_counts, m_counts, o_counts = source.histograms(q, list(qp.options), opts.n_bins)
        # the alarm: errors of accepted decisions with a known outcome, in decision order, streamed in chunks;
        # windows are contiguous runs of decisions, so a window's last outcome is the running count of outcomes
        k_err, n_known = np.array([r[11] for r in agg], float), np.array([r[10] for r in agg], float)
        last_outcome = np.cumsum(n_known).astype(np.int64) - 1
        stream = AlarmStream(
            float(alpha),
            float(delta),
            int(n_known.sum()),
            keep=last_outcome[n_known > 0],
            half_life=opts.half_life,
        )
        fired_idx: int | None = None
        for e, idx in source.outcome_batches(q):
            t0 = stream.t
            stream.add(e)
            if fired_idx is None and stream.first_alarm is not None:
                fired_idx = int(idx[stream.first_alarm - t0])
        alarm = stream.finish()
        alarms[q] = alarm
        lo, hi = wilson_interval(k_err, n_known)
        for i, r in enumerate(agg):
            win, t0s, t1s, i0, i1, n, n_acc, n_rev, n_ovk, n_ov, n_k, n_e, n_model, n_schema = r
            at = alarm.at(int(last_outcome[i])) if n_k else None
            windows.append(
                {
                    "question": q,
                    "window": win,
                    "start": t0s,
                    "end": t1s,
                    "first_decision": int(i0),
                    "last_decision": int(i1),
                    "traffic": int(n),
                    "n_accepted": int(n_acc),
                    "coverage": _share(n_acc, n),
                    "review_load": int(n_rev),
                    "review_rate": _share(n_rev, n),
                    "n_override_known": int(n_ovk),
                    "n_overrides": int(n_ov),
                    "override_rate": _share(n_ov, n_ovk),
                    "n_known": int(n_k),
                    "n_errors": int(n_e),
                    "error": _share(n_e, n_k),
                    "error_low": None if not n_k else float(lo[i]),
                    "error_high": None if not n_k else float(hi[i]),
                    "model_mismatch_share": _share(n_model, n),
                    "schema_mismatch_share": _share(n_schema, n),
                    "drift": {
                        "p_top": _drift(ref.get("p_top") if ref else None, p_counts[i], bins),
                        "margin": _drift(ref.get("margin") if ref else None, m_counts[i], bins),
                        "option": _drift(ref.get("option") if ref else None, o_counts[i], list(qp.options)),
                    },
                    "e_value": None if at is None else float(math.exp(min(at[0], 700.0))),
                    "lower_bound": None if at is None else at[1],
                    "alarm": alarm.first_alarm is not None and fired_idx is not None and fired_idx <= i1,
                }
            )
        n, n_acc, n_k, n_e, n_ov, n_ovk = (int(sum(r[j] for r in agg)) for j in (5, 6, 10, 11, 9, 8))
        elo, ehi = wilson_interval(np.array([n_e]), np.array([n_k]))
        if ref is None:
            warnings.append(f"{q}: the policy carries no calibration-time reference; drift is not measured")
        questions[q] = {
            "alpha": float(alpha),
            "delta": float(delta),
            "overall": {
                "traffic": n,
                "n_accepted": n_acc,
                "coverage": _share(n_acc, n),
                "review_load": n - n_acc,
                "n_known": n_k,
                "n_errors": n_e,
                "error": _share(n_e, n_k),
                "error_low": float(elo[0]) if n_k else None,
                "error_high": float(ehi[0]) if n_k else None,
                "override_rate": _share(n_ov, n_ovk),
            },
            "sequence": alarm.to_dict(),
            "has_reference": ref is not None,
            "recertification": _recertify(source, policy, q, float(alpha), float(delta), opts),
        }
        if alarm.first_alarm is not None and fired_idx is not None:
            _, lower_end, estimate_end, recent_end = alarm.at(alarm.n - 1)
            decision_id, when = source.decision_at(q, fired_idx)
            first.append(
                {
                    "question": q,
                    "decision_index": fired_idx,
                    "outcome_index": alarm.first_alarm,
                    "decision_id": decision_id,
                    "time": when,
                }
            )
            reasons.append(
                f"{q}: error rate among accepted decisions is above α={alpha:g} with confidence 1−δ={1 - delta:g} "
                f"(e-value {math.exp(min(alarm.max_log_e, 700.0)):.3g} ≥ 1/δ={1 / delta:g} at decision "
                f"{fired_idx}, after {alarm.first_alarm + 1} outcomes; recent error {recent_end:.4f}, overall "
                f"{estimate_end:.4f}, lower confidence bound {lower_end:.4f})"
            )
        if opts.drift_alarm_psi is not None:
            for w in (w for w in windows if w["question"] == q):
                big = {
                    k: v["psi"]
                    for k, v in w["drift"].items()
                    if v["psi"] is not None and v["psi"] > opts.drift_alarm_psi
                }
                if big:
                    reasons.append(
                        f"{q}: drift in window {w['window']}: "
                        + ", ".join(f"PSI of {k} {v:.3f}" for k, v in big.items())
                        + f" > {opts.drift_alarm_psi:g}"
                    )
                    break
    first.sort(key=lambda a: (a["time"] is None, str(a["time"]), a["decision_index"]))
    policy_info = {
        "path": str(policy_path),
        "content_hash": policy.content_hash,
        "policy_version": policy.version,
        "models": list(model.validity.models),
        "schema_hashes": list(model.validity.schema_hashes),
    }
    return MonitorReport(
        policy_info, opts, summary, windows, questions, alarms, reasons, first[0] if first else None, warnings
    )


def _pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def markdown(report: MonitorReport) -> str:
    """A Markdown summary: the verdict, per-window figures and the recertification hint."""
    d = report.to_dict()
    lines = [f"### Policy monitor: {'ALARM' if d['alarm'] else 'no alarm'}", ""]
    lines.append(
        f"Policy `{d['policy']['content_hash'][:19]}…` version {d['policy']['policy_version']}; "
        f"{d['inputs']['n_records']} decision records, {d['inputs']['n_outcomes']} outcomes."
    )
    lines.append("")
    for r in d["reasons"]:
        lines.append(f"- **{r}**")
    for w in d["warnings"]:
        lines.append(f"- {w}")
    lines += [
        "",
        "| question | window | traffic | coverage | review | override | error (95% CI) | PSI p_top | PSI margin "
        "| PSI option | model/schema off | alarm |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for w in d["windows"]:
        err = "—" if w["error"] is None else f"{_pct(w['error'])} [{_pct(w['error_low'])}, {_pct(w['error_high'])}]"
        off = max(w["model_mismatch_share"] or 0.0, w["schema_mismatch_share"] or 0.0)
        lines.append(
            f"| {w['question']} | {w['window']} | {w['traffic']} | {_pct(w['coverage'])} | {w['review_load']} | "
            f"{_pct(w['override_rate'])} | {err} | {_num(w['drift']['p_top']['psi'])} | "
            f"{_num(w['drift']['margin']['psi'])} | {_num(w['drift']['option']['psi'])} | {_pct(off)} | "
            f"{'🔔' if w['alarm'] else ''} |"
        )
    for q, info in d["questions"].items():
        rc = info["recertification"]
        lines.append("")
        if rc["available"]:
            lines.append(
                f"**Recertification ({q})**: on {rc['n_outcomes']} fresh outcomes at α={rc['alpha']:g}, δ={rc['delta']:g} "
                f"the certified rule would be `{json.dumps(rc['rule'])}` ({'certified' if rc['certified'] else 'NOT certified'}, "
                f"expected coverage {_pct(rc['expected_coverage'])}); the policy has `{json.dumps(rc['current_rule'])}`."
            )
        else:
            lines.append(f"**Recertification ({q})**: {rc['message']}.")
    return "\n".join(lines) + "\n"
