"""The layering of CONTRIBUTING.md, enforced: no module imports a higher floor, no cycles among packages
nor among modules, no private name imported from another package.

Every ``import workbench.X`` / ``from workbench.X import …`` in ``workbench/`` counts, including the
lazy ones inside functions (a lazy import still makes the lower floor depend on the higher one, and a
lazy import back into a module that imports you is still a cycle).
A new top-level module or package must be given a floor in :data:`FLOORS` (and in CONTRIBUTING.md).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"

#: Floor of each top-level unit of ``workbench`` (a subpackage or a module); an import may only go to
#: the same floor or lower. Keep in step with the table in CONTRIBUTING.md.
FLOORS: dict[str, int] = {
    # 0: foundations (no workbench imports but each other)
    "errors": 0,
    "lazy": 0,
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
    "workflows": 7,
    "shadow": 7,
    "monitor": 7,
    "engines": 7,
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


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
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


# -- modules: cycles and private names ------------------------------------------------------------

#: Module-level cycles being removed elsewhere, as sorted tuples of their modules, with the reason;
#: keep this empty.
KNOWN_MODULE_CYCLES: dict[tuple[str, ...], str] = {}

#: Private names imported from another package being removed elsewhere, ``(importer, "module.name")``
#: with the reason; keep this empty.
KNOWN_PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class ModuleImport:
    """One import of a ``workbench`` module by another: ``src`` imports ``dst`` at ``where`` (file:line),
    naming ``name`` (``from dst import name``; ``None`` for ``import dst`` or a submodule import)."""

    src: str
    dst: str
    where: str
    name: str | None = None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_imports(package: Path) -> list[ModuleImport]:
    """Every import of one module of ``package`` by another (lazy ones inside functions included).

    ``from a.b import c`` imports module ``a.b.c`` when that is a module of the package (else the name
    ``c`` of ``a.b``); ``import a.b.c`` imports ``a.b.c``. The packages a module is in are not counted
    (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, but depends on neither), so a
    package ``__init__`` that re-exports its submodules is no cycle. ``m._x`` after ``import a.m as m``
    (or ``from a import m``) counts as a use of the name ``_x`` of ``a.m``.
    """
    root = package.parent
    paths = {_module_name(p, root): p for p in sorted(package.rglob("*.py"))}
    top = package.name
    out: list[ModuleImport] = []
    for src, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bound: dict[str, str] = {}  # local name -> module it stands for
        for node in ast.walk(tree):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == top:
                        out.append(ModuleImport(src, a.name, where))
                        if a.asname:
                            bound[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] != top:
                    continue
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in paths:
                        out.append(ModuleImport(src, sub, where))
                        bound[a.asname or a.name] = sub
                    else:
                        out.append(ModuleImport(src, node.module, where, a.name))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _is_private(node.attr)
            ):
                where = f"{path.relative_to(root)}:{node.lineno}"
                out.append(ModuleImport(src, bound[node.value.id], where, node.attr))
    return [m for m in out if m.dst != m.src]


def module_cycles(imports: list[ModuleImport]) -> list[list[tuple[str, str]]]:
    """One cycle per strongly connected set of modules, as ``[(module, "file:line" of its import of the
    next one), …]`` (the last imports the first), found with Tarjan's algorithm and a shortest path."""
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for m in imports:
        graph[m.src].setdefault(m.dst, m.where)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                connect(v)
    finally:
        sys.setrecursionlimit(limit)

    cycles = []
    for component in components:
        inside = set(component)
        start = component[0]
        # breadth-first from start back to start, inside the component: a shortest cycle through it
        came: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in inside and w not in came:
                        came[w] = v
                        nxt.append(w)
            frontier = nxt
        back = [came[start]]  # walking the cycle backwards from start: who imports start, who imports that, ...
        while back[-1] != start:
            back.append(came[back[-1]])
        path = [start, *reversed(back[:-1])]  # start imports path[1], ..., and path[-1] imports start
        cycles.append([(v, graph[v][path[(i + 1) % len(path)]]) for i, v in enumerate(path)])
    return cycles


def _describe_cycle(cycle: list[tuple[str, str]]) -> str:
    names = [v for v, _ in cycle]
    steps = "\n".join(f"    {v} imports {names[(i + 1) % len(names)]} at {where}" for i, (v, where) in enumerate(cycle))
    return " -> ".join([*names, names[0]]) + "\n" + steps


def test_no_cycles_among_modules():
    """No module imports, directly or through others, a module that imports it (lazy imports included:
    a cycle broken only by importing inside a function still ties the two modules together)."""
    cycles = [
        c for c in module_cycles(module_imports(PACKAGE)) if tuple(sorted(v for v, _ in c)) not in KNOWN_MODULE_CYCLES
    ]
    assert not cycles, (
        f"{len(cycles)} module cycle(s); move what both need down into a module neither imports, or invert one import:\n"
        + "\n".join(_describe_cycle(c) for c in cycles)
    )


def private_imports(imports: list[ModuleImport]) -> list[ModuleImport]:
    """Imports of a private name (``_x``, not ``__x__``) or of a private module from another module."""
    return [
        m
        for m in imports
        if (m.name is not None and _is_private(m.name)) or any(_is_private(part) for part in m.dst.split(".")[1:])
    ]


def _crosses_packages(m: ModuleImport) -> bool:
    return _unit(m.src) != _unit(m.dst)


def test_no_private_name_is_imported_from_another_module():
    """A name another module needs is API: public, with a docstring stating its shapes and ranges (across
    packages as within one: a private name is private to its module)."""
    found = [
        f"{m.where}: {m.src} imports {m.dst}" + (f".{m.name}" if m.name else "")
        for m in private_imports(module_imports(PACKAGE))
        if (m.src, f"{m.dst}.{m.name}" if m.name else m.dst) not in KNOWN_PRIVATE_IMPORTS
    ]
    assert not found, (
        f"{len(found)} private name(s) imported from another module; make them public (documented) or move them:\n"
        + "\n".join(found)
    )


def test_the_checker_sees_module_cycles_and_private_names(tmp_path):
    """A cycle made by a lazy import, the file and line of each import of it, and a private name taken
    from another package, both as ``from m import _x`` and as ``m._x``; a package that re-exports its
    submodules is no cycle."""
    pkg = tmp_path / "workbench"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from workbench.a.one import f\n")
    (pkg / "a" / "one.py").write_text("from workbench.a.two import g\n\n\ndef f():\n    return g()\n")
    (pkg / "a" / "two.py").write_text(
        "def g():\n    from workbench.a import one\n\n    return one\n\n\ndef _h():\n    return 1\n"
    )
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "three.py").write_text(
        "from workbench.a.two import _h\nfrom workbench.a import two\n\n\ndef k():\n    return _h() + two._h()\n"
    )
    imports = module_imports(pkg)
    cycles = module_cycles(imports)
    assert len(cycles) == 1
    assert cycles[0] == [("workbench.a.one", "workbench/a/one.py:1"), ("workbench.a.two", "workbench/a/two.py:2")]
    assert "workbench.a.one -> workbench.a.two -> workbench.a.one" in _describe_cycle(cycles[0])
    private = private_imports(imports)
    assert sorted((m.src, m.dst, m.name, m.where) for m in private) == [
        ("workbench.b.three", "workbench.a.two", "_h", "workbench/b/three.py:1"),
        ("workbench.b.three", "workbench.a.two", "_h", "workbench/b/three.py:6"),
    ]
    assert all(_crosses_packages(m) for m in private)


#: Where SQL may run: the store (floor 1) and the two SQL engines of their own data — ``engines/`` (one SQL
#: text on DuckDB or Spark over answer files) and ``monitor/`` (the decision-log store it reads and writes).
SQL_UNITS = {"store", "engines", "monitor"}


def sql_calls(package: Path) -> list[str]:
    """``where`` of every ``X.execute(...)`` / ``X.executemany(...)`` / ``X.sql(...)`` call outside :data:`SQL_UNITS`."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if _unit(_module_name(path, package.parent)) in SQL_UNITS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany", "sql")
            ):
                out.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return out


def test_sql_runs_only_in_the_store():
    """A workflow, surface or maths module asks a ``store`` function; it never writes SQL of its own."""
    found = sql_calls(PACKAGE)
    assert not found, "SQL outside store/ (move it into a store function):\n" + "\n".join(found)


def test_the_checker_sees_sql_outside_the_store(tmp_path):
    pkg = tmp_path / "workbench"
    for unit in ("store", "workflows"):
        (pkg / unit).mkdir(parents=True)
        (pkg / unit / "__init__.py").write_text("")
    (pkg / "store" / "runs.py").write_text("def f(con):\n    return con.execute('SELECT 1')\n")
    (pkg / "workflows" / "report.py").write_text("def g(con):\n    return con.sql('SELECT 1')\n")
    assert sql_calls(pkg) == ["workbench/workflows/report.py:2"]


if __name__ == "__main__":  # python tests/test_layering.py: the counts the tests above keep at 0, and more
    found = module_imports(PACKAGE)
    private = private_imports(found)
    print(f"module cycles: {len(module_cycles(found))}")
    for label, rows in (
        ("private names imported across packages", [m for m in private if _crosses_packages(m)]),
        ("private names imported across modules", private),
    ):
        print(f"{label}: {len({(m.src, m.dst, m.name) for m in rows})} (importer, module, name)")
        for m in rows:
            print(f"    {m.where}: {m.src} imports {m.dst}" + (f".{m.name}" if m.name else ""))
