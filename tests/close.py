"""Compare nested results (dicts, lists, numbers, strings) with a float tolerance.

``pytest.approx`` compares flat containers only (pytest 9 refuses nested ones); reports such as
``monitor``'s windows are lists of dicts of numbers, so they are walked here, leaf by leaf.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def assert_tree_close(got: Any, ref: Any, *, abs_tol: float, path: str = "$") -> None:
    """Assert ``got`` equals ``ref`` in structure and keys, floats within ``abs_tol``.

    Booleans, strings and None must be equal; ints and floats compare numerically (NaN equals NaN);
    the failure message names the first differing path, e.g. ``$.windows[3].error``.
    """
    if isinstance(ref, Mapping):
        assert isinstance(got, Mapping), f"{path}: {type(got).__name__} where a mapping was expected"
        assert set(got) == set(ref), f"{path}: keys differ: {sorted(set(got) ^ set(ref))}"
        for key in ref:
            assert_tree_close(got[key], ref[key], abs_tol=abs_tol, path=f"{path}.{key}")
    elif isinstance(ref, Sequence) and not isinstance(ref, str | bytes):
        assert isinstance(got, Sequence) and not isinstance(got, str | bytes), f"{path}: not a sequence"
        assert len(got) == len(ref), f"{path}: {len(got)} items, expected {len(ref)}"
        for i, (g, r) in enumerate(zip(got, ref)):
            assert_tree_close(g, r, abs_tol=abs_tol, path=f"{path}[{i}]")
    elif isinstance(ref, bool) or ref is None or isinstance(ref, str | bytes):
        assert got == ref, f"{path}: {got!r} != {ref!r}"
    elif isinstance(ref, int | float):
        assert isinstance(got, int | float) and not isinstance(got, bool), f"{path}: {got!r} is not a number"
        if math.isnan(ref):
            assert math.isnan(got), f"{path}: {got!r} != nan"
        else:
            assert got == ref or abs(got - ref) <= abs_tol, f"{path}: {got!r} != {ref!r} (tolerance {abs_tol})"
    else:
        assert got == ref, f"{path}: {got!r} != {ref!r}"
