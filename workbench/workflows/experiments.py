"""Experiments as files: one dataset × schema variants × providers, run as a cross product.

An experiment file (YAML) is the reviewable record of a comparison::

    name: banking77-schema-ab
    dataset: banking77
    splits: [calibration, test]        # default: every split but train
    limit: null                        # first N items by id per split filter (smoke runs)
    providers: [local:minilm-zeroshot, baseline:tfidf-logreg]
    variants:                          # name -> schema file (relative to this file) or a mapping
      descriptive: schemas/banking77.yaml
      terse: {schema: schemas/banking77-terse.yaml}
      per-question: {schema: schemas/hwu64.yaml, questions_per_request: 1}
    baseline: {provider: local:minilm-zeroshot, variant: terse}
    objective: {kind: guarantee, max_error: 0.05, delta: 0.1}
    compare: {split: test, n_boot: 1000}
    probes: [option_order, {name: irrelevant_context, seed: 3}]   # optional robustness probes

Each probe (:mod:`workbench.probes`: ``option_order``, ``option_ids_only``, ``irrelevant_context``,
``instruction_paraphrase``, ``yes_no_inversion``; seed 0 unless given) adds one run per (variant,
provider), tagged variant ``<variant>+<probe>`` with ``params['probe'] = {name, seed}``: the same
schema (its answers are stored in the original option order) asked the transformed way.
``workbench robustness BASE_RUN PROBE_RUN…`` then reports flip rate, paired accuracy change and
position bias against the unprobed run.

``workbench run experiments/banking77.yaml`` runs every (variant, provider) pair through the runner
(the response cache makes a rerun free), tagging each run with ``experiment`` and ``variant``;
``workbench compare banking77-schema-ab`` compares the latest run of every pair.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workbench.errors import NotFoundError, WorkbenchError
from workbench.reporting import Reporter, default_reporter


class ExperimentError(WorkbenchError):
    """An experiment file is malformed or names something that does not exist."""


class Variant(BaseModel):
    """One schema variant: the schema file and how questions are grouped into requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_file: str = Field(alias="schema", min_length=1)
    questions_per_request: int | None = Field(default=None, ge=1)
    description: str | None = None


class Baseline(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: str
    variant: str


class Objective(BaseModel):
    """Threshold objective of the comparison (the ``workbench thresholds`` options).

    Fields the file leaves out take :class:`workbench.thresholds.options.ThresholdOptions`' defaults
    (``workbench.workflows.compare.experiment_options`` passes on only the fields that were set); the
    defaults written here are the same values, for reading.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["guarantee", "cost", "coverage", "error"] = "guarantee"
    max_error: float = Field(default=0.05, gt=0, lt=1)  # alpha of the guarantee
    delta: float = Field(default=0.1, gt=0, lt=1)
    target_coverage: float | None = Field(default=None, gt=0, le=1)
    target_error: float | None = Field(default=None, gt=0, lt=1)
    review_cost: float = Field(default=1.0, ge=0)
    error_cost: float = Field(default=10.0, ge=0)
    calibrate: Literal["none", "temperature", "isotonic", "platt"] = "temperature"
    calibration_split: str = "calibration"


class CompareSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    split: str = "test"
    n_boot: int = Field(default=1000, ge=0)
    seed: int = 0
    questions: list[str] | None = None


class ProbeSetting(BaseModel):
    """One robustness probe of the experiment (``option_order`` or ``{name: option_order, seed: 1}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    seed: int = 0

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        from workbench.probes import PROBES

        if v not in PROBES:
            raise ValueError(f"unknown probe {v!r} (use one of: {', '.join(PROBES)})")
        return v


class Experiment(BaseModel):
    """A parsed experiment file (paths already resolved against the file's folder)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    dataset: str = Field(min_length=1)
    splits: list[str] | None = None
    limit: int | None = Field(default=None, ge=1)
    providers: list[str] = Field(min_length=1)
    variants: dict[str, Variant] = Field(min_length=1)
    baseline: Baseline | None = None
    objective: Objective = Field(default_factory=Objective)
    compare: CompareSettings = Field(default_factory=CompareSettings)
    probes: list[ProbeSetting] = Field(default_factory=list)
    concurrency: int | None = Field(default=None, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    source: str | None = None

    @field_validator("variants", mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: ({"schema": v} if isinstance(v, str) else v) for k, v in value.items()}
        return value

    @field_validator("probes", mode="before")
    @classmethod
    def _probe_short_form(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _baseline_known(self) -> Experiment:
        if len(set(self.providers)) != len(self.providers):
            raise ValueError("providers are listed twice")
        if len({(p.name, p.seed) for p in self.probes}) != len(self.probes):
            raise ValueError("a probe is listed twice with the same seed")
        if self.baseline is not None:
            if self.baseline.provider not in self.providers:
                raise ValueError(f"baseline provider {self.baseline.provider!r} is not in providers")
            if self.baseline.variant not in self.variants:
                raise ValueError(f"baseline variant {self.baseline.variant!r} is not in variants")
        return self

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(variant, provider) in file order: variants outer, providers inner."""
        return [(v, p) for v in self.variants for p in self.providers]


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file; schema paths become absolute and must exist."""
    path = Path(path)
    if not path.exists():
        raise ExperimentError(f"{path}: experiment file does not exist", hint="check the path")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ExperimentError(f"{path}: cannot parse: {str(exc).splitlines()[0]}", hint="fix the YAML") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: an experiment must be a mapping", hint="see experiments/banking77.yaml")
    try:
        exp = Experiment.model_validate({**data, "source": str(path)})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "experiment"
        raise ExperimentError(f"{path}: {loc}: {err['msg']}", hint="see experiments/banking77.yaml") from None
    variants = {}
    for name, v in exp.variants.items():
        schema_path = (path.parent / v.schema_file).resolve()
        if not schema_path.exists():
            raise ExperimentError(
                f"{path}: variant {name!r}: schema file {v.schema_file} does not exist",
                hint="schema paths are relative to the experiment file",
            )
        variants[name] = v.model_copy(update={"schema_file": str(schema_path)})
    return exp.model_copy(update={"variants": variants})


def run_experiment_file(
    con: Any,
    path: str | Path,
    *,
    concurrency: int | None = None,
    limit: int | None = None,
    env: Mapping[str, str] | None = None,
    progress: bool = True,
    rate: float | None = None,
    max_cost: float | None = None,
    timeout: float | None = None,
    reporter: Reporter | None = None,
) -> dict:
    """Run the full cross product of an experiment file; return its name and run ids.

    Each (variant, provider) is one run tagged with ``experiment`` and ``variant``; cached responses are
    reused, so running the same file again costs nothing. Progress and one line per run go to
    ``reporter`` (default: the ``workbench`` logger).

    Returns
    -------
    result : dict
        ``{"experiment", "dataset", "source", "runs": [{"run_id", "variant", "provider", "status", "summary"}]}``.
    """
    from workbench.runner import run_experiment
    from workbench.schema import load_schema
    from workbench.store.runs import get_run

    exp = load_experiment(path)
    env = os.environ if env is None else env
    reporter = reporter or default_reporter()
    results = []
    for vname, variant in exp.variants.items():
        schema = load_schema(variant.schema_file)
        # what the variant's runs and its probed runs are run with
        settings: dict[str, Any] = {
            "limit": limit or exp.limit,
            "concurrency": concurrency or exp.concurrency or 8,
            "rate": rate,
            "max_cost": max_cost,
            "timeout": timeout or exp.timeout or 5.0,
            "questions_per_request": variant.questions_per_request,
            "env": env,
            "progress": progress,
            "reporter": reporter,
        }
        run_ids = run_experiment(
            con,
            dataset=exp.dataset,
            schema=schema,
            provider_specs=list(exp.providers),
            splits=exp.splits,
            run_name=f"{exp.name}/{vname}",
            experiment=exp.name,
            variant=vname,
            **settings,
        )
        for provider, run_id in zip(exp.providers, run_ids):
            run = get_run(con, run_id)
            results.append(
                {
                    "run_id": run_id,
                    "variant": vname,
                    "provider": provider,
                    "status": run["status"],
                    "summary": run["summary"],
                }
            )
        for setting in exp.probes:
            results.extend(_run_probe(con, exp, vname, schema, setting, **settings))
    for r in results:
        s = r["summary"] or {}
        reporter.log(
            f"{exp.name} [bold]{r['variant']}[/] × {r['provider']}: {r['run_id']} "
            f"{r['status']} ({s.get('answered', '?')} answered, {s.get('failed', '?')} failed)"
        )
    reporter.log(f"compare with `workbench compare {exp.name}`")
    return {"experiment": exp.name, "dataset": exp.dataset, "source": str(path), "runs": results}


def probe_variant(variant: str, probe: ProbeSetting) -> str:
    """The ``variant`` tag of a probed run: ``descriptive+option_order`` (``…:SEED`` when seed ≠ 0)."""
    return f"{variant}+{probe.name}" + (f":{probe.seed}" if probe.seed else "")


def _run_probe(
    con: Any,
    exp: Experiment,
    vname: str,
    schema: Any,
    setting: ProbeSetting,
    *,
    env: Mapping[str, str],
    progress: bool,
    reporter: Reporter,
    **options: Any,
) -> list[dict]:
    """One probed run per provider: the original schema stored, the transformed request sent."""
    from workbench.probes import Probe, ProbedProvider
    from workbench.runner import RunOptions, execute_run, start_run
    from workbench.runner.execute import build_provider
    from workbench.store.datasets import latest_version
    from workbench.store.runs import get_run, update_run

    probe = Probe(setting.name, setting.seed)
    opts = RunOptions(splits=list(exp.splits) if exp.splits else None, **options)
    version = latest_version(con, exp.dataset)
    tag = probe_variant(vname, setting)
    out = []
    for spec in exp.providers:
        inner = build_provider(con, spec, dataset=exp.dataset, dataset_version=version, options=opts, env=env)
        run_id = start_run(
            con,
            dataset=exp.dataset,
            schema=schema,
            provider_spec=spec,
            options=opts,
            dataset_version=version,
            run_name=f"{exp.name}/{tag}" + (f":{spec}" if len(exp.providers) > 1 else ""),
            experiment=exp.name,
            variant=tag,
        )
        run = get_run(con, run_id)
        update_run(con, run_id, params={**(run["params"] or {}), "probe": probe.as_params(), "base_variant": vname})
        execute_run(
            con,
            run_id,
            env=env,
            progress=progress,
            provider=ProbedProvider(inner, probe),
            reporter=reporter,
        )
        run = get_run(con, run_id)
        out.append(
            {"run_id": run_id, "variant": tag, "provider": spec, "status": run["status"], "summary": run["summary"]}
        )
    return out


def experiment_runs(con: Any, name: str) -> list[dict]:
    """The run of every (variant, provider) of experiment ``name``: the latest finished one, else the latest."""
    from workbench.store.runs import experiment_run_rows

    df = experiment_run_rows(con, name)
    if df.empty:
        raise NotFoundError(
            f"experiment {name!r} has no runs", hint=f"run it first: workbench run experiments/{name}.yaml"
        )
    return df.to_dict(orient="records")
