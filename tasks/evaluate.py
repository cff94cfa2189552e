"""Evaluation: classifier fairness (fairlearn MetricFrame) and representation metrics."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from fairlearn.metrics import MetricFrame

from fairpca import metrics as fm

__all__ = [
    "classifier_metrics",
    "group_key",
    "representation_metrics",
    "shared_mmd_sigma",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. :/]")


def group_key(columns: list[str], label) -> str:
    """Metric-name-safe key of one (possibly intersectional) group, e.g. ``sex:Female``."""
    values = label if isinstance(label, tuple) else (label,)
    text = "/".join(f"{column}:{value}" for column, value in zip(columns, values, strict=True))
    return _UNSAFE.sub("_", text)


def _selection_rate(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """P(Yhat = 1); fairlearn's ``selection_rate`` for 0/1 predictions, without its checks."""
    return float(np.mean(np.asarray(y_pred) == 1)) if len(y_pred) else np.nan


def _true_positive_rate(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """P(Yhat = 1 | Y = 1); fairlearn's ``true_positive_rate`` for 0/1 labels (NaN if no Y=1)."""
    positive = np.asarray(y_true) == 1
    return float(np.mean(np.asarray(y_pred)[positive] == 1)) if positive.any() else np.nan


def _frame(y_true: np.ndarray, y_pred: np.ndarray, sensitive: pd.DataFrame) -> MetricFrame:
    # Plain numpy metric functions: fairlearn's own (sklearn-validated) ones cost ~20 ms per
    # group and call, which dominated the lambda sweep; the values are identical for 0/1 data.
    return MetricFrame(
        metrics={"selection_rate": _selection_rate, "tpr": _true_positive_rate},
        y_true=y_true,
        y_pred=y_pred,
        sensitive_features=sensitive,
    )


def classifier_metrics(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: pd.DataFrame
) -> dict[str, float]:
    """Accuracy, DP and EO differences and per-group selection rate / TPR.

    Groups are the intersections of all sensitive columns (fairlearn's convention);
    ``dp_difference`` is ``max_g P(Yhat=1 | g) - min_g P(Yhat=1 | g)`` and ``eo_difference``
    the same spread of ``P(Yhat=1 | g, Y=1)`` (Delta_DP and Delta_EO of Sec. 5). With several
    attributes, the per-attribute (marginal) differences are added as
    ``dp_difference.<attr>`` and ``eo_difference.<attr>``.
    """
    columns = [str(column) for column in sensitive.columns]
    frame = _frame(y_true, y_pred, sensitive)
    spread = frame.difference(method="between_groups")
    out = {
        "accuracy": float(np.mean(np.asarray(y_true) == np.asarray(y_pred))),
        "dp_difference": float(spread["selection_rate"]),
        "eo_difference": float(np.nan_to_num(spread["tpr"])),
    }
    for label, row in frame.by_group.iterrows():
        key = group_key(columns, label)
        out[f"selection_rate.{key}"] = float(row["selection_rate"])
        out[f"tpr.{key}"] = float(np.nan_to_num(row["tpr"]))
    if len(columns) > 1:
        for column in sensitive.columns:
            marginal = _frame(y_true, y_pred, sensitive[[column]])
            gaps = marginal.difference(method="between_groups")
            out[f"dp_difference.{column}"] = float(gaps["selection_rate"])
            out[f"eo_difference.{column}"] = float(np.nan_to_num(gaps["tpr"]))
    return out


def shared_mmd_sigma(Z_train: np.ndarray, k: int, *, max_rows: int, seed: int) -> float:
    """MMD bandwidth shared by all methods: median heuristic on top-k PCA of training rows."""
    from sklearn.decomposition import PCA

    projected = PCA(n_components=min(k, Z_train.shape[1]), random_state=seed).fit_transform(Z_train)
    return fm.median_heuristic_sigma(projected, max_samples=max_rows, random_state=seed)


def representation_metrics(
    features_train: np.ndarray,
    features_eval: np.ndarray,
    s_train: pd.DataFrame,
    s_eval: pd.DataFrame,
    *,
    fair_columns: int,
    constraint_rows: np.ndarray | None,
    sigma: float,
    max_rows: int,
    seed: int,
) -> dict[str, float]:
    """MMD^2, linear inseparability and residual group-mean gaps of one representation.

    ``fair_columns`` is the number of leading columns that fair PCA constrains (the fair
    block ``X U``; with a trade-off the appended PCA block is not constrained).
    ``constraint_rows`` selects the training rows the constraint was fitted on (the positive
    rows for equal opportunity, Sec. 3.2); None means all.
    """
    rows = slice(None) if constraint_rows is None else constraint_rows
    s_fit = s_train.iloc[rows] if constraint_rows is not None else s_train
    return {
        "mmd2": fm.mmd_squared(
            features_eval, s_eval, sigma=sigma, max_samples=max_rows, random_state=seed
        ),
        "linear_inseparability": fm.linear_inseparability(features_eval, s_eval, random_state=seed),
        "mean_gap_train": fm.group_mean_gap(features_train[rows, :fair_columns], s_fit),
        "mean_gap_eval": fm.group_mean_gap(features_eval[:, :fair_columns], s_eval),
    }
