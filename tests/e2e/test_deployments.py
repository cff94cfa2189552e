"""deployments/prefect.yaml and the e2e script, checked without servers (fast).

The deployments themselves run end to end in ``deployments/ci_e2e.sh`` (real MLflow and
Prefect servers, a process worker), which CI calls after the tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fairpca.tasks.record import resolved_model_name

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "deployments" / "prefect.yaml"
E2E_SCRIPT = ROOT / "deployments" / "ci_e2e.sh"


@pytest.fixture(scope="module")
def spec() -> dict:
    return yaml.safe_load(PREFECT_FILE.read_text())


@pytest.fixture(scope="module")
def deployments(spec) -> dict:
    return {d["name"]: d for d in spec["deployments"]}


@pytest.fixture(scope="module")
def flows(deployments):
    from prefect.flows import load_flow_from_entrypoint

    return {
        name: load_flow_from_entrypoint(str(ROOT / d["entrypoint"]))
        for name, d in deployments.items()
    }


def schema_of(flow) -> dict:
    from prefect.utilities.callables import parameter_schema

    return parameter_schema(flow).model_dump_for_openapi()


def test_deployments_point_at_the_flows(deployments, flows):
    assert set(deployments) == {"on-demand", "scheduled", "on-registration", "on-schedule"}
    assert deployments["on-registration"]["entrypoint"] == "flows/gate.py:fairness_gate"
    assert flows["on-registration"].name == "fairness-gate"
    assert flows["on-schedule"].name == "fairness-gate-reconcile"
    assert deployments["on-demand"]["entrypoint"] == "flows/audit.py:fairness_audit"
    assert deployments["scheduled"]["entrypoint"] == "flows/retrain.py:retrain"
    assert flows["on-demand"].name == "fairness-audit"
    assert flows["scheduled"].name == "fairness-retrain"
    for deployment in deployments.values():
        assert deployment["work_pool"]["name"] == "fairpca-process"
        assert deployment["enforce_parameter_schema"] is True


def test_retrain_is_scheduled_by_cron_in_utc_and_audit_is_on_demand(deployments):
    from prefect.client.schemas.schedules import CronSchedule

    (schedule,) = deployments["scheduled"]["schedules"]
    assert schedule["timezone"] == "UTC" and schedule["active"] is True
    cron = CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])
    assert cron.cron == "0 3 * * 1"
    assert not deployments["on-demand"].get("schedules")
    assert deployments["scheduled"]["concurrency_limit"] == 1  # retrains never race the alias


def test_pull_step_uses_the_local_checkout_without_cloning(spec):
    (build,) = spec["build"]
    (pull,) = spec["pull"]
    assert build == {
        "prefect.deployments.steps.run_shell_script": {
            "id": "checkout",
            "script": "pwd",
            "stream_output": False,
        }
    }
    assert pull == {
        "prefect.deployments.steps.set_working_directory": {"directory": "{{ checkout.stdout }}"}
    }


def test_deployment_parameters_are_valid_configs(deployments):
    from fairpca.flows.config import AuditConfig, RetrainConfig

    audit = AuditConfig(**deployments["on-demand"]["parameters"]["config"])
    retrain = RetrainConfig(**deployments["scheduled"]["parameters"]["config"])
    assert audit.source.dataset == retrain.source.dataset == "adult"
    assert retrain.tracking.champion_alias == "champion"
    assert retrain.selection.thresholds.max_dp_difference == 0.05
    assert retrain.promotion.accuracy_tolerance == 0.01


def test_job_env_bounds_mlflow_http_retries(deployments):
    for deployment in deployments.values():
        env = deployment["work_pool"]["job_variables"]["env"]
        assert int(env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]) <= 3
        assert int(env["MLFLOW_HTTP_REQUEST_TIMEOUT"]) <= 120


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"representation": {"k": "two"}}, "'two' is not valid under any of the given schemas"),
        ({"bogus": 1}, "'bogus' was unexpected"),
        ({"source": {"dataset": "mnist"}}, "'mnist' is not one of"),
        # the server's schema has the sections only (the model also nests a flat key)
        ({"k": 2}, "'k' was unexpected"),
    ],
)
def test_server_side_schema_rejects_bad_parameters(deployments, flows, change, message):
    """What the Prefect server checks when a run is created (enforce_parameter_schema)."""
    from prefect.utilities.schema_tools import ValidationError, validate

    for name in ("on-demand", "scheduled"):
        schema = schema_of(flows[name])
        good = deployments[name]["parameters"]
        validate(good, schema, raise_on_error=True, preprocess=True, ignore_required=False)
        bad = {"config": {**good["config"], **change}}
        with pytest.raises(ValidationError, match=message):
            validate(bad, schema, raise_on_error=True, preprocess=True, ignore_required=False)


def test_gate_deployment_takes_the_event_and_refuses_others(deployments, flows):
    from prefect.utilities.schema_tools import ValidationError, validate

    assert deployments["on-registration"]["enforce_parameter_schema"] is True
    assert not deployments["on-registration"].get("schedules")
    schema = schema_of(flows["on-registration"])
    good = {"model_name": "credit", "version": "3", "event": "model_version.created"}
    validate(good, schema, raise_on_error=True, preprocess=True, ignore_required=False)
    for bad in ({**good, "event": "model_version_tag.set"}, {"model_name": "credit"}):
        with pytest.raises(ValidationError):
            validate(bad, schema, raise_on_error=True, preprocess=True, ignore_required=False)


def test_the_reconciler_runs_every_five_minutes_and_is_what_the_receiver_starts(deployments, flows):
    from fairpca.flows.gate_server import RECONCILE_DEPLOYMENT

    (schedule,) = deployments["on-schedule"]["schedules"]
    # deployed paused: a worker without the gate's policy folder would fail every run
    assert schedule == {"interval": 300, "active": False}
    assert "schedule resume" in deployments["on-schedule"]["description"]
    assert deployments["on-schedule"]["concurrency_limit"] == 1
    assert f"{flows['on-schedule'].name}/on-schedule" == RECONCILE_DEPLOYMENT
    assert set(schema_of(flows["on-schedule"])["properties"]) == {"policy_dir", "tracking_uri"}


def test_e2e_params_are_valid_configs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("e2e_checks", ROOT / "tests/e2e/e2e_checks.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    from fairpca.flows.config import AuditConfig, RetrainConfig

    AuditConfig(**checks.run_params("audit")["config"])
    configs = {
        kind: RetrainConfig(**json.loads(json.dumps(checks.run_params(kind)))["config"])
        for kind in ("retrain-promote", "retrain-keep", "retrain-demote")
    }
    # one registered model: the champion of the first run is re-checked by the next ones
    names = {
        resolved_model_name(c.source, c.tracking.model_name, c.selection.policy)
        for c in configs.values()
    }
    assert names == {checks.RETRAIN_MODEL}
    keep, promote = configs["retrain-keep"].selection, configs["retrain-promote"].selection
    assert keep.thresholds == promote.thresholds
    assert configs["retrain-keep"].selection.min_accuracy_gain == 0.5  # no challenger is eligible
    assert configs["retrain-demote"].selection.thresholds.min_accuracy == 1.0  # the champion fails


def test_e2e_script_runs_and_checks_every_retrain_scenario():
    script = E2E_SCRIPT.read_text()
    for kind in ("retrain-promote", "retrain-keep", "retrain-demote"):
        assert f'run_deployment "fairness-retrain/scheduled" {kind} ' in script
        assert f'check {kind} "$FLOW_RUN_ID"' in script
    order = [
        script.index(f"check {kind} ")
        for kind in ("audit", "retrain-promote", "retrain-keep", "retrain-demote")
    ]
    assert order == sorted(order)


def test_audit_and_retrain_deployments_share_the_identity_model_name(deployments):
    from fairpca.flows.config import AuditConfig, RetrainConfig

    audit = AuditConfig(**deployments["on-demand"]["parameters"]["config"])
    retrain = RetrainConfig(**deployments["scheduled"]["parameters"]["config"])
    assert audit.tracking.model_name is None and retrain.tracking.model_name is None
    names = {
        resolved_model_name(config.source, None, config.selection.policy)
        for config in (audit, retrain)
    }
    assert names == {"fairpca-adult-income_gt_50k-sex"}  # the same data and policy


def test_e2e_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(E2E_SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", "-S", "warning", str(E2E_SCRIPT)], text=True)
        assert done.returncode == 0
