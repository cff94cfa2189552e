"""Dense linear algebra for the fair PCA solvers.

Products go through SciPy's BLAS/LAPACK, so one OpenBLAS thread pool does the work: NumPy
and SciPy wheels each ship their own OpenBLAS, and alternating calls between the two lets one
pool's spinning threads starve the other on small machines. The exceptions are the one pass
over the rows of a covariance fit (:func:`gram_and_sums`), where NumPy's build is faster.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import linalg
from scipy.linalg import blas, lapack
from scipy.linalg.blas import get_blas_funcs

from ._memory import BLOCK_ROWS as GRAM_CHUNK_ROWS


def _blas_operand(a: np.ndarray) -> tuple[np.ndarray, int]:
    """Return ``(array, trans)`` such that BLAS sees ``op(array) == a`` without a copy."""
    if a.flags.f_contiguous:
        return a, 0
    if a.flags.c_contiguous:
        return a.T, 1
    return np.asfortranarray(a), 0


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` computed by SciPy's GEMM (Fortran-ordered result)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != b.dtype:
        dtype = np.result_type(a.dtype, b.dtype, np.float32)
        a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    gemm = get_blas_funcs("gemm", (a, b))
    a_op, trans_a = _blas_operand(a)
    b_op, trans_b = _blas_operand(b)
    return gemm(1.0, a_op, b_op, trans_a=trans_a, trans_b=trans_b)


def gram_upper(X: np.ndarray) -> np.ndarray:
    """Upper triangle of ``X.T @ X`` (SYRK, float64 input; the strict lower part is zero)."""
    x_op, trans = _blas_operand(X)
    syrk = get_blas_funcs("syrk", (x_op,))
    # syrk computes op(a) op(a)^T: with op(x_op) == X we need the transposed product.
    return syrk(1.0, x_op, trans=1 - trans)


def gram_and_sums(X: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``X.T @ X`` (full, exactly symmetric, Fortran-ordered) and ``X.T @ W`` for float64 ``X``.

    This pass over the rows is the cost of a covariance fit, so it takes NumPy's matmul, as
    scikit-learn's PCA does: NumPy evaluates ``X.T @ X`` by one SYRK and mirrors the triangle,
    and its OpenBLAS build runs both products faster than SciPy's on narrow and wide data
    alike (the one exception to SciPy's BLAS in this module; the products that follow are on
    d x d matrices). The Gram comes back as the transposed view of NumPy's C-ordered result,
    the same symmetric matrix in Fortran order, so SciPy's BLAS updates it in place.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: see check_magnitude
        gram = X.T @ X
        sums = W.T @ X
    return gram.T, np.asarray(sums).T


def sum_of_squares(X: np.ndarray) -> float:
    """``sum(X ** 2)`` by SciPy's BLAS dot (no temporary of the size of ``X``)."""
    flat = np.ravel(X, order="K")
    dot = get_blas_funcs("dot", (flat,))
    return float(dot(flat, flat))


@functools.lru_cache(maxsize=8)
def _strictly_lower(size: int) -> np.ndarray:
    """Read-only mask of the strict lower triangle of a ``size x size`` matrix."""
    mask = np.tri(size, k=-1, dtype=bool)
    mask.flags.writeable = False
    return mask


def symmetrize_upper(upper: np.ndarray, slab: int = 256) -> np.ndarray:
    """Fill the strict lower triangle from the upper one (in place) and return the matrix."""
    d = upper.shape[0]
    strictly_lower = _strictly_lower(min(d, slab))
    for start in range(0, d, slab):
        stop = min(d, start + slab)
        upper[stop:, start:stop] = upper[start:stop, stop:].T
        block = upper[start:stop, start:stop]
        width = stop - start
        np.copyto(block, block.T, where=strictly_lower[:width, :width])
    return upper


def add_upper(target: np.ndarray, source: np.ndarray, slab: int = 512) -> np.ndarray:
    """``target += source`` on the upper triangle only (column slabs; any float dtypes)."""
    d = target.shape[0]
    for start in range(0, d, slab):
        stop = min(d, start + slab)
        target[:stop, start:stop] += source[:stop, start:stop]
    return target


def column_sums(X: np.ndarray, indicator: np.ndarray) -> np.ndarray:
    """``X.T @ indicator`` in float64: per-group column sums in one pass over ``X``."""
    if X.dtype == np.float64:
        return np.asarray(matmul(X.T, indicator))
    out = np.zeros((X.shape[1], indicator.shape[1]))
    for start in range(0, X.shape[0], GRAM_CHUNK_ROWS):
        chunk = np.asarray(X[start : start + GRAM_CHUNK_ROWS], dtype=np.float64)
        out += matmul(chunk.T, indicator[start : start + GRAM_CHUNK_ROWS])
    return out


def orthonormal_basis(D: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Rank-revealing orthonormal basis of the column span of ``D``.

    Returns ``(Q, singular_values)`` where ``Q`` keeps the left singular vectors whose singular
    values exceed ``threshold`` (the dependent or negligible constraint columns are dropped).
    """
    if D.shape[1] == 0:
        return np.zeros((D.shape[0], 0)), np.zeros(0)
    # LAPACK's gesdd on the d x m matrix (m small), called directly: NumPy's wrapper costs
    # more than the factorisation itself at this size.
    U, s, _, info = lapack.dgesdd(np.asarray(D, dtype=np.float64), full_matrices=0)
    if info != 0:
        raise linalg.LinAlgError(f"SVD of the constraint columns did not converge (info={info}).")
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
    values, vectors = linalg.eigh(
        M, subset_by_index=[d - k, d - 1], driver="evr", overwrite_a=False, check_finite=False
    )
    return values[::-1], vectors[:, ::-1]


@functools.lru_cache(maxsize=8)
def _one_block(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``dstein``'s block arguments for an unsplit tridiagonal matrix of order ``n``: every
    row in block 1, which ends at row ``n`` (read-only; LAPACK only reads them)."""
    blocks, ends = np.ones(n, dtype=np.int32), np.full(n, n, dtype=np.int32)
    blocks.flags.writeable = ends.flags.writeable = False
    return blocks, ends


@functools.lru_cache(maxsize=8)
def _dsytrd_lwork(d: int) -> int:
    lwork, info = lapack.dsytrd_lwork(d, lower=1)
    if info != 0:
        raise linalg.LinAlgError(f"dsytrd_lwork failed (info={info}).")
    return int(lwork)


@functools.lru_cache(maxsize=8)
def _dormqr_lwork(reflectors_shape: tuple, rhs_shape: tuple) -> int:
    """Optimal workspace of ``dormqr`` applying ``Q`` (from the left) for these shapes."""
    reflectors, rhs = np.zeros(reflectors_shape, order="F"), np.zeros(rhs_shape, order="F")
    tau = np.zeros(min(reflectors_shape))
    _, work, info = lapack.dormqr(b"L", b"N", reflectors, tau, rhs, -1)
    if info != 0:
        raise linalg.LinAlgError(f"dormqr workspace query failed (info={info}).")
    return int(work[0])


def _top_tridiagonal_eigh(diagonal: np.ndarray, offdiagonal: np.ndarray, k: int):
    """Largest ``k`` eigenpairs of a symmetric tridiagonal matrix, eigenvalues decreasing.

    Few pairs (``16 k < n``): MRRR by index (``dstemr``, the kernel of ``eigh(driver="evr")``),
    whose bisection costs O(n) per eigenvalue. Many pairs: all eigenvalues by the
    Pal-Walker-Kahan QR iteration (``dsterf``, O(n^2) in all) and the top ``k`` vectors by
    inverse iteration (``dstein``, the kernel of ``eigh(driver="evx")``, re-orthogonalised
    within clusters); ``dstemr`` remains the fallback if inverse iteration fails.
    """
    n = diagonal.size
    if n == 1:
        return diagonal.copy(), np.ones((1, 1))
    if 16 * k >= n:
        values, info = lapack.dsterf(diagonal, offdiagonal)
        if info == 0:
            top = np.ascontiguousarray(values[n - k :])
            one_block, block_ends = _one_block(n)
            vectors, info = lapack.dstein(diagonal, offdiagonal, top, one_block, block_ends)
            if info == 0:
                return top[::-1], vectors[:, ::-1]
    padded = np.zeros(n)  # dstemr takes the off-diagonal in an array of length n
    padded[:-1] = offdiagonal
    by_index = 2  # SciPy's code for RANGE = "I": eigenvalues il..iu (1-based, ascending)
    lwork, liwork, info = lapack.dstemr_lwork(diagonal, padded, by_index, 0.0, 0.0, n - k + 1, n)
    found = 0
    if info == 0:
        found, values, vectors, info = lapack.dstemr(
            diagonal, padded, by_index, 0.0, 0.0, n - k + 1, n, lwork=int(lwork), liwork=int(liwork)
        )
    if info != 0 or found != k:
        raise linalg.LinAlgError(f"dstemr did not converge (info={info}).")
    return values[:k][::-1], vectors[:, :k][:, ::-1]


def top_eigh_with_constraint(C: np.ndarray, q: np.ndarray, k: int):
    """Top ``k`` eigenpairs of ``C`` and of ``C`` restricted to ``q^T x = 0``, from one
    tridiagonal reduction.

    A Householder reflector ``H`` maps the unit vector ``q`` to the first coordinate axis, so
    that the constrained problem (Golub 1973; Problem (4) with one constraint, Algorithm 1 of
    Kleindessner et al. 2023) is the trailing ``(d - 1) x (d - 1)`` block ``A`` of
    ``C' = H C H``. LAPACK's lower tridiagonal reduction ``C' = V T V^T`` eliminates the
    first column with a reflector acting on rows ``2..d`` and then works only on that block,
    so ``V = diag(1, V_A)`` and ``T[1:, 1:] = V_A^T A V_A``: the trailing block of ``T`` is
    the tridiagonal form of the constrained problem. Both eigenproblems are then tridiagonal
    (:func:`_top_tridiagonal_eigh`), and one blocked back-transformation serves both. The
    cost is about that of one ``eigh``, where two subset ``eigh`` calls would reduce two
    d x d matrices.

    Returns ``(values, vectors, constrained_values, constrained_vectors)``, each set in
    decreasing order; the constrained vectors are orthogonal to ``q`` up to rounding.
    """
    C = np.asarray(C, dtype=np.float64)  # float64 BLAS below (dsymv, dsyr2, dger)
    d = C.shape[0]
    q = np.asarray(q, dtype=np.float64).ravel()
    # The tridiagonal eigensolver squares off-diagonal entries: bring a scatter matrix of huge
    # (or tiny) magnitude near 1 by an even power of two (exact; eigenvectors are unchanged,
    # eigenvalues scale back exactly). Ordinary magnitudes are left untouched.
    largest = float(np.max(np.abs(np.diagonal(C)))) if d else 0.0
    scale = 1.0
    if largest > 2.0**400 or 0.0 < largest < 2.0**-400:
        scale = 2.0 ** (2 * round(np.log2(largest) / 2))
        C = C / scale
    # H = I - beta v v^T with H q = -sign(q_0) e_0 (v_0 = q_0 + sign(q_0), no cancellation).
    v = q.copy()
    v[0] += np.copysign(1.0, q[0])
    beta = 2.0 / float(v @ v)
    p = beta * blas.dsymv(1.0, C, v)
    w = p - (0.5 * beta * float(v @ p)) * v
    reflected = np.array(C, order="F")  # H C H = C - v w^T - w v^T (lower triangle suffices)
    reflected = blas.dsyr2(-1.0, v, w, a=reflected, lower=1, overwrite_a=1)
    reflectors, diagonal, offdiagonal, tau, info = lapack.dsytrd(
        reflected, lower=1, lwork=_dsytrd_lwork(d), overwrite_a=1
    )
    if info != 0:
        raise linalg.LinAlgError(f"dsytrd failed (info={info}).")
    values, vectors = _top_tridiagonal_eigh(diagonal, offdiagonal, k)
    fair_values, fair_vectors = _top_tridiagonal_eigh(diagonal[1:], offdiagonal[1:], k)
    both = np.zeros((d, 2 * k), order="F")
    both[:, :k] = vectors
    both[1:, k:] = fair_vectors
    if d > 1:  # V_A is the product of the QR-type reflectors stored below the subdiagonal
        block = reflectors[1:, :-1]
        lwork = _dormqr_lwork(block.shape, both[1:].shape)
        rotated, _, info = lapack.dormqr(b"L", b"N", block, tau, both[1:], lwork)
        if info != 0:
            raise linalg.LinAlgError(f"dormqr failed (info={info}).")
        both[1:] = rotated
    both = blas.dger(-beta, v, v @ both, a=both, overwrite_a=1)  # H both, in place
    if scale != 1.0:
        values, fair_values = values * scale, fair_values * scale
    return values, both[:, :k], fair_values, both[:, k:]


def bottom_eigh(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Smallest ``k`` eigenpairs of a symmetric matrix, eigenvalues in increasing order."""
    return linalg.eigh(M, subset_by_index=[0, k - 1], driver="evr", check_finite=False)


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
    Q, _ = linalg.qr(Y, mode="economic", check_finite=False)
    return Q
