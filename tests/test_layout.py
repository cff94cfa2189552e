"""The tests mirror the modules: ``tests/<layer>/test_<module>.py``.

A layer folder holds the tests of one top-level folder of the repository; a test file there is
named for a module of that folder (``test_<module>.py``) or for one aspect of it
(``test_<module>_<aspect>.py``). A module ``fairpca/metrics/_fairness.py`` is named
``fairness`` or ``metrics_fairness`` (leading underscores dropped), a package by its folder.
Files that tell a story across modules are listed below, each with what it tells.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# tests/<layer> -> the folder of the repository whose modules it mirrors
LAYERS = {
    "library": ROOT / "fairpca",
    "tasks": ROOT / "tasks",
    "flows": ROOT / "flows",
    "benchmarks": ROOT / "benchmarks",
}
# tests/e2e runs the deployments and servers end to end: stories only, any name
STORY_LAYERS = {"e2e"}
STORIES = {
    "test_layering.py": "the import graph of every module: no cycle, no upward import",
    "test_layout.py": "this mirror of the modules",
    "test_packaging.py": "every third-party import is declared in pyproject.toml",
    "test_wheel.py": "the wheel installed into a fresh venv, next to a Prefect project",
    "test_readme_examples.py": "the README's code blocks run as written",
    "test_docs_examples.py": "the documentation pages' code blocks run as written",
    "test_docs_consistency.py": "the pages agree with the code and each other; links resolve",
    "test_hostile_inputs.py": "hostile and messy inputs through every entry point",
    "test_private_imports.py": "no module of tasks/ or flows/ imports another's underscore name",
    "test_function_length.py": "no function of tasks/ or flows/ over 60 code lines",
    "test_architecture_doc.py": "the architecture page's modules and stage functions exist",
    "test_message_style.py": "refusals are checked by type and message constant, not sentences",
    "library/test_purity.py": "every estimator: transform is pure, pickles small, reproducible",
    "library/test_numerics.py": "every estimator: huge values and impossible n_components",
    "benchmarks/test_committed_results.py": "the committed tables of benchmarks/results/",
}


def module_names(folder: Path) -> set[str]:
    """The names a test file of ``folder``'s layer may be named for."""
    names = set()
    for path in folder.rglob("*"):
        if path.is_dir() and (path / "__init__.py").is_file():
            parts = path.relative_to(folder).parts
        elif path.suffix == ".py" and not path.name.startswith("__"):
            parts = path.relative_to(folder).with_suffix("").parts
        else:
            continue
        parts = tuple(part.lstrip("_") for part in parts)
        if parts:
            names |= {parts[-1], "_".join(parts)}
    return names


def misnamed(test_files: list[str], modules: set[str]) -> list[str]:
    """The test files (``test_*.py`` names) named for no module of ``modules``."""
    out = []
    for name in test_files:
        stem = name.removeprefix("test_").removesuffix(".py")
        if stem not in modules and not any(stem.startswith(f"{m}_") for m in modules):
            out.append(name)
    return out


def test_every_test_file_of_a_layer_is_named_for_one_of_its_modules():
    problems = []
    for layer, folder in LAYERS.items():
        modules = module_names(folder)
        files = sorted(p.name for p in (TESTS / layer).glob("test_*.py"))
        files = [name for name in files if f"{layer}/{name}" not in STORIES]
        problems += [f"tests/{layer}/{name}" for name in misnamed(files, modules)]
    assert not problems, (
        f"{problems} are named for no module of their layer: name a test file "
        "test_<module>.py or test_<module>_<aspect>.py after the module it tests (rename it "
        "with the module), or add it to STORIES in tests/test_layout.py with what it tells"
    )


def test_tests_live_in_a_layer_or_are_listed_stories():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders == set(LAYERS) | STORY_LAYERS, (
        f"tests/ holds {sorted(folders)}: tests go in a layer, one of "
        f"{sorted(set(LAYERS) | STORY_LAYERS)}"
    )
    loose = sorted(p.name for p in TESTS.glob("test_*.py") if p.name not in STORIES)
    assert not loose, f"{loose} in tests/: move them to their layer or list them in STORIES"
    listed = sorted(name for name in STORIES if not (TESTS / name).is_file())
    assert not listed, f"STORIES lists {listed}, which do not exist: remove them"


def test_test_file_names_are_unique_across_layers():
    """pytest imports a test file by its name (the test folders are not packages)."""
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
