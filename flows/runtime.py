"""The process of one ``fairpca`` command: its environment, its Prefect server, its signals,
its child processes, and the deadlines of its calls to MLflow.

- :func:`set_process_defaults` runs first, before anything imports Prefect or MLflow (Prefect
  reads its settings once, at import): a start-up timeout for the temporary Prefect server that
  survives a loaded machine, no analytics or telemetry, and bounded MLflow HTTP requests
  (:data:`fairpca.tasks.mlflow_store.MLFLOW_HTTP_BOUNDS`).
- :class:`Command` owns everything a command starts. The work runs in a thread of its own, so
  the main thread is always free to take SIGINT, SIGTERM and SIGHUP: then the command stops
  every process it started and exits within :data:`STOP_SECONDS` with one line that says what
  was interrupted and where the results are (Python cannot stop threads, so the process ends
  after its children). Prefect never installs its own SIGTERM handler (it does so only in the
  main thread).
- The temporary Prefect server (when Prefect's settings name no API: the environment, the
  profile, ``.env``, ``prefect.toml``; else the command says which API it uses) runs in a child
  process of its own session, so the terminal's Ctrl-C reaches the command alone; it is
  started once the inputs are checked, so that it boots while the flow is imported, and it
  dies with the command even after ``kill -9`` (its stdin is a pipe from the command).
- :func:`check_tracking_uri` finds an unreachable MLflow tracking server in seconds.
- :func:`task_runner_for` and :func:`dask_subflow` put a flow on threads or on Dask.
- :func:`map_large_blocks` and :func:`release_freed_heap` have glibc return freed memory.

Nothing here keeps state at module level: each command holds its own in its :class:`Command`.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STOP_SECONDS = 5.0  # a stop signal -> every process of the command gone
_TERM_GRACE = 1.5  # of STOP_SECONDS: SIGTERM, then SIGKILL
_SERVER_STOP_GRACE = 2.5  # a normal end: the server's graceful shutdown, then SIGKILL
_DRAIN_SECONDS = 2.0  # queued Prefect logs and events sent at a normal end
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
_NO_SERVER_NEEDED, _EPHEMERAL_OFF = 10, 11  # exit codes of the server program
_UVICORN_STARTUP_FAILURE = 3  # uvicorn.config.STARTUP_FAILURE, e.g. the port is taken


# ---- process defaults ------------------------------------------------------------------------


def process_defaults() -> dict[str, str]:
    """The environment every ``fairpca`` command starts with (a value already set wins)."""
    from fairpca.tasks.mlflow_store import MLFLOW_HTTP_BOUNDS  # no MLflow import

    return {
        # a temporary Prefect server boots in 5-10 s on an idle 2-core machine, far longer on
        # a loaded one; Prefect's default (20 s) fails the command there
        STARTUP_TIMEOUT_ENV: "90",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # offline runs would log "Failed to send telemetry records" from MLflow's thread
        "MLFLOW_DISABLE_TELEMETRY": "true",
        **MLFLOW_HTTP_BOUNDS,
    }


def set_process_defaults() -> None:
    """Put :func:`process_defaults` into ``os.environ`` where unset. Call it before Prefect is
    imported: Prefect reads its settings once, when it is imported."""
    for name, value in process_defaults().items():
        os.environ.setdefault(name, value)


def exit_on_signals(what: str) -> None:
    """Until a :class:`Command` takes over: a stop signal ends the process with one line
    (``what`` says what was cut short), never a traceback."""

    def handler(signum: int, _frame) -> None:
        _say(f"fairpca: interrupted by {signal.Signals(signum).name} {what}.")
        os._exit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, handler)


def run_and_exit(main: Callable[[], object]) -> NoReturn:
    """Run ``main`` (a command line), then end the process at once: the exit handlers run
    and the output is flushed, but the interpreter does not tear down the thousands of
    modules Prefect, MLflow and scikit-learn loaded (2-3 s of CPU on a 2-core machine)."""
    try:
        main()
        code = 0
    except SystemExit as done:  # its code, or a message printed and 1
        code = 0 if done.code is None else done.code
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:  # an error of the command itself: shown as Python shows it
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()  # logging's, Prefect's and MLflow's queues, as at a normal exit
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()


def _say(line: str) -> None:
    """One line on stderr, safe inside a signal handler (no Python-level buffer or lock)."""
    _flush()
    with suppress(OSError):
        os.write(2, (line + "\n").encode(errors="replace"))


# ---- memory ----------------------------------------------------------------------------------

# glibc's mallopt option: the size from which malloc maps a block of its own
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20


def _glibc_malloc(function: str, *args: int) -> bool:
    """Call ``function(*args)`` of glibc's malloc; whether it returned non-zero (False off
    glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(getattr(libc, function)(*args))
    except (OSError, AttributeError):  # not glibc
        return False


def map_large_blocks() -> bool:
    """Have glibc's malloc map every block of at least 1 MiB on its own, so that it returns
    to the system when freed; whether it was set (False off glibc).

    By default the threshold rises with each mapped block freed, up to 32 MB; larger
    blocks then come from the heap, whose freed pages stay in the process: on a 1,000,000-row
    audit the temporary arrays of loading and encoding left about 300 MB there, under the
    arrays that come after. Large arrays are few and each costs its own page faults anyway.
    """
    return _glibc_malloc("mallopt", M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def release_freed_heap() -> bool:
    """Hand the free pages inside glibc's heap back to the system (``malloc_trim(0)``);
    whether it did (False off glibc).

    Blocks under the mmap threshold (pandas' and Python's small objects) come from the heap,
    and what they leave free stays in the process while anything above it is alive: after
    the pre-flight's read of a 1,000,000-row table, 400 MB of free heap pages, 1 MB of live
    objects.
    """
    return _glibc_malloc("malloc_trim", 0)


# ---- the command -----------------------------------------------------------------------------


class CommandError(RuntimeError):
    """The command cannot go on (its Prefect server did not start); the message says why and
    what to do."""


class Command:
    """One run of a ``fairpca`` command: its thread, its child processes, its signals.

    Use as a context manager around :meth:`run`. ``name`` is the command (``audit``);
    ``results`` returns, when asked, where the command's results are and what state they
    are in (for the line printed on a stop signal). ``phase`` says what the command is doing;
    ``doing``, when given and it returns a text, says it more precisely (the version a gate
    judges).
    """

    def __init__(
        self,
        name: str,
        results: Callable[[], str] | None = None,
        doing: Callable[[], str | None] | None = None,
    ) -> None:
        self.name = name
        self.results = results
        self.doing = doing
        self.phase = "before any work"
        self.server: PrefectServer | None = None
        self._previous: dict[int, Any] = {}
        self._console: logging.Handler | None = None

    def __enter__(self) -> Command:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            if self._console is not None:
                self._console.removeFilter(_without_traceback)

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in a thread of its own (with this thread's context); the main
        thread waits, free to take a stop signal. Returns its value or raises its error."""
        box: dict[str, Any] = {}
        context = contextvars.copy_context()

        def target() -> None:
            try:
                box["value"] = context.run(function, *args)
            except BaseException as error:  # re-raised in the calling thread
                box["error"] = error

        worker = threading.Thread(target=target, name=f"fairpca-{self.name}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.1)  # interruptible: a signal handler runs in between
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def start_prefect_server(self) -> None:
        """Start the temporary Prefect server this command needs (none when Prefect's settings
        name an API); it boots while the command goes on. See :meth:`use_prefect_server`."""
        self.server = PrefectServer.launch()

    def use_prefect_server(self) -> None:
        """Wait until the temporary server answers (within Prefect's start-up timeout) and
        point this process's Prefect client at it, or say which configured API the command
        uses; Prefect's console lines of failed runs come without tracebacks from now on.
        Raises :class:`CommandError`."""
        self._console = prefect_console()
        if self._console is not None:
            self._console.addFilter(_without_traceback)
        if self.server is not None:
            self.phase = "while the Prefect server started"
            self.server.wait_until_up()
        if (self.server is None or self.server.api_url is None) and configured_prefect_api():
            from fairpca.tasks.trust import shown_uri

            _say(f"Prefect: API {shown_uri(configured_prefect_api())} (Prefect's settings)")

    def _on_signal(self, signum: int, _frame) -> None:
        """Stop every child, say what was interrupted and where the results are, exit."""
        for sig in STOP_SIGNALS:  # a second Ctrl-C must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        where, phase = "", self.phase
        if self.results is not None:
            with suppress(Exception):
                where = f"; {self.results()}"
        if self.doing is not None:
            with suppress(Exception):
                phase = self.doing() or phase
        _say(f"fairpca {self.name}: interrupted by {signal.Signals(signum).name} {phase}{where}.")
        _silence_output()  # the threads still running print nothing after that line
        if self.server is not None:  # also where /proc cannot list the descendants
            with suppress(OSError):
                self.server.process.terminate()
        stop_descendants(os.getpid(), _TERM_GRACE)
        if graphs := sys.modules.get("fairpca.tasks.onnx_runtime"):  # the gate's evaluation
            with suppress(Exception):
                graphs.stop_running()  # its children in their own groups, and their folders
        os._exit(128 + signum)


def _without_traceback(record: logging.LogRecord) -> bool:
    """A failed task or flow run on the console: its line names the error, the command's
    last line says what happened and what to do; the traceback goes to the Prefect API
    only (its handler has seen the record already)."""
    if record.exc_info and record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
        record.exc_info = record.exc_text = None
    return True


def failed_run(message: str):
    """A ``Failed`` state with ``message`` for a flow run that ends on a known error (bad
    configuration, a refusal), already logged as one line.

    In a deployment run Prefect's engine raises a returned ``Failed`` state and logs "Engine
    execution exited with unexpected exception" with the traceback of that raise (about 40
    lines, none of them about the error): that line stays, without its traceback.
    """
    from prefect.states import Failed

    def without_traceback(record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if type(error).__name__ == "FailedRun" and str(error) == message:
            record.exc_info = record.exc_text = None
        return True

    logging.getLogger("prefect.flow_runs").addFilter(without_traceback)
    return Failed(message=message)


def prefect_console() -> logging.Handler | None:
    """Prefect's console handler (on the root logger once Prefect configured logging)."""
    if "prefect.logging.handlers" not in sys.modules:
        return None
    from prefect.logging.handlers import PrefectConsoleHandler

    handlers = logging.getLogger().handlers
    return next((h for h in handlers if isinstance(h, PrefectConsoleHandler)), None)


def _silence_output() -> None:
    with suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first (Linux ``/proc``; elsewhere none)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError, ValueError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], {pid}
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = set(children)
    return found


def _running(pid: int) -> bool:
    """Not gone and not a zombie (a zombie only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_descendants(pid: int, grace: float) -> None:
    """SIGTERM every process below ``pid``, SIGKILL those still running after ``grace`` s."""
    pids = descendants(pid)
    for child in pids:
        with suppress(OSError):
            os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_running(child) for child in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in [*pids, *descendants(pid)]:  # and any started meanwhile
        if _running(child):
            with suppress(OSError):
                os.kill(child, signal.SIGKILL)


# ---- the temporary Prefect server ------------------------------------------------------------

# The server's own process: a thread that ends it when its stdin (a pipe from the command)
# reaches its end, i.e. when the command is gone, even after kill -9 (Linux's parent-death
# signal would follow the thread that started it, not the process); then Prefect's settings
# decide whether a temporary server is needed (exit codes say no); then Prefect's API app
# under uvicorn on 127.0.0.1, as Prefect's own temporary server runs it, without the UI.
# Not prefect.server.api.server.SubprocessASGIServer itself: importing that module imports
# the whole API app into the command (measured: +2.9 s CPU, +10.7 s wall on the 2-core
# machine under load, on top of the flow's imports), which only this child needs; its
# start() blocks its caller for the whole boot and polls an exited server until the
# start-up timeout (90 s); its child has no stdin pipe and shares the terminal's Ctrl-C.
_SERVER_PROGRAM = f"""
import os, signal, sys, threading
signal.pthread_sigmask(signal.SIG_SETMASK, ())
threading.Thread(target=lambda: (sys.stdin.buffer.read(), os._exit(1)), daemon=True).start()
port = int(sys.argv[1])
os.environ.update(PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1", PREFECT__SERVER_FINAL="1")
from prefect.settings import get_current_settings
settings = get_current_settings()
# os._exit: sys.exit would wait for the stdin thread's lock at shutdown and abort (SIGABRT)
if settings.api.url:
    os._exit({_NO_SERVER_NEEDED})
if not settings.server.ephemeral.enabled:
    os._exit({_EPHEMERAL_OFF})
import uvicorn
uvicorn.run("prefect.server.api.server:create_app", factory=True, host="127.0.0.1", port=port,
            log_level="error", lifespan="on")
"""


def configured_prefect_api() -> str | None:
    """The Prefect API URL that Prefect's own settings name (the environment, the active
    profile, ``.env``, ``prefect.toml``), or None.

    ``prefect.settings`` is read without the server or the client (measured: about 0.5 s of
    imports that the flow needs anyway); the same settings decide in the server program, so a
    configured API is never shadowed by a temporary server.
    """
    from prefect.settings import get_current_settings

    return get_current_settings().api.url or None


class PrefectServer:
    """The temporary Prefect API server of one command (see the module docstring)."""

    def __init__(self) -> None:
        handle, name = tempfile.mkstemp(prefix="fairpca-prefect-server-", suffix=".log")
        os.close(handle)
        self.log = Path(name)
        self.api_url: str | None = None
        self._previous_env: dict[str, str | None] = {}
        self._spawn()

    @classmethod
    def launch(cls) -> PrefectServer | None:
        """Start the server process (None when a Prefect API is configured); it boots in the
        background."""
        return None if configured_prefect_api() else cls()

    def _spawn(self) -> None:
        """The server process on a free port; this process keeps its stdin's other end."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _SERVER_PROGRAM, str(self.port)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # the terminal's Ctrl-C is for the command alone
            )  # fmt: skip

    def wait_until_up(self) -> None:
        """Block until the server answers (or decided that none is needed); then this process's
        Prefect client (and every process it starts) uses it. Raises :class:`CommandError`."""
        timeout = _startup_timeout()
        deadline = time.monotonic() + timeout
        while not _answers(f"http://127.0.0.1:{self.port}/api/health"):
            code = self.process.poll()
            if code == _NO_SERVER_NEEDED:
                return
            if code == _UVICORN_STARTUP_FAILURE and "already in use" in self._output():
                self._spawn()  # another process took the port meanwhile
                continue
            if code is not None or time.monotonic() > deadline:
                raise CommandError(self._failure(code, timeout))
            time.sleep(0.1)
        url_shown = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{url_shown}/api"
        # no "View at <UI>" links: this server has no UI and is gone after the command
        env = {"PREFECT_API_URL": self.api_url, "PREFECT_UI_URL": ""}
        self._previous_env = _set_prefect_env(env)
        # one line within 80 columns (the docs say how PREFECT_API_URL names a running one)
        _say(f"Prefect: temporary server on {url_shown} (start-up timeout {timeout} s)")

    def _failure(self, code: int | None, timeout: int) -> str:
        if code == _EPHEMERAL_OFF:
            return (
                "no Prefect API is configured and temporary servers are off; set PREFECT_API_URL "
                "to a running Prefect server (prefect server start), or allow a temporary one "
                "with PREFECT_SERVER_ALLOW_EPHEMERAL_MODE=true"
            )
        tail = " | ".join(self._output().strip().splitlines()[-3:])
        why = (
            f"did not answer within {timeout} s ({STARTUP_TIMEOUT_ENV}; the machine may be "
            "busy: raise it)"
            if code is None
            else f"exited with code {code}"
        )
        return (
            f"the temporary Prefect server {why}. Or start one (prefect server start) and set "
            "PREFECT_API_URL." + (f" Its last output: {tail}" if tail else "")
        )

    def _output(self) -> str:
        with suppress(OSError):
            return self.log.read_text(errors="replace")
        return ""

    def stop(self) -> None:
        """Stop the server (once it has the queued logs and events of the command)."""
        if self.api_url is not None:  # the flow's queued logs and events, while it runs
            with suppress(Exception):
                from prefect.events.worker import EventsWorker
                from prefect.logging.handlers import APILogWorker

                APILogWorker.drain_all(timeout=_DRAIN_SECONDS)
                EventsWorker.drain_all(timeout=_DRAIN_SECONDS)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=_SERVER_STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with suppress(OSError):
            self.process.stdin.close()
        with suppress(OSError):
            self.log.unlink()
        if self.api_url is not None:
            _set_prefect_env(self._previous_env)


def _startup_timeout() -> int:
    """Prefect's effective start-up timeout of a temporary server, in seconds."""
    from prefect.settings import get_current_settings

    return int(get_current_settings().server.ephemeral.startup_timeout_seconds)


def _answers(url: str) -> bool:
    """Whether ``url`` answers 200 (directly: a proxy of the environment never sees it)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _set_prefect_env(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set (None: remove) Prefect variables in ``os.environ`` and have this process's Prefect
    read its settings again (it read them at import); the previous values."""
    import prefect.context

    previous = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    refresh = getattr(prefect.context, "refresh_global_settings_context", None)
    if refresh is not None:
        refresh()
    else:  # pragma: no cover - older Prefect 3: what refresh_global_settings_context does
        prefect.context.GLOBAL_SETTINGS_CONTEXT = prefect.context.root_settings_context()
    return previous


def describe_output(output_dir: Path, prefix: str, since: float, seal_file: str) -> str:
    """Where a command's results are and in what state: its newest folder in ``output_dir``
    whose name starts with ``prefix`` and that was made at ``since`` (a time stamp) or later;
    sealed (``seal_file`` present) or not; an empty one is removed. Safe inside a signal
    handler (imports nothing)."""
    folders = []
    with suppress(OSError):
        for folder in output_dir.iterdir():
            made = folder.stat().st_ctime
            if folder.is_dir() and folder.name.startswith(prefix) and made >= since - 1:
                folders.append((made, folder))
    if not folders:
        return f"nothing was written to {output_dir}"
    folder = max(folders)[1]
    if (folder / seal_file).is_file():
        return (
            f"the results in {folder} are complete and sealed: log them with "
            f"`fairpca relog {folder}`"
        )
    with suppress(OSError):  # only an empty folder goes: nothing of it is left behind
        folder.rmdir()
        return f"nothing was written to {output_dir}"
    return f"the partial results in {folder} are not sealed: run the command again"


# ---- MLflow ----------------------------------------------------------------------------------

LOCAL_FALLBACK = "sqlite:///mlflow.db"


class TrackingUnreachable(ValueError):
    """The tracking URI cannot be used; the message names the URI and the fix."""


# The message of a refusal below (a str.format template; tests name it, not its words)
NO_DATABASE_FOLDER = (
    "the folder {folder} of the MLflow database {shown} does not exist; create it or pass "
    "another --tracking-uri."
)


def check_tracking_uri(uri: str, shown: str, timeout: float = 4.0) -> None:
    """Raise :class:`TrackingUnreachable` if ``uri`` cannot take an audit.

    http(s): ``GET <uri>/health`` (MLflow's health endpoint) must answer within ``timeout``
    seconds. ``sqlite:///path``: the database's folder must exist. ``shown`` is the URI as
    it may be printed (credentials masked). Other schemes (databases, Databricks) are left
    to MLflow.
    """
    scheme = urlsplit(uri).scheme.lower()
    fix = f"start the server, or pass --tracking-uri {LOCAL_FALLBACK} to record locally"
    if scheme in {"http", "https"}:
        import httpx

        try:
            answer = httpx.get(uri.rstrip("/") + "/health", timeout=timeout)
        except httpx.HTTPError as error:
            reason = type(error).__name__
            raise TrackingUnreachable(
                f"the MLflow tracking server {shown} is not reachable ({reason}); {fix}."
            ) from None
        if answer.status_code >= 500:
            raise TrackingUnreachable(
                f"the MLflow tracking server {shown} answered HTTP {answer.status_code}; {fix}."
            )
    elif scheme == "sqlite" and uri.startswith("sqlite:///") and ":memory:" not in uri:
        folder = Path(uri.removeprefix("sqlite:///")).expanduser().absolute().parent
        if not folder.is_dir():
            raise TrackingUnreachable(NO_DATABASE_FOLDER.format(folder=folder, shown=shown))


def create_local_store(uri: str) -> None:
    """Open a local SQLite store now, created when new (its schema migrations take seconds,
    under a lock: :func:`fairpca.tasks.mlflow_store.mlflow_client`), so that a broken one
    is reported before the flow runs; other stores are left alone.

    Raises
    ------
    fairpca.tasks.mlflow_store.BrokenStoreError
        The store exists but cannot be opened (named, with the fix).
    """
    if uri.startswith("sqlite:///"):
        from fairpca.tasks.mlflow_store import mlflow_client

        mlflow_client(uri)  # opens the store, under its lock


# ---- task runners ----------------------------------------------------------------------------

LOCAL = "local"


def task_runner_for(dask_address: str | None):
    """The Prefect task runner for ``AuditConfig.dask_address``.

    ``None`` gives the flows' thread pool; ``"local"`` a temporary ``LocalCluster`` (two
    single-threaded workers, matching a 2-core machine, that report to this process's
    Prefect API, see :func:`worker_environment`); any other value is the address of a
    running ``dask.distributed`` scheduler (``tcp://host:8786``). The workers need fairpca
    (with ``tasks`` and ``flows``) installed, must reach the MLflow tracking URI and, on a
    remote cluster, have ``PREFECT_API_URL`` set to a Prefect server that this process uses
    too (a temporary server on 127.0.0.1 is not reachable from other machines).
    """
    if dask_address is None:
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=2)
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as error:  # pragma: no cover - the dask extra is part of dev
        raise ImportError(
            "dask_address needs prefect-dask: pip install 'fairpca[dask]'."
        ) from error
    if dask_address == LOCAL:
        cluster = {"n_workers": 2, "threads_per_worker": 1, "env": worker_environment()}
        return DaskTaskRunner(cluster_kwargs=cluster)
    return DaskTaskRunner(address=dask_address)


def worker_environment() -> dict[str, str]:
    """Environment for the worker processes of a local cluster: the Prefect API this process
    talks to, so that the workers report their task runs to it.

    A worker process inherits ``os.environ``, not this process's Prefect settings: without
    ``PREFECT_API_URL`` each worker would start a temporary Prefect server of its own (and
    record its task runs there). A temporary server of this process counts: the URL is the
    one its client uses. Empty when there is no API and none may be started.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE

    url = PREFECT_API_URL.value()
    if not url and PREFECT_SERVER_ALLOW_EPHEMERAL_MODE.value():
        url = str(get_client(sync_client=True).api_url).rstrip("/")  # the temporary server
    return {"PREFECT_API_URL": url} if url else {}


def current_task_runner_name() -> str | None:
    """Class name of the running flow's task runner (``None`` outside a flow run)."""
    from prefect.context import FlowRunContext

    runner = getattr(FlowRunContext.get(), "task_runner", None)
    return None if runner is None else type(runner).__name__


def needs_dask_subflow(dask_address: str | None) -> bool:
    """Whether a flow run must hand its work to a Dask subflow to honour ``dask_address``
    (it does unless the run is on Dask already, or no address is given)."""
    return dask_address is not None and current_task_runner_name() != "DaskTaskRunner"


def dask_subflow(flow_fn, dask_address: str | None):
    """The one place that puts a flow on the task runner its config asks for.

    A flow's task runner is fixed when its run starts, and every run (the ``fairpca`` CLI, a
    deployment, a direct call) starts on the flow's thread pool. Each flow calls this first:
    with a ``dask_address`` it gets ``flow_fn`` on :func:`task_runner_for` and returns what
    that subflow returns; ``None`` means the run does its work itself (no address, or it
    is that subflow).
    """
    if not needs_dask_subflow(dask_address):
        return None
    return flow_fn.with_options(task_runner=task_runner_for(dask_address))
