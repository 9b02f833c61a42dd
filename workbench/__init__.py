"""Decision Workbench: evaluate decision models, calibrate them, and ship routing thresholds.

Public API (the CLI, the UI and notebooks use only these names)::

    from workbench import connect, load_schema, import_dataset, load_answers
"""
__version__ = "0.1.0"

from workbench.errors import WorkbenchError  # noqa: E402
from workbench.schema import DecisionSchema, load_schema, schema_hash  # noqa: E402
from workbench.store.db import connect, transaction  # noqa: E402
from workbench.store.runs import RunAnswers, get_run, list_runs, load_answers  # noqa: E402

__all__ = ["__version__", "WorkbenchError", "DecisionSchema", "load_schema", "schema_hash", "connect",
           "transaction", "RunAnswers", "get_run", "list_runs", "load_answers"]
