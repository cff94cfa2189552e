"""docs/architecture.rst names modules and stage functions that exist, and is in the docs'
table of contents."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.rst"


def named_modules() -> set[str]:
    return set(re.findall(r"``(fairpca\.(?:tasks|flows)\.\w+)``", PAGE.read_text()))


def test_every_module_the_page_names_exists():
    modules = named_modules()
    assert {"fairpca.flows.audit", "fairpca.tasks.report", "fairpca.tasks.data"} <= modules
    missing = [name for name in sorted(modules) if importlib.util.find_spec(name) is None]
    assert missing == []


def test_every_function_the_page_names_is_in_a_module_of_its_stage():
    """Each ``name`` of a row is defined in one of the modules that row names."""
    table = re.split(r"\n\n(?=\S)", PAGE.read_text().split(".. list-table::", 1)[1])[0]
    rows = re.split(r"\n   \* - ", table)[2:]
    unknown = []
    for row in rows:
        modules = [importlib.import_module(m) for m in re.findall(r"``(fairpca\.\w+\.\w+)``", row)]
        for name in re.findall(r"``([a-z_]+)``", row):
            if not any(hasattr(module, name) for module in modules):
                unknown.append(name)
    assert unknown == []


def test_the_page_is_in_the_table_of_contents():
    index = (ROOT / "docs" / "index.rst").read_text()
    assert re.search(r"toctree::[^\n]*\n(?:   .*\n|\n)*   architecture\n", index)
