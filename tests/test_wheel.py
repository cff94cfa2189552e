"""The wheel, built from a checkout in which an audit wrote its output, installs only names
that start with ``fairpca`` and works, non-editable, from a user's Prefect project that has
its own ``flows/`` package and ``tasks.py`` module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What never belongs to a source checkout copy: environments, caches and build outputs.
NOT_COPIED = shutil.ignore_patterns(
    ".venv", ".git", "__pycache__", "*.egg-info", "build", "dist", ".prefect-home",
    ".pytest_cache", ".ruff_cache", "fairpca-output", "mlruns", "mlartifacts", "mlflow.db",
)  # fmt: skip
# The user's own modules, named like fairpca's repository folders: importing them is a bug.
SHADOWING_MODULES = {
    "flows/__init__.py": "raise ImportError('the project\\'s own flows package was imported')\n",
    "tasks.py": "raise ImportError('the project\\'s own tasks module was imported')\n",
}

# pip without the network and without the dependencies (they come from this interpreter)
OFFLINE = ("--no-deps", "--no-index", "--disable-pip-version-check")

pytestmark = pytest.mark.slow


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def _require_build_backend() -> None:
    """Skip, naming the fix, when this environment cannot build the wheel offline."""
    try:
        setuptools = _version_tuple(version("setuptools"))
    except PackageNotFoundError:
        setuptools = (0,)
    if setuptools < (68,):
        pytest.skip("building the wheel needs setuptools>=68: pip install 'setuptools>=68'")
    if setuptools < (70, 1):  # older setuptools take bdist_wheel from the wheel package
        try:
            version("wheel")
        except PackageNotFoundError:
            pytest.skip("building the wheel with setuptools<70.1 needs: pip install wheel")


def _run(args, *, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _checkout_after_an_audit(tmp_path: Path) -> Path:
    """A copy of the repository with an audit's output folder (holding Python files) in it."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=NOT_COPIED)
    output = checkout / "fairpca-output"
    (output / "run").mkdir(parents=True)
    (output / "__init__.py").write_text("")
    (output / "run" / "pipeline_code.py").write_text("print('audit output')\n")
    return checkout


def _expected_files(checkout: Path) -> set[str]:
    """Installed paths of every Python file under the mapped folders (fairpca/, tasks/,
    flows/, subpackages included, so a package missing from ``packages`` is caught) and of
    the bundled data."""
    package_dir = tomllib.loads((checkout / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    files = set()
    for package, folder in package_dir.items():
        source = checkout / folder
        for path in source.rglob("*.py"):
            inner = path.relative_to(source)
            if "__pycache__" not in inner.parts:
                files.add(f"{package.replace('.', '/')}/{inner.as_posix()}")
    data = checkout / "fairpca" / "data"
    files |= {f"fairpca/data/{p.relative_to(data)}" for p in data.rglob("*") if p.is_file()}
    templates = checkout / "tasks" / "templates"
    files |= {f"fairpca/tasks/templates/{p.name}" for p in templates.glob("*.j2")}
    return files


def _build_wheel(checkout: Path, tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", *OFFLINE, "--no-build-isolation"]
    _run([*pip_wheel, "-w", wheels, checkout], cwd=tmp_path)
    (wheel,) = wheels.glob("fairpca-*.whl")
    return wheel


def _dependency_dirs() -> list[str]:
    """This interpreter's site-packages directories (where fairpca's dependencies live)."""
    return [
        p
        for p in sys.path
        if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()
    ]


def _venv_with(wheel: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A fresh venv with the wheel installed (not editable, no dependencies); the test
    interpreter's site-packages follow as plain ``.pth`` path lines, so their ``.pth`` files
    (e.g. an editable finder of the checkout) never run. Returns (python, site-packages)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", python, "install", *OFFLINE, wheel],
        cwd=tmp_path,
    )
    site = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path
    ).stdout.strip()
    (Path(site) / "zz_test_dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    return python, Path(site)


def _user_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for name, text in SHADOWING_MODULES.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    return project


def test_wheel_holds_only_fairpca_names_and_works_from_a_prefect_project(tmp_path):
    _require_build_backend()
    checkout = _checkout_after_an_audit(tmp_path)
    wheel = _build_wheel(checkout, tmp_path)

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (dist_info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
        top_level = archive.read(f"{dist_info}/top_level.txt").decode().split()
    assert dist_info == "fairpca-0.1.0.dist-info"
    assert top_level == ["fairpca"]
    assert {n.split("/")[0] for n in names} == {"fairpca", dist_info}
    assert {n for n in names if not n.startswith(dist_info)} == _expected_files(checkout)
    assert "fairpca/tasks/mlflow_evaluator.py" in names  # the mapping reached the wheel
    assert "fairpca/flows/__main__.py" in names
    assert "fairpca/tasks/templates/report.html.j2" in names  # the report's template

    python, site = _venv_with(wheel, tmp_path)
    project = _user_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")

    where = _run([python, "-c", "import fairpca; print(fairpca.__file__)"], cwd=project, env=env)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout

    console = _run([python.parent / "fairpca", "audit", "--help"], cwd=project, env=env)
    assert "--dataset" in console.stdout and "--dask-address" in console.stdout

    module = _run([python, "-m", "fairpca.flows", "--help"], cwd=project, env=env)
    assert "audit" in module.stdout

    check = textwrap.dedent(
        """
        import inspect
        from importlib.metadata import entry_points

        import fairpca.tasks.public as public
        from fairpca.tasks.public import *  # noqa: F403
        from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

        assert public.__all__, "no public tasks"
        missing = [name for name in public.__all__ if name not in globals()]
        assert not missing, missing
        evaluator = _model_evaluation_registry.get_evaluator("fairness")
        print(type(evaluator).__module__, inspect.getfile(type(evaluator)))
        points = entry_points(group="mlflow.model_evaluator", name="fairness")
        print(sorted({p.value for p in points}))
        """
    )
    found = _run([python, "-c", check], cwd=project, env=env).stdout.splitlines()
    module_name, path = found[0].split()
    assert module_name == "fairpca.tasks.mlflow_evaluator"
    assert Path(path).is_relative_to(site)
    assert found[1] == "['fairpca.tasks.mlflow_evaluator:FairnessEvaluator']"
