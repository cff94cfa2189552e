"""FairKernelPCA: fair kernel PCA (Section 3.3, Algorithm 3), exact or approximated at scale.

The default exact route works on the deflated Gram matrix (:mod:`fairpca._kernel_gram`); the
other routes solve linear fair PCA on a finite kernel map, justified as follows.

Why the empirical kernel map solves Algorithm 3 exactly
--------------------------------------------------------
Let ``K`` be the training kernel centred in feature space and ``Phi`` (n x r) any factor with
``K = Phi Phi^T`` and ``rank(Phi) = r = rank(K)``, e.g. ``Phi = V S^{1/2}`` from the
eigendecomposition ``K = V S V^T`` restricted to the positive eigenvalues (``S > 0``), or a
pivoted Cholesky factor. The rows of ``Phi`` are the training points expressed in an
orthonormal basis of the span of their feature vectors (the "empirical kernel map").

Algorithm 3 solves Problem (6), ``max tr(B^T K K B)`` over ``B`` (n x k) subject to
``B^T K B = I`` and ``G^T K B = 0``, by ``B = R Lambda`` and the generalised eigenproblem
``R^T K K R Lambda = R^T K R Lambda W``. Substitute ``W := Phi^T B`` (r x k):

- ``B^T K B = B^T Phi Phi^T B = W^T W``, so the normalisation becomes ``W^T W = I``;
- ``G^T K B = G^T Phi (Phi^T B) = G^T Phi W``, so the constraint becomes ``G^T Phi W = 0``;
- ``tr(B^T K K B) = tr(B^T Phi (Phi^T Phi) Phi^T B) = tr(W^T Phi^T Phi W)``.

So ``W`` solves Problem (10), linear fair PCA with data matrix ``Phi`` (rows are points; its
rows have mean zero because ``1^T K 1 = 0``), with the same centred group-indicator matrix
``G`` (the paper's ``Z``). The map ``B -> Phi^T B`` is onto: every feasible ``W`` comes from
``B = Phi (Phi^T Phi)^{-1} W`` (``= V S^{-1/2} W`` for the eigen-factor), and ``B`` changes
only by elements of ``null(K) = null(Phi^T)``, which change neither objective nor
constraints nor the representation below. The optimal values therefore agree and optimal
solutions correspond.

Representation. Training rows: ``Lambda^T R^T K = B^T K = B^T Phi Phi^T = W^T Phi^T``, i.e.
the rows of ``Phi W``, linear fair PCA's projection of the rows of ``Phi``. New rows: let
``F`` (n x D) hold the centred training feature vectors, so ``K = F F^T = Phi Phi^T``; as
``Phi`` has full column rank, ``F = Phi O^T`` for some ``O`` (D x r) with ``O^T O = I``.
The centred kernel column of a new row, ``k(x) = F f(x)`` (``f(x)`` its centred feature
vector), is then ``k(x) = Phi phi(x)`` with ``phi(x) = O^T f(x)``, the coordinates of the
projection of ``f(x)`` onto the training span, and Algorithm 3's ``Lambda^T R^T k(x) =
B^T Phi phi(x) = W^T phi(x)``: linear fair PCA's projection of ``phi(x)``. Since ``Phi`` has
full column rank, ``phi(x) = Phi^+ k(x)``: ``S^{-1/2} V^T k(x)`` for ``Phi = V S^{1/2}``,
``L_11^{-1} k(x)[pivots]`` for the pivoted Cholesky factor ``Phi = P L``. (Another factor
``Phi O'`` with ``O'`` orthogonal gives ``W' = O'^T W`` and the same representations.)

Hence exact fair kernel PCA is :class:`~fairpca.FairPCA` on ``Phi`` and ``Phi^+ k(x)``,
with no generalised eigenproblem and no ``+1e-5 I`` regularisation (Appendix C.1), which
perturbs the paper's solution. Directions with zero eigenvalue of ``K`` carry no variance
and no constraint, so dropping them (with a relative tolerance) loses nothing; with ``S``
restricted to positive eigenvalues the argument is exact. Group/attribute handling
(Sections 3.4-3.5), equal opportunity (Section 3.2) and the trade-off knob (Section 3.1; its
standard PCA on ``Phi`` is standard kernel PCA) all come from :class:`~fairpca.FairPCA`
unchanged.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _linalg as la
from . import _memory
from ._fair_pca import DEFAULT_TOL, FairPCA
from ._groups import encode_groups
from ._kernel_gram import DeflatedGramSolver
from ._kernel_maps import (
    KERNELS,
    CentredKernelMap,
    ExactKernelMap,
    FourierMap,
    NystroemMap,
    _batches,
    center_kernel_inplace,
    is_psd_kernel,
    make_kernel,
    resolve_gamma,
)
from ._validation import (
    FAIRNESS_CONSTRAINTS,
    TooManyComponentsError,
    check_magnitude,
    check_n_components_bound,
    check_numeric,
    drop_sensitive_columns,
    fit_rows,
    groups_among,
    output_feature_names,
    split_sensitive_columns,
)


class FairKernelPCA(TransformerMixin, BaseEstimator):
    """Fair kernel PCA: fair PCA in a kernel feature space, exact or approximated at scale.

    Solves Problem (6) of Kleindessner et al. (2023), Algorithm 3 (fair kernel PCA for several
    groups): the best k-dimensional projection in the kernel feature space (centred there)
    such that the projected training rows of every group have the same mean. It is computed as
    linear :class:`~fairpca.FairPCA` on a finite feature map of the rows:

    - ``"exact"``: exactly Algorithm 3, without its generalised eigenproblem and the
      paper's ``+1e-5 I``. By default (``factorization="gram"``) as kernel PCA of the
      training kernel with the constraint directions deflated (a rank-q update, then a
      Lanczos solve for ``k`` vectors, as scikit-learn's KernelPCA; derivation in
      :mod:`fairpca._kernel_gram`): O(n^2 d + n^2 k) time, O(n^2) memory. With
      ``factorization="cholesky"`` or ``"eigh"``, as linear fair PCA on the empirical
      kernel map ``Phi`` with ``Phi Phi^T = K_c`` (proof in the module docstring).
    - ``"nystroem"``: the Nystroem map of ``n_landmarks`` training rows (uniform or
      k-means++ chosen); O(n m d + n m^2) time and O(n m) memory.
    - ``"rff"``: ``n_landmarks`` random Fourier features (RBF kernel only).

    Multiple groups, multiple attributes, equal opportunity and the accuracy/fairness
    trade-off knob behave exactly as in :class:`~fairpca.FairPCA`.

    Parameters
    ----------
    n_components : int or None, default=None
        Target dimension ``k``. ``None`` keeps every fair direction of the kernel map.
    kernel : {"rbf", "poly", "sigmoid", "cosine", "linear"} or callable, default="rbf"
        Kernel, as in :func:`sklearn.metrics.pairwise.pairwise_kernels`. A callable gets two
        rows and returns a float, with ``kernel_params`` as keyword arguments.
    gamma : float, "scale" or None, default="scale"
        Coefficient of the rbf, poly and sigmoid kernels. ``"scale"`` is
        ``1 / (n_features * X.var())`` on the training data, the paper's choice (Appendix C.1,
        scikit-learn's SVC default); ``None`` is ``1 / n_features``. The value used is stored
        in ``gamma_``; the parameter itself is never modified.
    degree : float, default=3
        Degree of the poly kernel.
    coef0 : float, default=1
        Independent term of the poly and sigmoid kernels.
    kernel_params : dict or None, default=None
        Keyword arguments of a callable kernel.
    constraint : {"demographic_parity", "equal_opportunity"}, default="demographic_parity"
        As in :class:`~fairpca.FairPCA`; ``"equal_opportunity"`` constrains the rows with
        ``y == pos_label`` (Section 3.2) and needs ``y``.
    pos_label : int, float, bool or str, default=1
        Positive label for equal opportunity.
    eo_objective : {"positive", "all"}, default="positive"
        As in :class:`~fairpca.FairPCA`.
    tradeoff : float, default=0.0
        The paper's lambda (Section 3.1): when positive, ``transform`` appends
        ``tradeoff`` times the standard kernel PCA features. Can be changed with
        ``set_params`` after fitting without a refit (the Gram route then computes the
        standard kernel PCA once, into a cache that pickling drops).
    sensitive_columns : str, list of str or None, default=None
        Columns of a DataFrame ``X`` holding the sensitive attributes; they are excluded from
        the kernel and dropped by ``transform``.
    approximation : {"auto", "exact", "nystroem", "rff"}, default="auto"
        Route, see above. ``"auto"`` is ``"exact"`` when ``n_samples <= exact_max_samples``
        (or ``n_samples <= n_landmarks``) and ``"nystroem"`` otherwise.
    n_landmarks : int, default=1000
        Nystroem: number ``m`` of landmark rows (at most ``n_samples``). ``"rff"``: number of
        random Fourier features.
    landmarks : {"uniform", "kmeans++"}, default="uniform"
        How Nystroem landmarks are drawn from the training rows: uniformly without
        replacement, or by k-means++ seeding (better coverage, O(n m d log m) extra time).
    exact_max_samples : int, default=5000
        Largest training size for which ``approximation="auto"`` uses the exact route.
    factorization : {"auto", "gram", "cholesky", "eigh"}, default="auto"
        How the kernel matrix is used (exact route: the centred training kernel; Nystroem:
        the landmark kernel). ``"gram"`` (exact route only): no factor, the deflated Gram
        matrix and a Lanczos solve; ``"cholesky"``: a pivoted Cholesky factor (O(n^2 r));
        ``"eigh"``: a full eigendecomposition (several times slower; uses the positive part
        of an indefinite kernel). ``"gram"`` and ``"cholesky"`` need a positive
        semi-definite kernel. ``"auto"`` is ``"gram"`` (exact route) or ``"cholesky"``
        (Nystroem) for the rbf, linear and cosine kernels and for poly with integer degree
        and ``coef0 >= 0``, else ``"eigh"``.
    kernel_tol : float or None, default=None
        Relative tolerance below which eigenvalues (pivots) of the kernel matrix are treated
        as zero and dropped. ``None`` means ``max(1e-12, 10 * n * eps)``.
    svd_solver : {"auto", "covariance_eigh", "full", "randomized"}, default="auto"
        Solver of the linear :class:`~fairpca.FairPCA` on the kernel map (its ``"auto"``
        policy; the Gram route's Lanczos solve does not use it and is exact). On a map
        with more than 500 rows and small ``k`` that is the randomized solver, whose
        eigenvectors are approximate when the kernel spectrum decays slowly;
        ``"covariance_eigh"`` gives exact ones at O(n r^2 + r^3) extra cost.
    tol : float or None, default=None
        Rank tolerance of the fairness constraint, as in :class:`~fairpca.FairPCA` (the
        Gram route resolves it down to 1e-7 relative).
    iterated_power : int or "auto", default="auto"
        Power iterations of the randomized solver.
    n_oversamples : int, default=10
        Oversampling of the randomized solver.
    random_state : int, RandomState instance or None, default=None
        Seed for landmarks, random features and the randomized solver. The exact route is
        deterministic (the Gram route always; a kernel-map route with a non-randomized
        solver).

    Attributes
    ----------
    gamma_ : float
        Kernel coefficient used (resolved from ``gamma``).
    approximation_ : str
        Route used: ``"exact"``, ``"nystroem"`` or ``"rff"``.
    factorization_ : str or None
        Factorisation used by the exact and Nystroem routes (None for ``"rff"``).
    kernel_map_ : object
        The fitted feature map: ``transform(X)`` returns the ``n_kernel_features_``
        features of rows that the linear stage projects. ``CentredKernelMap`` (the Gram
        route: the centred kernel column of a row against the training rows),
        ``ExactKernelMap``, ``NystroemMap`` or ``FourierMap``.
    n_kernel_features_ : int
        Dimension ``r`` of the kernel map (numerical rank of the kernel matrix, ``m`` or the
        number of random features; the number of training rows for the Gram route).
    fair_pca_ : FairPCA or None
        The linear fair PCA fitted on the kernel map of the training rows (None for the
        Gram route).
    gram_solver_ : DeflatedGramSolver or None
        The Gram route's solution: coefficients of the centred kernel column (None for the
        other routes).
    n_components_ : int
        Number of fair components.
    explained_variance_ : ndarray of shape (n_components_,)
        Variance of the training rows along each fair direction in feature space.
    explained_variance_ratio_ : ndarray of shape (n_components_,)
        ``explained_variance_`` over the total feature-space variance of the kernel map.
    constraint_rank_ : int
        Rank of the fairness constraint in feature space.
    mean_gap_ : float
        Largest absolute difference between projected group means on the training rows.
    groups_ : list of ndarray
        Group labels of each sensitive attribute.
    landmark_indices_ : ndarray or None
        Training-row indices of the Nystroem landmarks, else None.
    n_features_in_ : int
        Number of input features (sensitive columns excluded).
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Input feature names, when ``X`` has string column names.

    See Also
    --------
    fairpca.FairPCA : Linear fair PCA.
    sklearn.decomposition.KernelPCA : Kernel PCA without fairness constraint.

    References
    ----------
    M. Kleindessner, M. Donini, C. Russell, M. B. Zafar. Efficient fair PCA for fair
    representation learning. AISTATS 2023 (Section 3.3, Algorithm 3).
    C. Williams and M. Seeger. Using the Nystroem method to speed up kernel machines.
    NeurIPS 2000.

    Examples
    --------
    >>> import numpy as np
    >>> from fairpca import FairKernelPCA
    >>> rng = np.random.default_rng(0)
    >>> groups = rng.integers(0, 2, size=200)
    >>> X = rng.normal(size=(200, 5)) + 1.5 * groups[:, None]
    >>> fkpca = FairKernelPCA(n_components=2, kernel="rbf").fit(X, sensitive_features=groups)
    >>> Y = fkpca.transform(X)
    >>> bool(np.allclose(Y[groups == 0].mean(0), Y[groups == 1].mean(0)))
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        **FAIRNESS_CONSTRAINTS,
        "kernel": [StrOptions(set(KERNELS)), callable],
        "gamma": [Interval(Real, 0, None, closed="neither"), StrOptions({"scale"}), None],
        "degree": [Interval(Real, 0, None, closed="left")],
        "coef0": [Real],
        "kernel_params": [dict, None],
        "approximation": [StrOptions({"auto", "exact", "nystroem", "rff"})],
        "n_landmarks": [Interval(Integral, 1, None, closed="left")],
        "landmarks": [StrOptions({"uniform", "kmeans++"})],
        "exact_max_samples": [Interval(Integral, 1, None, closed="left")],
        "factorization": [StrOptions({"auto", "gram", "cholesky", "eigh"})],
        "kernel_tol": [Interval(Real, 0, 1, closed="neither"), None],
    }

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma="scale",
        degree=3,
        coef0=1,
        kernel_params=None,
        constraint="demographic_parity",
        pos_label=1,
        eo_objective="positive",
        tradeoff=0.0,
        sensitive_columns=None,
        approximation="auto",
        n_landmarks=1000,
        landmarks="uniform",
        exact_max_samples=5000,
        factorization="auto",
        kernel_tol=None,
        svd_solver="auto",
        tol=None,
        iterated_power="auto",
        n_oversamples=10,
        random_state=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.constraint = constraint
        self.pos_label = pos_label
        self.eo_objective = eo_objective
        self.tradeoff = tradeoff
        self.sensitive_columns = sensitive_columns
        self.approximation = approximation
        self.n_landmarks = n_landmarks
        self.landmarks = landmarks
        self.exact_max_samples = exact_max_samples
        self.factorization = factorization
        self.kernel_tol = kernel_tol
        self.svd_solver = svd_solver
        self.tol = tol
        self.iterated_power = iterated_power
        self.n_oversamples = n_oversamples
        self.random_state = random_state

    # ------------------------------------------------------------------ helpers
    def _resolve_route(self, n_samples: int) -> str:
        route = self.approximation
        if route == "auto":
            small = n_samples <= self.exact_max_samples or n_samples <= self.n_landmarks
            if small and _memory.fits(_memory.kernel_bytes(n_samples)):
                return "exact"
            return "nystroem" if n_samples > self.n_landmarks else "exact"
        if route == "nystroem" and self.n_landmarks > n_samples:
            raise ValueError(
                f"n_landmarks={self.n_landmarks} exceeds the number of training rows "
                f"({n_samples}); Nystroem landmarks are training rows. Use "
                f"n_landmarks <= {n_samples}, or approximation='exact' for small data."
            )
        if route == "rff" and self.kernel != "rbf":
            raise ValueError(
                f"approximation='rff' (random Fourier features) exists only for the rbf "
                f"kernel, not kernel={self.kernel!r}; use approximation='nystroem'."
            )
        return route

    def _require_memory(self, route: str, n_samples: int) -> None:
        """Stop before the n x n (exact) or n x m (approximate) matrices if they do not fit."""
        if route == "exact":
            _memory.require(
                _memory.kernel_bytes(n_samples),
                f"the n x n kernel matrices of the exact route for n_samples={n_samples}",
                "Use approximation='nystroem' with n_landmarks << n_samples (or 'rff' for the "
                "rbf kernel), or fit on fewer rows.",
            )
            return
        width = min(self.n_landmarks, n_samples)
        _memory.require(
            _memory.FLOAT_BYTES * (3 * n_samples * width + 3 * width * width),
            f"the n x m kernel map for n_samples={n_samples} and n_landmarks={width}",
            "Use a smaller n_landmarks, or fit on fewer rows.",
        )

    def _resolve_factorization(self, route: str) -> str:
        psd = is_psd_kernel(self.kernel, self.degree, self.coef0)
        if self.factorization == "gram" and route != "exact":
            raise ValueError(
                f"factorization='gram' solves the exact route without a factor; "
                f"approximation={route!r} needs factorization='cholesky', 'eigh' or 'auto'."
            )
        if self.factorization != "auto":
            if self.factorization in ("cholesky", "gram") and not psd:
                raise ValueError(
                    f"factorization={self.factorization!r} needs a positive semi-definite kernel; "
                    f"kernel={self.kernel!r} (degree={self.degree}, coef0={self.coef0}) may "
                    "be indefinite. Use factorization='eigh', which keeps its positive part."
                )
            return self.factorization
        if not psd:
            return "eigh"
        return "gram" if route == "exact" else "cholesky"

    def _make_map(self, route: str, rng, objective_rows):
        kernel_matrix = make_kernel(
            self.kernel, self.gamma_, self.degree, self.coef0, self.kernel_params
        )
        if self.factorization_ == "gram":
            rows = None if objective_rows is None else np.flatnonzero(objective_rows)
            return CentredKernelMap(kernel_matrix, rows)
        if route == "exact":
            return ExactKernelMap(kernel_matrix, self.factorization_, self.kernel_tol)
        if route == "nystroem":
            return NystroemMap(
                kernel_matrix,
                self.n_landmarks,
                self.landmarks,
                self.factorization_,
                self.kernel_tol,
                rng,
            )
        return FourierMap(self.gamma_, self.n_landmarks, rng)

    def _fit_map(self, X, y, sensitive_features) -> tuple[np.ndarray, np.ndarray | None]:
        """Fit the kernel map and the fair solve on it; return the training rows' fair
        features and their standard kernel PCA features (None when ``tradeoff == 0``)."""
        X, sensitive_features = split_sensitive_columns(
            X, sensitive_features, self.sensitive_columns
        )
        check_numeric(X, "FairKernelPCA")
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        check_magnitude(X)
        n_samples = X.shape[0]
        check_n_components_bound(
            self.n_components, n_samples, n_samples, "dimensions of the kernel map"
        )
        encoding = encode_groups(sensitive_features, n_samples)
        objective_rows, constraint_rows = fit_rows(
            y, n_samples, self.constraint, self.pos_label, self.eo_objective
        )
        if constraint_rows is not None:
            groups_among(encoding, constraint_rows)
        rng = check_random_state(self.random_state)
        self.gamma_ = resolve_gamma(self.gamma, X)
        self.approximation_ = self._resolve_route(n_samples)
        self._require_memory(self.approximation_, n_samples)
        self.factorization_ = (
            self._resolve_factorization(self.approximation_)
            if self.approximation_ != "rff"
            else None
        )
        self.kernel_map_ = self._make_map(self.approximation_, rng, objective_rows)
        features = self.kernel_map_.fit_transform(X)
        self.n_kernel_features_ = self.kernel_map_.rank_
        self.landmark_indices_ = getattr(self.kernel_map_, "landmark_indices_", None)
        self.groups_ = list(encoding.groups)
        if self.factorization_ == "gram":
            return self._fit_gram(features, encoding, objective_rows, constraint_rows)
        return self._fit_linear(features, y, sensitive_features, rng)

    def _fit_linear(self, Phi, y, sensitive_features, rng) -> tuple[np.ndarray, np.ndarray | None]:
        """Linear fair PCA on the kernel map ``Phi`` (module docstring)."""
        self.gram_solver_ = None
        shared = {name: getattr(self, name) for name in FAIRNESS_CONSTRAINTS}
        self.fair_pca_ = FairPCA(**{**shared, "sensitive_columns": None, "random_state": rng})
        try:
            self.fair_pca_.fit(Phi, y, sensitive_features=sensitive_features)
        except TooManyComponentsError as error:
            raise ValueError(
                f"{error} (Here the features are the {Phi.shape[1]} dimensions of the "
                f"{self.approximation_} kernel map, i.e. the numerical rank of the kernel "
                "matrix or the approximation size.)"
            ) from error
        fitted = self.fair_pca_
        self.n_components_ = fitted.n_components_
        self.explained_variance_ = fitted.explained_variance_
        self.explained_variance_ratio_ = fitted.explained_variance_ratio_
        self.constraint_rank_ = fitted.constraint_rank_
        self.mean_gap_ = fitted.mean_gap_
        return self._linear_features(Phi)

    def _fit_gram(
        self, Kc, encoding, objective_rows, constraint_rows
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Exact route without a factor (:mod:`fairpca._kernel_gram`) on the centred kernel."""
        encoding_rows = encoding if constraint_rows is None else encoding.subset(constraint_rows)
        solver = DeflatedGramSolver(DEFAULT_TOL if self.tol is None else self.tol, self.kernel_tol)
        features = solver.fit_transform(
            Kc,
            self.kernel_map_.grand_mean_,
            encoding_rows,
            objective_rows,
            constraint_rows,
            self.n_components,
            with_pca=self.tradeoff > 0,
        )
        self.gram_solver_ = solver
        self.fair_pca_ = None
        self.n_components_ = solver.n_components_
        self.explained_variance_ = solver.explained_variance_
        total = solver.total_variance_
        self.explained_variance_ratio_ = (
            solver.explained_variance_ / total if total > 0 else np.zeros(solver.n_components_)
        )
        self.constraint_rank_ = solver.constraint_rank_
        self.mean_gap_ = solver.mean_gap_
        return features

    def _gram_pca_coefficients(self) -> np.ndarray:
        """Standard kernel PCA coefficients of the Gram route. Computed at fit when
        ``tradeoff > 0``; otherwise on first use, into a cache that is not fitted state
        (``__getstate__`` drops it, so pickles and ``transform`` leave the estimator as
        fitted)."""
        if self.gram_solver_.pca_coef_ is not None:
            return self.gram_solver_.pca_coef_
        cached = self.__dict__.get("_pca_coef_cache")
        if cached is None or cached[0] is not self.gram_solver_:
            kernel_map = self.kernel_map_
            Kc = kernel_map.kernel_matrix(kernel_map.X_fit_)
            center_kernel_inplace(Kc, kernel_map.rows)
            cached = (self.gram_solver_, self.gram_solver_.pca_coefficients(Kc))
            self.__dict__["_pca_coef_cache"] = cached
        return cached[1]

    def _linear_features(self, features) -> tuple[np.ndarray, np.ndarray | None]:
        """``(fair, kernel PCA or None)`` features from the kernel map's output."""
        with_pca = self.tradeoff > 0
        if self.fair_pca_ is not None:
            fitted = self.fair_pca_
            centred = features - fitted.mean_
            fair = centred @ fitted.components_.T
            return fair, (centred @ fitted.pca_components_.T if with_pca else None)
        coef = self.gram_solver_.coef_
        if with_pca:
            coef = np.hstack([coef, self._gram_pca_coefficients()])
        out = la.matmul(features, coef)
        k = self.n_components_
        return out[:, :k], (out[:, k:] if with_pca else None)

    def _project(self, fair, pca) -> np.ndarray:
        return np.hstack([fair, self.tradeoff * pca]) if self.tradeoff > 0 else fair

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_pca_coef_cache", None)
        return state

    # ------------------------------------------------------------------ public API
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, sensitive_features=None):
        """Fit fair kernel PCA.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numeric, finite).
        y : array-like of shape (n_samples,), default=None
            Labels; needed for ``constraint="equal_opportunity"``, ignored otherwise.
        sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
            Group labels of one attribute, or a 2-D array / DataFrame of several attributes.
            Not needed when ``sensitive_columns`` is set.

        Returns
        -------
        self : FairKernelPCA
            The fitted estimator.
        """
        self._fit_map(X, y, sensitive_features)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None, *, sensitive_features=None):
        """Fit and return the fair representation of the training rows.

        Reuses the training kernel map instead of mapping ``X`` a second time.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,), default=None
            Labels (equal opportunity only).
        sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
            Group labels, unless ``sensitive_columns`` is set.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components_) or (n_samples, 2 * n_components_)
            Fair features, followed by ``tradeoff`` times the kernel PCA features when
            ``tradeoff > 0``.
        """
        return self._project(*self._fit_map(X, y, sensitive_features))

    def transform(self, X):
        """Fair representation of (new) rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to map; sensitive columns named by ``sensitive_columns`` are dropped.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components_) or (n_samples, 2 * n_components_)
            Fair features, followed by ``tradeoff`` times the kernel PCA features when
            ``tradeoff > 0``.
        """
        check_is_fitted(self)
        X = drop_sensitive_columns(X, self.sensitive_columns)
        check_numeric(X, "FairKernelPCA")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        out = np.empty((X.shape[0], self.get_feature_names_out().shape[0]))
        for rows in _batches(X.shape[0], self.kernel_map_.rank_):
            out[rows] = self._project(*self._linear_features(self.kernel_map_.transform(X[rows])))
        return out

    def get_feature_names_out(self, input_features=None):
        """Output feature names: ``fairkernelpca0..k-1``, then ``kernelpca0..k-1``.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Only used to validate feature names against ``feature_names_in_``.

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        return output_feature_names(self, input_features, "fairkernelpca", "kernelpca")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags
