"""Evaluation: classifier fairness with intervals (``fairpca.metrics``), baselines, and the
representation metrics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fairpca import metrics as fm

__all__ = [
    "classifier_metrics",
    "majority_class",
    "metrics_with_intervals",
    "one_class_share",
    "representation_metrics",
    "shared_mmd_sigma",
]


def classifier_metrics(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: pd.DataFrame, *, min_group_size: int = 1
) -> dict[str, float]:
    """Accuracy, DP and EO differences (worst attribute; per attribute; intersection) and
    per-group selection rate / TPR, as defined once in :func:`fairpca.metrics.group_fairness`.

    Groups with fewer than ``min_group_size`` rows are suppressed (not in any number).
    """
    report = fm.group_fairness(y_true, y_pred, sensitive, min_group_size=min_group_size)
    return {key: float(value) for key, value in report.as_metrics().items()}


def metrics_with_intervals(
    y_true: np.ndarray,
    y_pred: np.ndarray,
    sensitive: pd.DataFrame,
    *,
    min_group_size: int,
    n_resamples: int,
    seed: int,
) -> dict[str, float]:
    """:func:`classifier_metrics` plus 95% percentile-bootstrap intervals
    (``<metric>.ci95_low`` / ``<metric>.ci95_high``) of every difference and the accuracy.

    The bootstrap resamples rows within each (intersectional) group and re-evaluates the
    fixed predictions (no refit), so it measures the sampling error of the evaluation rows.
    """
    point = classifier_metrics(y_true, y_pred, sensitive, min_group_size=min_group_size)
    intervals = fm.bootstrap_intervals(
        y_true,
        y_pred,
        sensitive,
        min_group_size=min_group_size,
        n_resamples=n_resamples,
        confidence=0.95,
        seed=seed,
    )
    return {**point, **{key: float(v) for key, v in fm.ci_metrics(intervals).items()}}


def majority_class(y_train: np.ndarray) -> int:
    """The more frequent training label (ties: 0): the majority-class baseline's prediction."""
    return int(np.mean(np.asarray(y_train) == 1) > 0.5)


def one_class_share(y_pred: np.ndarray) -> float:
    """Share of rows given the more frequent predicted class (1.0: a constant classifier)."""
    positive = float(np.mean(np.asarray(y_pred) == 1)) if len(y_pred) else 0.0
    return max(positive, 1.0 - positive)


def shared_mmd_sigma(Z_train: np.ndarray, k: int, *, max_rows: int, seed: int) -> float:
    """MMD bandwidth shared by all methods: median heuristic on top-k PCA of training rows."""
    from sklearn.decomposition import PCA

    projected = PCA(n_components=min(k, Z_train.shape[1]), random_state=seed).fit_transform(Z_train)
    return fm.median_heuristic_sigma(projected, max_samples=max_rows, random_state=seed)


def representation_metrics(
    features_train: np.ndarray,
    features_validation: np.ndarray,
    s_train: pd.DataFrame,
    s_validation: pd.DataFrame,
    *,
    fair_columns: int,
    constraint_rows: np.ndarray | None,
    sigma: float,
    max_rows: int,
    seed: int,
) -> dict[str, Any]:
    """MMD^2, linear inseparability and residual group-mean gaps of one representation.

    ``fair_columns`` is the number of leading columns that fair PCA constrains (the fair
    block ``X U``; with a trade-off the appended PCA block is not constrained).
    ``constraint_rows`` selects the training rows the constraint was fitted on (the positive
    rows for equal opportunity, Sec. 3.2); None means all. The group-mean gap is given on the
    training rows (where the constraint holds by construction) and on the held-out
    validation rows (whether it carries over).
    """
    rows = slice(None) if constraint_rows is None else constraint_rows
    s_fit = s_train.iloc[rows] if constraint_rows is not None else s_train
    return {
        "mmd2": fm.mmd_squared(
            features_validation, s_validation, sigma=sigma, max_samples=max_rows, random_state=seed
        ),
        "linear_inseparability": fm.linear_inseparability(
            features_validation, s_validation, random_state=seed
        ),
        "mean_gap_train": fm.group_mean_gap(features_train[rows, :fair_columns], s_fit),
        "mean_gap_validation": fm.group_mean_gap(
            features_validation[:, :fair_columns], s_validation
        ),
    }
