"""Disclosure control: the rows every published number is computed from.

Row-level suppression (cell suppression of statistical disclosure control, applied to the rows
behind every statistic rather than to single table cells). The groupings checked are every
sensitive column *known* (the reported attributes and the ``protected_features``, which are
protected without being reported) and, with two or more, their intersection, whose groups are
the *cells*. The **released rows** are the largest set of rows in which
every group of every grouping has either no row or at least ``min_group_size`` rows; it is
found by leaving out, until none is left, every group that has between 1 and
``min_group_size - 1`` of the remaining rows (a group that small can hold none of the released
rows, so the order does not matter). Then:

1. **Nothing published depends on a left-out row.** The overall metrics, the per-group values
   and sizes, the differences, ratios and every interval are computed from the released rows
   alone, as if the others were not in the data. A group or cell with fewer than
   ``min_group_size`` rows is never released, so two evaluations (any number of them) whose data
   differ only by such groups publish the same numbers: subtracting them gives zero, not the
   group's counts. A small intersection cell inside large attribute groups is left out of
   those groups too (otherwise the two attribute groups' counts would differ by the cell's).
2. **Complementary suppression against the all-rows totals.** Whoever also holds totals over
   every row (MLflow's ``default`` evaluator logs TP / FP / TN / FN of the same rows) learns
   the left-out rows' totals by subtraction. When the left-out rows number between 1 and
   ``min_group_size - 1``, released cells are left out as well, one at a time, until they
   number at least ``min_group_size``: subtraction then gives a pool at least as large as a
   published group. Each is the cell, among the smallest, whose removal leaves out the fewest
   groups, then the fewest rows (a choice made from the released cells' sizes alone).

Every released group then has at least ``min_group_size`` rows and is published whole. What is
published depends on the left-out rows only through how many there are (which groups are
left out, and the notes that count them); their labels appear in no output.

3. **Across attribute sets.** The released rows depend on the set of known columns only, not
   on which of them are reported: evaluations of the same rows that know the same columns
   (report ``race`` with ``protected_features=["sex"]``, or report ``sex`` and ``race``) compute
   every group's numbers from the same rows, so ``race:Asian-Pac-Islander`` is the same number
   in both and their difference is not a suppressed ``(Female, Asian-Pac-Islander)`` cell.

The limit: a column nobody names is not protected. An evaluation that knows ``race`` alone
cannot leave out the rows of a small ``sex`` x ``race`` cell; set against one that knows
``sex`` too, it gives that cell's counts. Every evaluation of the same rows must therefore
name every sensitive column the data hold (the audit names every sensitive column of its
configuration in every number it publishes). Nor does any of this hold across evaluations of
different row subsets chosen by the caller (rows filtered by a column nobody named).
"""

from __future__ import annotations

import numpy as np

from ._counts import FairnessProblem, check_min_group_size, sensitive_cells

# Smallest released cells tried as the complementary cell (each try settles the rest).
COMPLEMENT_CANDIDATES = 64


def _settled(rows: np.ndarray, members: list, released: np.ndarray, minimum: int) -> np.ndarray:
    """``released`` (cells) less every group with 1 to ``minimum - 1`` released rows, repeated
    until no group is that small."""
    released = released.copy()
    while True:
        small = np.zeros_like(released)
        for member in members:
            size = np.bincount(member, weights=rows * released, minlength=member.max(initial=0) + 1)
            small |= released & ((size > 0) & (size < minimum))[member]
        if not small.any():
            return released
        released &= ~small


def released_cells(rows: np.ndarray, members: list, minimum: int) -> np.ndarray:
    """Which cells' rows are released (rules 1 and 2 of the module docstring).

    Parameters
    ----------
    rows : ndarray of shape (n_cells,)
        Rows per cell (intersection group).
    members : list of ndarray of shape (n_cells,)
        Per grouping, the group of each cell.
    minimum : int
        ``min_group_size``.

    Returns
    -------
    released : ndarray of bool, shape (n_cells,)
    """
    released = _settled(rows, members, rows > 0, minimum)
    while released.any() and 0 < rows[~released].sum() < minimum:
        released = _complemented(rows, members, released, minimum)
    return released


def _complemented(rows, members, released, minimum) -> np.ndarray:
    """``released`` less one more cell: of the ``COMPLEMENT_CANDIDATES`` smallest, the one
    whose removal leaves out the fewest groups, then the fewest rows (ties: the first).

    The choice reads only the released cells' sizes, never a left-out row.
    """
    candidates = np.flatnonzero(released)
    candidates = candidates[np.argsort(rows[candidates], kind="stable")][:COMPLEMENT_CANDIDATES]
    best, best_key = None, None
    for cell in candidates:
        trial = released.copy()
        trial[cell] = False
        trial = _settled(rows, members, trial, minimum)
        lost = sum(_groups(member, rows * released) - _groups(member, rows * trial)
                   for member in members)  # fmt: skip
        key = (lost, rows[~trial].sum())
        if best_key is None or key < best_key:
            best, best_key = trial, key
    return best


def _groups(member: np.ndarray, rows: np.ndarray) -> int:
    """Number of groups of one grouping with rows."""
    return int(np.count_nonzero(np.bincount(member, weights=rows)))


def release(problem: FairnessProblem) -> tuple[FairnessProblem, dict, list]:
    """The problem of the released rows, the number of groups left out per grouping name, and
    notes that say what was left out (never which group)."""
    rows = problem.counts.sum(axis=1)
    groupings = problem.groupings()
    members = problem.disclosure
    minimum = problem.min_group_size
    settled = _settled(rows, members, rows > 0, minimum)
    released = released_cells(rows, members, minimum)
    left_out, notes = {}, []
    for grouping in groupings:
        present = np.bincount(grouping.member, weights=rows, minlength=len(grouping.labels)) > 0
        kept = np.bincount(grouping.member, weights=rows * released, minlength=len(grouping.labels))
        left_out[grouping.name] = int((present & (kept == 0)).sum())
        if left_out[grouping.name]:
            notes.append(
                f"{grouping.name}: {left_out[grouping.name]} group(s) left out (fewer than "
                f"min_group_size={minimum} rows outside the left-out groups and cells)."
            )
    if not released.all():
        notes.append(
            f"Rows of groups and intersection cells with fewer than min_group_size={minimum} "
            "rows are left out of every published number, the overall metrics included, so "
            "that no evaluation, nor the difference of two, depends on them."
        )
    if (settled & ~released).any():
        cells = "intersection cell(s)" if len(members) > 1 else "group(s)"
        notes.append(
            f"{int((settled & ~released).sum())} more {cells} (each with at least "
            f"min_group_size={minimum} rows, chosen to leave out the fewest groups) left out so "
            f"that the left-out rows number at least {minimum}: totals over all rows minus the "
            "published ones give only that pool."
        )
    return problem.restricted(released), left_out, notes


def published_group_sizes(
    sensitive_features,
    *,
    min_group_size: int = 10,
    allow_small_groups: bool = False,
    protected_features=None,
) -> tuple[dict, dict]:
    """Rows per group that may be published, attribute by attribute: the sizes over the rows
    :func:`fairpca.metrics.group_fairness` releases.

    Groups and intersection cells with fewer than ``min_group_size`` rows are left out, and so
    are the rows of the released groups that fall in them; when the left-out rows number fewer
    than ``min_group_size``, the smallest cells are left out too, so that the total minus the
    published sizes gives no small group's size.

    Parameters
    ----------
    sensitive_features : array-like of shape (n_samples,), 2-D array or DataFrame
        Group labels: one attribute, or one column per attribute.
    min_group_size : int, default=10
    allow_small_groups : bool, default=False
    protected_features : array-like, 2-D array or DataFrame, default=None
        As in :func:`fairpca.metrics.group_fairness`.

    Returns
    -------
    sizes : dict
        ``{attribute: {label as str: rows}}`` of the published groups.
    withheld : dict
        ``{attribute: number of groups left out}`` (their labels are not returned).

    Examples
    --------
    >>> sizes, withheld = published_group_sizes(["a"] * 40 + ["b"] * 30 + ["c"] * 3)
    >>> sizes, withheld
    ({'sensitive_0': {'a': 40}}, {'sensitive_0': 2})
    """
    min_group_size = check_min_group_size(min_group_size, allow_small_groups)
    cells = sensitive_cells(sensitive_features, len(sensitive_features), protected_features)
    rows = np.bincount(cells.inverse, minlength=cells.n_cells).astype(np.float64)
    released = released_cells(rows, cells.disclosure, min_group_size)
    encoding = cells.encoding
    sizes, withheld = {}, {}
    for member, name, labels in zip(cells.reported, encoding.names, encoding.groups, strict=True):
        kept = np.bincount(member, weights=rows * released, minlength=len(labels))
        sizes[name] = {str(labels[g]): int(kept[g]) for g in np.flatnonzero(kept)}
        withheld[name] = int(len(labels) - np.count_nonzero(kept))
    return sizes, withheld
