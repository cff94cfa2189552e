"""fairpca.metrics.group_fairness against independent computations: loops over the rows,
scikit-learn's balanced_accuracy_score / roc_auc_score and fairlearn's MetricFrame,
equalized_odds_difference and demographic_parity_ratio."""

import math

import numpy as np
import pandas as pd
import pytest
from metrics_reference import loop_grouping, loop_overall, random_audit, released_rows, same

from fairpca import metrics
from fairpca.metrics import demographic_parity_difference, selection_rates

SEEDS = [0, 1, 2, 3, 4]
EVERY_GROUP = {"min_group_size": 1, "allow_small_groups": True}
RATES = ("selection_rate", "tpr", "fpr", "base_rate")
MEASURES = (
    "dp_difference",
    "eo_difference",
    "fpr_difference",
    "equalized_odds_difference",
    "selection_rate_ratio",
)


def _assert_grouping(result, expected):
    """Measures and per-group values of every group (of the released rows)."""
    for measure in MEASURES:
        assert same(getattr(result, measure), expected[measure]), measure
    assert set(result.group_size) == set(expected["size"])
    for group, size in result.group_size.items():
        assert size == expected["size"][group]
        for rate in RATES:
            assert same(getattr(result, rate)[group], expected[rate][group]), rate
    assert all(set(getattr(result, rate)) == set(result.group_size) for rate in RATES)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_attributes", [1, 2, 3])
def test_group_fairness_matches_loops(seed, n_attributes):
    rng = np.random.default_rng(seed)
    n, min_group_size = int(rng.integers(100, 400)), int(rng.integers(1, 25))
    y_true, y_pred, frame = random_audit(rng, n, n_attributes)
    report = metrics.group_fairness(
        y_true, y_pred, frame, min_group_size=min_group_size, allow_small_groups=True
    )
    # Every number is over the released rows (test_metrics_disclosure tests which they are).
    rows = released_rows(frame, min_group_size)
    y_true, y_pred, frame = y_true[rows], y_pred[rows], frame.iloc[rows]
    for name, value in loop_overall(y_true, y_pred).items():
        assert same(getattr(report, name), value), name
    assert math.isnan(report.roc_auc)  # no scores given
    per_attribute = {}
    for column in frame.columns:
        expected = loop_grouping(y_true, y_pred, list(frame[column]), min_group_size)
        _assert_grouping(report.attributes[column], expected)
        per_attribute[column] = expected
    for measure in MEASURES:
        defined = [e[measure] for e in per_attribute.values() if not math.isnan(e[measure])]
        pick = min if measure == "selection_rate_ratio" else max
        assert same(getattr(report, measure), pick(defined) if defined else math.nan), measure
    if n_attributes == 1:
        assert report.intersection is None
        return
    keys = list(zip(*(frame[c] for c in frame.columns), strict=True))
    expected = loop_grouping(y_true, y_pred, keys, min_group_size)
    _assert_grouping(report.intersection, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_group_fairness_matches_sklearn_and_fairlearn(seed):
    from fairlearn.metrics import (
        MetricFrame,
        demographic_parity_ratio,
        equalized_odds_difference,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score

    rng = np.random.default_rng(100 + seed)
    y_true, y_pred, frame, score = random_audit(rng, 600, 2, score=True)
    report = metrics.group_fairness(y_true, y_pred, frame, y_score=score, **EVERY_GROUP)
    assert report.balanced_accuracy == pytest.approx(
        balanced_accuracy_score(y_true, y_pred), abs=1e-12
    )
    assert report.roc_auc == pytest.approx(roc_auc_score(y_true, score), abs=1e-12)
    rates = {"selection_rate": selection_rate, "tpr": true_positive_rate}
    rates["fpr"] = false_positive_rate
    groupings = [(c, report.attributes[c]) for c in frame] + [(None, report.intersection)]
    for column, result in groupings:
        features = frame if column is None else frame[column]
        by_group = MetricFrame(
            metrics=rates, y_true=y_true, y_pred=y_pred, sensitive_features=features
        ).by_group
        # fairlearn lists absent intersections too (NaN) and gives a rate without any row in
        # its denominator 0 (fairpca: NaN, left out of the differences).
        undefined = False
        for rate in rates:
            ours = {k: v for k, v in getattr(result, rate).items() if not math.isnan(v)}
            undefined |= len(ours) < len(result.group_size)
            assert ours == pytest.approx({k: by_group[rate][k] for k in ours}, abs=1e-12)
        options = {"y_true": y_true, "y_pred": y_pred, "sensitive_features": features}
        if not undefined:
            assert result.equalized_odds_difference == pytest.approx(
                equalized_odds_difference(**options), abs=1e-12
            )
        assert result.selection_rate_ratio == pytest.approx(
            demographic_parity_ratio(**options), abs=1e-12
        )
    worst_ratio = min(report.attributes[c].selection_rate_ratio for c in frame)
    assert report.selection_rate_ratio == worst_ratio


def test_group_fairness_as_metrics_names_and_suppression():
    # sex: F 40 rows, M 40 rows, X 5 and Y 25 rows (suppressed at min_group_size=30; together
    # 30 rows, so no complementary group is needed).
    sex = np.array(["F"] * 40 + ["M"] * 40 + ["X"] * 5 + ["Y"] * 25)
    y_true = np.tile([1, 0], 55)
    y_pred = np.concatenate([np.ones(30), np.zeros(10), np.ones(10), np.zeros(30), np.ones(30)])
    report = metrics.group_fairness(y_true, y_pred, pd.Series(sex, name="sex"), min_group_size=30)
    sex_report = report.attributes["sex"]
    assert sex_report.dp_difference == 0.5
    assert sex_report.selection_rate_ratio == pytest.approx(1 / 3, abs=1e-15)
    assert report.dp_difference == 0.5
    names = report.as_metrics()
    overall = {"accuracy", "balanced_accuracy", "positive_rate", "base_rate", "one_class_share"}
    measures = {f"{m}{s}" for m in MEASURES for s in ("", ".sex")}
    assert overall | measures <= set(names)
    assert not any("X" in name or "Y" in name for name in names)
    assert report.accuracy == 0.5 and report.positive_rate == 0.5  # over F and M only
    assert report.notes[0].startswith("sex: 2 group(s) left out (fewer than min_group_size=30")
    # Fewer than two groups left: NaN, the reason in notes, and the name left out.
    tiny = metrics.group_fairness(y_true, y_pred, pd.Series(sex, name="sex"), min_group_size=41)
    assert math.isnan(tiny.dp_difference) and math.isnan(tiny.attributes["sex"].eo_difference)
    assert not set(MEASURES) & set(tiny.as_metrics())
    assert any("fewer than two groups with at least 41 rows" in note for note in tiny.notes)
    # Several attributes: every measure per attribute and for the intersection.
    frame = pd.DataFrame({"sex": sex, "age": np.where(np.arange(110) % 3, "young", "old")})
    several = metrics.group_fairness(y_true, y_pred, frame, **EVERY_GROUP).as_metrics()
    for measure in MEASURES:
        assert {f"{measure}.intersection", f"{measure}.age", f"{measure}.sex"} <= set(several)
    for rate in RATES:
        assert {f"{rate}.sex:F/age:old", f"{rate}.age:young"} <= set(several)
    assert several["dp_difference.age"] == pytest.approx(
        demographic_parity_difference(y_pred, frame["age"]), abs=1e-15
    )


def test_undefined_measures_are_left_out_with_their_reason():
    group = np.repeat(["a", "b"], 10)
    y_true = np.concatenate([np.ones(10), np.tile([1, 0], 5)])  # a has no negatives
    report = metrics.group_fairness(y_true, np.zeros(20), group, **EVERY_GROUP)
    values = report.as_metrics()
    assert math.isnan(report.fpr_difference) and math.isnan(report.equalized_odds_difference)
    assert math.isnan(report.selection_rate_ratio)  # nobody selected: 0 / 0
    assert report.dp_difference == 0.0 and report.one_class_share == 1.0
    assert {"fpr_difference", "equalized_odds_difference", "selection_rate_ratio"}.isdisjoint(
        values
    )
    notes = " ".join(report.notes)
    assert "y_true != 1, so fpr_difference.sensitive_0" in notes
    assert "selection_rate_ratio.sensitive_0 (0 / 0) is undefined" in notes
    single = metrics.group_fairness(np.ones(20), np.ones(20), group)
    assert math.isnan(single.balanced_accuracy) and "balanced_accuracy" not in single.as_metrics()


def test_legacy_functions_agree_with_group_fairness():
    rng = np.random.default_rng(7)
    y_true, y_pred, frame = random_audit(rng, 300, 2)
    report = metrics.group_fairness(y_true, y_pred, frame, **EVERY_GROUP)
    assert demographic_parity_difference(y_pred, frame) == report.dp_difference
    assert metrics.equal_opportunity_difference(y_true, y_pred, frame) == report.eo_difference
    rates = selection_rates(y_pred, frame)
    for column in frame.columns:
        for group, rate in report.attributes[column].selection_rate.items():
            assert rates[column, group] == rate


def test_sensitive_keyword_is_deprecated_for_sensitive_features():
    y, group = [1, 0, 1, 0], ["a", "a", "b", "b"]
    expected = metrics.group_fairness(y, y, sensitive_features=group).as_metrics()
    with pytest.warns(FutureWarning, match="pass sensitive_features= instead"):
        assert metrics.group_fairness(y, y, sensitive=group).as_metrics() == expected
    with pytest.warns(FutureWarning, match="pass sensitive_features= instead"):
        metrics.bootstrap_intervals(y, y, sensitive=group, n_resamples=10)
    with pytest.raises(TypeError, match="sensitive_features is required"):
        metrics.group_fairness(y, y)


def test_bad_scores_are_a_clear_error():
    y, group = [1, 0, 1, 0], ["a", "a", "b", "b"]
    with pytest.raises(ValueError, match="y_score must be 1-D"):
        metrics.group_fairness(y, y, group, y_score=np.ones((4, 2)))
    with pytest.raises(ValueError, match="NaN or infinity"):
        metrics.group_fairness(y, y, group, y_score=[0.1, np.nan, 0.2, 0.3])
    with pytest.raises(ValueError, match="Inconsistent number of rows"):
        metrics.group_fairness(y, y, group, y_score=[0.1, 0.2])
