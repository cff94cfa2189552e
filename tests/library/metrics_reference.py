"""Independent references for the classifier metrics of fairpca.metrics: plain loops over the
rows, one group at a time, and random audits to compare them on."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd


def random_audit(rng, n, n_attributes, *, score=False):
    """Random binary labels/predictions and 1-3 attributes with unequal (some small) groups."""
    columns = {}
    for a in range(n_attributes):
        m = int(rng.integers(2, 5))
        weights = rng.dirichlet(np.ones(m)) + 0.02
        columns[f"attr{a}"] = rng.choice([f"g{j}" for j in range(m)], n, p=weights / weights.sum())
    y_true, y_pred = rng.integers(0, 2, n), rng.integers(0, 2, n)
    if score:
        return y_true, y_pred, pd.DataFrame(columns), rng.random(n) + 0.3 * y_true
    return y_true, y_pred, pd.DataFrame(columns)


def _share(rows, condition):
    return sum(condition(i) for i in rows) / len(rows) if rows else None


def loop_grouping(y_true, y_pred, keys, min_group_size):
    """Per-group rates and the differences/ratio of one grouping, by plain loops.

    Returns ``{"size", "selection_rate", "tpr", "fpr", "base_rate"}`` dictionaries (None where
    a rate is undefined) and the measures (NaN where undefined).
    """
    out = {name: {} for name in ("size", "selection_rate", "tpr", "fpr", "base_rate")}
    for key in sorted(set(keys)):
        rows = [i for i, k in enumerate(keys) if k == key]
        if len(rows) < min_group_size:
            continue
        out["size"][key] = len(rows)
        out["selection_rate"][key] = _share(rows, lambda i: y_pred[i] == 1)
        out["base_rate"][key] = _share(rows, lambda i: y_true[i] == 1)
        positives = [i for i in rows if y_true[i] == 1]
        negatives = [i for i in rows if y_true[i] != 1]
        out["tpr"][key] = _share(positives, lambda i: y_pred[i] == 1)
        out["fpr"][key] = _share(negatives, lambda i: y_pred[i] == 1)

    def spread(rate):
        defined = [v for v in out[rate].values() if v is not None]
        return max(defined) - min(defined) if len(defined) > 1 else math.nan

    selection = list(out["selection_rate"].values())
    out["dp_difference"] = spread("selection_rate")
    out["eo_difference"] = spread("tpr")
    out["fpr_difference"] = spread("fpr")
    out["equalized_odds_difference"] = max(out["eo_difference"], out["fpr_difference"])
    if math.isnan(out["eo_difference"]) or math.isnan(out["fpr_difference"]):
        out["equalized_odds_difference"] = math.nan
    ratio = min(selection) / max(selection) if len(selection) > 1 and max(selection) > 0 else None
    out["selection_rate_ratio"] = math.nan if ratio is None else ratio
    return out


def loop_overall(y_true, y_pred):
    """Accuracy, balanced accuracy, positive rate, base rate and one-class share by loops."""
    n = len(y_true)
    positives = [i for i in range(n) if y_true[i] == 1]
    negatives = [i for i in range(n) if y_true[i] != 1]
    tpr = _share(positives, lambda i: y_pred[i] == 1)
    tnr = _share(negatives, lambda i: y_pred[i] != 1)
    positive_rate = sum(y_pred[i] == 1 for i in range(n)) / n
    return {
        "accuracy": sum(y_true[i] == y_pred[i] for i in range(n)) / n,
        "balanced_accuracy": math.nan if tpr is None or tnr is None else (tpr + tnr) / 2,
        "positive_rate": positive_rate,
        "base_rate": len(positives) / n,
        "one_class_share": max(positive_rate, 1 - positive_rate),
    }


def same(value, reference, tol=1e-12):
    """Equal to ``tol``, or both undefined (NaN / None)."""
    undefined = reference is None or (isinstance(reference, float) and math.isnan(reference))
    if undefined:
        return math.isnan(value)
    return abs(value - reference) <= tol


def released_rows(frame: pd.DataFrame, min_group_size: int) -> list[int]:
    """The rows fairpca.metrics publishes numbers of, by plain loops over sets of rows.

    Groups of every attribute and of the intersection with fewer than ``min_group_size`` of the
    remaining rows are left out until none is; while the left-out rows are 1 to
    ``min_group_size - 1``, one more intersection cell is left out: among the 64 smallest (ties:
    the first in label order, the columns ordered by their partitions), the one that leaves out
    the fewest groups, then rows.
    """
    # Columns making the same partition count once, ordered by their partitions (the codes
    # renumbered by first appearance), whatever their names and order.
    partitions = {}
    for c in frame.columns:
        partitions.setdefault(tuple(pd.factorize(frame[c], sort=False)[0].tolist()), c)
    columns = [list(frame[partitions[key]]) for key in sorted(partitions)]
    cell = list(zip(*columns, strict=True))
    groupings = columns + ([cell] if len(columns) > 1 else [])
    n = len(cell)

    def settle(rows):
        while True:
            small = [
                (keys, {k for k, c in Counter(keys[i] for i in rows).items() if c < min_group_size})
                for keys in groupings
            ]
            if not any(found for _, found in small):
                return rows
            rows = {i for i in rows if not any(keys[i] in found for keys, found in small)}

    def n_groups(rows):
        return sum(len({keys[i] for i in rows}) for keys in groupings)

    rows = settle(set(range(n)))
    while rows and 0 < n - len(rows) < min_group_size:
        sizes = Counter(cell[i] for i in rows)
        candidates = sorted(sizes, key=lambda c: (sizes[c], c))[:64]
        trials = [settle({i for i in rows if cell[i] != c}) for c in candidates]
        rows = min(trials, key=lambda t: (n_groups(rows) - n_groups(t), n - len(t)))
    return sorted(rows)
