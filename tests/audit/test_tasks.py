"""Unit tests of the task bodies (no orchestration: plain functions and ``task.fn``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from fairpca.flows.config import DEFAULT_LAMBDAS, AuditConfig
from fairpca.tasks.classify import make_classifier
from fairpca.tasks.data import split_rows
from fairpca.tasks.evaluate import classifier_metrics
from fairpca.tasks.policy import GatePolicy
from fairpca.tasks.registry import resolved_model_name
from fairpca.tasks.report import markdown_table
from fairpca.tasks.select import gate_failures, select_candidate


def test_default_lambdas_are_the_papers():
    assert tuple(round((i / 10) ** 3, 6) for i in range(11)) == DEFAULT_LAMBDAS
    assert DEFAULT_LAMBDAS[0] == 0.0 and DEFAULT_LAMBDAS[-1] == 1.0


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_split_rows_is_seeded_disjoint_sized_and_stratified(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    y = (rng.random(n) < 0.25).astype(int)
    groups = pd.DataFrame({"g": rng.choice(["a", "b"], size=n, p=[0.3, 0.7])})
    kwargs = {"n_train": 1000, "n_validation": 500, "n_test": 400, "seed": seed}
    parts = split_rows(y, groups, **kwargs)
    again = split_rows(y, groups, **kwargs)
    for part, same in zip(parts, again, strict=True):
        np.testing.assert_array_equal(part, same)
    assert [len(part) for part in parts] == [1000, 500, 400]
    assert len(set(np.concatenate(parts))) == 1900  # disjoint
    full = pd.Series(y).astype(str) + groups["g"].to_numpy()
    expected = full.value_counts(normalize=True).sort_index()
    for part in parts:
        share = full.iloc[part].value_counts(normalize=True).sort_index()
        np.testing.assert_allclose(share, expected, atol=0.005)


@pytest.mark.parametrize("rare", [1, 2, 3])
def test_split_rows_keeps_a_tiny_group_without_aborting(rare):
    y = np.array([0, 1] * 50)
    groups = pd.DataFrame({"g": ["a"] * (100 - rare) + ["rare"] * rare})
    train, validation, test = split_rows(y, groups, n_train=60, n_validation=20, n_test=20, seed=0)
    assert (len(train), len(validation), len(test)) == (60, 20, 20)
    rare_rows = np.flatnonzero(groups["g"] == "rare")
    assert set(rare_rows) <= set(train)  # strata of < 3 rows cannot reach all three parts


def test_split_rows_scales_sizes_down_to_the_data():
    y = np.array([0, 1] * 500)
    groups = pd.DataFrame({"g": ["a", "b"] * 500})
    parts = split_rows(y, groups, n_train=5000, n_validation=2500, n_test=2500, seed=0)
    assert [len(part) for part in parts] == [500, 250, 250]


def test_split_rows_rejects_too_few_rows():
    with pytest.raises(ValueError, match="too few"):
        split_rows(
            np.array([0, 1, 0]),
            pd.DataFrame({"g": [0, 1, 0]}),
            n_train=20,
            n_validation=20,
            n_test=20,
            seed=0,
        )


def test_classifier_metrics_match_fairlearn():
    from fairlearn.metrics import MetricFrame, selection_rate, true_positive_rate

    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    pred = rng.integers(0, 2, n)
    sensitive = pd.DataFrame({"sex": rng.choice(["F", "M"], n), "race": rng.choice(list("xyz"), n)})
    out = classifier_metrics(y, pred, sensitive)
    frame = MetricFrame(
        metrics={"sr": selection_rate, "tpr": true_positive_rate},
        y_true=y,
        y_pred=pred,
        sensitive_features=sensitive,
    )
    assert out["accuracy"] == pytest.approx(np.mean(y == pred), abs=1e-15)
    assert out["dp_difference.intersection"] == pytest.approx(frame.difference()["sr"], abs=1e-15)
    assert out["eo_difference.intersection"] == pytest.approx(frame.difference()["tpr"], abs=1e-15)
    for (sex, race), row in frame.by_group.iterrows():
        assert out[f"selection_rate.sex:{sex}/race:{race}"] == pytest.approx(row["sr"], abs=1e-15)
        assert out[f"tpr.sex:{sex}/race:{race}"] == pytest.approx(row["tpr"], abs=1e-15)
    marginal = MetricFrame(
        metrics=selection_rate, y_true=y, y_pred=pred, sensitive_features=sensitive["race"]
    )
    assert out["dp_difference.race"] == pytest.approx(marginal.difference(), abs=1e-15)
    # the headline is the worst attribute (each attribute separately, the worst reported)
    assert out["dp_difference"] == max(out["dp_difference.sex"], out["dp_difference.race"])


def test_classifier_regularization_follows_appendix_c1():
    assert pytest.approx(1 / (2 * 5000 * 0.01)) == make_classifier("logreg", 5000, 0).C
    assert pytest.approx(1 / (2 * 5000 * 0.00005)) == make_classifier("rbf_svc", 5000, 0).C
    assert make_classifier("mlp", 10, 0).hidden_layer_sizes == (10, 5)
    with pytest.raises(ValueError, match="unknown classifier"):
        make_classifier("tree", 10, 0)


def _row(variant, lam, accuracy, dp, eo, *, share=0.8, width=0.02):
    return {"variant": variant, "lambda": lam, "classifier": "logreg", "accuracy": accuracy,
            "accuracy.ci95_low": accuracy - width, "accuracy.ci95_high": accuracy + width,
            "dp_difference": dp, "dp_difference.ci95_low": max(0, dp - width),
            "dp_difference.ci95_high": dp + width, "eo_difference": eo,
            "eo_difference.ci95_low": max(0, eo - width), "eo_difference.ci95_high": eo + width,
            "one_class_share": share, "balanced_accuracy": accuracy - 0.05,
            "balanced_accuracy.ci95_low": accuracy - 0.05 - width,
            "balanced_accuracy.ci95_high": accuracy - 0.05 + width,
            "positive_rate": 1 - share, "base_rate": 0.24, "selection_rate_ratio": 0.9}  # fmt: skip


def _table():
    return pd.DataFrame(
        [
            _row("pca", np.nan, 0.85, 0.20, 0.20),
            _row("fair_pca", 0.0, 0.80, 0.01, 0.02),
            _row("fair_pca", 1.0, 0.82, 0.04, 0.05),
        ]
    )


def _config(**values):
    """The DP and EO pair these tests were written for (the former fixed gate)."""
    return AuditConfig(dataset="adult", **{"policy": "demographic_parity+equal_opportunity",
                                           **values}).selection  # fmt: skip


def test_select_candidate_prefers_the_most_accurate_passing_one():
    config = _config(thresholds={"max_dp_difference": 0.07}, gate="upper_bound")
    chosen, decision, _ = select_candidate(_table(), 0.76, config)
    assert decision.promote and chosen["lambda"] == 1.0 and chosen["accuracy"] == 0.82


def test_select_candidate_without_passing_candidates_does_not_promote():
    config = _config(thresholds={"max_dp_difference": 0.001}, gate="point")
    chosen, decision, _ = select_candidate(_table(), 0.76, config)
    assert not decision.promote
    assert chosen["dp_difference"] == 0.01  # least violating
    assert any("DP difference 0.0100 > max 0.001" in r for r in decision.reasons)


def test_gate_on_the_upper_bound_rejects_what_the_point_estimate_passes():
    """DP 0.04 passes max 0.05 as a point, its 95% upper bound 0.06 does not."""
    table = pd.DataFrame([_row("fair_pca", 0.125, 0.82, 0.04, 0.05)])
    thresholds = {"max_dp_difference": 0.05, "max_eo_difference": 0.10}
    point = _config(thresholds=thresholds, gate="point")
    upper = _config(thresholds=thresholds, gate="upper_bound")
    _, promoted, _ = select_candidate(table, 0.76, point)
    _, kept, _ = select_candidate(table, 0.76, upper)
    assert promoted.promote and not kept.promote
    assert "DP difference (95% upper bound) 0.0600 > max 0.05" in kept.reasons


def test_degenerate_candidates_are_not_eligible_and_nothing_is_promoted():
    """A constant classifier (DP = EO = 0) passes every fairness threshold; it is rejected."""
    constant = _row("fair_pca_s", 0.125, 0.7636, 0.0, 0.0, share=1.0)
    near_majority = _row("fair_pca_s", 1.0, 0.7650, 0.001, 0.0, share=0.97)
    unfair = _row("pca", np.nan, 0.85, 0.20, 0.20)
    config = _config()
    chosen, decision, eligible = select_candidate(
        pd.DataFrame([constant, near_majority, unfair]), 0.7608, config
    )
    assert not decision.promote and eligible
    assert chosen["variant"] == "pca"  # the only eligible candidate, for review
    assert any("are not eligible" in r and "nothing is promoted" in r for r in decision.reasons)
    from fairpca.tasks.select import ineligibility

    assert any(
        "predicts one class for 100.0%" in r for r in ineligibility(constant, 0.7608, config)
    )
    assert any("does not beat the majority" in r for r in ineligibility(near_majority, 0.7608,
                                                                        config))  # fmt: skip


def test_gate_failures_name_every_failure():
    row = _row("fair_pca", 0.0, 0.5, 0.3, 0.4)
    policy = GatePolicy.from_config(_config(thresholds={"min_accuracy": 0.6}, gate="point"))
    failures = gate_failures(row, policy)
    assert len(failures) == 3 and "accuracy 0.5000 < min 0.6" in failures


def test_transient_errors_are_told_apart():
    import requests
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, TEMPORARILY_UNAVAILABLE

    from fairpca.tasks.mlflow_logging import is_transient_mlflow_error

    assert is_transient_mlflow_error(requests.exceptions.ConnectionError("refused"))
    assert is_transient_mlflow_error(MlflowException("x", error_code=TEMPORARILY_UNAVAILABLE))
    assert is_transient_mlflow_error(
        MlflowException("API request to http://h failed: Max retries exceeded with url")
    )
    assert not is_transient_mlflow_error(MlflowException("bad", error_code=INVALID_PARAMETER_VALUE))
    assert not is_transient_mlflow_error(ValueError("bad value"))
    assert not is_transient_mlflow_error(None)
    assert is_transient_mlflow_error(RuntimeError("503 Server Error: Service Unavailable"))
    assert not is_transient_mlflow_error(ValueError("model sha256 9a5031c0 does not match"))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "exactly one data source"),
        ({"dataset": "adult", "data": "x.csv"}, "exactly one data source"),
        ({"data": "x.csv"}, "needs label"),
        ({"data": "x.txt", "label": "y", "sensitive": ["s"]}, ".csv or .parquet"),
        ({"dataset": "adult", "label": "y"}, "apply to a user data file"),
        ({"dataset": "census"}, "Input should be 'adult'"),
        ({"dataset": "adult", "lambdas": [-0.5]}, "finite and >= 0"),
        ({"dataset": "adult", "lambdas": []}, "at least one value"),
        ({"dataset": "adult", "variants": ["pca", "pca"]}, "twice"),
        ({"dataset": "adult", "variants": ["svd"]}, "Input should be"),
        ({"dataset": "adult", "k": 0}, "greater than or equal to 1"),
        ({"dataset": "adult", "thresholds": {"max_dp_difference": 2}}, "less than or equal"),
        ({"dataset": "adult", "colour": "red"}, "Extra inputs are not permitted"),
    ],
)
def test_config_validation_messages(values, message):
    with pytest.raises(ValidationError, match=message):
        AuditConfig(**values)


def test_config_defaults_and_flat_params():
    config = AuditConfig(dataset="adult")
    assert config.representation.k is None  # the audit fits min(10, the largest k the data allow)
    assert config.representation.lambdas == list(DEFAULT_LAMBDAS)
    assert config.selection.policy == "demographic_parity+four_fifths"
    assert config.representation.variants == ["pca", "fair_pca", "fair_pca_s", "fair_pca_eo"]
    assert (
        resolved_model_name(config.source, config.tracking.model_name)
        == "fairpca-adult-income_gt_50k-sex"
    )
    flat = config.flat_params()
    assert flat["thresholds.max_dp_difference"] == "0.05"
    assert flat["variants"] == "pca,fair_pca,fair_pca_s,fair_pca_eo"
    assert flat["data"] == "None"


def test_config_file_round_trip(tmp_path):
    from fairpca.flows.config import load_config_file

    path = tmp_path / "audit.yaml"
    path.write_text("dataset: german\nk: 3\nthresholds:\n  max_dp_difference: 0.1\n")
    config = AuditConfig(**load_config_file(path))
    assert config.representation.k == 3
    assert config.selection.thresholds.max_dp_difference == 0.1
    bad = tmp_path / "audit.toml"
    bad.write_text("k = 3")
    with pytest.raises(ValueError, match=r"\.json, \.yaml or \.yml"):
        load_config_file(bad)


def test_input_example_is_synthetic_and_has_no_sensitive_column():
    from fairpca.flows.audit import input_example

    X = pd.DataFrame({"age": [20.0, 30.0, 40.0, 50.0], "job": pd.Categorical(["a", "b", "b", "c"])})
    example = input_example(X, min_category_count=1)
    assert list(example.columns) == ["age", "job"] and len(example) == 2
    assert example["age"].tolist() == [35.0, 27.5]  # median and lower quartile
    assert example["job"].tolist() == ["b", "a"]  # most frequent categories


def test_make_representation_variants():
    from fairpca import FairPCA
    from fairpca.tasks.represent import make_representation, supports_tradeoff

    kwargs = {"equalize_covariance": 0.5, "seed": 0}
    assert not supports_tradeoff(make_representation("pca", 3, **kwargs))
    dp = make_representation("fair_pca", 3, **kwargs)
    eo = make_representation("fair_pca_eo", 3, **kwargs)
    s = make_representation("fair_pca_s", 3, **kwargs)
    assert isinstance(dp, FairPCA) and supports_tradeoff(dp)
    assert eo.constraint == "equal_opportunity"
    assert s.equalize_covariance == 0.5
    with pytest.raises(ValueError, match="unknown representation"):
        make_representation("ica", 3, **kwargs)


def test_sweep_fits_once_and_reuses_the_representation():
    from fairpca.tasks.data import Split
    from fairpca.tasks.evaluate import shared_mmd_sigma
    from fairpca.tasks.represent import fit_representation
    from fairpca.tasks.sweep import sweep_representation

    rng = np.random.default_rng(0)
    n, d = 400, 8
    s = pd.DataFrame({"g": rng.integers(0, 2, n)})
    Z = rng.normal(size=(n, d)) + 1.5 * s[["g"]].to_numpy()
    y = (Z[:, 0] + rng.normal(size=n) > 0.7).astype(int)
    split = Split(
        pd.DataFrame(Z[:300]), y[:300], s.iloc[:300].reset_index(drop=True),
        pd.DataFrame(Z[300:]), y[300:], s.iloc[300:].reset_index(drop=True),
        pd.DataFrame(Z[:0]), y[:0], s.iloc[:0],  # the sweep never reads test rows
    )  # fmt: skip
    config = AuditConfig(
        dataset="adult", k=3, lambdas=[0.0, 0.5], classifiers=["logreg", "linear_svm"]
    )
    rep = fit_representation.fn(
        "fair_pca", Z[:300], y[:300], split.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    components = rep.estimator.components_.copy()
    sigma = shared_mmd_sigma(Z[:300], 3, max_rows=200, seed=0)
    seen = []
    result = sweep_representation(
        rep, Z[:300], Z[300:], split, config.representation, config.evaluation, config.seed,
        sigma, lambda v, i, t: seen.append((i, t)),
    )  # fmt: skip
    assert seen == [(1, 2), (2, 2)]
    np.testing.assert_array_equal(rep.estimator.components_, components)  # not refitted
    assert rep.estimator.tradeoff == 0.0  # restored
    table = pd.DataFrame(result.rows)
    assert len(table) == 4 and set(table["n_features"]) == {3, 6}
    assert table.loc[table["lambda"] == 0.0, "mean_gap_train"].max() < 1e-10
    assert set(result.classifiers) == {(0, "logreg"), (0, "linear_svm"), (1, "logreg"),
                                       (1, "linear_svm")}  # fmt: skip


def test_markdown_table():
    frame = pd.DataFrame({"a": [1.23456, np.nan], "b": ["x", "y"]})
    assert markdown_table(frame).splitlines() == ["| a | b |", "|---|---|", "| 1.235 | x |",
                                                  "| - | y |"]  # fmt: skip


def test_logged_pipeline_equals_a_metadata_routed_pipeline_and_predicts_from_x_alone():
    """Fitting the steps one by one (as the audit does) gives the same pipeline as sklearn
    metadata routing of ``sensitive_features`` to FairPCA; prediction needs X only."""
    import sklearn
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    from fairpca import FairPCA
    from fairpca.datasets import load_german, make_preprocessor
    from fairpca.tasks.classify import fit_classifier
    from fairpca.tasks.data import Split
    from fairpca.tasks.pipeline import build_pipeline
    from fairpca.tasks.represent import fit_preprocessor, fit_representation
    from fairpca.tasks.sweep import SweepResult

    data = load_german()
    X, y, s = data.X, data.y.to_numpy(), data.sensitive
    split = Split(X, y, s, X.head(50), y[:50], s.head(50), X.head(50), y[:50], s.head(50))
    preprocessor, Z, _ = fit_preprocessor.fn(split)
    rep = fit_representation.fn("fair_pca", Z, y, s, k=4, equalize_covariance=0.5, seed=0)
    rep.estimator.set_params(tradeoff=0.5)
    classifier = fit_classifier("logreg", rep.estimator.transform(Z), y, seed=0)
    sweep = SweepResult("fair_pca", classifiers={(0, "logreg"): classifier})
    chosen = {"variant": "fair_pca", "lambda": 0.5, "lambda_index": 0, "classifier": "logreg"}
    ours = build_pipeline(preprocessor, {"fair_pca": rep}, {"fair_pca": sweep}, chosen)

    with sklearn.config_context(enable_metadata_routing=True):
        routed = Pipeline(
            [
                ("preprocess", make_preprocessor(X)),
                (
                    "represent",
                    FairPCA(n_components=4, tradeoff=0.5, random_state=0).set_fit_request(
                        sensitive_features=True
                    ),
                ),
                ("classify", LogisticRegression(C=1 / (2 * len(y) * 0.01), max_iter=1000)),
            ]
        ).fit(X, y, sensitive_features=s)
    np.testing.assert_array_equal(ours.predict(X), routed.predict(X))
    np.testing.assert_allclose(
        ours.decision_function(X), routed.decision_function(X), rtol=1e-6, atol=1e-8
    )


def test_report_renders_structured_sections_as_markdown_and_html():
    from fairpca.tasks.report import Bullets, Plot, Strong, render_html, render_markdown

    sections = [
        ("Decision", [Strong("do NOT promote"), Bullets(["DP 0.06 > max 0.05", "a < b"])]),
        ("Table", pd.DataFrame({"x": [1.0]})),
        ("Plot", Plot("trade-off")),
        ("Notes", "plain text"),
    ]
    markdown = render_markdown("T", sections, "tradeoff.png")
    assert "**do NOT promote**" in markdown and "- DP 0\\.06 &gt; max 0\\.05" in markdown
    assert "![trade\\-off](tradeoff.png)" in markdown  # user text escaped (markdown_text)
    page = render_html("T", sections, None)
    assert "<p><strong>do NOT promote</strong></p>" in page
    assert "<li>a &lt; b</li>" in page and "**" not in page and "- DP" not in page


def test_target_leakage_rule_reads_only_the_training_labels():
    """A column that predicts the label only on held-out rows is not excluded, and held-out
    labels cannot change which columns are excluded."""
    import warnings as _warnings
    from types import SimpleNamespace

    from fairpca.datasets import screen_columns
    from fairpca.tasks.data import screen_training_rows

    rng = np.random.default_rng(3)
    n = 600
    X = pd.DataFrame({"proxy": rng.normal(size=n), "noise": rng.normal(size=n)})
    y = rng.integers(0, 2, size=n)
    train = np.arange(150)
    source = SimpleNamespace(data="file.csv", keep=[], leakage_threshold=0.8, proxy_threshold=0.95)

    def excluded(labels):
        data = SimpleNamespace(
            X=X, sensitive=pd.DataFrame({"g": rng.choice(["a", "b"], size=n)}), screened={}
        )
        return screen_training_rows(data, labels, train, source, 30)

    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        before, _ = excluded(y)
        y_held_out_leaks = y.copy()
        y_held_out_leaks[150:] = (X["proxy"].to_numpy()[150:] > 0).astype(int)
        after, _ = excluded(y_held_out_leaks)
        on_all_rows = screen_columns(X, y_held_out_leaks).excluded
    assert before == after == {}
    assert "proxy" in on_all_rows  # the rule on every row would have read held-out labels
    y_train_leaks = y.copy()
    y_train_leaks[:150] = (X["proxy"].to_numpy()[:150] > 0).astype(int)
    with pytest.warns(UserWarning, match="proxy"):
        found, record = excluded(y_train_leaks)
    assert list(found) == ["proxy"]
    assert record == [
        {"column": "proxy", "rule": "target leakage", "score": 1.0, "action": "excluded"}
    ]


def test_single_row_groups_are_merged_into_the_largest_group_for_fitting():
    from fairpca.tasks.represent import merge_single_row_groups

    frame = pd.DataFrame({"race": ["a"] * 5 + ["b"] * 3 + ["c"], "sex": ["F", "M"] * 4 + ["F"]})
    merged = merge_single_row_groups(frame)
    assert merged["race"].value_counts().to_dict() == {"a": 6, "b": 3}
    assert merged["sex"].equals(frame["sex"])  # nothing to merge
    assert frame["race"].iloc[-1] == "c"  # the caller's frame is unchanged
