"""Disclosure control of fairpca.metrics: suppressed groups cannot be recovered by differencing
what is published, and their labels are never published."""

import numpy as np
import pandas as pd

from fairpca import metrics
from fairpca.metrics import _disclosure


def test_suppressed_intersection_cell_cannot_be_recovered_by_subtraction():
    # F: 100 rows = 95 white + 5 black (the 5 suppressed at min_group_size=10); M: 100 rows.
    sex = np.repeat(["F", "F", "M", "M"], [95, 5, 60, 40])
    race = np.repeat(["white", "black", "white", "black"], [95, 5, 60, 40])
    rng = np.random.default_rng(4)
    y_true = rng.integers(0, 2, 200)
    y_pred = rng.integers(0, 2, 200)
    y_pred[95:100] = 1  # the 5 suppressed people are all selected
    frame = pd.DataFrame({"sex": sex, "race": race})
    report = metrics.group_fairness(y_true, y_pred, frame, min_group_size=10)
    assert report.intersection.suppressed == [("F", "black")]
    assert report.intersection.group_size == report.intersection.selection_rate == {}
    assert not np.isnan(report.intersection.dp_difference)
    table = report.group_table()
    assert set(table["attribute"]) == {"sex", "race"}
    published = report.as_metrics()
    assert not any("/" in name for name in published)  # no intersection group is named
    assert "dp_difference.intersection" in published
    assert any("per-group sizes and rates are withheld" in note for note in report.notes)
    # What the published attribute groups give: F and M, white and black (size x rate).
    # Another split of the 200 people with the same marginals but a different count for the
    # suppressed cell gives exactly the same group table, so that count is not determined.
    swapped = y_pred.copy()
    cells = {"Fw": range(0, 95), "Fb": range(95, 100), "Mw": range(100, 160), "Mb": range(160, 200)}
    for cell, value in (("Fb", 0), ("Fw", 1), ("Mb", 1), ("Mw", 0)):  # keeps every marginal
        row = next(i for i in cells[cell] if swapped[i] != value)
        swapped[row] = value
    other = metrics.group_fairness(y_true, swapped, frame, min_group_size=10)
    columns = ["attribute", "group", "size", "selection_rate"]
    pd.testing.assert_frame_equal(other.group_table()[columns], table[columns])
    assert swapped[95:100].sum() != y_pred[95:100].sum()


def test_suppressed_attribute_group_cannot_be_recovered_from_another_attribute():
    # sex X (5 rows) is suppressed; race covers all 205 rows, so race sizes x rates minus sex
    # F and M would give X's selected count exactly: sex's per-group values are withheld.
    rng = np.random.default_rng(8)
    sex = np.repeat(["F", "M", "X"], [100, 100, 5])
    race = rng.choice(["white", "black"], 205)
    y_true, y_pred = rng.integers(0, 2, 205), rng.integers(0, 2, 205)
    frame = pd.DataFrame({"sex": sex, "race": race})
    report = metrics.group_fairness(y_true, y_pred, frame, min_group_size=10)
    assert report.attributes["sex"].suppressed == ["X"]
    assert report.attributes["sex"].group_size == {}
    race_sizes = {"black": int(np.sum(race == "black")), "white": int(np.sum(race == "white"))}
    assert report.attributes["race"].group_size == race_sizes
    assert report.intersection.group_size == {}
    assert set(report.group_table()["attribute"]) == {"race"}
    assert {"dp_difference.sex", "dp_difference.intersection"} <= set(report.as_metrics())
    # One attribute: the reported groups never add up to a suppressed one; nothing withheld.
    alone = metrics.group_fairness(y_true, y_pred, pd.Series(sex, name="sex"), min_group_size=10)
    assert alone.attributes["sex"].group_size == {"F": 100, "M": 100}


def test_differencing_check_too_large_withholds_every_group(monkeypatch):
    sex = np.repeat(["F", "F", "M", "M"], [95, 5, 60, 40])
    race = np.repeat(["white", "black", "white", "black"], [95, 5, 60, 40])
    y = np.tile([0, 1], 100)
    frame = pd.DataFrame({"sex": sex, "race": race})
    monkeypatch.setattr(_disclosure, "DIFFERENCING_CHECK_ENTRIES", 1)  # any problem is too large
    report = metrics.group_fairness(y, y, frame, min_group_size=10)
    assert report.group_table().empty
    names = set(report.as_metrics())
    assert not any(":" in name for name in names)  # no group is named
    assert {"dp_difference.sex", "dp_difference.race", "dp_difference.intersection"} <= names
