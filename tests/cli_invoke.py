"""Run the ``fairpca`` command line in the test's process, as its console entry runs it:
the exit code and what it printed (stdout and stderr in the order printed, and stdout)."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass


@dataclass(frozen=True)
class Invoked:
    """What one command printed, and its exit code."""

    exit_code: int
    output: str
    stdout: str


class _Both(io.StringIO):
    """A stream that also writes into ``together`` (stdout and stderr in order)."""

    def __init__(self, together: io.StringIO) -> None:
        super().__init__()
        self.together = together

    def write(self, text: str) -> int:
        self.together.write(text)
        return super().write(text)


def invoke(args: list[str], env: dict[str, str] | None = None) -> Invoked:
    """``fairpca *args`` with ``env`` set for its duration (an error of the command itself
    propagates, with its traceback)."""
    from rich.console import Console

    from fairpca.flows.cli import app

    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})
    together = io.StringIO()
    out, err = _Both(together), _Both(together)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            # consoles of this call (cyclopts keeps its first one): they read $COLUMNS
            app(list(args), console=Console(), error_console=Console(stderr=True))
        code = 0
    except SystemExit as done:
        code = 0 if done.code is None else int(done.code)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return Invoked(code, together.getvalue(), out.getvalue())
