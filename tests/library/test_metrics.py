"""Tests for fairpca.metrics: hand-computed cases, properties, cross-checks and bad input."""

import doctest
import math
import re

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
from data_files import data_dir_or_skip
from fairlearn.metrics import demographic_parity_difference as fairlearn_dp
from fairlearn.metrics import equal_opportunity_difference as fairlearn_eo
from sklearn.decomposition import PCA, KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits

from fairpca import metrics
from fairpca.metrics import (
    accuracy,
    as_components,
    demographic_parity_difference,
    equal_opportunity_difference,
    explained_variance_fraction,
    group_mean_gap,
    group_reconstruction_error,
    linear_inseparability,
    median_heuristic_sigma,
    mmd_squared,
    selection_rates,
    true_positive_rates,
)

SEEDS = [0, 1, 2, 3, 4]


@pytest.fixture(autouse=True)
def single_blas_thread():
    """Tiny matrices: one BLAS thread avoids numpy/scipy OpenBLAS pools starving each other."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def random_orthonormal_rows(rng, k, d):
    q, _ = np.linalg.qr(rng.normal(size=(d, k)))
    return q.T


def dense_mmd_squared(P1, P0, sigma):
    """Direct definition: n x m x k difference tensors, fine for small inputs."""

    def mean_kernel(A, B):
        sq = ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=-1)
        return np.exp(-sq / (2 * sigma**2)).mean()

    return mean_kernel(P1, P1) + mean_kernel(P0, P0) - 2 * mean_kernel(P1, P0)


def test_docstring_examples():
    import importlib
    import pkgutil

    attempted = 0
    for module in pkgutil.iter_modules(metrics.__path__):
        found = importlib.import_module(f"fairpca.metrics.{module.name}")
        result = doctest.testmod(found, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.name
        attempted += result.attempted
    assert attempted >= 10


# ------------------------------------------------------------------ explained variance


def test_explained_variance_fraction_by_hand():
    # Centered rows (-1,0),(1,0),(0,2),(0,-2): variance 2 along e1, 8 along e2.
    X = np.array([[1.0, 0.0], [3.0, 0.0], [2.0, 2.0], [2.0, -2.0]])
    assert explained_variance_fraction(X, [[0.0, 1.0]]) == pytest.approx(0.8, abs=1e-15)
    assert explained_variance_fraction(X, np.array([1.0, 0.0])) == pytest.approx(0.2, abs=1e-15)
    # Uncentered: sum x1^2 = 1 + 9 + 4 + 4 = 18, sum x2^2 = 8.
    assert explained_variance_fraction(X, [[1.0, 0.0]], center=False) == pytest.approx(
        18 / 26, abs=1e-15
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_explained_variance_fraction_full_basis_and_pca(seed):
    rng = np.random.default_rng(seed)
    n, d = rng.integers(20, 60), rng.integers(3, 12)
    k = int(rng.integers(1, d))
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    assert explained_variance_fraction(X, random_orthonormal_rows(rng, d, d)) == pytest.approx(
        1.0, abs=1e-12
    )
    pca = PCA(n_components=k).fit(X)
    expected = pca.explained_variance_ratio_.sum()
    assert explained_variance_fraction(X, pca.components_) == pytest.approx(expected, abs=1e-10)
    assert explained_variance_fraction(X, pca) == pytest.approx(expected, abs=1e-10)
    # Scale invariant, and float32 components are accepted with a float32 tolerance.
    assert explained_variance_fraction(3.0 * X, pca) == pytest.approx(expected, abs=1e-10)
    value32 = explained_variance_fraction(X, pca.components_.astype(np.float32))
    assert value32 == pytest.approx(expected, abs=1e-5)


def test_as_components_accepts_estimator_and_arrays():
    X = np.random.default_rng(0).normal(size=(30, 4))
    pca = PCA(n_components=2).fit(X)
    np.testing.assert_array_equal(as_components(pca), pca.components_)
    assert as_components([1.0, 0.0, 0.0]).shape == (1, 3)
    with pytest.raises(ValueError, match=r"transposed: pass components\.T"):
        as_components(pca.components_.T, n_features=4)
    with pytest.raises(ValueError, match="components have 4 features but X has 5"):
        as_components(pca, n_features=5)
    with pytest.raises(NotFittedError):
        as_components(PCA())
    with pytest.raises(TypeError, match="has no components_"):
        as_components(KernelPCA(n_components=2).fit(X))


# ------------------------------------------------------------------ MMD^2


def test_median_heuristic_sigma_by_hand():
    # Squared distances 1, 4, 9 -> median 4 -> sigma^2 = 2.
    assert median_heuristic_sigma([[0.0], [1.0], [3.0]]) == pytest.approx(math.sqrt(2.0))
    # Four points: squared distances 1, 4, 9, 1, 4, 1 (sorted 1,1,1,4,4,9) -> median 2.5.
    points = np.array([0.0, 1.0, 2.0, 3.0])
    assert median_heuristic_sigma(points) == pytest.approx(math.sqrt(1.25), abs=1e-15)
    big = np.random.default_rng(0).normal(size=(50, 2))
    sub = median_heuristic_sigma(big, max_samples=10, random_state=3)
    assert sub == median_heuristic_sigma(big, max_samples=10, random_state=3)


def test_mmd_squared_by_hand():
    # One point per group at distance 1, sigma = 1: 1 + 1 - 2 exp(-1/2).
    assert mmd_squared([[0.0], [1.0]], [0, 1], sigma=1.0) == pytest.approx(
        2 - 2 * math.exp(-0.5), abs=1e-15
    )
    # P1 = {0, 2}, P0 = {1}, sigma = 1:
    # mean K(P1,P1) = (2 + 2 e^-2) / 4, mean K(P0,P0) = 1, mean K(P1,P0) = e^-1/2.
    expected = (2 + 2 * math.exp(-2)) / 4 + 1 - 2 * math.exp(-0.5)
    value = mmd_squared(np.array([0.0, 2.0, 1.0]), ["a", "a", "b"], sigma=1.0)
    assert value == pytest.approx(expected, abs=1e-15)
    # Median heuristic on {0, 1, 3}: sigma^2 = 2; groups {0, 1} vs {3}.
    k = lambda sq: math.exp(-sq / 4)  # noqa: E731
    expected = (2 + 2 * k(1)) / 4 + 1 - 2 * (k(9) + k(4)) / 2
    assert mmd_squared([0.0, 1.0, 3.0], [0, 0, 1]) == pytest.approx(expected, abs=1e-15)
    # Three groups at 0, 1, 5: the max over pairs is 0 vs 5.
    value = mmd_squared([0.0, 1.0, 5.0], ["x", "y", "z"], sigma=1.0)
    assert value == pytest.approx(2 - 2 * math.exp(-12.5), abs=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_mmd_squared_matches_dense_computation(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(10, 80)), int(rng.integers(1, 6))
    R = rng.normal(size=(n, k)) * rng.uniform(0.5, 5) + rng.normal(size=k) * 10
    z = np.where(rng.random(n) < 0.4, "f", "m")
    z[:2] = ["f", "m"]
    sigma = median_heuristic_sigma(R)
    expected = dense_mmd_squared(R[z == "f"], R[z == "m"], sigma)
    assert mmd_squared(R, z) == pytest.approx(expected, rel=1e-10, abs=1e-14)
    assert mmd_squared(R, z, sigma=0.7) == pytest.approx(
        dense_mmd_squared(R[z == "f"], R[z == "m"], 0.7), rel=1e-10, abs=1e-14
    )
    # Force many small blocks: the blocked sum must not change the result.
    monkeypatch.setattr(metrics._representation, "_KERNEL_BLOCK_ENTRIES", 7)
    assert mmd_squared(R, z) == pytest.approx(expected, rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_mmd_squared_properties(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(6, 40)), int(rng.integers(1, 4))
    R = rng.normal(size=(n, k))
    z = rng.integers(0, 3, size=n)
    z[:3] = [0, 1, 2]
    value = mmd_squared(R, z)
    assert value >= 0.0
    # Relabeling groups and translating the representation change nothing.
    relabeled = np.array(["c", "a", "b"])[z]
    assert mmd_squared(R, relabeled) == pytest.approx(value, rel=1e-12, abs=1e-15)
    sigma = median_heuristic_sigma(R)
    assert mmd_squared(R + 100.0, z, sigma=sigma) == pytest.approx(value, rel=1e-9, abs=1e-12)
    # Identical empirical distributions give exactly zero (up to rounding).
    twin = np.vstack([R, R])
    assert mmd_squared(twin, np.repeat([0, 1], n)) == pytest.approx(0.0, abs=1e-12)
    # Several attributes: the max over attributes.
    other = rng.integers(0, 2, size=n)
    other[:2] = [0, 1]
    both = mmd_squared(R, np.column_stack([z, other]), sigma=1.0)
    assert both == pytest.approx(
        max(mmd_squared(R, z, sigma=1.0), mmd_squared(R, other, sigma=1.0)), rel=1e-12
    )


def test_mmd_squared_max_samples():
    rng = np.random.default_rng(0)
    R = rng.normal(size=(300, 3))
    z = np.repeat([0, 1], 150)
    R[z == 1] += 1.0
    exact = mmd_squared(R, z, sigma=1.5)
    assert mmd_squared(R, z, sigma=1.5, max_samples=150) == pytest.approx(exact, rel=1e-12)
    approx = mmd_squared(R, z, sigma=1.5, max_samples=100, random_state=1)
    assert approx == mmd_squared(R, z, sigma=1.5, max_samples=100, random_state=1)
    assert approx == pytest.approx(exact, rel=0.2)
    assert mmd_squared(R, z, max_samples=100, random_state=1) > 0


# ------------------------------------------------------------------ linear inseparability


def test_linear_inseparability_random_and_separable():
    rng = np.random.default_rng(0)
    z = np.repeat(["a", "b"], 300)
    noise = rng.normal(size=(600, 3))
    assert 0.35 <= linear_inseparability(noise, rng.permutation(z)) <= 0.65
    separable = noise + 8.0 * (z == "b")[:, None]
    assert linear_inseparability(separable, z) == 0.0
    # Multinomial: three well separated groups.
    z3 = np.repeat([0, 1, 2], 100)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    three = rng.normal(size=(300, 2)) + centers[z3]
    assert linear_inseparability(three, z3) == 0.0
    # Several attributes: the smallest error (the most predictable attribute).
    groups = np.column_stack([z, rng.permutation(z)])
    assert linear_inseparability(separable, groups) == 0.0
    assert linear_inseparability(separable, z, classifier=LinearSVC()) == 0.0


def test_linear_inseparability_by_hand():
    # 1-D representation, 10 rows per group; test_size=4 with stratification holds out 2 rows
    # per group. The sign identifies the group, so the error is 0. A constant representation
    # leaves one predicted class for every row, which is wrong on half of the balanced test rows.
    x = np.concatenate([-np.arange(1.0, 11.0), np.arange(1.0, 11.0)])
    z = np.repeat([0, 1], 10)
    assert linear_inseparability(x, z, test_size=4) == 0.0
    assert linear_inseparability(np.ones(20), z, test_size=4) == 0.5


# ------------------------------------------------------------------ classifier fairness


def test_rates_and_differences_by_hand():
    y_true = np.array([1, 1, 0, 0, 1, 1, 1, 0])
    y_pred = np.array([1, 0, 1, 0, 1, 1, 0, 0])
    group = np.array(["a", "a", "a", "a", "b", "b", "b", "b"])
    # Selection rates: a 2/4, b 2/4. TPR: a 1/2, b 2/3.
    assert selection_rates(y_pred, group) == {"a": 0.5, "b": 0.5}
    assert demographic_parity_difference(y_pred, group) == 0.0
    assert true_positive_rates(y_true, y_pred, group) == pytest.approx({"a": 0.5, "b": 2 / 3})
    assert equal_opportunity_difference(y_true, y_pred, group) == pytest.approx(1 / 6)
    assert accuracy(y_true, y_pred) == 0.625
    # Three groups: max minus min.
    g3 = np.array([0, 0, 1, 1, 1, 2, 2, 2])
    assert selection_rates(y_pred, g3) == pytest.approx({0: 0.5, 1: 2 / 3, 2: 1 / 3})
    assert demographic_parity_difference(y_pred, g3) == pytest.approx(1 / 3)
    # String labels with pos_label.
    words = np.where(y_pred == 1, "yes", "no")
    assert demographic_parity_difference(words, g3, pos_label="yes") == pytest.approx(1 / 3)
    assert selection_rates(words, g3, pos_label="no") == pytest.approx({0: 0.5, 1: 1 / 3, 2: 2 / 3})
    # All-negative predictions are binary too.
    assert demographic_parity_difference(np.zeros(8, dtype=int), g3) == 0.0


def test_several_attributes_are_keyed_and_maxed():
    y_pred = [1, 0, 1, 1, 0, 0]
    attrs = pd.DataFrame({"sex": ["f", "f", "f", "m", "m", "m"], "age": [0, 1, 0, 1, 0, 1]})
    # sex: f 2/3, m 1/3; age: 0 -> rows 0,2,4 -> 2/3, 1 -> rows 1,3,5 -> 1/3.
    rates = selection_rates(y_pred, attrs)
    assert rates == pytest.approx(
        {("sex", "f"): 2 / 3, ("sex", "m"): 1 / 3, ("age", 0): 2 / 3, ("age", 1): 1 / 3}
    )
    assert demographic_parity_difference(y_pred, attrs) == pytest.approx(1 / 3)
    attrs.loc[:, "age"] = [0, 0, 0, 1, 1, 1]  # now age equals sex: still 1/3
    attrs["third"] = [0, 1, 1, 1, 1, 1]  # group 0 selects 1/1, group 1 selects 2/5
    assert demographic_parity_difference(y_pred, attrs) == pytest.approx(0.6)
    y_true = [1, 1, 1, 1, 1, 0]
    # TPR: sex/age f 2/3 vs m 1/2; third 1/1 vs 2/4 -> 0.5.
    assert equal_opportunity_difference(y_true, y_pred, attrs.to_numpy()) == pytest.approx(0.5)


@pytest.mark.parametrize("seed", SEEDS)
def test_differences_match_fairlearn(seed):
    rng = np.random.default_rng(seed)
    n = 200
    y_true, y_pred = rng.integers(0, 2, n), rng.integers(0, 2, n)
    group = rng.choice(["p", "q", "r"], n)
    assert demographic_parity_difference(y_pred, group) == pytest.approx(
        fairlearn_dp(y_true, y_pred, sensitive_features=group), abs=1e-12
    )
    assert equal_opportunity_difference(y_true, y_pred, group) == pytest.approx(
        fairlearn_eo(y_true, y_pred, sensitive_features=group), abs=1e-12
    )


# ------------------------------------------------------------------ reconstruction / mean gap


def test_group_reconstruction_error_by_hand():
    X = np.array([[1.0, 1.0], [1.0, -1.0], [2.0, 0.0], [0.0, 3.0]])
    groups = ["a", "a", "b", "b"]
    assert group_reconstruction_error(X, [[1.0, 0.0]], groups, mean=[0.0, 0.0]) == {
        "a": 1.0,
        "b": 4.5,
    }
    # mean=None with raw components: X's column means (1, 0.75).
    # Residuals along e2: 0.25, -1.75, -0.75, 2.25 -> a: (0.0625 + 3.0625)/2, b: (0.5625 + 5.0625)/2
    assert group_reconstruction_error(X, [[1.0, 0.0]], groups) == pytest.approx(
        {"a": 1.5625, "b": 2.8125}, abs=1e-15
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_group_reconstruction_error_matches_pca_inverse_transform(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(20, 50)), int(rng.integers(3, 8))
    X = rng.normal(size=(n, d)) + rng.normal(size=d)
    z = rng.integers(0, 2, n)
    z[:2] = [0, 1]
    pca = PCA(n_components=int(rng.integers(1, d))).fit(X)
    errors = group_reconstruction_error(X, pca, z)
    row_errors = ((X - pca.inverse_transform(pca.transform(X))) ** 2).sum(axis=1)
    for g in (0, 1):
        assert errors[g] == pytest.approx(row_errors[z == g].mean(), rel=1e-10)
    full = group_reconstruction_error(X, random_orthonormal_rows(rng, d, d), z)
    assert max(full.values()) == pytest.approx(0.0, abs=1e-20 + 1e-12 * np.abs(X).max() ** 2)


def test_group_mean_gap_by_hand():
    R = np.array([[0.0, 1.0], [2.0, 1.0], [1.0, 4.0], [5.0, 0.0]])
    # group 0 mean (1, 1), group 1 mean (3, 2) -> gap 2; attribute 2: {0,3} (2.5, .5) vs
    # {1,2} (1.5, 2.5) -> gap 2.
    assert group_mean_gap(R, [0, 0, 1, 1]) == 2.0
    assert group_mean_gap(R, np.array([[0, 0], [0, 1], [1, 1], [1, 0]])) == 2.0
    assert group_mean_gap(R[:, 0], ["u", "v", "u", "v"]) == 3.0  # means 0.5 vs 3.5
    assert group_mean_gap(np.vstack([R, R]), np.repeat([0, 1], 4)) == 0.0


# ------------------------------------------------------------------ bad input

R_OK = np.arange(12.0).reshape(6, 2)
Z_OK = np.array([0, 0, 0, 1, 1, 1])
Y_OK = np.array([1, 0, 1, 1, 0, 1])
U_OK = np.array([[1.0, 0.0]])

R_NAN = R_OK.copy()
R_NAN[2, 1] = np.nan
R_INF = R_OK.copy()
R_INF[0, 0] = np.inf

BAD_INPUTS = [
    # (call, exception, message fragment)
    (lambda: mmd_squared(R_NAN, Z_OK), ValueError, "NaN or infinity"),
    (lambda: mmd_squared(R_INF, Z_OK), ValueError, "NaN or infinity"),
    (lambda: mmd_squared(R_OK, Z_OK[:5]), ValueError, "5 rows but X has 6"),
    (lambda: mmd_squared(R_OK, np.zeros(6)), ValueError, "single group"),
    (lambda: mmd_squared(R_OK, [0, 0, None, 1, 1, 1]), ValueError, "missing value"),
    (lambda: mmd_squared(R_OK, Z_OK, sigma=0.0), ValueError, "positive finite"),
    (lambda: mmd_squared(R_OK, Z_OK, sigma=-1.0), ValueError, "positive finite"),
    (lambda: mmd_squared(R_OK, Z_OK, sigma=np.inf), ValueError, "positive finite"),
    (lambda: mmd_squared(R_OK, Z_OK, sigma="1"), TypeError, "positive real number"),
    (lambda: mmd_squared(R_OK, Z_OK, max_samples=0), ValueError, "at least 1"),
    (lambda: mmd_squared(R_OK, Z_OK, max_samples=2.5), TypeError, "int or None"),
    (lambda: mmd_squared([["a", "b"]] * 6, Z_OK), TypeError, "must be numeric"),
    (lambda: mmd_squared(scipy.sparse.csr_matrix(R_OK), Z_OK), TypeError, "toarray"),
    (lambda: mmd_squared(np.empty((0, 2)), []), ValueError, "is empty"),
    (lambda: mmd_squared(R_OK, 1), TypeError, "got the scalar"),
    (lambda: mmd_squared(R_OK, np.zeros((6, 1, 1))), ValueError, "with 3 dimensions"),
    (lambda: mmd_squared(R_OK, np.zeros((6, 0))), ValueError, "no columns"),
    (lambda: mmd_squared(np.zeros((6, 2)), Z_OK), ValueError, "median pairwise"),
    (lambda: median_heuristic_sigma([[1.0, 2.0]]), ValueError, "at least two points"),
    (lambda: median_heuristic_sigma(R_OK, max_samples=1), ValueError, "at least 2"),
    (lambda: explained_variance_fraction(R_OK[:, 0], [1.0]), ValueError, "must be 2-D"),
    (lambda: explained_variance_fraction(R_OK, [[1.0, 1.0]]), ValueError, "not orthonormal"),
    (lambda: explained_variance_fraction(R_OK, np.eye(3)[:, :2]), ValueError, "cannot be"),
    (lambda: explained_variance_fraction(R_OK, [[1.0, 0, 0]]), ValueError, "3 features"),
    (lambda: explained_variance_fraction(np.ones((4, 2)), U_OK), ValueError, "zero total"),
    (lambda: explained_variance_fraction(R_OK, [[np.nan, 1.0]]), ValueError, "NaN"),
    (lambda: linear_inseparability(R_OK, [0, 1, 1, 1, 1, 1]), ValueError, "only one row"),
    (lambda: linear_inseparability(R_OK, Z_OK, test_size=1.5), ValueError, "strictly between"),
    (lambda: linear_inseparability(R_OK, Z_OK, test_size=6), ValueError, "between 1 and"),
    (lambda: linear_inseparability(R_OK, Z_OK, test_size="0.3"), TypeError, "test_size"),
    (lambda: linear_inseparability(R_NAN, Z_OK), ValueError, "NaN"),
    (lambda: selection_rates([0, 1, 2, 0, 1, 2], Z_OK), ValueError, "must be binary"),
    (lambda: selection_rates([0.1, 0.9, 0.4, 0.2, 0.3, 0.6], Z_OK), ValueError, "threshold"),
    (lambda: selection_rates(["n", "y"] * 3, Z_OK), ValueError, "pos_label=1 is not one"),
    (lambda: selection_rates([0, 1, np.nan, 0, 1, 1], Z_OK), ValueError, "missing values"),
    (lambda: selection_rates(Y_OK, Z_OK[:4]), ValueError, "4 rows but X has 6"),
    (lambda: selection_rates(np.ones((6, 2)), Z_OK), ValueError, "must be 1-D"),
    (lambda: demographic_parity_difference(Y_OK, ["a"] * 6), ValueError, "single group"),
    (lambda: demographic_parity_difference([], []), ValueError, "is empty"),
    (lambda: true_positive_rates(Y_OK, Y_OK[:5], Z_OK), ValueError, "Inconsistent number"),
    (lambda: true_positive_rates([0, 0, 0, 1, 1, 1], Y_OK, Z_OK), ValueError, "no rows with"),
    (lambda: equal_opportunity_difference([2] * 6, Y_OK, Z_OK), ValueError, "no rows with"),
    (lambda: equal_opportunity_difference([0, 3] * 3, Y_OK, Z_OK), ValueError, "pos_label"),
    (lambda: accuracy(Y_OK, Y_OK[:5]), ValueError, "Inconsistent number"),
    (lambda: accuracy([1, None], [1, 0]), ValueError, "missing values"),
    (lambda: group_reconstruction_error(R_OK, U_OK, Z_OK, mean=[0.0]), ValueError, "shape (2,)"),
    (lambda: group_reconstruction_error(R_OK, U_OK.T, Z_OK), ValueError, "transposed"),
    (lambda: group_reconstruction_error(R_OK, PCA(), Z_OK), NotFittedError, "not fitted"),
    (lambda: group_mean_gap(R_OK, Z_OK[::-1][:3]), ValueError, "3 rows but X has 6"),
    (lambda: group_mean_gap(np.full((6, 2), "x"), Z_OK), TypeError, "must be numeric"),
]


@pytest.mark.parametrize(("call", "error", "fragment"), BAD_INPUTS)
def test_bad_input_raises_clear_error(call, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        call()


# ------------------------------------------------------------------ paper protocol (real data)

# PCA rows of Tables 1-3: (dataset, k) -> (%Var mean, std, MMD^2 mean, std) as printed.
PAPER_PCA_ROWS = {
    ("adult", 2): (7.78, 0.77, 0.349, 0.026),
    ("adult", 10): (21.77, 1.95, 0.195, 0.006),
    ("german", 2): (11.42, 0.45, 0.147, 0.047),
    ("german", 10): (38.24, 0.92, 0.13, 0.018),
    ("compas", 2): (39.28, 4.91, 0.092, 0.009),
    ("compas", 10): (100.0, 0.0, 0.241, 0.005),
}


def _lee_splits_dir():
    return data_dir_or_skip("lee2022-splits") / "lee2022-splits"


@pytest.mark.data
@pytest.mark.parametrize("dataset", ["adult", "german", "compas"])
def test_pca_rows_of_tables_1_to_3_reproduced(dataset):
    """%Var and MMD^2 of plain PCA with the protocol of the paper, to printed digits."""
    folder = _lee_splits_dir() / dataset
    variance, mmd = {2: [], 10: []}, {2: [], 10: []}
    for split in range(10):
        train = pd.read_csv(folder / f"train_{split}.csv.gz", header=None).to_numpy()
        test = pd.read_csv(folder / f"test_{split}.csv.gz", header=None).to_numpy()
        X_train, X_test, z_test = train[:, :-2], test[:, :-2], test[:, -1]
        for k in (2, 10):
            pca = PCA(n_components=k).fit(X_train)
            sigma = median_heuristic_sigma(X_train @ pca.components_.T)
            variance[k].append(100 * explained_variance_fraction(X_test, pca))
            mmd[k].append(mmd_squared(X_test @ pca.components_.T, z_test, sigma=sigma))
    for k in (2, 10):
        var_mean, var_std, mmd_mean, mmd_std = PAPER_PCA_ROWS[(dataset, k)]
        assert round(np.mean(variance[k]), 2) == var_mean
        assert round(np.std(variance[k]), 2) == var_std  # population std, as the paper
        assert round(np.mean(mmd[k]), 3) == mmd_mean
        assert round(np.std(mmd[k]), 3) == mmd_std


def test_group_labels_are_called_sensitive_features_and_old_names_warn():
    R, z = np.arange(20.0).reshape(10, 2), np.repeat([0, 1], 5)
    for function in (mmd_squared, linear_inseparability):
        expected = function(R, sensitive_features=z)
        with pytest.warns(FutureWarning, match="'groups' is deprecated; pass sensitive_features="):
            assert function(R, groups=z) == expected
        with pytest.raises(TypeError, match="pass sensitive_features only"):
            function(R, z, groups=z)
