"""Column screening (fairpca.datasets._screen): the identifier rule on float columns, taken
many columns at a time, decides as the rule on each column alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairpca.datasets import _screen, screen_columns


def _float_columns(rng, n_rows: int, n_columns: int) -> pd.DataFrame:
    """Identifiers (shuffled integers, some missing), near-identifiers, counts, measures,
    signed zeros and empty columns, side by side."""
    columns = {}
    for j in range(n_columns):
        kind = j % 6
        if kind == 0:
            values = rng.permutation(n_rows).astype(float) - n_rows // 2
        elif kind == 1:
            values = rng.integers(0, int(n_rows * rng.uniform(0.9, 1.2)), n_rows).astype(float)
        elif kind == 2:
            values = rng.integers(0, 5, n_rows).astype(float)
        elif kind == 3:
            values = rng.normal(size=n_rows).round(int(rng.integers(0, 4)))
        elif kind == 4:
            values = rng.choice([0.0, -0.0, 1.0], n_rows)
        else:
            values = np.full(n_rows, np.nan)
        missing = rng.random(n_rows) < rng.choice([0.0, 0.05, 0.5])
        columns[f"c{j}"] = np.where(missing, np.nan, values)
    return pd.DataFrame(columns)


@pytest.mark.parametrize("seed", range(6))
def test_float_identifiers_decide_as_each_column_alone(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n_rows = int(rng.choice([1, 5, 19, 20, 21, 40, 300]))
    X = _float_columns(rng, n_rows, n_columns=int(rng.integers(1, 40)))
    monkeypatch.setattr(_screen, "_FLOAT_BLOCK_VALUES", int(rng.integers(1, 200)))  # blocks
    one_by_one = {}
    for column in X.columns:
        reason = _screen._kind_reason(X[column], _screen.MAX_CATEGORIES)
        if reason is not None:
            one_by_one[column] = reason
    assert _screen._float_identifiers(X, list(X.columns)) == one_by_one
    if X["c0"].notna().sum() >= 20:
        assert "c0" in one_by_one  # the rule is exercised, not only its absence


def test_a_wide_table_keeps_its_column_order_in_the_reasons():
    rng = np.random.default_rng(0)
    X = _float_columns(rng, 60, 12).assign(city=rng.choice(["a", "b"], 60))
    X.insert(1, "name", [f"person {i}" for i in range(60)])
    excluded = screen_columns(X).excluded
    assert list(excluded) == [c for c in X.columns if c in excluded]
    assert {"name", "c0", "c6"} <= set(excluded) and "city" not in excluded


def test_an_empty_column_is_excluded_not_imputed_into_a_constant():
    X = pd.DataFrame({"x": np.arange(50.0) % 7, "nothing": np.nan, "blank": [None] * 50})
    screening = screen_columns(X)
    assert screening.kept == ["x"]
    assert screening.excluded == {"nothing": _screen.EMPTY, "blank": _screen.EMPTY}


def _wage_panel(n_people=545, years=8, seed=0) -> pd.DataFrame:
    """The shape of an 8-year panel of 545 people: the person ``nr`` (integer ids, and as
    text), traits constant within a person, measures that change; an age binned into a
    category beside it."""
    rng = np.random.default_rng(seed)
    nr = np.repeat(rng.permutation(13_000)[:n_people], years)
    age = rng.integers(18, 80, len(nr))
    return pd.DataFrame({
        "nr": nr.astype(float), "person": [f"P{i:05d}" for i in nr],
        "year": np.tile(np.arange(1980, 1980 + years), n_people),
        "educ": np.repeat(rng.integers(3, 17, n_people), years).astype(float),
        "black": np.repeat(rng.random(n_people) < 0.12, years).astype(float),
        "hours": rng.integers(500, 4000, len(nr)).astype(float),
        "age": age.astype(float), "age_cat": pd.cut(age, [0, 25, 45, 100]).astype(str),
    })  # fmt: skip


def test_a_panels_entity_id_is_flagged_and_categories_measures_and_binnings_are_not():
    panel = _wage_panel()
    found = _screen.panel_id_columns(panel)
    assert sorted(found) == ["nr", "person"]
    share, why = found["nr"]
    assert share == pytest.approx(0.125)  # 545 of 4,360 rows
    assert "--group-column nr" in why
    # without a trait constant within each value, a repeated integer is a measure
    assert _screen.panel_id_columns(panel[["nr", "year", "hours", "age", "age_cat"]]) == {}
    assert _screen.panel_id_columns(panel.drop(columns=["nr", "person"])) == {}


@pytest.mark.parametrize("name", ["adult", "german"])
def test_no_column_of_the_bundled_tables_is_taken_for_a_panel_id(name):
    from fairpca.datasets import load_dataset

    assert _screen.panel_id_columns(load_dataset(name).X) == {}
