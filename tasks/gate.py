"""The fairness gate on the model registry: evaluate a registered version, tag it, guard aliases.

Every function here acts on one registered model version through an ``MlflowClient``:

* :func:`read_reference` reads the gate's reference data (CSV or Parquet, with the label and
  the sensitive columns) and :func:`evaluate_version` measures the version on it through the
  MLflow ``fairness`` evaluator (one definition of every metric, with bootstrap intervals);
* :func:`verdict` applies the gate policy (the audit's thresholds, interval bounds or point
  estimates, and the audit's eligibility rules, so a constant classifier never passes);
* :func:`gate_tags` and :func:`gate_card` are what the version receives: the status tag
  ``fairness.gate.status`` (``pending``, ``passed``, ``failed``, ``error``), the reasons, the
  headline metrics with their intervals, and a short Markdown card;
* :func:`enforce_alias` takes a protected alias (e.g. ``champion``) away from a version that
  has not passed and gives it back to the last version that held it with a ``passed`` status.

Loading a version runs the registrant's code (its flavor's loader, e.g. unpickling): the gate
must run where executing registered models is acceptable.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from fairpca.tasks.escape import markdown_text
from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.policy import GatePolicy as NamedPolicy
from fairpca.tasks.record import format_interval
from fairpca.tasks.select import gate_failures, ineligibility

__all__ = [
    "ALIAS_REFUSED_TAG",
    "ERROR",
    "FAILED",
    "PASSED",
    "PENDING",
    "REASONS_TAG",
    "STATUS_TAG",
    "enforce_alias",
    "evaluate_version",
    "gate_card",
    "gate_tags",
    "last_passed_tag",
    "majority_accuracy",
    "read_reference",
    "record_verdict",
    "verdict",
]

STATUS_TAG = "fairness.gate.status"
REASONS_TAG = "fairness.gate.reasons"
ALIAS_REFUSED_TAG = "fairness.gate.alias_refused"
PENDING, PASSED, FAILED, ERROR = "pending", "passed", "failed", "error"
TAG_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters of a tag value
_READERS = {".csv": pd.read_csv, ".parquet": pd.read_parquet, ".pq": pd.read_parquet}


def last_passed_tag(alias: str) -> str:
    """Registered-model tag naming the last version that held ``alias`` with a pass."""
    return f"fairness.gate.{alias}.last_passed"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- evaluation ------------------------------------------------------------------------------


def read_reference(path: Path, label: str, sensitive: list[str]) -> pd.DataFrame:
    """The reference table; a clear error when a named column is missing or the file is odd."""
    path = Path(path)
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"reference data {path.name} must be a .csv or .parquet file.")
    if not path.is_file():
        raise FileNotFoundError(f"reference data {path} does not exist.")
    frame = reader(path)
    missing = [column for column in [label, *sensitive] if column not in frame.columns]
    if missing:
        raise ValueError(
            f"reference data {path.name} lacks the column(s) {missing} named in the policy; "
            f"its columns are {[str(c) for c in frame.columns]}."
        )
    if frame[label].isna().any():
        raise ValueError(f"reference data {path.name}: label column {label!r} has empty cells.")
    return frame


def majority_accuracy(labels: pd.Series, pos_label: Any) -> float:
    """Accuracy of always predicting the more frequent class (the constant baseline)."""
    share = float((labels == pos_label).mean())
    return max(share, 1.0 - share)


def evaluate_version(
    model_uri: str,
    frame: pd.DataFrame,
    *,
    label: str,
    evaluator_config: dict[str, Any],
    experiment_name: str,
    run_name: str,
    run_tags: dict[str, str],
) -> tuple[dict[str, float], str]:
    """Evaluate ``model_uri`` on ``frame`` with the ``fairness`` evaluator in a new MLflow run
    of ``experiment_name``; the metrics (with ``.ci95_low/high``) and the run id.

    Uses the process-wide tracking URI. The model is loaded by its own flavor (code runs).
    """
    import mlflow

    from fairpca.tasks.mlflow_store import get_or_create_experiment, mlflow_client

    # the experiment by id, not mlflow.set_experiment (which also sets MLFLOW_EXPERIMENT_ID
    # for the whole process and every child it starts)
    client = mlflow_client()
    experiment_id = get_or_create_experiment(client, experiment_name, mlflow.get_tracking_uri())
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=run_tags) as run:
        result = mlflow.models.evaluate(
            model_uri,
            frame,
            targets=label,
            model_type="classifier",
            evaluators=["fairness"],
            evaluator_config={"fairness": evaluator_config},
        )
    return dict(result.metrics), run.info.run_id


def verdict(metrics: dict[str, float], policy, majority: float) -> tuple[str, list[str]]:
    """``passed`` or ``failed`` and the reasons, by the audit's own rules.

    ``policy`` has ``thresholds`` (``max_dp_difference``, ``max_eo_difference``,
    ``min_accuracy``), ``gate`` (``upper_bound`` / ``point``), ``min_accuracy_gain`` and
    ``max_one_class_share``. The accuracy must beat the constant (majority-class) baseline by
    ``min_accuracy_gain``, so a classifier with DP = EO = 0 because it predicts one class
    fails. A NaN (fewer than two groups of ``min_group_size`` rows) fails.
    """
    row = {
        "accuracy": metrics.get("accuracy", math.nan),
        # NaN when the evaluator does not report it: then only the accuracy rule applies
        "one_class_share": metrics.get("one_class_share", math.nan),
        **metrics,
    }
    reasons = ineligibility(row, majority, policy) + gate_failures(
        row, NamedPolicy.from_config(policy)
    )
    return (FAILED, reasons) if reasons else (PASSED, [])


# ---- what the version receives -----------------------------------------------------------


def _number(value: float) -> str:
    return "nan" if value is None or math.isnan(value) else f"{value:.6f}"


def gate_tags(status: str, reasons: list[str], metrics: dict[str, float]) -> dict[str, str]:
    """``fairness.gate.*`` tags: status, reasons, the headline and per-attribute DP/EO
    differences with their 95% intervals."""
    tags = {
        STATUS_TAG: status,
        REASONS_TAG: ("; ".join(reasons) or "all gate rules met")[:TAG_MAX_CHARS],
        "fairness.gate.evaluated_at": _now(),
    }
    for name in sorted(metrics):
        base = name.removesuffix(".ci95_low").removesuffix(".ci95_high")
        if base in HEADLINE_METRICS or base.startswith(("dp_difference.", "eo_difference.")):
            tags[f"fairness.gate.{name}"] = _number(metrics[name])
    return tags


def gate_card(
    *,
    name: str,
    version: str,
    status: str,
    reasons: list[str],
    metrics: dict[str, float],
    facts: dict[str, str],
) -> str:
    """A short Markdown card for the version's description; every user string is escaped."""
    lines = [
        f"# Fairness gate: {markdown_text(name)} version {markdown_text(version)}",
        "",
        f"**Status: {markdown_text(status)}** ({markdown_text(_now())})",
        "",
    ]
    lines += [f"- {markdown_text(reason)}" for reason in reasons] or ["- all gate rules met"]
    lines += ["", "| metric | value [95% interval] |", "|---|---|"]
    shown = [m for m in HEADLINE_METRICS if m in metrics]
    shown += sorted(m for m in metrics if m.startswith(("dp_difference.", "eo_difference.")))
    shown = [m for m in shown if not m.endswith((".ci95_low", ".ci95_high"))]
    lines += [f"| {markdown_text(m)} | {format_interval(metrics, m)} |" for m in shown]
    lines += ["", *(f"- {markdown_text(k)}: {markdown_text(v)}" for k, v in facts.items())]
    return "\n".join(lines) + "\n"


def record_verdict(client, name: str, version: str, tags: dict[str, str], card: str) -> None:
    """Set the tags (status last, so a reader that sees the status sees the rest) and card."""
    for key, value in tags.items():
        if key != STATUS_TAG:
            client.set_model_version_tag(name, version, key, value)
    client.update_model_version(name, version, description=card[:TAG_MAX_CHARS])
    client.set_model_version_tag(name, version, STATUS_TAG, tags[STATUS_TAG])


# ---- protected aliases -----------------------------------------------------------------------


def _status(client, name: str, version: str | None) -> str | None:
    """The gate status of a version (None: no such version or never gated)."""
    from mlflow.exceptions import MlflowException

    if version is None:
        return None
    try:
        return client.get_model_version(name, version).tags.get(STATUS_TAG)
    except MlflowException:
        return None


def enforce_alias(client, name: str, alias: str, version: str) -> str:
    """Keep ``alias`` on ``version`` only if it passed the gate; say what happened.

    A version that holds the alias with status ``passed`` is recorded as the alias's last
    passing holder (registered-model tag :func:`last_passed_tag`). Any other status (``failed``,
    ``error``, ``pending`` while its gate run has not finished, or none) loses the alias: it
    moves back to the last passing holder if that version still passes, else it is removed,
    and the version gets the tag ``fairness.gate.alias_refused`` with the reason.

    No loop: the gate only ever moves an alias onto a version whose status is ``passed``, so
    the event that move emits ends in the first branch. An event whose alias has moved on
    since it was sent changes nothing (the new holder has its own event).
    """
    holder = client.get_registered_model(name).aliases.get(alias)
    if holder is None or str(holder) != str(version):
        return f"alias {alias!r} no longer points to version {version} (now: {holder}); no change"
    status = _status(client, name, version)
    if status == PASSED:
        client.set_registered_model_tag(name, last_passed_tag(alias), str(version))
        return f"alias {alias!r} stays on version {version}: it passed the fairness gate"
    previous = client.get_registered_model(name).tags.get(last_passed_tag(alias))
    why = f"status {status or 'not gated'!r}"
    if status == FAILED:
        reasons = client.get_model_version(name, version).tags.get(REASONS_TAG, "")
        why += f" ({reasons})" if reasons else ""
    if previous and previous != str(version) and _status(client, name, previous) == PASSED:
        client.set_registered_model_alias(name, alias, previous)
        action = f"moved back to version {previous}, the last holder that passed"
    else:
        client.delete_registered_model_alias(name, alias)
        action = "removed (no earlier holder that passed)"
    message = f"protected alias {alias!r} refused for version {version}: {why}; {action}"
    client.set_model_version_tag(
        name, version, ALIAS_REFUSED_TAG, f"{_now()}: {message}"[:TAG_MAX_CHARS]
    )
    return message
