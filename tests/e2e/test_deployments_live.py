"""deployments/prefect.yaml on a real Prefect server with its scheduler on and a process
worker started as the deployments page says (minutes: ``-m e2e``).

The static checks of the file are in ``tests/e2e/test_deployments.py``; ``ci_e2e.sh`` runs the
audit and retrain deployments with the scheduler off.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers import Background, prefect_server

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "deployments" / "prefect.yaml"
RECONCILER = "fairness-gate-reconcile/on-schedule"
# The reconciler's interval in the copy of prefect.yaml the test deploys (300 s as shipped):
# the worker runs for three of them.
INTERVAL = 15

READ_RUNS = """
import json, sys
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as client:
    names = {d.id: d.name for d in client.read_deployments()}
    runs = client.read_flow_runs(limit=200)
    print(json.dumps([{"deployment": names.get(run.deployment_id), "state": run.state_type.value,
                       "message": run.state.message if run.state else None} for run in runs]))
    deployment = client.read_deployment_by_name(sys.argv[1])
    print(json.dumps({"active": [s.active for s in deployment.schedules],
                      "description": deployment.description}))
"""


def _prefect(env: dict[str, str], *args: str, cwd: Path | None = None, check=True) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "prefect", *args], env=env, cwd=cwd, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0 or not check, done.stdout + done.stderr
    return done.stdout + done.stderr


def _runs_and_reconciler(env: dict[str, str]) -> tuple[list[dict], dict]:
    done = subprocess.run(
        [sys.executable, "-c", READ_RUNS, RECONCILER], env=env, capture_output=True,
        text=True, timeout=120, check=True,
    )  # fmt: skip
    runs, reconciler = done.stdout.strip().splitlines()[-2:]
    return json.loads(runs), json.loads(reconciler)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_shipped_deployments_run_clean_with_the_scheduler_on(user_cli, tmp_path, free_port):
    """``prefect deploy --all`` and the documented worker (MLflow and the data folder, no gate
    policy folder): no flow run fails while the worker runs for three reconciler intervals;
    the reconciler's schedule is paused and its description says how to resume it; a
    reconciler run started anyway fails with one line naming the missing variable."""
    _, env = user_cli
    port = free_port()
    text = PREFECT_FILE.read_text()
    assert text.count("interval: 300") == 1
    spec = tmp_path / "prefect.yaml"
    spec.write_text(text.replace("interval: 300", f"interval: {INTERVAL}"))
    scheduler = {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
    with prefect_server(env, port, tmp_path / "prefect-server.log", **scheduler):
        _prefect(env, "config", "set", f"PREFECT_API_URL=http://127.0.0.1:{port}/api")
        _prefect(env, "work-pool", "create", "fairpca-process", "--type", "process")
        _prefect(env, "--no-prompt", "deploy", "--all", "--prefect-file", str(spec), cwd=ROOT)
        worker_env = {
            **env,
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}",
            "FAIRPCA_DATA_DIR": str(ROOT.parent / "shared" / "datasets"),
            "PREFECT_WORKER_QUERY_SECONDS": "2",
        }
        worker_args = [sys.executable, "-m", "prefect", "worker", "start", "--pool",
                       "fairpca-process"]  # fmt: skip
        with Background(worker_args, worker_env, tmp_path / "worker.log", cwd=tmp_path) as worker:
            time.sleep(3 * INTERVAL + 10)  # the scheduler's loop (2 s) and the worker's poll
            runs, reconciler = _runs_and_reconciler(env)
            assert [run for run in runs if run["state"] in ("FAILED", "CRASHED")] == []
            assert reconciler["active"] == [False]
            assert "prefect deployment schedule resume" in reconciler["description"]
            assert "FAIRPCA_GATE_POLICY_DIR" in reconciler["description"]
            _prefect(env, "deployment", "run", RECONCILER, "--watch", "--watch-timeout", "240",
                     check=False)  # fmt: skip
            runs, _ = _runs_and_reconciler(env)
            worker_log = worker.output()
    (failed,) = [run for run in runs if run["state"] == "FAILED"]
    assert failed["deployment"] == "on-schedule"
    assert failed["message"].startswith("FAIRPCA_GATE_POLICY_DIR not set on this worker")
    assert "\n" not in failed["message"]
    assert "Traceback" not in worker_log, worker_log[-3000:]


@pytest.mark.e2e
@pytest.mark.slow
def test_the_shipped_retrain_promotes_on_its_own_data(prefect_harness, empty_store, tmp_path):
    """The retrain deployment's own parameters (Adult, its thresholds) make a champion on a
    first run: the schedule does not register versions that can never be promoted. Its
    outcome, champion check and verdict, is the flow run's state message."""
    import yaml

    from fairpca.flows.config import RetrainConfig
    from fairpca.flows.retrain import retrain

    spec = yaml.safe_load(PREFECT_FILE.read_text())
    (shipped,) = [d for d in spec["deployments"] if d["name"] == "scheduled"]
    config = RetrainConfig(**shipped["parameters"]["config"])
    config = config.model_copy(update={
        "tracking": config.tracking.model_copy(update={"tracking_uri": empty_store}),
        "output": config.output.model_copy(update={"output_dir": tmp_path / "out"}),
    })  # fmt: skip
    state = retrain(config, return_state=True)
    result = state.result()
    assert result.champion_moved and result.model_version == "1", state.message
    assert "challenger v1 became champion" in state.message
    assert " Verdict: PROMOTED to champion: test ΔDP " in state.message
