"""Checks of the MLflow tracking URI the command line runs before any work starts.

An unreachable tracking server must be found in seconds with one message, not after the audit
and a series of retried requests. Nothing here imports MLflow, except
:func:`champion_version`, which asks the store which version holds an alias.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["TrackingUnreachable", "champion_version", "check_tracking_uri"]

LOCAL_FALLBACK = "sqlite:///mlflow.db"


class TrackingUnreachable(ValueError):
    """The tracking URI cannot be used; the message names the URI and the fix."""


def check_tracking_uri(uri: str, shown: str, timeout: float = 4.0) -> None:
    """Raise :class:`TrackingUnreachable` if ``uri`` cannot take an audit.

    http(s): ``GET <uri>/health`` (MLflow's health endpoint) must answer within ``timeout``
    seconds. ``sqlite:///path``: the database's folder must exist. ``shown`` is the URI as
    it may be printed (credentials masked). Other schemes (databases, Databricks) are left
    to MLflow.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    fix = f"start the server, or pass --tracking-uri {LOCAL_FALLBACK} to record locally"
    if scheme in {"http", "https"}:
        import httpx

        try:
            answer = httpx.get(uri.rstrip("/") + "/health", timeout=timeout)
        except httpx.HTTPError as error:
            reason = type(error).__name__
            raise TrackingUnreachable(
                f"the MLflow tracking server {shown} is not reachable ({reason}); {fix}."
            ) from None
        if answer.status_code >= 500:
            raise TrackingUnreachable(
                f"the MLflow tracking server {shown} answered HTTP {answer.status_code}; {fix}."
            )
    elif scheme == "sqlite" and uri.startswith("sqlite:///") and ":memory:" not in uri:
        folder = Path(uri.removeprefix("sqlite:///")).expanduser().absolute().parent
        if not folder.is_dir():
            raise TrackingUnreachable(
                f"the folder {folder} of the MLflow database {shown} does not exist; create "
                "it or pass another --tracking-uri."
            )


def champion_version(uri: str, model_name: str | None, alias: str) -> str | None:
    """The version ``alias`` of ``model_name`` points to now (None: no model, no alias, or
    the store cannot say)."""
    if model_name is None:
        return None
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None  # a new store: no champion, and the warm-up thread creates its schema
    from mlflow.exceptions import MlflowException

    from fairpca.tasks.mlflow_store import mlflow_client

    try:
        client = mlflow_client(uri)
        return str(client.get_model_version_by_alias(model_name, alias).version)
    except (MlflowException, OSError):  # requests' errors are OSErrors; only informational
        return None
