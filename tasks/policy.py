"""The fairness gate as a named policy: which disparity measures a candidate must meet, with
which thresholds, compared on interval bounds or point estimates.

A policy name is one criterion or several joined by ``+`` (all must hold):

- ``demographic_parity``: the selection-rate difference ``dp_difference`` at most
  ``max_dp_difference``;
- ``equal_opportunity``: the true-positive-rate difference ``eo_difference`` at most
  ``max_eo_difference``;
- ``equalized_odds``: the larger of the TPR and FPR differences,
  ``equalized_odds_difference``, at most ``max_equalized_odds_difference``;
- ``four_fifths``: the selection-rate ratio (smallest over largest group selection rate,
  ``selection_rate_ratio``) at least ``min_selection_rate_ratio`` (the US EEOC's 4/5 rule).

Each criterion is checked on the worst single attribute and, with several attributes, on
their intersection where it is defined (at least two intersection groups with
``min_group_size`` rows; groups below that size carry no number and are named ungated).
Under ``upper_bound`` a difference's upper 95% bound must meet the threshold (the data must
show the candidate is fair enough); under ``point`` the estimate. The four-fifths rule is
defined on observed selection rates and always compares the estimate.
The accuracy floor ``min_accuracy`` applies under every policy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CRITERIA",
    "DEFAULT_BOUND",
    "DEFAULT_POLICY",
    "LEGACY_POLICY",
    "Criterion",
    "GatePolicy",
    "parse_policy",
]


@dataclass(frozen=True)
class Criterion:
    """One gated measure: ``metric`` compared with the threshold field ``threshold``."""

    metric: str
    threshold: str
    label: str
    larger_is_fairer: bool = False  # a ratio (four-fifths) rather than a difference
    point_rule: bool = False  # defined on observed rates: the estimate under every bound

    def bound(self, metrics: Mapping[str, Any], scope: str, bound: str) -> float:
        """The value the gate compares: the estimate, or the interval end that is least fair."""
        name = f"{self.metric}{scope}"
        if bound == "upper_bound" and not self.point_rule:
            name += ".ci95_low" if self.larger_is_fairer else ".ci95_high"
        value = metrics.get(name, math.nan)
        return math.nan if value is None else float(value)

    def meets(self, value: float, limit: float) -> bool:
        return value >= limit if self.larger_is_fairer else value <= limit

    def excess(self, value: float, limit: float) -> float:
        """How far ``value`` is on the wrong side of ``limit`` (0 when it meets it)."""
        if math.isnan(value):
            return 1.0
        return max(0.0, limit - value) if self.larger_is_fairer else max(0.0, value - limit)


CRITERIA: dict[str, Criterion] = {
    "demographic_parity": Criterion("dp_difference", "max_dp_difference", "DP difference"),
    "equal_opportunity": Criterion("eo_difference", "max_eo_difference", "EO (TPR) difference"),
    "equalized_odds": Criterion(
        "equalized_odds_difference",
        "max_equalized_odds_difference",
        "equalized odds difference (max of TPR and FPR differences)",
    ),
    # The four-fifths rule compares observed selection rates (US EEOC Uniform Guidelines,
    # 29 CFR 1607.4(D)); the lower bound of a ratio of two noisy rates on 2,500 rows sits
    # ~0.2 below its estimate, so judged on the bound no useful Adult classifier passes it.
    "four_fifths": Criterion(
        "selection_rate_ratio",
        "min_selection_rate_ratio",
        "selection-rate ratio",
        larger_is_fairer=True,
        point_rule=True,
    ),
}
# Demographic parity with the four-fifths rule: on Adult, equal opportunity on top of it is
# met only by classifiers that hardly ever predict the positive class.
DEFAULT_POLICY = "demographic_parity+four_fifths"
# The fixed pair every audit used before gates were named (versions without a policy tag).
LEGACY_POLICY = "demographic_parity+equal_opportunity"
POLICY_TAG = "fairness.policy"  # a registered version's policy, as JSON
BOUNDS = ("upper_bound", "point")
# Estimates by default: on 2,500 validation rows the upper 95% bound of a fair classifier's DP
# difference at a 25% selection rate is ~0.07, so judged on it at 0.05 only classifiers that
# rarely say yes pass. ``upper_bound`` is the strict option for large validation parts.
DEFAULT_BOUND = "point"
INTERSECTION = ".intersection"


def parse_policy(name: str) -> tuple[str, ...]:
    """The criteria of a policy name, in the canonical order of :data:`CRITERIA`.

    Raises
    ------
    ValueError
        For an unknown or repeated criterion; the message lists the known ones.
    """
    parts = [part.strip() for part in str(name).split("+")]
    unknown = [part for part in parts if part not in CRITERIA]
    if unknown or not parts:
        raise ValueError(
            f"unknown gate policy part(s) {unknown} in {name!r}; use one of "
            f"{', '.join(CRITERIA)} or several joined by '+', e.g. {DEFAULT_POLICY!r}."
        )
    if len(set(parts)) != len(parts):
        raise ValueError(f"gate policy {name!r} names a criterion twice; give each once.")
    return tuple(criterion for criterion in CRITERIA if criterion in parts)


@dataclass(frozen=True)
class GatePolicy:
    """A named gate: criteria, their thresholds (plus ``min_accuracy``) and the bound used."""

    criteria: tuple[str, ...]
    thresholds: dict[str, float]
    bound: str = DEFAULT_BOUND

    @classmethod
    def from_config(cls, config) -> GatePolicy:
        """The policy of an audit config (``policy``, ``thresholds``, ``gate``)."""
        criteria = parse_policy(config.policy)
        values = config.thresholds.model_dump()
        used = {CRITERIA[c].threshold: float(values[CRITERIA[c].threshold]) for c in criteria}
        return cls(criteria, used | {"min_accuracy": float(values["min_accuracy"])}, config.gate)

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> GatePolicy:
        """The policy a registered version was chosen under (its ``fairness.policy`` tag, or
        the ``policy``, ``gate`` and ``threshold.*`` tags of earlier versions); a version from
        before named policies had the legacy pair."""
        if POLICY_TAG in tags:
            value = json.loads(tags[POLICY_TAG])
            thresholds = {key: float(limit) for key, limit in value["thresholds"].items()}
            return cls(parse_policy(value["name"]), thresholds, value["bound"])
        criteria = parse_policy(tags.get("policy", LEGACY_POLICY))
        thresholds = {
            key.removeprefix("threshold."): float(value)
            for key, value in tags.items()
            if key.startswith("threshold.")
        }
        bound = tags.get("policy.bound") or tags.get("fairness.gate") or "upper_bound"
        return cls(criteria, thresholds, bound if bound in BOUNDS else "point")

    @property
    def name(self) -> str:
        return "+".join(self.criteria)

    def description(self) -> str:
        """One sentence a reviewer can read."""
        where = "the 95% interval bound" if self.bound == "upper_bound" else "the point estimate"
        parts = []
        for key in self.criteria:
            criterion = CRITERIA[key]
            sign = ">=" if criterion.larger_is_fairer else "<="
            point = " (point estimate, as the rule is defined)" if criterion.point_rule else ""
            limit = self.thresholds[criterion.threshold]
            parts.append(f"{criterion.label} {sign} {limit:g}{point}")
        parts.append(f"accuracy >= {self.thresholds.get('min_accuracy', 0.0):g}")
        return (
            f"{self.name}: {'; '.join(parts)}, judged on {where} on the validation rows, for "
            "the worst attribute and for their intersection where its groups are large enough"
        )

    def record(self) -> dict[str, Any]:
        """The ``policy`` entry of the audit record."""
        return {
            "name": self.name,
            "thresholds": dict(self.thresholds),
            "description": self.description(),
        }

    def tags(self) -> dict[str, str]:
        """The one tag of a registered version that :meth:`from_tags` reads back."""
        value = {"name": self.name, "bound": self.bound, "thresholds": dict(self.thresholds)}
        return {POLICY_TAG: json.dumps(value, sort_keys=True)}

    def _scopes(self, metrics: Mapping[str, Any]) -> list[str]:
        several = any(str(key).endswith(INTERSECTION) for key in metrics)
        return ["", INTERSECTION] if several else [""]

    def failures(self, metrics: Mapping[str, Any]) -> list[str]:
        """Why ``metrics`` fail the policy (empty: they pass). An undefined worst-attribute
        value fails; an undefined intersection (groups too small) is not gated."""
        failures = []
        for key in self.criteria:
            criterion = CRITERIA[key]
            limit = self.thresholds[criterion.threshold]
            bounded = self.bound == "upper_bound" and not criterion.point_rule
            label = f" (95% {'lower' if criterion.larger_is_fairer else 'upper'} bound)"
            label = label if bounded else ""
            for scope in self._scopes(metrics):
                value = criterion.bound(metrics, scope, self.bound)
                if scope and math.isnan(value):
                    continue  # too few large intersection groups: reported as ungated
                if not criterion.meets(value, limit):
                    sign = "< min" if criterion.larger_is_fairer else "> max"
                    where = " of the intersection" if scope else ""
                    failures.append(
                        f"{criterion.label}{where}{label} {value:.4f} {sign} {limit:g}"
                        if not math.isnan(value)
                        else f"{criterion.label}{where} is undefined (fewer than two groups "
                        "large enough to compare)"
                    )
        bounded = self.bound == "upper_bound"
        accuracy = metrics.get("accuracy.ci95_low" if bounded else "accuracy")
        floor = self.thresholds.get("min_accuracy", 0.0)
        if accuracy is None or not float(accuracy) >= floor:
            low = " (95% lower bound)" if bounded else ""
            shown = "undefined" if accuracy is None else f"{float(accuracy):.4f}"
            failures.append(f"accuracy{low} {shown} < min {floor:g}")
        return failures

    def violation(self, metrics: Mapping[str, Any]) -> float:
        """Total excess over the thresholds (0 when the policy is met); ranks candidates."""
        total = 0.0
        for key in self.criteria:
            criterion = CRITERIA[key]
            limit = self.thresholds[criterion.threshold]
            for scope in self._scopes(metrics):
                value = criterion.bound(metrics, scope, self.bound)
                if not (scope and math.isnan(value)):
                    total += criterion.excess(value, limit)
        return total

    def ungated_note(self, metrics: Mapping[str, Any]) -> str | None:
        """A sentence when several attributes are audited but the intersection is ungated."""
        scopes = self._scopes(metrics)
        if INTERSECTION not in scopes:
            return None
        undefined = [
            CRITERIA[key].label
            for key in self.criteria
            if math.isnan(CRITERIA[key].bound(metrics, INTERSECTION, self.bound))
        ]
        if not undefined:
            return None
        return (
            f"the intersection of the attributes is not gated for {', '.join(undefined)}: fewer "
            "than two intersection groups have enough validation rows to compare"
        )

    def laxer_than(self, other: GatePolicy) -> list[str]:
        """Every way this policy is laxer than ``other`` (empty: at least as strict)."""
        reasons = [f"it does not gate {key}" for key in other.criteria if key not in self.criteria]
        for key in other.criteria:
            criterion = CRITERIA[key]
            mine = self.thresholds.get(criterion.threshold)
            theirs = other.thresholds.get(criterion.threshold)
            if mine is None or theirs is None:
                continue  # not gated here (reported above) or not recorded there
            if mine != theirs and criterion.meets(theirs, mine):  # theirs is on the fair side
                reasons.append(f"{criterion.threshold} {mine:g} is laxer than {theirs:g}")
        if self.thresholds.get("min_accuracy", 0.0) < other.thresholds.get("min_accuracy", 0.0):
            reasons.append(
                f"min_accuracy {self.thresholds.get('min_accuracy', 0.0):g} is laxer than "
                f"{other.thresholds.get('min_accuracy', 0.0):g}"
            )
        if self.bound == "point" and other.bound == "upper_bound":
            reasons.append("it judges point estimates, not the 95% interval bounds")
        return reasons
