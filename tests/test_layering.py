"""The project's import graph: no cycle among its modules (imports inside function bodies
included) and no upward import (library -> tasks/flows, tasks -> flows). Every installed import
name starts with ``fairpca``: ``tasks/`` installs as ``fairpca.tasks``, ``flows/`` as
``fairpca.flows``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"fairpca": "fairpca", "tasks": "fairpca.tasks", "flows": "fairpca.flows"}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules that ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node, is_package)
            for alias in node.names:
                child = f"{source}.{alias.name}"
                targets.add(child if child in known else source)
    return {t for t in targets if t in known and t != module}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {module: _imports(module, path, known) for module, path in known.items()}


def _layer(module: str) -> int:
    if module.startswith("fairpca.flows"):
        return 2
    return 1 if module.startswith("fairpca.tasks") else 0


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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


def test_the_graph_sees_the_layers():
    graph = _graph()
    assert "fairpca.tasks.registry" in graph and "fairpca.flows.audit" in graph
    assert "fairpca.tasks.stages" in graph["fairpca.flows.audit"]


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_no_upward_import():
    upward = [
        (module, target)
        for module, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert upward == []


@pytest.mark.parametrize("folder", ["fairpca", "tasks", "flows", "tests", "deployments"])
def test_every_import_of_the_project_starts_with_fairpca(folder):
    bare = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bare += [(str(path), n) for n in names if n.split(".")[0] in {"tasks", "flows"}]
    assert bare == []
