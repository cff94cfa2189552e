"""The fairness gate flow: audit every new registered version, guard protected aliases.

Started by the webhook receiver (:mod:`fairpca.flows.gate_server`) through the deployment
``fairness-gate/on-registration`` with the event's model name, version and event (and alias):

* ``model_version.created``: the version gets ``fairness.gate.status = pending``, is loaded by
  MLflow's loaders and evaluated on the policy's reference data by the ``fairness`` evaluator,
  then gets ``passed`` / ``failed`` (or ``error``) with the reasons, the metrics with their 95%
  intervals and a model card (its description); the Prefect run gets a Markdown artifact;
* ``model_version_alias.created`` for a protected alias: a version that has not passed loses
  it (:func:`fairpca.tasks.gate.enforce_alias`); the flow run's state message says what
  happened.

The worker executes the registered models it evaluates (a flavor's loader may unpickle): run
it where that is acceptable, e.g. in a sandboxed container with read access to the registry.

One YAML policy file per watched model lives in the policy directory (flow parameter
``policy_dir``, else ``$FAIRPCA_GATE_POLICY_DIR``); see :class:`GatePolicy`.

The fairness gate on the model registry: evaluate a registered version, tag it, guard aliases.

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
must run where executing registered models is acceptable."""

from __future__ import annotations

import importlib
import math
import os
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed, Failed
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fairpca.flows.config import Thresholds, load_config_file, resolve_tracking_uri
from fairpca.metrics import MIN_GROUP_SIZE_FLOOR
from fairpca.tasks.evaluate import DEFAULT_MIN_GROUP_SIZE, HEADLINE_METRICS
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.registry import move_alias
from fairpca.tasks.report import format_interval, markdown_text, sha256_file
from fairpca.tasks.select import (
    DEFAULT_BOUND,
    DEFAULT_POLICY,
    MAX_ONE_CLASS_SHARE,
    MIN_ACCURACY_GAIN,
    MIN_BALANCED_ACCURACY_MARGIN,
    MIN_POSITIVE_RATE_RATIO,
    gate_failures,
    ineligibility,
    parse_policy,
)
from fairpca.tasks.select import GatePolicy as NamedPolicy
from fairpca.tasks.trust import path_inside

__all__ = [
    "ALIAS_PATTERN",
    "ALIAS_REFUSED_TAG",
    "ERROR",
    "EVENTS",
    "FAILED",
    "PASSED",
    "PENDING",
    "POLICY_DIR_ENV",
    "REASONS_TAG",
    "STATUS_TAG",
    "TAG_MAX_CHARS",
    "TIMEOUT_SECONDS",
    "GatePolicy",
    "PolicyError",
    "ReferenceData",
    "enforce_alias",
    "evaluate_version",
    "fairness_gate",
    "gate_card",
    "gate_tags",
    "last_passed_tag",
    "load_policies",
    "majority_accuracy",
    "read_reference",
    "record_verdict",
    "verdict",
]


# ---- from gate.py ------------------------------------------------------------

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
        move_alias(client, name, alias, previous)
        action = f"moved back to version {previous}, the last holder that passed"
    else:
        move_alias(client, name, alias, None)
        action = "removed (no earlier holder that passed)"
    message = f"protected alias {alias!r} refused for version {version}: {why}; {action}"
    client.set_model_version_tag(
        name, version, ALIAS_REFUSED_TAG, f"{_now()}: {message}"[:TAG_MAX_CHARS]
    )
    return message


# ---- from gate.py ------------------------------------------------------------

POLICY_DIR_ENV = "FAIRPCA_GATE_POLICY_DIR"
# A gate run loads one version and evaluates it on the reference data (seconds to a few
# minutes); a run still going after this fails (Prefect's flow timeout), and its version stays
# ``pending``, which never holds a protected alias.
TIMEOUT_SECONDS = 900
VERSION_CREATED, ALIAS_CREATED = "model_version.created", "model_version_alias.created"
EVENTS = (VERSION_CREATED, ALIAS_CREATED)
ALIAS_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*$"


class PolicyError(ValueError):
    """A policy file or directory that cannot be used; the message names the file and fix."""


class ReferenceData(BaseModel):
    """The reference table the gate evaluates every version on."""

    model_config = ConfigDict(extra="forbid")

    path: Path = Field(description="CSV or Parquet file, relative to the policy file's folder.")
    label: str = Field(min_length=1, description="Label column.")
    sensitive: list[str] = Field(min_length=1, description="Sensitive column(s).")
    positive_label: int | float | str | bool = Field(1, description="Label value y = 1.")

    @field_validator("path")
    @classmethod
    def _check_suffix(cls, value: Path) -> Path:
        if value.suffix.lower() not in {".csv", ".parquet", ".pq"}:
            raise ValueError(f"reference path must be a .csv or .parquet file; got {value}.")
        return value


class GatePolicy(BaseModel):
    """One watched registered model: its reference data, thresholds and protected aliases."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="Registered model name.")
    reference: ReferenceData
    thresholds: Thresholds = Field(default_factory=Thresholds)
    gate: Literal["upper_bound", "point"] = Field(
        DEFAULT_BOUND,
        description="point: the estimates must meet the thresholds; upper_bound: the 95% "
        "interval bounds (strict; see fairpca.tasks.select.DEFAULT_BOUND).",
    )
    policy: str = Field(
        DEFAULT_POLICY,
        description="The audit's gate policy: demographic_parity, equal_opportunity, "
        "equalized_odds, four_fifths, or several joined by '+', with 'thresholds'.",
    )
    # the audit's eligibility rules, with the audit's defaults (fairpca.tasks.select)
    min_accuracy_gain: float = Field(
        MIN_ACCURACY_GAIN, ge=0.0, le=1.0, description="Accuracy must beat the majority class."
    )
    min_balanced_accuracy_margin: float = Field(MIN_BALANCED_ACCURACY_MARGIN, ge=0.0, le=0.5)
    min_positive_rate_ratio: float = Field(MIN_POSITIVE_RATE_RATIO, ge=0.0, le=1.0)
    max_one_class_share: float = Field(MAX_ONE_CLASS_SHARE, gt=0.5, le=1.0)
    protected_aliases: list[str] = Field(default_factory=lambda: ["champion"])
    min_group_size: int = Field(
        DEFAULT_MIN_GROUP_SIZE,
        ge=MIN_GROUP_SIZE_FLOOR,
        description="Smaller groups are suppressed.",
    )
    n_resamples: int = Field(1000, ge=100, le=100_000, description="Bootstrap resamples.")
    seed: int = Field(0, ge=0)
    experiment_name: str = Field("fairpca-gate", min_length=1)

    @field_validator("policy")
    @classmethod
    def _check_policy(cls, value: str) -> str:
        parse_policy(value)  # a clear error naming the known criteria
        return value

    @field_validator("protected_aliases")
    @classmethod
    def _check_aliases(cls, value: list[str]) -> list[str]:
        import re

        bad = [alias for alias in value if not re.match(ALIAS_PATTERN, alias)]
        if bad:
            raise ValueError(f"alias names must match {ALIAS_PATTERN}; got {bad}.")
        return value

    def evaluator_config(self) -> dict:
        """``evaluator_config["fairness"]`` of the MLflow ``fairness`` evaluator."""
        return {
            "sensitive_features": list(self.reference.sensitive),
            "pos_label": self.reference.positive_label,
            "min_group_size": self.min_group_size,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
        }


def _read_policy(path: Path, root: Path) -> GatePolicy:
    try:
        policy = GatePolicy.model_validate(load_config_file(path))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'policy'}: {item['msg']}"
            for item in error.errors()
        )
        raise PolicyError(f"policy file {path.name}: {problems}") from None
    except ValueError as error:
        raise PolicyError(str(error)) from None
    try:
        resolved = path_inside(root, str(policy.reference.path))
    except ValueError:
        raise PolicyError(
            f"policy file {path.name}: reference.path {str(policy.reference.path)!r} must be "
            f"a file inside the policy directory {root}."
        ) from None
    if not resolved.is_file():
        raise PolicyError(f"policy file {path.name}: reference data {resolved} does not exist.")
    return policy.model_copy(
        update={"reference": policy.reference.model_copy(update={"path": resolved})}
    )


def load_policies(directory: str | os.PathLike[str] | None) -> dict[str, GatePolicy]:
    """Every ``*.yaml`` / ``*.yml`` policy of ``directory`` (default ``$FAIRPCA_GATE_POLICY_DIR``)
    by registered model name; reference paths resolved inside the directory.

    Raises
    ------
    PolicyError
        No directory, an invalid file, or two files for one model.
    """
    given = directory or os.environ.get(POLICY_DIR_ENV)
    if not given:
        raise PolicyError(
            f"no policy directory: pass --policy-dir DIR (or set {POLICY_DIR_ENV}) naming the "
            "folder with one YAML policy file per watched model."
        )
    root = Path(given).resolve()
    if not root.is_dir():
        raise PolicyError(f"policy directory {root} does not exist.")
    policies: dict[str, GatePolicy] = {}
    for path in sorted([*root.glob("*.yaml"), *root.glob("*.yml")]):
        policy = _read_policy(path, root)
        if policy.model in policies:
            raise PolicyError(f"two policy files in {root} name the model {policy.model!r}.")
        policies[policy.model] = policy
    if not policies:
        raise PolicyError(f"policy directory {root} holds no *.yaml policy file.")
    return policies


# ---- the flow --------------------------------------------------------------------------------

# MLflow's evaluation, loaded when this module is. ``mlflow.models.evaluate`` loads its
# evaluator registry on first use, and the registry fills itself in a post-import hook that
# runs under MLflow's import-hook lock (``mlflow.utils.import_hooks``) and imports about 200
# modules (the built-in evaluators, matplotlib, the entry-point plugins). A thread importing
# meanwhile (Prefect's event and log threads do) holds its module's import lock and waits
# for the hook lock in MLflow's import finder; when the hook needs that module, neither
# thread moves again. Loaded here, the hook's modules first and the registry last, the hook
# has nothing left to import.
EVALUATION_MODULES = (
    "mlflow.models.evaluation.evaluators.classifier",
    "mlflow.models.evaluation.evaluators.default",
    "mlflow.models.evaluation.evaluators.regressor",
    "mlflow.models.evaluation.evaluators.shap",
    "fairpca.tasks.mlflow_evaluator",
    "mlflow.models.evaluation.evaluator_registry",
)


def _load_evaluation() -> None:
    for name in EVALUATION_MODULES:
        with suppress(ModuleNotFoundError):  # another MLflow layout: tests/flows/test_gate.py
            importlib.import_module(name)


_load_evaluation()


def _client(tracking_uri: str):
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    return mlflow_client(tracking_uri)


def _flow_run_id() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.id or "")


def _gate_version(client, policy: GatePolicy, name: str, version: str):
    """Evaluate the version and record the verdict; the final state of the flow run."""
    logger = get_run_logger()
    client.set_model_version_tag(name, version, STATUS_TAG, PENDING)
    reference = policy.reference
    facts = {
        "reference data": reference.path.name,
        "policy": NamedPolicy.from_config(policy).description(),
        "Prefect flow run": _flow_run_id(),
    }
    try:
        facts["reference data"] += f" (SHA-256 {sha256_file(reference.path)})"
        frame = read_reference(reference.path, reference.label, reference.sensitive)
        metrics, run_id = evaluate_version(
            f"models:/{name}/{version}",
            frame,
            label=reference.label,
            evaluator_config=policy.evaluator_config(),
            experiment_name=policy.experiment_name,
            run_name=f"gate-{name}-v{version}"[:250],
            run_tags={"fairness.gate.model": name, "fairness.gate.version": str(version)},
        )
    except Exception as error:  # any loader or data failure is the version's verdict: error
        return _record_error(client, name, version, facts, error)
    majority = majority_accuracy(frame[reference.label], reference.positive_label)
    status, reasons = verdict(metrics, policy, majority)
    facts["evaluation run"] = run_id
    facts["majority-class accuracy"] = f"{majority:.4f}"
    tags = gate_tags(status, reasons, metrics)
    tags["fairness.gate.run_id"] = run_id
    tags["fairness.gate.flow_run_id"] = facts["Prefect flow run"]
    card = gate_card(
        name=name, version=version, status=status, reasons=reasons, metrics=metrics, facts=facts
    )
    record_verdict(client, name, version, tags, card)
    _artifact(name, version, card)
    message = f"{name} version {version}: {status}" + (f" ({'; '.join(reasons)})" * bool(reasons))
    logger.info(message)
    return Completed(message=message)


def _record_error(client, name: str, version: str, facts: dict, error: Exception):
    """Status ``error`` with the reason on the version; a Failed state for the flow run."""
    reasons = [f"evaluation failed: {type(error).__name__}: {error}"[:1000]]
    tags = gate_tags(ERROR, reasons, {})
    card = gate_card(
        name=name,
        version=version,
        status=ERROR,
        reasons=reasons,
        metrics={},
        facts=facts,
    )
    record_verdict(client, name, version, tags, card)
    _artifact(name, version, card)
    get_run_logger().error("gate error for %s version %s: %s", name, version, reasons[0])
    return Failed(message=f"{name} version {version}: error: {reasons[0]}")


def _artifact(name: str, version: str, card: str) -> None:
    key = "".join(c if c.isalnum() else "-" for c in f"fairness-gate-{name}-{version}".lower())
    create_markdown_artifact(card, key=key[:100].strip("-"), description="fairness gate verdict")


@flow(name="fairness-gate", validate_parameters=True, timeout_seconds=TIMEOUT_SECONDS)
def fairness_gate(
    model_name: str,
    version: str,
    event: Literal["model_version.created", "model_version_alias.created"],
    alias: str | None = None,
    policy_dir: str | None = None,
    tracking_uri: str | None = None,
):
    """Gate one registry event of a watched model (see the module docstring)."""
    logger = get_run_logger()
    policies = load_policies(policy_dir)
    if model_name not in policies:
        return Completed(message=f"model {model_name!r} has no gate policy; nothing to do")
    policy = policies[model_name]
    client = _client(resolve_tracking_uri(tracking_uri))
    if event == VERSION_CREATED:
        return _gate_version(client, policy, model_name, str(version))
    if alias is None:
        return Failed(message=f"event {event} needs the alias parameter")
    if alias not in policy.protected_aliases:
        return Completed(message=f"alias {alias!r} is not protected; no change")
    message = enforce_alias(client, model_name, alias, str(version))
    logger.info(message)
    create_markdown_artifact(
        f"# Protected alias\n\n{markdown_text(message)}\n", description="fairness gate alias check"
    )
    return Completed(message=message)
