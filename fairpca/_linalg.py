"""Dense linear algebra of the fair PCA solvers (Kleindessner et al., AISTATS 2023).

Factorisations are SciPy's (``scipy.linalg``), as in scikit-learn's PCA. BLAS and LAPACK are
called directly only where that was measured to save at least 5% of a fit of 20 ms or more,
each with its number: the products of the randomized and kernel solvers (:func:`matmul`),
the tridiagonal reduction that serves fair and standard PCA at once when there is one
constraint direction (:func:`top_eigh_with_constraint`) and inverse iteration for many
eigenpairs (:func:`_top_tridiagonal_eigh`); the streamed statistics add rows by ``syrk``
(:class:`fairpca._streaming.Moments`).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from scipy.linalg.blas import get_blas_funcs

from ._memory import BLOCK_ROWS


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` by SciPy's GEMM (Fortran-ordered result), for the products of the randomized
    and kernel solvers.

    Called directly because the OpenBLAS that SciPy ships multiplies tall, narrow matrices
    faster than NumPy's: 34 ms instead of 58 ms for 10000 x 3000 times 3000 x 13 (one
    thread), about 30% of a randomized fit at 10000 x 3000, k = 2.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        dtype = np.result_type(a.dtype, b.dtype, np.float32)
        a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    gemm = get_blas_funcs("gemm", (a, b))
    (a_op, trans_a), (b_op, trans_b) = _gemm_operand(a), _gemm_operand(b)
    return gemm(1.0, a_op, b_op, trans_a=trans_a, trans_b=trans_b)


def _gemm_operand(a: np.ndarray) -> tuple[np.ndarray, int]:
    """``(array, trans)`` with ``op(array) == a`` in Fortran order (a C-ordered matrix is its
    transpose's Fortran-ordered buffer: no copy)."""
    if a.flags.f_contiguous:
        return a, 0
    if a.flags.c_contiguous:
        return a.T, 1
    return np.asfortranarray(a), 0


def sum_of_squares(X: np.ndarray) -> float:
    """``sum(X ** 2)`` as one dot product (no temporary of the size of ``X``)."""
    flat = np.ravel(X, order="K")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: see check_magnitude
        return float(flat @ flat)


def column_sums(X: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``X.T @ weights`` in float64 (float32 rows are converted block by block)."""
    if X.dtype == np.float64:
        return np.asarray(matmul(X.T, weights))
    out = np.zeros((X.shape[1], weights.shape[1]))
    for start in range(0, X.shape[0], BLOCK_ROWS):
        block = np.asarray(X[start : start + BLOCK_ROWS], dtype=np.float64)
        out += matmul(block.T, weights[start : start + BLOCK_ROWS])
    return out


def add_outer(M: np.ndarray, alpha: float, u: np.ndarray, v: np.ndarray, slab: int = 256):
    """``M += alpha * u v^T`` in place, a slab of rows at a time (no d x d temporary)."""
    for start in range(0, M.shape[0], slab):
        M[start : start + slab] += alpha * np.outer(u[start : start + slab], v)
    return M


def symmetrize_upper(M: np.ndarray, slab: int = 256) -> np.ndarray:
    """Copy the upper triangle of ``M`` onto its strict lower triangle, in place (column
    slabs: no d x d temporary)."""
    d = M.shape[0]
    for start in range(0, d, slab):
        stop = min(d, start + slab)
        M[stop:, start:stop] = M[start:stop, stop:].T
        block = M[start:stop, start:stop]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return M


def orthonormal_basis(D: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Rank-revealing orthonormal basis of the column span of ``D``.

    Returns ``(Q, singular_values)`` where ``Q`` keeps the left singular vectors whose singular
    values exceed ``threshold`` (the dependent or negligible constraint columns are dropped).
    """
    if D.shape[1] == 0:
        return np.zeros((D.shape[0], 0)), np.zeros(0)
    U, s, _ = linalg.svd(D, full_matrices=False, check_finite=False)
    rank = int(np.sum(s > threshold))
    return flip_columns(np.ascontiguousarray(U[:, :rank])), s


def column_signs(V: np.ndarray) -> np.ndarray:
    """``+1`` or ``-1`` per column of ``V``: the sign of its largest-magnitude entry.

    scikit-learn's ``svd_flip`` rule (``u_based_decision=False``), except that entries within
    a relative ``sqrt(eps)`` of the largest magnitude count as equal and the first of them
    decides. Exactly collinear features (complementary one-hot columns, as in COMPAS and German
    credit) give eigenvector entries that are equal and opposite in exact arithmetic; round-off,
    which differs between BLAS kernels (AVX2, AVX-512, ...), would otherwise pick one of them,
    so the sign, and everything fitted on the projection afterwards, would differ between
    machines.
    """
    magnitude = np.abs(V)
    tie = (1.0 - np.sqrt(np.finfo(V.dtype).eps)) * magnitude.max(axis=0)
    rows = np.argmax(magnitude >= tie, axis=0)
    return np.where(V[rows, np.arange(V.shape[1])] < 0, -1.0, 1.0)


def flip_columns(V: np.ndarray) -> np.ndarray:
    """``V`` with each column multiplied by its :func:`column_signs`: eigenvectors, defined up to
    sign, become the same on every machine."""
    if V.size == 0:
        return V
    return V * column_signs(V)


def top_eigh(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Largest ``k`` eigenpairs of a symmetric matrix, eigenvalues in decreasing order."""
    d = M.shape[0]
    values, vectors = linalg.eigh(M, subset_by_index=[d - k, d - 1], check_finite=False)
    return values[::-1], vectors[:, ::-1]


def bottom_eigh(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Smallest ``k`` eigenpairs of a symmetric matrix, eigenvalues in increasing order."""
    return linalg.eigh(M, subset_by_index=[0, k - 1], check_finite=False)


def _top_tridiagonal_eigh(diagonal: np.ndarray, offdiagonal: np.ndarray, k: int):
    """Largest ``k`` eigenpairs of a symmetric tridiagonal matrix, eigenvalues decreasing.

    Few pairs: bisection and inverse iteration (``eigh_tridiagonal``), O(n) per pair. Many
    pairs (``16 k >= n``): all eigenvalues at once by QR iteration (O(n^2)), then inverse
    iteration for the top ``k`` vectors. LAPACK's ``dstein`` is called directly because
    SciPy offers inverse iteration only after bisection: at d = 800, k = 100,
    :func:`top_eigh_with_constraint` then takes 88 ms instead of 129 ms, 14% of the
    10000 x 800 fit.
    """
    n = diagonal.size
    if 16 * k >= n and n > 1:
        values = linalg.eigvalsh_tridiagonal(
            diagonal, offdiagonal, lapack_driver="sterf", check_finite=False
        )
        top = np.ascontiguousarray(values[n - k :])
        in_one_block, block_ends = np.ones(n, dtype=np.int32), np.full(n, n, dtype=np.int32)
        vectors, info = lapack.dstein(diagonal, offdiagonal, top, in_one_block, block_ends)
        if info == 0:
            return top[::-1], vectors[:, ::-1]
    values, vectors = linalg.eigh_tridiagonal(
        diagonal, offdiagonal, select="i", select_range=(n - k, n - 1), check_finite=False
    )
    return values[::-1], vectors[:, ::-1]


def top_eigh_with_constraint(C: np.ndarray, q: np.ndarray, k: int):
    """Top ``k`` eigenpairs of ``C`` and of ``C`` restricted to ``q^T x = 0``, from one
    tridiagonal reduction.

    A Householder reflector ``H`` maps the unit vector ``q`` to the first coordinate axis, so
    that the constrained problem (Golub 1973; Problem (4) with one constraint, Algorithm 1 of
    Kleindessner et al. 2023) is the trailing ``(d - 1) x (d - 1)`` block ``A`` of
    ``C' = H C H``. LAPACK's lower tridiagonal reduction ``C' = V T V^T`` (``dsytrd``)
    eliminates the first column with a reflector acting on rows ``2..d`` and then works only
    on that block, so ``V = diag(1, V_A)`` and ``T[1:, 1:] = V_A^T A V_A``: the trailing
    block of ``T`` is the tridiagonal form of the constrained problem. Both eigenproblems are
    then tridiagonal, and one application of ``V_A`` (``dormqr``) maps both back.
    SciPy has no tridiagonal reduction, hence the two direct LAPACK calls: two subset
    ``eigh`` calls would reduce two d x d matrices, and cost 100 ms instead of 58 ms at
    d = 800, k = 10 (18% of the 10000 x 800 fit; 9% at 20000 x 400).

    Returns ``(values, vectors, constrained_values, constrained_vectors)``, each set in
    decreasing order; the constrained vectors are orthogonal to ``q`` up to rounding.
    """
    d = C.shape[0]
    C = np.asarray(C, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64).ravel()
    # The tridiagonal eigensolvers square off-diagonal entries: bring a scatter matrix of
    # huge (or tiny) magnitude near 1 by an even power of two (exact; eigenvectors are
    # unchanged, eigenvalues scale back exactly).
    largest = float(np.max(np.abs(np.diagonal(C))))
    scale = 1.0
    if largest > 2.0**400 or 0.0 < largest < 2.0**-400:
        scale = 2.0 ** (2 * round(np.log2(largest) / 2))
        C = C / scale
    # H = I - beta v v^T with H q = -sign(q_0) e_0 (v_0 = q_0 + sign(q_0): no cancellation);
    # H C H = C - v w^T - w v^T with w = p - (beta v^T p / 2) v and p = beta C v.
    v = q.copy()
    v[0] += np.copysign(1.0, q[0])
    beta = 2.0 / float(v @ v)
    p = beta * (C @ v)
    w = p - (0.5 * beta * float(v @ p)) * v
    vw = np.outer(v, w)
    reflected = np.asfortranarray(C - (vw + vw.T))
    lwork, info = lapack.dsytrd_lwork(d, lower=1)
    reduced, diagonal, offdiagonal, tau, info = lapack.dsytrd(
        reflected, lower=1, lwork=int(lwork), overwrite_a=1
    )
    if info != 0:
        raise linalg.LinAlgError(f"The tridiagonal reduction failed (dsytrd info={info}).")
    values, vectors = _top_tridiagonal_eigh(diagonal, offdiagonal, k)
    fair_values, fair_vectors = _top_tridiagonal_eigh(diagonal[1:], offdiagonal[1:], k)
    both = np.zeros((d, 2 * k), order="F")
    both[:, :k] = vectors
    both[1:, k:] = fair_vectors
    if d > 1:  # V_A: the QR-type reflectors stored below the subdiagonal of the reduction
        reflectors, rhs = np.asfortranarray(reduced[1:, :-1]), np.asfortranarray(both[1:])
        _, work, _ = lapack.dormqr(b"L", b"N", reflectors, tau, rhs, lwork=-1)
        both[1:], _, info = lapack.dormqr(b"L", b"N", reflectors, tau, rhs, int(work[0]))
        if info != 0:
            raise linalg.LinAlgError(f"The back-transformation failed (dormqr info={info}).")
    both -= np.outer(beta * v, v @ both)  # H both
    return values * scale, both[:, :k], fair_values * scale, both[:, k:]


def project_out(V: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """``(I - Q Q^T) V`` for ``Q`` with orthonormal columns."""
    if Q.shape[1] == 0:
        return V
    return V - Q @ (Q.T @ V)


def deflated_covariance(C: np.ndarray, Q: np.ndarray, shift: float) -> np.ndarray:
    """``P C P - shift * Q Q^T`` with ``P = I - Q Q^T``, without forming ``P``.

    With ``W = C Q - Q (Q^T C Q) / 2 + shift * Q / 2`` this equals ``C - Q W^T - W Q^T``,
    a rank-2r update costing O(d^2 r). The eigenvectors of ``P C P`` orthogonal to ``Q``
    are exactly ``R Lambda`` of Algorithm 1/2 (``R`` a basis of the null space of
    ``Z^T X^T``); the shift moves the ``Q`` directions below every other eigenvalue so
    that the top ``k`` never contain them, even for rank-deficient data.
    """
    if Q.shape[1] == 0:
        return C.copy()
    CQ = C @ Q
    W = CQ - Q @ (Q.T @ CQ) / 2.0 + shift * Q / 2.0
    M = C - Q @ W.T
    M -= W @ Q.T
    return (M + M.T) / 2.0


def null_space_basis(Q: np.ndarray) -> np.ndarray:
    """Orthonormal basis ``R`` (d x (d - r)) of the orthogonal complement of ``span(Q)``."""
    d, r = Q.shape
    if r == 0:
        return np.eye(d)
    full, _ = linalg.qr(Q, mode="full")
    return np.ascontiguousarray(full[:, r:])


def orthonormal_complement(B: np.ndarray, count: int) -> np.ndarray:
    """``count`` orthonormal vectors orthogonal to the orthonormal columns of ``B``."""
    return null_space_basis(B)[:, :count]


def lu_normalize(Y: np.ndarray) -> np.ndarray:
    """Power-iteration normaliser used by scikit-learn's randomized range finder."""
    L, _ = linalg.lu(Y, permute_l=True, check_finite=False)
    return L


def qr_basis(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the range of ``Y`` (thin Householder QR)."""
    Q, _ = linalg.qr(Y, mode="economic", check_finite=False)
    return Q
