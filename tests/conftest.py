"""Shared fixtures: paths to the shipped data and a fresh store per test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"


def dataset_path(*parts: str) -> Path:
    """A bundled dataset file (falls back to ../shared while datasets/ is being filled)."""
    p = DATASETS.joinpath(*parts)
    return p if p.exists() else SHARED_DATASETS.joinpath(*parts)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "wb.duckdb"


def run_cli(
    *args: str, db: Path | None = None, env: dict | None = None, check: bool = False, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the real `workbench` console entry point in a subprocess."""
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()"]
    if db is not None:
        cmd += ["--db", str(db)]
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"workbench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
