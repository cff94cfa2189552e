"""Group fairness of a binary classifier: the one definition of accuracy, balanced accuracy,
ROC AUC, group rates and the differences and ratios between groups, per attribute, over
intersections and worst over attributes, with small groups suppressed and intervals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import _disclosure
from ._counts import (
    DIFFERENCES,
    MIN_GROUP_SIZE_FLOOR,
    FairnessProblem,
    Grouping,
    check_min_group_size,
    equalized_odds,
    fairness_problem,
    overall,
    rates,
    ratio,
    spread,
    worst,
)
from ._intervals import (
    balanced_accuracy_interval,
    check_bootstrap,
    grouping_intervals,
    overall_intervals,
    roc_auc,
    roc_auc_interval,
    worst_interval,
)
from ._names import INTERSECTION, group_label, metric_names
from ._validation import renamed_sensitive

# Per-grouping measures: the differences (largest is worst) and the ratio (smallest is worst).
MEASURES = (*DIFFERENCES, "equalized_odds_difference", "selection_rate_ratio")
# Overall measures, in the order of as_metrics().
OVERALL = ("accuracy", "balanced_accuracy", "roc_auc", "positive_rate", "base_rate",
           "one_class_share")  # fmt: skip
# Per-group rates, in the order of as_metrics() and group_table().
GROUP_RATES = ("selection_rate", "tpr", "fpr", "base_rate")


@dataclass(frozen=True)
class GroupFairness:
    """Fairness of one grouping of the rows (one attribute, or the intersection of all).

    Attributes
    ----------
    dp_difference : float
        ``max_g P(Yhat = 1 | g) - min_g P(Yhat = 1 | g)`` over the reported groups; NaN with
        fewer than two.
    eo_difference : float
        ``max_g P(Yhat = 1 | Y = 1, g) - min_g ...`` over the reported groups with positives.
    selection_rate, tpr : dict
        Per reported group (TPR NaN for a group without positives). The reported groups are
        those with released rows (see :func:`group_fairness`), over their released rows.
    group_size : dict
        Released rows per reported group (at least ``min_group_size`` each).
    suppressed : int
        Number of groups left out of everything above: fewer than ``min_group_size`` rows
        outside the left-out groups and cells, or left out as complementary cells (their
        labels are not kept, so no output can name them).
    fpr_difference : float
        The same spread of ``P(Yhat = 1 | Y = 0, g)`` over the groups with negatives.
    equalized_odds_difference : float
        ``max(eo_difference, fpr_difference)`` (fairlearn's ``equalized_odds_difference``);
        NaN when either is undefined.
    selection_rate_ratio : float
        ``min_g P(Yhat = 1 | g) / max_g P(Yhat = 1 | g)`` (the four-fifths rule asks for 0.8);
        NaN with fewer than two groups or when no group is selected.
    fpr, base_rate : dict
        Per reported group: ``P(Yhat = 1 | Y = 0, g)`` and ``P(Y = 1 | g)``.
    """

    dp_difference: float
    eo_difference: float
    selection_rate: dict
    tpr: dict
    group_size: dict
    suppressed: int
    fpr_difference: float = np.nan
    equalized_odds_difference: float = np.nan
    selection_rate_ratio: float = np.nan
    fpr: dict = field(default_factory=dict)
    base_rate: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FairnessReport:
    """Accuracy and group fairness of binary predictions; see :func:`group_fairness`.

    Attributes
    ----------
    accuracy : float
    dp_difference, eo_difference, fpr_difference, equalized_odds_difference : float
        Worst (largest) over the attributes of the per-attribute differences.
    attributes : dict of str to GroupFairness
        Per attribute (DataFrame column name, Series name, else ``sensitive_<j>``).
    intersection : GroupFairness or None
        Over the intersections of all attributes (None for one attribute); group keys are
        tuples of labels.
    notes : list of str
        Why a value is undefined (NaN) and how many groups were left out.
    balanced_accuracy : float
        ``(TPR + TNR) / 2`` (0.5 for a constant classifier); NaN with one class. Like every
        value here, over the released rows (see :func:`group_fairness`).
    roc_auc : float
        Area under the ROC curve of ``y_score``; NaN when no scores were given.
    positive_rate, base_rate, one_class_share : float
        ``P(Yhat = 1)``, ``P(Y = 1)`` and the share of the more frequent predicted class.
    selection_rate_ratio : float
        Worst (smallest) over the attributes of the per-attribute ratios.
    """

    accuracy: float
    dp_difference: float
    eo_difference: float
    attributes: dict
    intersection: GroupFairness | None
    notes: list
    balanced_accuracy: float = np.nan
    roc_auc: float = np.nan
    positive_rate: float = np.nan
    base_rate: float = np.nan
    one_class_share: float = np.nan
    fpr_difference: float = np.nan
    equalized_odds_difference: float = np.nan
    selection_rate_ratio: float = np.nan
    attribute_names: dict = field(default_factory=dict, repr=False)
    group_names: dict = field(default_factory=dict, repr=False)

    def _groupings(self) -> list[tuple[str, GroupFairness]]:
        """(metric name of the grouping, its result): attributes, then the intersection."""
        pairs = [(self.attribute_names[key], value) for key, value in self.attributes.items()]
        return pairs + ([(INTERSECTION, self.intersection)] if self.intersection else [])

    def _group_name(self, name: str, group: Any) -> str:
        """``<attr>:<group>`` of metric names; an intersection group's tokens joined by ``/``."""
        token = self.group_names[name][group]
        return token if name == INTERSECTION else f"{name}:{token}"

    def as_metrics(self) -> dict[str, float]:
        """Flat ``{name: value}`` for a metrics logger; undefined (NaN) values are left out.

        Names: ``accuracy``, ``balanced_accuracy``, ``roc_auc`` (with scores),
        ``positive_rate``, ``base_rate``, ``one_class_share``; ``dp_difference``,
        ``eo_difference``, ``fpr_difference``, ``equalized_odds_difference`` and
        ``selection_rate_ratio`` (worst attribute), each also as ``<measure>.<attr>`` and
        ``<measure>.intersection`` (several attributes); ``selection_rate.<attr>:<group>``,
        ``tpr.<attr>:<group>``, ``fpr.<attr>:<group>`` and ``base_rate.<attr>:<group>`` for
        each reported group (an intersection group is named
        ``<attr1>:<group1>/<attr2>:<group2>``). Characters MLflow rejects become ``_``.
        Leaving NaN out makes a threshold gate on an undefined value fail instead of pass.
        """
        values = {name: getattr(self, name) for name in (*OVERALL[:1], *MEASURES[:2])}
        values.update({name: getattr(self, name) for name in (*OVERALL[1:], *MEASURES[2:])})
        for measure in MEASURES:
            for name, grouping in self._groupings():
                values[f"{measure}.{name}"] = getattr(grouping, measure)
        for name, grouping in self._groupings():
            for group in grouping.group_size:
                key = self._group_name(name, group)
                for rate in GROUP_RATES:
                    values[f"{rate}.{key}"] = getattr(grouping, rate)[group]
        return {k: float(v) for k, v in metric_names(values).items() if np.isfinite(v)}

    def group_table(self) -> pd.DataFrame:
        """One row per reported group: attribute, group, size, selection_rate, tpr, fpr,
        base_rate, and ``key`` (the ``<attr>:<group>`` of its metric names).

        An intersection group (attribute ``intersection``) is written
        ``<attr1>:<group1>/<attr2>:<group2>``. Suppressed and withheld groups are not in the
        table; a rate is NaN where its denominator is zero (``tpr`` of a group without
        positives).
        """
        rows = [
            {
                "attribute": name,
                "group": group_label(name, group, self.attributes),
                "size": size,
                **{rate: getattr(grouping, rate)[group] for rate in GROUP_RATES},
                "key": self._group_name(name, group),
            }
            for name, grouping in self._groupings()
            for group, size in grouping.group_size.items()
        ]
        columns = ["attribute", "group", "size", *GROUP_RATES, "key"]
        return pd.DataFrame(rows, columns=columns).astype({"size": np.int64})


def _describe(problem: FairnessProblem, grouping: Grouping, left_out: int, notes: list):
    """Measures and per-group values of one grouping of the released rows (every group has at
    least ``min_group_size`` of them); notes on undefined values."""
    counts = grouping.aggregate(problem.counts)
    size, values = counts.sum(axis=-1), rates(counts)
    keep = size >= problem.min_group_size
    shown = np.flatnonzero(keep)
    labels = [grouping.labels[g] for g in shown]
    differences = {m: float(spread(values[rate], keep)) for m, rate in DIFFERENCES.items()}
    per_group = {
        rate: {k: float(values[rate][g]) for k, g in zip(labels, shown, strict=True)}
        for rate in GROUP_RATES
    }
    result = GroupFairness(
        **differences,
        equalized_odds_difference=float(
            equalized_odds(differences["eo_difference"], differences["fpr_difference"])
        ),
        selection_rate_ratio=float(ratio(values["selection_rate"], keep)),
        **per_group,
        group_size={k: int(size[g]) for k, g in zip(labels, shown, strict=True)},
        suppressed=left_out + int((~keep).sum()),
    )
    _note_undefined(problem, grouping, result, notes)
    return result


def _note_undefined(problem, grouping, result: GroupFairness, notes: list) -> None:
    """Say how many groups were suppressed (never which) and why a measure is undefined."""
    name, size = grouping.name, problem.min_group_size
    if np.isnan(result.dp_difference):
        notes.append(
            f"{name}: fewer than two groups with at least {size} rows, so every difference "
            f"and ratio of {name} (dp_difference.{name}, eo_difference.{name}, ...) is "
            "undefined."
        )
        return
    if np.isnan(result.eo_difference):
        notes.append(
            f"{name}: fewer than two reported groups have rows with y_true == "
            f"{problem.pos_label!r}, so eo_difference.{name} and "
            f"equalized_odds_difference.{name} are undefined."
        )
    if np.isnan(result.fpr_difference):
        notes.append(
            f"{name}: fewer than two reported groups have rows with y_true != "
            f"{problem.pos_label!r}, so fpr_difference.{name} and "
            f"equalized_odds_difference.{name} are undefined."
        )
    if np.isnan(result.selection_rate_ratio):
        notes.append(
            f"{name}: no reported group has a positive prediction, so "
            f"selection_rate_ratio.{name} (0 / 0) is undefined."
        )


def _released(problem: FairnessProblem) -> tuple[FairnessProblem, dict, list]:
    """The problem of the rows every published number is computed from (see
    :mod:`fairpca.metrics._disclosure`), groups left out per grouping, and notes."""
    return _disclosure.release(problem)


def _report(problem: FairnessProblem, left_out: dict, notes: list) -> FairnessReport:
    """The report of a released problem (see :func:`group_fairness`)."""
    notes = list(notes)
    results = {g.name: _describe(problem, g, left_out[g.name], notes) for g in problem.groupings()}
    attributes = {g.key: results[g.name] for g in problem.attributes}
    group_names = {g.name: dict(zip(g.labels, g.tokens, strict=True)) for g in problem.groupings()}
    total = problem.counts.sum(axis=0)
    whole = {k: float(v) for k, v in overall(total).items()}
    auc = np.nan if problem.score is None else roc_auc(problem.actual, problem.score)
    if total.sum() == 0:
        notes.append(
            f"No rows are left once groups with fewer than min_group_size="
            f"{problem.min_group_size} rows are left out, so every value is undefined."
        )
    elif not np.isfinite(whole["balanced_accuracy"]):
        notes.append("y_true has a single class, so balanced_accuracy is undefined.")
        if problem.score is not None:
            notes.append("y_true has a single class, so roc_auc is undefined.")
    measures = {
        m: float(worst([getattr(a, m) for a in attributes.values()], lowest=m.endswith("ratio")))
        for m in MEASURES
    }
    return FairnessReport(
        attributes=attributes,
        intersection=None if problem.intersection is None else results[INTERSECTION],
        notes=notes,
        attribute_names={g.key: g.name for g in problem.attributes},
        group_names=group_names,
        roc_auc=float(auc),
        **whole,
        **measures,
    )


def group_fairness(
    y_true: Any,
    y_pred: Any,
    sensitive_features: Any = None,
    *,
    pos_label: Any = 1,
    min_group_size: int = MIN_GROUP_SIZE_FLOOR,
    allow_small_groups: bool = False,
    y_score: Any = None,
    confidence: float = 0.95,
    sensitive: Any = None,
    protected_features: Any = None,
) -> FairnessReport:
    """Accuracy, balanced accuracy, group rates, differences and ratios per attribute and
    intersection.

    ``Delta_DP = max_g P(Yhat = 1 | g) - min_g P(Yhat = 1 | g)`` and ``Delta_EO`` the same spread
    of ``P(Yhat = 1 | Y = 1, g)`` (Section 5.2 of the paper; for two groups the absolute
    difference); ``fpr_difference`` spreads ``P(Yhat = 1 | Y = 0, g)``,
    ``equalized_odds_difference`` is the larger of the TPR and FPR differences, and
    ``selection_rate_ratio`` is ``min_g / max_g`` of the selection rates. Each attribute is
    treated on its own (its marginal groups); with several attributes the report also covers
    their intersections (fairlearn's groups), and the top-level values are the worst over the
    attributes (largest difference, smallest ratio). Every value, the overall ones included,
    is computed from the *released* rows only (see :mod:`fairpca.metrics._disclosure`): rows
    of groups and intersection cells with fewer than ``min_group_size`` rows are left out of
    every number, as if they were not in the data, so that no evaluation nor the difference of
    two depends on them; when they are fewer than ``min_group_size``, the smallest other cells
    are left out with them (complementary suppression). Every released group is reported. A
    measure over fewer than two groups is NaN, with the reason in ``notes``. Labels of
    left-out groups appear in no output.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,)
        Binary true labels and predictions.
    sensitive_features : array-like of shape (n_samples,), 2-D array or DataFrame
        Group labels: one attribute, or one column per attribute.
    pos_label : hashable, default=1
        The value meaning "positive" in both ``y_true`` and ``y_pred``.
    min_group_size : int, default=10
        Smallest group that is reported; at least ``MIN_GROUP_SIZE_FLOOR`` (10) unless
        ``allow_small_groups=True``.
    allow_small_groups : bool, default=False
        Opt in to a ``min_group_size`` below the floor (1 reports every group).
    y_score : array-like of shape (n_samples,), default=None
        Scores of the positive class (``predict_proba(X)[:, 1]``); gives ``roc_auc``.
    confidence : float, default=0.95
        Level of the intervals published beside the report (:func:`bootstrap_intervals`);
        validated only, as no point value depends on it.
    sensitive : deprecated
        Former name of ``sensitive_features``.
    protected_features : array-like of shape (n_samples,), 2-D array or DataFrame, default=None
        Further sensitive columns of the same rows, protected but not reported: their small
        groups, and the small cells of their intersection with ``sensitive_features``, are
        left out of every number as well. Pass every sensitive column the data hold (the
        same set in every evaluation of these rows), so that an evaluation reporting fewer
        attributes publishes the same numbers for their groups (see
        :mod:`fairpca.metrics._disclosure`, rule 3 and its limit).

    Returns
    -------
    FairnessReport

    Raises
    ------
    ValueError
        On missing values, mismatched lengths, non-binary labels or a bad ``pos_label``.

    Examples
    --------
    >>> report = group_fairness(
    ...     [1, 1, 0, 1], [1, 0, 1, 1], ["a", "a", "b", "b"], min_group_size=1,
    ...     allow_small_groups=True)
    >>> report.dp_difference, report.attributes["sensitive_0"].tpr
    (0.5, {'a': 0.5, 'b': 1.0})
    """
    sensitive_features = renamed_sensitive(sensitive_features, sensitive, "sensitive")
    problem = fairness_problem(
        y_true,
        y_pred,
        sensitive_features,
        pos_label,
        min_group_size,
        y_score=y_score,
        allow_small_groups=allow_small_groups,
        protected=protected_features,
    )
    check_bootstrap(2, confidence)
    return _report(*_released(problem))


def check_fairness_options(
    *,
    min_group_size: Any = MIN_GROUP_SIZE_FLOOR,
    n_resamples: Any = 1000,
    confidence: Any = 0.95,
    allow_small_groups: Any = False,
) -> None:
    """Raise a clear error for a bad option of :func:`group_fairness` / :func:`bootstrap_intervals`.

    For callers that want to reject bad settings before any expensive work (e.g. predicting).

    Raises
    ------
    TypeError, ValueError
        ``min_group_size`` not a positive int or below the floor without
        ``allow_small_groups``, ``n_resamples`` not an int >= 2, or ``confidence`` not in
        (0, 1).
    """
    check_min_group_size(min_group_size, allow_small_groups)
    check_bootstrap(n_resamples, confidence)


def _measure_intervals(problem: FairnessProblem, alpha: float) -> dict:
    """Intervals of every per-grouping measure, of the worst over attributes, and of the
    per-group rates (``{(grouping name, rate): (low array, high array)}``)."""
    values, groups = {}, {}
    attribute_level = []
    for grouping in problem.attributes:
        counts = grouping.aggregate(problem.counts)
        keep = counts.sum(axis=-1) >= problem.min_group_size
        # The worst over A attributes: each attribute at level 1 - alpha / A (Bonferroni).
        attribute_level.append(grouping_intervals(counts, keep, alpha / len(problem.attributes)))
    for grouping in problem.groupings():
        counts = grouping.aggregate(problem.counts)
        keep = counts.sum(axis=-1) >= problem.min_group_size
        found = grouping_intervals(counts, keep, alpha)
        for measure in MEASURES:
            values[f"{measure}.{grouping.name}"] = found[measure]
        for rate, bounds in found["groups"].items():
            groups[grouping.name, rate] = bounds
    for measure in MEASURES:
        intervals = [found[measure] for found in attribute_level]
        values[measure] = worst_interval(intervals, lowest=measure.endswith("ratio"))
    return values, groups


def _group_intervals(problem, report: FairnessReport, groups: dict) -> dict:
    """Intervals of the published per-group rates, named as in ``as_metrics``."""
    values = {}
    results = [report.attributes[g.key] for g in problem.attributes]
    results += [report.intersection] if problem.intersection is not None else []
    for grouping, result in zip(problem.groupings(), results, strict=True):
        index = {label: g for g, label in enumerate(grouping.labels)}
        for group in result.group_size:
            key = report._group_name(grouping.name, group)
            for rate in GROUP_RATES:
                low, high = groups[grouping.name, rate]
                values[f"{rate}.{key}"] = (float(low[index[group]]), float(high[index[group]]))
    return values


def bootstrap_intervals(
    y_true: Any,
    y_pred: Any,
    sensitive_features: Any = None,
    *,
    pos_label: Any = 1,
    min_group_size: int = MIN_GROUP_SIZE_FLOOR,
    allow_small_groups: bool = False,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: Any = 0,
    y_score: Any = None,
    sensitive: Any = None,
    protected_features: Any = None,
) -> dict[str, tuple[float, float]]:
    """Confidence intervals of every metric of :func:`group_fairness`, each containing its
    estimate.

    Methods (see :mod:`fairpca.metrics._intervals`):

    - accuracy, positive rate, base rate: Clopper-Pearson (exact; coverage at least nominal);
      the one-class share: the image of the positive rate's interval under
      ``p -> max(p, 1 - p)``;
    - every difference and ratio of a grouping: simultaneous Clopper-Pearson intervals of the
      ``m`` reported groups' rates at level ``1 - alpha / m`` (Bonferroni; ``alpha = 1 -
      confidence``), turned into ``[max(0, max L - min U), max U - min L]`` for a spread and
      ``[min L / max U, min(1, min U / max L)]`` for the ratio, so coverage is at least
      ``confidence`` (conservative). The equalized-odds difference uses the TPR and FPR
      intervals at ``alpha / 2`` each; the worst over ``A`` attributes uses ``alpha / A`` per
      attribute. The per-group rates of a grouping are simultaneous intervals at the same
      level as the spread's;
    - balanced accuracy: percentile bootstrap (``n_resamples`` resamples of the rows within
      each intersection group, no refit), widened where needed to contain the estimate;
    - ROC AUC (with ``y_score``): DeLong's interval on the logit scale.

    Parameters
    ----------
    y_true, y_pred, sensitive_features, pos_label, min_group_size, allow_small_groups, y_score
        As in :func:`group_fairness`.
    protected_features
        As in :func:`group_fairness`.
    n_resamples : int, default=1000
        Number of bootstrap resamples (>= 2) for balanced accuracy.
    confidence : float, default=0.95
        Coverage of the intervals, in (0, 1).
    seed : int, numpy Generator or None, default=0
        Seed of the resampling.
    sensitive : deprecated
        Former name of ``sensitive_features``.

    Returns
    -------
    intervals : dict
        ``{name: (low, high)}`` for every name of :meth:`FairnessReport.as_metrics` (the same
        MLflow-safe names); ``(nan, nan)`` where the value is undefined.

    Examples
    --------
    >>> y = [1, 0] * 50
    >>> low, high = bootstrap_intervals(y, y, ["a"] * 50 + ["b"] * 50)["accuracy"]
    >>> round(low, 4), high
    (0.9638, 1.0)
    """
    sensitive_features = renamed_sensitive(sensitive_features, sensitive, "sensitive")
    problem = fairness_problem(
        y_true,
        y_pred,
        sensitive_features,
        pos_label,
        min_group_size,
        y_score=y_score,
        allow_small_groups=allow_small_groups,
        protected=protected_features,
    )
    check_bootstrap(n_resamples, confidence)
    alpha = 1.0 - confidence
    problem, left_out, notes = _released(problem)
    report = _report(problem, left_out, notes)
    values = overall_intervals(problem, alpha)
    values["balanced_accuracy"] = balanced_accuracy_interval(problem, n_resamples, confidence, seed)
    if problem.score is not None:
        values["roc_auc"] = roc_auc_interval(problem.actual, problem.score, alpha)
    measures, groups = _measure_intervals(problem, alpha)
    values.update(measures)
    values.update(_group_intervals(problem, report, groups))
    return metric_names(values)


def ci_metrics(intervals: dict, *, confidence: float = 0.95) -> dict[str, float]:
    """Flatten :func:`bootstrap_intervals` into ``{"<name>.ci95_low": .., "<name>.ci95_high": ..}``.

    The ``95`` is ``100 * confidence``; undefined (NaN) bounds are left out, as in
    :meth:`FairnessReport.as_metrics`.

    Examples
    --------
    >>> ci_metrics({"accuracy": (0.75, 0.875)})
    {'accuracy.ci95_low': 0.75, 'accuracy.ci95_high': 0.875}
    """
    tag = f"ci{100 * confidence:g}"
    flat = {}
    for name, (low, high) in metric_names(intervals).items():
        if np.isfinite(low) and np.isfinite(high):
            flat[f"{name}.{tag}_low"] = float(low)
            flat[f"{name}.{tag}_high"] = float(high)
    return flat


def evaluate_fairness(
    y_true: Any,
    y_pred: Any,
    sensitive_features: Any,
    *,
    pos_label: Any = 1,
    min_group_size: int = MIN_GROUP_SIZE_FLOOR,
    allow_small_groups: bool = False,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: Any = 0,
    y_score: Any = None,
    protected_features: Any = None,
) -> tuple[dict[str, float], FairnessReport]:
    """Every metric of :func:`group_fairness` with its interval, as one flat dictionary.

    The one definition of "metrics with intervals" that the audit, the MLflow ``fairness``
    evaluator and the public tasks log: the names of :meth:`FairnessReport.as_metrics`, and
    for each the bounds of :func:`bootstrap_intervals` as ``<name>.ci95_low`` /
    ``<name>.ci95_high`` (``95`` is ``100 * confidence``). An undefined value (NaN) is left
    out, and so is its interval.

    Parameters
    ----------
    y_true, y_pred, sensitive_features, pos_label, min_group_size, allow_small_groups, y_score
        As in :func:`group_fairness`.
    protected_features
        As in :func:`group_fairness`: every sensitive column of the data that is not
        reported here.
    n_resamples, confidence, seed
        As in :func:`bootstrap_intervals`.

    Returns
    -------
    metrics : dict of str to float
    report : FairnessReport
        The report behind the point values (per-group table, notes).

    Examples
    --------
    >>> y = [1, 0] * 50
    >>> metrics, _ = evaluate_fairness(y, y, ["a"] * 50 + ["b"] * 50)
    >>> metrics["accuracy"], metrics["dp_difference.ci95_low"]
    (1.0, 0.0)
    """
    options = {
        "pos_label": pos_label,
        "min_group_size": min_group_size,
        "allow_small_groups": allow_small_groups,
        "y_score": y_score,
        "protected_features": protected_features,
    }
    report = group_fairness(y_true, y_pred, sensitive_features, confidence=confidence, **options)
    intervals = bootstrap_intervals(
        y_true,
        y_pred,
        sensitive_features,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        **options,
    )
    metrics = report.as_metrics()
    bounds = ci_metrics(intervals, confidence=confidence)
    metrics.update({k: v for k, v in bounds.items() if k.rsplit(".", 1)[0] in metrics})
    return metrics, report
