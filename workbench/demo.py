"""The offline demo: datasets → runs (two schema variants) → recalibration → certified thresholds → policy.

``workbench demo`` calls :func:`run_demo`; tests call it with ``fast=True``. Everything runs on this
machine with no keys: the local zero-shot model, the TF-IDF baseline, and Cloudflare's
``clef-flash`` **emulated** by the workbench's loopback emulator (started and stopped here; the
dummy credentials exist only in the environment handed to the runner).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.errors import WorkbenchError

#: Providers of the demo; the emulated one is labelled EMULATED everywhere it appears.
LOCAL_PROVIDERS = ("local:minilm-zeroshot", "baseline:tfidf-logreg")
EMULATED_PROVIDER = "cloudflare:clef-flash"
VARIANTS = ("descriptive", "terse")
DATASETS = ("banking77", "hwu64")

#: Items per split in ``--fast`` mode (tests, a quick look).
FAST_ITEMS = 240


class DemoError(WorkbenchError):
    """The demo cannot run (bundled data or a library layer is missing)."""


# -- where the bundled files are ----------------------------------------------------------------------
def repo_root() -> Path:
    """The checkout the package is installed from (editable install: the parent of ``workbench/``)."""
    from workbench.bundled import repo_root as _root

    return _root()


def dataset_files(name: str) -> list[Path]:
    """The bundled files of ``name`` (:func:`workbench.bundled_dataset`)."""
    import workbench as wb

    if name not in DATASETS:
        raise DemoError(f"no bundled dataset {name!r}", hint=f"choose from {', '.join(DATASETS)}")
    return list(wb.bundled_dataset(name)["paths"])


# -- schema variants ---------------------------------------------------------------------------------
def _readable(option_id: str) -> str:
    return option_id.replace("_", " ").replace("-", " ").strip()


def schema_variants(name: str, labels: list[str]) -> dict[str, Any]:
    """``{"descriptive": schema, "terse": schema}`` for dataset ``name``.

    Taken from the experiment file ``experiments/<name>.yaml`` (its ``descriptive`` and ``terse``
    variants) or the schema files ``experiments/schemas/<name>[-terse].yaml`` when they exist;
    otherwise both variants are built from the label set: *terse* sends bare option ids,
    *descriptive* adds one sentence per option.
    """
    from workbench.schema import DecisionSchema, load_schema

    out: dict[str, Any] = {}
    exp_file = repo_root() / "experiments" / f"{name}.yaml"
    if exp_file.exists():
        from workbench.workflows.experiments import load_experiment

        exp = load_experiment(exp_file)
        for variant in VARIANTS:
            v = exp.variants.get(variant)
            if v is not None and not v.questions_per_request:
                out[variant] = load_schema(v.schema_file)
    folder = repo_root() / "experiments" / "schemas"
    for variant in VARIANTS:
        names = [f"{name}-{variant}.yaml"] + ([f"{name}.yaml"] if variant == "descriptive" else [])
        for cand in (folder / n for n in names):
            if cand.exists():
                out[variant] = load_schema(cand)
                break
    if len(out) == len(VARIANTS):
        return out
    instructions = (
        "Which intent does the customer's message express? Pick the single best option."
        if name == "banking77"
        else "Which intent does the user's request to the home assistant express? Pick the single best option."
    )
    out.setdefault(
        "descriptive",
        DecisionSchema.from_dict(
            {
                "name": f"{name}-descriptive",
                "questions": {
                    "intent": {
                        "type": "choice",
                        "instructions": instructions,
                        "criteria": {lab: f"The message is about {_readable(lab)}." for lab in labels},
                    }
                },
            }
        ),
    )
    out.setdefault(
        "terse",
        DecisionSchema.from_dict(
            {
                "name": f"{name}-terse",
                "questions": {
                    "intent": {"type": "choice", "instructions": "Intent?", "criteria": {lab: None for lab in labels}}
                },
            }
        ),
    )
    return out


# -- result ------------------------------------------------------------------------------------------
@dataclass
class DemoRun:
    dataset: str
    provider: str
    variant: str
    run_id: str
    emulated: bool
    questions: list[str] = field(default_factory=lambda: ["intent"])
    figures: dict = field(default_factory=dict)
    policy_path: str | None = None


@dataclass
class DemoResult:
    out_dir: Path
    db_path: Path
    runs: list[DemoRun]
    policy_path: Path | None
    seconds: float
    summary: pd.DataFrame
    shadow: str | None = None
    settings: dict = field(default_factory=dict)  # ThresholdOptions.settings() of every policy
    settings_text: str = ""  # ThresholdOptions.describe()
    policy_run: str | None = None  # the run policy.json was certified on
    traffic: dict | None = None  # the simulated decision log and outcomes of policy.json (simulate_traffic)

    @property
    def ui_commands(self) -> list[str]:
        return [f"workbench ui --db {self.db_path}", f"streamlit run streamlit_app.py -- --db {self.db_path}"]

    def to_dict(self) -> dict:
        return {
            "out_dir": str(self.out_dir),
            "db": str(self.db_path),
            "policy": str(self.policy_path) if self.policy_path else None,
            "policy_source": {"run_id": self.policy_run, "question": "intent"} if self.policy_run else None,
            "settings": self.settings,
            "seconds": self.seconds,
            "shadow": self.shadow,
            "runs": [r.__dict__ for r in self.runs],
            "summary": self.summary.to_dict(orient="records"),
            "ui": self.ui_commands,
            "traffic": self.traffic,
            "monitor": self.monitor_command,
        }

    @property
    def monitor_command(self) -> str | None:
        """``workbench monitor`` on the simulated traffic of policy.json (None without it)."""
        if not self.traffic or not self.policy_path:
            return None
        return (
            f"workbench monitor --policy {self.policy_path} --decisions {self.traffic['decisions']} "
            f"--outcomes {self.traffic['outcomes']}"
        )


# -- the pipeline ------------------------------------------------------------------------------------
def _subsample(name: str, out_dir: Path, n_per_split: int) -> list[Path]:
    """Every k-th row of each bundled file (deterministic), for ``--fast``."""
    files = []
    target = out_dir / "fast-data" / name
    target.mkdir(parents=True, exist_ok=True)
    for f in dataset_files(name):
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
        if "split" in df.columns:
            parts = []
            for split, g in df.groupby("split", sort=False):
                k = max(1, len(g) // (n_per_split * (4 if split == "train" else 1)))
                parts.append(g.iloc[::k])
            df = pd.concat(parts)
        else:
            k = max(1, len(df) // (n_per_split * (4 if "train" in f.stem else 1)))
            df = df.iloc[::k]
        df.to_csv(target / f.name, index=False)
        files.append(target / f.name)
    return files


def run_label(dataset: str, provider: str, variant: str) -> str:
    """Run name shown everywhere; the emulated provider is marked EMULATED."""
    tag = f"{provider} [EMULATED]" if provider == EMULATED_PROVIDER else provider
    return f"demo {dataset} · {tag} · {variant}"


def _finished_run(con, name: str, schema_hash: str, dataset_version: int) -> str | None:
    """The id of a finished run called ``name`` over the same dataset version and schema, if any."""
    import workbench as wb

    try:
        run = wb.get_run(con, name)
    except wb.NotFoundError:
        return None
    same = (
        run["status"] == "done"
        and run["schema_hash"] == schema_hash
        and int(run["dataset_version"]) == int(dataset_version)
    )
    return run["run_id"] if same else None


def _memo_minilm():
    """``local:minilm-zeroshot`` with its state embeddings kept across the demo's runs.

    Both schema variants send the same states, and the model embeds each state independently of
    the question, so the second variant reuses the first one's embeddings: answers are identical
    to a fresh instance's, in half the time.
    """
    import numpy as np

    from workbench.providers.local import MiniLMZeroShot

    class MemoMiniLM(MiniLMZeroShot):
        def __init__(self) -> None:
            super().__init__()
            self._state_cache: dict[str, np.ndarray] = {}

        def encode(self, texts):
            missing = [t for t in dict.fromkeys(texts) if t not in self._state_cache]
            if missing:
                for t, e in zip(missing, super().encode(missing)):
                    self._state_cache[t] = e
            if len(texts) == 0:
                return super().encode(texts)
            return np.stack([self._state_cache[t] for t in texts])

    return MemoMiniLM()


def _emulator_env(emu) -> dict[str, str]:
    """Dummy credentials + the emulator's URL: handed to the runner only (never os.environ)."""
    return {
        **os.environ,
        "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        "CLOUDFLARE_API_KEY": "demo-not-a-real-key",
        "CLOUDFLARE_ACCOUNT_ID": "demo-account",
    }


def _demo_shadow(con, runs: list[DemoRun], log) -> str | None:
    """A shadow replay on BANKING77 test: the TF-IDF baseline (champion) vs the zero-shot model."""
    import workbench as wb

    def pick(provider: str) -> DemoRun | None:
        return next(
            (r for r in runs if r.dataset == "banking77" and r.provider == provider and r.variant == "descriptive"),
            None,
        )

    champion, challenger = pick("baseline:tfidf-logreg"), pick("local:minilm-zeroshot")
    if champion is None or challenger is None:
        return None
    name = "demo-banking77-tfidf-vs-minilm"
    wb.replay_shadow(con, name, champion.run_id, challenger.run_id, splits=["test"], replace=True)
    log(
        f"shadow replay [bold]{name}[/]: champion {champion.run_id} (tfidf) vs challenger {challenger.run_id} "
        "(minilm), BANKING77 test"
    )
    return name


def _figures(con, run_id: str, question: str) -> dict:
    """Test accuracy and top-label ECE before/after temperature scaling fitted on calibration."""
    import workbench as wb
    from workbench.metrics.recalibrate import make_calibrator
    from workbench.metrics.reliability import top_label_ece

    cal = wb.load_answers(con, run_id, question, ["calibration"]).labelled()
    test = wb.load_answers(con, run_id, question, ["test"])
    lab = test.labelled()
    out: dict[str, float] = {"n_test": int(len(test.labels)), "failed_test": int(test.failed.sum())}
    if len(lab.labels) == 0:
        return out
    out["accuracy"] = float((lab.probs.argmax(axis=1) == lab.labels).mean())
    out["ece"] = float(top_label_ece(lab.probs, lab.labels, n_bins=15))
    if len(cal.labels) >= 2:
        temp = make_calibrator("temperature").fit(cal.probs, cal.labels)
        out["temperature"] = float(temp.to_dict()["params"].get("temperature", float("nan")))
        out["ece_temperature"] = float(top_label_ece(temp.transform(lab.probs), lab.labels, n_bins=15))
    return out


def run_demo(
    out_dir: str | Path = "demo-output",
    *,
    fast: bool = False,
    options: Any = None,
    alpha: float | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    reporter: Any = None,
) -> DemoResult:
    """Run the whole offline demo into ``out_dir`` and return what it made.

    Parameters
    ----------
    out_dir : path
        Gets ``workbench.duckdb``, ``policy.json`` (the best certified policy) and
        ``policies/<dataset>-<provider>-<variant>.json`` for every run.
    fast : bool
        Subsample every split (about :data:`FAST_ITEMS` items) for a quick look or a test.
    options : ThresholdOptions, optional
        How thresholds are chosen; default ``ThresholdOptions()`` — the defaults of
        ``workbench thresholds``, ``compare``, the UI and the API, so their figures agree.
    alpha : float, optional
        Override ``options.alpha`` (the guarantee P(error among auto-accepted > alpha) <= delta on the
        calibration split).
    progress : bool
        Rich progress bars on stderr (the runner's).
    log : callable
        Receives one line per step (default: ``reporter.log``).
    reporter : workbench.reporting.Reporter, optional
        Narrative and progress (default :func:`workbench.reporting.default_reporter`: the logger);
        the CLI passes a rich reporter over its stderr console.

    Returns
    -------
    DemoResult
    """
    import workbench as wb
    from workbench.reporting import SilentReporter, default_reporter

    reporter = reporter or default_reporter()
    log = log or reporter.log
    opts = options if options is not None else wb.ThresholdOptions()
    if alpha is not None:
        opts = replace(opts, alpha=alpha)

    t0 = time.perf_counter()
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    db = out / "workbench.duckdb"
    runs: list[DemoRun] = []
    info_by_name: dict[str, int] = {}
    con = wb.connect(db)
    try:
        for name in DATASETS:
            spec = wb.bundled_dataset(name)
            if fast:
                spec["paths"] = _subsample(name, out, FAST_ITEMS)
            info = wb.import_dataset(con, **spec)
            info_by_name[name] = info.version
            log(
                f"[bold]{name}[/]: {info.n_items:,} items, v{info.version} "
                f"({'imported' if info.created else 'already in the store'}), fingerprint {info.fingerprint[:12]}"
            )
        minilm = _memo_minilm()
        with wb.run_emulator(port=0) as emu:
            env = _emulator_env(emu)
            log(
                f"[yellow]EMULATED[/] {EMULATED_PROVIDER}: the workbench emulator on {emu.base_url} answers "
                "instead of Cloudflare (no network, dummy credentials)"
            )
            for name in DATASETS:
                from workbench.store.datasets import dataset_info

                labels = sorted(dataset_info(con, name)["labels"]["intent"]["label_counts"])
                variants = schema_variants(name, labels)
                from workbench.providers.baselines import build_tfidf_logreg

                tfidf = build_tfidf_logreg(con, name)  # one fit per dataset, shared by both variants
                shared = {"local:minilm-zeroshot": minilm, "baseline:tfidf-logreg": tfidf}
                for variant, schema in variants.items():
                    for spec_name in (*LOCAL_PROVIDERS, EMULATED_PROVIDER):
                        label = run_label(name, spec_name, variant)
                        run_id = _finished_run(con, label, schema.hash, info_by_name[name])
                        if run_id is not None:  # a rerun of the demo: same data, same schema, already done
                            log(f"run {label}: {run_id} (already in the store)")
                        else:
                            run_id = wb.run(
                                con,
                                name,
                                schema,
                                shared.get(spec_name) or spec_name,
                                name=label,
                                env=env,
                                concurrency=32,
                                progress=progress,
                                reporter=reporter,
                                experiment=name,
                                variant=variant,
                            )
                            log(f"run {label}: {run_id}")
                        runs.append(
                            DemoRun(
                                name,
                                spec_name,
                                variant,
                                run_id,
                                spec_name == EMULATED_PROVIDER,
                                questions=list(schema.question_ids),
                            )
                        )
            log(f"[yellow]EMULATED[/] emulator stopped after {emu.request_count():,} requests")

        shadow = _demo_shadow(con, runs, log)
        policy_dir = out / "policies"
        policy_dir.mkdir(exist_ok=True)
        log(f"thresholds and policies at {opts.describe()}")
        with (reporter if progress else SilentReporter()).task("recalibrate + certify + export", len(runs)) as bar:
            for done, r in enumerate(runs, 1):
                bar.update(done)
                _certify_and_export(wb, con, r, opts, policy_dir)
    finally:
        con.close()

    summary = summary_frame(runs, opts.alpha if opts.objective == "guarantee" else None)
    best = _best_policy(runs)
    policy_path = None
    if best is not None:
        policy_path = out / "policy.json"
        policy_path.write_bytes(Path(str(best.policy_path)).read_bytes())
    traffic = None
    if best is not None and policy_path is not None:
        con = wb.connect(db, read_only=True)
        try:
            traffic = simulate_traffic(con, best.run_id, policy_path, out)
        finally:
            con.close()
        log(
            f"simulated traffic for policy.json: {traffic['n_decisions']:,} decisions over {traffic['days']} days "
            f"(day {traffic['drifted_day']} drifted) in {traffic['decisions']}"
        )
    return DemoResult(
        out,
        db,
        runs,
        policy_path,
        time.perf_counter() - t0,
        summary,
        shadow,
        settings=opts.settings(),
        settings_text=opts.describe(),
        policy_run=best.run_id if best else None,
        traffic=traffic,
    )


#: The simulated traffic: the test split spread over DAYS days from TRAFFIC_START, day DRIFTED_DAY drifted.
TRAFFIC_DAYS = 5
DRIFTED_DAY = 4
TRAFFIC_START = "2026-01-05T08:00:00+00:00"
#: On the drifted day the served model answers flatter: probabilities ** (1 / DRIFT_TEMPERATURE), renormalised.
DRIFT_TEMPERATURE = 2.5


def simulate_traffic(con: Any, run_id: str, policy_path: Path, folder: Path) -> dict:
    """A decision log and outcomes for ``policy_path``, as production would make them.

    The labelled test answers of ``run_id`` are replayed in item order as System One responses over
    :data:`TRAFFIC_DAYS` days (evenly spaced); on day :data:`DRIFTED_DAY` the model answers flatter
    (temperature :data:`DRIFT_TEMPERATURE`), the drift ``workbench monitor`` should see. Every response goes
    through the runtime ``Policy.decide`` into the runtime's ``DecisionLog`` (``decisions.jsonl``); the
    outcomes file (``outcomes.jsonl``) gives each decision's true label. Both are written in ``folder`` (the
    demo's store folder, where the UI's Monitor page looks by default) and rewritten whole."""
    import json
    from datetime import datetime, timedelta

    import numpy as np
    from workbench_runtime.decision_log import DecisionLog, log_files

    import workbench as wb
    from workbench.policy.runtime import Policy

    policy = Policy.load(policy_path)
    ans = wb.load_answers(con, run_id, "intent", ["test"]).labelled()
    n = len(ans.labels)
    if n == 0:
        raise DemoError(f"run {run_id} has no labelled test answers to simulate traffic from")
    models = policy.model.validity.models
    model = models[0] if models else policy.model.source.model or policy.model.source.provider
    schema_hash = policy.model.decision_schema.hash
    opt_ids = list(ans.option_ids)
    day = np.minimum((np.arange(n) * TRAFFIC_DAYS) // n, TRAFFIC_DAYS - 1) + 1
    probs = np.array(ans.probs, dtype=float)
    drift = day == DRIFTED_DAY
    flat = np.power(np.clip(probs[drift], 0.0, None), 1.0 / DRIFT_TEMPERATURE)
    probs[drift] = flat / flat.sum(axis=1, keepdims=True)
    per_day = np.bincount(day, minlength=TRAFFIC_DAYS + 1)[1:]
    start = datetime.fromisoformat(TRAFFIC_START)
    times = iter(
        [
            start + timedelta(days=int(d) - 1, seconds=int(k * (10 * 3600) // max(1, per_day[d - 1])))
            for d, k in zip(day, np.concatenate([np.arange(c) for c in per_day]))
        ]
    )
    folder.mkdir(parents=True, exist_ok=True)
    decisions, outcomes = folder / "decisions.jsonl", folder / "outcomes.jsonl"
    for f in [*log_files(decisions), outcomes]:  # a rerun replaces the log and its rotated backups
        f.unlink(missing_ok=True)
    tmp = folder / ".outcomes.jsonl.tmp"  # hidden: the Monitor page's outcomes.* never sees it half-written
    with DecisionLog(decisions, clock=lambda: next(times)) as dlog, tmp.open("w", encoding="utf-8") as out:
        for i in range(n):
            p = probs[i]
            did = f"demo-{i:06d}"
            if np.isfinite(p).all():
                response: dict = {
                    "model": model,
                    "answers": {
                        "intent": {
                            "type": "choice",
                            "choice": opt_ids[int(p.argmax())],
                            "probabilities": dict(zip(opt_ids, p.tolist())),
                        }
                    },
                }
            else:
                response = {"error": {"kind": "transient", "message": "HTTP 503"}}
            policy.decide(response, schema_hash=schema_hash, decision_id=did, log=dlog)
            out.write(json.dumps({"decision_id": did, "question": "intent", "outcome": opt_ids[ans.labels[i]]}) + "\n")
        if dlog.n_errors:
            raise DemoError(f"the decision log could not be written: {dlog.last_error}")
    tmp.replace(outcomes)
    return {
        "decisions": str(decisions),
        "outcomes": str(outcomes),
        "n_decisions": n,
        "days": TRAFFIC_DAYS,
        "drifted_day": DRIFTED_DAY,
        "start": TRAFFIC_START,
        "run_id": run_id,
    }


def _certify_and_export(wb: Any, con: Any, r: DemoRun, opts: Any, policy_dir: Path) -> None:
    """Figures of one run, its policy at ``opts`` (written under ``policy_dir``) and its test figures."""
    r.figures = _figures(con, r.run_id, "intent")
    if opts.objective == "guarantee":  # the frontier's edge: what α this run could promise at this δ
        from workbench.workflows.thresholds import smallest_certified_alpha

        try:
            r.figures["certifies_from_alpha"] = smallest_certified_alpha(con, r.run_id, "intent", opts)
        except WorkbenchError as exc:
            r.figures["frontier_error"] = exc.message
    path = policy_dir / f"{r.dataset}-{r.provider.replace(':', '_')}-{r.variant}.json"
    try:
        policy = wb.build_policy(con, r.run_id, r.questions, opts, out=path, created_by="workbench demo")
    except WorkbenchError as exc:
        r.figures["policy_error"] = exc.message
        return
    qp = policy.model.questions["intent"]
    test = qp.expected_test
    certified = bool(qp.objective.certified and qp.objective.feasible)
    if not certified and opts.objective == "guarantee":
        from workbench.thresholds.options import calibration_size_needed

        r.figures["n_calibration_needed"] = calibration_size_needed(opts, len(qp.options))["n_calibration"]
        o = qp.objective
        r.figures["n_calibration"] = (
            (o.n_calibration or 0) + (o.n_calibrator_fit or 0) + (o.details or {}).get("n_order", 0)
        )
    r.figures.update(
        {
            "certified": certified,
            **{k: v for k, v in qp.rule.model_dump().items() if k in ("tau", "margin", "tau_yes", "tau_no")},
            "cal_coverage": qp.objective.expected_coverage,
            "test_coverage": test.coverage.value if test else None,
            "test_error": test.error.value if test else None,
        }
    )
    r.policy_path = str(path)


def _best_policy(runs: list[DemoRun]) -> DemoRun | None:
    """The certified policy with the highest calibration coverage, preferring BANKING77 and real
    (non-emulated) providers: the file a reader would ship first."""
    ok = [r for r in runs if r.policy_path and r.figures.get("certified")]
    if not ok:
        return None
    return max(ok, key=lambda r: (r.dataset == "banking77", not r.emulated, r.figures.get("cal_coverage") or 0))


def next_step(r: DemoRun, alpha: float) -> str:
    """What to try for a run that certifies nothing at ``alpha`` ("" when it certifies).

    More labels when the calibration split is below the size certifying needs at ``alpha``; a looser
    α when a larger one on the frontier certifies; a stronger model when no α up to 50 % does."""
    f = r.figures
    if f.get("certified"):
        return ""
    needed, have = f.get("n_calibration_needed") or 0, f.get("n_calibration") or 0
    a = f.get("certifies_from_alpha")
    looser = f"a looser α (--max-error {a:g})" if a is not None else ""
    if have < needed:
        return f"more labels (≥{needed:,} cal)" + (f" or {looser}" if looser else "")
    if looser:
        return f"{looser} or a stronger model"
    return "a stronger model (nothing certifies up to α 0.5)"


def summary_frame(runs: list[DemoRun], alpha: float | None = None) -> pd.DataFrame:
    """One row per run: accuracy, ECE before/after temperature, the smallest certifying α (and, with
    ``alpha``, what to try when it is above ``alpha``), certified (τ, m), coverage, error."""
    rows = []
    for r in runs:
        f = r.figures
        rows.append(
            {
                "dataset": r.dataset,
                "provider": r.provider + (" (EMULATED)" if r.emulated else ""),
                "variant": r.variant,
                "run_id": r.run_id,
                "n_test": f.get("n_test"),
                "accuracy": f.get("accuracy"),
                "ece": f.get("ece"),
                "ece_temp": f.get("ece_temperature"),
                "certifies_from_alpha": f.get("certifies_from_alpha"),
                "next_step": next_step(r, alpha) if alpha is not None else None,
                "tau": f.get("tau"),
                "margin": f.get("margin"),
                "cal_coverage": f.get("cal_coverage"),
                "test_coverage": f.get("test_coverage"),
                "test_error": f.get("test_error"),
            }
        )
    return pd.DataFrame(rows)


def _short_provider(spec: str, emulated: bool) -> str:
    name = spec.split(":", 1)[-1]
    return f"{name} EMULATED" if emulated else name


def print_summary(result: DemoResult, console=None) -> None:
    """The short table and the next-step commands (stdout by default; the demo's progress goes to stderr).

    Commands are printed with ``soft_wrap=True``: a narrow terminal or a pipe never breaks one across lines,
    so each can be copied whole."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if not console.is_terminal and console.width < 180:  # logs and pipes: keep the table on one line per run
        console = Console(file=console.file, width=180)

    def pct(v):
        return "—" if v is None or v != v else f"{100 * v:.0f}%"

    def num(v):
        return "—" if v is None or v != v else f"{v:.2f}"

    def alpha_text(f):
        if "certifies_from_alpha" not in f:
            return "—"
        a = f["certifies_from_alpha"]
        return f"{100 * a:g}%" if a is not None else "> 50%"

    t = Table(
        title=f"workbench demo: {len(result.runs)} runs in {result.seconds:.0f} s (question: intent)",
        caption=f"thresholds at {result.settings_text}" if result.settings_text else None,
        pad_edge=False,
        box=None,
        header_style="bold",
    )
    cols = (
        "dataset",
        "provider",
        "variant",
        "run",
        "acc",
        "ECE raw→T",
        "certifies from α",
        "τ / m",
        "cov cal",
        "cov test",
        "err test",
    )
    for col in cols:
        t.add_column(col, justify="left" if col in ("dataset", "provider", "variant", "run") else "right", no_wrap=True)
    for r in result.runs:
        f = r.figures
        ece = f"{num(f.get('ece'))}→{num(f.get('ece_temperature'))}" if f.get("ece") is not None else "—"
        thr = f"{num(f.get('tau'))} / {num(f.get('margin'))}" if f.get("certified") else "none certified"
        if not f.get("certified") and f.get("n_calibration_needed"):
            # name the size only when size is the reason; with enough items it is the errors
            needed, have = f["n_calibration_needed"], f.get("n_calibration") or 0
            thr += f" (needs ≥{needed:,} cal)" if have < needed else " (too many errors at α)"
        t.add_row(
            r.dataset,
            _short_provider(r.provider, r.emulated),
            r.variant,
            r.run_id,
            pct(f.get("accuracy")),
            ece,
            alpha_text(f),
            thr,
            pct(f.get("cal_coverage")),
            pct(f.get("test_coverage")),
            pct(f.get("test_error")),
        )
    console.print(t)
    target = result.settings.get("alpha")
    behind = [r for r in result.runs if "certifies_from_alpha" in r.figures and not r.figures.get("certified")]
    if behind and target is not None:
        console.print(f"what to try for the {len(behind)} runs that certify only above α {target:g}:", highlight=False)
        for r in behind:
            console.print(
                f"  {r.run_id} ({r.dataset} · {_short_provider(r.provider, r.emulated)} · {r.variant}): "
                f"{next_step(r, float(target))}",
                highlight=False,
            )
    console.print(
        "acc/ECE on test (ECE raw → after temperature scaling fitted on calibration); τ/m certified by "
        f"Learn-then-Test on calibration at {result.settings_text} (P(error among accepted > α) ≤ δ); "
        "cov = auto-accepted share; err = error among auto-accepted. "
        "EMULATED = answered by the local emulator, not Cloudflare.",
        highlight=False,
    )
    if result.policy_path:
        best = next((r for r in result.runs if r.run_id == result.policy_run), None)
        source = f"{result.policy_run}" + (
            f" ({best.dataset} · {_short_provider(best.provider, best.emulated)} · {best.variant})" if best else ""
        )
        console.print(
            f"policy: [bold]{result.policy_path}[/] from {source}, question intent, certified at "
            f"{result.settings_text} (one per run in {result.out_dir / 'policies'})",
            highlight=False,
            soft_wrap=True,
        )
    else:
        needed = max((r.figures.get("n_calibration_needed") or 0 for r in result.runs), default=0)
        have = max((r.figures.get("n_calibration") or 0 for r in result.runs), default=0)
        why = (
            f"the calibration split has {have:,} items and certifying needs at least {needed:,} even with no "
            "error among the accepted ones"
            if have < needed
            else f"the calibration split ({have:,} items) is above the {needed:,} items certifying needs at best, "
            "but the errors among the most confident answers keep every bound above α"
        )
        console.print(
            f"policy: nothing was certified at {result.settings_text}: {why}; use the full data (no --fast) "
            "or a larger --max-error",
            highlight=False,
        )
    if result.shadow:
        console.print(
            f"shadow replay (tfidf champion vs zero-shot challenger, certified policies at the same settings): "
            f"[bold]workbench --db {result.db_path} shadow report {result.shadow}[/]",
            soft_wrap=True,
        )
    if result.monitor_command:
        tr = result.traffic or {}
        console.print(
            f"monitor policy.json on {tr.get('n_decisions', 0):,} simulated decisions over {tr.get('days')} days "
            f"(day {tr.get('drifted_day')} drifted; also on the UI's Monitor page):",
            highlight=False,
        )
        console.print(f"  [bold]{result.monitor_command}[/]", soft_wrap=True, highlight=False)
    console.print("open the UI on the result:")
    for cmd in result.ui_commands:
        console.print(f"  [bold]{cmd}[/]", soft_wrap=True, highlight=False)
