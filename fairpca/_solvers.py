"""Solvers for linear fair PCA (Algorithms 1-2 and Section 3.6 of Kleindessner et al. 2023).

All solvers work on the centred objective rows ``Xc`` (n x d) and an orthonormal basis ``Q``
(d x r) of the constrained directions: the span of the group-mean differences
``mu_g - mu``, which is the column span of ``X^T Z`` in Algorithm 2. Fair PCA is PCA restricted
to the orthogonal complement of ``Q``; standard PCA (needed for the trade-off knob of Section
3.1) is computed from the same pass over the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from . import _linalg as la


@dataclass
class Solution:
    """Top-k directions (columns) and their variances (sum of squares / (n - 1))."""

    fair_components: np.ndarray  # d x k
    fair_variance: np.ndarray  # k
    pca_components: np.ndarray  # d x k
    pca_variance: np.ndarray  # k
    total_variance: float


def solve_covariance(C: np.ndarray, Q: np.ndarray, k: int, n: int) -> Solution:
    """Exact solve from the scatter matrix ``C = Xc^T Xc`` (d x d).

    Algorithm 1/2 take eigenvectors of ``R^T C R``. Without constraint (``r = 0``) that is
    standard PCA, one eigenproblem. With one constraint direction (two groups, Algorithm 1)
    both problems come from one tridiagonal reduction, see
    :func:`fairpca._linalg.top_eigh_with_constraint`. With more, the fair directions are the
    top eigenvectors of ``P C P - s Q Q^T`` with ``P = I - Q Q^T`` (no d x (d - r) basis and
    no d^3 products), see :func:`fairpca._linalg.deflated_covariance`.
    """
    trace = float(np.trace(C))
    if Q.shape[1] == 0:
        pca_values, pca_vectors = la.top_eigh(C, k)
        fair_values, fair_vectors = pca_values, pca_vectors.copy()
    elif Q.shape[1] == 1:
        pca_values, pca_vectors, fair_values, fair_vectors = la.top_eigh_with_constraint(
            C, Q[:, 0], k
        )
    else:
        pca_values, pca_vectors = la.top_eigh(C, k)
        M = la.deflated_covariance(C, Q, shift=trace + 1.0)
        fair_values, fair_vectors = la.top_eigh(M, k)
    fair_vectors = la.project_out(fair_vectors, Q)
    return Solution(
        fair_vectors,
        np.maximum(fair_values, 0.0) / (n - 1),
        pca_vectors,
        np.maximum(pca_values, 0.0) / (n - 1),
        trace / (n - 1),
    )


def _svd_top(A: np.ndarray, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k right singular vectors of ``A`` (columns) and squared singular values.

    Directions beyond the numerical rank of ``A`` are completed with orthonormal vectors
    orthogonal to both the kept singular vectors and ``exclude``.
    """
    _, s, Vt = linalg.svd(A, full_matrices=False, lapack_driver="gesdd", check_finite=False)
    threshold = max(A.shape) * np.finfo(float).eps * (s[0] if s.size else 0.0)
    rank = min(int(np.sum(s > threshold)), k)
    V = Vt[:rank].T
    if rank < k:
        filler = la.orthonormal_complement(np.hstack([exclude, V]), k - rank)
        V = np.hstack([V, filler])
    values = np.zeros(k)
    values[:rank] = s[:rank] ** 2
    return V, values


def solve_svd(
    Xc: np.ndarray, Q: np.ndarray, k: int, *, sum_of_squares: float | None = None
) -> Solution:
    """Exact solve by a thin SVD of ``Xc P`` (used when n < d); ``sum_of_squares`` is
    ``sum(Xc ** 2)`` when the caller has it (else one more pass computes it)."""
    n = Xc.shape[0]
    fair_vectors, fair_values = _svd_top(Xc - la.matmul(Xc, Q) @ Q.T, k, Q)
    fair_vectors = la.project_out(fair_vectors, Q)
    pca_vectors, pca_values = _svd_top(Xc, k, np.zeros((Xc.shape[1], 0)))
    total = la.sum_of_squares(Xc) if sum_of_squares is None else sum_of_squares
    return Solution(
        fair_vectors, fair_values / (n - 1), pca_vectors, pca_values / (n - 1), total / (n - 1)
    )


def _centred_products(X: np.ndarray, offset: np.ndarray | None):
    """``M -> (X - 1 offset^T) M`` and ``Y -> (X - 1 offset^T)^T Y`` (``X`` when no offset)."""
    if offset is None:
        return (lambda M: la.matmul(X, M)), (lambda Y: la.matmul(X.T, Y))

    def times(M):
        product = la.matmul(X, M)
        product -= offset @ M
        return product

    def times_transposed(Y):
        product = la.matmul(X.T, Y)
        product -= np.outer(offset, Y.sum(axis=0))
        return product

    return times, times_transposed


def solve_randomized(
    Xc: np.ndarray,
    Q: np.ndarray,
    k: int,
    *,
    n_oversamples: int,
    n_iter: int,
    random_state: np.random.RandomState,
    sum_of_squares: float | None = None,
    offset: np.ndarray | None = None,
) -> Solution:
    """Randomized subspace iteration (Halko et al. 2011, as scikit-learn's randomized PCA).

    ``sum_of_squares`` is ``sum(Xc ** 2)`` when the caller has it (else one more pass over
    ``Xc`` computes it). With ``offset`` (the column means), ``Xc`` is the raw data and
    every product is centred on the fly, ``(X - 1 m^T) M = X M - 1 (m^T M)`` (as
    scikit-learn does for sparse data), so the centred copy is never formed.

    One range finder on ``Xc`` with ``k + r + n_oversamples`` columns gives an orthonormal
    ``B`` with ``Xc ~ B B^T Xc``; standard PCA is the SVD of ``B^T Xc`` (what scikit-learn
    computes) and fair PCA is the exact fair PCA of that approximation, the SVD of
    ``B^T Xc P`` with ``P = I - Q Q^T``. Its right singular vectors lie in the range of ``P``,
    so the constraint holds exactly. The fair directions solve the secular equation
    ``C x = mu x + Q c``: their components outside the dominant subspace follow ``Q``, which
    ``P`` supplies, so ``r`` extra columns keep the accuracy of the standard route.
    """
    n, d = Xc.shape
    times, times_transposed = _centred_products(Xc, offset)
    size = min(k + Q.shape[1] + n_oversamples, d)
    G = random_state.normal(size=(d, size))
    normalize = la.lu_normalize if n_iter > 2 else (lambda Y: Y)
    Y = times(G)
    for _ in range(n_iter):
        Y = normalize(Y)
        Y = times(normalize(times_transposed(Y)))
    basis = la.qr_basis(Y)
    B = np.asarray(times_transposed(basis)).T  # size x d
    _, s_pca, Vt_pca = linalg.svd(B, full_matrices=False, check_finite=False)
    B_fair = B - (B @ Q) @ Q.T
    _, s_fair, Vt_fair = linalg.svd(B_fair, full_matrices=False, check_finite=False)
    fair_vectors = la.project_out(Vt_fair[:k].T, Q)
    total = sum_of_squares
    if total is None:
        total = la.sum_of_squares(Xc) - (0.0 if offset is None else n * float(offset @ offset))
    return Solution(
        fair_vectors,
        s_fair[:k] ** 2 / (n - 1),
        Vt_pca[:k].T,
        s_pca[:k] ** 2 / (n - 1),
        total / (n - 1),
    )


def covariance_subspace(
    Q: np.ndarray,
    group_covariances: list[tuple[list[np.ndarray], np.ndarray]],
    size: int,
) -> np.ndarray:
    """Columns ``R Q_l`` of Section 3.6: directions that equalise group covariances.

    For one attribute with two groups this is the paper's rule: the ``size`` eigenvectors of
    ``R^T (S_0 - S_1) R`` with the smallest eigenvalues in magnitude. For more groups or
    attributes we take the ``size`` eigenvectors with the smallest eigenvalues of
    ``sum_a sum_g w_g (R^T (S_g - S_a) R)^2``, with ``w_g = n_g / n`` and
    ``S_a = sum_g w_g S_g``. For two groups ``S_0 - S_a = w_1 (S_0 - S_1)`` and
    ``S_1 - S_a = -w_0 (S_0 - S_1)``, so the sum equals ``w_0 w_1 (R^T (S_0 - S_1) R)^2``,
    whose eigenvectors are those of ``R^T (S_0 - S_1) R`` ordered by magnitude: the
    generalisation reduces to the paper.

    Parameters
    ----------
    Q : ndarray of shape (d, r)
        Orthonormal basis of the constrained directions.
    group_covariances : list of (covariances, weights)
        Per attribute, the group covariance matrices and their weights ``n_g / n``.
    size : int
        The paper's ``l``.
    """
    R = la.null_space_basis(Q)
    if len(group_covariances) == 1 and len(group_covariances[0][0]) == 2:
        S0, S1 = group_covariances[0][0]
        E = R.T @ (S0 - S1) @ R
        values, vectors = linalg.eigh((E + E.T) / 2.0, check_finite=False)
        order = np.argsort(np.abs(values), kind="stable")[:size]
        return R @ vectors[:, order]
    T = np.zeros((R.shape[1], R.shape[1]))
    for covariances, weights in group_covariances:
        pooled = sum(w * S for w, S in zip(weights, covariances, strict=True))
        for w, S in zip(weights, covariances, strict=True):
            E = R.T @ (S - pooled) @ R
            T += w * (E @ E.T)
    _, vectors = la.bottom_eigh((T + T.T) / 2.0, size)
    return R @ vectors


def solve_covariance_equalizing(
    C: np.ndarray, Q: np.ndarray, L: np.ndarray, k: int, n: int
) -> Solution:
    """Fair PCA-S: top-k eigenvectors of ``L^T C L`` mapped back by ``L`` (Section 3.6)."""
    A = L.T @ C @ L
    values, vectors = la.top_eigh((A + A.T) / 2.0, k)
    fair_vectors = la.project_out(L @ vectors, Q)
    trace = float(np.trace(C))
    pca_values, pca_vectors = la.top_eigh(C, k)
    return Solution(
        fair_vectors,
        np.maximum(values, 0.0) / (n - 1),
        pca_vectors,
        np.maximum(pca_values, 0.0) / (n - 1),
        trace / (n - 1),
    )


def solve_covariance_randomized(
    C: np.ndarray,
    Q: np.ndarray,
    k: int,
    n: int,
    *,
    n_oversamples: int,
    n_iter: int,
    random_state: np.random.RandomState,
    dtype=np.float64,
):
    """Randomized subspace iteration on the scatter matrix ``C`` (k << d).

    The statistics counterpart of :func:`fairpca._solvers.solve_randomized` (Halko et al.
    2011): the fair operator is ``P C P`` with ``P = I - Q Q^T``, and one product with ``C``
    equals one pass ``Xc^T (Xc G)`` over the data, so ``n_iter`` has the same meaning. The
    fair and the standard PCA blocks share every product (one GEMM with ``2 l`` columns),
    then a Rayleigh-Ritz step on each ``l``-dimensional range gives the top ``k``. The power
    iterations run in ``dtype`` (float32 for float32 data); the Rayleigh-Ritz step and the
    constraint projection are float64.
    """
    d = C.shape[0]
    size = min(k + n_oversamples, d)
    work = C if dtype == np.float64 else C.astype(dtype, order="F")
    Q_work = Q.astype(work.dtype)
    G = random_state.normal(size=(d, 2 * size)).astype(work.dtype)
    for _ in range(n_iter + 1):
        G[:, :size] = la.project_out(G[:, :size], Q_work)
        G = la.matmul(work, np.hstack([la.lu_normalize(G[:, :size]), la.lu_normalize(G[:, size:])]))
    del work
    G = G.astype(np.float64)
    fair_basis = _orthonormalize(la.project_out(G[:, :size], Q))
    basis = np.hstack([fair_basis, _orthonormalize(G[:, size:])])
    CB = la.matmul(C, basis)
    fair = basis[:, :size].T @ CB[:, :size]
    pca = basis[:, size:].T @ CB[:, size:]
    fair_values, fair_vectors = la.top_eigh((fair + fair.T) / 2.0, k)
    pca_values, pca_vectors = la.top_eigh((pca + pca.T) / 2.0, k)
    return Solution(
        la.project_out(fair_basis @ fair_vectors, Q),
        np.maximum(fair_values, 0.0) / (n - 1),
        basis[:, size:] @ pca_vectors,
        np.maximum(pca_values, 0.0) / (n - 1),
        float(np.trace(C)) / (n - 1),
    )


def _orthonormalize(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the range of ``Y`` (d x l, l << d) by CholeskyQR2.

    Two Cholesky passes (Fukaya et al. 2014) cost two SYRK-like products instead of a
    Householder QR, and are orthogonal to rounding when ``cond(Y) < 1e7``; otherwise (or if
    a Cholesky factorisation fails) Householder QR is used.
    """
    basis = Y
    for _ in range(2):
        gram = np.asarray(la.matmul(basis.T, basis))
        try:
            R = linalg.cholesky(gram, lower=False, check_finite=False)
        except linalg.LinAlgError:
            return la.qr_basis(Y)
        diagonal = np.abs(np.diag(R))
        if diagonal.min() <= 1e-7 * diagonal.max():
            return la.qr_basis(Y)
        basis = linalg.solve_triangular(R, basis.T, trans="T", lower=False, check_finite=False).T
    return basis
