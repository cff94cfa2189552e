"""The temporary Prefect server of one command: started before the flow, gone with the command.

Without ``PREFECT_API_URL`` a flow run needs a local Prefect API; Prefect then starts one in a
subprocess (``SubprocessASGIServer``). The command starts it itself, earlier, so that its boot
overlaps the warm-up imports, and owns its whole lifecycle:

- every exit of the command (normal end, error, Ctrl-C, SIGTERM, SIGHUP) stops it: terminate,
  wait, then kill, within :data:`STOP_SECONDS`;
- on Linux the server process also gets a parent-death signal (``prctl(PR_SET_PDEATHSIG,
  SIGKILL)``, set in the child before it executes the server, and kept across ``execve``), so
  that even ``kill -9`` of the command leaves no server behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

__all__ = ["STOP_SECONDS", "prefect_defaults", "start_server", "temporary_server"]

STOP_SECONDS = 5.0  # SIGTERM of the command -> server process gone
_TERMINATE_WAIT = 2.5  # of STOP_SECONDS: then SIGKILL
_DRAIN_SECONDS = 5.0  # queued Prefect logs and events sent at a normal exit
_PR_SET_PDEATHSIG = 1
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)

# Run in the server's child process before the server itself: ask the kernel to SIGKILL it
# when its parent dies, give up if the parent already died between fork and prctl, then
# replace the process by the server command (the death signal survives execve).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_SETMASK, ())\n"  # the parent held stop signals back
    "libc = ctypes.CDLL(sys.argv[1], use_errno=True)\n"
    f"if libc.prctl({_PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0) != 0:\n"
    "    sys.exit('prctl(PR_SET_PDEATHSIG) failed')\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    sys.exit('parent gone before the server started')\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[3:]])\n"
)


def prefect_defaults() -> None:
    """A fresh machine runs a temporary Prefect server; give it time to start, no analytics."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # offline runs would log "Failed to send telemetry records" from MLflow's telemetry thread
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _libc_with_prctl() -> str | None:
    """Path of the C library when it has ``prctl`` (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        return name if hasattr(ctypes.CDLL(name), "prctl") else None
    except OSError:
        return None


def dying_with_parent(command: list[str]) -> list[str]:
    """``command`` wrapped so that its process is killed when this process dies (Linux);
    unchanged elsewhere, and outside the main thread (the kernel sends the parent-death
    signal when the spawning *thread* ends)."""
    libc = _libc_with_prctl()
    main = threading.current_thread() is threading.main_thread()
    if libc is None or not main or command[:1] != [sys.executable]:
        return command
    return [sys.executable, "-c", _DIE_WITH_PARENT, libc, str(os.getpid()), *command[1:]]


def _server_class() -> type:
    """Prefect's ``SubprocessASGIServer`` whose process dies with this one and stops fast."""
    from prefect.server.api import server as prefect_server

    class TemporaryServer(prefect_server.SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            launch = subprocess.Popen

            def popen(args, **kwargs):
                return launch(dying_with_parent(list(args)), **kwargs)

            # Prefect builds the server's command and environment; only the argv is wrapped.
            prefect_server.subprocess = _PopenOnly(popen)
            try:
                return super()._run_uvicorn_command()
            finally:
                prefect_server.subprocess = subprocess

        def stop(self) -> None:
            process = self.server_process
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=_TERMINATE_WAIT)
                except subprocess.TimeoutExpired:
                    process.kill()
            super().stop()  # reaps the process, forgets the instance

    return TemporaryServer


class _PopenOnly:
    """The ``subprocess`` module as Prefect's server module sees it, with ``Popen`` replaced."""

    def __init__(self, popen) -> None:
        self.Popen = popen

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def ephemeral_server():
    """The temporary Prefect server a flow run would start (None if PREFECT_API_URL is set
    or ephemeral mode is off). Prefect keeps one instance per port, so the flow finds it."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE

    if PREFECT_API_URL.value() or not PREFECT_SERVER_ALLOW_EPHEMERAL_MODE.value():
        return None
    return _server_class()()


@contextmanager
def temporary_server() -> Iterator[Any]:
    """Create the temporary Prefect server (if one is needed; start it with
    :func:`start_server`) and stop it on every exit: normal end, error, Ctrl-C, SIGTERM or
    SIGHUP (then within :data:`STOP_SECONDS`)."""
    signalled: list[int] = []

    def exit_on_signal(signum: int, _frame) -> None:
        """SIGTERM/SIGHUP end the command like Ctrl-C does: through every ``finally``."""
        signalled.append(signum)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, exit_on_signal) for sig in STOP_SIGNALS}
    server = None
    try:
        server = ephemeral_server()
        yield server
    except KeyboardInterrupt:
        signalled.append(signal.SIGINT)
        raise
    finally:
        if server is not None:
            if not signalled:  # a stop signal leaves no time to send queued logs and events
                with suppress(Exception):
                    _drain_prefect_workers()
            with suppress(Exception):
                server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def start_server(server) -> None:
    """Boot the temporary server with the stop signals held back.

    A signal that arrived while ``subprocess.Popen`` was spawning the server would unwind the
    stack before the server object knows its process, leaving an orphan; held back, it is
    delivered as soon as the server is up (or has failed), and :func:`temporary_server`
    stops it.
    """
    held = {*STOP_SIGNALS, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        server.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _drain_prefect_workers() -> None:
    """Send the flow's queued logs and events while the temporary server still runs."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=_DRAIN_SECONDS)
    EventsWorker.drain_all(timeout=_DRAIN_SECONDS)
