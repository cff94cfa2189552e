"""Choosing the audited candidate on validation rows: eligibility (useful beyond the
majority class and chance, not near-constant), the gate policy (:mod:`fairpca.tasks.policy`)
and the decision."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .evaluate import majority_class
from .policy import GatePolicy

__all__ = [
    "MAX_ONE_CLASS_SHARE",
    "MIN_ACCURACY_GAIN",
    "MIN_BALANCED_ACCURACY_MARGIN",
    "MIN_POSITIVE_RATE_RATIO",
    "ROW_STORING_CLASSIFIERS",
    "ROW_STORING_VARIANTS",
    "Decision",
    "best_pca",
    "candidate_name",
    "choose",
    "eligibility_rules",
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


# Eligibility: what a candidate must show on the validation rows before it can be chosen,
# registered or shown "for review". One place for the defaults (the config fields use them).
MIN_ACCURACY_GAIN = 0.01  # accuracy over the majority-class baseline
# Lower 95% bound of balanced accuracy (mean of TPR and TNR) over chance (0.5) by this much.
# A classifier saying "yes" for 2% of Adult rows (TPR ~0.05, TNR ~0.995) reaches ~0.52.
MIN_BALANCED_ACCURACY_MARGIN = 0.05
# The predicted-positive rate must be at least this share of the base rate, and the
# predicted-negative rate this share of the negative base rate (no collapse onto one class).
MIN_POSITIVE_RATE_RATIO = 0.25
MAX_ONE_CLASS_SHARE = 0.98  # more of one predicted class than this is degenerate


def eligibility_rules(selection) -> dict[str, float]:
    """The eligibility rules of the config's selection section (``eligibility["rules"]``)."""
    return {
        "min_accuracy_gain": float(selection.min_accuracy_gain),
        "min_balanced_accuracy_margin": float(selection.min_balanced_accuracy_margin),
        "min_positive_rate_ratio": float(selection.min_positive_rate_ratio),
        "max_one_class_share": float(selection.max_one_class_share),
    }


def _value(row: dict[str, Any], key: str, fallback: str | None = None) -> float:
    value = row.get(key, row.get(fallback) if fallback else None)
    return math.nan if value is None else float(value)


def _rate_collapse(row: dict[str, Any], ratio: float) -> list[str]:
    """Reasons when the predicted-positive rate collapsed against the base rate: the interval
    of the positive rate must reach ``ratio * base`` and that of the negative rate
    ``ratio * (1 - base)``."""
    base = _value(row, "base_rate")
    high = _value(row, "positive_rate.ci95_high", "positive_rate")
    low = _value(row, "positive_rate.ci95_low", "positive_rate")
    rate = _value(row, "positive_rate")
    if math.isnan(base) or math.isnan(rate):
        return ["positive rate or base rate unavailable"]
    reasons = []
    if not high >= ratio * base:
        reasons.append(
            f"says yes for {100 * rate:.1f}% of the rows against a base rate of "
            f"{100 * base:.1f}% (needs at least {ratio:g} x the base rate)"
        )
    if not 1.0 - low >= ratio * (1.0 - base):
        reasons.append(
            f"says no for only {100 * (1 - rate):.1f}% of the rows against "
            f"{100 * (1 - base):.1f}% negatives (needs at least {ratio:g} x)"
        )
    return reasons


def ineligibility(row: dict[str, Any], majority_accuracy: float, selection) -> list[str]:
    """Why a candidate may not be chosen at all (empty: eligible), in plain words.

    On the validation rows it must beat the majority-class accuracy by
    ``min_accuracy_gain``; the lower 95% bound of its balanced accuracy must exceed chance
    (0.5) by ``min_balanced_accuracy_margin``; its predicted-positive rate must not collapse
    against the base rate (``min_positive_rate_ratio``); and it must not predict one class
    for more than ``max_one_class_share`` of the rows. A constant or near-constant
    classifier fails: its DP and EO differences are trivially near 0.
    """
    rules = eligibility_rules(selection)
    reasons = []
    floor = majority_accuracy + rules["min_accuracy_gain"]
    if not row["accuracy"] >= floor:
        reasons.append(
            f"accuracy {row['accuracy']:.4f} does not beat the majority class "
            f"({majority_accuracy:.4f}) by {rules['min_accuracy_gain']:g}"
        )
    chance = 0.5 + rules["min_balanced_accuracy_margin"]
    low = _value(row, "balanced_accuracy.ci95_low")
    if not low >= chance:
        reasons.append(
            f"balanced accuracy {_value(row, 'balanced_accuracy'):.4f} (95% lower bound "
            f"{low:.4f}) is not above chance 0.5 by {rules['min_balanced_accuracy_margin']:g}"
        )
    reasons += _rate_collapse(row, rules["min_positive_rate_ratio"])
    if not row["one_class_share"] <= rules["max_one_class_share"]:
        reasons.append(
            f"predicts one class for {100 * row['one_class_share']:.1f}% of the rows "
            f"(degenerate above {100 * rules['max_one_class_share']:g}%)"
        )
    return reasons


def gate_failures(row: dict[str, Any], policy: GatePolicy) -> list[str]:
    """Reasons why ``row`` fails the gate ``policy`` (empty: it passes)."""
    return policy.failures(row)


def _no_eligible(records, majority_accuracy, selection, reasons) -> tuple[dict[str, Any], Decision]:
    """No candidate is eligible: the best by balanced accuracy is shown, nothing registered."""
    best = max(records, key=lambda r: (_value(r, "balanced_accuracy"), r["accuracy"]))
    why = "; ".join(ineligibility(best, majority_accuracy, selection))
    reasons.append(
        f"no candidate is eligible, so nothing is registered or promoted; the best by "
        f"balanced accuracy, {candidate_name(best)}, is shown for information only (not "
        f"eligible: {why})"
    )
    return best, Decision(False, reasons)


def _selection_key(row: dict[str, Any], measure: str) -> tuple[float, ...]:
    """Order of the passing candidates: ``measure``, then accuracy, then the smaller DP
    difference (NaN sorts last)."""
    value = _value(row, measure)
    return (
        -math.inf if math.isnan(value) else value,
        row["accuracy"],
        -row.get("dp_difference", 0.0),
    )


def select_candidate(
    table: pd.DataFrame, majority_accuracy: float, selection
) -> tuple[dict[str, Any], Decision, bool]:
    """Best eligible candidate passing the gate policy on validation rows, by the
    ``select_by`` measure (balanced accuracy unless ``selection`` says accuracy).

    Returns the row, the decision and whether the row is eligible (may be registered).
    When none passes, the eligible candidate with the smallest gate violation is chosen (for
    review, not promoted); when no candidate is eligible, none may be registered.
    """
    policy = GatePolicy.from_config(selection)
    records = table.to_dict("records")
    eligible = [r for r in records if not ineligibility(r, majority_accuracy, selection)]
    passing = [r for r in eligible if not policy.failures(r)]
    gate_text = f"the gate policy {policy.name} ({policy.bound})"
    if passing:
        measure = selection.select_by
        best = max(passing, key=lambda r: _selection_key(r, measure))
        reason = (
            f"{candidate_name(best)} has the highest {measure.replace('_', ' ')} of "
            f"{len(passing)} of {len(records)} candidates that are eligible (useful beyond the "
            f"majority class and chance) and meet {gate_text} on the validation rows"
        )
        return best, Decision(True, [reason]), True
    reasons = [f"no eligible candidate meets the thresholds of {gate_text} on the validation rows"]
    degenerate = [r for r in records if r not in eligible and not policy.failures(r)]
    if degenerate:
        reasons.append(
            f"the {len(degenerate)} candidate(s) meeting the gate are not eligible (no better "
            "than the majority class or chance, or near-constant): nothing is promoted"
        )
    if not eligible:
        best, decision = _no_eligible(records, majority_accuracy, selection, reasons)
        return best, decision, False
    best = min(eligible, key=lambda r: (policy.violation(r), -r["accuracy"]))
    reasons.append(f"least violating eligible candidate chosen for review: {candidate_name(best)}")
    reasons += policy.failures(best)
    return best, Decision(False, reasons), True


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


def choose(table: pd.DataFrame, y_train, y_validation, selection) -> dict[str, Any]:
    """The choice on validation rows: majority-class accuracy, the chosen candidate with its
    decision and eligibility, and the unconstrained PCA baseline. Never reads test rows."""
    majority_accuracy = float(np.mean(np.asarray(y_validation) == majority_class(y_train)))
    candidates = registrable(table, selection.allow_row_storing_models)
    chosen, decision, eligible = select_candidate(candidates, majority_accuracy, selection)
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
    policy = GatePolicy.from_config(selection)
    note = policy.ungated_note(chosen)
    if note:
        decision.reasons.append(note)
    return {
        "chosen": chosen,
        "decision": decision,
        "eligible": eligible,
        "eligibility": {
            "rules": eligibility_rules(selection),
            "chosen_passes": eligible,
            "reasons": ineligibility(chosen, majority_accuracy, selection),
        },
        "policy": policy,
        "majority_accuracy": majority_accuracy,
        "pca_row": best_pca(table),
    }
