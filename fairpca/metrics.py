"""Evaluation metrics for fair representations and the classifiers trained on them.

These are the metrics of Section 5 of Kleindessner et al. (2023), "Efficient fair PCA for fair
representation learning", usable on any representation (fair PCA, PCA, INLP, LEACE, ...):

- :func:`explained_variance_fraction` -- %Var / 100 in Tables 1-3;
- :func:`mmd_squared` -- MMD^2 between the groups with a Gaussian kernel (Lee et al., 2022);
- :func:`linear_inseparability` -- test error of a linear classifier predicting the group;
- :func:`group_fairness` and :func:`bootstrap_intervals` -- the one definition of accuracy,
  selection rate, true positive rate and Delta_DP / Delta_EO of a downstream classifier, per
  attribute, over intersections and worst over attributes, with small groups suppressed and
  bootstrap confidence intervals (:func:`ci_metrics` names them); the audit flow, the MLflow
  ``fairness`` evaluator and the benchmarks all use it;
- :func:`demographic_parity_difference`, :func:`equal_opportunity_difference`,
  :func:`selection_rates`, :func:`true_positive_rates` and :func:`accuracy` -- the same
  quantities as plain numbers and dictionaries (every group kept);
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
import re
from dataclasses import dataclass, replace
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

from ._groups import _factorize, _factorize_small_ints, encode_labels

__all__ = [
    "FairnessReport",
    "GroupFairness",
    "accuracy",
    "as_components",
    "bootstrap_intervals",
    "check_fairness_options",
    "ci_metrics",
    "demographic_parity_difference",
    "equal_opportunity_difference",
    "explained_variance_fraction",
    "group_fairness",
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
    attributes = _attributes(sensitive_features, X.shape[0], "sensitive_features")
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
    attributes = _attributes(sensitive_features, R.shape[0], "sensitive_features")
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
    attributes = _attributes(groups, R.shape[0], "groups")
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
    attributes = _attributes(groups, R.shape[0], "groups")
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
# Downstream classifier fairness: one definition of the confusion-cell counts per group, from
# which accuracy, selection rates, true positive rates and the DP / EO differences follow.
# --------------------------------------------------------------------------------------------

# The four confusion cells of a row, indexed 2 * (y_true == pos) + (y_pred == pos).
_TN, _FP, _FN, _TP = range(4)
# A bootstrap block holds at most this many cell counts (64 MiB of float64).
_BOOTSTRAP_BLOCK_ENTRIES = 1 << 23
# Characters MLflow accepts in metric names; others become "_" in as_metrics() keys.
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_\-. :/]")


def _metric_names(values: dict) -> dict:
    """``values`` with every name made MLflow-safe (rejected characters become ``_``).

    The one place metric names are built, so the names of :meth:`FairnessReport.as_metrics`,
    :func:`bootstrap_intervals` and :func:`ci_metrics` always agree. Raises if two names collide.
    """
    safe_values = {}
    for name, value in values.items():
        safe = _UNSAFE_NAME.sub("_", name)
        if safe in safe_values:
            raise ValueError(
                f"two metric names become {safe!r} once characters MLflow rejects are "
                f"replaced; rename the groups so their labels differ in letters or digits."
            )
        safe_values[safe] = value
    return safe_values


def _cell_counts(codes: np.ndarray, n_groups: int, actual: np.ndarray, predicted: np.ndarray):
    """Counts of the four confusion cells per group, float64 of shape (n_groups, 4)."""
    cells = codes * 4 + 2 * actual.astype(np.intp) + predicted.astype(np.intp)
    return np.bincount(cells, minlength=4 * n_groups).reshape(n_groups, 4).astype(np.float64)


def _rates(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group sizes, selection rates and TPRs from counts of shape (..., n_groups, 4).

    ``P(Yhat = 1 | g) = (FP + TP) / n_g`` and ``P(Yhat = 1 | Y = 1, g) = TP / (FN + TP)``
    (Section 5.2); a group without positives has TPR NaN.
    """
    size = counts.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        selection = (counts[..., _FP] + counts[..., _TP]) / size
        tpr = counts[..., _TP] / (counts[..., _FN] + counts[..., _TP])
    return size, selection, tpr


def _spread(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """max - min over the kept groups with a defined value (last axis); NaN if fewer than 2."""
    kept = values[..., keep]
    defined = np.isfinite(kept)
    high = np.where(defined, kept, -np.inf).max(axis=-1, initial=-np.inf)
    low = np.where(defined, kept, np.inf).min(axis=-1, initial=np.inf)
    with np.errstate(invalid="ignore"):
        return np.where(defined.sum(axis=-1) >= 2, high - low, np.nan)


def _worst(differences: list[np.ndarray]) -> np.ndarray:
    """Largest difference over attributes, ignoring undefined (NaN) ones; NaN if all are."""
    stacked = np.stack(differences)
    defined = np.isfinite(stacked)
    worst = np.where(defined, stacked, -np.inf).max(axis=0)
    return np.where(defined.any(axis=0), worst, np.nan)


@dataclass(frozen=True)
class _Grouping:
    """One way of grouping the rows: an attribute, or the intersection of all attributes.

    ``member`` maps each intersection group (the finest partition) to a group of this grouping,
    so counts of this grouping are sums of intersection-group counts.
    """

    name: str
    labels: list
    member: np.ndarray

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        """Sum counts of shape (..., n_intersections, 4) into (..., n_groups, 4)."""
        indicator = np.zeros((self.member.size, len(self.labels)))
        indicator[np.arange(self.member.size), self.member] = 1.0
        return np.swapaxes(np.swapaxes(counts, -1, -2) @ indicator, -1, -2)


@dataclass(frozen=True)
class _FairnessProblem:
    """Validated inputs reduced to confusion-cell counts per intersection group."""

    counts: np.ndarray  # (n_intersections, 4)
    attributes: list  # _Grouping per attribute
    intersection: _Grouping | None  # None for one attribute
    min_group_size: int
    pos_label: Any

    def groupings(self) -> list[_Grouping]:
        return self.attributes + ([] if self.intersection is None else [self.intersection])


def _check_min_group_size(min_group_size: Any) -> int:
    if isinstance(min_group_size, bool) or not isinstance(min_group_size, numbers.Integral):
        raise TypeError(f"min_group_size must be a positive int, got {min_group_size!r}.")
    if min_group_size < 1:
        raise ValueError(
            f"min_group_size must be at least 1, got {min_group_size}; pass 1 to report every "
            f"group."
        )
    return int(min_group_size)


def _intersections(codes: np.ndarray, n_groups: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Attribute codes of each present intersection group (sorted) and each row's index."""
    try:
        flat = np.ravel_multi_index(tuple(codes.T), n_groups)
    except ValueError:  # more combinations than an index can hold
        combos, inverse = np.unique(codes, axis=0, return_inverse=True)
        return combos, inverse.reshape(-1)
    fast = _factorize_small_ints(flat)  # O(n) for up to a million combinations
    inverse, present = fast if fast is not None else np.unique(flat, return_inverse=True)[::-1]
    present = np.asarray(present, dtype=np.intp)
    return np.stack(np.unravel_index(present, n_groups), axis=1), inverse


def _fairness_problem(y_true, y_pred, sensitive, pos_label, min_group_size) -> _FairnessProblem:
    """Validate the inputs and count the confusion cells of each intersection group."""
    min_group_size = _check_min_group_size(min_group_size)
    actual = _positive_mask(y_true, "y_true", pos_label)
    predicted = _positive_mask(y_pred, "y_pred", pos_label)
    _check_same_length(y_true=actual, y_pred=predicted)
    _reject_sparse(sensitive, "sensitive_features")
    encoding, _ = encode_labels(sensitive, actual.shape[0])
    combos, inverse = _intersections(encoding.codes, [len(g) for g in encoding.groups])
    attributes = [
        _Grouping(str(name), list(labels), combos[:, a])
        for a, (name, labels) in enumerate(zip(encoding.names, encoding.groups, strict=True))
    ]
    intersection = None
    if len(attributes) > 1:
        labels = [
            tuple(g.labels[c] for g, c in zip(attributes, row, strict=True)) for row in combos
        ]
        intersection = _Grouping("intersection", labels, np.arange(len(combos)))
    counts = _cell_counts(inverse, len(combos), actual, predicted)
    return _FairnessProblem(counts, attributes, intersection, min_group_size, pos_label)


@dataclass(frozen=True)
class GroupFairness:
    """Fairness of one grouping of the rows (one attribute, or the intersection of all).

    Attributes
    ----------
    dp_difference : float
        ``max_g P(Yhat = 1 | g) - min_g P(Yhat = 1 | g)`` over the reported groups; NaN with
        fewer than two.
    eo_difference : float
        ``max_g P(Yhat = 1 | Y = 1, g) - min_g ...`` over the reported groups with positives.
    selection_rate, tpr : dict
        Per reported group (TPR NaN for a group without positives); empty when withheld so that
        a suppressed group cannot be recovered by differencing (see :func:`group_fairness`).
    group_size : dict
        Rows per reported group; empty where the rates are.
    suppressed : list
        Groups with fewer than ``min_group_size`` rows: left out of everything above.
    """

    dp_difference: float
    eo_difference: float
    selection_rate: dict
    tpr: dict
    group_size: dict
    suppressed: list


@dataclass(frozen=True)
class FairnessReport:
    """Accuracy and group fairness of binary predictions; see :func:`group_fairness`.

    Attributes
    ----------
    accuracy : float
    dp_difference, eo_difference : float
        Worst (largest) over the attributes of the per-attribute differences.
    attributes : dict of str to GroupFairness
        Per attribute (DataFrame column name, Series name, else ``sensitive_<j>``).
    intersection : GroupFairness or None
        Over the intersections of all attributes (None for one attribute); group keys are
        tuples of labels.
    notes : list of str
        Why a value is undefined (NaN) and which groups were suppressed.
    """

    accuracy: float
    dp_difference: float
    eo_difference: float
    attributes: dict
    intersection: GroupFairness | None
    notes: list

    def _groupings(self) -> list[tuple[str, GroupFairness]]:
        pairs = list(self.attributes.items())
        return pairs + ([("intersection", self.intersection)] if self.intersection else [])

    def as_metrics(self) -> dict[str, float]:
        """Flat ``{name: value}`` for a metrics logger; undefined (NaN) values are left out.

        Names: ``accuracy``, ``dp_difference``, ``eo_difference``, ``dp_difference.<attr>``,
        ``eo_difference.<attr>``, ``dp_difference.intersection`` and
        ``eo_difference.intersection`` (several attributes), ``selection_rate.<attr>:<group>``
        and ``tpr.<attr>:<group>`` for each reported group (an intersection group is named
        ``<attr1>:<group1>/<attr2>:<group2>``). Characters MLflow rejects become ``_``. Leaving
        NaN out makes a threshold gate on an undefined difference fail instead of pass.
        """
        values = {
            "accuracy": self.accuracy,
            "dp_difference": self.dp_difference,
            "eo_difference": self.eo_difference,
        }
        for name, grouping in self._groupings():
            values[f"dp_difference.{name}"] = grouping.dp_difference
            values[f"eo_difference.{name}"] = grouping.eo_difference
        for name, grouping in self._groupings():
            for group in grouping.group_size:
                key = _group_name(name, group, self.attributes)
                values[f"selection_rate.{key}"] = grouping.selection_rate[group]
                values[f"tpr.{key}"] = grouping.tpr[group]
        return {k: float(v) for k, v in _metric_names(values).items() if np.isfinite(v)}

    def group_table(self) -> pd.DataFrame:
        """One row per reported group: attribute, group, size, selection_rate, tpr.

        An intersection group (attribute ``intersection``) is written
        ``<attr1>:<group1>/<attr2>:<group2>``. Suppressed groups are not in the table; ``tpr`` is
        NaN for a group without positives.
        """
        rows = [
            {
                "attribute": name,
                "group": _group_label(name, group, self.attributes),
                "size": size,
                "selection_rate": grouping.selection_rate[group],
                "tpr": grouping.tpr[group],
            }
            for name, grouping in self._groupings()
            for group, size in grouping.group_size.items()
        ]
        columns = ["attribute", "group", "size", "selection_rate", "tpr"]
        return pd.DataFrame(rows, columns=columns).astype({"size": np.int64})


def _group_label(name: str, group: Any, attributes: dict) -> str:
    """The label as text; an intersection group is ``<attr1>:<group1>/<attr2>:<group2>``."""
    if name != "intersection":
        return str(group)
    return "/".join(f"{a}:{g}" for a, g in zip(attributes, group, strict=True))


def _group_name(name: str, group: Any, attributes: dict) -> str:
    """``<attr>:<group>`` of metric names; an intersection group is named by its label."""
    label = _group_label(name, group, attributes)
    return label if name == "intersection" else f"{name}:{label}"


def _describe(problem: _FairnessProblem, grouping: _Grouping, notes: list) -> GroupFairness:
    """Rates and differences of one grouping, with notes on suppressed and undefined values."""
    size, selection, tpr = _rates(grouping.aggregate(problem.counts))
    keep = size >= problem.min_group_size
    reported = np.flatnonzero(keep)
    labels = [grouping.labels[g] for g in reported]
    result = GroupFairness(
        dp_difference=float(_spread(selection, keep)),
        eo_difference=float(_spread(tpr, keep)),
        selection_rate={k: float(selection[g]) for k, g in zip(labels, reported, strict=True)},
        tpr={k: float(tpr[g]) for k, g in zip(labels, reported, strict=True)},
        group_size={k: int(size[g]) for k, g in zip(labels, reported, strict=True)},
        suppressed=[grouping.labels[g] for g in np.flatnonzero(~keep)],
    )
    if result.suppressed:
        notes.append(
            f"{grouping.name}: {len(result.suppressed)} group(s) with fewer than "
            f"min_group_size={problem.min_group_size} rows suppressed."
        )
    if np.isnan(result.dp_difference):
        notes.append(
            f"{grouping.name}: fewer than two groups with at least "
            f"{problem.min_group_size} rows, so dp_difference.{grouping.name} and "
            f"eo_difference.{grouping.name} are undefined."
        )
    elif np.isnan(result.eo_difference):
        notes.append(
            f"{grouping.name}: fewer than two reported groups have rows with y_true == "
            f"{problem.pos_label!r}, so eo_difference.{grouping.name} is undefined."
        )
    return result


# Largest cell-indicator matrices (entries) the differencing check solves; beyond, it assumes
# recovery is possible and withholds every per-group value.
_DIFFERENCING_CHECK_ENTRIES = 1 << 22


def _indicators(problem: _FairnessProblem, grouping: _Grouping, reported: bool) -> np.ndarray:
    """0/1 matrix (groups, intersection cells): the cells each reported (or suppressed) group is."""
    chosen = np.flatnonzero(_reported(problem, grouping) == reported)
    return (grouping.member[None, :] == chosen[:, None]).astype(np.float64)


def _reported(problem: _FairnessProblem, grouping: _Grouping) -> np.ndarray:
    """Whether each group of ``grouping`` has at least ``min_group_size`` rows."""
    rows = problem.counts.sum(axis=1)
    size = np.bincount(grouping.member, weights=rows, minlength=len(grouping.labels))
    return size >= problem.min_group_size


def _recoverable(problem: _FairnessProblem, published: list) -> bool:
    """Whether a suppressed group's counts follow linearly from the published groups' counts.

    A group's size and its numbers of selected rows, positives, ... are sums over its cells, so
    the published groups reveal exactly the combinations of cell counts in the row space of
    their cell indicators; a suppressed group is recoverable iff its indicator lies in it.
    """
    n_cells = problem.counts.shape[0]
    n_suppressed = sum(int(np.sum(~_reported(problem, g))) for g in problem.groupings())
    if not published or n_suppressed == 0:
        return False
    n_groups = n_suppressed + sum(len(g.labels) for g in published)
    if n_cells * n_groups > _DIFFERENCING_CHECK_ENTRIES:  # checked before building the matrices
        return True
    secret = np.vstack([_indicators(problem, g, False) for g in problem.groupings()])
    known = np.vstack([_indicators(problem, g, True) for g in published])
    coefficients = np.linalg.lstsq(known.T, secret.T, rcond=None)[0]
    residual = np.abs(known.T @ coefficients - secret.T).max(axis=0)
    return bool(np.any(residual < 1e-8))


def _prevent_differencing(problem: _FairnessProblem, results: dict, notes: list) -> dict:
    """``results`` (GroupFairness per grouping name) with per-group values withheld as needed.

    Complementary disclosure: an attribute group is a union of intersection groups and every
    attribute partitions the same rows, so size x rate of published groups can add up to the
    counts of a suppressed group (F minus F x white = F x black). If so, the per-group values of
    every grouping with a suppressed group are withheld (only its differences are published);
    if a suppressed group is still recoverable, those of every grouping are.
    """
    groupings = problem.groupings()
    if not _recoverable(problem, groupings):
        return results
    published = [g for g in groupings if not results[g.name].suppressed]
    if _recoverable(problem, published):
        published = []
    names = {g.name for g in published}
    for name, result in results.items():
        if name not in names and result.group_size:
            notes.append(
                f"{name}: per-group sizes and rates are withheld because a suppressed group "
                f"could be recovered from them by differencing; dp_difference.{name} and "
                f"eo_difference.{name} (over the reported groups) are published."
            )
            results[name] = replace(result, selection_rate={}, tpr={}, group_size={})
    return results


def group_fairness(
    y_true: Any, y_pred: Any, sensitive: Any, *, pos_label: Any = 1, min_group_size: int = 1
) -> FairnessReport:
    """Accuracy, selection rates, TPRs and DP / EO differences per attribute and intersection.

    ``Delta_DP = max_g P(Yhat = 1 | g) - min_g P(Yhat = 1 | g)`` and ``Delta_EO`` the same spread
    of ``P(Yhat = 1 | Y = 1, g)`` (Section 5.2 of the paper; for two groups the absolute
    difference). Each attribute is treated on its own (its marginal groups); with several
    attributes the report also covers their intersections (fairlearn's groups), and the
    top-level differences are the worst over the attributes. Groups with fewer than
    ``min_group_size`` rows are suppressed (left out of the differences and of every reported
    value); a difference over fewer than two groups is NaN, with the reason in ``notes``. When
    the counts of a suppressed group follow from published group sizes and rates by
    differencing (e.g. an attribute group minus its reported intersection groups), the
    per-group values of the groupings with suppressed groups, or if need be of all groupings,
    are withheld too (their differences are still reported).

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,)
        Binary true labels and predictions.
    sensitive : array-like of shape (n_samples,), 2-D array or DataFrame
        Group labels: one attribute, or one column per attribute.
    pos_label : hashable, default=1
        The value meaning "positive" in both ``y_true`` and ``y_pred``.
    min_group_size : int, default=1
        Smallest group that is reported.

    Returns
    -------
    FairnessReport

    Raises
    ------
    ValueError
        On missing values, mismatched lengths, non-binary labels or a bad ``pos_label``.

    Examples
    --------
    >>> report = group_fairness([1, 1, 0, 1], [1, 0, 1, 1], ["a", "a", "b", "b"])
    >>> report.dp_difference, report.attributes["sensitive_0"].tpr
    (0.5, {'a': 0.5, 'b': 1.0})
    """
    problem = _fairness_problem(y_true, y_pred, sensitive, pos_label, min_group_size)
    notes: list = []
    results = {g.name: _describe(problem, g, notes) for g in problem.groupings()}
    results = _prevent_differencing(problem, results, notes)
    attributes = {g.name: results[g.name] for g in problem.attributes}
    intersection = None if problem.intersection is None else results["intersection"]
    counts = problem.counts.sum(axis=0)
    differences = list(attributes.values())
    return FairnessReport(
        accuracy=float((counts[_TN] + counts[_TP]) / counts.sum()),
        dp_difference=float(_worst([np.array(a.dp_difference) for a in differences])),
        eo_difference=float(_worst([np.array(a.eo_difference) for a in differences])),
        attributes=attributes,
        intersection=intersection,
        notes=notes,
    )


def _resampled_metrics(problem: _FairnessProblem, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Every difference and the accuracy of a batch of resampled counts (B, n_inter, 4)."""
    total = counts.sum(axis=1)
    values = {"accuracy": (total[:, _TN] + total[:, _TP]) / total.sum(axis=1)}
    per_grouping = {}
    for grouping in problem.groupings():
        size, selection, tpr = _rates(grouping.aggregate(counts))
        # A resample without positives in a group whose observed TPR is defined keeps the
        # observed TPR: dropping the group would shrink that resample's spread.
        observed_tpr = _rates(grouping.aggregate(problem.counts))[2]
        tpr = np.where(np.isnan(tpr), observed_tpr, tpr)
        # Group sizes are the same in every resample (stratified by intersection group).
        keep = size[0] >= problem.min_group_size
        per_grouping[grouping.name] = (_spread(selection, keep), _spread(tpr, keep))
    attribute_names = [g.name for g in problem.attributes]
    values["dp_difference"] = _worst([per_grouping[n][0] for n in attribute_names])
    values["eo_difference"] = _worst([per_grouping[n][1] for n in attribute_names])
    for name, (dp, eo) in per_grouping.items():
        values[f"dp_difference.{name}"] = dp
        values[f"eo_difference.{name}"] = eo
    return _metric_names(values)


def _check_bootstrap(n_resamples: Any, confidence: Any) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral):
        raise TypeError(f"n_resamples must be an int, got {n_resamples!r}.")
    if n_resamples < 2:
        raise ValueError(f"n_resamples must be at least 2, got {n_resamples}; 1000 is typical.")
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real):
        raise TypeError(f"confidence must be a float in (0, 1), got {confidence!r}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}.")


def check_fairness_options(
    *, min_group_size: Any = 1, n_resamples: Any = 1000, confidence: Any = 0.95
) -> None:
    """Raise a clear error for a bad option of :func:`group_fairness` / :func:`bootstrap_intervals`.

    For callers that want to reject bad settings before any expensive work (e.g. predicting).

    Raises
    ------
    TypeError, ValueError
        ``min_group_size`` not a positive int, ``n_resamples`` not an int >= 2, or
        ``confidence`` not in (0, 1).
    """
    _check_min_group_size(min_group_size)
    _check_bootstrap(n_resamples, confidence)


def bootstrap_intervals(
    y_true: Any,
    y_pred: Any,
    sensitive: Any,
    *,
    pos_label: Any = 1,
    min_group_size: int = 1,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: Any = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals of the accuracy and of every DP / EO difference.

    Rows are resampled with replacement within each intersection group (stratified, so every
    group keeps its size and the same groups are suppressed as in :func:`group_fairness`); the
    predictions are kept (no refit). All metrics depend on the rows only through the counts of
    the four confusion cells per intersection group, and resampling the ``n_g`` rows of group
    ``g`` draws those counts from ``Multinomial(n_g, observed cell fractions)``, so the
    resamples are drawn as one count matrix shared by all metrics: milliseconds for 1,000
    resamples, whatever the number of rows. A resample in which a difference is undefined is
    left out of that difference's interval.

    A resample in which a reported group with positives (observed TPR defined) draws no
    positive row keeps the group's observed TPR in that resample's EO difference, instead of
    dropping the group: dropping it can only shrink the spread (and so the upper bound a
    fairness gate checks), while keeping it gives, resample by resample, a spread at least as
    large as the spread over the groups left.

    Parameters
    ----------
    y_true, y_pred, sensitive, pos_label, min_group_size
        As in :func:`group_fairness`.
    n_resamples : int, default=1000
        Number of bootstrap resamples (>= 2).
    confidence : float, default=0.95
        Coverage of the intervals, in (0, 1).
    seed : int, numpy Generator or None, default=0
        Seed of the resampling.

    Returns
    -------
    intervals : dict
        ``{name: (low, high)}`` for ``accuracy``, ``dp_difference``, ``eo_difference`` and
        the per-attribute and intersection differences, named exactly as in
        :meth:`FairnessReport.as_metrics` (characters MLflow rejects become ``_``);
        ``(nan, nan)`` where the difference is undefined.

    Examples
    --------
    >>> y = [1, 0] * 50
    >>> low, high = bootstrap_intervals(y, y, ["a"] * 50 + ["b"] * 50)["accuracy"]
    >>> low, high
    (1.0, 1.0)
    """
    problem = _fairness_problem(y_true, y_pred, sensitive, pos_label, min_group_size)
    _check_bootstrap(n_resamples, confidence)
    rng = np.random.default_rng(seed)
    sizes = problem.counts.sum(axis=1).astype(np.int64)
    fractions = problem.counts / sizes[:, None]
    block = max(1, _BOOTSTRAP_BLOCK_ENTRIES // fractions.size)
    batches = []
    for start in range(0, n_resamples, block):
        n_block = min(block, n_resamples - start)
        draws = rng.multinomial(sizes, fractions, size=(n_block, sizes.size))
        batches.append(_resampled_metrics(problem, draws.astype(np.float64)))
    tail = (1.0 - confidence) / 2.0
    intervals = {}
    for name in batches[0]:
        values = np.concatenate([batch[name] for batch in batches])
        values = values[np.isfinite(values)]
        if values.size == 0:
            intervals[name] = (np.nan, np.nan)
        else:
            low, high = np.quantile(values, [tail, 1.0 - tail])
            intervals[name] = (float(low), float(high))
    return intervals


def ci_metrics(intervals: dict, *, confidence: float = 0.95) -> dict[str, float]:
    """Flatten :func:`bootstrap_intervals` into ``{"<name>.ci95_low": .., "<name>.ci95_high": ..}``.

    The ``95`` is ``100 * confidence``; undefined (NaN) bounds are left out, as in
    :meth:`FairnessReport.as_metrics`.

    Examples
    --------
    >>> ci_metrics({"accuracy": (0.75, 0.875)})
    {'accuracy.ci95_low': 0.75, 'accuracy.ci95_high': 0.875}
    """
    tag = f"ci{100 * confidence:g}"
    flat = {}
    for name, (low, high) in _metric_names(intervals).items():
        if np.isfinite(low) and np.isfinite(high):
            flat[f"{name}.{tag}_low"] = float(low)
            flat[f"{name}.{tag}_high"] = float(high)
    return flat


def _legacy_group_rates(y_true, y_pred, sensitive_features, pos_label) -> list[tuple]:
    """Per attribute (key, labels, selection rates, TPRs), for the functions below."""
    predicted = _positive_mask(y_pred, "y_pred", pos_label)
    actual = (
        np.zeros_like(predicted) if y_true is None else _positive_mask(y_true, "y_true", pos_label)
    )
    _check_same_length(y_true=actual, y_pred=predicted)
    attributes = _attributes(sensitive_features, predicted.shape[0], "sensitive_features")
    out = []
    for attribute in attributes:
        counts = _cell_counts(attribute.codes, len(attribute.labels), actual, predicted)
        _, selection, tpr = _rates(counts)
        out.append((attribute, selection, tpr))
    return out


def _keyed(rates: list[tuple], column: int) -> dict:
    """``{key: rate}`` of column 0 (selection rates) or 1 (TPRs) of the rates above."""
    return {
        attribute.key(g): float(values[column][g])
        for attribute, *values in rates
        for g in range(len(attribute.labels))
    }


def _require_positives(rates: list[tuple], pos_label: Any) -> None:
    for attribute, _, tpr in rates:
        missing = np.flatnonzero(np.isnan(tpr))
        if missing.size:
            raise ValueError(
                f"group {attribute.key(int(missing[0]))!r} has no rows with y_true == "
                f"{pos_label!r}, so its true positive rate is undefined; check pos_label or "
                f"drop that group."
            )


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
    return _keyed(_legacy_group_rates(None, y_pred, sensitive_features, pos_label), 0)


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
    rates = _legacy_group_rates(y_true, y_pred, sensitive_features, pos_label)
    _require_positives(rates, pos_label)
    return _keyed(rates, 1)


def _largest_spread(rates: list[tuple], column: int) -> float:
    """max - min over the groups of each attribute, then the max over attributes."""
    return max(
        float(_spread(values[column], np.ones(len(attribute.labels), dtype=bool)))
        for attribute, *values in rates
    )


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
    return _largest_spread(_legacy_group_rates(None, y_pred, sensitive_features, pos_label), 0)


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
    rates = _legacy_group_rates(y_true, y_pred, sensitive_features, pos_label)
    _require_positives(rates, pos_label)
    return _largest_spread(rates, 1)


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
