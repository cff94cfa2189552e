"""Shared by the tests of ``benchmarks/``: the repository root on ``sys.path`` (the benchmarks
are scripts of the checkout, not installed), the Lee et al. splits they may need, every
method's row of one split (computed once per session) and a small two-group data set."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # a conftest is imported before the test modules beside it

from data_files import HOW_TO_GET  # noqa: E402

from benchmarks import methods, protocol, reproduce_tables  # noqa: E402

# The split whose rows tests compute with every method and classifier: COMPAS split 0, k = 2
# takes about a second per method (k = 10 MLPs take seconds each, and the German k = 2 rows of
# fair kernel PCA are majority-class predictions that hide a change).
ONE_SPLIT = {"dataset": "compas", "split": 0, "k": 2}


def _lee_splits_or_skip() -> Path:
    folder = protocol.data_dir()
    if folder is None:
        pytest.skip(f"needs lee2022-splits, not bundled, in FAIRPCA_DATA_DIR: {HOW_TO_GET}")
    return folder


@pytest.fixture
def lee_splits() -> Path:
    """The folder of the lee2022-splits (``FAIRPCA_DATA_DIR``); the test is skipped, with
    how to provide them, where it is absent."""
    return _lee_splits_or_skip()


@pytest.fixture(scope="session")
def one_split_rows(tmp_path_factory) -> tuple[dict, dict, Path]:
    """``(ONE_SPLIT, rows, cache)``: every runnable method's row of ``ONE_SPLIT`` with all
    classifiers, by method name, computed once by ``reproduce_tables.run`` with a ``--cache``
    folder, which then holds them (``cache/compas_0.csv``) for runs that should not refit."""
    _lee_splits_or_skip()
    cache = tmp_path_factory.mktemp("tables-cache")
    frame = reproduce_tables.run(
        [ONE_SPLIT["dataset"]], [ONE_SPLIT["split"]], (ONE_SPLIT["k"],), methods.ALL_METHODS,
        protocol.CLASSIFIERS, n_jobs=1, cache=cache,
    )  # fmt: skip
    return ONE_SPLIT, {row["method"]: row for row in frame.to_dict("records")}, cache


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
