"""Representations of the audit (``fairpca.tasks.represent``): the variants and the
merging of single-row groups for fitting."""

from __future__ import annotations

import pandas as pd
import pytest


def test_make_representation_variants():
    from fairpca import FairPCA
    from fairpca.tasks.represent import make_representation, supports_tradeoff

    kwargs = {"equalize_covariance": 0.5, "seed": 0}
    assert not supports_tradeoff(make_representation("pca", 3, **kwargs))
    dp = make_representation("fair_pca", 3, **kwargs)
    eo = make_representation("fair_pca_eo", 3, **kwargs)
    s = make_representation("fair_pca_s", 3, **kwargs)
    assert isinstance(dp, FairPCA) and supports_tradeoff(dp)
    assert eo.constraint == "equal_opportunity"
    assert s.equalize_covariance == 0.5
    with pytest.raises(ValueError, match="unknown representation"):
        make_representation("ica", 3, **kwargs)


def test_single_row_groups_are_merged_into_the_largest_group_for_fitting():
    from fairpca.tasks.represent import merge_single_row_groups

    frame = pd.DataFrame({"race": ["a"] * 5 + ["b"] * 3 + ["c"], "sex": ["F", "M"] * 4 + ["F"]})
    merged = merge_single_row_groups(frame)
    assert merged["race"].value_counts().to_dict() == {"a": 6, "b": 3}
    assert merged["sex"].equals(frame["sex"])  # nothing to merge
    assert frame["race"].iloc[-1] == "c"  # the caller's frame is unchanged
