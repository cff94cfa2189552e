"""The few MLflow store operations every writer shares: the client (one tracking and registry
URI, and bounded HTTP requests), where a local store keeps its artifacts, the experiment's
get-or-create (with its kind tag) and batched metric logging.

Kept free of Prefect so that the ``fairness`` evaluator (loaded by MLflow's plugin registry)
stays light.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "METRIC_BATCH",
    "MLFLOW_HTTP_BOUNDS",
    "bound_mlflow_requests",
    "default_artifact_location",
    "get_or_create_experiment",
    "log_metrics_batched",
    "mlflow_client",
]

METRIC_BATCH = 1000  # MLflow's limit of metrics per log_batch call
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI opens the run list, not GenAI traces

# Every HTTP request MLflow makes (read from the environment at each request): at most 15 s
# without an answer per attempt, one retry at once (MLflow's default is 7 retries with
# exponential back-off, minutes against a dead server). A refused or reset connection costs
# under a second per request; the Prefect tasks around the logging steps retry the rest
# (fairpca.tasks.mlflow_logging.RETRYING), so a dead server is reported well within a minute.
MLFLOW_HTTP_BOUNDS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
}


def bound_mlflow_requests() -> None:
    """Put :data:`MLFLOW_HTTP_BOUNDS` into the environment where unset (a value set by the
    user wins)."""
    for name, value in MLFLOW_HTTP_BOUNDS.items():
        os.environ.setdefault(name, value)


def mlflow_client(tracking_uri: str | None = None):
    """The one way the project builds an :class:`mlflow.MlflowClient`.

    Its model registry is the tracking store itself (``registry_uri = tracking_uri``), so a
    version is registered, tagged and aliased where its run is. Without ``tracking_uri`` the
    process-wide tracking URI (:func:`mlflow.get_tracking_uri`) is used, for both. Its
    requests, and every later MLflow request of the process, are bounded
    (:func:`bound_mlflow_requests`).
    """
    bound_mlflow_requests()
    import mlflow

    uri = mlflow.get_tracking_uri() if tracking_uri is None else tracking_uri
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def default_artifact_location(tracking_uri: str) -> str | None:
    """For a local SQLite store, keep artifacts next to the database (``mlartifacts/``)."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri.removeprefix("sqlite:///")).resolve()
        return (db.parent / "mlartifacts").as_uri()
    return None


def get_or_create_experiment(client, name: str, tracking_uri: str | None) -> str:
    """The id of experiment ``name``, created when missing (for a local SQLite store with its
    artifacts next to the database) and tagged ``mlflow.experimentKind =
    custom_model_development``. Two processes creating it at the same moment get the same id.
    """
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        location = None if tracking_uri is None else default_artifact_location(tracking_uri)
        try:
            return client.create_experiment(
                name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
            )
        except MlflowException:  # another process created it at the same time
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment.experiment_id


def log_metrics_batched(client, run_id: str, metrics: list) -> None:
    """``metrics`` (:class:`mlflow.entities.Metric`) in as few ``log_batch`` calls as MLflow
    accepts (at most :data:`METRIC_BATCH` each)."""
    for start in range(0, len(metrics), METRIC_BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + METRIC_BATCH])
