"""Loading a user's own CSV or Parquet file as a :class:`Dataset`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._dataset import Dataset, as_names

__all__ = ["load_user_data"]

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def _read_frame(path: Path) -> pd.DataFrame:
    name = path.name.lower()
    if not path.is_file():
        raise FileNotFoundError(f"Data file not found: {path}. Check the path (cwd: {Path.cwd()}).")
    if path.stat().st_size == 0:
        raise ValueError(
            f"Data file {path} is empty (0 bytes); pass a file with a header and rows."
        )
    if name.endswith(_CSV_SUFFIXES):
        try:
            frame = pd.read_csv(path)
        except pd.errors.EmptyDataError as error:
            raise ValueError(f"Data file {path} is empty: it has no header or rows.") from error
    elif name.endswith(_PARQUET_SUFFIXES):
        frame = pd.read_parquet(path)
    else:
        raise ValueError(
            f"Unsupported file type for {path}; use CSV ({', '.join(_CSV_SUFFIXES)}) or Parquet "
            f"({', '.join(_PARQUET_SUFFIXES)})."
        )
    if len(frame) == 0:
        raise ValueError(f"Data file {path} has a header but no data rows.")
    return frame


def _binarize(label: pd.Series, positive_label: Any) -> pd.Series:
    name = label.name
    values = pd.unique(label)
    if positive_label is not None:
        if not (label == positive_label).any():
            raise ValueError(
                f"positive_label={positive_label!r} does not occur in label column {name!r}; "
                f"its values include {sorted(map(str, values))[:10]}."
            )
        y = label == positive_label
        if y.all():
            raise ValueError(
                f"Every row of label column {name!r} equals positive_label={positive_label!r}; "
                "a binary task needs rows of both classes."
            )
        return y.astype("int64")
    if len(values) != 2:
        raise ValueError(
            f"Label column {name!r} has {len(values)} distinct value(s); a binary label with "
            "exactly 2 classes is needed. Pass positive_label=<value> to binarize it as "
            "(label == value) -> 1, everything else -> 0."
        )
    if set(values) <= {0, 1}:  # also covers booleans and 0.0/1.0
        return label.astype("int64")
    raise ValueError(
        f"Label column {name!r} has the classes {sorted(map(str, values))}, not 0/1; pass "
        "positive_label=<one of them> to say which class is coded 1."
    )


def load_user_data(
    path: str | os.PathLike[str],
    *,
    label: str,
    sensitive: str | Sequence[str],
    positive_label: Any = None,
    features: Sequence[str] | None = None,
) -> Dataset:
    """Load a CSV or Parquet file with a binary label and sensitive column(s).

    Parameters
    ----------
    path : str or path-like
        ``.csv`` (optionally compressed: ``.csv.gz``, ``.csv.bz2``, ``.csv.xz``,
        ``.csv.zip``), ``.parquet`` or ``.pq`` file with a header row.
    label : str
        Name of the label column.
    sensitive : str or sequence of str
        Name(s) of the sensitive attribute column(s); their values are the group labels. Each
        needs at least two distinct values and no missing values. They are removed from
        ``X``.
    positive_label : object, default=None
        Label value coded ``y = 1`` (all others 0). Needed unless the label already is 0/1
        or boolean.
    features : sequence of str or None, default=None
        Feature columns; ``None`` means every column except the label and the sensitive ones.

    Returns
    -------
    dataset : Dataset
        Numeric features as ``float64`` (missing values kept as NaN; the preprocessor of
        :func:`fairpca.datasets.make_preprocessor` imputes them), all others as they were read.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Empty file, unsupported file type, missing columns, a sensitive column with one
        value or missing values, missing label values, or a label that is not binary.
    """
    path = Path(path).expanduser()
    frame = _read_frame(path)
    groups = as_names(sensitive, "sensitive")
    if not isinstance(label, str):
        raise TypeError(f"label must be a column name (str); got {label!r}.")
    chosen = None if features is None else as_names(features, "features")
    needed = [label, *groups, *(chosen or ())]
    missing = [column for column in dict.fromkeys(needed) if column not in frame.columns]
    if missing:
        raise ValueError(
            f"Column(s) {missing} not found in {path}. Available columns: {list(frame.columns)}."
        )
    overlap = [column for column in (chosen or ()) if column == label or column in groups]
    if label in groups or overlap:
        raise ValueError(
            "The label, sensitive and feature columns must be distinct; "
            f"label={label!r}, sensitive={list(groups)}, overlapping features={overlap}."
        )
    n_missing = int(frame[label].isna().sum())
    if n_missing:
        raise ValueError(
            f"Label column {label!r} has {n_missing} missing value(s) (NaN/empty); drop or fill "
            "those rows before loading."
        )
    y = _binarize(frame[label], positive_label)
    for column in groups:
        values = frame[column]
        if values.isna().any():
            raise ValueError(
                f"Sensitive column {column!r} has {int(values.isna().sum())} missing value(s); "
                "drop those rows or fill them with an explicit group such as 'unknown'."
            )
        if values.nunique() < 2:
            raise ValueError(
                f"Sensitive column {column!r} has a single value in all {len(values)} rows; "
                "fair PCA needs at least two groups. Pick a column that varies across rows."
            )
    kept = list(chosen) if chosen else [c for c in frame.columns if c != label and c not in groups]
    if not kept:
        raise ValueError(f"{path} has no feature columns besides the label and sensitive ones.")
    X = frame[kept].copy()
    for column in kept:
        if pd.api.types.is_numeric_dtype(X[column]) and not pd.api.types.is_bool_dtype(X[column]):
            X[column] = X[column].astype(np.float64)
    return Dataset(
        X=X.reset_index(drop=True),
        y=y.reset_index(drop=True).rename(label),
        sensitive=frame[list(groups)].reset_index(drop=True),
        name=path.name.split(".")[0],
        description=f"User data from {path.name}: {len(frame)} rows, label {label!r}.",
        positive_label=f"{label} == {positive_label!r}" if positive_label is not None else label,
        sensitive_encoding={column: f"raw values of column {column!r}" for column in groups},
    )
