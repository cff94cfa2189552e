"""The audit's data source, loaded without Prefect, once per audit.

The command line checks the source before any server starts
(:func:`fairpca.flows.preflight.check_before_run`, which loads it with
:func:`preload_source`); the audit flow's :func:`fairpca.tasks.data.load_data` then takes
that dataset (:func:`take_preloaded`) instead of reading and parsing the file again. The
dataset is kept under the source's identity: the config fields that choose and parse it and,
for a user file, the file's SHA-256, so a file changed in between is loaded anew. A flow run
without the command line (a Prefect deployment, a Dask worker) finds nothing kept and loads
the source itself. At most one dataset is kept, and only until its audit takes it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fairpca.tasks.signing import sha256_file

__all__ = ["load_source", "preload_source", "source_key", "take_preloaded"]

_kept: dict[tuple, Any] = {}  # at most one entry: source_key -> dataset
_kept_lock = threading.Lock()


def source_key(source) -> tuple | None:
    """The identity of the dataset the ``source`` section names: the fields that choose and
    parse it and, for a user file, its SHA-256 (a bundled dataset's files are checked against fixed
    SHA-256 sums when loaded). None when the user file cannot be read (not kept then)."""
    fields = (
        source.dataset,
        None if source.data_dir is None else str(source.data_dir),
        None if source.data is None else str(Path(source.data).resolve()),
        source.label,
        tuple(source.sensitive),
        source.positive_label,
        tuple(source.keep),
        tuple(source.drop),
        source.sep,
    )
    if source.dataset is not None:
        return fields
    try:
        return (*fields, sha256_file(source.data))
    except (OSError, TypeError):  # load_source names what is wrong with the file
        return None


def preload_source(source) -> Any:
    """:func:`load_source`, kept for the audit of this process to take (one load per audit).

    The key is computed before the file is read, so a file changed while it is read is
    loaded anew by the flow.
    """
    key = source_key(source)
    dataset = load_source(source)
    if key is not None:
        with _kept_lock:
            _kept.clear()
            _kept[key] = dataset
    return dataset


def take_preloaded(source) -> Any | None:
    """The dataset :func:`preload_source` kept for this source, handed over once (None when
    nothing is kept for it, or the user file changed since)."""
    with _kept_lock:
        if not _kept:
            return None
    key = source_key(source)
    with _kept_lock:
        return _kept.pop(key, None) if key is not None else None


def load_source(source) -> Any:
    """The :class:`fairpca.datasets.Dataset` named by an audit config's ``source`` section; a
    bundled dataset's coded groups carry their names (``Female`` / ``Male``, not 0 / 1) into
    the audit."""
    from fairpca import datasets

    if source.dataset is not None:
        kwargs: dict[str, Any] = {"data_dir": source.data_dir}
        if source.sensitive:
            kwargs["sensitive"] = tuple(source.sensitive)
        return datasets.load_dataset(source.dataset, **kwargs).with_named_groups()
    return datasets.load_user_data(
        source.data,
        label=source.label,
        sensitive=tuple(source.sensitive),
        positive_label=_typed_label(source),
        keep=tuple(source.keep),
        drop=tuple(source.drop),
        sep=source.sep,
        leakage=False,  # decided on the training rows (fairpca.tasks.data.split_data)
    )


def _typed_label(source) -> Any:
    """``positive_label`` arrives as text (CLI, YAML); match it to a numeric label column."""
    value = source.positive_label
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number
