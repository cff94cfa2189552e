"""Real servers on 127.0.0.1 for the tests that need them: a ``prefect server start`` and a
``prefect worker start``, each in a process group of its own, stopped by that group (no
process left) when the ``with`` block ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import suppress
from pathlib import Path


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 within 2 s (no proxy)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


class Background:
    """A command in a session of its own, its output in ``log``; ``stop()`` ends the whole
    group (SIGTERM twice, as the Prefect worker needs, then SIGKILL)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path | None = None):
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        for sig, seconds in ((signal.SIGTERM, 3), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=seconds)
                break
        with suppress(ProcessLookupError):  # anything the group left (a flow-run process)
            os.killpg(self.process.pid, signal.SIGKILL)

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def prefect_server(env: dict[str, str], port: int, log: Path, **settings: str) -> Background:
    """``prefect server start`` on 127.0.0.1:``port`` (no UI), healthy when returned; its
    database in ``env``'s ``PREFECT_HOME``."""
    server = Background(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
         "--port", str(port), "--no-ui"],
        {**env, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **settings}, log,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not answers(f"http://127.0.0.1:{port}/api/health"):
        if server.process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"the Prefect server did not start: {server.output()[-2000:]}")
        time.sleep(0.5)
    return server
