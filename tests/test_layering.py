"""The layering of CONTRIBUTING.md, enforced: no module imports a higher floor, no cycles among packages.

Every ``import workbench.X`` / ``from workbench.X import …`` in ``workbench/`` counts, including the
lazy ones inside functions (a lazy import still makes the lower floor depend on the higher one).
A new top-level module or package must be given a floor in :data:`FLOORS` (and in CONTRIBUTING.md).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"

#: Floor of each top-level unit of ``workbench`` (a subpackage or a module); an import may only go to
#: the same floor or lower. Keep in step with the table in CONTRIBUTING.md.
FLOORS: dict[str, int] = {
    # 0: foundations (no workbench imports but each other)
    "errors": 0,
    "reporting": 0,
    "schema": 0,
    "answers": 0,
    "wording": 0,
    # 1: data
    "store": 1,
    "bundled": 1,
    # 2: providers
    "providers": 2,
    # 3: running providers over datasets, and the emulated service
    "runner": 3,
    "emulator": 3,
    "probes": 3,
    # 4-6: the pure maths and the policy
    "metrics": 4,
    "thresholds": 5,
    "policy": 6,
    # 7: workflows over the store (load, compute, store)
    "evaluation": 7,
    "workflows": 7,
    "experiments": 7,
    "probe_report": 7,
    "comparison": 7,
    "shadow": 7,
    "gate": 7,
    "monitor": 7,
    "engines": 7,
    "figures": 7,
    # 8: the Python front door and the demo
    "api": 8,
    "demo": 8,
    "__init__": 8,
    # 9: thin surfaces
    "cli": 9,
    "ui": 9,
    "__main__": 9,
}

#: Names lower floors may import from the package root (metadata, not the API façade).
ROOT_METADATA = {"__version__"}

#: Known climbs being removed elsewhere, with the reason; keep this empty.
KNOWN_CLIMBS: dict[tuple[str, str], str] = {}


def _unit(module: str) -> str:
    """``workbench.store.runs`` -> ``store``; ``workbench`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute ``workbench`` modules imported anywhere in ``path`` (``from workbench import x`` -> x)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "workbench"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "workbench":  # a submodule by name, else the package root (the API facade)
                for a in node.names:
                    if a.name in ROOT_METADATA:
                        continue
                    sub = PACKAGE / a.name
                    is_module = sub.is_dir() or sub.with_suffix(".py").exists()
                    out.append((f"workbench.{a.name}" if is_module else "workbench", node.lineno))
            elif node.module.split(".")[0] == "workbench":
                out.append((node.module, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}:{node.lineno}: relative import; the project uses absolute imports")
    return out


def _edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, "file:line") for every import across units."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _unit(_module_name(path))
        for module, line in _imports(path):
            dst = _unit(module)
            if dst != src:
                edges.append((src, dst, f"{path.relative_to(ROOT)}:{line}"))
    return edges


def test_every_unit_has_a_floor():
    units = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    missing = sorted(units - set(FLOORS))
    assert not missing, f"give {missing} a floor in tests/test_layering.py FLOORS and in CONTRIBUTING.md"


def test_no_import_climbs_to_a_higher_floor():
    climbs = [
        f"{where}: {src} (floor {FLOORS[src]}) imports {dst} (floor {FLOORS[dst]})"
        for src, dst, where in _edges()
        if src in FLOORS and dst in FLOORS and FLOORS[dst] > FLOORS[src] and (src, dst) not in KNOWN_CLIMBS
    ]
    assert not climbs, "imports that climb:\n" + "\n".join(climbs)


#: Pure maths: takes arrays, never reads or writes the store (a workflow one floor up does that).
PURE = {"metrics", "thresholds"}
IO_UNITS = {"store", "providers", "runner", "emulator"}


def test_the_pure_maths_never_touches_the_store():
    """metrics/ and thresholds/ compute on arrays (``RunAnswers``); loading and saving live in floor 7."""
    touches = [f"{where}: {src} imports {dst}" for src, dst, where in _edges() if src in PURE and dst in IO_UNITS]
    assert not touches, "pure maths reading or writing the store:\n" + "\n".join(touches)


def test_no_cycles_among_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst, _ in _edges():
        if (src, dst) not in KNOWN_CLIMBS:
            graph[src].add(dst)
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            pytest.fail("package cycle: " + " -> ".join(cycle))


def test_the_runtime_distribution_imports_no_workbench_module():
    runtime = ROOT / "runtime" / "workbench_runtime"
    if not runtime.is_dir():
        pytest.skip("no runtime distribution in this checkout")
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {m}"
        for p in sorted(runtime.rglob("*.py"))
        for m, line in _imports(p)
        if m.split(".")[0] == "workbench"
    ]
    assert not bad, "the runtime must not depend on the workbench:\n" + "\n".join(bad)


def test_the_checker_sees_a_climbing_import(tmp_path):
    """The walk finds lazy imports inside functions (what the four climbing imports were)."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from workbench.cli.common import err_console\n    return err_console\n")
    assert _imports(f) == [("workbench.cli.common", 2)]
