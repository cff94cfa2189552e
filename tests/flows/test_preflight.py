"""The pre-flight check's own pieces (its messages are tested with the commands that print
them: tests/flows/test_cli.py, tests/test_hostile_inputs.py)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fairpca.datasets import load_dataset, make_preprocessor
from fairpca.flows.preflight import encoded_width


@pytest.mark.parametrize("name", ["adult", "german"])
def test_the_encoded_width_is_the_fitted_encoders_without_encoding_every_row(name):
    X = load_dataset(name).X
    X = X.mask(np.random.default_rng(0).random(X.shape) < 0.02)  # missing values too
    encoder = make_preprocessor(X, min_category_count=30)
    tracemalloc.start()
    try:
        width = encoded_width(encoder, X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    encoded = make_preprocessor(X, min_category_count=30).fit_transform(X)
    assert width == encoded.shape[1]
    if name == "adult":  # 48,842 rows: the dense encoding of every row (41 MB, and its
        assert peak < encoded.nbytes  # copy when the transformers' outputs are stacked)
