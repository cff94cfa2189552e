"""Confusion-cell counts per group: the one representation from which every classifier metric
(accuracy, balanced accuracy, group rates, differences and ratios) follows."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .._groups import _factorize_small_ints, encode_labels
from ._names import INTERSECTION, attribute_tokens, unique_tokens
from ._validation import _as_float_matrix, _check_same_length, _positive_mask, _reject_sparse

# The four confusion cells of a row, indexed 2 * (y_true == pos) + (y_pred == pos).
TN, FP, FN, TP = range(4)
ALL = (TN, FP, FN, TP)
# Each group rate is a fraction of cell counts: (numerator cells, denominator cells).
RATE_CELLS = {
    "selection_rate": ((FP, TP), ALL),  # P(Yhat = 1 | g)
    "tpr": ((TP,), (FN, TP)),  # P(Yhat = 1 | Y = 1, g)
    "fpr": ((FP,), (TN, FP)),  # P(Yhat = 1 | Y = 0, g)
    "base_rate": ((FN, TP), ALL),  # P(Y = 1 | g)
}
# Differences (max - min over groups) and the rate each spreads.
DIFFERENCES = {"dp_difference": "selection_rate", "eo_difference": "tpr", "fpr_difference": "fpr"}


def cell_counts(codes: np.ndarray, n_groups: int, actual: np.ndarray, predicted: np.ndarray):
    """Counts of the four confusion cells per group, float64 of shape (n_groups, 4)."""
    cells = codes * 4 + 2 * actual.astype(np.intp) + predicted.astype(np.intp)
    return np.bincount(cells, minlength=4 * n_groups).reshape(n_groups, 4).astype(np.float64)


def fraction(counts: np.ndarray, rate: str) -> tuple[np.ndarray, np.ndarray]:
    """Numerator and denominator counts of ``rate`` from counts of shape (..., 4)."""
    hits, trials = RATE_CELLS[rate]
    return counts[..., list(hits)].sum(axis=-1), counts[..., list(trials)].sum(axis=-1)


def rates(counts: np.ndarray) -> dict[str, np.ndarray]:
    """Every rate of ``RATE_CELLS`` from counts of shape (..., 4); NaN where the denominator is 0
    (e.g. the TPR of a group without positives)."""
    values = {}
    for rate in RATE_CELLS:
        hits, trials = fraction(counts, rate)
        with np.errstate(invalid="ignore", divide="ignore"):
            values[rate] = np.where(trials > 0, hits / np.where(trials > 0, trials, 1), np.nan)
    return values


def spread(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """max - min over the kept groups with a defined value (last axis); NaN if fewer than 2."""
    kept = values[..., keep]
    defined = np.isfinite(kept)
    high = np.where(defined, kept, -np.inf).max(axis=-1, initial=-np.inf)
    low = np.where(defined, kept, np.inf).min(axis=-1, initial=np.inf)
    with np.errstate(invalid="ignore"):
        return np.where(defined.sum(axis=-1) >= 2, high - low, np.nan)


def ratio(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """min / max over the kept groups (last axis); NaN with fewer than 2 or a maximum of 0."""
    kept = values[..., keep]
    defined = np.isfinite(kept)
    high = np.where(defined, kept, -np.inf).max(axis=-1, initial=-np.inf)
    low = np.where(defined, kept, np.inf).min(axis=-1, initial=np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((defined.sum(axis=-1) >= 2) & (high > 0), low / high, np.nan)


def worst(values: list, *, lowest: bool = False) -> np.ndarray:
    """Largest (``lowest``: smallest) value over attributes, ignoring NaN; NaN if all are."""
    stacked = np.stack([np.asarray(v, dtype=np.float64) for v in values])
    defined = np.isfinite(stacked)
    if lowest:
        best = np.where(defined, stacked, np.inf).min(axis=0)
    else:
        best = np.where(defined, stacked, -np.inf).max(axis=0)
    return np.where(defined.any(axis=0), best, np.nan)


def equalized_odds(eo: np.ndarray, fpr: np.ndarray) -> np.ndarray:
    """max(TPR difference, FPR difference); NaN when either is undefined (a gate then fails)."""
    return np.where(np.isfinite(eo) & np.isfinite(fpr), np.fmax(eo, fpr), np.nan)


def overall(total: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy, balanced accuracy, positive rate, base rate and one-class share of counts of
    shape (..., 4) summed over the groups. Balanced accuracy is ``(TPR + TNR) / 2``, NaN when
    ``y_true`` has a single class."""
    n = total.sum(axis=-1)
    positives, negatives = total[..., FN] + total[..., TP], total[..., TN] + total[..., FP]
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN without rows
        positive_rate = (total[..., FP] + total[..., TP]) / n
        balanced = 0.5 * (total[..., TP] / positives + total[..., TN] / negatives)
        accuracy, base_rate = (total[..., TN] + total[..., TP]) / n, positives / n
    return {
        "accuracy": accuracy,
        "balanced_accuracy": np.where((positives > 0) & (negatives > 0), balanced, np.nan),
        "positive_rate": positive_rate,
        "base_rate": base_rate,
        "one_class_share": np.maximum(positive_rate, 1.0 - positive_rate),
    }


@dataclass(frozen=True)
class Grouping:
    """One way of grouping the rows: an attribute, or the intersection of all attributes.

    ``member`` maps each intersection group (the finest partition) to a group of this grouping,
    so counts of this grouping are sums of intersection-group counts. ``name`` and ``tokens``
    are the grouping's and its groups' parts of metric names (unique, MLflow-safe; see
    :mod:`fairpca.metrics._names`); ``key`` is the attribute's own name (None for the
    intersection).
    """

    name: str
    labels: list
    member: np.ndarray
    tokens: list
    key: str | None

    def aggregate(self, counts: np.ndarray) -> np.ndarray:
        """Sum counts of shape (..., n_intersections, 4) into (..., n_groups, 4)."""
        indicator = np.zeros((self.member.size, len(self.labels)))
        indicator[np.arange(self.member.size), self.member] = 1.0
        return np.swapaxes(np.swapaxes(counts, -1, -2) @ indicator, -1, -2)


@dataclass(frozen=True)
class FairnessProblem:
    """Validated inputs reduced to confusion-cell counts per cell.

    The *cells* are the intersection groups of every sensitive column known: the reported
    attributes and the ``protected_features`` (see :func:`sensitive_cells`); each reported
    grouping is a union of cells. ``disclosure`` holds, per distinct sensitive column (and,
    with two or more, for the cells themselves), the group of each cell: the groupings whose
    small groups are left out of everything published (:mod:`fairpca.metrics._disclosure`).
    """

    counts: np.ndarray  # (n_cells, 4)
    attributes: list  # Grouping per reported attribute
    intersection: Grouping | None  # None for one attribute
    min_group_size: int
    pos_label: Any
    actual: np.ndarray  # y_true == pos_label per row
    score: np.ndarray | None  # y_score per row, or None
    cell: np.ndarray  # cell of each row
    disclosure: list  # per disclosure grouping, the group of each cell

    def groupings(self) -> list[Grouping]:
        return self.attributes + ([] if self.intersection is None else [self.intersection])

    def restricted(self, kept: np.ndarray) -> FairnessProblem:
        """The problem of the rows of the ``kept`` cells only, as if the others were not in
        the data: groups without rows are gone and every token is made from the remaining
        labels alone."""
        rows = kept[self.cell]
        renumber = np.cumsum(kept) - 1
        attributes = []
        for grouping in self.attributes:
            present = np.unique(grouping.member[kept])
            labels = [grouping.labels[g] for g in present]
            member = np.searchsorted(present, grouping.member[kept])
            attributes.append(
                Grouping(grouping.name, labels, member, unique_tokens(labels), grouping.key)
            )
        score = None if self.score is None else self.score[rows]
        return FairnessProblem(
            self.counts[kept], attributes, _intersection(attributes), self.min_group_size,
            self.pos_label, self.actual[rows], score, renumber[self.cell[rows]],
            [np.unique(member[kept], return_inverse=True)[1] for member in self.disclosure],
        )  # fmt: skip


# The smallest min_group_size accepted without allow_small_groups=True: a published rate of a
# smaller group comes close to describing its members one by one.
MIN_GROUP_SIZE_FLOOR = 10
# The messages of the refusals below (str.format templates; tests name them, not their words)
MIN_GROUP_SIZE_BELOW_ONE = (
    "min_group_size must be at least 1, got {value}; pass 1 with allow_small_groups=True to "
    "report every group."
)
MIN_GROUP_SIZE_BELOW_FLOOR = (
    "min_group_size={value} is below the floor of {floor}: the rates of groups that small come "
    "close to describing single people. Use min_group_size={floor} or more, or pass "
    "allow_small_groups=True if publishing them is intended."
)


def check_min_group_size(min_group_size: Any, allow_small_groups: Any = False) -> int:
    """Validate ``min_group_size``: a positive int, at least ``MIN_GROUP_SIZE_FLOOR`` (10)
    unless ``allow_small_groups=True`` says smaller published groups are intended."""
    if not isinstance(allow_small_groups, bool):
        raise TypeError(f"allow_small_groups must be True or False, got {allow_small_groups!r}.")
    if isinstance(min_group_size, bool) or not isinstance(min_group_size, numbers.Integral):
        raise TypeError(f"min_group_size must be a positive int, got {min_group_size!r}.")
    if min_group_size < 1:
        raise ValueError(MIN_GROUP_SIZE_BELOW_ONE.format(value=min_group_size))
    if min_group_size < MIN_GROUP_SIZE_FLOOR and not allow_small_groups:
        raise ValueError(
            MIN_GROUP_SIZE_BELOW_FLOOR.format(value=min_group_size, floor=MIN_GROUP_SIZE_FLOOR)
        )
    return int(min_group_size)


def intersections(codes: np.ndarray, n_groups: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Attribute codes of each present intersection group (sorted) and each row's index."""
    try:
        flat = np.ravel_multi_index(tuple(codes.T), n_groups)
    except ValueError:  # more combinations than an index can hold
        combos, inverse = np.unique(codes, axis=0, return_inverse=True)
        return combos, inverse.reshape(-1)
    fast = _factorize_small_ints(flat)  # O(n) for up to a million combinations
    inverse, present = fast if fast is not None else np.unique(flat, return_inverse=True)[::-1]
    present = np.asarray(present, dtype=np.intp)
    return np.stack(np.unravel_index(present, n_groups), axis=1), inverse


def _scores(y_score: Any, n_samples: int) -> np.ndarray | None:
    """Validated 1-D finite scores (higher means more likely positive), or None."""
    if y_score is None:
        return None
    score = _as_float_matrix(y_score, "y_score", one_d="column")
    if score.shape[1] != 1:
        raise ValueError(
            f"y_score must be 1-D (one score of the positive class per row), got shape "
            f"{score.shape}; pass predict_proba(X)[:, 1] or decision_function(X)."
        )
    _check_same_length(y_true=np.empty(n_samples), y_score=score[:, 0])
    return score[:, 0]


@dataclass(frozen=True)
class SensitiveCells:
    """The rows' cells: intersection groups of every distinct sensitive column known.

    ``encoding`` encodes the reported attributes; ``reported[a]`` is the group of each cell
    in reported attribute ``a``; ``disclosure`` the disclosure groupings (see
    :class:`FairnessProblem`); ``inverse`` the cell of each row.
    """

    encoding: Any
    inverse: np.ndarray
    n_cells: int
    reported: list
    disclosure: list


def _partition_key(codes: np.ndarray) -> bytes:
    """A key of the partition a column makes of the rows, whatever its labels: its codes
    renumbered by first appearance, as fixed-width big-endian bytes (so that comparing keys
    compares the renumbered codes lexicographically)."""
    first, _ = pd.factorize(codes, sort=False)
    return first.astype(">i8").tobytes()


def sensitive_cells(sensitive: Any, n_samples: int, protected: Any = None) -> SensitiveCells:
    """Encode the reported attributes and the cells of every sensitive column known.

    The known columns are those of ``sensitive`` and of ``protected`` (further sensitive
    columns of the same rows that are protected without being reported). Columns that make
    the same partition of the rows count once, and the distinct ones are put in an order
    that depends on their partitions alone: so the cells, and every choice made from them,
    are the same whichever of the known columns are reported, and in whatever order.
    """
    _reject_sparse(sensitive, "sensitive_features")
    encoding, _ = encode_labels(sensitive, n_samples)
    columns = [(encoding.codes[:, a], len(g)) for a, g in enumerate(encoding.groups)]
    if protected is not None:
        _reject_sparse(protected, "protected_features")
        extra, _ = encode_labels(protected, n_samples)
        columns += [(extra.codes[:, a], len(g)) for a, g in enumerate(extra.groups)]
    distinct: dict[bytes, tuple] = {}
    for codes, n_groups in columns:
        distinct.setdefault(_partition_key(codes), (codes, n_groups))
    ordered = [distinct[key] for key in sorted(distinct)]
    combos, inverse = intersections(
        np.stack([codes for codes, _ in ordered], axis=1), [n for _, n in ordered]
    )
    reported = []
    for a in range(encoding.n_attributes):
        member = np.empty(len(combos), dtype=np.intp)
        member[inverse] = encoding.codes[:, a]  # a cell lies inside one group of each column
        reported.append(member)
    disclosure = [combos[:, j] for j in range(combos.shape[1])]
    if len(disclosure) > 1:
        disclosure.append(np.arange(len(combos)))
    return SensitiveCells(encoding, inverse, len(combos), reported, disclosure)


def fairness_problem(
    y_true, y_pred, sensitive, pos_label, min_group_size, *, y_score=None,
    allow_small_groups=False, protected=None,
) -> FairnessProblem:  # fmt: skip
    """Validate the inputs and count the confusion cells of each cell (intersection group
    of every sensitive column, ``protected`` included)."""
    min_group_size = check_min_group_size(min_group_size, allow_small_groups)
    actual = _positive_mask(y_true, "y_true", pos_label)
    predicted = _positive_mask(y_pred, "y_pred", pos_label)
    _check_same_length(y_true=actual, y_pred=predicted)
    score = _scores(y_score, actual.shape[0])
    cells = sensitive_cells(sensitive, actual.shape[0], protected)
    encoding = cells.encoding
    keys = [str(name) for name in encoding.names]
    attributes = [
        Grouping(token, list(labels), member, unique_tokens(list(labels)), key)
        for token, key, labels, member in zip(
            attribute_tokens(keys), keys, encoding.groups, cells.reported, strict=True
        )
    ]
    counts = cell_counts(cells.inverse, cells.n_cells, actual, predicted)
    return FairnessProblem(
        counts, attributes, _intersection(attributes), min_group_size, pos_label, actual, score,
        cells.inverse, cells.disclosure,
    )  # fmt: skip


def _intersection(attributes: list[Grouping]) -> Grouping | None:
    """The grouping by every reported attribute at once (its groups: the combinations of
    their labels that occur); None for one attribute. With no further protected column its
    groups are the cells themselves."""
    if len(attributes) < 2:
        return None
    combos, member = np.unique(
        np.stack([g.member for g in attributes], axis=1), axis=0, return_inverse=True
    )
    labels = [tuple(g.labels[c] for g, c in zip(attributes, row, strict=True)) for row in combos]
    tokens = [
        "/".join(f"{g.name}:{g.tokens[c]}" for g, c in zip(attributes, row, strict=True))
        for row in combos
    ]
    return Grouping(INTERSECTION, labels, member.reshape(-1), tokens, None)
