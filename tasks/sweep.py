"""Downstream classifiers of the paper (Sec. 5.1 and Appendix C.1), and the same logistic
regression with its decision threshold tuned on the training rows.

The lambda trade-off sweep: one fitted representation, many lambdas, all classifiers.

:func:`sweep_tradeoff` is the one implementation; the audit's :func:`lambda_sweep` and the
public :func:`fairpca.tasks.public.sweep_lambda` are entries over it."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import FixedThresholdClassifier, TunedThresholdClassifierCV
from sklearn.neural_network import MLPClassifier
from sklearn.svm import SVC, LinearSVC
from threadpoolctl import threadpool_limits

from fairpca import metrics as fm

from .evaluate import metrics_with_intervals, one_class_share, representation_metrics
from .represent import FittedRepresentation

__all__ = [
    "CLASSIFIER_NAMES",
    "THRESHOLD_FOLDS",
    "SweepResult",
    "fit_classifier",
    "lambda_sweep",
    "make_classifier",
    "sweep_representation",
    "sweep_tradeoff",
]


# ---- from classify.py ------------------------------------------------------------

CLASSIFIER_NAMES = ("logreg", "logreg_tuned", "rbf_svc", "linear_svm", "mlp")
THRESHOLD_FOLDS = 5  # cross-validation folds of the training rows that choose the threshold


def make_classifier(name: str, n_train: int, seed: int):
    """Unfitted classifier ``name`` for ``n_train`` training rows.

    Appendix C.1: logistic regression with ``C = 1 / (2 n 0.01)``, RBF SVC with
    ``C = 1 / (2 n 0.00005)``; linear SVM with default settings; MLP with hidden layers
    (10, 5) and otherwise default settings (Sec. 5.1). ``logreg_tuned`` is the same logistic
    regression; :func:`fit_classifier` then moves its probability threshold off 0.5.
    """
    if name in ("logreg", "logreg_tuned"):
        return LogisticRegression(C=1.0 / (2 * n_train * 0.01), max_iter=1000)
    if name == "rbf_svc":
        return SVC(kernel="rbf", C=1.0 / (2 * n_train * 0.00005), random_state=seed)
    if name == "linear_svm":
        return LinearSVC(random_state=seed)
    if name == "mlp":
        return MLPClassifier(hidden_layer_sizes=(10, 5), max_iter=500, random_state=seed)
    raise ValueError(f"unknown classifier {name!r}; use one of {', '.join(CLASSIFIER_NAMES)}.")


def _with_tuned_threshold(classifier, features: np.ndarray, y: np.ndarray):
    """``classifier`` refitted on every training row, predicting 1 above the probability
    threshold that maximises accuracy in ``THRESHOLD_FOLDS``-fold cross-validation on them
    (fewer folds when a class has fewer rows).

    Appendix C.1's penalty (``C = 0.01`` at n = 5,000) shrinks the scores towards 0.5, so at
    the default threshold the model under-predicts the rarer class: on Adult's fair
    representation it says yes for 9% of the rows against a base rate of 24%. The threshold
    is chosen on training rows only, so validation and test rows stay untouched. The fitted
    model is a plain :class:`~sklearn.model_selection.FixedThresholdClassifier` (the tuning
    object would also store its scorer).
    """
    folds = min(THRESHOLD_FOLDS, int(np.bincount(y).min()))
    if folds < 2:  # too few rows of a class to cross-validate: the default threshold
        return classifier.fit(features, y)
    tuned = TunedThresholdClassifierCV(classifier, scoring="accuracy", cv=folds)
    tuned.fit(features, y)
    fixed = FixedThresholdClassifier(clone(classifier), threshold=float(tuned.best_threshold_))
    return fixed.fit(features, y)


def fit_classifier(
    name: str, features: np.ndarray, y: np.ndarray, *, seed: int, max_rows: int | None = None
):
    """Fit classifier ``name``; ``max_rows`` caps its training rows (seeded draw)."""
    if max_rows is not None and len(y) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(y), max_rows, replace=False))
        features, y = features[rows], y[rows]
    classifier = make_classifier(name, len(y), seed)
    if np.unique(y).size < 2:
        raise ValueError("the training rows hold one label only; a classifier needs both.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if name == "logreg_tuned":
            return _with_tuned_threshold(classifier, features, y)
        classifier.fit(features, y)
    return classifier


# ---- from sweep.py ------------------------------------------------------------


@dataclass
class SweepResult:
    """Rows of the metrics table for one variant and its fitted classifiers."""

    variant: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    classifiers: dict[tuple[int, str], Any] = field(default_factory=dict)
    seconds: float = 0.0


def sweep_tradeoff(
    estimator,
    lambdas: Sequence[float | None],
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_eval: np.ndarray,
    y_eval: np.ndarray,
    sensitive_eval: Any,
    *,
    classifiers: dict[str, Callable[[np.ndarray, np.ndarray], Any]],
    metric_options: dict[str, Any],
    describe: Callable[[np.ndarray, np.ndarray], dict[str, Any]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[tuple[int, str], Any]]:
    """The one lambda sweep: every classifier at every trade-off ``lambda`` of ``estimator``.

    Fair PCA is fitted once; changing ``tradeoff`` only changes how many PCA features are
    appended and their weight (Sec. 3.1), so each lambda costs one transform of the training
    and the evaluation rows. A ``None`` lambda leaves the estimator as it is (standard PCA:
    ``lambda`` NaN). ``classifiers`` maps a name to ``fit(F_train, y_train) -> fitted``; each
    is evaluated on the evaluation rows with :func:`~fairpca.tasks.evaluate.
    metrics_with_intervals` (``metric_options``: ``min_group_size``, ``n_resamples``,
    ``seed``, ...). ``describe(F_train, F_eval)`` adds columns shared by one lambda's rows;
    ``progress(done, total)`` is called after each lambda. The estimator's ``tradeoff`` is
    restored afterwards, also on error. Returns one row per lambda and classifier, and the
    fitted classifiers by ``(lambda_index, name)``.
    """
    rows, fitted = [], {}
    original = estimator.get_params().get("tradeoff")
    try:
        for index, lam in enumerate(lambdas):
            if lam is not None:
                estimator.set_params(tradeoff=lam)
            F_train = np.asarray(estimator.transform(X_train), dtype=np.float64)
            F_eval = np.asarray(estimator.transform(X_eval), dtype=np.float64)
            shared = {"lambda_index": index, "lambda": np.nan if lam is None else float(lam)}
            shared["n_features"] = F_train.shape[1]
            shared.update(describe(F_train, F_eval) if describe is not None else {})
            for name, fit in classifiers.items():
                fitted[(index, name)], measured = _fit_and_measure(
                    fit, F_train, y_train, F_eval, y_eval, sensitive_eval, metric_options
                )
                rows.append({**shared, "classifier": name, **measured})
            if progress is not None:
                progress(index + 1, len(lambdas))
    finally:
        if any(lam is not None for lam in lambdas):
            estimator.set_params(tradeoff=original)
    return rows, fitted


def _fit_and_measure(fit, F_train, y_train, F_eval, y_eval, sensitive_eval, options) -> tuple:
    """The classifier ``fit`` gives on the training rows, and on the evaluation rows how often
    it predicts its more frequent class, its metrics with intervals and the seconds taken."""
    t0 = time.perf_counter()
    classifier = fit(F_train, y_train)
    y_pred = classifier.predict(F_eval)
    metrics = metrics_with_intervals(y_eval, y_pred, sensitive_eval, **options)
    seconds = time.perf_counter() - t0
    return classifier, {
        "one_class_share": one_class_share(y_pred),
        **metrics,
        "classifier_seconds": seconds,
    }


def _audit_classifiers(evaluation, seed: int) -> dict[str, Callable[[np.ndarray, np.ndarray], Any]]:
    """The audit's classifiers by name (the ``evaluation`` section), each fitted with the
    audit's seed and row caps."""

    def fitter(name: str):
        max_rows = evaluation.svc_max_train_rows if name == "rbf_svc" else None
        return lambda F, y: fit_classifier(name, F, y, seed=seed, max_rows=max_rows)

    return {name: fitter(name) for name in evaluation.classifiers}


def _representation_columns(rep, encoded_validation, split, max_rows, seed, sigma) -> Callable:
    """``describe(F_train, F_validation)`` of :func:`sweep_tradeoff`: the variance the
    components explain on the validation rows, and the representation metrics at a lambda."""
    components = getattr(rep.estimator, "components_", None)
    var_explained = (
        fm.explained_variance_fraction(encoded_validation, components)
        if components is not None
        else np.nan
    )

    def describe(F_train: np.ndarray, F_validation: np.ndarray) -> dict[str, Any]:
        return {
            "var_explained": float(var_explained),
            **_representation_row(rep, F_train, F_validation, split, max_rows, seed, sigma),
        }

    return describe


def _representation_row(rep, F_train, F_validation, split, max_rows, seed, sigma) -> dict:
    """Representation metrics at one lambda; the fair block is the first k columns, and
    equal opportunity constrains the positive training rows only (Sec. 3.2)."""
    eo = getattr(rep.estimator, "constraint", None) == "equal_opportunity"
    return representation_metrics(
        F_train,
        F_validation,
        split.s_train,
        split.s_validation,
        fair_columns=int(rep.facts["k"]),
        constraint_rows=np.flatnonzero(split.y_train == 1) if eo else None,
        sigma=sigma,
        max_rows=max_rows,
        seed=seed,
    )


def sweep_representation(
    rep: FittedRepresentation,
    encoded_train: np.ndarray,
    encoded_validation: np.ndarray,
    split,
    representation,
    evaluation,
    seed: int,
    sigma: float,
    progress=None,
) -> SweepResult:
    """:func:`sweep_tradeoff` of ``rep`` with the audit's classifiers on the validation rows,
    with the representation metrics of each lambda.

    Variants without a trade-off (standard PCA) give one row per classifier with ``lambda``
    NaN. Only the training and validation rows of ``split`` are read. ``representation`` and
    ``evaluation`` are the config's sections of those names.
    """
    start = time.perf_counter()
    rows, classifiers = sweep_tradeoff(
        rep.estimator,
        list(representation.lambdas) if rep.supports_tradeoff else [None],
        encoded_train,
        split.y_train,
        encoded_validation,
        split.y_validation,
        split.s_validation,
        classifiers=_audit_classifiers(evaluation, seed),
        metric_options={
            "min_group_size": evaluation.min_group_size,
            "allow_small_groups": evaluation.allow_small_groups,
            "n_resamples": evaluation.n_bootstrap,
            "seed": seed,
        },
        describe=_representation_columns(
            rep, encoded_validation, split, representation.metric_max_rows, seed, sigma
        ),
        progress=progress and (lambda done, total: progress(rep.variant, done, total)),
    )
    result = SweepResult(rep.variant, [{"variant": rep.variant, **row} for row in rows])
    result.classifiers = classifiers
    result.seconds = time.perf_counter() - start
    return result


@task(name="lambda-sweep", cache_policy=NO_CACHE, task_run_name="sweep-{variant}")
def lambda_sweep(
    variant: str,
    rep: FittedRepresentation,
    encoded_train: np.ndarray,
    encoded_validation: np.ndarray,
    split,
    representation,
    evaluation,
    seed: int,
    sigma: float,
) -> SweepResult:
    """Prefect task around :func:`sweep_representation`, with a progress artifact."""
    artifact_id = create_progress_artifact(
        progress=0.0, description=f"lambda sweep of {variant} (% of lambdas done)"
    )

    def progress(_variant: str, done: int, total: int) -> None:
        update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)

    # Two sweeps run side by side on the task runner's threads: one BLAS thread each avoids
    # oversubscribing the cores (3x faster fits on 2 busy cores).
    with threadpool_limits(limits=1):
        return sweep_representation(
            rep,
            encoded_train,
            encoded_validation,
            split,
            representation,
            evaluation,
            seed,
            sigma,
            progress,
        )
