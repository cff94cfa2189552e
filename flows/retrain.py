"""The ``retrain`` flow (for the schedule): refit on current data, compare with the current
``champion`` on the same seeded evaluation split, register the new version and move the alias
only if it meets the fairness thresholds and does not lose more accuracy than allowed."""

from __future__ import annotations

from typing import Any

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from tasks.evaluate import classifier_metrics
from tasks.mlflow_logging import RETRYING
from tasks.report import Decision

from .audit import AuditResult, finish_audit, prepare_audit
from .config import RetrainConfig, resolve_tracking_uri
from .runners import needs_dask_subflow, task_runner_for
from .warmup import wait_for_warmup

__all__ = ["compare_with_champion", "load_champion", "retrain"]

COMPARED = ("accuracy", "dp_difference", "eo_difference")


@task(name="mlflow-load-champion", **RETRYING)
def load_champion(tracking_uri: str, model_name: str, alias: str) -> dict[str, Any] | None:
    """The version ``alias`` points to (tags and source), or None when there is none."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        version = client.get_model_version_by_alias(model_name, alias)
    except MlflowException as error:
        if error.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise
    return {
        "version": str(version.version),
        "run_id": version.run_id,
        "tags": dict(version.tags),
        "uri": f"models:/{model_name}/{version.version}",
    }


@task(name="evaluate-champion", **RETRYING)
def evaluate_champion(tracking_uri: str, champion: dict[str, Any], split) -> dict[str, Any]:
    """Champion metrics on the current evaluation rows (its logged tags if it cannot load)."""
    import mlflow
    import mlflow.sklearn

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    try:
        model = mlflow.sklearn.load_model(champion["uri"])
        y_pred = model.predict(split.X_validation)
    except Exception as error:
        tags = champion["tags"]
        metrics = {key: float(tags[key]) for key in COMPARED if key in tags}
        metrics["source"] = f"logged tags (reload failed: {type(error).__name__})"
        return metrics
    metrics = classifier_metrics(split.y_validation, y_pred, split.s_validation)
    metrics["source"] = "re-evaluated on the current validation rows"
    return metrics


def compare_with_champion(
    challenger: dict[str, Any],
    thresholds_decision: Decision,
    champion: dict[str, Any] | None,
    champion_metrics: dict[str, Any] | None,
    tolerance: float,
) -> Decision:
    """Promote iff the challenger meets the thresholds and its accuracy is at least the
    champion's minus ``tolerance`` (first model: thresholds only)."""
    reasons = list(thresholds_decision.reasons)
    promote = thresholds_decision.promote
    if champion is None or champion_metrics is None or "accuracy" not in champion_metrics:
        reasons.append("no current champion: the thresholds alone decide")
        return Decision(promote, reasons)
    floor = champion_metrics["accuracy"] - tolerance
    if challenger["accuracy"] < floor:
        promote = False
        reasons.append(
            f"accuracy {challenger['accuracy']:.4f} regresses beyond the tolerance: champion "
            f"v{champion['version']} has {champion_metrics['accuracy']:.4f} (- {tolerance})"
        )
    else:
        reasons.append(
            f"accuracy {challenger['accuracy']:.4f} >= champion v{champion['version']} "
            f"{champion_metrics['accuracy']:.4f} - tolerance {tolerance}"
        )
    return Decision(promote, reasons)


@flow(name="fairness-retrain", task_runner=ThreadPoolTaskRunner(max_workers=2))
def retrain(config: RetrainConfig) -> AuditResult:
    """Scheduled retraining with champion/challenger governance.

    Parameters
    ----------
    config : RetrainConfig
        Audit settings plus ``accuracy_tolerance``; ``seed`` fixes the evaluation split.

    Returns
    -------
    AuditResult
        Its ``decision``/``reasons`` say whether the new version became the champion.
    """
    logger = get_run_logger()
    tracking_uri = resolve_tracking_uri(config.tracking_uri)
    if needs_dask_subflow(config.dask_address):  # a deployment run asking for Dask
        return retrain.with_options(task_runner=task_runner_for(config.dask_address))(config)
    state = prepare_audit(config, "retrain")
    wait_for_warmup(tracking_uri)
    champion = load_champion(tracking_uri, config.resolved_model_name, config.champion_alias)
    champion_metrics = evaluate_champion(tracking_uri, champion, state.split) if champion else None
    state.decision = compare_with_champion(
        state.chosen, state.decision, champion, champion_metrics, config.accuracy_tolerance
    )
    logger.info("retrain decision: %s", state.decision.as_dict())
    rows = [{"model": "challenger (this run)", **{k: state.chosen[k] for k in COMPARED}}]
    if champion_metrics:
        rows.append(
            {
                "model": f"champion v{champion['version']}",
                **{k: champion_metrics.get(k) for k in COMPARED},
            }
        )
    verdict = "promote" if state.decision.promote else "keep champion"
    section = (
        f"Retrain decision: {verdict}",
        pd.DataFrame(rows),
    )
    tags = {
        "fairpca.retrain_decision": verdict,
        "fairpca.champion_version_before": champion["version"] if champion else "none",
    }
    if champion_metrics:
        tags["fairpca.champion_metrics_source"] = champion_metrics.get("source", "")
        for key in COMPARED:
            if champion_metrics.get(key) is not None:
                tags[f"fairpca.champion_{key}"] = f"{champion_metrics[key]:.6f}"
    return finish_audit(state, kind="retrain", extra_sections=[section], extra_tags=tags)
