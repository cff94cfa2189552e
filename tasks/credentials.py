"""Credentials in tracking URIs: masked in everything written, moved to MLflow's environment
variables only when connecting."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["mask_credentials", "shown_text", "shown_uri", "take_credentials"]


# The userinfo of a URI: everything between "://" and the last "@" before the path. A regular
# expression rather than urlsplit, which refuses or misreads passwords holding "[", "#", "?".
_USERINFO = re.compile(r"(?<=://)[^/]*@")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"()<>]+")


def mask_credentials(value: str) -> str:
    """``scheme://user:password@host/...`` -> ``scheme://***@host/...`` (and without its query
    string); other text as is."""
    masked = _USERINFO.sub("***@", value, count=1)
    return value if masked == value else masked.split("?", 1)[0]


def shown_uri(value: str) -> str:
    """A URI as messages and params may show it: credentials masked
    (:func:`mask_credentials`) and no query string (a presigned URL's token)."""
    return mask_credentials(str(value)).split("?", 1)[0]


def shown_text(text: str) -> str:
    """``text`` (e.g. a library's error message) with every URI in it :func:`shown_uri`."""
    return _URI.sub(lambda match: shown_uri(match.group(0)), str(text))


def take_credentials(uri: str) -> str:
    """An http(s) ``uri`` without ``user:password@``; the credentials go to MLflow's env variables.

    Only MLflow's REST client reads ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``
    (HTTP basic auth), so for any other scheme (``postgresql://user:pw@db/mlflow``) the URI is
    returned as given: the database driver needs its credentials in the URI. A password in the
    environment variable ``MLFLOW_TRACKING_URI`` is removed from there for http(s).
    """
    parts = urlsplit(uri)
    if parts.scheme.lower() not in {"http", "https"}:
        return uri
    if parts.username is None and parts.password is None:
        return uri
    if parts.username:
        os.environ["MLFLOW_TRACKING_USERNAME"] = unquote(parts.username)
    if parts.password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = unquote(parts.password)
    host = parts.netloc.rpartition("@")[2]
    clean = urlunsplit(parts._replace(netloc=host))
    if os.environ.get("MLFLOW_TRACKING_URI") == uri:
        os.environ["MLFLOW_TRACKING_URI"] = clean
    return clean
