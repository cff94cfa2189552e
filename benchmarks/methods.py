"""The representation learners compared in Tables 1-3, behind one small interface.

``fit_method(name, X_train, y_train, groups_train, k)`` returns a ``Fitted`` whose
``transform(X, groups)`` gives the k-dim representation (the group labels are only used by
CorrelationRemover) and whose ``linear`` flag says whether %Var and MMD^2 are meaningful (not for
fair kernel PCA, whose features live in an RKHS). A method whose optional dependency is missing
(LEACE) raises ``Unavailable`` with the reason.

Every linear representation has its column signs fixed by one rule, fair PCA's
(``column_signs``: the largest-magnitude entry of each direction positive, the first of equal
ones deciding). scikit-learn's PCA, inside several peers, breaks the ties that exactly
collinear one-hot columns create by round-off, so its signs differ between BLAS kernels, and
the MLP (not sign-invariant) would then give different numbers on different machines.
"""

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.decomposition import PCA

from benchmarks import peers
from fairpca import FairKernelPCA, FairPCA
from fairpca._linalg import column_signs

OURS = ("PCA", "Fair PCA", "Fair Kernel PCA", "Fair PCA-S (0.5)", "Fair PCA-S (0.85)")
PEERS = ("INLP", "LEACE", "CorrelationRemover")
ALL_METHODS = OURS + PEERS


@dataclass
class Fitted:
    model: Any
    linear: bool
    fit_seconds: float
    needs_groups: bool = False
    signs: Any = 1.0  # +1/-1 per column of the representation (``column_signs``)

    def transform(self, X, groups):
        if self.needs_groups:
            return self.model.transform(X, groups) * self.signs
        return self.model.transform(X) * self.signs


class Unavailable(RuntimeError):
    """The method cannot run here (a missing optional dependency)."""


def availability(name):
    """(True, "") if ``name`` can run here, else (False, reason)."""
    try:
        _factory(name, 2)
    except Unavailable as exc:
        return False, str(exc)
    return True, ""


def _fair_kernel_pca(k):
    # Gaussian kernel with gamma = 1 / (d Var(train)) (App. C.1; sklearn's gamma="scale")
    return FairKernelPCA(n_components=k, kernel="rbf", gamma="scale")


def _factory(name, k):
    """(estimator, linear, fit_takes_sensitive_kwarg, needs_groups) for method ``name``."""
    if name == "PCA":
        return PCA(n_components=k), True, False, False
    if name == "Fair PCA":
        return FairPCA(n_components=k), True, True, False
    if name == "Fair PCA-S (0.5)":
        return FairPCA(n_components=k, equalize_covariance=0.5), True, True, False
    if name == "Fair PCA-S (0.85)":
        return FairPCA(n_components=k, equalize_covariance=0.85), True, True, False
    if name == "Fair Kernel PCA":
        return _fair_kernel_pca(k), False, True, False
    if name == "INLP":
        return peers.INLP(n_components=k), True, False, False
    if name == "LEACE":
        ok, reason = peers.leace_available()
        if not ok:
            raise Unavailable(reason)
        return peers.LeacePCA(n_components=k), True, False, False
    if name == "CorrelationRemover":
        return peers.CorrelationRemoverPCA(n_components=k), True, False, True
    raise ValueError(f"unknown method {name!r}; use one of {ALL_METHODS}")


def fit_method(name, X_train, y_train, groups_train, k):
    """Fit method ``name`` on the train split; raises ``Unavailable`` if it cannot run here.

    ``fit_seconds`` is CPU time (``time.process_time``): on a loaded machine wall time mostly
    measures waiting; callers limit BLAS to one thread so that CPU time ~ idle wall time.
    """
    model, linear, sensitive_kwarg, needs_groups = _factory(name, k)
    start = time.process_time()
    if name == "PCA":
        model.fit(X_train)
    elif sensitive_kwarg:
        model.fit(X_train, sensitive_features=groups_train)
    else:
        model.fit(X_train, groups_train)
    seconds = time.process_time() - start
    signs = column_signs(_directions(model).T) if linear else 1.0
    return Fitted(model, linear, seconds, needs_groups, signs)


def _directions(model):
    """The k x d directions whose projections are the representation's columns (those of the
    final PCA for the peers that erase first and then run scikit-learn's PCA)."""
    if hasattr(model, "pca_"):
        return model.pca_.components_
    return np.asarray(model.components_)
