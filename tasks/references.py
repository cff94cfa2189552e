"""Reference mitigations on the audit's own rows: what other fairness approaches reach.

Three fairlearn approaches, each with the audit's logistic regression, trained on the
training part's encoded features, evaluated on the validation and test parts with the same
intervals as the candidates (:func:`fairpca.tasks.evaluate.metrics_with_intervals`):

- ``threshold_optimizer`` (post-processing): group-specific thresholds on the classifier's
  scores for demographic parity. It needs the sensitive attribute at prediction time.
- ``exponentiated_gradient`` (reductions): a randomized mix of classifiers trained under a
  demographic-parity constraint. Predicts from the features alone.
- ``correlation_remover`` (pre-processing): removes the features' linear correlation with
  the sensitive attribute, then logistic regression. Its transform needs the attribute.

They are recorded for comparison (``references`` of the audit record) and never registered.
Fair PCA, like ``exponentiated_gradient``, needs the attribute at fit time only.
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
from threadpoolctl import threadpool_limits

from .evaluate import metrics_with_intervals
from .sweep import make_classifier

__all__ = [
    "REFERENCES",
    "REFERENCE_KEYS",
    "dominating_references",
    "fit_references",
    "reference_mitigations",
    "sensitive_at_prediction_note",
]

# ExponentiatedGradient's constraint bound (the largest DP difference it aims for on the
# training rows) and its iteration cap: 50 logistic fits on 5,000 rows take a few seconds.
EG_DIFFERENCE_BOUND = 0.02
EG_MAX_ITER = 50

REFERENCE_KEYS = ("name", "approach", "needs_sensitive_at_prediction", "validation", "test")
REFERENCES = {
    "threshold_optimizer": ("post-processing", True),
    "exponentiated_gradient": ("reductions", False),
    "correlation_remover": ("pre-processing", True),
}


def _groups(sensitive: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(sensitive).astype(str).reset_index(drop=True)


def _with_groups(features: np.ndarray, sensitive: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """Features beside one-hot group columns (CorrelationRemover needs them in ``X``)."""
    frame = pd.DataFrame(features, columns=[f"x{i}" for i in range(features.shape[1])])
    dummies = pd.get_dummies(_groups(sensitive), dtype=float)
    return pd.concat([frame, dummies], axis=1), list(dummies.columns)


def _predictor(name: str, features, y, sensitive, seed: int):
    """Fit reference ``name``; return ``predict(features, sensitive) -> 0/1 labels``."""
    from fairlearn.postprocessing import ThresholdOptimizer
    from fairlearn.preprocessing import CorrelationRemover
    from fairlearn.reductions import DemographicParity, ExponentiatedGradient

    base = make_classifier("logreg", len(y), seed)
    if name == "threshold_optimizer":
        model = ThresholdOptimizer(
            estimator=base, constraints="demographic_parity", predict_method="predict_proba"
        ).fit(features, y, sensitive_features=_groups(sensitive))
        return lambda F, s: model.predict(F, sensitive_features=_groups(s), random_state=seed)
    if name == "exponentiated_gradient":
        model = ExponentiatedGradient(
            base,
            constraints=DemographicParity(difference_bound=EG_DIFFERENCE_BOUND),
            max_iter=EG_MAX_ITER,
        ).fit(features, y, sensitive_features=_groups(sensitive))
        return lambda F, s: model.predict(F, random_state=seed)
    frame, group_columns = _with_groups(features, sensitive)
    remover = CorrelationRemover(sensitive_feature_ids=group_columns).fit(frame)
    classifier = base.fit(remover.transform(frame), y)

    def predict(F, s):
        other, _ = _with_groups(F, s)
        return classifier.predict(
            remover.transform(other.reindex(columns=frame.columns, fill_value=0.0))
        )

    return predict


def fit_references(
    encoded: dict[str, np.ndarray], split, evaluation, seed: int
) -> list[dict[str, Any]]:
    """Each reference trained on the training rows and evaluated (with 95% intervals, as
    ``evaluation`` says) on the validation and test rows; one that cannot be fitted on these
    data says why."""
    out = []
    for name, (approach, needs_sensitive) in REFERENCES.items():
        entry = {
            "name": name,
            "approach": approach,
            "needs_sensitive_at_prediction": needs_sensitive,
        }
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                # fairlearn's own pandas idiom, deprecated in pandas; harmless here
                warnings.filterwarnings("ignore", message="Setting a value on a Series via .at")
                predict = _predictor(name, encoded["train"], split.y_train, split.s_train, seed)
                for part in ("validation", "test"):
                    y_pred = np.asarray(predict(encoded[part], getattr(split, f"s_{part}")))
                    entry[part] = _evaluate(y_pred, part, split, evaluation, seed)
        except (ValueError, KeyError) as error:  # e.g. a group without both labels
            entry |= {"validation": {}, "test": {}, "skipped": str(error)}
        entry["seconds"] = time.perf_counter() - start
        out.append(entry)
    return out


def _evaluate(y_pred: np.ndarray, part: str, split, evaluation, seed: int) -> dict[str, float]:
    metrics = metrics_with_intervals(
        getattr(split, f"y_{part}"),
        y_pred.astype(np.int64),
        getattr(split, f"s_{part}"),
        min_group_size=evaluation.min_group_size,
        allow_small_groups=evaluation.allow_small_groups,
        n_resamples=evaluation.n_bootstrap,
        seed=seed,
    )
    return {k: float(v) for k, v in metrics.items() if np.isfinite(v)}


@task(name="reference-mitigations", cache_policy=NO_CACHE)
def reference_mitigations(preprocessor, split, evaluation, seed: int) -> list[dict[str, Any]]:
    """Prefect task around :func:`fit_references` (encodes the three parts itself)."""
    encoded = {
        part: np.asarray(preprocessor.transform(getattr(split, f"X_{part}")), dtype=np.float64)
        for part in ("train", "validation", "test")
    }
    # It runs beside the lambda sweeps on the task runner's threads: one BLAS thread each.
    with threadpool_limits(limits=1):
        return fit_references(encoded, split, evaluation, seed)


def dominating_references(
    references: list[dict[str, Any]], chosen_test: dict[str, float], policy
) -> list[str]:
    """Plain sentences for every reference that dominates the chosen candidate on the test
    rows: a higher balanced accuracy and a fairer value of every measure the policy gates."""
    from .select import CRITERIA

    sentences = []
    mine = chosen_test.get("balanced_accuracy", np.nan)
    for reference in references:
        test = reference.get("test") or {}
        theirs = test.get("balanced_accuracy", np.nan)
        if not theirs > mine:
            continue
        better = []
        for key in policy.criteria:
            criterion = CRITERIA[key]
            a, b = test.get(criterion.metric, np.nan), chosen_test.get(criterion.metric, np.nan)
            fairer = a > b if criterion.larger_is_fairer else a < b
            if not fairer:
                break
            better.append(f"{criterion.label} {a:.4f} vs {b:.4f}")
        else:
            sentences.append(
                f"the reference {reference['name']} ({reference['approach']}) does better than "
                f"the chosen candidate on the test rows: balanced accuracy {theirs:.4f} vs "
                f"{mine:.4f}, " + ", ".join(better)
            )
    return sentences


def sensitive_at_prediction_note(references: list[dict[str, Any]]) -> str:
    """Which approaches need the sensitive attribute when they predict."""
    need = [r["name"] for r in references if r["needs_sensitive_at_prediction"]]
    free = [r["name"] for r in references if not r["needs_sensitive_at_prediction"]]
    return (
        f"{' and '.join(need) or 'none'} need the sensitive attribute at prediction time; "
        f"{' and '.join(['Fair PCA', *free])} need it only for training"
    )
