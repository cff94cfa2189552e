"""The fairness gate on a real MLflow SQLite store and the Prefect test harness.

Versions are registered by the plain registrant of the end-to-end test (scikit-learn and
MLflow only, ``tests/e2e/gate_registrant.py``): a fair classifier and a biased one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import mlflow
import pytest

from fairpca.flows.gate import PolicyError, fairness_gate, load_policies
from fairpca.flows.gate_server import register_webhook, secret_fingerprint
from fairpca.flows import gate as gate_tasks

REGISTRANT = Path(__file__).resolve().parents[1] / "e2e" / "gate_registrant.py"
SECRET = "k" * 40
POLICY = """model: {model}
reference: {{path: reference.csv, label: approved, sensitive: [group]}}
thresholds: {{max_dp_difference: 0.1, max_eo_difference: 0.15}}
n_resamples: 200
"""


def _registrant():
    spec = importlib.util.spec_from_file_location("gate_registrant", REGISTRANT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("policies")
    _registrant().make_data(seed=2).to_csv(folder / "reference.csv", index=False)
    (folder / "credit.yaml").write_text(POLICY.format(model="gate-credit"))
    return folder


@pytest.fixture(scope="module")
def registry(mlflow_store):
    """Fair version 1 and biased version 2 of ``gate-credit`` in the shared store."""
    uri, client = mlflow_store
    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    registrant = _registrant()
    versions = {kind: registrant.register("gate-credit", kind) for kind in ("fair", "biased")}
    mlflow.set_tracking_uri(previous[0])
    mlflow.set_registry_uri(previous[1])
    return uri, client, versions


def _gate(uri, policy_dir, version, event="model_version.created", alias=None):
    return fairness_gate(
        model_name="gate-credit",
        version=version,
        event=event,
        alias=alias,
        policy_dir=str(policy_dir),
        tracking_uri=uri,
        return_state=True,
    )


# ---- policy files ----------------------------------------------------------------------------


def test_policy_dir_is_read_and_reference_resolved_inside_it(policy_dir):
    policy = load_policies(policy_dir)["gate-credit"]
    assert policy.reference.path == (policy_dir / "reference.csv").resolve()
    assert policy.protected_aliases == ["champion"]
    assert policy.min_group_size == 30
    assert policy.thresholds.max_dp_difference == 0.1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (POLICY.format(model="m") + "colour: red\n", "colour: Extra inputs are not permitted"),
        (POLICY.format(model="m").replace("0.1,", "1.5,"), "thresholds.max_dp_difference"),
        (POLICY.format(model="m").replace("reference.csv", "../x.csv"), "inside the policy"),
        (POLICY.format(model="m").replace("reference.csv", "gone.csv"), "does not exist"),
        (POLICY.format(model="m").replace("reference.csv", "ref.xlsx"), ".csv or .parquet"),
        (POLICY.format(model="m") + "protected_aliases: ['bad alias']\n", "alias names"),
        ("model: [", "not valid YAML"),
    ],
)
def test_bad_policy_files_fail_with_the_file_and_field(tmp_path, text, message):
    (tmp_path / "reference.csv").write_text("x1,group,approved\n1,0,1\n")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(PolicyError, match=message) as error:
        load_policies(tmp_path)
    assert "bad.yaml" in str(error.value) or "YAML" in str(error.value)


def test_missing_or_empty_policy_dir_and_duplicate_models(tmp_path, monkeypatch):
    monkeypatch.delenv("FAIRPCA_GATE_POLICY_DIR", raising=False)
    with pytest.raises(PolicyError, match="--policy-dir"):
        load_policies(None)
    with pytest.raises(PolicyError, match=r"no \*\.yaml"):
        load_policies(tmp_path)
    (tmp_path / "reference.csv").write_text("x1,group,approved\n1,0,1\n")
    (tmp_path / "a.yaml").write_text(POLICY.format(model="same"))
    (tmp_path / "b.yml").write_text(POLICY.format(model="same"))
    with pytest.raises(PolicyError, match="two policy files"):
        load_policies(tmp_path)


# ---- the verdict -----------------------------------------------------------------------------


def test_constant_classifier_never_passes(policy_dir):
    policy = load_policies(policy_dir)["gate-credit"]
    constant = {"accuracy": 0.52, "dp_difference": 0.0, "eo_difference": 0.0}
    constant.update({f"{m}.ci95_{s}": 0.0 for m in ("dp_difference", "eo_difference")
                     for s in ("low", "high")})  # fmt: skip
    constant.update({"accuracy.ci95_low": 0.5, "accuracy.ci95_high": 0.54})
    status, reasons = gate_tasks.verdict(constant, policy, majority=0.52)
    assert status == gate_tasks.FAILED
    assert any("does not beat the majority class" in r for r in reasons)
    # the same differences from a classifier that is useful (audit's eligibility rules)
    useful = {
        **constant,
        "accuracy": 0.8,
        "balanced_accuracy": 0.78,
        "balanced_accuracy.ci95_low": 0.74,
        "balanced_accuracy.ci95_high": 0.82,
        "positive_rate": 0.45,
        "base_rate": 0.48,
        "one_class_share": 0.55,
        "selection_rate_ratio": 0.95,
        "selection_rate_ratio.ci95_low": 0.85,
        "selection_rate_ratio.ci95_high": 1.0,
    }
    assert gate_tasks.verdict(useful, policy, 0.52) == (gate_tasks.PASSED, [])
    assert gate_tasks.verdict({**useful, "balanced_accuracy.ci95_low": 0.5}, policy, 0.52)[0] == (
        gate_tasks.FAILED
    )


@pytest.mark.flow
def test_fair_version_passes_and_biased_fails_with_metrics_and_card(
    prefect_harness, registry, policy_dir
):
    uri, client, versions = registry
    fair = _gate(uri, policy_dir, versions["fair"])
    biased = _gate(uri, policy_dir, versions["biased"])
    assert fair.is_completed() and "passed" in fair.message
    assert biased.is_completed() and "failed" in biased.message
    fair_tags = client.get_model_version("gate-credit", versions["fair"]).tags
    biased_version = client.get_model_version("gate-credit", versions["biased"])
    assert fair_tags[gate_tasks.STATUS_TAG] == "passed"
    assert biased_version.tags[gate_tasks.STATUS_TAG] == "failed"
    reasons = biased_version.tags[gate_tasks.REASONS_TAG]
    assert "DP difference 0." in reasons and "> max 0.1" in reasons  # the default: estimates
    for tags in (fair_tags, biased_version.tags):
        low, value, high = (
            float(tags[f"fairness.gate.dp_difference{s}"]) for s in (".ci95_low", "", ".ci95_high")
        )
        assert low <= value <= high
    assert float(biased_version.tags["fairness.gate.dp_difference"]) > 0.2
    assert float(fair_tags["fairness.gate.dp_difference.ci95_high"]) < 0.1
    assert biased_version.description.startswith("# Fairness gate: gate\\-credit version")
    assert "**Status: failed**" in biased_version.description
    run = client.get_run(biased_version.tags["fairness.gate.run_id"])
    assert run.data.metrics["dp_difference"] == pytest.approx(
        float(biased_version.tags["fairness.gate.dp_difference"]), abs=1e-6
    )


@pytest.mark.flow
def test_unloadable_version_gets_status_error(prefect_harness, registry, policy_dir):
    uri, client, _ = registry
    client.create_registered_model("gate-broken")
    version = client.create_model_version("gate-broken", source="/nonexistent/model").version
    (policy_dir / "broken.yaml").write_text(POLICY.format(model="gate-broken"))
    try:
        state = fairness_gate(
            model_name="gate-broken", version=str(version), event="model_version.created",
            policy_dir=str(policy_dir), tracking_uri=uri, return_state=True,
        )  # fmt: skip
    finally:
        (policy_dir / "broken.yaml").unlink()
    assert state.is_failed() and "error" in state.message
    tags = client.get_model_version("gate-broken", str(version)).tags
    assert tags[gate_tasks.STATUS_TAG] == "error"
    assert tags[gate_tasks.REASONS_TAG].startswith("evaluation failed")


@pytest.mark.flow
def test_protected_alias_moves_back_from_a_failed_version(prefect_harness, registry, policy_dir):
    uri, client, versions = registry
    fair, biased = versions["fair"], versions["biased"]
    for version in (fair, biased):
        if gate_tasks.STATUS_TAG not in client.get_model_version("gate-credit", version).tags:
            _gate(uri, policy_dir, version)
    client.set_registered_model_alias("gate-credit", "champion", fair)
    kept = _gate(uri, policy_dir, fair, "model_version_alias.created", "champion")
    assert "stays on version" in kept.message
    model = client.get_registered_model("gate-credit")
    assert model.tags[gate_tasks.last_passed_tag("champion")] == fair

    client.set_registered_model_alias("gate-credit", "champion", biased)
    undone = _gate(uri, policy_dir, biased, "model_version_alias.created", "champion")
    assert f"moved back to version {fair}" in undone.message
    assert str(client.get_registered_model("gate-credit").aliases["champion"]) == fair
    refused = client.get_model_version("gate-credit", biased).tags[gate_tasks.ALIAS_REFUSED_TAG]
    assert "status 'failed'" in refused
    # the gate's own move emits an alias event for the fair version: it ends there (no loop)
    again = _gate(uri, policy_dir, fair, "model_version_alias.created", "champion")
    assert "stays on version" in again.message
    # an event whose alias has moved on since changes nothing
    stale = _gate(uri, policy_dir, biased, "model_version_alias.created", "champion")
    assert "no longer points" in stale.message
    assert str(client.get_registered_model("gate-credit").aliases["champion"]) == fair
    other = _gate(uri, policy_dir, biased, "model_version_alias.created", "staging")
    assert "not protected" in other.message


def test_version_whose_gate_has_not_finished_loses_the_alias(registry):
    _, client, _ = registry
    client.create_registered_model("gate-pending")
    version = client.create_model_version("gate-pending", source="/nowhere").version
    client.set_model_version_tag("gate-pending", version, gate_tasks.STATUS_TAG, "pending")
    client.set_registered_model_alias("gate-pending", "champion", version)
    message = gate_tasks.enforce_alias(client, "gate-pending", "champion", str(version))
    assert "status 'pending'" in message and "removed" in message
    assert "champion" not in client.get_registered_model("gate-pending").aliases


# ---- the webhook -----------------------------------------------------------------------------


def test_register_webhook_is_idempotent(mlflow_store, monkeypatch):
    monkeypatch.setenv("MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS", "true")
    _, client = mlflow_store
    url = "https://127.0.0.1:8765/webhook"
    name = "gate-test-hook"
    first = register_webhook(client, url=url, models=["a", "b"], secret=SECRET, name=name)
    hook = client.get_webhook(first[1])
    second = register_webhook(client, url=url, models=["b", "a"], secret=SECRET, name=name)
    assert (first[0], second) == ("created", ("unchanged", first[1]))
    assert client.get_webhook(first[1]).last_updated_timestamp == hook.last_updated_timestamp
    assert sorted(str(e) for e in hook.events) == [
        "model_version.created",
        "model_version_alias.created",
    ]
    assert SECRET not in hook.description and secret_fingerprint(SECRET) in hook.description
    rotated = register_webhook(client, url=url, models=["a", "b"], secret="n" * 40, name=name)
    assert rotated == ("updated", first[1])
    assert len([w for w in client.list_webhooks() if w.name == name]) == 1


# ---- the command line ------------------------------------------------------------------------


def test_cli_refuses_a_missing_or_short_secret_before_starting(policy_dir, monkeypatch):
    from typer.testing import CliRunner

    from fairpca.flows.cli import app

    monkeypatch.setenv("FAIRPCA_WEBHOOK_SECRET", "short")
    runner = CliRunner()
    serve = runner.invoke(app, ["gate", "serve", "--policy-dir", str(policy_dir)])
    register = runner.invoke(app, ["gate", "register", "--model", "m", "--url", "https://x/w"])
    for result in (serve, register):
        assert result.exit_code == 2
        text = " ".join(result.output.split())  # rich wraps long lines
        assert "FAIRPCA_WEBHOOK_SECRET" in text and "short" not in text
    half = runner.invoke(app, ["gate", "serve", "--certfile", "gate.crt"])
    assert half.exit_code == 2 and "--keyfile" in half.output


def test_cli_refuses_a_bad_policy_dir_before_serving(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from fairpca.flows.cli import app

    monkeypatch.setenv("FAIRPCA_WEBHOOK_SECRET", SECRET)
    result = CliRunner().invoke(app, ["gate", "serve", "--policy-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())
