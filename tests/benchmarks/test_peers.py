"""The peer methods (``benchmarks/peers.py``): INLP, mean-gap projection, LEACE, reductions."""

import numpy as np
import pytest

from benchmarks import peers, reproduce_tables
from fairpca import FairPCA


@pytest.mark.parametrize("seed", range(3))
def test_fair_pca_equals_pca_after_mean_gap_erasure(seed, two_group_data):
    X, z = two_group_data(seed)
    k = 3
    fair = FairPCA(n_components=k).fit(X, sensitive_features=z).components_
    erased = peers.MeanGapProjection(n_components=k).fit(X, z).components_
    assert reproduce_tables.subspace_gap(fair, erased) < 1e-10


@pytest.mark.parametrize("seed", range(3))
def test_inlp_leaves_an_orthonormal_k_dim_basis_orthogonal_to_removed_directions(
    seed, two_group_data
):
    X, z = two_group_data(seed)
    model = peers.INLP(n_components=2).fit(X, z)
    U, B = model.components_, model.removed_directions_
    assert U.shape == (2, X.shape[1]) and B.shape == (X.shape[1] - 2, X.shape[1])
    np.testing.assert_allclose(U @ U.T, np.eye(2), atol=1e-10)
    np.testing.assert_allclose(B @ B.T, np.eye(len(B)), atol=1e-10)
    np.testing.assert_allclose(U @ B.T, 0.0, atol=1e-10)
    # one iteration removes exactly the first classifier's direction
    one = peers.INLP(n_components=2, n_iterations=1).fit(X, z)
    assert one.n_iterations_ == 1 and one.components_.shape == (2, X.shape[1])


def test_correlation_remover_equalises_training_group_means(two_group_data):
    X, z = two_group_data(0)
    model = peers.CorrelationRemoverPCA(n_components=3).fit(X, z)
    R = model.transform(X, z)
    np.testing.assert_allclose(R[z == 1].mean(0), R[z == 0].mean(0), atol=1e-10)


def test_leace_skips_with_a_message_when_torch_is_absent(two_group_data):
    ok, reason = peers.leace_available()
    if ok:
        X, z = two_group_data(0)
        R = peers.LeacePCA(n_components=2).fit(X, z).transform(X)
        np.testing.assert_allclose(R[z == 1].mean(0), R[z == 0].mean(0), atol=1e-8)
        orth = peers.LeacePCA(n_components=2, method="orth").fit(X, z).pca_.components_
        fair = FairPCA(n_components=2).fit(X, sensitive_features=z).components_
        assert reproduce_tables.subspace_gap(orth, fair) < 1e-8
    else:
        assert "LEACE skipped" in reason and "leace" in reason
        with pytest.raises(ImportError, match="LEACE skipped"):
            peers.LeacePCA(n_components=2).fit(*two_group_data(0))


def test_exponentiated_gradient_rejects_unknown_constraint():
    with pytest.raises(ValueError, match="demographic_parity"):
        peers.exponentiated_gradient(None, "parity")
