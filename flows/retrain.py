"""The ``retrain`` flow (for the schedule): the audit's recipe on current data, watching the
champion.

After the challenger's results are written, the current ``champion`` (loaded from the registry
with :func:`fairpca.tasks.registry.load_registered_pipeline`: skops, fixed trusted types,
SHA-256 checked) predicts the same new test rows; the one promotion decision
(:func:`fairpca.tasks.select.decide_promotion`) then demotes it to ``needs_review_alias`` when
it now fails the gate (or cannot be verified), whatever the challenger does, and promotes the
challenger only if it passes the gate and loses at most ``accuracy_tolerance`` against the
champion on those rows. The flow run's final state message says what happened.
"""

from __future__ import annotations

import re

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed

from fairpca.tasks.distributed import on_partitions
from fairpca.tasks.report import markdown_text

from .audit import AuditResult, audit_flow, run_audit, verdict_summary
from .config import RetrainConfig
from .runtime import dask_subflow


def final_message(result: AuditResult) -> str:
    """The flow run's final-state message: the champion check first, then the challenger."""
    promotion, name = result.promotion, result.record.model_name
    if promotion.champion_version is None:
        watch = "no champion to re-check"
    elif promotion.demote:
        alias = result.record.params.get("needs_review_alias", "needs-review")
        watch = f"{promotion.reasons[0]}; alias moved to '{alias}' for review"
    else:
        version = promotion.champion_version
        watch = f"champion v{version} of {name} still meets the gate on the new test rows"
    if result.model_version is None:
        challenger = "challenger not registered"
    else:
        moved = "became champion" if result.champion_moved else "was not promoted"
        challenger = f"challenger v{result.model_version} {moved}"
    if promotion.demote and not result.champion_moved:
        challenger += f"; {name} has no champion until a reviewer acts"
    return f"{watch}; {challenger}."


def publish_champion_check(result: AuditResult, message: str) -> None:
    """The champion check as a Prefect Markdown artifact (``champion-watch-<model>``)."""
    name = result.record.model_name
    key = re.sub(r"[^a-z0-9-]+", "-", f"champion-watch-{name}".lower())[:100]
    lines = [f"# Champion check of {markdown_text(name)}", "", f"**{markdown_text(message)}**"]
    lines += [f"- {markdown_text(reason)}" for reason in result.reasons]
    create_markdown_artifact("\n".join(lines), key=key, description="champion check")


@audit_flow("fairness-retrain")
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
        Its promotion says whether the champion was demoted and whether the new version
        became the champion; the flow run's final state (Completed) carries
        :func:`final_message`.
    """
    # a partitioned table has its own Dask client (fairpca.tasks.distributed): no subflow
    on_dask = dask_subflow(retrain, None if on_partitions(config.source) else config.dask_address)
    if on_dask is not None:
        return on_dask(config)
    result = run_audit(config, "retrain", watch=True, tolerance=config.promotion.accuracy_tolerance)
    message = final_message(result)
    publish_champion_check(result, message)
    (get_run_logger().warning if result.promotion.demote else get_run_logger().info)(message)
    # the run's outcome: the champion check, then the challenger's verdict and its reason
    verdict = verdict_summary(result.verdict)
    return Completed(message=f"{message} Verdict: {verdict}", data=result)
