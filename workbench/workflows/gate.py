"""CI gates: judge a stored run against a YAML requirements file.

A requirements file names, per question, a metric and a bound::

    split: test
    requirements:
      - {question: intent, metric: accuracy, min: 0.85}
      - {question: intent, metric: ece_uniform, max: 0.05}
      - {question: intent, metric: coverage_at_policy, min: 0.60, policy: policy.json}
      - {question: intent, metric: error_at_policy, max: 0.05, policy: policy.json}

Metric names are those of ``workbench report --json`` (the per-question ``metrics``), plus
``coverage_at_policy`` (share of labelled items the policy auto-accepts) and ``error_at_policy``
(error rate among them), measured by applying the policy file to the run's answers through the
runtime's own decision code (the path ``workbench policy apply`` takes).

A bound is judged on the pessimistic end of the bootstrap interval by default (``low`` for a
``min``, ``high`` for a ``max``); ``on: value|low|high`` overrides it. With a baseline run the
same metric is compared item-paired (the same bootstrap resamples applied to both runs on their
common items): a requirement also fails when the *drop* (lower for a ``min`` metric, higher for a
``max`` metric) exceeds ``max_drop`` significantly, i.e. the interval of the drop lies entirely
above ``max_drop``.

Problems with the gate itself (no such run, question or metric, a malformed file) raise
:class:`~workbench.errors.RequirementsError`; the CLI maps them to exit code 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workbench.errors import NotFoundError, PolicyError, RequirementsError
from workbench.metrics import registry
from workbench.wording import run_ref

#: Metrics computed by applying a policy file to the run (everything else comes from the report).
POLICY_METRICS = ("coverage_at_policy", "error_at_policy")
#: The report's metrics per question type (``workbench report --json``, majority labels), from the table of
#: metrics (:mod:`workbench.metrics.registry`: it also says which need more options, e.g. ``top_3_accuracy``
#: at least 4, and which have no paired comparison); tests/gate/test_requirements_file.py checks it against
#: :func:`workbench.metrics.report.question_report`.
REPORT_METRICS: dict[str, tuple[str, ...]] = {t: registry.report_metrics(t) for t in registry.QTYPES}
#: Every metric name a requirement may use.
KNOWN_METRICS = tuple(dict.fromkeys([m for ms in REPORT_METRICS.values() for m in ms] + list(POLICY_METRICS)))
#: Largest requirements file read at all (bytes), and most requirements in one file.
MAX_REQUIREMENTS_BYTES = 1024 * 1024
MAX_REQUIREMENTS = 1000
_HINT = "see docs/ci.md for the format"


def _closest(name: str, known: Sequence[str]) -> str:
    import difflib

    near = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


class Requirement(BaseModel):
    """One bound on one metric of one question (strict types: a bound is a finite number, not text)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, allow_inf_nan=False)

    question: str = Field(min_length=1, max_length=200)
    metric: str = Field(min_length=1, max_length=200)
    min: float | None = None
    max: float | None = None
    on: Literal["value", "low", "high"] | None = None
    policy: str | None = Field(None, min_length=1, max_length=4096)
    name: str | None = Field(None, max_length=500)

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in KNOWN_METRICS:
            raise ValueError(f"unknown metric {v[:60]!r}{_closest(v, KNOWN_METRICS)}")
        return v

    @model_validator(mode="after")
    def _one_bound(self) -> Requirement:
        if (self.min is None) == (self.max is None):
            raise ValueError("give exactly one of min or max")
        if self.metric in POLICY_METRICS and not self.policy:
            raise ValueError(f"metric {self.metric} needs 'policy: FILE'")
        if self.policy and self.metric not in POLICY_METRICS:
            raise ValueError(f"'policy' applies to {' and '.join(POLICY_METRICS)} only, not {self.metric}")
        return self

    @property
    def kind(self) -> Literal["min", "max"]:
        return "min" if self.min is not None else "max"

    @property
    def bound(self) -> float:
        return float(self.min if self.min is not None else self.max)  # type: ignore[arg-type]

    @property
    def judged_on(self) -> str:
        """Which end of the interval is compared with the bound (pessimistic by default)."""
        return self.on or ("low" if self.kind == "min" else "high")

    def label(self) -> str:
        op = ">=" if self.kind == "min" else "<="
        return self.name or f"{self.question}: {self.metric} {op} {self.bound:g} (on {self.judged_on})"


class RequirementsFile(BaseModel):
    """A requirements document: split, bootstrap settings and the list of requirements."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    split: str = Field("test", min_length=1, max_length=200)
    level: float = Field(0.95, gt=0.0, lt=1.0)
    n_boot: int = Field(1000, ge=50, le=100_000)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    requirements: list[Requirement] = Field(min_length=1, max_length=MAX_REQUIREMENTS)


def _where(loc: Sequence[Any]) -> str:
    """A pydantic error location as ``requirements[2].min`` (odd keys quoted, so the line stays one line)."""
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            text = str(p)
            text = text if text.isidentifier() else repr(text)[:80]
            out += f".{text}" if out else text
    return out or "(document)"


def loads_requirements(text: str, *, source: str = "<requirements>") -> RequirementsFile:
    """Parse and validate requirements text (YAML; JSON is YAML too). Every failure is one
    :class:`RequirementsError` line: syntax, duplicate keys (``on:``/``true:`` count as the same key
    only where YAML reads both as booleans: here ``on`` stays the text ``on``), nesting, alias bombs,
    and any field that is not of its type, not finite, or not a known metric."""
    from workbench.schema.questions import check_json_shape, parse_yaml_text

    doc = parse_yaml_text(text, source=source, error=RequirementsError, bool_keys=False)
    check_json_shape(doc, source=source, limit=max(100_000, 2 * len(text)), error=RequirementsError, scalars=False)
    if not isinstance(doc, dict):
        raise RequirementsError(f"{source}: expected a mapping with 'requirements:'", hint=_HINT)
    try:
        return RequirementsFile.model_validate(doc)
    except ValidationError as exc:
        e = exc.errors()[0]
        msg = " ".join(str(e["msg"]).removeprefix("Value error, ").split())
        hint = f"known metrics: {', '.join(KNOWN_METRICS)}" if msg.startswith("unknown metric") else _HINT
        raise RequirementsError(f"{source}: {_where(e['loc'])}: {msg}"[:600], hint=hint) from None


def load_requirements(path: str | Path) -> RequirementsFile:
    """Read and validate a YAML (or JSON) requirements file; one-line :class:`RequirementsError` on problems.

    Read through the schema files' hardened reader: a regular file of at most
    :data:`MAX_REQUIREMENTS_BYTES` (``/dev/zero``, a FIFO or a directory is refused without reading),
    UTF-8, no duplicate keys, at most 64 levels of nesting; then :func:`loads_requirements`.
    """
    from workbench.schema.questions import read_text_file

    path = Path(path)
    text = read_text_file(
        path,
        what="requirements file",
        max_bytes=MAX_REQUIREMENTS_BYTES,
        error=RequirementsError,
        kind_hint="give the path of a YAML requirements file",
        size_hint="a requirements file is a few kilobytes; check the path",
    )
    return loads_requirements(text, source=str(path))


# -- results ----------------------------------------------------------------------------------------
@dataclass
class Drop:
    """Paired comparison with the baseline: ``drop`` > 0 means worse than the baseline."""

    baseline_run: str
    baseline: float
    drop: float
    low: float
    high: float
    max_drop: float
    significant: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RequirementResult:
    """The verdict of one requirement with the measured value and its bootstrap interval."""

    requirement: Requirement
    value: float
    low: float
    high: float
    n: int
    passed: bool
    message: str
    drop: Drop | None = None

    @property
    def judged_value(self) -> float:
        return {"value": self.value, "low": self.low, "high": self.high}[self.requirement.judged_on]

    def to_dict(self) -> dict:
        r = self.requirement
        return {
            "name": r.label(),
            "question": r.question,
            "metric": r.metric,
            "kind": r.kind,
            "bound": r.bound,
            "on": r.judged_on,
            "policy": r.policy,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "judged_value": self.judged_value,
            "n": self.n,
            "passed": self.passed,
            "message": self.message,
            "baseline": self.drop.to_dict() if self.drop else None,
        }


@dataclass
class GateResult:
    run_id: str
    split: str
    level: float
    n_boot: int
    results: list[RequirementResult] = field(default_factory=list)
    baseline_run: str | None = None
    #: sentences printed with the verdict (a certified policy contradicted by the split; see _Measure)
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def n_failed(self) -> int:
        return sum(not r.passed for r in self.results)

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "split": self.split,
            "level": self.level,
            "n_boot": self.n_boot,
            "baseline_run": self.baseline_run,
            "passed": self.passed,
            "n_requirements": len(self.results),
            "n_failed": self.n_failed,
            "requirements": [r.to_dict() for r in self.results],
            "warnings": self.warnings,
        }


# -- measuring ---------------------------------------------------------------------------------------
@dataclass
class _Measure:
    """A question's metrics on one run: item ids (n,), kept mask (n,), replicate function and estimates."""

    item_ids: np.ndarray
    kept: np.ndarray
    stats: Callable[[np.ndarray | None], Mapping[str, float]]
    intervals: dict[str, Any]
    #: with a certified policy whose error interval on the split lies entirely above its α: the sentence
    #: `workbench thresholds` prints in that case (thresholds.evaluate.certificate_contradicted_sentence)
    warning: str | None = None


def _policy_measure(con: Any, run_id: str, question: str, split: str, policy_path: Path, opts: RequirementsFile):
    """Apply a policy file to the run's labelled answers of ``question`` with the runtime's decision code.

    Loads the whole split (:meth:`~workbench.store.sources.StoreSource.load`): the gate's intervals are paired,
    each bootstrap replicate reweighting the same items in every measure, so the items stay in memory."""
    from workbench.metrics.bootstrap import bootstrap_many
    from workbench.policy.runtime import Policy
    from workbench.store.sources import StoreSource

    policy = Policy.load(policy_path)
    cq = policy.questions.get(question)
    if cq is None:
        raise RequirementsError(
            f"policy {policy_path} has no question {question!r}", hint=f"questions: {', '.join(policy.questions)}"
        )
    ans = StoreSource(con, run_id).load(question, [split])
    if list(ans.option_ids) != list(cq.options):
        raise RequirementsError(
            f"policy {policy_path}: options of {question!r} differ from {run_ref(run_id)}'s",
            hint="apply a policy exported for this question's schema",
        )
    labelled = ans.labels >= 0
    probs, labels = ans.probs[labelled], ans.labels[labelled]
    option = cq.accepted_options(probs)  # the runtime's path: calibrator, then the rule, failures -> fallback
    accepted = option >= 0
    wrong = accepted & (option != labels)
    acc_f, wrong_f = accepted.astype(float), wrong.astype(float)
    n = int(labelled.sum())

    def stats(w: np.ndarray | None) -> dict[str, float]:
        total = float(n) if w is None else float(w.sum())
        n_acc = float(acc_f.sum()) if w is None else float(w @ acc_f)
        n_err = float(wrong_f.sum()) if w is None else float(w @ wrong_f)
        return {
            "coverage_at_policy": n_acc / total if total > 0 else math.nan,
            "error_at_policy": n_err / n_acc if n_acc > 0 else math.nan,
        }

    intervals = bootstrap_many(stats, n, n_boot=opts.n_boot, seed=opts.seed, level=opts.level)
    warning = None
    obj = cq.qp.objective
    if obj.certified and obj.costs is None and obj.alpha is not None and obj.delta is not None:
        from workbench.thresholds.evaluate import certificate_contradicted_sentence, error_above_alpha, rate_interval

        n_acc, n_err = int(accepted.sum()), int(wrong.sum())
        report = {
            "error": rate_interval(n_err, n_acc, "clopper-pearson", opts.level),
            "n_errors": n_err,
            "n_accepted": n_acc,
        }
        if error_above_alpha(report, obj.alpha):
            where = f"{question} ({policy_path.name}), whole {split} split"
            warning = certificate_contradicted_sentence(where, report, obj.alpha, obj.delta, opts.level)
    return _Measure(ans.item_ids[labelled].astype(str), np.ones(n, bool), stats, intervals, warning)


def _report_measure(con: Any, run_id: str, question: str, split: str, opts: RequirementsFile, smooth: bool):
    """The report's metrics with their paired replicate (``QuestionReport.replicate``): the whole split in memory,
    as :func:`_policy_measure` (the gate's intervals reweight the same items in every measure)."""
    from workbench.metrics.report import question_report
    from workbench.store.sources import StoreSource

    ans = StoreSource(con, run_id).load(question, [split])
    rep = question_report(ans, n_boot=opts.n_boot, seed=opts.seed, level=opts.level, smooth=smooth)
    kept, stats = rep.replicate if rep.replicate is not None else (np.zeros(len(ans.labels), bool), lambda w: {})
    return _Measure(ans.item_ids.astype(str), kept, stats, dict(rep.metrics))


def _paired_drop(a: _Measure, b: _Measure, metric: str, kind: str, opts: RequirementsFile) -> tuple[float, ...]:
    """Paired bootstrap of ``b − a`` on the items both kept; returns (a, b, diff, low, high)."""
    from workbench.metrics.bootstrap import paired_bootstrap

    ids_a, ids_b = a.item_ids[a.kept], b.item_ids[b.kept]
    common, pos_a, pos_b = np.intersect1d(ids_a, ids_b, assume_unique=True, return_indices=True)
    if common.size == 0:
        raise RequirementsError(f"{metric}: the run and the baseline share no evaluated items")

    def lift(stats: Callable, size: int, pos: np.ndarray) -> Callable:
        def f(w: np.ndarray | None) -> Mapping[str, float]:
            full = np.zeros(size)
            full[pos] = 1.0 if w is None else w
            return {metric: stats(full)[metric]}

        return f

    d = paired_bootstrap(
        lift(a.stats, ids_a.size, pos_a),
        lift(b.stats, ids_b.size, pos_b),
        int(common.size),
        n_boot=opts.n_boot,
        seed=opts.seed,
        level=opts.level,
    )[metric]
    return d.a, d.b, d.difference, d.low, d.high


def _policy_path(req: Requirement, base_dir: str | Path) -> Path:
    p = Path(req.policy or "")
    return p if p.is_absolute() else Path(base_dir) / p


def check_requirements(
    con: Any, reqs: RequirementsFile, runs: Sequence[str], *, base_dir: str | Path = ".", baseline: bool = False
) -> None:
    """Everything about ``reqs`` that can be known before measuring: each question is one of every run's,
    each metric exists for its question's type and option count, each policy file loads and fits the
    question (its options those of the run), and with a baseline no metric lacks a paired comparison.
    Cheap (schemas and policy files only); :func:`evaluate_gate` calls it before computing anything."""
    from workbench.policy.runtime import Policy
    from workbench.schema.questions import option_ids
    from workbench.store.runs import get_run, load_stored_schema

    schemas = {rid: load_stored_schema(con, get_run(con, rid)["schema_hash"]) for rid in runs}
    policies: dict[Path, Any] = {}
    for i, req in enumerate(reqs.requirements):
        where = f"requirements[{i}] ({req.label()})"
        for rid, schema in schemas.items():
            if req.question not in schema.questions:
                raise RequirementsError(
                    f"{where}: {run_ref(rid)} has no question {req.question!r}",
                    hint=f"questions: {', '.join(schema.question_ids)}",
                )
            q = schema.questions[req.question]
            opts = option_ids(q)
            if req.metric in POLICY_METRICS:
                path = _policy_path(req, base_dir)
                if path not in policies:
                    try:
                        policies[path] = Policy.load(path)
                    except PolicyError as exc:
                        raise RequirementsError(f"{where}: {exc.message}", hint=exc.hint) from None
                cq = policies[path].questions.get(req.question)
                if cq is None:
                    raise RequirementsError(
                        f"{where}: policy {path} has no question {req.question!r}",
                        hint=f"questions: {', '.join(policies[path].questions)}",
                    )
                if list(cq.options) != opts:
                    raise RequirementsError(
                        f"{where}: policy {path}: options of {req.question!r} differ from {run_ref(rid)}'s",
                        hint="apply a policy exported for this question's schema",
                    )
                continue
            known = list(registry.report_metrics(q.type, len(opts)))
            if req.metric not in known:
                raise RequirementsError(
                    f"{where}: metric {req.metric!r} does not apply to {q.type} question {req.question!r} "
                    f"({len(opts)} options) of {run_ref(rid)}",
                    hint=f"known: {', '.join([*known, *POLICY_METRICS])}",
                )
        if baseline and req.metric not in POLICY_METRICS and not registry.pairable(req.metric):
            raise RequirementsError(
                f"{where}: {req.metric} has no paired comparison",
                hint="use ece_uniform or debiased_ece with a `baseline`",
            )


def evaluate_gate(
    con: Any,
    run_id: str,
    reqs: RequirementsFile,
    *,
    base_dir: str | Path = ".",
    baseline: str | None = None,
    max_drop: float | None = None,
) -> GateResult:
    """Measure every requirement on ``run_id`` (and, with ``baseline``, the paired drop) and judge it.

    Parameters
    ----------
    con : duckdb connection to the store
    run_id : run id or name
    reqs : the validated requirements
    base_dir : directory that relative ``policy:`` paths are resolved against (the requirements file's)
    baseline : run id or name of the baseline run, optional
    max_drop : largest tolerated drop against the baseline (same units as the metric); with ``baseline``

    Raises
    ------
    RequirementsError : no such run, question, metric or policy (the gate cannot be evaluated)
    """
    from workbench.store.runs import get_run, run_questions

    def resolve(rid: str, what: str) -> str:
        try:
            return str(get_run(con, rid)["run_id"])
        except NotFoundError as exc:
            raise RequirementsError(
                f"{what} {rid!r} does not exist", hint=exc.hint or "see `workbench runs list`"
            ) from None

    run = resolve(run_id, "run")
    base = resolve(baseline, "baseline run") if baseline else None
    if max_drop is not None and not (math.isfinite(max_drop) and max_drop >= 0):
        raise RequirementsError(f"`max_drop` {max_drop} is not a non-negative number", hint="e.g. `max_drop` 0.01")
    if base and max_drop is None:
        max_drop = 0.0
    questions = set(run_questions(con, run))
    check_requirements(con, reqs, [run, *([base] if base else [])], base_dir=base_dir, baseline=base is not None)
    cache: dict[tuple, _Measure] = {}

    def measure(rid: str, req: Requirement) -> _Measure:
        if req.question not in questions:
            raise RequirementsError(
                f"requirement {req.label()!r}: run {run} has no question {req.question!r}",
                hint=f"questions: {', '.join(sorted(questions))}",
            )
        if req.metric in POLICY_METRICS:
            p = _policy_path(req, base_dir)
            key: tuple = (rid, req.question, "policy", str(p))
            if key not in cache:
                try:
                    cache[key] = _policy_measure(con, rid, req.question, reqs.split, p, reqs)
                except PolicyError as exc:
                    raise RequirementsError(f"requirement {req.label()!r}: {exc.message}", hint=exc.hint) from None
        else:
            smooth = registry.needs_smooth(req.metric)
            key = (rid, req.question, "report", smooth)
            if key not in cache:
                cache[key] = _report_measure(con, rid, req.question, reqs.split, reqs, smooth)
        m = cache[key]
        if req.metric not in m.intervals:
            known = sorted({*m.intervals, *POLICY_METRICS}) if m.intervals else []
            raise RequirementsError(
                f"unknown metric {req.metric!r} for question {req.question!r} of {run_ref(rid)}"
                + ("" if known else f" (no answered, labelled items on split {reqs.split!r})"),
                hint=f"known: {', '.join(known)}" if known else "check the split",
            )
        return m

    out = GateResult(run, reqs.split, reqs.level, reqs.n_boot, baseline_run=base)
    for req in reqs.requirements:
        m = measure(run, req)
        if m.warning and m.warning not in out.warnings:
            out.warnings.append(m.warning)
        iv = m.intervals[req.metric]
        value, low, high = float(iv.estimate), float(iv.low), float(iv.high)
        judged = {"value": value, "low": low, "high": high}[req.judged_on]
        n = int(m.kept.sum())
        ok = math.isfinite(judged) and (judged >= req.bound if req.kind == "min" else judged <= req.bound)
        op = ">=" if req.kind == "min" else "<="
        ci = f"{int(round(reqs.level * 100))}% interval [{low:.4f}, {high:.4f}]"
        if not math.isfinite(judged):
            msg = f"{req.metric} could not be measured on its {req.judged_on} end (n={n}); needs {op} {req.bound:g}"
        else:
            msg = (
                f"{req.metric} = {value:.4f}, {ci}, n={n}; judged on {req.judged_on} = {judged:.4f}, "
                f"needs {op} {req.bound:g}"
            )
        drop = None
        if base is not None:
            if req.metric not in POLICY_METRICS and not registry.pairable(req.metric):
                raise RequirementsError(
                    f"requirement {req.label()!r}: {req.metric} has no paired comparison",
                    hint="use ece_uniform or debiased_ece with a `baseline`",
                )
            mb = measure(base, req)
            va, vb, diff, dlo, dhi = _paired_drop(mb, m, req.metric, req.kind, reqs)
            # drop > 0 is worse: lower for a min-metric, higher for a max-metric
            sign = -1.0 if req.kind == "min" else 1.0
            d, dl, dh = sign * diff, min(sign * dlo, sign * dhi), max(sign * dlo, sign * dhi)
            significant = bool(math.isfinite(dl) and dl > float(max_drop or 0.0))
            drop = Drop(base, float(va), float(d), float(dl), float(dh), float(max_drop or 0.0), significant)
            msg += f"; drop vs {base} = {d:+.4f} [{dl:+.4f}, {dh:+.4f}]" + (
                f" exceeds max drop {max_drop:g}" if significant else ""
            )
            ok = ok and not significant
        out.results.append(RequirementResult(req, value, low, high, n, bool(ok), msg, drop))
    return out


# -- outputs -----------------------------------------------------------------------------------------
def junit_xml(result: GateResult) -> str:
    """JUnit XML: one ``testcase`` per requirement, a ``failure`` naming the measured value and interval."""
    import xml.etree.ElementTree as ET

    suites = ET.Element("testsuites", name="workbench gate", tests=str(len(result.results)))
    suites.set("failures", str(result.n_failed))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"workbench gate {result.run_id}",
        tests=str(len(result.results)),
        failures=str(result.n_failed),
        errors="0",
        skipped="0",
    )
    for r in result.results:
        case = ET.SubElement(
            suite, "testcase", classname=f"gate.{r.requirement.question}", name=r.requirement.label(), time="0"
        )
        if not r.passed:
            fail = ET.SubElement(case, "failure", message=r.message, type="RequirementFailed")
            fail.text = r.message
        else:
            ET.SubElement(case, "system-out").text = r.message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _num(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.4f}"


def markdown_table(result: GateResult) -> str:
    """A short Markdown summary a CI job can post as a pull-request comment."""
    head = "passed" if result.passed else f"FAILED ({result.n_failed} of {len(result.results)})"
    pct = int(round(result.level * 100))
    lines = [
        f"### Workbench gate: {head}",
        "",
        f"Run `{result.run_id}` on split `{result.split}` ({pct}% bootstrap intervals, {result.n_boot} resamples)"
        + (f", paired against `{result.baseline_run}`" if result.baseline_run else "")
        + ".",
        "",
        "| | question | metric | requirement | value | interval | judged on |"
        + (" drop vs baseline |" if result.baseline_run else ""),
        "|---|---|---|---|---:|---|---|" + ("---|" if result.baseline_run else ""),
    ]
    for r in result.results:
        q = r.requirement
        op = "≥" if q.kind == "min" else "≤"
        row = (
            f"| {'✅' if r.passed else '❌'} | {q.question} | {q.metric} | {op} {q.bound:g} | {_num(r.value)} | "
            f"[{_num(r.low)}, {_num(r.high)}] | {q.judged_on} |"
        )
        if result.baseline_run:
            d = r.drop
            row += f" {d.drop:+.4f} [{d.low:+.4f}, {d.high:+.4f}] |" if d else " — |"
        lines.append(row)
    return "\n".join(lines) + "\n"
