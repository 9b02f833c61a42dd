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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import OptionError
from workbench.monitor.logs import LoadSummary, MonitorStore, expand_paths
from workbench.monitor.sequential import Alarm, error_rate_alarm

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
    alarms: dict[str, Alarm]
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


def _counts(con: Any, question: str, col: str, n_win: int, keys: list, win_index: dict) -> np.ndarray:
    """(n_windows, len(keys)) counts of ``col`` per window from table ``d``."""
    out = np.zeros((n_win, len(keys)))
    pos = {k: j for j, k in enumerate(keys)}
    rows = con.execute(
        f"SELECT win, {col}, count(*) FROM d WHERE question = ? AND {col} IS NOT NULL GROUP BY 1, 2", [question]
    ).fetchall()
    for w, k, n in rows:
        if k in pos and w in win_index:
            out[win_index[w], pos[k]] = n
    return out


def _recertify(con: Any, policy: Any, question: str, alpha: float, delta: float, opts: MonitorOptions) -> dict:
    """The thresholds that fresh outcomes would certify today (``choose_thresholds``, as ``workbench thresholds``)."""
    from workbench.answers import RunAnswers
    from workbench.thresholds.choose import ThresholdOptions, choose_thresholds

    n = int(
        con.execute("SELECT count(*) FROM d WHERE question = ? AND label >= 0 AND has_probs", [question]).fetchone()[0]
    )
    current = policy.model.questions[question].rule.model_dump()
    if n < opts.recertify_min:
        return {
            "available": False,
            "n_outcomes": n,
            "needed": opts.recertify_min,
            "current_rule": current,
            "message": f"{n} decisions with a known outcome; {opts.recertify_min} needed to recertify",
        }
    rows = con.execute(
        "SELECT dec.probs, t.label FROM (SELECT drow, label, idx FROM d WHERE question = ? AND label >= 0 "
        "AND has_probs ORDER BY idx DESC LIMIT ?) t JOIN decisions dec ON dec.rowid = t.drow ORDER BY t.idx",
        [question, opts.recertify_max],
    ).fetchnumpy()
    probs = np.asarray(np.stack(list(rows["probs"])), dtype=float)
    labels = np.asarray(rows["label"], dtype=np.int64)
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
    """
    from workbench.metrics.reliability import wilson_interval
    from workbench.policy.runtime import Policy

    opts = opts or MonitorOptions()
    policy = Policy.load(policy_path)
    model = policy.model
    dec_files = expand_paths(decisions, "--decisions")
    out_files = expand_paths(outcomes, "--outcomes") if outcomes else []
    qids = list(model.questions)
    warnings: list[str] = []
    with MonitorStore() as store:
        con = store.con
        summary = store.load_decisions(dec_files)
        store.load_outcomes(out_files, summary, default_question=qids[0] if len(qids) == 1 else None)
        warnings += summary.warnings
        store.build_view(
            policy_hash=policy.content_hash,
            options={q: list(model.questions[q].options) for q in qids},
            models=list(model.validity.models),
            schema_hashes=list(model.validity.schema_hashes),
            window=opts.window,
            n_bins=opts.n_bins,
        )
        others = store.other_policies(policy.content_hash)
        if others:
            warnings.append(
                "left out decisions of other policies: " + ", ".join(f"{h[:19]}… ({n})" for h, n in others[:5])
            )
        n_mine = int(con.execute("SELECT count(*) FROM d").fetchone()[0])  # type: ignore[index]
        if n_mine == 0:
            raise OptionError(
                f"no decision in {', '.join(dec_files)} was made by policy {policy.content_hash[:19]}…",
                hint="give the policy file the decisions were logged with",
            )
        windows: list[dict] = []
        questions: dict[str, dict] = {}
        alarms: dict[str, Alarm] = {}
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
            agg = con.execute(
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
                [q],
            ).fetchall()
            win_index = {r[0]: i for i, r in enumerate(agg)}
            n_win = len(agg)
            ref = qp.reference or None
            bins = list(range(opts.n_bins))
            p_counts = _counts(con, q, "p_bin", n_win, bins, win_index)
            m_counts = _counts(con, q, "m_bin", n_win, bins, win_index)
            o_counts = _counts(con, q, "predicted", n_win, list(qp.options), win_index)
            # the alarm: errors of accepted decisions with a known outcome, in decision order
            seq = con.execute(
                "SELECT wrong::TINYINT AS e, idx, win FROM d WHERE question = ? AND known ORDER BY idx", [q]
            ).fetchnumpy()
            errors = np.asarray(seq["e"], dtype=float)
            alarm = error_rate_alarm(errors, float(alpha), float(delta), half_life=opts.half_life)
            alarms[q] = alarm
            idx_of_outcome = np.asarray(seq["idx"], dtype=np.int64)
            fired_idx = None if alarm.first_alarm is None else int(idx_of_outcome[alarm.first_alarm])
            # windows' position of the last outcome, for the per-window running alarm state
            k_err, n_known = np.array([r[11] for r in agg], float), np.array([r[10] for r in agg], float)
            lo, hi = wilson_interval(k_err, n_known)
            for i, r in enumerate(agg):
                win, t0, t1, i0, i1, n, n_acc, n_rev, n_ovk, n_ov, n_k, n_e, n_model, n_schema = r
                if n_k:
                    last = int(np.searchsorted(seq["idx"], i1, side="right")) - 1
                else:
                    last = -1
                windows.append(
                    {
                        "question": q,
                        "window": win if isinstance(win, int) or win is None else win.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "start": t0,
                        "end": t1,
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
                        "e_value": None if last < 0 else float(math.exp(min(alarm.log_e[last], 700.0))),
                        "lower_bound": None if last < 0 else float(alarm.lower[last]),
                        "alarm": alarm.first_alarm is not None and fired_idx is not None and fired_idx <= i1,
                    }
                )
            tot = con.execute(
                "SELECT count(*), count(*) FILTER (WHERE accepted), count(*) FILTER (WHERE known), "
                "count(*) FILTER (WHERE known AND wrong), count(*) FILTER (WHERE accepted AND override), "
                "count(*) FILTER (WHERE accepted AND override IS NOT NULL) FROM d WHERE question = ?",
                [q],
            ).fetchone()
            n, n_acc, n_k, n_e, n_ov, n_ovk = (int(v) for v in tot)  # type: ignore[union-attr]
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
                "recertification": _recertify(con, policy, q, float(alpha), float(delta), opts),
            }
            if alarm.first_alarm is not None:
                recent = alarm.recent if alarm.recent is not None else alarm.estimate
                row = con.execute(
                    "SELECT decision_id, strftime(time, '%Y-%m-%dT%H:%M:%S.%fZ') FROM d WHERE question = ? AND idx = ?",
                    [q, fired_idx],
                ).fetchone()
                at = {
                    "question": q,
                    "decision_index": fired_idx,
                    "outcome_index": alarm.first_alarm,
                    "decision_id": row[0] if row else None,
                    "time": row[1] if row else None,
                }
                first.append(at)
                reasons.append(
                    f"{q}: error rate among accepted decisions is above α={alpha:g} with confidence 1−δ={1 - delta:g} "
                    f"(e-value {math.exp(min(alarm.log_e.max(), 700.0)):.3g} ≥ 1/δ={1 / delta:g} at decision "
                    f"{fired_idx}, after {alarm.first_alarm + 1} outcomes; recent error {recent[-1]:.4f}, overall "
                    f"{alarm.estimate[-1]:.4f}, lower confidence bound {alarm.lower[-1]:.4f})"
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
