"""The evaluation protocol of Lee et al. (``benchmarks/protocol.py``) against fairpca.metrics."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import protocol  # noqa: E402
from fairpca import metrics as fp_metrics  # noqa: E402


def _two_group_data(seed, n=120, d=7):
    rng = np.random.default_rng(seed)
    z = (rng.random(n) < 0.4).astype(int)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 1.5 * z[:, None] * rng.normal(size=d)
    return X, z


@pytest.mark.parametrize("seed", range(3))
def test_protocol_metrics_agree_with_fairpca_metrics(seed):
    X, z = _two_group_data(seed)
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
