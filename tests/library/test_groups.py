"""Group encodings and the weights whose product with X gives the group sums."""

import numpy as np
import pandas as pd
import pytest

from fairpca._groups import group_sum_weights, with_total


def two_attributes(seed=0, n=500):
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, 3, n), rng.integers(0, 4, n)]).astype(np.intp)
    return codes, [3, 4], 1e3 + rng.standard_normal((n, 7))  # large mean: rounding shows


def test_weights_without_total_are_the_group_columns():
    codes, sizes, _ = two_attributes()
    full = group_sum_weights(codes, sizes)
    np.testing.assert_array_equal(group_sum_weights(codes, sizes, total=False), full[:, 1:])
    np.testing.assert_array_equal(full[:, 0], 1.0)
    # every row is in exactly one group of each attribute
    np.testing.assert_array_equal(full[:, 1:4].sum(1), 1.0)
    np.testing.assert_array_equal(full[:, 4:].sum(1), 1.0)


def test_with_total_gives_the_sums_of_all_rows():
    codes, sizes, X = two_attributes()
    exact = X.T @ group_sum_weights(codes, sizes)
    derived = with_total(X.T @ group_sum_weights(codes, sizes, total=False), sizes)
    assert derived.shape == exact.shape
    np.testing.assert_allclose(derived[:, 1:], exact[:, 1:], rtol=1e-14)
    np.testing.assert_allclose(derived[:, 0], X.sum(0), rtol=1e-14)
    np.testing.assert_allclose(derived[:, 0], exact[:, 0], rtol=1e-14)


def test_numbered_groups_keep_the_partition_and_drop_the_labels():
    from fairpca._groups import numbered_groups

    frame = pd.DataFrame({"race": ["w", "b", "secret", "w"], "sex": pd.Categorical(list("FMFM"))})
    numbered = numbered_groups(frame)
    assert numbered.to_dict("list") == {"race": [1, 2, 3, 1], "sex": [1, 2, 1, 2]}
    assert "secret" not in numbered.to_string()
    with pytest.raises(ValueError, match="'race' has 1 missing value"):
        numbered_groups(frame.assign(race=["w", None, "b", "w"]))
