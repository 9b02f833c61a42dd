"""Decision Workbench: evaluate decision models, calibrate them, and ship routing thresholds.

Public API (the CLI, the UI and notebooks use only these names)::

    from workbench import connect, load_schema, import_dataset, load_answers
"""

__version__ = "0.1.0"

import workbench._runtime_path  # noqa: E402, F401 - a source checkout uses its own runtime/ (see the module)
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.schema import DecisionSchema, load_schema, schema_hash  # noqa: E402

# The store (duckdb, pandas, pyarrow) loads on first use, so that the dependency-light policy runtime
# (`from workbench.policy import Policy`) does not pull it into production processes.
_LAZY = {
    "connect": "workbench.store.db",
    "transaction": "workbench.store.db",
    "RunAnswers": "workbench.store.runs",
    "get_run": "workbench.store.runs",
    "list_runs": "workbench.store.runs",
    "load_answers": "workbench.store.runs",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


__all__ = [
    "__version__",
    "WorkbenchError",
    "DecisionSchema",
    "load_schema",
    "schema_hash",
    "connect",
    "transaction",
    "RunAnswers",
    "get_run",
    "list_runs",
    "load_answers",
]
