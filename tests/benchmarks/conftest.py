"""Shared by the tests of ``benchmarks/``: the repository root on ``sys.path`` (the benchmarks
are scripts of the checkout, not installed), the Lee et al. splits they may need and a small
two-group data set."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # a conftest is imported before the test modules beside it

from benchmarks import protocol  # noqa: E402


@pytest.fixture
def lee_splits() -> Path:
    """The folder of the lee2022-splits (``FAIRPCA_DATA_DIR``); the test is skipped, with
    how to provide them, where it is absent."""
    folder = protocol.data_dir()
    if folder is None:
        pytest.skip("lee2022-splits not found: set FAIRPCA_DATA_DIR (CI: ../shared/datasets)")
    return folder


def _two_group_data(seed, n=120, d=7):
    rng = np.random.default_rng(seed)
    z = (rng.random(n) < 0.4).astype(int)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 1.5 * z[:, None] * rng.normal(size=d)
    return X, z


@pytest.fixture
def two_group_data():
    """``two_group_data(seed, n=120, d=7) -> (X, z)``: correlated features, 40% of the rows in
    group 1, whose mean is shifted along a random direction."""
    return _two_group_data
