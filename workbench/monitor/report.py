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
from workbench.monitor.outcomes import MAX_INVALID_OUTCOME_SHARE, read_outcomes
from workbench.monitor.sequential import AlarmStream, AlarmSummary
from workbench.wording import plural


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
    #: Largest share of invalid outcome lines that is skipped and reported; above it the monitor exits 2.
    max_invalid_outcomes: float = MAX_INVALID_OUTCOME_SHARE


def view_settings(policy: Any, model: Any, options: Any, opts: MonitorOptions) -> dict:
    """The decision view's settings every monitor source builds it with (the policy's validity, the window)."""
    return {
        "policy_hash": policy.content_hash,
        "options": options,
        "models": list(model.validity.models),
        "schema_hashes": list(model.validity.schema_hashes),
        "window": opts.window,
        "n_bins": opts.n_bins,
    }


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


def _error_fields(n_known: int, n_errors: int, low: float, high: float) -> dict:
    """A window's known outcomes, its errors among them and their rate with its interval (None: none known)."""
    return {
        "n_known": int(n_known),
        "n_errors": int(n_errors),
        "error": _share(n_errors, n_known),
        "error_low": None if not n_known else float(low),
        "error_high": None if not n_known else float(high),
    }


def _evidence_fields(at: tuple | None) -> dict:
    """The e-value and the lower bound of the error rate of the sequential test at a window's end."""
    return {
        "e_value": None if at is None else float(math.exp(min(at[0], 700.0))),
        "lower_bound": None if at is None else at[1],
    }


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
        accepted with a known outcome, errors among them, model mismatches, schema mismatches, held back
        (would-accept), held back with a known outcome, errors of the would-accepted option among them)."""
        ...

    def histograms(self, question: str, options: list[str], n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n_windows, n_bins) counts of p_top bins and margin bins and (n_windows, k) of predicted
        options, rows in the order of :meth:`windows`."""
        ...

    def outcome_batches(self, question: str, shadow: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(wrong 0/1, idx) of the accepted decisions with a known outcome, in idx order, in chunks; with
        ``shadow`` of the held-back decisions with a known outcome (wrong: the outcome is not ``would_accept``)."""
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
                   count(*) FILTER (WHERE schema_mismatch),
                   count(*) FILTER (WHERE held),
                   count(*) FILTER (WHERE held_known),
                   count(*) FILTER (WHERE held_known AND held_wrong)
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

    def outcome_batches(self, question: str, shadow: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        wrong, known = ("held_wrong", "held_known") if shadow else ("wrong", "known")
        reader = self.con.execute(
            f"SELECT coalesce({wrong}, false)::TINYINT AS e, idx FROM d WHERE question = ? AND {known} ORDER BY idx",
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
    from workbench.thresholds.choose import choose_thresholds
    from workbench.thresholds.options import ThresholdOptions

    n = source.recertification_count(question)
    current = policy.model.questions[question].rule.model_dump()
    if n < opts.recertify_min:
        return {
            "available": False,
            "n_outcomes": n,
            "needed": opts.recertify_min,
            "current_rule": current,
            "message": f"{plural(n, 'decision')} with a known outcome; {opts.recertify_min:,} needed to recertify",
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
    dec_files = expand_paths(decisions, "`decisions`")
    out_files = expand_paths(outcomes, "`outcomes`") if outcomes else []
    qids = list(model.questions)
    options = {q: list(model.questions[q].options) for q in qids}
    # outcomes first: a file of invalid outcomes fails (exit 2) before the logs are read
    raw, check = read_outcomes(
        out_files,
        options,
        default_question=qids[0] if len(qids) == 1 else None,
        max_invalid_share=opts.max_invalid_outcomes,
    )
    with MonitorStore() as store:
        summary = store.load_decisions(dec_files)
        store.load_outcomes(raw, check, summary)
        store.build_view(**view_settings(policy, model, options, opts))
        others = store.other_policies(policy.content_hash)
        return report_from_source(policy, policy_path, opts, summary, StoreSource(store.con), others, dec_files)


def _run_alarm(
    source: MonitorSource, q: str, alpha: float, delta: float, n_known: np.ndarray, opts: MonitorOptions, shadow: bool
) -> tuple[AlarmSummary, int | None, np.ndarray]:
    """The alarm over one stream (accepted decisions, or with ``shadow`` the held-back ones) of question ``q``:
    (summary, decision index at which it fired or None, per-window index of the window's last outcome)."""
    # windows are contiguous runs of decisions, so a window's last outcome is the running count of outcomes
    last_outcome = np.cumsum(n_known).astype(np.int64) - 1
    stream = AlarmStream(alpha, delta, int(n_known.sum()), keep=last_outcome[n_known > 0], half_life=opts.half_life)
    fired_idx: int | None = None
    for e, idx in source.outcome_batches(q, shadow=shadow):
        t0 = stream.t
        stream.add(e)
        if fired_idx is None and stream.first_alarm is not None:
            fired_idx = int(idx[stream.first_alarm - t0])
    return stream.finish(), fired_idx, last_outcome


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
    (policy hash, decisions) of other policies in the logs (left out, named in a warning).

    Decisions the rollout held back (``mode: shadow``, or an option outside ``enabled_options``: logged with
    the fallback action and ``would_accept``) are the shadow evidence: per window and overall a ``shadow``
    block gives their would-accept coverage and the error of the would-accepted option among those with a
    known outcome, and a second alarm (``shadow_sequence``) runs on them; its reasons and
    ``first_alarm_at`` say ``shadow``."""
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
                hint="pass `alpha`",
            )
        agg = per_q[q]
        ref = qp.reference or None
        bins = list(range(opts.n_bins))
        p_counts, m_counts, o_counts = source.histograms(q, list(qp.options), opts.n_bins)
        # the alarm: errors of accepted decisions with a known outcome, in decision order, streamed in chunks;
        # the shadow alarm: the same over held-back decisions, judged on the option the rule would have accepted
        k_err, n_known = np.array([r[11] for r in agg], float), np.array([r[10] for r in agg], float)
        sk_err, sn_known = np.array([r[16] for r in agg], float), np.array([r[15] for r in agg], float)
        alarm, fired_idx, last_outcome = _run_alarm(source, q, float(alpha), float(delta), n_known, opts, False)
        s_alarm, s_fired_idx, s_last = _run_alarm(source, q, float(alpha), float(delta), sn_known, opts, True)
        alarms[q] = alarm
        lo, hi = wilson_interval(k_err, n_known)
        slo, shi = wilson_interval(sk_err, sn_known)
        for i, r in enumerate(agg):
            win, t0s, t1s, i0, i1, n, n_acc, n_rev, n_ovk, n_ov, n_k, n_e, n_model, n_schema, n_held, n_hk, n_he = r
            at = alarm.at(int(last_outcome[i])) if n_k else None
            s_at = s_alarm.at(int(s_last[i])) if n_hk else None
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
                    **_error_fields(n_k, n_e, lo[i], hi[i]),
                    "model_mismatch_share": _share(n_model, n),
                    "schema_mismatch_share": _share(n_schema, n),
                    "drift": {
                        "p_top": _drift(ref.get("p_top") if ref else None, p_counts[i], bins),
                        "margin": _drift(ref.get("margin") if ref else None, m_counts[i], bins),
                        "option": _drift(ref.get("option") if ref else None, o_counts[i], list(qp.options)),
                    },
                    **_evidence_fields(at),
                    "alarm": alarm.first_alarm is not None and fired_idx is not None and fired_idx <= i1,
                    "shadow": {
                        "n_would_accept": int(n_held),
                        "would_accept_coverage": _share(n_held, n),
                        **_error_fields(n_hk, n_he, slo[i], shi[i]),
                        **_evidence_fields(s_at),
                        "alarm": s_fired_idx is not None and s_fired_idx <= i1,
                    },
                }
            )
        n, n_acc, n_k, n_e, n_ov, n_ovk = (int(sum(r[j] for r in agg)) for j in (5, 6, 10, 11, 9, 8))
        n_held, n_hk, n_he = (int(sum(r[j] for r in agg)) for j in (14, 15, 16))
        elo, ehi = wilson_interval(np.array([n_e]), np.array([n_k]))
        selo, sehi = wilson_interval(np.array([n_he]), np.array([n_hk]))
        if ref is None:
            warnings.append(f"{q}: the policy carries no calibration-time reference; drift is not measured")
        if n_held:
            why = "mode: shadow" if model.mode == "shadow" else "options outside enabled_options"
            warnings.append(
                f"{q}: {n_held} decision(s) the rule would have accepted were held back ({why}); their "
                f"would-accept coverage, error ({n_hk} with a known outcome) and alarm are reported as shadow"
            )
        questions[q] = {
            "alpha": float(alpha),
            "delta": float(delta),
            "overall": {
                "traffic": n,
                "n_accepted": n_acc,
                "coverage": _share(n_acc, n),
                "review_load": n - n_acc,
                **_error_fields(n_k, n_e, elo[0], ehi[0]),
                "override_rate": _share(n_ov, n_ovk),
            },
            "shadow": {
                "n_would_accept": n_held,
                "would_accept_coverage": _share(n_held, n),
                **_error_fields(n_hk, n_he, selo[0], sehi[0]),
            },
            "sequence": alarm.to_dict(),
            "shadow_sequence": s_alarm.to_dict(),
            "has_reference": ref is not None,
            "recertification": _recertify(source, policy, q, float(alpha), float(delta), opts),
        }
        for a, idx, label in ((alarm, fired_idx, ""), (s_alarm, s_fired_idx, "shadow: ")):
            if a.first_alarm is None or idx is None:
                continue
            _, lower_end, estimate_end, recent_end = a.at(a.n - 1)
            decision_id, when = source.decision_at(q, idx)
            first.append(
                {
                    "question": q,
                    "kind": "shadow_error" if label else "error",
                    "decision_index": idx,
                    "outcome_index": a.first_alarm,
                    "decision_id": decision_id,
                    "time": when,
                }
            )
            subject = (
                "held-back decisions (judged on the option the rule would have accepted)"
                if label
                else ("accepted decisions")
            )
            reasons.append(
                f"{label}{q}: error rate among {subject} is above α={alpha:g} with confidence 1−δ={1 - delta:g} "
                f"(e-value {math.exp(min(a.max_log_e, 700.0)):.3g} ≥ 1/δ={1 / delta:g} at decision "
                f"{idx}, after {plural(a.first_alarm + 1, 'outcome')}; recent error {recent_end:.4f}, overall "
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
                    # a window's PSI is known once its last decision is in: the alarm is raised there
                    decision_id, when = source.decision_at(q, w["last_decision"])
                    first.append(
                        {
                            "question": q,
                            "kind": "drift",
                            "window": w["window"],
                            "decision_index": w["last_decision"],
                            "outcome_index": None,
                            "decision_id": decision_id,
                            "time": when,
                        }
                    )
                    break
    first.sort(key=lambda a: (a["time"] is None, str(a["time"]), a["decision_index"]))
    policy_info = {
        "path": str(policy_path),
        "content_hash": policy.content_hash,
        "policy_version": policy.version,
        "mode": model.mode,
        "models": list(model.validity.models),
        "schema_hashes": list(model.validity.schema_hashes),
    }
    return MonitorReport(
        policy_info, opts, summary, windows, questions, alarms, reasons, first[0] if first else None, warnings
    )


def inputs_line(report: MonitorReport) -> str:
    """One line of what was read and what was left out (the printed summary and the Markdown say it)."""
    d = report.inputs.to_dict()
    parts = [
        f"{plural(d['n_records'], 'decision record')} from {plural(d['n_lines'], 'line')}",
        f"{sum(d['skipped_lines'].values())} unreadable lines skipped",
        f"{d['incomplete_records']} incomplete records skipped",
        f"{d['duplicate_records']} duplicate records counted once",
    ]
    if d["outcome_files"]:
        ignored = sum(v for k, v in d.get("outcome_lines_ignored", {}).items() if k != "blank")
        parts += [
            f"{plural(d['n_outcomes'], 'outcome')} from {plural(d.get('outcome_lines', 0), 'outcome line')}",
            f"{d.get('outcome_lines_invalid', 0)} invalid outcome lines rejected",
            f"{ignored} ignored",
            f"{d.get('outcome_lines_superseded', 0)} superseded",
            f"{d['n_outcomes_unmatched']} unmatched",
        ]
    return "inputs: " + ", ".join(parts)


def _pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _error_text(figures: dict) -> str:
    """``error [low, high]`` of :func:`_error_fields` as percentages (— when no outcome is known)."""
    if figures["error"] is None:
        return "—"
    return f"{_pct(figures['error'])} [{_pct(figures['error_low'])}, {_pct(figures['error_high'])}]"


def markdown(report: MonitorReport) -> str:
    """A Markdown summary: the verdict, per-window figures and the recertification hint."""
    d = report.to_dict()
    lines = [f"### Policy monitor: {'ALARM' if d['alarm'] else 'no alarm'}", ""]
    lines.append(
        f"Policy `{d['policy']['content_hash'][:19]}…` version {d['policy']['policy_version']}; "
        f"{plural(d['inputs']['n_records'], 'decision record')}, {plural(d['inputs']['n_outcomes'], 'outcome')}."
    )
    lines.append(inputs_line(report))
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
        err = _error_text(w)
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
        sh = info["shadow"]
        if sh["n_would_accept"]:
            err = _error_text(sh)
            lines.append(
                f"**Shadow ({q})**: {sh['n_would_accept']} decisions held back by the rollout; would-accept coverage "
                f"{_pct(sh['would_accept_coverage'])}, error {err} on {sh['n_known']} known outcomes"
                + (" 🔔" if info["shadow_sequence"]["fired"] else "")
                + "."
            )
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
