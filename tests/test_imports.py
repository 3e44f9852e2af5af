"""Arrows go one way: no import cycle between tfdist's modules (``callbacks/`` included, imports inside
functions included), read from the source with ``ast``, without importing anything."""
from __future__ import annotations

import ast
from pathlib import Path

from support import REPO

PACKAGES = {"tfdist": REPO / "tfdist", "tfdist.callbacks": REPO / "callbacks"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The tfdist modules ``name`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    targets = set()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text())
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for inner in ast.walk(node)}  # imports for annotations only: no arrow at run time
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:  # `import tfdist.a.b` imports tfdist.a.b
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _without_package_reexports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``tfdist.strategies`` (a package ``__init__``) importing ``tfdist.strategies.options`` is the
    package assembling itself; a module inside it importing the package back is what makes a cycle, and
    that arrow is kept. Only the parent -> own-child arrows are dropped."""
    return {name: {t for t in targets if not t.startswith(name + ".")} for name, targets in graph.items()}


def test_the_reader_sees_lazy_and_relative_imports():
    graph = _graph()
    assert "tfdist.strategies.registry" in graph["tfdist.strategies.horovod"]
    assert "tfdist.export.destination" in graph["tfdist.strategies.base"]  # imported inside a method
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    cycles = _cycles(_without_package_reexports(_graph()))
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
