"""Disclosure control: which groups' values may be published.

Three rules, applied in order, protect a suppressed group (fewer than ``min_group_size`` rows)
against an attacker who also knows the overall counts (MLflow's default evaluator logs the
overall TP / FP / TN / FN; the audit logs the overall accuracy, positive rate and split sizes):

1. **Complementary suppression.** Within a grouping, the suppressed groups together with the
   overall counts would be known by subtraction (overall minus the published groups). When the
   suppressed groups hold fewer than ``min_group_size`` rows in total, the smallest published
   groups are withheld as well, one at a time, until the hidden rows number at least
   ``min_group_size``: subtraction then gives only the pool, itself as large as a published
   group.
2. **Measures must not single out a withheld group.** The differences, ratios and their
   intervals are computed over every group with at least ``min_group_size`` rows, withheld ones
   included (so a fairness gate sees them). If a withheld group attains an extreme that one of
   them reads (the largest or smallest rate, or the largest or smallest bound of a per-group
   interval), the published per-group values together with that measure would give the withheld
   group's value, so the grouping publishes its measures only.
3. **Differencing across groupings** (rank check): an attribute group is a union of
   intersection cells and every grouping partitions the same rows, so published groups of
   several groupings (and the overall counts) can add up to a suppressed group. Per-group values
   are withheld from the groupings with hidden groups, or if need be from all, until no
   suppressed group's cell indicator lies in the row space of the published ones.

Labels of suppressed and withheld groups are never published; notes give their number only.
"""

from __future__ import annotations

import numpy as np

from .._groups import encode_labels
from ._counts import FairnessProblem, Grouping, check_min_group_size, fraction
from ._intervals import group_rate_intervals

# Largest cell-indicator matrices (entries) the differencing check solves; beyond, it assumes
# recovery is possible and withholds every per-group value.
DIFFERENCING_CHECK_ENTRIES = 1 << 22
# Rates whose extremes the published measures read: DP and the ratio (selection rate), EO and
# equalized odds (TPR, FPR).
_MEASURED_RATES = ("selection_rate", "tpr", "fpr")


def complementary_suppression(size: np.ndarray, min_group_size: int) -> np.ndarray:
    """Groups to hide (suppressed, then the smallest others) so the hidden rows reach the minimum.

    Parameters
    ----------
    size : ndarray of shape (n_groups,)
        Rows per group of one grouping.
    min_group_size : int

    Returns
    -------
    hidden : ndarray of bool, shape (n_groups,)
        The suppressed groups (fewer than ``min_group_size`` rows) and, when those hold fewer
        than ``min_group_size`` rows together, the next smallest groups (ties: first group)
        until the hidden rows number at least ``min_group_size``.
    """
    hidden = size < min_group_size
    if not hidden.any():
        return hidden
    for group in np.argsort(size, kind="stable"):
        if size[hidden].sum() >= min_group_size:
            break
        hidden[group] = True
    return hidden


def _extremes_published(counts, keep, published, alphas) -> bool:
    """Whether every extreme the measures read is attained by a published group."""
    for rate in _MEASURED_RATES:
        hits, trials = fraction(counts, rate)
        defined = keep & (trials > 0)
        if not (defined & ~published).any():
            continue
        shown = defined & published
        if not shown.any():
            return False
        value = np.where(defined, hits / np.where(trials > 0, trials, 1), np.nan)
        arrays = [value]
        for alpha in alphas:
            arrays.extend(group_rate_intervals(counts, keep, rate, alpha))
        for array in arrays:
            for pick in (np.max, np.min):
                if pick(array[shown]) != pick(array[defined]):
                    return False
    return True


def grouping_published(problem: FairnessProblem, grouping: Grouping, alphas) -> tuple:
    """Rules 1 and 2 for one grouping: the published groups' mask, and the note (or None)."""
    counts = grouping.aggregate(problem.counts)
    size = counts.sum(axis=-1)
    keep = size >= problem.min_group_size
    hidden = complementary_suppression(size, problem.min_group_size)
    published = ~hidden
    if not (hidden & keep).any():
        return published, None
    note = (
        f"{grouping.name}: {int((hidden & keep).sum())} more group(s) withheld so that the "
        f"hidden rows number at least min_group_size={problem.min_group_size}"
    )
    if _extremes_published(counts, keep, published, alphas):
        return published, note + "; they still count in the differences and ratios."
    return np.zeros_like(published), (
        note + "; as one of them attains an extreme of a difference or ratio, the per-group "
        "values of this grouping are withheld and its differences and ratios published."
    )


def _indicators(grouping: Grouping, mask: np.ndarray) -> np.ndarray:
    """0/1 matrix (groups in ``mask``, intersection cells): the cells each group is made of."""
    chosen = np.flatnonzero(mask)
    return (grouping.member[None, :] == chosen[:, None]).astype(np.float64)


def recoverable(problem: FairnessProblem, published: dict) -> bool:
    """Whether a suppressed group's counts follow linearly from the published groups' counts
    and the overall counts.

    A group's size and its numbers of selected rows, positives, ... are sums over its cells, so
    the published groups (and the all-rows total) reveal exactly the combinations of cell
    counts in the row space of their cell indicators; a suppressed group is recoverable iff its
    indicator lies in it.
    """
    groupings = problem.groupings()
    secret_masks = {g.name: ~_reported(problem, g) for g in groupings}
    n_secret = sum(int(mask.sum()) for mask in secret_masks.values())
    if n_secret == 0:
        return False
    n_cells = problem.counts.shape[0]
    n_known = 1 + sum(int(published[g.name].sum()) for g in groupings)
    if n_cells * (n_secret + n_known) > DIFFERENCING_CHECK_ENTRIES:  # before building them
        return True
    secret = np.vstack([_indicators(g, secret_masks[g.name]) for g in groupings])
    known = np.vstack(
        [np.ones((1, n_cells))] + [_indicators(g, published[g.name]) for g in groupings]
    )
    coefficients = np.linalg.lstsq(known.T, secret.T, rcond=None)[0]
    residual = np.abs(known.T @ coefficients - secret.T).max(axis=0)
    return bool(np.any(residual < 1e-8))


def _reported(problem: FairnessProblem, grouping: Grouping) -> np.ndarray:
    """Whether each group of ``grouping`` has at least ``min_group_size`` rows."""
    rows = problem.counts.sum(axis=1)
    size = np.bincount(grouping.member, weights=rows, minlength=len(grouping.labels))
    return size >= problem.min_group_size


def published_groups(problem: FairnessProblem, alpha: float) -> tuple[dict, list]:
    """Per grouping name, the mask of groups whose per-group values may be published; notes.

    ``alpha`` is ``1 - confidence`` of the intervals published beside the measures (the rule-2
    check covers both the per-grouping level and the worst-attribute level ``alpha / A``).
    """
    alphas = (alpha, alpha / len(problem.attributes))
    notes, published = [], {}
    for grouping in problem.groupings():
        published[grouping.name], note = grouping_published(problem, grouping, alphas)
        if note:
            notes.append(note)
    if not recoverable(problem, published):
        return published, notes
    with_hidden = [g.name for g in problem.groupings() if not published[g.name].all()]
    narrowed = {n: (m if n not in with_hidden else np.zeros_like(m)) for n, m in published.items()}
    if recoverable(problem, narrowed):
        narrowed = {n: np.zeros_like(m) for n, m in published.items()}
    for name, mask in narrowed.items():
        if published[name].any() and not mask.any():
            notes.append(
                f"{name}: per-group sizes and rates are withheld because a suppressed group "
                "could be recovered from them by differencing; the differences over the "
                "reported groups are published."
            )
    return narrowed, notes


def published_group_sizes(
    sensitive_features, *, min_group_size: int = 10, allow_small_groups: bool = False
) -> tuple[dict, dict]:
    """Rows per group that may be published beside the total, attribute by attribute.

    A group with fewer than ``min_group_size`` rows is withheld, and (complementary
    suppression) so are the next smallest groups until the withheld rows of the attribute
    number at least ``min_group_size``, so that the total minus the published sizes gives no
    small group's size.

    Parameters
    ----------
    sensitive_features : array-like of shape (n_samples,), 2-D array or DataFrame
        Group labels: one attribute, or one column per attribute.
    min_group_size : int, default=10
    allow_small_groups : bool, default=False
        As in :func:`fairpca.metrics.group_fairness`.

    Returns
    -------
    sizes : dict
        ``{attribute: {label as str: rows}}`` of the published groups.
    withheld : dict
        ``{attribute: number of groups withheld}`` (their labels are not returned).

    Examples
    --------
    >>> sizes, withheld = published_group_sizes(["a"] * 40 + ["b"] * 30 + ["c"] * 3)
    >>> sizes, withheld
    ({'sensitive_0': {'a': 40}}, {'sensitive_0': 2})
    """
    min_group_size = check_min_group_size(min_group_size, allow_small_groups)
    encoding, _ = encode_labels(sensitive_features, len(sensitive_features))
    sizes, withheld = {}, {}
    for a, (name, labels) in enumerate(zip(encoding.names, encoding.groups, strict=True)):
        counts = np.bincount(encoding.codes[:, a], minlength=len(labels))
        hidden = complementary_suppression(counts, min_group_size)
        sizes[name] = {str(labels[g]): int(counts[g]) for g in np.flatnonzero(~hidden)}
        withheld[name] = int(hidden.sum())
    return sizes, withheld
