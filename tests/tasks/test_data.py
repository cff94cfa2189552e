"""Rows of the audit (``fairpca.tasks.data``): the seeded stratified split and the
training-rows-only screening of columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairpca.tasks.data import split_rows


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_split_rows_is_seeded_disjoint_sized_and_stratified(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    y = (rng.random(n) < 0.25).astype(int)
    groups = pd.DataFrame({"g": rng.choice(["a", "b"], size=n, p=[0.3, 0.7])})
    kwargs = {"n_train": 1000, "n_validation": 500, "n_test": 400, "seed": seed}
    parts = split_rows(y, groups, **kwargs)
    again = split_rows(y, groups, **kwargs)
    for part, same in zip(parts, again, strict=True):
        np.testing.assert_array_equal(part, same)
    assert [len(part) for part in parts] == [1000, 500, 400]
    assert len(set(np.concatenate(parts))) == 1900  # disjoint
    full = pd.Series(y).astype(str) + groups["g"].to_numpy()
    expected = full.value_counts(normalize=True).sort_index()
    for part in parts:
        share = full.iloc[part].value_counts(normalize=True).sort_index()
        np.testing.assert_allclose(share, expected, atol=0.005)


@pytest.mark.parametrize("rare", [1, 2, 3])
def test_split_rows_keeps_a_tiny_group_without_aborting(rare):
    y = np.array([0, 1] * 50)
    groups = pd.DataFrame({"g": ["a"] * (100 - rare) + ["rare"] * rare})
    train, validation, test = split_rows(y, groups, n_train=60, n_validation=20, n_test=20, seed=0)
    assert (len(train), len(validation), len(test)) == (60, 20, 20)
    rare_rows = np.flatnonzero(groups["g"] == "rare")
    assert set(rare_rows) <= set(train)  # strata of < 3 rows cannot reach all three parts


def test_split_rows_scales_sizes_down_to_the_data():
    y = np.array([0, 1] * 500)
    groups = pd.DataFrame({"g": ["a", "b"] * 500})
    parts = split_rows(y, groups, n_train=5000, n_validation=2500, n_test=2500, seed=0)
    assert [len(part) for part in parts] == [500, 250, 250]


def test_split_rows_rejects_too_few_rows():
    with pytest.raises(ValueError, match="too few"):
        split_rows(
            np.array([0, 1, 0]),
            pd.DataFrame({"g": [0, 1, 0]}),
            n_train=20,
            n_validation=20,
            n_test=20,
            seed=0,
        )


def test_target_leakage_rule_reads_only_the_training_labels():
    """A column that predicts the label only on held-out rows is not excluded, and held-out
    labels cannot change which columns are excluded."""
    import warnings as _warnings
    from types import SimpleNamespace

    from fairpca.datasets import screen_columns
    from fairpca.tasks.data import screen_training_rows

    rng = np.random.default_rng(3)
    n = 600
    X = pd.DataFrame({"proxy": rng.normal(size=n), "noise": rng.normal(size=n)})
    y = rng.integers(0, 2, size=n)
    train = np.arange(150)
    source = SimpleNamespace(data="file.csv", keep=[], leakage_threshold=0.8, proxy_threshold=0.95)

    def excluded(labels):
        data = SimpleNamespace(
            X=X, sensitive=pd.DataFrame({"g": rng.choice(["a", "b"], size=n)}), screened={}
        )
        return screen_training_rows(data, labels, train, source, 30)

    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        before, _ = excluded(y)
        y_held_out_leaks = y.copy()
        y_held_out_leaks[150:] = (X["proxy"].to_numpy()[150:] > 0).astype(int)
        after, _ = excluded(y_held_out_leaks)
        on_all_rows = screen_columns(X, y_held_out_leaks).excluded
    assert before == after == {}
    assert "proxy" in on_all_rows  # the rule on every row would have read held-out labels
    y_train_leaks = y.copy()
    y_train_leaks[:150] = (X["proxy"].to_numpy()[:150] > 0).astype(int)
    with pytest.warns(UserWarning, match="proxy"):
        found, record = excluded(y_train_leaks)
    assert list(found) == ["proxy"]
    assert record == [
        {"column": "proxy", "rule": "target leakage", "score": 1.0, "action": "excluded"}
    ]


def test_every_row_by_default_in_shares_with_counts_as_caps_or_all_three_as_sizes():
    from fairpca.tasks.data import part_sizes

    assert part_sizes(48_842) == (24_421, 12_211, 12_210)  # 50 / 25 / 25 of every row
    assert part_sizes(100_000, shares=(0.6, 0.2, 0.2)) == (60_000, 20_000, 20_000)
    assert part_sizes(100_000, 5000, None, 2500) == (5000, 25_000, 2500)
    assert part_sizes(1000, 5000, 2500, 2500) == (500, 250, 250)  # three counts, scaled down
    assert part_sizes(10_000, 1500, 1000, 1000) == (1500, 1000, 1000)  # three counts: as given


def test_stratified_sample_keeps_each_label_and_group_share_and_is_seeded():
    from fairpca.tasks.data import stratified_sample

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 20_000)
    groups = pd.DataFrame({"g": rng.choice(["a", "b", "c"], 20_000, p=[0.7, 0.2, 0.1])})
    rows = stratified_sample(y, groups, 2000, seed=3)
    assert len(rows) == len(set(rows)) == 2000
    np.testing.assert_array_equal(rows, stratified_sample(y, groups, 2000, seed=3))
    full = pd.crosstab(y, groups["g"], normalize=True)
    drawn = pd.crosstab(y[rows], groups["g"].to_numpy()[rows], normalize=True)
    assert np.abs(full.to_numpy() - drawn.to_numpy()).max() < 1e-3
    np.testing.assert_array_equal(stratified_sample(y, groups, 30_000, seed=3), np.arange(20_000))


def test_stratified_sample_keeps_a_small_groups_rows_up_to_the_floor():
    """A group of 0.4% of the rows would get ~4 of 1,000 sampled rows per label; with the
    floor it keeps 30 per label (all of them where it has fewer), the rest in proportion."""
    from fairpca.tasks.data import stratified_sample

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 50_000)
    g = np.where(np.arange(50_000) < 200, "small", "large")
    groups = pd.DataFrame({"g": g})
    plain = stratified_sample(y, groups, 1000, seed=0)
    floored = stratified_sample(y, groups, 1000, seed=0, floor=30)
    assert (g[plain] == "small").sum() < 10
    small = floored[g[floored] == "small"]
    assert np.bincount(y[small]).tolist() == [30, 30]
    assert len(floored) == len(set(floored.tolist())) <= 1000 + 60
