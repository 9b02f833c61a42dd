"""Assert a venv holds only the runtime distribution, numpy, pydantic and their own dependencies (and pytest's).

Run with the venv's interpreter. The allowed set is the dependency closure of the runtime's base
requirements plus pytest's, read from the installed metadata; the runtime's own direct requirements
must be exactly numpy and pydantic, so the closure cannot grow by adding a dependency to it.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

RUNTIME = "decision-workbench-runtime"
ALLOWED_DIRECT = {"numpy", "pydantic"}
TOOLING = {"pip", "setuptools", "wheel"}  # the venv's own installer


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def base_requirements(dist: str) -> set[str]:
    """Names a distribution requires unconditionally (no extras; environment markers evaluated)."""
    from packaging.requirements import Requirement  # pytest depends on packaging

    out = set()
    for line in metadata.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        out.add(norm(req.name))
    return out


def closure(roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(base_requirements(name) - seen)
        except metadata.PackageNotFoundError:
            pass
    return seen


def main() -> int:
    direct = base_requirements(RUNTIME)
    if direct != ALLOWED_DIRECT:
        print(f"{RUNTIME} requires {sorted(direct)}, expected exactly {sorted(ALLOWED_DIRECT)}", file=sys.stderr)
        return 1
    allowed = closure({norm(RUNTIME), "pytest"}) | TOOLING
    installed = {norm(d.metadata["Name"]) for d in metadata.distributions()}
    extra = sorted(installed - allowed)
    if extra:
        print(f"the runtime venv holds packages beyond numpy, pydantic and pytest: {extra}", file=sys.stderr)
        return 1
    print(f"runtime venv ok: {', '.join(sorted(installed))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
