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
