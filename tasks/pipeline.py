"""The audited pipeline (preprocess -> representation at lambda -> classifier): assembly, a
consistency check on the validation rows, and the test-part evaluation of what is reported."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.pipeline import Pipeline

from .evaluate import classifier_metrics, majority_class, metrics_with_intervals

__all__ = [
    "build_pipeline",
    "check_pipeline",
    "evaluate_reported",
    "metrics_on_test",
    "pip_requirements",
]


def build_pipeline(preprocessor, representations, sweeps, row: dict[str, Any]) -> Pipeline:
    """preprocess -> representation (at the row's lambda) -> classifier, all fitted.

    The representation is a copy: the sweep's estimator keeps its own ``tradeoff``.
    """
    rep = representations[row["variant"]]
    estimator = copy.deepcopy(rep.estimator)
    if rep.supports_tradeoff:
        estimator.set_params(tradeoff=float(row["lambda"]))
    classifier = sweeps[row["variant"]].classifiers[(int(row["lambda_index"]), row["classifier"])]
    return Pipeline(
        [("preprocess", preprocessor), ("represent", estimator), ("classify", classifier)]
    )


def check_pipeline(pipeline: Pipeline, split, row: dict[str, Any], evaluation) -> None:
    """The assembled pipeline must reproduce the sweep's validation accuracy from X alone (on
    the same rows: those the metrics release, see ``evaluation.min_group_size``)."""
    accuracy = classifier_metrics(
        split.y_validation,
        pipeline.predict(split.X_validation),
        split.s_validation,
        min_group_size=evaluation.min_group_size,
        allow_small_groups=evaluation.allow_small_groups,
    ).get("accuracy", math.nan)
    expected = float(row.get("accuracy", math.nan))
    if not (abs(accuracy - expected) <= 1e-9 or (math.isnan(accuracy) and math.isnan(expected))):
        raise RuntimeError(
            f"the assembled pipeline scores {accuracy:.6f}, the sweep {expected:.6f}; "
            "the representation or classifier was changed after the sweep."
        )


def metrics_on_test(y_pred: np.ndarray, split, evaluation, seed: int) -> dict[str, float]:
    """Metrics with 95% intervals of fixed predictions on the test rows (``evaluation``: the
    config's section of that name)."""
    return metrics_with_intervals(
        split.y_test,
        y_pred,
        split.s_test,
        min_group_size=evaluation.min_group_size,
        allow_small_groups=evaluation.allow_small_groups,
        n_resamples=evaluation.n_bootstrap,
        seed=seed,
    )


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))
    }


def _validation_metrics(row: dict[str, Any]) -> dict[str, float]:
    """The classifier metrics of a table row (accuracy, differences, rates, intervals)."""
    prefixes = ("accuracy", "dp_difference", "eo_difference", "selection_rate.", "tpr.")
    return _finite({k: v for k, v in row.items() if k.startswith(prefixes)})


@task(name="evaluate-test-part", cache_policy=NO_CACHE)
def evaluate_reported(
    split,
    evaluation,
    seed: int,
    chosen_pipeline: Pipeline,
    pca_pipeline: Pipeline | None,
    chosen,
    pca_row,
) -> dict[str, Any]:
    """Validation and test metrics of what the audit reports: the chosen candidate, the
    majority-class baseline and unconstrained PCA. Runs after the choice; only here are the
    test rows read."""
    majority = majority_class(split.y_train)
    constant_validation = np.full(len(split.y_validation), majority)
    constant_test = np.full(len(split.y_test), majority)
    out: dict[str, Any] = {
        "chosen": {
            "validation": _validation_metrics(chosen),
            "test": _finite(
                metrics_on_test(chosen_pipeline.predict(split.X_test), split, evaluation, seed)
            ),
        },
        "majority": {
            "class": majority,
            "validation": {"accuracy": float(np.mean(split.y_validation == constant_validation))},
            "test": _finite(metrics_on_test(constant_test, split, evaluation, seed)),
        },
    }
    if pca_pipeline is not None:
        out["pca"] = {
            "validation": _validation_metrics(pca_row),
            "test": _finite(
                metrics_on_test(pca_pipeline.predict(split.X_test), split, evaluation, seed)
            ),
        }
    return out


def pip_requirements() -> list[str]:
    """Pinned runtime requirements of the logged pipeline: the installed fairpca (the model
    carries no copy of its code) and the libraries its estimators are built on."""
    from importlib.metadata import version

    names = ("fairpca", "numpy", "scipy", "scikit-learn", "pandas")
    return [f"{name}=={version(name)}" for name in names]
