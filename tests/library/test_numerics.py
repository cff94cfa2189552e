"""Hostile numbers: huge finite values and impossible n_components end in clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from fairpca import FairKernelPCA, FairPCA


@pytest.mark.parametrize(
    "fit",
    [
        lambda X, z: FairPCA(2).fit(X, sensitive_features=z),
        lambda X, z: FairPCA(2, equalize_covariance=0.5).fit(X, sensitive_features=z),
        lambda X, z: FairPCA(2).partial_fit(X, sensitive_features=z),
        lambda X, z: FairPCA(2).fit_chunks(X, sensitive_features=z),
        lambda X, z: FairKernelPCA(2).fit(X, sensitive_features=z),
        lambda X, z: FairKernelPCA(2, kernel="linear").fit(X, sensitive_features=z),
    ],
    ids=["fit", "fair-pca-s", "partial_fit", "fit_chunks", "kernel-rbf", "kernel-linear"],
)
def test_values_whose_squares_overflow_are_refused_clearly(fit, shifted_groups):
    X, z = shifted_groups(n=120, d=6)
    with pytest.raises(ValueError, match=r"values up to 4\.07e\+160.*overflow float64.*Rescale"):
        fit(X * 1e160, z)


@pytest.mark.parametrize("offset", [0.0, 1e6], ids=["spread", "mean-dominated"])
def test_overflow_is_found_from_the_gram_trace_of_the_covariance_route(offset, shifted_groups):
    # The covariance route checks sum(X ** 2) as the trace of X's Gram matrix; data whose
    # mean dominates leave that route afterwards, and must have been refused first.
    X, z = shifted_groups(n=120, d=6)
    X = (X + offset) * (1e155 / (1.0 + offset))  # sum(X ** 2) above 1e310
    with pytest.raises(ValueError, match=r"overflow float64.*Rescale"):
        FairPCA(2, svd_solver="covariance_eigh").fit(X, sensitive_features=z)


def test_float32_bound_follows_the_dtype(shifted_groups):
    X, z = shifted_groups(n=120, d=6)
    with pytest.raises(ValueError, match="overflow float32"):
        FairPCA(2).fit((X * 1e18).astype(np.float32), sensitive_features=z)


def test_large_values_below_the_bound_give_the_same_components(shifted_groups):
    X, z = shifted_groups(n=120, d=6)
    plain = FairPCA(2, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    scaled = FairPCA(2, svd_solver="covariance_eigh").fit(X * 1e100, sensitive_features=z)
    np.testing.assert_allclose(scaled.components_, plain.components_, atol=1e-10)
    np.testing.assert_allclose(scaled.explained_variance_ratio_, plain.explained_variance_ratio_)


def test_n_components_above_the_maximum_is_refused_before_the_work(shifted_groups):
    X, z = shifted_groups(n=40, d=6)
    with pytest.raises(ValueError, match=r"n_components=7 is too large.*= 6 directions"):
        FairPCA(7).fit(X, sensitive_features=z)
    with pytest.raises(ValueError, match=r"n_components=41 .*n_samples=40.*kernel map"):
        FairKernelPCA(41).fit(X, sensitive_features=z)
    # the exact maximum also subtracts the constraint rank: d - 1 = 5 fair directions
    with pytest.raises(ValueError, match=r"at most 5 fair directions.*6 - 1"):
        FairPCA(6).fit(X, sensitive_features=z)
