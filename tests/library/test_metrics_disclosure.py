"""Disclosure control of fairpca.metrics: suppressed groups cannot be recovered by differencing
what is published, and their labels are never published."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

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
    assert report.intersection.suppressed == 1
    assert report.intersection.group_size == report.intersection.selection_rate == {}
    assert not np.isnan(report.intersection.dp_difference)
    table = report.group_table()
    assert set(table["attribute"]) == {"sex", "race"}
    published = report.as_metrics()
    assert not any("/" in name for name in published)  # no intersection group is named
    assert "dp_difference.intersection" in published
    assert any(note.startswith("intersection: ") and "withheld" in note for note in report.notes)
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
    assert report.attributes["sex"].suppressed == 1
    assert report.attributes["sex"].group_size == {}
    race_sizes = {"black": int(np.sum(race == "black")), "white": int(np.sum(race == "white"))}
    assert report.attributes["race"].group_size == race_sizes
    assert report.intersection.group_size == {}
    assert set(report.group_table()["attribute"]) == {"race"}
    assert {"dp_difference.sex", "dp_difference.intersection"} <= set(report.as_metrics())
    # One attribute: F and M with the overall counts give X, so F is withheld too; then F is
    # an extreme of dp_difference.sex (two groups), so sex publishes its measures only.
    alone = metrics.group_fairness(y_true, y_pred, pd.Series(sex, name="sex"), min_group_size=10)
    assert alone.attributes["sex"].group_size == {}
    assert np.isfinite(alone.attributes["sex"].dp_difference)


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


# ------------------------------------------------------------------ complementary suppression

SECRET = "secret-label-Zq"


def _published_text(report, intervals) -> str:
    """Everything a caller can publish from a report and its intervals, as one text."""
    return " ".join(
        [*report.as_metrics(), *intervals, *report.notes, report.group_table().to_csv()]
    )


def test_complementary_suppression_hides_the_next_smallest_groups():
    hide = _disclosure.complementary_suppression
    assert hide(np.array([200, 200, 11]), 30).tolist() == [True, False, True]
    assert hide(np.array([500, 29, 300, 250]), 30).tolist() == [False, True, False, True]
    assert hide(np.array([20, 20, 300]), 30).tolist() == [True, True, False]  # pool 40
    assert hide(np.array([5, 8, 9, 400]), 10).tolist() == [True, True, True, False]
    assert hide(np.array([3, 40, 12]), 10).tolist() == [True, False, True]
    assert not hide(np.array([30, 40]), 30).any()


def _unknowns_determined(report, grouping, n_groups, secret):
    """What an attacker solves: the group's cell counts as unknowns; the equations are the
    published groups' counts (size x rate) and the overall counts. Whether group ``secret``
    is determined: its indicator lies in the row space of the known groups plus the total."""
    known = [np.ones(n_groups)]
    for g in range(n_groups):
        if g != secret and report.attributes[grouping].group_size.get(f"g{g}") is not None:
            known.append(np.eye(n_groups)[g])
    known = np.vstack(known)
    target = np.eye(n_groups)[secret]
    coefficients = np.linalg.lstsq(known.T, target, rcond=None)[0]
    return bool(np.abs(known.T @ coefficients - target).max() < 1e-8)


def test_attack_with_one_class_share_and_group_denominators_recovers_nothing():
    # Validation rows: groups of 200, 200 and 11 (the 11 suppressed at min_group_size=30).
    # Before: the two published groups' sizes and rates with the overall positive rate
    # (one_class_share and n) gave the 11-row group's size and selection rate exactly.
    rng = np.random.default_rng(18)
    group = np.repeat(["g0", "g1", SECRET], [200, 200, 11])
    y_true = rng.integers(0, 2, 411)
    y_pred = (rng.random(411) < np.repeat([0.3, 0.6, 0.9], [200, 200, 11])).astype(int)
    frame = pd.DataFrame({"grp": group})
    options = {"min_group_size": 30}
    report = metrics.group_fairness(y_true, y_pred, frame, **options)
    intervals = metrics.bootstrap_intervals(y_true, y_pred, frame, n_resamples=50, **options)
    assert SECRET not in _published_text(report, intervals)
    published = report.attributes["grp"].group_size
    assert sum(published.values()) <= 200  # at most one of the 200-row groups is published
    assert not _unknowns_determined(report, "grp", 3, secret=2)
    # The subtraction the attack did now gives a pool of at least 211 rows, not the 11.
    points = report.as_metrics()
    selected = round(points["positive_rate"] * 411) - sum(
        published[g] * report.attributes["grp"].selection_rate[g] for g in published
    )
    assert 411 - sum(published.values()) >= 211
    assert round(selected) != int(y_pred[400:].sum())
    assert any("withheld" in note for note in report.notes)
    assert np.isfinite(points["dp_difference.grp"])  # the gate still sees every large group


def test_attack_with_the_default_evaluators_overall_counts_recovers_nothing():
    # A 29-row group (min_group_size=30) beside 300, 250 and 400 rows. MLflow's default
    # evaluator logs the overall TP / FP / TN / FN; with every other group's size and rates
    # (size x base_rate = positives, x tpr = TP, ...) the 29 rows followed exactly.
    rng = np.random.default_rng(29)
    sizes = [300, 250, 29, 400]
    group = np.repeat(["g0", "g1", "g2", "g3"], sizes)
    y_true = rng.integers(0, 2, sum(sizes))
    y_pred = (rng.random(sum(sizes)) < np.repeat([0.4, 0.45, 0.9, 0.5], sizes)).astype(int)
    report = metrics.group_fairness(y_true, y_pred, pd.Series(group, name="g"), min_group_size=30)
    result = report.attributes["g"]
    assert "g2" not in result.group_size and "g1" not in result.group_size  # g1: complement
    assert not _unknowns_determined(report, "g", 4, secret=2)
    total = np.array([np.sum((2 * y_true + y_pred) == c) for c in range(4)])  # TN FP FN TP
    derived = total.astype(float)
    for g, n in result.group_size.items():
        positives = n * result.base_rate[g]
        tp, fp = result.tpr[g] * positives, result.fpr[g] * (n - positives)
        derived -= np.array([n - positives - fp, fp, positives - tp, tp])
    rows = group == "g2"
    truth = np.array([np.sum((2 * y_true[rows] + y_pred[rows]) == c) for c in range(4)])
    assert derived.sum() >= 30 and not np.allclose(derived, truth)


def _block(n, rate):
    """n rows, half positive, with TPR = FPR = selection rate = ``rate``."""
    half, hits = n // 2, round(rate * n / 2)
    y_true = np.repeat([1, 0], half)
    y_pred = np.concatenate([np.arange(half) < hits, np.arange(half) < hits]).astype(int)
    return y_true, y_pred


def _audit(rates, sizes):
    blocks = [_block(n, r) for n, r in zip(sizes, rates, strict=True)]
    group = np.repeat([f"g{j}" for j in range(len(sizes))], sizes)
    y_true = np.concatenate([b[0] for b in blocks])
    y_pred = np.concatenate([b[1] for b in blocks])
    return metrics.group_fairness(y_true, y_pred, pd.Series(group, name="g"), min_group_size=30)


def test_a_withheld_group_at_an_extreme_withholds_the_grouping():
    # g1 (the complement of the 12-row g2) has the highest rates: dp_difference with g0 and g3
    # published would give its rate, so no per-group value of g is published.
    sizes = [300, 100, 12, 400]
    report = _audit([0.1, 0.96, 0.5, 0.9], sizes)
    assert report.attributes["g"].group_size == {}
    assert report.attributes["g"].dp_difference == pytest.approx(0.86, abs=1e-12)
    assert any("attains an extreme" in note for note in report.notes)
    # Inside the published range (and no interval bound its own) it only hides itself.
    inside = _audit([0.1, 0.5, 0.5, 0.9], sizes)
    assert set(inside.attributes["g"].group_size) == {"g0", "g3"}
    assert inside.attributes["g"].dp_difference == pytest.approx(0.8, abs=1e-12)


def test_labels_of_suppressed_groups_appear_in_no_output():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "sex": np.repeat(["F", "M", SECRET], [150, 150, 4]),
            "race": rng.choice(["a", "b", "c"], 304),
        }
    )
    y = rng.integers(0, 2, 304)
    report = metrics.group_fairness(y, 1 - y, frame, min_group_size=10)
    intervals = metrics.bootstrap_intervals(y, 1 - y, frame, min_group_size=10, n_resamples=20)
    assert SECRET not in _published_text(report, intervals) + str(dataclasses.asdict(report))
    assert any("1 group(s) with fewer than" in note for note in report.notes)


def test_min_group_size_has_a_floor_lowered_only_by_opt_in():
    y, group = np.tile([0, 1], 20), np.repeat(["a", "b"], 20)
    with pytest.raises(ValueError, match=r"below the floor of 10.*allow_small_groups=True"):
        metrics.group_fairness(y, y, group, min_group_size=5)
    with pytest.raises(ValueError, match="below the floor"):
        metrics.check_fairness_options(min_group_size=1)
    report = metrics.group_fairness(y, y, group, min_group_size=1, allow_small_groups=True)
    assert report.attributes["sensitive_0"].group_size == {"a": 20, "b": 20}
    from fairpca.flows.config import AuditConfig

    with pytest.raises(ValueError, match="below the floor"):
        AuditConfig(dataset="german", min_group_size=5)
    assert AuditConfig(dataset="german", min_group_size=5, allow_small_groups=True)


def test_published_group_sizes_leave_no_small_group_to_subtraction():
    frame = pd.DataFrame(
        {
            "sex": np.repeat(["F", "M", SECRET], [200, 200, 11]),
            "race": np.repeat(["a", "b", "c", "d"], [300, 50, 30, 31]),
        }
    )
    sizes, withheld = metrics.published_group_sizes(frame, min_group_size=30)
    assert sizes == {"sex": {"M": 200}, "race": {"a": 300, "b": 50, "c": 30, "d": 31}}
    assert withheld == {"sex": 2, "race": 0}
    assert 411 - sum(sizes["sex"].values()) == 211  # the total minus the published: a pool
    assert SECRET not in repr((sizes, withheld))
    with pytest.raises(ValueError, match="below the floor"):
        metrics.published_group_sizes(frame, min_group_size=3)
