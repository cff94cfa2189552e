"""Kernels and finite-dimensional kernel feature maps for fair kernel PCA.

Every map here has ``fit_transform(X)``, ``transform(X)`` and ``rank_`` (the output
dimension). :class:`CentredKernelMap` returns a row's centred kernel column against the
training rows (the Gram route projects it with coefficients); the others turn rows ``x`` into
vectors ``phi(x)`` whose inner products reproduce (exactly or approximately) the kernel, so
that fair kernel PCA becomes linear fair PCA on ``phi(X)``:

- :class:`ExactKernelMap`: the empirical kernel map of the training rows. With the training
  kernel centred in feature space, ``K_c = Phi Phi^T`` holds to machine precision; ``Phi`` is a
  pivoted Cholesky factor (default, O(n^2 r)) or ``V S^{1/2}`` from ``K_c = V S V^T``.
- :class:`NystroemMap`: the empirical kernel map of m landmark rows (Williams and Seeger 2000),
  uniform or k-means++ chosen; O(n m^2) time, O(n m) memory.
- :class:`FourierMap`: random Fourier features of the RBF kernel (Rahimi and Recht 2007),
  scikit-learn's :class:`~sklearn.kernel_approximation.RBFSampler`.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from sklearn.cluster import kmeans_plusplus
from sklearn.kernel_approximation import RBFSampler
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils import check_random_state, gen_batches
from threadpoolctl import threadpool_limits

from ._linalg import matmul
from ._memory import BLOCK_BYTES, FLOAT_BYTES

KERNELS = ("rbf", "poly", "sigmoid", "cosine", "linear")
# Largest number of kernel entries materialised at once when mapping new rows.
BATCH_ENTRIES = BLOCK_BYTES // FLOAT_BYTES


def resolve_gamma(gamma, X: np.ndarray) -> float:
    """Numeric kernel coefficient: ``"scale"`` is ``1 / (d Var(X))`` (paper, App. C.1).

    ``Var(X)`` is the variance of the flattened training array, as in scikit-learn's SVC; a
    constant ``X`` gives ``1.0``. ``None`` is ``1 / d`` (scikit-learn's pairwise default).
    """
    n_features = X.shape[1]
    if gamma == "scale":
        variance = float(X.var())
        return 1.0 / (n_features * variance) if variance > 0 else 1.0
    if gamma is None:
        return 1.0 / n_features
    return float(gamma)


def is_psd_kernel(kernel, degree, coef0) -> bool:
    """Whether the kernel is positive semi-definite for every input (Cholesky-safe)."""
    if kernel in ("rbf", "linear", "cosine"):
        return True
    if kernel == "poly":
        return float(degree).is_integer() and coef0 >= 0
    return False  # sigmoid is indefinite in general; a callable is unknown


class KernelFunction:
    """Picklable ``f(A, B) -> ndarray``: the kernel matrix between rows of A and B.

    Built on :func:`sklearn.metrics.pairwise.pairwise_kernels`; checks that the values are
    finite.
    """

    def __init__(self, kernel, gamma: float, degree, coef0, kernel_params):
        self.kernel = kernel
        if callable(kernel):
            self.params = dict(kernel_params or {})
        else:
            self.params = {"gamma": gamma, "degree": degree, "coef0": coef0}

    def __call__(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        if B is None:
            # A A^T is a threaded syrk, whose rounding depends on the number of BLAS threads;
            # on one thread the training kernel is the same bits on every machine setting.
            with threadpool_limits(limits=1, user_api="blas"):
                K = pairwise_kernels(A, None, metric=self.kernel, filter_params=True, **self.params)
        else:
            K = pairwise_kernels(A, B, metric=self.kernel, filter_params=True, **self.params)
        K = np.asarray(K, dtype=np.float64)
        if not np.isfinite(K).all():
            raise ValueError(
                "the kernel produced non-finite values; check the kernel parameters (gamma, "
                "degree, coef0) and, for a callable kernel, that it returns finite numbers."
            )
        return K


def make_kernel(kernel, gamma: float, degree, coef0, kernel_params) -> KernelFunction:
    """Return the kernel-matrix function of the given kernel and parameters."""
    return KernelFunction(kernel, gamma, degree, coef0, kernel_params)


def _batches(n_rows: int, n_columns: int):
    return gen_batches(n_rows, max(1, BATCH_ENTRIES // max(n_columns, 1)))


def center_kernel_inplace(K: np.ndarray, rows: np.ndarray | None = None):
    """Centre a square training kernel in feature space on the mean of ``rows`` (all rows
    when None): ``K <- H K H^T`` with ``H = I - 1 w^T``, ``w`` uniform on ``rows``.

    Returns ``(row_means, grand_mean)``: the means of each row of the uncentred ``K`` over
    the columns ``rows`` and their mean over ``rows`` (for all rows, what
    :class:`~sklearn.preprocessing.KernelCenterer` stores as ``K_fit_rows_`` and
    ``K_fit_all_``), needed to centre the kernel of new rows.
    """
    row_means = (K if rows is None else K[:, rows]).mean(axis=1)
    grand_mean = float((row_means if rows is None else row_means[rows]).mean())
    K -= row_means[:, np.newaxis]
    K -= row_means[np.newaxis, :]
    K += grand_mean
    return row_means, grand_mean


def center_new_kernel(
    K_new: np.ndarray, row_means: np.ndarray, grand_mean: float, rows: np.ndarray | None = None
) -> np.ndarray:
    """Centre ``k(X_new, X_fit)`` in feature space as :func:`center_kernel_inplace` centred
    the training kernel (a new array)."""
    K_new = K_new - (K_new if rows is None else K_new[:, rows]).mean(axis=1, keepdims=True)
    K_new -= row_means[np.newaxis, :]
    K_new += grand_mean
    return K_new


class CentredKernelMap:
    """The centred kernel column of a row against the training rows, ``kc(x) = F f(x)``.

    ``F`` holds the training feature vectors centred on the feature-space mean of the
    objective rows ``rows`` (all rows when None). ``fit_transform(X)`` returns the centred
    training kernel ``F F^T`` (n x n); ``transform(X_new)`` the rows ``kc(x)``.
    """

    def __init__(self, kernel_matrix, rows: np.ndarray | None = None):
        self.kernel_matrix = kernel_matrix
        self.rows = rows

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        self.X_fit_ = np.array(X, dtype=np.float64, copy=True)  # kept for new rows' kernels
        K = self.kernel_matrix(self.X_fit_)
        self.row_means_, self.grand_mean_ = center_kernel_inplace(K, self.rows)
        self.rank_ = K.shape[1]
        return K

    def transform(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.rank_))
        for rows in _batches(X.shape[0], self.rank_):
            K_new = self.kernel_matrix(X[rows], self.X_fit_)
            out[rows] = center_new_kernel(K_new, self.row_means_, self.grand_mean_, self.rows)
        return out


def _relative_threshold(scale: float, n: int, tol: float | None) -> float:
    """Absolute cut-off below which a kernel eigenvalue / pivot counts as zero."""
    relative = max(1e-12, 10 * n * np.finfo(np.float64).eps) if tol is None else tol
    return max(relative * scale, np.finfo(np.float64).tiny)


def _zero_strict_upper(A: np.ndarray, block: int = 512) -> None:
    """Set the entries above the diagonal of ``A`` to zero, in place, block by block."""
    for start in range(0, A.shape[1], block):
        stop = min(start + block, A.shape[1])
        A[:start, start:stop] = 0.0
        square = A[start:stop, start:stop]
        square[np.triu_indices(stop - start, 1)] = 0.0


class KernelFactor:
    """Factor ``F`` (n x r) of a symmetric positive semi-definite matrix, ``A = F F^T``.

    ``fit(A)`` returns ``F`` (``A`` is overwritten); ``coordinates(C)`` maps rows ``c`` of
    ``C`` (kernel values against the n rows of ``A``) to ``F^+ c``: for ``c = F f`` in the
    range of ``F`` this recovers ``f`` exactly.

    Parameters
    ----------
    solver : {"cholesky", "eigh"}
        ``"cholesky"``: LAPACK's pivoted Cholesky ``P^T A P = L L^T``, stopped at the
        numerical rank, ``F = P L`` and ``F^+ c = L_11^{-1} c[pivots]`` (one triangular
        solve); O(n^2 r) and needs ``A`` positive semi-definite. ``"eigh"``: ``A = V S V^T``,
        ``F = V S^{1/2}``, ``F^+ c = S^{-1/2} V^T c``; negative eigenvalues of an indefinite
        ``A`` are dropped with the zero ones (its positive semi-definite part is used).
    tol : float or None
        Relative tolerance: eigenvalues (pivots) below ``tol * max`` are treated as zero.
        ``None`` means ``max(1e-12, 10 n eps)``.
    """

    def __init__(self, solver: str = "cholesky", tol: float | None = None):
        self.solver = solver
        self.tol = tol

    def fit(self, A: np.ndarray) -> np.ndarray:
        if self.solver == "cholesky":
            return self._fit_cholesky(A)
        return self._fit_eigh(A)

    def _fit_cholesky(self, A: np.ndarray) -> np.ndarray:
        n = A.shape[0]
        threshold = _relative_threshold(float(np.max(np.diag(A), initial=0.0)), n, self.tol)
        # A is symmetric, so A.T is the Fortran-ordered view LAPACK can overwrite in place.
        factor, pivots, rank, info = linalg.lapack.dpstrf(
            A.T, tol=threshold, lower=1, overwrite_a=1
        )
        if info < 0:  # pragma: no cover - argument error in the LAPACK call
            raise RuntimeError(f"LAPACK dpstrf failed with info={info}")
        del A
        permutation = pivots - 1  # Fortran is 1-based
        lower = factor[:, :rank]
        _zero_strict_upper(lower)
        self.pivots_ = permutation[:rank]
        self.pivot_factor_ = np.array(lower[:rank], order="C")  # L_11, lower triangular
        self.rank_ = rank
        # Row i of L belongs to row permutation[i] of A: F = P L.
        return lower[np.argsort(permutation)]

    def _fit_eigh(self, A: np.ndarray) -> np.ndarray:
        n = A.shape[0]
        values, vectors = linalg.eigh(A, overwrite_a=True, check_finite=False, driver="evd")
        del A
        threshold = _relative_threshold(float(max(values[-1], 0.0)), n, self.tol)
        keep = np.flatnonzero(values > threshold)[::-1]
        values, vectors = values[keep], vectors[:, keep]
        self.rank_ = len(keep)
        self.whitening_ = vectors / np.sqrt(values)  # V S^{-1/2}
        return vectors * np.sqrt(values)

    def coordinates(self, C: np.ndarray, *, pivoted: bool = False) -> np.ndarray:
        """Rows ``F^+ c``; ``pivoted=True`` when ``C`` already holds only the pivot columns,
        in pivot order (Cholesky only)."""
        if self.solver == "cholesky":
            C_pivots = C if pivoted else C[:, self.pivots_]
            # rows of C_pivots L_11^{-T}, computed as (L_11^{-1} C_pivots^T)^T
            solved = linalg.solve_triangular(
                self.pivot_factor_, C_pivots.T, lower=True, check_finite=False
            )
            return solved.T
        return matmul(C, self.whitening_)


class ExactKernelMap:
    """Empirical kernel map of the training rows, centred in feature space.

    ``fit_transform(X)`` returns ``Phi`` (n x r) with ``Phi Phi^T = K_c`` (the centred training
    kernel, rank r after dropping numerically-zero directions); ``transform(X_new)`` returns
    ``phi(x) = Phi^+ k_c(x)``, the coordinates of the centred feature vector of ``x``
    projected onto the span of the training feature vectors (the only part any kernel PCA
    direction can see). ``Phi`` is determined up to an orthogonal transform of its columns.

    Parameters
    ----------
    kernel_matrix : callable
        ``kernel_matrix(A, B)`` as returned by :func:`make_kernel`.
    solver : {"cholesky", "eigh"}
        Factorisation of ``K_c``, see :class:`KernelFactor`: pivoted Cholesky ``Phi = P L``
        or ``Phi = V S^{1/2}``.
    tol : float or None
        Relative rank tolerance, see :class:`KernelFactor`.
    """

    def __init__(self, kernel_matrix, solver: str = "cholesky", tol: float | None = None):
        self.kernel_matrix = kernel_matrix
        self.solver = solver
        self.tol = tol

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        self.centred_ = CentredKernelMap(self.kernel_matrix)
        K = self.centred_.fit_transform(X)
        self.factor_ = KernelFactor(self.solver, self.tol)
        Phi = self.factor_.fit(K)
        self.rank_ = self.factor_.rank_
        return Phi

    def transform(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.rank_))
        for rows in _batches(X.shape[0], self.centred_.rank_):
            out[rows] = self.factor_.coordinates(self.centred_.transform(X[rows]))
        return out


def choose_landmarks(X: np.ndarray, n_landmarks: int, method: str, random_state) -> np.ndarray:
    """Indices of ``n_landmarks`` distinct rows of X, sorted; uniform or k-means++ seeding."""
    rng = check_random_state(random_state)
    if method == "uniform":
        indices = rng.choice(X.shape[0], size=n_landmarks, replace=False)
    else:
        _, indices = kmeans_plusplus(X, n_clusters=n_landmarks, random_state=rng)
        # k-means++ can pick a duplicate row twice; top up with unused rows.
        indices = np.unique(indices)
        if len(indices) < n_landmarks:
            unused = np.setdiff1d(np.arange(X.shape[0]), indices)
            extra = rng.choice(unused, size=n_landmarks - len(indices), replace=False)
            indices = np.concatenate([indices, extra])
    return np.sort(indices)


class NystroemMap:
    """Nystroem feature map ``phi(x) = F^+ k(landmarks, x)`` with ``K_mm = F F^T``.

    ``K_mm`` is the (uncentred) landmark kernel, factored by :class:`KernelFactor` (pivoted
    Cholesky: ``phi(x) = L_11^{-1} k(pivots, x)``, one triangular solve of O(m^2) per row; or
    ``K_mm = V S V^T``: ``phi(x) = S^{-1/2} V^T k(landmarks, x)``). Directions below
    ``tol * max`` are dropped; scikit-learn's :class:`~sklearn.kernel_approximation.Nystroem`
    instead clips eigenvalues to 1e-12, which amplifies rounding noise by up to 1e6 for the
    smooth kernels used here and costs a full eigendecomposition. Centring in the
    approximate feature space is left to the linear fair PCA fitted on top (it subtracts the
    training mean of ``phi``), which is exactly kernel centring of the approximate kernel
    ``phi(x)^T phi(y)``. With all training rows as landmarks this is the exact empirical
    kernel map up to an orthogonal transform.
    """

    def __init__(
        self, kernel_matrix, n_landmarks: int, landmarks: str, solver: str, tol, random_state
    ):
        self.kernel_matrix = kernel_matrix
        self.n_landmarks = n_landmarks
        self.landmarks = landmarks
        self.solver = solver
        self.tol = tol
        self.random_state = random_state

    def fit(self, X: np.ndarray) -> NystroemMap:
        self.landmark_indices_ = choose_landmarks(
            X, self.n_landmarks, self.landmarks, self.random_state
        )
        self.landmarks_ = X[self.landmark_indices_]
        K_mm = self.kernel_matrix(self.landmarks_)
        self.factor_ = KernelFactor(self.solver, self.tol)
        self.factor_.fit(K_mm)
        self.rank_ = self.factor_.rank_
        self.pivoted_ = self.solver == "cholesky"
        if self.pivoted_:
            # Landmarks past the numerical rank lie in the span of the pivots: keep only the
            # pivots, in pivot order, so new rows need r kernel columns and no gather.
            self.landmarks_ = self.landmarks_[self.factor_.pivots_]
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.rank_))
        for rows in _batches(X.shape[0], len(self.landmarks_)):
            C = self.kernel_matrix(X[rows], self.landmarks_)
            out[rows] = self.factor_.coordinates(C, pivoted=self.pivoted_)
        return out

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return self.fit(X).transform(X)


class FourierMap:
    """Random Fourier features of the RBF kernel (scikit-learn's RBFSampler, batched)."""

    def __init__(self, gamma: float, n_features: int, random_state):
        self.gamma = gamma
        self.n_features = n_features
        self.random_state = random_state

    def fit(self, X: np.ndarray) -> FourierMap:
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        self.sampler_ = RBFSampler(
            gamma=self.gamma, n_components=self.n_features, random_state=seed
        ).fit(X)
        self.rank_ = self.n_features
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.n_features))
        for rows in _batches(X.shape[0], self.n_features):
            out[rows] = self.sampler_.transform(X[rows])
        return out

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return self.fit(X).transform(X)
