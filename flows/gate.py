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
"""

from __future__ import annotations

import importlib
import os
from contextlib import suppress
from pathlib import Path
from typing import Literal

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed, Failed
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fairpca.flows.config import Thresholds, load_config_file, resolve_tracking_uri
from fairpca.metrics import MIN_GROUP_SIZE_FLOOR
from fairpca.tasks import gate as gate_tasks
from fairpca.tasks.escape import markdown_text
from fairpca.tasks.evaluate import DEFAULT_MIN_GROUP_SIZE
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.model_io import path_inside
from fairpca.tasks.policy import DEFAULT_BOUND, DEFAULT_POLICY, parse_policy
from fairpca.tasks.policy import GatePolicy as NamedPolicy
from fairpca.tasks.report import sha256_file
from fairpca.tasks.select import (
    MAX_ONE_CLASS_SHARE,
    MIN_ACCURACY_GAIN,
    MIN_BALANCED_ACCURACY_MARGIN,
    MIN_POSITIVE_RATE_RATIO,
)

__all__ = [
    "EVENTS",
    "POLICY_DIR_ENV",
    "TIMEOUT_SECONDS",
    "GatePolicy",
    "PolicyError",
    "ReferenceData",
    "fairness_gate",
    "load_policies",
]

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
        "interval bounds (strict; see fairpca.tasks.policy.DEFAULT_BOUND).",
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
    client.set_model_version_tag(name, version, gate_tasks.STATUS_TAG, gate_tasks.PENDING)
    reference = policy.reference
    facts = {
        "reference data": reference.path.name,
        "policy": NamedPolicy.from_config(policy).description(),
        "Prefect flow run": _flow_run_id(),
    }
    try:
        facts["reference data"] += f" (SHA-256 {sha256_file(reference.path)})"
        frame = gate_tasks.read_reference(reference.path, reference.label, reference.sensitive)
        metrics, run_id = gate_tasks.evaluate_version(
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
    majority = gate_tasks.majority_accuracy(frame[reference.label], reference.positive_label)
    status, reasons = gate_tasks.verdict(metrics, policy, majority)
    facts["evaluation run"] = run_id
    facts["majority-class accuracy"] = f"{majority:.4f}"
    tags = gate_tasks.gate_tags(status, reasons, metrics)
    tags["fairness.gate.run_id"] = run_id
    tags["fairness.gate.flow_run_id"] = facts["Prefect flow run"]
    card = gate_tasks.gate_card(
        name=name, version=version, status=status, reasons=reasons, metrics=metrics, facts=facts
    )
    gate_tasks.record_verdict(client, name, version, tags, card)
    _artifact(name, version, card)
    message = f"{name} version {version}: {status}" + (f" ({'; '.join(reasons)})" * bool(reasons))
    logger.info(message)
    return Completed(message=message)


def _record_error(client, name: str, version: str, facts: dict, error: Exception):
    """Status ``error`` with the reason on the version; a Failed state for the flow run."""
    reasons = [f"evaluation failed: {type(error).__name__}: {error}"[:1000]]
    tags = gate_tasks.gate_tags(gate_tasks.ERROR, reasons, {})
    card = gate_tasks.gate_card(
        name=name,
        version=version,
        status=gate_tasks.ERROR,
        reasons=reasons,
        metrics={},
        facts=facts,
    )
    gate_tasks.record_verdict(client, name, version, tags, card)
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
    message = gate_tasks.enforce_alias(client, model_name, alias, str(version))
    logger.info(message)
    create_markdown_artifact(
        f"# Protected alias\n\n{markdown_text(message)}\n", description="fairness gate alias check"
    )
    return Completed(message=message)
