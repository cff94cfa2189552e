"""Checks for deployments/ci_e2e.sh, run against the live Prefect and MLflow servers.

Reads PREFECT_API_URL and MLFLOW_TRACKING_URI from the environment. Each subcommand exits
non-zero with a message that names what is missing.

    python deployments/e2e_checks.py params audit|retrain   # tiny run parameters (JSON)
    python deployments/e2e_checks.py deployments            # schedule, pool, pull step
    python deployments/e2e_checks.py audit FLOW_RUN_ID      # run, metrics, components_.npy
    python deployments/e2e_checks.py retrain FLOW_RUN_ID [--expect-first]
    python deployments/e2e_checks.py bad-params             # rejected before any work
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

AUDIT_DEPLOYMENT = "fairness-audit/on-demand"
RETRAIN_DEPLOYMENT = "retrain/scheduled"
MODEL_ALIAS = "champion"

# Small and fast: German credit (1000 rows, bundled), k=2, three lambdas, one classifier.
TINY_CONFIG = {
    "dataset": "german",
    "k": 2,
    "variants": ["pca", "fair_pca"],
    "lambdas": [0.0, 0.1, 1.0],
    "classifiers": ["logreg"],
    "seed": 0,
}


class CheckFailed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def tiny_params(kind: str) -> dict:
    config = dict(TINY_CONFIG)
    return {"config": config}


async def _read_deployment(client, name: str):
    return await client.read_deployment_by_name(name)


def check_deployments() -> None:
    from prefect.client.orchestration import get_client

    async def main():
        async with get_client() as client:
            audit = await _read_deployment(client, AUDIT_DEPLOYMENT)
            retrain = await _read_deployment(client, RETRAIN_DEPLOYMENT)
        return audit, retrain

    audit, retrain = asyncio.run(main())
    for dep in (audit, retrain):
        check(dep.work_pool_name == "fairpca-process", f"{dep.name}: pool {dep.work_pool_name}")
        steps = dep.pull_steps or []
        check(
            any("set_working_directory" in next(iter(s)) for s in steps),
            f"{dep.name}: expected a set_working_directory pull step, got {steps}",
        )
        check(
            not any("git_clone" in next(iter(s)) for s in steps),
            f"{dep.name}: pull steps must not clone: {steps}",
        )
        directory = next(iter(steps[0].values())).get("directory", "")
        checkout = os.environ.get("FAIRPCA_REPO_DIR")
        check(
            checkout is None or Path(directory).resolve() == Path(checkout).resolve(),
            f"{dep.name}: pull step directory {directory!r} is not the checkout {checkout!r}",
        )
        check(dep.enforce_parameter_schema, f"{dep.name}: parameter schema not enforced")
    check(not audit.schedules, f"audit must be on-demand, has schedules {audit.schedules}")
    crons = [s.schedule for s in retrain.schedules]
    check(len(crons) == 1, f"retrain must have one schedule, has {crons}")
    cron = crons[0]
    check(getattr(cron, "cron", None), f"retrain schedule is not a cron schedule: {cron}")
    check(cron.timezone == "UTC", f"retrain cron timezone must be UTC, is {cron.timezone}")
    print(f"    deployments ok: retrain cron {cron.cron!r} ({cron.timezone}), audit on-demand")


def _flow_run(flow_run_id: str):
    from prefect.client.orchestration import get_client

    async def main():
        async with get_client() as client:
            return await client.read_flow_run(flow_run_id)

    return asyncio.run(main())


def _mlflow_client():
    from mlflow import MlflowClient

    return MlflowClient()


def _runs_of_flow_run(client, flow_run) -> list:
    """Top-level MLflow runs created by one Prefect flow run.

    Uses the tag ``prefect.flow_run_id`` when the flow sets it, else the time window of the
    flow run (the e2e script runs deployments one after another on a fresh server).
    """
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, max_results=1000)
    top = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    tagged = [r for r in top if r.data.tags.get("prefect.flow_run_id") == str(flow_run.id)]
    if tagged:
        return tagged
    start = flow_run.start_time.timestamp() * 1000 - 1000
    end = flow_run.end_time.timestamp() * 1000 + 1000
    return [r for r in top if start <= r.info.start_time <= end]


def _artifact_paths(client, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for info in client.list_artifacts(run_id, path):
        out.extend(_artifact_paths(client, run_id, info.path) if info.is_dir else [info.path])
    return out


def check_audit(flow_run_id: str) -> str:
    flow_run = _flow_run(flow_run_id)
    check(flow_run.state.is_completed(), f"flow run {flow_run_id} is {flow_run.state.name}")
    client = _mlflow_client()
    runs = _runs_of_flow_run(client, flow_run)
    check(len(runs) == 1, f"expected one MLflow run for flow run {flow_run_id}, found {len(runs)}")
    run = runs[0]
    run_id = run.info.run_id
    check(run.info.status == "FINISHED", f"MLflow run {run_id} is {run.info.status}")
    check(run.data.metrics, f"MLflow run {run_id} has no metrics")
    artifacts = _artifact_paths(client, run_id)
    components = [p for p in artifacts if p.endswith("components_.npy")]
    check(components, f"no components_.npy among the artifacts of {run_id}: {artifacts}")
    with tempfile.TemporaryDirectory() as tmp:
        local = client.download_artifacts(run_id, components[0], tmp)
        matrix = np.load(local)
    check(matrix.ndim == 2, f"components_.npy has shape {matrix.shape}")
    versions = client.search_model_versions(f"run_id = '{run_id}'")
    check(versions, f"no registered model version comes from run {run_id}")
    print(
        f"    audit ok: MLflow run {run_id}, {len(run.data.metrics)} metrics, "
        f"{len(artifacts)} artifacts, components_ {matrix.shape}, "
        f"model {versions[0].name} v{versions[0].version}"
    )
    return run_id


def check_retrain(flow_run_id: str, expect_first: bool) -> None:
    flow_run = _flow_run(flow_run_id)
    check(flow_run.state.is_completed(), f"flow run {flow_run_id} is {flow_run.state.name}")
    client = _mlflow_client()
    runs = _runs_of_flow_run(client, flow_run)
    check(runs, f"no MLflow run for retrain flow run {flow_run_id}")
    versions = [
        v for r in runs for v in client.search_model_versions(f"run_id = '{r.info.run_id}'")
    ]
    check(len(versions) == 1, f"retrain must register one model version, found {versions}")
    version = versions[0]
    champion = client.get_model_version_by_alias(version.name, MODEL_ALIAS)
    decision = version.tags.get("decision")
    check(decision is not None, f"model version {version.version} has no decision tag")
    if expect_first:
        check(
            champion.version == version.version,
            f"first retrain: champion is v{champion.version}, expected v{version.version}",
        )
    else:
        promoted = champion.version == version.version
        check(
            decision == ("promoted" if promoted else "kept"),
            f"decision tag {decision!r} does not match alias on v{champion.version}",
        )
    print(
        f"    retrain ok: {version.name} v{version.version} decision={decision!r}, "
        f"champion v{champion.version}"
    )


def _prefect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args], capture_output=True, text=True, timeout=120
    )


def check_bad_params() -> None:
    # 1. A type error is refused by the server's parameter schema: no flow run is created.
    bad = tiny_params("audit")
    bad["config"]["k"] = "two"
    done = _prefect("deployment", "run", AUDIT_DEPLOYMENT, "--params", json.dumps(bad))
    out = done.stdout + done.stderr
    check(done.returncode != 0, f"bad type accepted:\n{out}")
    check("config.k" in out, f"rejection does not name the parameter:\n{out}")
    print("    schema rejection:", " ".join(out.split())[:300])


COMMANDS = {"deployments", "audit", "retrain", "bad-params", "params"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("arg", nargs="?")
    parser.add_argument("--expect-first", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "params":
            print(json.dumps(tiny_params(args.arg)))
        elif args.command == "deployments":
            check_deployments()
        elif args.command == "audit":
            check_audit(args.arg)
        elif args.command == "retrain":
            check_retrain(args.arg, args.expect_first)
        elif args.command == "bad-params":
            check_bad_params()
    except CheckFailed as exc:
        print(f"CHECK FAILED ({args.command}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
