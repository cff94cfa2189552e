"""The feature preprocessor: one-hot categoricals, standardized numerics."""

from __future__ import annotations

import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

__all__ = ["make_preprocessor", "split_feature_kinds"]


def split_feature_kinds(X: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Return ``(categorical, numeric)`` column names of ``X``.

    Numeric dtypes other than bool are numeric; category, object, string and bool columns
    are categorical.

    Parameters
    ----------
    X : DataFrame
        Raw features.

    Returns
    -------
    categorical : list of str
    numeric : list of str
    """
    if not isinstance(X, pd.DataFrame):
        raise TypeError(
            f"X must be a pandas DataFrame with named columns; got {type(X).__name__}. For a "
            "numeric array use sklearn.preprocessing.StandardScaler directly."
        )
    if X.shape[1] == 0:
        raise ValueError("X has no columns; pass at least one feature column.")
    temporal = [
        column
        for column in X.columns
        if pd.api.types.is_datetime64_any_dtype(X[column])
        or pd.api.types.is_timedelta64_dtype(X[column])
    ]
    if temporal:
        raise TypeError(
            f"Date/time columns {temporal} cannot be encoded; convert them to numbers (e.g. "
            "days since an origin) or strings, or drop them."
        )
    categorical, numeric = [], []
    for column in X.columns:
        dtype = X[column].dtype
        is_number = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
        (numeric if is_number else categorical).append(column)
    return categorical, numeric


MAX_CATEGORIES = 50  # one-hot columns per categorical at most (the rarest values are pooled)


def make_preprocessor(
    X: pd.DataFrame,
    *,
    max_categories: int | None = MAX_CATEGORIES,
    min_frequency: int | float | None = None,
) -> ColumnTransformer:
    """Build the (unfitted) column preprocessor for the raw features ``X``.

    Categorical columns (category, object, string, bool) are one-hot encoded with dense
    output (missing values form their own category); at most ``max_categories`` columns per
    categorical: categories rarer than ``min_frequency`` or beyond the ``max_categories - 1``
    most frequent are pooled into one "infrequent" column, which also receives unseen
    categories (``handle_unknown="infrequent_if_exist"``; without pooling they encode as all
    zeros). The cap bounds the encoded width d, and with it the d x d statistics of fair PCA;
    screen identifier-like columns out first (:func:`fairpca.datasets.screen_columns`);
    numeric columns get their missing values replaced by the training median and are then
    standardized (zero mean, unit variance; a constant column gets scale 1). Fit it on the
    training split only, e.g. as the first step of a pipeline, so that test rows are
    transformed with training statistics. Supports ``set_output(transform="pandas")``;
    output names are ``categorical__<column>_<value>`` and ``numeric__<column>``.

    Parameters
    ----------
    X : DataFrame
        Raw features (only the column names and dtypes are used).
    max_categories : int or None, default=50
        Most one-hot columns per categorical (scikit-learn's ``OneHotEncoder``); None: no cap.
    min_frequency : int, float or None, default=None
        Categories with fewer rows (int) or a smaller share (float) are pooled.

    Returns
    -------
    preprocessor : ColumnTransformer
        Unfitted.

    Examples
    --------
    >>> from fairpca.datasets import load_german, make_preprocessor
    >>> data = load_german()
    >>> Z = make_preprocessor(data.X).fit_transform(data.X)
    >>> Z.shape
    (1000, 61)
    """
    categorical, numeric = split_feature_kinds(X)
    numeric_steps = Pipeline(
        [
            ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
            ("scale", StandardScaler()),
        ]
    )
    one_hot = OneHotEncoder(
        handle_unknown="infrequent_if_exist",
        max_categories=max_categories,
        min_frequency=min_frequency,
        sparse_output=False,
        dtype="float64",
    )
    return ColumnTransformer(
        [("categorical", one_hot, categorical), ("numeric", numeric_steps, numeric)],
        remainder="drop",
        sparse_threshold=0.0,
    )
