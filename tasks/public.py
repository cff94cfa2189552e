"""Public Prefect tasks for a team's own flows: fair representations and fairness audits.

The names and signatures below are stable; the audit's internal tasks may change underneath.

- :func:`fit_fair_representation` -- fit fair PCA (or a variant) on encoded training rows;
- :func:`sweep_lambda` -- accuracy / fairness of a downstream classifier at each trade-off
  ``lambda`` of a fitted fair representation (one fit, one transform per lambda);
- :func:`evaluate_model_fairness` -- group fairness of any classifier MLflow can load (or any
  object with ``predict``), with bootstrap intervals; optionally logged to an MLflow run;
- :func:`write_fairness_report` -- the per-group table (JSON, CSV), a plot and a Markdown report;
- :func:`log_fairness_to_mlflow` -- the metrics and report files into an MLflow run;
- :func:`write_audit_report` and :func:`log_audit_output` -- the report writer and MLflow logger
  of ``fairpca audit`` (their signatures follow the audit).

Every metric comes from :func:`fairpca.metrics.group_fairness` and
:func:`fairpca.metrics.bootstrap_intervals`, under the names of the MLflow ``fairness``
evaluator (``dp_difference``, ``eo_difference``, ``dp_difference.<attr>``,
``selection_rate.<attr>:<group>``, ``<metric>.ci95_low`` / ``.ci95_high``, ...).
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from .mlflow_evaluator import (
    CONFIG_DEFAULTS,
    fairness_metrics,
    model_input,
    read_config,
    sensitive_columns,
    write_artifacts,
)
from .mlflow_logging import log_output_dir as log_audit_output
from .mlflow_store import get_or_create_experiment, log_metrics_batched, mlflow_client
from .report import Bullets, Plot, render_markdown
from .report import write_report as write_audit_report
from .represent import FittedRepresentation, fit_representation, largest_k
from .sweep import sweep_tradeoff
from .trust import load_verified_model, shown_uri, take_credentials

# The message of a refusal below (a str.format template; tests name it, not its words)
NO_TRADEOFF = (
    "{estimator} has no tradeoff parameter; sweep_lambda needs a fair representation such as "
    "FairPCA (variant 'fair_pca')."
)

__all__ = [
    "FairnessEvaluation",
    "FittedRepresentation",
    "evaluate_model_fairness",
    "fit_fair_representation",
    "log_audit_output",
    "log_fairness_to_mlflow",
    "sweep_lambda",
    "write_audit_report",
    "write_fairness_report",
]


@dataclass(frozen=True)
class FairnessEvaluation:
    """What :func:`evaluate_model_fairness` found: aggregates only, no rows.

    ``metrics`` uses the evaluator's names; ``groups`` has one row per reported group
    (attribute, group, size, selection_rate, tpr); ``notes`` says what is undefined or
    suppressed; ``config`` holds the settings (``sensitive_features``, ``min_group_size``, ...);
    ``params`` says which model ran on which data with which settings (logged as MLflow params
    of a new run by :func:`log_fairness_to_mlflow`).
    """

    metrics: dict[str, float]
    groups: pd.DataFrame
    notes: list[str]
    config: dict[str, Any]
    params: dict[str, str] = field(default_factory=dict)


@task(name="fit-fair-representation", cache_policy=NO_CACHE)
def fit_fair_representation(
    X: np.ndarray,
    y: np.ndarray,
    sensitive_features: Any,
    *,
    variant: str = "fair_pca",
    n_components: int = 10,
    equalize_covariance: float = 0.5,
    pos_label: Any = 1,
    seed: int = 0,
) -> FittedRepresentation:
    """Fit one representation on encoded (numeric) training rows.

    ``variant``: ``fair_pca`` (demographic parity, Algorithm 1), ``fair_pca_eo`` (equal
    opportunity on the rows whose ``y`` is ``pos_label``, Sec. 3.2), ``fair_pca_s`` (also
    equalises covariances, Sec. 3.6), ``fair_kernel_pca`` (Sec. 3.3) or ``pca``.
    ``n_components`` is capped at the largest k the rows allow: ``d`` minus the group-mean
    constraints (one per group beyond the first of each attribute, Algorithm 1). A group of
    one training row is merged into its attribute's largest group (a one-row mean is that
    person's row, and the estimators need two rows per group). The fitted estimator is
    ``result.estimator``.
    """
    groups = (
        pd.DataFrame(sensitive_features)
        if np.ndim(sensitive_features) > 1
        else pd.DataFrame({"group": np.asarray(sensitive_features, dtype=object)})
    )
    k = n_components
    if len(groups) == np.shape(X)[0]:  # else the estimator names the mismatch
        k = max(min(k, largest_k(np.shape(X)[1], groups, [variant])[0]), 1)
    if variant == "fair_pca_eo":  # the constraint holds on the positive rows
        y = _binary(y, pos_label, "y")
    return fit_representation.fn(
        variant, X, y, sensitive_features, k=k, equalize_covariance=equalize_covariance,
        seed=seed,
    )  # fmt: skip


def _binary(y: Any, pos_label: Any, name: str) -> np.ndarray:
    """``y == pos_label`` as 0/1, checked as the metrics check labels (binary, ``pos_label``
    one of them: :func:`fairpca.metrics._validation._positive_mask`)."""
    from fairpca.metrics._validation import _positive_mask

    return _positive_mask(y, name, pos_label).astype(np.int64)


@task(name="sweep-lambda", cache_policy=NO_CACHE)
def sweep_lambda(
    representation: Any,
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_eval: np.ndarray,
    y_eval: np.ndarray,
    sensitive_eval: Any,
    *,
    lambdas: list[float],
    classifier: Any = None,
    pos_label: Any = 1,
    min_group_size: int = CONFIG_DEFAULTS["min_group_size"],
    n_resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per ``lambda``: the evaluator's metrics of a classifier on ``X_eval``.

    ``representation`` is a fitted estimator with a ``tradeoff`` parameter (``FairPCA``) or a
    :class:`FittedRepresentation`. At each lambda the fair features get ``lambda`` times the
    standard PCA features appended (Sec. 3.1: no refit), ``classifier`` (cloned; default
    ``LogisticRegression(max_iter=1000)``) is fitted on the training rows and evaluated on the
    evaluation rows. The caller's estimator is not changed (the sweep works on a copy).

    The audit's own sweep (:func:`fairpca.tasks.sweep.sweep_tradeoff`) with one classifier:
    besides the metrics, each row has ``lambda_index``, ``n_features``, ``classifier`` (its
    class name), ``one_class_share`` and ``classifier_seconds``.
    """
    # a copy: concurrent sweeps of one fitted estimator must not set each other's lambda
    estimator = copy.deepcopy(getattr(representation, "estimator", representation))
    if "tradeoff" not in estimator.get_params():
        raise ValueError(NO_TRADEOFF.format(estimator=type(estimator).__name__))
    if not len(lambdas) or not all(np.isfinite(lam) and lam >= 0 for lam in lambdas):
        raise ValueError(
            f"lambdas={list(lambdas)!r}: pass one or more numbers >= 0 (the weight of the "
            "appended PCA features, Sec. 3.1: 0 is the fairest)."
        )
    template = LogisticRegression(max_iter=1000) if classifier is None else classifier
    # 0/1 labels (1: pos_label) for the classifier and every metric and standard error
    y_train, y_eval = _binary(y_train, pos_label, "y_train"), _binary(y_eval, pos_label, "y_eval")
    options = {"pos_label": 1, "min_group_size": min_group_size, "seed": seed,
               "n_resamples": n_resamples, "allow_small_groups": False}  # fmt: skip
    rows, _ = sweep_tradeoff(
        estimator, [float(lam) for lam in lambdas], X_train, y_train, X_eval, y_eval,
        sensitive_eval, metric_options=options,
        classifiers={type(template).__name__: lambda F, y: clone(template).fit(F, y)},
    )  # fmt: skip
    return pd.DataFrame(rows)


@task(name="evaluate-model-fairness", cache_policy=NO_CACHE)
def evaluate_model_fairness(
    model: Any,
    data: pd.DataFrame,
    *,
    target: str,
    sensitive_features: list[str],
    pos_label: Any = 1,
    min_group_size: int = CONFIG_DEFAULTS["min_group_size"],
    n_resamples: int = CONFIG_DEFAULTS["n_resamples"],
    seed: int = 0,
    tracking_uri: str | None = None,
    run_id: str | None = None,
) -> FairnessEvaluation:
    """Group fairness of a classifier on ``data`` (features, ``target`` and sensitive columns).

    ``model`` is an MLflow model URI (``models:/...``, ``runs:/...``, a path) or any object
    with ``predict``. A URI must name a scikit-learn model logged with
    ``serialization_format="skops"`` whose types skops or fairpca trusts: its files are
    verified before it is loaded, and a pickled or cloudpickled model is refused, as its
    loading would run code from the file; load such a model yourself and pass the object.
    The sensitive columns reach the model only if its MLflow signature names them.
    ``tracking_uri`` (made MLflow's current tracking URI) resolves ``models:/`` URIs; with
    ``run_id`` the metrics are also logged to that run.
    """
    config = read_config({
        "sensitive_features": sensitive_features, "pos_label": pos_label,
        "min_group_size": min_group_size, "n_resamples": n_resamples, "seed": seed,
    })  # fmt: skip
    if target not in data.columns:
        raise ValueError(
            f"target column {target!r} not in data; its columns are {list(data.columns)}."
        )
    features = data.drop(columns=[target])
    sensitive = sensitive_columns(features, config["sensitive_features"])
    model_name = shown_uri(model) if isinstance(model, str) else type(model).__name__
    if isinstance(model, str):  # verified before it is loaded
        import mlflow

        if tracking_uri is not None:  # it resolves models:/ URIs; a password goes to MLflow's env
            tracking_uri = take_credentials(tracking_uri)
            mlflow.set_tracking_uri(tracking_uri)
        model = load_verified_model(model, tracking_uri)
    y_pred = np.asarray(model.predict(model_input(model, features, config["sensitive_features"])))
    metrics, report = fairness_metrics(data[target].to_numpy(), y_pred, sensitive, config)
    params = evaluation_params(model_name, data, target, config)
    evaluation = FairnessEvaluation(
        metrics, report.group_table(), list(report.notes), config, params
    )
    if run_id is not None:
        log_fairness_to_mlflow.fn(evaluation, tracking_uri=tracking_uri, run_id=run_id)
    return evaluation


def evaluation_params(
    model: str, data: pd.DataFrame, target: str, config: dict[str, Any]
) -> dict[str, str]:
    """What an evaluation ran on, as MLflow params: the model (URI or class), the data (rows,
    columns and a SHA-256 of its contents, never a value) and every setting."""
    digest = hashlib.sha256(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes())
    params = {
        "model": model,
        "target": target,
        "data.rows": str(len(data)),
        "data.columns": ",".join(str(c) for c in data.columns),
        "data.sha256": digest.hexdigest(),
    }
    for key, value in config.items():
        text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        params[f"fairness.{key}"] = text
    return {key: value[:6000] for key, value in params.items()}  # MLflow's param value limit


@task(name="write-fairness-report", cache_policy=NO_CACHE)
def write_fairness_report(
    evaluation: FairnessEvaluation, out_dir: Path, *, title: str = "Fairness audit"
) -> dict[str, Path]:
    """Write ``fairness_groups.json``/``.csv``, ``fairness_rates.png`` and ``fairness_report.md``.

    ``out_dir`` is created if needed; existing files of these names are replaced, nothing else
    is touched. Returns ``{name: path}``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = write_artifacts(evaluation.groups, evaluation.notes, evaluation.config, out_dir)
    headline = pd.DataFrame(list(evaluation.metrics.items()), columns=["metric", "value"])
    attributes = ", ".join(map(str, evaluation.config["sensitive_features"]))
    intro = (
        f"Sensitive attributes: {attributes}; groups with fewer than "
        f"{evaluation.config['min_group_size']} rows are suppressed."
    )  # escaped as literal Markdown text where it is rendered
    sections = [
        ("Metrics (with 95% bootstrap intervals)", headline),
        ("Per-group rates", [evaluation.groups, Plot("per-group rates")]),
        ("Notes", Bullets(evaluation.notes or ["none"])),
    ]
    text = render_markdown(title, sections, files["fairness_rates"].name, intro=intro)
    files["fairness_report"] = out_dir / "fairness_report.md"
    files["fairness_report"].write_text(text)
    return files


@task(name="log-fairness-to-mlflow", cache_policy=NO_CACHE)
def log_fairness_to_mlflow(
    evaluation: FairnessEvaluation,
    files: dict[str, Path] | None = None,
    *,
    tracking_uri: str | None = None,
    run_id: str | None = None,
    experiment_name: str = "fairness-audits",
) -> str:
    """Log the metrics, and the report ``files`` under ``fairness/``, to ``run_id``.

    ``files`` is what :func:`write_fairness_report` returned (None: metrics only). Without
    ``run_id`` a new run goes to ``experiment_name`` (created if missing; for a local SQLite
    store its artifacts are kept next to the database) and is ended. Returns the run id.
    """
    from mlflow.entities import Metric, Param

    client = mlflow_client(tracking_uri)
    new_run = run_id is None
    if new_run:
        experiment_id = get_or_create_experiment(client, experiment_name, tracking_uri)
        run_id = client.create_run(experiment_id, run_name="fairness-audit").info.run_id
    now = int(time.time() * 1000)
    batch = [Metric(key, float(value), now, 0) for key, value in evaluation.metrics.items()]
    log_metrics_batched(client, run_id, batch)
    if new_run and evaluation.params:
        client.log_batch(run_id, params=[Param(*item) for item in evaluation.params.items()])
    for path in (files or {}).values():
        client.log_artifact(run_id, str(path), artifact_path="fairness")
    if new_run:
        client.set_terminated(run_id)
    return run_id
