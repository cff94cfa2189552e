"""The evaluation protocol of Lee et al. (``benchmarks/protocol.py``) against fairpca.metrics."""

import numpy as np
import pytest

from benchmarks import protocol
from fairpca import metrics as fp_metrics


@pytest.mark.parametrize("seed", range(3))
def test_protocol_metrics_agree_with_fairpca_metrics(seed, two_group_data):
    X, z = two_group_data(seed)
    k = 3
    V = protocol.top_pca_directions(X, k)
    sigma = protocol.lee_sigma(X, k)
    assert sigma == pytest.approx(fp_metrics.median_heuristic_sigma(X @ V), rel=1e-12)
    R = X @ V
    assert protocol.mmd2(R, z, sigma) == pytest.approx(
        fp_metrics.mmd_squared(R, z, sigma=sigma), rel=1e-10, abs=1e-12
    )
    A = np.cov(X.T)
    expected = 100 * np.trace(V.T @ A @ V) / np.trace(A)
    assert protocol.pct_variance(R, X) == pytest.approx(expected, rel=1e-10)


def test_accuracy_and_dp():
    acc, dp = protocol.accuracy_and_dp(
        np.array([1, 0, 1, 1]), np.array([1, 0, 0, 1]), np.array([1, 1, 0, 0])
    )
    assert acc == 75.0
    assert dp == 0.5
