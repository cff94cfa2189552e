"""The fast routes of the exact solver against independent dense computations.

Two groups give one constraint direction ``q``; fair and standard PCA then come from one
tridiagonal reduction (``top_eigh_with_constraint``).
"""

import numpy as np
import pytest
from scipy import linalg
from sklearn.decomposition import PCA

from fairpca import FairPCA
from fairpca import _linalg as la


def scatter_matrix(rng, n, d, rank=None):
    """A scatter matrix with a decaying spectrum (rank-deficient when ``rank < d``)."""
    rank = d if rank is None else rank
    X = rng.normal(size=(n, rank)) * np.linspace(3.0, 0.5, rank) @ rng.normal(size=(rank, d))
    return X.T @ X


def dense_reference(C, q, k):
    """Top-k eigenpairs of C and of R^T C R (R: orthonormal basis of q's complement)."""
    values, vectors = linalg.eigh(C)
    R = linalg.null_space(q[None, :])
    fair_values, fair_vectors = linalg.eigh(R.T @ C @ R)
    return (
        values[::-1][:k],
        vectors[:, ::-1][:, :k],
        fair_values[::-1][:k],
        R @ fair_vectors[:, ::-1][:, :k],
    )


def unit(v):
    return v / np.linalg.norm(v)


def assert_same_subspace(U, V, atol):
    np.testing.assert_allclose(U @ U.T, V @ V.T, atol=atol)


@pytest.mark.parametrize(
    ("d", "k", "direction"),
    [
        (100, 3, "random"),  # few pairs: MRRR by index
        (30, 3, "random"),  # many pairs: QR eigenvalues and inverse iteration
        (30, 29, "random"),  # every fair direction
        (2, 1, "random"),  # the smallest problem
        (12, 4, "axis"),  # q = e_0: the reflector is 2 e_0
        (12, 4, "minus_axis"),
        (12, 4, "zero_first"),  # q_0 = 0
    ],
)
def test_one_reduction_equals_two_dense_eigenproblems(d, k, direction):
    rng = np.random.default_rng(d + k)
    C = scatter_matrix(rng, 3 * d, d)
    q = {
        "random": unit(rng.normal(size=d)),
        "axis": np.eye(d)[0],
        "minus_axis": -np.eye(d)[0],
        "zero_first": unit(np.r_[0.0, rng.normal(size=d - 1)]),
    }[direction]
    values, vectors, fair_values, fair_vectors = la.top_eigh_with_constraint(C, q, k)
    ref_values, ref_vectors, ref_fair_values, ref_fair_vectors = dense_reference(C, q, k)
    scale = ref_values[0]
    np.testing.assert_allclose(values, ref_values, rtol=1e-12, atol=1e-13 * scale)
    np.testing.assert_allclose(fair_values, ref_fair_values, rtol=1e-12, atol=1e-13 * scale)
    assert_same_subspace(vectors, ref_vectors, atol=1e-10)
    assert_same_subspace(fair_vectors, ref_fair_vectors, atol=1e-10)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(k), atol=1e-13)
    np.testing.assert_allclose(fair_vectors.T @ fair_vectors, np.eye(k), atol=1e-13)
    assert np.abs(fair_vectors.T @ q).max() < 1e-14
    np.testing.assert_allclose(
        C @ fair_vectors - fair_vectors * fair_values,
        np.outer(q, q @ C @ fair_vectors),  # C x = mu x + q c: the constrained eigenvector
        atol=1e-12 * scale,
    )


def test_rank_deficient_scatter_keeps_the_constraint():
    """Eigenvalues that tie at zero leave the vectors free, but never along q."""
    rng = np.random.default_rng(5)
    d, k = 20, 12
    C = scatter_matrix(rng, 60, d, rank=8)
    q = unit(rng.normal(size=d))
    _, vectors, fair_values, fair_vectors = la.top_eigh_with_constraint(C, q, k)
    _, _, ref_fair_values, _ = dense_reference(C, q, k)
    np.testing.assert_allclose(fair_values, ref_fair_values, atol=1e-12 * fair_values[0])
    np.testing.assert_allclose(fair_vectors.T @ fair_vectors, np.eye(k), atol=1e-13)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(k), atol=1e-13)
    assert np.abs(fair_vectors.T @ q).max() < 1e-14


def grouped_data(n_groups, *, equal_means=False, seed=0):
    rng = np.random.default_rng(seed)
    n, d = 400, 9
    z = np.arange(n) % n_groups
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=(n_groups, d))[z]
    if equal_means:
        for g in range(n_groups):
            X[z == g] -= X[z == g].mean(0)
    return X + 7.0, z


@pytest.mark.parametrize(
    ("n_groups", "equal_means", "rank"), [(2, False, 1), (4, False, 3), (3, True, 0)]
)
def test_standard_pca_attributes_equal_scikit_learn_on_every_constraint_rank(
    n_groups, equal_means, rank
):
    X, z = grouped_data(n_groups, equal_means=equal_means)
    k = 4
    fpca = FairPCA(k, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    pca = PCA(k, svd_solver="full").fit(X)
    assert fpca.constraint_rank_ == rank
    np.testing.assert_allclose(fpca.pca_components_, pca.components_, atol=1e-10)
    np.testing.assert_allclose(fpca.pca_explained_variance_, pca.explained_variance_, rtol=1e-10)
    Xc = X - X.mean(0)
    gaps = [np.abs(Xc[z == g].mean(0) @ pca.components_.T).max() for g in range(n_groups)]
    np.testing.assert_allclose(
        fpca.pca_mean_gap_, max(gaps), rtol=1e-9, atol=1e-12 * np.abs(Xc).max()
    )
    if rank == 0:
        np.testing.assert_array_equal(fpca.components_, fpca.pca_components_)


@pytest.mark.parametrize(
    ("svd_solver", "dtype", "n_components"),
    [
        ("covariance_eigh", np.float64, 2),  # finiteness read off the Gram matrix's trace
        ("covariance_eigh", np.float32, 2),
        ("full", np.float64, 2),
        ("randomized", np.float64, 2),
    ],
)
@pytest.mark.parametrize(("bad", "message"), [(np.nan, "NaN"), (np.inf, "infinity")])
def test_fit_names_a_non_finite_entry_on_every_route(svd_solver, dtype, n_components, bad, message):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5)).astype(dtype)
    X[17, 3] = bad
    groups = np.arange(60) % 2
    fpca = FairPCA(n_components=n_components, svd_solver=svd_solver, random_state=0)
    with pytest.raises(ValueError, match=f"Input X contains {message}") as raised:
        fpca.fit(X, sensitive_features=groups)
    assert "overflow" not in str(raised.value)


def test_fit_group_sums_give_the_exact_means_on_the_exact_routes():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 6)) + 5.0
    groups = np.array(["a", "b", "c"])[rng.integers(0, 3, 500)]
    for solver in ("covariance_eigh", "full"):
        fpca = FairPCA(n_components=2, svd_solver=solver).fit(X, sensitive_features=groups)
        np.testing.assert_allclose(fpca.mean_, X.mean(axis=0), rtol=0, atol=1e-12)
        Y = fpca.transform(X)
        means = [Y[groups == g].mean(axis=0) for g in "abc"]
        np.testing.assert_allclose(means[0], means[1], atol=1e-10)
        np.testing.assert_allclose(means[0], means[2], atol=1e-10)


@pytest.mark.parametrize(("d", "m", "rank"), [(100, 2, 1), (40, 5, 3), (7, 7, 7), (3, 6, 3)])
def test_orthonormal_basis_equals_a_dense_svd(d, m, rank):
    """The rank-revealing basis against SciPy's SVD of the same columns: the same singular
    values, an orthonormal basis of the same span, and dependent columns dropped
    (two groups give ``n_0 D_0 + n_1 D_1 = 0``, rank 1)."""
    rng = np.random.default_rng(d * m + rank)
    D = rng.normal(size=(d, rank)) @ rng.normal(size=(rank, m))
    Q, singular_values = la.orthonormal_basis(D, 1e-10 * np.abs(D).max())
    _, reference, _ = linalg.svd(D, full_matrices=False)
    np.testing.assert_allclose(singular_values, reference, rtol=1e-12, atol=1e-12 * reference[0])
    assert Q.shape == (d, rank)
    np.testing.assert_allclose(Q.T @ Q, np.eye(rank), atol=1e-12)
    np.testing.assert_allclose(Q @ (Q.T @ D), D, atol=1e-12 * np.abs(D).max())
    assert np.all(Q[np.argmax(np.abs(Q), axis=0), np.arange(rank)] > 0)  # deterministic signs


@pytest.mark.parametrize("d", [1, 255, 256, 257, 600])
def test_rank_updates_and_symmetrising_by_slabs_equal_dense_ones(d):
    """add_outer and symmetrize_upper work a slab of rows (columns) at a time; the result is
    that of the dense expressions, and exactly symmetric."""
    rng = np.random.default_rng(d)
    M = rng.normal(size=(d, d))
    u, v = rng.normal(size=d), rng.normal(size=d)
    np.testing.assert_allclose(la.add_outer(M.copy(), -0.5, u, v), M - 0.5 * np.outer(u, v))
    upper = np.triu(M)
    symmetric = la.symmetrize_upper(M.copy(order="F"))
    np.testing.assert_array_equal(symmetric, upper + np.triu(M, 1).T)
    np.testing.assert_array_equal(symmetric, symmetric.T)


@pytest.mark.parametrize(("d", "k"), [(1, 1), (7, 3), (50, 50), (300, 4)])
def test_column_signs_are_svd_flips_rule_without_ties(d, k):
    """Random directions have no ties: the signs are scikit-learn's ``svd_flip`` ones."""
    from sklearn.utils.extmath import svd_flip

    V = np.random.default_rng(d + k).normal(size=(d, k))
    _, expected = svd_flip(np.zeros((1, k)), V.T.copy(), u_based_decision=False)
    np.testing.assert_array_equal(la.flip_columns(V), expected.T)


@pytest.mark.parametrize("ulps", [-3, -1, 0, 1, 3])
def test_column_signs_break_round_off_ties_by_the_first_entry(ulps):
    """Entries equal and opposite up to round-off (complementary one-hot columns) are a tie:
    the first decides, whichever is larger in the last bits."""
    top = 0.4634078068946269
    opposite = -top * (1.0 + ulps * np.finfo(float).eps)
    V = np.array([[0.1, -0.2], [top, -top], [opposite, -opposite], [0.3, 0.01]])
    np.testing.assert_array_equal(la.column_signs(V), [1.0, -1.0])
    assert np.all(la.flip_columns(V)[1] > 0)
    np.testing.assert_array_equal(la.flip_columns(-V), la.flip_columns(V))


def test_components_do_not_flip_with_the_row_order():
    """Two complementary one-hot columns dominate the first fair direction (entries c and -c):
    fitting the same rows in other orders changes only the last bits, never a sign (the plain
    ``svd_flip`` rule flips it in 5 of these 20 orders)."""
    rng = np.random.default_rng(0)
    n = 600
    onehot = (rng.random(n) < 0.4).astype(float)
    noise = rng.normal(size=(n, 4)) @ rng.normal(size=(4, 4)) * 0.3
    X = np.column_stack([noise, 3 * onehot, 3 * (1 - onehot)])
    z = (rng.random(n) < 0.5).astype(int)
    reference = FairPCA(2).fit(X, sensitive_features=z).components_
    for seed in range(20):
        order = np.random.default_rng(seed).permutation(n)
        components = FairPCA(2).fit(X[order], sensitive_features=z[order]).components_
        np.testing.assert_allclose(components, reference, atol=1e-12)
