"""Synthetic data of the benchmarks (``benchmarks/synthetic.py``): seeded and sized."""

import numpy as np

from benchmarks import synthetic


def test_lee_synthetic_splits_are_seeded_and_sized():
    a = synthetic.lee_synthetic(12, n_splits=2, seed=3, latent_dim=50)
    b = synthetic.lee_synthetic(12, n_splits=2, seed=3, latent_dim=50)
    X_tr, z_tr, X_te, z_te = a[0]
    assert X_tr.shape == (336, 12) and X_te.shape == (144, 12)
    assert (z_tr == 1).sum() == 168 and (z_te == 1).sum() == 72
    np.testing.assert_array_equal(X_tr, b[0][0])
    X, z = synthetic.two_gaussians_figure1(n_per_group=20)
    assert X.shape == (40, 10) and z.sum() == 20
