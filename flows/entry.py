"""Console-script entry point of ``fairpca``: the process's defaults first (before anything
imports Prefect or MLflow, see :func:`fairpca.flows.runtime.set_process_defaults`), then a
check that the ``audit`` extra is installed before importing the command line, so a
library-only install gets one line, not a traceback."""

from __future__ import annotations

import sys
from importlib.util import find_spec

from . import runtime

# Import names of the packages the command line needs (the ``fairpca[audit]`` extra).
AUDIT_MODULES = (
    "prefect", "mlflow", "fairlearn", "matplotlib", "pydantic",
    "cyclopts", "rich", "yaml", "skops", "requests",
)  # fmt: skip


def missing_audit_modules() -> list[str]:
    """The import names of the ``audit`` extra that this environment lacks."""
    return [name for name in AUDIT_MODULES if find_spec(name) is None]


def main() -> None:
    """Run ``fairpca``; without the audit extra, exit at once saying what to install."""
    runtime.set_process_defaults()
    runtime.exit_on_signals("before any work started")
    if missing := missing_audit_modules():
        print(
            f"fairpca: the command line needs the audit extra (missing: {', '.join(missing)}); "
            "install it with: pip install 'fairpca[audit]'",
            file=sys.stderr,
        )
        raise SystemExit(1)
    from fairpca.flows.cli import main as cli_main

    runtime.run_and_exit(cli_main)
