"""Model identity, fairness tags, model cards and safe reloading of registered versions."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from gate_setup import registrant
from messages import matching
from records import replaced

from fairpca.tasks.decision import Kind, Reason, render
from fairpca.tasks.record import (
    DATASET_LABELS,
    AuditRecord,
    DecisionRecord,
    PromotionRecord,
    definition_json,
    definition_of,
    registered_model_name,
    resolved_model_name,
)
from fairpca.tasks.registry import fairness_tags
from fairpca.tasks.report import markdown_text, render_model_card
from fairpca.tasks.trust import mask_credentials


@pytest.fixture
def audit(audit_record):
    """The shared typed audit record (tests/conftest.py)."""
    return audit_record


# ---- identity --------------------------------------------------------------------------------


def _source(**given):
    """A config's ``source`` section: a dataset or a user file (no other field read)."""
    values = {"dataset": None, "data": None, "label": None, "positive_label": None}
    return SimpleNamespace(**{**values, **given})


def test_model_name_names_source_label_and_attributes():
    name = registered_model_name(definition_of(_source(dataset="adult", sensitive=["sex", "race"])))
    assert name == "fairpca-adult-income_gt_50k-race_sex"


def test_sex_only_and_sex_race_audits_get_different_names():
    def name(sensitive):
        return registered_model_name(definition_of(_source(dataset="adult", sensitive=sensitive)))

    assert name([]) == name(["sex"]) == "fairpca-adult-income_gt_50k-sex"  # loader default
    assert name(["sex", "race"]) == name(["race", "sex"]) != name(["sex"])
    assert name([]) != name(["race"])


def test_a_policy_other_than_the_default_has_a_model_of_its_own():
    """Under equal opportunity the derived name carries the policy, so it never moves the
    demographic-parity audit's champion; the default policy keeps the plain name, in any
    order of its criteria; an explicit name is kept; every name fits."""
    from fairpca.flows.config import AuditConfig

    def name(**options) -> str:
        config = AuditConfig(dataset="adult", **options)
        return resolved_model_name(config.source, config.tracking.model_name,
                                   config.selection.policy)  # fmt: skip

    plain = "fairpca-adult-income_gt_50k-sex"
    assert name() == plain == name(policy="four_fifths+demographic_parity")
    assert name(policy="equal_opportunity") == f"{plain}-equal_opportunity"
    assert name(policy="equal_opportunity", model_name="mine") == "mine"
    everything = "demographic_parity+equal_opportunity+equalized_odds+four_fifths"
    names = {name(policy=p) for p in ("demographic_parity", "equal_opportunity", everything)}
    assert len(names) == 3 and plain not in names
    long = AuditConfig(data="/d/" + "x" * 90 + ".csv", label="y", sensitive=["s"],
                       policy=everything)  # fmt: skip
    named = resolved_model_name(long.source, None, long.selection.policy)
    assert len(named) <= 100 and named.endswith("-" + everything.replace("+", "."))


def test_config_resolves_the_identity_name_and_keeps_an_explicit_one(tmp_path):
    from fairpca.flows.config import AuditConfig

    german = AuditConfig(dataset="german")
    assert resolved_model_name(german.source) == "fairpca-german-bad_credit-age"
    both = AuditConfig(dataset="adult", sensitive=["sex", "race"])
    assert (
        resolved_model_name(both.source, both.tracking.model_name)
        == "fairpca-adult-income_gt_50k-race_sex"
    )
    explicit = AuditConfig(dataset="adult", model_name="my-model")
    assert resolved_model_name(explicit.source, explicit.tracking.model_name) == "my-model"
    user = AuditConfig(data=tmp_path / "loans.csv", label="approved", sensitive=["gender"])
    assert (
        resolved_model_name(user.source, user.tracking.model_name)
        == "fairpca-loans-approved-gender"
    )


def test_lossy_names_get_a_hash_of_the_full_definition():
    def user(**changes):
        values = {
            "dataset": None,
            "data": "x/loans data.csv",
            "label": "ok?",
            "positive_label": None,
            "sensitive": ["sex"],
        }
        return registered_model_name(definition_of(SimpleNamespace(**{**values, **changes})))

    plain = user()
    assert plain.startswith("fairpca-loans_data-ok-sex-") and len(plain) == 34
    # characters MLflow names should not hold, cleaned to the same stem: different hashes
    assert user(label="ok!") != plain and user(label="ok!").startswith("fairpca-loans_data-ok-sex-")
    assert user(positive_label="yes") != user(positive_label="no")
    assert user(sensitive=["a_b"]) != user(sensitive=["a", "b"])
    long = user(sensitive=[f"attribute{i}" for i in range(20)])
    assert len(long) == 100 and long.rsplit("-", 1)[1].isalnum()
    for name in (plain, long):
        assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@pytest.mark.parametrize("dataset", ["adult", "german"])
def test_dataset_labels_are_the_loaders_label_columns(dataset):
    from fairpca.datasets import load_dataset

    assert load_dataset(dataset).y.name == DATASET_LABELS[dataset]


# ---- tags ------------------------------------------------------------------------------------


def test_fairness_tags_of_a_version(audit):
    audit.selection.test.update({"balanced_accuracy": 0.75, "selection_rate_ratio": 0.8})
    tags = fairness_tags(audit)
    assert tags == {
        "fairness.sensitive_features": "race,sex",
        "fairness.gate": "upper_bound",
        "fairness.test.accuracy": "0.821500",
        "fairness.test.accuracy.ci95_low": "0.811500",
        "fairness.test.accuracy.ci95_high": "0.831500",
        "fairness.test.dp_difference": "0.023100",
        "fairness.test.dp_difference.ci95_low": "0.003100",
        "fairness.test.dp_difference.ci95_high": "0.043100",
        "fairness.test.eo_difference": "0.061200",
        "fairness.test.eo_difference.ci95_low": "0.031200",
        "fairness.test.eo_difference.ci95_high": "0.091200",
        "fairness.test.balanced_accuracy": "0.750000",
        "fairness.test.selection_rate_ratio": "0.800000",
        "fairness.baseline.accuracy": "0.761100",
    }
    del audit.selection.test["balanced_accuracy"]
    assert "fairness.test.balanced_accuracy" not in fairness_tags(audit)


# ---- model card ------------------------------------------------------------------------------


def test_model_card_content(audit):
    card = render_model_card(audit, PromotionRecord(promote=True, reasons=["no champion yet"]))
    assert card.startswith("# Model card\n")
    for heading in (
        "Intended use and limits",
        "Data",
        "Sensitive attributes and group sizes",
        "Test metrics beside the baselines and references",
        "Per-group rates on the test rows",
        "Column screening",
        "Thresholds and decision",
        "Projection matrices (SHA-256)",
        "Code version",
        "Configuration (credentials masked)",
    ):
        assert f"\n## {heading}\n" in card
    # data source and its SHA-256, split sizes
    assert f"SHA-256 of uci-adult/adult\\.data: `{'d' * 64}`" in card
    assert "| train | 5000 |\n| validation | 2500 |\n| test | 2500 |" in card
    # group sizes: large ones shown, small ones suppressed (never the count 12)
    assert "| sex | Female | 1650 |" in card
    assert "| race | Eskimo | suppressed (< 30) |" in card and "| 12 |" not in card
    assert "| race | Other | suppressed (< 30) |" in card
    # test metrics with intervals beside the majority baseline and unconstrained PCA
    assert "| accuracy | 0.822 (0.811–0.832) | 0.848 (0.838–0.858) | 0.761 |" in card
    assert "| dp_difference | 0.023 (0.003–0.043) | 0.181 (0.161–0.201) | 0.000 |" in card
    intersection = (
        "| dp_difference\\.intersection | 0.046 (0.006–0.086) | 0.362 (0.322–0.402) | - |"
    )
    assert intersection in card
    assert "pca/logreg@lambda=0 (baseline: unconstrained PCA)" in card
    # thresholds, gate and decision with the reasons (a pipe in a reason is escaped)
    assert "- Gate: `upper_bound`" in card and "- `max_dp_difference` = 0.05" in card
    assert "- Decision: **PROMOTED to champion**" in card and "  - no champion yet" in card
    chosen = markdown_text(render(audit.selection.decision.reasons[0]))
    assert f"  - {chosen}" in card
    assert "beats majority \\| by 0.06" in card
    # projection hashes of the chosen variant, code version
    assert f"| fair_pca/components_ | `{'a' * 64}` |" in card and "c" * 64 not in card
    assert "fairpca 0.1.0, git commit `0123abc`" in card
    assert "fair_pca: a sensitive attribute is still predictable" in card
    # config without credentials
    assert "s3cret" not in card and "alice" not in card and "do-not-print" not in card
    assert "token=abc" not in card and "api_token" not in card
    assert "https\\://\\*\\*\\*@mlflow\\.example\\.org/" in card


def test_model_card_does_not_change_its_input_and_renders_the_same_from_audit_json(audit):
    before = audit.model_copy(deep=True)
    card = render_model_card(audit)
    assert audit == before
    # audit.json read back (as relog reads it) gives the card written at audit time
    assert render_model_card(AuditRecord.model_validate_json(audit.model_dump_json())) == card


def test_model_card_says_not_promoted(audit):
    reason = Reason(kind=Kind.NOT_ELIGIBLE, decides=True, subject="pca/logreg",
                    flags=("none_eligible",))  # fmt: skip
    decision = DecisionRecord(promote=False, reasons=[reason])
    card = render_model_card(replaced(audit, "selection", decision=decision))
    assert "- Decision: **NOT promoted**" in card
    assert f"  - {markdown_text(render(reason))}" in card


@pytest.mark.parametrize(
    ("uri", "masked"),
    [
        ("http://u:p@host:5000/path?x=1", "http://***@host:5000/path"),
        ("sqlite:///mlflow.db", "sqlite:///mlflow.db"),
        ("databricks", "databricks"),
        ("postgresql://user@db/mlflow", "postgresql://***@db/mlflow"),
        # passwords urlsplit refuses or misreads
        ("https://user:pw@[host/m", "https://***@[host/m"),
        ("https://u:p#ss@h/m", "https://***@h/m"),
        ("https://u:p?ss@h/m", "https://***@h/m"),
        ("https://h/a@b", "https://h/a@b"),  # an "@" in the path is no credential
    ],
)
def test_mask_credentials(uri, masked):
    assert mask_credentials(uri) == masked


# ---- registration and loading against a real MLflow store ------------------------------------


def _pipelines_of_every_kind():
    """Fitted pipelines that hold every variant and every classifier the audit can register
    (German): each variant with logreg, each classifier after PCA (types of the two steps
    do not depend on each other)."""
    import numpy as np
    from sklearn.pipeline import Pipeline

    from fairpca.datasets import load_dataset
    from fairpca.flows.config import CLASSIFIERS, VARIANTS
    from fairpca.tasks.represent import (
        make_preprocessor,
        make_representation,
        uses_sensitive_features,
    )
    from fairpca.tasks.sweep import fit_classifier

    data = load_dataset("german")
    y = data.y.to_numpy()
    preprocess = make_preprocessor(data.X)
    Z = np.asarray(preprocess.fit_transform(data.X), dtype=float)
    pairs = [(variant, "logreg") for variant in VARIANTS]
    pairs += [("pca", classifier) for classifier in CLASSIFIERS if classifier != "logreg"]
    for variant, classifier in pairs:
        represent = make_representation(variant, 2, equalize_covariance=0.5, seed=0)
        if uses_sensitive_features(represent):
            represent.fit(Z, y, sensitive_features=data.sensitive)
        else:
            represent.fit(Z)
        if "tradeoff" in represent.get_params():
            represent.set_params(tradeoff=0.5)
        fitted = fit_classifier(classifier, represent.transform(Z), y, seed=0, max_rows=300)
        yield Pipeline([("preprocess", preprocess), ("represent", represent), ("classify", fitted)])


def test_trusted_types_cover_every_pipeline_the_audit_registers():
    import skops.io

    from fairpca.tasks.trust import TRUSTED_TYPES

    needed = set()
    for pipeline in _pipelines_of_every_kind():
        needed |= set(skops.io.get_untrusted_types(data=skops.io.dumps(pipeline)))
    assert needed == TRUSTED_TYPES


@pytest.fixture(scope="module")
def registered(prefect_harness, mlflow_store, tmp_path_factory):
    """A tiny German audit logged to the session's MLflow store (default model name)."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig

    config = AuditConfig(
        dataset="german",
        k=10,  # k=2 leaves German no useful classifier: nothing would be registered
        variants=["pca", "fair_pca"],
        lambdas=[0.0, 1.0],
        classifiers=["linear_svm"],
        tracking_uri=mlflow_store[0],
        output_dir=tmp_path_factory.mktemp("registry") / "out",
        experiment_name="registry-tests",
        thresholds={"max_dp_difference": 1.0, "max_eo_difference": 1.0},
    )
    return config, fairness_audit(config)


def test_audit_registers_under_its_definition_with_card_and_tags(registered, mlflow_store):
    import json

    from fairpca.tasks.registry import DEFINITION_TAG, MODEL_FILE_SHA_TAG
    from fairpca.tasks.report import DESCRIPTION_MAX_CHARS
    from fairpca.tasks.trust import sha256_file

    _config, result = registered
    _uri, client = mlflow_store
    assert result.model_name == "fairpca-german-bad_credit-age"
    model = client.get_registered_model(result.model_name)
    assert json.loads(model.tags[DEFINITION_TAG]) == {
        "source": "german",
        "label": "bad_credit",
        "positive_label": None,
        "sensitive": ["age"],
    }
    version = client.get_model_version(result.model_name, result.model_version)
    out_dir = Path(result.output_dir)
    card = (out_dir / "model_card.md").read_text()
    assert card.startswith("# Model card\n")
    # a concise description (the verdict), the full card one link away
    assert len(version.description) < DESCRIPTION_MAX_CHARS < len(card) + DESCRIPTION_MAX_CHARS
    assert version.description.startswith(("PROMOTED to champion: ", "NOT promoted"))
    assert f"`runs:/{result.run_id}/model_card.md`" in version.description
    assert "| chosen | " in version.description and "| majority class |" in version.description
    logged = Path(client.download_artifacts(result.run_id, "model_card.md", str(out_dir / "dl")))
    assert logged.read_text() == card
    assert version.tags[MODEL_FILE_SHA_TAG] == sha256_file(out_dir / "model" / "model.skops")
    # the card carries the bundled file's published SHA-256 and the code version
    assert "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871" in card
    assert "fairpca 0.1.0, git commit" in card


def test_registering_the_same_run_again_returns_its_version(registered, mlflow_store):

    from fairpca.tasks.mlflow_logging import read_audit
    from fairpca.tasks.registry import register_version

    _config, result = registered
    _uri, client = mlflow_store
    audit = read_audit(Path(result.output_dir))
    again = register_version(
        client, audit, source="unused", run_id=result.run_id, model_id=None, description="x",
        model_sha256="0" * 64,
    )  # fmt: skip
    assert again == result.model_version
    assert len(client.search_model_versions(f"run_id = '{result.run_id}'")) == 1


def test_a_model_of_another_definition_is_refused(registered, mlflow_store):
    from fairpca.tasks.registry import (
        AUDITED_ANOTHER_WAY,
        ModelDefinitionMismatch,
        check_model_definition,
    )

    _config, result = registered
    _uri, client = mlflow_store
    other = definition_of(_source(dataset="german", sensitive=["sex"]))
    refused = matching(AUDITED_ANOTHER_WAY, name=result.model_name, text=definition_json(other))
    with pytest.raises(ModelDefinitionMismatch, match=refused):
        check_model_definition(client, result.model_name, other)


def test_a_model_that_no_audit_created_is_refused_unless_empty(mlflow_store):
    from fairpca.tasks.registry import (
        DEFINITION_TAG,
        NOT_CREATED_BY_AN_AUDIT,
        ModelDefinitionMismatch,
        check_model_definition,
    )

    _uri, client = mlflow_store
    definition = definition_of(_source(dataset="german", sensitive=["age"]))
    client.create_registered_model("registry-unrelated")
    client.create_model_version("registry-unrelated", source="s3://nowhere/model")
    client.set_registered_model_alias("registry-unrelated", "champion", "1")
    refused = matching(NOT_CREATED_BY_AN_AUDIT, name="registry-unrelated", tag=DEFINITION_TAG)
    with pytest.raises(ModelDefinitionMismatch, match=refused):
        check_model_definition(client, "registry-unrelated", definition)
    model = client.get_registered_model("registry-unrelated")
    assert model.aliases == {"champion": 1} and model.tags == {}
    client.create_registered_model("registry-empty")  # no versions yet: adopted
    check_model_definition(client, "registry-empty", definition)
    assert DEFINITION_TAG in client.get_registered_model("registry-empty").tags


def test_registered_pipeline_loads_verified_and_refuses_tampering(registered, mlflow_store):

    from fairpca.datasets import load_dataset
    from fairpca.tasks.registry import (
        MODEL_FILE_SHA_TAG,
        NOT_REGISTERED_BY_FAIRPCA,
        UntrustedModelError,
        load_registered_pipeline,
        load_skops_pipeline,
    )
    from fairpca.tasks.trust import SHA256_CHANGED

    _config, result = registered
    uri, client = mlflow_store
    name, version = result.model_name, result.model_version
    pipeline = load_registered_pipeline(uri, name, version)
    local = load_skops_pipeline(Path(result.output_dir) / "model")
    X = load_dataset("german").X.head(50)
    assert (pipeline.predict(X) == local.predict(X)).all()

    recorded = client.get_model_version(name, version).tags[MODEL_FILE_SHA_TAG]
    client.set_model_version_tag(name, version, MODEL_FILE_SHA_TAG, "0" * 64)
    try:
        changed = matching(SHA256_CHANGED, expected="0" * 64)
        with pytest.raises(UntrustedModelError, match=changed):
            load_registered_pipeline(uri, name, version)
        client.delete_model_version_tag(name, version, MODEL_FILE_SHA_TAG)
        with pytest.raises(UntrustedModelError, match=matching(NOT_REGISTERED_BY_FAIRPCA)):
            load_registered_pipeline(uri, name, version)
    finally:
        client.set_model_version_tag(name, version, MODEL_FILE_SHA_TAG, recorded)


def test_card_and_tags_without_an_unconstrained_pca_baseline(audit):
    audit = replaced(audit, "selection.baselines", pca=None)
    audit = replaced(audit, "selection.chosen", lambda_=None)
    card = render_model_card(audit)
    assert "| accuracy | 0.822 (0.811–0.832) | 0.761 |\n" in card
    assert "unconstrained PCA" not in card.split("## Test metrics")[1].split("## ")[0]
    assert "lambda n/a)" in card
    assert fairness_tags(audit)["fairness.baseline.accuracy"] == "0.761100"


# ---- demotions, attestations and the scorer's loader ----------------------------------------


def test_demoted_models_are_the_content_digests_decide_promotion_compares(mlflow_store):
    from fairpca.tasks.registry import (
        ALIAS_REFUSED_TAG,
        MODEL_DIGEST_TAG,
        MODEL_FILE_SHA_TAG,
        NEEDS_REVIEW_TAG,
        demoted_models,
    )

    _uri, client = mlflow_store
    client.create_registered_model("demoted-digests")
    kinds = {"1": {NEEDS_REVIEW_TAG: "drift"}, "2": {ALIAS_REFUSED_TAG: "x"}, "3": {}}
    for version, tags in kinds.items():
        tags |= {MODEL_DIGEST_TAG: f"content-{version}", MODEL_FILE_SHA_TAG: f"file-{version}"}
        client.create_model_version("demoted-digests", source=f"/nowhere/{version}", tags=tags)
    assert demoted_models(client, "demoted-digests") == {"content-1", "content-2"}
    assert demoted_models(client, "no-such-model") == frozenset()


@pytest.fixture(scope="module")
def scorer_registry(mlflow_store):
    """Version 1 of ``scored``: a skops LogisticRegression with fairpca's file SHA-256 tag
    and its ONNX graph (the ``onnx`` flavour beside); version 2: the same model cloudpickled,
    no graph; version 3: skops with the SHA-256 tag, no graph."""
    import tempfile

    import mlflow
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from fairpca.tasks.registry import MODEL_FILE_SHA_TAG, download_version
    from fairpca.tasks.trust import sha256_file, skops_file

    uri, client = mlflow_store
    X = pd.DataFrame(np.random.default_rng(0).normal(size=(40, 2)), columns=["x1", "x2"])
    model = LogisticRegression().fit(X, (X["x1"] > 0).astype(int))
    script = registrant()
    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
            mlflow.sklearn.save_model(model, f"{tmp}/model", serialization_format="skops",
                                      pip_requirements=["scikit-learn"])  # fmt: skip
            script.add_graph(Path(tmp, "model"), model, ["x1", "x2"])
            mlflow.log_artifacts(f"{tmp}/model", "model")
            script.register_folder("scored", f"{run.info.artifact_uri}/model", run.info.run_id)
        for serialization in ("cloudpickle", "skops"):  # versions 2 and 3: no graph
            with mlflow.start_run():
                info = mlflow.sklearn.log_model(
                    model, name="model", serialization_format=serialization,
                    pip_requirements=["scikit-learn"],
                )  # fmt: skip
            mlflow.register_model(info.model_uri, "scored")
    finally:
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])
    for version in ("1", "3"):
        with tempfile.TemporaryDirectory() as tmp:
            local = download_version(client, uri, "scored", version, Path(tmp))
            client.set_model_version_tag(
                "scored", version, MODEL_FILE_SHA_TAG, sha256_file(skops_file(local))
            )
    return uri, client, model, X


def _publish_ledger(client, key, passes: dict[str, str]) -> None:
    """The gate's ledger of ``scored`` under the policy ``p...``, naming ``passes``."""
    from fairpca.tasks.gate_ledger import LEDGER_TAG, Ledger, now_text, sign_ledger

    text = sign_ledger(Ledger("scored", "p" * 64, 1, now_text(), passes), key)
    client.set_registered_model_tag("scored", LEDGER_TAG, text)


def _attest(client, uri, holder, key, **changes):
    """Sign (with ``key``) the gate's pass for version ``holder`` of ``scored``, with the
    statement's fields ``changes`` replaced, set it on ``holder`` and name it in the gate's
    ledger as the holder's latest verdict."""
    import tempfile
    from dataclasses import replace

    from fairpca.tasks.gate_ledger import attestation_digest
    from fairpca.tasks.onnx_runtime import GraphRefused, read_graph
    from fairpca.tasks.registry import ATTESTATION_TAG, download_version
    from fairpca.tasks.trust import Attestation, files_digest, sign_attestation

    with tempfile.TemporaryDirectory() as tmp:
        local = download_version(client, uri, "scored", holder, Path(tmp))
        digest, graph = files_digest(local), "g" * 64
        with contextlib.suppress(GraphRefused):
            graph = read_graph(local).sha256
    statement = Attestation(
        model="scored", version=holder, model_digest=digest, graph_digest=graph,
        policy_digest="p" * 64,
        verdict="passed", gate_run_id="r", flow_run_id="f", signed_at="t",
    )  # fmt: skip
    text = sign_attestation(replace(statement, **changes), key)
    client.set_model_version_tag("scored", holder, ATTESTATION_TAG, text)
    _publish_ledger(client, key, {holder: attestation_digest(text)})


def test_load_champion_verifies_the_attestation_or_the_registered_file(
    scorer_registry, monkeypatch
):
    import secrets

    from fairpca.tasks.gate_ledger import (
        JUDGED_UNDER_ANOTHER_POLICY,
        NO_LEDGER,
        NOT_THE_LATEST_VERDICT,
    )
    from fairpca.tasks.onnx_runtime import NO_GRAPH, GraphModel
    from fairpca.tasks.registry import (
        ATTESTATION_COPIED,
        GRAPH_NOT_JUDGED,
        NO_ALIAS_HOLDER,
        NO_GRAPH_BOUND,
        NOT_ATTESTED,
        NOT_REGISTERED_BY_FAIRPCA,
        VERDICT_NOT_PASSED,
        check_attested_pass,
        load_champion,
    )
    from fairpca.tasks.trust import (
        GATE_KEY_ENV,
        GATE_PUBLIC_KEY_ENV,
        AttestationError,
        UntrustedModelError,
        gate_signing_key,
        public_key_hex,
    )

    uri, client, model, X = scorer_registry
    monkeypatch.setenv(GATE_KEY_ENV, secrets.token_hex(32))
    key = gate_signing_key()
    monkeypatch.delenv(GATE_KEY_ENV)  # a scorer holds the public key only
    monkeypatch.setenv(GATE_PUBLIC_KEY_ENV, public_key_hex(key.public_key()))
    with pytest.raises(LookupError, match=matching(NO_ALIAS_HOLDER, alias="champion")):
        load_champion("scored", tracking_uri=uri)
    client.set_registered_model_alias("scored", "champion", "1")
    with pytest.raises(AttestationError, match=matching(NO_LEDGER, model="scored")):
        load_champion("scored", tracking_uri=uri)
    _publish_ledger(client, key, {})
    with pytest.raises(AttestationError, match=re.escape(NOT_ATTESTED)):
        load_champion("scored", tracking_uri=uri)
    client.set_registered_model_alias("scored", "champion", "3")  # no gate: the skops file
    assert (load_champion("scored", tracking_uri=uri, attested=False).predict(X)
            == model.predict(X)).all()  # fmt: skip
    client.set_registered_model_alias("scored", "champion", "1")
    _attest(client, uri, "1", key, verdict="failed")
    with pytest.raises(AttestationError, match=matching(VERDICT_NOT_PASSED, verdict="failed")):
        load_champion("scored", tracking_uri=uri)
    _attest(client, uri, "1", key, version="2")
    copied_from = matching(ATTESTATION_COPIED, model="scored", version="2")
    with pytest.raises(AttestationError, match=copied_from) as copied:
        load_champion("scored", tracking_uri=uri)
    assert copied.value.tampered
    _attest(client, uri, "1", key, graph_digest="")  # signed before graphs were bound
    with pytest.raises(AttestationError, match=re.escape(NO_GRAPH_BOUND)) as unbound:
        load_champion("scored", tracking_uri=uri)
    assert not unbound.value.tampered
    _attest(client, uri, "1", key, graph_digest="e" * 64)  # another graph than the one there
    with pytest.raises(AttestationError, match=matching(GRAPH_NOT_JUDGED)) as other:
        load_champion("scored", tracking_uri=uri)
    assert other.value.tampered
    _attest(client, uri, "1", key)
    champion = load_champion("scored", tracking_uri=uri)
    assert isinstance(champion, GraphModel)  # the attested graph is served, not the pipeline
    assert (champion.predict(X) == model.predict(X)).all()
    assert (champion.predict(X[["x2", "x1"]]) == model.predict(X)).all()  # fed by name
    from fairpca.tasks.gate_ledger import LEDGER_TAG

    latest = client.get_registered_model("scored").tags[LEDGER_TAG]
    _publish_ledger(client, key, {})  # the gate's latest verdict on version 1 is not this pass
    with pytest.raises(AttestationError, match=re.escape(NOT_THE_LATEST_VERDICT)) as older:
        load_champion("scored", tracking_uri=uri)
    assert older.value.tampered
    client.set_registered_model_tag("scored", LEDGER_TAG, latest)
    with pytest.raises(AttestationError, match=re.escape(JUDGED_UNDER_ANOTHER_POLICY)):
        check_attested_pass(client, uri, "scored", "1", policy_digest="q" * 64)

    # a cloudpickled champion is never unpickled, attested by the gate or not
    client.set_registered_model_alias("scored", "champion", "2")
    _attest(client, uri, "2", key)
    with pytest.raises(UntrustedModelError, match=re.escape(NO_GRAPH)):
        load_champion("scored", tracking_uri=uri)
    with pytest.raises(UntrustedModelError, match=matching(NOT_REGISTERED_BY_FAIRPCA)):
        load_champion("scored", tracking_uri=uri, attested=False)


def test_move_alias_moves_only_from_the_holder_it_was_given(mlflow_store):
    """A decision about one holder never undoes a move someone made meanwhile."""
    from fairpca.tasks.registry import move_alias

    _, client = mlflow_store
    name = "move-from-holder"
    client.create_registered_model(name)
    for _ in range(2):
        client.create_model_version(name, source="/nowhere")

    def holder():
        version = client.get_registered_model(name).aliases.get("champion")
        return None if version is None else str(version)

    assert move_alias(client, name, "champion", "1", holder=None) and holder() == "1"
    assert not move_alias(client, name, "champion", None, holder="2") and holder() == "1"
    assert move_alias(client, name, "champion", "2", holder="1") and holder() == "2"
    assert not move_alias(client, name, "champion", "1", holder=None) and holder() == "2"
    assert move_alias(client, name, "champion", None, holder="2") and holder() is None
