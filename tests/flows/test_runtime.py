"""The process of a ``fairpca`` command (:mod:`fairpca.flows.runtime`).

The promises are checked on real ``fairpca audit`` processes started from this environment's
bin folder with a user's environment (none of the variables this session sets): the temporary
Prefect server starts under CPU load with the 90 s default; SIGINT and SIGTERM to the process
group end every process of the command within 5 s with one line; ``kill -9`` leaves no
server. Bounded polling, no fixed sleeps. The rest runs in this process: the command's
thread and signals, the server's failures, where the results are, the task runners.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest
from messages import matching

from fairpca.flows import runtime

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="parent-death signal and /proc are Linux"
)
# Prefect's and MLflow's log lines below ERROR ("08:01:57.160 | INFO | ...", "08:01:57.160 |
# WARNING | Task run ...", "2026/12/02 08:01:57 INFO ..."): the flow's own progress, which may
# reach the terminal just before or after a signal; an ERROR line (a crash report) is kept.
PREFECT_LOG_LINE = re.compile(
    r"(\d\d:\d\d:\d\d\.\d+ \| (DEBUG|INFO|WARNING) |\d{4}/\d\d/\d\d [\d:]+ (INFO|WARNING) )"
)
SERVER_LINE = re.compile(
    r"Prefect: temporary server on http://127\.0\.0\.1:(\d+) .*\(start-up timeout (\d+) s"
)


def _wait_until(condition, seconds: float, step: float = 0.05) -> float:
    """Poll ``condition`` for up to ``seconds``; the time it took (raises on timeout)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds} s")
        time.sleep(step)
    return time.monotonic() - started


class Audit:
    """``fairpca audit`` on the bundled German data, in a process group of its own (with
    ``--verbose``: the tests wait for Prefect's INFO lines)."""

    def __init__(self, user_cli, tmp_path: Path, *extra: str) -> None:
        fairpca, env = user_cli
        self.log = tmp_path / "cli.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [fairpca, "audit", "--dataset", "german", "-k", "2", "--variants",
                 "pca,fair_pca", "--classifiers", "logreg", "--verbose", "--tracking-uri",
                 f"sqlite:///{tmp_path}/m.db", "--output-dir", str(tmp_path / "out"), *extra],
                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text()

    def wait_for(self, text: str, seconds: float = 240) -> None:
        def seen() -> bool:
            assert self.process.poll() is None, self.output()
            return text in self.output()

        _wait_until(seen, seconds, step=0.1)

    def processes(self) -> list[int]:
        """The command and every process below it (the server has a session of its own)."""
        return [self.process.pid, *runtime.descendants(self.process.pid)]

    def stop_signal(self, signum: int) -> tuple[float, str]:
        """Send ``signum`` to the command's process group: how long until every process of
        the command was gone, and what the command printed after it."""
        before, processes = len(self.output()), self.processes()
        assert len(processes) >= 2, "no server process"
        os.killpg(self.process.pid, signum)
        took = _wait_until(lambda: not any(runtime._running(p) for p in processes), 10)
        assert self.process.wait(timeout=10) == 128 + signum
        # what the command said, without the flow's log lines (one may have been on its way
        # when the signal came: the data task's warning about an excluded column, an INFO line
        # --verbose lets through)
        said = self.output()[before:].splitlines(keepends=True)
        return took, "".join(line for line in said if not PREFECT_LOG_LINE.match(line))

    def kill(self) -> None:
        if self.process.poll() is None:
            for pid in reversed(self.processes()):
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _busy_loops() -> list[subprocess.Popen]:
    """Two processes per CPU that only spin: the machine is loaded."""
    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin) for _ in range(2 * (os.cpu_count() or 1))]


@pytest.mark.e2e
@pytest.mark.slow
@linux_only
def test_the_server_starts_under_cpu_load_and_sigint_ends_every_process(user_cli, tmp_path):
    """No start-up timeout in the environment: the command's own default (90 s), read by
    Prefect, lets the server start on a loaded machine (Prefect's own default is 20 s).
    Then Ctrl-C (SIGINT to the process group) mid-flow ends everything with one line."""
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in user_cli[1]
    busy = _busy_loops()
    audit = Audit(user_cli, tmp_path)
    try:
        audit.wait_for("Prefect: temporary server on")
        for loop in busy:
            loop.kill()
        assert SERVER_LINE.search(audit.output()).group(2) == "90", audit.output()
        audit.wait_for("Beginning flow run")
        took, said = audit.stop_signal(signal.SIGINT)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
        audit.kill()
    print(f"every process gone {took:.2f} s after SIGINT")  # shown with -s
    assert took < runtime.STOP_SECONDS
    lines = said.strip().splitlines()
    assert len(lines) == 1, said
    assert lines[0].startswith("fairpca audit: interrupted by SIGINT during the audit flow")
    assert "Traceback" not in audit.output()


@pytest.mark.e2e
@pytest.mark.slow
@linux_only
def test_sigterm_during_the_sweep_ends_every_process_with_one_line(user_cli, tmp_path):
    audit = Audit(user_cli, tmp_path, "--lambdas", "0,0.25,0.5,0.75,1")
    try:
        audit.wait_for("Task run 'search-fair_pca")  # the search and sweeps run now
        took, said = audit.stop_signal(signal.SIGTERM)
    finally:
        audit.kill()
    print(f"every process gone {took:.2f} s after SIGTERM")
    assert took < runtime.STOP_SECONDS
    lines = said.strip().splitlines()
    assert len(lines) == 1, said
    assert lines[0].startswith("fairpca audit: interrupted by SIGTERM during the audit flow")
    left = list((tmp_path / "out").iterdir())  # the run's folder, unless nothing was in it
    if left:
        assert f"the partial results in {left[0]} are not sealed" in lines[0]
        assert any(left[0].iterdir())
    else:
        assert f"nothing was written to {tmp_path / 'out'}" in lines[0]


@pytest.mark.e2e
@pytest.mark.slow
@linux_only
def test_sigkill_of_the_command_leaves_no_server_process(user_cli, tmp_path):
    audit = Audit(user_cli, tmp_path)
    try:
        audit.wait_for("Prefect: temporary server on")
        servers = runtime.descendants(audit.process.pid)
        assert servers, "no server process"
        audit.process.kill()
        audit.process.wait(timeout=10)
        took = _wait_until(lambda: not any(runtime._running(pid) for pid in servers), 10)
    finally:
        audit.kill()
    print(f"server gone {took:.2f} s after SIGKILL")


# ---- in this process -------------------------------------------------------------------------


def test_the_work_runs_off_the_main_thread_and_the_handlers_come_back():
    before = {sig: signal.getsignal(sig) for sig in runtime.STOP_SIGNALS}
    with runtime.Command("test") as command:
        assert signal.getsignal(signal.SIGTERM) == command._on_signal
        name = command.run(lambda: threading.current_thread().name)
        raised_there = KeyError("raised in the worker")
        with pytest.raises(KeyError) as raised:
            command.run(_raise, raised_there)
        assert raised.value is raised_there  # the worker's own exception, not a copy
    assert name == "fairpca-test"
    assert {sig: signal.getsignal(sig) for sig in runtime.STOP_SIGNALS} == before


def _raise(error: BaseException) -> None:
    raise error


def test_the_defaults_are_set_where_unset_and_a_users_value_wins(monkeypatch):
    for name in runtime.process_defaults():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "99")
    runtime.set_process_defaults()
    assert os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "90"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "99"


def test_the_cli_turns_mlflow_telemetry_off(monkeypatch):
    """Offline runs print no "Failed to send telemetry records" (DO_NOT_TRACK=1 alone does
    not turn MLflow's telemetry off: MLflow wants "true")."""
    from mlflow.telemetry.utils import is_telemetry_disabled

    monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    monkeypatch.setattr("mlflow.telemetry.utils._IS_IN_CI_ENV_OR_TESTING", False)
    assert not is_telemetry_disabled()
    runtime.set_process_defaults()
    assert is_telemetry_disabled()


def test_where_the_results_are_is_said_in_three_states(tmp_path):
    since = time.time()
    describe = runtime.describe_output
    assert describe(tmp_path, "audit-", since, "seal") == f"nothing was written to {tmp_path}"
    folder = tmp_path / "audit-german-1"
    folder.mkdir()
    (tmp_path / "retrain-german-2").mkdir()  # another command's folder
    assert describe(tmp_path, "audit-", since, "seal") == f"nothing was written to {tmp_path}"
    assert not folder.exists()  # an interrupted command leaves no empty folder behind
    assert (tmp_path / "retrain-german-2").is_dir()
    folder.mkdir()
    (folder / "metrics.csv").write_text("a\n")
    assert f"partial results in {folder} are not sealed" in describe(
        tmp_path, "audit-", since, "seal"
    )
    (folder / "seal").write_text("{}")
    sealed = describe(tmp_path, "audit-", since, "seal")
    assert f"the results in {folder} are complete and sealed" in sealed
    assert f"`fairpca relog {folder}`" in sealed
    assert "nothing was written" in describe(tmp_path, "audit-", time.time() + 60, "seal")


def test_no_server_is_started_when_a_prefect_api_is_configured(prefect_harness):
    with runtime.Command("test") as command:
        command.start_prefect_server()
        assert command.server is None
        command.use_prefect_server()  # nothing to wait for


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("import sys; sys.exit(7)", "the temporary Prefect server exited with code 7"),
        ("import time; time.sleep(60)", "did not answer within 1 s"),
        (f"import sys; sys.exit({runtime._EPHEMERAL_OFF})", "temporary servers are off"),
    ],
)
def test_a_server_that_does_not_start_is_one_message(monkeypatch, program, message):
    monkeypatch.setattr(runtime, "_SERVER_PROGRAM", program)
    monkeypatch.setattr(runtime, "_startup_timeout", lambda: 1)
    server = runtime.PrefectServer()
    try:
        with pytest.raises(runtime.CommandError, match=message) as caught:
            server.wait_until_up()
    finally:
        server.stop()
    assert "\n" not in str(caught.value)
    assert server.process.poll() is not None and not server.log.exists()


def test_no_server_needed_is_no_error(monkeypatch):
    monkeypatch.setattr(
        runtime, "_SERVER_PROGRAM", f"raise SystemExit({runtime._NO_SERVER_NEEDED})"
    )
    server = runtime.PrefectServer()
    server.wait_until_up()
    assert server.api_url is None
    server.stop()


def test_tracking_check_answers_in_seconds_and_names_the_fix(tmp_path, free_port):
    port = free_port()
    started = time.perf_counter()
    with pytest.raises(runtime.TrackingUnreachable, match=r"--tracking-uri sqlite:///mlflow\.db"):
        runtime.check_tracking_uri(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}")
    assert time.perf_counter() - started < 5
    missing = tmp_path / "no-such-folder" / "mlflow.db"
    no_folder = matching(runtime.NO_DATABASE_FOLDER, folder=missing.parent)
    with pytest.raises(runtime.TrackingUnreachable, match=no_folder):
        runtime.check_tracking_uri(f"sqlite:///{missing}", f"sqlite:///{missing}")
    runtime.check_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}", "local")  # a new store


# ---- task runners ----------------------------------------------------------------------------


def test_workers_get_the_api_this_process_uses(prefect_harness):
    from prefect.settings import PREFECT_API_URL

    assert PREFECT_API_URL.value().startswith("http://127.0.0.1:")
    assert runtime.worker_environment() == {"PREFECT_API_URL": PREFECT_API_URL.value()}


@pytest.mark.slow
def test_without_an_api_the_workers_get_this_process_temporary_server():
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()  # the process's one temporary server (a harness's too)
    was_running = server.running
    try:
        with temporary_settings(restore_defaults={PREFECT_API_URL}):
            assert not PREFECT_API_URL.value()
            environment = runtime.worker_environment()
        assert server.running
        assert environment == {"PREFECT_API_URL": server.api_url}
    finally:
        if not was_running:
            server.stop()


@pytest.mark.slow
def test_tasks_on_a_local_dask_cluster_are_recorded_by_this_process_api(prefect_harness):
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_API_URL

    @task
    def where(i: int) -> tuple[int, str | None]:
        return os.getpid(), os.environ.get("PREFECT_API_URL")

    @flow(task_runner=runtime.task_runner_for("local"))
    def on_dask() -> list:
        return [future.result() for future in where.map(range(4))]

    state = on_dask(return_state=True)
    answers = state.result()
    pids = {pid for pid, _ in answers}
    assert os.getpid() not in pids  # the tasks ran in the worker processes
    assert {url for _, url in answers} == {PREFECT_API_URL.value()}
    # A worker with a server of its own would have recorded its task runs there instead.
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    assert sorted(run.name.split("-")[0] for run in runs) == ["where"] * 4
    assert all(run.state.is_completed() for run in runs)


def test_a_flow_on_threads_hands_a_dask_address_to_one_subflow(prefect_harness):
    from prefect import flow
    from prefect_dask import DaskTaskRunner

    @flow(task_runner=runtime.task_runner_for(None))
    def audit_like(address):
        return runtime.dask_subflow(audit_like, address)

    assert audit_like(None) is None
    subflow = audit_like("tcp://127.0.0.1:8786")
    assert isinstance(subflow.task_runner, DaskTaskRunner)
    assert subflow.task_runner.address == "tcp://127.0.0.1:8786"


def test_the_audit_returns_freed_memory_where_malloc_is_glibcs():
    """The audit's process has glibc return every freed block of 1 MiB or more to the system,
    and the free pages inside its heap at the stage boundaries (freed heap pages under the
    large arrays were 300 to 400 MB of a 1,000,000-row audit)."""
    import platform

    from fairpca.flows.runtime import map_large_blocks, release_freed_heap

    glibc = platform.libc_ver()[0] == "glibc"
    assert map_large_blocks() is glibc
    if glibc:
        release_freed_heap()  # True when it released pages: nothing to assert on a fresh heap


# ---- Prefect's own settings ------------------------------------------------------------------


def _prefect_cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "prefect", *args], env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_an_api_in_the_prefect_profile_starts_no_server_and_a_declining_one_exits_cleanly(
    user_cli, free_port
):
    """``prefect config set PREFECT_API_URL=...`` (the profile, not the environment) names
    the API: no temporary server is launched; one started anyway sees the profile and exits
    with its own code (not SIGABRT from its stdin thread at shutdown)."""
    _, env = user_cli
    url = f"http://127.0.0.1:{free_port()}/api"
    _prefect_cli(env, "config", "set", f"PREFECT_API_URL={url}")
    assert "PREFECT_API_URL" not in env
    program = (
        "from fairpca.flows import runtime\n"
        "print('configured', runtime.configured_prefect_api())\n"
        "print('launched', runtime.PrefectServer.launch() is not None)\n"
        "server = runtime.PrefectServer()\n"
        "server.wait_until_up()\n"
        "print('exit', server.process.returncode, server.api_url)\n"
        "server.stop()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert said == {
        "configured": url,
        "launched": "False",
        "exit": f"{runtime._NO_SERVER_NEEDED} None",
    }


@pytest.mark.e2e
@pytest.mark.slow
@linux_only
def test_the_audit_uses_the_prefect_server_of_the_profile(user_cli, tmp_path, free_port):
    """As the deployments page says: ``prefect server start``, then ``prefect config set
    PREFECT_API_URL=...``; ``fairpca audit`` runs its flow on that server, says so, and
    starts no temporary one."""
    from servers import prefect_server

    fairpca, env = user_cli
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    with prefect_server(env, port, tmp_path / "prefect-server.log"):
        _prefect_cli(env, "config", "set", f"PREFECT_API_URL={url}")
        done = subprocess.run(
            [fairpca, "audit", "--dataset", "german", "-k", "2", "--variants", "pca,fair_pca",
             "--lambdas", "0,1", "--classifiers", "logreg", "--tracking-uri",
             f"sqlite:///{tmp_path}/m.db", "--output-dir", str(tmp_path / "out")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert f"Prefect: API {url} (Prefect's settings)" in output
        assert "temporary server" not in output
        flow_runs = _prefect_cli({**env, "COLUMNS": "250"}, "flow-run", "ls")
    assert "fairness-audit" in flow_runs and "COMPLETED" in flow_runs
