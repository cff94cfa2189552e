"""Background warm-up: heavy imports and the local MLflow store's first connection.

A first run spends seconds importing MLflow/skops/matplotlib and creating the local SQLite
store (schema migrations). Doing that in a daemon thread while the temporary Prefect server
boots (a separate process) or while the sweep runs (mostly in C) hides most of it. Failures
are ignored here: the real logging step reports them with its retries. Logging waits for
the warm-up (:func:`wait_for_warmup`) so the store is never initialized twice at once.
"""

from __future__ import annotations

import contextlib
import importlib
import threading

__all__ = ["start_warmup", "wait_for_warmup"]

_threads: dict[str, threading.Thread] = {}
_lock = threading.Lock()


def _warm(tracking_uri: str, modules: tuple[str, ...]) -> None:
    with contextlib.suppress(Exception):
        for module in modules:
            importlib.import_module(module)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
        import mlflow.sklearn  # noqa: F401
        import skops.io  # noqa: F401

        if tracking_uri.startswith("sqlite:"):  # a remote server needs no warm-up
            from fairpca.tasks.mlflow_store import mlflow_client

            mlflow_client(tracking_uri).search_experiments(max_results=1)


def start_warmup(tracking_uri: str, modules: tuple[str, ...] = ()) -> None:
    """Start the warm-up (importing ``modules`` first) once per process and tracking URI."""
    with _lock:
        if tracking_uri in _threads:
            return
        thread = threading.Thread(
            target=_warm, args=(tracking_uri, modules), name="fairpca-warmup", daemon=True
        )
        _threads[tracking_uri] = thread
    thread.start()


def wait_for_warmup(tracking_uri: str, timeout: float = 300.0) -> None:
    """Block until the warm-up of ``tracking_uri`` (if any) is done."""
    thread = _threads.get(tracking_uri)
    if thread is not None:
        thread.join(timeout)
