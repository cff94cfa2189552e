"""Reference mitigations on the audit's rows: searched like the candidates on the validation
rows, evaluated on validation and test with intervals, each stating what its deployment
needs (the comparison with the chosen candidate: tests/tasks/test_select.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairpca.flows.config import AuditConfig
from fairpca.tasks.data import split_data
from fairpca.tasks.references import fit_references
from fairpca.tasks.represent import fit_preprocessor


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
    references = fit_references(encoded, split, config.evaluation, config.seed, config.selection)
    by_name = {r["name"]: r for r in references}
    assert list(by_name) == ["threshold_optimizer", "exponentiated_gradient", "correlation_remover"]
    assert [r["approach"] for r in references] == [
        "post-processing",
        "reductions",
        "pre-processing",
    ]
    assert {r["name"]: r["needs"] for r in references} == {
        "threshold_optimizer": ["sensitive_at_prediction", "randomized_decisions"],
        "exponentiated_gradient": ["randomized_decisions"],
        "correlation_remover": ["sensitive_at_prediction"],
    }
    for reference in references:
        assert "skipped" not in reference and reference["ineligible"] == []  # all useful
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


def test_every_reference_is_chosen_on_the_validation_rows_among_its_configurations():
    config = AuditConfig(dataset="adult", n_bootstrap=200, logreg_C=[0.01, 1.0])
    split = split_data.fn(_Data(), config.split, config.source, seed=config.seed, min_group_size=30)
    preprocessor, train, validation = fit_preprocessor.fn(split)
    encoded = {"train": train, "validation": validation,
               "test": preprocessor.transform(split.X_test)}  # fmt: skip
    by_name = {r["name"]: r for r in fit_references(
        encoded, split, config.evaluation, config.seed, config.selection)}  # fmt: skip
    assert by_name["threshold_optimizer"]["config"].endswith("(2 tried on the validation rows)")
    assert by_name["exponentiated_gradient"]["config"].endswith("(2 tried on the validation rows)")
    assert "bound=" in by_name["exponentiated_gradient"]["config"]


def test_correlation_remover_by_chunks_equals_one_transform(monkeypatch):
    """The chunked transform bounds memory and changes nothing (a linear map of each row)."""
    from fairlearn.preprocessing import CorrelationRemover

    from fairpca.tasks import references

    rng = np.random.default_rng(0)
    features = rng.normal(size=(50, 4))
    sensitive = pd.DataFrame({"sex": rng.choice(["a", "b"], 50)})
    frame, groups = references._with_groups(features, sensitive)
    remover = CorrelationRemover(sensitive_feature_ids=groups).fit(frame)
    monkeypatch.setattr(references, "TRANSFORM_CHUNK_ROWS", 7)
    chunked = references._by_chunks(remover.transform, features, sensitive, frame.columns)
    np.testing.assert_array_equal(chunked, remover.transform(frame))
    # a block without one of the groups (rows 0-6 all "a") still lines its columns up
    ordered = np.argsort(sensitive["sex"].to_numpy(), kind="stable")
    np.testing.assert_array_equal(
        references._by_chunks(remover.transform, features[ordered], sensitive.iloc[ordered],
                              frame.columns),
        remover.transform(frame.iloc[ordered]),
    )  # fmt: skip


def test_a_panels_entities_stay_together_in_the_references_threshold_folds(monkeypatch):
    """Issue 49 (panel data): the references' tuned logistic regressions chose their
    threshold on folds split by row, so one person's rows sat on both sides of a fold. They
    are given each training row's entity, as the candidates are."""
    from fairpca.tasks import references

    data = _Data(n=800)
    data.entities = pd.Series(np.repeat(np.arange(200), 4))  # four rows a person
    config = AuditConfig(dataset="adult", n_bootstrap=100, logreg_C=[1.0])
    split = split_data.fn(data, config.split, config.source, seed=config.seed, min_group_size=30)
    preprocessor, train, validation = fit_preprocessor.fn(split)
    encoded = {"train": train, "validation": validation,
               "test": preprocessor.transform(split.X_test)}  # fmt: skip
    given = []

    def fit_classifier(*args, **kwargs):
        given.append(kwargs.get("entities"))
        return real(*args, **kwargs)

    real = references.fit_classifier
    monkeypatch.setattr(references, "fit_classifier", fit_classifier)
    fit_references(encoded, split, config.evaluation, config.seed, config.selection)
    assert given and all(e is not None and len(e) == len(split.y_train) for e in given)
    assert all(np.array_equal(e, split.entity_train) for e in given)
