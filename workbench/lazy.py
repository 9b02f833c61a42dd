"""Names a package re-exports from its modules, loaded on first use (PEP 562).

``import workbench`` and ``import workbench.metrics`` stay light (no numpy, pandas, duckdb, plotly)
because the names they re-export are imported only when first looked up.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), where
    ``homes[name]`` is the module that defines ``name``.

    A name is imported from its home on first lookup and kept in the package's namespace, so later
    lookups skip ``__getattr__``; any other name raises :class:`AttributeError` as a module does.
    """

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
