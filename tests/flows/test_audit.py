"""Real flow runs (Prefect test server) against a real MLflow SQLite store, read back through
MlflowClient: params, metrics, projection matrices, report, registered model version."""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairpca.tasks.record import resolved_model_name

pytestmark = [pytest.mark.flow, pytest.mark.slow]

mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def store(mlflow_store):
    """The session's MLflow SQLite store (each test uses its own model name); also the
    global tracking and registry URI, for ``mlflow.<flavor>.load_model("models:/...")``."""
    mlflow.set_tracking_uri(mlflow_store[0])
    mlflow.set_registry_uri(mlflow_store[0])
    return mlflow_store


def make_config(store, tmp_path, **overrides):
    from fairpca.flows.config import AuditConfig

    values = {
        "dataset": "adult",
        "k": 4,
        "variants": ["pca", "fair_pca"],
        "lambdas": [0.0, 0.125, 1.0],
        "classifiers": ["logreg"],
        "n_train": 1500,
        "n_validation": 1000,
        "n_test": 1000,
        "metric_max_rows": 300,
        # limits that 1,000 validation rows can resolve (the certification): the defaults
        # (0.05, 0.8) need about 2,500 at Adult's selection rates
        "thresholds": {"max_dp_difference": 0.15, "min_selection_rate_ratio": 0.5},
        "tracking_uri": store[0],
        "output_dir": tmp_path / "out",
        "model_name": f"fairpca-test-{tmp_path.name}",
        **overrides,
    }
    return AuditConfig(**values)


def download(client, run_id: str, path: str, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    return Path(client.download_artifacts(run_id, path, str(dst)))


def artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for info in client.list_artifacts(run_id, path):
        out |= artifact_paths(client, run_id, info.path) if info.is_dir else {info.path}
    return out


def training_design(config, preprocess):
    """Rebuild the audit's training rows (same seed) and encode them with the logged step."""
    from fairpca.tasks.data import load_source, split_data

    split = split_data.fn(
        load_source(config.source),
        config.split,
        config.source,
        seed=config.seed,
        min_group_size=config.evaluation.min_group_size,
    )
    return preprocess.transform(split.X_train), split


def assert_fair_constraint(U, mean, Z, groups: pd.DataFrame, atol=1e-8):
    projected = (Z - mean) @ U.T
    scale = max(1.0, float(np.abs(projected).max()))
    for column in groups.columns:
        labels = groups[column].to_numpy()
        means = np.stack([projected[labels == g].mean(axis=0) for g in np.unique(labels)])
        assert np.abs(means - means[0]).max() <= atol * scale, column


def test_audit_adult_end_to_end(prefect_harness, store, tmp_path):
    from fairpca.flows.audit import as_model_input, fairness_audit

    _uri, client = store
    # a reference mitigation may dominate on these 1,000 test rows (then the default keeps the
    # champion); this test follows a promotion through the registry, so it asks for one
    config = make_config(store, tmp_path, promote_dominated=True)
    started = time.perf_counter()
    result = fairness_audit(config)
    elapsed = time.perf_counter() - started

    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == result.run_name
    params = run.data.params
    assert params["k"] == "4" and params["variants"] == "pca,fair_pca"
    assert params["thresholds.max_dp_difference"] == "0.15"
    assert params["dataset"] == "adult" and params["n_train"] == "1500"
    metrics = run.data.metrics
    for key in ("accuracy", "dp_difference", "eo_difference"):  # the test rows' headline
        assert key in metrics and f"validation.{key}" in metrics
    assert {"validation.var_explained", "validation.mmd2"} <= set(metrics)
    # groups under the data's own names (the loader codes sex as 0 / 1)
    assert {
        "selection_rate.sex:Female",
        "selection_rate.sex:Male",
        "tpr.sex:Female",
        "tpr.sex:Male",
    } <= set(metrics)
    assert not any(key.endswith(("sex:0", "sex:1")) for key in metrics)
    stage_seconds = [
        metrics[key] for key in ("time_load_data_s", "time_lambda_sweep_s", "time_mlflow_logging_s")
    ]
    assert all(seconds > 0 for seconds in stage_seconds)  # each stage was timed, in seconds
    assert sum(stage_seconds) < elapsed
    history = client.get_metric_history(result.run_id, "fair_pca/logreg/accuracy")
    assert sorted(m.step for m in history) == [0, 1, 2]
    lambdas = client.get_metric_history(result.run_id, "fair_pca/lambda")
    assert sorted((m.step, m.value) for m in lambdas) == [(0, 0.0), (1, 0.125), (2, 1.0)]

    # projection matrices: SHA-256 (hashes.json), orthonormal rows, fair constraint
    tags = run.data.tags
    assert not any(key.startswith("fairpca.sha256") for key in tags)
    local = tmp_path / "dl"
    hashes = json.loads(download(client, result.run_id, "hashes.json", local).read_text())
    U_path = download(client, result.run_id, "projection/fair_pca/components_.npy", local)
    mean_path = download(client, result.run_id, "projection/fair_pca/mean_.npy", local)
    assert hashlib.sha256(U_path.read_bytes()).hexdigest() == hashes["fair_pca/components_"]
    U, mean = np.load(U_path), np.load(mean_path)
    np.testing.assert_allclose(U @ U.T, np.eye(4), atol=1e-10)
    model = mlflow.sklearn.load_model(
        f"models:/{resolved_model_name(config.source, config.tracking.model_name)}/1"
    )
    Z, split = training_design(config, model.named_steps["preprocess"])
    assert_fair_constraint(U, mean, Z, split.s_train)

    # report, table, config artifacts
    paths = artifact_paths(client, result.run_id)
    expected = {
        "report/report.md",
        "report/report.html",
        "report/tradeoff.png",
        "report/config.json",
        "report/metrics.csv",
        "metrics_table.json",
    }
    assert expected <= paths
    report = download(client, result.run_id, "report/report.md", local).read_text()
    assert report.startswith("# ") and "## Verdict" in report and "tradeoff.png" in report
    resolved = json.loads(download(client, result.run_id, "report/config.json", local).read_text())
    assert resolved["representation"]["k"] == 4  # config.json: the config, in sections
    assert resolved["source"]["sensitive"] == ["sex"]  # the attribute actually used (default)
    page = download(client, result.run_id, "report/report.html", local).read_text()
    assert "**" not in page and "\n- " not in page and "<li>" in page
    assert (
        page.index('id="verdict"') < page.index("Groups of the chosen model") < page.index("<img")
    )
    plot = (Path(result.output_dir) / "tradeoff.png").read_bytes()  # drawn once, inlined as is
    assert f"data:image/png;base64,{base64.b64encode(plot).decode()}" in page

    # the selection handed to the registry: chosen on validation, reported on test, baselines
    selection = json.loads((Path(result.output_dir) / "audit.json").read_text())["selection"]
    assert selection["split"] == {"n_train": 1500, "n_validation": 1000, "n_test": 1000}
    assert selection["gate"] == "point"  # the default gate: validation estimates
    for part in ("validation", "test"):
        for name in ("accuracy", "dp_difference", "eo_difference"):
            low, high = selection[part][f"{name}.ci95_low"], selection[part][f"{name}.ci95_high"]
            assert low <= selection[part][name] <= high
    assert selection["baselines"]["majority"]["test"]["accuracy"] > 0.7
    assert selection["baselines"]["pca"]["name"].startswith("pca/")
    assert set(selection["group_sizes"]["sex"]) == {"Female", "Male"}
    assert metrics["accuracy"] == selection["test"]["accuracy"]
    assert {"majority", "PCA (best)", "chosen"} <= {row["role"] for row in result.summary}
    assert Path(result.report_path).is_file()

    # registered model version with fairness tags; it passes the default gate (the validation
    # estimates), so it is the champion
    name = resolved_model_name(config.source, config.tracking.model_name)
    version = client.get_model_version(name, result.model_version)
    assert version.run_id == result.run_id
    assert {"fairness.test.accuracy", "fairness.test.dp_difference.ci95_high"} <= set(version.tags)
    assert result.decision == version.tags["fairness.decision"] == "promote"
    assert result.champion_moved
    champion = client.get_model_version_by_alias(name, "champion")
    assert str(champion.version) == result.model_version
    pyfunc = mlflow.pyfunc.load_model(f"models:/{name}/{version.version}")
    predictions = np.asarray(pyfunc.predict(as_model_input(split.X_train.head(20))))
    assert predictions.shape == (20,) and set(np.unique(predictions)) <= {0, 1}
    assert_registered_with_its_graph(result, version, model, split, local)

    # the Prefect UI shows the summary (markdown + table) and the sweep progress
    assert tags["fairpca.task_runner"] == "ThreadPoolTaskRunner"
    kinds = prefect_artifact_types(tags["fairpca.prefect_flow_run_id"])
    assert {"markdown", "table", "progress"} <= kinds


def assert_registered_with_its_graph(result, version, pipeline, split, local: Path) -> None:
    """The registered version's model folder holds the ONNX graph the audit checked: MLflow's
    onnx flavour reading model.onnx, whose SHA-256 the record and the version tag name, and
    which predicts what the pipeline predicts."""
    import yaml

    from fairpca.tasks import onnx_export, onnx_runtime

    graph_record = json.loads((Path(result.output_dir) / "audit.json").read_text())["onnx"]
    assert graph_record["status"] == "exported" and graph_record["reason"] is None
    assert graph_record["rows_checked"] == 1000 and graph_record["checked_on"] == "validation"
    folder = Path(
        mlflow.artifacts.download_artifacts(version.source, dst_path=str(local / "version"))
    )
    data = (folder / onnx_export.ONNX_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert digest == graph_record["sha256"] == version.tags[onnx_export.ONNX_SHA_TAG]
    flavors = yaml.safe_load((folder / "MLmodel").read_text())["flavors"]
    assert flavors["onnx"]["data"] == "model.onnx"
    assert flavors["python_function"]["loader_module"] == "mlflow.sklearn"
    rows = split.X_test.head(200)
    labels = onnx_export.graph_labels(onnx_runtime.graph_of(data), rows)
    np.testing.assert_array_equal(labels, pipeline.predict(rows))


def prefect_artifact_types(flow_run_id: str) -> set[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {artifact.type for artifact in artifacts}


@pytest.mark.e2e  # whole audits in sequence (about 30 s); CI runs them with -m e2e
def test_multi_attribute_and_equal_opportunity(prefect_harness, store, tmp_path):
    from fairpca.flows.audit import fairness_audit

    _uri, client = store
    config = make_config(
        store,
        tmp_path,
        sensitive=["sex", "race"],
        variants=["fair_pca", "fair_pca_eo"],
        lambdas=[0.0, 1.0],
        n_train=30000,  # every race group needs positive rows for equal opportunity
        promote_dominated=True,  # this test follows the promotion; dominance is tested apart
        thresholds={
            "max_dp_difference": 1.0,
            "max_eo_difference": 1.0,
            "min_selection_rate_ratio": 0.0,
        },
    )
    result = fairness_audit(config)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["sensitive"] == "sex,race"
    assert run.data.tags["fairpca.sensitive"] == "sex,race"
    metrics = run.data.metrics
    assert any(key.startswith("selection_rate.sex:") and "/race:" in key for key in metrics)
    assert "dp_difference.race" in metrics and "eo_difference.sex" in metrics
    # multi-attribute stacking and the EO subset: the constrained gap vanishes at lambda=0
    for variant in ("fair_pca", "fair_pca_eo"):
        history = client.get_metric_history(result.run_id, f"{variant}/mean_gap_train")
        assert min(h.value for h in history if h.step == 0) < 1e-8
    assert result.champion_moved, result.reasons  # limits 1.0 pass

    model = mlflow.sklearn.load_model(
        f"models:/{resolved_model_name(config.source, config.tracking.model_name)}@champion"
    )
    Z, split = training_design(config, model.named_steps["preprocess"])
    local = tmp_path / "dl"
    U = np.load(download(client, result.run_id, "projection/fair_pca_eo/components_.npy", local))
    mean = np.load(download(client, result.run_id, "projection/fair_pca_eo/mean_.npy", local))
    positive = split.y_train == 1  # equal opportunity constrains the positive rows (Sec. 3.2)
    assert_fair_constraint(U, mean, Z[positive], split.s_train[positive].reset_index(drop=True))


def count_file_hashes(monkeypatch) -> collections.Counter:
    """How often each file content (name, SHA-256) is hashed, wherever the project hashes."""
    import fairpca.tasks.record
    import fairpca.tasks.report
    import fairpca.tasks.trust

    hashed, real = collections.Counter(), fairpca.tasks.trust.sha256_file

    def counting(path, *args, **kwargs):
        digest = real(path, *args, **kwargs)
        hashed[Path(path).name, digest] += 1
        return digest

    for module in (fairpca.tasks.trust, fairpca.tasks.record, fairpca.tasks.report):
        monkeypatch.setattr(module, "sha256_file", counting)  # the stages call trust's
    return hashed


def test_user_csv_and_failed_thresholds_keep_the_champion(
    prefect_harness, store, tmp_path, monkeypatch
):
    from fairpca.flows.audit import fairness_audit

    _uri, client = store
    hashed = count_file_hashes(monkeypatch)
    rng = np.random.default_rng(3)
    n = 600
    group = rng.choice(["a", "b"], size=n)
    score = rng.normal(size=n) + (group == "a")
    frame = pd.DataFrame(
        {
            # noisy enough not to be excluded as target leakage (alone < 0.80 balanced accuracy)
            "x1": score + rng.normal(scale=1.0, size=n),
            "x2": rng.normal(size=n),
            "x3": rng.normal(size=n) + 0.5 * (group == "a"),
            "colour": rng.choice(["red", "green", "blue"], size=n),
            "group": group,
            "outcome": np.where(score > 0.5, "yes", "no"),
        }
    )
    path = tmp_path / "people.csv"
    frame.to_csv(path, index=False)
    config = make_config(
        store,
        tmp_path,
        dataset=None,
        data=path,
        label="outcome",
        positive_label="yes",
        sensitive=["group"],
        k=2,
        thresholds={"min_accuracy": 0.999},
    )
    result = fairness_audit(config)
    assert result.decision == "keep" and not result.champion_moved
    assert any(r.kind == "fails_gate" for r in result.record.decision.reasons)
    # each file's content hashed twice: when written or sealed, and as its copy is uploaded
    assert max(hashed.values()) == 2, hashed.most_common(3)
    assert {name for name, _ in hashed} >= {"model.skops", "components_.npy", "audit.json"}
    version = client.get_model_version(
        resolved_model_name(config.source, config.tracking.model_name), result.model_version
    )
    assert version.tags["fairness.decision"] == "keep"
    with pytest.raises(mlflow.exceptions.MlflowException):
        client.get_model_version_by_alias(
            resolved_model_name(config.source, config.tracking.model_name), "champion"
        )
    model = mlflow.pyfunc.load_model(
        f"models:/{resolved_model_name(config.source, config.tracking.model_name)}/1"
    )
    assert len(model.predict(frame.drop(columns=["group", "outcome"]).head(5))) == 5
    # privacy: the signature and the input example carry no sensitive column
    info = mlflow.models.get_model_info(
        f"models:/{resolved_model_name(config.source, config.tracking.model_name)}/1"
    )
    assert "group" not in info.signature.inputs.input_names()


@pytest.mark.e2e  # whole audits in sequence (about 30 s); CI runs them with -m e2e
def test_retrain_promotes_only_fair_models_that_do_not_regress(prefect_harness, store, tmp_path):
    from fairpca.flows.config import RetrainConfig
    from fairpca.flows.retrain import retrain

    _uri, client = store
    # loose enough that candidates pass on 1,000 validation rows by more than their noise
    loose = {"max_dp_difference": 0.2, "max_eo_difference": 0.5, "min_selection_rate_ratio": 0.15}
    base = make_config(
        store, tmp_path, lambdas=[0.0, 1.0], thresholds=loose, promote_dominated=True
    ).model_dump()
    first = retrain(RetrainConfig(**base))
    assert first.champion_moved and first.model_version == "1"
    again = retrain(RetrainConfig(**base))  # the same rows and seed: the same fit
    assert not again.champion_moved and again.model_version == "1"  # not registered twice
    assert any("own model" in r for r in again.reasons), again.reasons
    output = {**base["output"], "run_name": "retrain-second-" + tmp_path.name}
    second = retrain(RetrainConfig(**{**base, "seed": 1, "output": output}))
    assert second.champion_moved, second.reasons  # no regression
    assert second.model_version == "2"
    run = client.get_run(second.run_id)
    assert run.data.tags["fairpca.decision"] == "promoted"
    assert run.data.tags["fairpca.champion_version_before"] == "1"
    assert any("champion v1" in r for r in second.reasons)
    zero = {"max_dp_difference": 0.0, "max_eo_difference": 0.0}
    strict = {**base, "seed": 2, "selection": {**base["selection"], "thresholds": zero}}
    third = retrain(RetrainConfig(**strict))
    assert not third.champion_moved and third.model_version == "3"
    # the champion fails the strict gate on the new rows as well: moved to needs-review
    name = base["tracking"]["model_name"]
    review = client.get_model_version_by_alias(name, "needs-review")
    assert str(review.version) == "2"
    assert "champion" not in client.get_registered_model(name).aliases
    report = Path(third.output_dir, "report.md").read_text()
    assert "**Not promoted**" in report and "fails the gate on the new data" in report


def test_logging_failure_marks_run_failed_keeps_results_and_relogs(
    prefect_harness, store, tmp_path
):
    """A step that fails for good leaves a FAILED run and names the kept directory; relog
    completes that same run once the cause is gone."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import MlflowLoggingError
    from fairpca.tasks.registry import DEFINITION_TAG

    uri, client = store
    config = make_config(store, tmp_path, lambdas=[0.0], mlflow_retries=0)
    # a registered model of another definition holds the name: a non-transient failure at
    # the model step
    client.create_registered_model(config.tracking.model_name, tags={DEFINITION_TAG: '{"other":1}'})
    with pytest.raises(MlflowLoggingError) as info:
        fairness_audit(config)
    out_dir = next((tmp_path / "out").iterdir())
    message = str(info.value)
    assert str(out_dir.resolve()) in message and "fairpca relog" in message
    failed = [
        r
        for r in client.search_runs(
            [client.get_experiment_by_name(config.tracking.experiment_name).experiment_id],
            filter_string=f"tags.`fairpca.audit_id` = '{out_dir.name}'",
        )
        if r.info.status == "FAILED"
    ]
    assert failed and "fairpca.logging_error" in failed[0].data.tags
    assert json.loads((out_dir / "mlflow_status.json").read_text())["status"] == "FAILED"

    client.delete_registered_model(config.tracking.model_name)
    logged = relog_output_dir(out_dir, uri)
    assert logged["run_id"] == failed[0].info.run_id
    assert client.get_run(logged["run_id"]).info.status == "FINISHED"
    assert logged["model_version"] is not None


def test_unreachable_tracking_server_fails_clearly_and_keeps_a_folder_relog_logs(
    prefect_harness, store, tmp_path, monkeypatch
):
    """The champion look-up (the first network call) fails after the audit's retries (one
    here, as for every MLflow step): the error names the kept folder, which holds the report
    (written once, without a promotion) and verifies with no run bound; relog logs it to a
    reachable store."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    import sys
    import threading

    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import (
        PROMOTION_FILE,
        STATUS_FILE,
        MlflowLoggingError,
        check_relog_dir,
    )
    from fairpca.tasks.registry import find_champion
    from fairpca.tasks.trust import bound_run

    lookups = []

    def count(frame, event, _arg):
        if event == "call" and frame.f_code is find_champion.__code__:
            lookups.append(threading.get_ident())

    config = make_config(
        ("http://127.0.0.1:9", None),
        tmp_path,
        lambdas=[0.0],
        mlflow_retries=1,
        mlflow_retry_backoff=0.05,
    )
    sys.setprofile(count)
    threading.setprofile(count)
    try:
        with pytest.raises(MlflowLoggingError) as info:
            fairness_audit(config)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert len(lookups) == 2  # mlflow_retries=1: one try, one retry
    out_dirs = list((tmp_path / "out").iterdir())  # named in the error
    assert len(out_dirs) == 1 and str(out_dirs[0].resolve()) in str(info.value)
    out_dir = out_dirs[0]
    sealed = check_relog_dir(out_dir)  # complete, every file as the seal lists it
    for name in ("report.md", "report.html", "tradeoff.png", "metrics.csv", "audit.json"):
        assert name in sealed["files"], name
    assert "projection/fair_pca/components_.npy" in sealed["files"]
    assert bound_run(sealed) is None and PROMOTION_FILE not in sealed["files"]
    assert json.loads((out_dir / STATUS_FILE).read_text())["status"] == "FAILED"

    uri, client = store
    logged = relog_output_dir(out_dir, uri)
    run = client.get_run(logged["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.note.content"]
    assert {"report/report.md", "report/report.html"} <= artifact_paths(client, run.info.run_id)


def test_bad_parameters_fail_validation_before_any_task(prefect_harness, tmp_path):
    from prefect.exceptions import ParameterTypeError

    from fairpca.flows.audit import fairness_audit

    with pytest.raises(ParameterTypeError, match="lambdas"):
        fairness_audit({"dataset": "adult", "lambdas": [-1.0], "output_dir": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("started_by", ["cli", "deployment"])
def test_audit_runs_its_tasks_on_a_dask_cluster(prefect_harness, store, tmp_path, started_by):
    """dask_address='local': the same flow on prefect-dask's DaskTaskRunner (LocalCluster).

    The CLI sets the task runner before the run starts; a deployment run (or a direct call)
    starts on threads and hands the work to a Dask subflow.
    """
    from prefect_dask import DaskTaskRunner

    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.runtime import task_runner_for

    _uri, client = store
    config = make_config(store, tmp_path, dask_address="local", lambdas=[0.0, 1.0])
    if started_by == "cli":
        runner = task_runner_for(config.dask_address)
        assert isinstance(runner, DaskTaskRunner)
        result = fairness_audit.with_options(task_runner=runner)(config)
    else:
        result = fairness_audit(config)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert "fair_pca/logreg/accuracy" in run.data.metrics
    assert run.data.params["dask_address"] == "local"
    assert run.data.tags["fairpca.task_runner"] == "DaskTaskRunner"


def test_task_runner_for_addresses():
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from fairpca.flows.runtime import task_runner_for

    assert isinstance(task_runner_for(None), ThreadPoolTaskRunner)
    remote = task_runner_for("tcp://127.0.0.1:8786")
    assert isinstance(remote, DaskTaskRunner)
    assert remote.address == "tcp://127.0.0.1:8786"


def test_only_a_run_off_dask_with_a_dask_address_needs_the_subflow(prefect_harness):
    from prefect import flow

    from fairpca.flows.runtime import needs_dask_subflow, task_runner_for

    assert not needs_dask_subflow(None)
    assert needs_dask_subflow("local")  # outside any flow run

    @flow(task_runner=task_runner_for(None))
    def on_threads(address):
        return needs_dask_subflow(address)

    assert on_threads("tcp://127.0.0.1:8786") is True
    assert on_threads(None) is False


def test_input_example_is_synthetic_and_has_no_sensitive_column():
    from fairpca.flows.audit import input_example

    X = pd.DataFrame({"age": [20.0, 30.0, 40.0, 50.0], "job": pd.Categorical(["a", "b", "b", "c"])})
    example = input_example(X, min_category_count=1)
    assert list(example.columns) == ["age", "job"] and len(example) == 2
    assert example["age"].tolist() == [35.0, 27.5]  # median and lower quartile
    assert example["job"].tolist() == ["b", "a"]  # most frequent categories
