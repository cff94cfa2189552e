"""The packages' public names, imported on first use (:mod:`fairpca._lazy`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fairpca
from fairpca import datasets, metrics
from fairpca._fair_pca import FairPCA
from fairpca.datasets._screen import MIN_CATEGORY_COUNT


def test_a_public_name_is_the_object_of_its_submodule():
    assert fairpca.FairPCA is FairPCA
    assert datasets.MIN_CATEGORY_COUNT == MIN_CATEGORY_COUNT
    assert callable(metrics.group_fairness)


@pytest.mark.parametrize("package", [fairpca, datasets, metrics])
def test_every_name_in_all_resolves_and_dir_lists_them(package):
    for name in package.__all__:
        assert getattr(package, name) is not None
    assert set(package.__all__) <= set(dir(package))


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match=r"'fairpca\.datasets' has no attribute 'load_adul'"):
        datasets.load_adul  # noqa: B018
    assert not hasattr(fairpca, "PCA")


def test_importing_the_packages_imports_neither_scikit_learn_nor_scipy():
    code = (
        "import sys, fairpca, fairpca.datasets, fairpca.metrics; "
        "print('sklearn' in sys.modules, 'scipy' in sys.modules); "
        "from fairpca.datasets import *; print('load_dataset' in dir())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False", "True"]
