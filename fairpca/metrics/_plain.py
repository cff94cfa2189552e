"""Group rates and differences as plain numbers and dictionaries, every group kept (no
suppression, no intervals); :func:`fairpca.metrics.group_fairness` is the audited definition."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._counts import cell_counts, rates, spread
from ._validation import _as_label_vector, _attributes, _check_same_length, _positive_mask


def _legacy_group_rates(y_true, y_pred, sensitive_features, pos_label) -> list[tuple]:
    """Per attribute (key, labels, selection rates, TPRs), for the functions below."""
    predicted = _positive_mask(y_pred, "y_pred", pos_label)
    actual = (
        np.zeros_like(predicted) if y_true is None else _positive_mask(y_true, "y_true", pos_label)
    )
    _check_same_length(y_true=actual, y_pred=predicted)
    attributes = _attributes(sensitive_features, predicted.shape[0], "sensitive_features")
    out = []
    for attribute in attributes:
        counts = cell_counts(attribute.codes, len(attribute.labels), actual, predicted)
        values = rates(counts)
        out.append((attribute, values["selection_rate"], values["tpr"]))
    return out


def _keyed(rates: list[tuple], column: int) -> dict:
    """``{key: rate}`` of column 0 (selection rates) or 1 (TPRs) of the rates above."""
    return {
        attribute.key(g): float(values[column][g])
        for attribute, *values in rates
        for g in range(len(attribute.labels))
    }


def _require_positives(rates: list[tuple], pos_label: Any) -> None:
    for attribute, _, tpr in rates:
        missing = np.flatnonzero(np.isnan(tpr))
        if missing.size:
            raise ValueError(
                f"group {attribute.key(int(missing[0]))!r} has no rows with y_true == "
                f"{pos_label!r}, so its true positive rate is undefined; check pos_label or "
                f"drop that group."
            )


def selection_rates(y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1) -> dict:
    """Fraction of positive predictions ``P(y_pred = pos_label | group)`` per group.

    Parameters
    ----------
    y_pred : array-like of shape (n_samples,)
        Binary predictions (at most two distinct values).
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).
    pos_label : hashable, default=1
        The value of ``y_pred`` meaning "positive".

    Returns
    -------
    rates : dict
        ``{label: rate}`` (``{(attribute, label): rate}`` for several attributes).

    Raises
    ------
    ValueError
        On missing values, mismatched lengths, non-binary ``y_pred``, a ``pos_label`` that is
        not one of two predicted values, or a single group.

    Examples
    --------
    >>> selection_rates([1, 0, 1, 1], ["a", "a", "b", "b"])
    {'a': 0.5, 'b': 1.0}
    """
    return _keyed(_legacy_group_rates(None, y_pred, sensitive_features, pos_label), 0)


def true_positive_rates(
    y_true: Any, y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1
) -> dict:
    """True positive rate ``P(y_pred = pos_label | y_true = pos_label, group)`` per group.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Binary true labels.
    y_pred : array-like of shape (n_samples,)
        Binary predictions.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels (see the module docstring for several attributes).
    pos_label : hashable, default=1
        The value meaning "positive" in both ``y_true`` and ``y_pred``.

    Returns
    -------
    rates : dict
        ``{label: rate}`` (``{(attribute, label): rate}`` for several attributes).

    Raises
    ------
    ValueError
        On missing values, mismatched lengths, non-binary labels, a bad ``pos_label``, a single
        group, or a group without any row with ``y_true == pos_label``.

    Examples
    --------
    >>> true_positive_rates([1, 1, 0, 1, 1], [1, 0, 1, 1, 1], [0, 0, 0, 1, 1])
    {0: 0.5, 1: 1.0}
    """
    rates = _legacy_group_rates(y_true, y_pred, sensitive_features, pos_label)
    _require_positives(rates, pos_label)
    return _keyed(rates, 1)


def _largest_spread(rates: list[tuple], column: int) -> float:
    """max - min over the groups of each attribute, then the max over attributes."""
    return max(
        float(spread(values[column], np.ones(len(attribute.labels), dtype=bool)))
        for attribute, *values in rates
    )


def demographic_parity_difference(
    y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1
) -> float:
    """Demographic parity difference: max minus min selection rate over groups.

    ``Delta_DP = max_g P(y_pred = 1 | Z = g) - min_g P(y_pred = 1 | Z = g)``; for two groups
    this is the paper's ``|P(Y^ = 1 | Z = 0) - P(Y^ = 1 | Z = 1)|``. With several attributes,
    the max over attributes.

    Parameters
    ----------
    y_pred : array-like of shape (n_samples,)
        Binary predictions.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels.
    pos_label : hashable, default=1
        The value of ``y_pred`` meaning "positive".

    Returns
    -------
    difference : float
        In [0, 1]; 0 when all groups have the same selection rate.

    Raises
    ------
    ValueError
        As :func:`selection_rates`.

    Examples
    --------
    >>> demographic_parity_difference([1, 0, 1, 1], ["a", "a", "b", "b"])
    0.5
    """
    return _largest_spread(_legacy_group_rates(None, y_pred, sensitive_features, pos_label), 0)


def equal_opportunity_difference(
    y_true: Any, y_pred: Any, sensitive_features: Any, *, pos_label: Any = 1
) -> float:
    """Equal opportunity difference: max minus min true positive rate over groups.

    ``Delta_EO = max_g P(y_pred = 1 | Y = 1, Z = g) - min_g P(y_pred = 1 | Y = 1, Z = g)``
    (Section 5.2); with several attributes, the max over attributes.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Binary true labels.
    y_pred : array-like of shape (n_samples,)
        Binary predictions.
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels.
    pos_label : hashable, default=1
        The value meaning "positive" in both ``y_true`` and ``y_pred``.

    Returns
    -------
    difference : float
        In [0, 1]; 0 when all groups have the same true positive rate.

    Raises
    ------
    ValueError
        As :func:`true_positive_rates`.

    Examples
    --------
    >>> equal_opportunity_difference([1, 1, 0, 1, 1], [1, 0, 1, 1, 1], [0, 0, 0, 1, 1])
    0.5
    """
    rates = _legacy_group_rates(y_true, y_pred, sensitive_features, pos_label)
    _require_positives(rates, pos_label)
    return _largest_spread(rates, 1)


def accuracy(y_true: Any, y_pred: Any) -> float:
    """Fraction of rows where ``y_pred == y_true`` (as scikit-learn's ``accuracy_score``).

    Unlike ``accuracy_score`` it accepts labels of any hashable type, mixed types included.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_pred : array-like of shape (n_samples,)
        Predicted labels.

    Returns
    -------
    accuracy : float
        In [0, 1].

    Raises
    ------
    ValueError
        On missing values, empty or non-1-D input, or mismatched lengths.

    Examples
    --------
    >>> accuracy([0, 1, 1, 0], [0, 1, 0, 0])
    0.75
    """
    truth = _as_label_vector(y_true, "y_true")
    predicted = _as_label_vector(y_pred, "y_pred")
    _check_same_length(y_true=truth, y_pred=predicted)
    return float(np.mean(np.asarray(truth == predicted, dtype=bool)))
