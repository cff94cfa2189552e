"""Input validation shared by FairPCA and FairKernelPCA: parameters, features, rows, groups."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_feature_names_in, assert_all_finite, check_is_fitted

from . import _linalg as la
from ._groups import GroupEncoding, check_group_sizes

# Parameters of the fairness constraint and of the linear solve, the same in both estimators.
FAIRNESS_CONSTRAINTS: dict = {
    "n_components": [Interval(Integral, 1, None, closed="left"), None],
    "constraint": [StrOptions({"demographic_parity", "equal_opportunity"})],
    "pos_label": [Real, str, "boolean"],
    "eo_objective": [StrOptions({"positive", "all"})],
    "tradeoff": [Interval(Real, 0, None, closed="left")],
    "sensitive_columns": [str, list, tuple, None],
    "svd_solver": [StrOptions({"auto", "covariance_eigh", "full", "randomized"})],
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "iterated_power": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    "n_oversamples": [Interval(Integral, 1, None, closed="left")],
    "random_state": ["random_state"],
}


def output_feature_names(estimator, input_features, fair: str, pca: str) -> np.ndarray:
    """``fair0..k-1``, then ``pca0..k-1`` when ``tradeoff > 0``; ``input_features`` must
    match the names (or number) of the features seen during fit."""
    check_is_fitted(estimator)
    _check_feature_names_in(estimator, input_features)
    k = estimator.n_components_
    names = [f"{fair}{i}" for i in range(k)]
    if estimator.tradeoff > 0:
        names += [f"{pca}{i}" for i in range(k)]
    return np.asarray(names, dtype=object)


class TooManyComponentsError(ValueError):
    """``n_components`` exceeds the number of fair directions that exist."""


def check_numeric(X, estimator: str = "FairPCA") -> None:
    """Raise a TypeError naming non-numeric columns before sklearn tries to cast them."""
    if isinstance(X, pd.DataFrame):
        bad = [
            str(c)
            for c, dtype in X.dtypes.items()
            if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype))
        ]
        if bad:
            raise TypeError(
                f"X has non-numeric column(s) {bad}; {estimator} needs numeric features. Encode "
                "categoricals first (e.g. fairpca.datasets.make_preprocessor or a "
                "ColumnTransformer with OneHotEncoder), or, if they are the sensitive "
                "attributes, name them with sensitive_columns=[...]."
            )
        return
    if sparse.issparse(X) or not hasattr(X, "dtype"):
        return
    array = np.asarray(X)
    if array.dtype.kind not in "OUSMm":
        return
    reason = f"dtype {array.dtype}"
    if array.dtype.kind == "O":
        try:
            array.astype(np.float64)
            return
        except (TypeError, ValueError) as error:
            reason = f"values that are not numbers ({error})"
    raise TypeError(
        f"X has {reason}; {estimator} needs numeric features. Encode categoricals first (e.g. "
        "with a OneHotEncoder or fairpca.datasets.make_preprocessor)."
    )


def check_magnitude(
    X: np.ndarray, sum_of_squares: float | None = None, estimator: str = "FairPCA"
) -> None:
    """Refuse NaN, infinite values, and finite values so large that sums of their squares
    overflow the dtype.

    The scatter, its trace and the squared distances of a kernel are sums of squares of the
    entries; when ``sum(X ** 2)`` (one BLAS pass, or ``sum_of_squares`` when the caller has
    it already, e.g. as the trace of ``X.T @ X``) is not safely below the largest float
    (values above about ``sqrt(max / (16 n d))``, 1e150 for float64 and a few thousand
    rows), they would be infinite and the directions NaN, never a usable projection.
    A NaN or infinite entry makes ``sum(X ** 2)`` NaN or infinite as well, so this one sum
    also serves as the finiteness check of ``validate_data`` (whose message is then
    raised, naming ``estimator``).
    """
    if X.size == 0:
        return
    limit = np.finfo(X.dtype).max / 16.0
    if sum_of_squares is None:
        sum_of_squares = la.sum_of_squares(X)
    if sum_of_squares <= limit:  # inf or NaN fail the comparison too
        return
    assert_all_finite(X, input_name="X", estimator_name=estimator)
    largest = max(float(X.max()), -float(X.min()))
    bound = float(np.sqrt(limit / X.size))
    raise ValueError(
        f"X has values up to {largest:.3g} in absolute value; sums of their squares "
        f"overflow {X.dtype} (the largest safe magnitude for {X.shape[0]} x {X.shape[1]} "
        f"data is about {bound:.3g}). Rescale X first (e.g. divide by a power of 10, or "
        "use sklearn.preprocessing.StandardScaler); PCA of c * X has the same components."
    )


def check_n_components_bound(
    n_components, n_samples: int, n_features: int, features: str = "n_features"
) -> None:
    """Refuse ``n_components`` above ``min(n_samples, n_features)`` before any work;
    ``features`` names the feature dimension in the message."""
    largest = min(n_samples, n_features)
    if n_components is not None and n_components > largest:
        raise TooManyComponentsError(
            f"n_components={n_components} is too large: at most min(n_samples={n_samples}, "
            f"{features}={n_features}) = {largest} directions exist, fewer once the fairness "
            f"constraint removes the rank of the group-mean differences. Use "
            f"n_components < {largest}."
        )


def resolve_n_components(n_components, n_obj: int, n_features: int, rank: int) -> int:
    """The number of fair directions: ``n_components``, or all of them when None."""
    largest = min(n_obj, n_features - rank)
    if largest < 1:
        raise TooManyComponentsError(
            f"No fair direction is left: the group-mean differences span all "
            f"{n_features} feature directions (constraint rank {rank}). Fair PCA needs "
            "more features than the rank of the group-mean differences; add features or use "
            "fewer sensitive groups."
        )
    if n_components is None:
        return largest
    if n_components > largest:
        raise TooManyComponentsError(
            f"n_components={n_components} is too large: at most {largest} fair "
            f"directions exist (min(n_samples={n_obj}, n_features - constraint rank = "
            f"{n_features} - {rank} = {n_features - rank})). Use n_components <= {largest}."
        )
    return n_components


# ---------------------------------------------------------------------- sensitive columns
def sensitive_column_list(sensitive_columns) -> list:
    if sensitive_columns is None:
        return []
    if isinstance(sensitive_columns, str):
        return [sensitive_columns]
    return list(sensitive_columns)


def split_sensitive_columns(X, sensitive_features, sensitive_columns):
    """``(features, sensitive attributes)``: the named columns of a DataFrame ``X`` become
    the sensitive attributes, or ``sensitive_features`` is used as given."""
    columns = sensitive_column_list(sensitive_columns)
    if not columns:
        return X, sensitive_features
    if not isinstance(X, pd.DataFrame):
        raise TypeError(
            "sensitive_columns names columns of a pandas DataFrame, but X is "
            f"{type(X).__name__}; pass a DataFrame, or pass the attributes as "
            "fit(X, sensitive_features=...) and leave sensitive_columns=None."
        )
    missing = [c for c in columns if c not in X.columns]
    if missing:
        raise ValueError(
            f"sensitive_columns {missing} are not columns of X; available columns: "
            f"{[str(c) for c in X.columns]}."
        )
    if sensitive_features is not None:
        raise ValueError(
            "Both sensitive_columns and sensitive_features were given; use one of them."
        )
    return X.drop(columns=columns), X[columns]


def drop_sensitive_columns(X, sensitive_columns):
    """``X`` without the sensitive columns it holds (transform input)."""
    columns = sensitive_column_list(sensitive_columns)
    if columns and isinstance(X, pd.DataFrame):
        return X.drop(columns=[c for c in columns if c in X.columns])
    return X


# ---------------------------------------------------------------------- rows and groups
def positive_rows(y, n_samples: int, pos_label, *, method: str = "partial_fit") -> np.ndarray:
    """Boolean mask ``y == pos_label``, with a clear error for a missing or misshaped ``y``."""
    if y is None:
        raise ValueError(
            "constraint='equal_opportunity' fits on the rows with y == pos_label, so "
            f"{method} needs y: call {method}(X, y, sensitive_features=...)."
        )
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n_samples:
        raise ValueError(
            f"y must be 1-D with one label per row of X ({n_samples}); got shape {y.shape}."
        )
    return np.asarray(y == pos_label, dtype=bool)


def fit_rows(y, n_samples: int, constraint: str, pos_label, eo_objective: str):
    """Boolean masks of the objective rows and of the constraint rows (None = all rows):
    all rows for demographic parity, the rows with ``y == pos_label`` for equal
    opportunity (Section 3.2; the objective too unless ``eo_objective="all"``)."""
    if constraint == "demographic_parity":
        return None, None
    positive = positive_rows(y, n_samples, pos_label, method="fit")
    if not positive.any():
        raise ValueError(
            f"constraint='equal_opportunity' but no row has y == pos_label "
            f"({pos_label!r}); labels seen: {np.unique(np.asarray(y))[:10].tolist()}. Set "
            "pos_label to the positive class."
        )
    objective = positive if eo_objective == "positive" else None
    return objective, positive


def groups_among(encoding: GroupEncoding, rows: np.ndarray) -> GroupEncoding:
    """The encoding restricted to the constraint ``rows``; every group needs 2 rows there."""
    counts = [
        np.bincount(encoding.codes[rows, a], minlength=len(labels))
        for a, labels in enumerate(encoding.groups)
    ]
    check_group_sizes(
        encoding.names,
        encoding.groups,
        counts,
        rows="rows with y == pos_label",
        prefix="constraint='equal_opportunity': ",
        fix="Their positive-class mean is undefined: merge rare groups, collect more positive "
        "rows, or use demographic parity.",
    )
    return encoding.subset(rows)
