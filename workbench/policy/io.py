"""Write, validate and diff policy files; write jev-eval's ``thresholds.json`` v1.

jev-eval ``thresholds.json`` v1 (peers.md §2.2) carries one gate per question on the vendor's
``confidence`` field (Jev: ``(n·p_max − 1)/(n − 1)``; noul: ``|p − 0.5|·2``). It cannot carry:

- **margins** — converted conservatively: a choice/score gate ``p_top >= max(tau, (1 + m)/2)``
  implies ``p_top − p_second >= m``, so the jev gate accepts a subset of what the policy accepts;
- **per-class thresholds** — the strictest class threshold is used;
- **two-sided yes/no thresholds** — the stricter side sets the symmetric gate;
- **guarantees** (α, δ, method, certified bound) and **calibrators** — a gate on raw confidence
  is not the same rule as one on calibrated probabilities; such questions are written with a
  warning and listed under the additive key ``workbench.cannotCarry``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from workbench.errors import PolicyError
from workbench.policy.model import SCHEMA_FILE, document_text, json_schema, semver_tuple
from workbench.policy.model import Policy as PolicyModel
from workbench.policy.runtime import Policy, verify_document


def write_policy(model: PolicyModel, path: str | Path, *, key=None) -> PolicyModel:
    """Fill in the content hash (and sign with ``key`` when given) and write atomically; returns the model written.

    ``key`` is a key file path or a :class:`~workbench_runtime.signing.PolicyKey`; without it any
    signature the model carried is dropped (it would no longer match).
    """
    hashed = model.model_copy(update={"signature": None}).with_hash()
    doc = hashed.document()
    if key is not None:
        from workbench_runtime.signing import sign_document

        doc = sign_document(doc, key)
        hashed = PolicyModel.model_validate(doc)
    _atomic_write(Path(path), document_text(doc))
    return hashed


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a policy file is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sign_file(path: str | Path, key, *, out: str | Path | None = None) -> PolicyModel:
    """Verify the policy at ``path`` and write it signed with ``key`` (to ``out``, default in place).

    The document is signed as it is (its content hash does not change). A file that is already signed
    must verify with ``key`` first, so a changed file cannot be laundered through a re-sign.
    """
    from workbench_runtime.signing import sign_document

    path = Path(path)
    doc = read_document(path)
    verify = key if doc.get("signature") is not None else None
    Policy.from_dict(doc, source=str(path), verify_key=verify)  # everything the runtime checks
    signed = sign_document(doc, key)
    _atomic_write(Path(out or path), document_text(signed))
    return PolicyModel.model_validate(signed)


def shipped_schema() -> dict:
    """The JSON Schema file shipped in the package."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def read_document(path: str | Path) -> dict:
    """A policy file's JSON object, read strictly (duplicate keys, NaN, non-UTF-8 refused); :class:`PolicyError` otherwise."""
    from workbench_runtime.jsonio import StrictJSONError, loads_strict

    path = Path(path)
    try:
        if not path.is_file():
            raise PolicyError(
                f"{path}: policy file does not exist" if not path.exists() else f"{path}: not a regular file"
            )
        doc = loads_strict(path.read_bytes())
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy file ({type(exc).__name__})") from None
    except StrictJSONError as exc:
        raise PolicyError(f"{path}: corrupt policy file ({exc})") from None
    if not isinstance(doc, dict):
        raise PolicyError(f"{path}: corrupt policy file (expected a JSON object)")
    return doc


def validate_file(path: str | Path, *, verify_key=None) -> dict:
    """Full check of a policy file: JSON, JSON Schema, format version, signature (with ``verify_key``),
    content hash, options against the embedded schema, rebuildable rules.

    Returns a report dict; raises :class:`PolicyError` on the first problem (fail closed).
    """
    import jsonschema

    path = Path(path)
    doc = read_document(path)
    # format/version first, so a newer file says "newer" rather than "schema violation"
    model = verify_document(doc, source=str(path), verify_key=verify_key)
    validator = jsonschema.Draft202012Validator(shipped_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or "(root)"
        raise PolicyError(f"{path}: does not match the policy JSON Schema at {where}: {e.message}")
    Policy(model, source=str(path))  # calibrators and rules rebuild
    return {
        "path": str(path),
        "valid": True,
        "format_version": model.format_version,
        "policy_version": model.policy_version,
        "content_hash": model.content_hash,
        "questions": list(model.questions),
        "schema_hash": model.decision_schema.hash,
        "model": model.source.model,
        "provider": model.source.provider,
        "certified": {q: qp.objective.certified for q, qp in model.questions.items()},
        "mode": model.mode,
        "enabled_options": {q: qp.enabled_options for q, qp in model.questions.items()},
        "signature": None
        if model.signature is None
        else {"alg": model.signature.alg, "key_id": model.signature.key_id, "verified": verify_key is not None},
    }


# -- diff -------------------------------------------------------------------------------------------
def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif (
        isinstance(obj, list)
        and obj
        and all(isinstance(v, (int, float, str, bool)) or v is None for v in obj)
        and len(obj) <= 64
    ):
        out[prefix] = obj
    elif isinstance(obj, list):
        out[prefix] = f"<list of {len(obj)}>" if len(obj) > 64 else obj
    else:
        out[prefix] = obj
    return out


#: Paths that change on every export (or signing) and say nothing about behaviour.
_NOISE = ("content_hash", "created_at", "signature")


def diff_policies(a: PolicyModel, b: PolicyModel) -> dict:
    """What changed from ``a`` to ``b``: rule thresholds, calibrators, objectives, validity, provenance.

    Returns
    -------
    diff : dict
        ``questions_added``/``questions_removed``, ``changes`` (list of ``{path, a, b}``, leaf level,
        calibrator parameter arrays summarised), ``rule_changes`` per question, and ``version`` (the
        semantic versions and whether ``b`` is newer).
    """
    fa = _flatten(_summarised(a.model_dump(mode="json")))
    fb = _flatten(_summarised(b.model_dump(mode="json")))
    changes = [
        {"path": k, "a": fa.get(k), "b": fb.get(k)}
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k) and not k.startswith(_NOISE)
    ]
    qa, qb = set(a.questions), set(b.questions)
    rule_changes = {}
    for q in sorted(qa & qb):
        ra, rb = a.questions[q].rule.model_dump(), b.questions[q].rule.model_dump()
        if ra != rb:
            rule_changes[q] = {"a": ra, "b": rb}
    try:
        newer = semver_tuple(b.policy_version) > semver_tuple(a.policy_version)
    except ValueError:
        newer = None
    rollout = rollout_changes(a, b)
    return {
        "a": {"content_hash": a.content_hash, "policy_version": a.policy_version, "created_at": a.created_at},
        "b": {"content_hash": b.content_hash, "policy_version": b.policy_version, "created_at": b.created_at},
        "identical": a.content_hash == b.content_hash,
        "version": {"a": a.policy_version, "b": b.policy_version, "b_is_newer": newer},
        "questions_added": sorted(qb - qa),
        "questions_removed": sorted(qa - qb),
        "rule_changes": rule_changes,
        "rollout": rollout,
        "changes": changes,
    }


def rollout_changes(a: PolicyModel, b: PolicyModel) -> dict:
    """Gradual-rollout differences: ``mode`` and, per shared question, the options auto-accept is enabled for.

    ``{"mode": {"a", "b"} | None, "questions": {q: {"a": [...] | None, "b": ..., "enabled": [...], "disabled": [...]}}}``
    where ``None`` means every option is enabled.
    """
    out: dict = {"mode": None if a.mode == b.mode else {"a": a.mode, "b": b.mode}, "questions": {}}
    for q in sorted(set(a.questions) & set(b.questions)):
        ea, eb = a.questions[q].enabled_options, b.questions[q].enabled_options
        if ea == eb:
            continue
        sa = set(a.questions[q].options if ea is None else ea)
        sb = set(b.questions[q].options if eb is None else eb)
        out["questions"][q] = {"a": ea, "b": eb, "enabled": sorted(sb - sa), "disabled": sorted(sa - sb)}
    return out


def _summarised(doc: dict) -> dict:
    """Replace long calibrator parameter arrays by a fingerprint so a diff stays readable."""
    import hashlib

    for qp in doc.get("questions", {}).values():
        params = qp.get("calibrator", {}).get("params", {})
        for k, v in list(params.items()):
            if isinstance(v, list) and len(json.dumps(v)) > 200:
                params[k] = "sha256:" + hashlib.sha256(json.dumps(v).encode()).hexdigest()[:16]
        if qp.get("expected_test") and qp["expected_test"].get("confusion"):
            qp["expected_test"]["confusion"] = "<matrix>"
    return doc


# -- jev-eval thresholds.json v1 --------------------------------------------------------------------
def _jev_confidence(p_top: float, n_options: int) -> float:
    """Jev's ``confidence`` for a top probability: ``(n·p − 1)/(n − 1)`` (providers.md §5)."""
    return (n_options * p_top - 1.0) / (n_options - 1.0)


def jev_gate_accepts(qtype: str, probs, threshold: float):
    """Which rows jev-eval's gate accepts: ``|p_yes − 0.5|·2 >= t`` (noul) or Jev confidence
    ``(n·p_top − 1)/(n − 1) >= t`` (choice/score), on raw probabilities of shape (n_items, n_options)."""
    import numpy as np

    probs = np.asarray(probs, dtype=float)
    ok = np.isfinite(probs).all(axis=1)
    safe = np.where(ok[:, None], probs, 0.0)
    if qtype == "noul":
        conf = np.abs(safe[:, 0] - 0.5) * 2
    else:
        n = probs.shape[1]
        conf = (n * safe.max(axis=1) - 1.0) / (n - 1.0)
    return ok & (conf >= threshold)


def to_jev_thresholds(model: PolicyModel, gate_metrics=None) -> tuple[dict, list[str]]:
    """jev-eval ``thresholds.json`` (contract version 1) and the list of warnings about what was lost.

    ``gate_metrics(question, qtype, threshold) -> {"accuracy", "coverage", "n"} | None`` measures the
    written gate itself (e.g. on the run's test split); without it the policy's own expected test
    figures are written and the file says so.
    """
    questions: dict[str, dict] = {}
    cannot: dict[str, list[str]] = {}
    warnings: list[str] = []
    for qid, qp in model.questions.items():
        lost: list[str] = (
            ["guarantee metadata (alpha, delta, method, certified bound)"] if qp.objective.certified else []
        )
        r = qp.rule
        if qp.calibrator.type != "identity":
            lost.append(
                f"calibrator {qp.calibrator.type!r}: the jev gate applies to raw confidence, so it is not the same rule"
            )
            warnings.append(f"{qid}: calibrated policy — the jev-eval gate is only an approximation")
        if r.kind == "noul_two_sided":
            sides = []
            if r.tau_yes is not None:
                sides.append(2 * r.tau_yes - 1)
            if r.tau_no is not None:
                sides.append(1 - 2 * r.tau_no)
            if not sides:
                warnings.append(f"{qid}: the policy never auto-accepts; omitted (jev-eval omits unusable gates)")
                continue
            if r.tau_yes is None or r.tau_no is None or not math.isclose(2 * r.tau_yes - 1, 1 - 2 * r.tau_no):
                lost.append("two-sided thresholds (jev-eval's noul gate is symmetric; the stricter side is used)")
            threshold = max(0.0, max(sides))
        else:
            taus = [(c.tau, c.margin) for c in r.per_class.values()] or [(r.tau, r.margin)]
            usable = [(t, m or 0.0) for t, m in taus if t is not None and m is not None]
            if not usable:
                warnings.append(f"{qid}: the policy never auto-accepts; omitted (jev-eval omits unusable gates)")
                continue
            if r.per_class:
                lost.append("per-class thresholds (the strictest class is used for every class)")
            if any(m > 0 for _, m in usable):
                lost.append("margin condition (converted conservatively: p_top >= max(tau, (1 + margin) / 2))")
            if getattr(r, "abstain_options", None):
                lost.append("abstain options")
            p_gate = max(max(t, (1 + m) / 2) for t, m in usable)
            threshold = min(1.0, max(0.0, _jev_confidence(min(p_gate, 1.0), len(qp.options))))
        test = qp.expected_test
        entry: dict[str, Any] = {"type": qp.type, "threshold": round(threshold, 6)}
        measured = gate_metrics(qid, qp.type, entry["threshold"]) if gate_metrics is not None else None
        if measured is not None:
            entry.update(measured)
        elif test is not None:
            entry.update(
                {
                    "accuracy": None if test.error.value is None else 1.0 - test.error.value,
                    "coverage": test.coverage.value,
                    "n": test.n_items,
                }
            )
            lost.append("accuracy/coverage/n are the policy's own test figures, not this gate's")
        questions[qid] = entry
        if lost:
            cannot[qid] = lost
    doc = {
        "version": 1,
        "model": model.source.model,
        "generatedAt": model.created_at,
        "guard": {"method": "holdout", "fraction": None, "seed": model.dataset.split_seed},
        "tolerance": 0,
        "questions": questions,
        "definitions": {q: model.decision_schema.questions[q] for q in questions},
        # additive key (jev-eval consumers ignore unknown keys): provenance and what was lost
        "workbench": {
            "policy": model.content_hash,
            "policyVersion": model.policy_version,
            "note": "written from a workbench policy; margins, guarantees and calibrators "
            "cannot be expressed in thresholds.json v1. Thresholds are on Jev's confidence "
            "scale (n*p_top - 1)/(n - 1) (noul: |p - 0.5|*2); other vendors define their "
            "confidence field differently",
            "gateFigures": "measured on the test split"
            if gate_metrics is not None
            else "the policy's expected test figures",
            "cannotCarry": cannot,
        },
    }
    return doc, warnings


def write_jev_thresholds(model: PolicyModel, path: str | Path, gate_metrics=None) -> list[str]:
    doc, warnings = to_jev_thresholds(model, gate_metrics)
    _atomic_write(Path(path), json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return warnings


__all__ = [
    "write_policy",
    "validate_file",
    "diff_policies",
    "to_jev_thresholds",
    "write_jev_thresholds",
    "jev_gate_accepts",
    "shipped_schema",
    "json_schema",
]
