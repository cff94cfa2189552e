"""Disclosure control of fairpca.metrics: nothing published depends on a row of a suppressed
group or cell, so differencing evaluations recovers nothing; the all-rows totals give only a
pool of at least min_group_size rows; labels of left-out groups are never published."""

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest
from messages import matching
from metrics_reference import released_rows

from fairpca import metrics
from fairpca.metrics import _disclosure
from fairpca.metrics._counts import MIN_GROUP_SIZE_BELOW_FLOOR as BELOW_FLOOR

SECRET = "secret-label-Zq"
MIN = 30


def _published(y_true, y_pred, frame, **options):
    """Everything evaluate_fairness publishes: metrics with intervals, the group table, notes."""
    options = {"min_group_size": MIN, "n_resamples": 200, **options}
    values, report = metrics.evaluate_fairness(y_true, y_pred, frame, **options)
    return values, report.group_table(), list(report.notes), report


def _confusion(y_true, y_pred):
    """Selected, positive and correct counts: what the differencing attack wants."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return int(y_pred.sum()), int(y_true.sum()), int((y_true == y_pred).sum())


def _assert_same_publication(first, second):
    values, table, notes, _ = first
    assert values == second[0]  # every name and value, to the bit
    pd.testing.assert_frame_equal(table, second[1])
    assert notes == second[2]


def _small_group_outcomes(n: int):
    """Assignments of (y_true, y_pred) to an n-row group whose selected, positive and correct
    counts all differ: everyone / no one selected, positive, correct."""
    ones, zeros = np.ones(n, int), np.zeros(n, int)
    return [(ones, ones), (zeros, zeros), (ones, zeros), (zeros, ones)]


def _differencing_attack(with_group, without_group, n_with, n_without):
    """The attack of the issue: every published rate of both runs times its number of rows,
    subtracted (``metric x n`` of one run minus the other), for each name in both."""
    shared = set(with_group[0]) & set(without_group[0])
    return {
        name: with_group[0][name] * n_with - without_group[0][name] * n_without
        for name in sorted(shared)
    }


# --------------------------------------------------------------- the differencing attack


def _one_attribute(seed=11):
    """Groups of 200, 200 and 150 rows with random outcomes."""
    rng = np.random.default_rng(seed)
    group = np.repeat(["g0", "g1", "g2"], [200, 200, 150])
    y_true, y_pred = rng.integers(0, 2, 550), rng.integers(0, 2, 550)
    return y_true, y_pred, group


def test_two_evaluations_differing_by_a_6_row_group_reveal_nothing_of_it():
    y_true, y_pred, group = _one_attribute()
    without = _published(y_true, y_pred, pd.DataFrame({"grp": group}))
    runs, truths = [], []
    for small_true, small_pred in _small_group_outcomes(6):
        frame = pd.DataFrame({"grp": np.concatenate([group, [SECRET] * 6])})
        runs.append(_published(np.r_[y_true, small_true], np.r_[y_pred, small_pred], frame))
        truths.append(_confusion(small_true, small_pred))
    assert len(set(truths)) == 4  # the four groups' selected/positive/correct all differ ...
    for run in runs[1:]:
        _assert_same_publication(runs[0], run)  # ... and yet every publication is the same
    attacks = [_differencing_attack(run, without, 556, 550) for run in runs]
    assert all(attack == attacks[0] for attack in attacks)  # so is every subtraction
    values, table, notes, report = runs[0]
    assert SECRET not in " ".join([*values, *notes, table.to_csv()])
    # The 6 rows are fewer than min_group_size, so the smallest other group (g2) is left out
    # with them; what is left is published whole and equals an evaluation without both.
    assert set(table["group"]) == {"g0", "g1"}
    alone = _published(y_true[:400], y_pred[:400], pd.DataFrame({"grp": group[:400]}))
    assert values == alone[0]
    assert any("1 more group(s)" in note for note in notes)
    assert report.attributes["grp"].suppressed == 2


def test_with_enough_left_out_rows_the_two_evaluations_are_identical():
    # Small groups of 25 and 20 rows are left out in both runs (45 rows, so no complementary
    # group): the run with 6 more rows in a third small group publishes the very same numbers.
    y_true, y_pred, group = _one_attribute(seed=12)
    rng = np.random.default_rng(0)
    extra_true, extra_pred = rng.integers(0, 2, 45), rng.integers(0, 2, 45)
    base = pd.DataFrame({"grp": np.concatenate([group, ["s1"] * 25, ["s2"] * 20])})
    without = _published(np.r_[y_true, extra_true], np.r_[y_pred, extra_pred], base)
    for small_true, small_pred in _small_group_outcomes(6):
        frame = pd.DataFrame({"grp": np.concatenate([base["grp"], [SECRET] * 6])})
        run = _published(
            np.r_[y_true, extra_true, small_true], np.r_[y_pred, extra_pred, small_pred], frame
        )
        assert run[0] == without[0]
        pd.testing.assert_frame_equal(run[1], without[1])
    assert set(without[1]["group"]) == {"g0", "g1", "g2"}


def _two_attributes(seed=13):
    """sex x race: F/M by white/black, 120-180 rows per cell."""
    rng = np.random.default_rng(seed)
    cells = {("F", "white"): 180, ("F", "black"): 120, ("M", "white"): 160, ("M", "black"): 140}
    sex = np.repeat([s for s, _ in cells], list(cells.values()))
    race = np.repeat([r for _, r in cells], list(cells.values()))
    n = sum(cells.values())
    return rng.integers(0, 2, n), rng.integers(0, 2, n), sex, race


def test_a_6_row_intersection_cell_inside_large_groups_is_not_revealed_by_differencing():
    # Six more F rows of race "other": F and the race groups stay large, but the cell
    # (F, other) has 6 rows. Before, sex:F's counts in the two runs differed by the cell's.
    y_true, y_pred, sex, race = _two_attributes()
    other = ["other"] * 40  # race "other" is a large group: 40 M rows plus the 6 F rows
    base_true, base_pred = np.r_[y_true, np.ones(40, int)], np.r_[y_pred, np.zeros(40, int)]
    base = pd.DataFrame({"sex": np.r_[sex, ["M"] * 40], "race": np.r_[race, other]})
    without = _published(base_true, base_pred, base)
    runs, truths = [], []
    for small_true, small_pred in _small_group_outcomes(6):
        frame = pd.DataFrame(
            {"sex": np.r_[base["sex"], ["F"] * 6], "race": np.r_[base["race"], ["other"] * 6]}
        )
        runs.append(_published(np.r_[base_true, small_true], np.r_[base_pred, small_pred], frame))
        truths.append(_confusion(small_true, small_pred))
    assert len(set(truths)) == 4
    for run in runs[1:]:
        _assert_same_publication(runs[0], run)
    attacks = [_differencing_attack(run, without, 646, 640) for run in runs]
    assert all(attack == attacks[0] for attack in attacks)
    values, _, _, report = runs[0]
    # The 6-row cell is left out of sex:F and race:other; as 6 < 30, so is the cell that
    # costs no group and the fewest rows, (F, black).
    assert report.attributes["sex"].group_size == {"F": 180, "M": 340}
    assert report.attributes["race"].group_size == {"black": 140, "other": 40, "white": 340}
    assert report.intersection.suppressed >= 1
    assert not any("F/race:other" in name for name in values)


def test_a_6_row_cell_leaves_out_the_cell_that_costs_no_group():
    # (F, black) has 6 rows: the complementary cell is (M, white), whose removal keeps both
    # sexes and both races; (M, black) or (F, white) would leave a whole group out.
    sex = np.repeat(["F", "F", "M", "M"], [95, 6, 60, 40])
    race = np.repeat(["white", "black", "white", "black"], [95, 6, 60, 40])
    rng = np.random.default_rng(4)
    y_true, y_pred = rng.integers(0, 2, 201), rng.integers(0, 2, 201)
    frame = pd.DataFrame({"sex": sex, "race": race})
    report = metrics.group_fairness(y_true, y_pred, frame, min_group_size=10)
    assert report.attributes["sex"].group_size == {"F": 95, "M": 40}
    assert report.attributes["race"].group_size == {"black": 40, "white": 95}
    assert set(report.intersection.group_size) == {("F", "white"), ("M", "black")}
    assert np.isfinite(report.attributes["race"].dp_difference)


# ------------------------------------------------ the all-rows totals (MLflow's default)


def test_all_rows_totals_minus_the_published_numbers_give_only_a_large_pool():
    # A 29-row group beside 300, 250 and 400 rows. MLflow's default evaluator logs the
    # overall TP / FP / TN / FN; minus the published groups' counts (size x rates) it gives
    # the left-out rows: the 29 and a whole complementary group, not the 29.
    rng = np.random.default_rng(29)
    sizes = [300, 250, 29, 400]
    group = np.repeat(["g0", "g1", SECRET, "g3"], sizes)
    y_true = rng.integers(0, 2, sum(sizes))
    y_pred = (rng.random(sum(sizes)) < np.repeat([0.4, 0.45, 0.9, 0.5], sizes)).astype(int)
    report = metrics.group_fairness(y_true, y_pred, pd.Series(group, name="g"), min_group_size=30)
    result = report.attributes["g"]
    assert set(result.group_size) == {"g0", "g3"}  # g1, the smallest other, left out too
    total = np.bincount(2 * y_true + y_pred, minlength=4).astype(float)  # TN FP FN TP
    derived = total.copy()
    for g, n in result.group_size.items():
        positives = n * result.base_rate[g]
        tp, fp = result.tpr[g] * positives, result.fpr[g] * (n - positives)
        derived -= np.array([n - positives - fp, fp, positives - tp, tp])
    assert derived.sum() == pytest.approx(279)  # the pool: 29 + 250 rows
    # Moving a selection between the 29 rows and g1 keeps the totals and every published
    # number, so the totals cannot tell the 29 rows' counts either.
    moved = y_pred.copy()
    secret, g1 = np.flatnonzero(group == SECRET), np.flatnonzero(group == "g1")
    one = secret[moved[secret] == 1][0]
    zero = g1[(moved[g1] == 0) & (y_true[g1] == y_true[one])][0]
    moved[one], moved[zero] = 0, 1
    again = metrics.group_fairness(y_true, moved, pd.Series(group, name="g"), min_group_size=30)
    assert again.as_metrics() == report.as_metrics()
    assert np.bincount(2 * y_true + moved, minlength=4).tolist() == total.tolist()


# ------------------------------------------------------------------------ released rows


def _greatest_valid_cells(rows, members, minimum):
    """Brute force: the union of every set of cells in which each group of each grouping has
    no row or at least ``minimum`` (the union of such sets is one of them)."""
    n_cells = len(rows)
    union = np.zeros(n_cells, bool)
    for chosen in itertools.product([False, True], repeat=n_cells):
        chosen = np.array(chosen)
        sizes = [np.bincount(m, weights=rows * chosen) for m in members]
        if all(((s == 0) | (s >= minimum)).all() for s in sizes):
            union |= chosen
    return union


@pytest.mark.parametrize("seed", range(12))
def test_released_cells_are_the_largest_valid_set_then_complemented(seed):
    rng = np.random.default_rng(seed)
    n_a, n_b = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    combos = np.array([(a, b) for a in range(n_a) for b in range(n_b)])
    rows = rng.integers(1, 40, len(combos)).astype(float)
    members = [combos[:, 0], combos[:, 1], np.arange(len(combos))]
    minimum = 15
    settled = _disclosure._settled(rows, members, rows > 0, minimum)
    assert settled.tolist() == _greatest_valid_cells(rows, members, minimum).tolist()
    released = _disclosure.released_cells(rows, members, minimum)
    assert not (released & ~settled).any()
    for member in members:
        size = np.bincount(member, weights=rows * released)
        assert ((size == 0) | (size >= minimum)).all()
    left_out = rows[~released].sum()
    assert left_out == 0 or left_out >= minimum or not released.any()


@pytest.mark.parametrize("seed", range(6))
def test_left_out_rows_change_nothing_published(seed):
    # Random audits with 1-3 attributes and scores: the rows outside the released ones may
    # hold any outcomes and scores; every published number stays the same.
    from metrics_reference import random_audit

    rng = np.random.default_rng(seed)
    n = int(rng.integers(150, 400))
    y_true, y_pred, frame, score = random_audit(rng, n, seed % 3 + 1, score=True)
    options = {"min_group_size": 12, "n_resamples": 50}
    first = _published(y_true, y_pred, frame, y_score=score, **options)
    kept = released_rows(frame, 12)
    out = np.setdiff1d(np.arange(n), kept)
    other_true, other_pred, other_score = y_true.copy(), y_pred.copy(), score.copy()
    other_true[out], other_pred[out] = 1 - y_true[out], rng.integers(0, 2, out.size)
    other_score[out] = rng.random(out.size) * 5
    again = _published(other_true, other_pred, frame, y_score=other_score, **options)
    _assert_same_publication(first, again)
    alone = _published(y_true[kept], y_pred[kept], frame.iloc[kept], y_score=score[kept], **options)
    assert first[0] == alone[0]
    assert "roc_auc" in first[0] or len(kept) == 0


def test_no_released_row_gives_undefined_values_and_a_note():
    y, group = [1, 0, 1, 0], ["a", "a", "b", "b"]
    report = metrics.group_fairness(y, y, group)  # min_group_size=10: nothing is released
    assert report.as_metrics() == {} and report.group_table().empty
    assert any(note.startswith("No rows are left") for note in report.notes)
    assert metrics.ci_metrics(metrics.bootstrap_intervals(y, y, group, n_resamples=10)) == {}


# ------------------------------------------------------------------------------ labels


def test_labels_of_left_out_groups_appear_in_no_output():
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
    published = " ".join(
        [*report.as_metrics(), *intervals, *report.notes, report.group_table().to_csv()]
    )
    assert SECRET not in published + str(dataclasses.asdict(report))
    assert any(note.startswith("sex: 1 group(s) left out") for note in report.notes)


def test_min_group_size_has_a_floor_lowered_only_by_opt_in():
    y, group = np.tile([0, 1], 20), np.repeat(["a", "b"], 20)
    with pytest.raises(ValueError, match=matching(BELOW_FLOOR, value=5, floor=10)):
        metrics.group_fairness(y, y, group, min_group_size=5)
    with pytest.raises(ValueError, match=matching(BELOW_FLOOR, value=1)):
        metrics.check_fairness_options(min_group_size=1)
    report = metrics.group_fairness(y, y, group, min_group_size=1, allow_small_groups=True)
    assert report.attributes["sensitive_0"].group_size == {"a": 20, "b": 20}
    from fairpca.flows.config import AuditConfig

    with pytest.raises(ValueError, match=matching(BELOW_FLOOR, value=5)):
        AuditConfig(dataset="german", min_group_size=5)
    assert AuditConfig(dataset="german", min_group_size=5, allow_small_groups=True)


def test_published_group_sizes_are_the_released_rows_sizes():
    frame = pd.DataFrame(
        {
            "sex": np.repeat(["F", "M", SECRET], [200, 200, 11]),
            "race": np.repeat(["a", "b", "c", "d"], [300, 50, 30, 31]),
        }
    )
    # Cells: (F,a) 200, (M,a) 100, (M,b) 50, (M,c) 30, (M,d) 20, (SECRET,d) 11: the last two
    # (31 rows) are left out, and with them race d.
    sizes, withheld = metrics.published_group_sizes(frame, min_group_size=30)
    assert sizes == {"sex": {"F": 200, "M": 180}, "race": {"a": 300, "b": 50, "c": 30}}
    assert withheld == {"sex": 1, "race": 1}
    assert SECRET not in repr((sizes, withheld))
    report = metrics.group_fairness(np.zeros(411), np.zeros(411), frame, min_group_size=30)
    assert {k: v for k, v in report.attributes["sex"].group_size.items()} == sizes["sex"]
    with pytest.raises(ValueError, match=matching(BELOW_FLOOR, value=3)):
        metrics.published_group_sizes(frame, min_group_size=3)


# ------------------------------------------------------------------ across attribute sets


def _race_values(values: dict) -> dict:
    return {
        k: v
        for k, v in values.items()
        if (".race:" in k and "/" not in k) or ".race." in k or k.endswith(".race")
    }


def test_evaluations_knowing_the_same_columns_publish_the_same_race_numbers():
    # (F, other) has 6 rows inside groups of 300+ and 46: an evaluation reporting race alone
    # published race:other over all 46 rows, one reporting sex and race over 40, so their
    # difference gave the 6-row cell. Knowing sex (protected, not reported) both use 40.
    y_true, y_pred, sex, race = _two_attributes()
    sex, race = np.r_[sex, ["M"] * 40, ["F"] * 6], np.r_[race, ["other"] * 46]
    y_true, y_pred = np.r_[y_true, np.ones(46, int)], np.r_[y_pred, np.zeros(40, int), [1] * 6]
    frame = pd.DataFrame({"sex": sex, "race": race})
    both = _published(y_true, y_pred, frame)
    runs = [
        _published(y_true, y_pred, frame[["race"]], protected_features=frame[["sex"]]),
        _published(y_true, y_pred, frame[["race"]], protected_features=frame[["race", "sex"]]),
        _published(y_true, y_pred, frame["race"], protected_features=frame["sex"].to_numpy()),
    ]
    for run in runs:
        assert _race_values(run[0]) == _race_values(both[0])
        race_table = both[1][both[1]["attribute"] == "race"].reset_index(drop=True)
        pd.testing.assert_frame_equal(run[1], race_table)
    assert both[3].attributes["race"].group_size["other"] == 40
    # The limit: an evaluation that does not know sex cannot leave the cell out.
    unaware = _published(y_true, y_pred, frame[["race"]])
    assert unaware[3].attributes["race"].group_size["other"] == 46


def test_published_group_sizes_with_protected_columns_are_the_released_sizes():
    frame = pd.DataFrame(
        {
            "sex": np.repeat(["F", "M", "F"], [200, 200, 6]),
            "race": np.repeat(["a", "b"], [200, 206]),
        }
    )
    sizes, withheld = metrics.published_group_sizes(
        frame[["race"]], min_group_size=30, protected_features=frame[["sex"]]
    )
    together, together_withheld = metrics.published_group_sizes(frame, min_group_size=30)
    assert sizes == {"race": together["race"]} == {"race": {"b": 200}}
    assert withheld == {"race": together_withheld["race"]}
    # (F, b), 6 rows, is left out, and with it a complementary cell: (F, a)
    assert metrics.published_group_sizes(frame[["race"]], min_group_size=30)[0] == {
        "race": {"a": 200, "b": 206}
    }
