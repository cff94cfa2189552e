"""Evaluation: classifier fairness with intervals (``fairpca.metrics``), baselines, and the
representation metrics.

The audited pipeline (preprocess -> representation at lambda -> classifier): assembly, a
consistency check on the validation rows, and the test-part evaluation of what is reported."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.pipeline import Pipeline

from fairpca import metrics as fm

from .data import stratified_sample

# The measures every record, tag, card and summary leads with (worst attribute).
HEADLINE_METRICS = ("accuracy", "dp_difference", "eo_difference")


def classifier_metrics(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive_features: pd.DataFrame, *,
    min_group_size: int = fm.MIN_GROUP_SIZE_FLOOR, allow_small_groups: bool = False,
) -> dict[str, float]:  # fmt: skip
    """Every metric of :meth:`fairpca.metrics.FairnessReport.as_metrics`, as defined once in
    :func:`fairpca.metrics.group_fairness`: accuracy, balanced accuracy, positive rate,
    base rate, one-class share, the differences and the selection-rate ratio (worst
    attribute; per attribute; intersection) and per-group rates.

    Groups with fewer than ``min_group_size`` rows are suppressed (not in any number);
    ``min_group_size`` below ``fairpca.metrics.MIN_GROUP_SIZE_FLOOR`` needs
    ``allow_small_groups=True``.
    """
    report = fm.group_fairness(
        y_true, y_pred, sensitive_features, min_group_size=min_group_size,
        allow_small_groups=allow_small_groups,
    )  # fmt: skip
    return {key: float(value) for key, value in report.as_metrics().items()}


def metrics_with_intervals(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive_features: pd.DataFrame, *,
    min_group_size: int, n_resamples: int, seed: int, allow_small_groups: bool = False,
    pos_label: Any = 1,
) -> dict[str, float]:  # fmt: skip
    """:func:`classifier_metrics` plus 95% intervals (``<metric>.ci95_low`` /
    ``<metric>.ci95_high``) of every metric, each containing its estimate (methods in
    :func:`fairpca.metrics.bootstrap_intervals`).

    The predictions are fixed (no refit), so the intervals measure the sampling error of the
    evaluation rows. Only metrics with a defined point value get an interval. ``pos_label``
    is the favourable label of ``y_true`` and ``y_pred``.
    """
    metrics, _ = fm.evaluate_fairness(
        y_true, y_pred, sensitive_features, pos_label=pos_label, min_group_size=min_group_size,
        allow_small_groups=allow_small_groups, n_resamples=n_resamples, confidence=0.95,
        seed=seed,
    )  # fmt: skip
    return metrics


def metric_options(evaluation, seed: int) -> dict[str, Any]:
    """The keywords of :func:`metrics_with_intervals` that the config's ``evaluation``
    section and the audit's ``seed`` give."""
    return {
        "min_group_size": evaluation.min_group_size,
        "allow_small_groups": evaluation.allow_small_groups,
        "n_resamples": evaluation.n_bootstrap,
        "seed": seed,
    }


def gated_metrics(y_true, y_pred, sensitive_features, options: dict[str, Any]) -> dict[str, float]:
    """:func:`metrics_with_intervals` (keywords ``options``: :func:`metric_options`) with the
    gated measures' standard errors (:func:`gate_standard_errors`): what the gate and the
    certification read of a candidate."""
    metrics = metrics_with_intervals(y_true, y_pred, sensitive_features, **options)
    return metrics | gate_standard_errors(
        y_true, y_pred, sensitive_features, min_group_size=options["min_group_size"]
    )


# The gated measures whose standard errors :func:`gate_standard_errors` gives, with the rate
# they compare and the rows that rate is taken over (``None``: every row of the group).
GATED_RATES = {
    "dp_difference": ("selection", None),
    "selection_rate_ratio": ("selection", None),
    "eo_difference": ("tpr", 1),
    "equalized_odds_difference": ("tpr_fpr", None),
}


def extreme_pair(rate: np.ndarray, rows: np.ndarray, *, ratio: bool, clipped=None) -> tuple:
    """The spread (``max - min``) or the ratio (``min / max``) of the groups' rates and its
    standard error, from the two extreme groups (normal approximation; the ratio's by the
    delta method on its logarithm; the error from the ``clipped`` rates when given).

    ``rate`` is one rate per group, or groups x cuts (each column apart: floats become
    arrays). Two distinct groups even when the rates tie (all equal: argmin == argmax would
    count one group's variance twice); among tied groups the smaller one, the noisier.
    """
    single = np.ndim(rate) == 1
    rate = np.asarray(rate, dtype=np.float64).reshape(len(rows), -1)
    clipped = rate if clipped is None else np.asarray(clipped).reshape(rate.shape)
    by_size = np.argsort(rows, kind="stable")
    rate, clipped = rate[by_size], clipped[by_size]
    rows = np.asarray(rows, dtype=np.float64)[by_size]
    low, high = rate.argmin(axis=0), rate.argmax(axis=0)
    high = np.where(high == low, np.where(low == 0, 1, 0), high)
    cuts = np.arange(rate.shape[1])
    p_low, p_high, n_low, n_high = clipped[low, cuts], clipped[high, cuts], rows[low], rows[high]
    with np.errstate(divide="ignore", invalid="ignore"):
        if ratio:
            value = rate[low, cuts] / rate[high, cuts]
            error = value * np.sqrt(
                (1 - p_low) / (n_low * p_low) + (1 - p_high) / (n_high * p_high)
            )
        else:
            value = rate[high, cuts] - rate[low, cuts]
            error = np.sqrt(p_low * (1 - p_low) / n_low + p_high * (1 - p_high) / n_high)
    return (float(value[0]), float(error[0])) if single else (value, error)


INTERSECTION = ".intersection"  # the suffix of a measure over the attributes' intersection


def group_codes(sensitive: pd.DataFrame) -> dict[str, np.ndarray]:
    """Integer codes of each attribute's groups (a missing label is a group of its own) and,
    with several attributes, of their intersection's cells (:data:`INTERSECTION`)."""
    codes = {c: pd.factorize(sensitive[c], use_na_sentinel=False)[0] for c in sensitive.columns}
    if len(codes) > 1:  # a cell: the combination of the attributes' codes
        combined = np.zeros(len(sensitive), dtype=np.int64)
        for attribute in list(codes.values()):
            combined = combined * (int(attribute.max()) + 1) + attribute
        codes[INTERSECTION] = pd.factorize(combined)[0]
    return codes


def _grouping_errors(y_true, y_pred, codes, min_group_size) -> dict[str, tuple[float, float]]:
    """(estimate, standard error) of each gated measure over one grouping's groups of at
    least ``min_group_size`` rows (for the TPR: rows with label 1; FPR: label 0)."""
    n_groups = int(codes.max()) + 1 if len(codes) else 0

    def rate_of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.bincount(codes[mask], minlength=n_groups).astype(float)
        hits = np.bincount(codes[mask], weights=y_pred[mask], minlength=n_groups)
        keep = rows >= min_group_size
        # (hits + 1/2) / (rows + 1): a rate of 0 or 1 still has a positive variance
        return (hits[keep] + 0.5) / (rows[keep] + 1.0), rows[keep]

    def pair(rate: np.ndarray, rows: np.ndarray, ratio: bool = False) -> tuple[float, float]:
        return extreme_pair(rate, rows, ratio=ratio) if len(rate) >= 2 else (math.nan, math.nan)

    selection = rate_of(np.ones(len(codes), dtype=bool))
    eo, odds = pair(*rate_of(y_true == 1)), pair(*rate_of(y_true == 0))
    return {
        "dp_difference": pair(*selection),
        "selection_rate_ratio": pair(*selection, ratio=True),
        "eo_difference": eo,
        "equalized_odds_difference": max(eo, odds, key=lambda v: v[0]),
    }


def gate_standard_errors(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive_features, *, min_group_size: int
) -> dict[str, float]:
    """``<measure>.se``: the standard error of each gated measure's estimate (difference of
    the two extreme groups' rates, or their ratio) for the worst attribute, and with several
    attributes ``<measure>.se.intersection`` for their intersection and ``cell_rows.<cell>``
    the rows of each reported cell.

    The normal approximation the certification (:func:`fairpca.tasks.select.certification`)
    compares with the policy's thresholds: how finely these rows can resolve the measure. The
    reported intervals stay the exact, conservative ones of :func:`metrics_with_intervals`.
    """
    frame = pd.DataFrame(sensitive_features).astype(str).reset_index(drop=True)
    cells = _cell_rows(y_true, y_pred, sensitive_features, min_group_size)
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred, dtype=float)
    out: dict[str, float] = {}
    worst: dict[str, tuple[float, float]] = {}
    for name, codes in group_codes(frame).items():
        for measure, value in _grouping_errors(y_true, y_pred, codes, min_group_size).items():
            if name == INTERSECTION:
                out[f"{measure}.se{INTERSECTION}"] = value[1]
                continue
            lowest = measure == "selection_rate_ratio"
            best = worst.get(measure, (math.nan, math.nan))
            if math.isnan(best[0]) or (value[0] < best[0] if lowest else value[0] > best[0]):
                worst[measure] = value
    out.update({f"{measure}.se": value[1] for measure, value in worst.items()})
    out.update(cells)
    return {k: float(v) for k, v in out.items() if np.isfinite(v)}


CELL_ROWS = "cell_rows."  # the rows of an intersection cell: ``cell_rows.<its metric name>``


def _cell_rows(y_true, y_pred, sensitive_features, min_group_size: int) -> dict[str, float]:
    """With several attributes, ``cell_rows.<cell>``: the rows of each reported intersection
    cell (at least ``min_group_size``), named as its rates are (``selection_rate.<cell>``):
    what the gate needs to judge a cell only where its rows resolve the policy's band
    (:meth:`fairpca.tasks.select.GatePolicy.judged_cells`)."""
    frame = pd.DataFrame(sensitive_features)
    if frame.shape[1] < 2 or len(frame) == 0:
        return {}
    report = fm.group_fairness(
        y_true, y_pred, frame, min_group_size=max(min_group_size, 1),
        allow_small_groups=min_group_size < fm.MIN_GROUP_SIZE_FLOOR,
    )  # fmt: skip
    table = report.group_table()
    table = table[table["attribute"] == "intersection"]
    sizes = zip(table["key"], table["size"], strict=True)
    return {f"{CELL_ROWS}{key}": float(size) for key, size in sizes}


def majority_class(y_train: np.ndarray) -> int:
    """The more frequent training label (ties: 0): the majority-class baseline's prediction."""
    return int(np.mean(np.asarray(y_train) == 1) > 0.5)


def one_class_share(y_pred: np.ndarray) -> float:
    """Share of rows given the more frequent predicted class (1.0: a constant classifier)."""
    positive = float(np.mean(np.asarray(y_pred) == 1)) if len(y_pred) else 0.0
    return max(positive, 1.0 - positive)


def shared_mmd_sigma(Z_train: np.ndarray, k: int, *, max_rows: int, seed: int) -> float:
    """MMD bandwidth shared by all methods: median heuristic on top-k PCA of training rows."""
    from sklearn.decomposition import PCA

    projected = PCA(n_components=min(k, Z_train.shape[1]), random_state=seed).fit_transform(Z_train)
    return fm.median_heuristic_sigma(projected, max_samples=max_rows, random_state=seed)


# Validation rows of the linear probe (a logistic regression fitted on 70% of them, its error
# on the other 30%; a seeded sample stratified by group): its error is settled to about
# +-0.005 at 20,000 rows, and on every row of a large table it held several copies of them.
LINEAR_PROBE_MAX_ROWS = 20_000


def training_mean_gap(
    features_train: np.ndarray, s_train: pd.DataFrame, fair_columns: int, constraint_rows
) -> float:
    """The residual group-mean gap of the fair block on the training rows the constraint was
    fitted on (``constraint_rows``; None: all; for equal opportunity the positive rows,
    Sec. 3.2): the part of the representation metrics that reads the training features, so
    that they can be released before the held-out rows are transformed."""
    rows = slice(None) if constraint_rows is None else constraint_rows
    return fm.group_mean_gap(features_train[rows, :fair_columns], s_train.iloc[rows])


def held_out_metrics(
    features_validation: np.ndarray, s_validation: pd.DataFrame, mean_gap_train: float, *,
    fair_columns: int, sigma: float, max_rows: int, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """MMD^2, linear inseparability and residual group-mean gaps of one representation, from
    the validation features and the training rows' gap (:func:`training_mean_gap`).

    ``fair_columns`` is the number of leading columns that fair PCA constrains (the fair
    block ``X U``; with a trade-off the appended PCA block is not constrained). The
    group-mean gap is given on the training rows (where the constraint holds by
    construction) and on the held-out validation rows (whether it carries over)."""
    no_label = np.zeros(len(s_validation), dtype=np.int64)
    probe = stratified_sample(no_label, s_validation, LINEAR_PROBE_MAX_ROWS, seed, floor=2)
    F, s = features_validation, s_validation
    return {
        "mmd2": fm.mmd_squared(F, s, sigma=sigma, max_samples=max_rows, random_state=seed),
        "linear_inseparability": fm.linear_inseparability(
            F[probe], s.iloc[probe], random_state=seed
        ),
        "mean_gap_train": mean_gap_train,
        "mean_gap_validation": fm.group_mean_gap(F[:, :fair_columns], s),
    }


def classifier_key(row: dict[str, Any]) -> tuple:
    """The key of a candidate's fitted classifier in its sweep: the lambda's index and the
    classifier, and for ``logreg_tuned`` (swept over a C grid) its C."""
    key = (int(row["lambda_index"]), row["classifier"])
    return (*key, float(row["C"])) if row["classifier"] == "logreg_tuned" else key


def build_pipeline(preprocessor, representations, sweeps, row: dict[str, Any]) -> Pipeline:
    """preprocess -> representation (at the row's lambda) -> classifier, all fitted.

    The representation is a copy: the sweep's estimator keeps its own ``tradeoff``.
    """
    rep = representations[row["variant"]]
    estimator = copy.deepcopy(rep.estimator)
    if rep.supports_tradeoff:
        estimator.set_params(tradeoff=float(row["lambda"]))
    classifier = sweeps[row["variant"]].classifiers[classifier_key(row)]
    return Pipeline(
        [("preprocess", preprocessor), ("represent", estimator), ("classify", classifier)]
    )


PREDICT_BLOCK_ROWS = 50_000


def predict_by_blocks(pipeline, X: pd.DataFrame) -> np.ndarray:
    """``pipeline.predict(X)`` by blocks of :data:`PREDICT_BLOCK_ROWS` rows (each row is
    encoded, projected and classified alone): the encoded and projected rows of a whole
    part (at 250,000 rows, 210 MB and 420 MB) are never held at once."""
    blocks = [
        np.asarray(pipeline.predict(X.iloc[start : start + PREDICT_BLOCK_ROWS]))
        for start in range(0, len(X), PREDICT_BLOCK_ROWS)
    ]
    return np.concatenate(blocks) if blocks else np.asarray(pipeline.predict(X))


def check_pipeline(pipeline: Pipeline, split, row: dict[str, Any], evaluation) -> np.ndarray:
    """The assembled pipeline must reproduce the sweep's validation accuracy from X alone (on
    the same rows: those the metrics release, see ``evaluation.min_group_size``;
    ``holdout_accuracy`` when the row holds cross-validated numbers). Returns its labels of
    the validation rows (what its ONNX graph must reproduce)."""
    labels = predict_by_blocks(pipeline, split.X_validation)
    accuracy = classifier_metrics(
        split.y_validation, labels, split.s_validation,
        min_group_size=evaluation.min_group_size, allow_small_groups=evaluation.allow_small_groups,
    ).get("accuracy", math.nan)  # fmt: skip

    expected = float(row.get("holdout_accuracy", row.get("accuracy", math.nan)))
    if not (abs(accuracy - expected) <= 1e-9 or (math.isnan(accuracy) and math.isnan(expected))):
        raise RuntimeError(
            f"the assembled pipeline scores {accuracy:.6f}, the sweep {expected:.6f}; "
            "the representation or classifier was changed after the sweep."
        )
    return labels


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))
    }


def validation_metrics(row: dict[str, Any]) -> dict[str, float]:
    """The classifier metrics of a table row (accuracy, differences, rates, intervals)."""
    prefixes = ("accuracy", "dp_difference", "eo_difference", "selection_rate.", "tpr.")
    return _finite({k: v for k, v in row.items() if k.startswith(prefixes)})


@task(name="evaluate-test-part", cache_policy=NO_CACHE)
def evaluate_reported(
    split, evaluation, seed: int, chosen_pipeline: Pipeline, pca_pipeline: Pipeline | None,
    chosen, pca_row,
) -> dict[str, Any]:  # fmt: skip
    """Validation and test metrics of what the audit reports: the chosen candidate, the
    majority-class baseline and unconstrained PCA. Runs after the choice; only here are the
    test rows read."""
    options = metric_options(evaluation, seed)

    def on_test(y_pred: np.ndarray) -> dict[str, float]:
        return _finite(metrics_with_intervals(split.y_test, y_pred, split.s_test, **options))

    majority = majority_class(split.y_train)
    out: dict[str, Any] = {
        "chosen": {
            "validation": validation_metrics(chosen),
            "test": on_test(predict_by_blocks(chosen_pipeline, split.X_test)),
        },
        "majority": {
            "class": majority,
            "validation": {"accuracy": float(np.mean(split.y_validation == majority))},
            "test": on_test(np.full(len(split.y_test), majority)),
        },
    }
    if pca_pipeline is not None:
        out["pca"] = {
            "validation": validation_metrics(pca_row),
            "test": on_test(predict_by_blocks(pca_pipeline, split.X_test)),
        }
    return out


def pip_requirements() -> list[str]:
    """Pinned runtime requirements of the logged pipeline: the installed fairpca (the model
    carries no copy of its code) and the libraries its estimators are built on."""
    from importlib.metadata import version

    names = ("fairpca", "numpy", "scipy", "scikit-learn", "pandas")
    return [f"{name}=={version(name)}" for name in names]
