"""Which ``workbench_runtime`` the tests exercise.

- ``WORKBENCH_RUNTIME_TEST_INSTALLED=1`` (the clean-venv CI run, started outside ``runtime/``): the
  installed distribution, as a production service would import it.
- otherwise (a checkout, possibly one of several worktrees sharing one environment): this checkout's
  own ``runtime/workbench_runtime``, loaded by file location — putting ``runtime/`` on ``sys.path``
  would also shadow the workbench's ``tests`` package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1] / "workbench_runtime"


def _load_checkout_package() -> None:
    spec = importlib.util.spec_from_file_location(
        "workbench_runtime", _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["workbench_runtime"] = module
    spec.loader.exec_module(module)


if os.environ.get("WORKBENCH_RUNTIME_TEST_INSTALLED") == "1":
    import workbench_runtime

    assert Path(workbench_runtime.__file__).resolve().parent != _PACKAGE, "expected the installed runtime"
elif "workbench_runtime" not in sys.modules:
    _load_checkout_package()
else:
    loaded = Path(sys.modules["workbench_runtime"].__file__ or "").resolve().parent
    assert loaded == _PACKAGE, f"workbench_runtime was imported from {loaded}, not from this checkout"
