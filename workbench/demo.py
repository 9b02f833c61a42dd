"""The offline demo: datasets → runs (two schema variants) → recalibration → certified thresholds → policy.

``workbench demo`` calls :func:`run_demo`; tests call it with ``fast=True``. Everything runs on this
machine with no keys: the local zero-shot model, the TF-IDF baseline, and Cloudflare's
``clef-flash`` **emulated** by the workbench's loopback emulator (started and stopped here; the
dummy credentials exist only in the environment handed to the runner).
"""
from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
    return Path(__file__).resolve().parents[1]


def bundled_dir(name: str) -> Path:
    """``datasets/<name>`` of the checkout (``WORKBENCH_DATASETS`` overrides the parent folder)."""
    base = Path(os.environ.get("WORKBENCH_DATASETS", repo_root() / "datasets"))
    path = base / name
    if not path.is_dir():
        fallback = repo_root().parent / "shared" / "datasets" / name  # the development mirror
        if fallback.is_dir():
            return fallback
        raise DemoError(f"bundled dataset {name!r} not found in {base}",
                        hint="run the demo from a checkout (datasets/ ships with it) or set WORKBENCH_DATASETS")
    return path


def import_spec_for(name: str):
    """How the demo imports each bundled dataset (calibration carved from train, fixed seed)."""
    from workbench.store.datasets import ImportSpec

    if name == "banking77":
        return ImportSpec(name="banking77", text_column="text", labels={"intent": "category"},
                          calibration_fraction=0.2, seed=0)
    if name == "hwu64":
        return ImportSpec(name="hwu64", text_column="text", id_column="id", split_column="split",
                          labels={"intent": "label"}, calibration_fraction=0.2, seed=0)
    raise DemoError(f"no bundled dataset {name!r}", hint=f"choose from {', '.join(DATASETS)}")


def dataset_files(name: str) -> list[Path]:
    d = bundled_dir(name)
    if name == "banking77":
        return [d / "train.csv", d / "test.csv"]
    return [d / "hwu64_kfold1.csv"]


# -- schema variants ---------------------------------------------------------------------------------
def _readable(option_id: str) -> str:
    return option_id.replace("_", " ").replace("-", " ").strip()


def schema_variants(name: str, labels: list[str]) -> dict[str, Any]:
    """``{"descriptive": schema, "terse": schema}`` for dataset ``name``.

    The experiment files' schemas (``experiments/schemas/<name>-<variant>.yaml``) are used when
    they exist; otherwise both variants are built from the label set: *terse* sends bare option ids,
    *descriptive* adds one sentence per option.
    """
    from workbench.schema import DecisionSchema, load_schema

    out: dict[str, Any] = {}
    for variant in VARIANTS:
        for cand in (repo_root() / "experiments" / "schemas" / f"{name}-{variant}.yaml",
                     repo_root() / "experiments" / "schemas" / f"{name}_{variant}.yaml"):
            if cand.exists():
                out[variant] = load_schema(cand)
                break
    if len(out) == len(VARIANTS):
        return out
    instructions = ("Which intent does the customer's message express? Pick the single best option."
                    if name == "banking77" else
                    "Which intent does the user's request to the home assistant express? Pick the single best option.")
    out.setdefault("descriptive", DecisionSchema.from_dict({
        "name": f"{name}-descriptive",
        "questions": {"intent": {"type": "choice", "instructions": instructions,
                                 "criteria": {lab: f"The message is about {_readable(lab)}." for lab in labels}}}}))
    out.setdefault("terse", DecisionSchema.from_dict({
        "name": f"{name}-terse",
        "questions": {"intent": {"type": "choice", "instructions": "Intent?",
                                 "criteria": {lab: None for lab in labels}}}}))
    return out


# -- result ------------------------------------------------------------------------------------------
@dataclass
class DemoRun:
    dataset: str
    provider: str
    variant: str
    run_id: str
    emulated: bool
    calibrated_run_id: str | None = None
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

    @property
    def ui_commands(self) -> list[str]:
        return [f"workbench ui --db {self.db_path}", f"streamlit run streamlit_app.py -- --db {self.db_path}"]

    def to_dict(self) -> dict:
        return {"out_dir": str(self.out_dir), "db": str(self.db_path),
                "policy": str(self.policy_path) if self.policy_path else None, "seconds": self.seconds,
                "runs": [r.__dict__ for r in self.runs], "summary": self.summary.to_dict(orient="records"),
                "ui": self.ui_commands}
