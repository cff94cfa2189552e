"""The registered pipeline scores the rows the project's loaders return (pandas categoricals)
and the same columns read from a CSV, through fairpca's ``load_champion``, ``mlflow.pyfunc``,
``mlflow.sklearn`` and ``mlflow models serve`` (with the model's own input example). Real
audit, real SQLite store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairpca.datasets import load_dataset

pytestmark = [pytest.mark.flow, pytest.mark.slow]

mlflow = pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def registered(prefect_harness, mlflow_store, tmp_path_factory):
    """A real audit of adult registers its chosen pipeline: ``(uri, models:/ uri)``."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig

    uri = mlflow_store[0]
    base = tmp_path_factory.mktemp("scoring")
    config = AuditConfig(
        dataset="adult", k=3, variants=["pca", "fair_pca"], lambdas=[0.0],
        classifiers=["logreg"], n_train=1500, n_validation=1000, n_test=1000,
        metric_max_rows=300, tracking_uri=uri, output_dir=base / "out",
        model_name=f"scoring-{base.name}",
    )  # fmt: skip
    result = fairness_audit(config)
    return uri, f"models:/{result.model_name}/{result.model_version}"


@pytest.fixture(scope="module")
def rows():
    """Rows as the loader returns them (categoricals) and as read back from a CSV."""
    X = load_dataset("adult").X.iloc[-300:]
    return X, X.copy()


@pytest.fixture(scope="module")
def from_csv(rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "new_rows.csv"
    rows[0].to_csv(path, index=False)
    return pd.read_csv(path)


@pytest.fixture(scope="module")
def expected(registered, rows):
    """Predictions of the verified pipeline (fairpca's own loader of registered versions)."""
    from fairpca.tasks.registry import load_registered_pipeline

    uri, model_uri = registered
    name, version = model_uri.removeprefix("models:/").split("/")
    return load_registered_pipeline(uri, name, version).predict(rows[0])


def test_pyfunc_scores_loader_rows_and_csv_rows(registered, rows, from_csv, expected):
    uri, model_uri = registered
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    model = mlflow.pyfunc.load_model(model_uri)
    assert isinstance(rows[0]["workclass"].dtype, pd.CategoricalDtype)
    np.testing.assert_array_equal(np.asarray(model.predict(rows[0])), expected)
    np.testing.assert_array_equal(np.asarray(model.predict(from_csv)), expected)
    assert 0 < expected.mean() < 1  # both classes predicted: a real scorer, not a constant


def test_sklearn_flavor_scores_loader_rows_and_csv_rows(registered, rows, from_csv, expected):
    uri, model_uri = registered
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    model = mlflow.sklearn.load_model(model_uri)
    np.testing.assert_array_equal(model.predict(rows[0]), expected)
    np.testing.assert_array_equal(model.predict(from_csv), expected)


def test_load_champion_scores_loader_rows_and_csv_rows(registered, rows, from_csv, expected):
    """The README's scoring path: fairpca's loader (skops file checked against the SHA-256
    fairpca registered, trusted types only, nothing unpickled), no gate deployed."""
    from fairpca.tasks.registry import load_champion

    uri, model_uri = registered
    name, version = model_uri.removeprefix("models:/").split("/")
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_registered_model_alias(name, "scoring", version)
    model = load_champion(name, alias="scoring", tracking_uri=uri, attested=False)
    np.testing.assert_array_equal(model.predict(rows[0]), expected)
    np.testing.assert_array_equal(model.predict(from_csv), expected)


def post(port: int, body: str) -> tuple[int, dict]:
    import httpx

    response = httpx.post(
        f"http://127.0.0.1:{port}/invocations",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    return response.status_code, response.json()


@pytest.fixture(scope="module")
def served(registered, tmp_path_factory, free_port):
    """``mlflow models serve`` of the registered version on a free port of 127.0.0.1."""
    import httpx

    uri, model_uri = registered
    port = free_port()
    folder = tmp_path_factory.mktemp("serve")
    shim = folder / "bin" / "uvicorn"  # the server execs `uvicorn`: this interpreter's
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m uvicorn "$@"\n')
    shim.chmod(0o755)
    log = (folder / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri,
         "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"],
        env={**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_REGISTRY_URI": uri,
             "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert server.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ping", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        else:
            pytest.fail("mlflow models serve did not answer /ping within 180 s")
        yield port, model_uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the workers it started
        server.wait(timeout=30)
        log.close()


def test_served_model_answers_its_input_example_and_loader_rows(served, rows, expected):
    port, model_uri = served
    example = Path(mlflow.artifacts.download_artifacts(f"{model_uri}/serving_input_example.json"))
    status, answer = post(port, example.read_text())
    assert status == 200, answer
    assert len(answer["predictions"]) == 2
    body = json.dumps({"dataframe_split": json.loads(rows[0].to_json(orient="split"))})
    status, answer = post(port, body)
    assert status == 200, answer
    np.testing.assert_array_equal(np.asarray(answer["predictions"]), expected)
