"""The README's examples run as written: every ``python`` and ``bash`` block of README.md is
executed, in order (each ``python`` block alone, in a fresh process), in an empty folder that
holds this virtual environment as ``.venv`` (as a checkout does after the quick start), with
nothing else on ``PATH`` (see ``tests/code_blocks.py``). Only the blocks listed in EXCEPTIONS
are shown and not run, each with its reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest
from code_blocks import RUNNABLE, markdown_blocks, run_page, skipped, undefined_names
from servers import answers

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
READMES = [README]

# A piece of each block's code -> why the block is not run here.
EXCEPTIONS = {
    '.venv/bin/pip install -q -e ".[audit]"': (
        "creates a virtual environment and installs the checkout from the package registry "
        "(minutes); the audit it then runs is run by tests/flows and by the documentation's "
        "pages (tests/test_docs_examples.py)"
    ),
    ".venv/bin/mlflow ui": "starts the MLflow web server, which runs until stopped",
    '.venv/bin/pip install -q -e ".[dev]"': (
        "installs the checkout and runs this whole test suite (about 7 minutes on 2 idle "
        "cores): CI runs it verbatim (.ci/run)"
    ),
}


@pytest.mark.parametrize("readme", READMES, ids=lambda path: path.name)
def test_every_exception_names_one_block_and_every_block_is_python_or_bash(readme):
    blocks = markdown_blocks(readme.read_text())
    skipped(blocks, EXCEPTIONS)
    assert any(block.kind == "python" for block in blocks)
    shown = {block.kind for block in blocks} - set(RUNNABLE)
    assert not shown, f"{readme.name} has {shown} blocks: the README's examples run as written"


@pytest.mark.parametrize("readme", READMES, ids=lambda path: path.name)
def test_every_python_block_imports_or_defines_every_name_it_uses(readme, tmp_path):
    blocks = {
        f"{readme.name}:{block.line}": block.code
        for block in markdown_blocks(readme.read_text())
        if block.kind == "python"
    }
    assert blocks and undefined_names(blocks, tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("readme", READMES, ids=lambda path: path.name)
def test_readme_blocks_run_as_written(readme, tmp_path):
    done = run_page(readme, tmp_path, EXCEPTIONS, activated=False)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


def test_example_audit_yaml_is_the_default_configuration():
    """``audit.yaml`` at the repository root loads and equals the defaults it claims."""
    from fairpca.flows.cli import build_config
    from fairpca.flows.config import AuditConfig, load_config_file

    example = README.parent / "audit.yaml"
    assert "fairpca audit --config audit.yaml" in example.read_text()
    written = load_config_file(example)
    # written in sections, as the model is: each top-level key a section or a run setting
    assert sorted(written) == [
        "evaluation", "output", "representation", "seed", "selection", "source", "split",
        "tracking",
    ]  # fmt: skip
    assert written["evaluation"]["min_group_size"] == 30
    assert written["selection"]["thresholds"]["max_dp_difference"] == 0.05
    loaded = build_config({}, example, AuditConfig)
    default = AuditConfig(dataset="adult", sensitive=["sex"])
    assert loaded.model_dump() == default.model_dump()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc lists the processes")
def test_the_readme_mlflow_ui_is_light_and_sigterm_leaves_no_process(tmp_path, free_port):
    """The README's ``mlflow ui`` command, run as written (on a free port): one server process
    and no job runner (no huey consumer); SIGTERM to the command ends every process it
    started."""
    from fairpca.flows.runtime import _running, descendants

    (block,) = [b for b in markdown_blocks(README.read_text()) if "mlflow ui" in b.code]
    port = free_port()
    assert block.code.count("--port 5000") == 1
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_SERVER")}
    with (tmp_path / "ui.log").open("wb") as log:
        ui = subprocess.Popen(
            ["bash", "-c", block.code.replace("--port 5000", f"--port {port}")], cwd=tmp_path,
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not answers(f"http://127.0.0.1:{port}/health"):
            alive = ui.poll() is None and time.monotonic() < deadline
            assert alive, (tmp_path / "ui.log").read_text()
            time.sleep(0.5)
        tree = [ui.pid, *descendants(ui.pid)]
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in tree]
        assert not [c for c in commands if any(b"huey" in part for part in c)], commands
        assert len(tree) <= 3, commands  # bash (or the exec'd mlflow), mlflow, one server
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=15)
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in tree if _running(pid)], commands
    finally:
        with suppress(ProcessLookupError):
            os.killpg(ui.pid, signal.SIGKILL)
