"""Reference mitigations on the audit's rows: trained on the training part, evaluated on
validation and test with intervals; the decision says when one dominates the candidate."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairpca.flows.config import AuditConfig
from fairpca.tasks.data import split_data
from fairpca.tasks.references import (
    dominating_references,
    fit_references,
    sensitive_at_prediction_note,
)
from fairpca.tasks.represent import fit_preprocessor
from fairpca.tasks.select import GatePolicy


class _Data:
    """A dataset-shaped object: features, labels, groups."""

    def __init__(self, n=1500, seed=0):
        rng = np.random.default_rng(seed)
        group = rng.choice(["a", "b"], size=n)
        x = rng.normal(size=(n, 4)) + 0.8 * (group == "b")[:, None] * np.array([1, 0, 0, 0])
        self.X = pd.DataFrame(x, columns=[f"x{i}" for i in range(4)])
        self.y = (x[:, 0] + x[:, 1] + rng.normal(size=n) > 0.8).astype(int)
        self.sensitive = pd.DataFrame({"group": group})
        self.screened = {}


def test_references_are_fitted_on_training_rows_and_evaluated_with_intervals():
    config = AuditConfig(dataset="adult", n_bootstrap=200)
    split = split_data.fn(_Data(), config.split, config.source, seed=config.seed, min_group_size=30)
    preprocessor, train, validation = fit_preprocessor.fn(split)
    encoded = {"train": train, "validation": validation,
               "test": preprocessor.transform(split.X_test)}  # fmt: skip
    references = fit_references(encoded, split, config.evaluation, config.seed)
    by_name = {r["name"]: r for r in references}
    assert list(by_name) == ["threshold_optimizer", "exponentiated_gradient", "correlation_remover"]
    assert [r["approach"] for r in references] == [
        "post-processing",
        "reductions",
        "pre-processing",
    ]
    for reference in references:
        assert "skipped" not in reference
        for part in ("validation", "test"):
            metrics = reference[part]
            for name in ("accuracy", "dp_difference", "balanced_accuracy"):
                assert metrics[f"{name}.ci95_low"] <= metrics[name] <= metrics[f"{name}.ci95_high"]
    # the mitigations do what they are for: a far smaller DP difference than the plain model
    from sklearn.linear_model import LogisticRegression

    plain = LogisticRegression().fit(train, split.y_train).predict(encoded["test"])
    groups = split.s_test["group"].to_numpy()
    plain_dp = abs(plain[groups == "a"].mean() - plain[groups == "b"].mean())
    assert by_name["threshold_optimizer"]["test"]["dp_difference"] < plain_dp / 2
    note = sensitive_at_prediction_note(references)
    assert note.startswith("threshold_optimizer and correlation_remover need the sensitive")
    assert "Fair PCA and exponentiated_gradient need it only for training" in note


def test_a_dominating_reference_is_named_and_a_dominated_one_is_not():
    policy = GatePolicy.from_config(AuditConfig(dataset="adult").selection)  # DP + four-fifths
    chosen = {"balanced_accuracy": 0.61, "dp_difference": 0.02, "selection_rate_ratio": 0.82}
    better = {"name": "threshold_optimizer", "approach": "post-processing",
              "test": {"balanced_accuracy": 0.70, "dp_difference": 0.01,
                       "selection_rate_ratio": 0.95}}  # fmt: skip
    less_fair = {"name": "correlation_remover", "approach": "pre-processing",
                 "test": {"balanced_accuracy": 0.72, "dp_difference": 0.06,
                          "selection_rate_ratio": 0.75}}  # fmt: skip
    sentences = dominating_references([better, less_fair], chosen, policy)
    assert sentences == [
        "the reference threshold_optimizer (post-processing) does better than the chosen "
        "candidate on the test rows: balanced accuracy 0.7000 vs 0.6100, DP difference 0.0100 "
        "vs 0.0200, selection-rate ratio 0.9500 vs 0.8200"
    ]
