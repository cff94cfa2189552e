"""Peer methods a user would pick instead of fair PCA, run on the same rows as ours.

* ``INLP`` — iterative nullspace projection (Ravfogel et al. 2020), implemented from the paper:
  fit a linear classifier predicting z, project the data onto the nullspace of its weight
  vector, repeat on the projected data; the representation is an orthonormal basis of what is
  left (run as in the fair PCA authors' script: ``LinearSVC(fit_intercept=False, dual=False)``,
  d - k iterations, so exactly k directions remain).
* ``MeanGapProjection`` — orthogonal LEACE-style erasure: project out the span of the group-mean
  differences, then plain PCA.  ``FairPCA_k`` equals ``PCA_k`` after this projection (the basis of
  the cross-check in tests/benchmarks/test_peers.py).
* ``LeacePCA`` — LEACE (Belrose et al. 2023, the ``concept-erasure`` package, which needs torch;
  optional extra ``leace``) followed by PCA to k dimensions.  ``leace_available()`` says whether
  it can run here.
* ``CorrelationRemoverPCA`` — fairlearn's ``CorrelationRemover`` (regresses the features on the
  centred sensitive column and keeps the residuals; needs z at transform time) followed by PCA.
* ``exponentiated_gradient`` — fairlearn's reductions approach (Agarwal et al. 2018).
"""

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.decomposition import PCA
from sklearn.svm import LinearSVC


def _orthonormal_complement(basis, d):
    """Orthonormal columns spanning the orthogonal complement of the columns of ``basis``."""
    if basis.shape[1] == 0:
        return np.eye(d)
    q, _ = np.linalg.qr(basis, mode="complete")
    return q[:, basis.shape[1] :]


class INLP(BaseEstimator, TransformerMixin):
    """Iterative nullspace projection (Ravfogel et al. 2020) as a k-dim linear representation.

    Parameters
    ----------
    n_components : int
        Dimension k of the representation.
    n_iterations : int or None
        Number of classifiers whose nullspaces are intersected; None means d - k (then exactly
        k directions remain).  With fewer iterations, the top-k principal directions of the
        projected training data are kept.
    classifier : estimator or None
        Linear classifier with ``coef_``; None means
        ``LinearSVC(fit_intercept=False, dual=False, random_state=0)``.
    """

    def __init__(self, n_components=2, n_iterations=None, classifier=None):
        self.n_components = n_components
        self.n_iterations = n_iterations
        self.classifier = classifier

    def fit(self, X, z):
        X = np.asarray(X, dtype=float)
        z = np.asarray(z)
        n_features = X.shape[1]
        if not 0 < self.n_components < n_features:
            raise ValueError(
                f"n_components={self.n_components} must be in [1, {n_features - 1}] for "
                f"{n_features} features."
            )
        n_iter = n_features - self.n_components if self.n_iterations is None else self.n_iterations
        removed = np.zeros((n_features, 0))
        for _ in range(n_iter):
            clf = self.classifier
            if clf is None:
                clf = LinearSVC(fit_intercept=False, dual=False, random_state=0)
            projected = X - (X @ removed) @ removed.T
            w = np.asarray(clf.fit(projected, z).coef_, dtype=float).reshape(-1, n_features).T
            # keep the part of w not already removed (w lies in the projected row space anyway)
            w = w - removed @ (removed.T @ w)
            q, r = np.linalg.qr(w)
            q = q[:, np.abs(np.diag(r)) > 1e-12 * max(1.0, np.abs(r).max())]
            if q.shape[1] == 0:
                break
            removed = np.hstack([removed, q])
        self.removed_directions_ = removed.T
        kept = _orthonormal_complement(removed, n_features)
        if kept.shape[1] > self.n_components:
            pca = PCA(self.n_components).fit(X @ kept)
            kept = kept @ pca.components_.T
        self.components_ = kept[:, : self.n_components].T
        self.n_iterations_ = removed.shape[1]
        return self

    def transform(self, X):
        return np.asarray(X, dtype=float) @ self.components_.T


def group_mean_gaps(X, z):
    """d x (m-1) matrix of differences between each group mean and the first group's mean."""
    groups = np.unique(z)
    means = np.stack([X[z == g].mean(axis=0) for g in groups])
    return (means[1:] - means[0]).T


class MeanGapProjection(BaseEstimator, TransformerMixin):
    """Orthogonal LEACE-style erasure (project out group-mean gaps), then PCA to k dims.

    With centred training data this is exactly fair PCA (Algorithm 1): the constraint
    z^T X U = 0 says U is orthogonal to the mean gap.
    """

    def __init__(self, n_components=2):
        self.n_components = n_components

    def fit(self, X, z):
        X = np.asarray(X, dtype=float)
        gaps = group_mean_gaps(X, np.asarray(z))
        q, _ = np.linalg.qr(gaps)
        self.erased_ = q.T
        erased = X - (X @ q) @ q.T
        self.pca_ = PCA(self.n_components).fit(erased)
        self.components_ = self.pca_.components_
        self.mean_ = self.pca_.mean_
        return self

    def transform(self, X):
        return (np.asarray(X, dtype=float) - self.mean_) @ self.components_.T


def leace_available():
    """(True, "") when torch and concept-erasure import, else (False, reason)."""
    try:
        import concept_erasure  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        return False, (
            f"LEACE skipped: {exc.name} is not installed "
            "(pip install 'fairpca[leace]' installs torch and concept-erasure)."
        )
    return True, ""


class LeacePCA(BaseEstimator, TransformerMixin):
    """LEACE erasure (concept-erasure package) of z, then PCA to k dims; needs torch."""

    def __init__(self, n_components=2, method="leace"):
        self.n_components = n_components
        self.method = method

    def fit(self, X, z):
        ok, reason = leace_available()
        if not ok:
            raise ImportError(reason)
        import torch
        from concept_erasure import LeaceEraser

        X = np.asarray(X, dtype=float)
        z = np.asarray(z, dtype=float).reshape(-1, 1)
        self.eraser_ = LeaceEraser.fit(torch.from_numpy(X), torch.from_numpy(z), method=self.method)
        self.pca_ = PCA(self.n_components).fit(self._erase(X))
        return self

    def _erase(self, X):
        import torch

        return self.eraser_(torch.from_numpy(np.asarray(X, dtype=float))).numpy()

    def transform(self, X):
        return self.pca_.transform(self._erase(X))


class CorrelationRemoverPCA(BaseEstimator, TransformerMixin):
    """fairlearn ``CorrelationRemover(alpha)`` on [X, z], then PCA to k dims.

    ``transform`` needs the sensitive attribute of the rows it transforms.
    """

    def __init__(self, n_components=2, alpha=1.0):
        self.n_components = n_components
        self.alpha = alpha

    def fit(self, X, z):
        from fairlearn.preprocessing import CorrelationRemover

        stacked = np.column_stack([np.asarray(X, dtype=float), np.asarray(z, dtype=float)])
        self.remover_ = CorrelationRemover(
            sensitive_feature_ids=[stacked.shape[1] - 1], alpha=self.alpha
        )
        decorrelated = self.remover_.fit_transform(stacked)
        self.pca_ = PCA(self.n_components).fit(decorrelated)
        return self

    def transform(self, X, z):
        stacked = np.column_stack([np.asarray(X, dtype=float), np.asarray(z, dtype=float)])
        return self.pca_.transform(self.remover_.transform(stacked))


def exponentiated_gradient(estimator, constraint="demographic_parity", difference_bound=0.01):
    """fairlearn's reductions approach with a DP or EO (true-positive-rate parity) bound."""
    from fairlearn.reductions import (
        DemographicParity,
        ExponentiatedGradient,
        TruePositiveRateParity,
    )

    if constraint == "demographic_parity":
        moment = DemographicParity(difference_bound=difference_bound)
    elif constraint == "equal_opportunity":
        moment = TruePositiveRateParity(difference_bound=difference_bound)
    else:
        raise ValueError(
            f"constraint={constraint!r}; use 'demographic_parity' or 'equal_opportunity'."
        )
    return ExponentiatedGradient(estimator, constraints=moment)
