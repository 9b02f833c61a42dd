"""Use the installed runtime (the clean-venv CI run); in a bare checkout, this directory's own package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1] / "workbench_runtime"

if "workbench_runtime" not in sys.modules and importlib.util.find_spec("workbench_runtime") is None:
    # loaded by file location: putting runtime/ on sys.path would also shadow the workbench's `tests` package
    _spec = importlib.util.spec_from_file_location(
        "workbench_runtime", _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["workbench_runtime"] = _module
    _spec.loader.exec_module(_module)
