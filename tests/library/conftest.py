"""Shared by the tests of the library (``fairpca/``): a small two-group data set."""

from __future__ import annotations

import numpy as np
import pytest


def _shifted_groups(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + z[:, None]
    return X, z


@pytest.fixture
def shifted_groups():
    """``shifted_groups(n, d, seed=0) -> (X, z)``: standard normal rows in two groups of about
    equal size; group 1 is shifted by one in every feature."""
    return _shifted_groups
