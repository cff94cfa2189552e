"""Shared pytest fixtures (keep small; others may add theirs)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API (SQLite) for the whole session (~15 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def mlflow_store(tmp_path):
    """A fresh, real MLflow SQLite store in a temp dir: ``(tracking_uri, MlflowClient)``."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return uri, MlflowClient(tracking_uri=uri, registry_uri=uri)
