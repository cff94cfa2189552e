"""The few MLflow store operations every writer shares: the client (one tracking and registry
URI, bounded HTTP requests, a local store created under a lock), where a local store keeps
its artifacts, the experiment's get-or-create (with its kind tag) and batched metric logging.

Kept free of Prefect so that the ``fairness`` evaluator (loaded by MLflow's plugin registry)
stays light.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def mlflow_client(tracking_uri: str | None = None):
    """The one way the project builds an :class:`mlflow.MlflowClient`.

    Its model registry is the tracking store itself (``registry_uri = tracking_uri``), so a
    version is registered, tagged and aliased where its run is. Without ``tracking_uri`` the
    process-wide tracking URI (:func:`mlflow.get_tracking_uri`) is used, for both. Its
    requests, and every later MLflow request of the process, are bounded
    (:data:`MLFLOW_HTTP_BOUNDS`, put into the environment where unset: a value set by the user
    wins).
    """
    for name, value in MLFLOW_HTTP_BOUNDS.items():
        os.environ.setdefault(name, value)
    import mlflow

    uri = mlflow.get_tracking_uri() if tracking_uri is None else tracking_uri
    db = _sqlite_file(uri)
    if db is None:
        return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    return _open_local_store(uri, db)


class BrokenStoreError(ValueError):
    """A local MLflow database that cannot be opened: corrupt or left half-created."""


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores and in memory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    return Path(path).absolute() if path and path != ":memory:" else None


def _open_local_store(uri: str, db: Path):
    """The client of the SQLite store ``db`` (``uri``), its tracking and registry stores
    opened (created and migrated when new) holding an exclusive lock on ``<db>.lock``.

    MLflow's schema migrations are not safe to run twice at once: two commands creating the
    same new store both fail (``table _alembic_tmp_model_versions already exists``) and leave
    a store no client opens. Under the lock the first creates it, the others find it made.

    Raises
    ------
    BrokenStoreError
        The store exists but cannot be opened; the message names the file and the fix.
    """
    import fcntl

    import mlflow
    from alembic.util import CommandError
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    with db.with_name(db.name + ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        try:
            client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)  # tracking store
            client.search_registered_models(max_results=1)  # the registry store
        except (MlflowException, SQLAlchemyError, CommandError) as error:
            if "database is locked" in str(error):  # busy, not broken: retried by the caller
                raise
            reason = str(error).strip().splitlines()[0][:300]
            raise BrokenStoreError(
                f"the MLflow database {db} cannot be opened ({type(error).__name__}: {reason})."
                f" If an older MLflow made it, upgrade it (`mlflow db upgrade sqlite:///{db}`);"
                f" if it is corrupt or was left half-created, move it aside (`mv {db} "
                f"{db}.broken`) and log the kept output folders into a new one with `fairpca "
                "relog DIR`."
            ) from error
    return client


def get_or_create_experiment(client, name: str, tracking_uri: str | None) -> str:
    """The id of experiment ``name``, created when missing (for a local SQLite store with its
    artifacts next to the database) and tagged ``mlflow.experimentKind =
    custom_model_development``. Two processes creating it at the same moment get the same id.
    """
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        db = None if tracking_uri is None else _sqlite_file(tracking_uri)
        location = None if db is None else (db.resolve().parent / "mlartifacts").as_uri()
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
