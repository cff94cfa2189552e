"""Validation of the inputs of the metrics: numeric matrices, label vectors, binary labels and
the encoded sensitive attributes."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse

from .._groups import _factorize, encode_labels


@dataclass(frozen=True)
class _Attribute:
    """One sensitive attribute: its name (None for 1-D input), labels and integer codes."""

    name: Any
    labels: list
    codes: np.ndarray

    def key(self, group: int) -> Any:
        label = self.labels[group]
        return label if self.name is None else (self.name, label)

    def members(self) -> list[np.ndarray]:
        return [np.flatnonzero(self.codes == g) for g in range(len(self.labels))]


def _reject_sparse(value: Any, name: str) -> None:
    if scipy.sparse.issparse(value):
        raise TypeError(
            f"{name} is a sparse matrix; these metrics need a dense array. "
            f"Convert it with {name}.toarray()."
        )


def _as_float_matrix(value: Any, name: str, *, one_d: str) -> np.ndarray:
    """Validate a numeric matrix and return it as float64.

    ``one_d`` says what a 1-D input means: "column" (one feature), "row" (one component) or
    "error".
    """
    _reject_sparse(value, name)
    try:
        if isinstance(value, pd.DataFrame | pd.Series):
            array = value.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                array = array.astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be numeric, got non-numeric values; encode categorical columns "
            f"(e.g. one-hot) before computing the metric."
        ) from None
    array = np.asarray(array, dtype=np.float64)
    if array.ndim == 1:
        if one_d == "column":
            array = array[:, None]
        elif one_d == "row":
            array = array[None, :]
        else:
            raise ValueError(
                f"{name} must be 2-D (n_samples, n_features), got a 1-D array; "
                f"use {name}.reshape(-1, 1) for a single feature."
            )
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got an array with {array.ndim} dimensions.")
    if array.size == 0:
        raise ValueError(
            f"{name} is empty (shape {array.shape}); pass at least one row and one column."
        )
    if not np.isfinite(array).all():
        raise ValueError(
            f"{name} contains NaN or infinity; impute or drop those rows before computing "
            f"the metric."
        )
    return array


def _as_label_vector(value: Any, name: str) -> np.ndarray:
    """Validate a 1-D vector of labels without missing values."""
    _reject_sparse(value, name)
    array = value.to_numpy() if isinstance(value, pd.Series) else _as_label_array(value)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one value per row), got shape {array.shape}; "
            f"pass a 1-D array, e.g. {name}.ravel()."
        )
    if array.shape[0] == 0:
        raise ValueError(f"{name} is empty; pass one value per row.")
    missing = pd.isna(array)
    if missing.any():
        raise ValueError(
            f"{name} contains {int(missing.sum())} missing values (NaN/None); drop those rows "
            f"before computing the metric."
        )
    return array


def _as_label_array(value: Any) -> np.ndarray:
    """Array of labels; lists become object arrays so mixed labels like [1, "a"] keep types."""
    return value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)


def _attributes(sensitive: Any, n_samples: int, name: str) -> list[_Attribute]:
    """Encode group labels with the library's encoder; every attribute needs two groups.

    1-D labels are one attribute (keyed by the label alone in the legacy dictionaries); a 2-D
    array or a DataFrame gives one attribute per column, keyed ``(column, label)`` with the
    DataFrame column name or the column index.
    """
    _reject_sparse(sensitive, name)
    encoding, _ = encode_labels(sensitive, n_samples)
    names = _attribute_keys(sensitive, encoding.n_attributes)
    attributes = []
    for a, attr_name in enumerate(names):
        labels = list(encoding.groups[a])
        if len(labels) < 2:
            where = name if attr_name is None else f"{name} column {attr_name!r}"
            raise ValueError(
                f"{where} has a single group ({labels[0]!r}); the metric compares groups, so "
                f"pass labels with at least two distinct values."
            )
        attributes.append(_Attribute(attr_name, labels, encoding.codes[:, a]))
    return attributes


def _attribute_keys(sensitive: Any, n_attributes: int) -> list:
    """None for 1-D labels, else the DataFrame column names or the column indices."""
    if isinstance(sensitive, pd.DataFrame):
        return list(sensitive.columns)
    if isinstance(sensitive, pd.Series | pd.Categorical) or np.ndim(sensitive) == 1:
        return [None]
    return list(range(n_attributes))


def _positive_mask(y: Any, name: str, pos_label: Any) -> np.ndarray:
    """Validate binary labels/predictions and return the boolean mask of ``y == pos_label``."""
    array = _as_label_vector(y, name)
    codes, values = _factorize(array, name)
    values = list(values)
    if len(values) > 2:
        shown = ", ".join(repr(v) for v in values[:5])
        raise ValueError(
            f"{name} must be binary (two distinct values), got {len(values)} distinct values "
            f"({shown}{', ...' if len(values) > 5 else ''}); threshold scores first, "
            f"e.g. (scores >= 0.5).astype(int)."
        )
    is_positive = np.array([bool(v == pos_label) for v in values])
    if len(values) == 2 and not is_positive.any():
        raise ValueError(
            f"pos_label={pos_label!r} is not one of the values of {name} {values}; pass "
            f"pos_label=<the value meaning 'positive'>."
        )
    return is_positive[codes]


def _check_same_length(**arrays: Any) -> None:
    lengths = {name: len(value) for name, value in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"Inconsistent number of rows: {shown}; pass one value per row.")


def _check_sigma(sigma: Any) -> float:
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real):
        raise TypeError(
            f"sigma must be a positive real number or None (median heuristic), got {sigma!r}."
        )
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(
            f"sigma must be a positive finite number, got {sigma!r}; pass sigma=None to use "
            f"the median heuristic."
        )
    return float(sigma)


def _check_max_samples(max_samples: Any, minimum: int) -> int | None:
    if max_samples is None:
        return None
    if isinstance(max_samples, bool) or not isinstance(max_samples, numbers.Integral):
        raise TypeError(f"max_samples must be an int or None, got {max_samples!r}.")
    if max_samples < minimum:
        raise ValueError(
            f"max_samples must be at least {minimum}, got {max_samples}; pass None to use all rows."
        )
    return int(max_samples)
