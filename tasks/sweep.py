"""Downstream classifiers of the paper (Sec. 5.1 and Appendix C.1), and the same logistic
regression with its decision threshold tuned on the training rows.

The lambda trade-off sweep: one fitted representation, many lambdas, all classifiers.

:func:`sweep_tradeoff` is the one implementation; the audit's :func:`lambda_sweep` and the
public :func:`fairpca.tasks.public.sweep_lambda` are entries over it."""

from __future__ import annotations

import functools
import itertools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import (
    FixedThresholdClassifier,
    RepeatedStratifiedKFold,
    StratifiedGroupKFold,
    StratifiedKFold,
    cross_val_predict,
)
from sklearn.neural_network import MLPClassifier
from sklearn.svm import SVC, LinearSVC
from threadpoolctl import threadpool_limits

from fairpca import metrics as fm
from fairpca.tasks import evaluate, select

from . import CERTIFY_Z, CLASSIFIER_NAMES, MAX_ONE_CLASS_SHARE, MIN_POSITIVE_RATE_RATIO
from .data import stratified_sample, stratum_labels
from .represent import FittedRepresentation, fit_representation

# ---- the classifiers ------------------------------------------------------------

THRESHOLD_FOLDS = 3  # cross-validation folds of the training rows that choose the threshold
# Training rows whose out-of-fold scores place the threshold (a seeded sample stratified by
# label x group; the classifier itself is fitted on every row): one cut is settled long before
# the rows a fit uses, and on every row of a large table the folds copied two thirds of them
# each (840 MB at 500,000 rows of 210 features) and cost three more fits.
THRESHOLD_MAX_ROWS = 50_000
# The messages of the refusals below (str.format templates; tests name them, not their words)
UNKNOWN_THRESHOLD_OBJECTIVE = (
    "unknown threshold objective {scoring!r}; use balanced_accuracy or accuracy."
)
# The inverse regularisation strengths ``logreg_tuned`` tries (None: the paper's
# C = 1 / (2 n 0.01), Appendix C.1, which is 0.01 at n = 5,000).
DEFAULT_C_GRID = (None, 1.0)
# liblinear's primal stopping tolerance for the linear SVM (default 1e-4). On Adult's fair PCA
# features its Newton steps need ever more conjugate-gradient steps as rows grow (3.5 s on
# 24,000 rows, 12 s on 100,000 at 1e-4; 0.6 s and 2.6 s at 1e-2) for no change in accuracy
# (0.8292 vs 0.8288 on every Adult row).
LINEAR_SVM_TOL = 1e-2


def paper_C(n_train: int) -> float:
    """Appendix C.1's logistic-regression C for ``n_train`` rows: ``1 / (2 n 0.01)``."""
    return 1.0 / (2 * n_train * 0.01)


def C_values(C_grid: Sequence[float | None], n_train: int) -> list[float]:
    """The distinct C of a grid for ``n_train`` training rows, in order (None:
    :func:`paper_C`)."""
    return sorted({paper_C(n_train) if c is None else float(c) for c in C_grid})


def make_classifier(name: str, n_train: int, seed: int, C: float | None = None):
    """Unfitted classifier ``name`` for ``n_train`` training rows.

    Appendix C.1: logistic regression with ``C = 1 / (2 n 0.01)``, RBF SVC with
    ``C = 1 / (2 n 0.00005)``; linear SVM with default settings but a looser stopping
    tolerance (:data:`LINEAR_SVM_TOL`); MLP with hidden layers
    (10, 5) and otherwise default settings (Sec. 5.1). ``logreg_tuned`` is the same logistic
    regression, with ``C`` when given; :func:`fit_classifier` then moves its probability
    threshold off 0.5.
    """
    if name in ("logreg", "logreg_tuned"):
        strength = paper_C(n_train) if C is None or name == "logreg" else float(C)
        return LogisticRegression(C=strength, max_iter=1000)
    if name == "rbf_svc":
        return SVC(kernel="rbf", C=1.0 / (2 * n_train * 0.00005), random_state=seed)
    if name == "linear_svm":
        return LinearSVC(tol=LINEAR_SVM_TOL, random_state=seed)
    if name == "mlp":
        return MLPClassifier(hidden_layer_sizes=(10, 5), max_iter=500, random_state=seed)
    raise ValueError(f"unknown classifier {name!r}; use one of {', '.join(CLASSIFIER_NAMES)}.")


def _ranked_objective(scores: np.ndarray, y: np.ndarray, scoring: str) -> tuple:
    """The scores in descending order, the labels in that order, and ``scoring`` of
    predicting 1 for the first ``i + 1`` rows at each ``i`` (-inf inside a run of equal
    scores, where no threshold cuts)."""
    order = np.argsort(-scores, kind="stable")
    ranked, labels = scores[order], np.asarray(y)[order]
    true_pos = np.cumsum(labels)  # predicting 1 for the first i + 1 rows
    false_pos = np.arange(1, len(labels) + 1) - true_pos
    positives, negatives = true_pos[-1], len(labels) - true_pos[-1]
    if scoring == "balanced_accuracy":
        value = 0.5 * (true_pos / positives + (negatives - false_pos) / negatives)
    elif scoring == "accuracy":
        value = (true_pos + negatives - false_pos) / len(labels)
    else:
        raise ValueError(UNKNOWN_THRESHOLD_OBJECTIVE.format(scoring=scoring))
    cut = np.r_[ranked[1:] < ranked[:-1], True]  # the last row of each run of equal scores
    return order, ranked, labels, np.where(cut, value, -np.inf)


def _threshold_at(ranked: np.ndarray, value: np.ndarray) -> float:
    """The threshold between the best cut's row and the next (ties to the higher one)."""
    at = int(np.flatnonzero(value == value.max())[0])
    below = ranked[at + 1] if at + 1 < len(ranked) else ranked[at] - 1e-12
    return float(0.5 * (ranked[at] + below))


def best_threshold(scores: np.ndarray, y: np.ndarray, scoring: str) -> float:
    """The probability threshold that maximises ``scoring`` (``balanced_accuracy`` or
    ``accuracy``) of ``score >= threshold`` on these rows, over every cut between two distinct
    scores (midpoints; ties to the higher threshold).

    Exact in O(n log n) from cumulative counts: sklearn's ``TunedThresholdClassifierCV``
    scores 100 candidate thresholds with one scorer call each, which on 5,000 rows costs as
    much as the logistic fit itself.
    """
    _, ranked, _, value = _ranked_objective(scores, y, scoring)
    return _threshold_at(ranked, value)


@dataclass(frozen=True)
class ThresholdGate:
    """What a threshold is chosen under: the gate ``policy``, the training rows' sensitive
    ``groups`` (one column per attribute, aligned with the rows) and the smallest group
    the gate judges (``min_group_size``)."""

    policy: select.GatePolicy
    groups: pd.DataFrame
    min_group_size: int = 0

    def rows(self, picked: np.ndarray) -> ThresholdGate:
        """The same gate on the rows ``picked`` of the training rows."""
        groups = self.groups.iloc[picked].reset_index(drop=True)
        return ThresholdGate(self.policy, groups, self.min_group_size)


def _measures_at_cuts(labels: np.ndarray, codes: np.ndarray, min_group_size: int) -> dict:
    """``{measure: (value, standard error)}`` of each gated measure over one grouping at every
    cut (predicting 1 for the first ``i + 1`` rows of ``labels``), from the cumulative
    counts per group: O(groups x rows) after the one sort."""
    n_groups = int(codes.max()) + 1
    member = codes[None, :] == np.arange(n_groups)[:, None]  # groups x rows

    def rates(mask: np.ndarray):
        hits = np.cumsum(member & mask[None, :], axis=1)
        rows = hits[:, -1]
        keep = rows >= max(min_group_size, 1)
        return hits[keep] / rows[keep][:, None], rows[keep]

    out = {}
    selection, rows = rates(np.ones(len(labels), dtype=bool))
    if len(rows) >= 2:
        out["dp_difference"] = evaluate.extreme_pair(selection, rows, ratio=False)
        out["selection_rate_ratio"] = evaluate.extreme_pair(selection, rows, ratio=True)
    tpr, positives = rates(labels == 1)
    fpr, negatives = rates(labels == 0)
    if len(positives) >= 2:
        out["eo_difference"] = evaluate.extreme_pair(tpr, positives, ratio=False)
        if len(negatives) >= 2:  # the larger of the TPR and the FPR difference
            odds = [out["eo_difference"], evaluate.extreme_pair(fpr, negatives, ratio=False)]
            out["equalized_odds_difference"] = _worst(odds, lowest=False)
    return out


def _worst(pairs: list[tuple], lowest: bool) -> tuple:
    """Per cut, the least fair of ``pairs`` (``(value, standard error)`` of attributes, or
    of the TPR and FPR differences): the lowest ratio, the largest difference; ties to the
    first."""
    value, error = pairs[0]
    for other, other_error in pairs[1:]:
        worse = other < value if lowest else other > value
        value, error = np.where(worse, other, value), np.where(worse, other_error, error)
    return value, error


def _meets_gate_at_cuts(labels: np.ndarray, groups: pd.DataFrame, gate: ThresholdGate):
    """Per cut, whether the rows' predictions meet ``gate.policy`` with its margin: a
    point-judged measure by :data:`~fairpca.tasks.select.STABLE_Z` standard errors, a
    bound-judged one by 1.96 (its 95% bound, normal approximation); the worst attribute and,
    with several, the intersection's cells of at least ``min_group_size`` rows."""
    measured = {name: _measures_at_cuts(labels, codes, gate.min_group_size)
                for name, codes in evaluate.group_codes(groups).items()}  # fmt: skip
    scopes = {select.INTERSECTION: measured.pop(select.INTERSECTION, {}), "": {}}
    for measure in dict.fromkeys(key for pairs in measured.values() for key in pairs):
        pairs = [each[measure] for each in measured.values() if measure in each]
        scopes[""][measure] = _worst(pairs, lowest=measure == "selection_rate_ratio")
    policy, meets = gate.policy, np.ones(len(labels), dtype=bool)
    for criterion, limit in policy.limits():
        if (limit <= 0.0) if criterion.larger_is_fairer else (limit >= 1.0):
            continue  # always met
        z = select.STABLE_Z if policy.bound == "point" or criterion.point_rule else CERTIFY_Z
        for scope in ("", select.INTERSECTION):
            pair = scopes[scope].get(criterion.metric)
            if pair is None:
                if scope:
                    continue  # too few large cells: the gate does not judge it either
                return np.zeros(len(labels), dtype=bool)
            value, error = pair
            with np.errstate(invalid="ignore"):
                meets &= (value - z * error >= limit) if criterion.larger_is_fairer else (
                    value + z * error <= limit
                )  # fmt: skip
    n = len(labels)  # accuracy at each cut: true positives + true negatives
    accuracy = (2 * np.cumsum(labels) - np.arange(1, n + 1) + n - labels.sum()) / n
    z = CERTIFY_Z if policy.bound == "upper_bound" else 0.0
    floor = policy.thresholds.get("min_accuracy", 0.0)
    meets &= accuracy - z * np.sqrt(accuracy * (1 - accuracy) / n) >= floor
    return meets


def _useful_cuts(labels: np.ndarray, value: np.ndarray, scoring: str) -> np.ndarray:
    """Cuts a reviewer could use, by the audit's eligibility rules on these rows: saying yes
    (or no) to nearly everyone meets parity trivially. The share predicted positive stays
    within :data:`~fairpca.tasks.select.MAX_ONE_CLASS_SHARE` and at least
    :data:`~fairpca.tasks.MIN_POSITIVE_RATE_RATIO` of the base rate (and of the
    negative one), and ``scoring`` keeps :data:`~fairpca.tasks.select.MIN_USEFUL_SHARE` of
    the best cut's gain over the constant predictions."""
    n, base = len(labels), labels.mean()
    positive = np.arange(1, n + 1) / n
    constant = 0.5 if scoring == "balanced_accuracy" else max(base, 1 - base)
    gain = value.max() - constant
    return (
        (np.maximum(positive, 1 - positive) <= MAX_ONE_CLASS_SHARE)
        & (positive >= MIN_POSITIVE_RATE_RATIO * base)
        & (1 - positive >= MIN_POSITIVE_RATE_RATIO * (1 - base))
        & (value - constant >= select.MIN_USEFUL_SHARE * gain)
        & (gain > 0)
    )


def gated_threshold(scores: np.ndarray, y: np.ndarray, scoring: str, gate: ThresholdGate) -> float:
    """The probability threshold with the highest ``scoring`` among those whose predictions
    on these rows meet ``gate``'s policy with its margin (:func:`_meets_gate_at_cuts`) and
    stay useful (:func:`_useful_cuts`); :func:`best_threshold` when none does.

    Exact and O(n log n + groups x n): one sort, then cumulative counts per group give every
    cut's rates per group at once."""
    order, ranked, labels, value = _ranked_objective(scores, y, scoring)
    allowed = _useful_cuts(labels, value, scoring) & _meets_gate_at_cuts(
        labels, gate.groups.iloc[order], gate
    )
    return _threshold_at(ranked, np.where(allowed, value, -np.inf) if allowed.any() else value)


def _with_tuned_threshold(
    classifier, features, y, scoring: str, gate: ThresholdGate | None, seed: int,
    entities: np.ndarray | None = None,
):  # fmt: skip
    """``classifier`` refitted on every training row, predicting 1 above the probability
    threshold that maximises ``scoring`` (the audit's selection measure) on its
    out-of-fold scores in ``THRESHOLD_FOLDS``-fold stratified cross-validation of them
    (fewer folds when a class has fewer rows; :func:`best_threshold`); with a ``gate``, the
    best among the thresholds whose out-of-fold predictions meet the gate's policy with its
    margin (:func:`gated_threshold`; the unconstrained best when none does).

    Appendix C.1's penalty (``C = 0.01`` at n = 5,000) shrinks the scores towards 0.5, so at
    the default threshold the model under-predicts the rarer class: on Adult's fair
    representation it says yes for 9% of the rows against a base rate of 24%. For balanced
    accuracy the best threshold of a calibrated model is the base rate. The threshold is
    chosen on training rows only, so validation and test rows stay untouched. The fitted
    model is a plain :class:`~sklearn.model_selection.FixedThresholdClassifier`. With
    ``entities`` (each training row's entity, a panel's person or firm) the folds keep each
    entity's rows together (:func:`stratified_folds`).
    """
    folds = min(THRESHOLD_FOLDS, int(np.bincount(y).min()))
    if entities is not None:
        folds = min(folds, len(np.unique(entities)))
    if folds < 2:  # too few rows of a class to cross-validate: the default threshold
        return classifier.fit(features, y)
    placing, y_placing, entities_placing = features, y, entities
    if len(y) > THRESHOLD_MAX_ROWS:
        groups = gate.groups if gate is not None else pd.DataFrame(index=range(len(y)))
        rows = stratified_sample(y, groups, THRESHOLD_MAX_ROWS, seed)
        placing, y_placing, gate = features[rows], y[rows], gate and gate.rows(rows)
        entities_placing = None if entities is None else entities[rows]
    cv = stratified_folds(folds, y_placing, entities_placing, seed)
    scores = cross_val_predict(clone(classifier), placing, y_placing, cv=cv, method="predict_proba")
    scores = scores[:, 1]
    if gate is None:
        threshold = best_threshold(scores, y_placing, scoring)
    else:
        threshold = gated_threshold(scores, y_placing, scoring, gate)
    return FixedThresholdClassifier(clone(classifier), threshold=threshold).fit(features, y)


def stratified_folds(
    folds: int, y: np.ndarray, entities: np.ndarray | None, seed: int, strata=None
):
    """The seeded ``folds``-fold cross-validation of rows with labels ``y``, stratified by
    ``strata`` (default: the label): :class:`~sklearn.model_selection.StratifiedKFold`, or
    with ``entities`` (each row's entity) the index pairs of
    :class:`~sklearn.model_selection.StratifiedGroupKFold`, every entity's rows in one fold
    (stratified as far as whole entities allow)."""
    if entities is None:
        return StratifiedKFold(folds, shuffle=True, random_state=seed)
    splitter = StratifiedGroupKFold(folds, shuffle=True, random_state=seed)
    # (a UserWarning when strata are smaller than the folds)
    with warnings.catch_warnings(action="ignore", category=UserWarning):
        target = y if strata is None else strata
        return list(splitter.split(np.zeros(len(y)), target, groups=entities))


def fit_classifier(
    name: str, features: np.ndarray, y: np.ndarray, *, seed: int, max_rows: int | None = None,
    C: float | None = None, scoring: str = "accuracy", gate: ThresholdGate | None = None,
    entities: np.ndarray | None = None,
):  # fmt: skip
    """Fit classifier ``name``; ``max_rows`` caps its training rows (seeded draw); ``C``,
    ``scoring`` (the threshold's objective), ``gate`` (the policy the threshold must meet
    on the training rows' out-of-fold scores, with their groups) and ``entities`` (each
    row's entity: the threshold's folds keep an entity's rows together) apply to
    ``logreg_tuned``."""
    if max_rows is not None and len(y) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(y), max_rows, replace=False))
        features, y = features[rows], y[rows]
        gate = gate and gate.rows(rows)
        entities = None if entities is None else entities[rows]
    classifier = make_classifier(name, len(y), seed, C)
    if np.unique(y).size < 2:
        raise ValueError("the training rows hold one label only; a classifier needs both.")
    with warnings.catch_warnings(action="ignore", category=ConvergenceWarning):
        if name == "logreg_tuned":
            return _with_tuned_threshold(classifier, features, y, scoring, gate, seed, entities)
        classifier.fit(features, y)
    return classifier


def fit_screening_classifier(features: np.ndarray, y: np.ndarray, C: float, scoring: str):
    """The coarse search's cheap ``logreg_tuned``: one fit, its threshold chosen for
    ``scoring`` on the same training rows (:func:`best_threshold`; no cross-validation, a
    screening only; never saved or registered)."""
    with warnings.catch_warnings(action="ignore", category=ConvergenceWarning):
        fitted = LogisticRegression(C=C, max_iter=1000).fit(features, y)
    threshold = best_threshold(fitted.predict_proba(features)[:, 1], y, scoring)
    return FixedThresholdClassifier(FrozenEstimator(fitted), threshold=threshold).fit(features, y)


@dataclass
class SweepResult:
    """Rows of the metrics table for one variant and its fitted classifiers."""

    variant: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    classifiers: dict[tuple[int, str], Any] = field(default_factory=dict)
    seconds: float = 0.0


def sweep_tradeoff(
    estimator, lambdas: Sequence[float | None], X_train: np.ndarray, y_train: np.ndarray,
    X_eval: np.ndarray, y_eval: np.ndarray, sensitive_eval: Any, *,
    classifiers: dict[str, Callable[[np.ndarray, np.ndarray], Any]],
    metric_options: dict[str, Any], describe: Callable[[np.ndarray], dict[str, Any]] | None = None,
    progress: Callable[[int, int], None] | None = None, train_dtype: type = np.float64,
) -> tuple[list[dict[str, Any]], dict[tuple[int, str], Any]]:  # fmt: skip
    """The one lambda sweep: every classifier at every trade-off ``lambda`` of ``estimator``.

    Fair PCA is fitted once; changing ``tradeoff`` only changes how many PCA features are
    appended and their weight (Sec. 3.1), so each lambda costs one transform of the training
    and the evaluation rows. A ``None`` lambda leaves the estimator as it is (standard PCA:
    ``lambda`` NaN). ``classifiers`` maps a name to ``fit(F_train, y_train) -> fitted``; each
    is evaluated on the evaluation rows with :func:`~fairpca.tasks.evaluate.
    metrics_with_intervals` (``metric_options``: ``min_group_size``, ``n_resamples``,
    ``seed``, ...). ``describe(F_eval)`` adds columns shared by one lambda's rows;
    ``progress(done, total)`` is called after each lambda. The estimator's ``tradeoff`` is
    restored afterwards, also on error. Returns one row per lambda and classifier, and the
    fitted classifiers by ``(lambda_index, name)``.

    The classifiers are fitted and the transformed training rows released before the
    evaluation rows are transformed: with the appended PCA block each is twice the width of
    its input, and on many rows the two together were the audit's peak memory.
    ``train_dtype`` is the classifiers' training input (float32 halves it; the evaluation
    rows, and so every prediction and metric, stay float64 as the fitted pipeline sees them).
    """
    rows, fitted = [], {}
    original = estimator.get_params().get("tradeoff")
    try:
        for index, lam in enumerate(lambdas):
            if lam is not None:
                estimator.set_params(tradeoff=lam)
            F_train = transformed(estimator, X_train, train_dtype)
            shared = {"lambda_index": index, "lambda": np.nan if lam is None else float(lam)}
            shared["n_features"] = F_train.shape[1]
            seconds = {}  # each classifier's: its fit, then its predictions and metrics
            for name, fit in classifiers.items():
                start = time.perf_counter()
                fitted[(index, name)] = fit(F_train, y_train)
                seconds[name] = time.perf_counter() - start
            del F_train
            F_eval = np.asarray(estimator.transform(X_eval), dtype=np.float64)
            shared.update(describe(F_eval) if describe is not None else {})
            for name, fit_seconds in seconds.items():
                start = time.perf_counter() - fit_seconds
                y_pred = fitted[(index, name)].predict(F_eval)
                metrics = evaluate.gated_metrics(y_eval, y_pred, sensitive_eval, metric_options)
                share = evaluate.one_class_share(y_pred)
                rows.append({**shared, "classifier": name, "one_class_share": share, **metrics,
                             "classifier_seconds": time.perf_counter() - start})  # fmt: skip
            del F_eval
            if progress is not None:
                progress(index + 1, len(lambdas))
    finally:
        if any(lam is not None for lam in lambdas):
            estimator.set_params(tradeoff=original)
    return rows, fitted


TRANSFORM_BLOCK_ROWS = 10_000


def transformed(estimator, X: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """``estimator.transform(X)`` as ``dtype``; another than float64 is filled by blocks of
    :data:`TRANSFORM_BLOCK_ROWS` rows (each row is transformed alone), so that no float64
    copy of every row is made first."""
    if np.dtype(dtype) == np.float64:
        return np.asarray(estimator.transform(X), dtype=np.float64)
    out = None
    for start in range(0, len(X), TRANSFORM_BLOCK_ROWS):
        block = np.asarray(estimator.transform(X[start : start + TRANSFORM_BLOCK_ROWS]))
        if out is None:
            out = np.empty((len(X), block.shape[1]), dtype=dtype)
        out[start : start + len(block)] = block
    return out


def _representation_columns(rep, encoded, split, max_rows, seed, sigma) -> Callable:
    """``describe(F_validation)`` of :func:`sweep_tradeoff`: the variance the components
    explain on the validation rows, and the representation metrics at a lambda
    (:func:`~fairpca.tasks.evaluate.held_out_metrics`; the fair block is the first k
    columns, and equal opportunity constrains the positive training rows only, Sec. 3.2).
    ``encoded`` holds the encoded training and validation rows. The fair block does not
    depend on lambda, so its training gap is measured once, on the estimator as it is."""
    encoded_train, encoded_validation = encoded
    var_explained = np.nan
    if (components := getattr(rep.estimator, "components_", None)) is not None:
        var_explained = fm.explained_variance_fraction(encoded_validation, components)
    k = int(rep.facts["k"])
    eo = getattr(rep.estimator, "constraint", None) == "equal_opportunity"
    constraint_rows = np.flatnonzero(split.y_train == 1) if eo else None
    fair = np.asarray(rep.estimator.transform(encoded_train), dtype=np.float64)
    gap = evaluate.training_mean_gap(fair, split.s_train, k, constraint_rows)

    def describe(F_validation: np.ndarray) -> dict[str, Any]:
        measured = evaluate.held_out_metrics(
            F_validation, split.s_validation, gap, fair_columns=k, sigma=sigma,
            max_rows=max_rows, seed=seed,
        )  # fmt: skip
        return {"var_explained": float(var_explained), **measured}

    return describe


def sweep_representation(
    rep: FittedRepresentation, encoded_train: np.ndarray, encoded_validation: np.ndarray, split,
    representation, evaluation, seed: int, sigma: float, progress=None, *, C: float | None = None,
    scoring: str = "accuracy", lambdas: Sequence[float] | None = None,
    policy: select.GatePolicy | None = None, C_grid: Sequence[float | None] | None = None,
    train_dtype: type = np.float64,
) -> SweepResult:  # fmt: skip
    """:func:`sweep_tradeoff` of ``rep`` with the audit's classifiers on the validation rows,
    with the representation metrics of each lambda.

    Variants without a trade-off (standard PCA) give one row per classifier with ``lambda``
    NaN. Only the training and validation rows of ``split`` are read. ``representation`` and
    ``evaluation`` are the config's sections of those names; ``C`` and ``scoring`` (the
    selection measure) tune ``logreg_tuned``, whose threshold meets ``policy`` on the
    training rows where it can (:class:`ThresholdGate`); ``lambdas`` replaces the config's
    (the search's refinement); ``C_grid`` (instead of ``C``): ``logreg_tuned`` at each of
    these C at every lambda, a candidate per (lambda, C). Each row names its ``k``,
    classifier ``C`` (``C_given``: the grid's entry, NaN for the paper's rule) and
    ``validation_rows`` (how many rows measured it: a wide search's sample or every
    validation row); the fitted classifiers are keyed by
    :func:`~fairpca.tasks.evaluate.classifier_key` of their row. ``train_dtype``: the
    classifiers' training input (:func:`sweep_tradeoff`).
    """
    start = time.perf_counter()
    gate = policy and ThresholdGate(policy, split.s_train, evaluation.min_group_size)
    entities = getattr(split, "entity_train", None)  # a panel's: folds keep entities whole

    def fitter(name: str, strength: float | None) -> Callable:  # fit(F, y) -> fitted
        max_rows = evaluation.svc_max_train_rows if name == "rbf_svc" else None
        return functools.partial(
            fit_classifier, name, seed=seed, max_rows=max_rows, C=strength, scoring=scoring,
            gate=gate, entities=entities,
        )  # fmt: skip

    by_grid = bool(C_grid) and "logreg_tuned" in evaluation.classifiers
    grid = list(C_grid) if by_grid else [C]  # the C each row's classifier indexes
    single = [name for name in evaluation.classifiers if not (by_grid and name == "logreg_tuned")]
    classifiers = {name: fitter(name, C) for name in single}
    if by_grid:
        classifiers |= {f"logreg_tuned@{i}": fitter("logreg_tuned", c) for i, c in enumerate(grid)}
    describe = _representation_columns(
        rep, (encoded_train, encoded_validation), split, representation.metric_max_rows, seed, sigma
    )
    rows, fitted = sweep_tradeoff(
        rep.estimator, list(lambdas or representation.lambdas) if rep.supports_tradeoff else [None],
        encoded_train, split.y_train, encoded_validation, split.y_validation, split.s_validation,
        classifiers=classifiers, metric_options=evaluate.metric_options(evaluation, seed),
        describe=describe, train_dtype=train_dtype,
        progress=progress and (lambda done, total: progress(rep.variant, done, total)),
    )  # fmt: skip
    k, paper = int(rep.facts["k"]), paper_C(len(split.y_train))
    measured_on = len(split.y_validation)  # which rows: a search sample or every row
    result = SweepResult(rep.variant)
    for row in rows:
        name, _, at = row["classifier"].partition("@")
        given = grid[int(at)] if at else (C if name == "logreg_tuned" else None)
        strength = {"logreg": paper, "logreg_tuned": paper if given is None else float(given)}
        named = {"variant": rep.variant, "k": k, "C": strength.get(name, np.nan),
                 "C_given": np.nan if given is None else float(given),
                 "validation_rows": measured_on, **row, "classifier": name}  # fmt: skip
        result.rows.append(named)
        key = (row["lambda_index"], row["classifier"])
        result.classifiers[evaluate.classifier_key(named)] = fitted[key]
    result.seconds = time.perf_counter() - start
    return result


def _one_blas_thread(function: Callable) -> Callable:
    """``function`` run with one BLAS thread: the task runner runs the variants' stages side
    by side (two sweeps with one BLAS thread each: 3x faster fits on 2 busy cores than
    oversubscribed). Not threadpoolctl's ``threadpool_limits.wrap``: it holds a thread-local,
    which a task sent to a Dask cluster cannot pickle."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        with threadpool_limits(limits=1):
            return function(*args, **kwargs)

    return run


@task(name="lambda-sweep", cache_policy=NO_CACHE, task_run_name="sweep-{variant}")
@_one_blas_thread
def lambda_sweep(
    variant: str, rep: FittedRepresentation, encoded_train: np.ndarray,
    encoded_validation: np.ndarray, split, representation, evaluation, seed: int, sigma: float,
    C: float | None = None, scoring: str = "accuracy", lambdas: Sequence[float] | None = None,
    policy: select.GatePolicy | None = None,
) -> SweepResult:  # fmt: skip
    """Prefect task around :func:`sweep_representation`, with a progress artifact."""
    artifact_id = create_progress_artifact(
        progress=0.0, description=f"lambda sweep of {variant} (% of lambdas done)"
    )

    def progress(_variant: str, done: int, total: int) -> None:
        update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)

    return sweep_representation(
        rep, encoded_train, encoded_validation, split, representation, evaluation, seed,
        sigma, progress, C=C, scoring=scoring, lambdas=lambdas, policy=policy,
        C_grid=list(evaluation.logreg_C or DEFAULT_C_GRID),
    )  # fmt: skip


# ---- the search: k and C per variant (coarse), then the lambda sweep (fine) ---------------------


@dataclass
class SearchResult:
    """One variant's coarse search: the representation at the chosen k, the chosen ``C`` of
    ``logreg_tuned`` (None: the paper's), and every point tried (the frontier over k and
    lambda, validation rows)."""

    variant: str
    representation: FittedRepresentation
    C: float | None
    points: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    lambdas: list[float] | None = None  # the lambdas the sweep refines (None: every one)


def coarse_lambdas(lambdas: Sequence[float]) -> list[float]:
    """Every fifth lambda of the grid and the last one (the paper's 11 lambdas: 0, 0.125, 1):
    enough to place k and C; the chosen k then gets every lambda."""
    return sorted({*list(lambdas)[::5], list(lambdas)[-1]})


def fine_lambdas(lambdas: Sequence[float], best: float | None) -> list[float] | None:
    """The lambdas the sweep refines: those between the coarse lambdas on either side of the
    coarse winner ``best`` (Adult's winner at 0: 0 to 0.125, 6 of the 11). None: all."""
    if best is None or not np.isfinite(best):
        return None
    coarse = coarse_lambdas(lambdas)
    at = int(np.argmin(np.abs(np.asarray(coarse) - best)))
    low, high = coarse[max(at - 1, 0)], coarse[min(at + 1, len(coarse) - 1)]
    return [lam for lam in lambdas if low <= lam <= high]


def search_representation(
    variant: str, encoded_train: np.ndarray, encoded_validation: np.ndarray, split,
    k_grid: Sequence[int], representation, evaluation, selection, seed: int,
) -> SearchResult:  # fmt: skip
    """Coarse search of one variant on the validation rows: refit it at every k of
    ``k_grid`` (one eigenproblem each: the fair directions of a smaller k are the leading
    ones of a larger fit for plain fair PCA, which solves one eigenproblem of ``R^T Sigma R``
    (Algorithm 1), but not for Fair PCA-S, whose ``l`` grows with k (Sec. 3.6); refitting is
    exact for both), screen ``logreg_tuned`` over the C grid at :func:`coarse_lambdas`, and
    keep the k and C of the best candidate by the audit's own rule
    (:func:`fairpca.tasks.select.select_candidate`: eligible, meeting the gate, the highest
    ``select_by``). One k in the grid: nothing to choose, no screening."""
    start = time.perf_counter()
    fit = functools.partial(
        fit_representation.fn, variant, encoded_train, split.y_train, split.s_train,
        equalize_covariance=representation.equalize_covariance, seed=seed,
    )  # fmt: skip
    fitted = {k: fit(k=k) for k in k_grid}
    C_grid = list(evaluation.logreg_C or DEFAULT_C_GRID)
    if len(fitted) == 1 and len(C_grid) == 1:
        (rep,) = fitted.values()
        return SearchResult(variant, rep, C_grid[0], [], time.perf_counter() - start)
    screen = functools.partial(fit_screening_classifier, scoring=selection.select_by)
    C_screened = C_values(C_grid, len(split.y_train))
    classifiers = {f"logreg_tuned@C={c:g}": functools.partial(screen, C=c) for c in C_screened}
    points = []
    for k, rep in fitted.items():
        lambdas = coarse_lambdas(representation.lambdas) if rep.supports_tradeoff else [None]
        rows, _ = sweep_tradeoff(
            rep.estimator, lambdas, encoded_train, split.y_train, encoded_validation,
            split.y_validation, split.s_validation, classifiers=classifiers,
            metric_options=evaluate.metric_options(evaluation, seed),
        )  # fmt: skip
        for row in rows:
            C = float(row["classifier"].partition("=")[2])
            points.append({"variant": variant, "k": k, "C": C, **row, "stage": "coarse",
                           "validation_rows": len(split.y_validation)})  # fmt: skip
    majority = select.majority_accuracy_of(split.y_train, split.y_validation)
    best, _, _ = select.select_candidate(pd.DataFrame(points), majority, selection)
    C = None if best["C"] == paper_C(len(split.y_train)) else float(best["C"])
    lambdas = fine_lambdas(representation.lambdas, best.get("lambda"))
    seconds = time.perf_counter() - start
    return SearchResult(variant, fitted[int(best["k"])], C, points, seconds, lambdas)


# The Prefect task of :func:`search_representation` (one BLAS thread).
search_variant = task(
    _one_blas_thread(search_representation), name="search-representation",
    cache_policy=NO_CACHE, task_run_name="search-{variant}",
)  # fmt: skip


# ---- many rows: the shortlist refitted on every training row, measured on every validation row --


# Encoded training rows above which the refitted classifiers train on float32 features: there
# they are the largest array of the audit (at 500,000 rows, Fair PCA at k = 105 with its
# appended PCA block: 840 MB as float64, 420 MB as float32). The representation is fitted in
# float64 (its constraint holds to 1e-10), and the classifier is measured, checked and
# registered on float64 features as the pipeline gives them; the fit is deterministic. Below
# it (Adult, 200,000 rows) everything stays float64.
FLOAT32_REFIT_ABOVE_BYTES = 200_000_000


@task(name="refit-shortlist", cache_policy=NO_CACHE, task_run_name="refit-{variant}")
@_one_blas_thread
def refit_shortlist(
    variant: str, candidates: list[dict[str, Any]], searched: FittedRepresentation,
    encoded: tuple[np.ndarray, np.ndarray], split, representation, evaluation, selection,
    seed: int, sigma: float, C: float | None,
) -> tuple[FittedRepresentation, SweepResult]:  # fmt: skip
    """The shortlisted ``candidates`` of one variant (rows of the wide search's table, on a
    sample), each refitted on every training row of ``split`` and measured on every
    validation row: the representation fitted once at the searched k (Fair PCA-S at the
    searched ``l``), then per candidate one transform at its lambda and one classifier fit.
    Returns the representation and a :class:`SweepResult` whose ``lambda_index`` numbers the
    candidates (what :func:`fairpca.tasks.evaluate.build_pipeline` looks up)."""
    start = time.perf_counter()
    equalize = searched.facts.get("equalize_covariance", representation.equalize_covariance)
    rep = fit_representation.fn(
        variant, encoded[0], split.y_train, split.s_train, k=int(searched.facts["k"]),
        equalize_covariance=equalize, seed=seed,
    )  # fmt: skip
    result = SweepResult(variant)
    policy = select.GatePolicy.from_config(selection)
    dtype = np.float32 if encoded[0].nbytes > FLOAT32_REFIT_ABOVE_BYTES else np.float64
    for index, row in enumerate(candidates):
        # the C the candidate was swept with as the grid gives it (NaN: the paper's rule,
        # which scales with the training rows), else the variant's searched C
        given = row.get("C_given", C)
        one = sweep_representation(
            rep, *encoded, split, representation,
            evaluation.model_copy(update={"classifiers": [row["classifier"]]}), seed, sigma,
            C=None if given is None or not np.isfinite(given) else float(given),
            scoring=selection.select_by, policy=policy, train_dtype=dtype,
            lambdas=[float(row["lambda"])] if rep.supports_tradeoff else None,
        )  # fmt: skip
        (measured,), (fitted,) = one.rows, one.classifiers.values()  # the candidate's
        result.rows.append({**measured, "lambda_index": index})
        result.classifiers[evaluate.classifier_key(result.rows[-1])] = fitted
    result.seconds = time.perf_counter() - start
    return rep, result


# ---- small validation parts: the shortlist compared by repeated cross-validation ------------


def _gated_spread(y, predictions: np.ndarray, sensitive, options) -> dict[str, float]:
    """The standard deviation over the repeats of each gated measure's point estimate (the
    same rows, other folds): how much the choice's numbers move when the rows are split
    again."""
    values = [
        evaluate.classifier_metrics(y, repeat, sensitive, min_group_size=options["min_group_size"],
                                    allow_small_groups=options["allow_small_groups"])
        for repeat in predictions
    ]  # fmt: skip
    spread = {}
    for key in values[0]:
        if key.startswith(select.COMPARED) and ":" not in key:
            column = np.array([v.get(key, np.nan) for v in values], dtype=float)
            if len(column) > 1 and np.isfinite(column).all():
                spread[key] = float(np.std(column, ddof=1))
    return spread


def repeated_folds(y, s, entities, folds: int, repeats: int, seed: int) -> list[tuple]:
    """``(training rows, held-out rows)`` of ``repeats`` x ``folds``-fold cross-validation,
    stratified by label x group and seeded; with ``entities`` (each row's entity) every
    entity's rows in one fold of each repeat (:func:`stratified_folds`, each repeat seeded
    anew)."""
    strata = stratum_labels(y, s)
    if entities is None:
        splitter = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
        # (a UserWarning when strata are smaller than the folds)
        with warnings.catch_warnings(action="ignore", category=UserWarning):
            return list(splitter.split(np.zeros(len(y)), strata))
    folds = min(folds, len(np.unique(entities)))  # at most one fold per entity
    if folds < 2:
        raise ValueError(
            "cross-validation needs the training and validation rows of at least 2 entities "
            "(--group-column); pass a table with more entities."
        )
    return [
        pair
        for repeat in range(repeats)
        for pair in stratified_folds(folds, y, entities, seed + repeat, strata=strata)
    ]


def _cv_predictions(
    candidates, representations, Z, y, s, *, evaluation, selection, seed, entities=None
):
    """Out-of-fold predictions ``(candidate, repeat, row)`` of every candidate, each
    representation refitted on each fold's training rows (it is fitted on training rows);
    -1 where a candidate could not be fitted on a fold. ``entities``: each row's entity,
    kept in one fold."""
    folds, repeats = selection.cv_folds, selection.cv_repeats
    predictions = np.full((len(candidates), repeats, len(y)), -1, dtype=np.int64)
    by_rep: dict[tuple[str, int], list[int]] = {}
    for index, row in enumerate(candidates):
        by_rep.setdefault((row["variant"], int(row["k"])), []).append(index)
    folds_of = repeated_folds(y, s, entities, folds, repeats, seed)
    folds = len(folds_of) // repeats  # fewer with fewer entities than folds
    policy = select.GatePolicy.from_config(selection)
    for number, (train, held) in enumerate(folds_of):
        gate = ThresholdGate(
            policy, s.iloc[train].reset_index(drop=True), evaluation.min_group_size
        )
        for (variant, k), members in by_rep.items():
            equalize = representations[variant].facts.get("equalize_covariance")
            try:
                rep = fit_representation.fn(
                    variant, Z[train], y[train], gate.groups, k=k, equalize_covariance=equalize,
                    seed=seed,
                )  # fmt: skip
            except ValueError:  # e.g. a group without positive rows in this fold (EO)
                continue
            for index in members:
                row = candidates[index]
                if rep.supports_tradeoff:
                    rep.estimator.set_params(tradeoff=float(row["lambda"]))
                classifier = fit_classifier(
                    row["classifier"], rep.estimator.transform(Z[train]), y[train], seed=seed,
                    C=row.get("C"), scoring=selection.select_by, gate=gate,
                    max_rows=evaluation.svc_max_train_rows if row["classifier"] == "rbf_svc"
                    else None, entities=None if entities is None else entities[train],
                )  # fmt: skip
                predicted = classifier.predict(rep.estimator.transform(Z[held]))
                predictions[index, number // folds, held] = predicted
    return predictions


CV_SHORTLIST = 6  # candidates (best on the validation rows) that cross-validation compares


def cross_validate(
    candidates: list[dict[str, Any]], representations: dict[str, FittedRepresentation],
    encoded: tuple[np.ndarray, np.ndarray], split, *, evaluation, selection, seed: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """``candidates`` (rows of the sweep's table) measured again by repeated stratified
    cross-validation on the training and validation rows together (``cv_folds`` x
    ``cv_repeats``; folds stratified by label and group, each entity's rows in one fold when
    the split names them; the test rows are never read).

    Each row's metrics and intervals are those of the first repeat's out-of-fold predictions
    (every row predicted once, by a model that did not see it); its ``<measure>.se`` standard
    errors add the spread of the estimates over the repeats to the sampling error, and
    ``holdout_accuracy`` keeps the validation accuracy of the fit on the training rows (the
    one registered). A candidate that cannot be fitted on every fold is left out."""
    Z = np.vstack(encoded)
    y = np.concatenate([split.y_train, split.y_validation])
    s = pd.concat([split.s_train, split.s_validation], ignore_index=True)
    parts = (getattr(split, "entity_train", None), getattr(split, "entity_validation", None))
    entities = None if parts[0] is None else np.concatenate(parts)
    options = evaluate.metric_options(evaluation, seed)
    predictions = _cv_predictions(
        candidates, representations, Z, y, s, evaluation=evaluation, selection=selection,
        seed=seed, entities=entities,
    )  # fmt: skip
    rows = []
    for row, predicted in zip(candidates, predictions, strict=True):
        if (predicted < 0).any():
            continue
        metrics = evaluate.gated_metrics(y, predicted[0], s, options)
        spread = _gated_spread(y, predicted, s, options)
        # the standard errors with the spread over the repeats
        for measure, scope in itertools.product(evaluate.GATED_RATES, ("", select.INTERSECTION)):
            key, extra = f"{measure}.se{scope}", spread.get(f"{measure}{scope}", 0.0)
            if key in metrics:
                metrics[key] = float(np.hypot(metrics[key], extra))
        keep = {key: row[key] for key in ("variant", "k", "C", "lambda", "lambda_index",
                                          "classifier", "n_features") if key in row}  # fmt: skip
        rows.append({
            **keep, "one_class_share": evaluate.one_class_share(predicted[0]), **metrics,
            **{f"cv_spread.{key}": value for key, value in spread.items()},
            "holdout_accuracy": row.get("accuracy", math.nan),
        })  # fmt: skip
    return rows
