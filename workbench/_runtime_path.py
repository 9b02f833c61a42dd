"""In a source checkout, import the runtime distribution from the checkout's own ``runtime/`` directory.

The workbench depends on ``decision-workbench-runtime``, which lives in ``runtime/`` of this repo. An
installed workbench (wheel) finds it installed next to it and this module does nothing. In a source
checkout (``PYTHONPATH=$PWD``, a git worktree, or an editable install) the sibling ``runtime/``
directory is put first on ``sys.path`` so the workbench and the runtime always come from the same
tree, never a runtime installed from another checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CHECKOUT_RUNTIME = Path(__file__).resolve().parents[1] / "runtime"

if (_CHECKOUT_RUNTIME / "workbench_runtime" / "__init__.py").is_file() and "workbench_runtime" not in sys.modules:
    if str(_CHECKOUT_RUNTIME) not in sys.path:
        sys.path.insert(0, str(_CHECKOUT_RUNTIME))
