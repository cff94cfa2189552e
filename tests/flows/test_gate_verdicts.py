"""The gate's word over time (issue 53): only the latest verdict of a version, under the
current policy, counts; no version stays unjudged; the published numbers do not single a
person out, and judgements are bounded.

On a real MLflow SQLite store with the Prefect test harness; the restored-old-pass case
runs once more against a real ``mlflow server`` on 127.0.0.1 (``-m e2e``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from gate_setup import POLICY, registrant
from messages import matching

from fairpca.flows import gate as gate_tasks
from fairpca.flows.gate import fairness_gate, fairness_gate_reconcile, load_policies
from fairpca.tasks.gate_ledger import (
    LEDGER_TAG,
    LEDGER_TOO_OLD,
    MAX_AGE_ENV,
    NOT_THE_LATEST_VERDICT,
)
from fairpca.tasks.onnx_runtime import NO_GRAPH
from fairpca.tasks.registry import ATTESTATION_TAG, TAMPERING_TAG, load_champion
from fairpca.tasks.trust import GATE_KEY_ENV, AttestationError, verify_attestation

TIGHTENED = "min_accuracy_gain: 0.4\n"  # no classifier of these rows beats the majority by 0.4


@pytest.fixture(scope="module", autouse=True)
def gate_key():
    """The gate worker's private key, and its own state file (a fresh one per module)."""
    import secrets

    before = {name: os.environ.get(name) for name in (GATE_KEY_ENV, "FAIRPCA_GATE_STATE")}
    os.environ[GATE_KEY_ENV] = secrets.token_hex(32)
    os.environ["FAIRPCA_GATE_STATE"] = str(Path(os.environ["XDG_CONFIG_HOME"]) / "verdicts.db")
    yield os.environ[GATE_KEY_ENV]
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _policy_folder(tmp_path: Path, model: str, reference: pd.DataFrame, extra="") -> Path:
    folder = tmp_path / f"policies-{model}"
    folder.mkdir(exist_ok=True)
    reference.to_csv(folder / "reference.csv", index=False)
    (folder / "policy.yaml").write_text(POLICY.format(model=model) + extra)
    return folder


def _with_uri(uri, register, *args, **kwargs) -> str:
    previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        return register(*args, **kwargs)
    finally:
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])


def _gate(uri, folder, model, version, event="model_version.created", alias=None):
    return fairness_gate(
        model_name=model, version=str(version), event=event, alias=alias,
        policy_dir=str(folder), tracking_uri=uri, return_state=True,
    )  # fmt: skip


def _reconcile(uri, folder):
    return fairness_gate_reconcile(policy_dir=str(folder), tracking_uri=uri, return_state=True)


def _champion(client, model) -> str | None:
    holder = client.get_registered_model(model).aliases.get("champion")
    return None if holder is None else str(holder)


# ---- signatures that mean the current policy ---------------------------------------------------


def restored_pass_is_refused(uri: str, client, tmp_path: Path, model: str) -> None:
    """Issue 53: v passes and holds ``champion``; the policy is tightened, the gate judges v
    again (``failed``) and takes the alias; a registry user puts the saved pass back, with
    the status tag, and sets ``champion`` by hand. ``load_champion`` refuses; the alias
    event and the reconciler take the alias at once and report tampering; restoring the
    gate's older ledger too is undone by the reconciler, and a ledger past its age is
    refused."""
    folder = _policy_folder(tmp_path, model, registrant().make_data(seed=2))
    version = _with_uri(uri, registrant().register, model, "fair", "skops")
    assert "passed" in _gate(uri, folder, model, version).message
    client.set_registered_model_alias(model, "champion", version)
    assert "stays on" in _gate(uri, folder, model, version, "model_version_alias.created",
                               "champion").message  # fmt: skip
    assert load_champion(model, tracking_uri=uri) is not None
    saved_pass = client.get_model_version(model, version).tags[ATTESTATION_TAG]
    saved_ledger = client.get_registered_model(model).tags[LEDGER_TAG]

    (folder / "policy.yaml").write_text(POLICY.format(model=model) + TIGHTENED)
    state = _reconcile(uri, folder)
    assert state.is_completed() and "removed" in state.message, state.message
    tags = client.get_model_version(model, version).tags
    assert verify_attestation(tags[ATTESTATION_TAG]).verdict == "failed"
    assert _champion(client, model) is None and TAMPERING_TAG not in tags

    def put_back() -> None:
        client.set_model_version_tag(model, version, ATTESTATION_TAG, saved_pass)
        client.set_model_version_tag(model, version, gate_tasks.STATUS_TAG, "passed")
        client.set_registered_model_alias(model, "champion", version)

    put_back()
    with pytest.raises(AttestationError, match=re.escape(NOT_THE_LATEST_VERDICT)) as refused:
        load_champion(model, tracking_uri=uri)
    assert refused.value.tampered
    event = _gate(uri, folder, model, version, "model_version_alias.created", "champion")
    assert "removed" in event.message and "tampering" in event.message, event.message
    assert _champion(client, model) is None
    assert "latest verdict" in client.get_model_version(model, version).tags[TAMPERING_TAG]

    put_back()
    client.delete_model_version_tag(model, version, TAMPERING_TAG)
    client.set_registered_model_tag(model, LEDGER_TAG, saved_ledger)  # every old tag at once
    assert load_champion(model, tracking_uri=uri) is not None  # the residual risk, bounded:
    os.environ[MAX_AGE_ENV] = "1"
    try:
        time.sleep(2.1)
        with pytest.raises(AttestationError, match=matching(LEDGER_TOO_OLD)):
            load_champion(model, tracking_uri=uri)
    finally:
        os.environ.pop(MAX_AGE_ENV)
    state = _reconcile(uri, folder)  # the gate's own state knows better
    assert "1 changed" in state.message and "tampering" in state.message, state.message
    assert _champion(client, model) is None
    assert "latest verdict" in client.get_model_version(model, version).tags[TAMPERING_TAG]
    with pytest.raises(LookupError):
        load_champion(model, tracking_uri=uri)


@pytest.mark.flow
def test_an_older_pass_put_back_is_refused_and_reported(prefect_harness, mlflow_store, tmp_path):
    uri, client = mlflow_store
    restored_pass_is_refused(uri, client, tmp_path, "verdicts-restored")


@pytest.fixture
def mlflow_server(tmp_path, free_port):
    """A real ``mlflow server`` on 127.0.0.1 (SQLite backend, local artifacts)."""
    from mlflow import MlflowClient

    port = free_port()
    command = [
        sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
        f"sqlite:///{tmp_path}/server.db", "--artifacts-destination", str(tmp_path / "art"),
        "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.search_experiments(max_results=1)
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        yield uri, client
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


@pytest.mark.e2e
def test_an_older_pass_put_back_is_refused_on_a_real_mlflow_server(
    prefect_harness, mlflow_server, tmp_path
):
    uri, client = mlflow_server
    restored_pass_is_refused(uri, client, tmp_path, "verdicts-restored-server")


# ---- nothing stuck -----------------------------------------------------------------------------


@pytest.mark.flow
def test_a_version_left_pending_is_judged_by_the_next_reconcile(
    prefect_harness, mlflow_store, tmp_path, monkeypatch
):
    """Issue 53: a judgement interrupted mid-evaluation leaves the version ``pending``;
    ``champion`` set on it waits. Within the gate's deadline the reconciler leaves it (its
    judgement may still run); past it, the reconciler judges it and grants the request."""
    uri, client = mlflow_store
    model = "verdicts-stuck"
    folder = _policy_folder(tmp_path, model, registrant().make_data(seed=2))
    version = _with_uri(uri, registrant().register, model, "fair", "skops")
    policy = load_policies(folder)[model]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # SIGINT while the model is evaluated

    with monkeypatch.context() as patch:
        patch.setattr(gate_tasks, "evaluate_version", interrupted)
        with pytest.raises(KeyboardInterrupt):
            gate_tasks._gate_version(client, uri, policy, model, version)
    assert client.get_model_version(model, version).tags[gate_tasks.STATUS_TAG] == "pending"
    client.set_registered_model_alias(model, "champion", version)
    waits = _gate(uri, folder, model, version, "model_version_alias.created", "champion")
    assert "waits for the gate's verdict" in waits.message, waits.message

    assert "had no verdict" not in _reconcile(uri, folder).message  # still within its deadline
    assert client.get_model_version(model, version).tags[gate_tasks.STATUS_TAG] == "pending"
    long_ago = datetime.now(UTC) - timedelta(seconds=gate_tasks.TIMEOUT_SECONDS + 60)
    client.set_model_version_tag(model, version, gate_tasks.PENDING_SINCE_TAG,
                                 long_ago.strftime("%Y-%m-%dT%H:%M:%SZ"))  # fmt: skip
    state = _reconcile(uri, folder)
    assert f"version {version} had no verdict" in state.message, state.message
    tags = client.get_model_version(model, version).tags
    assert tags[gate_tasks.STATUS_TAG] == "passed"
    assert verify_attestation(tags[ATTESTATION_TAG]).verdict == "passed"
    assert _champion(client, model) == version
    assert load_champion(model, tracking_uri=uri) is not None


# ---- published numbers --------------------------------------------------------------------------


def _differencing_reference(n: int = 10_000) -> pd.DataFrame:
    """Two groups of n/2 rows, 48% approved, ``x1`` unique per row."""
    rng = np.random.default_rng(7)
    approved = np.zeros(n, dtype=int)
    approved[rng.choice(n, size=int(0.48 * n), replace=False)] = 1
    return pd.DataFrame({
        "x1": rng.permutation(n) / n + 0.5 / n, "group": np.repeat([0, 1], n // 2),
        "approved": approved,
    })  # fmt: skip


def _register_window(uri: str, model: str, x1: float | None, width: float) -> str:
    """A logistic regression on ``x1`` and ``x1**2`` that approves exactly the rows with
    ``|x1 - center| < width`` (no one when ``center`` is None), saved with skops."""
    import sklearn
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures

    toy = pd.DataFrame({"x1": [0.0, 1.0]})
    pipeline = make_pipeline(PolynomialFeatures(2, include_bias=False), LogisticRegression())
    pipeline.fit(toy, [0, 1])
    scale = 1 / width**2  # decision: width**2 - (x1 - center)**2, scaled
    coef, intercept = ([0.0, 0.0], -1.0) if x1 is None else (
        [2 * x1 * scale, -scale], (width**2 - x1**2) * scale)  # fmt: skip
    pipeline[-1].coef_, pipeline[-1].intercept_ = np.array([coef]), np.array([intercept])

    def register() -> str:  # with its ONNX graph, what the gate judges
        import tempfile
        from pathlib import Path

        script = registrant()
        mlflow.set_experiment("registrant")
        with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
            mlflow.sklearn.save_model(
                pipeline, f"{tmp}/model", input_example=toy, serialization_format="skops",
                pip_requirements=[f"scikit-learn=={sklearn.__version__}"],
            )  # fmt: skip
            script.add_graph(Path(tmp, "model"), pipeline, ["x1"])
            mlflow.log_artifacts(f"{tmp}/model", "model")
            return script.register_folder(
                model, f"{run.info.artifact_uri}/model", run.info.run_id
            )

    return _with_uri(uri, register)


def _published(client, model, version) -> tuple[dict[str, str], list[str]]:
    entry = client.get_model_version(model, version)
    tags = {
        key: value
        for key, value in entry.tags.items()
        if key.startswith("fairness.gate.")
        and key.split("fairness.gate.")[1].split(".")[0] in {"accuracy", "dp_difference",
                                                              "eo_difference", "reasons"}
    }  # fmt: skip
    table = [line for line in entry.description.splitlines() if line.startswith("|")]
    return tags, table


@pytest.mark.flow
def test_a_differencing_pair_publishes_the_same_numbers(prefect_harness, mlflow_store, tmp_path):
    """Issue 53: a model that approves no one, then one that approves only the row with a
    known ``x1``: the numbers the gate publishes (tags, card) are the same for both, so they
    reveal neither that person's label nor their group."""
    uri, client = mlflow_store
    model = "verdicts-differencing"
    reference = _differencing_reference()
    # the gated criteria the pair measured (with four_fifths, the reasons also say
    # whether anyone at all is approved: the ratio 0/0 is undefined, 0/x is 0; the model's
    # own behaviour, not the person's)
    folder = _policy_folder(tmp_path, model, reference,
                            "policy: demographic_parity+equal_opportunity\n")  # fmt: skip
    target = int(reference.index[(reference["approved"] == 1) & (reference["group"] == 1)][0])
    width = 0.25 / len(reference)  # a quarter of the spacing of x1
    nobody = _register_window(uri, model, None, width)
    only_one = _register_window(uri, model, float(reference["x1"][target]), width)
    for version in (nobody, only_one):
        assert _gate(uri, folder, model, version).is_completed()
    published = [_published(client, model, version) for version in (nobody, only_one)]
    assert published[0] == published[1]
    tags = published[0][0]
    assert {"fairness.gate.accuracy", "fairness.gate.dp_difference"} <= set(tags)
    assert all(len(tags[key].split(".")[1]) == 2 for key in tags if key != gate_tasks.REASONS_TAG)
    run = client.get_run(client.get_model_version(model, only_one).tags["fairness.gate.run_id"])
    assert run.data.metrics["accuracy"] != pytest.approx(float(tags["fairness.gate.accuracy"]))


def test_metrics_are_withheld_when_a_reference_group_is_small(tmp_path):
    """A group of the reference rows under ``min_group_size`` (of one attribute or of the
    intersection): no number is published, and the reason names no group and no count."""
    reference = _differencing_reference(400)
    reference["region"] = np.tile([0, 1], 200)
    folder = _policy_folder(tmp_path, "verdicts-small", reference)
    (folder / "policy.yaml").write_text(
        POLICY.format(model="verdicts-small").replace("[group]", "[group, region]")
    )
    policy = load_policies(folder)["verdicts-small"]
    assert gate_tasks.withheld_reason(reference, policy) is None
    reference.loc[reference.index[:190], "region"] = 1  # region 0 of group 0: 10 rows
    withheld = gate_tasks.withheld_reason(reference, policy)
    assert withheld == gate_tasks.WITHHELD and not any(c.isdigit() for c in withheld)
    metrics = {"accuracy": 0.51234, "dp_difference": 0.0412}
    assert gate_tasks.published_metrics(metrics, withheld) == {}
    assert gate_tasks.published_metrics(metrics, None) == {"accuracy": 0.51, "dp_difference": 0.04}
    dp_interval = {"dp_difference.ci95_low": 0.08, "dp_difference.ci95_high": 0.16}
    measured = {"dp_difference": 0.1234, **dp_interval, "one_class_share": 0.997, "accuracy": 0.7}
    _, reasons = gate_tasks.verdict(measured, policy, majority=0.6)
    dp, one_class = (next(r for r in reasons if rule in r.flags) for rule in ("gate", "one_class"))
    assert dp.numbers == {"value": 0.1234, "limit": 0.1}  # the verdict: raw numbers
    published = gate_tasks.published_reasons(reasons, None)
    assert all("rounded" in r.flags and "withheld" not in r.flags for r in published)
    assert published[reasons.index(dp)].numbers == {"value": 0.12, "limit": 0.1}
    assert published[reasons.index(one_class)].numbers["share"] == 1.0
    shown = gate_tasks.rendered(published)  # the tag's text: no more than two decimals
    assert "0.1234" not in shown and "99.7" not in shown and "0.12" in shown
    hidden = gate_tasks.published_reasons(reasons, withheld)
    assert all(set(r.numbers) <= {"limit", "gain", "margin", "ratio"} for r in hidden)
    assert all("withheld" in r.flags for r in hidden)
    assert "(withheld)" in gate_tasks.rendered(hidden)
    assert not {"0.1234", "0.12", "99.7", "100%"} & set(gate_tasks.rendered(hidden).split())


# ---- the judgement budget -----------------------------------------------------------------------


@pytest.mark.flow
def test_the_eleventh_judgement_of_a_model_in_a_day_is_refused(
    prefect_harness, mlflow_store, tmp_path
):
    """Issue 53: 10 judgements of one model under one policy (the default budget), then
    the 11th is refused and says why; deleting every registry tag does not reset the count
    (it is kept in the gate's own state); a judgement that ends in ``error`` is not counted;
    another policy has its own budget."""
    uri, client = mlflow_store
    model = "verdicts-budget"
    folder = _policy_folder(tmp_path, model, registrant().make_data(n=200, seed=2))
    unreadable = _with_uri(uri, lambda: mlflow.register_model("/nowhere", model).version)
    pickled = _with_uri(uri, registrant().register, model, "fair")  # no graph: refused
    for _ in range(3):  # its files cannot be read: error, no number published, not counted
        assert "evaluation failed" in _gate(uri, folder, model, unreadable).message
    for _ in range(10):
        state = _gate(uri, folder, model, pickled)
        assert state.is_completed() and f"failed ({NO_GRAPH}" in state.message, state.message
    refused = _gate(uri, folder, model, unreadable)
    assert refused.is_failed() and "judgement budget spent" in refused.message
    tags = client.get_model_version(model, unreadable).tags
    assert tags[gate_tasks.STATUS_TAG] == "error"
    assert "at most 10 times" in tags[gate_tasks.REASONS_TAG]

    for version in (unreadable, pickled):  # a registrant deletes what the registry holds
        for key in client.get_model_version(model, version).tags:
            client.delete_model_version_tag(model, version, key)
    for key in client.get_registered_model(model).tags:
        client.delete_registered_model_tag(model, key)
    assert "judgement budget spent" in _gate(uri, folder, model, pickled).message

    (folder / "policy.yaml").write_text(POLICY.format(model=model).replace("200", "300"))
    assert "judgement budget spent" not in _gate(uri, folder, model, pickled).message
