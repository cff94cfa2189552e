"""Direct solvers of Algorithm 3 (fair kernel PCA), the reference for tests and benchmarks.

These follow the paper literally: build ``R``, a basis of the null space of ``Z^T K``, and solve
the generalised eigenproblem ``R^T K K R Lambda = R^T K R Lambda W``. They cost O(n^3) time and
several n x n matrices of memory; :class:`fairpca.FairKernelPCA` does not use them.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

PAPER_REGULARIZATION = 1e-5  # Appendix C.1: B + 1e-5 I makes B positive definite


def _generalized_problem(K: np.ndarray, Z: np.ndarray):
    """``R``, ``A = R^T K K R`` and ``B = R^T K R`` of Algorithm 3."""
    R = linalg.null_space(Z.T @ K)
    KR = K @ R
    return R, KR.T @ KR, R.T @ KR


def fair_kernel_pca_reference(
    K: np.ndarray, Z: np.ndarray, n_components: int, *, regularization: float | None = None
) -> np.ndarray:
    """Dual coefficients ``R Lambda`` (n x k) of Algorithm 3.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Kernel matrix of the training rows (centred in feature space for centred kernel PCA).
    Z : ndarray of shape (n, m)
        Centred one-hot group indicators (Section 3.4; stacked per attribute for Section 3.5).
    n_components : int
        Target dimension k.
    regularization : float or None
        ``None`` solves the generalised problem exactly on the range of ``B = R^T K R``
        (``B = Q D Q^T``, ``Lambda = Q D^{-1/2} E`` with ``E`` the top eigenvectors of
        ``D^{-1/2} Q^T A Q D^{-1/2}``). A number ``eps`` solves ``A x = w (B + eps I) x`` as the
        paper does (``eps = 1e-5``, Appendix C.1), which perturbs the solution.

    Returns
    -------
    ndarray of shape (n, k)
        ``R Lambda``; the training representation is ``K @ R Lambda`` and the representation of
        new rows is ``K_new @ R Lambda`` with ``K_new`` their (centred) kernel against the
        training rows.
    """
    R, A, B = _generalized_problem(K, Z)
    if regularization is not None:
        size = B.shape[0]
        _, Lam = linalg.eigh(
            A, B + regularization * np.eye(size), subset_by_index=[size - n_components, size - 1]
        )
        return R @ Lam[:, ::-1]
    values, Q = linalg.eigh(B)
    keep = values > values[-1] * max(B.shape[0], 1) * np.finfo(np.float64).eps * 100
    Q = Q[:, keep] / np.sqrt(values[keep])
    C = Q.T @ A @ Q
    size = C.shape[0]
    _, E = linalg.eigh((C + C.T) / 2.0, subset_by_index=[size - n_components, size - 1])
    return R @ (Q @ E[:, ::-1])
