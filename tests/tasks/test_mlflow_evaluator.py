"""The ``fairness`` MLflow evaluator, through its entry point, on real models logged with
``mlflow.sklearn`` to a real MLflow SQLite store: metrics equal a direct computation and the
library's one definition, artifacts (formula-safe CSV), MetricThreshold gates, several
attributes, models trained without the sensitive columns, disclosure control against the
default evaluator's counts, the sensitive-column rules and clear errors."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from messages import matching

mlflow = pytest.importorskip("mlflow")
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.models import MetricThreshold, infer_signature  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from fairpca import FairPCA  # noqa: E402
from fairpca.metrics._counts import MIN_GROUP_SIZE_BELOW_ONE  # noqa: E402
from fairpca.tasks.mlflow_evaluator import (  # noqa: E402
    DATA_NOT_A_FRAME,
    MISSING_SENSITIVE_COLUMNS,
    ROWS_DIFFER,
    UNKNOWN_CONFIG_KEYS,
)

DP_GATE = {"dp_difference": MetricThreshold(threshold=0.05, greater_is_better=False)}


@pytest.fixture(scope="module")
def tracking(mlflow_store, tmp_path_factory):
    """The session's store as the current tracking URI, with artifacts in a temp folder."""
    uri, client = mlflow_store
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    artifacts = tmp_path_factory.mktemp("evaluator-artifacts")
    experiment = client.create_experiment(f"evaluator-{uuid.uuid4().hex}", artifacts.as_uri())
    mlflow.set_experiment(experiment_id=experiment)
    yield client
    mlflow.set_tracking_uri(previous)


def audit_data(seed: int = 0, n: int = 2000) -> pd.DataFrame:
    """Two features, a label, sex (F/M) and race (a/b/c; c has 10 rows).

    ``x_fair`` has the same values in both sexes (each value once per sex), ``x_proxy`` is
    sex plus noise, and the label depends on both.
    """
    rng = np.random.default_rng(seed)
    half = rng.normal(size=n // 2)
    sex = np.repeat(["F", "M"], n // 2)
    code = (sex == "M").astype(int)
    race = rng.choice(["a", "b"], n)
    race[rng.choice(n, 10, replace=False)] = "c"
    frame = pd.DataFrame(
        {
            "x_fair": np.concatenate([half, half]),
            "x_proxy": code + 0.3 * rng.normal(size=n),
            "sex": sex,
            "race": race,
        }
    )
    frame["label"] = (frame["x_fair"] + 1.5 * code + 0.5 * rng.normal(size=n) > 0.75).astype(int)
    return frame


def log_model(frame: pd.DataFrame, columns: list[str], *, signature: bool = True) -> str:
    """Fit a LogisticRegression on ``columns`` and log it with mlflow.sklearn; its model URI."""
    model = LogisticRegression().fit(frame[columns], frame["label"])
    sig = infer_signature(frame[columns], model.predict(frame[columns])) if signature else None
    with mlflow.start_run():
        # Declared requirements: inferring them costs a subprocess and ~10 s per model.
        info = mlflow.sklearn.log_model(
            model, name="model", signature=sig, pip_requirements=["scikit-learn"]
        )
    return info.model_uri


def evaluate(model_uri: str, frame: pd.DataFrame, **config):
    config.setdefault("sensitive_features", ["sex", "race"])
    with mlflow.start_run() as run:
        result = mlflow.models.evaluate(
            model_uri,
            frame,
            targets="label",
            model_type="classifier",
            evaluators=["fairness"],
            evaluator_config={"fairness": config},
        )
    return result, run.info.run_id


def direct_differences(y_true, y_pred, groups) -> tuple[float, float]:
    """DP and EO differences by plain numpy over the given groups (no suppression)."""
    labels = np.unique(groups)
    selection = [np.mean(y_pred[groups == g] == 1) for g in labels]
    tpr = [np.mean(y_pred[(groups == g) & (y_true == 1)] == 1) for g in labels]
    return max(selection) - min(selection), max(tpr) - min(tpr)


def test_found_through_the_installed_entry_point():
    points = importlib.metadata.entry_points(group="mlflow.model_evaluator")
    assert {p.name: p.value for p in points}["fairness"] == (
        "fairpca.tasks.mlflow_evaluator:FairnessEvaluator"
    )
    # A fresh interpreter that never imports tasks: MLflow's registry resolves "fairness".
    code = (
        "import sys\n"
        "from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry as r\n"
        "evaluator = r.get_evaluator('fairness')\n"
        "print(type(evaluator).__module__, type(evaluator).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["fairpca.tasks.mlflow_evaluator", "FairnessEvaluator"]


def released(frame: pd.DataFrame) -> np.ndarray:
    """The rows of audit_data the evaluator publishes numbers of (min_group_size 30): race "c"
    (10 rows) is left out, and with it, as 10 < 30, the smallest (sex, race) cell."""
    kept = frame["race"].to_numpy() != "c"
    cells = frame["sex"] + "/" + frame["race"]
    sizes = cells[kept].value_counts()
    smallest = min(sizes.index, key=lambda cell: (sizes[cell], cell))
    return kept & (cells != smallest).to_numpy()


def test_metrics_equal_a_direct_computation_and_artifacts_are_logged(tracking, tmp_path):
    frame = audit_data()
    features = ["x_fair", "x_proxy"]
    uri = log_model(frame, features)
    result, run_id = evaluate(uri, frame)
    y_pred = mlflow.sklearn.load_model(uri).predict(frame[features])
    y_true = frame["label"].to_numpy()
    kept = released(frame)
    y_true, y_pred, shown = y_true[kept], y_pred[kept], frame[kept]
    dp_sex, eo_sex = direct_differences(y_true, y_pred, shown["sex"].to_numpy())
    dp_race, eo_race = direct_differences(y_true, y_pred, shown["race"].to_numpy())
    metrics = result.metrics
    assert abs(metrics["dp_difference.sex"] - dp_sex) <= 1e-12
    assert abs(metrics["eo_difference.sex"] - eo_sex) <= 1e-12
    assert abs(metrics["dp_difference.race"] - dp_race) <= 1e-12
    assert abs(metrics["dp_difference"] - max(dp_sex, dp_race)) <= 1e-12
    assert abs(metrics["eo_difference"] - max(eo_sex, eo_race)) <= 1e-12
    assert abs(metrics["accuracy"] - np.mean(y_pred == y_true)) <= 1e-12
    assert metrics["selection_rate.sex:F"] == np.mean(y_pred[(shown["sex"] == "F").to_numpy()])
    assert "dp_difference.intersection" in metrics
    assert not any("race:c" in name for name in metrics)  # left out everywhere
    for name in ("dp_difference", "eo_difference.sex", "accuracy", "dp_difference.intersection"):
        assert metrics[f"{name}.ci95_low"] <= metrics[name] <= metrics[f"{name}.ci95_high"]
    logged = tracking.get_run(run_id).data.metrics
    assert logged == pytest.approx(metrics, abs=0.0)
    names = {info.path for info in tracking.list_artifacts(run_id)}
    assert {"fairness_groups.json", "fairness_groups.csv", "fairness_rates.png"} <= names
    local = tracking.download_artifacts(run_id, "fairness_groups.json", str(tmp_path))
    table = json.loads(Path(local).read_text())
    assert table["min_group_size"] == 30
    marginal = {(row["attribute"], row["group"]) for row in table["groups"]}
    assert {("sex", "F"), ("sex", "M"), ("race", "a"), ("race", "b")} <= marginal
    assert all(row["group"] != "c" and row["size"] >= 30 for row in table["groups"])
    assert result.artifacts["fairness_groups_csv"].content.shape[0] == len(table["groups"])


def test_metric_threshold_gate_fails_biased_and_passes_fair_model(tracking):
    from mlflow.models.evaluation.validation import ModelValidationFailedException

    frame = audit_data(seed=1)
    biased, _ = evaluate(log_model(frame, ["x_fair", "x_proxy"]), frame, sensitive_features="sex")
    fair, _ = evaluate(log_model(frame, ["x_fair"]), frame, sensitive_features="sex")
    assert biased.metrics["dp_difference"] > 0.3
    assert fair.metrics["dp_difference"] == 0.0  # x_fair takes the same values in both sexes
    with pytest.raises(ModelValidationFailedException, match="dp_difference"):
        mlflow.validate_evaluation_results(validation_thresholds=DP_GATE, candidate_result=biased)
    mlflow.validate_evaluation_results(validation_thresholds=DP_GATE, candidate_result=fair)
    # Candidate vs baseline: the candidate must lower dp_difference by at least 0.1.
    better = {"dp_difference": MetricThreshold(min_absolute_change=0.1, greater_is_better=False)}
    mlflow.validate_evaluation_results(better, candidate_result=fair, baseline_result=biased)
    with pytest.raises(ModelValidationFailedException, match="dp_difference"):
        mlflow.validate_evaluation_results(better, candidate_result=biased, baseline_result=fair)


def test_sensitive_columns_reach_the_model_only_if_its_signature_names_them(tracking):
    frame = audit_data(seed=2)
    frame["sex_code"] = (frame["sex"] == "M").astype(int)
    with_code = log_model(frame, ["x_fair", "sex_code"])
    result, _ = evaluate(with_code, frame, sensitive_features=["sex_code"])
    y_pred = mlflow.sklearn.load_model(with_code).predict(frame[["x_fair", "sex_code"]])
    dp, _ = direct_differences(frame["label"].to_numpy(), y_pred, frame["sex_code"].to_numpy())
    assert abs(result.metrics["dp_difference.sex_code"] - dp) <= 1e-12
    # A fairpca pipeline that takes sex from X (sensitive_columns): its signature names sex.
    columns = ["x_fair", "x_proxy", "sex"]
    pipeline = make_pipeline(FairPCA(1, sensitive_columns=["sex"]), LogisticRegression())
    pipeline.fit(frame[columns], frame["label"])
    with mlflow.start_run():
        fair_uri = mlflow.sklearn.log_model(
            pipeline,
            name="model",
            signature=infer_signature(frame[columns], pipeline.predict(frame[columns])),
            pip_requirements=["scikit-learn"],
            skops_trusted_types=["fairpca._fair_pca.FairPCA"],
        ).model_uri
    result, _ = evaluate(fair_uri, frame.drop(columns="sex_code"))
    kept = released(frame)  # sex and race: race "c" is left out, and one more cell
    y_pred = pipeline.predict(frame[columns])[kept]
    dp, eo = direct_differences(
        frame["label"].to_numpy()[kept], y_pred, frame["sex"].to_numpy()[kept]
    )
    assert abs(result.metrics["dp_difference.sex"] - dp) <= 1e-12
    assert abs(result.metrics["eo_difference.sex"] - eo) <= 1e-12
    # No signature: the sensitive columns are left out, so the model sees its own two columns.
    frame = frame.drop(columns="sex_code")
    unsigned = log_model(frame, ["x_fair", "x_proxy"], signature=False)
    assert "dp_difference.race" in evaluate(unsigned, frame)[0].metrics


def test_missing_sensitive_column_is_a_clear_error(tracking):
    frame = audit_data(seed=3)
    uri = log_model(frame, ["x_fair"])
    missing = matching(MISSING_SENSITIVE_COLUMNS, missing=["religion"])
    with pytest.raises(MlflowException, match=missing):
        evaluate(uri, frame, sensitive_features=["sex", "religion"])
    unknown = matching(UNKNOWN_CONFIG_KEYS, unknown=["sensitive_feature"])
    with pytest.raises(MlflowException, match=unknown):
        evaluate(uri, frame, sensitive_feature=["sex"])
    with pytest.raises(MlflowException, match="needs evaluator_config"):
        evaluate(uri, frame, sensitive_features=[])
    with pytest.raises(ValueError, match=matching(MIN_GROUP_SIZE_BELOW_ONE, value=0)):
        evaluate(uri, frame, sensitive_features=["sex"], min_group_size=0)
    not_a_frame = matching(DATA_NOT_A_FRAME, given="ndarray")
    with pytest.raises(MlflowException, match=not_a_frame), mlflow.start_run():
        mlflow.models.evaluate(
            uri,
            frame[["x_fair"]].to_numpy(),
            targets=frame["label"].to_numpy(),
            model_type="classifier",
            evaluators=["fairness"],
            evaluator_config={"fairness": {"sensitive_features": ["sex"]}},
        )


NEW_NAMES = (
    "balanced_accuracy",
    "selection_rate_ratio",
    "selection_rate_ratio.sex",
    "equalized_odds_difference",
    "fpr.sex:F",
    "fpr_difference.sex",
    "one_class_share",
)


def test_logs_the_library_definition_with_the_new_names(tracking):
    from fairpca.metrics import evaluate_fairness

    frame = audit_data(seed=4)
    features = ["x_fair", "x_proxy"]
    uri = log_model(frame, features)
    result, run_id = evaluate(uri, frame, sensitive_features="sex")
    y_pred = mlflow.sklearn.load_model(uri).predict(frame[features])
    expected, _ = evaluate_fairness(frame["label"], y_pred, frame[["sex"]], min_group_size=30)
    assert result.metrics == expected  # one definition: the evaluator adds nothing of its own
    logged = tracking.get_run(run_id).data.metrics
    for name in NEW_NAMES:
        low, high = logged[f"{name}.ci95_low"], logged[f"{name}.ci95_high"]
        assert low <= logged[name] <= high, name
    sex = frame["sex"].to_numpy()
    negatives = frame["label"].to_numpy() == 0
    assert logged["fpr.sex:F"] == pytest.approx(
        np.mean(y_pred[(sex == "F") & negatives]), abs=1e-12
    )


def test_model_trained_without_the_sensitive_columns(tracking):
    frame = audit_data(seed=5)
    features = ["x_fair", "x_proxy"]
    for signature in (True, False):
        uri = log_model(frame, features, signature=signature)
        result, _ = evaluate(uri, frame)  # data holds sex and race; the model never saw them
        assert "dp_difference.sex" in result.metrics
    # Beside MLflow's default evaluator: the model's columns as feature_names, the sensitive
    # labels in evaluator_config.
    with mlflow.start_run():
        result = mlflow.models.evaluate(
            uri,
            frame,
            targets="label",
            model_type="classifier",
            feature_names=features,
            evaluators=["default", "fairness"],
            evaluator_config={
                "default": {"log_model_explainability": False},
                "fairness": {"sensitive_features": frame[["sex", "race"]]},
            },
        )
    assert {"true_positives", "dp_difference.sex", "balanced_accuracy"} <= set(result.metrics)
    with pytest.raises(MlflowException, match=matching(ROWS_DIFFER, names=10, rows=2000)):
        evaluate(uri, frame, sensitive_features=frame[["sex"]].head(10))


SECRET = "region-secret"


def test_default_evaluators_overall_counts_do_not_reveal_a_suppressed_group(tracking, tmp_path):
    # A 29-row group (min_group_size=30) beside 1000, 600 and 371 rows. MLflow's default
    # evaluator logs the overall TP / FP / TN / FN; with every other group's size and rates the
    # 29 rows followed exactly before complementary suppression.
    frame = audit_data(seed=6)
    sizes = [1000, 600, 29, 371]
    frame["region"] = np.repeat(["north", "south", SECRET, "west"], sizes)
    features = ["x_fair", "x_proxy"]
    uri = log_model(frame, features)
    with mlflow.start_run() as run:
        mlflow.models.evaluate(
            uri,
            frame,
            targets="label",
            model_type="classifier",
            feature_names=features,
            evaluators=["default", "fairness"],
            evaluator_config={
                "default": {"log_model_explainability": False},
                "fairness": {"sensitive_features": frame[["region"]]},
            },
        )
    logged = tracking.get_run(run.info.run_id).data.metrics
    total = np.array([logged[k] for k in ("true_negatives", "false_positives")]
                     + [logged[k] for k in ("false_negatives", "true_positives")])  # fmt: skip
    local = tracking.download_artifacts(run.info.run_id, "fairness_groups.json", str(tmp_path))
    content = Path(local).read_text()
    groups = json.loads(content)["groups"]
    derived = total.astype(float)
    for row in groups:
        positives = row["size"] * row["base_rate"]
        tp, fp = row["tpr"] * positives, row["fpr"] * (row["size"] - positives)
        derived -= [row["size"] - positives - fp, fp, positives - tp, tp]
    y_pred = mlflow.sklearn.load_model(uri).predict(frame[features])
    rows = (frame["region"] == SECRET).to_numpy()
    cells = 2 * frame["label"].to_numpy()[rows] + y_pred[rows]
    truth = np.bincount(cells, minlength=4)
    assert derived.sum() >= 30 and not np.allclose(derived, truth)
    assert {row["group"] for row in groups} < {"north", "south", "west"}
    csv = Path(tracking.download_artifacts(run.info.run_id, "fairness_groups.csv", str(tmp_path)))
    assert SECRET not in content + csv.read_text() + " ".join(logged)


def test_fairness_groups_csv_neutralises_formulas(tracking, tmp_path):
    frame = audit_data(seed=7)
    payloads = ['=HYPERLINK("http://x")', "+cmd|' /C calc'!A0", "@SUM(1)", "-2+3"]
    frame["team"] = np.resize(payloads, len(frame))
    _, run_id = evaluate(log_model(frame, ["x_fair"]), frame, sensitive_features="team")
    local = tracking.download_artifacts(run_id, "fairness_groups.csv", str(tmp_path))

    with open(local, newline="") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert {f"'{p}" for p in payloads} <= set(cells)
    assert not any(cell[:1] in ("=", "+", "-", "@", "\t", "\r") for cell in cells)


def _published_run(tracking, frame: pd.DataFrame, sensitive: list[str], tmp_path: Path) -> dict:
    """Evaluate the ``pred`` column with the fairness evaluator alone; everything the run
    publishes: its metrics and the text of its table artifacts."""
    with mlflow.start_run() as run:
        mlflow.models.evaluate(
            data=frame,
            predictions="pred",
            targets="label",
            model_type="classifier",
            evaluators=["fairness"],
            evaluator_config={"fairness": {"sensitive_features": sensitive, "n_resamples": 100}},
        )
    run_id = run.info.run_id
    texts = {
        name: Path(tracking.download_artifacts(run_id, name, str(tmp_path / run_id))).read_text()
        for name in ("fairness_groups.json", "fairness_groups.csv")
    }
    return {"metrics": tracking.get_run(run_id).data.metrics, **texts}


@pytest.mark.parametrize("attributes", [1, 2])
def test_differencing_two_evaluator_runs_recovers_nothing_of_a_6_row_group(
    tracking, tmp_path, attributes
):
    # The attack: the same predictions evaluated with and without a 6-row group
    # (min_group_size 30); metric x n of one run minus the other gave the group's selected,
    # positive and correct counts. With two attributes the 6 rows are an intersection cell
    # (F, other) inside large groups F and other.
    rng = np.random.default_rng(40 + attributes)
    n = 800
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "label": rng.integers(0, 2, n),
            "pred": rng.integers(0, 2, n),
            "sex": np.repeat(["F", "M"], [350, 450]),
            "race": np.repeat(
                ["white", "black", "white", "black", "other"], [200, 150, 200, 200, 50]
            ),
        }
    )
    sensitive = ["race"] if attributes == 1 else ["sex", "race"]
    small = {"x": np.zeros(6), "sex": ["F"] * 6, "race": ["other"] * 6}
    if attributes == 1:
        small["race"] = [SECRET] * 6
    without = _published_run(tracking, frame, sensitive, tmp_path)
    runs, truths = [], []
    # (selected, positive, correct) of the 6 rows: (6, 6, 6), then (1, 1, 4).
    for label, pred in (([1] * 6, [1] * 6), ([1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1])):
        six = pd.DataFrame({**small, "label": label, "pred": pred})
        runs.append(_published_run(tracking, pd.concat([frame, six]), sensitive, tmp_path))
        truths.append(
            (sum(pred), sum(label), sum(a == b for a, b in zip(label, pred, strict=True)))
        )
    assert truths[0] != truths[1] and all(a != b for a, b in zip(*truths, strict=True))
    assert runs[0] == runs[1]  # every metric, interval and table cell is the same ...
    attacks = [
        {k: run["metrics"][k] * (n + 6) - without["metrics"][k] * n
         for k in set(run["metrics"]) & set(without["metrics"])}
        for run in runs
    ]  # fmt: skip
    assert attacks[0] == attacks[1]  # ... so every subtraction is too: it recovers nothing
    published = json.dumps(runs[0]) + json.dumps(without)
    assert SECRET not in published and "F/race:other" not in published
    groups = json.loads(runs[0]["fairness_groups.json"])["groups"]
    assert all(row["size"] >= 30 for row in groups)


def test_dollar_group_labels_are_evaluated_and_drawn_as_written(
    tracking, tmp_path, saved_figures, dollar_labels, drawn_literally
):
    # Two "$" in a label made matplotlib parse it as mathtext: the evaluator failed, so the
    # gate marked every version "error".
    rng = np.random.default_rng(5)
    n = 300
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "label": rng.integers(0, 2, n),
            "pred": rng.integers(0, 2, n),
            "income": np.resize([*dollar_labels, "none"], n),
        }
    )
    with mlflow.start_run() as run:
        result = mlflow.models.evaluate(
            data=frame,
            predictions="pred",
            targets="label",
            model_type="classifier",
            evaluators=["fairness"],
            evaluator_config={"fairness": {"sensitive_features": ["income"], "n_resamples": 50}},
        )
    assert "selection_rate.income:_50k-_100k" in result.metrics
    assert drawn_literally(saved_figures[-1], dollar_labels)
    names = {info.path for info in tracking.list_artifacts(run.info.run_id)}
    assert "fairness_rates.png" in names
    local = tracking.download_artifacts(run.info.run_id, "fairness_groups.json", str(tmp_path))
    groups = {row["group"] for row in json.loads(Path(local).read_text())["groups"]}
    assert set(dollar_labels) <= groups


def _race_numbers(metrics: dict, groups: list) -> tuple[dict, dict]:
    """What a run publishes of the race groups alone: every metric (and interval) of a race
    group or of the race grouping, and the race groups' sizes."""
    values = {
        name: value
        for name, value in metrics.items()
        if (".race:" in name and "/" not in name) or ".race." in name or name.endswith(".race")
    }
    sizes = {row["group"]: row["size"] for row in groups if row["attribute"] == "race"}
    return values, sizes


def test_two_evaluations_with_different_attribute_sets_recover_no_suppressed_cell(tracking):
    # The attack on 3,000 real Adult rows: the evaluator run once with race and once
    # with sex + race published race:Asian-Pac-Islander as 89 rows and then 62 rows, so the
    # suppressed 27-row cell (Female, Asian-Pac-Islander) followed by subtraction. Both runs
    # now know the same sensitive columns (race reported with sex protected; sex and race
    # reported), so every race number is computed from the same rows.
    from fairpca.datasets import load_dataset

    adult = load_dataset("adult", sensitive=["sex", "race"]).with_named_groups()
    rows = np.random.default_rng(0).choice(adult.n_samples, 3000, replace=False)
    columns = ["age", "education_num", "hours_per_week", "capital_gain"]
    frame = adult.X.iloc[rows][columns].reset_index(drop=True)
    frame = frame.assign(
        sex=adult.sensitive["sex"].iloc[rows].astype(str).to_numpy(),
        race=adult.sensitive["race"].iloc[rows].astype(str).to_numpy(),
        label=adult.y.iloc[rows].to_numpy(),
    )
    cells = frame.groupby(["sex", "race"]).size()
    assert cells["Female", "Asian-Pac-Islander"] == 27 and cells["Male", "Asian-Pac-Islander"] == 62
    model_uri = log_model(frame, columns)
    published = []
    for config in (
        {"sensitive_features": ["race"], "protected_features": ["sex"]},
        {"sensitive_features": ["sex", "race"]},
    ):
        result, _ = evaluate(model_uri, frame, n_resamples=200, **config)
        groups = result.artifacts["fairness_groups_json"].content["groups"]
        published.append(_race_numbers(result.metrics, groups))
    (race_only, race_sizes), (with_sex, with_sex_sizes) = published
    assert race_sizes == with_sex_sizes and race_sizes["Asian-Pac-Islander"] == 62
    assert race_only == with_sex  # every race metric and interval, to the bit
    assert "selection_rate.race:Asian-Pac-Islander" in race_only
    # So subtracting the runs' race:Asian-Pac-Islander counts gives 0 rows, 0 selected,
    # 0 positive: nothing of the 27-row cell.
    rate = "selection_rate.race:Asian-Pac-Islander"
    assert race_only[rate] * 62 - with_sex[rate] * 62 == 0


def test_protected_features_are_checked_like_the_sensitive_ones():
    from fairpca.tasks.mlflow_evaluator import known_columns, read_config

    config = read_config({"sensitive_features": ["race"], "protected_features": "sex"})
    assert config["protected_features"] == ["sex"]
    assert known_columns(config) == ["race", "sex"]  # neither reaches a model not asking
    with pytest.raises(MlflowException, match=r"'protected_features': \['<column>'.*got "):
        read_config({"sensitive_features": ["race"], "protected_features": [1]})
