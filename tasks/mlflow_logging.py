"""MLflow logging of a kept audit output directory, with retries on transient errors.

The audit writes everything to a local directory first (see :mod:`fairpca.tasks.report`);
this module logs that directory to MLflow. MLflow's active run is thread-local and Prefect
runs tasks in worker threads, so everything goes through :class:`mlflow.MlflowClient` with an
explicit ``run_id``. Each step is a Prefect task with ``retries=3`` and exponential back-off
that only retries transient errors (connection failures, 5xx, a locked SQLite store). If a step
still fails, the run is marked FAILED (never FINISHED with half of its artifacts) and
:class:`MlflowLoggingError` names the local directory, which :func:`log_output_dir` can
re-log later (``fairpca relog DIR``).


The model is saved locally first (:func:`save_model_locally`) with what it carries besides its
weights: a synthetic input example built from aggregates only (:func:`input_example`) and a
signature that accepts what the loaders return and the same columns read from a CSV
(:func:`model_signature`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from fairpca.datasets import MIN_CATEGORY_COUNT, RARE_CATEGORY
from fairpca.tasks.decision import outcome
from fairpca.tasks.mlflow_store import get_or_create_experiment, log_metrics_batched, mlflow_client
from fairpca.tasks.record import AuditRecord, read_audit_record
from fairpca.tasks.registry import demote, move_alias, register_logged_model
from fairpca.tasks.report import VERDICT_METRICS, build_verdict, run_description, write_report
from fairpca.tasks.trust import (
    SEAL_FILE,
    UntrustedModelError,
    bind_run,
    bound_run,
    check_model_files,
    mask_credentials,
    seal_output_dir,
    shown_uri,
    skops_file,
    skops_file_types,
    types_to_trust,
    verify_output_dir,
)

AUDIT_FILE = "audit.json"
HASHES_FILE = "hashes.json"
STATUS_FILE = "mlflow_status.json"
PROMOTION_FILE = "promotion.json"  # the promotion decided after the record was sealed
NEEDS_REVIEW_ALIAS = "needs-review"  # where a demoted champion goes (RetrainConfig default)

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


@dataclass(frozen=True)
class VerifiedCopy:
    """A sealed output folder as :func:`verified_copy` checked it."""

    out_dir: Path  # the folder: the run binding and the logging status are written there
    files: Path  # the private copy of its sealed files: every upload reads from here
    record: dict[str, Any]  # the verified seal record


class MlflowLoggingError(RuntimeError):
    """Logging to MLflow failed after retries; the results are kept on local disk."""


def is_transient_mlflow_error(exc: BaseException | None) -> bool:
    """Whether an exception looks like a passing tracking-server problem worth retrying."""
    import requests  # comes with mlflow

    unreachable = requests.ConnectionError | requests.Timeout | ConnectionError | TimeoutError
    if isinstance(exc, unreachable) or getattr(exc, "error_code", None) in _TRANSIENT_CODES:
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    gateway = _GATEWAY_STATUS.search(text) is not None
    return gateway or any(fragment in text for fragment in _TRANSIENT_TEXT)


def _retry_transient(task, task_run, state) -> bool:
    exc = getattr(state, "data", None)
    if not isinstance(exc, BaseException):
        try:
            exc = state.result(raise_on_failure=False)
        except Exception as error:
            exc = error
    return isinstance(exc, BaseException) and is_transient_mlflow_error(exc)


# Retries of a step on a transient error: 1, 2 and 4 s apart (20% jitter). With MLflow's
# bounded requests (fairpca.tasks.mlflow_store.MLFLOW_HTTP_BOUNDS) a step gives up on a dead
# server after about 10 s.
RETRYING = {
    "retries": 3,
    "retry_delay_seconds": exponential_backoff(backoff_factor=1),
    "retry_jitter_factor": 0.2,
    "retry_condition_fn": _retry_transient,
    "cache_policy": NO_CACHE,
}


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


ATTEMPT_TAG = "fairpca.logging_attempt"


@task(name="mlflow-start-run", **RETRYING)
def start_run(client, tracking_uri: str, audit: AuditRecord, attempt: str) -> tuple[str, str]:
    """Create (or, on a retry, find again) the audit's RUNNING run; return its id and its
    experiment's id.

    The run starts when the audit started (not when it is logged) and carries the record's
    curated tags; its description (the verdict) is written with its params
    (:func:`log_params_metrics`), once the promotion is decided. A retry finds again only the
    run this call created (tagged with ``attempt``), so another run with the same audit id is
    never taken over. ``client``: the command's client of ``tracking_uri``.
    """
    experiment_id = get_or_create_experiment(client, audit.experiment_name, tracking_uri)
    existing = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{ATTEMPT_TAG}` = '{attempt}' and attributes.status = 'RUNNING'",
        max_results=1,
    )
    if existing:
        return existing[0].info.run_id, experiment_id
    set_run_list_view(client, experiment_id)
    tags = {**audit.tags, ATTEMPT_TAG: attempt}
    run = client.create_run(
        experiment_id, start_time=_millis(audit.started_at), run_name=audit.run_name, tags=tags
    )
    return run.info.run_id, experiment_id


# The experiment's run list as a reviewer wants it: the MLflow UI's own shared view (what its
# "Share" button writes, an experiment tag read back through ``?viewStateShareKey=``), with
# the run description (its first line is the decision) and the headline test metrics as
# columns. MLflow 3's default run list shows no metric or tag column. Sized for a 1280 px
# window (seen in headless Chromium on MLflow 3.18): with the assistant panel open (it takes
# about 330 px) the table has 682 px, where the description and the first four metrics show;
# with it closed every column does. The duration column is left out for the room.
RUN_LIST_VIEW = "fairpca"
RUN_LIST_METRICS = (
    "dp_difference",
    "selection_rate_ratio",
    "eo_difference",
    "accuracy",
    "balanced_accuracy",
)
_VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def run_list_view() -> dict[str, Any]:
    """The shared view's state: columns shown, their order and widths, newest run first."""
    description = "attributes.`Description`"
    metrics = [f"metrics.`{name}`" for name in RUN_LIST_METRICS]
    fixed = {"attributes.`Run Name`": 100, "runDateAndNestInfo": 90}
    widths = {**fixed, description: 160, **dict.fromkeys(metrics, 60)}
    return {
        "selectedColumns": [description, *metrics],
        "columnOrder": list(widths),
        "columnWidths": widths,
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
    }


def run_list_url(ui_base: str, experiment_id: str) -> str:
    """The experiment's run list in the MLflow UI at ``ui_base``, in :data:`RUN_LIST_VIEW`."""
    return f"{ui_base}/#/experiments/{experiment_id}/runs?viewStateShareKey={RUN_LIST_VIEW}"


def set_run_list_view(client, experiment_id: str) -> None:
    """Store :func:`run_list_view` in the experiment (best effort: a server that refuses
    experiment tags keeps its default run list; nothing of the audit depends on it)."""
    from mlflow.exceptions import MlflowException

    value = json.dumps(run_list_view(), sort_keys=True)
    key = _VIEW_TAG_PREFIX + RUN_LIST_VIEW
    with contextlib.suppress(MlflowException):
        if client.get_experiment(experiment_id).tags.get(key) != value:
            client.set_experiment_tag(experiment_id, key, value)


def _display_order(key: str) -> tuple[int, int]:
    """Where a metric is logged: the headline test numbers first (the run page lists metrics
    as logged), then the other test numbers, validation, baselines, the rest."""
    if key in VERDICT_METRICS:
        return 0, VERDICT_METRICS.index(key)
    head = key.split(".", 1)[0]
    if head in VERDICT_METRICS and ".ci95_" in key and key.count(".") == 1:
        return 1, VERDICT_METRICS.index(head)
    if "/" in key or key.startswith("time_"):
        return 5, 0  # representation facts, per-lambda curves, timings
    return {"validation": 3, "baseline": 4}.get(head, 2), 0


@task(name="mlflow-log-params-metrics", **RETRYING)
def log_params_metrics(client, run_id: str, audit: AuditRecord, description=None) -> int:
    """Log params, tags, the run's ``description`` (``mlflow.note.content``: the verdict,
    :func:`fairpca.tasks.report.run_description`), metrics (summary, per-lambda curves as
    steps, timings) and the matrices' SHA-256 (artifact ``hashes.json``)."""
    from mlflow.entities import Metric, Param, RunTag

    stamp = _millis(audit.ended_at)
    params = [Param(key, str(value)[:6000]) for key, value in audit.params.items()]
    noted = {} if description is None else {"mlflow.note.content": description}
    tags = [RunTag(key, str(value)[:5000]) for key, value in {**audit.tags, **noted}.items()]
    summary = sorted(audit.metrics.items(), key=lambda item: _display_order(item[0]))
    metrics = [Metric(key, float(value), stamp, 0) for key, value in summary] + [
        Metric(item.key, item.value, stamp, item.step) for item in audit.metric_steps
    ]
    run = client.get_run(run_id)
    params = [p for p in params if p.key not in run.data.params]
    # only the points the run does not hold yet: a retry or a relog of a run interrupted while
    # logging adds each point once, never twice
    logged = {
        key: {(point.step, point.value) for point in client.get_metric_history(run_id, key)}
        for key in {metric.key for metric in metrics} & set(run.data.metrics)
    }
    metrics = [m for m in metrics if (m.step, m.value) not in logged.get(m.key, set())]
    for start in range(0, max(len(params), 1), 100):
        client.log_batch(run_id, params=params[start : start + 100])
    client.log_batch(run_id, tags=tags)
    log_metrics_batched(client, run_id, metrics)
    client.log_dict(run_id, audit.hashes, HASHES_FILE)
    return len(metrics)


ARTIFACT_FILES = (
    "report.md",
    "report.html",
    "tradeoff.png",
    "config.json",
    "metrics.csv",
    PROMOTION_FILE,
)


@task(name="mlflow-log-artifacts", **RETRYING)
def log_artifacts(client, run_id: str, verified: VerifiedCopy) -> None:
    """Log the report, plot, resolved config, metrics table and projection matrices.

    Read from the ``verified`` copy of the folder only (:func:`verified_copy`), so the bytes
    uploaded are the bytes checked against the seal. Each file is uploaded on its own (never
    a whole folder).
    """
    out_dir, sealed = verified.files, set(verified.record["files"])
    matrices = sorted(name for name in sealed if name.startswith("projection/"))
    for name in [name for name in ARTIFACT_FILES if name in sealed] + matrices:
        folder = Path(name).parent.as_posix() if name in matrices else "report"
        client.log_artifact(run_id, str(out_dir / name), artifact_path=folder)
    if "metrics.csv" in sealed:
        table = pd.read_csv(out_dir / "metrics.csv")
        client.log_table(run_id, data=table, artifact_file="metrics_table.json")


# What a saved model's requirements may name: the pinned runtime of the pipeline and MLflow.
_REQUIREMENT = re.compile(r"(fairpca|mlflow|numpy|scipy|scikit-learn|pandas)==[0-9][\w.+!-]*")


# The message of a refusal below (a str.format template; tests name it, not its words)
NOT_THE_PINNED_RUNTIME = (
    "{path}: requirements {given} are not the pinned fairpca runtime the audit writes "
    "(name==version of fairpca, mlflow, numpy, scipy, scikit-learn, pandas, each once); the "
    "model is not logged. Re-run the audit."
)


def check_saved_model(model_dir: Path) -> None:
    """The saved model may be logged: skops-serialized, no source code, pinned requirements.

    Nothing in the directory is loaded or executed; ``MLmodel`` and the environment files
    are read as plain text/YAML. The files must pass
    :func:`~fairpca.tasks.trust.check_model_files` (skops, no pickle, no code), and the
    requirements must be ``name==version`` pins of fairpca and its runtime (no extra line, URL
    or option), fairpca among them, each once, and the conda and virtualenv files must name
    exactly those pins (or refer to requirements.txt). That the files are the ones the audit
    wrote is checked by :func:`check_relog_dir` (the signed manifest).
    """
    import yaml

    model_dir = Path(model_dir)
    check_model_files(model_dir)
    path = model_dir / "requirements.txt"
    lines = path.read_text(encoding="utf-8").split() if path.is_file() else []
    names = [line.split("==")[0] for line in lines]
    bad = [line for line in lines if not _REQUIREMENT.fullmatch(line)]
    if bad or "fairpca" not in names or len(set(names)) != len(names):
        raise ValueError(NOT_THE_PINNED_RUNTIME.format(path=path, given=bad or lines))
    try:
        conda = yaml.safe_load((model_dir / "conda.yaml").read_text(encoding="utf-8"))
        env = yaml.safe_load((model_dir / "python_env.yaml").read_text(encoding="utf-8"))
        pips = [d["pip"] for d in conda["dependencies"] if isinstance(d, dict)]
        same = pips == [lines] and env["dependencies"] == ["-r requirements.txt"]
    except (OSError, yaml.YAMLError, TypeError, KeyError) as error:
        raise ValueError(f"{model_dir}: unreadable environment files ({error}).") from error
    if not same:
        raise ValueError(
            f"{model_dir}: conda.yaml or python_env.yaml name other requirements than "
            "requirements.txt; the model is not logged. Re-run the audit."
        )


def check_relog_dir(
    out_dir: Path, *, copy_to: Path | None = None, contents: bool = True
) -> dict[str, Any]:
    """Checks that a kept directory must pass before anything of it is logged.

    Returns the verified seal record (:func:`fairpca.tasks.trust.verify_output_dir`):
    every file is the one the audit wrote and signed with this user's key (a manifest
    edited to match does not verify), no symbolic link, no file added, every file and the
    total under relog's size caps. Then the model must pass :func:`check_saved_model` and
    its ``MLmodel`` ``skops_trusted_types`` and its skops file's untrusted types (read by
    :func:`skops.io.get_untrusted_types`, which executes nothing) must lie in the project's
    fixed :data:`fairpca.tasks.trust.TRUSTED_TYPES`. ``copy_to`` and ``contents`` are those
    of :func:`~fairpca.tasks.trust.verify_output_dir`; the model of the copy is checked.

    Raises
    ------
    ValueError
        Naming the file and the fix (:class:`fairpca.tasks.trust.SealError` for the seal).
    """
    out_dir = Path(out_dir)
    if out_dir.is_symlink() or not out_dir.is_dir():
        raise ValueError(
            f"{out_dir} is not a plain directory (a symbolic link or missing); pass the "
            "audit's output directory itself."
        )
    record = verify_output_dir(out_dir, copy_to=copy_to, contents=contents)
    model_dir = Path(copy_to or out_dir) / "model"
    check_saved_model(model_dir)
    _check_trusted_types(model_dir)
    return record


@contextlib.contextmanager
def verified_copy(out_dir: Path) -> Iterator[VerifiedCopy]:
    """Copy the sealed files of ``out_dir`` into a private temporary folder (mode 0700),
    hashing each copy as it is written, and check the copy (:func:`check_relog_dir`): what
    is uploaded from it is exactly what was verified, even if ``out_dir`` changes meanwhile.
    Each file is hashed once; the copy is removed on exit."""
    with tempfile.TemporaryDirectory(prefix="fairpca-verified-") as private:  # mode 0700
        files = Path(private) / "audit"
        record = check_relog_dir(Path(out_dir), copy_to=files)
        yield VerifiedCopy(Path(out_dir), files, record)


REPORT_FILES = ("report.md", "report.html")


def with_report(verified: VerifiedCopy, audit: AuditRecord, promotion, verdict) -> VerifiedCopy:
    """``verified`` with the report, when the audit sealed its folder without one (it was
    stopped during its champion look-up, where the report waits for the promotion): the
    report of ``audit`` showing ``verdict`` (the relog's, of ``promotion``) is written into
    the verified copy, which is sealed again (its verified files and the report, nothing
    else) and copied back into the folder: the report, then the seal. A folder with its
    report is returned as it is."""
    files, sealed = verified.files, verified.record["files"]
    if REPORT_FILES[0] in sealed or not {AUDIT_FILE, "metrics.csv", "tradeoff.png"} <= set(sealed):
        return verified
    table = pd.read_csv(files / "metrics.csv")
    write_report(files, audit, table, promotion, plot=False, verdict=verdict)
    known = {name: entry["sha256"] for name, entry in sealed.items()}
    seal_output_dir(files, known=known, run=bound_run(verified.record))
    record = verify_output_dir(files, contents=False)
    for name in (*REPORT_FILES, SEAL_FILE):  # the seal last: the folder verifies again
        shutil.copyfile(files / name, verified.out_dir / f"{name}.tmp")
        (verified.out_dir / f"{name}.tmp").replace(verified.out_dir / name)
    (files / SEAL_FILE).unlink()  # the copy holds the sealed files only
    return VerifiedCopy(verified.out_dir, files, record)


def _check_trusted_types(model_dir: Path) -> None:
    """The types the saved model's skops file needs are all in the project's fixed list
    (the types its ``MLmodel`` lists are checked by :func:`check_model_files`)."""
    try:
        skops_file_types(skops_file(model_dir))
    except (UntrustedModelError, OSError, ValueError, KeyError) as error:
        raise ValueError(f"{model_dir}: {error}") from error


@task(name="mlflow-log-model", **RETRYING)
def log_model(
    client, tracking_uri: str, run_id: str, verified: VerifiedCopy, audit: AuditRecord,
    promotion, verdict,
) -> tuple[str | None, bool]:  # fmt: skip
    """Log the saved model's files (never loaded here) and register a version (unless one
    of this very model and training rows exists): the version and whether it is new.

    The files are uploaded from the ``verified`` copy (:func:`verified_copy`), so nothing
    added or changed in the folder after the check reaches MLflow; the version carries the
    skops file's SHA-256 as sealed. Loading the model later goes through MLflow's skops
    loader with the trusted types the audit recorded from its own pipeline.
    """
    from mlflow.entities import LoggedModelStatus

    model_dir = verified.files / "model"
    experiment_id = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(
        experiment_id, name="pipeline", source_run_id=run_id, tags=audit.model_tags
    )
    client.log_model_artifacts(logged.model_id, str(model_dir))
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    skops_name = f"model/{skops_file(model_dir).relative_to(model_dir.resolve()).as_posix()}"
    return register_logged_model(
        client, logged, verified.out_dir, audit, tracking_uri=tracking_uri, promotion=promotion,
        model_sha256=verified.record["files"][skops_name]["sha256"], verdict=verdict,
    )  # fmt: skip


def _review_alias(audit: AuditRecord) -> str:
    """Where a demoted champion goes: the retrain's ``needs_review_alias``."""
    return audit.params.get("needs_review_alias", NEEDS_REVIEW_ALIAS)


@task(name="mlflow-apply-promotion", **RETRYING)
def apply_promotion(client, audit: AuditRecord, version: str | None, promotion) -> bool:
    """Carry out the decided promotion: a champion to be demoted moves to the needs-review
    alias, the challenger takes the champion alias when the decision promotes it. Whether
    the alias moved to ``version``."""
    if promotion.demote and promotion.champion_version is not None:
        demote(
            client, audit.model_name, promotion.champion_version,
            from_alias=audit.champion_alias, to_alias=_review_alias(audit),
            why="; ".join(promotion.reasons),
        )  # fmt: skip
    if not (promotion.promote and version is not None):
        return False
    move_alias(client, audit.model_name, audit.champion_alias, version)
    return True


@task(name="mlflow-finish-run", **RETRYING)
def finish_run(
    client, run_id: str, tags: dict[str, str], metrics: dict[str, float], end_time: int | None
) -> None:
    """Final tags and metrics, then the run FINISHED at ``end_time`` (milliseconds since the
    epoch; None: now)."""
    from mlflow.entities import Metric, RunTag

    stamp = int(time.time() * 1000) if end_time is None else end_time
    client.log_batch(
        run_id,
        metrics=[Metric(k, float(v), stamp, 0) for k, v in metrics.items()],
        tags=[RunTag(k, str(v)) for k, v in tags.items()],
    )
    client.set_terminated(run_id, status="FINISHED", end_time=end_time)


@dataclass
class LoggedAudit:
    """Where an audit ended up in MLflow."""

    run_id: str
    experiment_id: str
    model_version: str | None
    champion_moved: bool
    tracking_uri: str
    model_version_new: bool = True  # False: an existing version of the same model and rows


def save_model_locally(
    pipeline, out_dir: Path, *, input_example: pd.DataFrame, pip_requirements: list[str]
) -> Path:
    """Save the pipeline as an MLflow model directory ``out_dir/model`` (kept first).

    The model carries no source code: it depends on the installed fairpca through the
    pinned ``fairpca==<version>`` of ``pip_requirements``, so loading it never changes what
    ``import fairpca`` gives. Its signature accepts what the project's loaders return
    (:func:`fairpca.tasks.mlflow_logging.model_signature`). The audit seals the whole output
    directory afterwards (:func:`fairpca.tasks.trust.seal_output_dir`).
    """
    import mlflow.sklearn

    signature = model_signature(input_example, pipeline.predict(input_example))
    trusted = types_to_trust(pipeline)
    target = Path(out_dir) / "model"
    if target.exists():
        shutil.rmtree(target)
    mlflow.sklearn.save_model(
        pipeline,
        str(target),
        signature=signature,
        input_example=input_example,
        pip_requirements=pip_requirements,
        serialization_format="skops",  # not left to MLflow's default (cloudpickle on Databricks)
        skops_trusted_types=trusted,
    )
    return target


def _write_status(out_dir: Path, content: dict[str, Any]) -> None:
    (Path(out_dir) / STATUS_FILE).write_text(json.dumps(content, indent=2))


# Run tags fairpca writes: its own namespace and MLflow's run description, nothing else
# (``mlflow.user``, ``mlflow.source.*``, ... are MLflow's to set).
_OWN_TAG_PREFIXES = ("fairpca.", "fairness.")
_ALLOWED_MLFLOW_TAGS = frozenset({"mlflow.note.content"})


def read_audit(out_dir: Path) -> AuditRecord:
    """The typed audit record (``audit.json``) of a kept output directory (verify the seal
    first).

    Raises
    ------
    FileNotFoundError
        No ``audit.json``.
    ValueError
        Unreadable, or tags outside the keys fairpca writes (``mlflow.*`` and other
        reserved keys; version tags must not start with ``mlflow.``).
    """
    path = Path(out_dir) / AUDIT_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{out_dir} is not a fairpca audit output directory (no {AUDIT_FILE})."
        )
    audit = read_audit_record(path)
    foreign = sorted(
        key
        for key in audit.tags
        if not key.startswith(_OWN_TAG_PREFIXES) and key not in _ALLOWED_MLFLOW_TAGS
    )
    foreign += sorted(k for k in audit.model_tags if k.lower().startswith("mlflow."))
    if foreign:
        raise ValueError(
            f"{path} sets tag(s) {foreign} that fairpca never writes (MLflow's reserved "
            "mlflow.* keys or keys outside fairpca.*); nothing is logged. Re-run the audit."
        )
    return audit


# The message of a refusal below (a str.format template; tests name it, not its words)
NOT_ITS_RUN = (
    "run {run_id} recorded by the audit is not its run on this tracking server (experiment, "
    "audit id or run name differ); nothing was logged."
)


def _resumable_run(client, record: dict[str, Any], audit: AuditRecord) -> tuple[str, str] | None:
    """The run the signed record names (its id and its experiment's id), if it is this
    audit's unfinished run on this server.

    None: no run recorded, or it is gone, deleted or FINISHED (a new run is created).

    Raises
    ------
    ValueError
        The recorded run exists but belongs to another experiment or audit.
    """
    from mlflow.exceptions import MlflowException

    bound = bound_run(record)
    if bound is None:
        return None
    try:
        run = client.get_run(bound["run_id"])
    except MlflowException as error:
        if getattr(error, "error_code", None) in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND"):
            return None
        raise
    if run.info.lifecycle_stage != "active" or run.info.status == "FINISHED":
        return None
    if (
        run.info.experiment_id != bound["experiment_id"]
        or run.data.tags.get("fairpca.audit_id") != audit.audit_id
        or run.info.run_name != audit.run_name
    ):
        raise ValueError(NOT_ITS_RUN.format(run_id=bound["run_id"]))
    if run.info.status != "RUNNING":  # marked FAILED by the interrupted logging: complete it
        client.update_run(run.info.run_id, status="RUNNING")
        if "fairpca.logging_error" in run.data.tags:
            client.delete_tag(run.info.run_id, "fairpca.logging_error")
    return bound["run_id"], bound["experiment_id"]


def log_output_dir(
    out_dir: Path,
    tracking_uri: str,
    *,
    promotion=None,
    retries: int | None = None,
    retry_backoff: float | None = None,
    ends_now: bool = False,
    verified: VerifiedCopy | None = None,
    client=None,
    verdict=None,
    run: dict[str, str] | None = None,
) -> LoggedAudit:
    """Log a kept audit directory to MLflow: run, params/metrics, artifacts, model, alias.

    Parameters
    ----------
    out_dir : path
        Directory written by the audit (``audit.json``, report, matrices, ``model/``).
    tracking_uri : str
        MLflow tracking (and registry) URI.
    promotion : PromotionRecord, default=None
        The promotion decided for this audit (:func:`fairpca.tasks.select.decide_promotion`):
        carried out after the version is registered; None moves no alias.
    retries, retry_backoff : int and float, default=None
        Retries per step on transient errors and the back-off factor (retry ``i`` waits
        ``retry_backoff * 2**i`` seconds); None takes the audit's config (3 and 2 s).
    ends_now : bool, default=False
        The run starts when the audit started; it ends now (the audit itself logs it: the
        run spans the audit's whole wall time) or, by default (a later relog), when the audit
        ended.
    verified : VerifiedCopy, default=None
        The copy of ``out_dir`` the caller verified (:func:`verified_copy`); None makes one.
        Everything logged is read from it.
    client : mlflow.MlflowClient, default=None
        The command's client of ``tracking_uri`` (:func:`fairpca.tasks.mlflow_store.mlflow_client`),
        used by every step; None makes one.
    verdict : Verdict, default=None
        The command's :func:`fairpca.tasks.report.build_verdict` of the record and
        ``promotion`` (the run and version descriptions, the model card); None builds it.
    run : dict, default=None
        The run the audit started (:func:`open_run`: ``run_id``, ``experiment_id``) and
        sealed with the folder, logged to without asking the server again; None: the
        unfinished run the seal names, else a new one (a relog).

    Raises
    ------
    MlflowLoggingError
        If a step still fails after its retries. The run is marked FAILED first (when it
        could be created) and the message names ``out_dir``, where the results are kept.
    """
    out_dir = Path(out_dir)
    checked = contextlib.nullcontext(verified) if verified else verified_copy(out_dir)
    with checked as verified:  # what is logged is what the audit sealed, as it was checked
        audit = read_audit(verified.files)
        attempt = _Attempt(out_dir, tracking_uri, retrying(audit, retries, retry_backoff), client)
        if run is not None:  # the audit's own: marked FAILED below if anything goes wrong
            attempt.run_id, attempt.experiment_id = run["run_id"], run["experiment_id"]
        try:
            named = bound_run(verified.record)
            if run is not None and named != {key: run[key] for key in ("run_id", "experiment_id")}:
                raise ValueError(
                    f"the folder's seal does not name run {run['run_id']} (it names {named}); "
                    "nothing was logged."
                )
            version, moved, new = _log_steps(attempt, verified, audit, promotion, ends_now, verdict)
        except Exception as exc:
            raise _logging_failed(attempt, exc) from exc
    _write_status(
        out_dir, {"status": "FINISHED", "run_id": attempt.run_id, "model_version": version}
    )
    return LoggedAudit(
        attempt.run_id, attempt.experiment_id, version, moved, mask_credentials(tracking_uri), new
    )


@dataclass
class _Attempt:
    """One call of :func:`log_output_dir`: the audit's retry options of its steps, the
    command's MLflow client, the run it logs to (and its experiment) once there is one, and
    the step under way (named when it fails)."""

    out_dir: Path
    tracking_uri: str
    retry: dict[str, Any]
    client: Any = None
    run_id: str | None = None
    experiment_id: str | None = None
    step: str = "start the run"

    def __call__(self, doing: str, step, *args):
        """Run ``step`` (a Prefect task, with the audit's retries) with the client;
        ``doing`` names it if it fails."""
        self.step = doing
        return step.with_options(**self.retry)(self.client, *args)


def retrying(audit: AuditRecord, retries: int | None = None, backoff: float | None = None) -> dict:
    """The audit's retry options of an MLflow task (``task.with_options(**retrying(audit))``):
    ``retries`` (default: the audit's config) with an exponential back-off of factor
    ``backoff`` (default: the config's). They replace the task's own retry options
    (:data:`RETRYING`: transient errors only), never add a layer around them."""
    return {
        "retries": audit.mlflow_retries if retries is None else retries,
        "retry_delay_seconds": exponential_backoff(
            backoff_factor=audit.mlflow_retry_backoff if backoff is None else backoff
        ),
    }


def open_run(tracking_uri: str, audit: AuditRecord, *, client) -> dict[str, str]:
    """Start the audit's MLflow run (:func:`start_run`, with the audit's retries) before its
    promotion is decided: the run id is then sealed into the folder with the promotion
    (:func:`fairpca.tasks.trust.seal_output_dir`), and :func:`log_output_dir` completes
    that run. Returns ``run_id`` and ``experiment_id``."""
    step = start_run.with_options(**retrying(audit))
    # a fresh id per call: a retried step finds this call's run again, not another's
    run_id, experiment_id = step(client, tracking_uri, audit, uuid.uuid4().hex)
    return {"run_id": run_id, "experiment_id": experiment_id}


def _log_steps(
    attempt: _Attempt, verified: VerifiedCopy, audit: AuditRecord, promotion, ends_now, verdict
):  # fmt: skip
    """Run, params and metrics, artifacts, model, the promotion, end: the registered version
    and whether the alias moved to it."""
    started = time.perf_counter()
    uri = attempt.tracking_uri
    client = attempt.client = attempt.client or mlflow_client(uri)
    verdict = verdict or build_verdict(audit, promotion)  # once, for every surface below
    if attempt.run_id is None:  # else the audit's own run, started and sealed before
        # the unfinished run the seal names (one an interrupted logging started), else a new one
        resumed = _resumable_run(client, verified.record, audit)
        attempt.run_id, attempt.experiment_id = resumed or (None, None)
    if attempt.run_id is None:
        # a fresh id per call: a retried step finds this call's run again, not another's
        run = attempt("start the run", start_run, uri, audit, uuid.uuid4().hex)
        attempt.run_id, attempt.experiment_id = run
        bind_run(attempt.out_dir, run_id=attempt.run_id, experiment_id=attempt.experiment_id)
    run_id, description = attempt.run_id, run_description(audit, promotion, verdict)
    attempt("log params and metrics", log_params_metrics, run_id, audit, description)
    attempt("log artifacts", log_artifacts, run_id, verified)
    version, new = attempt(
        "log and register the model", log_model, uri, run_id, verified, audit, promotion, verdict
    )
    moved = False
    tags, measured = {}, {}
    if promotion is not None:
        moved = attempt("carry out the promotion", apply_promotion, audit, version, promotion)
        tags["fairpca.champion_version_before"] = promotion.champion_version or "none"
        if promotion.demote:
            tags["fairpca.champion_demoted_to"] = _review_alias(audit)
        if promotion.comparison is not None:
            champion = promotion.comparison.metrics.get("champion", {})
            measured = {f"champion_test_{key}": value for key, value in champion.items()}
    tags |= {
        "fairpca.model_version": "none" if version is None else str(version),
        "fairpca.model_version_new": str(new).lower(),
        "fairpca.champion_moved": str(moved).lower(),
        "fairpca.decision": outcome(promotion, moved),  # the terminal's "Decision:" words
    }
    measured["time_mlflow_logging_s"] = time.perf_counter() - started
    end_time = None if ends_now else _millis(audit.ended_at)
    attempt("finish the run", finish_run, run_id, tags, measured, end_time)
    return version, moved, new


def _logging_failed(attempt: _Attempt, exc: Exception) -> MlflowLoggingError:
    """Mark the run FAILED (when there is one and the server answers), record the failure
    in the directory, and the error that says where the results are kept."""
    run_id, uri = attempt.run_id, attempt.tracking_uri
    marked = False
    for wait in range(3 if run_id else 0):  # best effort: neither RUNNING nor FINISHED
        try:
            client = attempt.client = attempt.client or mlflow_client(uri)
            client.set_tag(run_id, "fairpca.logging_error", f"{attempt.step}: {exc}"[:5000])
            client.set_terminated(run_id, status="FAILED")
            marked = True
            break
        except Exception:
            time.sleep(2**wait)
    _write_status(attempt.out_dir, {"status": "FAILED", "run_id": run_id, "step": attempt.step})
    run_state = (
        f"Run {run_id} is marked FAILED. "
        if marked
        else f"Run {run_id} could not be marked FAILED (the tracking server did not "
        "answer) and shows as RUNNING until relogged. "
    )
    return MlflowLoggingError(
        f"Logging the audit to MLflow at {mask_credentials(uri)} failed while "
        f"trying to {attempt.step} ({type(exc).__name__}: {exc}). "
        + (run_state if run_id else "")
        + f"All results are kept in {attempt.out_dir.resolve()}; {relog_hint(attempt.out_dir, uri)}"
    )


def logging_not_begun(
    out_dir: Path, tracking_uri: str, doing: str, error: BaseException
) -> MlflowLoggingError:
    """The error of an audit whose MLflow part could not begin (``doing``, e.g. the champion
    look-up or the run's start, failed after its retries: no run holds anything of it). The
    caller has sealed the complete folder; its status file says FAILED."""
    _write_status(out_dir, {"status": "FAILED", "run_id": None, "step": doing})
    why = textwrap.shorten(str(error), 300, placeholder=" ...")
    return MlflowLoggingError(
        f"{doing} at {shown_uri(tracking_uri)} failed ({type(error).__name__}: {why}). "
        f"All results are kept in {Path(out_dir).resolve()}; {relog_hint(out_dir, tracking_uri)}"
    )


def relog_hint(out_dir: Path, tracking_uri: str) -> str:
    """How to log ``out_dir`` to the same store later: the ``fairpca relog`` command with its
    ``--tracking-uri`` (credentials are never printed: a masked URI is named, not given)."""
    shown = mask_credentials(tracking_uri)
    store = f"--tracking-uri {shown}" if shown == tracking_uri else "--tracking-uri <that URI>"
    return (
        f"log them again with `fairpca relog {out_dir} {store}` once the tracking server "
        f"({shown}) is reachable."
    )


PLACEHOLDER_CATEGORY = RARE_CATEGORY  # the pooled bucket of rare categories


def input_example(
    X_train: pd.DataFrame, min_category_count: int = MIN_CATEGORY_COUNT
) -> pd.DataFrame:
    """Two synthetic rows built from aggregates only.

    Numeric columns: the median and the lower quartile, rounded to 3 significant digits
    (the median of an odd number of distinct values is one row's value). Categorical
    columns: the most frequent and the second most frequent category if they occur in at
    least ``min_category_count`` rows (the categories the encoder keeps), otherwise
    :data:`PLACEHOLDER_CATEGORY`. No raw row and no sensitive attribute is used (sensitive
    columns are not features).
    """
    columns = {}
    for column, values in X_train.items():
        if _is_numeric(values):  # 3 significant digits
            columns[column] = [float(f"{values.quantile(q):.3g}") for q in (0.5, 0.25)]
            continue
        counts = values.astype(str).value_counts()
        common = list(counts.index[counts >= min_category_count][:2])
        columns[column] = common + [PLACEHOLDER_CATEGORY] * (2 - len(common))
    return pd.DataFrame(columns, index=range(2), columns=list(X_train.columns))


def as_model_input(X: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as plain strings (the model's input schema)."""
    return X.astype({column: str for column in X.columns if not _is_numeric(X[column])})


def _is_numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def model_signature(example: pd.DataFrame, predictions):
    """The model signature: numeric columns as ``double``, the others as ``Any``.

    A categorical column is typed ``Any`` rather than ``string``: MLflow's schema check
    refuses a pandas ``category`` column for ``string`` ("Can not safely convert category
    to <U0"), while the project's loaders return categoricals and a CSV gives strings; the
    fitted encoder accepts both. Built from the synthetic ``example`` only.
    """
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import ColSpec, DataType, Schema
    from mlflow.types.schema import AnyType

    columns = [
        ColSpec(DataType.double if _is_numeric(example[name]) else AnyType(), name)
        for name in example.columns
    ]
    outputs = infer_signature(example, predictions).outputs
    return ModelSignature(inputs=Schema(columns), outputs=outputs)
