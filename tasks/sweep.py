"""The lambda trade-off sweep: one fitted representation, many lambdas, all classifiers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from threadpoolctl import threadpool_limits

from fairpca import metrics as fm

from .classify import fit_classifier
from .evaluate import metrics_with_intervals, one_class_share, representation_metrics
from .represent import FittedRepresentation

__all__ = ["SweepResult", "lambda_sweep", "sweep_representation"]


@dataclass
class SweepResult:
    """Rows of the metrics table for one variant and its fitted classifiers."""

    variant: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    classifiers: dict[tuple[int, str], Any] = field(default_factory=dict)
    seconds: float = 0.0


def _features(rep: FittedRepresentation, encoded: np.ndarray, lam: float | None) -> np.ndarray:
    if lam is not None:
        rep.estimator.set_params(tradeoff=lam)
    return np.asarray(rep.estimator.transform(encoded), dtype=np.float64)


def _candidate_rows(rep, index, lam, F_train, F_validation, split, evaluation, seed, shared):
    """Fit every classifier of ``evaluation`` on one lambda's features; metrics with
    intervals on validation."""
    rows, classifiers = [], {}
    for name in evaluation.classifiers:
        t0 = time.perf_counter()
        classifier = fit_classifier(
            name,
            F_train,
            split.y_train,
            seed=seed,
            max_rows=evaluation.svc_max_train_rows if name == "rbf_svc" else None,
        )
        y_pred = classifier.predict(F_validation)
        row = {**shared, "classifier": name, "one_class_share": one_class_share(y_pred)}
        row.update(
            metrics_with_intervals(
                split.y_validation,
                y_pred,
                split.s_validation,
                min_group_size=evaluation.min_group_size,
                allow_small_groups=evaluation.allow_small_groups,
                n_resamples=evaluation.n_bootstrap,
                seed=seed,
            )
        )
        row["classifier_seconds"] = time.perf_counter() - t0
        rows.append(row)
        classifiers[(index, name)] = classifier
    return rows, classifiers


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
    """Evaluate ``rep`` at every lambda with every classifier on the validation rows.

    Fair PCA is fitted once; changing ``tradeoff`` only changes how many PCA features are
    appended and their weight (Sec. 3.1), so each lambda costs one transform. Variants
    without a trade-off (standard PCA) give one row per classifier with ``lambda`` NaN.
    The estimator's ``tradeoff`` is restored afterwards, also on error. Only the training
    and validation rows of ``split`` are read. ``representation`` and ``evaluation`` are
    the config's sections of those names.
    """
    start = time.perf_counter()
    lambdas: list[float | None] = list(representation.lambdas) if rep.supports_tradeoff else [None]
    result = SweepResult(rep.variant)
    components = getattr(rep.estimator, "components_", None)
    var_explained = (
        fm.explained_variance_fraction(encoded_validation, components)
        if components is not None
        else np.nan
    )
    original = rep.estimator.get_params().get("tradeoff")
    try:
        for index, lam in enumerate(lambdas):
            F_train = _features(rep, encoded_train, lam)
            F_validation = _features(rep, encoded_validation, lam)
            shared = {
                "variant": rep.variant,
                "lambda_index": index,
                "lambda": np.nan if lam is None else float(lam),
                "n_features": F_train.shape[1],
                "var_explained": float(var_explained),
                **_representation_row(
                    rep, F_train, F_validation, split, representation.metric_max_rows, seed, sigma
                ),
            }
            rows, classifiers = _candidate_rows(
                rep, index, lam, F_train, F_validation, split, evaluation, seed, shared
            )
            result.rows += rows
            result.classifiers.update(classifiers)
            if progress is not None:
                progress(rep.variant, index + 1, len(lambdas))
    finally:
        if rep.supports_tradeoff:
            rep.estimator.set_params(tradeoff=original)
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
