"""The fairness gate on a real MLflow SQLite store and the Prefect test harness.

Versions are registered by the plain registrant of the end-to-end test (scikit-learn and
MLflow only, ``tests/e2e/gate_registrant.py``): a fair classifier and a biased one, saved with
skops. The attacks are the ones a user with write access to the registry ran: a hand-set
status tag, an alias moved while no receiver ran, model files changed behind a valid
attestation, an attestation copied onto another version, gate parameters pointing
elsewhere, a pyfunc that steals the gate's key, a pass signed with another key, an alias set
before the verdict, an event lost, a policy edited.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import time
from pathlib import Path

import mlflow
import pytest
from gate_setup import POLICY, registrant
from messages import matching

from fairpca.flows import gate as gate_tasks
from fairpca.flows.gate import (
    PolicyError,
    fairness_gate,
    fairness_gate_reconcile,
    gate_settings,
    load_policies,
)
from fairpca.flows.gate_server import register_webhook, secret_fingerprint
from fairpca.tasks.decision import Kind
from fairpca.tasks.onnx_runtime import NO_GRAPH
from fairpca.tasks.registry import ATTESTATION_TAG, TAMPERING_TAG
from fairpca.tasks.trust import GATE_KEY_ENV, verify_attestation

SECRET = "k" * 40


@pytest.fixture(scope="module", autouse=True)
def gate_key():
    """The gate worker's private key (the environment, as a worker would be given it)."""
    before = os.environ.get(GATE_KEY_ENV)
    os.environ[GATE_KEY_ENV] = secrets.token_hex(32)
    yield os.environ[GATE_KEY_ENV]
    if before is None:
        os.environ.pop(GATE_KEY_ENV, None)
    else:
        os.environ[GATE_KEY_ENV] = before


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("policies")
    registrant().make_data(seed=2).to_csv(folder / "reference.csv", index=False)
    (folder / "credit.yaml").write_text(POLICY.format(model="gate-credit"))
    return folder


@pytest.fixture(scope="module")
def registry(mlflow_store):
    """Fair version 1 and biased version 2 of ``gate-credit`` in the shared store."""
    uri, client = mlflow_store
    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    script = registrant()
    versions = {
        kind: script.register("gate-credit", kind, "skops") for kind in ("fair", "biased")
    }
    versions["fair_skops"] = script.register("gate-credit", "fair", "skops")
    mlflow.set_tracking_uri(previous[0])
    mlflow.set_registry_uri(previous[1])
    return uri, client, versions


def _gate(uri, policy_dir, version, event="model_version.created", alias=None, model="gate-credit"):
    return fairness_gate(
        model_name=model,
        version=version,
        event=event,
        alias=alias,
        policy_dir=str(policy_dir),
        tracking_uri=uri,
        return_state=True,
    )


def _gated(uri, client, policy_dir, *versions):
    """Each version judged by the gate once (its attestation written)."""
    for version in versions:
        if ATTESTATION_TAG not in client.get_model_version("gate-credit", version).tags:
            _gate(uri, policy_dir, version)


def _register(uri, kind, name="gate-credit", **options) -> str:
    options.setdefault("serialization", "skops")
    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        return registrant().register(name, kind, **options)
    finally:
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])


def _champion(client, model="gate-credit") -> str | None:
    holder = client.get_registered_model(model).aliases.get("champion")
    return None if holder is None else str(holder)


def _own_policy(tmp_path, policy_dir, model, extra="") -> Path:
    """A policy folder watching only ``model`` (its reconciler runs see nothing else)."""
    folder = tmp_path / f"policies-{model}"
    folder.mkdir(exist_ok=True)
    (folder / "reference.csv").write_bytes((policy_dir / "reference.csv").read_bytes())
    (folder / "policy.yaml").write_text(POLICY.format(model=model) + extra)
    return folder


def _hold(uri, client, policy_dir, version) -> None:
    """``champion`` on ``version`` as a registry user sets it, and the gate's alias event."""
    client.set_registered_model_alias("gate-credit", "champion", version)
    state = _gate(uri, policy_dir, version, "model_version_alias.created", "champion")
    assert "stays on version" in state.message, state.message


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
        (POLICY.format(model="m") + "protected_aliases: ['bad alias']\n", "protected_aliases"),
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
    with pytest.raises(PolicyError, match=matching(gate_tasks.TWO_POLICY_FILES, model="same")):
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
    assert all(r.kind == Kind.FAILS_RULE and r.decides for r in reasons)
    assert {r.rows for r in reasons} == {"reference"}  # measured on the policy's reference rows
    chance = next(r for r in reasons if "chance" in r.flags)  # no balanced accuracy
    assert math.isnan(chance.numbers["value"]) and chance.numbers["margin"] > 0
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
    assert biased_version.description.startswith("# Fairness gate: gate-credit version")
    assert "**Status: failed**" in biased_version.description
    run = client.get_run(biased_version.tags["fairness.gate.run_id"])
    assert run.data.metrics["dp_difference"] == pytest.approx(  # published with 2 decimals
        float(biased_version.tags["fairness.gate.dp_difference"]), abs=0.005
    )
    # each verdict is signed: this version, its files, this policy, the evaluation run
    policy_digest = gate_tasks.policy_digest(load_policies(policy_dir)["gate-credit"])
    for version, tags, status in ((versions["fair"], fair_tags, "passed"),
                                  (versions["biased"], biased_version.tags, "failed")):  # fmt: skip
        attestation = verify_attestation(tags[ATTESTATION_TAG])
        assert (attestation.model, attestation.version) == ("gate-credit", version)
        assert (attestation.verdict, attestation.policy_digest) == (status, policy_digest)
        assert attestation.gate_run_id == tags["fairness.gate.run_id"]
        assert (
            attestation.model_digest in client.get_model_version("gate-credit", version).description
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
    assert ATTESTATION_TAG not in tags


@pytest.mark.flow
def test_protected_alias_moves_back_from_a_failed_version(prefect_harness, registry, policy_dir):
    uri, client, versions = registry
    fair, biased = versions["fair"], versions["biased"]
    _gated(uri, client, policy_dir, fair, biased)
    _hold(uri, client, policy_dir, fair)
    model = client.get_registered_model("gate-credit")
    assert model.tags[gate_tasks.last_passed_tag("champion")].split(",")[0] == fair

    client.set_registered_model_alias("gate-credit", "champion", biased)
    undone = _gate(uri, policy_dir, biased, "model_version_alias.created", "champion")
    assert f"moved back to version {fair}" in undone.message
    assert _champion(client) == fair
    tags = client.get_model_version("gate-credit", biased).tags
    assert "signed verdict is 'failed'" in tags[gate_tasks.ALIAS_REFUSED_TAG]
    assert TAMPERING_TAG not in tags  # a fail is no forgery
    # the gate's own move emits an alias event for the fair version: it ends there (no loop)
    again = _gate(uri, policy_dir, fair, "model_version_alias.created", "champion")
    assert "stays on version" in again.message
    # an event whose alias has moved on since changes nothing
    stale = _gate(uri, policy_dir, biased, "model_version_alias.created", "champion")
    assert "no longer points" in stale.message
    assert _champion(client) == fair
    other = _gate(uri, policy_dir, biased, "model_version_alias.created", "staging")
    assert "not protected" in other.message


# A gate's evaluation as a worker runs it (a fresh process that imports the flow's module),
# watching MLflow's import-hook lock: any module imported while it is held could deadlock against a
# thread that imports meanwhile (the thread holds the import lock and waits for this one).
_UNDER_HOOK_LOCK = """
import sys
import fairpca.flows.gate as gate
assert not [m for m in gate.EVALUATION_MODULES if m in sys.modules], "loaded at import"
from mlflow.utils import import_hooks

lock, seen = import_hooks._post_import_hooks_lock, []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name not in sys.modules and lock._is_owned():
            seen.append(name)

def watch_first(*args, **kwargs):  # MLflow puts its finder first when it registers a hook
    result = register(*args, **kwargs)
    sys.meta_path[:] = [Watch(), *(f for f in sys.meta_path if not isinstance(f, Watch))]
    return result

register = import_hooks.register_generic_import_hook
import_hooks.register_generic_import_hook = watch_first
sys.meta_path.insert(0, Watch())
policy = gate.load_policies(sys.argv[2])["gate-credit"]
client = gate._client(sys.argv[1])
reference = policy.reference
frame = gate.read_reference(reference.path, reference.label, reference.sensitive)
local = gate.download_version(client, sys.argv[1], "gate-lock", sys.argv[3], sys.argv[4])
metrics, _ = gate.evaluate_version(
    gate.read_graph(local), frame, label=reference.label,
    evaluator_config=policy.evaluator_config(), experiment_name="gate-lock", run_name="lock",
    run_tags={},
)
print(f"dp_difference {metrics['dp_difference']:.3f}", "|", sorted(set(seen)))
"""


@pytest.mark.slow
def test_a_gate_run_imports_nothing_under_mlflows_import_hook_lock(registry, policy_dir, tmp_path):
    """The evaluator registry's hook imported ~200 modules under the lock on the first
    evaluation; the gate loads them first, in order, when it first evaluates (deadlock
    reproduced with a second thread importing pyparsing at that moment; see the module's
    EVALUATION_MODULES). Importing the gate's module imports none of them."""
    import subprocess
    import sys

    uri, _, _ = registry
    version = _register(uri, "fair", name="gate-lock")  # not gate-credit's gated versions
    done = subprocess.run(
        [sys.executable, "-c", _UNDER_HOOK_LOCK, uri, str(policy_dir), version, str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    evaluated, seen = done.stdout.strip().splitlines()[-1].split(" | ")
    assert evaluated.startswith("dp_difference 0."), done.stdout
    assert seen == "[]", f"imported under MLflow's import-hook lock: {seen}"


def _an_hour(*args, **kwargs) -> None:
    """An evaluation that would take an hour, in short sleeps: Prefect's timeout stops it by
    raising in its thread (pytest-timeout holds SIGALRM, so Prefect cannot use the alarm
    that also stops a blocking call, as it does in a worker's flow-run process)."""
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.flow
def test_a_gate_run_past_its_deadline_fails_and_the_version_stays_pending(
    prefect_harness, registry, policy_dir, monkeypatch
):
    from fairpca.flows.gate import TIMEOUT_SECONDS

    assert fairness_gate.timeout_seconds == TIMEOUT_SECONDS
    uri, client, _ = registry
    client.create_registered_model("gate-slow")
    version = client.create_model_version("gate-slow", source="/nowhere").version
    (policy_dir / "slow.yaml").write_text(POLICY.format(model="gate-slow"))
    monkeypatch.setattr(gate_tasks, "download_version", lambda *args: Path(args[-1]))
    monkeypatch.setattr(gate_tasks, "read_graph", lambda local: None)
    monkeypatch.setattr(gate_tasks, "evaluate_version", _an_hour)
    started = time.monotonic()
    try:
        # 12 s: the deadline must fall in the evaluation, after the steps before it (about
        # 1 s here, with the download and the checks replaced; a timeout raised in those
        # steps is the version's error verdict)
        state = fairness_gate.with_options(timeout_seconds=12)(
            model_name="gate-slow", version=str(version), event="model_version.created",
            policy_dir=str(policy_dir), tracking_uri=uri, return_state=True,
        )  # fmt: skip
    finally:
        (policy_dir / "slow.yaml").unlink()
    assert time.monotonic() - started < 300  # the evaluation alone would take an hour
    assert state.is_failed() and "timeout" in state.message.lower(), state.message
    tags = client.get_model_version("gate-slow", str(version)).tags
    assert tags[gate_tasks.STATUS_TAG] == gate_tasks.PENDING


@pytest.mark.flow
def test_a_hand_set_pass_tag_never_keeps_an_alias(prefect_harness, registry, policy_dir):
    """Issue 28, 1: ``fairness.gate.status=passed`` set on the failed version and
    ``champion`` moved to it: the alias event and ``fairpca gate reconcile`` both move it
    back, and the version is marked as tampered with."""
    from cli_invoke import invoke

    uri, client, versions = registry
    fair, biased = versions["fair"], versions["biased"]
    _gated(uri, client, policy_dir, *versions.values())  # the reconciler judges none then
    _hold(uri, client, policy_dir, fair)
    client.set_model_version_tag("gate-credit", biased, gate_tasks.STATUS_TAG, "passed")
    client.set_registered_model_alias("gate-credit", "champion", biased)
    undone = _gate(uri, policy_dir, biased, "model_version_alias.created", "champion")
    assert f"moved back to version {fair}" in undone.message and "tampering" in undone.message
    tampering = client.get_model_version("gate-credit", biased).tags[TAMPERING_TAG]
    assert "says 'passed', but the gate's signed verdict is 'failed'" in tampering

    # the same forgery with a copy of the fair version's attestation, then the reconciler
    fair_attestation = client.get_model_version("gate-credit", fair).tags[ATTESTATION_TAG]
    biased_attestation = client.get_model_version("gate-credit", biased).tags[ATTESTATION_TAG]
    client.set_model_version_tag("gate-credit", biased, ATTESTATION_TAG, fair_attestation)
    client.set_registered_model_alias("gate-credit", "champion", biased)
    try:
        result = invoke(
            ["gate", "reconcile", "--policy-dir", str(policy_dir), "--tracking-uri", uri]
        )
    finally:
        client.set_model_version_tag("gate-credit", biased, ATTESTATION_TAG, biased_attestation)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == "1 protected alias(es) checked, 1 changed."
    assert len(lines) == 2 and f"refused for version {biased}" in lines[0]
    assert f"about 'gate-credit' version {fair}, copied onto this version" in lines[0]
    assert _champion(client) == fair
    again = invoke(["gate", "reconcile", "--policy-dir", str(policy_dir), "--tracking-uri", uri])
    assert again.output.strip() == "1 protected alias(es) checked, 0 changed."


@pytest.mark.flow
def test_an_alias_moved_while_no_receiver_ran_is_reverted(prefect_harness, registry, policy_dir):
    """Issue 28, 2: a version registered with the status tag ``passed`` and moved to
    ``champion`` at once, its alias event lost; its own gate run marks it failed. The
    scheduled reconciler takes the alias back."""
    uri, client, versions = registry
    _gated(uri, client, policy_dir, *versions.values())
    _hold(uri, client, policy_dir, versions["fair"])
    forged = _register(uri, "biased", tags={gate_tasks.STATUS_TAG: "passed"})
    client.set_registered_model_alias("gate-credit", "champion", forged)  # no event follows
    assert "failed" in _gate(uri, policy_dir, forged).message
    state = fairness_gate_reconcile(policy_dir=str(policy_dir), tracking_uri=uri, return_state=True)
    assert state.is_completed(), state.message
    assert state.message.startswith("1 protected alias(es) checked, 1 changed")
    assert f"refused for version {forged}" in state.message
    assert _champion(client) == versions["fair"]


@pytest.mark.flow
def test_model_files_changed_behind_a_valid_attestation_are_refused(
    prefect_harness, registry, policy_dir, tmp_path
):
    """A fair skops version passes and holds ``champion``; its model file is then replaced
    in the artifact store (the attestation is untouched): the scorer's loader refuses it and
    the reconciler moves the alias back to the earlier fair holder."""
    from fairpca.tasks.registry import FILES_CHANGED_AFTER_THE_GATE, load_champion
    from fairpca.tasks.trust import AttestationError

    uri, client, versions = registry
    fair, skops = versions["fair"], versions["fair_skops"]
    _gated(uri, client, policy_dir, fair, skops)
    _hold(uri, client, policy_dir, fair)
    _hold(uri, client, policy_dir, skops)
    frame = registrant().make_data(n=20, seed=5)
    expected = registrant().fit("fair")[0].predict(frame[["x1", "x2"]])
    assert (load_champion("gate-credit", tracking_uri=uri).predict(frame) == expected).all()

    run_id = client.get_model_version("gate-credit", skops).run_id  # its folder: run artifacts
    original = Path(mlflow.artifacts.download_artifacts(
        artifact_uri=client.get_model_version_download_uri("gate-credit", skops),
        dst_path=str(tmp_path / "original"), tracking_uri=uri,
    ))  # fmt: skip
    changed = tmp_path / "changed" / "model.skops"
    changed.parent.mkdir()
    changed.write_bytes((original / "model.skops").read_bytes() + b"\0")
    client.log_artifact(run_id, str(changed), "model")
    try:
        with pytest.raises(AttestationError, match=matching(FILES_CHANGED_AFTER_THE_GATE)):
            load_champion("gate-credit", tracking_uri=uri)
        state = fairness_gate_reconcile(
            policy_dir=str(policy_dir), tracking_uri=uri, return_state=True
        )
    finally:
        client.log_artifact(run_id, str(original / "model.skops"), "model")
    assert f"moved back to version {fair}" in state.message
    assert _champion(client) == fair
    tags = client.get_model_version("gate-credit", skops).tags
    assert re.search(matching(FILES_CHANGED_AFTER_THE_GATE), tags[TAMPERING_TAG])


def test_version_whose_gate_has_not_finished_waits_for_its_verdict(registry, policy_dir):
    from fairpca.tasks.trust import gate_public_key

    uri, client, _ = registry
    (policy_dir / "pending.yaml").write_text(POLICY.format(model="gate-pending"))
    try:
        policy = load_policies(policy_dir)["gate-pending"]
    finally:
        (policy_dir / "pending.yaml").unlink()
    client.create_registered_model("gate-pending")
    version = client.create_model_version("gate-pending", source="/nowhere").version
    client.set_model_version_tag("gate-pending", version, gate_tasks.STATUS_TAG, "pending")
    client.set_registered_model_alias("gate-pending", "champion", version)
    check = gate_tasks.enforce_alias(
        client, uri, policy, "champion", str(version), gate_public_key()
    )
    assert check.changed and "waits for the gate's verdict" in check.message
    assert "removed" in check.message and "tampering" not in check.message
    model = client.get_registered_model("gate-pending")
    assert "champion" not in model.aliases
    assert model.tags[gate_tasks.requested_tag("champion")] == f"{version}:"
    assert gate_tasks.ALIAS_REFUSED_TAG not in client.get_model_version(
        "gate-pending", version).tags  # fmt: skip


# ---- issue 34: the key, the race, lost events, moves meanwhile, policy edits ---------------


def _log_thief(uri, name: str, exfil: Path) -> str:
    """A registry user's pyfunc whose ``load_context`` copies the gate's key to ``exfil``."""

    class Thief(mlflow.pyfunc.PythonModel):
        def __init__(self, path):
            self.path = path

        def load_context(self, context):
            default = Path.home() / ".config" / "fairpca" / "gate.key"
            key_file = Path(os.environ.get("FAIRPCA_GATE_KEY_FILE", default))
            stolen = os.environ.get("FAIRPCA_GATE_KEY") or key_file.read_text()
            Path(self.path).write_text(stolen)

        def predict(self, context, model_input):
            return (model_input["x1"] > 0).astype(int)

    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        where = (exfil.parent / "thief-artifacts").as_uri()  # not ./mlruns in the checkout
        experiment = mlflow.create_experiment("gate-thief", artifact_location=where)
        with mlflow.start_run(experiment_id=experiment, run_name="thief"):
            info = mlflow.pyfunc.log_model(
                name="model", python_model=Thief(str(exfil)), pip_requirements=[]
            )
        return str(mlflow.register_model(info.model_uri, name).version)
    finally:
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])


@pytest.mark.flow
def test_a_key_stealing_pyfunc_is_refused_unloaded_and_a_forged_pass_keeps_nothing(
    prefect_harness, registry, policy_dir, tmp_path
):
    """Issue 34, 1: the registrant's code never runs in the gate, so the key stays; a pass
    signed with another key for a biased skops version is refused by the alias event, by
    the reconciler and by the scorer's loader."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from fairpca.tasks.registry import load_champion
    from fairpca.tasks.trust import Attestation, AttestationError, sign_attestation

    uri, client, _ = registry
    model, own = "gate-thief", _own_policy(tmp_path, policy_dir, "gate-thief")
    exfil = tmp_path / "stolen.key"
    thief = _log_thief(uri, model, exfil)
    pickled = _register(uri, "fair", name=model, serialization="cloudpickle")
    for version in (thief, pickled):
        state = _gate(uri, own, version, model=model)
        assert state.is_completed() and "failed" in state.message, state.message
        tags = client.get_model_version(model, version).tags
        assert tags[gate_tasks.STATUS_TAG] == "failed"
        assert tags[gate_tasks.REASONS_TAG] == NO_GRAPH  # nothing of it opened
        assert verify_attestation(tags[ATTESTATION_TAG]).verdict == "failed"
    assert not exfil.exists()

    biased = _register(uri, "biased", name=model)
    assert "failed" in _gate(uri, own, biased, model=model).message
    real = verify_attestation(client.get_model_version(model, biased).tags[ATTESTATION_TAG])
    forged = Attestation(**{**real.__dict__, "verdict": "passed"})
    text = sign_attestation(forged, Ed25519PrivateKey.generate())
    client.set_model_version_tag(model, biased, ATTESTATION_TAG, text)
    client.set_model_version_tag(model, biased, gate_tasks.STATUS_TAG, "passed")
    client.set_registered_model_alias(model, "champion", biased)
    event = _gate(uri, own, biased, "model_version_alias.created", "champion", model=model)
    assert "refused" in event.message and "signing key" in event.message, event.message
    assert _champion(client, model) is None
    client.set_registered_model_alias(model, "champion", biased)  # no event follows
    with pytest.raises(AttestationError, match="signing key"):
        load_champion(model, tracking_uri=uri)
    state = fairness_gate_reconcile(policy_dir=str(own), tracking_uri=uri, return_state=True)
    assert "1 changed" in state.message and f"refused for version {biased}" in state.message
    assert _champion(client, model) is None


@pytest.mark.flow
def test_an_alias_set_before_the_verdict_waits_and_is_given_when_the_version_passes(
    prefect_harness, registry, policy_dir, tmp_path, monkeypatch
):
    """Issue 34, 2: a version registered and made champion at once, its alias event judged
    before its created event: no refusal, no demotion; the gate gives it the alias with its
    pass. Also when the pass is signed between the alias check and the request."""
    from fairpca.tasks.registry import MODEL_DIGEST_TAG, demoted_models

    uri, client, _ = registry
    model, own = "gate-race", _own_policy(tmp_path, policy_dir, "gate-race")
    first = _register(uri, "fair", name=model, tags={MODEL_DIGEST_TAG: "fit-1"})
    client.set_registered_model_alias(model, "champion", first)
    early = _gate(uri, own, first, "model_version_alias.created", "champion", model=model)
    assert "waits for the gate's verdict" in early.message, early.message
    assert _champion(client, model) is None
    judged = _gate(uri, own, first, model=model)
    assert "passed" in judged.message and "given to version" in judged.message, judged.message
    assert _champion(client, model) == first
    assert (
        "stays on version"
        in _gate(uri, own, first, "model_version_alias.created", "champion", model=model).message
    )
    for tags in (client.get_model_version(model, first).tags,):
        assert gate_tasks.ALIAS_REFUSED_TAG not in tags and TAMPERING_TAG not in tags
    assert demoted_models(client, model) == frozenset()  # the audit's next run may promote it

    # the pass signed after the alias check found none, before the request was written
    second = _register(uri, "fair", name=model, tags={MODEL_DIGEST_TAG: "fit-2"})
    client.set_registered_model_alias(model, "champion", second)
    policy = load_policies(own)[model]
    original = gate_tasks._last_attested_holder

    def judged_meanwhile(*args):
        gate_tasks._gate_version(client, uri, policy, model, second)
        return original(*args)

    monkeypatch.setattr(gate_tasks, "_last_attested_holder", judged_meanwhile)
    late = _gate(uri, own, second, "model_version_alias.created", "champion", model=model)
    assert "its pass arrived" in late.message, late.message
    assert _champion(client, model) == second
    assert demoted_models(client, model) == frozenset()
    assert gate_tasks.requested_tag("champion") not in client.get_registered_model(model).tags


@pytest.mark.flow
def test_the_reconciler_judges_a_version_whose_events_were_lost(
    prefect_harness, registry, policy_dir, tmp_path
):
    """Issue 34, 3: a version registered and made champion while the receiver was deaf: no
    event ever arrives; the reconciler judges it, and its pass keeps the alias."""
    uri, client, _ = registry
    model, own = "gate-lost", _own_policy(tmp_path, policy_dir, "gate-lost")
    version = _register(uri, "fair", name=model)
    client.set_registered_model_alias(model, "champion", version)
    state = fairness_gate_reconcile(policy_dir=str(own), tracking_uri=uri, return_state=True)
    assert f"version {version} had no verdict" in state.message, state.message
    assert state.message.startswith("1 protected alias(es) checked, 1 changed")
    tags = client.get_model_version(model, version).tags
    assert verify_attestation(tags[ATTESTATION_TAG]).verdict == "passed"
    assert _champion(client, model) == version


@pytest.mark.flow
def test_the_reconciler_keeps_a_move_made_while_it_checked(
    prefect_harness, registry, policy_dir, monkeypatch
):
    """Issue 34, 10: the reconciler finds ``champion`` on the biased version; while it
    checks, an operator moves it to a fair version whose pass verifies: that move stays."""
    from fairpca.tasks.trust import gate_public_key

    uri, client, versions = registry
    fair, biased, other = versions["fair"], versions["biased"], versions["fair_skops"]
    _gated(uri, client, policy_dir, *versions.values())
    _hold(uri, client, policy_dir, fair)
    client.set_registered_model_alias("gate-credit", "champion", biased)
    original = gate_tasks._refusal

    def operator_moves_meanwhile(*args):
        client.set_registered_model_alias("gate-credit", "champion", other)
        return original(*args)

    monkeypatch.setattr(gate_tasks, "_refusal", operator_moves_meanwhile)
    gate_tasks.reconcile_aliases(client, uri, load_policies(policy_dir), gate_public_key())
    assert _champion(client) == other


@pytest.mark.flow
def test_a_policy_edit_judges_the_holder_again_instead_of_calling_it_tampering(
    prefect_harness, registry, policy_dir, tmp_path
):
    """Issue 34, 10: the policy file changes (more resamples); the champion's pass names the
    old policy: the reconciler judges it again, it passes and keeps the alias."""
    uri, client, _ = registry
    model, own = "gate-edit", _own_policy(tmp_path, policy_dir, "gate-edit")
    version = _register(uri, "fair", name=model)
    assert "passed" in _gate(uri, own, version, model=model).message
    client.set_registered_model_alias(model, "champion", version)
    assert (
        "stays"
        in _gate(uri, own, version, "model_version_alias.created", "champion", model=model).message
    )
    (own / "policy.yaml").write_text(POLICY.format(model=model).replace("200", "300"))
    state = fairness_gate_reconcile(policy_dir=str(own), tracking_uri=uri, return_state=True)
    assert state.message == "1 protected alias(es) checked, 0 changed", state.message
    assert _champion(client, model) == version
    tags = client.get_model_version(model, version).tags
    assert TAMPERING_TAG not in tags and gate_tasks.ALIAS_REFUSED_TAG not in tags
    digest = gate_tasks.policy_digest(load_policies(own)[model])
    assert verify_attestation(tags[ATTESTATION_TAG]).policy_digest == digest


def test_gate_parameters_are_the_workers_own(policy_dir, tmp_path, monkeypatch):
    """In a deployment run a Prefect API caller cannot point the gate at another policy
    folder or server (``PREFECT__RUNTIME__DEPLOYMENT__ID`` stands for a deployment run)."""
    uri = f"sqlite:///{tmp_path}/own.db"
    assert gate_settings(str(tmp_path), uri) == (str(tmp_path), uri)  # called directly
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "a-deployment")
    monkeypatch.delenv("FAIRPCA_GATE_POLICY_DIR", raising=False)
    unset = matching(gate_tasks.WORKER_SETTINGS_MISSING)
    with pytest.raises(PolicyError, match=unset) as refused:
        gate_settings(str(policy_dir), uri)
    assert str(refused.value).startswith("FAIRPCA_GATE_POLICY_DIR")
    monkeypatch.setenv("FAIRPCA_GATE_POLICY_DIR", str(policy_dir))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert gate_settings(None, None) == (str(policy_dir), uri)
    assert gate_settings(str(policy_dir / "."), uri + "/") == (str(policy_dir), uri)
    with pytest.raises(PolicyError, match=matching(gate_tasks.NOT_THE_WORKERS_POLICY_DIR)):
        gate_settings(str(tmp_path), None)
    other = matching(gate_tasks.NOT_THE_WORKERS_TRACKING, given="http://***@evil.example:5000")
    with pytest.raises(PolicyError, match=other):
        gate_settings(None, "http://user:pw@evil.example:5000")


@pytest.mark.flow
def test_a_gate_deployment_run_with_foreign_parameters_fails_and_pickles_nothing(
    prefect_harness, registry, policy_dir, tmp_path, monkeypatch
):
    uri, _client, versions = registry
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "a-deployment")
    monkeypatch.setenv("FAIRPCA_GATE_POLICY_DIR", str(policy_dir))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    lenient = tmp_path / "lenient"
    lenient.mkdir()
    state = fairness_gate(
        model_name="gate-credit", version=versions["biased"], event="model_version.created",
        policy_dir=str(lenient), return_state=True,
    )  # fmt: skip
    assert state.is_failed() and "not the gate worker's policy folder" in state.message
    assert state.result(raise_on_failure=False) is None  # returned, not raised: no exception


def test_keygen_creates_a_private_key_file_and_prints_its_public_key(tmp_path, monkeypatch):
    from cli_invoke import invoke

    from fairpca.tasks.trust import gate_public_key, public_key_hex

    key_file = tmp_path / "keys" / "gate.key"
    monkeypatch.delenv(GATE_KEY_ENV, raising=False)
    monkeypatch.setenv("FAIRPCA_GATE_KEY_FILE", str(key_file))
    first = invoke(["gate", "keygen"])
    assert first.exit_code == 0, first.output
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    public = first.stdout.strip().splitlines()[-1]
    assert public == public_key_hex(gate_public_key()) and len(public) == 64
    assert key_file.read_text().strip() not in first.output  # the private key is never shown
    second = invoke(["gate", "keygen"])
    assert second.stdout.strip().splitlines()[-1] == public  # kept, not replaced
    key_file.chmod(0o640)
    refused = invoke(["gate", "keygen"])
    assert refused.exit_code == 2 and "chmod 600" in " ".join(refused.output.split())


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
    from cli_invoke import invoke

    monkeypatch.setenv("FAIRPCA_WEBHOOK_SECRET", "short")
    serve = invoke(["gate", "serve", "--policy-dir", str(policy_dir)])
    register = invoke(["gate", "register", "--model", "m", "--url", "https://x/w"])
    for result in (serve, register):
        assert result.exit_code == 2
        text = " ".join(result.output.split())  # rich wraps long lines
        assert "FAIRPCA_WEBHOOK_SECRET" in text and "short" not in text
    half = invoke(["gate", "serve", "--certfile", "gate.crt"])
    assert half.exit_code == 2 and "--keyfile" in half.output


def test_cli_refuses_a_bad_policy_dir_before_serving(tmp_path, monkeypatch):
    from cli_invoke import invoke

    monkeypatch.setenv("FAIRPCA_WEBHOOK_SECRET", SECRET)
    result = invoke(["gate", "serve", "--policy-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())


def test_the_deployment_is_part_of_the_policy_the_attestation_binds():
    """A pass signed for a deployment without the attribute at prediction does not hold for
    one with it: the policy digest changes, and the card's policy sentence names it."""
    from fairpca.tasks.select import GatePolicy as NamedPolicy

    reference = {"path": "reference.csv", "label": "y", "sensitive": ["sex"]}
    default = gate_tasks.GatePolicy(model="m", reference=reference)
    allowed = gate_tasks.GatePolicy(model="m", reference=reference, sensitive_at_prediction=True)
    assert default.sensitive_at_prediction is False and default.randomized_decisions is False
    digests = {gate_tasks.policy_digest(p, reference_sha256="0" * 64) for p in (default, allowed)}
    assert len(digests) == 2
    assert NamedPolicy.from_config(allowed).deployment.sensitive_at_prediction
    assert "may use the sensitive attribute" in NamedPolicy.from_config(allowed).description()
