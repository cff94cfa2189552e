"""Mergeable sufficient statistics of fair PCA (``partial_fit``, chunked and Dask fits).

Fair PCA (Problem (4), Algorithms 1-2 of Kleindessner et al. 2023) depends on the data only
through, in float64:

- the count, mean and centred scatter ``Xc^T Xc`` of the rows of the variance objective;
- the count of the constraint rows (all rows, or the rows with ``y == pos_label`` for
  equal opportunity, Section 3.2);
- per sensitive attribute, the group counts and column sums on the constraint rows (the
  columns of ``X^T G`` with ``G`` the centred group indicators, Sections 3.4-3.5);
- for Fair PCA-S (Section 3.6), the centred scatter of every group on the constraint rows.

All of them merge exactly: counts and sums add, and scatters merge by the pairwise rule of
Chan, Golub and LeVeque (1979), ``M = M_a + M_b + (n_a n_b / n) delta delta^T`` with
``delta = mean_b - mean_a``. Within a stream, rows are added as shifted moments (rows minus
a shift ``c`` close to their mean, :class:`Moments`): one ``syrk`` ``(X - c)^T (X - c)`` per
block, and the moments are re-centred before the final subtraction could cancel more than
about two digits. Sums are float64; float32 rows keep float32 products, summed in float64
every few thousand rows.

Groups may first appear in a later chunk. Group labels are any hashables; the final order is
the one of :func:`fairpca._groups.encode_groups` (category order for categoricals, sorted
when sortable, else order of first appearance).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.linalg import blas

from . import _linalg as la
from . import _memory
from ._groups import (
    GroupEncoding,
    _factorize,
    check_group_sizes,
    encode_labels,
    group_sum_weights,
    with_total,
)
from ._memory import BLOCK_ROWS, rows_per_block
from ._validation import check_magnitude, positive_rows

# Largest ratio rows * ||mean||^2 / trace(centred scatter) for which a block's scatter is taken
# from its raw Gram matrix (at most ~4 digits lost to the subtraction); above it, blocks are
# centred explicitly in float64.
RAW_GRAM_MAX_MEAN_RATIO = 1e4

# Shifted moments: largest ratio n * ||mean - shift||^2 / trace(centred scatter) accepted
# before the moments are re-centred (at most ~2 digits lost to the final subtraction).
SHIFT_MAX_MEAN_RATIO = 1e2

# float32 blocks: products are summed in float32 over at most this many rows, then added to
# the float64 accumulator.
FLOAT32_FLUSH_ROWS = BLOCK_ROWS


def block_rows(n_features: int, itemsize: int = 8) -> int:
    """Rows per shifted block: about 64 MiB, between 256 and 16384 rows."""
    return rows_per_block(n_features, itemsize, most=16384)


class InsufficientStatisticsError(ValueError):
    """The rows seen so far do not define a fair projection yet (e.g. a single group)."""


class Moments:
    """Count, mean and centred scatter ``sum (x - mean)(x - mean)^T`` of rows, in float64.

    Kept as shifted moments: a shift ``c`` (the mean of the first rows, or the mean at the
    last re-centring), the shifted sum ``s = sum (x - c)`` and the upper triangle of
    ``U = sum (x - c)(x - c)^T``; then ``mean = c + s / n`` and the scatter is
    ``U - s s^T / n``. A block adds ``(X - c)^T (X - c)`` to ``U`` (no per-block mean pass
    or rank-1 update), which is accurate while ``n ||s / n||^2`` stays small beside the
    trace of the scatter; a block that would break that bound is added centred on its own
    mean with the pairwise rule of Chan, Golub and LeVeque (1979) after re-centring.

    ``U`` grows by BLAS ``syrk`` in place, called directly: NumPy's ``U += X.T @ X`` forms a
    d x d temporary and mirrors it, and is 7% slower for 16384 x 500 float64 blocks, 19% for
    4096 x 2000 and 33% for 2621 x 6400 float32 blocks (CelebA-sized streams); for the
    one-shot Gram matrix of a covariance fit NumPy's ``X.T @ X`` takes 14-16% longer than
    ``dsyrk`` (100000 x 100, 20000 x 400, 10000 x 800; one thread), about as much of the fit.

    float64 blocks go straight into the float64 ``U``. float32 blocks stay float32 end to end
    (``x - c`` and ``ssyrk``) for at most ``FLOAT32_FLUSH_ROWS`` rows at a time, and those
    partial products are summed in float64.
    """

    def __init__(self, n_features: int):
        self.n_features = n_features
        self.count = 0
        self.shift = np.zeros(n_features)
        self.shifted_sum = np.zeros(n_features)
        self._upper: np.ndarray | None = None  # U (upper triangle), float64, Fortran order
        self._pending: np.ndarray | None = None  # float32 products not yet in U
        self._pending_rows = 0

    @property
    def mean(self) -> np.ndarray:
        if self.count == 0:
            return np.zeros(self.n_features)
        return self.shift + self.shifted_sum / self.count

    # ------------------------------------------------------------------ adding rows
    def add_rows(self, X: np.ndarray) -> None:
        """Add the rows of ``X`` (float32 or float64), block by block."""
        step = block_rows(self.n_features, X.dtype.itemsize)
        for start in range(0, X.shape[0], step):
            block = X[start : start + step]
            shifted = self.shifted(block)
            self.add_block(block, shifted, shifted.sum(axis=0, dtype=np.float64))

    def add_block(self, block: np.ndarray, shifted: np.ndarray, shifted_sum: np.ndarray) -> None:
        """Add ``block`` given as its shifted rows (:meth:`shifted`) and their float64 sums:
        shifted if that keeps the bound of :meth:`add_shifted`, else centred on its mean."""
        shift = self.shift
        if not self.add_shifted(shifted, shifted_sum):
            block_mean = shift + shifted_sum / block.shape[0]
            self.add_centred(np.subtract(block, block_mean, dtype=np.float64), block_mean)

    def shifted(self, block: np.ndarray) -> np.ndarray:
        """``block - shift`` in the block's dtype (the first block chooses the shift)."""
        if self.count == 0:
            self.shift = block.mean(axis=0, dtype=np.float64)
        elif block.dtype == np.float64 and not self.shift.any():
            return block  # shift 0 (raw Gram start): the rows themselves, no copy
        if block.dtype != np.float64:
            exact = self.shift.astype(block.dtype).astype(np.float64)
            if not np.array_equal(exact, self.shift):
                self._set_shift(exact)  # a shift the block's dtype represents exactly
        return np.subtract(block, self.shift.astype(block.dtype), dtype=block.dtype)

    def add_shifted(self, shifted: np.ndarray, shifted_sum: np.ndarray) -> bool:
        """Add rows given as ``block - shift`` (:meth:`shifted`), with ``shifted_sum`` their
        float64 column sums. Returns ``False`` and adds nothing when the rows would move the
        mean so far from the shift that the final subtraction loses more than about two
        digits; the caller then adds them with :meth:`add_centred`."""
        rows = shifted.shape[0]
        if rows == 0:
            return True
        total = self.count + rows
        new_sum = self.shifted_sum + shifted_sum
        offset = float(new_sum @ new_sum) / total
        trace = self._trace() + la.sum_of_squares(shifted)
        if offset > SHIFT_MAX_MEAN_RATIO * max(trace - offset, 0.0):
            return False
        if shifted.dtype == np.float64:
            self._add_gram(shifted)
        else:
            self._add_float32(shifted)
        self.count = total
        self.shifted_sum = new_sum
        return True

    def add_centred(self, centred: np.ndarray, block_mean: np.ndarray) -> None:
        """Add a block given centred on its own mean (float64, ``(rows, d)``)."""
        if centred.shape[0] == 0:
            return
        self._centre()
        self._add_gram(centred)
        self._merge_centred(centred.shape[0], block_mean)

    def add_uncentred(self, block: np.ndarray, block_mean: np.ndarray) -> bool:
        """Start the moments from the raw Gram matrix ``X^T X`` of a float64 block.

        The scatter is ``X^T X - rows * mean mean^T`` (what scikit-learn's covariance PCA
        computes), i.e. shifted moments with shift 0, and needs no centred copy of ``X``.
        That subtraction loses digits when the mean dominates the spread, so when ``rows *
        ||mean||^2 > RAW_GRAM_MAX_MEAN_RATIO * trace(scatter)`` (more than about four digits
        would be lost), or when rows were added before, nothing is added and ``False`` is
        returned: the caller then adds the rows in shifted blocks. The trace of ``X^T X`` is
        ``sum(X ** 2)``, the overflow check of :func:`fairpca._validation.check_magnitude`
        (which raises ``ValueError``), at no extra cost.
        """
        rows = block.shape[0]
        if rows == 0:
            return True
        if self.count:
            return False
        upper = blas.dsyrk(1.0, block.T, trans=0)  # syrk sees block.T as ``a``
        trace = float(np.trace(upper))
        check_magnitude(block, sum_of_squares=trace)
        mean_energy = rows * float(block_mean @ block_mean)
        if mean_energy > RAW_GRAM_MAX_MEAN_RATIO * max(trace - mean_energy, 0.0):
            return False
        self._upper = upper
        self.shift = np.zeros(self.n_features)
        self.shifted_sum = rows * np.asarray(block_mean, dtype=np.float64)
        self.count = rows
        return True

    def merge(self, other: Moments) -> None:
        """Merge ``other`` into ``self`` in place (``other`` is re-centred, not changed)."""
        if other.count == 0:
            return
        other._flush()
        other._centre()
        if self.count == 0:
            self.shift = other.shift.copy()
            self.shifted_sum = other.shifted_sum.copy()
            self._upper = other._upper.copy(order="F")
            self.count = other.count
            return
        self._centre()
        upper = self._ensure_upper()
        upper += other._upper
        self._merge_centred(other.count, other.shift)

    # ------------------------------------------------------------------ internals
    def _add_gram(self, rows: np.ndarray) -> None:
        """``U += rows^T rows`` (float64 rows; syrk sees ``rows.T`` as ``a``)."""
        self._upper = blas.dsyrk(
            1.0, rows.T, beta=1.0, c=self._ensure_upper(), trans=0, overwrite_c=True
        )

    def _merge_centred(self, count: int, mean: np.ndarray) -> None:
        """Pairwise update for rows already in ``U`` centred on ``mean``; ``self`` is
        centred (zero shifted sum): ``U += (n_a n_b / n) delta delta^T``."""
        total = self.count + count
        if self.count == 0:
            self.shift = np.array(mean, dtype=np.float64)
        else:
            delta = mean - self.shift
            la.add_outer(self._upper, self.count * count / total, delta, delta)
            self.shift = self.shift + delta * (count / total)
        self.shifted_sum = np.zeros(self.n_features)
        self.count = total

    def _centre(self) -> None:
        """Move the shift to the mean. With ``d = s / n`` the update of :meth:`_set_shift` is
        ``U - (d s^T + s d^T) + n d d^T = U - s s^T / n``."""
        mean = self.mean
        if self.count and self.shifted_sum.any():
            s = self.shifted_sum
            la.add_outer(self._ensure_upper(), -1.0 / self.count, s, s)
        self.shift = mean
        self.shifted_sum = np.zeros(self.n_features)

    def _set_shift(self, shift: np.ndarray) -> None:
        """Move the shift: ``U' = U - (d s^T + s d^T) + n d d^T`` with ``d = shift' - shift``."""
        shift = np.array(shift, dtype=np.float64)
        delta = shift - self.shift
        if self.count and np.any(delta):
            upper = self._ensure_upper()
            la.add_outer(upper, -1.0, delta, self.shifted_sum)
            la.add_outer(upper, -1.0, self.shifted_sum, delta)
            la.add_outer(upper, float(self.count), delta, delta)
            self.shifted_sum = self.shifted_sum - self.count * delta
        self.shift = shift

    def _add_float32(self, shifted: np.ndarray) -> None:
        first = self._pending_rows == 0
        if self._pending is None:
            self._pending = np.zeros((self.n_features, self.n_features), np.float32, order="F")
        self._pending = blas.ssyrk(
            1.0, shifted.T, beta=0.0 if first else 1.0, c=self._pending, trans=0, overwrite_c=True
        )
        self._pending_rows += shifted.shape[0]
        if self._pending_rows >= FLOAT32_FLUSH_ROWS:
            self._flush(release=False)

    def _flush(self, *, release: bool = True) -> None:
        """Add the pending float32 products to the float64 accumulator."""
        if self._pending_rows:
            upper = self._ensure_upper()
            upper += self._pending
            self._pending_rows = 0
        if release:
            self._pending = None

    def _trace(self) -> float:
        trace = 0.0 if self._upper is None else float(np.trace(self._upper))
        if self._pending_rows:
            trace += float(np.trace(self._pending, dtype=np.float64))
        return trace

    def _ensure_upper(self) -> np.ndarray:
        """The float64 part of ``U`` (``U`` is it plus the pending float32 products)."""
        if self._upper is None:
            self._upper = np.zeros((self.n_features, self.n_features), order="F")
        return self._upper

    # ------------------------------------------------------------------ reading
    def scatter(self, *, copy: bool = True) -> np.ndarray:
        """Full symmetric scatter matrix (d x d). ``copy=False`` re-centres and symmetrises
        the accumulator in place (no d x d copy; the moments stay valid)."""
        self._flush()
        if self._upper is None:
            return np.zeros((self.n_features, self.n_features))
        if not copy:
            self._centre()
            return la.symmetrize_upper(self._upper)
        upper = self._upper.copy(order="F")
        if self.count:
            la.add_outer(upper, -1.0 / self.count, self.shifted_sum, self.shifted_sum)
        return la.symmetrize_upper(upper)

    def __getstate__(self):
        self._flush()  # pickled (Dask) moments carry float64 products only
        return self.__dict__.copy()

    def __copy__(self):
        self._flush()
        out = Moments(self.n_features)
        out.count = self.count
        out.shift = self.shift.copy()
        out.shifted_sum = self.shifted_sum.copy()
        out._upper = None if self._upper is None else self._upper.copy(order="F")
        return out


def _strictly_increasing(labels: list) -> bool:
    """Whether ``labels`` are sorted without ties (False when they cannot be compared)."""
    try:
        return all(a < b for a, b in itertools.pairwise(labels))
    except TypeError:
        return False


@dataclass
class GroupTable:
    """Statistics of the groups of one sensitive attribute, in order of first appearance."""

    name: str
    n_features: int
    group_scatter: bool
    labels: list = field(default_factory=list)
    categories: list | None = None
    row_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sums: np.ndarray | None = None
    scatters: list = field(default_factory=list)

    def __post_init__(self):
        self._index = {label: i for i, label in enumerate(self.labels)}
        if self.sums is None:
            self.sums = np.zeros((self.n_features, 0))

    def positions(self, labels, categories=None) -> np.ndarray:
        """Global positions of chunk-local ``labels``, registering new ones."""
        if categories is not None:
            known = self.categories or []
            self.categories = known + [c for c in categories if c not in set(known)]
        new = [label for label in labels if label not in self._index]
        if new:
            extra = len(new)
            for label in new:
                self._index[label] = len(self.labels)
                self.labels.append(label)
            self.row_counts = np.concatenate([self.row_counts, np.zeros(extra, np.int64)])
            self.counts = np.concatenate([self.counts, np.zeros(extra, np.int64)])
            self.sums = np.hstack([self.sums, np.zeros((self.n_features, extra))])
            if self.group_scatter:
                d, count = self.n_features, len(self.scatters) + extra
                _memory.require(
                    _memory.FLOAT_BYTES * d * d * (count + 1),
                    f"the d x d scatter matrices of Fair PCA-S ({count} groups of attribute "
                    f"{self.name!r}) for n_features={d}",
                    "Reduce the number of columns or groups, or use fair PCA "
                    "(equalize_covariance=None).",
                )
                self.scatters += [Moments(self.n_features) for _ in range(extra)]
        return np.array([self._index[label] for label in labels], dtype=np.intp)

    def merge(self, other: GroupTable) -> None:
        where = self.positions(other.labels, other.categories)
        self.row_counts[where] += other.row_counts
        self.counts[where] += other.counts
        self.sums[:, where] += other.sums
        if self.group_scatter:
            for i, moments in zip(where, other.scatters, strict=True):
                self.scatters[i].merge(moments)

    def order(self) -> np.ndarray:
        """Permutation giving the label order of :func:`fairpca._groups.encode_groups`."""
        if not self.labels:
            return np.zeros(0, dtype=np.intp)
        if self.categories is not None:  # category order; labels of later plain chunks last
            rank = {c: i for i, c in enumerate(self.categories)}
            return np.array(
                sorted(
                    range(len(self.labels)),
                    key=lambda i: rank.get(self.labels[i], len(rank) + i),
                ),
                dtype=np.intp,
            )
        if _strictly_increasing(self.labels):  # already in sorted order (one fit's labels)
            return np.arange(len(self.labels), dtype=np.intp)
        _, uniques = _factorize(pd.Series(self.labels, dtype=object), self.name)
        return np.array([self._index[label] for label in uniques], dtype=np.intp)

    def ordered(self) -> GroupTable:
        """The table with its groups in :meth:`order` (itself when already so; read it only)."""
        perm = self.order()
        if np.array_equal(perm, np.arange(perm.size)):
            return self
        labels = [self.labels[i] for i in perm]
        return GroupTable(
            self.name,
            self.n_features,
            self.group_scatter,
            labels,
            self.categories,
            self.row_counts[perm],
            self.counts[perm],
            self.sums[:, perm],
            [self.scatters[i] for i in perm] if self.group_scatter else [],
        )

    def __copy__(self):
        return GroupTable(
            self.name,
            self.n_features,
            self.group_scatter,
            list(self.labels),
            None if self.categories is None else list(self.categories),
            self.row_counts.copy(),
            self.counts.copy(),
            self.sums.copy(),
            [copy.copy(m) for m in self.scatters],
        )


@dataclass(frozen=True)
class StatisticsSpec:
    """Which rows feed the objective and the constraint, and what is accumulated."""

    n_features: int
    objective_positive: bool = False  # equal opportunity, eo_objective="positive"
    constraint_positive: bool = False  # equal opportunity
    pos_label: object = None
    group_scatter: bool = False  # Fair PCA-S

    @classmethod
    def for_estimator(cls, estimator, n_features: int) -> StatisticsSpec:
        eo = estimator.constraint == "equal_opportunity"
        return cls(
            n_features=n_features,
            objective_positive=eo and estimator.eo_objective == "positive",
            constraint_positive=eo,
            pos_label=estimator.pos_label if eo else None,
            group_scatter=estimator.equalize_covariance is not None,
        )

    def satisfies(self, needed: StatisticsSpec) -> bool:
        """Whether statistics collected under ``self`` can serve a fit that needs ``needed``."""
        same_rows = (
            self.n_features == needed.n_features
            and self.objective_positive == needed.objective_positive
            and self.constraint_positive == needed.constraint_positive
            and self.pos_label == needed.pos_label
        )
        return same_rows and (self.group_scatter or not needed.group_scatter)


class FairStatistics:
    """All sufficient statistics of a fair PCA fit; update with chunks, merge, then solve."""

    def __init__(self, spec: StatisticsSpec):
        d = spec.n_features
        _memory.require(
            _memory.FLOAT_BYTES * d * d,
            f"the d x d scatter matrix of the statistics for n_features={d}",
            "Reduce the number of columns (drop identifier-like columns, cap one-hot categories).",
        )
        self.spec = spec
        self.objective = Moments(spec.n_features)
        self.constraint_count = 0
        self.tables: list[GroupTable] | None = None
        self.dtype: np.dtype | None = None

    @property
    def n_features(self) -> int:
        return self.spec.n_features

    # ------------------------------------------------------------------ accumulating
    def update(
        self,
        X: np.ndarray,
        encoding: GroupEncoding,
        positive: np.ndarray | None = None,
        categories: list | None = None,
    ) -> None:
        """Add a validated chunk: float ``X`` (rows, d), its group encoding and, for equal
        opportunity, the boolean mask of rows with ``y == pos_label``."""
        self._check_attributes(encoding)
        categories = categories or [None] * encoding.n_attributes
        where = [
            table.positions(list(labels), cats)
            for table, labels, cats in zip(self.tables, encoding.groups, categories, strict=True)
        ]
        codes = encoding.codes
        if any(np.any(w != np.arange(w.size)) for w in where):  # chunk-local -> global codes
            codes = np.column_stack(
                [where[a][codes[:, a]] for a in range(encoding.n_attributes)]
            ).reshape(X.shape[0], encoding.n_attributes)
        chunk_counts = []  # rows of the chunk per group, in the tables' positions
        for a, table in enumerate(self.tables):
            counts = np.zeros(len(table.labels), dtype=np.int64)
            counts[where[a]] = encoding.counts[a]
            table.row_counts += counts
            chunk_counts.append(counts)
        if self.spec.constraint_positive:
            if positive is None:
                raise ValueError("equal opportunity statistics need the positive-row mask.")
            objective_rows = positive if self.spec.objective_positive else None
        else:
            positive, objective_rows = None, None
        X_obj = X if objective_rows is None else X[objective_rows]
        codes_obj = codes if objective_rows is None else codes[objective_rows]
        constraint_obj = None
        if positive is not None and objective_rows is None:
            constraint_obj = positive  # constraint rows among the objective rows
        # float64 rows go in one piece through the raw Gram route (no copy) when that is
        # accurate; otherwise blocks of bounded size are centred explicitly.
        whole_counts = chunk_counts if objective_rows is None and constraint_obj is None else None
        if X_obj.dtype != np.float64 or not self._add_block(
            X_obj, codes_obj, constraint_obj, centre=False, counts=whole_counts
        ):
            step = block_rows(self.n_features, X_obj.dtype.itemsize)
            for start in range(0, X_obj.shape[0], step):
                stop = start + step
                self._add_block(
                    X_obj[start:stop],
                    codes_obj[start:stop],
                    None if constraint_obj is None else constraint_obj[start:stop],
                    centre=True,
                )
        self.dtype = X.dtype if self.dtype is None else np.result_type(self.dtype, X.dtype)

    def _add_block(self, block, codes, constraint_rows, *, centre: bool, counts=None) -> bool:
        """Add objective rows (and their constraint-row count and group sums).

        With ``centre=False`` the scatter comes from the raw Gram matrix; if that would lose
        accuracy (:meth:`Moments.add_uncentred`) nothing is added and ``False`` is returned.
        ``counts`` are the block's constraint rows per group when the caller has them.
        """
        rows = block.shape[0]
        if rows == 0:
            return True
        if not centre and self.objective.count:
            return False  # the raw Gram route starts the moments only
        # One GEMM gives the row sum (column 0) and every group sum on the constraint rows;
        # on the raw Gram route with every row constrained, the row sum follows from the
        # group sums (with_total).
        sizes = [len(table.labels) for table in self.tables]
        from_groups = not centre and constraint_rows is None
        W = group_sum_weights(codes, sizes, constraint_rows, total=not from_groups)
        if counts is None:
            kept = slice(None) if constraint_rows is None else constraint_rows
            counts = [np.bincount(codes[kept, a], minlength=m) for a, m in enumerate(sizes)]
        totals = np.concatenate([np.array([rows]), *counts])
        if centre:
            # sum_i w_i x_i = (X - c)^T w + c * sum_i w_i, with X - c in the block's dtype.
            objective = self.objective
            shifted = objective.shifted(block)
            shift = objective.shift
            sums = np.asarray(la.matmul(shifted.T, W.astype(shifted.dtype)), dtype=np.float64)
            objective.add_block(block, shifted, sums[:, 0])
            sums += np.outer(shift, totals)
        else:
            sums = np.asarray(la.matmul(block.T, W))
            if from_groups:
                sums = with_total(sums, sizes)
            if not self.objective.add_uncentred(block, sums[:, 0] / rows):
                return False
        self.constraint_count += rows if constraint_rows is None else int(constraint_rows.sum())
        start = 1
        for a, table in enumerate(self.tables):
            stop = start + len(table.labels)
            table.counts += totals[start:stop]
            table.sums += sums[:, start:stop]
            if table.group_scatter:
                in_rows = np.ones(rows, bool) if constraint_rows is None else constraint_rows
                for g in np.unique(codes[in_rows, a]):
                    table.scatters[g].add_rows(block[in_rows & (codes[:, a] == g)])
            start = stop
        return True

    def _check_attributes(self, encoding: GroupEncoding) -> None:
        if self.tables is None:
            self.tables = [
                GroupTable(name, self.n_features, self.spec.group_scatter)
                for name in encoding.names
            ]
        elif len(self.tables) != encoding.n_attributes:
            raise ValueError(
                f"This chunk has {encoding.n_attributes} sensitive attribute(s) but earlier "
                f"chunks had {len(self.tables)}; pass the same attributes in every chunk."
            )

    def merge(self, other: FairStatistics) -> FairStatistics:
        """Merge ``other`` into ``self`` in place (exact; order only affects rounding)."""
        if not other.spec == self.spec:
            raise ValueError(
                "Cannot merge statistics collected with different settings: "
                f"{self.spec} and {other.spec}."
            )
        if other.tables is None:
            return self
        if self.tables is None:
            self.tables = [
                GroupTable(t.name, self.n_features, self.spec.group_scatter) for t in other.tables
            ]
        if len(self.tables) != len(other.tables):
            raise ValueError(
                f"Cannot merge statistics of {len(other.tables)} sensitive attribute(s) into "
                f"statistics of {len(self.tables)}; pass the same attributes everywhere."
            )
        for mine, theirs in zip(self.tables, other.tables, strict=True):
            mine.merge(theirs)
        self.objective.merge(other.objective)
        self.constraint_count += other.constraint_count
        if other.dtype is not None:
            self.dtype = (
                other.dtype if self.dtype is None else np.result_type(self.dtype, other.dtype)
            )
        return self

    def __copy__(self):
        out = FairStatistics(self.spec)
        out.objective = copy.copy(self.objective)
        out.constraint_count = self.constraint_count
        out.tables = None if self.tables is None else [copy.copy(t) for t in self.tables]
        out.dtype = self.dtype
        return out

    # ------------------------------------------------------------------ reading
    def ordered_tables(self) -> list[GroupTable]:
        return [table.ordered() for table in self.tables or []]

    def check_fittable(self, n_components: int | None = None) -> list[GroupTable]:
        """Raise :class:`InsufficientStatisticsError` when the rows seen so far cannot define
        the fit yet (too few rows, a single group, a group with fewer than 2 rows); return
        the checked :meth:`ordered_tables`."""
        if self.tables is None:
            raise InsufficientStatisticsError("No rows have been seen yet.")
        tables = self.ordered_tables()
        names = [table.name for table in tables]
        labels = [table.labels for table in tables]
        check_group_sizes(
            names,
            labels,
            [table.row_counts for table in tables],
            rows="rows so far",
            error=InsufficientStatisticsError,
        )
        if self.spec.constraint_positive:
            if self.constraint_count == 0:
                raise InsufficientStatisticsError(
                    f"constraint='equal_opportunity' but no row so far has y == pos_label "
                    f"({self.spec.pos_label!r})."
                )
            check_group_sizes(
                names,
                labels,
                [table.counts for table in tables],
                rows="rows with y == pos_label so far",
                error=InsufficientStatisticsError,
                prefix="constraint='equal_opportunity': ",
            )
        needed = max(2, n_components or 0)
        if self.objective.count < needed:
            raise InsufficientStatisticsError(
                f"Only {self.objective.count} row(s) of the variance objective so far; "
                f"need at least {needed} (n_components={n_components})."
            )
        return tables


def encode_chunk(sensitive_features, n_samples: int) -> tuple[GroupEncoding, list]:
    """Encode the sensitive attributes of one chunk without the whole-data group checks."""
    return encode_labels(sensitive_features, n_samples, method="partial_fit")


def chunk_statistics(
    spec: StatisticsSpec, X: np.ndarray, sensitive_features, y=None
) -> FairStatistics:
    """Statistics of one validated, finite float chunk (used by Dask blocks and sources)."""
    encoding, categories = encode_chunk(sensitive_features, X.shape[0])
    positive = positive_rows(y, X.shape[0], spec.pos_label) if spec.constraint_positive else None
    stats = FairStatistics(spec)
    stats.update(X, encoding, positive, categories)
    return stats


def merge_all(parts) -> FairStatistics:
    """Merge a non-empty sequence of statistics (the first one is updated in place)."""
    parts = list(parts)
    out = parts[0]
    for part in parts[1:]:
        out.merge(part)
    return out
