"""The downstream classifiers: the paper's settings, and logistic regression with its
threshold tuned on the training rows only."""

from __future__ import annotations

import numpy as np
import pytest
import skops.io
from messages import matching
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import FixedThresholdClassifier

from fairpca.tasks.sweep import (
    CLASSIFIER_NAMES,
    UNKNOWN_THRESHOLD_OBJECTIVE,
    fit_classifier,
    make_classifier,
)
from fairpca.tasks.trust import TRUSTED_TYPES


def _imbalanced(n=3000, seed=0):
    """24% positives whose score is weak, as on a fair representation of Adult."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    logit = 1.2 * X[:, 0] + 0.6 * X[:, 1] - 1.6
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return X, y


def test_tuned_logreg_predicts_the_rarer_class_more_often_and_at_least_as_accurately():
    X, y = _imbalanced()
    X_new, y_new = _imbalanced(seed=1)
    plain = fit_classifier("logreg", X, y, seed=0)
    tuned = fit_classifier("logreg_tuned", X, y, seed=0)
    assert isinstance(tuned, FixedThresholdClassifier)
    assert 0.0 < tuned.threshold < 0.5  # the strong penalty shrank the scores towards 0.5
    plain_rate, tuned_rate = plain.predict(X_new).mean(), tuned.predict(X_new).mean()
    assert plain_rate < tuned_rate <= y.mean() + 0.05
    assert np.mean(tuned.predict(X_new) == y_new) >= np.mean(plain.predict(X_new) == y_new) - 0.01


def test_tuned_logreg_is_the_papers_logistic_regression_refitted_on_every_training_row():
    X, y = _imbalanced()
    tuned = fit_classifier("logreg_tuned", X, y, seed=0)
    reference = LogisticRegression(C=1 / (2 * len(y) * 0.01), max_iter=1000).fit(X, y)
    np.testing.assert_allclose(tuned.estimator_.coef_, reference.coef_, rtol=1e-12)
    scores = reference.predict_proba(X)[:, 1]
    np.testing.assert_array_equal(tuned.predict(X), (scores > tuned.threshold).astype(int))


def test_tuned_threshold_reads_only_the_rows_it_is_given_and_is_deterministic():
    X, y = _imbalanced()
    first = fit_classifier("logreg_tuned", X, y, seed=0).threshold
    assert fit_classifier("logreg_tuned", X, y, seed=0).threshold == first
    assert fit_classifier("logreg_tuned", X[:1500], y[:1500], seed=0).threshold != first


def test_tuned_threshold_does_not_follow_the_order_of_the_rows():
    """A table stored by date (Bank Marketing) drifts from its first rows to its last: folds
    of consecutive rows scored each block with a model of the other times, and the threshold
    moved with the file's order. The folds are drawn at random (seeded), so the rows in their
    stored order give the threshold of the rows shuffled."""
    rng = np.random.default_rng(0)
    n = 6000
    drift = rng.normal(size=n) + 4 * np.arange(n) / n  # e.g. an interest rate over time
    X = np.c_[drift, rng.normal(size=(n, 2))]
    y = (rng.random(n) < 1 / (1 + np.exp(-(X[:, 1] + 3 * (drift - 2))))).astype(int)

    def fitted(rows):
        model = fit_classifier(
            "logreg_tuned", X[rows], y[rows], seed=0, C=0.01, scoring="balanced_accuracy"
        )
        return model.threshold, model.predict(X).mean()

    stored = fitted(np.arange(n))
    shuffled = np.array([fitted(np.random.default_rng(s).permutation(n)) for s in range(5)])
    assert abs(stored[0] - np.median(shuffled[:, 0])) < 0.025  # 0.028 with consecutive folds
    assert abs(stored[1] - np.median(shuffled[:, 1])) < 0.01  # the share said yes


def test_tuned_logreg_with_too_few_rows_of_a_class_keeps_the_default_threshold():
    X, y = _imbalanced(n=200)
    y = np.zeros_like(y)
    y[:1] = 1
    fitted = fit_classifier("logreg_tuned", X, y, seed=0)
    assert isinstance(fitted, LogisticRegression)


@pytest.mark.parametrize("name", CLASSIFIER_NAMES)
def test_every_classifier_saves_with_skops_holding_only_trusted_types(name):
    X, y = _imbalanced(n=400)
    fitted = fit_classifier(name, X, y, seed=0)
    assert set(skops.io.get_untrusted_types(data=skops.io.dumps(fitted))) <= TRUSTED_TYPES


def test_unknown_classifier_names_the_choices():
    with pytest.raises(ValueError, match="logreg_tuned"):
        make_classifier("xgboost", 100, 0)


def test_classifier_regularization_follows_appendix_c1():
    assert pytest.approx(1 / (2 * 5000 * 0.01)) == make_classifier("logreg", 5000, 0).C
    assert pytest.approx(1 / (2 * 5000 * 0.00005)) == make_classifier("rbf_svc", 5000, 0).C
    assert make_classifier("mlp", 10, 0).hidden_layer_sizes == (10, 5)
    with pytest.raises(ValueError, match="unknown classifier"):
        make_classifier("tree", 10, 0)


@pytest.mark.parametrize("scoring", ["balanced_accuracy", "accuracy"])
def test_best_threshold_is_the_best_cut_by_brute_force(scoring):
    """Independent computation: sklearn's score at every midpoint between distinct scores
    (rounded scores make ties)."""
    from sklearn.metrics import accuracy_score, balanced_accuracy_score

    from fairpca.tasks.sweep import best_threshold

    rng = np.random.default_rng(3)
    y = (rng.random(400) < 0.3).astype(int)
    scores = np.round(np.clip(0.3 * y + rng.normal(0.35, 0.2, 400), 0, 1), 2)
    score = {"balanced_accuracy": balanced_accuracy_score, "accuracy": accuracy_score}[scoring]
    distinct = np.unique(scores)
    cuts = np.r_[(distinct[1:] + distinct[:-1]) / 2, distinct[0] - 1e-12]
    best = max(score(y, (scores >= cut).astype(int)) for cut in cuts)
    found = best_threshold(scores, y, scoring)
    assert score(y, (scores >= found).astype(int)) == pytest.approx(best, abs=1e-12)
    assert found not in set(scores)  # a midpoint: no row sits on the threshold
    with pytest.raises(ValueError, match=matching(UNKNOWN_THRESHOLD_OBJECTIVE, scoring="f1")):
        best_threshold(scores, y, "f1")


def test_the_tuned_threshold_for_balanced_accuracy_is_near_the_base_rate():
    X, y = _imbalanced()
    tuned = fit_classifier("logreg_tuned", X, y, seed=0, C=1.0, scoring="balanced_accuracy")
    assert tuned.estimator.C == 1.0
    assert abs(tuned.threshold - y.mean()) < 0.1  # calibrated scores: the base rate
