"""Exactness of FairPCA against independent dense computations (Algorithms 1-2, Section 3)."""

import numpy as np
import pandas as pd
import pytest
from scipy import linalg
from sklearn.decomposition import PCA

from fairpca import FairPCA

SEEDS = range(12)


def random_problem(seed, *, n_attributes=1):
    """Random shapes, groups and group-dependent means (a property-test case)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 300))
    d = int(rng.integers(4, 40))
    attributes = []
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)
    for _ in range(n_attributes):
        m = int(rng.integers(2, min(5, d - 1) + 1))
        z = rng.integers(0, m, size=n)
        z[:m] = np.arange(m)  # every group present
        z[m : 2 * m] = np.arange(m)  # ... with at least two rows
        X += rng.normal(scale=3.0, size=(m, d))[z]
        attributes.append(z)
    X += rng.normal(scale=5.0, size=d)  # a non-zero mean
    k = int(rng.integers(1, d - sum(len(np.unique(a)) - 1 for a in attributes) + 1))
    return X, np.column_stack(attributes) if n_attributes > 1 else attributes[0], k


def centered_onehot(z):
    z = np.asarray(z)
    columns = z.T if z.ndim == 2 else [z]
    blocks = []
    for col in columns:
        onehot = (col[:, None] == np.unique(col)[None, :]).astype(float)
        blocks.append(onehot - onehot.mean(0))
    return np.hstack(blocks)


def algorithm2(X, z, k):
    """Algorithm 2 of the paper, written literally with dense SciPy (the reference)."""
    Xc = X - X.mean(0)
    Z = centered_onehot(z)
    R = linalg.null_space(Z.T @ Xc, rcond=1e-10)
    values, vectors = linalg.eigh(R.T @ Xc.T @ Xc @ R)
    return R @ vectors[:, ::-1][:, :k], values[::-1][:k]


def projector(U):
    """Orthogonal projector onto span(U) (U: d x k); compares subspaces, not bases."""
    return U @ U.T


def assert_same_subspace(U, V, atol=1e-8):
    np.testing.assert_allclose(projector(U), projector(V), atol=atol)


def projected_group_mean_gap(Y, z):
    z = np.asarray(z)
    columns = z.T if z.ndim == 2 else [z]
    return max(
        np.abs(Y[col == g].mean(0) - Y.mean(0)).max() for col in columns for g in np.unique(col)
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("solver", ["covariance_eigh", "full"])
def test_matches_algorithm2_and_constraint_holds(seed, solver):
    X, z, k = random_problem(seed)
    fpca = FairPCA(k, svd_solver=solver).fit(X, sensitive_features=z)
    U = fpca.components_.T
    scale = np.abs(X - X.mean(0)).max()
    assert projected_group_mean_gap(fpca.transform(X), z) <= 1e-10 * scale
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)
    U_ref, values_ref = algorithm2(X, z, k)
    # Same optimal objective (sum of the top eigenvalues); the subspace is unique unless the
    # k-th and (k+1)-th eigenvalues tie, which random data avoid.
    n = X.shape[0]
    np.testing.assert_allclose(
        fpca.explained_variance_ * (n - 1), values_ref, rtol=1e-9, atol=1e-9 * values_ref[0]
    )
    assert_same_subspace(U, U_ref, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_multi_attribute_matches_stacked_algorithm(seed):
    X, Z, k = random_problem(seed, n_attributes=2)
    k = min(k, X.shape[1] - FairPCA(1).fit(X, sensitive_features=Z).constraint_rank_)
    fpca = FairPCA(k).fit(X, sensitive_features=Z)
    assert projected_group_mean_gap(fpca.transform(X), Z) <= 1e-10 * np.abs(X).max()
    U_ref, _ = algorithm2(X, Z, k)
    assert_same_subspace(fpca.components_.T, U_ref, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_equals_pca_after_projecting_out_group_mean_differences(seed):
    """FairPCA_k equals PCA_k of X with the group-mean differences erased (orthogonal LEACE)."""
    X, z, k = random_problem(seed)
    Xc = X - X.mean(0)
    D = np.column_stack([Xc[z == g].mean(0) for g in np.unique(z)])
    Q, _ = np.linalg.qr(D[:, 1:] - D[:, :1])
    erased = Xc - Xc @ Q @ Q.T
    pca = PCA(k, svd_solver="full").fit(erased)
    fpca = FairPCA(k).fit(X, sensitive_features=z)
    assert_same_subspace(fpca.components_.T, pca.components_.T, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_objective_is_optimal_among_feasible_projections(seed):
    X, z, k = random_problem(seed)
    Xc = X - X.mean(0)
    fpca = FairPCA(k).fit(X, sensitive_features=z)
    best = np.trace(fpca.components_ @ Xc.T @ Xc @ fpca.components_.T)
    R = fpca.constraint_basis_
    rng = np.random.default_rng(seed)
    for _ in range(20):  # random feasible U: orthonormal, orthogonal to the constraint span
        G = rng.normal(size=(X.shape[1], k))
        G -= R.T @ (R @ G)
        U, _ = np.linalg.qr(G)
        assert np.trace(U.T @ Xc.T @ Xc @ U) <= best * (1 + 1e-12)


def test_two_groups_multi_group_path_equals_algorithm1():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 8)) + np.outer(rng.integers(0, 2, 200), rng.normal(size=8))
    z = (X[:, 0] > 0).astype(int)
    Xc = X - X.mean(0)
    zc = z - z.mean()
    R = linalg.null_space((zc @ Xc)[None, :])  # Algorithm 1: null space of z^T X^T
    _, vectors = linalg.eigh(R.T @ Xc.T @ Xc @ R)
    U1 = R @ vectors[:, ::-1][:, :3]
    fpca = FairPCA(3).fit(X, sensitive_features=z)
    assert fpca.constraint_rank_ == 1
    assert_same_subspace(fpca.components_.T, U1, atol=1e-9)


def test_equals_pca_when_group_means_coincide():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6))
    z = np.repeat([0, 1, 2], 100)
    for g in range(3):  # shift every group to the same mean
        X[z == g] -= X[z == g].mean(0)
    fpca = FairPCA(4).fit(X, sensitive_features=z)
    pca = PCA(4, svd_solver="full").fit(X)
    assert fpca.constraint_rank_ == 0
    np.testing.assert_allclose(np.abs(fpca.components_), np.abs(pca.components_), atol=1e-10)
    np.testing.assert_allclose(fpca.explained_variance_, pca.explained_variance_, rtol=1e-10)


def test_invariant_to_relabeling_and_row_order():
    X, z, k = random_problem(3)
    base = FairPCA(k).fit(X, sensitive_features=z)
    names = np.array(["alpha", "beta", "gamma", "delta", "eps"])[z]
    relabeled = FairPCA(k).fit(X, sensitive_features=names)
    shifted = FairPCA(k).fit(X, sensitive_features=(z + 1) % (z.max() + 1))
    perm = np.random.default_rng(0).permutation(len(z))
    permuted = FairPCA(k).fit(X[perm], sensitive_features=z[perm])
    for other in (relabeled, shifted, permuted):
        np.testing.assert_allclose(other.components_, base.components_, atol=1e-9)


@pytest.mark.parametrize(
    "labels",
    [
        np.array([True, False] * 50),
        pd.Categorical(["f", "m"] * 50, categories=["m", "f", "unused"]),
        pd.Series(["a", "b"] * 50, name="sex"),
        [("x", 1), ("y", 2)] * 50,
    ],
    ids=["bool", "categorical", "series", "tuples"],
)
def test_any_hashable_group_labels(labels):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(100, 5))
    fpca = FairPCA(2).fit(X, sensitive_features=labels)
    assert fpca.constraint_rank_ == 1
    assert len(fpca.groups_[0]) == 2


def test_dependent_constraints_are_rank_revealed():
    X, z, _ = random_problem(5)
    m = len(np.unique(z))
    stacked = np.column_stack([z, z, z])  # the same attribute three times
    fpca = FairPCA(1).fit(X, sensitive_features=stacked)
    assert fpca.constraint_rank_ == m - 1
    largest = X.shape[1] - (m - 1)
    with pytest.raises(ValueError, match=f"at most {largest}"):
        FairPCA(largest + 1).fit(X, sensitive_features=stacked)
    assert FairPCA().fit(X, sensitive_features=stacked).n_components_ == largest


def test_equal_opportunity_constraint_on_positive_rows():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(400, 10))
    z = rng.integers(0, 2, 400)
    y = (X[:, 0] + z + rng.normal(size=400) > 0.5).astype(int)
    X[y == 1] += np.outer(z[y == 1], rng.normal(size=10))
    for objective in ("positive", "all"):
        fpca = FairPCA(4, constraint="equal_opportunity", eo_objective=objective)
        Y = fpca.fit(X, y, sensitive_features=z).transform(X)
        pos = y == 1
        assert projected_group_mean_gap(Y[pos], z[pos]) < 1e-12 * np.abs(X).max()
    paper = FairPCA(4, constraint="equal_opportunity").fit(X, y, sensitive_features=z)
    dp_on_positives = FairPCA(4).fit(X[y == 1], sensitive_features=z[y == 1])
    np.testing.assert_allclose(paper.components_, dp_on_positives.components_, atol=1e-12)
    everything = FairPCA(4, constraint="equal_opportunity", eo_objective="all").fit(
        X, y, sensitive_features=z
    )
    np.testing.assert_allclose(everything.mean_, X.mean(0))


def fair_pca_s_reference(X, z, k, l):
    """Section 3.6 written literally (two groups): R, Q = l smallest |eig|, then PCA."""
    Xc = X - X.mean(0)
    zc = z - z.mean()
    R = linalg.null_space((zc @ Xc)[None, :])
    diff = np.cov(X[z == 0].T) - np.cov(X[z == 1].T)
    values, vectors = linalg.eigh(R.T @ diff @ R)
    Q = vectors[:, np.argsort(np.abs(values))[:l]]
    _, V = linalg.eigh(Q.T @ R.T @ Xc.T @ Xc @ R @ Q)
    return R @ Q @ V[:, ::-1][:, :k]


@pytest.mark.parametrize("seed", range(5))
def test_fair_pca_s_matches_section_3_6(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(6, 20))
    z = np.repeat([0, 1], 150)
    X = rng.normal(size=(300, d)) * np.where(z[:, None] == 0, 1.0, 3.0) + z[:, None]
    k, l = 2, d // 2
    fpca = FairPCA(k, equalize_covariance=l).fit(X, sensitive_features=z)
    assert_same_subspace(fpca.components_.T, fair_pca_s_reference(X, z, k, l), atol=1e-8)
    assert fpca.mean_gap_ < 1e-12 * np.abs(X).max()


def test_fair_pca_s_full_l_is_fair_pca_and_small_l_equalizes_covariance():
    rng = np.random.default_rng(7)
    d = 10
    z = np.repeat([0, 1], 500)
    scales = np.where(z[:, None] == 0, rng.uniform(0.5, 1, d), rng.uniform(1, 3, d))
    X = rng.normal(size=(1000, d)) * scales + z[:, None] * 0.5
    plain = FairPCA(2).fit(X, sensitive_features=z)
    full_l = FairPCA(2, equalize_covariance=d - 1).fit(X, sensitive_features=z)
    assert_same_subspace(plain.components_.T, full_l.components_.T, atol=1e-10)
    fraction = FairPCA(2, equalize_covariance=0.5).fit(X, sensitive_features=z)
    assert fraction.covariance_rank_ == max(2, min(d - 1, int(0.5 * d)))

    def covariance_gap(model):
        U = model.components_.T
        return np.linalg.norm(U.T @ (np.cov(X[z == 0].T) - np.cov(X[z == 1].T)) @ U)

    assert covariance_gap(FairPCA(2, equalize_covariance=2).fit(X, sensitive_features=z)) < (
        covariance_gap(plain) / 3
    )


def test_fair_pca_s_many_groups_constraint_and_reduces_gap():
    rng = np.random.default_rng(8)
    z = np.repeat([0, 1, 2], 200)
    X = rng.normal(size=(600, 12)) * (1 + z[:, None]) + z[:, None]
    fpca = FairPCA(3, equalize_covariance=4).fit(X, sensitive_features=z)
    assert projected_group_mean_gap(fpca.transform(X), z) < 1e-12 * np.abs(X).max()


def test_tradeoff_appends_scaled_pca_without_refit():
    X, z, k = random_problem(9)
    fpca = FairPCA(k).fit(X, sensitive_features=z)
    fair = fpca.transform(X)
    components = fpca.components_.copy()
    fpca.set_params(tradeoff=0.3)
    out = fpca.transform(X)
    assert out.shape == (X.shape[0], 2 * k)
    np.testing.assert_array_equal(out[:, :k], fair)
    np.testing.assert_array_equal(fpca.components_, components)
    pca = PCA(k, svd_solver="full").fit(X)
    np.testing.assert_allclose(np.abs(out[:, k:]), 0.3 * np.abs(pca.transform(X)), atol=1e-8)
    assert list(fpca.get_feature_names_out()) == [f"fairpca{i}" for i in range(k)] + [
        f"pca{i}" for i in range(k)
    ]


def test_randomized_solver_close_to_exact_and_seeded():
    rng = np.random.default_rng(10)
    n, d, k = 2000, 300, 5
    strengths = np.array([20.0, 15, 12, 10, 8, 6, 1, 0.5])
    latent = (rng.normal(size=(n, 8)) * strengths) @ np.linalg.qr(rng.normal(size=(d, 8)))[0].T
    z = rng.integers(0, 2, n)
    X = latent + rng.normal(scale=0.1, size=(n, d)) + np.outer(z, rng.normal(size=d))
    exact = FairPCA(k, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    fast = FairPCA(k, svd_solver="randomized", random_state=0).fit(X, sensitive_features=z)
    again = FairPCA(k, svd_solver="randomized", random_state=0).fit(X, sensitive_features=z)
    np.testing.assert_array_equal(fast.components_, again.components_)
    assert fast.mean_gap_ < 1e-10 * np.abs(X).max()
    np.testing.assert_allclose(fast.explained_variance_, exact.explained_variance_, rtol=1e-8)
    assert_same_subspace(fast.components_.T, exact.components_.T, atol=1e-6)


def test_randomized_solver_sketches_with_scikit_learns_width():
    # Identical rows in both groups: the group means coincide, no direction is constrained,
    # and fair PCA is PCA. Without power iterations the result depends on every random
    # column, so it matches scikit-learn's only if the sketch has k + r + n_oversamples
    # columns with r = 0, and the products centred on the fly equal the centred copy's.
    rng = np.random.default_rng(4)
    half = rng.normal(size=(300, 60)) * np.linspace(3.0, 0.1, 60)
    X = np.vstack([half, half])
    z = np.repeat([0, 1], 300)
    kwargs = dict(svd_solver="randomized", iterated_power=0, random_state=0)
    fair = FairPCA(5, n_oversamples=4, **kwargs).fit(X, sensitive_features=z)
    pca = PCA(5, n_oversamples=4, **kwargs).fit(X)
    assert fair.constraint_rank_ == 0
    np.testing.assert_allclose(fair.components_, pca.components_, atol=1e-9)
    np.testing.assert_allclose(fair.explained_variance_, pca.explained_variance_, rtol=1e-10)
    wider = FairPCA(5, n_oversamples=5, **kwargs).fit(X, sensitive_features=z)
    assert np.abs(wider.components_ - pca.components_).max() > 1e-6


def test_randomized_solver_centres_on_the_fly_unless_the_mean_dominates():
    rng = np.random.default_rng(5)
    n, d = 1500, 120
    X = rng.normal(size=(n, 6)) @ rng.normal(size=(6, d)) + 0.1 * rng.normal(size=(n, d))
    z = rng.integers(0, 2, n)
    X += np.outer(z, rng.normal(size=d))
    fits = {
        shift: FairPCA(4, svd_solver="randomized", random_state=0).fit(
            X + shift, sensitive_features=z
        )
        for shift in (0.0, 3.0, 1e7)  # 1e7: the mean dominates, the data are centred first
    }
    exact = FairPCA(4, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    for fitted in fits.values():
        assert fitted.mean_gap_ < 1e-9 * np.abs(X).max()
        np.testing.assert_allclose(fitted.explained_variance_, exact.explained_variance_, rtol=1e-6)
        assert_same_subspace(fitted.components_.T, exact.components_.T, atol=1e-6)
    np.testing.assert_allclose(fits[3.0].components_, fits[0.0].components_, atol=1e-10)
    np.testing.assert_allclose(
        fits[3.0].explained_variance_ratio_, fits[0.0].explained_variance_ratio_, rtol=1e-10
    )


def test_randomized_solver_keeps_standard_pca_accurate_with_many_groups():
    # Eight groups constrain seven directions; the standard PCA of the trade-off must still
    # converge with the power iterations (the sketch carries the r extra columns throughout).
    rng = np.random.default_rng(6)
    n, d, k = 3000, 300, 5
    X = rng.normal(size=(n, d)) * 0.8 ** np.arange(d) ** 0.5
    z = rng.integers(0, 8, n)
    X += 0.3 * rng.normal(size=(8, d))[z]
    fast = FairPCA(k, svd_solver="randomized", random_state=0).fit(X[:, ::1], sensitive_features=z)
    strided = FairPCA(k, svd_solver="randomized", random_state=0).fit(
        np.asfortranarray(np.hstack([X, X]))[:, :d], sensitive_features=z
    )
    exact = PCA(k, svd_solver="covariance_eigh").fit(X)
    assert fast.constraint_rank_ == 7
    assert_same_subspace(fast.pca_components_.T, exact.components_.T, atol=1e-6)
    np.testing.assert_allclose(fast.pca_explained_variance_, exact.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(strided.components_, fast.components_, atol=1e-10)


def test_deterministic_signs_and_repeatable():
    X, z, k = random_problem(11)
    a = FairPCA(k).fit(X, sensitive_features=z).components_
    b = FairPCA(k).fit(X.copy(), sensitive_features=z.copy()).components_
    np.testing.assert_array_equal(a, b)
    largest = np.abs(a).argmax(axis=1)
    assert np.all(a[np.arange(k), largest] > 0)


def test_float32_preserved():
    X, z, k = random_problem(0)
    fpca = FairPCA(k).fit(X.astype(np.float32), sensitive_features=z)
    assert fpca.components_.dtype == np.float32
    assert fpca.mean_.dtype == np.float32
    assert fpca.transform(X.astype(np.float32)).dtype == np.float32
    exact = FairPCA(k).fit(X.astype(np.float32).astype(np.float64), sensitive_features=z)
    np.testing.assert_allclose(fpca.components_, exact.components_, atol=1e-4)


def test_inverse_transform_reconstructs_projection():
    X, z, k = random_problem(1)
    fpca = FairPCA(k, tradeoff=0.5).fit(X, sensitive_features=z)
    back = fpca.inverse_transform(fpca.transform(X))
    U = fpca.components_.T
    np.testing.assert_allclose(back, (X - X.mean(0)) @ U @ U.T + X.mean(0), atol=1e-9)


def test_sensitive_columns_inside_dataframe_and_pandas_output():
    rng = np.random.default_rng(12)
    frame = pd.DataFrame(rng.normal(size=(120, 4)), columns=list("abcd"))
    frame["sex"] = np.where(rng.random(120) > 0.5, "female", "male")
    frame.loc[frame.sex == "female", "a"] += 2.0
    fpca = FairPCA(2, sensitive_columns="sex").set_output(transform="pandas")
    out = fpca.fit_transform(frame)
    assert list(out.columns) == ["fairpca0", "fairpca1"]
    assert list(fpca.feature_names_in_) == list("abcd")
    assert np.abs(out[frame.sex == "female"].mean() - out[frame.sex == "male"].mean()).max() < 1e-12
    direct = FairPCA(2).fit(frame[list("abcd")], sensitive_features=frame.sex)
    np.testing.assert_allclose(direct.components_, fpca.components_)
    np.testing.assert_allclose(fpca.transform(frame[list("abcd")]), out.to_numpy())


def test_large_offset_loses_no_accuracy():
    """A mean that dwarfs the spread (1e6 vs 1) is centred explicitly, not by X^T X - n mu mu^T."""
    X, z, k = random_problem(4)
    shifted = FairPCA(k).fit(X + 1e6, sensitive_features=z)
    base = FairPCA(k).fit(X, sensitive_features=z)
    np.testing.assert_allclose(shifted.components_, base.components_, atol=1e-8)
    np.testing.assert_allclose(shifted.explained_variance_, base.explained_variance_, rtol=1e-9)
