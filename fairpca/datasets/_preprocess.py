"""The feature preprocessor: one-hot categoricals, standardized numerics."""

from __future__ import annotations

from numbers import Integral
from typing import ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin, _fit_context
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ._screen import MIN_CATEGORY_COUNT, RARE_CATEGORY

__all__ = [
    "RareCategoryPooler",
    "make_preprocessor",
    "split_feature_kinds",
]


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
    dtypes = list(X.dtypes.items())
    temporal = [
        column
        for column, dtype in dtypes
        if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype)
    ]
    if temporal:
        raise TypeError(
            f"Date/time columns {temporal} cannot be encoded; convert them to numbers (e.g. "
            "days since an origin) or strings, or drop them."
        )
    categorical, numeric = [], []
    for column, dtype in dtypes:
        is_number = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
        (numeric if is_number else categorical).append(column)
    return categorical, numeric


def _as_text(column: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """``(str values, missing mask)`` of one categorical column (missing values untouched)."""
    missing = column.isna().to_numpy()
    return column.astype(object).map(str), missing


class RareCategoryPooler(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Replace categories seen in fewer than ``min_count`` training rows by one placeholder.

    A category held by only a handful of rows (a free-text description, a case number, a
    rare country) is a value of those persons; pooling it before a ``OneHotEncoder`` keeps
    it out of every fitted attribute of the pipeline, so a saved model holds only values
    shared by at least ``min_count`` training rows. Values are compared as strings
    (``True`` and ``"True"`` are one category); the output holds those strings, the
    ``placeholder`` for every value rarer than ``min_count`` or not seen at fit, and the
    missing values as given (missing is not a personal value; the encoder gives it its own
    column).

    Parameters
    ----------
    min_count : int, default=30
        Fewest training rows a category needs to be kept (1 keeps every category).
    placeholder : str, default="<rare>"
        The value that replaces rare and unseen categories.

    Attributes
    ----------
    categories_ : list of ndarray of str
        The kept categories of each column, sorted; nothing else of the data is stored.
    n_features_in_ : int
        Number of columns seen at fit.
    feature_names_in_ : ndarray of str
        Column names seen at fit, when ``X`` had string column names.

    Examples
    --------
    >>> import pandas as pd
    >>> from fairpca.datasets import RareCategoryPooler
    >>> X = pd.DataFrame({"job": ["clerk"] * 3 + ["nurse"] * 2 + ["astronaut"]})
    >>> pooler = RareCategoryPooler(min_count=2).fit(X)
    >>> pooler.categories_
    [array(['clerk', 'nurse'], dtype=object)]
    >>> pooler.transform(pd.DataFrame({"job": ["nurse", "astronaut", "pilot"]})).ravel()
    array(['nurse', '<rare>', '<rare>'], dtype=object)
    """

    _parameter_constraints: ClassVar[dict] = {
        "min_count": [Interval(Integral, 1, None, closed="left")],
        "placeholder": [str],
    }

    def __init__(self, min_count: int = MIN_CATEGORY_COUNT, placeholder: str = RARE_CATEGORY):
        self.min_count = min_count
        self.placeholder = placeholder

    def _frame(self, X, *, reset: bool) -> pd.DataFrame:
        """``X`` as a DataFrame of its columns; checks names and width against fit."""
        validate_data(self, X, reset=reset, skip_check_array=True)
        if isinstance(X, pd.DataFrame):
            return X
        return pd.DataFrame(check_array(X, dtype=object, ensure_all_finite=False))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Keep, per column, the categories with at least ``min_count`` rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Categorical training columns.
        y : None
            Ignored.

        Returns
        -------
        self : RareCategoryPooler
        """
        frame = self._frame(X, reset=True)
        self.categories_ = []
        for position in range(frame.shape[1]):
            text, missing = _as_text(frame.iloc[:, position])
            counts = text[~missing].value_counts()
            kept = counts.index[counts.to_numpy() >= self.min_count]
            self.categories_.append(np.array(sorted(kept), dtype=object))
        return self

    def transform(self, X):
        """Replace every category outside ``categories_`` by ``placeholder``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Categorical columns, as at fit.

        Returns
        -------
        X_pooled : ndarray of shape (n_samples, n_features), dtype object
            Kept categories as strings, the placeholder, and missing values as given.
        """
        check_is_fitted(self)
        frame = self._frame(X, reset=False)
        pooled = np.empty(frame.shape, dtype=object)
        for position, kept in enumerate(self.categories_):
            column = frame.iloc[:, position]
            text, missing = _as_text(column)
            values = text.to_numpy(dtype=object, copy=True)
            values[~text.isin(kept).to_numpy()] = self.placeholder
            values[missing] = column.to_numpy(dtype=object)[missing]
            pooled[:, position] = values
        return pooled

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.allow_nan = True
        return tags


MAX_CATEGORIES = 50  # one-hot columns per categorical at most (the rarest values are pooled)


def make_preprocessor(
    X: pd.DataFrame,
    *,
    max_categories: int | None = MAX_CATEGORIES,
    min_frequency: int | float | None = None,
    min_category_count: int = MIN_CATEGORY_COUNT,
) -> ColumnTransformer:
    """Build the (unfitted) column preprocessor for the raw features ``X``.

    Categorical columns (category, object, string, bool) first have every category seen in
    fewer than ``min_category_count`` training rows, and every unseen one, replaced by
    ``"<rare>"`` (:class:`RareCategoryPooler`), so that no fitted attribute, and no saved
    model, holds a value of only a few persons; they are then one-hot encoded with dense
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
        Categories with fewer rows (int) or a smaller share (float) are pooled by the
        encoder (which still stores them in ``infrequent_categories_``).
    min_category_count : int, default=30
        Categories with fewer training rows become ``"<rare>"`` before encoding and are
        stored nowhere; 1 keeps every category.

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
    (1000, 58)
    """
    if isinstance(min_category_count, bool) or not (
        isinstance(min_category_count, Integral) and min_category_count >= 1
    ):
        raise ValueError(
            f"min_category_count must be an integer >= 1; got {min_category_count!r}. Use 1 to "
            "keep every category, or e.g. 30 to pool categories of fewer than 30 rows."
        )
    categorical, numeric = split_feature_kinds(X)
    numeric_steps = Pipeline(
        [
            ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
            ("scale", StandardScaler()),
        ]
    )
    pool = RareCategoryPooler(min_count=min_category_count)
    one_hot = OneHotEncoder(
        handle_unknown="infrequent_if_exist",
        max_categories=max_categories,
        min_frequency=min_frequency,
        sparse_output=False,
        dtype="float64",
    )
    return ColumnTransformer(
        [
            ("categorical", Pipeline([("pool", pool), ("one_hot", one_hot)]), categorical),
            ("numeric", numeric_steps, numeric),
        ],
        remainder="drop",
        sparse_threshold=0.0,
    )
