"""No module of tasks/ or flows/ imports an underscore name of another module of the
project's orchestration (tasks/, flows/): what crosses a module boundary is public."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
MODULES = sorted([*PACKAGE.glob("tasks/*.py"), *PACKAGE.glob("flows/*.py")])


def imported_underscore_names(path: Path) -> list[str]:
    """``module.name`` of each underscore name ``path`` imports from tasks/ or flows/."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        ours = node.level > 0 or module.startswith(("fairpca.tasks", "fairpca.flows"))
        found += [f"{module}.{a.name}" for a in node.names if ours and a.name.startswith("_")]
    return found


def test_the_modules_are_found():
    assert {"audit.py", "report.py", "mlflow_logging.py"} <= {path.name for path in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_module_imports_an_underscore_name_of_another(path):
    assert imported_underscore_names(path) == []
