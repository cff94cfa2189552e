"""Intervals of fairpca.metrics.bootstrap_intervals: exact against scipy's Clopper-Pearson and
brute-force references, containment of every estimate, and coverage by simulation."""

import math
import re

import numpy as np
import pandas as pd
import pytest
from metrics_reference import random_audit
from scipy import stats

from fairpca import metrics
from fairpca.metrics import _intervals

Y_OK = np.array([1, 0, 1, 1, 0, 1])
Z_OK = np.array([0, 0, 0, 1, 1, 1])


def _exact(k, n, confidence):
    result = stats.binomtest(int(k), int(n)).proportion_ci(confidence, method="exact")
    return result.low, result.high


def test_clopper_pearson_matches_scipy():
    for k, n in [(0, 5), (5, 5), (1, 7), (30, 100), (999, 1000)]:
        low, high = _intervals.clopper_pearson(k, n, 0.05)
        assert (low, high) == pytest.approx(_exact(k, n, 0.95), abs=1e-12)
        assert low <= k / n <= high


@pytest.mark.parametrize("seed", range(3))
def test_clopper_pearson_of_many_counts_at_once_matches_each_alone(seed):
    rng = np.random.default_rng(seed)
    trials = rng.choice([0, 1, 2, 7, 40, 1000, 250_000], size=12)
    hits = np.floor(trials * rng.choice([0.0, 0.3, 0.999, 1.0], size=12))
    alpha = rng.choice([0.05, 0.05 / 7, 1e-4], size=12)
    low, high = _intervals.clopper_pearson(hits, trials, alpha)
    for i in range(12):
        if trials[i] == 0:
            assert np.isnan(low[i]) and np.isnan(high[i])
            continue
        assert (low[i], high[i]) == pytest.approx(
            _exact(hits[i], trials[i], 1 - alpha[i]), abs=1e-12
        )


def test_spread_and_ratio_intervals_from_simultaneous_group_intervals():
    # Three groups: selected 10/50, 30/60, 12/40; Bonferroni over m = 3 groups.
    group = np.repeat(["a", "b", "c"], [50, 60, 40])
    y_pred = np.concatenate([np.arange(50) < 10, np.arange(60) < 30, np.arange(40) < 12])
    y_true = np.tile([1, 0], 75)
    intervals = metrics.bootstrap_intervals(y_true, y_pred.astype(int), group, n_resamples=10)
    bounds = [_exact(k, n, 1 - 0.05 / 3) for k, n in ((10, 50), (30, 60), (12, 40))]
    lows, highs = np.array(bounds).T
    expected = (max(0.0, lows.max() - highs.min()), highs.max() - lows.min())
    assert intervals["dp_difference"] == pytest.approx(expected, abs=1e-12)
    ratio = (lows.min() / highs.max(), min(1.0, highs.min() / lows.max()))
    assert intervals["selection_rate_ratio"] == pytest.approx(ratio, abs=1e-12)
    assert intervals["selection_rate.sensitive_0:b"] == pytest.approx(bounds[1], abs=1e-12)
    assert intervals["accuracy"] == pytest.approx(
        _exact(np.sum(y_true == y_pred), 150, 0.95), abs=1e-12
    )


def _delong_reference(y, score, confidence):
    """DeLong's structural components by a double loop; Wald interval of logit(AUC)."""
    positives, negatives = score[y == 1], score[y == 0]
    psi = np.array([[1.0 if p > q else 0.5 if p == q else 0.0 for q in negatives]
                    for p in positives])  # fmt: skip
    auc = psi.mean()
    variance = np.var(psi.mean(axis=1), ddof=1) / positives.size
    variance += np.var(psi.mean(axis=0), ddof=1) / negatives.size
    half = stats.norm.ppf(0.5 + confidence / 2) * math.sqrt(variance) / (auc * (1 - auc))
    logit = math.log(auc / (1 - auc))
    return auc, tuple(1 / (1 + math.exp(-(logit + s * half))) for s in (-1, 1))


def test_roc_auc_interval_matches_delong_by_loops():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 120)
    score = np.round(rng.random(120) + 0.4 * y, 1)  # ties included
    auc, expected = _delong_reference(y, score, 0.9)
    report = metrics.group_fairness(y, y, np.arange(120) % 2, y_score=score)
    assert report.roc_auc == pytest.approx(auc, abs=1e-12)
    intervals = metrics.bootstrap_intervals(
        y, y, np.arange(120) % 2, y_score=score, confidence=0.9, n_resamples=10
    )
    assert intervals["roc_auc"] == pytest.approx(expected, abs=1e-12)


def _cases():
    """Random audits, near-zero spreads, groups without positives, tiny and one-class cases."""
    rng = np.random.default_rng(2026)
    for index in range(60):
        n = int(rng.integers(20, 300))
        y_true, y_pred, frame, score = random_audit(rng, n, 1 + index % 3, score=True)
        if index % 4 == 1:  # near-zero spread: the same selection rate in every group
            y_pred = (np.arange(n) % 7 == 0).astype(int)
        if index % 4 == 2:  # a group without positives
            y_true = np.where(frame["attr0"] == "g0", 0, y_true)
        if index % 10 == 3:  # a single class predicted
            y_pred = np.zeros(n, dtype=int)
        yield y_true, y_pred, frame, score, int(rng.integers(1, 30))
    # German's case: a spread of 0.0013 between two groups.
    group = np.repeat(["a", "b"], [310, 690])
    y_pred = np.concatenate([np.arange(310) < 217, np.arange(690) < 482]).astype(int)
    yield np.tile([1, 0], 500), y_pred, pd.Series(group, name="sex"), None, 30


def test_every_interval_contains_its_estimate():
    checked = 0
    for y_true, y_pred, frame, score, size in _cases():
        options = {"min_group_size": size, "allow_small_groups": True, "y_score": score}
        points = metrics.group_fairness(y_true, y_pred, frame, **options).as_metrics()
        intervals = metrics.bootstrap_intervals(y_true, y_pred, frame, n_resamples=200, **options)
        bounds = metrics.ci_metrics(intervals)
        assert {n.rsplit(".", 1)[0] for n in bounds} == set(points)
        for name, value in points.items():
            low, high = bounds[f"{name}.ci95_low"], bounds[f"{name}.ci95_high"]
            assert low <= value <= high, (name, low, value, high)
            checked += 1
    assert checked > 2000
    german = metrics.bootstrap_intervals(y_true, y_pred, frame, min_group_size=30)
    low, high = german["dp_difference"]
    point = metrics.group_fairness(y_true, y_pred, frame).dp_difference
    assert point == pytest.approx(217 / 310 - 482 / 690, abs=1e-15) and low == 0.0 < point < high


def _coverage(simulate, truth, names, repeats, seed):
    rng = np.random.default_rng(seed)
    covered = dict.fromkeys(names, 0)
    for _ in range(repeats):
        y_true, y_pred, group = simulate(rng)
        intervals = metrics.bootstrap_intervals(y_true, y_pred, group, n_resamples=300, seed=rng)
        for name in names:
            low, high = intervals[name]
            covered[name] += low <= truth[name] <= high
    return {name: count / repeats for name, count in covered.items()}


def _two_groups(n_group, tpr, fpr, base=0.5):
    def simulate(rng):
        group = np.repeat([0, 1], n_group)
        y_true = rng.random(2 * n_group) < base
        rate = np.where(y_true, np.take(tpr, group), np.take(fpr, group))
        return y_true.astype(int), (rng.random(2 * n_group) < rate).astype(int), group

    return simulate


@pytest.mark.parametrize(
    ("tpr", "fpr"),
    [((0.6, 0.7), (0.0, 0.2)), ((0.5, 0.5), (0.3, 0.3))],  # DP 0.15; DP exactly 0
)
def test_coverage_is_nominal_or_conservative(tpr, fpr):
    # Selection rate of group g: 0.5 tpr_g + 0.5 fpr_g; balanced accuracy from the mixture.
    selection = [0.5 * t + 0.5 * f for t, f in zip(tpr, fpr, strict=True)]
    truth = {
        "dp_difference": max(selection) - min(selection),
        "eo_difference": abs(tpr[0] - tpr[1]),
        "selection_rate_ratio": min(selection) / max(selection),
        "balanced_accuracy": 0.5 * (np.mean(tpr) + 1 - np.mean(fpr)),
    }
    repeats = 400
    coverage = _coverage(_two_groups(300, tpr, fpr), truth, list(truth), repeats, seed=7)
    tolerance = 3 * math.sqrt(0.95 * 0.05 / repeats)  # three Monte Carlo standard errors
    for name, share in coverage.items():
        assert share >= 0.95 - tolerance, (name, share)
    assert abs(coverage["balanced_accuracy"] - 0.95) <= tolerance, coverage


def test_balanced_accuracy_bootstrap_is_deterministic_and_matches_a_row_bootstrap():
    rng = np.random.default_rng(3)
    y_true, y_pred, frame = random_audit(rng, 600, 2)
    options = {"min_group_size": 20, "n_resamples": 4000}
    intervals = metrics.bootstrap_intervals(y_true, y_pred, frame, seed=1, **options)
    assert intervals == metrics.bootstrap_intervals(y_true, y_pred, frame, seed=1, **options)
    again = metrics.bootstrap_intervals(y_true, y_pred, frame, seed=2, **options)
    assert again["balanced_accuracy"] != intervals["balanced_accuracy"]
    # Independent: resample rows within each intersection group, recompute by numpy.
    _, key = np.unique(frame.astype(str).agg("/".join, axis=1), return_inverse=True)
    strata = [np.flatnonzero(key == k) for k in range(key.max() + 1)]
    row_rng, samples = np.random.default_rng(0), []
    for _ in range(2000):
        rows = np.concatenate([row_rng.choice(idx, idx.size) for idx in strata])
        t, p = y_true[rows], y_pred[rows]
        samples.append(0.5 * (np.mean(p[t == 1] == 1) + np.mean(p[t == 0] == 0)))
    reference = tuple(np.quantile(samples, [0.025, 0.975]))
    assert intervals["balanced_accuracy"] == pytest.approx(reference, abs=0.01)


def _python_calls(function, *args, **kwargs) -> int:
    """How many Python-level function calls ``function(*args, **kwargs)`` makes."""
    import sys

    calls = 0

    def count(_frame, event, _arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        function(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return calls


def test_group_fairness_and_intervals_are_vectorised():
    """The metrics and their 1,000 bootstrap resamples make about as many Python calls on
    200,000 rows as on every tenth of them (the same groups; a loop over rows would add
    180,000): their cost grows in numpy, not in Python (counted, deterministic, no clock)."""

    def both(y_true, y_pred, frame):
        metrics.group_fairness(y_true, y_pred, frame, min_group_size=30)
        metrics.bootstrap_intervals(y_true, y_pred, frame, min_group_size=30, n_resamples=1000)

    many = random_audit(np.random.default_rng(0), 200_000, 3)
    few = [part[::10] for part in many[:2]] + [many[2].iloc[::10].reset_index(drop=True)]
    assert _python_calls(both, *many) < 1.1 * _python_calls(both, *few)


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"min_group_size": 0}, ValueError, "min_group_size must be at least 1"),
        ({"min_group_size": 2.5}, TypeError, "positive int"),
        ({"n_resamples": 1}, ValueError, "at least 2"),
        ({"confidence": 1.5}, ValueError, "strictly between 0 and 1"),
        ({"pos_label": "yes"}, ValueError, "pos_label='yes' is not one"),
    ],
)
def test_bootstrap_bad_input(kwargs, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        metrics.bootstrap_intervals(Y_OK, Y_OK, Z_OK, **kwargs)


def test_ci_metrics_names_every_bound():
    assert metrics.ci_metrics({"accuracy": (0.75, 0.875), "x": (math.nan, math.nan)}) == {
        "accuracy.ci95_low": 0.75,
        "accuracy.ci95_high": 0.875,
    }
