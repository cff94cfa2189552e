"""Quality and fairness of a representation: explained variance, per-group reconstruction error,
the residual gap between projected group means, MMD^2 between groups and linear
inseparability (Section 5 of the paper)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from scipy.spatial.distance import pdist
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._validation import (
    _as_float_matrix,
    _attributes,
    _check_max_samples,
    _check_sigma,
    renamed_sensitive,
)

# Kernel matrices are summed block by block; one block holds at most this many entries (32 MiB).
_KERNEL_BLOCK_ENTRIES = 1 << 22

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
        # each group's mean in place (``where``): the same sums as over a copy of its rows
        means = np.stack(
            [
                R.mean(axis=0, where=(attribute.codes == group)[:, None])
                for group in range(len(attribute.labels))
            ]
        )
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
    sensitive_features: Any = None,
    *,
    sigma: float | None = None,
    max_samples: int | None = None,
    random_state: Any = None,
    groups: Any = None,
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
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
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
    groups : deprecated
        Former name of ``sensitive_features``.

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
    groups = renamed_sensitive(sensitive_features, groups, "groups")
    attributes = _attributes(groups, R.shape[0], "sensitive_features")
    sigma = None if sigma is None else _check_sigma(sigma)
    max_samples = _check_max_samples(max_samples, minimum=1)
    rng = check_random_state(random_state)
    # MMD is translation invariant; centering keeps ||a||^2 + ||b||^2 - 2 a.b accurate. Only
    # the rows used are centred (the same values as a centred copy of every row).
    center = R.mean(axis=0)
    if sigma is None:
        sigma = median_heuristic_sigma(
            R - center,
            max_samples=None if max_samples is None else max(2, max_samples),
            random_state=rng,
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
        points = [R[idx] - center for idx in members]
        within = [_mean_gaussian_kernel(P, P, gamma) for P in points]
        for a in range(len(points)):
            for b in range(a + 1, len(points)):
                between = _mean_gaussian_kernel(points[a], points[b], gamma)
                worst = max(worst, within[a] + within[b] - 2.0 * between)
    return max(worst, 0.0)


def linear_inseparability(
    representation: Any,
    sensitive_features: Any = None,
    *,
    test_size: float | int = 0.3,
    random_state: Any = 0,
    classifier: Any = None,
    groups: Any = None,
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
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels; every group needs at least two rows (stratified split).
    test_size : float or int, default=0.3
        Fraction (0 < test_size < 1) or number of rows held out for testing.
    random_state : int, RandomState instance or None, default=0
        Seed of the split (and of the classifier, if it has a ``random_state`` parameter).
    classifier : scikit-learn classifier, default=None
        Replaces the default logistic regression (it is cloned, e.g. a ``LinearSVC``).
    groups : deprecated
        Former name of ``sensitive_features``.

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
    groups = renamed_sensitive(sensitive_features, groups, "groups")
    attributes = _attributes(groups, R.shape[0], "sensitive_features")
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
