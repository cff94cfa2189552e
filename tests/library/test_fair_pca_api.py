"""scikit-learn compatibility, metadata routing and input validation of FairPCA."""

import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from fairpca import FairKernelPCA, FairPCA


class FairPCAAlternatingGroups(FairPCA):
    """FairPCA whose rows alternate between two groups.

    scikit-learn's common checks call ``fit(X, y)`` and ``partial_fit(X, y)`` without
    sensitive features, which FairPCA rightly rejects. This thin test-only subclass supplies a
    group label per row (0, 1, 0, ...) so that the checks exercise the real estimator
    (validation, fitted state, pickling, dtypes, set_output, ...); nothing else is overridden.
    """

    def fit(self, X, y=None):
        shape = X.shape if hasattr(X, "shape") else np.asarray(X).shape
        n_rows = shape[0] if len(shape) else 0
        return super().fit(X, y, sensitive_features=np.arange(n_rows) % 2)

    def partial_fit(self, X, y=None):
        shape = X.shape if hasattr(X, "shape") else np.asarray(X).shape
        n_rows = shape[0] if len(shape) else 0
        return super().partial_fit(X, y, sensitive_features=np.arange(n_rows) % 2)


EXPECTED_FAILED_CHECKS = {
    "check_fit2d_1feature": "one feature is fully used by the group-mean constraint",
}


@parametrize_with_checks(
    [FairPCAAlternatingGroups(n_components=1)],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def data(n=60, d=5, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + z[:, None]
    y = (X[:, 1] + rng.normal(size=n) > 0.5).astype(int)
    return X, y, z


def test_metadata_routing_through_pipeline_and_grid_search():
    X, y, z = data(200, 6)
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            FairPCA(3).set_fit_request(sensitive_features=True),
            LogisticRegression(),
        )
        pipe.fit(X, y, sensitive_features=z)
        direct = FairPCA(3).fit(X, sensitive_features=z)
        np.testing.assert_allclose(pipe[0].components_, direct.components_)
        assert pipe.predict(X).shape == (200,)
        search = GridSearchCV(pipe, {"fairpca__n_components": [1, 2, 3]}, cv=3)
        search.fit(X, y, sensitive_features=z)
        assert search.best_params_["fairpca__n_components"] in (1, 2, 3)


def test_transform_takes_no_sensitive_features():
    X, _, z = data()
    fpca = FairPCA(2).fit(X, sensitive_features=z)
    with pytest.raises(TypeError):
        fpca.transform(X, sensitive_features=z)


@pytest.mark.parametrize(
    ("make_input", "error", "match"),
    [
        (
            lambda X, y, z: (np.where(np.eye(*X.shape) > 0, np.nan, X), {"sensitive_features": z}),
            ValueError,
            "NaN",
        ),
        (
            lambda X, y, z: (np.where(np.eye(*X.shape) > 0, np.inf, X), {"sensitive_features": z}),
            ValueError,
            "infinity",
        ),
        (lambda X, y, z: (X, {"sensitive_features": np.zeros(len(z))}), ValueError, "single group"),
        (
            lambda X, y, z: (X, {"sensitive_features": np.r_[1, np.zeros(len(z) - 1)]}),
            ValueError,
            "fewer than 2 rows",
        ),
        (lambda X, y, z: (X, {"sensitive_features": z[:-3]}), ValueError, "rows but X has"),
        (lambda X, y, z: (X, {}), ValueError, "sensitive_features is required"),
        (lambda X, y, z: (X[:, 0], {"sensitive_features": z}), ValueError, "2D array"),
        (lambda X, y, z: (X[:0], {"sensitive_features": z[:0]}), ValueError, "0 sample"),
        (
            lambda X, y, z: (X.astype(str).astype(object) + "x", {"sensitive_features": z}),
            TypeError,
            "not numbers",
        ),
        (
            lambda X, y, z: (
                pd.DataFrame({"a": X[:, 0], "b": ["u"] * len(z)}),
                {"sensitive_features": z},
            ),
            TypeError,
            r"non-numeric column\(s\) \['b'\]",
        ),
        (
            lambda X, y, z: (X, {"sensitive_features": np.where(z > 0, None, "a")}),
            ValueError,
            "missing value",
        ),
        (lambda X, y, z: (X, {"sensitive_features": "sex"}), TypeError, "scalar"),
    ],
    ids=[
        "nan",
        "inf",
        "one-group",
        "singleton-group",
        "wrong-length",
        "missing-groups",
        "1d-X",
        "empty-X",
        "strings-X",
        "non-numeric-column",
        "missing-label",
        "scalar-groups",
    ],
)
def test_bad_input_raises_clear_error(make_input, error, match):
    X, y, z = data()
    X_bad, kwargs = make_input(X, y, z)
    with pytest.raises(error, match=match):
        FairPCA(2).fit(X_bad, **kwargs)


@pytest.mark.parametrize("n_components", [0, -1, 1.5])
def test_invalid_n_components_type_or_range(n_components):
    X, _, z = data()
    with pytest.raises(ValueError, match="n_components"):
        FairPCA(n_components).fit(X, sensitive_features=z)


def test_too_many_components_names_the_maximum():
    X, _, z = data(d=5)
    with pytest.raises(ValueError, match=r"at most 4 fair directions.*5 - 1"):
        FairPCA(5).fit(X, sensitive_features=z)


def test_equal_opportunity_errors():
    X, y, z = data()
    with pytest.raises(ValueError, match="needs y"):
        FairPCA(2, constraint="equal_opportunity").fit(X, sensitive_features=z)
    with pytest.raises(ValueError, match="no row has y == pos_label"):
        FairPCA(2, constraint="equal_opportunity", pos_label=7).fit(X, y, sensitive_features=z)
    y_one_group = (z == 1).astype(int)  # no positive rows in group 0
    with pytest.raises(ValueError, match=r"1 group\(s\) .*y == pos_label \(sizes \[0\]"):
        FairPCA(2, constraint="equal_opportunity").fit(X, y_one_group, sensitive_features=z)


def test_transform_with_wrong_number_of_features():
    X, _, z = data()
    fpca = FairPCA(2).fit(X, sensitive_features=z)
    with pytest.raises(ValueError, match="features"):
        fpca.transform(X[:, :3])


def test_equalize_covariance_bounds():
    X, _, z = data(d=8)
    with pytest.raises(ValueError, match=r"3 <= l <= 7"):
        FairPCA(3, equalize_covariance=2).fit(X, sensitive_features=z)
    with pytest.raises(ValueError, match="equalize_covariance"):
        FairPCA(3, equalize_covariance=-0.5).fit(X, sensitive_features=z)


def test_sensitive_columns_errors():
    X, _, z = data()
    with pytest.raises(TypeError, match="DataFrame"):
        FairPCA(2, sensitive_columns="sex").fit(X)
    frame = pd.DataFrame(X, columns=list("abcde"))
    with pytest.raises(ValueError, match=r"\['sex'\] are not columns"):
        FairPCA(2, sensitive_columns=["sex"]).fit(frame)
    frame["sex"] = z
    with pytest.raises(ValueError, match="use one of them"):
        FairPCA(2, sensitive_columns="sex").fit(frame, sensitive_features=z)


def test_inputs_are_not_modified():
    X, _, z = data()
    X_before, z_before = X.copy(), z.copy()
    for solver in ("covariance_eigh", "full", "randomized"):
        FairPCA(2, svd_solver=solver, tradeoff=0.2).fit(X, sensitive_features=z).transform(X)
    np.testing.assert_array_equal(X, X_before)
    np.testing.assert_array_equal(z, z_before)


def test_get_feature_names_out_checks_input_features():
    X, _, z = data(d=4)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    fpca = FairPCA(2).fit(frame, sensitive_features=z)
    assert list(fpca.get_feature_names_out(["a", "b", "c", "d"])) == ["fairpca0", "fairpca1"]
    with pytest.raises(ValueError, match="input_features is not equal to feature_names_in_"):
        fpca.get_feature_names_out(["a", "b", "c", "x"])
    kernel = FairKernelPCA(2).fit(X, sensitive_features=z)
    with pytest.raises(ValueError, match="input_features should have length equal to"):
        kernel.get_feature_names_out(["a", "b"])
