"""Classifier metrics of the audit (``fairpca.tasks.evaluate``) against fairlearn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairpca.tasks.evaluate import classifier_metrics


def test_classifier_metrics_match_fairlearn():
    from fairlearn.metrics import MetricFrame, selection_rate, true_positive_rate

    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    pred = rng.integers(0, 2, n)
    sensitive = pd.DataFrame({"sex": rng.choice(["F", "M"], n), "race": rng.choice(list("xyz"), n)})
    out = classifier_metrics(y, pred, sensitive)
    frame = MetricFrame(
        metrics={"sr": selection_rate, "tpr": true_positive_rate},
        y_true=y,
        y_pred=pred,
        sensitive_features=sensitive,
    )
    assert out["accuracy"] == pytest.approx(np.mean(y == pred), abs=1e-15)
    assert out["dp_difference.intersection"] == pytest.approx(frame.difference()["sr"], abs=1e-15)
    assert out["eo_difference.intersection"] == pytest.approx(frame.difference()["tpr"], abs=1e-15)
    for (sex, race), row in frame.by_group.iterrows():
        assert out[f"selection_rate.sex:{sex}/race:{race}"] == pytest.approx(row["sr"], abs=1e-15)
        assert out[f"tpr.sex:{sex}/race:{race}"] == pytest.approx(row["tpr"], abs=1e-15)
    marginal = MetricFrame(
        metrics=selection_rate, y_true=y, y_pred=pred, sensitive_features=sensitive["race"]
    )
    assert out["dp_difference.race"] == pytest.approx(marginal.difference(), abs=1e-15)
    # the headline is the worst attribute (each attribute separately, the worst reported)
    assert out["dp_difference"] == max(out["dp_difference.sex"], out["dp_difference.race"])


def test_gate_standard_errors_match_the_two_extreme_groups_normal_approximation():
    """Independent computation: binomial variances of the extreme groups' rates (with the
    1/2 continuity shift), the ratio's by the delta method on its logarithm."""
    import numpy as np
    import pandas as pd

    from fairpca.tasks.evaluate import gate_standard_errors

    rng = np.random.default_rng(0)
    n = 3000
    groups = pd.DataFrame({"g": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
                           "h": rng.choice(["x", "y"], n)})  # fmt: skip
    y = rng.integers(0, 2, n)
    y_pred = (rng.random(n) < np.where(groups["g"] == "c", 0.2, 0.4)).astype(int)
    errors = gate_standard_errors(y, y_pred, groups, min_group_size=30)
    rates = {}
    for name, rows in groups.groupby("g").groups.items():
        hits = y_pred[rows].sum()
        rates[name] = ((hits + 0.5) / (len(rows) + 1), len(rows))
    low = min(rates.values())
    high = max(rates.values())
    expected = np.sqrt(low[0] * (1 - low[0]) / low[1] + high[0] * (1 - high[0]) / high[1])
    assert errors["dp_difference.se"] == pytest.approx(expected, rel=1e-12)
    ratio = low[0] / high[0]
    expected_ratio = ratio * np.sqrt(
        (1 - low[0]) / (low[1] * low[0]) + (1 - high[0]) / (high[1] * high[0])
    )
    assert errors["selection_rate_ratio.se"] == pytest.approx(expected_ratio, rel=1e-12)
    assert {
        "eo_difference.se",
        "equalized_odds_difference.se",
        "dp_difference.se.intersection",
    } <= set(errors)
    # a group below min_group_size is left out, as the metrics leave it out
    small = gate_standard_errors(y[:40], y_pred[:40], groups.iloc[:40], min_group_size=30)
    assert "dp_difference.se" not in small


def test_gate_standard_error_of_tied_rates_adds_both_groups_variances():
    """53/213 against 9/37: the shifted rates tie at 0.25, so the two extreme groups must be
    two groups, not the larger one twice (0.042 where 0.077 is right)."""
    import numpy as np
    import pandas as pd

    from fairpca.tasks.evaluate import gate_standard_errors

    groups = pd.DataFrame({"g": ["a"] * 213 + ["b"] * 37})
    y_pred = np.r_[np.arange(213) < 53, np.arange(37) < 9].astype(int)
    errors = gate_standard_errors(np.ones(250, int), y_pred, groups, min_group_size=30)
    expected = np.sqrt(0.25 * 0.75 / 213 + 0.25 * 0.75 / 37)
    assert errors["dp_difference.se"] == pytest.approx(expected, rel=1e-12)
    assert errors["dp_difference.se"] > 0.07


def test_the_linear_probe_reads_a_capped_stratified_sample_of_the_validation_rows(monkeypatch):
    """On many validation rows the linear probe (a logistic regression per attribute) reads
    at most ``LINEAR_PROBE_MAX_ROWS`` of them, every group kept; below the cap, every row."""
    from fairpca import metrics as fm
    from fairpca.tasks import evaluate

    rng = np.random.default_rng(0)
    n = 3000
    s = pd.DataFrame({"sex": rng.choice(["F", "M"], n, p=[0.98, 0.02])})
    F = rng.normal(size=(n, 3)) + (s["sex"].to_numpy() == "M")[:, None]
    read = []
    probe = fm.linear_inseparability

    def recorded(features, sensitive, **kwargs):
        read.append(sensitive["sex"].value_counts().to_dict())
        return probe(features, sensitive, **kwargs)

    monkeypatch.setattr(evaluate.fm, "linear_inseparability", recorded)
    options = {"fair_columns": 2, "sigma": 1.0, "max_rows": 50, "seed": 0}
    evaluate.held_out_metrics(F, s, 0.0, **options)
    monkeypatch.setattr(evaluate, "LINEAR_PROBE_MAX_ROWS", 500)
    evaluate.held_out_metrics(F, s, 0.0, **options)
    every_row, capped = read
    assert sum(every_row.values()) == n
    assert 500 <= sum(capped.values()) < 520 and capped["M"] >= 2
