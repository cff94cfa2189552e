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
