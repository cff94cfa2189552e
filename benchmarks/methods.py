"""The representation learners compared in Tables 1-3, behind one small interface.

``fit_method(name, X_train, y_train, z_train, k)`` returns a ``Fitted`` whose ``transform(X, z)``
gives the k-dim representation (z is only used by CorrelationRemover) and whose ``linear`` flag
says whether %Var and MMD^2 are meaningful (not for fair kernel PCA, whose features live in an
RKHS).  Methods whose library piece is not importable yet are reported as pending.
"""

import time
from dataclasses import dataclass
from typing import Any

from sklearn.decomposition import PCA

from benchmarks import peers

OURS = ("PCA", "Fair PCA", "Fair Kernel PCA", "Fair PCA-S (0.5)", "Fair PCA-S (0.85)")
PEERS = ("INLP", "LEACE", "CorrelationRemover")
ALL_METHODS = OURS + PEERS


@dataclass
class Fitted:
    model: Any
    linear: bool
    fit_seconds: float
    needs_z: bool = False

    def transform(self, X, z):
        if self.needs_z:
            return self.model.transform(X, z)
        return self.model.transform(X)


class Unavailable(RuntimeError):
    """The method cannot run here (missing optional dependency or library piece)."""


def availability(name):
    """(True, "") if ``name`` can run here, else (False, reason)."""
    try:
        _factory(name, 2)
    except Unavailable as exc:
        return False, str(exc)
    return True, ""


def _fair_kernel_pca(k):
    try:
        from fairpca import FairKernelPCA
    except ImportError:
        try:  # not yet exported from the package root
            from fairpca._kernel import FairKernelPCA
        except ImportError as exc:
            raise Unavailable(f"pending: fairpca.FairKernelPCA is not importable ({exc})") from exc
    # Gaussian kernel with gamma = 1 / (d Var(train)) (App. C.1; sklearn's gamma="scale")
    return FairKernelPCA(n_components=k, kernel="rbf", gamma="scale")


def _fair_pca(k, **params):
    try:
        from fairpca import FairPCA
    except ImportError as exc:
        raise Unavailable(f"pending: fairpca.FairPCA is not importable yet ({exc})") from exc
    return FairPCA(n_components=k, **params)


def _factory(name, k):
    """(estimator, linear, fit_takes_sensitive_kwarg, needs_z) for method ``name``."""
    if name == "PCA":
        return PCA(n_components=k), True, False, False
    if name == "Fair PCA":
        return _fair_pca(k), True, True, False
    if name == "Fair PCA-S (0.5)":
        return _fair_pca(k, equalize_covariance=0.5), True, True, False
    if name == "Fair PCA-S (0.85)":
        return _fair_pca(k, equalize_covariance=0.85), True, True, False
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


def fit_method(name, X_train, y_train, z_train, k):
    """Fit method ``name`` on the train split; raises ``Unavailable`` if it cannot run here.

    ``fit_seconds`` is CPU time (``time.process_time``): on a loaded machine wall time mostly
    measures waiting; callers limit BLAS to one thread so that CPU time ~ idle wall time.
    """
    model, linear, sensitive_kwarg, needs_z = _factory(name, k)
    start = time.process_time()
    if name == "PCA":
        model.fit(X_train)
    elif sensitive_kwarg:
        model.fit(X_train, sensitive_features=z_train)
    else:
        model.fit(X_train, z_train)
    return Fitted(model, linear, time.process_time() - start, needs_z)
