"""Checks for deployments/ci_e2e.sh, run against the live Prefect and MLflow servers.

Reads PREFECT_API_URL and MLFLOW_TRACKING_URI from the environment (E2E_OUTPUT_DIR, when set,
is where the flows keep their local results). Each subcommand exits non-zero with a message
that names what is wrong.

    python tests/e2e/e2e_checks.py params audit|retrain-promote|retrain-keep|retrain-demote
    python tests/e2e/e2e_checks.py deployments              # schedule, pool, pull step
    python tests/e2e/e2e_checks.py audit FLOW_RUN_ID        # run, metrics, matrices, model
    python tests/e2e/e2e_checks.py retrain-promote FLOW_RUN_ID     # first retrain: champion
    python tests/e2e/e2e_checks.py retrain-keep FLOW_RUN_ID        # champion holds, no
                                                                   # eligible challenger
    python tests/e2e/e2e_checks.py retrain-demote FLOW_RUN_ID      # champion fails the gate
                                                                   # on new rows: needs-review
    python tests/e2e/e2e_checks.py relog-demoted            # relog --force --promote of the
                                                            # demoted champion's own folder:
                                                            # the alias stays where it is
    python tests/e2e/e2e_checks.py bad-params               # rejected before any work
    python tests/e2e/e2e_checks.py plugin                   # MLflow 'fairness' evaluator
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

POOL = "fairpca-process"
AUDIT_DEPLOYMENT = "fairness-audit/on-demand"
RETRAIN_DEPLOYMENT = "fairness-retrain/scheduled"
ALIAS = "champion"
REVIEW_ALIAS = "needs-review"
AUDIT_MODEL = "fairpca-e2e-audit"
RETRAIN_MODEL = "fairpca-e2e"
VARIANTS = ["pca", "fair_pca"]

# Small and fast: German credit (1000 rows, bundled), three lambdas, one classifier (k=10 and
# a linear SVM: at k=2 no German classifier is useful enough to be registered).
TINY_CONFIG = {
    "seed": 0,
    "source": {"dataset": "german"},
    "representation": {"k": 10, "variants": VARIANTS, "lambdas": [0.0, 0.1, 1.0]},
    "evaluation": {"classifiers": ["linear_svm"]},
    "tracking": {"experiment_name": "fairpca-e2e"},
}
LENIENT = {
    "max_dp_difference": 1.0,
    "max_eo_difference": 1.0,
    "min_selection_rate_ratio": 0.0,
    "min_accuracy": 0.0,
}
IMPOSSIBLE = {**LENIENT, "min_accuracy": 1.0}
# Per retrain run: the champion is re-checked against the thresholds on the new test rows,
# the challenger must also be eligible (beat the majority class by min_accuracy_gain).
RETRAIN_RULES = {
    # (a reference that beats it on the test rows would otherwise keep it: promote anyway)
    "retrain-promote": {"thresholds": LENIENT, "min_accuracy_gain": 0.0, "promote_dominated": True},
    # the champion still passes; no challenger can beat the majority class by 0.5
    "retrain-keep": {"thresholds": LENIENT, "min_accuracy_gain": 0.5},
    # no model is 100% accurate: the champion fails the gate and goes to needs-review
    "retrain-demote": {"thresholds": IMPOSSIBLE, "min_accuracy_gain": 0.0},
}


class CheckFailed(AssertionError):
    pass


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def run_params(kind: str) -> dict:
    """Deployment run parameters: the tiny config (in sections), per run kind."""
    config = json.loads(json.dumps(TINY_CONFIG))  # a deep copy
    if os.environ.get("E2E_OUTPUT_DIR"):
        config["output"] = {"output_dir": os.environ["E2E_OUTPUT_DIR"]}
    if kind == "audit":
        config["tracking"]["model_name"] = AUDIT_MODEL
    elif kind in RETRAIN_RULES:
        config["tracking"]["model_name"] = RETRAIN_MODEL
        config["selection"] = dict(RETRAIN_RULES[kind])
        config["promotion"] = {"accuracy_tolerance": 0.01}
    else:
        raise CheckFailed(f"unknown parameter set {kind!r}")
    return {"config": config}


def _prefect_call(coroutine_function):
    from prefect.client.orchestration import get_client

    async def main():
        async with get_client() as client:
            return await coroutine_function(client)

    return asyncio.run(main())


def check_deployments() -> None:
    from prefect.exceptions import ObjectNotFound

    async def read(client):
        found = []
        for name in (AUDIT_DEPLOYMENT, RETRAIN_DEPLOYMENT):
            try:
                found.append(await client.read_deployment_by_name(name))
            except ObjectNotFound:
                names = [f"{d.flow_id}/{d.name}" for d in await client.read_deployments()]
                raise CheckFailed(f"deployment {name!r} not found; deployed: {names}") from None
        return found

    audit, retrain = _prefect_call(read)
    checkout = os.environ.get("FAIRPCA_REPO_DIR")
    for dep in (audit, retrain):
        check(dep.work_pool_name == POOL, f"{dep.name}: pool {dep.work_pool_name!r}, not {POOL}")
        steps = dep.pull_steps or []
        names = [next(iter(step)) for step in steps]
        check(
            names == ["prefect.deployments.steps.set_working_directory"],
            f"{dep.name}: expected one set_working_directory pull step (no clone), got {names}",
        )
        directory = steps[0][names[0]]["directory"]
        check(
            checkout is None or Path(directory).resolve() == Path(checkout).resolve(),
            f"{dep.name}: pull step directory {directory!r} is not the checkout {checkout!r}",
        )
        check(dep.enforce_parameter_schema, f"{dep.name}: parameter schema not enforced")
        env = (dep.job_variables or {}).get("env", {})
        check(
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES" in env,
            f"{dep.name}: job env should bound MLflow's HTTP retries, has {env}",
        )
    check(not audit.schedules, f"audit must be on-demand, has schedules {audit.schedules}")
    check(len(retrain.schedules) == 1, f"retrain must have one schedule: {retrain.schedules}")
    cron = retrain.schedules[0].schedule
    check(getattr(cron, "cron", None), f"retrain schedule is not a cron schedule: {cron}")
    check(cron.timezone == "UTC", f"retrain cron timezone must be UTC, is {cron.timezone}")
    check(retrain.schedules[0].active, "retrain schedule is not active")
    check(
        retrain.global_concurrency_limit and retrain.global_concurrency_limit.limit == 1,
        f"retrain must run one at a time: {retrain.global_concurrency_limit}",
    )
    print(f"    deployments ok: retrain cron {cron.cron!r} {cron.timezone}, audit on demand")


def _flow_run(flow_run_id: str):
    return _prefect_call(lambda client: client.read_flow_run(flow_run_id))


def _mlflow_client():
    from mlflow import MlflowClient

    return MlflowClient()


def _run_of_flow_run(client, flow_run_id: str):
    """The MLflow run the flow run logged (tag ``fairpca.prefect_flow_run_id``)."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(
        experiments, filter_string=f"tags.`fairpca.prefect_flow_run_id` = '{flow_run_id}'"
    )
    check(len(runs) == 1, f"expected one MLflow run for flow run {flow_run_id}, got {len(runs)}")
    return runs[0]


def _artifact_paths(client, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for info in client.list_artifacts(run_id, path):
        out.extend(_artifact_paths(client, run_id, info.path) if info.is_dir else [info.path])
    return out


def _completed_run(flow_run_id: str):
    flow_run = _flow_run(flow_run_id)
    check(flow_run.state.is_completed(), f"flow run {flow_run_id} is {flow_run.state.name}")
    client = _mlflow_client()
    run = _run_of_flow_run(client, flow_run_id)
    check(run.info.status == "FINISHED", f"MLflow run {run.info.run_id} is {run.info.status}")
    return client, run


def check_audit(flow_run_id: str) -> None:
    import numpy as np

    client, run = _completed_run(flow_run_id)
    run_id = run.info.run_id
    for key in ("accuracy", "dp_difference", "eo_difference"):
        check(key in run.data.metrics, f"metric {key!r} missing from run {run_id}")
    check(run.data.params.get("dataset") == "german", f"params of {run_id}: {run.data.params}")
    artifacts = set(_artifact_paths(client, run_id))
    for name in ("report/report.md", "report/report.html", "report/tradeoff.png"):
        check(name in artifacts, f"{name} missing from run {run_id}: {sorted(artifacts)}")
    check("hashes.json" in artifacts, f"hashes.json missing from run {run_id}")
    with tempfile.TemporaryDirectory() as tmp:
        hashes = json.loads(Path(client.download_artifacts(run_id, "hashes.json", tmp)).read_text())
        for variant in VARIANTS:
            path = f"projection/{variant}/components_.npy"
            check(path in artifacts, f"{path} missing from run {run_id}: {sorted(artifacts)}")
            local = client.download_artifacts(run_id, path, tmp)
            digest = hashlib.sha256(Path(local).read_bytes()).hexdigest()
            check(
                hashes.get(f"{variant}/components_") == digest,
                f"{path}: SHA-256 {digest} is not the one in hashes.json",
            )
            matrix = np.load(local)
            gram = matrix @ matrix.T
            check(
                matrix.shape[0] == TINY_CONFIG["representation"]["k"]
                and np.allclose(gram, np.eye(len(gram))),
                f"{path}: shape {matrix.shape}, rows not orthonormal",
            )
    versions = client.search_model_versions(f"run_id = '{run_id}'")
    check(len(versions) == 1, f"expected one model version from run {run_id}, got {versions}")
    version = versions[0]
    check(version.name == AUDIT_MODEL, f"registered under {version.name!r}, not {AUDIT_MODEL}")
    _registered_with_card(version, artifacts)
    print(
        f"    audit ok: run {run_id}: {len(run.data.metrics)} metrics, {len(artifacts)} "
        f"artifacts, components_ orthonormal with SHA-256 tags, model {version.name} "
        f"v{version.version}"
    )


FAIRNESS_TAGS = (
    "fairness.sensitive_features",
    "fairness.test.accuracy",
    "fairness.test.dp_difference.ci95_high",
    "fairness.test.eo_difference.ci95_low",
    "fairness.baseline.accuracy",
    "fairpca.model_sha256",
)


def _registered_with_card(version, artifacts: set[str]) -> None:
    """The version carries the fairness tags and its model card (description and artifact)."""
    missing = [key for key in FAIRNESS_TAGS if key not in version.tags]
    check(not missing, f"v{version.version} lacks tags {missing}")
    check(
        (version.description or "").startswith(
            ("PROMOTED to champion: ", "NOT promoted", "PASSES the gate: ")
        )
        and f"runs:/{version.run_id}/model_card.md" in version.description,
        f"v{version.version}'s description is not the verdict with the card's link: "
        f"{version.description!r:.80}",
    )
    check("model_card.md" in artifacts, f"model_card.md missing from the run: {sorted(artifacts)}")


def _retrain_outcome(flow_run_id: str, registers: bool = True):
    """The retrain's MLflow run, its registered version (None when ``registers`` is False:
    no challenger was eligible, so nothing may be registered) and the model's aliases."""
    client, run = _completed_run(flow_run_id)
    tags = run.data.tags
    versions = client.search_model_versions(f"run_id = '{run.info.run_id}'")
    same_fit = tags.get("fairpca.model_version_new") == "false" and tags["fairpca.model_version"]
    if registers and not versions and same_fit not in (False, "none"):
        # the very fit of an existing version is not registered again: that version stands
        versions = [client.get_model_version(RETRAIN_MODEL, same_fit)]
    expected = 1 if registers else 0
    check(
        len(versions) == expected,
        f"retrain must register {expected} model version(s), got {versions}",
    )
    for key in ("fairpca.decision", "fairpca.champion_moved", "mlflow.note.content"):
        check(key in tags, f"tag {key!r} missing from run {run.info.run_id}")
    version = versions[0] if versions else None
    if version is not None:
        check(version.name == RETRAIN_MODEL, f"registered under {version.name!r}")
        _registered_with_card(version, set(_artifact_paths(client, run.info.run_id)))
    aliases = {k: str(v) for k, v in client.get_registered_model(RETRAIN_MODEL).aliases.items()}
    return run, version, aliases


def _key_filter(key: str):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    return ArtifactFilter(key=ArtifactFilterKey(any_=[key]))


def _champion_was_rechecked(run, before: str | None) -> None:
    """The champion was evaluated on the new rows before training: metrics logged."""
    check(before not in (None, "none"), f"no champion was compared: {before!r}")
    metrics = run.data.metrics
    for key in ("champion_test_accuracy", "champion_test_dp_difference"):
        check(key in metrics, f"metric {key!r} missing: the champion was not re-checked")


def check_retrain_promote(flow_run_id: str) -> None:
    run, version, aliases = _retrain_outcome(flow_run_id)
    tags = run.data.tags
    check(
        tags["fairpca.decision"] == "promoted" and tags["fairpca.champion_moved"] == "true",
        f"lenient first retrain was not promoted: {tags['mlflow.note.content']}",
    )
    check(
        aliases.get(ALIAS) == version.version,
        f"'{ALIAS}' points to v{aliases.get(ALIAS)}, not the new v{version.version}",
    )
    print(f"    retrain ok: v{version.version} promoted, '{ALIAS}' -> v{aliases[ALIAS]}")


def check_retrain_keep(flow_run_id: str) -> None:
    run, _none, aliases = _retrain_outcome(flow_run_id, registers=False)
    tags = run.data.tags
    before = tags.get("fairpca.champion_version_before")
    reasons = tags["mlflow.note.content"]  # the run's description: verdict and reasons
    _champion_was_rechecked(run, before)
    check(
        tags["fairpca.decision"] == "not promoted" and tags["fairpca.champion_moved"] == "false",
        f"retrain without an eligible challenger was promoted: {reasons}",
    )
    check(
        aliases.get(ALIAS) == before,
        f"'{ALIAS}' moved to v{aliases.get(ALIAS)} (before: v{before})",
    )
    check(REVIEW_ALIAS not in aliases, f"a passing champion was sent to review: {aliases}")
    check(f"champion v{before}" in reasons, f"reasons do not cite the champion: {reasons}")
    print(
        f"    retrain ok: no eligible challenger registered, '{ALIAS}' stays on v{before}; "
        f"reasons: {reasons}"
    )


def check_retrain_demote(flow_run_id: str) -> None:
    run, _version, aliases = _retrain_outcome(flow_run_id)
    tags = run.data.tags
    before = tags.get("fairpca.champion_version_before")
    _champion_was_rechecked(run, before)
    check(
        tags.get("fairpca.champion_demoted_to") == REVIEW_ALIAS,
        f"the champion failing the gate was not demoted: {tags.get('mlflow.note.content')}",
    )
    check(
        aliases.get(REVIEW_ALIAS) == before and ALIAS not in aliases,
        f"aliases after the demotion: {aliases} (champion before: v{before})",
    )
    message = _flow_run(flow_run_id).state.message or ""
    check(
        f"champion v{before}" in message and REVIEW_ALIAS in message,
        f"the flow run's final state does not say the champion was demoted: {message!r}",
    )
    key = f"champion-watch-{RETRAIN_MODEL}"
    notes = _prefect_call(lambda client: client.read_artifacts(artifact_filter=_key_filter(key)))
    check(
        any(REVIEW_ALIAS in str(note.data).replace("\\", "") for note in notes),  # Markdown
        f"no Prefect artifact {key!r} names the demotion",
    )
    print(f"    retrain ok: v{before} -> '{REVIEW_ALIAS}', no '{ALIAS}'; state: {message}")


def check_relog_demoted() -> None:
    """Issue 28, 4: the champion the last retrain demoted to needs-review is relogged from
    its own sealed folder with ``--force --promote``: no alias moves, no version is added."""
    client = _mlflow_client()
    demoted = client.get_model_version_by_alias(RETRAIN_MODEL, REVIEW_ALIAS)
    run = client.get_run(demoted.run_id)
    folder = Path(os.environ["E2E_OUTPUT_DIR"]) / run.info.run_name
    check(folder.is_dir(), f"the demoted champion's folder {folder} is missing")
    before = {k: str(v) for k, v in client.get_registered_model(RETRAIN_MODEL).aliases.items()}
    versions = {v.version for v in client.search_model_versions(f"name = '{RETRAIN_MODEL}'")}
    done = subprocess.run(
        [sys.executable, "-m", "fairpca.flows", "relog", str(folder), "--force", "--promote"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    check(done.returncode == 0, f"relog failed ({done.returncode}): {done.stderr[-2000:]}")
    after = {k: str(v) for k, v in client.get_registered_model(RETRAIN_MODEL).aliases.items()}
    check(after == before, f"relog --promote moved an alias: {before} -> {after}")
    now = {v.version for v in client.search_model_versions(f"name = '{RETRAIN_MODEL}'")}
    check(now == versions, f"relog registered the same model again: {sorted(now - versions)}")
    print(f"    relog --force --promote of v{demoted.version}'s folder: aliases stay {after}")


def _prefect_cli(*args: str, timeout: float = 300) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "prefect", *args], capture_output=True, text=True, timeout=timeout
    )
    return done.returncode, done.stdout + done.stderr


def _flow_run_id(output: str) -> str:
    for line in output.splitlines():
        if "UUID:" in line:
            return line.split("UUID:")[1].strip()
    raise CheckFailed(f"no flow run id in the output:\n{output}")


def check_bad_params() -> None:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter

    # 1. A wrong type is refused by the deployment's parameter schema: no flow run at all.
    bad = run_params("audit")
    bad["config"]["representation"]["k"] = "two"
    code, out = _prefect_cli("deployment", "run", AUDIT_DEPLOYMENT, "--params", json.dumps(bad))
    check(code != 0, f"k='two' was accepted:\n{out}")
    where = "config.representation.k"
    check(where in out, f"the rejection does not name {where}:\n{out}")
    print("    schema:", " ".join(out.split())[-160:])

    # 2. A rule only the pydantic model knows (two data sources) fails at parameter
    #    validation when the worker starts the run: Failed, before any task.
    bad = run_params("audit")
    bad["config"]["source"] |= {"data": "/nonexistent/data.csv", "label": "y", "sensitive": ["s"]}
    code, out = _prefect_cli(
        "deployment", "run", AUDIT_DEPLOYMENT, "--params", json.dumps(bad), "--watch"
    )
    check(code != 0, f"a config with two data sources completed:\n{out}")
    flow_run_id = _flow_run_id(out)
    flow_run = _flow_run(flow_run_id)
    check(flow_run.state.is_failed(), f"flow run {flow_run_id} is {flow_run.state.name}")

    async def read(client):
        ids = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        tasks = await client.read_task_runs(flow_run_filter=ids)
        logs = await client.read_logs(LogFilter(flow_run_id={"any_": [flow_run_id]}))
        return tasks, logs

    tasks, logs = _prefect_call(read)
    check(not tasks, f"tasks ran before validation failed: {[t.name for t in tasks]}")
    text = "\n".join(log.message for log in logs) + "\n" + (flow_run.state.message or "")
    check("exactly one data source" in text, f"no readable validation message:\n{text}")
    line = next(x for x in text.splitlines() if "exactly one data source" in x)
    print(f"    validation: flow run {flow_run_id} Failed, no task ran: {line.strip()[:200]}")


def _plugin_data(n: int = 1500):
    """Synthetic evaluation rows: features (one a proxy of sex), sex, race, label."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    sex = rng.choice(["F", "M"], n)
    other = rng.normal(size=n)
    frame = pd.DataFrame(
        {
            "x_proxy": (sex == "M") + 0.4 * rng.normal(size=n),
            "x_other": other,
            "sex": sex,
            "race": rng.choice(["a", "b", "c"], n, p=[0.6, 0.39, 0.01]),
        }
    )
    frame["label"] = (other + 1.2 * (sex == "M") + 0.5 * rng.normal(size=n) > 0.6).astype(int)
    return frame


def _log_plugin_model(frame, columns: list[str]) -> tuple[str, object]:
    """A pipeline (select ``columns``, LogisticRegression) logged with mlflow.sklearn.

    MLflow's default classifier evaluator calls a scikit-learn model on all columns of the
    data, sensitive ones included; a pipeline that selects its columns accepts them.
    """
    import mlflow
    from mlflow.models import infer_signature
    from sklearn.compose import make_column_transformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    select = make_column_transformer(("passthrough", columns))
    model = make_pipeline(select, LogisticRegression()).fit(frame[columns], frame["label"])
    signature = infer_signature(frame[columns], model.predict(frame[columns]))
    with mlflow.start_run(run_name=f"plugin-model-{'-'.join(columns)}"):
        info = mlflow.sklearn.log_model(
            model, name="model", signature=signature, pip_requirements=["scikit-learn"]
        )
    return info.model_uri, model


def check_plugin() -> None:
    """mlflow.models.evaluate(..., evaluators=["default", "fairness"]) on the live server."""
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.models import MetricThreshold

    from fairpca.metrics import group_fairness

    mlflow.set_experiment("fairpca-e2e-plugin")
    frame = _plugin_data()
    config = {
        "fairness": {"sensitive_features": ["sex", "race"], "pos_label": 1},
        # MLflow's SHAP step of "default" fails on pandas string columns (as sex and race)
        "default": {"log_model_explainability": False},
    }
    results = {}
    for kind, columns in (("biased", ["x_proxy", "x_other"]), ("fair", ["x_other"])):
        model_uri, model = _log_plugin_model(frame, columns)
        with mlflow.start_run(run_name=f"plugin-evaluate-{kind}") as run:
            result = mlflow.models.evaluate(
                model_uri,
                frame,
                targets="label",
                model_type="classifier",
                evaluators=["default", "fairness"],
                evaluator_config=config,
            )
        direct = group_fairness(
            frame["label"], model.predict(frame[columns]), frame[["sex", "race"]], min_group_size=30
        )
        _check_plugin_run(run.info.run_id, result, direct)
        results[kind] = result
    gate = {"dp_difference": MetricThreshold(threshold=0.05, greater_is_better=False)}
    mlflow.validate_evaluation_results(gate, results["fair"])
    try:
        mlflow.validate_evaluation_results(gate, results["biased"], results["fair"])
    except MlflowException as exc:
        check("dp_difference" in str(exc), f"the gate failed for another reason: {exc}")
    else:
        raise CheckFailed("the biased model passed the dp_difference <= 0.05 gate")
    print(
        f"    plugin ok: dp_difference biased {results['biased'].metrics['dp_difference']:.3f} "
        f"(gate fails), fair {results['fair'].metrics['dp_difference']:.3f} (gate passes)"
    )


def _check_plugin_run(run_id: str, result, direct) -> None:
    """Metrics equal the direct computation; logged on the server with the artifacts."""
    metrics = result.metrics
    for name, value in direct.as_metrics().items():
        check(
            abs(metrics.get(name, float("nan")) - value) <= 1e-12,
            f"{name}: {metrics.get(name)} != {value}",
        )
    check("accuracy_score" in metrics, "the default evaluator did not run beside 'fairness'")
    check(not any("race:c" in name for name in metrics), "race 'c' (15 rows) was not suppressed")
    check("dp_difference.ci95_low" in metrics, "no confidence interval metrics")
    client = _mlflow_client()
    logged = client.get_run(run_id).data.metrics
    check(logged.get("dp_difference") == metrics["dp_difference"], f"run {run_id}: {logged}")
    artifacts = set(_artifact_paths(client, run_id))
    for name in ("fairness_groups.json", "fairness_groups.csv", "fairness_rates.png"):
        check(name in artifacts, f"{name} missing from run {run_id}: {sorted(artifacts)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command",
        choices=[
            "params",
            "deployments",
            "audit",
            "retrain-promote",
            "retrain-keep",
            "retrain-demote",
            "relog-demoted",
            "bad-params",
            "plugin",
        ],
    )
    parser.add_argument("arg", nargs="?")
    args = parser.parse_args(argv)
    try:
        if args.command == "params":
            print(json.dumps(run_params(args.arg)))
        elif args.command == "deployments":
            check_deployments()
        elif args.command == "audit":
            check_audit(args.arg)
        elif args.command == "retrain-promote":
            check_retrain_promote(args.arg)
        elif args.command == "retrain-keep":
            check_retrain_keep(args.arg)
        elif args.command == "retrain-demote":
            check_retrain_demote(args.arg)
        elif args.command == "relog-demoted":
            check_relog_demoted()
        elif args.command == "bad-params":
            check_bad_params()
        elif args.command == "plugin":
            check_plugin()
    except CheckFailed as exc:
        print(f"CHECK FAILED ({args.command}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
