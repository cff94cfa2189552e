"""The FairPCA estimator (Kleindessner, Donini, Russell, Zafar; AISTATS 2023)."""

from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import (
    check_array,
    check_is_fitted,
    validate_data,
)

from . import _chunked, _dask, _memory, _solvers, _streaming
from . import _linalg as la
from ._groups import GroupEncoding, encode_groups, group_sum_weights, with_total
from ._validation import (
    FAIRNESS_CONSTRAINTS,
    check_magnitude,
    check_n_components_bound,
    check_numeric,
    drop_sensitive_columns,
    fit_rows,
    groups_among,
    output_feature_names,
    positive_rows,
    resolve_n_components,
    sensitive_column_list,
    split_sensitive_columns,
)

DEFAULT_TOL = 1e-11
# float32 data are reduced with float32 products (Moments): their group means carry float32
# rounding, so a direction is constrained only above this relative size.
DEFAULT_TOL_FLOAT32 = 1e-5


@dataclass(frozen=True)
class _Constraint:
    """The group-mean differences ``D`` (d x m: the columns of ``X^T Z`` scaled by the group
    sizes, Sections 3.4-3.5), an orthonormal basis (d x r) of their span, their singular
    values, and the groups they come from."""

    D: np.ndarray
    basis: np.ndarray
    singular_values: np.ndarray
    groups: GroupEncoding

    @property
    def rank(self) -> int:
        return self.basis.shape[1]


class FairPCA(TransformerMixin, BaseEstimator):
    """Fair PCA: the best k-dimensional projection whose group-conditional means coincide.

    Solves Problem (4) of Kleindessner et al. (2023): maximise ``tr(U^T Xc^T Xc U)`` over
    ``U^T U = I`` subject to ``G^T Xc U = 0``, where ``G`` is the centred one-hot group
    indicator matrix, the paper's ``Z`` (Algorithm 1 for two groups, Algorithm 2 for
    several, Section 3.5 for several sensitive attributes stacked). Equivalently, the
    projected data of every group has the same mean. The cost is that of PCA: one pass to
    form the scatter matrix (or a randomized range finder), a rank-revealing basis of the
    group-mean differences, and one eigenproblem.

    Variants: equal opportunity (Section 3.2), the covariance-equalising "Fair PCA-S"
    (Section 3.6) and the accuracy/fairness trade-off knob (Section 3.1).

    Parameters
    ----------
    n_components : int or None, default=None
        Target dimension ``k``. ``None`` keeps the largest allowed number,
        ``min(n_samples, n_features - constraint_rank_)``.
    constraint : {"demographic_parity", "equal_opportunity"}, default="demographic_parity"
        ``"demographic_parity"`` equalises the projected group means over all rows.
        ``"equal_opportunity"`` equalises them over the rows with ``y == pos_label``
        (Section 3.2); ``fit`` then needs ``y``.
    pos_label : int, float, bool or str, default=1
        The positive label for ``constraint="equal_opportunity"``.
    eo_objective : {"positive", "all"}, default="positive"
        For equal opportunity: ``"positive"`` fits the variance objective on the positive rows
        too, as in the paper; ``"all"`` keeps the variance objective (and ``mean_``) on all
        rows and applies only the constraint to the positive rows.
    equalize_covariance : int, float or None, default=None
        ``None`` gives fair PCA. Otherwise Fair PCA-S (Section 3.6) with the paper's ``l``:
        an int is ``l`` itself (``n_components <= l <= n_features - constraint_rank_``);
        a float ``f`` in (0, 1] gives ``l = max(k, min(n_features - constraint_rank_,
        floor(f * n_features)))``, which for one binary attribute is the paper's
        ``max(k, min(d - 1, floor(f d)))``. Smaller ``l`` equalises the projected group
        covariances more. Fair PCA-S always uses the exact covariance route.
    tradeoff : float, default=0.0
        The paper's lambda (Section 3.1). When positive, ``transform`` returns
        ``[X U_fair, tradeoff * X U_pca]`` (2k columns). The standard PCA directions are
        computed at fit, so ``tradeoff`` can be changed with ``set_params`` without refitting.
    sensitive_columns : str, list of str or None, default=None
        Names of columns of a DataFrame ``X`` that hold the sensitive attributes. They are
        used as ``sensitive_features`` and excluded from the projection (as fairlearn's
        ``CorrelationRemover`` does); ``transform`` drops them when present.
    svd_solver : {"auto", "covariance_eigh", "full", "randomized"}, default="auto"
        ``"covariance_eigh"``: exact, from the d x d scatter matrix. ``"full"``: exact, from
        a thin SVD of the centred data (cheaper when n < d). ``"randomized"``: randomized
        subspace iteration for k << d. ``"auto"`` follows scikit-learn's PCA policy:
        covariance when ``d <= 1000`` and ``n >= 10 d``; exact when the data are small
        (``max(n, d) <= 500``) or ``k >= 0.8 min(n, d)``; randomized otherwise.
    tol : float or None, default=None
        Relative tolerance of the rank-revealing step: a direction of the group-mean
        differences is constrained when its singular value exceeds ``tol`` times the data
        scale ``sqrt(total variance + ||mean||^2)``. ``None`` means ``1e-11`` for float64
        data and ``1e-5`` for float32 data (computed in float32, see ``partial_fit``).
    iterated_power : int or "auto", default="auto"
        Power iterations of the randomized solver (7 if ``k < 0.1 min(n, d)`` else 4).
    n_oversamples : int, default=10
        Extra random directions of the randomized solver, beyond ``n_components`` and one
        per constrained direction.
    random_state : int, RandomState instance or None, default=None
        Seed of the randomized solver. The exact solvers are deterministic.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Fair directions (orthonormal rows), by decreasing explained variance.
    explained_variance_ : ndarray of shape (n_components,)
        Variance of the fitted rows along each fair direction.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        ``explained_variance_`` divided by the total variance.
    singular_values_ : ndarray of shape (n_components,)
        ``sqrt(explained_variance_ * (n_samples_ - 1))``.
    pca_components_ : ndarray of shape (n_components, n_features)
        Standard PCA directions of the same rows (used by ``tradeoff``).
    pca_explained_variance_ : ndarray of shape (n_components,)
        Variance along the standard PCA directions.
    mean_ : ndarray of shape (n_features,)
        Mean of the fitted (objective) rows; subtracted before projecting.
    n_components_ : int
        Number of fair directions.
    n_samples_ : int
        Number of rows of the variance objective.
    constraint_basis_ : ndarray of shape (constraint_rank_, n_features)
        Orthonormal rows spanning the group-mean differences that are projected out.
    constraint_rank_ : int
        Rank of the group-mean differences ``G^T X`` after the rank-revealing step
        (``m - 1`` for one attribute with ``m`` groups with distinct means; less when
        constraints are linearly dependent).
    constraint_singular_values_ : ndarray
        Singular values of the matrix of group-mean differences.
    covariance_rank_ : int or None
        The ``l`` used by Fair PCA-S, else None.
    groups_ : list of ndarray
        The group labels of each sensitive attribute.
    sensitive_names_ : list of str
        A name per sensitive attribute.
    mean_gap_ : float
        Largest absolute difference between a group's projected mean and the projected mean of
        the constrained rows, on the training data (the residual of the fairness constraint).
    pca_mean_gap_ : float
        The same quantity for standard PCA, for comparison.
    n_features_in_ : int
        Number of features seen during fit (sensitive columns excluded).
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    sklearn.decomposition.PCA : Principal component analysis without fairness constraint.

    References
    ----------
    M. Kleindessner, M. Donini, C. Russell, M. B. Zafar. Efficient fair PCA for fair
    representation learning. AISTATS 2023.

    Examples
    --------
    >>> import numpy as np
    >>> from fairpca import FairPCA
    >>> rng = np.random.default_rng(0)
    >>> groups = rng.integers(0, 2, size=200)
    >>> X = rng.normal(size=(200, 5)) + 2.0 * groups[:, None]
    >>> fpca = FairPCA(n_components=2).fit(X, sensitive_features=groups)
    >>> Y = fpca.transform(X)
    >>> bool(np.allclose(Y[groups == 0].mean(0), Y[groups == 1].mean(0)))
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        **FAIRNESS_CONSTRAINTS,
        "equalize_covariance": [
            Interval(Integral, 1, None, closed="left"),
            Interval(Real, 0, 1, closed="right"),
            None,
        ],
    }

    def __init__(
        self,
        n_components=None,
        *,
        constraint="demographic_parity",
        pos_label=1,
        eo_objective="positive",
        equalize_covariance=None,
        tradeoff=0.0,
        sensitive_columns=None,
        svd_solver="auto",
        tol=None,
        iterated_power="auto",
        n_oversamples=10,
        random_state=None,
    ):
        self.n_components = n_components
        self.constraint = constraint
        self.pos_label = pos_label
        self.eo_objective = eo_objective
        self.equalize_covariance = equalize_covariance
        self.tradeoff = tradeoff
        self.sensitive_columns = sensitive_columns
        self.svd_solver = svd_solver
        self.tol = tol
        self.iterated_power = iterated_power
        self.n_oversamples = n_oversamples
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, sensitive_features=None):
        """Fit fair PCA.

        Starts over: statistics accumulated by ``partial_fit`` are discarded, and none are
        kept in the fitted estimator. Before any d x d (or n x d) allocation the memory it
        needs is compared with the available memory (``FAIRPCA_MEMORY_LIMIT`` overrides
        it): with ``svd_solver="auto"`` a route that does not fit gives way to the
        randomized solver; otherwise the fit stops with
        :class:`~fairpca.InsufficientMemoryError` naming the width and the fix.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), dask array or dask DataFrame
            Training data (numeric). A Dask collection is fitted from statistics computed
            blockwise in one pass and reduced on the active Dask scheduler (e.g. a
            ``distributed.Client``); ``sensitive_features`` and ``y`` may then be Dask
            collections too, or columns named by ``sensitive_columns``.
        y : array-like of shape (n_samples,), default=None
            Labels; required for ``constraint="equal_opportunity"``, ignored otherwise.
        sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
            Group labels (any hashable type) of one attribute, or a 2-D array / DataFrame of
            several attributes (Section 3.5). Not needed when ``sensitive_columns`` is set.

        Returns
        -------
        self : FairPCA
            The fitted estimator.
        """
        self._fit(X, y, sensitive_features)
        return self

    def _fit(self, X, y, sensitive_features):
        """Validate the data, choose the solver and dispatch to the route that fits it."""
        self.__dict__.pop("_stream", None)  # fit starts over; partial_fit accumulates anew
        if _dask.is_dask_collection(X):
            return self._fit_dask(X, y, sensitive_features)
        X, sensitive_features = split_sensitive_columns(
            X, sensitive_features, self.sensitive_columns
        )
        check_numeric(X)
        # Finiteness is checked with the magnitude (check_magnitude), from one sum of squares.
        X = validate_data(
            self,
            X,
            dtype=[np.float64, np.float32],
            ensure_min_samples=2,
            copy=False,
            ensure_all_finite=False,
        )
        n_samples, n_features = X.shape
        check_n_components_bound(self.n_components, n_samples, n_features)
        encoding = encode_groups(sensitive_features, n_samples)
        objective_rows, constraint_rows = fit_rows(
            y, n_samples, self.constraint, self.pos_label, self.eo_objective
        )
        n_obj = n_samples if objective_rows is None else int(np.count_nonzero(objective_rows))
        if n_obj < 2:
            raise ValueError(
                f"Only {n_obj} row(s) to fit the variance objective on; need at least 2."
            )
        if constraint_rows is not None:
            constrained = groups_among(encoding, constraint_rows)
        else:
            constrained = encoding
        solver = self._choose_solver(n_obj, n_features)
        solver = self._solver_within_memory(solver, n_obj, n_features, constrained)
        if solver == "covariance_eigh" or self.equalize_covariance is not None:
            return self._fit_covariance(X, encoding, objective_rows, constraint_rows)
        fit_route = self._fit_full if solver == "full" else self._fit_randomized
        return fit_route(X, objective_rows, constraint_rows, encoding, constrained)

    def _fit_covariance(self, X, encoding, objective_rows, constraint_rows):
        """Exact route from the d x d scatter (and Fair PCA-S, Section 3.6): the sufficient
        statistics of one pass over the rows, then :meth:`_fit_from_statistics`."""
        if X.dtype != np.float64 or objective_rows is not None:
            # (otherwise the statistics read sum(X ** 2) off the trace of X^T X)
            check_magnitude(X)
        spec = _streaming.StatisticsSpec.for_estimator(self, X.shape[1])
        stats = _streaming.FairStatistics(spec)
        stats.update(X, encoding, constraint_rows, [list(g) for g in encoding.groups])
        return self._fit_from_statistics(stats)

    def _fit_full(self, X, objective_rows, constraint_rows, encoding, constrained):
        """Exact route for wide data (n < d): thin SVDs of ``Xc P`` and ``Xc`` (Algorithm 2
        with ``R^T Xc^T Xc R`` replaced by the SVD of ``Xc P``, ``P = I - Q Q^T``)."""
        Xc, _, sum_of_squares, mean, constraint, k = self._centred_problem(
            X, objective_rows, constraint_rows, encoding, constrained, implicit=False
        )
        solution = _solvers.solve_svd(Xc, constraint.basis, k, sum_of_squares=sum_of_squares)
        return self._store(solution, constraint, mean, X.dtype, Xc.shape[0])

    def _fit_randomized(self, X, objective_rows, constraint_rows, encoding, constrained):
        """Randomized route (k << min(n, d)): one range finder serves fair and standard PCA
        (:func:`fairpca._solvers.solve_randomized`). Contiguous float64 rows are centred
        inside its products (no n x d copy; a strided view would be copied by each)."""
        implicit = (
            objective_rows is None
            and X.dtype == np.float64
            and (X.flags.c_contiguous or X.flags.f_contiguous)
        )
        data, offset, sum_of_squares, mean, constraint, k = self._centred_problem(
            X, objective_rows, constraint_rows, encoding, constrained, implicit=implicit
        )
        solution = _solvers.solve_randomized(
            data,
            constraint.basis,
            k,
            n_oversamples=self.n_oversamples,
            n_iter=self._n_power_iterations(k, *data.shape),
            random_state=check_random_state(self.random_state),
            sum_of_squares=sum_of_squares,
            offset=offset,
        )
        return self._store(solution, constraint, mean, X.dtype, data.shape[0])

    def _centred_problem(
        self, X, objective_rows, constraint_rows, encoding, constrained, *, implicit
    ):
        """What the in-memory solvers take: ``(data, offset, sum((X - mean) ** 2), mean,
        constraint, k)`` for the objective rows.

        ``data`` is the centred copy ``X - mean`` (``offset`` None), or, when ``implicit``
        and the mean does not dominate the spread (at most about four digits lost, as in
        :meth:`fairpca._streaming.Moments.add_uncentred`), ``X`` itself with ``offset =
        mean`` for the solver to centre its products; then ``sum((X - mean) ** 2) = sum(X **
        2) - n ||mean||^2`` costs no pass.
        """
        raw_sum_of_squares = la.sum_of_squares(X)
        check_magnitude(X, sum_of_squares=raw_sum_of_squares)
        X_obj = X if objective_rows is None else X[objective_rows]
        n_obj = X_obj.shape[0]
        mean, constraint_mean, group_means = self._means(
            X_obj, objective_rows, constraint_rows, constrained
        )
        D = np.hstack([g - constraint_mean[:, None] for g in group_means])
        mean_energy = n_obj * float(mean @ mean)
        spread = max(raw_sum_of_squares - mean_energy, 0.0)
        if implicit and mean_energy <= _streaming.RAW_GRAM_MAX_MEAN_RATIO * spread:
            data, offset, sum_of_squares = X_obj, mean, spread
        else:
            data = np.subtract(X_obj, mean, dtype=np.float64)
            offset, sum_of_squares = None, la.sum_of_squares(data)
        scale = np.sqrt(sum_of_squares / (n_obj - 1) + mean @ mean)
        constraint = self._constraint(D, scale, X.dtype, encoding)
        k = self._resolve_n_components(n_obj, X.shape[1], constraint.rank)
        return data, offset, sum_of_squares, mean, constraint, k

    def _fit_from_statistics(self, stats):
        """Fit from sufficient statistics: Algorithms 1-2 (and Section 3.6) on d x d matrices.

        ``fit``'s covariance route, ``partial_fit``, ``fit_chunks`` and Dask fits all end
        here, so the same rows give the same projection however they were read.
        """
        tables = stats.check_fittable()
        n_obj, n_features = stats.objective.count, stats.n_features
        mean = stats.objective.mean
        # Each attribute's columns are centred on the mean its own group sums give (equal to
        # constraint_mean in exact arithmetic), so that their one known linear dependence
        # (sum_g n_g (mean_g - mean) = 0, Section 3.4) holds to float64 rounding.
        D = np.hstack(
            [t.sums / t.counts - (t.sums.sum(1) / t.counts.sum())[:, None] for t in tables]
        )
        C = stats.objective.scatter(copy=False)  # the moments stay valid; C is only read
        scale = np.sqrt(max(np.trace(C) / max(n_obj - 1, 1), 0.0) + mean @ mean)
        groups = GroupEncoding(
            np.zeros((0, len(tables)), dtype=np.intp),
            [np.asarray(t.labels, dtype=object) for t in tables],
            [t.name for t in tables],
        )
        constraint = self._constraint(D, scale, stats.dtype, groups)
        Q = constraint.basis
        k = self._resolve_n_components(n_obj, n_features, constraint.rank)
        covariance_rank = None
        if self.equalize_covariance is not None:
            covariance_rank = self._resolve_covariance_rank(k, n_features, constraint.rank)
            covariances = [
                (
                    [m.scatter() / (m.count - 1) for m in t.scatters],
                    t.counts / stats.constraint_count,
                )
                for t in tables
            ]
            L = _solvers.covariance_subspace(Q, covariances, covariance_rank)
            solution = _solvers.solve_covariance_equalizing(C, Q, L, k, n_obj)
        elif self._statistics_solver(n_obj, n_features) == "randomized":
            solution = _solvers.solve_covariance_randomized(
                C,
                Q,
                k,
                n_obj,
                n_oversamples=self.n_oversamples,
                n_iter=self._n_power_iterations(k, n_obj, n_features),
                random_state=check_random_state(self.random_state),
                dtype=stats.dtype,
            )
        else:
            solution = _solvers.solve_covariance(C, Q, k, n_obj)
        return self._store(solution, constraint, mean, stats.dtype, n_obj, covariance_rank)

    # ------------------------------------------------------------------ streaming
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None, *, sensitive_features=None):
        """Add a chunk of rows to the accumulated statistics, then refit from them.

        The statistics (counts, means, scatter matrices and per-group sums, in float64
        accumulators) merge exactly, so after the last chunk the projection equals ``fit`` on
        all the rows. float32 chunks stay float32: products of their shifted rows are formed
        in float32 and summed in float64, so the result agrees with ``fit`` to float32
        rounding.
        Groups may first appear in a later chunk. While the rows seen so far cannot define a
        fit (e.g. a single group), the chunk is kept and a ``UserWarning`` says why nothing
        was refitted. A chunk that fails validation raises and changes nothing. The
        statistics (O(d^2) floats, one d x d matrix per group for Fair PCA-S) stay in the
        estimator, and in its pickle, so that fitting can continue; ``fit`` and
        ``fit_chunks`` discard them.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A chunk of rows (numeric).
        y : array-like of shape (n_samples,), default=None
            Labels of the chunk; required for ``constraint="equal_opportunity"``.
        sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
            Group labels of the chunk (not needed when ``sensitive_columns`` is set).

        Returns
        -------
        self : FairPCA
            The estimator, refitted on all the rows seen so far.
        """
        if _dask.is_dask_collection(X):
            raise TypeError(
                "partial_fit takes in-memory chunks; fit a Dask collection with fit(X, ...), "
                "which computes the statistics on the cluster in one pass."
            )
        stream = getattr(self, "_stream", None)
        with self._restore_input_attributes_on_error(reset=stream is None):
            X, encoding, categories, positive = self._validate_chunk(
                X, y, sensitive_features, reset=stream is None
            )
            spec = _streaming.StatisticsSpec.for_estimator(self, X.shape[1])
            if stream is None:
                candidate = _streaming.FairStatistics(spec)
            elif stream.spec.satisfies(spec):
                candidate = copy.copy(stream)
            else:
                raise ValueError(
                    "constraint, eo_objective, pos_label or equalize_covariance changed since "
                    "the first partial_fit call, so the accumulated statistics do not serve the "
                    "new parameters. Restore them, or call fit to start over."
                )
            candidate.update(X, encoding, positive, categories)
            try:
                candidate.check_fittable(self.n_components)
            except _streaming.InsufficientStatisticsError as reason:
                self._stream = candidate
                warnings.warn(
                    f"FairPCA.partial_fit kept the chunk but cannot fit yet: {reason} Pass "
                    "more chunks.",
                    UserWarning,
                    stacklevel=2,
                )
                return self
            self._fit_from_statistics(candidate)
        self._stream = candidate
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_chunks(
        self, source, y=None, *, sensitive_features=None, chunk_rows=None, progress=False
    ):
        """Fit in one pass over chunks of rows, in memory bounded by one chunk plus d x d.

        Equivalent to ``partial_fit`` on every chunk, but the projection is computed once, at
        the end. Like ``fit``, it starts over and keeps no statistics in the fitted estimator
        (it pickles as small as after ``fit``); a later ``partial_fit`` starts a new stream.
        To add rows later, fit with ``partial_fit`` from the start.

        Parameters
        ----------
        source : ndarray, numpy.memmap, str, path-like or iterable
            An array or memmap (sliced into chunks); the path of a ``.npy`` file (read
            sequentially, chunk by chunk); a Parquet file or directory (the sensitive
            attributes are the columns named by ``sensitive_columns``); or an iterable of
            ``(X, sensitive_features)`` or ``(X, sensitive_features, y)`` tuples.
        y : array-like, str or None, default=None
            Labels aligned with the rows of an array or ``.npy`` source, or the name of the
            label column of a Parquet source (equal opportunity).
        sensitive_features : array-like or None, default=None
            Group labels aligned with the rows of an array or ``.npy`` source.
        chunk_rows : int or None, default=None
            Rows per chunk of array, ``.npy`` and Parquet sources (default: about 64 MiB).
        progress : bool, default=False
            Show a progress bar (rich, else tqdm when installed).

        Returns
        -------
        self : FairPCA
            The fitted estimator.
        """
        chunks = _chunked.as_chunk_source(
            source,
            sensitive_features,
            y,
            chunk_rows=chunk_rows,
            sensitive_columns=sensitive_column_list(self.sensitive_columns),
        )
        stats = None
        with self._restore_input_attributes_on_error(reset=True):
            rows = _chunked.progress(
                chunks, getattr(chunks, "n_rows", None), progress, "FairPCA.fit_chunks"
            )
            for index, (X, sensitive, y_chunk) in enumerate(rows):
                try:
                    X, encoding, categories, positive = self._validate_chunk(
                        X, y_chunk, sensitive, reset=stats is None, from_source=True
                    )
                except (TypeError, ValueError) as error:
                    error.add_note(f"(in chunk {index} of the source)")
                    raise
                if stats is None:
                    spec = _streaming.StatisticsSpec.for_estimator(self, X.shape[1])
                    stats = _streaming.FairStatistics(spec)
                stats.update(X, encoding, positive, categories)
            if stats is None:
                raise ValueError("The chunk source yielded no rows; nothing to fit.")
            self._fit_from_statistics(stats)
        self.__dict__.pop("_stream", None)  # the fitted estimator keeps no statistics
        return self

    def _validate_chunk(self, X, y, sensitive_features, *, reset, from_source=False):
        """Validate one chunk fully (before any state changes) and encode its groups.

        A chunk source may deliver the sensitive attributes apart from the features (Parquet
        sources do); they are then used as given.
        """
        if from_source and sensitive_features is not None:
            X = drop_sensitive_columns(X, self.sensitive_columns)
        else:
            X, sensitive_features = split_sensitive_columns(
                X, sensitive_features, self.sensitive_columns
            )
        check_numeric(X)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=reset, copy=False)
        check_magnitude(X)
        encoding, categories = _streaming.encode_chunk(sensitive_features, X.shape[0])
        positive = None
        if self.constraint == "equal_opportunity":
            positive = positive_rows(y, X.shape[0], self.pos_label)
        return X, encoding, categories, positive

    @contextlib.contextmanager
    def _restore_input_attributes_on_error(self, *, reset):
        """Undo the input attributes that ``validate_data(reset=True)`` set, on failure."""
        names = ("n_features_in_", "feature_names_in_")
        saved = {name: self.__dict__[name] for name in names if name in self.__dict__}
        try:
            yield
        except BaseException:
            if reset:
                for name in names:
                    self.__dict__.pop(name, None)
                self.__dict__.update(saved)
            raise

    def _fit_dask(self, X, y, sensitive_features, statistics=None):
        """Fit a Dask collection from statistics computed and reduced on the cluster (or
        from ``statistics`` of the same collection that serve this fit). Returns the
        statistics used."""
        columns = sensitive_column_list(self.sensitive_columns)
        if columns and sensitive_features is not None:
            raise ValueError(
                "Both sensitive_columns and sensitive_features were given; use one of them."
            )
        if not columns and sensitive_features is None:
            _streaming.encode_chunk(None, 0)  # raises "sensitive_features is required"
        if self.constraint == "equal_opportunity" and y is None:
            positive_rows(None, 0, self.pos_label)  # raises "needs y"
        meta = _dask.feature_meta(X, columns)
        check_numeric(meta)
        with self._restore_input_attributes_on_error(reset=True):
            validate_data(self, meta, dtype=[np.float64, np.float32], ensure_min_samples=0)
            spec = _streaming.StatisticsSpec.for_estimator(self, self.n_features_in_)
            if statistics is None or not statistics.spec.satisfies(spec):
                statistics = _dask.fit_statistics(spec, X, sensitive_features, y, columns)
            self._fit_from_statistics(statistics)
            return statistics

    def _means(self, X_obj, objective_rows, constraint_rows, encoding):
        """Objective mean, constraint-row mean and per-group means in one pass over X."""
        n_obj = X_obj.shape[0]
        sizes = [len(labels) for labels in encoding.groups]
        if constraint_rows is None or objective_rows is not None:
            weights = group_sum_weights(encoding.codes, sizes, total=False)
            sums = with_total(la.column_sums(X_obj, weights), sizes)
            mean = sums[:, 0] / n_obj
            constraint_mean = mean
        else:  # objective on all rows, constraint on the positive rows
            positive = constraint_rows.astype(np.float64)[:, None]
            codes = np.zeros((n_obj, encoding.n_attributes), dtype=np.intp)
            codes[constraint_rows] = encoding.codes
            weights = group_sum_weights(codes, sizes, constraint_rows)
            sums = la.column_sums(X_obj, np.hstack([weights[:, :1], positive, weights[:, 1:]]))
            mean = sums[:, 0] / n_obj
            constraint_mean = sums[:, 1] / positive.sum()
            sums = np.hstack([sums[:, :1], sums[:, 2:]])
        group_means = []
        start = 1
        for counts in encoding.counts:
            stop = start + counts.size
            group_means.append(sums[:, start:stop] / counts)
            start = stop
        return mean, constraint_mean, group_means

    def _constraint(self, D, scale, dtype, groups) -> _Constraint:
        """The constrained directions: an orthonormal basis of the span of the group-mean
        differences ``D``, keeping the directions whose singular values exceed ``tol`` times
        the data scale (Algorithm 2's null space of ``Z^T X``, found by a rank-revealing SVD)."""
        tol = self.tol
        if tol is None:
            tol = DEFAULT_TOL if dtype == np.float64 else DEFAULT_TOL_FLOAT32
        basis, singular_values = la.orthonormal_basis(D, tol * max(scale, np.finfo(float).tiny))
        return _Constraint(D, basis, singular_values, groups)

    def _choose_solver(self, n, d):
        if self.svd_solver != "auto":
            return self.svd_solver
        k = self.n_components
        if d <= 1000 and n >= 10 * d:
            return "covariance_eigh"
        if max(n, d) <= 500 or k is None or k >= 0.8 * min(n, d):
            return "covariance_eigh" if n >= d else "full"
        return "randomized"

    def _solver_within_memory(self, solver, n, d, encoding: GroupEncoding) -> str:
        """``solver``, or the randomized one when ``svd_solver="auto"`` and only that fits;
        raises :class:`~fairpca.InsufficientMemoryError` before allocating when the
        matrices of the route do not fit."""
        n_groups = sum(len(labels) for labels in encoding.groups)
        if self.equalize_covariance is not None:
            _memory.require(
                _memory.covariance_bytes(d, n_groups),
                f"the d x d matrices of Fair PCA-S (one scatter per group, {n_groups} "
                f"groups) for n_features={d}",
                "Reduce the number of columns (drop identifier-like columns, cap one-hot "
                "categories), or use fair PCA (equalize_covariance=None) with "
                "svd_solver='randomized' and a small n_components.",
            )
            return solver
        size = (self.n_components or min(n, d)) + n_groups + self.n_oversamples
        needed = {
            "covariance_eigh": _memory.covariance_bytes(d),
            "full": _memory.svd_bytes(n, d),
            "randomized": _memory.randomized_bytes(n, d, size),
        }
        if _memory.fits(needed[solver]):
            return solver
        auto = self.svd_solver == "auto" and self.n_components is not None
        if auto and _memory.fits(needed["randomized"]):
            return "randomized"
        _memory.require(
            needed[solver],
            f"the matrices of svd_solver={solver!r} for n_samples={n} and n_features={d}",
            "Reduce the number of columns (drop identifier-like columns, cap one-hot "
            "categories), or set a small n_components with svd_solver='randomized'.",
        )
        return solver

    def _statistics_solver(self, n, d) -> str:
        """The solver from the d x d scatter: the policy's, or the randomized one when the
        exact eigensolver's matrices do not fit beside the scatter (``svd_solver="auto"``)."""
        solver = self._choose_solver(n, d)
        beside_scatter = _memory.covariance_bytes(d) - _memory.FLOAT_BYTES * d * d
        if solver == "randomized" or _memory.fits(beside_scatter):
            return solver
        if self.svd_solver == "auto" and self.n_components is not None:
            return "randomized"
        _memory.require(
            beside_scatter,
            f"the d x d eigensolver matrices for n_features={d}",
            "Set a small n_components with svd_solver='randomized', or reduce the number of "
            "columns.",
        )
        return solver

    def _n_power_iterations(self, k, n, d):
        if self.iterated_power != "auto":
            return self.iterated_power
        return 7 if k < 0.1 * min(n, d) else 4

    def _resolve_n_components(self, n_obj, n_features, rank):
        return resolve_n_components(self.n_components, n_obj, n_features, rank)

    def _resolve_covariance_rank(self, k, n_features, rank):
        available = n_features - rank
        value = self.equalize_covariance
        if isinstance(value, Integral) and not isinstance(value, bool) and value > 1:
            if not k <= value <= available:
                raise ValueError(
                    f"equalize_covariance={value} must satisfy n_components <= l <= "
                    f"n_features - constraint rank, i.e. {k} <= l <= {available}."
                )
            return int(value)
        # a fraction f of d (the int 1 means f = 1.0, i.e. plain fair PCA)
        return max(k, min(available, int(np.floor(float(value) * n_features))))

    def _store(self, solution, constraint, mean, dtype, n_obj, covariance_rank=None):
        """Set the fitted attributes: signs fixed as scikit-learn's ``svd_flip`` does, the
        residual of the constraint measured on both direction sets."""
        k = solution.fair_components.shape[1]
        both = la.flip_columns(np.hstack([solution.fair_components, solution.pca_components]))
        fair, pca = both[:, :k], both[:, k:]
        self.components_ = np.ascontiguousarray(fair.T).astype(dtype, copy=False)
        self.pca_components_ = np.ascontiguousarray(pca.T).astype(dtype, copy=False)
        self.explained_variance_ = solution.fair_variance.astype(dtype, copy=False)
        self.pca_explained_variance_ = solution.pca_variance.astype(dtype, copy=False)
        total = solution.total_variance
        ratio = (
            solution.fair_variance / total if total > 0 else np.zeros_like(solution.fair_variance)
        )
        self.explained_variance_ratio_ = ratio.astype(dtype, copy=False)
        self.singular_values_ = np.sqrt(solution.fair_variance * (n_obj - 1)).astype(
            dtype, copy=False
        )
        self.mean_ = mean.astype(dtype, copy=False)
        self.n_components_ = k
        self.n_samples_ = n_obj
        self.constraint_basis_ = np.ascontiguousarray(constraint.basis.T)
        self.constraint_rank_ = constraint.rank
        self.constraint_singular_values_ = constraint.singular_values
        self.groups_ = list(constraint.groups.groups)
        self.sensitive_names_ = list(constraint.groups.names)
        self.covariance_rank_ = covariance_rank
        D = constraint.D
        gaps = np.abs(both.T @ D) if D.size else np.zeros((2 * k, 1))
        self.mean_gap_ = float(gaps[:k].max())
        self.pca_mean_gap_ = float(gaps[k:].max())
        return self

    # ------------------------------------------------------------------ transforming
    def transform(self, X):
        """Project ``X`` on the fair directions (and the scaled PCA ones if ``tradeoff > 0``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Data to project. Sensitive columns named by ``sensitive_columns`` are dropped.
            A Dask array or DataFrame is projected lazily, block by block (a Dask array or a
            Dask DataFrame with the ``get_feature_names_out`` columns comes back).

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components) or (n_samples, 2 * n_components)
            ``(X - mean_) @ components_.T``, followed by
            ``tradeoff * (X - mean_) @ pca_components_.T`` when ``tradeoff > 0``.
        """
        check_is_fitted(self)
        if _dask.is_dask_collection(X):
            columns = (
                sensitive_column_list(self.sensitive_columns) if _dask.is_dask_frame(X) else []
            )
            meta = _dask.feature_meta(X, [c for c in columns if c in X.columns])
            validate_data(
                self, meta, dtype=[np.float64, np.float32], reset=False, ensure_min_samples=0
            )
            return _dask.transform(self, X)
        X = drop_sensitive_columns(X, self.sensitive_columns)
        check_numeric(X)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        k = self.components_.shape[0]
        appended = self.tradeoff > 0
        dtype = np.result_type(X.dtype, self.mean_.dtype, self.components_.dtype)
        X_new = np.empty((X.shape[0], 2 * k if appended else k), dtype=dtype)
        # By blocks of rows into the output: one centred block at a time instead of a centred
        # copy of X and a product per part (each row's projection is computed alone).
        step = _memory.rows_per_block(X.shape[1], X.dtype.itemsize)
        for start in range(0, X.shape[0], step):
            Xc = X[start : start + step] - self.mean_
            X_new[start : start + step, :k] = Xc @ self.components_.T
            if appended:
                X_new[start : start + step, k:] = self.tradeoff * (Xc @ self.pca_components_.T)
        return X_new

    def inverse_transform(self, X):
        """Map fair features back to the input space: ``X[:, :k] @ components_ + mean_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components) or (n_samples, 2 * n_components)
            Output of ``transform``; appended PCA features are ignored.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features_in_)
        """
        check_is_fitted(self)
        X = check_array(X, dtype=[np.float64, np.float32])
        if X.ndim != 2 or X.shape[1] not in (self.n_components_, 2 * self.n_components_):
            raise ValueError(
                f"inverse_transform expects an array with {self.n_components_} (or "
                f"{2 * self.n_components_}) columns, as returned by transform; got shape "
                f"{X.shape}."
            )
        return X[:, : self.n_components_] @ self.components_ + self.mean_

    def get_feature_names_out(self, input_features=None):
        """Output feature names: ``fairpca0..k-1`` then ``pca0..k-1`` when ``tradeoff > 0``.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Only used to validate feature names against ``feature_names_in_``.

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        return output_feature_names(self, input_features, "fairpca", "pca")

    def __sklearn_is_fitted__(self):
        return hasattr(self, "components_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.target_tags.required = False
        return tags


def fit_from_shared_statistics(estimators, X, y=None):
    """Fit several :class:`FairPCA` estimators on the same Dask collection ``X`` (group
    columns named by their ``sensitive_columns``), one pass over ``X`` per distinct row
    selection: estimators that differ in ``n_components``, ``tradeoff`` or the solver share
    the sufficient statistics (``X^T X`` and the group sums), and a Fair PCA-S fit's
    statistics (with the group scatters) serve the plain ones. So a grid of k, every lambda
    and the standard PCA directions (``pca_components_``) cost one pass, not one each.
    Equal-opportunity fits (rows of ``y == pos_label``) take their own pass.

    Returns the estimators, fitted.
    """
    shared: dict[tuple, object] = {}
    # those that need the group scatters first: their statistics serve the others
    for estimator in sorted(estimators, key=lambda e: e.equalize_covariance is None):
        estimator._validate_params()
        rows = (estimator.constraint, estimator.eo_objective, estimator.pos_label)
        eo = estimator.constraint == "equal_opportunity"
        key = rows if eo else ("demographic_parity",)
        shared[key] = estimator._fit_dask(X, y if eo else None, None, shared.get(key))
    return estimators
