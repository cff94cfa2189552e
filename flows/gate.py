"""The fairness gate on the model registry: judge every new version, guard protected aliases.

Started by the webhook receiver (:mod:`fairpca.flows.gate_server`) through the deployment
``fairness-gate/on-registration`` with the event's model name, version and event (and alias):

* ``model_version.created``: the version gets ``fairness.gate.status = pending``; its model
  files are downloaded once, digested (:func:`fairpca.tasks.trust.files_digest`) and that very
  copy is judged (:func:`evaluate_version`): the labels its ONNX graph gives the policy's
  reference data, computed in a limited child process without the gate's keys, go to the
  MLflow ``fairness`` evaluator (one definition of every metric, with bootstrap intervals).
  A version without a graph, or with one the gate's checks refuse, fails unjudged. The
  verdict (:func:`verdict`: the audit's thresholds and eligibility rules, so a constant
  classifier never passes) is signed: the version gets the attestation
  ``fairness.gate.attestation`` (model, version, model files' digest, graph digest, policy
  digest, verdict, gate run; Ed25519, a key only the gate holds), then (:func:`record_verdict`) the
  informational tags (``fairness.gate.status`` ``passed`` / ``failed`` / ``error``, the
  reasons, the metrics with their 95% intervals), a short card and a Prefect Markdown
  artifact;
* ``model_version_alias.created`` for a protected alias: :func:`enforce_alias` keeps the alias
  only on a version whose attestation verifies: the gate's signature, this version, a pass
  under the current policy, and the model files recomputed now. Any other holder loses it,
  back to the last attested holder or removed. A tag alone (``fairness.gate.status=passed``
  set by hand) never keeps an alias; it is reported as tampering on the version. A version
  not judged yet (no verdict, status ``pending`` or none) loses the alias too, but as a
  request (registered-model tag :func:`requested_tag`) that the gate grants when the
  version's pass is signed, and no refusal is recorded on it (it counts as no demotion); a
  pass signed under an earlier policy is judged again under the current one.

:func:`reconcile_aliases` judges every watched version that has no verdict (its event was
lost), then runs the same check over every protected alias of every watched model
(``fairpca gate reconcile``, the deployment ``fairness-gate-reconcile/on-schedule`` every
five minutes, and once after the receiver starts), so an alias moved while no event arrived
does not survive. An alias is only ever moved from the holder just checked, read again
right before the move (:func:`fairpca.tasks.registry.move_alias`).

A gate run uses the worker's own policy folder (``$FAIRPCA_GATE_POLICY_DIR``) and tracking
server (``$MLFLOW_TRACKING_URI``): a deployment parameter naming others is refused
(:func:`gate_settings`). One YAML policy file per watched model (:class:`GatePolicy`).

**The gate judges a pure function.** Of a version it reads only the ONNX graph of MLflow's
``onnx`` flavour (:func:`fairpca.tasks.onnx_runtime.read_graph`: its size on disk before it is
parsed, the standard operator sets ``ai.onnx`` and ``ai.onnx.ml`` only, no external data,
ONNX's checker); the scikit-learn files, a pyfunc's code or a pickle are never opened, so
nothing of the registrant's runs or is deserialised here. A version without a graph gets the
signed verdict ``failed`` with the reason :data:`fairpca.tasks.onnx_runtime.NO_GRAPH`. The graph
runs only in the evaluation child (:func:`fairpca.tasks.onnx_runtime.predict_isolated`: no
secret in its environment, ``nobody`` under a root worker, address-space, CPU and wall-clock
limits, its own process group, killed and its folder removed when the gate run ends), which
returns nothing but labels; whatever goes wrong there is the fixed reason
:data:`fairpca.tasks.onnx_runtime.GRAPH_FAILED`: no text of the model's reaches a tag. The
metrics are computed and the verdict signed here."""

from __future__ import annotations

import importlib
import math
import os
import tempfile
import time
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import pandas as pd
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed, Failed
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from fairpca.flows.config import ALIAS_PATTERN, GateRules, load_config_file, resolve_tracking_uri
from fairpca.flows.gate_state import GateState
from fairpca.flows.runtime import failed_run
from fairpca.metrics import MIN_GROUP_SIZE_FLOOR
from fairpca.tasks import DEFAULT_MIN_GROUP_SIZE
from fairpca.tasks.decision import Kind, Reason, published, render
from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.gate_ledger import (
    LEDGER_TAG,
    REFRESH_SECONDS,
    Ledger,
    attestation_digest,
    now_text,
    published_ledger,
    sign_ledger,
)
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.onnx_runtime import Graph, GraphRefused, predict_isolated, read_graph
from fairpca.tasks.registry import (
    ALIAS_REFUSED_TAG,
    ATTESTATION_TAG,
    NEEDS_REVIEW_TAG,
    TAMPERING_TAG,
    check_attested_pass,
    download_version,
    metric_tags,
    model_versions,
    move_alias,
)
from fairpca.tasks.report import markdown_text, render_template
from fairpca.tasks.select import GatePolicy as NamedPolicy
from fairpca.tasks.select import ineligible_rules
from fairpca.tasks.trust import (
    Attestation,
    AttestationError,
    StaleAttestationError,
    canonical_digest,
    files_digest,
    gate_public_key,
    gate_signing_key,
    path_inside,
    sha256_file,
    shown_uri,
    sign_attestation,
    verify_attestation,
)

STATUS_TAG = "fairness.gate.status"  # informational: only the attestation counts
REASONS_TAG = "fairness.gate.reasons"
PENDING_SINCE_TAG = "fairness.gate.pending_since"  # when a judgement began (UTC)
EVALUATED_AT_TAG = "fairness.gate.evaluated_at"
PENDING, PASSED, FAILED, ERROR = "pending", "passed", "failed", "error"
TAG_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters of a tag value
_READERS = {".csv": pd.read_csv, ".parquet": pd.read_parquet, ".pq": pd.read_parquet}


def last_passed_tag(alias: str) -> str:
    """Registered-model tag naming the last versions that held ``alias`` with a verified
    pass, most recent first, comma-separated (at most :data:`HOLDERS_KEPT`)."""
    return f"fairness.gate.{alias}.last_passed"


HOLDERS_KEPT = 10


def requested_tag(alias: str) -> str:
    """Registered-model tag of a request for ``alias`` on a version not judged yet:
    ``<version>:<holder it replaces>`` (empty: none); granted when that version passes."""
    return f"fairness.gate.{alias}.requested"


def _holders(tags: dict[str, str], alias: str) -> list[str]:
    return [v for v in tags.get(last_passed_tag(alias), "").split(",") if v.strip().isdigit()]


# ---- evaluation ------------------------------------------------------------------------------


def read_reference(path: Path, label: str, sensitive: list[str]) -> pd.DataFrame:
    """The reference table of a policy (its path checked by :class:`ReferenceData` and
    :func:`load_policies`); a clear error when a named column is missing."""
    path = Path(path)
    frame = _READERS[path.suffix.lower()](path)
    if missing := [column for column in [label, *sensitive] if column not in frame.columns]:
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


PREDICTION_COLUMN = "__fairpca_gate_prediction__"
OTHER_LABELS = "the graph's labels are not the classes of the reference data"
_JUDGING: list[str] = []  # what this process judges now, for the line a stop signal prints


def judging_now() -> str | None:
    """What the gate is judging in this process now (``judging version 3 of model 'm'``),
    None when nothing: the command line names it when a stop signal cuts it short."""
    return _JUDGING[-1] if _JUDGING else None


@contextmanager
def _judging(name: str, version: str):
    """Say what is judged while the body runs; a stop that cuts it short (SIGTERM or a
    cancellation Prefect raises into the run, Ctrl-C) is logged naming the version."""
    _JUDGING.append(f"while judging version {version} of model {name!r}")
    try:
        yield
    except BaseException as stop:
        if not isinstance(stop, Exception):  # an error is the version's verdict instead
            _logger().error("fairness gate interrupted %s (%s)", _JUDGING[-1], type(stop).__name__)
        raise
    finally:
        _JUDGING.pop()


# MLflow's evaluation, loaded before the first evaluation (not when this module is: the CLI
# and the receiver import it for its policies). ``mlflow.models.evaluate`` loads its
# evaluator registry on first use, and the registry fills itself in a post-import hook that
# runs under MLflow's import-hook lock (``mlflow.utils.import_hooks``) and imports about 200
# modules (the built-in evaluators, matplotlib, the entry-point plugins). A thread importing
# meanwhile (Prefect's event and log threads do) holds its module's import lock and waits
# for the hook lock in MLflow's import finder; when the hook needs that module, neither
# thread moves again. Loaded in this order, the hook's modules first and the registry last,
# the hook has nothing left to import.
EVALUATION_MODULES = (
    "mlflow.sklearn",  # a hook imports it when the evaluation first runs
    "mlflow.models.evaluation.evaluators.classifier",
    "mlflow.models.evaluation.evaluators.default",
    "mlflow.models.evaluation.evaluators.regressor",
    "mlflow.models.evaluation.evaluators.shap",
    "fairpca.tasks.mlflow_evaluator",
    "mlflow.models.evaluation.evaluator_registry",
)


def evaluate_version(
    graph: Graph, frame: pd.DataFrame, *, label: str, evaluator_config: dict[str, Any],
    experiment_name: str, run_name: str, run_tags: dict[str, str],
) -> tuple[dict[str, float], str]:  # fmt: skip
    """Evaluate the checked ONNX ``graph`` (:func:`fairpca.tasks.onnx_runtime.read_graph`) on
    ``frame`` with the ``fairness`` evaluator in a new MLflow run of ``experiment_name``; the
    metrics (with ``.ci95_low/high``) and the run id.

    The graph runs only in the evaluation child (:func:`fairpca.tasks.onnx_runtime.
    predict_isolated`: limits, no secrets), fed the columns its inputs name (never the
    label); the evaluator judges the labels it returns. Uses the process-wide tracking URI.

    Raises
    ------
    GraphRefused
        The graph's inputs are not columns of the reference data, its labels are not the
        reference data's classes (:data:`OTHER_LABELS`), or it failed there
        (:class:`fairpca.tasks.onnx_runtime.GraphFailed`): fixed reasons, nothing it said.
    """
    import mlflow

    for module in EVALUATION_MODULES:
        with suppress(ModuleNotFoundError):  # another MLflow layout: tests/flows/test_gate.py
            importlib.import_module(module)
    from fairpca.tasks.mlflow_store import get_or_create_experiment

    predictions = predict_isolated(graph, frame.drop(columns=[label]))
    if not set(pd.unique(predictions)) <= set(frame[label].unique()):  # no value of its own
        raise GraphRefused(OTHER_LABELS)  # reaches a message, e.g. the evaluator's
    data = frame.assign(**{PREDICTION_COLUMN: predictions})

    # the experiment by id, not mlflow.set_experiment (which also sets MLFLOW_EXPERIMENT_ID
    # for the whole process and every child it starts)
    client = mlflow_client()
    experiment_id = get_or_create_experiment(client, experiment_name, mlflow.get_tracking_uri())
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=run_tags) as run:
        result = mlflow.models.evaluate(
            data=data, predictions=PREDICTION_COLUMN, targets=label, model_type="classifier",
            evaluators=["fairness"], evaluator_config={"fairness": evaluator_config},
        )  # fmt: skip
    return dict(result.metrics), run.info.run_id


REFERENCE_ROWS = "reference"  # the rows a verdict's numbers are measured on


def verdict(metrics: dict[str, float], policy, majority: float) -> tuple[str, list[Reason]]:
    """``passed`` or ``failed`` and the reasons, by the audit's own rules: one
    :attr:`~fairpca.tasks.decision.Kind.FAILS_RULE` reason per rule failed, measured on the
    reference rows, with the raw numbers (:func:`published_reasons` rounds them).

    ``policy`` has ``thresholds`` (``max_dp_difference``, ``max_eo_difference``,
    ``min_accuracy``), ``gate`` (``upper_bound`` / ``point``), ``min_accuracy_gain`` and
    ``max_one_class_share`` (:func:`fairpca.tasks.select.ineligibility`: a classifier with
    DP = EO = 0 because it predicts one class fails). A NaN (fewer than two groups of
    ``min_group_size`` rows) fails.
    """
    # NaN where the evaluator does not report them (without a one-class share only the
    # accuracy rule applies)
    row = {"accuracy": math.nan, "one_class_share": math.nan, **metrics}
    rules = ineligible_rules(row, majority, policy, REFERENCE_ROWS)
    rules += NamedPolicy.from_config(policy).failed_rules(row, REFERENCE_ROWS)
    reasons = [rule.model_copy(update={"decides": True}) for rule in rules]
    return (FAILED, reasons) if reasons else (PASSED, [])


# ---- what the version receives -----------------------------------------------------------


def _shown_metrics(metrics: dict[str, float]) -> list[str]:
    """The headline metrics and the per-attribute DP/EO differences present in ``metrics``."""
    per_attribute = sorted(m for m in metrics if m.startswith(("dp_difference.", "eo_difference.")))
    shown = [m for m in [*HEADLINE_METRICS, *per_attribute] if m in metrics]
    return [m for m in shown if not m.endswith((".ci95_low", ".ci95_high"))]


PUBLISHED_DECIMALS = 2
WITHHELD = "metrics withheld: a group of the reference rows is under the policy's min_group_size"


def withheld_reason(frame: pd.DataFrame, policy: GatePolicy) -> str | None:
    """:data:`WITHHELD` when a group of the reference rows (of one sensitive attribute, or
    of their intersection) has fewer than ``policy.min_group_size`` rows; None when every
    group is large enough for its numbers to be published. The reason names no group and
    no count."""
    columns = list(policy.reference.sensitive)
    groupings = [[column] for column in columns] + ([columns] if len(columns) > 1 else [])
    sizes = [frame.groupby(grouping, dropna=False).size() for grouping in groupings]
    return WITHHELD if any((size < policy.min_group_size).any() for size in sizes) else None


def published_metrics(metrics: dict[str, float], withheld: str | None) -> dict[str, float]:
    """The metrics as the gate publishes them: rounded to :data:`PUBLISHED_DECIMALS`
    decimals (one person's row moves a rate by 1/n, hidden below the rounding step unless
    it crosses one), none when ``withheld``."""
    rounded = {name: round(float(value), PUBLISHED_DECIMALS) for name, value in metrics.items()}
    return {} if withheld else rounded


def published_reasons(reasons: list[Reason], withheld: str | None) -> list[Reason]:
    """The verdict's reasons as published (:func:`fairpca.tasks.decision.published`): every
    number rounded like the metrics (a percentage to a whole one), the measured ones
    dropped, shown as ``(withheld)``, when the metrics are withheld. Only these reach a tag,
    the card or the artifact."""
    return [published(reason, PUBLISHED_DECIMALS, bool(withheld)) for reason in reasons]


def rendered(reasons: list[Reason]) -> str:
    """The reasons tag's text: each reason rendered (:func:`fairpca.tasks.decision.render`),
    in order."""
    return "; ".join(render(reason) for reason in reasons) or "all gate rules met"


def record_verdict(
    client, name: str, version: str, status: str, reasons: list[Reason],
    metrics: dict[str, float], facts: dict[str, str], signed: dict[str, str] | None = None,
    *, withheld: str | None = None,
) -> list[Reason]:  # fmt: skip
    """Record a verdict on the version; the reasons as published.

    The ``signed`` tags (the attestation and the runs) first, then the informational
    ``fairness.gate.*`` tags (reasons, the metrics with their 95% intervals), the card
    (template ``gate_card.md.j2``, every user string escaped) as its description, and the
    status last, so a reader that sees the status sees the rest; inside a flow run the card
    is also a Prefect Markdown artifact. Numbers are published as
    :func:`published_metrics` and :func:`published_reasons` give them (``withheld``: the
    reason none is); the tag, the card and the artifact show the reasons in the one
    renderer's words."""
    now = now_text()
    metrics, reasons = published_metrics(metrics, withheld), published_reasons(reasons, withheld)
    if withheld:
        facts = {**facts, "metrics": withheld}
    shown = _shown_metrics(metrics)
    published = metric_tags("fairness.gate.", metrics, shown)
    tags = {**(signed or {}), EVALUATED_AT_TAG: now, REASONS_TAG: rendered(reasons)[:TAG_MAX_CHARS]}
    tags |= {key: f"{float(value):.{PUBLISHED_DECIMALS}f}" for key, value in published.items()}
    card = render_template("gate_card.md.j2", name=name, version=version, status=status, now=now,
                           reasons=[render(reason) for reason in reasons], metrics=metrics,
                           shown=shown, facts=facts)  # fmt: skip
    for key, value in tags.items():
        if value:
            client.set_model_version_tag(name, version, key, value)
    client.update_model_version(name, version, description=card[:TAG_MAX_CHARS])
    client.set_model_version_tag(name, version, STATUS_TAG, status)
    if _flow_run_id():  # outside a flow run (the CLI's reconciler) the card suffices
        key = "".join(c if c.isalnum() else "-" for c in f"fairness-gate-{name}-{version}".lower())
        create_markdown_artifact(
            card, key=key[:100].strip("-"), description="fairness gate verdict"
        )
    return reasons


# ---- the gate's ledger and judgement budget ---------------------------------------------------

BUDGET_WINDOW_SECONDS = 86_400


def _registry_id(tracking_uri: str) -> str:
    return shown_uri(tracking_uri).rstrip("/")


def judgement_budget_spent(tracking_uri: str, policy: GatePolicy, version: str) -> Reason | None:
    """Count one judgement of ``policy.model`` under this policy in the gate's own state
    (:class:`fairpca.flows.gate_state.GateState`, which no registry user can reset); why it
    is refused (None: counted) when ``policy.max_judgements_per_day`` were made in the last
    24 hours. A bound on judgements bounds what differencing their published numbers
    reveals; a judgement that ends in ``error`` publishes none and is taken back."""
    free_at = GateState().charge(
        _registry_id(tracking_uri), policy.model, policy_digest(policy), version,
        limit=policy.max_judgements_per_day, window=BUDGET_WINDOW_SECONDS, now=time.time(),
    )  # fmt: skip
    if free_at is None:
        return None
    numbers = {"limit": policy.max_judgements_per_day, "free_at": free_at}
    return Reason(kind=Kind.BUDGET_SPENT, decides=True, numbers=numbers)


def _passes_now(client, name: str, public_key) -> dict[str, str]:
    """The passes the versions of ``name`` hold now, verified (the gate's first ledger)."""
    passes = {}
    for entry in model_versions(client, name):
        text, version = entry.tags.get(ATTESTATION_TAG, ""), str(entry.version)
        with suppress(AttestationError):
            attested = verify_attestation(text, public_key)
            if (attested.model, attested.version, attested.verdict) == (name, version, PASSED):
                passes[version] = attestation_digest(text)
    return passes


def _published(client, name: str, public_key) -> Ledger | None:
    with suppress(AttestationError):
        return published_ledger(client.get_registered_model(name).tags, name, public_key)
    return None


def _update_ledger(client, tracking_uri: str, name: str, digest: str, key, latest=None) -> Ledger:
    """Sign and publish the next ledger of ``name`` from the gate's state: policy ``digest``
    and the stored passes (the first time, the published ledger's, else the verified passes
    the versions hold) updated by ``latest`` (version: the digest of its latest verdict's
    attestation if a pass, else None)."""

    def next_ledger(stored: Ledger | None) -> tuple[str, dict[str, str]]:
        first = stored or _published(client, name, key.public_key())
        passes = first.passes if first else _passes_now(client, name, key.public_key())
        return digest, {v: d for v, d in {**passes, **(latest or {})}.items() if d}

    def publish(ledger: Ledger) -> None:
        client.set_registered_model_tag(name, LEDGER_TAG, sign_ledger(ledger, key))

    return GateState().update(_registry_id(tracking_uri), name, next_ledger, publish)


def note_verdict(client, tracking_uri: str, policy: GatePolicy, version: str, text, key) -> None:
    """Record in the gate's ledger that ``version``'s latest verdict is the pass signed as
    ``text`` (None: not a pass), under the current policy, and publish it."""

    latest = {str(version): attestation_digest(text) if text else None}
    _update_ledger(client, tracking_uri, policy.model, policy_digest(policy), key, latest)


def current_ledger(client, tracking_uri: str, name: str, digest: str, public_key) -> Ledger | None:
    """The gate's ledger of ``name`` under the current policy ``digest``, for its checks.

    Where the gate's signing key is (the gate's host), from the gate's state: signed anew
    and published when the published one is not the one stored (deleted, or restored from
    an older one: logged), names another policy, or is older than
    :data:`~fairpca.tasks.gate_ledger.REFRESH_SECONDS`. Elsewhere, the published ledger
    once verified (None: none that verifies)."""
    try:
        key = gate_signing_key()
    except AttestationError:
        return _published(client, name, public_key)
    stored = GateState().stored(_registry_id(tracking_uri), name)
    shown = _published(client, name, key.public_key())
    if stored and shown:
        if shown.sequence < stored.sequence:
            _logger().warning(
                "the published gate ledger of %s (sequence %d) is older than the gate's (%d): "
                "restored by a registry user; signed anew", name, shown.sequence, stored.sequence,
            )  # fmt: skip
        fresh = stored.policy_digest == digest and stored.age_seconds() < REFRESH_SECONDS
        if fresh and (shown.sequence, shown.signed_at) == (stored.sequence, stored.signed_at):
            return stored
    return _update_ledger(client, tracking_uri, name, digest, key)


# ---- protected aliases -----------------------------------------------------------------------


class AliasCheck(NamedTuple):
    """What :func:`enforce_alias` found: whether it moved the alias, and a one-line account."""

    changed: bool
    message: str


def _version_tags(client, name: str, version: str) -> dict[str, str] | None:
    """The tags of a version (None: no such version)."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version(name, version).tags
    except MlflowException:
        return None


def _attested(client, tracking_uri: str, name: str, version: str, digest: str, key):
    """None when ``version`` holds a verified pass under the policy ``digest`` that is its
    latest verdict in the gate's ledger (:func:`current_ledger`, when there is one); else
    the :class:`AttestationError` saying why not."""
    try:
        ledger = current_ledger(client, tracking_uri, name, digest, key)
        check_attested_pass(client, tracking_uri, name, version, policy_digest=digest,
                            public_key=key, ledger=ledger)  # fmt: skip
    except AttestationError as error:
        return error
    return None


def enforce_alias(
    client, tracking_uri: str, policy: GatePolicy, alias: str, version: str, key
) -> AliasCheck:
    """Keep ``alias`` of ``policy.model`` on ``version`` only if the gate's signed pass for
    it verifies (:func:`fairpca.tasks.registry.check_attested_pass` under this policy's
    :func:`policy_digest`, with the public ``key``); a pass signed under an earlier policy is
    judged again first (where the gate's signing key is).

    A verified holder is recorded first among the alias's last attested holders
    (registered-model tag :func:`last_passed_tag`, a hint only: whatever it names is verified
    again before use). Any other holder loses the alias: back to the most recent of those
    whose pass still verifies and that was not demoted for review, else the alias is
    removed. A version not judged yet only waits (:func:`_wait_for_verdict`). Otherwise the
    version gets the tag ``fairness.gate.alias_refused`` with the reason, and
    ``fairness.gate.tampering`` when something was forged or changed (an attestation that
    does not verify or names another version, model files other than the attested ones, or a
    status tag saying ``passed`` without a valid attestation).

    No loop: the gate only ever moves an alias onto a version whose pass verifies, so the
    event that move emits ends in the first branch. An alias that has moved on since it was
    read (the event's, or meanwhile) is left where it is: the new holder has its own event,
    and the reconciler.
    """
    name, version = policy.model, str(version)
    holder = client.get_registered_model(name).aliases.get(alias)
    if holder is None or str(holder) != version:
        message = f"alias {alias!r} no longer points to version {version} (now: {holder})"
        return AliasCheck(False, f"{message}; no change")
    digest = policy_digest(policy)
    tags = _version_tags(client, name, version) or {}  # read before the check
    pending = ATTESTATION_TAG not in tags and tags.get(STATUS_TAG) in (None, PENDING)
    refusal = _attested(client, tracking_uri, name, version, digest, key)
    if isinstance(refusal, StaleAttestationError):  # honest, under an older policy: judge again
        with suppress(AttestationError):  # no signing key here: the refusal stands
            _gate_version(client, tracking_uri, policy, name, version)
            refusal = _attested(client, tracking_uri, name, version, digest, key)
    if refusal is None:
        _record_holder(client, name, alias, version)
        return AliasCheck(False, f"alias {alias!r} stays on version {version}: its signed gate "
                          "pass verifies")  # fmt: skip
    fallback = _last_attested_holder(client, tracking_uri, name, alias, version, digest, key)
    if pending:
        return _wait_for_verdict(client, tracking_uri, name, digest, alias, version, fallback, key)
    why, tampering = _refusal(client, name, version, refusal)
    if not move_alias(client, name, alias, fallback, holder=version):
        return AliasCheck(False, f"alias {alias!r} moved on from version {version}; no change")
    action = (f"moved back to version {fallback}, the last holder whose pass verifies"
              if fallback else "removed (no earlier holder whose pass verifies)")  # fmt: skip
    message = f"protected alias {alias!r} refused for version {version}: {why}; {action}"
    if tampering:
        _tag(client, name, version, TAMPERING_TAG, tampering)
        message += "; tampering reported on the version"
    _tag(client, name, version, ALIAS_REFUSED_TAG, message)
    return AliasCheck(True, message)


def _record_holder(client, name: str, alias: str, version: str) -> None:
    holders = _holders(client.get_registered_model(name).tags, alias)
    if holders[:1] != [version]:
        text = ",".join([version, *(v for v in holders if v != version)][:HOLDERS_KEPT])
        client.set_registered_model_tag(name, last_passed_tag(alias), text)


def _wait_for_verdict(client, tracking_uri, name, digest, alias, version, fallback, key):
    """``alias`` on a version not judged yet: record the request, give the alias back to
    ``fallback`` (None: remove it), then check the version again, so a pass signed
    meanwhile (its gate run having looked for requests before this one was written) is
    granted here. Nothing is recorded on the version: waiting is no refusal."""
    client.set_registered_model_tag(name, requested_tag(alias), f"{version}:{fallback or ''}")
    if not move_alias(client, name, alias, fallback, holder=version):
        return AliasCheck(False, f"alias {alias!r} moved on from version {version}; no change")
    if _attested(client, tracking_uri, name, version, digest, key) is None:
        move_alias(client, name, alias, version, holder=fallback)
        _drop_request(client, name, alias, version)
        return AliasCheck(False, f"alias {alias!r} on version {version}: its pass arrived")
    action = f"back on version {fallback}" if fallback else "removed"
    return AliasCheck(True, f"protected alias {alias!r} waits for the gate's verdict on version "
                      f"{version} (not judged yet): {action} until then; the gate gives it to "
                      "the version if it passes")  # fmt: skip


def _drop_request(client, name: str, alias: str, version: str) -> str | None:
    """Delete the request for ``alias`` if it names ``version``; the holder it replaces."""
    text = client.get_registered_model(name).tags.get(requested_tag(alias), "")
    requested, _, replaced = text.partition(":")
    if requested != version:
        return None
    client.delete_registered_model_tag(name, requested_tag(alias))
    return replaced


def _grant_requests(client, policy: GatePolicy, version: str, passed: bool) -> list[str]:
    """After ``version``'s verdict: each protected alias requested for it goes to it (if it
    passed and the alias still is where the request left it); the requests are dropped."""
    granted = []
    for alias in policy.protected_aliases:
        replaced = _drop_request(client, policy.model, alias, version)
        if replaced is None or not passed:
            continue
        current = client.get_registered_model(policy.model).aliases.get(alias)
        if str(current or "") in (replaced, version):
            move_alias(client, policy.model, alias, version, holder=current)
            granted.append(f"alias {alias!r} given to version {version} as requested")
    return granted


def _refusal(client, name: str, version: str, refusal: AttestationError):
    """``(why, tampering)``: the reason a version holds no verified pass, and what was forged
    or changed (None when nothing was)."""
    tags = _version_tags(client, name, version) or {}
    status, why = tags.get(STATUS_TAG), str(refusal)
    if status == FAILED and tags.get(REASONS_TAG):
        why += f" ({tags[REASONS_TAG]})"
    if refusal.tampered:
        return why, str(refusal)
    if status == PASSED and not isinstance(refusal, StaleAttestationError):  # honest, older
        return why, f"the tag {STATUS_TAG} says 'passed', but {refusal}"
    return why, None


def _last_attested_holder(client, tracking_uri, name, alias, refused, digest, key):
    """The most recent earlier holder recorded by the gate that still exists, was not
    demoted for review since and whose pass still verifies (None: none)."""
    for previous in _holders(client.get_registered_model(name).tags, alias):
        if previous == str(refused):
            continue
        tags = _version_tags(client, name, previous)
        if tags is None or NEEDS_REVIEW_TAG in tags:  # gone, or demoted for review since
            continue
        if _attested(client, tracking_uri, name, previous, digest, key) is None:
            return previous
    return None


def _tag(client, name: str, version: str, key: str, text: str) -> None:
    client.set_model_version_tag(name, version, key, f"{now_text()}: {text}"[:TAG_MAX_CHARS])


def reconcile_aliases(
    client, tracking_uri: str, policies: dict[str, GatePolicy], key
) -> tuple[int, list[str]]:
    """Judge every version of a watched model that has no verdict (no attestation: its
    event was lost, or it was ``pending`` / ``error`` past the gate's deadline; needs the
    gate's signing key), then :func:`enforce_alias` on every protected alias that is held;
    ``(aliases checked, one line per change)``. Registered models not created yet are skipped."""
    checked, changes = 0, []
    for name, policy in sorted(policies.items()):
        versions = model_versions(client, name)  # none: not created yet, or no alias to hold
        if not versions:
            continue
        changes += _judge_unjudged(client, tracking_uri, policy, versions)
        current_ledger(client, tracking_uri, name, policy_digest(policy), key)  # kept fresh
        aliases = client.get_registered_model(name).aliases
        held = [alias for alias in policy.protected_aliases if alias in aliases]
        checked += len(held)
        for alias in held:
            check = enforce_alias(client, tracking_uri, policy, alias, str(aliases[alias]), key)
            if check.changed:
                changes.append(f"{name}: {check.message}")
    return checked, changes


def _stuck_since(entry) -> float | None:
    """Seconds since a version without a verdict began waiting (``pending``: its judgement
    began, or it was created; ``error``: its judgement ended); None when it has a verdict or
    was never judged."""
    status = entry.tags.get(STATUS_TAG)
    if ATTESTATION_TAG in entry.tags or status not in (PENDING, ERROR):
        return None
    stamp = entry.tags.get(PENDING_SINCE_TAG if status == PENDING else EVALUATED_AT_TAG, "")
    try:
        since = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        since = (entry.creation_timestamp or 0) / 1000
    return time.time() - since


def _judge_unjudged(client, tracking_uri: str, policy: GatePolicy, versions: list) -> list[str]:
    """Judge each version with no verdict: never judged (its event was lost), or
    ``pending`` / ``error`` for longer than the gate's deadline (:data:`TIMEOUT_SECONDS`: its
    judgement was interrupted, failed, or refused by the budget)."""
    lines = []
    for entry in sorted(versions, key=lambda v: int(v.version)):
        waited = _stuck_since(entry)
        if ATTESTATION_TAG in entry.tags or (waited is not None and waited < TIMEOUT_SECONDS):
            continue  # judged, or being judged (a judgement ends by the deadline)
        try:
            state = _gate_version(client, tracking_uri, policy, policy.model, str(entry.version))
        except AttestationError as error:  # no signing key here: the gate's worker will
            return [*lines, f"{policy.model}: version {entry.version} has no verdict: {error}"]
        lines.append(f"{policy.model}: version {entry.version} had no verdict: {state.message}")
        if waited is not None:
            lines[-1] += f" (was {entry.tags.get(STATUS_TAG)} for {waited / 60:.0f} min)"
    return lines


POLICY_DIR_ENV = "FAIRPCA_GATE_POLICY_DIR"
# A gate run loads one version and evaluates it on the reference data (seconds to a few
# minutes); a run still going after this fails (Prefect's flow timeout), and its version stays
# ``pending``, which never holds a protected alias.
TIMEOUT_SECONDS = 900
VERSION_CREATED = "model_version.created"


class PolicyError(ValueError):
    """A policy file or directory that cannot be used; the message names the file and fix."""


# The messages of the refusals below (str.format templates; tests name them, not their words)
TWO_POLICY_FILES = "two policy files in {root} name the model {model!r}."
WORKER_SETTINGS_MISSING = (
    "{missing} not set on this worker: a gate run uses the worker's own policy folder and "
    "tracking server; start the gate's worker with them (or set them in the deployment's job "
    "variables); parameters cannot choose them."
)
NOT_THE_WORKERS_POLICY_DIR = (
    "policy_dir {given!r} is not the gate worker's policy folder ({env}); a gate run uses only "
    "its own policies. Leave policy_dir unset."
)
NOT_THE_WORKERS_TRACKING = (
    "tracking_uri {given!r} is not the gate worker's tracking server ({own}); a gate run judges "
    "only its own registry. Leave tracking_uri unset."
)


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
        if value.suffix.lower() not in _READERS:
            raise ValueError(f"reference path must be a .csv or .parquet file; got {value}.")
        return value


class GatePolicy(GateRules):
    """One watched registered model: its reference data and protected aliases, and the
    audit's gate rules (:class:`fairpca.flows.config.GateRules`, with the audit's defaults)."""

    model: str = Field(min_length=1, description="Registered model name.")
    reference: ReferenceData
    protected_aliases: list[Annotated[str, StringConstraints(pattern=ALIAS_PATTERN)]] = Field(
        default_factory=lambda: ["champion"]
    )
    min_group_size: int = Field(DEFAULT_MIN_GROUP_SIZE, ge=MIN_GROUP_SIZE_FLOOR,
                                description="Smaller groups are suppressed.")  # fmt: skip
    n_resamples: int = Field(1000, ge=100, le=100_000, description="Bootstrap resamples.")
    seed: int = Field(0, ge=0)
    experiment_name: str = Field("fairpca-gate", min_length=1)
    max_judgements_per_day: int = Field(
        10, ge=1, le=10_000,
        description="Judgements of the model per 24 hours under one policy (the budget).",
    )  # fmt: skip

    def evaluator_config(self) -> dict:
        """``evaluator_config["fairness"]`` of the MLflow ``fairness`` evaluator."""
        return {"sensitive_features": list(self.reference.sensitive),
                "pos_label": self.reference.positive_label,
                **self.model_dump(include={"min_group_size", "n_resamples", "seed"})}  # fmt: skip


def _read_policy(path: Path, root: Path) -> GatePolicy:
    try:
        policy = GatePolicy.model_validate(load_config_file(path))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc'])) or 'policy'}: {item['msg']}"
                             for item in error.errors())  # fmt: skip
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
    reference = policy.reference.model_copy(update={"path": resolved})
    return policy.model_copy(update={"reference": reference})


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
            raise PolicyError(TWO_POLICY_FILES.format(root=root, model=policy.model))
        policies[policy.model] = policy
    if not policies:
        raise PolicyError(f"policy directory {root} holds no *.yaml policy file.")
    return policies


# ---- the flow --------------------------------------------------------------------------------


def policy_digest(policy: GatePolicy, reference_sha256: str | None = None) -> str:
    """SHA-256 of the policy as the gate applies it: every field, and the reference data by
    its content (not its path; ``reference_sha256`` when already hashed). An attestation
    binds it: a pass under another policy, or on other reference data, no longer keeps an
    alias."""
    fields = policy.model_dump(mode="json")
    fields["reference"]["path"] = reference_sha256 or sha256_file(policy.reference.path)
    return canonical_digest(fields)


def gate_settings(policy_dir: str | None, tracking_uri: str | None) -> tuple[str | None, str]:
    """The policy folder and tracking URI a gate run uses.

    In a deployment run (started through the Prefect API) they are the worker's own,
    ``$FAIRPCA_GATE_POLICY_DIR`` and ``$MLFLOW_TRACKING_URI`` (the worker's environment or the
    deployment's job variables), which must be set; a parameter may only repeat them, so a
    Prefect API caller cannot point a gate run at a lenient policy or another registry.
    Called directly (a test, an operator's script) the parameters are used, else the same
    variables.

    Raises
    ------
    PolicyError
        In a deployment run: a parameter naming another folder or server, or no
        ``$FAIRPCA_GATE_POLICY_DIR`` / ``$MLFLOW_TRACKING_URI``.
    """
    from prefect.runtime import deployment

    if deployment.id is None:
        return policy_dir, resolve_tracking_uri(tracking_uri)
    settings = (POLICY_DIR_ENV, "MLFLOW_TRACKING_URI")
    if missing := [env for env in settings if not os.environ.get(env)]:
        raise PolicyError(WORKER_SETTINGS_MISSING.format(missing=" and ".join(missing)))
    own_dir, own_uri = (os.environ[env] for env in settings)
    if policy_dir is not None and Path(policy_dir).resolve() != Path(own_dir).resolve():
        given = str(policy_dir)[:200]
        raise PolicyError(NOT_THE_WORKERS_POLICY_DIR.format(given=given, env=POLICY_DIR_ENV))
    if _registry_id(tracking_uri or own_uri) != _registry_id(own_uri):
        given, own = shown_uri(tracking_uri)[:200], shown_uri(own_uri)
        raise PolicyError(NOT_THE_WORKERS_TRACKING.format(given=given, own=own))
    return own_dir, resolve_tracking_uri(own_uri)


def _client(tracking_uri: str):
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    return mlflow_client(tracking_uri)


def _flow_run_id() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.id or "")


def _judge_files(client, tracking_uri: str, policy: GatePolicy, name: str, version: str, frame):
    """The version's files downloaded and digested, its ONNX graph read (refused unread, with
    a fixed reason) and evaluated on the reference rows ``frame``: the files' digest, the
    graph (None when refused), the refusal, the metrics and the evaluation run's id."""
    with tempfile.TemporaryDirectory() as tmp:  # the files digested are the ones judged
        local = download_version(client, tracking_uri, name, version, Path(tmp))
        model_digest = files_digest(local)
        graph, refused, metrics, run_id = None, None, {}, ""
        try:
            graph = read_graph(local)  # nothing else of the version is ever opened
            with _judging(name, version):
                metrics, run_id = evaluate_version(
                    graph, frame, label=policy.reference.label,
                    evaluator_config=policy.evaluator_config(),
                    experiment_name=policy.experiment_name,
                    run_name=f"gate-{name}-v{version}"[:250],
                    run_tags={"fairness.gate.model": name, "fairness.gate.version": version},
                )  # fmt: skip
        except GraphRefused as refusal:  # a fixed reason: nothing the model said
            refused = str(refusal)
    return model_digest, graph, refused, metrics, run_id


def _gate_version(client, tracking_uri: str, policy: GatePolicy, name: str, version: str):
    """Judge the version's ONNX graph (refused unread, or evaluated), sign and record the
    verdict, grant the alias requests waiting for it; the final state of the flow run.
    Without the gate's signing key nothing is touched."""
    import mlflow

    key = gate_signing_key()
    mlflow.set_tracking_uri(tracking_uri)  # the evaluation run's store (also from the CLI)
    if spent := judgement_budget_spent(tracking_uri, policy, version):
        record_verdict(client, name, version, ERROR, [spent], {},
                       {"Prefect flow run": _flow_run_id()})  # fmt: skip
        _logger().warning("gate refused for %s version %s: %s", name, version, render(spent))
        return Failed(message=f"{name} version {version}: refused: {render(spent)}")
    client.set_model_version_tag(name, version, PENDING_SINCE_TAG, now_text())
    client.set_model_version_tag(name, version, STATUS_TAG, PENDING)
    if ATTESTATION_TAG in client.get_model_version(name, version).tags:  # an earlier verdict
        client.delete_model_version_tag(name, version, ATTESTATION_TAG)
    reference = policy.reference
    facts = {"reference data": reference.path.name,
             "policy": NamedPolicy.from_config(policy).description(),
             "Prefect flow run": _flow_run_id()}  # fmt: skip
    try:
        reference_sha256 = sha256_file(reference.path)
        facts["reference data"] += f" (SHA-256 {reference_sha256})"
        frame = read_reference(reference.path, reference.label, reference.sensitive)
        judged = _judge_files(client, tracking_uri, policy, name, version, frame)
    except Exception as error:  # any loader or data failure is the version's verdict: error
        return _record_error(client, tracking_uri, policy, version, facts, error, key)
    model_digest, graph, refused, metrics, run_id = judged
    majority = majority_accuracy(frame[reference.label], reference.positive_label)
    if refused:  # a fixed sentence of the gate's (onnx_runtime), never the model's text
        status, reasons = FAILED, [Reason(kind=Kind.NO_GRAPH, decides=True, facts=(refused,))]
    else:
        status, reasons = verdict(metrics, policy, majority)
    facts["evaluation run"] = run_id or "none (not evaluated)"
    facts["majority-class accuracy"] = f"{majority:.{PUBLISHED_DECIMALS}f}"
    facts["model files (SHA-256 of the manifest)"] = model_digest
    facts["ONNX graph (SHA-256)"] = graph.sha256 if graph else "none judged"
    attestation = Attestation(
        model=name, version=str(version), model_digest=model_digest,
        graph_digest=graph.sha256 if graph else "",
        policy_digest=policy_digest(policy, reference_sha256), verdict=status, gate_run_id=run_id,
        flow_run_id=facts["Prefect flow run"], signed_at=now_text(),
    )  # fmt: skip
    signed = {ATTESTATION_TAG: sign_attestation(attestation, key), "fairness.gate.run_id": run_id,
              "fairness.gate.flow_run_id": attestation.flow_run_id}  # fmt: skip
    # the ledger first: a reader never sees this attestation before the ledger names it
    note_verdict(client, tracking_uri, policy, version,
                 signed[ATTESTATION_TAG] if status == PASSED else None, key)  # fmt: skip
    withheld = withheld_reason(frame, policy)
    reasons = record_verdict(client, name, version, status, reasons, metrics, facts, signed,
                             withheld=withheld)  # fmt: skip
    message = f"{name} version {version}: {status}" + (f" ({rendered(reasons)})" * bool(reasons))
    message = "; ".join([message, *_grant_requests(client, policy, version, status == PASSED)])
    _logger().info(message)
    return Completed(message=message)


def _record_error(client, tracking_uri: str, policy: GatePolicy, version: str, facts, error, key):
    """Record that judging ``version`` failed with ``error`` (no verdict, no number
    published, the judgement not counted); the flow run's Failed state. Published: the
    error's category, its type (its text may quote the registrant's file names); the
    worker's log and the flow run say the rest."""
    name = policy.model
    reason = Reason(kind=Kind.EVALUATION_ERROR, decides=True, subject=type(error).__name__)
    detail = f"{type(error).__name__}: {error}"[:1000]
    note_verdict(client, tracking_uri, policy, version, None, key)
    GateState().refund(_registry_id(tracking_uri), name, version)  # no number published
    record_verdict(client, name, version, ERROR, [reason], {}, facts)
    _logger().error("gate error for %s version %s: %s", name, version, detail)
    return Failed(message=f"{name} version {version}: error: {render(reason)}: {detail}")


def _logger():
    """The flow run's logger; the module's outside a run (``fairpca gate reconcile``)."""
    import logging

    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


@flow(name="fairness-gate", validate_parameters=True, timeout_seconds=TIMEOUT_SECONDS)
def fairness_gate(
    model_name: str, version: str,
    event: Literal["model_version.created", "model_version_alias.created"],
    alias: str | None = None, policy_dir: str | None = None, tracking_uri: str | None = None,
):  # fmt: skip
    """Gate one registry event of a watched model (see the module docstring); every refusal
    is a Failed state with its message (nothing raised, so nothing is pickled into the result
    store)."""
    try:
        policy_dir, uri = gate_settings(policy_dir, tracking_uri)
        policy = load_policies(policy_dir).get(model_name)
        if policy is None:
            return Completed(message=f"model {model_name!r} has no gate policy; nothing to do")
        client = _client(uri)
        if event == VERSION_CREATED:
            return _gate_version(client, uri, policy, model_name, str(version))
        if alias is None:
            return Failed(message=f"event {event} needs the alias parameter")
        if alias not in policy.protected_aliases:
            return Completed(message=f"alias {alias!r} is not protected; no change")
        check = enforce_alias(client, uri, policy, alias, str(version), gate_public_key())
    except (PolicyError, AttestationError) as error:
        get_run_logger().error("fairness gate: %s", error)
        return failed_run(str(error))
    get_run_logger().info(check.message)
    create_markdown_artifact(f"# Protected alias\n\n{markdown_text(check.message)}\n",
                             description="fairness gate alias check")  # fmt: skip
    return Completed(message=check.message)


@flow(name="fairness-gate-reconcile", validate_parameters=True, persist_result=False)
def fairness_gate_reconcile(policy_dir: str | None = None, tracking_uri: str | None = None):
    """Check every protected alias of every watched model against the gate's attestations
    (:func:`reconcile_aliases`): scheduled every few minutes, and started once by the
    receiver when it starts."""
    try:
        policy_dir, uri = gate_settings(policy_dir, tracking_uri)
        policies = load_policies(policy_dir)
        checked, changes = reconcile_aliases(_client(uri), uri, policies, gate_public_key())
    except (PolicyError, AttestationError) as error:
        get_run_logger().error("fairness gate reconcile: %s", error)
        return failed_run(str(error))
    for line in changes:
        get_run_logger().warning(line)
    summary = f"{checked} protected alias(es) checked, {len(changes)} changed"
    get_run_logger().info(summary)
    return Completed(message="; ".join([summary, *changes])[:TAG_MAX_CHARS])
