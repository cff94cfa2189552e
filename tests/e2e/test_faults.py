"""Faults that must not lose data, against a real ``mlflow server`` subprocess.

- two audits at the same time against one server each keep their own complete artifacts;
- a short tracking-server outage while a flow logs is absorbed by the task retries;
- a tracking server that dies while a flow logs: retries with back-off, then a clear failure
  that names the local directory; the run is not left FINISHED; after a restart the kept
  directory is logged again, completely;
- a bad config fails at parameter validation, before any task and any MLflow run.

The MLflow server (SQLite backend, ``--artifacts-destination``, one worker, 127.0.0.1, free
port) and the shared Prefect test server start once per session. MLflow's own HTTP retries
are turned off here so that the Prefect task retries (back-off 1, 2, 4 s) are what is
exercised.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import mlflow
import numpy as np
import pytest

pytestmark = [pytest.mark.flow, pytest.mark.slow, pytest.mark.e2e]

VARIANTS = ["pca", "fair_pca"]
BACKOFF = 1.0  # retry i of an MLflow task waits BACKOFF * 2**i s (3 retries: 1, 2, 4 s)
REPORT_FILES = ["report.md", "report.html", "tradeoff.png", "config.json", "metrics.csv"]


class MlflowServer:
    """``mlflow server`` in its own process group; restartable on the same store."""

    def __init__(self, root: Path, port: int):
        self.root = root
        self.port = port
        self.log = root / "mlflow-server.log"
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.root / "mlartifacts"),
            "--workers",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # no MLflow server jobs needed: no job runner and huey consumer processes
                env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            )

    def wait_healthy(self, timeout: float = 150.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"mlflow server not healthy after {timeout}s:\n{self.log_tail()}")

    def start(self) -> None:
        self.launch()
        self.wait_healthy()

    def is_up(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Abrupt death of the server and its workers (SIGKILL to the process group)."""
        if self.is_up():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.is_up():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class OutageProxy:
    """TCP proxy to the server that can drop every connection for a while (an outage)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = threading.Event()
        self.up.set()
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up.is_set():
                self.dropped += 1
                client.close()
                continue
            self._hold_first_connection()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with self.lock:
                    self.open.discard(sock)
                with contextlib.suppress(OSError):
                    sock.close()

    def _hold_first_connection(self) -> None:
        """Hook for subclasses: called before a client connection is forwarded."""

    def outage(self) -> None:
        self.up.clear()
        with self.lock:
            sockets = list(self.open)
            self.open.clear()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass

    def restore(self) -> None:
        self.up.set()

    def close(self) -> None:
        self.listener.close()


class RendezvousProxy(OutageProxy):
    """Proxy that holds its first connection until every partner proxy has one too.

    Two flows logging through two such proxies are provably in flight at the same time:
    neither gets past its first MLflow request before the other has made one.
    """

    def __init__(self, target_port: int, barrier: threading.Barrier):
        self.barrier = barrier
        self.met: bool | None = None
        super().__init__(target_port)

    def _hold_first_connection(self) -> None:
        if self.met is None:
            try:
                self.barrier.wait(timeout=120)
                self.met = True
            except threading.BrokenBarrierError:
                self.met = False


@pytest.fixture(scope="session")
def _mlflow_launched(tmp_path_factory, free_port):
    """The session's MLflow server process, launched (not yet waited for)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"), free_port())
    server.launch()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _servers(_mlflow_launched, prefect_harness):
    """MLflow server + the shared Prefect test server (conftest), started in parallel."""
    _mlflow_launched.wait_healthy()
    return _mlflow_launched


@pytest.fixture
def server(_servers, monkeypatch):
    """The session's MLflow server, running; MLflow's own HTTP retries off (Prefect retries)."""
    if not _servers.is_up():
        _servers.start()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    return _servers


def tiny_config(tracking_uri: str, output_dir: Path, **overrides):
    from fairpca.flows.config import AuditConfig

    values = {
        "dataset": "german",
        "k": 10,  # k=2 leaves German no useful classifier: nothing would be registered
        "variants": VARIANTS,
        "lambdas": [0.0, 1.0],
        "classifiers": ["linear_svm"],
        "seed": 0,
        "tracking_uri": tracking_uri,
        "output_dir": output_dir,
        "experiment_name": "faults",
        "model_name": "fairpca-faults",
        "mlflow_retry_backoff": BACKOFF,
        # limits German's few hundred rows can certify, so that a version is registered
        "thresholds": {"max_dp_difference": 1.0, "min_selection_rate_ratio": 0.0},
        **overrides,
    }
    return AuditConfig(**values)


def run_in_thread(function, *args, **kwargs) -> tuple[threading.Thread, dict]:
    """Run ``function`` in a thread that sees this thread's Prefect settings context."""
    box: dict = {}
    context = contextvars.copy_context()

    def target():
        try:
            box["result"] = context.run(function, *args, **kwargs)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for info in client.list_artifacts(run_id, path):
        out |= artifact_paths(client, run_id, info.path) if info.is_dir else {info.path}
    return out


def run_hashes(client, run_id: str, tmp_path: Path) -> dict[str, str]:
    """The run's artifact ``hashes.json``: matrix name -> SHA-256."""
    local = client.download_artifacts(run_id, "hashes.json", str(tmp_path / run_id))
    return json.loads(Path(local).read_text())


def assert_complete_run(client, run_id: str, tmp_path: Path) -> None:
    """FINISHED, with every artifact, matrices matching their SHA-256 (``hashes.json``), a
    model version."""
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED", run.info.status
    assert run.data.metrics and run.data.params
    paths = artifact_paths(client, run_id)
    expected = {f"report/{name}" for name in REPORT_FILES} | {"metrics_table.json", "hashes.json"}
    for variant in VARIANTS:
        expected |= {f"projection/{variant}/components_.npy", f"projection/{variant}/mean_.npy"}
    assert expected <= paths, f"missing artifacts: {sorted(expected - paths)}"
    hashes = run_hashes(client, run_id, tmp_path)
    for variant in VARIANTS:
        local = client.download_artifacts(
            run_id, f"projection/{variant}/components_.npy", str(tmp_path / run_id)
        )
        digest = hashlib.sha256(Path(local).read_bytes()).hexdigest()
        assert digest == hashes[f"{variant}/components_"], f"{variant}: not its SHA-256"
        components = np.load(local)
        np.testing.assert_allclose(components @ components.T, np.eye(len(components)), atol=1e-8)
    versions = client.search_model_versions(f"run_id = '{run_id}'")
    # one version of its own, or the existing version of the very same fit (an earlier test
    # of this module audited the same rows with the same seed: not registered twice)
    assert len(versions) == 1 or run.data.tags.get("fairpca.model_version"), versions


def mlflow_client(uri: str):
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def wait_for_run(client, audit_id: str, *, with_metrics: bool, timeout: float = 120.0):
    """Poll the server until the audit's run exists (and has metrics); return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            runs = client.search_runs(
                [e.experiment_id for e in client.search_experiments()],
                filter_string=f"tags.`fairpca.audit_id` = '{audit_id}'",
            )
        except Exception:
            runs = []
        if runs and (runs[0].data.metrics or not with_metrics):
            return runs[0]
        time.sleep(0.05)
    raise AssertionError(f"run of audit {audit_id} did not appear within {timeout}s")


def read_flow_run(flow_run_id):
    import asyncio

    from prefect.client.orchestration import get_client

    async def read():
        async with get_client() as client:
            return await client.read_flow_run(flow_run_id)

    return asyncio.run(read())


def task_runs_of(flow_run_id):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read():
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )

    return asyncio.run(read())


def test_two_audits_at_once_keep_their_own_complete_artifacts(server, tmp_path):
    from fairpca.flows.audit import fairness_audit

    barrier = threading.Barrier(2)
    proxies = [RendezvousProxy(server.port, barrier) for _ in range(2)]
    configs = [
        tiny_config(proxy.uri, tmp_path / "out", seed=seed)
        for proxy, seed in zip(proxies, (1, 2), strict=True)
    ]
    try:
        started = [run_in_thread(fairness_audit, config) for config in configs]
        for thread, _ in started:
            thread.join(timeout=300)
    finally:
        for proxy in proxies:
            proxy.close()
    assert all(proxy.met for proxy in proxies), "one audit waited 120 s for the other to start"
    results = []
    for _, box in started:
        assert "error" not in box, f"audit failed: {box.get('error')!r}"
        results.append(box["result"])
    client = mlflow_client(server.uri)
    assert results[0].run_id != results[1].run_id
    assert results[0].model_version != results[1].model_version
    runs = [client.get_run(r.run_id) for r in results]
    # Each run holds its own config and its own matrices (different seeds, different splits).
    assert [run.data.params["seed"] for run in runs] == ["1", "2"]
    hashes = [run_hashes(client, run.info.run_id, tmp_path) for run in runs]
    assert hashes[0] and hashes[0] != hashes[1]
    for result in results:
        assert_complete_run(client, result.run_id, tmp_path)
    # The two flow runs really overlapped in time.
    flow_runs = [read_flow_run(run.data.tags["fairpca.prefect_flow_run_id"]) for run in runs]
    (s0, e0), (s1, e1) = [(f.start_time, f.end_time) for f in flow_runs]
    assert s0 < e1 and s1 < e0, f"flow runs did not overlap: {(s0, e0)}, {(s1, e1)}"


def test_short_outage_while_logging_is_retried_and_the_run_completes(server, tmp_path):
    from fairpca.flows.audit import fairness_audit

    proxy = OutageProxy(server.port)
    audit_id = f"outage-{uuid.uuid4().hex[:8]}"
    config = tiny_config(proxy.uri, tmp_path / "out", run_name=audit_id)
    direct = mlflow_client(server.uri)
    try:
        thread, box = run_in_thread(fairness_audit, config, return_state=True)
        wait_for_run(direct, audit_id, with_metrics=False)
        # Every connection fails until one request has been refused (a fixed window could
        # fall between two requests, or beside a request cut mid-flight that only times out
        # 20 s later), then for one more second; the task retries wait 1, 2 and 4 s.
        proxy.outage()
        refused_by = time.monotonic() + 120
        while proxy.dropped == 0 and time.monotonic() < refused_by:
            time.sleep(0.05)
        time.sleep(1.0)
        proxy.restore()
        thread.join(timeout=300)
    finally:
        proxy.close()
    assert "error" not in box, repr(box.get("error"))
    state = box["result"]
    assert state.is_completed(), state.message
    assert proxy.dropped > 0, "the outage hit no request; the test proved nothing"
    result = state.result()
    assert_complete_run(direct, result.run_id, tmp_path)
    retried = [t for t in task_runs_of(state.state_details.flow_run_id) if t.run_count > 1]
    assert any(t.name.startswith("mlflow-") for t in retried), "no MLflow task was retried"


def test_server_death_while_logging_fails_clearly_and_keeps_results(server, tmp_path, free_port):
    from fairpca.flows.audit import fairness_audit
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    audit_id = f"death-{uuid.uuid4().hex[:8]}"
    config = tiny_config(server.uri, tmp_path / "out", run_name=audit_id)
    client = mlflow_client(server.uri)
    thread, box = run_in_thread(fairness_audit, config, return_state=True)
    run = wait_for_run(client, audit_id, with_metrics=True)
    server.kill()  # half-way through logging: params and metrics are in, the rest is not
    started = time.monotonic()
    # Restart on the same store (SQLite + artifact root) on a new port, so it warms up while
    # the flow keeps failing against the dead one (artifact URIs are server-relative).
    server.port = free_port()
    server.launch()
    thread.join(timeout=300)
    failed_after = time.monotonic() - started
    assert "error" not in box, repr(box.get("error"))
    state = box["result"]
    assert state.is_failed(), f"flow did not fail: {state}"
    error = state.result(raise_on_failure=False)
    assert isinstance(error, MlflowLoggingError), repr(error)
    out_dir = tmp_path / "out" / audit_id
    message = str(error)
    assert str(out_dir.resolve()) in message and "fairpca relog" in message, message
    # Retries with back-off (1 + 2 + 4 s, with jitter) before giving up.
    assert failed_after >= 5 * BACKOFF, f"gave up after {failed_after:.1f}s: no back-off"
    # Everything is kept on local disk.
    for name in ["audit.json", *REPORT_FILES, "model/MLmodel"]:
        assert (out_dir / name).is_file(), name
    for variant in VARIANTS:
        assert (out_dir / "projection" / variant / "components_.npy").is_file()
    status = json.loads((out_dir / "mlflow_status.json").read_text())
    assert status["status"] == "FAILED" and status["run_id"] == run.info.run_id

    server.wait_healthy()
    # `fairpca relog` runs in a fresh process; this one cached the dead server's artifact
    # repository per run id, so forget it.
    from mlflow.tracking._tracking_service import utils as tracking_utils

    tracking_utils._artifact_repos_cache.clear()
    client = mlflow_client(server.uri)
    left = client.get_run(run.info.run_id)
    # The old address stays dead, so the run cannot be marked FAILED; the message says so.
    assert left.info.status == "RUNNING", left.info.status
    assert f"Run {run.info.run_id} could not be marked FAILED" in message, message
    assert "is marked FAILED" not in message, message

    from fairpca.flows.relog import relog_output_dir

    run_id = relog_output_dir(out_dir, server.uri)["run_id"]  # `fairpca relog DIR`
    assert_complete_run(client, run_id, tmp_path)
    # Points logged before the server died are not logged a second time.
    for key in client.get_run(run_id).data.metrics:
        steps = [point.step for point in client.get_metric_history(run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)
    status = json.loads((out_dir / "mlflow_status.json").read_text())
    assert status["status"] == "FINISHED" and status["run_id"] == run_id


def _wait_for_lines(process, log: Path, texts: tuple[str, ...], seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while not all(text in log.read_text() for text in texts):
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {texts} within {seconds} s"
        time.sleep(0.1)


def _writing_seconds(folder: Path) -> float:
    """How long the audit took to write its folder: first file to the seal."""
    from fairpca.tasks.trust import SEAL_FILE

    written = [p.stat().st_mtime for p in folder.rglob("*") if p.is_file()]
    return (folder / SEAL_FILE).stat().st_mtime - min(written)


def test_cli_audit_reports_a_dead_server_within_a_minute_and_relog_finishes_it(
    server, tmp_path, free_port, user_cli
):
    """``fairpca audit`` (a user's environment: MLflow's own HTTP retries are not turned off
    here) against a real server killed when the computation is done, just before the flow's
    first MLflow call (the champion look-up): one paragraph, naming the kept folder, within
    60 s (not counting the time the audit spends writing its folder meanwhile); the folder is
    complete and sealed; ``fairpca relog`` logs it to the restarted server."""
    from fairpca.tasks.mlflow_logging import check_relog_dir

    fairpca, env = user_cli
    audit_id = f"cli-death-{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "out" / audit_id
    log = tmp_path / "cli.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [fairpca, "audit", "--dataset", "german", "-k", "10", "--variants", "pca,fair_pca",
             "--lambdas", "0,1", "--classifiers", "linear_svm", "--seed", "0", "--verbose",
             "--tracking-uri", server.uri, "--output-dir", str(tmp_path / "out"),
             "--run-name", audit_id, "--experiment-name", "faults",
             "--model-name", "fairpca-faults-cli", "--mlflow-retry-backoff", str(BACKOFF)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        # the test rows are evaluated and the references trained: the MLflow part is next
        _wait_for_lines(process, log, ("Task run 'evaluate-test-part", "'reference-mitigations"))
        server.kill()
        killed = time.time()
        server.port = free_port()
        server.launch()  # the same store on a new port, warming up meanwhile
        code = process.wait(timeout=300)
        took = time.time() - killed
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    writing = _writing_seconds(folder)  # on this machine's load, not on MLflow
    print(f"the command ended {took:.1f} s after the server was killed ({writing:.1f} s writing)")
    assert code == 1, output
    assert took - writing < 60, output
    assert "Traceback" not in output
    message = output[output.index("MLflow logging failed:") :]
    unwrapped = "".join(message.split())  # rich folds long lines, paths too
    assert f"fairpcarelog{folder.resolve()}" in unwrapped, message
    assert "\n\n" not in message.strip(), message  # one paragraph
    check_relog_dir(folder)  # complete and sealed: every file as the seal lists it
    for name in ["audit.json", *REPORT_FILES, "model/MLmodel"]:
        assert (folder / name).is_file(), name

    server.wait_healthy()
    done = subprocess.run(
        [fairpca, "relog", str(folder), "--tracking-uri", server.uri],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split("MLflow run id:")[1].split()[0]
    assert_complete_run(mlflow_client(server.uri), run_id, tmp_path)


def test_bad_config_fails_at_validation_before_any_work(server, tmp_path):
    from fairpca.flows.audit import fairness_audit

    client = mlflow_client(server.uri)
    before = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    bad = {
        "dataset": "german",
        "data": str(tmp_path / "x.csv"),  # two data sources: a cross-field error
        "label": "y",
        "sensitive": ["s"],
        "k": 2,
        "tracking_uri": server.uri,
        "output_dir": str(tmp_path / "out"),
    }
    state = fairness_audit(config=bad, return_state=True)
    assert state.is_failed()
    assert "exactly one data source" in state.message, state.message
    assert task_runs_of(state.state_details.flow_run_id) == []
    assert not (tmp_path / "out").exists()
    after = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    assert after == before

    state = fairness_audit(config={"dataset": "german", "k": 0}, return_state=True)
    assert state.is_failed()
    assert "k" in state.message and "greater than or equal to 1" in state.message, state.message
