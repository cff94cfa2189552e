"""Reference mitigations on the audit's own rows: what other fairness approaches reach when
they are searched like the candidates.

Three fairlearn approaches over the candidates' logistic regression, trained on the training
part's encoded features, each configuration evaluated on the validation rows with the same
intervals (:func:`fairpca.tasks.evaluate.metrics_with_intervals`) and chosen there by the
audit's own rule (:func:`fairpca.tasks.select.select_candidate`: eligible, meeting the gate,
the highest ``select_by``), then measured on the test rows:

- ``threshold_optimizer`` (post-processing): group-specific thresholds on the classifier's
  scores, optimising the selection measure (``balanced_accuracy_score`` or
  ``accuracy_score``) under the policy's parity constraint, for each C of the search. It needs
  the sensitive attribute at prediction time.
- ``exponentiated_gradient`` (reductions): a randomized mix of classifiers trained under a
  demographic-parity (or true-positive-rate parity) constraint, minimising the cost-weighted
  error that equals ``1 - balanced accuracy`` when that is the selection measure, at the C the
  base search chose and each bound of :data:`EG_BOUNDS`. Predicts from the features alone.
- ``correlation_remover`` (pre-processing): removes the features' linear correlation with
  the sensitive attribute, then the tuned logistic regression (C searched, threshold for the
  selection measure). Its transform needs the attribute.

They are recorded for comparison (``references`` of the audit record) and never registered;
:func:`fairpca.tasks.select.judge_references` compares them with the chosen candidate on the
rows that chose it. Each states what its deployment needs (``needs``): the sensitive attribute
at decision time, random decisions; only a reference the audit's deployment allows can veto.
Fair PCA needs the attribute at fit time only and decides deterministically.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from .data import search_sample, stratified_sample
from .evaluate import gated_metrics, metric_options, one_class_share
from .select import (
    GatePolicy,
    ineligibility,
    majority_accuracy_of,
    select_candidate,
)
from .sweep import DEFAULT_C_GRID, C_values, fit_classifier, make_classifier

# ExponentiatedGradient's constraint bounds tried (the largest disparity it aims for on the
# training rows) and its iteration cap: 50 logistic fits on 5,000 rows take a few seconds.
EG_BOUNDS = (0.01, 0.03)
EG_MAX_ITER = 50
# Training rows of the reductions approach's final fit and of CorrelationRemover's own fit (a
# seeded sample stratified by label x group, as the split). Each of EG's up to 50 iterations
# refits the logistic regression and evaluates every earlier one on every row, so its cost
# grows faster than the rows (on 100,000 Adult-like rows ~170 s of a 230 s audit); a logistic
# regression on ~100 encoded columns has stopped improving well before 20,000 rows.
# CorrelationRemover's fit holds several copies of its rows (4 GB at 500,000 rows of 107
# columns) for a least-squares fit of each column on the group indicators; its classifier is
# then fitted on every training row. Recorded in the reference's config.
CAPPED_FIT_ROWS = 20_000
CAPPED = {"exponentiated_gradient": "training rows", "correlation_remover": "remover's rows"}

REFERENCE_KEYS = (
    "name", "approach", "needs_sensitive_at_prediction", "needs", "validation", "test",
    "config", "ineligible",
)  # fmt: skip
# Each reference's approach and what its deployment needs (fairpca.tasks.decision.NEEDS):
# ThresholdOptimizer picks a group's threshold from the attribute and mixes two thresholds at
# random where the constraint needs it; ExponentiatedGradient draws one classifier of its
# mixture at random for each decision; CorrelationRemover's transform reads the attribute.
REFERENCES = {
    "threshold_optimizer": ("post-processing", ("sensitive_at_prediction", "randomized_decisions")),
    "exponentiated_gradient": ("reductions", ("randomized_decisions",)),
    "correlation_remover": ("pre-processing", ("sensitive_at_prediction",)),
}
# fairlearn's name of each selection measure and of the parity a gate policy asks for
OBJECTIVES = {"balanced_accuracy": "balanced_accuracy_score", "accuracy": "accuracy_score"}


def _groups(sensitive: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(sensitive).astype(str).reset_index(drop=True)


def _with_groups(features: np.ndarray, sensitive: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """Features beside one-hot group columns (CorrelationRemover needs them in ``X``)."""
    frame = pd.DataFrame(features, columns=[f"x{i}" for i in range(features.shape[1])])
    dummies = pd.get_dummies(_groups(sensitive), dtype=float)
    return pd.concat([frame, dummies], axis=1), list(dummies.columns)


def _parity(policy: GatePolicy) -> str:
    """The fairlearn constraint matching the policy: true-positive-rate parity when it gates
    equal opportunity alone, equalized odds when it gates that, else demographic parity (the
    four-fifths rule is a selection-rate rule)."""
    if "equalized_odds" in policy.criteria:
        return "equalized_odds"
    if "equal_opportunity" in policy.criteria and "demographic_parity" not in policy.criteria:
        return "true_positive_rate_parity"
    return "demographic_parity"


def _threshold_optimizer(features, y, sensitive, *, C, objective, parity, seed):
    from fairlearn.postprocessing import ThresholdOptimizer

    model = ThresholdOptimizer(
        estimator=make_classifier("logreg_tuned", len(y), seed, C),
        constraints=parity,
        objective=OBJECTIVES[objective],
        predict_method="predict_proba",
    ).fit(features, y, sensitive_features=_groups(sensitive))
    return lambda F, s: model.predict(F, sensitive_features=_groups(s), random_state=seed)


def _exponentiated_gradient(features, y, sensitive, *, C, bound, objective, parity, seed):
    """EG minimising the selection measure's error: for balanced accuracy the cost-weighted
    error ``FN / (2 n_1) + FP / (2 n_0) = 1 - balanced accuracy``."""
    from fairlearn import reductions

    constraint = {
        "demographic_parity": reductions.DemographicParity,
        "true_positive_rate_parity": reductions.TruePositiveRateParity,
        "equalized_odds": reductions.EqualizedOdds,
    }[parity](difference_bound=bound)
    costs = None
    if objective == "balanced_accuracy":
        n, positives = len(y), int(np.sum(y))
        costs = {"fn": n / (2.0 * positives), "fp": n / (2.0 * (n - positives))}
    # EG refits its learner once per oracle call (20-50 calls), each time with new sample
    # weights on the same <= CAPPED_FIT_ROWS one-hot rows: Newton-Cholesky reaches the same
    # optimum (the loss is strictly convex) in ~6 iterations where lbfgs takes 60-90, 2.5x
    # less time per fit on Adult's rows; its rows x columns work array is bounded by the cap.
    learner = LogisticRegression(C=C, solver="newton-cholesky", max_iter=1000)
    error = reductions.ErrorRate(costs=costs)
    model = reductions.ExponentiatedGradient(
        learner, constraints=constraint, objective=error, max_iter=EG_MAX_ITER
    ).fit(features, y, sensitive_features=_groups(sensitive))
    return lambda F, s: model.predict(F, random_state=seed)


def _correlation_remover(features, y, sensitive, *, C, objective, seed, entities=None):
    """CorrelationRemover fitted on at most :data:`CAPPED_FIT_ROWS` stratified training
    rows (a least-squares fit of each feature on the group indicators: its coefficients are
    settled long before that), then the tuned logistic regression on every training row as
    it transforms them (``entities``: each training row's entity, kept together by the
    threshold's folds)."""
    from fairlearn.preprocessing import CorrelationRemover

    rows = stratified_sample(y, sensitive, CAPPED_FIT_ROWS, seed)
    frame, group_columns = _with_groups(features[rows], sensitive.iloc[rows])
    remover = CorrelationRemover(sensitive_feature_ids=group_columns).fit(frame)
    columns = frame.columns
    del frame

    def removed(F, s) -> np.ndarray:
        return _by_chunks(remover.transform, F, s, columns)

    classifier = fit_classifier(
        "logreg_tuned", removed(features, sensitive), y, seed=seed, C=C, scoring=objective,
        entities=entities,
    )  # fmt: skip
    return lambda F, s: classifier.predict(removed(F, s))


TRANSFORM_CHUNK_ROWS = 20_000


def _by_chunks(transform, features: np.ndarray, sensitive: pd.DataFrame, columns) -> np.ndarray:
    """``transform`` of the features beside their group columns (in the fitted ``columns``;
    a group absent from a block is a column of zeros), by blocks of
    :data:`TRANSFORM_CHUNK_ROWS` rows (a linear map of each row alone: the same result):
    CorrelationRemover's transform holds about five copies of what it is given (425 MB for
    100,000 rows of 107 columns), and the blocks never form a frame of every row."""
    out = None  # filled in place: a list of blocks and their stack would be two copies
    for start in range(0, len(features), TRANSFORM_CHUNK_ROWS):
        rows = slice(start, start + TRANSFORM_CHUNK_ROWS)
        frame, _ = _with_groups(features[rows], sensitive.iloc[rows])
        block = np.asarray(transform(frame.reindex(columns=columns, fill_value=0.0)))
        if out is None:
            out = np.empty((len(features), block.shape[1]), dtype=block.dtype)
        out[rows] = block
    return out


def _fit(name: str, config: dict, encoded, split, objective: str, parity: str, seed: int):
    """Fit reference ``name`` in ``config``: ``predict(features, sensitive) -> 0/1``."""
    train = (encoded["train"], split.y_train, split.s_train)
    options = {"C": config["C"], "objective": objective, "seed": seed}
    if name == "threshold_optimizer":
        return _threshold_optimizer(*train, parity=parity, **options)
    if name == "exponentiated_gradient":
        rows = stratified_sample(split.y_train, split.s_train, CAPPED_FIT_ROWS, seed)
        capped = (train[0][rows], train[1][rows], train[2].iloc[rows])
        return _exponentiated_gradient(*capped, bound=config["bound"], parity=parity, **options)
    return _correlation_remover(*train, entities=getattr(split, "entity_train", None), **options)


def _describe(config: dict) -> str:
    return ", ".join(f"{key}={value:g}" for key, value in config.items())


def _measured(predict, part: str, parts, evaluation, seed: int) -> dict[str, float]:
    """A configuration's row on the rows ``part`` of ``parts`` (an ``(encoded, split)``
    pair): its metrics with intervals and standard errors (the finite ones)."""
    encoded, split = parts
    sensitive = getattr(split, f"s_{part}")
    y_pred = np.asarray(predict(encoded[part], sensitive)).astype(np.int64)
    metrics = gated_metrics(
        getattr(split, f"y_{part}"), y_pred, sensitive, metric_options(evaluation, seed)
    )
    metrics["one_class_share"] = one_class_share(y_pred)
    return {k: float(v) for k, v in metrics.items() if np.isfinite(v)}


def _base_C(parts, evaluation, selection, seed, C_grid) -> float:
    """The C of the candidates' own ``logreg_tuned`` on the raw encoded features, chosen on
    the validation rows by the audit's rule: the estimator every reference starts from
    (``parts``: the ``(encoded, split)`` pair it is searched on)."""
    encoded, split = parts
    rows = []
    for C in C_grid:
        classifier = fit_classifier(
            "logreg_tuned", encoded["train"], split.y_train, seed=seed, C=C,
            scoring=selection.select_by, entities=getattr(split, "entity_train", None),
        )  # fmt: skip
        validation = _measured(
            lambda F, s, c=classifier: c.predict(F), "validation", parts, evaluation, seed
        )
        row = {"variant": "features", "classifier": f"logreg_tuned C={C:g}", "C": C}
        rows.append(row | validation)
    majority = majority_accuracy_of(split.y_train, split.y_validation)
    best, _, _ = select_candidate(pd.DataFrame(rows), majority, selection)
    return float(best["C"])


def _search(name, searched, final, evaluation, selection, seed, C_grid, C_base) -> dict:
    """Every configuration of reference ``name`` on the validation rows of ``searched`` (an
    ``(encoded, split)`` pair: the wide search's rows); the chosen one (the audit's rule)
    refitted on the training rows of ``final`` (every row) when they differ, and measured on
    its validation and test rows, those of the chosen candidate."""
    objective = selection.select_by
    parity = _parity(GatePolicy.from_config(selection))
    # every C of the search; for the reductions approach (50 fits each) the base search's C
    # with every bound
    configs = [{"C": C} for C in C_grid]
    if name == "exponentiated_gradient":
        configs = [{"C": C_base, "bound": bound} for bound in EG_BOUNDS]
    tried = []
    for config in configs:
        predict = _fit(name, config, *searched, objective, parity, seed)
        validation = _measured(predict, "validation", searched, evaluation, seed)
        tried.append((config, predict, validation))
    majority = majority_accuracy_of(searched[1].y_train, searched[1].y_validation)
    table = pd.DataFrame([{"variant": name, "classifier": _describe(config), "index": i, **row}
                          for i, (config, _, row) in enumerate(tried)])  # fmt: skip
    best, _, _ = select_candidate(table, majority, selection)
    config, predict, validation = tried[int(best["index"])]
    if final[1] is not searched[1]:
        predict = _fit(name, config, *final, objective, parity, seed)
        validation = _measured(predict, "validation", final, evaluation, seed)
    if len(final[1].y_train) > CAPPED_FIT_ROWS and name in CAPPED:
        config = {**config, CAPPED[name]: CAPPED_FIT_ROWS}
    majority = majority_accuracy_of(final[1].y_train, final[1].y_validation)
    return {
        "config": f"{_describe(config)} ({len(tried)} tried on the validation rows)",
        "validation": validation,
        "test": _measured(predict, "test", final, evaluation, seed),
        # judged as a candidate is: a reference no better than saying one class is shown so
        "ineligible": ineligibility(validation, majority, selection),
        "predict": predict,  # (features, sensitive) -> 0/1; not recorded (REFERENCE_KEYS)
    }


def fit_references(
    encoded: dict[str, np.ndarray], split, evaluation, seed: int, selection, search_rows=None
) -> list[dict[str, Any]]:
    """Each reference searched on the validation rows like the candidates (its
    configurations, the selection measure, the gate of ``selection``, the config's section;
    on the wide search's sample of at most ``search_rows`` training rows, as the candidates:
    :func:`fairpca.tasks.data.search_sample`), then fitted on every training row and
    evaluated (with 95% intervals, as ``evaluation`` says) on the validation and test rows;
    one that cannot be fitted on these data says why."""
    sample, (train, validation) = search_sample(
        split, (encoded["train"], encoded["validation"]), search_rows, seed,
        evaluation.min_group_size,
    )  # fmt: skip
    searched = ({"train": train, "validation": validation}, sample)
    C_grid = C_values(evaluation.logreg_C or DEFAULT_C_GRID, len(sample.y_train))
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # fairlearn's own pandas idiom, deprecated in pandas; harmless here
        warnings.filterwarnings("ignore", message="Setting a value on a Series via .at")
        C_base = _base_C(searched, evaluation, selection, seed, C_grid)
        for name, (approach, needs) in REFERENCES.items():
            entry = {"name": name, "approach": approach,
                     "needs_sensitive_at_prediction": "sensitive_at_prediction" in needs,
                     "needs": list(needs)}  # fmt: skip

            start = time.perf_counter()
            try:
                entry |= _search(
                    name, searched, (encoded, split), evaluation, selection, seed, C_grid, C_base
                )
            except (ValueError, KeyError) as error:  # e.g. a group without both labels
                entry |= {"validation": {}, "test": {}, "skipped": str(error)}
            entry["seconds"] = time.perf_counter() - start
            out.append(entry)
    return out


class _EncodedParts(dict):
    """The encoded parts by name; ``test`` is encoded from the raw rows on each access."""

    def __init__(self, parts: dict[str, np.ndarray], split, preprocessor):
        super().__init__(parts)
        self.split, self.preprocessor = split, preprocessor

    def __missing__(self, part: str) -> np.ndarray:
        if part != "test":
            raise KeyError(part)
        return np.asarray(self.preprocessor.transform(self.split.X_test), dtype=np.float64)


@task(name="reference-mitigations", cache_policy=NO_CACHE)
def reference_mitigations(
    preprocessor, split, encoded, evaluation, seed: int, selection, search_rows=None
) -> list[dict[str, Any]]:
    """Prefect task around :func:`fit_references`: ``encoded`` holds the training and
    validation rows as encoded for the candidates; the test rows are encoded here, each time
    a reference is measured on them (not held while the references are fitted)."""
    parts = _EncodedParts({"train": encoded[0], "validation": encoded[1]}, split, preprocessor)
    # It runs beside the searches and sweeps on the task runner's threads: one BLAS thread.
    with threadpool_limits(limits=1):
        rows = fit_references(parts, split, evaluation, seed, selection, search_rows)
    # the predictors measure a reference elsewhere (the Dask route); here they are measured
    return [{k: v for k, v in row.items() if k != "predict"} for row in rows]
