"""Rows of the audit (``fairpca.tasks.data``): the seeded stratified split and the
training-rows-only screening of columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from messages import matching

from fairpca.flows.config import GROUP_COLUMN_TAKEN
from fairpca.tasks.data import TOO_FEW_ENTITIES, split_rows


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


# ---- panel data: each entity's rows in one part and one fold -----------------------------------


def panel_frame(n_people=240, years=6, seed=0) -> pd.DataFrame:
    """A balanced panel: ``nr`` the person (an integer id), six years each, traits constant
    within a person (schooling, sex) and measures that change (hours, the label)."""
    rng = np.random.default_rng(seed)
    person = np.repeat(np.arange(1000, 1000 + n_people), years)
    ability = np.repeat(rng.normal(size=n_people), years)
    schooling = np.repeat(rng.integers(8, 18, n_people), years)
    sex = np.repeat(rng.choice(["female", "male"], n_people, p=[0.4, 0.6]), years)
    hours = np.round(rng.normal(2000, 300, len(person)))
    noise = rng.normal(size=len(person))
    latent = ability + 0.25 * (schooling - 12) + 0.3 * (sex == "male") + noise
    return pd.DataFrame({
        "nr": person, "year": np.tile(np.arange(1980, 1980 + years), n_people),
        "schooling": schooling, "hours": hours, "sex": sex, "high_wage": (latent > 0.5).astype(int),
    })  # fmt: skip


@pytest.mark.parametrize("seed", [0, 3])
def test_an_entity_split_puts_each_entity_in_one_part_seeded_and_stratified(seed):
    frame = panel_frame()
    y, groups = frame["high_wage"].to_numpy(), frame[["sex"]]
    parts = split_rows(y, groups, seed=seed, entities=frame["nr"])
    again = split_rows(y, groups, seed=seed, entities=frame["nr"])
    for part, same in zip(parts, again, strict=True):
        np.testing.assert_array_equal(part, same)
    people = [set(frame["nr"].iloc[part]) for part in parts]
    assert not (people[0] & people[1] or people[0] & people[2] or people[1] & people[2])
    assert sum(len(part) for part in parts) == len(frame)  # every row, whole entities
    for part, share in zip(parts, (0.5, 0.25, 0.25), strict=True):
        assert abs(len(part) / len(frame) - share) < 6 / len(frame) + 1e-9  # one entity's rows
        assert abs(y[part].mean() - y.mean()) < 0.05
        assert abs((groups["sex"].iloc[part] == "male").mean() - 0.6) < 0.1
    plain = split_rows(y, groups, seed=seed)  # by rows: people in training and test at once
    assert set(frame["nr"].iloc[plain[0]]) & set(frame["nr"].iloc[plain[2]])


def test_an_entity_split_with_caps_leaves_whole_entities_out_and_refuses_too_few():
    frame = panel_frame()
    y, groups = frame["high_wage"].to_numpy(), frame[["sex"]]
    parts = split_rows(y, groups, n_train=300, n_validation=120, n_test=120, seed=0,
                       entities=frame["nr"])  # fmt: skip
    for part, size in zip(parts, (300, 120, 120), strict=True):
        assert abs(len(part) - size) <= 6
        counts = frame["nr"].iloc[part].value_counts()
        assert (counts == 6).all()  # an entity is in a part with every row or none
    with pytest.raises(ValueError, match=matching(TOO_FEW_ENTITIES, count=2)):
        split_rows(y[:12], groups.iloc[:12], seed=0, entities=frame["nr"].iloc[:12])


def test_every_cross_validation_fold_keeps_each_entity_in_one_side():
    from fairpca.tasks.sweep import repeated_folds, stratified_folds

    frame = panel_frame()
    y, groups, people = frame["high_wage"].to_numpy(), frame[["sex"]], frame["nr"].to_numpy()
    folds = repeated_folds(y, groups, people, 5, 2, seed=0)
    assert len(folds) == 10
    for repeat in range(2):
        held = np.concatenate([held for _, held in folds[5 * repeat : 5 * repeat + 5]])
        assert sorted(held) == list(range(len(y)))  # each row held out once per repeat
    for train, held in [*folds, *stratified_folds(3, y, people, seed=0)]:
        assert not set(people[train]) & set(people[held])
        assert abs(y[held].mean() - y.mean()) < 0.08  # stratified as far as entities allow
    assert folds[0][1].tolist() != folds[5][1].tolist()  # a repeat draws the folds anew
    few = repeated_folds(y[:18], groups.iloc[:18], people[:18], 5, 2, seed=0)  # 3 people
    assert len(few) == 6 and all(len(set(people[held])) == 1 for _, held in few)
    plain = repeated_folds(y, groups, None, 5, 1, seed=0)
    assert any(set(people[train]) & set(people[held]) for train, held in plain)


def _panel_config(tmp_path, **values):
    from fairpca.flows.config import AuditConfig

    path = tmp_path / "wages.csv"
    panel_frame().to_csv(path, index=False)
    return AuditConfig(data=path, label="high_wage", sensitive=["sex"], **values)


def test_a_group_column_groups_the_split_and_is_no_feature_and_the_id_is_flagged_without(
    tmp_path,
):
    import warnings as _warnings

    from fairpca.datasets import ScreeningWarning
    from fairpca.tasks.data import load_source, search_sample, split_data

    config = _panel_config(tmp_path, group_column="nr")
    split = split_data.fn(load_source(config.source), config.split, config.source, seed=0,
                          min_group_size=30)  # fmt: skip
    assert all("nr" not in getattr(split, f"X_{part}") for part in ("train", "validation", "test"))
    entities = [getattr(split, f"entity_{part}") for part in ("train", "validation", "test")]
    assert [len(e) for e in entities] == [len(split.y_train), len(split.y_validation),
                                          len(split.y_test)]  # fmt: skip
    assert not set(entities[0]) & set(entities[1]) and not set(entities[0]) & set(entities[2])
    assert not any(entry["column"] == "nr" for entry in split.screening)
    encoded = (np.zeros((len(split.y_train), 1)), np.zeros((len(split.y_validation), 1)))
    sample, _ = search_sample(split, encoded, 300, seed=0)
    assert len(sample.entity_train) == len(sample.y_train) == 300

    plain = _panel_config(tmp_path)
    with pytest.warns(ScreeningWarning, match="--group-column nr"):
        unsplit = split_data.fn(load_source(plain.source), plain.split, plain.source, seed=0,
                                min_group_size=30)  # fmt: skip
    flagged = [entry for entry in unsplit.screening if entry["action"] == "kept"]
    assert [entry["column"] for entry in flagged] == ["nr"]  # not year, hours or schooling
    assert flagged[0]["score"] == pytest.approx(1 / 6)  # share of distinct values
    assert "--group-column nr" in flagged[0]["rule"]
    assert unsplit.entity_train is None and "nr" in unsplit.X_train
    with _warnings.catch_warnings():
        _warnings.simplefilter("error", ScreeningWarning)  # grouped: nothing left to flag
        split_data.fn(load_source(config.source), config.split, config.source, seed=0,
                      min_group_size=30)  # fmt: skip


def test_a_bad_group_column_is_named_before_any_work(tmp_path):
    from pydantic import ValidationError

    from fairpca.tasks.data import load_source

    with pytest.raises(ValueError, match=r"not found .*Available columns"):
        load_source(_panel_config(tmp_path, group_column="person").source)
    taken = matching(GROUP_COLUMN_TAKEN, group="sex", roles="sensitive")
    with pytest.raises(ValidationError, match=taken):
        _panel_config(tmp_path, group_column="sex")
    with pytest.raises(ValidationError, match=matching(GROUP_COLUMN_TAKEN, roles="label")):
        _panel_config(tmp_path, group_column="high_wage")
    from fairpca.flows.config import AuditConfig

    adult = AuditConfig(dataset="adult", group_column="person").source
    with pytest.raises(ValueError, match="group_column 'person' is not a feature column of adult"):
        load_source(adult)
