"""Metric names of fairpca.metrics: unique and valid for MLflow for group labels and attribute
names of any hashable type, the same for points and intervals."""

import numpy as np
import pandas as pd
import pytest
from metrics_reference import random_audit
from mlflow.utils.validation import _validate_metric_name

from fairpca import metrics

Y = np.tile([0, 1, 1, 0], 20)  # 80 rows
P = np.tile([0, 1, 0, 1], 20)


def _names(frame):
    report = metrics.group_fairness(Y, P, frame)
    intervals = metrics.bootstrap_intervals(Y, P, frame, n_resamples=20)
    return report, report.as_metrics(), metrics.ci_metrics(intervals)


def _check_valid(points, bounds):
    for name in [*points, *bounds]:
        _validate_metric_name(name)  # raises on a name MLflow would reject
        assert len(name) <= 250
    assert {name.rsplit(".", 1)[0] for name in bounds} == set(points)


LABELS = {
    "int and str": [1, "1"],
    "tuples": [("a", 1), ("a", "1")],
    "markup": ["a<b", "a>b"],
    "slashes": ["n/a // unknown", "/.."],
    "long": ["x" * 300, "x" * 300 + "y"],
    "dots": [".", ".."],
    "bool and int": [True, 2],
}


@pytest.mark.parametrize("case", LABELS)
def test_labels_of_any_type_get_unique_valid_names(case):
    first, second = LABELS[case]
    labels = pd.Series([first] * 40 + [second] * 40, name="attr", dtype=object)
    report, points, bounds = _names(labels)
    _check_valid(points, bounds)
    keys = [name for name in points if name.startswith("selection_rate.")]
    assert len(keys) == 2  # one per group: none dropped, none merged
    shown = report.attributes["attr"].selection_rate
    assert sorted(shown.values()) == sorted(points[k] for k in keys)
    table = report.group_table()
    assert sorted(table["key"]) == sorted(k.removeprefix("selection_rate.") for k in keys)
    assert _names(labels)[1] == points  # deterministic


def test_collisions_resolve_the_same_way_whatever_the_row_order():
    labels = pd.Series(["1"] * 40 + [1] * 40, name="attr", dtype=object)
    swapped = pd.Series([1] * 40 + ["1"] * 40, name="attr", dtype=object)
    _, points, _ = _names(labels)
    _, again, _ = _names(swapped)
    assert set(points) == set(again)


def test_an_attribute_named_intersection_does_not_alias_the_cross_attribute_numbers():
    frame = pd.DataFrame(
        {"intersection": np.repeat(["a", "b"], 40), "sex": np.tile(["f", "m"], 40)}
    )
    report, points, bounds = _names(frame)
    _check_valid(points, bounds)
    cross = report.intersection.dp_difference
    own = report.attributes["intersection"].dp_difference
    assert points["dp_difference.intersection"] == cross
    attribute = [n for n in points if n.startswith("dp_difference.intersection_")]
    assert len(attribute) == 1 and points[attribute[0]] == own
    assert len({k for k in points if k.startswith("selection_rate.")}) == 2 + 2 + 4


def test_long_and_many_attributes_keep_names_within_mlflows_limit():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {("attr " + "z" * 80 + str(a)): rng.choice(["p" * 90, "q" * 90], 80) for a in range(3)}
    )
    report, points, bounds = _names(frame)
    _check_valid(points, bounds)
    assert len([n for n in points if n.startswith("tpr.")]) == sum(
        len(g.group_size) for _, g in report._groupings()
    )


def test_points_and_intervals_share_names_for_random_audits():
    rng = np.random.default_rng(11)
    y_true, y_pred, frame = random_audit(rng, 300, 2)
    frame = frame.rename(columns={"attr0": "sex (self-reported)", "attr1": "age [years]"})
    points = metrics.group_fairness(y_true, y_pred, frame).as_metrics()
    bounds = metrics.ci_metrics(metrics.bootstrap_intervals(y_true, y_pred, frame))
    _check_valid(points, bounds)
    assert "dp_difference.sex _self-reported_" in points
