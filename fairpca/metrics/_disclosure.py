"""Disclosure control: small groups are suppressed, and per-group values are withheld wherever
a suppressed group's counts would follow from what is published by differencing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._counts import FairnessProblem, Grouping

# Largest cell-indicator matrices (entries) the differencing check solves; beyond, it assumes
# recovery is possible and withholds every per-group value.
DIFFERENCING_CHECK_ENTRIES = 1 << 22


def reported(problem: FairnessProblem, grouping: Grouping) -> np.ndarray:
    """Whether each group of ``grouping`` has at least ``min_group_size`` rows."""
    rows = problem.counts.sum(axis=1)
    size = np.bincount(grouping.member, weights=rows, minlength=len(grouping.labels))
    return size >= problem.min_group_size


def _indicators(problem: FairnessProblem, grouping: Grouping, published: bool) -> np.ndarray:
    """0/1 matrix (groups, intersection cells): the cells each reported (or suppressed) group is."""
    chosen = np.flatnonzero(reported(problem, grouping) == published)
    return (grouping.member[None, :] == chosen[:, None]).astype(np.float64)


def recoverable(problem: FairnessProblem, published: list) -> bool:
    """Whether a suppressed group's counts follow linearly from the published groups' counts.

    A group's size and its numbers of selected rows, positives, ... are sums over its cells, so
    the published groups reveal exactly the combinations of cell counts in the row space of
    their cell indicators; a suppressed group is recoverable iff its indicator lies in it.
    """
    n_cells = problem.counts.shape[0]
    n_suppressed = sum(int(np.sum(~reported(problem, g))) for g in problem.groupings())
    if not published or n_suppressed == 0:
        return False
    n_groups = n_suppressed + sum(len(g.labels) for g in published)
    if n_cells * n_groups > DIFFERENCING_CHECK_ENTRIES:  # checked before building the matrices
        return True
    secret = np.vstack([_indicators(problem, g, False) for g in problem.groupings()])
    known = np.vstack([_indicators(problem, g, True) for g in published])
    coefficients = np.linalg.lstsq(known.T, secret.T, rcond=None)[0]
    residual = np.abs(known.T @ coefficients - secret.T).max(axis=0)
    return bool(np.any(residual < 1e-8))


def prevent_differencing(problem: FairnessProblem, results: dict, notes: list) -> dict:
    """``results`` (GroupFairness per grouping name) with per-group values withheld as needed.

    Complementary disclosure: an attribute group is a union of intersection groups and every
    attribute partitions the same rows, so size x rate of published groups can add up to the
    counts of a suppressed group (F minus F x white = F x black). If so, the per-group values of
    every grouping with a suppressed group are withheld (only its differences are published);
    if a suppressed group is still recoverable, those of every grouping are.
    """
    groupings = problem.groupings()
    if not recoverable(problem, groupings):
        return results
    published = [g for g in groupings if not results[g.name].suppressed]
    if recoverable(problem, published):
        published = []
    names = {g.name for g in published}
    for name, result in results.items():
        if name not in names and result.group_size:
            notes.append(
                f"{name}: per-group sizes and rates are withheld because a suppressed group "
                f"could be recovered from them by differencing; the differences over the "
                f"reported groups are published."
            )
            results[name] = replace(
                result, selection_rate={}, tpr={}, fpr={}, base_rate={}, group_size={}
            )
    return results
