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

Choosing the audited candidate on validation rows: eligibility (useful beyond the
majority class and chance, not near-constant), the gate policy (:mod:`fairpca.tasks.select`)
and the decision."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import CERTIFY_Z, DEFAULT_BOUND, DEFAULT_CERTIFY_FACTOR, DEFAULT_POLICY
from .decision import Decision, Deployment, Kind, Reason, note, render
from .evaluate import CELL_ROWS, INTERSECTION, extreme_pair, majority_class


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
        return _value(metrics, name)

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
# The messages of the refusals below (str.format templates; tests name them, not their words)
UNKNOWN_POLICY_PARTS = (
    "unknown gate policy part(s) {unknown} in {name!r}; use one of {known} or several joined "
    "by '+', e.g. {default!r}."
)
POLICY_TAG = "fairness.policy"  # a registered version's policy, as JSON
# A cell of the intersection is judged where this many standard errors of its selection rate
# (a 95% half-width) fit in the policy's band (:meth:`GatePolicy.judged_cells`).
RESOLVE_Z = 1.959964


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
            UNKNOWN_POLICY_PARTS.format(
                unknown=unknown, name=name, known=", ".join(CRITERIA), default=DEFAULT_POLICY
            )
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
    deployment: Deployment = dataclasses.field(default_factory=Deployment)

    @classmethod
    def from_config(cls, selection) -> GatePolicy:
        """The policy of a selection config section (``policy``, ``thresholds``, ``gate``,
        and the deployment: ``sensitive_at_prediction``, ``randomized_decisions``)."""
        criteria = parse_policy(selection.policy)
        names = [*(CRITERIA[c].threshold for c in criteria), "min_accuracy"]
        limits = {name: float(getattr(selection.thresholds, name)) for name in names}
        return cls(criteria, limits, selection.gate, Deployment.of(selection))

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> GatePolicy:
        """The policy a registered version was chosen under (its ``fairness.policy`` tag)."""
        value = json.loads(tags[POLICY_TAG])
        thresholds = {key: float(limit) for key, limit in value["thresholds"].items()}
        deployment = Deployment(**value.get("deployment", {}))
        return cls(parse_policy(value["name"]), thresholds, value["bound"], deployment)

    @property
    def name(self) -> str:
        return "+".join(self.criteria)

    def description(self) -> str:
        """One sentence a reviewer can read."""
        where = "the 95% interval bound" if self.bound == "upper_bound" else "the point estimate"
        parts = []
        for criterion, limit in self.limits():
            sign = ">=" if criterion.larger_is_fairer else "<="
            point = " (point estimate, as the rule is defined)" if criterion.point_rule else ""
            parts.append(f"{criterion.label} {sign} {limit:g}{point}")
        parts.append(f"accuracy >= {self.thresholds.get('min_accuracy', 0.0):g}")
        return (
            f"{self.name}: {'; '.join(parts)}, judged on {where} on the validation rows, for "
            "the worst attribute and for their intersection's cells whose rows resolve the "
            f"policy's band; deployment: {self.deployment.description()}"
        )

    def record(self, tag: bool = False) -> dict[str, Any]:
        """The ``policy`` entry of the audit record (``tag``: with the bound, as :meth:`tags`
        writes it, instead of the description)."""
        value = {"name": self.name, "thresholds": dict(self.thresholds)}
        value |= {"bound": self.bound} if tag else {"description": self.description()}
        return value | {"deployment": self.deployment.as_dict()}

    def tags(self) -> dict[str, str]:
        """The one tag of a registered version that :meth:`from_tags` reads back."""
        return {POLICY_TAG: json.dumps(self.record(tag=True), sort_keys=True)}

    def limits(self) -> list[tuple[Criterion, float]]:
        """Each gated criterion with its threshold, in the canonical order."""
        return [(CRITERIA[key], self.thresholds[CRITERIA[key].threshold]) for key in self.criteria]

    def _scopes(self, metrics: Mapping[str, Any]) -> list[str]:
        several = any(str(key).endswith(INTERSECTION) for key in metrics)
        return ["", INTERSECTION] if several else [""]

    def band(self, rate: float) -> float:
        """The narrowest band of a rate the policy tells apart, at an overall selection rate
        ``rate``: a difference's limit, or for the four-fifths rule the gap ``(1 - ratio)
        rate`` between two rates at the limit."""
        bands = [(1.0 - lim) * rate if c.larger_is_fairer else lim for c, lim in self.limits()]
        return min((band for band in bands if band > 0), default=math.inf)

    def judged_cells(self, metrics: Mapping[str, Any]) -> tuple[list[str], list[str]] | None:
        """The intersection's reported cells the gate judges and those it leaves out (None
        when the metrics name no cell): a cell is judged where the 95% half-width of its
        selection rate, at the rows' overall rate, is within :meth:`band`. A cell of 26-51
        rows cannot resolve a 0.05 band: judged on its point estimate, a perfectly fair
        classifier would fail the gate there about as often as not."""
        rows = {
            str(key).removeprefix(CELL_ROWS): float(value)
            for key, value in metrics.items()
            if str(key).startswith(CELL_ROWS)
        }
        if not rows:
            return None
        rate = min(max(_value(metrics, "positive_rate"), 1e-6), 1 - 1e-6)
        if math.isnan(rate):
            return list(rows), []
        needed = RESOLVE_Z**2 * rate * (1 - rate) / self.band(rate) ** 2
        judged = [cell for cell, n in rows.items() if n >= needed]
        return judged, [cell for cell in rows if cell not in judged]

    def _judged(self, metrics: Mapping[str, Any], metric: str) -> tuple[float, float] | None:
        """``(value, standard error)`` of ``metric`` over the judged cells of the
        intersection (NaN with fewer than two); None when the metrics name no cell."""
        cells = self.judged_cells(metrics)
        if cells is None:
            return None
        judged = cells[0]  # fewer than two: NaN (pair)
        rows = np.array([_value(metrics, f"{CELL_ROWS}{c}") for c in judged])
        base = np.array([_value(metrics, f"base_rate.{c}") for c in judged])

        def pair(rate: str, n: np.ndarray, ratio: bool = False) -> tuple[float, float]:
            values = np.array([_value(metrics, f"{rate}.{c}") for c in judged])
            keep = np.isfinite(values) & (n > 0)
            if keep.sum() < 2:
                return math.nan, math.nan
            clipped = np.clip(values[keep], 0.5 / n[keep], 1 - 0.5 / n[keep])
            return extreme_pair(values[keep], n[keep], ratio=ratio, clipped=clipped)

        if metric in ("dp_difference", "selection_rate_ratio"):
            return pair("selection_rate", rows, ratio=metric == "selection_rate_ratio")
        eo = pair("tpr", np.round(base * rows))
        if metric == "eo_difference":
            return eo
        fpr = pair("fpr", np.round((1 - base) * rows))
        return max(eo, fpr, key=lambda v: -math.inf if math.isnan(v[0]) else v[0])

    def _gated(self, metrics: Mapping[str, Any]):
        """``(criterion, limit, scope, value)`` of every measure the policy gates, for the
        worst attribute and, with several, their intersection: :meth:`Criterion.bound`, or for
        a point-judged measure of the intersection its value over the cells that resolve the
        policy (:meth:`judged_cells`). The value of an undefined intersection (too few large
        groups) is NaN: ungated."""
        scopes = self._scopes(metrics)
        for criterion, limit in self.limits():
            point = self.bound == "point" or criterion.point_rule
            for scope in scopes:
                judged = self._judged(metrics, criterion.metric) if scope and point else None
                value = criterion.bound(metrics, scope, self.bound) if judged is None else judged[0]
                yield criterion, limit, scope, value

    def failures(self, metrics: Mapping[str, Any]) -> list[str]:
        """Why ``metrics`` fail the policy, in words (empty: they pass): :meth:`failed_rules`
        rendered."""
        return [render(reason) for reason in self.failed_rules(metrics)]

    def failed_rules(self, metrics: Mapping[str, Any], rows: str = "") -> list[Reason]:
        """Each rule of the policy ``metrics`` fail (empty: they pass), as a
        :attr:`~fairpca.tasks.decision.Kind.FAILS_RULE` reason measured on ``rows`` (empty:
        not named). An undefined worst-attribute value fails; an undefined intersection
        (groups too small) is not gated."""
        failures = []
        for criterion, limit, scope, value in self._gated(metrics):
            if (scope and math.isnan(value)) or criterion.meets(value, limit):
                continue  # met, or too few large intersection groups: reported as ungated
            where = ["intersection"] if scope else []
            numbers = {}
            flags = ("undefined", *where)
            if not math.isnan(value):
                if self.bound == "upper_bound" and not criterion.point_rule:
                    where.append("bound")
                if criterion.larger_is_fairer:
                    where.append("minimum")
                numbers = {"value": value, "limit": limit}
                flags = ("gate", *where)
            failures.append(Reason(kind=Kind.FAILS_RULE, measure=criterion.metric, rows=rows,
                                   numbers=numbers, flags=flags))  # fmt: skip
        bounded = self.bound == "upper_bound"
        accuracy = metrics.get("accuracy.ci95_low" if bounded else "accuracy")
        floor = self.thresholds.get("min_accuracy", 0.0)
        if accuracy is None or not float(accuracy) >= floor:
            measured = {} if accuracy is None else {"value": float(accuracy)}
            flags = ("gate", "bound", "minimum") if bounded else ("gate", "minimum")
            failures.append(Reason(
                kind=Kind.FAILS_RULE, measure="accuracy", rows=rows,
                numbers=measured | {"limit": floor}, flags=flags,
            ))  # fmt: skip
        return failures

    def violation(self, metrics: Mapping[str, Any]) -> float:
        """Total excess over the thresholds (0 when the policy is met); ranks candidates."""
        return sum(
            criterion.excess(value, limit)
            for criterion, limit, scope, value in self._gated(metrics)
            if not (scope and math.isnan(value))
        )

    def ungated_note(self, metrics: Mapping[str, Any]) -> str | None:
        """A sentence when several attributes are audited but the intersection is ungated."""
        gated = self._gated(metrics)
        undefined = [c.label for c, _, scope, value in gated if scope and math.isnan(value)]
        if not undefined:
            return None
        return (
            f"the intersection of the attributes is not gated for {', '.join(undefined)}: fewer "
            "than two intersection groups have enough validation rows to compare"
        )

    def cells_note(self, metrics: Mapping[str, Any]) -> str | None:
        """A sentence naming the intersection's cells the gate did not judge (None: every
        reported cell was judged)."""
        judged, left_out = self.judged_cells(metrics) or ([], [])
        if not left_out:
            return None
        return (
            f"not judged by the gate: {len(left_out)} intersection cell(s) with too few rows "
            f"to resolve the policy's band ({', '.join(left_out)}); the intersection is judged "
            f"on the {len(judged)} cell(s) that resolve it"
        )

    def laxer_than(self, other: GatePolicy) -> list[str]:
        """Every way this policy is laxer than ``other`` (empty: at least as strict)."""
        reasons = [f"it does not gate {key}" for key in other.criteria if key not in self.criteria]
        for key in other.criteria:
            criterion = CRITERIA[key]
            mine = self.thresholds.get(criterion.threshold)
            theirs = other.thresholds.get(criterion.threshold)
            # None: not gated here (reported above) or not recorded there
            recorded = mine is not None and theirs is not None
            if recorded and mine != theirs and criterion.meets(theirs, mine):  # theirs is fairer
                reasons.append(f"{criterion.threshold} {mine:g} is laxer than {theirs:g}")
        mine, theirs = (policy.thresholds.get("min_accuracy", 0.0) for policy in (self, other))
        if mine < theirs:
            reasons.append(f"min_accuracy {mine:g} is laxer than {theirs:g}")
        if self.bound == "point" and other.bound == "upper_bound":
            reasons.append("it judges point estimates, not the 95% interval bounds")
        return reasons


ROW_STORING_VARIANTS = ("fair_kernel_pca",)  # keeps its training points (kernel map)
ROW_STORING_CLASSIFIERS = ("rbf_svc",)  # keeps support vectors (projected training rows)


def candidate_name(row: dict[str, Any]) -> str:
    """``variant/classifier@k=..,lambda=..`` (no lambda for standard PCA; no k for the
    reference mitigations' rows, which have none)."""
    parts = [f"k={int(row['k'])}"] if pd.notna(row.get("k")) else []
    if pd.notna(row.get("lambda")):
        parts.append(f"lambda={row['lambda']:g}")
    suffix = f"@{','.join(parts)}" if parts else ""
    return f"{row['variant']}/{row['classifier']}{suffix}"


# Eligibility: what a candidate must show on the validation rows before it can be chosen,
# registered or shown "for review". Its defaults (MIN_ACCURACY_GAIN, ...) are in fairpca.tasks,
# which the config fields read.
# Usefulness against what the data allow: a candidate must keep at least this share of the
# gain over chance (balanced accuracy - 0.5) that the best candidate eligible by the rules
# above reaches on the same rows. Saying yes to nearly everyone meets parity trivially:
# on a table with 80% positives it keeps ~0.05 of a possible ~0.20.
MIN_USEFUL_SHARE = 0.5


ELIGIBILITY_RULES = (
    "min_accuracy_gain", "min_balanced_accuracy_margin", "min_positive_rate_ratio",
    "max_one_class_share",
)  # fmt: skip


def eligibility_rules(selection) -> dict[str, float]:
    """The eligibility rules of the config's selection section (``eligibility["rules"]``)."""
    return {rule: float(getattr(selection, rule)) for rule in ELIGIBILITY_RULES}


def _value(row: dict[str, Any], key: str, fallback: str | None = None) -> float:
    value = row.get(key, row.get(fallback) if fallback else None)
    return math.nan if value is None else float(value)


def ineligibility(
    row: dict[str, Any], majority_accuracy: float, selection, best: dict | None = None
) -> list[str]:
    """Why a candidate may not be chosen at all (empty: eligible), in plain words.

    On the validation rows it must beat the majority class by ``min_accuracy_gain`` on the
    selection measure ``select_by`` (accuracy: the majority's accuracy; balanced accuracy:
    the majority's 0.5); the lower 95% bound of its balanced accuracy must exceed chance
    (0.5) by ``min_balanced_accuracy_margin``; its predicted-positive rate must not collapse
    against the base rate (``min_positive_rate_ratio``); and it must not predict one class
    for more than ``max_one_class_share`` of the rows (:func:`ineligible_rules`). A
    constant or near-constant classifier fails: its DP and EO differences are trivially
    near 0. Given ``best`` (the best candidate by those rules, :func:`best_useful`), it must
    also keep :data:`MIN_USEFUL_SHARE` of ``best``'s balanced accuracy over chance
    (:func:`uselessness`).
    """
    rules = ineligible_rules(row, majority_accuracy, selection)
    return [render(reason) for reason in rules] + uselessness(row, best)


def ineligible_rules(
    row: dict[str, Any], majority_accuracy: float, selection, rows: str = ""
) -> list[Reason]:
    """Each eligibility rule ``row`` fails (:func:`ineligibility`, without the usefulness
    against the best candidate), as a :attr:`~fairpca.tasks.decision.Kind.FAILS_RULE`
    reason measured on ``rows`` (empty: not named)."""
    rules = eligibility_rules(selection)
    gain, measure = rules["min_accuracy_gain"], selection.select_by
    baseline = 0.5 if measure == "balanced_accuracy" else majority_accuracy
    value = _value(row, measure)
    failed = []  # (measure, rule, numbers)
    if math.isnan(_value(row, "accuracy")):  # no group large enough to publish: no judgement
        failed.append(("", "no_metrics", {}))
    elif not value >= baseline + gain:
        failed.append((measure, "majority", {"value": value, "baseline": baseline, "gain": gain}))
    margin = rules["min_balanced_accuracy_margin"]
    low = _value(row, "balanced_accuracy.ci95_low")
    if not low >= 0.5 + margin:
        numbers = {"value": _value(row, "balanced_accuracy"), "low": low, "margin": margin}
        failed.append(("balanced_accuracy", "chance", numbers))
    # The predicted-positive rate collapsed against the base rate: the interval of the
    # positive rate must reach ratio * base and that of the negative rate ratio * (1 - base).
    ratio = rules["min_positive_rate_ratio"]
    base, rate = _value(row, "base_rate"), _value(row, "positive_rate")
    high = _value(row, "positive_rate.ci95_high", "positive_rate")
    low = _value(row, "positive_rate.ci95_low", "positive_rate")
    numbers = {"rate": rate, "base": base, "ratio": ratio}
    if math.isnan(base) or math.isnan(rate):
        failed.append(("", "no_rates", {}))
    else:
        if not high >= ratio * base:
            failed.append(("positive_rate", "says_yes", numbers))
        if not 1.0 - low >= ratio * (1.0 - base):
            failed.append(("positive_rate", "says_no", numbers))

    share, limit = row["one_class_share"], rules["max_one_class_share"]
    if not share <= limit:
        failed.append(("one_class_share", "one_class", {"share": share, "limit": limit}))
    return [
        Reason(kind=Kind.FAILS_RULE, measure=measure, rows=rows, numbers=numbers, flags=(rule,))
        for measure, rule, numbers in failed
    ]


def best_useful(records: list[dict[str, Any]], majority_accuracy: float, selection):
    """What the data allow: the candidate of highest balanced accuracy among those eligible
    by :func:`ineligibility`'s rules alone (None when there is none)."""
    basic = [r for r in records if not ineligible_rules(r, majority_accuracy, selection)]
    return max(basic, key=lambda r: _value(r, "balanced_accuracy"), default=None)


def uselessness(row: dict[str, Any], best: dict | None) -> list[str]:
    """Why ``row`` is not useful beside ``best`` (empty: it is): its balanced accuracy keeps
    less than :data:`MIN_USEFUL_SHARE` of ``best``'s gain over chance, named with its
    selection rate against the base rate (saying yes, or no, to nearly everyone)."""
    mine, top = _value(row, "balanced_accuracy"), _value(best or {}, "balanced_accuracy")
    if best is None or math.isnan(mine) or not top > 0.5:
        return []
    kept = (mine - 0.5) / (top - 0.5)
    if kept >= MIN_USEFUL_SHARE:
        return []
    rate, base = _value(row, "positive_rate"), _value(row, "base_rate")
    says = "yes" if rate >= 0.5 else "no"
    share = rate if says == "yes" else 1.0 - rate
    trivially = ", which meets parity trivially" if share >= 0.9 else ""
    return [
        f"not useful: balanced accuracy {mine:.4f} keeps {100 * kept:.0f}% of the gain over "
        f"chance that the data allow ({candidate_name(best)}: {top:.4f}; needs "
        f"{100 * MIN_USEFUL_SHARE:g}%); it says {says} to {100 * share:.1f}% of the rows "
        f"(base rate {100 * base:.1f}%){trivially}"
    ]


def gate_failures(row: dict[str, Any], policy: GatePolicy) -> list[str]:
    """Reasons why ``row`` fails the gate ``policy`` (empty: it passes)."""
    return policy.failures(row)


# A measure judged on its point estimate must clear its limit by at least this many standard
# errors: nearer, drawing the rows again (another seed) flips the verdict about one time in six.
STABLE_Z = 1.0
_WHERE = {"": "", INTERSECTION: " of the intersection"}  # a measure's scope, in words


def _noise(row: dict[str, Any], policy: GatePolicy):
    """``(criterion, scope, estimate, standard error, limit)`` of every gated measure whose
    standard error the row holds (``<metric>.se``, ``<metric>.se.intersection``:
    :func:`fairpca.tasks.evaluate.gate_standard_errors`)."""
    scopes = policy._scopes(row)
    for criterion, limit in policy.limits():
        for scope in scopes:
            value = _value(row, f"{criterion.metric}{scope}")
            error = _value(row, f"{criterion.metric}.se{scope}")
            judged = policy._judged(row, criterion.metric) if scope else None
            if judged is not None:  # the cells the gate judges
                value, error = judged
            if not (math.isnan(value) or math.isnan(error)):
                yield criterion, scope, value, error, limit


def unstable_margins(row: dict[str, Any], policy: GatePolicy) -> list[str]:
    """Why ``row``'s pass of the gate would not survive another draw of the rows: a measure
    judged on its point estimate within :data:`STABLE_Z` standard errors of its limit (a
    bound-judged one already carries its noise)."""
    reasons = []
    for criterion, scope, value, error, limit in _noise(row, policy):
        if policy.bound == "upper_bound" and not criterion.point_rule:
            continue
        if (limit <= 0.0) if criterion.larger_is_fairer else (limit >= 1.0):
            continue  # a ratio of at least 0 or a difference of at most 1: always met
        margin = value - limit if criterion.larger_is_fairer else limit - value
        if margin < STABLE_Z * error:
            reasons.append(
                f"{criterion.label}{_WHERE[scope]} {value:.4f} is within {STABLE_Z:g} standard "
                f"error ({error:.4f}) of its limit {limit:g}"
            )
    return reasons


def certification(
    row: dict[str, Any], policy: GatePolicy, factor: float = DEFAULT_CERTIFY_FACTOR
) -> list[str]:
    """Why the rows that chose ``row`` cannot support the gate (empty: they can): a gated
    measure whose 95% resolution (:data:`CERTIFY_Z` standard errors) is wider than ``factor``
    times the policy's band. ``factor`` 0 turns the check off."""
    reasons = []
    for criterion, scope, _, error, limit in _noise(row, policy) if factor > 0 else ():
        band = 1.0 - limit if criterion.larger_is_fairer else limit
        if CERTIFY_Z * error > factor * band:
            reasons.append(
                f"{criterion.label}{_WHERE[scope]} is resolved to +/-{CERTIFY_Z * error:.3f} "
                f"(95%), wider than {factor:g} x the policy's band of {band:g}"
            )
    return reasons


def majority_accuracy_of(y_train, y_eval) -> float:
    """Accuracy on ``y_eval`` of the constant classifier predicting the training majority."""
    return float(np.mean(np.asarray(y_eval) == majority_class(y_train)))


def _selection_key(row: dict[str, Any], measure: str) -> tuple[float, ...]:
    """Order of the passing candidates: ``measure``, then accuracy, then the smaller DP
    difference (NaN sorts last)."""
    utility = [_value(row, key) for key in (measure, "accuracy")]
    return (*(-math.inf if math.isnan(v) else v for v in utility), -row.get("dp_difference", 0.0))


def unconstrained(row: dict[str, Any]) -> bool:
    """Whether ``row`` is not a fair model: unconstrained PCA, or a fair variant at lambda >= 1
    (its representation carries the whole PCA projection beside the fair one)."""
    lam = row.get("lambda")
    return row.get("variant") == "pca" or (lam is not None and pd.notna(lam) and lam >= 1.0)


def select_candidate(
    table: pd.DataFrame | list[dict[str, Any]], majority_accuracy: float, selection,
    rows: str = "validation",
) -> tuple[dict[str, Any], Decision, bool]:  # fmt: skip
    """Best eligible candidate of ``table`` (or its rows as dicts) passing the gate policy on
    validation rows, by the ``select_by`` measure (balanced accuracy unless ``selection``
    says accuracy).

    Returns the row, the decision (its reasons measured on ``rows``) and whether the row is
    eligible (may be registered). When none passes, the eligible candidate with the smallest
    gate violation is chosen (for review, not promoted); when no candidate is eligible, none
    may be registered.
    """
    policy = GatePolicy.from_config(selection)
    records = table if isinstance(table, list) else table.to_dict("records")
    best = best_useful(records, majority_accuracy, selection)
    eligible = [r for r in records if not ineligibility(r, majority_accuracy, selection, best)]
    passing = [r for r in eligible if not policy.failed_rules(r)]
    measure = selection.select_by
    if passing:
        stable = [r for r in passing if not unstable_margins(r, policy)]
        chosen = max(stable or passing, key=lambda r: _selection_key(r, measure))
        reason = Reason(
            kind=Kind.CHOSEN, decides=bool(stable), subject=candidate_name(chosen),
            measure=measure, rows=rows, flags=("unconstrained",) * unconstrained(chosen),
            numbers={"value": _value(chosen, measure), "passing": len(stable or passing),
                     "candidates": len(records)},
        )  # fmt: skip
        if stable:
            return chosen, Decision(True, (reason,)), True
        unstable = Reason(
            kind=Kind.UNSTABLE, decides=True, subject=candidate_name(chosen), rows=rows,
            numbers={"passing": len(passing)}, facts=tuple(unstable_margins(chosen, policy)),
        )  # fmt: skip
        return chosen, Decision(False, (unstable, reason)), True
    reasons = []
    degenerate = [r for r in records if r not in eligible and not policy.failed_rules(r)]

    if degenerate:  # eligibility decided: the gate alone would have passed these
        closest = max(degenerate, key=lambda r: _selection_key(r, measure))
        reasons.append(Reason(
            kind=Kind.NOT_ELIGIBLE, decides=True, subject=candidate_name(closest), rows=rows,
            numbers={"meeting_gate": len(degenerate)},
            facts=tuple(ineligibility(closest, majority_accuracy, selection, best)),
        ))  # fmt: skip
    if not eligible:  # the best by balanced accuracy is shown, nothing registered
        shown = max(records, key=lambda r: (_value(r, "balanced_accuracy"), _value(r, "accuracy")))
        reasons.append(Reason(
            kind=Kind.NOT_ELIGIBLE, decides=not reasons, subject=candidate_name(shown), rows=rows,
            flags=("none_eligible",),
            facts=tuple(ineligibility(shown, majority_accuracy, selection, best)),
        ))  # fmt: skip
        return shown, Decision(False, tuple(reasons)), False
    review = min(eligible, key=lambda r: (policy.violation(r), -_value(r, "accuracy")))
    reasons.append(Reason(
        kind=Kind.FAILS_GATE, decides=not reasons, subject=candidate_name(review), rows=rows,
        numbers={"violation": policy.violation(review)}, facts=tuple(policy.failures(review)),
        flags=("unconstrained",) * unconstrained(review),
    ))  # fmt: skip
    return review, Decision(False, tuple(reasons)), True


def difference_interval(mine: dict, theirs: dict, measure: str) -> tuple[float, float]:
    """``theirs - mine`` of ``measure`` and its 95% half-width: the two intervals'
    half-widths added in quadrature (the rows are the same, so this is conservative)."""
    high, low = f"{measure}.ci95_high", f"{measure}.ci95_low"
    halves = [(v.get(high, v[measure]) - v.get(low, v[measure])) / 2 for v in (mine, theirs)]
    return theirs[measure] - mine[measure], math.hypot(*halves)


def _compared(reference: dict[str, Any], choice: Choice, measure: str):
    """``(reason fields, lower margin)`` of a reference that meets the gate on the rows that
    chose and has a higher ``measure`` there than the chosen candidate (None otherwise); the
    margin on the test rows is added for the report only. What it needs of the deployment
    (:data:`fairpca.tasks.decision.NEEDS`): ``needs``, or in an older record the attribute
    at prediction time alone."""
    validation = reference.get("validation") or {}
    if "skipped" in reference or reference.get("ineligible") or measure not in validation:
        return None
    if measure not in choice.chosen or choice.policy.failed_rules(validation):
        return None
    delta, half = difference_interval(choice.chosen, validation, measure)
    if not delta > 0:
        return None
    numbers = {"margin": delta, "margin_low": delta - half, "margin_high": delta + half}
    test, chosen_test = reference.get("test") or {}, reference.get("chosen_test") or {}
    if measure in test and measure in chosen_test:
        shown, width = difference_interval(chosen_test, test, measure)
        numbers |= {"test_margin": shown, "test_margin_low": shown - width,
                    "test_margin_high": shown + width}  # fmt: skip
    older = ("sensitive_at_prediction",) * bool(reference.get("needs_sensitive_at_prediction"))
    fields = {
        "subject": reference["name"], "measure": measure, "rows": choice.rows,
        "numbers": numbers, "needs": tuple(reference.get("needs", older)),
        "facts": (reference["config"],) if reference.get("config") else (),
    }  # fmt: skip

    return fields, delta - half


def judge_references(choice: Choice, references, chosen_test: dict, selection) -> Choice:
    """``choice`` judged against the reference mitigations on the rows that chose it (never
    the test rows: ``chosen_test`` only adds the reported test margins).

    A reference that meets the gate there and beats the chosen candidate on ``select_by`` by a
    margin whose 95% interval lies above zero (half-widths added in quadrature: conservative
    on shared rows) vetoes the promotion, but only if the deployment (``selection``'s
    ``sensitive_at_prediction`` and ``randomized_decisions``) allows what it needs: the first
    such reason names the one that needs least (the attribute only at training first), then
    the widest margin; ``selection.promote_dominated`` promotes anyway (and says so). A
    better reference the deployment excludes is listed as such, with its margin and what
    enabling it takes; a deployable one better within the noise is listed too."""
    measure, deployment = selection.select_by, Deployment.of(selection)
    vetoes, listed = [], []
    for reference in references:
        compared = _compared({**reference, "chosen_test": chosen_test}, choice, measure)
        if compared is None:
            continue
        fields, low = compared
        if not deployment.allows(fields["needs"]):
            listed.append(Reason(kind=Kind.EXCLUDED_BY_DEPLOYMENT, **fields))
        elif low > 0:
            vetoes.append((len(fields["needs"]), -low, fields))
        else:
            listed.append(Reason(kind=Kind.BETTER_REFERENCE, **fields))
    decision = choice.decision
    vetoes.sort(key=lambda v: v[:2])
    for rank, (_, _, fields) in enumerate(vetoes):
        first = rank == 0 and decision.promote
        anyway = ("overridden",) * bool(first and selection.promote_dominated)
        reason = Reason(kind=Kind.DOMINATED, decides=first, flags=anyway, **fields)
        if first:
            decision = decision.leading(reason, promote=bool(anyway))
        else:
            listed.insert(rank - 1, reason)
    return dataclasses.replace(choice, decision=decision.adding(*listed))


def judged_everywhere(choice: Choice, unjudged: list[str]) -> Choice:
    """``choice``, not promoted when the gate could not judge groups of many validation rows
    (``unjudged``: :func:`fairpca.tasks.record.unjudged_groups`; their rates are withheld to
    hide a smaller group): a gate passed on some of the groups is no verdict on the others,
    nor is a gate failed for want of them. Too little data comes first, after eligibility."""
    if not unjudged:
        return choice
    reason = Reason(
        kind=Kind.TOO_LITTLE_DATA, decides=choice.eligible, rows="validation",
        facts=(unjudged[0],), flags=("unjudged_groups",),
    )  # fmt: skip
    place = choice.decision.leading if choice.eligible else choice.decision.adding
    return dataclasses.replace(choice, decision=place(reason, promote=False))


def judge_chosen(
    choice: Choice, references, chosen_test: dict, unjudged: list[str], selection
) -> Choice:
    """The decision after the choice, for both routes of the audit (in memory and Dask): the
    reference mitigations on the rows that chose (:func:`judge_references`), then the groups
    the gate could not judge (:func:`judged_everywhere`)."""
    choice = judge_references(choice, references, chosen_test, selection)
    return judged_everywhere(choice, unjudged)


def shortlist(
    table: pd.DataFrame, majority_accuracy: float, selection, size: int
) -> list[dict[str, Any]]:
    """The ``size`` candidates the choice takes from, by its own rule, and the best
    unconstrained PCA candidate: what cross-validation compares when the validation part is
    too small to choose on, and what a wide search on a sample refits on every row.

    First the eligible candidates meeting the gate (the highest ``select_by`` first), then the
    eligible ones that come closest to it (the smallest excess over the thresholds, summed over
    every gated measure of the worst attribute and of the intersection:
    :meth:`GatePolicy.violation`, the rule that picks the candidate for review when none
    meets the gate), then the rest by ``select_by``. Ordered by utility alone, the shortlist
    of a table where no candidate meets the gate held only the most accurate, least fair
    candidates, and the fair ones never reached the choice."""
    policy = GatePolicy.from_config(selection)
    measure = selection.select_by

    def order(row: dict[str, Any]) -> tuple:
        eligible = not ineligible_rules(row, majority_accuracy, selection)
        closeness = -policy.violation(row) if eligible else 0.0  # 0 when it meets the gate
        passes = eligible and not policy.failed_rules(row)
        return (eligible, passes, closeness, *_selection_key(row, measure))

    records = sorted(table.to_dict("records"), key=order, reverse=True)[:size]
    pca = best_pca(table)
    if pca is not None and not any(r["variant"] == "pca" for r in records):
        records.append(pca)
    return records


def best_pca(table: pd.DataFrame) -> dict[str, Any] | None:
    """The unconstrained PCA baseline: the most accurate ``pca`` candidate on validation."""
    pca = table[table["variant"] == "pca"]
    if pca.empty:
        return None
    if pca.get("accuracy", pd.Series(dtype=float)).isna().all():  # every group withheld
        return pca.iloc[0].to_dict()
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


@dataclass(frozen=True)
class Choice:
    """What the validation rows decided: the chosen candidate and the gate's decision, its
    eligibility, the policy, the majority-class accuracy and the unconstrained-PCA baseline."""

    chosen: dict[str, Any]
    decision: Decision
    eligibility: dict[str, Any]
    policy: GatePolicy
    majority_accuracy: float
    pca_row: dict[str, Any] | None
    certification: dict[str, Any] | None = None  # certified, reasons, chosen_by
    rows: str = "validation"  # the rows that chose: validation, or cross-validated ones

    @property
    def eligible(self) -> bool:
        return bool(self.eligibility["chosen_passes"])


def choose(
    table: pd.DataFrame, y_train, y_validation, selection, *, chosen_by: str | None = None,
    rows: str = "validation",
) -> Choice:  # fmt: skip
    """The choice on the rows ``table`` was measured on (the validation rows, or the
    cross-validated training and validation rows ``y_validation`` when ``chosen_by`` says
    so, and ``rows`` names them for the reasons: ``cross-validated training+validation``):
    majority-class accuracy, the chosen candidate with its decision, eligibility and
    certification, and the unconstrained PCA baseline. Never reads test rows."""
    majority_accuracy = majority_accuracy_of(y_train, y_validation)
    candidates = registrable(table, selection.allow_row_storing_models)
    records = candidates.to_dict("records")  # once: each rule below reads every row
    chosen, decision, eligible = select_candidate(records, majority_accuracy, selection, rows)
    chosen_by = chosen_by or f"the {len(y_validation):,} validation rows"
    policy = GatePolicy.from_config(selection)
    uncertified = certification(chosen, policy, selection.certify_factor)
    if uncertified:  # too little data comes before the gate, after eligibility
        reason = Reason(
            kind=Kind.TOO_LITTLE_DATA, decides=eligible, rows=rows, facts=tuple(uncertified),
            flags=("certification",),
        )  # fmt: skip
        place = decision.leading if eligible else decision.adding
        decision = place(reason, promote=False)
    notes = []
    if len(candidates) < len(table):
        notes.append(
            f"{len(table) - len(candidates)} candidates (RBF SVC, fair kernel PCA) were audited "
            "but not eligible for registration: their fitted state stores training rows"
        )
    undefined = [
        m for m in ("dp_difference", "eo_difference") if m not in table or table[m].isna().all()
    ]
    if undefined:
        notes.append(
            f"{' and '.join(undefined)} undefined on the validation rows for every candidate: "
            "fewer than two groups of a sensitive attribute have min_group_size rows (for "
            "eo_difference: rows with label 1), so no candidate can meet the thresholds"
        )
    notes += [policy.ungated_note(chosen), policy.cells_note(chosen)]  # None: no note
    everything = records if len(candidates) == len(table) else table.to_dict("records")
    pca_row, pca_note = baseline_pca(table, everything, majority_accuracy, selection)
    useful = best_useful(records, majority_accuracy, selection)
    eligibility = {
        "rules": eligibility_rules(selection),
        "chosen_passes": eligible,
        "reasons": ineligibility(chosen, majority_accuracy, selection, useful),
    }
    certified = {"certified": not uncertified, "reasons": uncertified, "chosen_by": chosen_by}
    unfair = no_fair_eligible(records, majority_accuracy, selection, rows, useful)
    if eligible and not decision.promote and unfair is not None:
        decision = decision.leading(unfair)
    decision = decision.adding(
        *(note(text) for text in [*notes, pca_note]),
        selection_rate_note(chosen, records, majority_accuracy, selection, rows),
    )
    return Choice(
        chosen, decision, eligibility, policy, majority_accuracy, pca_row, certified, rows
    )


def no_fair_eligible(records: list[dict], majority_accuracy: float, selection, rows: str, best):
    """A reason saying no fair candidate among ``records`` is eligible (``best``: what the
    data allow, :func:`best_useful`), naming the best fair one (highest balanced accuracy) and
    how far it is from the eligibility rules (None: one is eligible, or the audit searched no
    fair variant)."""
    fair = [r for r in records if not unconstrained(r)]
    if not fair or any(not ineligibility(r, majority_accuracy, selection, best) for r in fair):
        return None
    closest = max(fair, key=lambda r: (_value(r, "balanced_accuracy"), _value(r, "accuracy")))
    return Reason(
        kind=Kind.NOT_ELIGIBLE, subject=candidate_name(closest), rows=rows,
        flags=("no_fair", "summary"),
        facts=tuple(ineligibility(closest, majority_accuracy, selection, best)),
    )  # fmt: skip


# The chosen model's selection rate above this multiple of every group's base rate is named in
# the summary (balanced accuracy rewards saying yes when positives are rare).
SELECTION_RATE_MULTIPLE = 2.0


def selection_rate_note(chosen, table, majority_accuracy: float, selection, rows: str):
    """A reason when ``chosen`` says yes more than :data:`SELECTION_RATE_MULTIPLE` times the
    base rate of every group, with what choosing by accuracy gives instead (None: it does
    not, or the choice is already by accuracy)."""
    bases = [float(v) for k, v in chosen.items() if str(k).startswith("base_rate.")
             and ".ci95_" not in str(k) and _finite(v)]  # fmt: skip
    rate = _value(chosen, "positive_rate")
    if not bases or math.isnan(rate) or not rate > SELECTION_RATE_MULTIPLE * max(bases):
        return None
    numbers = {"positive_rate": rate, "largest_base_rate": max(bases)}
    subject = ""
    if selection.select_by != "accuracy":
        by_accuracy = selection.model_copy(update={"select_by": "accuracy"})
        other, _, _ = select_candidate(table, majority_accuracy, by_accuracy, rows)
        subject = candidate_name(other)
        numbers |= {"accuracy_positive_rate": _value(other, "positive_rate"),
                    "accuracy_balanced_accuracy": _value(other, "balanced_accuracy")}  # fmt: skip
    return Reason(
        kind=Kind.NOTE, subject=subject, measure=selection.select_by, rows=rows,
        numbers=numbers, flags=("selection_rate", "summary"),
    )  # fmt: skip


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def baseline_pca(
    table: pd.DataFrame, everything: list[dict[str, Any]], majority_accuracy: float, selection
) -> tuple[dict[str, Any] | None, str | None]:
    """The unconstrained PCA baseline among the candidates of ``table`` (``everything``: its
    rows as dicts): the best eligible ``pca`` candidate by ``select_by`` (what the
    unmitigated model reaches); when none is eligible, the most accurate one (often a
    constant classifier) and a note saying so. ``(None, None)`` without PCA candidates."""
    records = [r for r in everything if r.get("variant") == "pca"]
    if not records:
        return None, None
    best = best_useful(everything, majority_accuracy, selection)
    eligible = [r for r in records if not ineligibility(r, majority_accuracy, selection, best)]
    if eligible:
        return max(eligible, key=lambda r: _selection_key(r, selection.select_by)), None
    return best_pca(table), (
        "no unconstrained PCA candidate is eligible: the unconstrained PCA baseline shown is "
        "the most accurate one, not a useful model (it may say one class to nearly everyone)"
    )


# ---- promotion: the one decision that moves the champion alias -------------------------------

# Measures shown side by side; the comparison itself uses accuracy and balanced accuracy.
COMPARED = ("accuracy", "balanced_accuracy", "dp_difference", "selection_rate_ratio",
            "eo_difference", "equalized_odds_difference")  # fmt: skip

DEFAULT_TOLERANCE = 0.01  # the audit's tolerance; retrain has ``accuracy_tolerance``


@dataclass(frozen=True)
class Challenger:
    """What the audit's own signed record says about the version it wants to promote."""

    name: str  # the candidate's name, e.g. fair_pca/logreg_tuned@lambda=0
    decision: Decision  # the gate's decision on the validation rows
    policy: GatePolicy
    test: dict[str, float]  # its metrics on the audit's test rows
    model_digest: str | None = None  # the fitted pipeline's content digest


@dataclass(frozen=True)
class Champion:
    """The version an alias points to now, and what is known of it on the challenger's rows."""

    name: str  # the registered model
    version: str
    policy: GatePolicy  # the policy it was chosen under (its tags)
    model_digest: str | None = None
    test: dict[str, float] | None = None  # on the challenger's test rows; None: not measured
    unverified: str | None = None  # why it could not be loaded and verified
    demoted: str | None = None  # why it is to lose the alias (it fails the gate on new rows)


@dataclass(frozen=True)
class Promotion:
    """The outcome of :func:`decide_promotion`: whether the alias moves to the challenger,
    whether the champion loses it, why, and the side-by-side record. ``refused``: the audit
    promoted the challenger, but its model lost a protected alias before and may not take
    one back."""

    promote: bool
    reasons: tuple[str, ...]
    demote: bool = False
    comparison: dict[str, Any] | None = None
    refused: bool = False


def _side_by_side(challenger: dict, champion: dict) -> dict[str, dict[str, float]]:
    keys = [f"{m}{end}" for m in COMPARED for end in ("", ".ci95_low", ".ci95_high")]
    pair = {"challenger": challenger, "champion": champion}
    return {who: {k: float(row[k]) for k in keys if k in row} for who, row in pair.items()}


# The reason a laxer policy keeps the champion (a str.format template; tests name it)
POLICY_LAXER = (
    "this audit's gate policy ({name}, {bound}) is laxer than the one champion v{version} was "
    "chosen under: {laxer}; the champion stays (audit with at least its policy to replace it)"
)


def _against_champion(challenger: Challenger, champion: Champion, tolerance: float):
    """``(promote, reason)`` of a challenger that passed the gate, against a champion that
    keeps its alias."""
    laxer = challenger.policy.laxer_than(champion.policy)
    if laxer:
        policy = challenger.policy
        return False, POLICY_LAXER.format(
            name=policy.name, bound=policy.bound, version=champion.version, laxer="; ".join(laxer)
        )
    if champion.unverified:
        return True, f"champion not comparable: {champion.unverified}"
    if champion.test is None:
        return False, (
            "the champion could not be evaluated on this audit's test rows (a relog has no rows "
            "to compare on), so it stays; audit or retrain again to compare them"
        )
    # promote iff the challenger loses at most ``tolerance`` of accuracy and of balanced
    # accuracy against the champion on the same test rows
    mine, theirs = challenger.test, champion.test
    pairs = {m: (mine.get(m), theirs.get(m)) for m in ("accuracy", "balanced_accuracy")}
    losses = [
        f"{metric} {ours:.4f} < champion {its:.4f} - {tolerance:g}"
        for metric, (ours, its) in pairs.items()
        if ours is not None and its is not None and ours < its - tolerance
    ]
    if losses:
        return False, "the challenger is worse on the shared test rows: " + "; ".join(losses)
    return True, (
        "on the shared test rows the challenger loses at most "
        f"{tolerance:g} of accuracy and balanced accuracy against the champion"
    )


def decide_promotion(
    challenger: Challenger,
    champion: Champion | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    demoted_models: frozenset[str] = frozenset(),
) -> Promotion:
    """The one decision on the champion alias, for the audit, retrain, relog and the gate.

    The alias moves to the challenger only if its gate decision promotes it, its model was
    never demoted (``demoted_models``: content digests of the models the registry took an
    alias away from), it is not the champion's own model, and, when a champion keeps its alias,
    the challenger's policy is at least as strict and it loses at most ``tolerance`` of
    accuracy and balanced accuracy on the same test rows. A champion that ``demoted`` (it
    fails the gate on new rows) loses the alias whatever the challenger does.
    """
    reasons = []
    demote = champion is not None and champion.demoted is not None
    if demote:
        reasons.append(f"champion v{champion.version} of {champion.name} {champion.demoted}")
    incumbent = None if champion is None or demote else champion
    digest = challenger.model_digest
    refused = challenger.decision.promote and digest is not None and digest in demoted_models
    if not challenger.decision.promote:
        promote, why = False, "the audit did not promote the challenger"
    elif refused:
        promote = False
        why = ("this model was demoted from a protected alias before; it cannot take the alias "
               "back (a reviewer decides, see the version's needs-review reason)")  # fmt: skip
    elif incumbent is not None and digest is not None and digest == incumbent.model_digest:
        promote, why = False, f"the challenger is champion v{incumbent.version}'s own model"
    elif incumbent is None:
        promote, why = True, "no current champion: the gate alone decides"
    else:
        promote, why = _against_champion(challenger, incumbent, tolerance)
    reasons.append(why if incumbent is None else f"champion v{incumbent.version}: {why}")
    comparison = None
    if champion is not None:
        outcome = "champion replaced" if promote else "champion kept"
        comparison = {
            "champion_version": champion.version,
            "challenger": challenger.name,
            "rows": "the test part of this audit (no choice read them)",
            "metrics": _side_by_side(challenger.test, champion.test) if champion.test else {},
            "outcome": "champion demoted" if demote else outcome,
            "reason": reasons[0] if demote else why,
        }
    return Promotion(promote, tuple(reasons), demote, comparison, refused)
