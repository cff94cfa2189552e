"""Tests of FairKernelPCA: exactness against Algorithm 3, approximations, API contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernel_reference import PAPER_REGULARIZATION, fair_kernel_pca_reference
from scipy.linalg import orthogonal_procrustes, subspace_angles
from sklearn.decomposition import KernelPCA
from sklearn.preprocessing import KernelCenterer
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.validation import _num_samples
from threadpoolctl import threadpool_limits

from fairpca import FairKernelPCA, FairPCA
from fairpca._kernel_maps import center_kernel_inplace, center_new_kernel, make_kernel

SEEDS = [0, 1, 2]


@pytest.fixture(autouse=True)
def _single_blas_thread():
    """Tiny LAPACK calls on a loaded 2-core machine stall for seconds with two OpenBLAS
    threads (NumPy and SciPy each ship one pool); one thread keeps these tests fast."""
    with threadpool_limits(1):
        yield


def make_data(seed: int, n: int = 60, d: int = 6, n_groups: int = 2, shift: float = 1.0):
    """Rows whose mean depends on the group, so the fairness constraint is active."""
    rng = np.random.default_rng(seed)
    groups = rng.permutation(np.arange(n) % n_groups)
    X = rng.normal(size=(n, d)) + shift * rng.normal(size=(n_groups, d))[groups]
    return X, groups


def centered_onehot(groups) -> np.ndarray:
    Z = (np.asarray(groups)[:, None] == np.unique(groups)[None, :]).astype(float)
    return Z - Z.mean(axis=0)


def max_group_gap(T: np.ndarray, groups) -> float:
    """Largest gap between a group's mean representation and the overall mean, relative."""
    groups = np.asarray(groups)
    centre = T.mean(axis=0)
    gaps = [np.abs(T[groups == g].mean(axis=0) - centre).max() for g in np.unique(groups)]
    return max(gaps) / max(np.abs(T).max(), 1e-300)


def align(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Orthogonal map R minimising ||A R - B|| (Procrustes): compares representations that
    are defined up to an orthogonal transform (signs, degenerate eigenspaces)."""
    R, _ = orthogonal_procrustes(A, B)
    return R


def centred_kernel(X, X_new, estimator):
    kernel = make_kernel(
        estimator.kernel, estimator.gamma_, estimator.degree, estimator.coef0, None
    )
    K = kernel(X)
    means, grand = center_kernel_inplace(K)
    return K, center_new_kernel(kernel(X_new, X), means, grand)


# --------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kernel", ["rbf", "poly"])
@pytest.mark.parametrize("factorization", ["gram", "cholesky", "eigh"])
def test_exact_route_equals_direct_solve_of_algorithm3(seed, kernel, factorization):
    rng = np.random.default_rng(100 + seed)
    n_groups = int(rng.integers(2, 5))
    n = int(rng.integers(30, 70))
    k = int(rng.integers(1, 5))
    X, groups = make_data(seed, n=n, d=int(rng.integers(3, 8)), n_groups=n_groups)
    X_new = rng.normal(size=(9, X.shape[1]))
    est = FairKernelPCA(k, kernel=kernel, approximation="exact", factorization=factorization)
    T = est.fit_transform(X, sensitive_features=groups)
    K, K_new = centred_kernel(X, X_new, est)
    dual = fair_kernel_pca_reference(K, centered_onehot(groups), k)
    T_ref = K @ dual
    # Same subspace, and the same representation up to an orthogonal transform of the k
    # output coordinates, for training and new rows alike.
    assert np.max(subspace_angles(T, T_ref)) < 1e-7
    R = align(T, T_ref)
    scale = np.abs(T_ref).max()
    np.testing.assert_allclose(T @ R, T_ref, atol=1e-8 * scale)
    np.testing.assert_allclose(est.transform(X_new) @ R, K_new @ dual, atol=1e-7 * scale)
    # The paper's B + 1e-5 I regularisation (App. C.1) only approximates the solution.
    T_paper = K @ fair_kernel_pca_reference(
        K, centered_onehot(groups), k, regularization=PAPER_REGULARIZATION
    )
    assert np.max(subspace_angles(T, T_paper)) < 1e-2


def assert_same_representation(A, B, atol):
    """Equal up to an orthogonal transform of the output coordinates."""
    assert np.max(subspace_angles(A, B)) < 1e-7
    np.testing.assert_allclose(A @ align(A, B), B, atol=atol * np.abs(B).max())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"constraint": "equal_opportunity"},
        {"constraint": "equal_opportunity", "eo_objective": "all"},
        {"tradeoff": 0.5},
    ],
    ids=["dp", "eo", "eo-all", "tradeoff"],
)
@pytest.mark.parametrize("n", [60, 320])  # 320 rows: the Lanczos (ARPACK) path
def test_gram_route_equals_the_kernel_map_route(seed, params, n):
    """The factor-free Gram route and linear FairPCA on the pivoted-Cholesky map solve the
    same problem: same representation of training and new rows, same variances and gap."""
    rng = np.random.default_rng(200 + seed)
    X, groups = make_data(seed, n=n, d=5, n_groups=3, shift=1.5)
    other = rng.integers(0, 2, n)  # a second attribute
    sensitive = np.column_stack([groups, other])
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    X_new = rng.normal(size=(11, X.shape[1]))
    k = 3
    fits = {}
    for factorization in ("gram", "cholesky"):
        est = FairKernelPCA(
            k,
            approximation="exact",
            factorization=factorization,
            svd_solver="covariance_eigh",
            **params,
        )
        fits[factorization] = (est, est.fit_transform(X, y, sensitive_features=sensitive))
    (gram, T_gram), (chol, T_chol) = fits["gram"], fits["cholesky"]
    assert gram.factorization_ == "gram" and gram.fair_pca_ is None
    fair = slice(0, k)
    assert_same_representation(T_gram[:, fair], T_chol[:, fair], 1e-7)
    assert_same_representation(gram.transform(X_new)[:, fair], chol.transform(X_new)[:, fair], 1e-6)
    if params.get("tradeoff"):
        assert T_gram.shape == (n, 2 * k)
        assert_same_representation(T_gram[:, k:], T_chol[:, k:], 1e-7)
        # fitted without the trade-off: its kernel PCA is computed when first asked for
        later = FairKernelPCA(k, approximation="exact").fit(X, sensitive_features=sensitive)
        assert later.transform(X_new).shape == (11, k)
        later.set_params(tradeoff=params["tradeoff"])
        np.testing.assert_allclose(later.transform(X_new), gram.transform(X_new), atol=1e-12)
    np.testing.assert_allclose(gram.explained_variance_, chol.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(
        gram.explained_variance_ratio_, chol.explained_variance_ratio_, rtol=1e-8
    )
    assert gram.constraint_rank_ == chol.constraint_rank_ == 3  # (3 - 1) + (2 - 1)
    assert gram.mean_gap_ < 1e-9 * np.abs(T_gram).max()
    rows = y == 1 if params.get("constraint") else np.ones(n, bool)
    for attribute in (groups, other):
        assert max_group_gap(T_gram[rows][:, fair], attribute[rows]) < 1e-9
    again = FairKernelPCA(k, approximation="exact", factorization="gram", **params).fit_transform(
        X, y, sensitive_features=sensitive
    )
    np.testing.assert_array_equal(again, T_gram)  # deterministic, whatever random_state


def test_gram_route_rejects_what_it_cannot_do():
    X, groups = make_data(5, n=40)
    with pytest.raises(ValueError, match="positive semi-definite"):
        FairKernelPCA(2, kernel="sigmoid", factorization="gram").fit(X, sensitive_features=groups)
    with pytest.raises(ValueError, match="exact route"):
        FairKernelPCA(2, approximation="nystroem", n_landmarks=20, factorization="gram").fit(
            X, sensitive_features=groups
        )
    # a linear kernel on 3 features has 3 directions; one is the constraint's
    with pytest.raises(ValueError, match="numerical rank"):
        FairKernelPCA(3, kernel="linear", approximation="exact").fit(
            X[:, :3], sensitive_features=groups
        )
    # identical rows: no direction at all, and no "n_components <= 0" to follow
    with pytest.raises(ValueError, match="no direction of positive variance") as refused:
        FairKernelPCA(2).fit(np.ones_like(X), sensitive_features=groups)
    assert "<= 0" not in str(refused.value)


@pytest.mark.parametrize("seed", SEEDS)
def test_exact_objective_and_variance_match_feature_space(seed):
    X, groups = make_data(seed, n=50, n_groups=3)
    est = FairKernelPCA(3, approximation="exact").fit(X, sensitive_features=groups)
    T = est.transform(X)
    # explained_variance_ is the variance of the projected training rows (ddof=1).
    np.testing.assert_allclose(T.var(axis=0, ddof=1), est.explained_variance_, rtol=1e-8)
    assert np.all(np.diff(est.explained_variance_) <= 1e-12)


@pytest.mark.parametrize(
    "kernel, params",
    [
        ("rbf", {}),
        ("poly", {"degree": 2, "coef0": 1.0}),
        ("sigmoid", {"gamma": 0.05, "coef0": 0.0}),
        ("cosine", {}),
        ("linear", {}),
        (lambda a, b: float(np.exp(-np.abs(a - b).sum() / 4.0)), {}),
    ],
    ids=["rbf", "poly", "sigmoid", "cosine", "linear", "callable"],
)
@pytest.mark.parametrize("approximation", ["exact", "nystroem"])
def test_fair_constraint_holds_in_feature_space(kernel, params, approximation):
    X, groups = make_data(3, n=48, n_groups=3, shift=2.0)
    est = FairKernelPCA(
        2, kernel=kernel, approximation=approximation, n_landmarks=30, random_state=0, **params
    )
    T = est.fit_transform(X, sensitive_features=groups)
    assert max_group_gap(T, groups) < 1e-10
    assert est.mean_gap_ < 1e-10 * np.abs(T).max()
    # mapping the training rows again (kernel columns -> map) keeps the constraint
    assert max_group_gap(est.transform(X), groups) < 1e-7


def test_rff_route_constraint_and_shape():
    X, groups = make_data(4, n=80, n_groups=2, shift=2.0)
    est = FairKernelPCA(3, approximation="rff", n_landmarks=200, random_state=0)
    T = est.fit_transform(X, sensitive_features=groups)
    assert T.shape == (80, 3) and est.n_kernel_features_ == 200
    assert max_group_gap(T, groups) < 1e-10
    np.testing.assert_allclose(est.transform(X), T, atol=1e-12)


def test_linear_kernel_equals_fair_pca():
    X, groups = make_data(5, n=70, d=8, n_groups=3)
    X_new = np.random.default_rng(5).normal(size=(11, 8))
    fair = FairPCA(4).fit(X, sensitive_features=groups)
    kern = FairKernelPCA(4, kernel="linear").fit(X, sensitive_features=groups)
    T_lin, T_kern = fair.transform(X), kern.transform(X)
    R = align(T_kern, T_lin)
    np.testing.assert_allclose(np.abs(R), np.eye(4), atol=1e-8)  # equal up to signs
    np.testing.assert_allclose(T_kern @ R, T_lin, atol=1e-9)
    np.testing.assert_allclose(kern.transform(X_new) @ R, fair.transform(X_new), atol=1e-9)
    np.testing.assert_allclose(kern.explained_variance_, fair.explained_variance_, rtol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_nystroem_with_all_rows_as_landmarks_equals_exact(seed):
    X, groups = make_data(seed, n=40, d=10, n_groups=2)
    X_new = np.random.default_rng(seed).normal(size=(6, 10))
    exact = FairKernelPCA(3, approximation="exact").fit(X, sensitive_features=groups)
    nys = FairKernelPCA(3, approximation="nystroem", n_landmarks=40, random_state=seed)
    T_nys = nys.fit_transform(X, sensitive_features=groups)
    T_exact = exact.transform(X)
    R = align(T_nys, T_exact)
    np.testing.assert_allclose(T_nys @ R, T_exact, atol=1e-8)
    np.testing.assert_allclose(nys.transform(X_new) @ R, exact.transform(X_new), atol=1e-8)


def test_kernel_centering_matches_kernel_centerer():
    rng = np.random.default_rng(6)
    X, X_new = rng.normal(size=(30, 4)), rng.normal(size=(7, 4))
    kernel = make_kernel("rbf", 0.3, 3, 1, None)
    centerer = KernelCenterer().fit(kernel(X))
    K = kernel(X)
    means, grand = center_kernel_inplace(K)
    np.testing.assert_allclose(K, centerer.transform(kernel(X)), atol=1e-14)
    np.testing.assert_allclose(
        center_new_kernel(kernel(X_new, X), means, grand),
        centerer.transform(kernel(X_new, X)),
        atol=1e-14,
    )


# --------------------------------------------------------------------------- groups
def test_multi_attribute_constraint_for_every_attribute():
    X, sex = make_data(7, n=90, n_groups=2, shift=1.5)
    race = np.random.default_rng(7).integers(0, 3, size=90)
    X = X + 1.5 * np.eye(3)[race, :1]
    sensitive = pd.DataFrame({"sex": np.where(sex == 1, "m", "f"), "race": race})
    est = FairKernelPCA(3, approximation="exact")
    T = est.fit_transform(X, sensitive_features=sensitive)
    assert max_group_gap(T, sex) < 1e-10
    assert max_group_gap(T, race) < 1e-10
    assert [list(g) for g in est.groups_] == [["f", "m"], [0, 1, 2]]
    assert est.constraint_rank_ == 3  # (2 - 1) + (3 - 1)


def test_sensitive_columns_are_excluded_from_the_kernel():
    X, groups = make_data(8, n=50, d=4, n_groups=2)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(group=groups)
    by_name = FairKernelPCA(2, sensitive_columns="group").fit(frame)
    by_array = FairKernelPCA(2).fit(frame[["a", "b", "c", "d"]], sensitive_features=groups)
    assert list(by_name.feature_names_in_) == ["a", "b", "c", "d"]
    np.testing.assert_allclose(by_name.transform(frame), by_array.transform(frame.iloc[:, :4]))


@pytest.mark.parametrize("eo_objective", ["positive", "all"])
def test_equal_opportunity_constrains_positive_rows(eo_objective):
    X, groups = make_data(9, n=120, d=5, n_groups=2, shift=1.5)
    y = (X[:, 0] + np.random.default_rng(9).normal(size=120) > 0).astype(int)
    est = FairKernelPCA(
        2, constraint="equal_opportunity", eo_objective=eo_objective, approximation="exact"
    )
    T = est.fit_transform(X, y, sensitive_features=groups)
    positive = y == 1
    assert max_group_gap(T[positive], groups[positive]) < 1e-10
    assert max_group_gap(T, groups) > 1e-3  # the negatives are not constrained
    # with the linear kernel it is exactly linear equal-opportunity fair PCA
    lin = FairKernelPCA(
        2, kernel="linear", constraint="equal_opportunity", eo_objective=eo_objective
    ).fit_transform(X, y, sensitive_features=groups)
    ref = FairPCA(2, constraint="equal_opportunity", eo_objective=eo_objective).fit_transform(
        X, y, sensitive_features=groups
    )
    np.testing.assert_allclose(lin @ align(lin, ref), ref, atol=1e-9)


def test_equal_opportunity_needs_y():
    X, groups = make_data(9, n=30)
    with pytest.raises(ValueError, match="needs y"):
        FairKernelPCA(2, constraint="equal_opportunity").fit(X, sensitive_features=groups)


# --------------------------------------------------------------------------- tradeoff
def test_tradeoff_appends_scaled_kernel_pca_and_needs_no_refit():
    X, groups = make_data(10, n=60, n_groups=2)
    est = FairKernelPCA(3, approximation="exact", tradeoff=0.0).fit(X, sensitive_features=groups)
    fair = est.transform(X)
    est.set_params(tradeoff=0.25)
    both = est.transform(X)
    assert both.shape == (60, 6)
    # the fair block is unchanged (to rounding: one product of the stacked coefficients may be
    # blocked differently by BLAS than the fair block alone)
    np.testing.assert_allclose(both[:, :3], fair, rtol=0, atol=1e-13)
    kpca = KernelPCA(3, kernel="rbf", gamma=est.gamma_, eigen_solver="dense").fit_transform(X)
    standard = both[:, 3:] / 0.25
    np.testing.assert_allclose(np.abs(standard), np.abs(kpca), atol=1e-8)
    assert list(est.get_feature_names_out()) == [
        "fairkernelpca0",
        "fairkernelpca1",
        "fairkernelpca2",
        "kernelpca0",
        "kernelpca1",
        "kernelpca2",
    ]


# --------------------------------------------------------------------------- params
def test_gamma_scale_is_resolved_without_mutating_the_parameter():
    X, groups = make_data(11, n=30, d=5)
    est = FairKernelPCA(2).fit(X, sensitive_features=groups)
    assert est.gamma == "scale"
    assert est.gamma_ == pytest.approx(1.0 / (5 * X.var()))
    assert FairKernelPCA(2, gamma=None).fit(X, sensitive_features=groups).gamma_ == 0.2
    assert FairKernelPCA(2, gamma=0.7).fit(X, sensitive_features=groups).gamma_ == 0.7


def test_auto_route_uses_size_threshold():
    X, groups = make_data(12, n=60)
    small = FairKernelPCA(2, exact_max_samples=60, n_landmarks=20, random_state=0)
    large = FairKernelPCA(2, exact_max_samples=59, n_landmarks=20, random_state=0)
    assert small.fit(X, sensitive_features=groups).approximation_ == "exact"
    assert large.fit(X, sensitive_features=groups).approximation_ == "nystroem"
    assert large.landmark_indices_.shape == (20,)
    assert FairKernelPCA(2, kernel="sigmoid").fit(X, sensitive_features=groups).factorization_ == (
        "eigh"
    )


@pytest.mark.parametrize(
    "params",
    [
        {"approximation": "exact"},
        {"approximation": "nystroem", "n_landmarks": 25},
        {"approximation": "nystroem", "n_landmarks": 25, "landmarks": "kmeans++"},
        {"approximation": "rff", "n_landmarks": 50},
    ],
)
def test_same_seed_gives_identical_output(params):
    X, groups = make_data(13, n=60)
    X_new = np.random.default_rng(13).normal(size=(5, X.shape[1]))
    runs = [
        FairKernelPCA(2, random_state=42, **params).fit(X, sensitive_features=groups)
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].transform(X_new), runs[1].transform(X_new))
    if params["approximation"] == "nystroem":
        np.testing.assert_array_equal(runs[0].landmark_indices_, runs[1].landmark_indices_)
        assert len(np.unique(runs[0].landmark_indices_)) == 25


def test_set_output_pandas_and_unseen_rows():
    X, groups = make_data(14, n=40)
    est = FairKernelPCA(2).set_output(transform="pandas").fit(X, sensitive_features=groups)
    out = est.transform(np.random.default_rng(14).normal(size=(3, X.shape[1])))
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["fairkernelpca0", "fairkernelpca1"]
    assert out.shape == (3, 2)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "params, match",
    [
        ({"kernel": "gaussian"}, "kernel"),
        ({"gamma": -1.0}, "gamma"),
        ({"approximation": "nystroem", "n_landmarks": 31}, "n_landmarks=31 exceeds"),
        ({"approximation": "rff", "kernel": "poly"}, "only for the rbf kernel"),
        ({"factorization": "cholesky", "kernel": "sigmoid"}, "positive semi-definite"),
        ({"n_components": 40}, "kernel map"),
        ({"approximation": "fast"}, "approximation"),
    ],
)
def test_bad_parameters_raise_clear_errors(params, match):
    X, groups = make_data(15, n=30)
    with pytest.raises(ValueError, match=match):
        FairKernelPCA(**params).fit(X, sensitive_features=groups)


def test_nan_and_shape_errors():
    X, groups = make_data(16, n=30)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FairKernelPCA(2).fit(bad, sensitive_features=groups)
    est = FairKernelPCA(2).fit(X, sensitive_features=groups)
    with pytest.raises(ValueError, match="NaN"):
        est.transform(bad)
    with pytest.raises(ValueError, match="features"):
        est.transform(X[:, :3])
    with pytest.raises(ValueError, match="sensitive_features is required"):
        FairKernelPCA(2).fit(X)
    with pytest.raises(TypeError, match="non-numeric"):
        FairKernelPCA(2).fit(
            pd.DataFrame({"a": ["x"] * 30, "b": X[:, 0]}), sensitive_features=groups
        )


# --------------------------------------------------------------------------- sklearn contract
class _RowParityFairKernelPCA(FairKernelPCA):
    """FairKernelPCA whose sensitive attribute defaults to row parity, so that scikit-learn's
    generic checks (which call ``fit(X, y)``) can exercise the estimator."""

    def fit(self, X, y=None, *, sensitive_features=None):
        return super().fit(X, y, sensitive_features=_parity(X, sensitive_features))

    def fit_transform(self, X, y=None, *, sensitive_features=None):
        return super().fit_transform(X, y, sensitive_features=_parity(X, sensitive_features))


def _parity(X, sensitive_features):
    if sensitive_features is not None:
        return sensitive_features
    return np.arange(_num_samples(X)) % 2


EXPECTED_FAILED_CHECKS: dict[str, str] = {}  # every generic check passes


@parametrize_with_checks(
    [
        _RowParityFairKernelPCA(n_components=2),
        _RowParityFairKernelPCA(
            n_components=2, approximation="nystroem", n_landmarks=6, random_state=0
        ),
    ],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_metadata_routing_in_a_pipeline():
    import sklearn
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    X, groups = make_data(17, n=60)
    y = (X[:, 0] > X[:, 0].mean()).astype(int)
    with sklearn.config_context(enable_metadata_routing=True):
        step = FairKernelPCA(3).set_fit_request(sensitive_features=True)
        model = make_pipeline(step, LogisticRegression()).fit(X, y, sensitive_features=groups)
        assert model.predict(X[:5]).shape == (5,)
        assert max_group_gap(model[0].transform(X), groups) < 1e-7


def test_lanczos_without_convergence_falls_back_to_the_dense_solver(monkeypatch):
    from scipy.sparse.linalg import ArpackNoConvergence

    from fairpca import _kernel_gram

    X, groups = make_data(6, n=260, n_groups=2, shift=2.0)
    expected = FairKernelPCA(3, approximation="exact").fit_transform(X, sensitive_features=groups)

    def no_convergence(*args, **kwargs):
        raise ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((0, 0)))

    monkeypatch.setattr(_kernel_gram, "eigsh", no_convergence)
    got = FairKernelPCA(3, approximation="exact").fit_transform(X, sensitive_features=groups)
    np.testing.assert_allclose(got, expected, atol=1e-8 * np.abs(expected).max())
