"""Shared pytest fixtures (keep small; others may add theirs)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


@pytest.fixture(scope="session", autouse=True)
def private_signing_key(tmp_path_factory):
    """Audits sign their output directory with a per-user key: the tests' own key lives in a
    temporary XDG_CONFIG_HOME (inherited by the CLI subprocesses), never in the user's."""
    os.environ.pop("FAIRPCA_SIGNING_KEY", None)
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))
    return os.environ["XDG_CONFIG_HOME"]


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API (SQLite) for the whole session (~15 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """A real MLflow SQLite store in a temp dir, shared by the session (creating one costs
    ~5 s of schema migrations): ``(tracking_uri, MlflowClient)``. Use unique model names."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    return uri, MlflowClient(tracking_uri=uri, registry_uri=uri)


def _check_useful_registration(out_dir) -> None:
    """A version an audit registered is useful on its test rows: the 95% interval of its
    balanced accuracy lies above 0.5 and it predicts one class for at most 98% of the rows.
    An audit that registered nothing passes."""
    import json
    from pathlib import Path

    out_dir = Path(out_dir)
    status = out_dir / "mlflow_status.json"
    if not status.is_file() or json.loads(status.read_text()).get("model_version") is None:
        return
    test = json.loads((out_dir / "audit.json").read_text())["selection"]["test"]
    assert test["balanced_accuracy.ci95_low"] > 0.5, (out_dir, test["balanced_accuracy"])
    assert test["one_class_share"] <= 0.98, (out_dir, test["one_class_share"])


@pytest.fixture
def assert_useful_registration():
    """``assert_useful_registration(out_dir)``: see :func:`_check_useful_registration`."""
    return _check_useful_registration


@pytest.fixture(autouse=True)
def _every_registered_version_is_useful(request):
    """After each test, every audit under its ``tmp_path`` that registered a version must
    have registered a useful one (no constant or near-constant champion, ever)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path = request.getfixturevalue("tmp_path")
    yield
    for audit in tmp_path.rglob("audit.json"):
        _check_useful_registration(audit.parent)
