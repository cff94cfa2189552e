"""The model registry side of an audit: model identity, version tags, aliases, safe loading.

* **Identity.** An audit is defined by its data source, its label and its sensitive
  attributes; the registered model name is derived from that definition
  (:func:`registered_model_name`), so a champion is only ever compared with challengers
  audited the same way. The full definition is also a registered-model tag
  (``fairpca.definition``) and registration refuses a model whose tag says otherwise.
* **Versions.** Every audit registers its chosen candidate, promoted or not, with the
  curated ``fairness.*`` tags of :func:`fairness_tags` and a concise description (the verdict
  and a link to the run's full ``model_card.md``); only the ``champion`` alias carries the
  decision.
* **Loading.** :func:`load_registered_pipeline` reloads a version we registered: the MLflow
  model must be skops-serialised, its file must match the SHA-256 recorded at registration,
  and only the fixed :data:`TRUSTED_TYPES` are trusted (never pickle).
  :func:`load_champion` is the scorer's loader: the alias holder's gate attestation is
  verified and its files are the ones the gate judged, then the ONNX graph the gate judged
  is served.
* **Attestations.** The fairness gate's signed verdict on a version
  (:class:`fairpca.tasks.trust.Attestation`) is the version tag ``fairness.gate.attestation``;
  :func:`check_attested_pass` verifies it and recomputes the digest of the version's files.
  Every other tag, ``fairness.gate.status`` included, is informational: anyone with write
  access to the registry can set it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.gate_ledger import (
    JUDGED_UNDER_ANOTHER_POLICY,
    Ledger,
    check_fresh,
    check_latest,
    max_age_seconds,
    published_ledger,
)
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.onnx_runtime import GraphModel, GraphRefused, read_graph
from fairpca.tasks.record import AuditRecord, definition_json, registered_model_name
from fairpca.tasks.report import CARD_FILE, render_model_card, version_description
from fairpca.tasks.select import Champion, GatePolicy
from fairpca.tasks.trust import (
    Attestation,
    AttestationError,
    StaleAttestationError,
    UntrustedModelError,
    VerifiedModel,
    files_digest,
    gate_public_key,
    load_skops_pipeline,
    load_verified_dir,
    mask_credentials,
    shown_uri,
    take_credentials,
    verify_attestation,
)

DEFINITION_TAG = "fairpca.definition"
MODEL_FILE_SHA_TAG = "fairpca.model_sha256"
MODEL_DIGEST_TAG = "fairpca.model_digest"  # the fitted pipeline's content, see model_digest


class ModelDefinitionMismatch(ValueError):
    """A registered model already holds versions of an audit with another definition."""


# The messages of the refusals below (str.format templates; tests name them, not their words)
NOT_CREATED_BY_AN_AUDIT = (
    "registered model {name!r} was not created by a fairpca audit (it has versions but no "
    "{tag} tag); fairpca registers nothing under it. Leave model_name unset or choose another "
    "model_name."
)
AUDITED_ANOTHER_WAY = (
    "registered model {name!r} holds audits of {recorded}, not of {text}: a champion must only "
    "be compared with challengers audited the same way. Leave model_name unset (the name is "
    "then derived from the definition, e.g. {derived!r}) or choose another model_name."
)
CHAMPION_AUDITED_ANOTHER_WAY = (
    "registered model {name!r} holds audits of {defined}, but this audit is of {expected}; "
    "leave model_name unset or choose another one."
)
NOT_REGISTERED_BY_FAIRPCA = (
    "{shown} has no {tag} tag: fairpca did not register it, so it is not loaded."
)
NO_ALIAS_HOLDER = "no version of {model!r} holds the alias {alias!r}."
NOT_ATTESTED = "the gate has not attested it (no signed verdict)"
ATTESTATION_COPIED = (
    "its attestation is about {model!r} version {version}, copied onto this version"
)
VERDICT_NOT_PASSED = "the gate's signed verdict is {verdict!r}"
NO_GRAPH_BOUND = "its pass binds no ONNX graph: it must pass the gate again"
FILES_CHANGED_AFTER_THE_GATE = (
    "its model files changed after the gate judged them (digest {digest}, attested {attested})"
)
GRAPH_NOT_JUDGED = (
    "{shown} is not loaded: its ONNX graph is not the one the gate judged (SHA-256 {digest}, "
    "attested {attested})."
)


# ---- version tags ----------------------------------------------------------------------------

EXTRA_TEST_TAGS = ("balanced_accuracy", "selection_rate_ratio")  # point values, when present
INTERVAL_SUFFIXES = ("", ".ci95_low", ".ci95_high")


def metric_tags(
    prefix: str, values: Mapping[str, Any], metrics: Iterable[str], suffixes=INTERVAL_SUFFIXES
) -> dict[str, str]:
    """``{prefix + metric + suffix: value with six decimals}`` of each ``metric + suffix``
    found in ``values`` (by default the metric and its 95% interval)."""
    return {
        f"{prefix}{metric}{suffix}": f"{float(values[metric + suffix]):.6f}"
        for metric in metrics
        for suffix in suffixes
        if metric + suffix in values
    }


def fairness_tags(record: AuditRecord) -> dict[str, str]:
    """``fairness.*`` tags of a registered version, a short curated set from the record.

    The attributes and the gate; the test numbers a reviewer should quote (headline metrics
    with their 95% intervals, balanced accuracy and the selection-rate ratio when the audit
    measured them); the majority-class test accuracy. Everything else is in the card.
    """
    selection = record.selection
    return {
        "fairness.sensitive_features": ",".join(record.sensitive),
        "fairness.gate": selection.gate,
        **metric_tags("fairness.test.", selection.test, HEADLINE_METRICS),
        **metric_tags("fairness.test.", selection.test, EXTRA_TEST_TAGS, ("",)),
        **metric_tags("fairness.baseline.", selection.baselines.majority.test, ["accuracy"], ("",)),
    }


# ---- registration ----------------------------------------------------------------------------


def _is_missing(error: Exception) -> bool:
    return getattr(error, "error_code", None) in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND")


def check_model_definition(client, name: str, definition: dict[str, Any] | None) -> None:
    """Create ``name`` (tagged with ``definition``) if needed; refuse one audited otherwise.

    Raises
    ------
    ModelDefinitionMismatch
        When the registered model's ``fairpca.definition`` tag names another definition.
    """
    from mlflow.exceptions import MlflowException

    text = None if definition is None else definition_json(definition)
    tags = {} if text is None else {DEFINITION_TAG: text}
    try:
        model = client.get_registered_model(name)
    except MlflowException as error:
        if not _is_missing(error):
            raise
        try:
            client.create_registered_model(
                name, tags=tags, description="Fair-representation pipelines audited by fairpca."
            )
            return
        except MlflowException as race:  # another audit created it at the same moment
            if getattr(race, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
                raise
            model = client.get_registered_model(name)
    recorded = model.tags.get(DEFINITION_TAG)
    if text is None or recorded == text:
        return
    if recorded is None and not client.search_model_versions(f"name = '{name}'", max_results=1):
        client.set_registered_model_tag(name, DEFINITION_TAG, text)  # an empty model: adopt
        return
    if recorded is None:
        raise ModelDefinitionMismatch(NOT_CREATED_BY_AN_AUDIT.format(name=name, tag=DEFINITION_TAG))
    derived = registered_model_name(definition)
    raise ModelDefinitionMismatch(
        AUDITED_ANOTHER_WAY.format(name=name, recorded=recorded, text=text, derived=derived)
    )


def register_version(
    client,
    record: AuditRecord,
    *,
    source: str,
    run_id: str,
    model_id: str | None,
    description: str,
    model_sha256: str,
    promote: bool | None = None,
) -> str:
    """Register the audit's logged pipeline as a new version of ``record.model_name``.

    Tags: the record's model tags, :func:`fairness_tags` and the model file's SHA-256
    (checked when it is loaded again); ``description``: the verdict and a link to the card
    (:func:`fairpca.tasks.report.version_description`). A version already registered from
    ``run_id`` (a retried or re-logged step) is returned as is. Whether it becomes
    ``champion`` is decided by the caller.
    """
    name = record.model_name
    for existing in client.search_model_versions(f"run_id = '{run_id}'"):
        if existing.name == name:
            return str(existing.version)
    check_model_definition(client, name, record.provenance.definition.model_dump())
    tags = {**record.model_tags, **fairness_tags(record), MODEL_FILE_SHA_TAG: model_sha256}
    if promote is not None:
        tags["fairness.decision"] = "promote" if promote else "keep"
    tags[MODEL_DIGEST_TAG] = record.model_digest
    version = client.create_model_version(
        name, source=source, run_id=run_id, model_id=model_id, tags=tags, description=description
    )
    return str(version.version)


NEEDS_REVIEW_TAG = "fairpca.needs_review_reason"  # a champion demoted for review
ALIAS_REFUSED_TAG = "fairness.gate.alias_refused"  # the gate took a protected alias away


_ANY_HOLDER = object()


def move_alias(
    client, name: str, alias: str, version: str | None, *, holder: Any = _ANY_HOLDER
) -> bool:
    """The one place that moves a registry alias: point ``alias`` of ``name`` at ``version``
    (None: remove it). Every caller has decided first (:func:`fairpca.tasks.select.
    decide_promotion`, or the gate's check of an attestation).

    With ``holder`` (a version, or None for no holder) the alias moves only if it still
    points there, read again right before the move, so a decision about one holder never
    undoes a move someone made meanwhile. Whether the alias moved (or was already there)."""
    current = client.get_registered_model(name).aliases.get(alias)
    current = None if current is None else str(current)
    if holder is not _ANY_HOLDER and current != (None if holder is None else str(holder)):
        return False
    if version is None:
        if current is not None:
            client.delete_registered_model_alias(name, alias)
    elif current != str(version):
        client.set_registered_model_alias(name, alias, str(version))
    return True


def demote(client, name: str, version: str, *, from_alias: str, to_alias: str, why: str) -> None:
    """Move ``version`` from ``from_alias`` (e.g. ``champion``) to ``to_alias`` (e.g.
    ``needs-review``) and record why on the version (its model can never take
    ``from_alias`` back through :func:`~fairpca.tasks.select.decide_promotion`)."""
    client.set_model_version_tag(name, version, NEEDS_REVIEW_TAG, why[:5000])
    move_alias(client, name, to_alias, version)
    move_alias(client, name, from_alias, None, holder=version)


def champion_version(client, name: str, alias: str):
    """The registered version ``alias`` points to (None: no model or no alias)."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as error:
        if error.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise


def model_versions(client, name: str) -> list:
    """Every version of the registered model ``name`` (none when it does not exist)."""
    from mlflow.exceptions import MlflowException

    try:
        return list(client.search_model_versions(f"name = '{name}'"))
    except MlflowException as error:
        if _is_missing(error):
            return []
        raise


def demoted_models(client, name: str) -> frozenset[str]:
    """The fit digests (:func:`fairpca.tasks.trust.model_digest`) of every version of
    ``name`` that lost a protected alias (demoted for review, or refused by the gate)."""
    lost = (NEEDS_REVIEW_TAG, ALIAS_REFUSED_TAG)
    return frozenset(
        v.tags[MODEL_DIGEST_TAG]
        for v in model_versions(client, name)
        if MODEL_DIGEST_TAG in v.tags and any(tag in v.tags for tag in lost)
    )


def version_with_model(client, name: str, model_digest: str | None):
    """The first version of ``name`` of this very fit: the same fitted model on the same
    training rows (:func:`fairpca.tasks.trust.model_digest`; None: none)."""
    if model_digest is None:
        return None
    versions = sorted(model_versions(client, name), key=lambda v: int(v.version))
    return next((v for v in versions if v.tags.get(MODEL_DIGEST_TAG) == model_digest), None)


# ---- loading a version we registered ---------------------------------------------------------


def registered_sha256(tags: dict[str, str], shown: str) -> str:
    """The SHA-256 of the skops file fairpca recorded when it registered a version (its
    tags); :class:`UntrustedModelError` naming ``shown`` when there is none."""
    if not tags.get(MODEL_FILE_SHA_TAG):
        raise UntrustedModelError(
            NOT_REGISTERED_BY_FAIRPCA.format(shown=shown, tag=MODEL_FILE_SHA_TAG)
        )
    return tags[MODEL_FILE_SHA_TAG]


def load_registered_pipeline(tracking_uri: str, name: str, version: str, client=None):
    """The fitted pipeline of version ``version`` of ``name``, verified before loading.

    Only a version fairpca registered is loaded: its ``fairpca.model_sha256`` tag must
    match the downloaded skops file, and only :data:`TRUSTED_TYPES` are accepted. ``client``:
    an MLflow client of ``tracking_uri`` already open (else one is made).
    """
    client = client or mlflow_client(tracking_uri)
    tags = client.get_model_version(name, version).tags
    expected = registered_sha256(tags, f"version {version} of {name!r}")
    with tempfile.TemporaryDirectory() as tmp:
        local = download_version(client, tracking_uri, name, version, tmp)
        return load_skops_pipeline(local, expected)


# ---- gate attestations and the scorer's loader ---------------------------------------------

ATTESTATION_TAG = "fairness.gate.attestation"  # the gate's signed verdict (trust.Attestation)
TAMPERING_TAG = "fairness.gate.tampering"  # what enforcement found forged or changed


def download_version(client, tracking_uri: str, name: str, version: str, dst) -> Path:
    """The model files of version ``version`` of ``name``, downloaded into ``dst``."""
    import mlflow.artifacts

    location = client.get_model_version_download_uri(name, str(version))
    return Path(
        mlflow.artifacts.download_artifacts(
            artifact_uri=location, dst_path=str(dst), tracking_uri=tracking_uri
        )
    )


def check_attested_pass(
    client,
    tracking_uri: str,
    name: str,
    version: str,
    *,
    policy_digest: str | None = None,
    public_key=None,
    model_dir: Path | None = None,
    ledger: Ledger | None = None,
) -> Attestation:
    """The gate's attestation that version ``version`` of ``name`` passed, once verified.

    The signature must verify with the gate's public key (:func:`fairpca.tasks.trust.
    gate_public_key` unless given), the statement must name this model and version with the
    verdict ``passed`` (and ``policy_digest`` when given), with a ``ledger`` (the gate's,
    verified: :mod:`fairpca.tasks.gate_ledger`) it must be the version's latest verdict there,
    signed under the ledger's policy, and the digest of the version's model files, downloaded
    now (or the already downloaded ``model_dir``), must be the one attested. Cheap checks come
    first; the files are downloaded last.

    Raises
    ------
    AttestationError
        Naming what is missing or wrong; ``tampered`` says whether it was forged or changed.
    """
    text = client.get_model_version(name, str(version)).tags.get(ATTESTATION_TAG)
    if not text:
        raise AttestationError(NOT_ATTESTED)
    attestation = verify_attestation(text, public_key)
    if (attestation.model, attestation.version) != (name, str(version)):
        raise AttestationError(
            ATTESTATION_COPIED.format(model=attestation.model, version=attestation.version),
            tampered=True,
        )
    if attestation.verdict != "passed":
        raise AttestationError(VERDICT_NOT_PASSED.format(verdict=attestation.verdict))
    if ledger is not None:
        check_latest(ledger, str(version), text, attestation)
    if policy_digest is not None and attestation.policy_digest != policy_digest:
        raise StaleAttestationError(JUDGED_UNDER_ANOTHER_POLICY)
    if not attestation.graph_digest:  # signed before the gate judged ONNX graphs only
        raise StaleAttestationError(NO_GRAPH_BOUND)
    with tempfile.TemporaryDirectory() as tmp:
        local = model_dir or download_version(client, tracking_uri, name, version, tmp)
        digest = files_digest(local)
    if digest != attestation.model_digest:
        raise AttestationError(
            FILES_CHANGED_AFTER_THE_GATE.format(
                digest=digest[:12], attested=attestation.model_digest[:12]
            ),
            tampered=True,
        )
    return attestation


def load_champion(
    model_name: str,
    alias: str = "champion",
    tracking_uri: str | None = None,
    *,
    attested: bool = True,
) -> GraphModel | VerifiedModel:
    """The model ``alias`` of ``model_name`` points to, for scoring, loaded without running
    any code from the registry.

    The version's files are downloaded once. With ``attested`` (the default) the fairness
    gate's signed pass must verify for those very files (:func:`check_attested_pass`, with
    ``$FAIRPCA_GATE_PUBLIC_KEY``) and be the version's latest verdict under the gate's current
    policy in the gate's signed ledger (:mod:`fairpca.tasks.gate_ledger`, signed at most
    ``$FAIRPCA_GATE_LEDGER_MAX_AGE`` seconds ago, a day by default), and what is served is what
    the gate judged: the version's ONNX graph, whose SHA-256 must be the attested one, checked
    again as the gate checks it (:func:`fairpca.tasks.onnx_runtime.read_graph`) and run by
    onnxruntime (:class:`fairpca.tasks.onnx_runtime.GraphModel`: ``predict(frame)`` feeds each
    graph input the column it names); the scikit-learn files are not opened. With
    ``attested=False`` (no gate is deployed) the scikit-learn pipeline is loaded: its skops
    file must match the SHA-256 fairpca recorded when it registered the version (tag
    ``fairpca.model_sha256``), which says the file is the one registered, not that its model
    is fair, and the directory must be an MLflow scikit-learn model serialised with skops,
    without pickle or code, holding only skops' default and :data:`TRUSTED_TYPES`
    (:func:`fairpca.tasks.trust.load_verified_dir`). ``mlflow.pyfunc.load_model`` is not
    used: a cloudpickled model runs its code when loaded.

    Raises
    ------
    LookupError
        No version holds ``alias``.
    AttestationError
        No valid attestation (``attested``): the message says what was found.
    UntrustedModelError
        Files fairpca does not load (no graph or a refused one; pickle, code, an untrusted
        type, another SHA-256).
    """
    import mlflow

    uri = take_credentials(tracking_uri or mlflow.get_tracking_uri())
    client = mlflow_client(uri)
    holder = champion_version(client, model_name, alias)
    if holder is None:
        raise LookupError(NO_ALIAS_HOLDER.format(model=model_name, alias=alias))
    version = str(holder.version)
    shown = f"models:/{model_name}@{alias} (version {version} on {shown_uri(uri)})"
    expected = None if attested else registered_sha256(holder.tags, shown)
    with tempfile.TemporaryDirectory() as tmp:
        local = download_version(client, uri, model_name, version, Path(tmp))
        if not attested:
            return load_verified_dir(local, shown, expected)
        key = gate_public_key()
        try:
            tags = client.get_registered_model(model_name).tags
            ledger = published_ledger(tags, model_name, key)
            check_fresh(ledger, max_age_seconds())
            attestation = check_attested_pass(
                client, uri, model_name, version, public_key=key, model_dir=local,
                ledger=ledger,
            )  # fmt: skip
        except AttestationError as error:
            raise AttestationError(
                f"{shown} is not loaded: {error}.", tampered=error.tampered
            ) from None
        # what is served is the graph the gate judged, checked again as the gate checks it
        try:
            graph = read_graph(local)
        except GraphRefused as error:
            raise UntrustedModelError(f"{shown} is not loaded: {error}.") from None
        if graph.sha256 != (judged := attestation.graph_digest):
            raise AttestationError(
                GRAPH_NOT_JUDGED.format(
                    shown=shown, digest=graph.sha256[:12], attested=judged[:12]
                ),
                tampered=True,
            )
        return GraphModel(graph)


def run_ui_url(tracking_uri: str | None, experiment_id: str, run_id: str, path: str) -> str | None:
    """The MLflow UI address of a run artifact, when the tracking server is a web server
    (credentials masked); None for a database or file store."""
    if not tracking_uri or not tracking_uri.startswith(("http://", "https://")):
        return None
    base = mask_credentials(tracking_uri).rstrip("/")
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}/artifactPath/{path}"


def register_logged_model(
    client, logged, out_dir: Path, record: AuditRecord, *, tracking_uri: str, promotion,
    model_sha256: str, verdict,
) -> tuple[str | None, bool]:  # fmt: skip
    """Log the model card (run artifact ``model_card.md``) and, when the audit registers
    models, register the logged pipeline (``logged``: its :class:`mlflow.entities.LoggedModel`
    of the run) with its tags, a concise description linking the card, and the SHA-256 of its
    skops file (``model_sha256``, as the caller verified it). When a version of this very
    fitted model and training rows exists, it is not registered again. ``verdict``: the
    command's :func:`fairpca.tasks.report.build_verdict` of the record and ``promotion``.
    Returns the version and whether it is new."""
    run_id, experiment_id = logged.source_run_id, logged.experiment_id
    card_path = Path(out_dir) / CARD_FILE
    card_path.write_text(render_model_card(record, promotion, verdict))
    client.log_artifact(run_id, str(card_path))
    if not record.register_model:
        return None, False
    existing = version_with_model(client, record.model_name, record.model_digest)
    if existing is not None and existing.run_id != run_id:
        return str(existing.version), False
    ui_url = run_ui_url(tracking_uri, experiment_id, run_id, CARD_FILE)
    description = version_description(
        record, run_id, ui_url, promotion, experiment_id=experiment_id, verdict=verdict
    )
    # The logged model's storage location, not ``models:/<id>``: a SQL store resolves that
    # URI through the process-wide tracking URI, which may name another store.
    version = register_version(
        client, record, source=logged.artifact_location, run_id=run_id,
        model_id=logged.model_id, description=description, model_sha256=model_sha256,
        promote=None if promotion is None else promotion.promote,
    )  # fmt: skip
    return version, True


def find_champion(
    tracking_uri: str, record: AuditRecord, *, client, evaluate=None, watch: bool = False
) -> tuple[Champion | None, frozenset[str]]:
    """The version the record's champion alias points to and the models that lost a
    protected alias before (:func:`demoted_models`).

    With ``evaluate`` (``score(pipeline) -> metrics``, the audit's test rows) the champion,
    loaded and verified (:func:`load_registered_pipeline`), is measured on the rows the
    challenger was; with ``watch`` (retrain) a champion that fails the record's gate there, or
    cannot be verified, is to be demoted. ``client``: the command's client of
    ``tracking_uri``.

    Raises
    ------
    ModelDefinitionMismatch
        The registered model holds audits of another definition.
    """
    name = record.model_name
    holder = champion_version(client, name, record.champion_alias)
    demoted = demoted_models(client, name)
    if holder is None:
        return None, demoted
    defined = client.get_registered_model(name).tags.get(DEFINITION_TAG)
    expected = definition_json(record.provenance.definition.model_dump())
    if defined not in (None, expected):
        raise ModelDefinitionMismatch(
            CHAMPION_AUDITED_ANOTHER_WAY.format(name=name, defined=defined, expected=expected)
        )
    version = str(holder.version)
    champion = Champion(
        name=name,
        version=version,
        policy=GatePolicy.from_tags(holder.tags),
        model_digest=holder.tags.get(MODEL_DIGEST_TAG),
    )
    if evaluate is None:
        return champion, demoted
    try:
        pipeline = load_registered_pipeline(tracking_uri, name, version, client)
    except UntrustedModelError as error:
        why = f"fails the gate on the new data (cannot be verified: {error})" if watch else None
        return replace(champion, unverified=str(error), demoted=why), demoted
    test = evaluate(pipeline)
    policy = GatePolicy.from_tags(record.model_tags)
    failures = policy.failures(test) if watch else []
    why = f"fails the gate on the new data ({'; '.join(failures)})" if failures else None
    return replace(champion, test=test, demoted=why), demoted
