"""Downstream classifiers of the paper (Sec. 5.1 and Appendix C.1)."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.svm import SVC, LinearSVC

__all__ = ["fit_classifier", "make_classifier"]


def make_classifier(name: str, n_train: int, seed: int):
    """Unfitted classifier ``name`` for ``n_train`` training rows.

    Appendix C.1: logistic regression with ``C = 1 / (2 n 0.01)``, RBF SVC with
    ``C = 1 / (2 n 0.00005)``; linear SVM with default settings; MLP with hidden layers
    (10, 5) and otherwise default settings (Sec. 5.1).
    """
    if name == "logreg":
        return LogisticRegression(C=1.0 / (2 * n_train * 0.01), max_iter=1000)
    if name == "rbf_svc":
        return SVC(kernel="rbf", C=1.0 / (2 * n_train * 0.00005), random_state=seed)
    if name == "linear_svm":
        return LinearSVC(random_state=seed)
    if name == "mlp":
        return MLPClassifier(hidden_layer_sizes=(10, 5), max_iter=500, random_state=seed)
    raise ValueError(f"unknown classifier {name!r}; use logreg, rbf_svc, linear_svm or mlp.")


def fit_classifier(
    name: str, features: np.ndarray, y: np.ndarray, *, seed: int, max_rows: int | None = None
):
    """Fit classifier ``name``; ``max_rows`` caps its training rows (seeded draw)."""
    if max_rows is not None and len(y) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(y), max_rows, replace=False))
        features, y = features[rows], y[rows]
    classifier = make_classifier(name, len(y), seed)
    if np.unique(y).size < 2:
        raise ValueError("the training rows hold one label only; a classifier needs both.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        classifier.fit(features, y)
    return classifier
