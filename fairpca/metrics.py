"""Evaluation metrics for fair representations and the classifiers trained on them.

These are the metrics of Section 5 of Kleindessner et al. (2023), "Efficient fair PCA for fair
representation learning", usable on any representation (fair PCA, PCA, INLP, LEACE, ...):

- :func:`explained_variance_fraction` -- %Var / 100 in Tables 1-3;
- :func:`mmd_squared` -- MMD^2 between the groups with a Gaussian kernel (Lee et al., 2022);
- :func:`linear_inseparability` -- test error of a linear classifier predicting the group;
- :func:`demographic_parity_difference`, :func:`equal_opportunity_difference` and
  :func:`accuracy` -- Delta_DP, Delta_EO and accuracy of a downstream classifier;
- :func:`group_reconstruction_error` and :func:`group_mean_gap` -- per-group reconstruction error
  and the residual gap between projected group means (what the fair PCA constraint zeroes).

Sensitive features
------------------
Every metric that takes group labels accepts a 1-D array-like of hashable labels (ints, strings,
bools, pandas categoricals, ...), one per row. A 2-D array or a DataFrame means several sensitive
attributes, one per column. As in fair PCA with several attributes (Section 3.5), each attribute is
treated on its own (its marginal groups, not intersections of attributes): scalar metrics report
the worst attribute (the largest disparity; for :func:`linear_inseparability` the smallest error),
and per-group dictionaries are keyed by ``(attribute, label)`` where ``attribute`` is the
DataFrame column name or the column index. Note that fairlearn instead uses intersectional groups
for several sensitive features. Missing labels (NaN/None) are rejected.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse
from scipy.spatial.distance import pdist
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

__all__ = [
    "accuracy",
    "as_components",
    "demographic_parity_difference",
    "equal_opportunity_difference",
    "explained_variance_fraction",
    "group_mean_gap",
    "group_reconstruction_error",
    "linear_inseparability",
    "median_heuristic_sigma",
    "mmd_squared",
    "selection_rates",
    "true_positive_rates",
]

# Kernel matrices are summed block by block; one block holds at most this many entries (32 MiB).
_KERNEL_BLOCK_ENTRIES = 1 << 22


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


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


def _factorize(column: np.ndarray) -> tuple[np.ndarray, list]:
    """Integer codes and sorted unique labels (order of appearance if labels do not sort)."""
    try:
        codes, uniques = pd.factorize(column, sort=True)
    except TypeError:
        codes, uniques = pd.factorize(column, sort=False)
    labels = [u.item() if isinstance(u, np.generic) else u for u in np.asarray(uniques)]
    return np.asarray(codes, dtype=np.intp), labels


def _encode_sensitive(sensitive: Any, n_samples: int, name: str) -> list[_Attribute]:
    """Validate group labels (1-D: one attribute; 2-D/DataFrame: one attribute per column)."""
    _reject_sparse(sensitive, name)
    if isinstance(sensitive, pd.DataFrame):
        names = list(sensitive.columns)
        columns = [sensitive.iloc[:, j].to_numpy() for j in range(sensitive.shape[1])]
        n_rows = sensitive.shape[0]
    elif isinstance(sensitive, pd.Series):
        names, columns, n_rows = [None], [sensitive.to_numpy()], sensitive.shape[0]
    else:
        array = _as_label_array(sensitive)
        if array.ndim == 0:
            raise TypeError(
                f"{name} must be array-like with one group label per row, got a scalar "
                f"{sensitive!r}."
            )
        if array.ndim > 2:
            raise ValueError(
                f"{name} must be 1-D (one attribute) or 2-D (one column per attribute), got "
                f"{array.ndim} dimensions."
            )
        n_rows = array.shape[0]
        if array.ndim == 1:
            names, columns = [None], [array]
        else:
            names = list(range(array.shape[1]))
            columns = [array[:, j] for j in range(array.shape[1])]
    if n_rows != n_samples:
        raise ValueError(
            f"{name} has {n_rows} rows but the data has {n_samples} rows; pass exactly one "
            f"group label per row."
        )
    if not columns:
        raise ValueError(f"{name} has no columns; pass at least one sensitive attribute.")
    attributes = []
    for attr_name, column in zip(names, columns, strict=True):
        where = name if attr_name is None else f"{name} column {attr_name!r}"
        missing = pd.isna(column)
        if np.any(missing):
            raise ValueError(
                f"{where} contains {int(np.sum(missing))} missing labels (NaN/None); drop those "
                f"rows or give them their own label (e.g. 'unknown')."
            )
        codes, labels = _factorize(column)
        if len(labels) < 2:
            raise ValueError(
                f"{where} has a single group ({labels[0]!r}); the metric compares groups, so "
                f"pass labels with at least two distinct values."
            )
        attributes.append(_Attribute(attr_name, labels, codes))
    return attributes


def _positive_mask(y: Any, name: str, pos_label: Any) -> np.ndarray:
    """Validate binary labels/predictions and return the boolean mask of ``y == pos_label``."""
    array = _as_label_vector(y, name)
    codes, values = _factorize(array)
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


# --------------------------------------------------------------------------------------------
# Components of a linear projection
# --------------------------------------------------------------------------------------------


def as_components(estimator_or_components: Any, n_features: int | None = None) -> np.ndarray:
    """Return the projection components as a float64 array of shape (n_components, n_features).

    Parameters
    ----------
    estimator_or_components : estimator or array-like of shape (n_components, n_features)
        A fitted estimator with a ``components_`` attribute (``FairPCA``, sklearn ``PCA``, ...),
        or the components themselves as rows (the scikit-learn convention). A 1-D array is one
        component.
    n_features : int, default=None
        Expected number of features; when given, a mismatch raises a ValueError.

    Returns
    -------
    components : ndarray of shape (n_components, n_features)
        The components, one per row.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If an estimator is given that is not fitted.
    TypeError
        If an estimator without ``components_`` is given (e.g. kernel PCA), or values are not
        numeric.
    ValueError
        If the components contain NaN/inf or do not have ``n_features`` columns.
    """
    if hasattr(estimator_or_components, "fit"):
        check_is_fitted(estimator_or_components)
        if not hasattr(estimator_or_components, "components_"):
            raise TypeError(
                f"{type(estimator_or_components).__name__} has no components_ attribute; this "
                f"metric needs a linear projection (pass a (n_components, n_features) array)."
            )
        estimator_or_components = estimator_or_components.components_
    components = _as_float_matrix(estimator_or_components, "components", one_d="row")
    if n_features is not None and components.shape[1] != n_features:
        hint = (
            " It looks transposed: pass components.T (one component per row, as sklearn's "
            "components_)."
            if components.shape[0] == n_features
            else " Use components learned on data with the same features."
        )
        raise ValueError(
            f"components have {components.shape[1]} features but X has {n_features}.{hint}"
        )
    return components


def _check_orthonormal(components: np.ndarray, *, atol: float = 1e-6) -> None:
    """Raise unless the rows of ``components`` are orthonormal up to ``atol``."""
    k, d = components.shape
    if k > d:
        raise ValueError(
            f"components has {k} rows but only {d} features, so its rows cannot be orthonormal; "
            f"pass at most {d} components."
        )
    deviation = np.max(np.abs(components @ components.T - np.eye(k)))
    if deviation > atol:
        raise ValueError(
            f"components rows are not orthonormal (max |U U^T - I| = {deviation:.3g}); the "
            f"metric assumes an orthogonal projection. Orthonormalize them first, e.g. "
            f"np.linalg.qr(components.T)[0].T."
        )


def _orthonormality_tolerance(estimator_or_components: Any) -> float:
    """1e-6 for float64 components, looser for float32 ones (sqrt of the float32 epsilon)."""
    raw = getattr(estimator_or_components, "components_", estimator_or_components)
    dtype = getattr(raw, "dtype", np.dtype(np.float64))
    if dtype.kind == "f" and np.finfo(dtype).bits < 64:
        return float(np.sqrt(np.finfo(dtype).eps))
    return 1e-6


# --------------------------------------------------------------------------------------------
# Representation quality
# --------------------------------------------------------------------------------------------


def explained_variance_fraction(X: Any, components: Any, *, center: bool = True) -> float:
    """Fraction of the variance of ``X`` captured by an orthogonal projection.

    Computes ``tr(U^T A U) / tr(A)`` with ``A = X_c^T X_c`` (``X_c`` is ``X`` centered by its
    own column means when ``center=True``, else ``X``) and ``U`` the ``(d, k)`` matrix whose
    columns are the components. This is %Var / 100 of Tables 1-3 of the paper, where ``U`` is
    learned on the training split and ``X`` is the test split (``A`` its sample covariance; the
    ratio does not depend on the 1/(n-1) factor). For ``U`` fitted by sklearn ``PCA`` on ``X``
    it equals ``explained_variance_ratio_.sum()``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Data whose variance is measured.
    components : array-like of shape (n_components, n_features) or fitted estimator
        Orthonormal components as rows, or an estimator with ``components_`` (see
        :func:`as_components`).
    center : bool, default=True
        Center ``X`` by its column means first (variance about the mean). With ``False`` the
        uncentered second moment ``tr(U^T X^T X U) / tr(X^T X)`` is used, as in the formula of
        Section 5.1 for pre-standardized data.

    Returns
    -------
    fraction : float
        Value in [0, 1]; 1 when the components span all directions of ``X``.

    Raises
    ------
    ValueError
        If ``X`` has NaN/inf, is 1-D or empty, has zero total variance, or the components are
        not orthonormal or do not match ``X``'s number of features.
    TypeError
        If ``X`` or the components are not numeric.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    >>> explained_variance_fraction(X, [[0.0, 1.0]])
    0.8
    """
    X = _as_float_matrix(X, "X", one_d="error")
    U = as_components(components, n_features=X.shape[1])
    _check_orthonormal(U, atol=_orthonormality_tolerance(components))
    if center:
        X = X - X.mean(axis=0)
    total = float(np.einsum("ij,ij->", X, X))
    if total <= 0.0:
        raise ValueError(
            "X has zero total variance (all rows identical"
            + (" after centering" if center else "")
            + "), so the explained variance fraction is undefined; pass data that varies."
        )
    projected = X @ U.T
    return float(np.einsum("ij,ij->", projected, projected) / total)


def group_reconstruction_error(
    X: Any,
    estimator_or_components: Any,
    sensitive_features: Any,
    *,
    mean: Any = None,
) -> dict:
    """Mean squared reconstruction error of each group under an orthogonal projection.

    For every row ``x`` the error is ``||x - mu - U^T U (x - mu)||^2`` (sum over features), with
    ``U`` the ``(k, d)`` orthonormal components; the result is its average over each group.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Data to reconstruct (the features the projection was fitted on).
    estimator_or_components : fitted estimator or array-like of shape (n_components, n_features)
        Estimator with ``components_`` (and usually ``mean_``), or orthonormal components as rows.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).
    mean : array-like of shape (n_features,), default=None
        Center ``mu``. If None: the estimator's ``mean_`` when it has one, otherwise the column
        means of ``X``. Pass the training mean explicitly to evaluate raw components on test data.

    Returns
    -------
    errors : dict
        ``{label: mean squared error}`` (``{(attribute, label): ...}`` for several attributes),
        groups in sorted label order.

    Raises
    ------
    ValueError
        On NaN/inf, mismatched lengths or feature counts, a single group, non-orthonormal
        components or a ``mean`` of the wrong shape.
    TypeError
        On non-numeric data or an estimator without ``components_``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 1.0], [1.0, -1.0], [2.0, 0.0], [0.0, 3.0]])
    >>> group_reconstruction_error(X, [[1.0, 0.0]], ["a", "a", "b", "b"], mean=[0.0, 0.0])
    {'a': 1.0, 'b': 4.5}
    """
    X = _as_float_matrix(X, "X", one_d="error")
    U = as_components(estimator_or_components, n_features=X.shape[1])
    _check_orthonormal(U, atol=_orthonormality_tolerance(estimator_or_components))
    attributes = _encode_sensitive(sensitive_features, X.shape[0], "sensitive_features")
    if mean is None:
        mean = getattr(estimator_or_components, "mean_", None)
    if mean is None:
        mu = X.mean(axis=0)
    else:
        mu = _as_float_matrix(mean, "mean", one_d="row")
        if mu.shape != (1, X.shape[1]):
            raise ValueError(
                f"mean must have shape ({X.shape[1]},) (one value per feature), got "
                f"{np.shape(mean)}."
            )
        mu = mu[0]
    centered = X - mu
    residual = centered - (centered @ U.T) @ U
    row_errors = np.einsum("ij,ij->i", residual, residual)
    return {
        attribute.key(g): float(row_errors[idx].mean())
        for attribute in attributes
        for g, idx in enumerate(attribute.members())
    }


def group_mean_gap(representation: Any, sensitive_features: Any) -> float:
    """Largest absolute difference between group means of a representation.

    ``max_j (max_g mean_g[:, j] - min_g mean_g[:, j])`` over the representation's columns ``j``
    and groups ``g``; with several attributes, the max over attributes. Fair PCA constrains the
    projected group-conditional means to coincide (Section 2), so on its training rows this is
    ~0 up to rounding; auditors use it to check the constraint.

    Parameters
    ----------
    representation : array-like of shape (n_samples, n_components)
        Projected data (a 1-D array is one column).
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).

    Returns
    -------
    gap : float
        Non-negative, in the units of the representation.

    Raises
    ------
    ValueError
        On NaN/inf, mismatched lengths, empty input or a single group.
    TypeError
        On non-numeric input.

    Examples
    --------
    >>> group_mean_gap([[0.0, 1.0], [2.0, 1.0], [1.0, 4.0]], [0, 0, 1])
    3.0
    """
    R = _as_float_matrix(representation, "representation", one_d="column")
    attributes = _encode_sensitive(sensitive_features, R.shape[0], "sensitive_features")
    gap = 0.0
    for attribute in attributes:
        means = np.stack([R[idx].mean(axis=0) for idx in attribute.members()])
        gap = max(gap, float(np.max(means.max(axis=0) - means.min(axis=0))))
    return gap


# --------------------------------------------------------------------------------------------
# Group separation: MMD^2 and linear inseparability
# --------------------------------------------------------------------------------------------


def median_heuristic_sigma(
    points: Any, *, max_samples: int | None = None, random_state: Any = None
) -> float:
    """Gaussian-kernel bandwidth from the median heuristic.

    Returns ``sigma = sqrt(median_{i<j} ||p_i - p_j||^2 / 2)``, so that
    ``exp(-||a - b||^2 / (2 sigma^2))`` is ``exp(-1)`` at the median squared distance. This is
    the rule of Lee et al. (2022) used for Tables 1-3, where ``points`` are the TRAINING rows
    projected onto their top-k (standard) PCA directions and the resulting sigma is shared by
    all methods; pass it to :func:`mmd_squared` via ``sigma``.

    Parameters
    ----------
    points : array-like of shape (n_samples, n_components)
        Points (a 1-D array is one column). All n(n-1)/2 squared distances are held in memory
        (8 bytes each), so consider ``max_samples`` above ~20,000 rows.
    max_samples : int, default=None
        If given and smaller than ``n_samples``, use a random subset of this many rows (>= 2).
    random_state : int, RandomState instance or None, default=None
        Seed for the subset.

    Returns
    -------
    sigma : float
        Positive bandwidth.

    Raises
    ------
    ValueError
        If there are fewer than two points, NaN/inf values, or the median squared distance is 0
        (mostly duplicate rows; pass sigma explicitly then).

    Examples
    --------
    >>> median_heuristic_sigma([[0.0], [1.0], [3.0]])  # squared distances 1, 4, 9
    1.4142135623730951
    """
    P = _as_float_matrix(points, "points", one_d="column")
    max_samples = _check_max_samples(max_samples, minimum=2)
    if P.shape[0] < 2:
        raise ValueError("median_heuristic_sigma needs at least two points, got one.")
    if max_samples is not None and P.shape[0] > max_samples:
        rng = check_random_state(random_state)
        P = P[rng.choice(P.shape[0], size=max_samples, replace=False)]
    median = float(np.median(pdist(P, metric="sqeuclidean"), overwrite_input=True))
    if median <= 0.0:
        raise ValueError(
            "The median pairwise squared distance is 0 (most rows are identical), so the median "
            "heuristic gives no bandwidth; pass sigma explicitly."
        )
    return float(np.sqrt(median / 2.0))


def _mean_gaussian_kernel(A: np.ndarray, B: np.ndarray, gamma: float) -> float:
    """Mean of exp(-gamma ||a - b||^2) over all pairs (a, b), summed in row blocks of ``A``."""
    sq_norms_a = np.einsum("ij,ij->i", A, A)
    sq_norms_b = np.einsum("ij,ij->i", B, B)
    rows_per_block = max(1, _KERNEL_BLOCK_ENTRIES // B.shape[0])
    total = 0.0
    for start in range(0, A.shape[0], rows_per_block):
        stop = start + rows_per_block
        sq_dist = A[start:stop] @ B.T
        sq_dist *= -2.0
        sq_dist += sq_norms_a[start:stop, None]
        sq_dist += sq_norms_b[None, :]
        np.maximum(sq_dist, 0.0, out=sq_dist)  # rounding can make tiny distances negative
        sq_dist *= -gamma
        np.exp(sq_dist, out=sq_dist)
        total += float(sq_dist.sum())
    return total / (A.shape[0] * B.shape[0])


def mmd_squared(
    representation: Any,
    groups: Any,
    *,
    sigma: float | None = None,
    max_samples: int | None = None,
    random_state: Any = None,
) -> float:
    """Squared maximum mean discrepancy between groups with a Gaussian kernel.

    The biased V-statistic of Lee et al. (2022), with all three terms::

        MMD^2(P1, P0) = mean K(P1, P1) + mean K(P0, P0) - 2 mean K(P1, P0),
        K(a, b) = exp(-||a - b||^2 / (2 sigma^2)),

    where ``P_g`` are the rows of group ``g`` and the means run over all pairs (including
    ``a = b``). It is the squared RKHS distance between the groups' mean embeddings, so it is
    >= 0 (tiny negative rounding is clipped to 0) and 0 when the groups have identical
    empirical distributions. With more than two groups the max over pairs of groups is reported;
    with several attributes, the max over attributes.

    Bandwidth: by default ``sigma`` comes from the median heuristic on the given representation
    (:func:`median_heuristic_sigma`: ``sigma^2 = median_{i<j} ||r_i - r_j||^2 / 2`` over all its
    rows). To reproduce Tables 1-3 of the paper, compute ``sigma`` once per (dataset, split, k)
    from the TRAINING rows projected on their top-k PCA directions and pass it explicitly, so
    that all methods share it.

    Parameters
    ----------
    representation : array-like of shape (n_samples, n_components)
        Projected data (a 1-D array is one column).
    groups : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).
    sigma : float, default=None
        Kernel bandwidth (> 0). None: median heuristic as above.
    max_samples : int, default=None
        If given, each group larger than this is replaced by a random subset of ``max_samples``
        rows, and the median heuristic uses a random subset of that many rows; trades accuracy
        for time. Kernel sums are computed in blocks, so memory stays ~32 MiB either way (except
        the median heuristic, which holds all pairwise distances of the rows it uses).
    random_state : int, RandomState instance or None, default=None
        Seed for the subsets (only used with ``max_samples``).

    Returns
    -------
    mmd2 : float
        Non-negative; lower means the groups are harder to tell apart.

    Raises
    ------
    ValueError
        On NaN/inf, mismatched lengths, empty input, a single group, sigma <= 0 or
        max_samples < 1.
    TypeError
        On non-numeric input, a non-numeric sigma or a non-integer max_samples.

    Examples
    --------
    Two single points at distance 1 with sigma = 1: ``1 + 1 - 2 exp(-1/2)``.

    >>> round(mmd_squared([[0.0], [1.0]], [0, 1], sigma=1.0), 6)
    0.786939
    """
    R = _as_float_matrix(representation, "representation", one_d="column")
    attributes = _encode_sensitive(groups, R.shape[0], "groups")
    sigma = None if sigma is None else _check_sigma(sigma)
    max_samples = _check_max_samples(max_samples, minimum=1)
    rng = check_random_state(random_state)
    # MMD is translation invariant; centering keeps ||a||^2 + ||b||^2 - 2 a.b accurate.
    R = R - R.mean(axis=0)
    if sigma is None:
        sigma = median_heuristic_sigma(
            R, max_samples=None if max_samples is None else max(2, max_samples), random_state=rng
        )
    gamma = 1.0 / (2.0 * sigma**2)
    worst = 0.0
    for attribute in attributes:
        members = attribute.members()
        if max_samples is not None:
            members = [
                np.sort(rng.choice(idx, size=max_samples, replace=False))
                if idx.size > max_samples
                else idx
                for idx in members
            ]
        points = [R[idx] for idx in members]
        within = [_mean_gaussian_kernel(P, P, gamma) for P in points]
        for a in range(len(points)):
            for b in range(a + 1, len(points)):
                between = _mean_gaussian_kernel(points[a], points[b], gamma)
                worst = max(worst, within[a] + within[b] - 2.0 * between)
    return max(worst, 0.0)


def linear_inseparability(
    representation: Any,
    groups: Any,
    *,
    test_size: float | int = 0.3,
    random_state: Any = 0,
    classifier: Any = None,
) -> float:
    """Test error of a linear classifier that predicts the group from the representation.

    The representation is split into train and test parts (stratified by group), a logistic
    regression (``StandardScaler`` then ``LogisticRegression(max_iter=1000)``; multinomial for
    more than two groups) is fitted on the train part, and its error on the test part is
    returned. Higher is fairer: ~0 means the groups are linearly separable, while the error of
    always predicting the largest group (0.5 for balanced two groups) means no linear
    information is left. With several attributes, the smallest error over attributes.

    Parameters
    ----------
    representation : array-like of shape (n_samples, n_components)
        Projected data (a 1-D array is one column).
    groups : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels; every group needs at least two rows (stratified split).
    test_size : float or int, default=0.3
        Fraction (0 < test_size < 1) or number of rows held out for testing.
    random_state : int, RandomState instance or None, default=0
        Seed of the split (and of the classifier, if it has a ``random_state`` parameter).
    classifier : scikit-learn classifier, default=None
        Replaces the default logistic regression (it is cloned, e.g. a ``LinearSVC``).

    Returns
    -------
    error : float
        Test misclassification rate in [0, 1].

    Raises
    ------
    ValueError
        On NaN/inf, mismatched lengths, a single group, a group with one row or a bad
        ``test_size``.
    TypeError
        On non-numeric input or a non-numeric ``test_size``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = np.repeat([0, 1], 50)
    >>> separable = rng.normal(size=(100, 2)) + 10.0 * z[:, None]
    >>> linear_inseparability(separable, z)
    0.0
    """
    R = _as_float_matrix(representation, "representation", one_d="column")
    attributes = _encode_sensitive(groups, R.shape[0], "groups")
    _check_test_size(test_size, R.shape[0])
    errors = []
    for attribute in attributes:
        counts = np.bincount(attribute.codes)
        if counts.min() < 2:
            small = attribute.key(int(np.argmin(counts)))
            raise ValueError(
                f"group {small!r} has only one row; the stratified train/test split needs at "
                f"least two rows per group. Drop or merge that group."
            )
        R_train, R_test, z_train, z_test = train_test_split(
            R, attribute.codes, test_size=test_size, stratify=attribute.codes,
            random_state=random_state,
        )  # fmt: skip
        if classifier is None:
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        else:
            model = clone(classifier)
            if "random_state" in model.get_params():
                model.set_params(random_state=random_state)
        model.fit(R_train, z_train)
        errors.append(1.0 - float(accuracy_score(z_test, model.predict(R_test))))
    return min(errors)


def _check_test_size(test_size: Any, n_samples: int) -> None:
    if isinstance(test_size, bool) or not isinstance(test_size, numbers.Real):
        raise TypeError(f"test_size must be a float in (0, 1) or an int, got {test_size!r}.")
    if isinstance(test_size, numbers.Integral):
        if not 1 <= test_size < n_samples:
            raise ValueError(
                f"test_size={test_size} rows must be between 1 and n_samples - 1 = {n_samples - 1}."
            )
    elif not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size={test_size} must be a fraction strictly between 0 and 1.")


# --------------------------------------------------------------------------------------------
# Downstream classifier fairness
# --------------------------------------------------------------------------------------------


def selection_rates(y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1) -> dict:
    """Fraction of positive predictions ``P(y_pred = pos_label | group)`` per group.

    Parameters
    ----------
    y_pred : array-like of shape (n_samples,)
        Binary predictions (at most two distinct values).
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).
    pos_label : hashable, default=1
        The value of ``y_pred`` meaning "positive".

    Returns
    -------
    rates : dict
        ``{label: rate}`` (``{(attribute, label): rate}`` for several attributes).

    Raises
    ------
    ValueError
        On missing values, mismatched lengths, non-binary ``y_pred``, a ``pos_label`` that is
        not one of two predicted values, or a single group.

    Examples
    --------
    >>> selection_rates([1, 0, 1, 1], ["a", "a", "b", "b"])
    {'a': 0.5, 'b': 1.0}
    """
    positive = _positive_mask(y_pred, "y_pred", pos_label)
    attributes = _encode_sensitive(sensitive_features, positive.shape[0], "sensitive_features")
    return {
        attribute.key(g): float(positive[idx].mean())
        for attribute in attributes
        for g, idx in enumerate(attribute.members())
    }


def true_positive_rates(
    y_true: Any, y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1
) -> dict:
    """True positive rate ``P(y_pred = pos_label | y_true = pos_label, group)`` per group.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Binary true labels.
    y_pred : array-like of shape (n_samples,)
        Binary predictions.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).
    pos_label : hashable, default=1
        The value meaning "positive" in both ``y_true`` and ``y_pred``.

    Returns
    -------
    rates : dict
        ``{label: rate}`` (``{(attribute, label): rate}`` for several attributes).

    Raises
    ------
    ValueError
        On missing values, mismatched lengths, non-binary labels, a bad ``pos_label``, a single
        group, or a group without any row with ``y_true == pos_label``.

    Examples
    --------
    >>> true_positive_rates([1, 1, 0, 1, 1], [1, 0, 1, 1, 1], [0, 0, 0, 1, 1])
    {0: 0.5, 1: 1.0}
    """
    actual = _positive_mask(y_true, "y_true", pos_label)
    predicted = _positive_mask(y_pred, "y_pred", pos_label)
    _check_same_length(y_true=actual, y_pred=predicted)
    attributes = _encode_sensitive(sensitive_features, actual.shape[0], "sensitive_features")
    rates = {}
    for attribute in attributes:
        for g, idx in enumerate(attribute.members()):
            positives = idx[actual[idx]]
            if positives.size == 0:
                raise ValueError(
                    f"group {attribute.key(g)!r} has no rows with y_true == {pos_label!r}, so "
                    f"its true positive rate is undefined; check pos_label or drop that group."
                )
            rates[attribute.key(g)] = float(predicted[positives].mean())
    return rates


def _max_spread(rates: dict, attributes_are_keyed: bool) -> float:
    """max - min of the rates, per attribute when keys are (attribute, label) pairs."""
    if not attributes_are_keyed:
        values = list(rates.values())
        return float(max(values) - min(values))
    by_attribute: dict = {}
    for (attribute, _), rate in rates.items():
        by_attribute.setdefault(attribute, []).append(rate)
    return float(max(max(v) - min(v) for v in by_attribute.values()))


def _is_multi_attribute(sensitive_features: Any) -> bool:
    if isinstance(sensitive_features, pd.DataFrame):
        return True
    if isinstance(sensitive_features, pd.Series):
        return False
    return np.ndim(sensitive_features) == 2


def demographic_parity_difference(
    y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1
) -> float:
    """Demographic parity difference: max minus min selection rate over groups.

    ``Delta_DP = max_g P(y_pred = 1 | Z = g) - min_g P(y_pred = 1 | Z = g)``; for two groups
    this is the paper's ``|P(Y^ = 1 | Z = 0) - P(Y^ = 1 | Z = 1)|``. With several attributes,
    the max over attributes.

    Parameters
    ----------
    y_pred : array-like of shape (n_samples,)
        Binary predictions.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels.
    pos_label : hashable, default=1
        The value of ``y_pred`` meaning "positive".

    Returns
    -------
    difference : float
        In [0, 1]; 0 when all groups have the same selection rate.

    Raises
    ------
    ValueError
        As :func:`selection_rates`.

    Examples
    --------
    >>> demographic_parity_difference([1, 0, 1, 1], ["a", "a", "b", "b"])
    0.5
    """
    rates = selection_rates(y_pred, sensitive_features, pos_label=pos_label)
    return _max_spread(rates, _is_multi_attribute(sensitive_features))


def equal_opportunity_difference(
    y_true: Any, y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1
) -> float:
    """Equal opportunity difference: max minus min true positive rate over groups.

    ``Delta_EO = max_g P(y_pred = 1 | Y = 1, Z = g) - min_g P(y_pred = 1 | Y = 1, Z = g)``
    (Section 5.2); with several attributes, the max over attributes.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Binary true labels.
    y_pred : array-like of shape (n_samples,)
        Binary predictions.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels.
    pos_label : hashable, default=1
        The value meaning "positive" in both ``y_true`` and ``y_pred``.

    Returns
    -------
    difference : float
        In [0, 1]; 0 when all groups have the same true positive rate.

    Raises
    ------
    ValueError
        As :func:`true_positive_rates`.

    Examples
    --------
    >>> equal_opportunity_difference([1, 1, 0, 1, 1], [1, 0, 1, 1, 1], [0, 0, 0, 1, 1])
    0.5
    """
    rates = true_positive_rates(y_true, y_pred, sensitive_features, pos_label=pos_label)
    return _max_spread(rates, _is_multi_attribute(sensitive_features))


def accuracy(y_true: Any, y_pred: Any) -> float:
    """Fraction of rows where ``y_pred == y_true`` (as scikit-learn's ``accuracy_score``).

    Unlike ``accuracy_score`` it accepts labels of any hashable type, mixed types included.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_pred : array-like of shape (n_samples,)
        Predicted labels.

    Returns
    -------
    accuracy : float
        In [0, 1].

    Raises
    ------
    ValueError
        On missing values, empty or non-1-D input, or mismatched lengths.

    Examples
    --------
    >>> accuracy([0, 1, 1, 0], [0, 1, 0, 0])
    0.75
    """
    truth = _as_label_vector(y_true, "y_true")
    predicted = _as_label_vector(y_pred, "y_pred")
    _check_same_length(y_true=truth, y_pred=predicted)
    return float(np.mean(np.asarray(truth == predicted, dtype=bool)))
