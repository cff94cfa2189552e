"""MLflow logging of a kept audit output directory, with retries on transient errors.

The audit writes everything to a local directory first (see :mod:`fairpca.tasks.report`);
this module logs that directory to MLflow. MLflow's active run is thread-local and Prefect
runs tasks in worker threads, so everything goes through :class:`mlflow.MlflowClient` with an
explicit ``run_id``. Each step is a Prefect task with ``retries=3`` and exponential back-off
that only retries transient errors (connection failures, 5xx, a locked SQLite store). If a step
still fails, the run is marked FAILED (never FINISHED with half of its artifacts) and
:class:`MlflowLoggingError` names the local directory, which :func:`log_output_dir` can
re-log later (``fairpca relog DIR``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from fairpca.tasks.model_card import mask_credentials
from fairpca.tasks.registry import register_logged_model

__all__ = [
    "AUDIT_FILE",
    "RETRYING",
    "STATUS_FILE",
    "LoggedAudit",
    "MlflowLoggingError",
    "check_relog_dir",
    "check_saved_model",
    "is_transient_mlflow_error",
    "log_output_dir",
    "save_model_locally",
]

AUDIT_FILE = "audit.json"
STATUS_FILE = "mlflow_status.json"
METRIC_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call

_TRANSIENT_CODES = {
    "TEMPORARILY_UNAVAILABLE",
    "INTERNAL_ERROR",
    "REQUEST_LIMIT_EXCEEDED",
    "RESOURCE_EXHAUSTED",
    "DEADLINE_EXCEEDED",
    "ABORTED",
}
_TRANSIENT_TEXT = (
    "max retries exceeded",
    "connection refused",
    "connection reset",
    "connection aborted",
    "remotedisconnected",
    "read timed out",
    "database is locked",
    "temporarily unavailable",
    # two promotions at the same moment collide in MLflow's alias table; retrying sets it
    "unique constraint failed: registered_model_aliases",
)


# 502/503/504 as a status code, not as digits inside a hash or an id
_GATEWAY_STATUS = re.compile(r"(?<![0-9a-z])50[234](?![0-9a-z])")


class MlflowLoggingError(RuntimeError):
    """Logging to MLflow failed after retries; the results are kept on local disk."""


def is_transient_mlflow_error(exc: BaseException | None) -> bool:
    """Whether an exception looks like a passing tracking-server problem worth retrying."""
    if exc is None:
        return False
    try:
        import requests

        if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return True
    except ImportError:  # pragma: no cover - requests comes with mlflow
        pass
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    code = getattr(exc, "error_code", None)
    if code in _TRANSIENT_CODES:
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(fragment in text for fragment in _TRANSIENT_TEXT) or bool(
        _GATEWAY_STATUS.search(text)
    )


def _retry_transient(task, task_run, state) -> bool:
    data = getattr(state, "data", None)
    exc = data if isinstance(data, BaseException) else None
    if exc is None:
        try:
            result = state.result(raise_on_failure=False)
        except Exception as error:
            result = error
        exc = result if isinstance(result, BaseException) else None
    return is_transient_mlflow_error(exc)


RETRYING = {
    "retries": 3,
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.2,
    "retry_condition_fn": _retry_transient,
    "cache_policy": NO_CACHE,
}


def _client(tracking_uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def default_artifact_location(tracking_uri: str) -> str | None:
    """For a local SQLite store, keep artifacts next to the database (``mlartifacts/``)."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri.removeprefix("sqlite:///")).resolve()
        return (db.parent / "mlartifacts").as_uri()
    return None


@task(name="mlflow-start-run", **RETRYING)
def start_run(tracking_uri: str, audit: dict[str, Any]) -> str:
    """Create (or, on a retry, find again) the audit's RUNNING run; return its id."""
    client = _client(tracking_uri)
    name = audit["experiment_name"]
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            experiment_id = client.create_experiment(
                name, artifact_location=default_artifact_location(tracking_uri)
            )
        except Exception as exc:  # another audit created it at the same time
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise exc
            experiment_id = experiment.experiment_id
    else:
        experiment_id = experiment.experiment_id
    existing = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`fairpca.audit_id` = '{audit['audit_id']}' "
        "and attributes.status = 'RUNNING'",
        max_results=1,
    )
    if existing:
        return existing[0].info.run_id
    run = client.create_run(experiment_id, run_name=audit["run_name"], tags=audit["tags"])
    return run.info.run_id


@task(name="mlflow-log-params-metrics", **RETRYING)
def log_params_metrics(tracking_uri: str, run_id: str, audit: dict[str, Any]) -> int:
    """Log params, tags and metrics (summary, per-lambda curves as steps, timings)."""
    from mlflow.entities import Metric, Param, RunTag

    client = _client(tracking_uri)
    now = int(time.time() * 1000)
    params = [Param(key, str(value)[:6000]) for key, value in audit["params"].items()]
    tags = [RunTag(key, str(value)[:5000]) for key, value in audit["tags"].items()]
    metrics = [Metric(key, float(value), now, 0) for key, value in audit["metrics"].items()] + [
        Metric(item["key"], float(item["value"]), now, int(item["step"]))
        for item in audit["metric_steps"]
    ]
    run = client.get_run(run_id)
    params = [p for p in params if p.key not in run.data.params]
    metrics = _not_yet_logged(client, run_id, metrics, set(run.data.metrics))
    for start in range(0, max(len(params), 1), 100):
        client.log_batch(run_id, params=params[start : start + 100])
    client.log_batch(run_id, tags=tags)
    for start in range(0, len(metrics), METRIC_BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + METRIC_BATCH])
    return len(metrics)


def _not_yet_logged(client, run_id: str, metrics: list, present: set[str]) -> list:
    """The metric points the run does not hold yet (a retry or a relog of a run that was
    interrupted while logging adds each point once, never twice)."""
    if not present:
        return metrics
    logged: dict[str, set[tuple[int, float]]] = {}
    for key in {metric.key for metric in metrics} & present:
        history = client.get_metric_history(run_id, key)
        logged[key] = {(point.step, point.value) for point in history}
    return [m for m in metrics if (m.step, m.value) not in logged.get(m.key, set())]


ARTIFACT_FILES = ("report.md", "report.html", "tradeoff.png", "config.json", "metrics.csv")


@task(name="mlflow-log-artifacts", **RETRYING)
def log_artifacts(tracking_uri: str, run_id: str, out_dir: Path) -> list[str]:
    """Log the report, plot, resolved config, metrics table and projection matrices."""
    client = _client(tracking_uri)
    out_dir = Path(out_dir)
    logged = []
    for name in ARTIFACT_FILES:
        path = out_dir / name
        if path.exists():
            client.log_artifact(run_id, str(path), artifact_path="report")
            logged.append(f"report/{name}")
    if (out_dir / "projection").is_dir():
        client.log_artifacts(run_id, str(out_dir / "projection"), artifact_path="projection")
        logged.append("projection/")
    table = pd.read_csv(out_dir / "metrics.csv")
    client.log_table(run_id, data=table, artifact_file="metrics_table.json")
    logged.append("metrics_table.json")
    return logged


def check_saved_model(model_dir: Path) -> None:
    """The saved model may be logged: written by the audit, unchanged, and skops-serialized.

    Nothing in the directory is loaded or executed; the ``MLmodel`` file is read as plain
    YAML. Refused: an ``MLmodel`` naming pickle or cloudpickle (or any loader other than
    scikit-learn's with skops), a pickle file, and any file that differs from the SHA-256
    manifest the audit wrote (the message names it).
    """
    import yaml

    from fairpca.tasks.model_io import verify_manifest

    model_dir = Path(model_dir)
    mlmodel = model_dir / "MLmodel"
    if not mlmodel.is_file():
        raise ValueError(f"{model_dir} holds no MLmodel file; it is not a saved model.")
    try:
        spec = yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {}
        flavors = spec.get("flavors") or {}
        sklearn = flavors.get("sklearn") or {}
        pyfunc = flavors.get("python_function") or {}
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(f"{mlmodel} is not a readable MLmodel file ({error}).") from error
    if (
        sklearn.get("serialization_format") != "skops"
        or pyfunc.get("loader_module") != "mlflow.sklearn"
        or set(flavors) - {"sklearn", "python_function"}
    ):
        raise ValueError(
            f"{mlmodel} names a serialization other than skops (pickle/cloudpickle or a "
            "foreign flavor); fairpca never logs or loads such a model. Re-run the audit."
        )
    pickles = [p.name for p in model_dir.rglob("*") if p.suffix in {".pkl", ".pickle"}]
    if pickles:
        raise ValueError(f"{model_dir} holds pickle file(s) {pickles}; it is not logged.")
    verify_manifest(model_dir)


def check_relog_dir(out_dir: Path) -> None:
    """Checks that a kept directory must pass before ``fairpca relog`` uploads anything.

    The SHA-256 manifest lives in the same directory, so it cannot vouch for it. Refused,
    naming the file: a symbolic link anywhere (or any path resolving outside ``out_dir``),
    and a model whose ``MLmodel`` ``skops_trusted_types`` or whose skops file's untrusted
    types (read by :func:`skops.io.get_untrusted_types`, which executes nothing) fall outside
    the project's fixed :data:`fairpca.tasks.registry.TRUSTED_TYPES`.
    """
    out_dir = Path(out_dir)
    root = out_dir.resolve()
    for folder, dirs, files in os.walk(out_dir, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if path.is_symlink() or root not in path.resolve().parents:
                raise ValueError(
                    f"{path} is a symbolic link or points outside {out_dir}; relog uploads "
                    "only plain files of the directory. Remove it or re-run the audit."
                )
    check_saved_model(out_dir / "model")
    _check_trusted_types(out_dir / "model")


def _check_trusted_types(model_dir: Path) -> None:
    """The types the saved model asks to trust are all in the project's fixed list."""
    import skops.io
    import yaml

    from fairpca.tasks.registry import TRUSTED_TYPES, UntrustedModelError, _skops_file

    spec = yaml.safe_load((model_dir / "MLmodel").read_text(encoding="utf-8"))
    listed = spec["flavors"]["sklearn"].get("skops_trusted_types") or []
    foreign = sorted({str(name) for name in listed} - TRUSTED_TYPES)
    if foreign:
        raise ValueError(
            f"{model_dir / 'MLmodel'} lists skops_trusted_types {foreign} that fairpca does "
            "not trust; it is not logged. Re-run the audit."
        )
    try:
        path = _skops_file(model_dir)
        untrusted = skops.io.get_untrusted_types(file=path)
    except (UntrustedModelError, OSError, ValueError, KeyError) as error:
        raise ValueError(f"{model_dir}: the skops model file cannot be read ({error}).") from error
    foreign = sorted(set(untrusted) - TRUSTED_TYPES)
    if foreign:
        raise ValueError(
            f"{path} holds types {foreign} that fairpca does not trust; it is not logged."
        )


@task(name="mlflow-log-model", **RETRYING)
def log_model(tracking_uri: str, run_id: str, out_dir: Path, audit: dict[str, Any]) -> dict:
    """Log the saved model directory as files (never loaded here) and register a version.

    The directory is checked first (:func:`check_saved_model`); its files are uploaded as
    they are to a logged model of the run's experiment, so loading it later goes through
    MLflow's skops loader with the trusted types the audit recorded from its own pipeline.
    """
    from mlflow.entities import LoggedModelStatus

    client = _client(tracking_uri)
    model_dir = Path(out_dir) / "model"
    check_saved_model(model_dir)
    experiment_id = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(
        experiment_id, name="pipeline", source_run_id=run_id, tags=audit["model_tags"]
    )
    client.log_model_artifacts(logged.model_id, str(model_dir))
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    model_uri = f"models:/{logged.model_id}"
    version = register_logged_model(
        client, run_id, out_dir, audit, model_uri=model_uri, model_id=logged.model_id
    )
    return {"model_id": logged.model_id, "model_uri": model_uri, "version": version}


@task(name="mlflow-set-alias", **RETRYING)
def set_alias(tracking_uri: str, model_name: str, alias: str, version: str) -> None:
    """Point ``alias`` (e.g. ``champion``) at ``version``."""
    _client(tracking_uri).set_registered_model_alias(model_name, alias, version)


@task(name="mlflow-finish-run", **RETRYING)
def finish_run(
    tracking_uri: str,
    run_id: str,
    status: str,
    tags: dict[str, str],
    metrics: dict[str, float] | None = None,
) -> None:
    """Final tags and metrics, then terminate the run with ``status`` (FINISHED or FAILED)."""
    from mlflow.entities import Metric, RunTag

    client = _client(tracking_uri)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
        tags=[RunTag(k, str(v)) for k, v in tags.items()],
    )
    client.set_terminated(run_id, status=status)


@dataclass
class LoggedAudit:
    """Where an audit ended up in MLflow."""

    run_id: str
    experiment_id: str
    model_version: str | None
    champion_moved: bool
    tracking_uri: str


def save_model_locally(
    pipeline, out_dir: Path, *, input_example: pd.DataFrame, pip_requirements: list[str]
) -> Path:
    """Save the pipeline as an MLflow model directory ``out_dir/model`` (kept first).

    The ``fairpca`` package's Python sources travel with the model (``code_paths``), so the
    model loads where only the pinned pip requirements are installed. The SHA-256 of every
    file is recorded next to it (:func:`fairpca.tasks.model_io.write_manifest`) before anything
    logs it.
    """
    import mlflow.sklearn
    from mlflow.models import infer_signature

    from fairpca.tasks.model_io import write_manifest

    signature = infer_signature(input_example, pipeline.predict(input_example))
    trusted = trusted_types(pipeline)
    target = Path(out_dir) / "model"
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory() as tmp:
        code = _package_sources(Path(tmp))
        mlflow.sklearn.save_model(
            pipeline,
            str(target),
            signature=signature,
            input_example=input_example,
            pip_requirements=pip_requirements,
            code_paths=[str(code)],
            skops_trusted_types=trusted,
        )
    write_manifest(target)
    return target


_TRUSTED_MODULES = ("fairpca.", "numpy", "sklearn.", "scipy.")


def trusted_types(pipeline) -> list[str]:
    """Types skops must be told to trust to reload the pipeline (MLflow saves with skops).

    Only our own estimators and numpy/scikit-learn/scipy internals are accepted; anything
    else is refused rather than silently trusted.
    """
    import skops.io

    untrusted = skops.io.get_untrusted_types(data=skops.io.dumps(pipeline))
    foreign = [name for name in untrusted if not name.startswith(_TRUSTED_MODULES)]
    if foreign:
        raise TypeError(
            f"the pipeline holds types that are not from fairpca/numpy/scikit-learn: {foreign}; "
            "they cannot be trusted for loading."
        )
    return sorted(untrusted)


def _package_sources(tmp: Path) -> Path:
    import fairpca

    source = Path(fairpca.__file__).parent
    target = tmp / "fairpca"
    shutil.copytree(
        source, target, ignore=shutil.ignore_patterns("data", "__pycache__", "*.pyc", "*.xz")
    )
    return target


def _write_status(out_dir: Path, content: dict[str, Any]) -> None:
    (Path(out_dir) / STATUS_FILE).write_text(json.dumps(content, indent=2))


def read_audit(out_dir: Path) -> dict[str, Any]:
    """The ``audit.json`` manifest of a kept output directory."""
    path = Path(out_dir) / AUDIT_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{out_dir} is not a fairpca audit output directory (no {AUDIT_FILE})."
        )
    return json.loads(path.read_text())


def log_output_dir(
    out_dir: Path,
    tracking_uri: str,
    *,
    promote: bool | None = None,
    retries: int | None = None,
    retry_backoff: float | None = None,
) -> LoggedAudit:
    """Log a kept audit directory to MLflow: run, params/metrics, artifacts, model, alias.

    Parameters
    ----------
    out_dir : path
        Directory written by the audit (``audit.json``, report, matrices, ``model/``).
    tracking_uri : str
        MLflow tracking (and registry) URI.
    promote : bool, default=None
        Whether the alias moves to the new version; None takes the audit's decision.
    retries, retry_backoff : int and float, default=None
        Retries per step on transient errors and the back-off factor (retry ``i`` waits
        ``retry_backoff * 2**i`` seconds); None takes the audit's config (3 and 2 s).

    Raises
    ------
    MlflowLoggingError
        If a step still fails after its retries. The run is marked FAILED first (when it
        could be created) and the message names ``out_dir``, where the results are kept.
    """
    out_dir = Path(out_dir)
    audit = read_audit(out_dir)
    promote = audit["decision"]["promote"] if promote is None else promote
    retry = {
        "retries": audit.get("mlflow_retries", 3) if retries is None else retries,
        "retry_delay_seconds": exponential_backoff(
            backoff_factor=audit.get("mlflow_retry_backoff", 2.0)
            if retry_backoff is None
            else retry_backoff
        ),
    }
    start, log_data, log_files, log_pipeline, alias, finish = (
        step_task.with_options(**retry)
        for step_task in (
            start_run,
            log_params_metrics,
            log_artifacts,
            log_model,
            set_alias,
            finish_run,
        )
    )
    run_id = None
    step = "start the run"
    started = time.perf_counter()
    _bounded_http_retries()
    try:
        run_id = start(tracking_uri, audit)
        step = "log params and metrics"
        log_data(tracking_uri, run_id, audit)
        step = "log artifacts"
        log_files(tracking_uri, run_id, out_dir)
        step = "log and register the model"
        model = log_pipeline(tracking_uri, run_id, out_dir, audit)
        moved = False
        if promote and model["version"] is not None:
            step = "move the alias"
            alias(tracking_uri, audit["model_name"], audit["champion_alias"], model["version"])
            moved = True
        step = "finish the run"
        finish(
            tracking_uri,
            run_id,
            "FINISHED",
            {
                "fairpca.model_version": str(model["version"]),
                "fairpca.champion_moved": str(moved).lower(),
            },
            {"time_mlflow_logging_s": time.perf_counter() - started},
        )
    except Exception as exc:
        marked = run_id is not None and _mark_failed(tracking_uri, run_id, f"{step}: {exc}")
        _write_status(out_dir, {"status": "FAILED", "run_id": run_id, "step": step})
        run_state = (
            f"Run {run_id} is marked FAILED. "
            if marked
            else f"Run {run_id} could not be marked FAILED (the tracking server did not "
            "answer) and shows as RUNNING until relogged. "
        )
        raise MlflowLoggingError(
            f"Logging the audit to MLflow at {mask_credentials(tracking_uri)} failed while "
            f"trying to {step} ({type(exc).__name__}: {exc}). "
            + (run_state if run_id else "")
            + f"All results are kept in {out_dir.resolve()}; log them again with "
            f"`fairpca relog {out_dir}` once the tracking server is reachable."
        ) from exc
    experiment_id = _client(tracking_uri).get_run(run_id).info.experiment_id
    _write_status(
        out_dir,
        {"status": "FINISHED", "run_id": run_id, "model_version": model["version"]},
    )
    return LoggedAudit(
        run_id, experiment_id, model["version"], moved, mask_credentials(tracking_uri)
    )


def _bounded_http_retries() -> None:
    """Keep MLflow's own HTTP retries short (unless set), so the task retries govern."""
    import os

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")


def _mark_failed(tracking_uri: str, run_id: str, why: str) -> bool:
    """Best effort: the run must not stay RUNNING or look FINISHED. Whether it is FAILED."""
    for attempt in range(3):
        try:
            client = _client(tracking_uri)
            client.set_tag(run_id, "fairpca.logging_error", why[:5000])
            client.set_terminated(run_id, status="FAILED")
            return True
        except Exception:
            time.sleep(2**attempt)
    return False
