"""In a source checkout, import the runtime distribution from the checkout's own ``runtime/`` directory.

The workbench depends on ``decision-workbench-runtime``, which lives in ``runtime/`` of this repo. An
installed workbench (wheel) finds it installed next to it and this module does nothing. In a source
checkout (``PYTHONPATH=$PWD``, a git worktree, or an editable install) the package
``runtime/workbench_runtime`` is imported from that tree, so the workbench and the runtime always come
from the same checkout, never a runtime installed from another one. It is loaded by file location
rather than by adding ``runtime/`` to ``sys.path``, which would also expose ``runtime/tests`` as ``tests``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1] / "runtime" / "workbench_runtime"


def _load_checkout_runtime() -> None:
    spec = importlib.util.spec_from_file_location(
        "workbench_runtime", _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["workbench_runtime"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["workbench_runtime"]
        raise


if (_PACKAGE / "__init__.py").is_file() and "workbench_runtime" not in sys.modules:
    _load_checkout_runtime()
