"""Rare categories are pooled before one-hot encoding and stored nowhere in the pipeline."""

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from fairpca.datasets import (
    RARE_CATEGORY,
    RareCategoryPooler,
    load_adult,
    load_german,
    make_preprocessor,
)

N_ROWS = 240
POOLER = "fairpca.datasets._preprocess.RareCategoryPooler"
RARE_VALUES = [f"charge-desc-of-one-person-{i:03d}" for i in range(12)] + ["twice-seen"]


def records() -> pd.DataFrame:
    """240 rows: ``charge`` has two frequent values, 12 values of one row, one of 29 rows
    (just below 30) and one of exactly 30 rows; ``flag`` is bool; ``colour`` a categorical
    with a missing value; ``x`` numeric."""
    rng = np.random.default_rng(0)
    charge = ["theft"] * 100 + ["fraud"] * 69 + ["almost"] * 29 + ["exactly"] * 30
    charge += RARE_VALUES[:12]
    colour = pd.Categorical(rng.choice(["red", "blue"], N_ROWS))
    colour[5] = np.nan
    return pd.DataFrame(
        {
            "charge": rng.permutation(np.array(charge, dtype=object)),
            "flag": rng.random(N_ROWS) < 0.5,
            "colour": colour,
            "x": rng.normal(size=N_ROWS),
        }
    )


def test_rare_values_appear_in_no_serialized_byte_of_the_fitted_pipeline():
    skops_io = pytest.importorskip("skops.io")
    X = records()
    fitted = make_preprocessor(X, min_category_count=30).fit(X)
    encoder = fitted.named_transformers_["categorical"].named_steps["one_hot"]
    assert list(encoder.categories_[0]) == [RARE_CATEGORY, "exactly", "fraud", "theft"]
    assert not hasattr(encoder, "infrequent_categories_") or all(
        values is None for values in encoder.infrequent_categories_
    )
    for serialized in (pickle.dumps(fitted), skops_io.dumps(fitted)):
        assert b"theft" in serialized and b"exactly" in serialized  # the search works
        for value in [*RARE_VALUES, "almost"]:
            assert value.encode() not in serialized, value
    loaded = skops_io.loads(skops_io.dumps(fitted), trusted=[POOLER, "numpy.dtype"])
    np.testing.assert_array_equal(loaded.transform(X), fitted.transform(X))
    unpooled = pickle.dumps(make_preprocessor(X, min_category_count=1).fit(X))
    assert RARE_VALUES[0].encode() in unpooled  # what the pooler prevents


def test_frequent_categories_encode_exactly_as_without_pooling():
    X = records()
    pooled = make_preprocessor(X).set_output(transform="pandas").fit(X)
    every = make_preprocessor(X, min_category_count=1).set_output(transform="pandas").fit(X)
    pooled_out, every_out = pooled.transform(X), every.transform(X)
    shared = [name for name in every_out.columns if name in pooled_out.columns]
    assert len(every_out.columns) == 22 and len(pooled_out.columns) == 10
    assert set(pooled_out.columns) - set(shared) == {f"categorical__charge_{RARE_CATEGORY}"}
    assert {"categorical__flag_True", "categorical__colour_nan", "numeric__x"} <= set(shared)
    pd.testing.assert_frame_equal(pooled_out[shared], every_out[shared], rtol=0, atol=0)
    rare_rows = ~X["charge"].isin(["theft", "fraud", "exactly"])
    np.testing.assert_array_equal(pooled_out[f"categorical__charge_{RARE_CATEGORY}"], rare_rows)


def test_unseen_and_rare_values_at_transform_become_the_placeholder():
    X = records()
    fitted = make_preprocessor(X).set_output(transform="pandas").fit(X)
    new = X.head(3).copy()
    new["charge"] = ["never-seen-value", RARE_VALUES[0], "fraud"]
    out = fitted.transform(new).filter(like="categorical__charge_")
    assert out.to_dict("list") == {
        f"categorical__charge_{RARE_CATEGORY}": [1.0, 1.0, 0.0],
        "categorical__charge_exactly": [0.0, 0.0, 0.0],
        "categorical__charge_fraud": [0.0, 0.0, 1.0],
        "categorical__charge_theft": [0.0, 0.0, 0.0],
    }


def test_pooler_keeps_categories_with_at_least_min_count_rows_and_missing_values():
    X = pd.DataFrame({"c": ["a"] * 3 + ["b"] * 2 + [None, "z"], "flag": [True] * 6 + [False]})
    pooler = RareCategoryPooler(min_count=2).fit(X)
    assert [list(kept) for kept in pooler.categories_] == [["a", "b"], ["True"]]
    out = pooler.transform(X)
    assert pd.isna(out[5, 0])  # missing stays missing (its own one-hot column), never pooled
    out[5, 0] = "missing"
    assert out.tolist() == [
        ["a", "True"],
        ["a", "True"],
        ["a", "True"],
        ["b", "True"],
        ["b", "True"],
        ["missing", "True"],
        ["<rare>", "<rare>"],
    ]
    assert list(pooler.get_feature_names_out()) == ["c", "flag"]
    array_input = RareCategoryPooler(min_count=3, placeholder="other").fit(X.to_numpy())
    pooled = array_input.transform(X.to_numpy())[:, 0]
    assert pooled[[0, 3, 4, 6]].tolist() == ["a", "other", "other", "other"]


def test_pooler_rejects_bad_parameters_and_mismatched_columns():
    X = pd.DataFrame({"c": ["a", "b"]})
    with pytest.raises(InvalidParameterError, match=r"'min_count' parameter.*Got 0 instead"):
        RareCategoryPooler(min_count=0).fit(X)
    with pytest.raises(InvalidParameterError, match=r"'min_count' parameter.*Got 2\.5 instead"):
        RareCategoryPooler(min_count=2.5).fit(X)
    for bad in (-1, 0, 2.0, True, None):
        with pytest.raises(ValueError, match=rf"min_category_count .* got {bad!r}\. Use 1"):
            make_preprocessor(X, min_category_count=bad)
    fitted = RareCategoryPooler(min_count=1).fit(X)
    with pytest.raises(ValueError, match="Feature names unseen at fit time"):
        fitted.transform(pd.DataFrame({"d": ["a"]}))


@pytest.mark.parametrize(
    ("load", "pooled_width", "full_width"),
    [(load_german, 58, 61), (lambda: load_adult(sensitive=("sex", "race")), 92, 101)],
)
def test_bundled_datasets_still_encode_with_rare_categories_pooled(load, pooled_width, full_width):
    data = load()
    Z = make_preprocessor(data.X).fit_transform(data.X)
    assert Z.shape == (data.n_samples, pooled_width) and np.isfinite(Z).all()
    full = make_preprocessor(data.X, min_category_count=1).fit(data.X)
    assert len(full.get_feature_names_out()) == full_width
