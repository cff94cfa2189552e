"""The ``retrain`` flow (for the schedule): first re-check the current ``champion`` on the new
data, then refit, register the new version and move the alias only if it meets the gate and
does not lose more accuracy than allowed.

Watching the champion: before a challenger is trained, the champion (loaded from the
registry with :func:`fairpca.tasks.registry.load_registered_pipeline`: skops, fixed trusted types,
SHA-256 checked) predicts the new data's held-out rows; its test metrics are logged as
``champion_test_<metric>``. When it now fails the gate, the ``champion`` alias moves to
``needs_review_alias`` at once, whatever the challenger does, and the flow run's final state
message and a Prefect Markdown artifact say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed
from prefect.task_runners import ThreadPoolTaskRunner

from fairpca.tasks.data import load_data, split_data
from fairpca.tasks.mlflow_logging import RETRYING
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.policy import GatePolicy
from fairpca.tasks.record import format_interval
from fairpca.tasks.registry import (
    ModelDefinitionMismatch,
    definition_json,
    definition_of,
    demote,
    resolved_model_name,
)
from fairpca.tasks.select import candidate_name, gate_failures

from .audit import AuditResult, finish_audit, prepare_audit
from .champion import (
    COMPARED,
    champion_test_metrics,
    decide_promotion,
    load_champion,
)
from .config import RetrainConfig, resolve_tracking_uri
from .runtime import dask_subflow

__all__ = [
    "ChampionWatch",
    "compare_with_champion",
    "evaluate_champion",
    "load_champion",
    "retrain",
    "watch_champion",
]


@task(name="evaluate-champion", **RETRYING)
def evaluate_champion(
    tracking_uri: str, champion: dict[str, Any], split, config: RetrainConfig
) -> dict[str, Any]:
    """Champion metrics with 95% intervals on the new data's test rows (for the gate and the
    comparison with the challenger on the same rows); never its tags.

    A version that cannot be verified (:class:`~fairpca.tasks.registry.UntrustedModelError`) gives
    ``{"unverified": why}``: a finding, not a transient error to retry.
    """
    metrics = champion_test_metrics(tracking_uri, champion, split, config.evaluation, config.seed)
    return metrics if "unverified" in metrics else {"test": metrics}


def compare_with_champion(state, watch: ChampionWatch, config: RetrainConfig) -> None:
    """The challenger against the champion on the same new test rows, with intervals
    (:func:`fairpca.flows.champion.decide_promotion`): updates the decision and records
    ``champion_comparison``. A champion demoted by the watch is not compared."""
    incumbent = watch.champion if watch.still_champion else None
    challenger = {**state.evaluation["chosen"]["test"], "name": candidate_name(state.chosen)}
    state.decision, record = decide_promotion(
        state.decision,
        challenger,
        incumbent,
        watch.metrics.get("test") if incumbent else None,
        GatePolicy.from_config(config.selection),
        config.promotion.accuracy_tolerance,
    )
    if incumbent is None:
        state.decision.reasons.append("no current champion: the gate alone decides")
    state.additions["champion_comparison"] = record


@dataclass
class ChampionWatch:
    """What re-checking the champion on the new data found."""

    champion: dict[str, Any] | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    demoted_to: str | None = None

    @property
    def still_champion(self) -> bool:
        return self.champion is not None and self.demoted_to is None

    def mlflow_metrics(self) -> dict[str, float]:
        """``champion_test_<metric>`` (and its ``.ci95_low``/``.ci95_high``) of the champion
        on the new test rows."""
        return {f"champion_test_{k}": v for k, v in self.metrics.get("test", {}).items()}

    def summary(self) -> str:
        if self.champion is None:
            return "no champion to re-check"
        who = f"champion v{self.champion['version']} of {self.champion['name']}"
        if self.demoted_to is None:
            return f"{who} still meets the gate on the new test rows"
        return (
            f"{who} fails the gate on the new data ({'; '.join(self.failures)}); alias "
            f"moved to '{self.demoted_to}' for review"
        )


def watch_champion(config: RetrainConfig, tracking_uri: str, dataset=None) -> ChampionWatch:
    """Re-check the champion on the new data (``dataset``, default: loaded now) before any
    challenger is trained; demote it (``champion`` -> ``needs_review_alias``) when it fails
    the gate or cannot be verified."""
    logger = get_run_logger()
    name = resolved_model_name(config.source, config.tracking.model_name)
    champion = load_champion(tracking_uri, name, config.tracking.champion_alias)
    watch = ChampionWatch(champion=champion)
    if champion is None:
        return watch
    expected = definition_json(definition_of(config.source))
    if champion["definition"] not in (None, expected):
        raise ModelDefinitionMismatch(
            f"registered model {name!r} holds audits of {champion['definition']}, but this "
            f"retrain audits {expected}; leave model_name unset or choose another one."
        )
    split = split_data(
        load_data(config.source) if dataset is None else dataset,
        config.split,
        config.source,
        seed=config.seed,
        min_group_size=config.evaluation.min_group_size,
    )
    metrics = evaluate_champion(tracking_uri, champion, split, config)
    if "unverified" in metrics:
        watch.failures = [f"cannot be verified: {metrics['unverified']}"]
    else:
        watch.metrics = metrics
        watch.failures = gate_failures(metrics["test"], GatePolicy.from_config(config.selection))
    if watch.failures:
        demote(
            mlflow_client(tracking_uri),
            name,
            champion["version"],
            from_alias=config.tracking.champion_alias,
            to_alias=config.promotion.needs_review_alias,
            why="; ".join(watch.failures),
        )
        watch.demoted_to = config.promotion.needs_review_alias
        logger.warning(watch.summary())
    else:
        logger.info(watch.summary())
    return watch


def _comparison_section(state, watch: ChampionWatch) -> tuple[str, pd.DataFrame]:
    """Challenger beside the champion on the same new test rows."""
    rows = [
        {"model": "challenger (this run), test rows"}
        | {k: format_interval(state.evaluation["chosen"]["test"], k) for k in COMPARED}
    ]
    for part, values in watch.metrics.items():
        rows.append(
            {"model": f"champion v{watch.champion['version']}, {part} rows"}
            | {k: format_interval(values, k) for k in COMPARED}
        )
    verdict = "promote" if state.decision.promote else "keep champion"
    return f"Retrain decision: {verdict}", pd.DataFrame(rows)


def _retrain_tags(state, watch: ChampionWatch) -> dict[str, str]:
    champion = watch.champion
    tags = {
        "fairpca.retrain_decision": "promote" if state.decision.promote else "keep champion",
        "fairpca.champion_version_before": champion["version"] if champion else "none",
        "fairpca.champion_watch": watch.summary(),
    }
    if watch.demoted_to is not None:
        tags["fairpca.champion_demoted_to"] = watch.demoted_to
    if watch.metrics:
        tags["fairpca.champion_metrics_source"] = "re-evaluated on the new data"
    return tags


def final_message(watch: ChampionWatch, result: AuditResult) -> str:
    """The flow run's final-state message: the champion check first, then the challenger."""
    challenger = (
        f"challenger v{result.model_version} "
        + ("became champion" if result.champion_moved else "was not promoted")
        if result.model_version
        else "challenger not registered"
    )
    if watch.demoted_to is not None and not result.champion_moved:
        challenger += f"; {result.model_name} has no champion until a reviewer acts"
    return f"{watch.summary()}; {challenger}."


def _publish(config: RetrainConfig, watch: ChampionWatch, result: AuditResult) -> None:
    """Prefect Markdown artifact of the champion check (aggregates only)."""
    key = re.sub(
        r"[^a-z0-9-]+",
        "-",
        f"champion-watch-{resolved_model_name(config.source, config.tracking.model_name)}".lower(),
    )
    lines = [
        f"# Champion check of {result.model_name}",
        f"**{final_message(watch, result)}**",
        "",
        "| rows | " + " | ".join(COMPARED) + " |",
        "|---|" + "---|" * len(COMPARED),
        *(
            f"| champion, {part} | "
            + " | ".join(format_interval(values, k) for k in COMPARED)
            + " |"
            for part, values in watch.metrics.items()
        ),
        "",
        *(f"- gate failure: {failure}" for failure in watch.failures),
        f"- MLflow run `{result.run_id}`; decision reasons: {'; '.join(result.reasons)}",
    ]
    create_markdown_artifact("\n".join(lines), key=key[:100], description="champion check")


@flow(name="fairness-retrain", task_runner=ThreadPoolTaskRunner(max_workers=2))
def retrain(config: RetrainConfig) -> AuditResult:
    """Scheduled retraining that watches its champion.

    Parameters
    ----------
    config : RetrainConfig
        Audit settings plus ``accuracy_tolerance`` and ``needs_review_alias``; ``seed``
        fixes the split, so the champion and the challenger see the same held-out rows.

    Returns
    -------
    AuditResult
        Its ``decision``/``reasons`` say whether the new version became the champion; the
        flow run's final state (Completed) carries :func:`final_message`, which says when
        the old champion was demoted.
    """
    logger = get_run_logger()
    tracking_uri = resolve_tracking_uri(config.tracking.tracking_uri)
    if (on_dask := dask_subflow(retrain, config.dask_address)) is not None:
        return on_dask(config)
    dataset = load_data(config.source)  # once: the champion and the challenger see the same rows
    watch = watch_champion(config, tracking_uri, dataset)
    state = prepare_audit(config, "retrain", dataset)
    compare_with_champion(state, watch, config)
    if watch.champion is not None and not watch.still_champion:
        state.decision.reasons.insert(0, watch.summary())
    logger.info("retrain decision: %s", state.decision.as_dict())
    result = finish_audit(
        state,
        kind="retrain",
        extra_sections=[_comparison_section(state, watch)],
        extra_tags=_retrain_tags(state, watch),
        extra_metrics=watch.mlflow_metrics(),
    )
    _publish(config, watch, result)
    message = final_message(watch, result)
    result.outcome = message
    (logger.warning if watch.demoted_to else logger.info)(message)
    return Completed(message=message, data=result)
