"""The MLflow store operations every writer shares (fairpca.tasks.mlflow_store)."""

from __future__ import annotations

import ast
from pathlib import Path

import mlflow
import pytest

from fairpca.tasks.mlflow_store import mlflow_client

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fairpca", "tasks", "flows")  # every folder that installs as fairpca.*
CLIENT_MODULE = ROOT / "tasks" / "mlflow_store.py"


def _client_references(path: Path) -> list[int]:
    """Lines of ``path`` whose code (not strings or comments) names ``MlflowClient``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [getattr(node, "id", None), getattr(node, "attr", None)]
        if isinstance(node, ast.ImportFrom):
            names += [alias.name for alias in node.names]
        if "MlflowClient" in names:
            lines.append(node.lineno)
    return lines


def test_only_mlflow_store_builds_an_mlflow_client():
    sources = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert CLIENT_MODULE in sources and len(sources) > 50
    elsewhere = {
        str(path.relative_to(ROOT)): lines
        for path in sources
        if path != CLIENT_MODULE and (lines := _client_references(path))
    }
    assert elsewhere == {}, (
        f"build clients with fairpca.tasks.mlflow_store.mlflow_client: {elsewhere}"
    )
    assert _client_references(CLIENT_MODULE), "the one construction site moved: update this test"


@pytest.fixture
def two_stores(tmp_path):
    """Two SQLite stores; the process-wide tracking URI is the first, its registry the second
    (restored afterwards)."""
    first = f"sqlite:///{tmp_path / 'first.db'}"
    second = f"sqlite:///{tmp_path / 'second.db'}"
    tracking, registry = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(first)
    mlflow.set_registry_uri(second)
    yield first, second
    mlflow.set_tracking_uri(tracking)
    mlflow.set_registry_uri(registry)


def _registered_names(uri: str) -> list[str]:
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    return [model.name for model in client.search_registered_models()]


def test_the_client_registers_in_its_tracking_store(two_stores):
    first, second = two_stores
    mlflow_client(second).create_registered_model("given-uri")
    mlflow_client().create_registered_model("process-uri")  # the tracking URI: the first
    assert _registered_names(second) == ["given-uri"]
    assert _registered_names(first) == ["process-uri"]


# ---- bounded requests ------------------------------------------------------------------------


@pytest.fixture
def default_bounds(monkeypatch):
    """No MLflow HTTP variable set: the client's own bounds apply."""
    from fairpca.tasks.mlflow_store import MLFLOW_HTTP_BOUNDS

    for name in MLFLOW_HTTP_BOUNDS:
        monkeypatch.delenv(name, raising=False)


def test_a_dead_server_costs_a_request_about_a_second(default_bounds, free_port):
    """Refused: one retry at once (MLflow's default, 7 retries with back-off, waits minutes)."""
    import time

    from mlflow.exceptions import MlflowException

    client = mlflow_client(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(MlflowException, match="Max retries exceeded"):
        client.get_experiment_by_name("any")
    assert time.monotonic() - started < 10


def test_a_silent_server_gets_two_attempts_of_the_timeout_each(default_bounds, monkeypatch):
    """A server that takes connections and never answers: the request ends after two
    attempts of ``MLFLOW_HTTP_REQUEST_TIMEOUT`` seconds each (here 1 s)."""
    import socket
    import threading

    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []

    def take() -> None:
        while True:
            try:
                taken.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=take, daemon=True).start()
    client = mlflow_client(f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        with pytest.raises(MlflowException, match="timed out"):
            client.get_experiment_by_name("any")
    finally:
        listener.close()
        for connection in taken:
            connection.close()
    assert len(taken) == 2  # the request and its one retry
