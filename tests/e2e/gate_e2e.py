"""End-to-end check of the fairness gate on real servers on 127.0.0.1 (called by
deployments/ci_e2e.sh; runs alone too: ``python tests/e2e/gate_e2e.py``).

Starts an MLflow server (SQLite store, webhooks to loopback over http allowed for this test
only), a Prefect server, a process worker holding the gate's key (``fairpca gate keygen``)
and the receiver (``fairpca gate serve``), registers the webhook (twice: the second changes
nothing), then through a plain registrant (``gate_registrant.py``: scikit-learn and MLflow
only) runs the attacks of issue 28 as a registry user with write access would:

1. forged, stale, replayed and 300 MB deliveries are refused (401 / 409 / 413 at once) and
   start no flow run; ``/health`` shows its queue only to a signed caller;
2. a fair version (skops) gets a signed pass, a biased one (cloudpickle) a signed fail (the
   time from registration to the tag is printed);
3. ``champion`` set on the biased version is moved back to the fair one;
4. the status tag ``passed`` set by hand on the biased version, then ``champion``: moved
   back, tampering reported;
5. a gate run whose ``policy_dir`` parameter names another folder fails, changing nothing;
6. the receiver down, a version registered with the tag ``passed`` and made champion at once:
   the reconciler run the receiver queues when it starts moves the alias back;
7. a version registered while the Prefect server is down is gated once it is back;
8. the fair champion loads through ``load_champion`` (attestation verified, its ONNX graph
   served); its skops file is then replaced in the artifact store: the loader refuses it and
   ``fairpca gate reconcile`` removes the alias, with one line.

Every process runs in its own process group and is stopped on exit, also on failure.
Env: ``E2E_KEEP=1`` keeps the temp dir; ``GATE_E2E_TIMEOUT`` seconds per wait (default 240).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTRANT = Path(__file__).with_name("gate_registrant.py")
MODEL = "gate-e2e-credit"
TIMEOUT = float(os.environ.get("GATE_E2E_TIMEOUT", "240"))
POLICY = f"""model: {MODEL}
reference: {{path: reference.csv, label: approved, sensitive: [group]}}
thresholds: {{max_dp_difference: 0.1, max_eo_difference: 0.15}}
protected_aliases: [champion]
min_group_size: 30
n_resamples: 200
"""
T0 = time.monotonic()


def say(message: str) -> None:
    print(f"==> [{time.monotonic() - T0:6.1f}s] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Processes:
    """Background processes, each in its own session; stopped in reverse order."""

    def __init__(self, work: Path):
        self.work, self.running = work, {}

    def start(self, name: str, command: list[str], env: dict, cwd: Path | None = None) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the child)
        self.running[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd or self.work, start_new_session=True,
        )  # fmt: skip
        say(f"started {name} (pid {self.running[name].pid})")

    def stop(self, name: str) -> None:
        process = self.running.pop(name)
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGTERM, 12), (signal.SIGKILL, 10)):
            if process.poll() is not None:
                break
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout=wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # anything left in the group

    def stop_all(self) -> None:
        for name in reversed(list(self.running)):
            self.stop(name)

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.work / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path else ""


def registrant():
    """The plain registrant (scikit-learn and MLflow only), run in this process: it reads
    MLFLOW_TRACKING_URI like any user script (one interpreter start less per version)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gate_registrant", REGISTRANT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_for(what: str, check, timeout: float = TIMEOUT, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def run(command: list[str], env: dict, what: str) -> str:
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


class Gate:
    """The servers and clients of one end-to-end run."""

    def __init__(self, work: Path):
        from cryptography.fernet import Fernet

        self.work, self.procs = work, Processes(work)
        self.mlflow_port, self.prefect_port, self.gate_port = (free_port() for _ in range(3))
        self.secret = uuid.uuid4().hex + uuid.uuid4().hex
        self.policies = work / "policies"
        self.policies.mkdir()
        self.env = {
            **os.environ,
            "FAIRPCA_GATE_KEY_FILE": str(work / "gate-key" / "gate.key"),
            "PREFECT_HOME": str(work / "prefect-home"),
            "PREFECT_PROFILES_PATH": str(work / "prefect-home" / "profiles.toml"),
            "PREFECT_API_URL": f"http://127.0.0.1:{self.prefect_port}/api",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{work}/prefect.db",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{self.mlflow_port}",
            "FAIRPCA_GATE_POLICY_DIR": str(self.policies),
            "FAIRPCA_WEBHOOK_SECRET": self.secret,
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
            "MPLBACKEND": "Agg",
        }
        for name in ("MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
            self.env.pop(name, None)
        # for this test only: webhooks to a loopback receiver over plain http
        self.mlflow_env = {
            **self.env,
            "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
            "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
            "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": Fernet.generate_key().decode(),
            "MLFLOW_WEBHOOK_CACHE_TTL": "1",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        self.url = f"http://127.0.0.1:{self.gate_port}/webhook"

    # -- servers --
    def start_mlflow(self) -> None:
        self.procs.start("mlflow-server", [
            sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
            f"sqlite:///{self.work}/mlflow.db", "--artifacts-destination",
            str(self.work / "mlartifacts"), "--workers", "1", "--host", "127.0.0.1",
            "--port", str(self.mlflow_port),
        ], self.mlflow_env)  # fmt: skip

    def start_prefect(self) -> None:
        self.procs.start("prefect-server", [
            sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
            "--port", str(self.prefect_port), "--no-ui",
        ], self.env)  # fmt: skip

    def wait_prefect(self) -> None:
        wait_for("Prefect health", lambda: http_ok(f"{self.env['PREFECT_API_URL']}/health"))

    def setup(self) -> None:
        self.start_mlflow()
        self.start_prefect()
        registrant().make_data(seed=2).to_csv(self.policies / "reference.csv", index=False)
        (self.policies / "credit.yaml").write_text(POLICY)
        keygen = run([sys.executable, "-m", "fairpca.flows", "gate", "keygen"], self.env, "keygen")
        self.public_key = keygen.strip().splitlines()[-1]
        self.wait_prefect()
        prefect = [sys.executable, "-m", "prefect"]
        run([*prefect, "work-pool", "create", "fairpca-process", "--type", "process",
             "--overwrite"], self.env, "work pool")  # fmt: skip
        run([*prefect, "--no-prompt", "deploy", "--prefect-file", "deployments/prefect.yaml",
             "--name", "on-registration", "--name", "fairness-gate-reconcile/on-schedule"],
            self.env, "prefect deploy")  # fmt: skip
        self.procs.start(
            "prefect-worker",
            [
                *prefect,
                "worker",
                "start",
                "--pool",
                "fairpca-process",
                "--type",
                "process",
                "--limit",
                "2",
            ],
            self.env,
        )
        wait_for("MLflow health", lambda: http_ok(f"{self.env['MLFLOW_TRACKING_URI']}/health"))
        self.start_receiver()
        register = [sys.executable, "-m", "fairpca.flows", "gate", "register", "--model", MODEL,
                    "--url", self.url]  # fmt: skip
        first, second = (run(register, self.env, "gate register") for _ in range(2))
        assert " created " in first and " unchanged " in second, (first, second)
        say(f"webhook registered; again: {second.strip()}")

    def start_receiver(self) -> None:
        self.procs.start("gate-receiver", [
            sys.executable, "-m", "fairpca.flows", "gate", "serve", "--host", "127.0.0.1",
            "--port", str(self.gate_port), "--queue", str(self.work / "gate-queue.db"),
        ], self.env)  # fmt: skip
        wait_for("receiver health", lambda: http_ok(f"http://127.0.0.1:{self.gate_port}/health"))

    def health(self, signed: bool = True) -> dict:
        from fairpca.flows.gate_server import health_headers

        headers = health_headers(self.secret) if signed else {}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.gate_port}/health", headers=headers
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)

    # -- registry --
    def client(self):
        from mlflow import MlflowClient

        uri = self.env["MLFLOW_TRACKING_URI"]
        return MlflowClient(tracking_uri=uri, registry_uri=uri)

    def register(self, kind: str, **options) -> str:
        return registrant().register(MODEL, kind, **options)

    def champion(self) -> str | None:
        holder = self.client().get_registered_model(MODEL).aliases.get("champion")
        return None if holder is None else str(holder)

    def status_after_registration(self, version: str) -> tuple[str, float]:
        """Wait for the final gate status; (status, seconds from registration to the tag)."""
        client = self.client()

        def final():
            tags = client.get_model_version(MODEL, version).tags
            status = tags.get("fairness.gate.status")
            return status if status in ("passed", "failed", "error") else None

        status = wait_for(f"the gate status of version {version}", final, every=0.25)
        created = client.get_model_version(MODEL, version).creation_timestamp / 1000
        return status, time.time() - created

    def flow_runs(self) -> list[dict]:
        import asyncio

        from prefect.client.orchestration import get_client

        async def read():
            async with get_client() as prefect:
                return [r.parameters for r in await prefect.read_flow_runs()]

        return asyncio.run(read())

    def flow_run_state(self, flow_run_id):
        import asyncio

        from prefect.client.orchestration import get_client

        async def read():
            async with get_client() as prefect:
                return (await prefect.read_flow_run(flow_run_id)).state

        return asyncio.run(read())


def check_refusals(gate: Gate) -> None:
    from mlflow.webhooks.delivery import _generate_hmac_signature

    def delivery(name, version, *, secret=gate.secret, age=0, delivery_id=None):
        body = json.dumps({"entity": "model_version", "action": "created", "timestamp": "now",
                           "data": {"name": name, "version": version}})  # fmt: skip
        delivery_id = delivery_id or str(uuid.uuid4())
        stamp = str(int(time.time()) - age)
        return body.encode(), {
            "Content-Type": "application/json",
            "X-MLflow-Delivery-Id": delivery_id,
            "X-MLflow-Timestamp": stamp,
            "X-MLflow-Signature": _generate_hmac_signature(secret, delivery_id, stamp, body),
        }

    assert post(gate.url, *delivery(MODEL, "999", secret="wrong" * 8)) == 401
    assert post(gate.url, *delivery(MODEL, "999", age=3600)) == 401
    body, headers = delivery("not-watched", "1")
    assert post(gate.url, body, headers) == 202
    assert post(gate.url, body, headers) == 409
    started = time.monotonic()
    status, _ = flood(gate.gate_port, delivery(MODEL, "999", secret="wrong" * 8)[1])
    seconds = time.monotonic() - started
    assert status.startswith("HTTP/1.1 413") and seconds < 5, (status, seconds)
    assert gate.health(signed=False) == {"status": "ok"}
    assert "queue" in gate.health()
    time.sleep(3)  # a flow run would be created within the drain interval (1 s)
    started = [p for p in gate.flow_runs() if p.get("version") == "999"]
    assert not started, f"a refused delivery started flow runs: {started}"
    log = (gate.work / "gate-receiver.log").read_text()
    for reason in ("signature does not match", "stale timestamp", "replay", "limit"):
        assert reason in log, f"refusal {reason!r} not logged"
    assert gate.secret not in log
    say(f"wrong signature 401, stale 401, replay 409, 300 MB 413 in {seconds:.2f} s: refused, "
        "logged, no flow run; /health details only when signed")  # fmt: skip


def flood(port: int, headers: dict[str, str], total: int = 300 * 2**20) -> tuple[str, int]:
    """POST ``total`` bytes with a Content-Length; the status line, and the bytes sent
    before the receiver answered and closed."""
    import threading

    lines = ["POST /webhook HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {total}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent = [0]

    def send():
        block = b"x" * 2**20
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            while sent[0] < total:
                sock.sendall(block)
                sent[0] += len(block)
        except OSError:  # answered and closed: the rest is never read
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    status = sock.makefile("rb").readline().decode().strip()
    sock.close()
    sender.join(timeout=60)
    return status, sent[0]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="fairpca-gate-e2e."))
    gate = Gate(work)
    os.environ.update(gate.env)  # before prefect is imported here: it reads settings once
    ok = False
    try:
        gate.setup()
        check_refusals(gate)
        fair, biased = gate.register("fair", serialization="skops"), gate.register("biased")
        status, seconds = gate.status_after_registration(fair)
        assert status == "passed", f"fair version {fair}: {status}"
        say(f"fair version {fair}: passed; registration -> fairness.gate.status {seconds:.1f} s")
        status, seconds = gate.status_after_registration(biased)
        assert status == "failed", f"biased version {biased}: {status}"
        say(f"biased version {biased}: failed; registration -> status tag {seconds:.1f} s")
        check_champion(gate, fair, biased)
        check_hand_set_pass(gate, fair, biased)
        check_foreign_parameters(gate, biased)
        check_receiver_down(gate, fair)
        check_prefect_outage(gate)
        check_tampered_files(gate, fair)
        ok = True
    except BaseException:
        for name in ("gate-receiver", "prefect-worker", "mlflow-server"):
            print(f"---- last lines of {name}.log ----\n{gate.procs.tail(name)}", file=sys.stderr)
        raise
    finally:
        gate.procs.stop_all()
        say(f"GATE E2E {'PASSED' if ok else 'FAILED'}; work dir {work}")
        if ok and os.environ.get("E2E_KEEP") != "1":
            import shutil

            shutil.rmtree(work, ignore_errors=True)


def check_champion(gate: Gate, fair: str, biased: str) -> None:
    client = gate.client()
    client.set_registered_model_alias(MODEL, "champion", fair)  # as any registry user would
    wait_for("the fair champion to be recorded", lambda: client.get_registered_model(MODEL).tags
             .get("fairness.gate.champion.last_passed", "").split(",")[0] == fair)  # fmt: skip
    started = time.monotonic()
    client.set_registered_model_alias(MODEL, "champion", biased)

    def undone():
        tags = client.get_model_version(MODEL, biased).tags
        holder = client.get_registered_model(MODEL).aliases.get("champion")
        return "fairness.gate.alias_refused" in tags and str(holder) == fair

    wait_for("champion to move back from the biased version", undone)
    say(f"champion on biased version {biased} moved back to {fair} in "
        f"{time.monotonic() - started:.1f} s")  # fmt: skip


def check_hand_set_pass(gate: Gate, fair: str, biased: str) -> None:
    """Issue 28, 1: the status tag alone, set by hand, then the alias."""
    client = gate.client()
    client.set_model_version_tag(MODEL, biased, "fairness.gate.status", "passed")
    started = time.monotonic()
    client.set_registered_model_alias(MODEL, "champion", biased)

    def undone():
        tags = client.get_model_version(MODEL, biased).tags
        return "fairness.gate.tampering" in tags and gate.champion() == fair

    wait_for("the hand-set pass to be refused and reported", undone)
    tampering = client.get_model_version(MODEL, biased).tags["fairness.gate.tampering"]
    assert "says 'passed', but the gate's signed verdict is 'failed'" in tampering, tampering
    say(f"status tag 'passed' set by hand on v{biased} + champion: back on v{fair} in "
        f"{time.monotonic() - started:.1f} s, tampering reported")  # fmt: skip


def check_foreign_parameters(gate: Gate, biased: str) -> None:
    """Issue 28, 3: a Prefect API caller's gate run with a lenient policy folder."""
    from prefect.deployments import run_deployment

    lenient = gate.work / "lenient"
    lenient.mkdir()
    (lenient / "credit.yaml").write_text(POLICY.replace("0.1,", "1.0,"))
    (lenient / "reference.csv").write_bytes((gate.policies / "reference.csv").read_bytes())
    params = {"model_name": MODEL, "version": biased, "event": "model_version.created",
              "policy_dir": str(lenient)}  # fmt: skip
    flow_run = run_deployment("fairness-gate/on-registration", parameters=params, timeout=0)
    state = wait_for("the foreign-parameter run to end",
                     lambda: (s := gate.flow_run_state(flow_run.id)).is_final() and s)  # fmt: skip
    assert state.is_failed() and "not the gate worker's policy folder" in state.message, state
    tags = gate.client().get_model_version(MODEL, biased).tags
    assert tags["fairness.gate.status"] == "passed"  # the hand-set tag: the run touched nothing
    say(f"gate run with policy_dir={lenient}: {state.name}, {state.message[:70]}...")


def check_receiver_down(gate: Gate, fair: str) -> None:
    """Issue 28, 2: events sent while the receiver is down are lost; the reconciler run it
    queues when it starts again judges the version (issue 34) and takes the alias back."""
    gate.procs.stop("gate-receiver")
    forged = gate.register("biased", tags={"fairness.gate.status": "passed"})
    gate.client().set_registered_model_alias(MODEL, "champion", forged)
    say(f"receiver down: v{forged} registered with status 'passed' and made champion")
    time.sleep(10)  # MLflow's three delivery attempts (about 7 s) all fail
    started = time.monotonic()
    gate.start_receiver()
    wait_for(f"the reconciler to take champion back from v{forged}",
             lambda: gate.champion() == fair)  # fmt: skip
    refused = gate.client().get_model_version(MODEL, forged).tags["fairness.gate.alias_refused"]
    assert "signed verdict is 'failed'" in refused, refused  # judged by the reconciler first
    say(f"receiver restarted: champion back on v{fair} in {time.monotonic() - started:.1f} s "
        "(the reconciler run queued on start)")  # fmt: skip


def check_tampered_files(gate: Gate, fair: str) -> None:
    """The scorer's loader on an attested champion (its ONNX graph served); then its skops
    file replaced in the artifact store behind the valid attestation."""
    import mlflow.artifacts

    from fairpca.tasks.registry import load_champion
    from fairpca.tasks.trust import AttestationError

    os.environ["FAIRPCA_GATE_PUBLIC_KEY"] = gate.public_key  # a scorer holds the public key
    uri = gate.env["MLFLOW_TRACKING_URI"]
    frame = registrant().make_data(n=20, seed=5)
    expected = registrant().fit("fair")[0].predict(frame[registrant().FEATURES])
    assert (load_champion(MODEL, tracking_uri=uri).predict(frame) == expected).all()
    client = gate.client()
    run_id = client.get_model_version(MODEL, fair).run_id  # the folder: the run's artifacts
    local = Path(mlflow.artifacts.download_artifacts(
        artifact_uri=client.get_model_version_download_uri(MODEL, fair),
        dst_path=str(gate.work / "tamper"), tracking_uri=uri,
    ))  # fmt: skip
    (local / "model.skops").write_bytes((local / "model.skops").read_bytes() + b"\0")
    client.log_artifact(run_id, str(local / "model.skops"), "model")
    try:
        load_champion(MODEL, tracking_uri=uri)
        raise AssertionError("a changed model file was loaded")
    except AttestationError as error:
        assert "model files changed after the gate judged them" in str(error), error
    out = run([sys.executable, "-m", "fairpca.flows", "gate", "reconcile"], gate.env, "reconcile")
    lines = out.strip().splitlines()
    if lines[-1] == "0 protected alias(es) checked, 0 changed.":
        # the gate's own reconciler run (queued when the receiver restarted) got there first
        tags = client.get_model_version(MODEL, fair).tags
        said = [v for k, v in tags.items() if k.startswith("fairness.gate.")]
        assert any("model files changed" in value for value in said), (out, tags)
    else:
        assert lines[-1] == "1 protected alias(es) checked, 1 changed.", out
        assert f"refused for version {fair}" in lines[0] and "removed" in lines[0], out
    assert gate.champion() is None
    say(f"model file of champion v{fair} replaced: load_champion refused it; "
        f"`fairpca gate reconcile`: {lines[0][:90]}...")  # fmt: skip


def check_prefect_outage(gate: Gate) -> None:
    gate.procs.stop("prefect-server")
    say("Prefect server stopped; registering a version")
    version = gate.register("fair", serialization="skops")

    def queued_and_retrying():
        return gate.health()["queue"].get("pending", 0) >= 1

    wait_for("the event to wait in the receiver's queue", queued_and_retrying)
    log = gate.work / "gate-receiver.log"

    def delivery_id():
        for line in log.read_text().splitlines():
            if " queued: " in line and f"version='{version}'" in line:
                return line.split("delivery ", 1)[1].split()[0]
        return None

    queued = wait_for(f"the receiver to queue version {version}", delivery_id)
    wait_for("a failed start while Prefect is down (then retries with back-off)",
             lambda: f"for delivery {queued} (attempt 1" in log.read_text())  # fmt: skip
    gate.start_prefect()
    gate.wait_prefect()
    say("Prefect server back")
    status, seconds = gate.status_after_registration(version)
    assert status == "passed", f"version {version} after the outage: {status}"
    say(f"version {version} registered during the outage: {status} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
