"""Diagnostics a reviewer asks for: does a representation's fairness carry over to held-out
rows? A non-linear leakage probe, per-group reconstruction error against PCA, the group-mean
gap on held-out rows, and plain warnings when mitigation did nothing."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import balanced_accuracy_score
from threadpoolctl import threadpool_limits

from fairpca import metrics as fm

from .select import CRITERIA, GatePolicy, best_useful, ineligibility, majority_accuracy_of

PROBE_RESAMPLES = 200  # the probe's interval needs less precision than the gate's
PROBE_MAX_TRAIN_ROWS = 2500  # the probe learns from a seeded subsample (cost: trees x classes)
NEAR_CONSTANT = 1e-3  # a direction whose within-group std is below 0.1% of the median one
CARRIES_GROUP = 1.0  # ... and whose group means differ by more than one within-group std


def fair_block(rep, encoded: np.ndarray) -> np.ndarray:
    """The representation's own k columns (lambda = 0: no appended PCA block)."""
    estimator = rep.estimator
    if rep.supports_tradeoff:
        estimator = copy.deepcopy(estimator).set_params(tradeoff=0.0)
    return np.asarray(estimator.transform(encoded), dtype=np.float64)


def balanced_accuracy_interval(
    truth: np.ndarray, correct: np.ndarray, *, n_resamples: int, seed: int
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of balanced accuracy (rows resampled per class)."""
    rng = np.random.default_rng(seed)
    recalls = []
    for label in np.unique(truth):
        hits = correct[truth == label].astype(np.float64)
        draws = rng.integers(len(hits), size=(n_resamples, len(hits)))
        recalls.append(hits[draws].mean(axis=1))
    balanced = np.mean(recalls, axis=0)
    low, high = np.percentile(balanced, [2.5, 97.5])
    return float(low), float(high)


def leakage_probe(
    F_train: np.ndarray, s_train: pd.Series, F_held_out: np.ndarray, s_held_out: pd.Series, seed
) -> dict[str, float]:
    """Gradient boosting predicting the attribute from the representation (held-out rows).

    Balanced accuracy near chance (1 / number of groups) means the attribute is not
    recoverable, linearly or not; its interval is a bootstrap over the held-out rows.
    """
    truth_train = s_train.astype(str).to_numpy()
    truth = s_held_out.astype(str).to_numpy()
    if len(truth_train) > PROBE_MAX_TRAIN_ROWS:
        rows = np.random.default_rng(seed).choice(len(truth_train), PROBE_MAX_TRAIN_ROWS, False)
        F_train, truth_train = F_train[rows], truth_train[rows]
    probe = HistGradientBoostingClassifier(max_iter=40, early_stopping=False, random_state=seed)
    with threadpool_limits(limits=1):
        probe.fit(F_train, truth_train)
        predicted = probe.predict(F_held_out)
    low, high = balanced_accuracy_interval(
        truth, predicted == truth, n_resamples=PROBE_RESAMPLES, seed=seed
    )
    return {
        "balanced_accuracy": float(balanced_accuracy_score(truth, predicted)),
        "balanced_accuracy.ci95_low": low,
        "balanced_accuracy.ci95_high": high,
        "chance": 1.0 / len(np.unique(truth)),
    }


def near_constant_directions(F: np.ndarray, groups: pd.Series) -> list[dict[str, float]]:
    """Directions with almost no within-group variance whose group means still differ.

    Such a direction separates the groups on held-out rows although its training means may
    coincide (a constraint balanced by a few rows): a proxy column or a too large k.
    """
    labels = groups.astype(str).to_numpy()
    members = [labels == g for g in np.unique(labels)]
    within = np.sqrt(
        sum(((F[m] - F[m].mean(axis=0)) ** 2).sum(axis=0) for m in members) / len(labels)
    )
    means = np.stack([F[m].mean(axis=0) for m in members])
    gap = means.max(axis=0) - means.min(axis=0)
    scale = np.median(within) if np.median(within) > 0 else 1.0
    flagged = np.flatnonzero((within < NEAR_CONSTANT * scale) & (gap > CARRIES_GROUP * within))
    return [
        {"direction": int(j), "within_group_std": float(within[j]), "group_mean_gap": float(gap[j])}
        for j in flagged
    ]


def _reconstruction(rep, encoded: np.ndarray, groups: pd.DataFrame, min_group_size: int):
    """Per-group mean squared reconstruction error (groups below the minimum suppressed)."""
    if getattr(rep.estimator, "components_", None) is None:
        return None
    errors = fm.group_reconstruction_error(
        encoded, rep.estimator.components_, groups, mean=rep.estimator.mean_
    )
    sizes = {}
    for column in groups.columns:
        for label, count in groups[column].value_counts().items():
            sizes[(column, label)] = sizes[label] = int(count)
    return {
        str(key if not isinstance(key, tuple) else f"{key[0]}:{key[1]}"): value
        for key, value in errors.items()
        if sizes.get(key, 0) >= min_group_size
    }


def diagnose_representation(
    rep, encoded_train, encoded_validation, split, *, seed: int, min_group_size: int
) -> dict:
    """Probe, reconstruction error and near-constant directions of one representation;
    reconstruction errors of groups below ``min_group_size`` rows are suppressed."""
    F_train, F_held_out = fair_block(rep, encoded_train), fair_block(rep, encoded_validation)
    s_train, s_held_out = split.s_train, split.s_validation
    flagged = {c: near_constant_directions(F_held_out, s_held_out[c]) for c in s_train.columns}
    errors = _reconstruction(rep, encoded_validation, s_held_out, min_group_size)
    return {
        "leakage": {
            c: leakage_probe(F_train, s_train[c], F_held_out, s_held_out[c], seed)
            for c in s_train.columns
        },
        "near_constant_directions": {c: found for c, found in flagged.items() if found},
        "reconstruction_error": errors,
    }


def _lambda_zero(table: pd.DataFrame, variant: str, classifier: str) -> dict:
    rows = table[(table["variant"] == variant) & (table["classifier"] == classifier)]
    return {} if rows.empty else rows.sort_values("lambda_index").iloc[0].to_dict()


def _did_nothing(table: pd.DataFrame, variant: str, eligible, gated) -> list[str]:
    """The "mitigation did nothing" warning of ``variant``. Given the ``eligible`` rows (a constant
    classifier's zero disparity proves nothing) and the ``gated`` criteria: the variant's
    fairest eligible candidate is no fairer than unconstrained PCA's fairest on a gated
    measure. Without them (None): its lambda = 0 candidate of the table's first classifier
    is no fairer than PCA's on its own measure (DP, or EO for an ``_eo`` variant)."""
    if eligible is None:
        classifier = table["classifier"].iloc[0]
        metric = "eo_difference" if variant.endswith("_eo") else "dp_difference"
        fair_value, pca_value = (
            _lambda_zero(table, name, classifier).get(metric, float("nan"))
            for name in (variant, "pca")
        )
        if np.isfinite(fair_value) and np.isfinite(pca_value) and not fair_value < pca_value:
            return [
                f"mitigation did nothing: {variant} (lambda=0, {classifier}) has {metric} "
                f"{fair_value:.4f} on validation rows, not below unconstrained PCA's "
                f"{pca_value:.4f}."
            ]
        return []
    warnings = []
    fair, pca = ([r for r in eligible if r["variant"] == name] for name in (variant, "pca"))
    for criterion in gated if fair and pca else ():
        metric, larger = criterion.metric, criterion.larger_is_fairer
        values = [[float(r.get(metric, np.nan)) for r in rows] for rows in (fair, pca)]
        best = [np.nanmax(v) if larger else np.nanmin(v) for v in values if np.isfinite(v).any()]
        if len(best) == 2 and not (best[0] > best[1] if larger else best[0] < best[1]):
            warnings.append(
                f"mitigation did nothing: the fairest eligible {variant} candidate has "
                f"{metric} {best[0]:.4f} on validation rows, no better than the fairest "
                f"eligible unconstrained PCA candidate's {best[1]:.4f}."
            )
    return warnings


def mitigation_warnings(
    table: pd.DataFrame, per_variant: dict[str, dict], selection=None, majority=None
) -> list[str]:
    """Plain-language warnings when a fair variant does not do on held-out rows what it
    promises: its disparity is not below unconstrained PCA's (given ``selection`` and the
    majority-class accuracy ``majority``: among eligible candidates, on the gated measures),
    the attribute is still predictable, or near-constant directions carry the group."""
    eligible = gated = None
    if selection is not None:
        records = table.to_dict("records")
        best = best_useful(records, majority, selection)
        eligible = [r for r in records if not ineligibility(r, majority, selection, best)]
        gated = [CRITERIA[c] for c in GatePolicy.from_config(selection).criteria]
    warnings = []
    for variant, diag in per_variant.items():
        if variant == "pca":
            continue
        warnings += _did_nothing(table, variant, eligible, gated)
        for attribute, probe in diag["leakage"].items():
            if probe["balanced_accuracy.ci95_low"] > probe["chance"] + 0.05:
                base = per_variant.get("pca", {}).get("leakage", {}).get(attribute)
                versus = f", PCA {base['balanced_accuracy']:.3f}" if base else ""
                low = probe["balanced_accuracy.ci95_low"]
                high = probe["balanced_accuracy.ci95_high"]
                warnings.append(
                    f"fairness does not carry over: {attribute} is still predictable from "
                    f"{variant} on held-out rows (gradient boosting balanced accuracy "
                    f"{probe['balanced_accuracy']:.3f}, 95% CI [{low:.3f}, {high:.3f}], "
                    f"chance {probe['chance']:.3f}{versus})."
                )
        for attribute, flagged in diag["near_constant_directions"].items():
            which = ", ".join(str(d["direction"]) for d in flagged)
            warnings.append(
                f"{variant}: direction(s) {which} have almost no variance within each "
                f"{attribute} group yet separate the groups on held-out rows; use a smaller k "
                "or drop the column that duplicates the sensitive attribute."
            )
    return warnings


@task(name="diagnostics", cache_policy=NO_CACHE)
def diagnose(
    representations, encoded_train, encoded_validation, split, table, *, seed, min_group_size,
    selection=None,
) -> dict[str, Any]:
    """Per representation: leakage probe, per-group reconstruction error (beside PCA's), the
    group-mean gap on training vs held-out rows; plus the warnings. Validation rows only."""
    per_variant = {}
    for variant, rep in representations.items():
        first = table[table["variant"] == variant].sort_values("lambda_index").iloc[0]
        diag = diagnose_representation(
            rep, encoded_train, encoded_validation, split, seed=seed, min_group_size=min_group_size
        )
        gaps = ("mean_gap_train", "mean_gap_validation")
        per_variant[variant] = diag | {name: float(first[name]) for name in gaps}
    majority = majority_accuracy_of(split.y_train, split.y_validation)
    warnings = mitigation_warnings(table, per_variant, selection, majority)
    return {"representations": per_variant, "warnings": warnings}
