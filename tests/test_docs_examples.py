"""The documentation's pages run as written: every ``python`` and ``bash`` code block of each
page under ``docs/`` is executed, in order, in an empty folder, in the virtual environment
activated, each ``python`` block alone in a fresh process, as a reader pastes it (see
``tests/code_blocks.py``); a fast test checks without running them that every block imports
or defines each name it uses. The flows of a page report to the session's Prefect
test server (``PREFECT_API_URL``) rather than each starting a temporary server, which
tests/flows/test_server.py and test_cli.py cover. The gallery (``examples/``) runs when the
docs are built (``python -m sphinx -W -b html docs _build``, in CI after the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from code_blocks import (
    RUNNABLE,
    markdown_blocks,
    page_blocks,
    run_page,
    skipped,
    undefined_names,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
GENERATED = {"_build", "auto_examples", "generated", "_templates", "sg_execution_times.rst"}
PAGES = sorted(
    path.relative_to(DOCS).as_posix()
    for path in [*DOCS.rglob("*.rst"), *DOCS.rglob("*.md")]
    if not GENERATED & set(path.relative_to(DOCS).parts)
)

SERVERS = "deployments/ci_e2e.sh runs it against real servers (CI, after the tests)"
# Blocks that are shown, not run: page -> {a piece of the block's code: why}. Each must name
# exactly one block of its page.
EXCEPTIONS: dict[str, dict[str, str]] = {
    "getting_started.rst": {
        '.venv/bin/pip install -q -e ".[audit]"': (
            "creates a virtual environment and installs the checkout from the package registry "
            "(minutes); the audit it runs is run on the pages audit.rst and verdict.rst"
        ),
        ".venv/bin/mlflow ui": "starts the MLflow web server, which runs until stopped",
        '.venv/bin/pip install -q -e ".[dev]"': (
            "installs the checkout and runs this whole test suite (about 7 minutes on 2 idle "
            "cores): CI runs it verbatim (.ci/run)"
        ),
    },
    "user_guide/verdict.rst": {
        "mlflow models serve": "starts a model server that runs until stopped; "
        "tests/flows/test_audit_scoring.py serves a registered version and scores it",
    },
    "user_guide/gate.rst": {
        "fairpca gate serve": "starts the webhook receiver, which runs until stopped; "
        "tests/e2e/gate_e2e.py runs it (" + SERVERS + ")",
        "fairpca gate register": "needs an MLflow tracking server with webhooks; "
        "tests/e2e/gate_e2e.py registers one (" + SERVERS + ")",
        "fairpca gate reconcile": "needs a registry with gated versions and the gate's key; "
        "tests/e2e/gate_e2e.py and tests/flows/test_gate.py run it",
    },
    "user_guide/deployments.rst": {
        "mlflow server": "starts the MLflow tracking server, which runs until stopped; " + SERVERS,
        "prefect server start": "starts the Prefect server, which runs until stopped; " + SERVERS,
        "prefect work-pool create": "needs the Prefect server of step 2; " + SERVERS,
        "FAIRPCA_DATA_DIR=$PWD/../shared/datasets": "starts a worker, which runs until stopped; "
        + SERVERS,
        "prefect deployment run": "needs the servers and the worker of steps 1-4; " + SERVERS,
        "FAIRPCA_GATE_POLICY_DIR=/etc/fairpca/policies": "starts the gate's worker, which runs "
        "until stopped; tests/e2e/gate_e2e.py runs it",
        "bash deployments/ci_e2e.sh": "starts servers and runs for many minutes; CI runs it "
        "after the tests (.ci/run)",
    },
}


def test_the_pages_are_found_and_every_exception_names_one_block():
    assert {"index.rst", "getting_started.rst", "api.rst"} <= set(PAGES)
    for page, exceptions in EXCEPTIONS.items():
        assert page in PAGES, f"EXCEPTIONS names {page}, which is not a page"
        skipped(page_blocks(DOCS / page), exceptions)


def test_every_python_block_imports_or_defines_every_name_it_uses(tmp_path):
    """A block pasted alone into a fresh Python runs: it uses no name (``np``, ``adult``) that
    only an earlier block of its page defines. The e2e test below runs each block alone."""
    blocks = {}
    for page in PAGES:
        page_code = page_blocks(DOCS / page)
        shown = skipped(page_code, EXCEPTIONS.get(page, {}))
        for index, block in enumerate(page_code):
            if block.kind == "python" and index not in shown:
                blocks[f"{page}:{block.line}"] = block.code
    assert len(blocks) > 20, "the pages' python blocks were not found"
    assert undefined_names(blocks, tmp_path) == []


def test_every_gallery_example_draws_a_figure():
    """sphinx-gallery shows an example's first matplotlib figure as its thumbnail and result:
    an example without one is a blank tile in the gallery."""
    examples = sorted((DOCS.parent / "examples").glob("plot_*.py"))
    assert examples
    blank = [
        path.name
        for path in examples
        if "import matplotlib.pyplot as plt" not in (text := path.read_text())
        or ("plt.subplots(" not in text and "plt.figure(" not in text)
    ]
    assert blank == []


def _fairpca_command_lines(code: str) -> list[list[str]]:
    """The arguments of each ``fairpca <command> ...`` of a code block (a line continued
    with a backslash joined)."""
    import re
    import shlex

    pattern = r"(?:^|[\s/])fairpca ((?:audit|retrain|relog|gate)\b[^#|&;\n]*)"
    found = re.findall(pattern, code.replace("\\\n", " "), flags=re.MULTILINE)
    return [shlex.split(command) for command in found]


def test_every_fairpca_command_in_the_docs_is_read_by_the_command_line():
    """Each ``fairpca ...`` in a code block of README.md, deployments/README.md or a page
    names options the command line has (read, not run: the pages' runs are the e2e test
    below)."""
    from fairpca.flows.cli import app

    readmes = [DOCS.parent / "README.md", DOCS.parent / "deployments" / "README.md"]
    blocks = [*(b for path in readmes for b in markdown_blocks(path.read_text())),
              *(b for page in PAGES for b in page_blocks(DOCS / page))]  # fmt: skip
    commands = [args for block in blocks for args in _fairpca_command_lines(block.code)]
    assert len(commands) > 10, "the docs' fairpca commands were not found"
    for args in commands:
        app.parse_args(args, exit_on_error=False, print_error=False)  # raises on an unknown


# Code that runs a Prefect flow (the audit's command line, a flow of the page's own).
FLOWS = ("fairpca audit", "fairpca retrain", "fairpca relog", "fairness_audit(", "@flow")


@pytest.mark.slow
@pytest.mark.e2e  # whole audits on several pages: CI runs them (pytest -m e2e)
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_written(page, tmp_path, request):
    blocks = page_blocks(DOCS / page)
    shown = skipped(blocks, EXCEPTIONS.get(page, {}))
    run = [b for i, b in enumerate(blocks) if b.kind in RUNNABLE and i not in shown]
    if not run:
        pytest.skip(f"{page} has no python or bash block to run")
    env = {}
    if any(marker in block.code for block in run for marker in FLOWS):
        request.getfixturevalue("prefect_harness")
        from prefect.settings import PREFECT_API_URL

        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    done = run_page(DOCS / page, tmp_path, EXCEPTIONS.get(page, {}), activated=True, env=env)
    assert done.returncode == 0, f"{page}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
