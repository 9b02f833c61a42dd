"""Shared fixtures: paths to the shipped data and a fresh store per test."""

from __future__ import annotations

import json
import os
import shutil
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


#: Folders whose every test is long (hypothesis fuzzing of file readers at 300 examples each).
SLOW_FOLDERS = ("tests/fuzz/",)


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` what the README's ``python -m pytest`` leaves to ``.ci/run``'s ``-m slow`` pass: the
    fuzz suites and every test that starts Spark (a JVM: 15-55 s each), besides the tests marked by hand."""
    for item in items:
        uses_spark = "spark" in getattr(item, "fixturenames", ()) or "spark" in item.name
        if item.nodeid.startswith(SLOW_FOLDERS) or uses_spark:
            item.add_marker(pytest.mark.slow)


def run_cli(
    *args: str, db: Path | None = None, env: dict | None = None, check: bool = False, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the real `workbench` console entry point in a subprocess."""
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()"]
    if db is not None:
        cmd += ["--db", str(db)]
    # pytest-xdist workers carry COLUMNS=80/LINES=24 from the controller's terminal: a piped CLI would lay its
    # tables out at 80 columns there and at full width under `-n 0`; a test wanting a width passes it in ``env``
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    full_env = {**inherited, **(env or {})}
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"workbench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def import_banking77(db: Path, train: Path, test: Path, *extra: str, **kwargs):
    """``workbench datasets import`` of BANKING77-shaped files ``train`` and ``test`` as dataset ``b77``
    (text column ``text``, question ``intent`` labelled by ``category``), with ``extra`` flags."""
    return run_cli(
        "datasets",
        "import",
        str(train),
        str(test),
        "--name",
        "b77",
        "--text-column",
        "text",
        "--label",
        "intent=category",
        *extra,
        db=db,
        **kwargs,
    )


def choice_responses(model: str, question: str, option_ids, probs) -> list[dict]:
    """System One responses of ``model`` answering choice ``question`` with each row of ``probs`` (n, k)
    (its arg-max as the stated choice): what a policy's ``decide_many`` reads."""
    return [
        {
            "model": model,
            "answers": {
                question: {
                    "type": "choice",
                    "choice": option_ids[int(p.argmax())],
                    "probabilities": dict(zip(option_ids, map(float, p), strict=True)),
                }
            },
        }
        for p in probs
    ]


def copy_store(src: Path, dst: Path) -> Path:
    """Copy a closed DuckDB store file (and its WAL, if one was left) to ``dst``; returns ``dst``."""
    shutil.copyfile(src, dst)
    wal = src.with_name(src.name + ".wal")
    if wal.exists():
        shutil.copyfile(wal, dst.with_name(dst.name + ".wal"))
    return dst


@pytest.fixture(scope="session")
def b77_tfidf_master(tmp_path_factory) -> dict:
    """BANKING77 imported once per session (calibration fraction 0.3, seed 0) and answered by
    ``baseline:tfidf-logreg`` on its default splits. Never open this file for writing: take a copy with
    :func:`copy_store` (several modules built this exact store themselves; building it once saves minutes)."""
    db = tmp_path_factory.mktemp("b77_tfidf_master") / "wb.duckdb"
    import_banking77(
        db,
        dataset_path("banking77", "train.csv"),
        dataset_path("banking77", "test.csv"),
        "--calibration-fraction",
        "0.3",
        "--seed",
        "0",
        check=True,
    )
    out = run_cli(
        "run",
        "--dataset",
        "b77",
        "--schema",
        str(ROOT / "experiments" / "schemas" / "banking77.yaml"),
        "--provider",
        "baseline:tfidf-logreg",
        "--no-progress",
        "--json",
        db=db,
        check=True,
    )
    return {"db": db, "run_id": json.loads(out.stdout)["runs"][0]["run_id"]}


def table_counts(con) -> dict[str, int]:
    """Row count of every table of the store (a failed action changes nothing). Two queries."""
    names = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
        ).fetchall()
    ]
    if not names:
        return {}
    row = con.execute("SELECT " + ", ".join(f'(SELECT count(*) FROM "{n}")' for n in names)).fetchone()
    return dict(zip(names, (int(v) for v in row or ()), strict=True))
