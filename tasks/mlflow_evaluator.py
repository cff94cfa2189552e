"""The ``fairness`` MLflow model evaluator: group fairness of any classifier MLflow can load.

Registered through the ``mlflow.model_evaluator`` entry point of the ``fairpca[audit]`` install,
so that, with no import of this module::

    mlflow.models.evaluate(model_uri, data, targets="label", model_type="classifier",
                           evaluators=["default", "fairness"],
                           evaluator_config={"fairness": {"sensitive_features": ["sex", "race"],
                                                          "pos_label": 1}})

logs the metrics of :func:`fairpca.metrics.evaluate_fairness` (the one definition of metrics
with intervals, also used by the audit) under the names of
:meth:`fairpca.metrics.FairnessReport.as_metrics` (``accuracy``, ``balanced_accuracy``,
``dp_difference``, ``selection_rate_ratio``, ``equalized_odds_difference``,
``dp_difference.<attr>``, ``selection_rate.<attr>:<group>``, ``fpr.<attr>:<group>``, ...) with
their intervals as ``<metric>.ci95_low`` / ``<metric>.ci95_high``, and three artifacts: the
per-group table (``fairness_groups.json``, ``fairness_groups.csv``, formula-safe) and a plot of
the per-group rates (``fairness_rates.png``). Rows of groups and intersection cells below
``min_group_size`` rows count in no logged number, so runs that differ by such a group log the
same numbers, with complementary suppression against MLflow's default evaluator's overall
counts (see :mod:`fairpca.metrics._disclosure`).

The cells are those of every sensitive column the run knows: ``sensitive_features`` and
``protected_features``. Name every sensitive column of ``data`` in one or the other, the same
set in every run on these rows: a run reporting ``race`` with ``protected_features=["sex"]``
then logs the same ``race`` numbers as one reporting ``sex`` and ``race``, and neither gives a
small (sex, race) cell by subtraction. A run that names ``race`` alone knows no ``sex`` cell
and cannot protect one.

A model trained without the sensitive columns is given the feature columns only. MLflow's
``default`` evaluator, which runs first, passes it every column of ``data``; to run both, give
``feature_names=[...]`` (the model's columns) to ``mlflow.models.evaluate`` and the sensitive
labels themselves as ``evaluator_config={"fairness": {"sensitive_features": frame[["sex"]]}}``
(a DataFrame or Series with one row per row of ``data``).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.models.evaluation import EvaluationResult, ModelEvaluator
from mlflow.models.evaluation.artifacts import (
    CsvEvaluationArtifact,
    ImageEvaluationArtifact,
    JsonEvaluationArtifact,
)
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.tracking.artifact_utils import get_artifact_uri

from fairpca.metrics import FairnessReport, check_fairness_options, evaluate_fairness
from fairpca.tasks.mlflow_store import log_metrics_batched, mlflow_client

from . import DEFAULT_MIN_GROUP_SIZE
from .report import literal_plot_text, write_safe_csv

# evaluator_config keys of the "fairness" evaluator and their defaults (None: required).
CONFIG_DEFAULTS: dict[str, Any] = {
    "sensitive_features": None,
    "protected_features": None,
    "pos_label": 1,
    "min_group_size": DEFAULT_MIN_GROUP_SIZE,
    "allow_small_groups": False,
    "n_resamples": 1000,
    "confidence": 0.95,
    "seed": 0,
}
# The artifacts logged: name -> file and MLflow's kind of evaluation artifact.
ARTIFACTS = {
    "fairness_groups_json": ("fairness_groups.json", JsonEvaluationArtifact),
    "fairness_groups_csv": ("fairness_groups.csv", CsvEvaluationArtifact),
    "fairness_rates": ("fairness_rates.png", ImageEvaluationArtifact),
}


# The messages of the refusals below (str.format templates; tests name them, not their words)
UNKNOWN_CONFIG_KEYS = (
    "unknown evaluator_config key(s) {unknown} for the 'fairness' evaluator; the keys are {keys}."
)
DATA_NOT_A_FRAME = (
    "the 'fairness' evaluator reads the sensitive columns by name, so data must be a pandas "
    "DataFrame; got {given}."
)
MISSING_SENSITIVE_COLUMNS = (
    "sensitive feature column(s) {missing} not found in the evaluation data; its columns are "
    "{columns}. Add them to data (and keep them in feature_names if you pass feature_names)."
)
ROWS_DIFFER = (
    "sensitive_features has {names} rows but data has {rows}; give one row of labels per row of "
    "data, in the same order."
)


def _invalid(message: str) -> MlflowException:
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


def read_config(evaluator_config: dict[str, Any] | None) -> dict[str, Any]:
    """The evaluator's settings: ``CONFIG_DEFAULTS`` updated by ``evaluator_config``."""
    given = dict(evaluator_config or {})
    if unknown := sorted(set(given) - set(CONFIG_DEFAULTS)):
        raise _invalid(UNKNOWN_CONFIG_KEYS.format(unknown=unknown, keys=sorted(CONFIG_DEFAULTS)))
    config = {**CONFIG_DEFAULTS, **given}
    for key in ("sensitive_features", "protected_features"):  # the latter optional
        if key == "sensitive_features" or config[key] is not None:
            config[key] = _sensitive_setting(config[key], key)
    options = ("min_group_size", "n_resamples", "confidence", "allow_small_groups")
    check_fairness_options(**{key: config[key] for key in options})
    return config


def _sensitive_setting(value: Any, key: str) -> list[str] | pd.DataFrame:
    """Column names of ``data`` (a list), or the labels themselves (a one-column-per-attribute
    DataFrame; a Series becomes one column)."""
    if isinstance(value, pd.Series):
        value = value.to_frame()
    if isinstance(value, pd.DataFrame):
        if value.shape[1] == 0:
            raise _invalid(f"{key} is a DataFrame without columns; give one or more.")
        return value
    names = [value] if isinstance(value, str) else value
    if not names or not all(isinstance(name, str) for name in names):
        raise _invalid(
            "the 'fairness' evaluator needs evaluator_config={'fairness': "
            f"{{'{key}': ['<column>', ...]}}}} naming the sensitive columns of data "
            "(or a DataFrame of their labels, one row per row of data); got "
            f"{key}={value!r}."
        )
    return list(names)


def known_columns(config: dict[str, Any]) -> list[str] | pd.DataFrame:
    """What :func:`model_input` keeps from the model: the sensitive columns (or their labels
    given apart from data) and the protected columns named in data."""
    sensitive, protected = config["sensitive_features"], config.get("protected_features")
    if isinstance(sensitive, pd.DataFrame) or not isinstance(protected, list):
        return sensitive
    return [*sensitive, *(name for name in protected if name not in sensitive)]


def sensitive_columns(features: pd.DataFrame, names: list[str] | pd.DataFrame) -> pd.DataFrame:
    """The sensitive columns of the evaluation data (or the given labels, checked for length);
    a clear error names any column that is missing."""
    if isinstance(names, pd.DataFrame):
        if len(names) != len(features):
            raise _invalid(ROWS_DIFFER.format(names=len(names), rows=len(features)))
        return names.reset_index(drop=True)
    if not isinstance(features, pd.DataFrame):
        raise _invalid(DATA_NOT_A_FRAME.format(given=type(features).__name__))
    present = [str(column) for column in features.columns]
    if missing := [name for name in names if name not in present]:
        raise _invalid(MISSING_SENSITIVE_COLUMNS.format(missing=missing, columns=present))
    return features[names]


def model_input(model: Any, features: pd.DataFrame, names: list[str] | pd.DataFrame):
    """The features without the sensitive columns the model does not ask for.

    A model asks for a column by naming it in its MLflow signature or, for a scikit-learn
    object fitted on a DataFrame, in ``feature_names_in_`` (then exactly those columns are
    passed, in that order); a model with neither gets every column but the sensitive ones.
    Labels given apart from ``data`` (a DataFrame in ``sensitive_features``) leave ``data`` as
    it is.
    """
    fitted_names = getattr(model, "feature_names_in_", None)
    if fitted_names is not None:
        return features[list(fitted_names)]
    if isinstance(names, pd.DataFrame):  # labels given apart from data: data is the features
        return features
    schema = model.metadata.get_input_schema() if getattr(model, "metadata", None) else None
    wanted = set(schema.input_names()) if schema is not None and schema.has_input_names() else set()
    return features.drop(columns=[name for name in names if name not in wanted])


def _prediction_vector(output: Any, column: str | None) -> np.ndarray:
    """The predicted labels from a model output (array, Series, one-column or named frame)."""
    if isinstance(output, pd.DataFrame):
        if column is None and output.shape[1] != 1:
            raise _invalid(
                f"the model returns {output.shape[1]} columns {list(output.columns)}; name the "
                f"predicted label column with mlflow.models.evaluate(..., predictions='<col>')."
            )
        output = output[column] if column is not None else output.iloc[:, 0]
    return np.asarray(output)  # group_fairness checks it is one binary label per row


def fairness_metrics(
    y_true: Any,
    y_pred: Any,
    sensitive_features: pd.DataFrame,
    config: dict[str, Any],
    protected_features: pd.DataFrame | None = None,
) -> tuple[dict[str, float], FairnessReport]:
    """Metrics with intervals and the report behind them: :func:`fairpca.metrics.
    evaluate_fairness` with the evaluator's settings; ``protected_features`` are the further
    sensitive columns whose small groups and cells are left out too (rule 3 of
    :mod:`fairpca.metrics._disclosure`)."""
    options = {key: config[key] for key in CONFIG_DEFAULTS if not key.endswith("_features")}
    return evaluate_fairness(
        y_true, y_pred, sensitive_features, protected_features=protected_features, **options
    )


@literal_plot_text()
def plot_group_rates(table: pd.DataFrame, path: Path) -> Path:
    """Bar chart of the selection rate and TPR of every reported group, one panel per grouping."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groupings = list(dict.fromkeys(table["attribute"])) or ["(no group reported)"]
    figure = Figure(figsize=(7, 2.6 * len(groupings)), layout="constrained")
    FigureCanvasAgg(figure)
    for axes, name in zip(
        figure.subplots(len(groupings), 1, squeeze=False)[:, 0], groupings, strict=True
    ):
        rows = table[table["attribute"] == name]
        positions = np.arange(len(rows))
        axes.bar(positions - 0.2, rows["selection_rate"], 0.4, label="selection rate")
        axes.bar(positions + 0.2, rows["tpr"].fillna(0.0), 0.4, label="true positive rate")
        axes.set_xticks(positions, [str(g) for g in rows["group"]], rotation=20, ha="right")
        axes.set_ylim(0.0, 1.0)
        axes.set_title(name)
    # one legend above the panels, outside every axes: it never covers a bar
    handles, labels = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside upper center", ncol=2, fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def write_artifacts(
    table: pd.DataFrame, notes: list[str], config: dict[str, Any], directory: Path
) -> dict[str, Path]:
    """Write the per-group table (JSON, CSV) and the rates plot; ``{artifact name: path}``.

    ``table`` is :meth:`fairpca.metrics.FairnessReport.group_table` (reported groups only).
    """
    paths = {name: directory / file for name, (file, _kind) in ARTIFACTS.items()}
    groups = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in table.to_dict(orient="records")
    ]
    content = {
        "min_group_size": config["min_group_size"],
        "pos_label": config["pos_label"],
        "groups": groups,
        "notes": list(notes),
    }
    paths["fairness_groups_json"].write_text(json.dumps(content, indent=2, default=str))
    write_safe_csv(table, paths["fairness_groups_csv"], index=False)
    plot_group_rates(table, paths["fairness_rates"])
    return paths


class FairnessEvaluator(ModelEvaluator):
    """MLflow evaluator ``fairness``: DP / EO differences, per-group rates and intervals.

    ``evaluator_config`` keys (see ``CONFIG_DEFAULTS``): ``sensitive_features`` (required; the
    column names in ``data``, or a DataFrame of labels with one row per row of ``data``),
    ``protected_features`` (None; further sensitive columns, named or given alike, that are
    not reported but whose small groups and cells are left out of every number too),
    ``pos_label`` (1), ``min_group_size`` (30), ``allow_small_groups`` (False; needed for a
    ``min_group_size`` below 10), ``n_resamples`` (1000), ``confidence`` (0.95) and ``seed``
    (0). The sensitive columns are passed to the model only if its signature (or, for a
    scikit-learn model, ``feature_names_in_``) names them.
    """

    name = "fairness"

    @classmethod
    def can_evaluate(cls, *, model_type, evaluator_config, **kwargs) -> bool:
        return model_type == "classifier"

    def evaluate(
        self,
        *,
        model_type,
        dataset,
        run_id,
        evaluator_config,
        model=None,
        predictions=None,
        model_id=None,
        **kwargs,
    ) -> EvaluationResult:
        config = read_config(evaluator_config)
        if dataset.labels_data is None:
            raise _invalid("the 'fairness' evaluator needs the true labels: pass targets=.")
        features = dataset.features_data
        sensitive = sensitive_columns(features, config["sensitive_features"])
        protected = config["protected_features"]
        protected = None if protected is None else sensitive_columns(features, protected)
        if model is not None:
            output = model.predict(model_input(model, features, known_columns(config)))
            y_pred = _prediction_vector(output, predictions)
        elif dataset.predictions_data is not None:
            y_pred = _prediction_vector(dataset.predictions_data, None)
        else:
            raise _invalid("the 'fairness' evaluator needs a model or a predictions column.")
        metrics, report = fairness_metrics(
            dataset.labels_data, y_pred, sensitive, config, protected
        )
        client, now = mlflow_client(), int(time.time() * 1000)
        batch = [  # key, value, timestamp, step, model, dataset name and digest, run
            Metric(key, value, now, 0, model_id, dataset.name, dataset.digest, run_id)
            for key, value in metrics.items()
        ]
        log_metrics_batched(client, run_id, batch)
        artifacts = {}
        with tempfile.TemporaryDirectory() as tmp:
            files = write_artifacts(report.group_table(), report.notes, config, Path(tmp))
            for name, path in files.items():
                client.log_artifact(run_id, str(path))
                artifact = ARTIFACTS[name][1](uri=get_artifact_uri(run_id, path.name))
                artifact._load(str(path))
                artifacts[name] = artifact
        return EvaluationResult(metrics=metrics, artifacts=artifacts, run_id=run_id)
