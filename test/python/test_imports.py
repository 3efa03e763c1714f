"""The package's layers, read from its source: no import cycle anywhere, and the
runtime on the ground floor.

Every ``import`` statement counts, those inside functions (lazy imports)
included: a lazy import still ties the two modules together, and a cycle
through one is a cycle all the same. Only ``if TYPE_CHECKING:`` blocks are
left out: they never run.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

# Where ``anyshape`` and the packages mapped into it live (setup.py's ROOTS).
PACKAGES = ("anyshape", "anyshape.dialects", "anyshape.passes", "anyshape.tools")
# What the runtime may import besides itself: it runs with iree-base-runtime,
# numpy and torch alone.
RUNTIME_MAY_IMPORT = ("anyshape.runtime", "anyshape.errors", "anyshape.stages",
                      "anyshape.options")
# A server runs saved artifacts: it stands on the runtime alone, so that a
# replica needs no compiler.
SERVE_MAY_IMPORT = RUNTIME_MAY_IMPORT + ("anyshape.serve",)
TOP_LEVEL_MODULES_AT_MOST = 6


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        folder = Path(importlib.import_module(package).__file__).parent
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if any(part in ("__pycache__", "dev") for part in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            found.setdefault(name, path)
    return found


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, name: str, is_package: bool):
    """(line, imported name) of every import in ``tree`` outside TYPE_CHECKING blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join(here + ([node.module] if node.module else []))
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def _graph() -> dict[str, dict[str, int]]:
    """module -> {anyshape module it imports: the line of the first such import}"""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        edges = {}
        for line, target in _imports(ast.parse(path.read_text()), name,
                                     path.name == "__init__.py"):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back():
    graph = _graph()
    described = []
    for component in _cycles(graph):
        edges = [f"{a} -> {b} (line {graph[a][b]})" for a in component for b in sorted(graph[a])
                 if b in component]
        described.append("\n  ".join(edges))
    assert not described, "import cycles:\n  " + "\n\n  ".join(described)


def test_the_runtime_imports_nothing_above_it():
    graph = _graph()
    upward = [f"{name} -> {target} (line {line})"
              for name, edges in sorted(graph.items()) if name.startswith("anyshape.runtime")
              for target, line in sorted(edges.items())
              if target != "anyshape" and not target.startswith(RUNTIME_MAY_IMPORT)]
    assert not upward, "the runtime imports from above it:\n  " + "\n  ".join(upward)


def test_the_server_stands_on_the_runtime_alone():
    graph = _graph()
    above = [f"{name} -> {target} (line {line})"
             for name, edges in sorted(graph.items()) if name.startswith("anyshape.serve")
             for target, line in sorted(edges.items()) if not target.startswith(SERVE_MAY_IMPORT)]
    assert not above, "the server imports the compiler's layers:\n  " + "\n  ".join(above)


def test_the_driver_is_called_from_above_only():
    """The walk from ``anyshape.compile`` to the IREE call goes down through
    ``driver/`` and comes back to it from nowhere: only the API, the tools
    (and ``python -m anyshape.check``) and the driver itself import it."""
    graph = _graph()
    callers = ("anyshape.driver", "anyshape.tools", "anyshape.check")
    back = [f"{name} -> {target} (line {line})" for name, edges in sorted(graph.items())
            for target, line in sorted(edges.items())
            if target.startswith("anyshape.driver") and name != "anyshape"
            and not name.startswith(callers)]
    assert not back, "modules below the driver import it:\n  " + "\n  ".join(back)


def test_few_modules_at_the_top_of_the_package():
    folder = Path(importlib.import_module("anyshape").__file__).parent
    top = sorted(path.name for path in folder.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES_AT_MOST, top


@pytest.mark.parametrize("source, cycle", [
    ("import anyshape.b\n", "from anyshape import a\n"),
    ("def f():\n    from anyshape.b import g\n", "from anyshape.a import f\n"),
], ids=["module-level", "lazy"])
def test_negative_a_cycle_is_found(source, cycle, tmp_path):
    """/// The walk finds a cycle whether the import is at module level or lazy."""
    tree_a, tree_b = ast.parse(source), ast.parse(cycle)
    graph = {"anyshape.a": {t: 1 for _, t in _imports(tree_a, "anyshape.a", False)
                            if t == "anyshape.b"},
             "anyshape.b": {t: 1 for _, t in _imports(tree_b, "anyshape.b", False)
                            if t.startswith("anyshape.a")}}
    graph["anyshape.b"] = {"anyshape.a": 1} if graph["anyshape.b"] else {}
    assert _cycles(graph) == [["anyshape.a", "anyshape.b"]]


def test_negative_type_checking_imports_are_not_edges():
    """/// An import under ``if TYPE_CHECKING:`` never runs: it ties nothing."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from anyshape.b import c\n")
    assert [t for _, t in _imports(tree, "anyshape.a", False) if t.startswith("anyshape")] == []


def test_anyshape_opt_starts_without_torch():
    """``anyshape-opt`` runs once per pass in test_opt_compat (hundreds of
    processes) and in every lit test: importing torch (2 s and more) in its
    start-up would multiply both. Its modules take torch-only names under
    ``TYPE_CHECKING`` only."""
    import subprocess
    import sys

    probe = ("import sys, anyshape.tools.opt, anyshape.tools.opt_session; "
             "print(sorted({'torch', 'transformers'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
