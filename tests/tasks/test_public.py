"""The public tasks (``fairpca.tasks.public``): the README's example flow on a real Prefect test
server and a real MLflow store, and each task's numbers against a direct computation."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest
from messages import matching

mlflow = pytest.importorskip("mlflow")
from mlflow.models import infer_signature  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from fairpca.metrics import group_fairness  # noqa: E402
from fairpca.tasks.public import (  # noqa: E402
    NO_TRADEOFF,
    evaluate_model_fairness,
    fit_fair_representation,
    log_fairness_to_mlflow,
    sweep_lambda,
    write_fairness_report,
)


# The example flow of docs/plugin-notes.md (README "Audit your own MLflow model"), verbatim.
def make_example_flow():
    import pandas as pd
    from prefect import flow

    from fairpca.tasks.public import (
        evaluate_model_fairness,
        log_fairness_to_mlflow,
        write_fairness_report,
    )

    @flow(name="audit-my-model")
    def audit_my_model(model_uri: str, data_path: str, tracking_uri: str, out_dir: str) -> str:
        data = pd.read_csv(data_path)  # features, the label and the sensitive columns
        evaluation = evaluate_model_fairness(
            model_uri,
            data,
            target="label",
            sensitive_features=["sex", "race"],
            tracking_uri=tracking_uri,
        )
        files = write_fairness_report(evaluation, out_dir)
        return log_fairness_to_mlflow(evaluation, files, tracking_uri=tracking_uri)

    return audit_my_model


def user_data(seed: int = 0, n: int = 1200) -> pd.DataFrame:
    """Two numeric features (one a proxy of sex), sex, race and a label."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], n)
    proxy = (sex == "M") + 0.4 * rng.normal(size=n)
    other = rng.normal(size=n)
    frame = pd.DataFrame(
        {"x_proxy": proxy, "x_other": other, "sex": sex, "race": rng.choice(["a", "b"], n)}
    )
    frame["label"] = (other + 1.2 * (sex == "M") + 0.5 * rng.normal(size=n) > 0.6).astype(int)
    return frame


@pytest.fixture
def logged_user_model(mlflow_store, tmp_path):
    """A user's LogisticRegression logged with mlflow.sklearn; (model URI, model, frame)."""
    uri, client = mlflow_store
    frame = user_data()
    columns = ["x_proxy", "x_other"]
    model = LogisticRegression().fit(frame[columns], frame["label"])
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    experiment = client.create_experiment(f"user-{uuid.uuid4().hex}", tmp_path.as_uri())
    try:
        with mlflow.start_run(experiment_id=experiment):
            info = mlflow.sklearn.log_model(
                model,
                name="model",
                signature=infer_signature(frame[columns], model.predict(frame[columns])),
                pip_requirements=["scikit-learn"],
            )
    finally:
        mlflow.set_tracking_uri(previous)
    return info.model_uri, model, frame


def test_a_pickled_model_uri_is_refused_before_loading(tmp_path):
    """The task loads a model named by URI only once its files are verified (skops, trusted
    types, no code): a cloudpickled model is refused, with the way out."""
    import mlflow.sklearn

    from fairpca.tasks.trust import UntrustedModelError

    frame = user_data()
    model = LogisticRegression().fit(frame[["x_proxy", "x_other"]], frame["label"])
    path = tmp_path / "pickled"
    mlflow.sklearn.save_model(model, str(path), serialization_format="cloudpickle")
    settings = {"target": "label", "sensitive_features": ["sex"]}
    with pytest.raises(UntrustedModelError, match="serialization 'cloudpickle', not skops"):
        evaluate_model_fairness.fn(str(path), frame, **settings)
    evaluation = evaluate_model_fairness.fn(model, frame, **settings)
    assert "dp_difference" in evaluation.metrics  # the object the caller loaded is evaluated


def test_a_model_uri_with_credentials_is_recorded_masked(monkeypatch):
    from fairpca.tasks import public

    frame = user_data()
    model = LogisticRegression().fit(frame[["x_proxy", "x_other"]], frame["label"])
    monkeypatch.setattr(public, "load_verified_model", lambda uri, tracking_uri: model)
    uri = "https://user:s3cret@mlflow.example/models/m?X-Amz-Signature=t0ken"
    evaluation = evaluate_model_fairness.fn(
        uri, frame, target="label", sensitive_features=["sex", "race"]
    )
    assert evaluation.params["model"] == "https://***@mlflow.example/models/m"


@pytest.mark.flow
def test_example_flow_audits_a_users_mlflow_model(
    prefect_harness, mlflow_store, tmp_path, logged_user_model
):
    uri, client = mlflow_store
    model_uri, model, frame = logged_user_model
    data_path = tmp_path / "evaluation.csv"
    frame.to_csv(data_path, index=False)
    run_id = make_example_flow()(model_uri, str(data_path), uri, str(tmp_path / "report"))
    y_pred = model.predict(frame[["x_proxy", "x_other"]])
    direct = group_fairness(frame["label"], y_pred, frame[["sex", "race"]], min_group_size=30)
    logged = client.get_run(run_id).data.metrics
    assert abs(logged["dp_difference"] - direct.dp_difference) <= 1e-12
    assert abs(logged["eo_difference.sex"] - direct.attributes["sex"].eo_difference) <= 1e-12
    assert logged["dp_difference.ci95_low"] <= logged["dp_difference"]
    names = {info.path for info in client.list_artifacts(run_id, "fairness")}
    assert names == {
        f"fairness/{name}"
        for name in (
            "fairness_groups.json",
            "fairness_groups.csv",
            "fairness_rates.png",
            "fairness_report.md",
        )
    }
    report = (tmp_path / "report" / "fairness_report.md").read_text()
    # names and labels are escaped Markdown text
    assert "dp_difference\\.sex" in report and "selection_rate\\.race:a" in report
    params = client.get_run(run_id).data.params  # which model, which data, which settings
    assert params["model"] == model_uri and params["target"] == "label"
    assert params["data.rows"] == str(len(frame))
    assert params["data.columns"] == ",".join(frame.columns)
    assert len(params["data.sha256"]) == 64
    assert params["fairness.sensitive_features"] == "sex,race"
    assert params["fairness.min_group_size"] == "30" and params["fairness.seed"] == "0"


def test_rates_plot_legend_covers_no_bar(tmp_path):
    """Every group's bars stay clear of the legend, even with rates near 1."""
    from matplotlib.figure import Figure

    from fairpca.tasks.mlflow_evaluator import plot_group_rates

    groups = pd.DataFrame({"attribute": ["sex"] * 4 + ["race"] * 2,
                           "group": ["a", "b", "c", "d", "x", "y"],
                           "selection_rate": [0.99, 0.98, 0.97, 0.96, 1.0, 0.9],
                           "tpr": [1.0, 0.99, 1.0, 0.98, 1.0, 1.0]})  # fmt: skip
    captured = {}
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        captured["figure"] = self
        return original(self, *args, **kwargs)

    Figure.savefig = keep
    try:
        plot_group_rates(groups, tmp_path / "rates.png")
    finally:
        Figure.savefig = original
    figure = captured["figure"]
    renderer = figure.canvas.get_renderer()
    (legend,) = figure.legends
    box = legend.get_window_extent(renderer)
    bars = [patch for axes in figure.axes for patch in axes.patches]
    assert len(bars) == 12
    assert not any(box.overlaps(bar.get_window_extent(renderer)) for bar in bars)


def test_fit_and_sweep_lambda_match_a_direct_computation():
    frame = user_data(seed=1)
    X = frame[["x_proxy", "x_other"]].to_numpy()
    X = np.hstack([X, np.random.default_rng(1).normal(size=(len(X), 3))])
    y, sex = frame["label"].to_numpy(), frame["sex"].to_numpy()
    rep = fit_fair_representation.fn(X, y, sex, n_components=2)
    estimator = rep.estimator
    table = sweep_lambda.fn(rep, X, y, X, y, sex, lambdas=[0.0, 1.0], n_resamples=200)
    assert list(table["lambda"]) == [0.0, 1.0]
    assert estimator.get_params()["tradeoff"] == 0.0  # left as it was
    features = estimator.set_params(tradeoff=1.0).transform(X)
    y_pred = clone(LogisticRegression(max_iter=1000)).fit(features, y).predict(features)
    estimator.set_params(tradeoff=0.0)
    direct = group_fairness(y, y_pred, sex, min_group_size=30)
    assert abs(table.loc[1, "dp_difference"] - direct.dp_difference) <= 1e-12
    assert table.loc[0, "dp_difference"] < table.loc[1, "dp_difference"]  # fair features
    assert {"dp_difference.ci95_low", "accuracy.ci95_high"} <= set(table.columns)
    with pytest.raises(ValueError, match=matching(NO_TRADEOFF, estimator="PCA")):
        sweep_lambda.fn(
            fit_fair_representation.fn(X, y, sex, variant="pca"), X, y, X, y, sex, lambdas=[0.0]
        )


def test_text_labels_are_swept_as_their_positive_class():
    """``pos_label`` decides the positive class for the classifier, every metric and every
    standard error: text labels give the rows of their 0/1 coding, and the other class as
    positive gives other selection-rate ratios and errors."""
    rng = np.random.default_rng(0)
    X, s = rng.normal(size=(400, 4)), rng.choice(["a", "b", "c"], 400)
    y = (X[:, 0] + rng.normal(size=400) > 0).astype(int)
    rep = fit_fair_representation.fn(X, y, s, n_components=2)
    text = np.where(y == 1, "approved", "denied")
    coded = sweep_lambda.fn(rep, X, y, X, y, s, lambdas=[0, 0.5])
    named = sweep_lambda.fn(rep, X, text, X, text, s, lambdas=[0, 0.5], pos_label="approved")
    columns = [c for c in coded.columns if c not in ("classifier_seconds",)]
    pd.testing.assert_frame_equal(named[columns], coded[columns])
    flipped = sweep_lambda.fn(rep, X, y, X, y, s, lambdas=[0], pos_label=0).iloc[0]
    ratio = "selection_rate_ratio.se"
    assert flipped[ratio] != pytest.approx(coded[ratio].iloc[0])
    with pytest.raises(ValueError, match="pos_label"):
        sweep_lambda.fn(rep, X, text, X, text, s, lambdas=[0])
    with pytest.raises(ValueError, match="lambdas"):
        sweep_lambda.fn(rep, X, y, X, y, s, lambdas=[-1])


def test_each_variant_fits_where_the_rows_allow_it():
    """Equal opportunity on text labels with their ``pos_label``; the kernel variant on fewer
    rows than its default landmarks; ``n_components`` capped at the largest k the groups'
    constraints leave (4 columns, 3 groups: 2)."""
    rng = np.random.default_rng(1)
    X, s = rng.normal(size=(300, 4)), rng.choice(["a", "b", "c"], 300)
    y = np.where(X[:, 0] + rng.normal(size=300) > 0, "yes", "no")
    eo = fit_fair_representation.fn(X, y, s, variant="fair_pca_eo", n_components=2, pos_label="yes")
    positive = y == "yes"
    F = eo.estimator.transform(X[positive])
    means = [F[s[positive] == g].mean(axis=0) for g in ("a", "b", "c")]
    assert np.allclose(means[0], means[1], atol=1e-10) and np.allclose(
        means[0], means[2], atol=1e-10
    )
    with pytest.raises(ValueError, match="pos_label"):
        fit_fair_representation.fn(X, y, s, variant="fair_pca_eo", n_components=2)
    kernel = fit_fair_representation.fn(X, y, s, variant="fair_kernel_pca", n_components=2)
    assert kernel.estimator.n_landmarks == 300
    assert fit_fair_representation.fn(X, y, s, n_components=10).estimator.n_components_ == 2


def test_evaluate_model_fairness_on_an_object_logs_to_a_given_run(mlflow_store, tmp_path):
    uri, client = mlflow_store
    frame = user_data(seed=2)
    model = LogisticRegression().fit(frame[["x_proxy", "x_other"]], frame["label"])
    experiment = client.create_experiment(f"object-{uuid.uuid4().hex}", tmp_path.as_uri())
    run_id = client.create_run(experiment).info.run_id
    evaluation = evaluate_model_fairness.fn(
        model, frame, target="label", sensitive_features=["sex"], tracking_uri=uri, run_id=run_id
    )
    direct = group_fairness(
        frame["label"], model.predict(frame[["x_proxy", "x_other"]]), frame["sex"]
    )
    assert evaluation.metrics["dp_difference"] == direct.dp_difference
    assert client.get_run(run_id).data.metrics == pytest.approx(evaluation.metrics, abs=0.0)
    assert list(evaluation.groups["group"]) == ["F", "M"]
    files = write_fairness_report.fn(evaluation, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        p.name for p in files.values()
    )
    assert log_fairness_to_mlflow.fn(evaluation, tracking_uri=uri, run_id=run_id) == run_id
    with pytest.raises(ValueError, match="target column 'y' not in data"):
        evaluate_model_fairness.fn(model, frame, target="y", sensitive_features=["sex"])
    with pytest.raises(mlflow.exceptions.MlflowException, match=r"\['age'\] not found"):
        evaluate_model_fairness.fn(model, frame, target="label", sensitive_features=["age"])


def test_fairness_report_shows_dollar_labels_as_written(
    tmp_path, saved_figures, dollar_labels, drawn_literally
):
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"x": rng.normal(size=300), "income": np.resize(dollar_labels, 300)})
    frame["label"] = (frame["x"] + rng.normal(size=300) > 0).astype(int)
    model = LogisticRegression().fit(frame[["x"]], frame["label"])
    evaluation = evaluate_model_fairness.fn(
        model, frame, target="label", sensitive_features=["income"], n_resamples=50
    )
    files = write_fairness_report.fn(evaluation, tmp_path / "out")
    assert drawn_literally(saved_figures[-1], dollar_labels)
    assert files["fairness_rates"].stat().st_size > 0
    report = files["fairness_report"].read_text()
    # Markdown: every "$" escaped, so no renderer starts math (GitHub's does at "$...$").
    assert "| \\$50k-\\$100k |" in report and "| \\$x^\\$ band |" in report
