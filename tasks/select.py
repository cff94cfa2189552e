"""Choosing the audited candidate on validation rows: eligibility against the majority-class
baseline, the fairness gate (interval bounds or point estimates) and the decision."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .evaluate import majority_class

__all__ = [
    "ROW_STORING_CLASSIFIERS",
    "ROW_STORING_VARIANTS",
    "Decision",
    "best_pca",
    "candidate_name",
    "choose",
    "gate_failures",
    "ineligibility",
    "registrable",
    "require_fair_variant",
    "select_candidate",
]

ROW_STORING_VARIANTS = ("fair_kernel_pca",)  # keeps its training points (kernel map)
ROW_STORING_CLASSIFIERS = ("rbf_svc",)  # keeps support vectors (projected training rows)


@dataclass
class Decision:
    """Whether the chosen model may become champion, and why."""

    promote: bool
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "reasons": list(self.reasons)}


def candidate_name(row: dict[str, Any]) -> str:
    """``variant/classifier@lambda=..`` (no lambda for standard PCA)."""
    lam = row.get("lambda")
    suffix = (
        "" if lam is None or (isinstance(lam, float) and math.isnan(lam)) else f"@lambda={lam:g}"
    )
    return f"{row['variant']}/{row['classifier']}{suffix}"


def ineligibility(row: dict[str, Any], majority_accuracy: float, config) -> list[str]:
    """Why a candidate may not be chosen at all (empty: eligible).

    It must beat the majority-class validation accuracy by ``min_accuracy_gain`` and must not
    predict one class for ``max_one_class_share`` of the rows or more (a constant classifier
    trivially has DP = EO = 0).
    """
    reasons = []
    floor = majority_accuracy + config.min_accuracy_gain
    if not row["accuracy"] >= floor:
        reasons.append(
            f"accuracy {row['accuracy']:.4f} does not beat the majority class "
            f"({majority_accuracy:.4f}) by {config.min_accuracy_gain}"
        )
    if row["one_class_share"] >= config.max_one_class_share:
        reasons.append(
            f"predicts one class for {100 * row['one_class_share']:.1f}% of the rows "
            f"(degenerate at >= {100 * config.max_one_class_share:g}%)"
        )
    return reasons


def _bound(row: dict[str, Any], metric: str, side: str, gate: str) -> float:
    """The value the gate compares: the point estimate or one end of the 95% interval."""
    if gate == "point":
        return row.get(metric, math.nan)
    return row.get(f"{metric}.ci95_{side}", math.nan)


def gate_failures(row: dict[str, Any], thresholds, gate: str) -> list[str]:
    """Reasons why ``row`` fails the thresholds under ``gate`` (empty: it passes).

    ``upper_bound`` compares the upper ends of the DP and EO intervals and the lower end of
    the accuracy interval; ``point`` the point estimates. A NaN (e.g. fewer than two groups
    large enough to compare) fails.
    """
    label = "" if gate == "point" else " (95% upper bound)"
    failures = []
    for metric, name, limit in (
        ("dp_difference", "DP difference", thresholds.max_dp_difference),
        ("eo_difference", "EO difference", thresholds.max_eo_difference),
    ):
        value = _bound(row, metric, "high", gate)
        if not value <= limit:
            failures.append(f"{name}{label} {value:.4f} > max {limit}")
    accuracy = _bound(row, "accuracy", "low", gate)
    if not accuracy >= thresholds.min_accuracy:
        low = "" if gate == "point" else " (95% lower bound)"
        failures.append(f"accuracy{low} {accuracy:.4f} < min {thresholds.min_accuracy}")
    return failures


def _violation(row: dict[str, Any], thresholds, gate: str) -> float:
    values = (
        _bound(row, "dp_difference", "high", gate) - thresholds.max_dp_difference,
        _bound(row, "eo_difference", "high", gate) - thresholds.max_eo_difference,
        thresholds.min_accuracy - _bound(row, "accuracy", "low", gate),
    )
    return sum(max(0.0, v) if not math.isnan(v) else 1.0 for v in values)


def select_candidate(
    table: pd.DataFrame, majority_accuracy: float, config
) -> tuple[dict[str, Any], Decision]:
    """Most accurate eligible candidate passing the gate on validation rows.

    When none passes, the eligible candidate with the smallest gate violation is chosen (for
    review, not promoted); when no candidate is eligible, the most accurate one. A run whose
    only gate-passing candidates are degenerate says so and promotes nothing.
    """
    records = table.to_dict("records")
    eligible = [r for r in records if not ineligibility(r, majority_accuracy, config)]
    passing = [r for r in eligible if not gate_failures(r, config.thresholds, config.gate)]
    gate_text = "interval bounds" if config.gate == "upper_bound" else "point estimates"
    if passing:
        best = max(passing, key=lambda r: (r["accuracy"], -r.get("dp_difference", 0.0)))
        reason = (
            f"{candidate_name(best)} is the most accurate of {len(passing)} of {len(records)} "
            f"candidates that beat the majority class and meet the thresholds ({gate_text}) "
            "on the validation rows"
        )
        return best, Decision(True, [reason])
    reasons = [f"no eligible candidate meets the thresholds ({gate_text}) on the validation rows"]
    degenerate_passing = [
        r
        for r in records
        if r not in eligible and not gate_failures(r, config.thresholds, config.gate)
    ]
    if degenerate_passing:
        reasons.append(
            f"the {len(degenerate_passing)} candidate(s) meeting the thresholds are degenerate "
            "(no better than the majority class, or predicting one class): nothing is promoted"
        )
    if eligible:
        best = min(
            eligible, key=lambda r: (_violation(r, config.thresholds, config.gate), -r["accuracy"])
        )
        reasons.append(
            f"least violating eligible candidate chosen for review: {candidate_name(best)}"
        )
        reasons += gate_failures(best, config.thresholds, config.gate)
    else:
        best = max(records, key=lambda r: r["accuracy"])
        reasons.append(
            f"no candidate is eligible; the most accurate chosen for review: {candidate_name(best)}"
        )
        reasons += ineligibility(best, majority_accuracy, config)
    return best, Decision(False, reasons)


def best_pca(table: pd.DataFrame) -> dict[str, Any] | None:
    """The unconstrained PCA baseline: the most accurate ``pca`` candidate on validation."""
    pca = table[table["variant"] == "pca"]
    if pca.empty:
        return None
    return pca.loc[pca["accuracy"].idxmax()].to_dict()


def registrable(table: pd.DataFrame, allow_row_storing_models: bool) -> pd.DataFrame:
    """Candidates that may become the logged model.

    Unless ``allow_row_storing_models``, pipelines whose fitted state holds (projected)
    training rows are audited but not logged, so no per-person data reaches MLflow.
    """
    if allow_row_storing_models:
        return table
    keep = ~table["variant"].isin(ROW_STORING_VARIANTS) & ~table["classifier"].isin(
        ROW_STORING_CLASSIFIERS
    )
    if not keep.any():
        raise ValueError(
            "every candidate stores training rows in its fitted state (RBF SVC support "
            "vectors, fair kernel PCA training points), so none can be logged as a model; add "
            "logreg, linear_svm or mlp and a linear variant, or set allow_row_storing_models."
        )
    return table[keep]


def require_fair_variant(requested: list[str], skipped: dict[str, str], n_features: int) -> None:
    """Fail when fair variants were asked for and none could be fitted.

    An audit of standard PCA alone would otherwise pass for a fairness audit.
    """
    fair = [variant for variant in requested if variant != "pca"]
    if fair and all(variant in skipped for variant in fair):
        reasons = "; ".join(f"{variant}: {skipped[variant]}" for variant in fair)
        raise ValueError(
            f"no fair variant could be fitted, so this audit cannot assess any mitigation "
            f"({reasons}). The data have {n_features} encoded features: pass a smaller k "
            "(e.g. -k 2) or data with more feature columns."
        )


def _undefined(table: pd.DataFrame, metric: str) -> bool:
    return metric not in table or bool(table[metric].isna().all())


def choose(table: pd.DataFrame, y_train, y_validation, config) -> dict[str, Any]:
    """The choice on validation rows: majority-class accuracy, the chosen candidate with its
    decision, and the unconstrained PCA baseline. Never reads test rows."""
    majority_accuracy = float(np.mean(np.asarray(y_validation) == majority_class(y_train)))
    candidates = registrable(table, config.allow_row_storing_models)
    chosen, decision = select_candidate(candidates, majority_accuracy, config)
    if len(candidates) < len(table):
        decision.reasons.append(
            f"{len(table) - len(candidates)} candidates (RBF SVC, fair kernel PCA) were audited "
            "but not eligible for registration: their fitted state stores training rows"
        )
    undefined = [m for m in ("dp_difference", "eo_difference") if _undefined(table, m)]
    if undefined:
        decision.reasons.append(
            f"{' and '.join(undefined)} undefined on the validation rows for every candidate: "
            "fewer than two groups of a sensitive attribute have min_group_size rows (for "
            "eo_difference: rows with label 1), so no candidate can meet the thresholds"
        )
    return {
        "chosen": chosen,
        "decision": decision,
        "majority_accuracy": majority_accuracy,
        "pca_row": best_pca(table),
    }
