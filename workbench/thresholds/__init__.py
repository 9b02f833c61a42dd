"""thresholds layer: risk–coverage surfaces, Learn-then-Test guarantees, choosing a routing rule.

``ThresholdOptions`` (the one options type), ``choose_thresholds`` and
``calibration_size_needed`` live in :mod:`workbench.thresholds.choose` and are re-exported here
(loaded on first use, so importing a submodule such as ``rules`` stays light).
"""

_CHOOSE = ("ThresholdOptions", "ThresholdResult", "choose_thresholds", "calibration_size_needed")


def __getattr__(name: str):
    if name in _CHOOSE:
        from workbench.thresholds import choose

        return getattr(choose, name)
    raise AttributeError(f"module 'workbench.thresholds' has no attribute {name!r}")


__all__ = list(_CHOOSE)
