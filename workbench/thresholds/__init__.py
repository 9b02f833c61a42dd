"""thresholds layer: risk–coverage surfaces, Learn-then-Test guarantees, choosing a routing rule.

``ThresholdOptions`` (the one options type) and ``calibration_size_needed`` live in
:mod:`workbench.thresholds.options`, ``ThresholdResult`` in :mod:`workbench.thresholds.result` and
``choose_thresholds`` in :mod:`workbench.thresholds.choose`; all are re-exported here (loaded on first
use, so importing a submodule such as ``rules`` stays light).
"""

import importlib

_HOMES = {
    "ThresholdOptions": "workbench.thresholds.options",
    "ThresholdResult": "workbench.thresholds.result",
    "choose_thresholds": "workbench.thresholds.choose",
    "calibration_size_needed": "workbench.thresholds.options",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'workbench.thresholds' has no attribute {name!r}")


__all__ = list(_HOMES)
