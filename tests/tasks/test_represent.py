"""Representations of the audit (``fairpca.tasks.represent``): the variants and the
merging of single-row groups for fitting."""

from __future__ import annotations

import numpy as np
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


def test_the_k_grid_doubles_from_ten_and_ends_at_the_one_largest_k():
    from fairpca.tasks.represent import k_grid

    assert k_grid(63) == [10, 20, 40, 63]
    assert k_grid(40) == [10, 20, 40]
    assert k_grid(7) == [7]
    assert k_grid(63, [5, 20, 90]) == [5, 20]  # what fits of a given grid
    assert k_grid(4, [5, 20]) == [4]


def test_resolve_k_names_one_largest_k_in_its_note_and_searches_the_grid():
    import numpy as np

    from fairpca.tasks.represent import resolve_k

    groups = pd.DataFrame({"sex": np.repeat(["F", "M"], 50)})
    found = resolve_k(None, 64, groups, ["pca", "fair_pca"])
    assert found["grid"] == [10, 20, 40, 63] and found["largest"] == 63
    assert found["note"].count("63") == 2  # the grid's last k and the one largest k
    fixed = resolve_k(20, 64, groups, ["fair_pca"])
    assert fixed["grid"] == [20] and fixed["fitted"] == 20 and "largest k" in fixed["note"]
    assert resolve_k(None, 64, groups, ["pca"])["largest"] == 64  # no constraint without fair PCA
    # one k left: said as the largest when it is, else as the grid's only k that fits
    assert resolve_k(None, 8, groups, ["fair_pca"])["note"].startswith(
        "k not given: k=7, the largest"
    )
    only = resolve_k(None, 64, groups, ["fair_pca"], grid=[5, 100])
    assert only["grid"] == [5] and "searching k in [5]" in only["note"]


@pytest.mark.parametrize("variant", ["fair_pca", "fair_pca_s", "fair_pca_eo", "fair_kernel_pca"])
def test_the_audits_fitted_estimator_stores_no_group_label(variant):
    # The issue: a 5-row group's label, never published, was stored in the registered model
    # (FairPCA.groups_, visible in its skops schema). The audit fits on numbered groups.
    import skops.io

    from fairpca import FairPCA
    from fairpca.tasks.represent import fit_representation

    secret = "secret-label-Zq"
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(600, 6)), np.tile([0, 1], 300)  # 600 rows: 500 Nystroem landmarks
    s = pd.DataFrame({"race": np.repeat(["a", "b", secret], [300, 295, 5])})
    rep = fit_representation.fn(variant, X, y, s, k=2, equalize_covariance=None, seed=0)
    assert secret.encode() not in skops.io.dumps(rep.estimator)
    assert [list(g) for g in rep.estimator.groups_] == [[1, 2, 3]]
    if variant == "fair_pca":  # the same partition: the same fit as on the labels
        direct = FairPCA(n_components=2, random_state=0).fit(X, y, sensitive_features=s)
        np.testing.assert_allclose(
            np.abs(rep.estimator.components_), np.abs(direct.components_), atol=1e-10
        )
