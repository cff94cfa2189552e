"""Exact fair kernel PCA on the deflated Gram matrix, with no factorisation of the kernel.

Derivation (Section 3.3, Problem (6) of Kleindessner et al. 2023). Let ``F`` hold the training
feature vectors centred on the mean of the objective rows ``O`` (all rows, or the rows with
``y == pos_label`` for equal opportunity), so that ``Kc = F F^T`` is the centred training kernel.
The constraint asks the projected group means of the constraint rows ``R`` to coincide, i.e.
``U^T d_j = 0`` for the feature-space mean differences ``d_j = F^T c_j`` with
``c_j = 1_{R, g} / n_g - 1_R / n_R`` (one column per group of every attribute, Sections 3.4-3.5).

- An orthonormal basis of ``span{d_j}`` is ``Q = F^T C T`` with ``C^T Kc C = V S V^T`` and
  ``T = V S^{-1/2}`` on the eigenvalues above the rank tolerance (the linearly dependent
  columns of ``C``, e.g. ``sum_g n_g c_g = 0``, are dropped).
- Fair PCA takes the top eigenvectors of ``P F_O^T F_O P`` with ``P = I - Q Q^T``. Its
  eigenvectors of non-zero eigenvalue are ``u = P F_O^T a / sqrt(lambda)``, where
  ``(lambda, a)`` are the top eigenpairs of the ``n_O x n_O`` matrix
  ``F_O P F_O^T = Kc[O, O] - B_O B_O^T`` with ``B = F Q = Kc C T`` (a rank-``q`` update).
- A row's fair feature is ``u^T f(x) = a^T (kc_O(x) - B_O T^T C^T kc(x)) / sqrt(lambda)``:
  linear in its centred kernel column ``kc(x) = F f(x)``, with coefficients
  ``[a / sqrt(lambda) on O] - C T B_O^T a / sqrt(lambda)`` computed once.

So the exact solution costs what scikit-learn's KernelPCA costs: the kernel matrix, a rank-q
update and a Lanczos (ARPACK) solve for ``k`` eigenvectors; standard kernel PCA (the
trade-off features of Section 3.1) is a second Lanczos solve on ``Kc[O, O]``. Compared with
a factor ``Phi`` of ``Kc`` (:class:`~fairpca._kernel_maps.ExactKernelMap`, O(n^2 r)), nothing
of size ``n x r`` is formed.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg.blas import get_blas_funcs
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh
from threadpoolctl import threadpool_limits

from . import _linalg as la
from ._groups import GroupEncoding
from ._kernel_maps import _relative_threshold

# Lanczos (ARPACK) when the matrix is large and few eigenvectors are wanted, as in
# scikit-learn's KernelPCA; a dense subset eigensolver otherwise.
LANCZOS_MIN_ROWS = 200
LANCZOS_MAX_FRACTION = 0.25

# Relative size below which a constraint direction counts as dependent: the Gram route sees
# the mean differences only through D^T D, which resolves singular values to ~sqrt(eps).
GRAM_RANK_FLOOR = 1e-7


def top_eigenpairs(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Largest ``k`` eigenpairs of a symmetric matrix (decreasing), deterministic start.

    The result does not depend on the number of BLAS threads: the Lanczos products use
    ``gemv``, which splits rows between threads (each entry is summed in the same order by
    one thread; the threaded ``symv`` adds partial sums of several threads), and the dense
    eigensolver, whose tridiagonal reduction calls ``symv``, runs on one BLAS thread.
    """
    n = M.shape[0]
    if n > LANCZOS_MIN_ROWS and k < LANCZOS_MAX_FRACTION * n:
        M_f = M.T if M.flags.c_contiguous else np.asfortranarray(M)  # M is symmetric
        gemv = get_blas_funcs("gemv", (M_f,))
        operator = LinearOperator(M.shape, matvec=lambda v: gemv(1.0, M_f, v), dtype=M.dtype)
        v0 = np.random.default_rng(0).uniform(-1.0, 1.0, n)
        try:
            values, vectors = eigsh(operator, k=k, which="LA", v0=v0)
        except ArpackNoConvergence:  # rare (tight eigenvalue clusters): solve densely
            return dense_top_eigenpairs(M, k)
        order = np.argsort(values)[::-1]
        return values[order], vectors[:, order]
    return dense_top_eigenpairs(M, k)


def dense_top_eigenpairs(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fairpca._linalg.top_eigh` on one BLAS thread (bitwise reproducible)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return la.top_eigh(M, k)


def constraint_coefficients(
    encoding: GroupEncoding, n_samples: int, constraint_rows: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``C`` (n x m): ``c = 1_{R, g} / n_g - 1_R / n_R`` for every group of every attribute,
    and the mask of the columns that span the constraint: all but each attribute's last
    group, whose column is fixed by the others (``sum_g n_g c_g = 0``)."""
    rows = np.arange(n_samples) if constraint_rows is None else np.flatnonzero(constraint_rows)
    blocks, spanning = [], []
    for a in range(encoding.n_attributes):
        onehot = encoding.indicator(a)
        block = np.zeros((n_samples, onehot.shape[1]))
        block[rows] = onehot / onehot.sum(axis=0) - 1.0 / rows.size
        blocks.append(block)
        spanning += [True] * (onehot.shape[1] - 1) + [False]
    return np.hstack(blocks), np.array(spanning, dtype=bool)


def subtract_outer(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A - B B^T`` in place for a symmetric ``A`` (one GEMM, no n x n temporary)."""
    if B.shape[1] == 0:
        return A
    gemm = get_blas_funcs("gemm", (A, B))
    # A is symmetric, so its C-ordered buffer is also the Fortran-ordered A^T = A.
    target = A.T if A.flags.c_contiguous else A
    out = gemm(-1.0, B, B, beta=1.0, c=target, trans_b=1, overwrite_c=True)
    return out.T if A.flags.c_contiguous else out


class DeflatedGramSolver:
    """Fitted exact fair kernel PCA in coefficients of the centred kernel column ``kc(x)``.

    The fair features of a row are ``kc(x)^T coef_`` (``kc`` from
    :class:`~fairpca._kernel_maps.CentredKernelMap` centred on the objective rows), its
    standard kernel PCA features ``kc(x)^T pca_coefficients(Kc)``.

    Parameters
    ----------
    tol : float
        Relative rank tolerance of the constraint (as ``FairPCA(tol=...)``).
    kernel_tol : float or None
        Relative tolerance below which an eigenvalue of the deflated kernel counts as zero.
    """

    def __init__(self, tol: float, kernel_tol: float | None):
        self.tol = tol
        self.kernel_tol = kernel_tol

    def fit_transform(
        self,
        Kc: np.ndarray,
        grand_mean: float,
        encoding: GroupEncoding,
        objective_rows: np.ndarray | None,
        constraint_rows: np.ndarray | None,
        n_components: int | None,
        *,
        with_pca: bool,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Fit on the centred training kernel ``Kc`` (overwritten) whose uncentred objective
        block has mean ``grand_mean``; return the training rows' fair features and, if
        ``with_pca``, their standard kernel PCA features (else None)."""
        n = Kc.shape[0]
        obj = np.arange(n) if objective_rows is None else np.flatnonzero(objective_rows)
        n_obj = obj.size
        if n_obj < 2:
            raise ValueError(
                f"Only {n_obj} row(s) to fit the variance objective on; need at least 2."
            )
        self.objective_rows_ = None if objective_rows is None else obj
        self.n_samples_ = n_obj
        K_obj = Kc if objective_rows is None else Kc[np.ix_(obj, obj)]
        total = max(float(np.trace(K_obj)), 0.0)

        C_all, spanning = constraint_coefficients(encoding, n, constraint_rows)
        KC_all = la.matmul(Kc, C_all)
        C, KC = C_all[:, spanning], KC_all[:, spanning]
        T = self._constraint_whitening(C, KC, np.sqrt(total / (n_obj - 1) + max(grand_mean, 0.0)))
        rank = T.shape[1]
        B = np.asarray(la.matmul(KC, T))
        B_obj = B if objective_rows is None else B[obj]
        # Kc[O, O] - B_O B_O^T, in place: in Kc itself unless its kernel PCA is wanted too
        deflate_kc = objective_rows is None and not with_pca
        K_fair = subtract_outer(
            K_obj if objective_rows is not None or deflate_kc else Kc.copy(), B_obj
        )

        self.threshold_ = _relative_threshold(total, n_obj, self.kernel_tol)
        k = self._resolve_k(K_fair, n_components, self.threshold_, n_obj, rank)
        values, vectors = top_eigenpairs(K_fair, k)
        if values[-1] <= self.threshold_:
            usable = int(np.sum(values > self.threshold_))
            if usable == 0:
                raise ValueError(
                    f"the centred training kernel has no direction of positive variance once "
                    f"the {rank} constraint direction(s) are removed: the rows are (nearly) "
                    "identical, or differ only in their groups' means. Pass rows that vary "
                    "within the groups (drop constant columns), or another kernel or gamma."
                )
            raise ValueError(
                f"n_components={k} is too large: with the {rank} constraint "
                f"direction(s) removed, the centred training kernel has only {usable} "
                "direction(s) of positive variance among the top ones (its numerical rank). "
                f"Use n_components <= {usable}."
            )
        vectors = la.flip_columns(vectors) / np.sqrt(values)
        self.coef_ = np.zeros((n, k))
        self.coef_[obj] = vectors
        self.coef_ -= C @ (T @ (B_obj.T @ vectors))

        self.n_components_ = k
        self.pca_coef_ = self.pca_coefficients(Kc) if with_pca else None  # Kc is intact
        self.explained_variance_ = values / (n_obj - 1)
        self.total_variance_ = total / (n_obj - 1)
        self.constraint_rank_ = rank
        self.mean_gap_ = float(np.max(np.abs(self.coef_.T @ KC_all))) if C_all.size else 0.0
        coef = np.hstack([self.coef_, self.pca_coef_]) if with_pca else self.coef_
        # when Kc was deflated in place, Kc = K_fair + B B^T
        features = la.matmul(K_fair, coef) + B @ (B.T @ coef) if deflate_kc else la.matmul(Kc, coef)
        return features[:, :k], (features[:, k:] if with_pca else None)

    def _constraint_whitening(self, C, KC, scale: float) -> np.ndarray:
        """``T = V S^{-1/2}`` from ``C^T Kc C = V S V^T``, on the directions above the rank
        tolerance: ``Q = F^T C T`` is then an orthonormal basis of the mean differences."""
        s, V = linalg.eigh((C.T @ KC + KC.T @ C) / 2.0, check_finite=False)
        # The singular values of the mean differences D = F^T C are sqrt(s), known to about
        # sqrt(eps) of the largest from D^T D: FairPCA's rule, floored at 1e-7 relative.
        sigma = np.sqrt(np.maximum(s, 0.0))
        cut = max(self.tol * scale, GRAM_RANK_FLOOR * (sigma.max() if sigma.size else 0.0))
        keep = sigma > max(cut, np.finfo(float).tiny)
        return V[:, keep] / sigma[keep]

    def pca_coefficients(self, Kc: np.ndarray) -> np.ndarray:
        """Standard kernel PCA of the objective rows (the trade-off features, Section 3.1):
        coefficients (n x k) of ``kc(x)``, from the centred training kernel ``Kc``."""
        obj = self.objective_rows_
        K_obj = Kc if obj is None else Kc[np.ix_(obj, obj)]
        values, vectors = top_eigenpairs(K_obj, self.n_components_)
        values = np.maximum(values, 0.0)
        vectors = la.flip_columns(vectors)
        scaled = np.divide(vectors, np.sqrt(values), out=np.zeros_like(vectors), where=values > 0)
        coef = np.zeros((Kc.shape[0], self.n_components_))
        coef[slice(None) if obj is None else obj] = scaled
        return coef

    @staticmethod
    def _resolve_k(K_fair, n_components, threshold, n_obj, rank) -> int:
        largest = n_obj - 1 - rank
        if largest < 1:
            raise ValueError(
                f"No fair direction is left: the {rank} constraint direction(s) use up the "
                f"{n_obj} objective rows. Fair kernel PCA needs more rows than groups."
            )
        if n_components is None:
            with threadpool_limits(limits=1, user_api="blas"):
                values = linalg.eigvalsh(K_fair, check_finite=False)
            return max(1, int(np.sum(values > threshold)))
        if n_components > largest:
            raise ValueError(
                f"n_components={n_components} is too large: the exact kernel map of {n_obj} "
                f"objective rows leaves at most {largest} fair directions (rows - 1 - "
                f"constraint rank = {n_obj} - 1 - {rank}). Use n_components <= {largest}."
            )
        return n_components
