"""Champion / challenger: the ``champion`` alias leaves a version only through a comparison
on rows no choice read (the new audit's test part), with intervals, and never for an audit
whose gate policy is laxer than the one the champion was chosen under.

Both the audit and the retrain flow decide promotion here (:func:`decide_promotion`).
"""

from __future__ import annotations

from typing import Any

from prefect import task

from fairpca.tasks.evaluate import metrics_with_intervals
from fairpca.tasks.mlflow_logging import RETRYING
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.policy import GatePolicy
from fairpca.tasks.registry import DEFINITION_TAG, UntrustedModelError, load_registered_pipeline
from fairpca.tasks.select import Decision

__all__ = [
    "COMPARED",
    "champion_test_metrics",
    "decide_promotion",
    "load_champion",
]

# Measures shown side by side; the comparison itself uses accuracy and balanced accuracy.
COMPARED = (
    "accuracy",
    "balanced_accuracy",
    "dp_difference",
    "selection_rate_ratio",
    "eo_difference",
    "equalized_odds_difference",
)
DEFAULT_TOLERANCE = 0.01  # the audit's tolerance; retrain has ``accuracy_tolerance``


@task(name="mlflow-load-champion", **RETRYING)
def load_champion(tracking_uri: str, model_name: str, alias: str) -> dict[str, Any] | None:
    """The version ``alias`` points to (tags, and the registered model's definition tag),
    or None when there is none."""
    from mlflow.exceptions import MlflowException

    client = mlflow_client(tracking_uri)
    try:
        version = client.get_model_version_by_alias(model_name, alias)
    except MlflowException as error:
        if error.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise
    return {
        "name": model_name,
        "version": str(version.version),
        "run_id": version.run_id,
        "tags": dict(version.tags),
        "definition": client.get_registered_model(model_name).tags.get(DEFINITION_TAG),
    }


def champion_test_metrics(
    tracking_uri: str, champion: dict[str, Any], split, evaluation, seed: int
) -> dict:
    """The champion's metrics with 95% intervals (as ``evaluation`` says) on ``split``'s
    test rows, or ``{"unverified": why}`` when the version cannot be verified."""
    try:
        pipeline = load_registered_pipeline(tracking_uri, champion["name"], champion["version"])
    except UntrustedModelError as error:
        return {"unverified": str(error)}
    return metrics_with_intervals(
        split.y_test,
        pipeline.predict(split.X_test),
        split.s_test,
        min_group_size=evaluation.min_group_size,
        allow_small_groups=evaluation.allow_small_groups,
        n_resamples=evaluation.n_bootstrap,
        seed=seed,
    )


def _side_by_side(challenger: dict, champion: dict) -> dict[str, dict[str, float]]:
    out = {}
    for who, metrics in (("challenger", challenger), ("champion", champion)):
        out[who] = {
            f"{m}{suffix}": float(metrics[f"{m}{suffix}"])
            for m in COMPARED
            for suffix in ("", ".ci95_low", ".ci95_high")
            if f"{m}{suffix}" in metrics
        }
    return out


def _outcome(challenger: dict, champion: dict, tolerance: float) -> tuple[bool, str]:
    """Promote iff the challenger loses at most ``tolerance`` of accuracy and of balanced
    accuracy against the champion on the same test rows."""
    losses = []
    for metric in ("accuracy", "balanced_accuracy"):
        mine, theirs = challenger.get(metric), champion.get(metric)
        if mine is None or theirs is None:
            continue
        if mine < theirs - tolerance:
            losses.append(f"{metric} {mine:.4f} < champion {theirs:.4f} - {tolerance:g}")
    if losses:
        return False, "the challenger is worse on the shared test rows: " + "; ".join(losses)
    return True, (
        "on the shared test rows the challenger loses at most "
        f"{tolerance:g} of accuracy and balanced accuracy against the champion"
    )


def decide_promotion(
    decision: Decision,
    challenger: dict[str, Any],
    champion: dict[str, Any] | None,
    champion_test: dict[str, Any] | None,
    policy: GatePolicy,
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[Decision, dict[str, Any] | None]:
    """The final decision and the ``champion_comparison`` record.

    ``challenger`` holds the chosen candidate's test metrics (``"name"`` its candidate name),
    ``champion_test`` the champion's on the same rows. Without a champion the gate decides.
    A challenger that passed the gate still stays out when its policy is laxer than the
    champion's (the champion's ``policy`` tags) or when it is worse on the shared rows.
    """
    if champion is None:
        return decision, None
    record = {
        "champion_version": str(champion["version"]),
        "challenger": str(challenger.get("name", "challenger")),
        "rows": "the test part of this audit (no choice read them)",
        "metrics": {},
    }
    reasons = list(decision.reasons)
    laxer = policy.laxer_than(GatePolicy.from_tags(champion.get("tags", {})))
    if not decision.promote:
        record |= {"outcome": "champion kept", "reason": "the challenger did not pass the gate"}
    elif laxer:
        why = (
            f"this audit's gate policy ({policy.name}, {policy.bound}) is laxer than the one "
            f"champion v{champion['version']} was chosen under: {'; '.join(laxer)}; the "
            "champion stays (audit with at least its policy to replace it)"
        )
        record |= {"outcome": "refused: laxer gate", "reason": why}
    elif not champion_test or "unverified" in champion_test:
        why = (champion_test or {}).get("unverified", "no champion metrics on these rows")
        record |= {"outcome": "champion replaced", "reason": f"champion not comparable: {why}"}
    else:
        promote, why = _outcome(challenger, champion_test, tolerance)
        record |= {"outcome": "champion replaced" if promote else "champion kept", "reason": why}
    if champion_test and "unverified" not in champion_test:
        record["metrics"] = _side_by_side(challenger, champion_test)
    promote = decision.promote and record["outcome"] == "champion replaced"
    reasons.append(f"champion v{champion['version']}: {record['reason']}")
    return Decision(promote, reasons), record
