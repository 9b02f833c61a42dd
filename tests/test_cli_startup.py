"""Start-up (issue 29, item 5): ``workbench --help`` / ``--version`` load none of the heavy libraries.

A fresh interpreter runs the real entry point (``workbench.cli.main``) and reports, when it exits, which
top-level modules it loaded; the commands' heavy imports (numpy, pandas, duckdb, pydantic, …) must wait
until a command runs. Timings live in ``bench/startup.py``, not here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import workbench_runtime

import workbench
from tests.conftest import ROOT

#: What a command may load when it runs, never at start-up.
HEAVY = {
    "numpy",
    "pandas",
    "duckdb",
    "pydantic",
    "pyarrow",
    "scipy",
    "sklearn",
    "plotly",
    "httpx",
    "streamlit",
    "yaml",
}

#: Run the entry point as the console script does; print the loaded top-level modules at exit.
WRAPPER = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: sys.stderr.write("
    "'\\nLOADED ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})) + '\\n'))\n"
    "sys.argv = ['workbench', *sys.argv[1:]]\n"
    "from workbench.cli import main\n"
    "main()\n"
)


def _run(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {**os.environ, "COLUMNS": "120"}
    env.pop("WORKBENCH_DB", None)
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED ")]
    assert len(lines) == 1, proc.stderr
    return proc, set(json.loads(lines[0].removeprefix("LOADED ")))


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_help_and_version_load_no_heavy_library(args, tmp_path):
    proc, loaded = _run(args, tmp_path)
    assert proc.returncode == (2 if not args else 0), proc.stderr
    assert "workbench" in loaded and "typer" in loaded  # the wrapper did run the CLI
    assert not loaded & HEAVY, sorted(loaded & HEAVY)
    if args == ["--version"]:
        assert proc.stdout.strip() == f"workbench {workbench.__version__}"
    else:
        out = proc.stdout if args else proc.stdout + proc.stderr
        for command in ("run", "report", "thresholds", "runs", "policy", "shadow", "datasets"):
            assert f" {command} " in out, out


def test_import_workbench_and_its_errors_load_no_heavy_library(tmp_path):
    code = (
        "import json, sys\n"
        "import workbench\n"
        "from workbench.errors import NotFoundError, WorkbenchError\n"
        "from workbench_runtime.errors import PolicyError\n"
        "assert issubclass(PolicyError, WorkbenchError) and issubclass(NotFoundError, WorkbenchError)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    loaded = set(json.loads(out.stdout))
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


def test_lazy_names_are_the_modules_objects():
    from workbench_runtime.decision_log import DecisionLog, read_decision_log
    from workbench_runtime.model import FORMAT_VERSION, SCHEMA_FILE, json_schema
    from workbench_runtime.policy import Policy, QuestionDecision, verify_document

    from workbench.schema import DecisionSchema, load_schema, schema_hash

    assert (workbench.DecisionSchema, workbench.load_schema, workbench.schema_hash) == (
        DecisionSchema,
        load_schema,
        schema_hash,
    )
    expected = {
        "DecisionLog": DecisionLog,
        "read_decision_log": read_decision_log,
        "FORMAT_VERSION": FORMAT_VERSION,
        "SCHEMA_FILE": SCHEMA_FILE,
        "json_schema": json_schema,
        "Policy": Policy,
        "QuestionDecision": QuestionDecision,
        "verify_document": verify_document,
    }
    for name, value in expected.items():
        assert getattr(workbench_runtime, name) is value, name
        assert name in workbench_runtime.__all__ and name in dir(workbench_runtime)
    namespace: dict = {}
    exec("from workbench_runtime import *", namespace)
    assert set(workbench_runtime.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no_such_name"):
        workbench_runtime.no_such_name  # noqa: B018


def test_python_dash_m_workbench_is_the_cli(tmp_path):
    env = {**os.environ, "COLUMNS": "120"}
    env.pop("WORKBENCH_DB", None)
    version = subprocess.run(
        [sys.executable, "-m", "workbench", "--version"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"workbench {workbench.__version__}"
    missing = subprocess.run(
        [sys.executable, "-m", "workbench", "runs", "list"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert missing.returncode == 2  # no store here: the CLI's one-line error, as `workbench runs list` gives
    assert missing.stderr.startswith("error: ") and "workbench.duckdb" in missing.stderr, missing.stderr
    assert (ROOT / "workbench" / "__main__.py").is_file()


def test_json_output_still_converts_numpy_values():
    from workbench.cli.common import to_jsonable

    doc = {
        "flag": np.bool_(True),
        "n": np.int64(3),
        "x": np.float64(0.25),
        "nan": np.float64("nan"),
        "vec": np.array([1.5, 2.0]),
        "when": datetime(2026, 1, 2, 3, 4, 5),
        "path": Path("a/b"),
        "inf": math.inf,
    }
    assert to_jsonable(doc) == {
        "flag": True,
        "n": 3,
        "x": 0.25,
        "nan": None,
        "vec": [1.5, 2.0],
        "when": "2026-01-02T03:04:05",
        "path": "a/b",
        "inf": None,
    }
