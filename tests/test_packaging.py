"""Every third-party module that fairpca/, tasks/ and flows/ import is declared in
pyproject.toml: the library's module-level imports in the core dependencies, the app's in the
core or the ``audit``/``dask`` extras."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCAL = {"fairpca", "benchmarks", "deployments"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"core": project["dependencies"], **project["optional-dependencies"]}
    return {
        group: {_canonical(re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]) for req in reqs}
        for group, reqs in groups.items()
    }


def _imports(path: Path, *, module_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in LOCAL}


@cache
def _installed() -> dict[str, list[str]]:
    return packages_distributions()


def _distributions(module: str) -> set[str]:
    found = _installed().get(module)
    if not found:
        pytest.fail(f"{module} is imported but no installed distribution provides it")
    return {_canonical(d) for d in found}


def _undeclared(package: str, allowed_groups: tuple[str, ...], module_level_only: bool):
    declared = _declared()
    allowed = set().union(*(declared[g] for g in allowed_groups))
    missing = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in _imports(path, module_level_only=module_level_only):
            if not _distributions(module) & allowed:
                missing.setdefault(module, []).append(str(path.relative_to(ROOT)))
    return missing


def test_library_imports_only_core_dependencies_at_module_level():
    assert _undeclared("fairpca", ("core",), module_level_only=True) == {}


def test_library_lazy_imports_are_declared_in_some_extra():
    groups = tuple(_declared())
    assert _undeclared("fairpca", groups, module_level_only=False) == {}


@pytest.mark.parametrize("package", ["tasks", "flows"])
def test_app_imports_are_declared_in_core_or_audit(package):
    assert _undeclared(package, ("core", "audit", "dask"), module_level_only=False) == {}


def test_library_never_imports_prefect_or_mlflow():
    for path in (ROOT / "fairpca").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            assert not {"prefect", "mlflow"} & set(names), path


def test_core_dependencies_exclude_the_application_stack():
    core = _declared()["core"]
    assert not core & {"prefect", "mlflow", "fairlearn", "matplotlib", "pyarrow"}
