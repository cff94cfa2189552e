"""The audit config in sections (``fairpca.flows.config``): one name and one default per
concept, the flat form of earlier files, what validating writes (nothing), what it imports."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest
from messages import matching
from pydantic import ValidationError

from fairpca.flows.config import (
    GIVEN_TWICE,
    AuditConfig,
    RetrainConfig,
    leaf_fields,
    section_of_key,
)

SECTIONS = {
    "source": {"dataset", "data", "label", "positive_label", "sensitive", "keep", "drop", "sep",
               "data_dir", "leakage_threshold", "proxy_threshold", "group_column"},
    "split": {
        "train_share", "validation_share", "test_share", "n_train", "n_validation", "n_test",
        "search_rows",
    },
    "representation": {"k", "k_grid", "variants", "equalize_covariance", "lambdas",
                       "min_category_count", "metric_max_rows"},
    "evaluation": {"classifiers", "logreg_C", "svc_max_train_rows", "min_group_size",
                   "allow_small_groups", "n_bootstrap"},
    "selection": {"policy", "thresholds", "gate", "select_by", "min_accuracy_gain",
                  "min_balanced_accuracy_margin", "min_positive_rate_ratio",
                  "max_one_class_share", "certify_factor", "cv_below_rows", "cv_folds",
                  "cv_repeats", "allow_row_storing_models", "promote_dominated",
                  "sensitive_at_prediction", "randomized_decisions"},
    "tracking": {"tracking_uri", "experiment_name", "model_name", "champion_alias",
                 "register_model", "mlflow_retries", "mlflow_retry_backoff"},
    "output": {"output_dir", "run_name"},
}  # fmt: skip


def test_the_config_is_in_sections_and_each_key_has_one_place():
    assert set(AuditConfig.model_fields) == {"seed", "dask_address", *SECTIONS}
    for name, keys in SECTIONS.items():
        assert set(AuditConfig.model_fields[name].annotation.model_fields) == keys, name
    assert set(RetrainConfig.model_fields) - set(AuditConfig.model_fields) == {"promotion"}
    names = [path[-1] for path in leaf_fields(RetrainConfig)]
    assert len(names) == len(set(names))  # unique: a flat key or a flat param has one meaning
    assert section_of_key(AuditConfig)["min_group_size"] == "evaluation"


def test_the_flat_form_of_earlier_files_is_the_same_config():
    flat = AuditConfig(dataset="adult", k=3, min_group_size=40, thresholds={"min_accuracy": 0.6})
    nested = AuditConfig(
        source={"dataset": "adult"},
        representation={"k": 3},
        evaluation={"min_group_size": 40},
        selection={"thresholds": {"min_accuracy": 0.6}},
    )
    assert flat == nested and flat.selection.thresholds.max_dp_difference == 0.05
    retrain = RetrainConfig(dataset="adult", accuracy_tolerance=0.02)
    assert retrain.promotion.accuracy_tolerance == 0.02
    twice = matching(GIVEN_TWICE, key="k", section="representation")
    with pytest.raises(ValidationError, match=twice):
        AuditConfig(dataset="adult", k=3, representation={"k": 4})


def test_flat_params_keep_their_names():
    params = AuditConfig(dataset="adult", k=3).flat_params()
    assert params["k"] == "3" and params["dataset"] == "adult" and params["seed"] == "0"
    assert params["min_group_size"] == "30" and params["min_category_count"] == "30"
    assert params["thresholds.max_dp_difference"] == "0.05"
    assert not [key for key in params if key.split(".")[0] in SECTIONS]


def test_suppression_and_pooling_are_two_settings_with_one_default_each():
    """``min_group_size`` (no per-group number below it) and ``min_category_count`` (rarer
    categories pooled, never in the input example) are set apart; each default is written
    once and every function defaulting to it reads that constant."""
    from fairpca.datasets import MIN_CATEGORY_COUNT, make_preprocessor
    from fairpca.flows.gate import GatePolicy
    from fairpca.tasks import DEFAULT_MIN_GROUP_SIZE
    from fairpca.tasks.mlflow_evaluator import CONFIG_DEFAULTS
    from fairpca.tasks.mlflow_logging import input_example
    from fairpca.tasks.public import evaluate_model_fairness, sweep_lambda
    from fairpca.tasks.represent import fit_preprocessor

    assert DEFAULT_MIN_GROUP_SIZE == 30 and MIN_CATEGORY_COUNT == 30
    config = AuditConfig(dataset="adult", min_group_size=50)
    assert config.evaluation.min_group_size == 50
    assert config.representation.min_category_count == MIN_CATEGORY_COUNT
    assert CONFIG_DEFAULTS["min_group_size"] == DEFAULT_MIN_GROUP_SIZE
    assert GatePolicy.model_fields["min_group_size"].default == DEFAULT_MIN_GROUP_SIZE
    for task in (evaluate_model_fairness, sweep_lambda):
        default = inspect.signature(task.fn).parameters["min_group_size"].default
        assert default == DEFAULT_MIN_GROUP_SIZE, task
    for function in (input_example, fit_preprocessor, make_preprocessor):
        function = getattr(function, "fn", function)
        assert inspect.signature(function).parameters["min_category_count"].default == 30


def test_the_input_example_shows_only_categories_the_encoder_keeps():
    import pandas as pd

    from fairpca.tasks.mlflow_logging import PLACEHOLDER_CATEGORY, input_example

    X = pd.DataFrame({"job": ["a"] * 35 + ["b"] * 25})
    assert input_example(X)["job"].tolist() == ["a", PLACEHOLDER_CATEGORY]
    assert input_example(X, min_category_count=20)["job"].tolist() == ["a", "b"]


def test_the_group_mean_minimum_has_its_own_name():
    from fairpca import _groups

    assert _groups.MIN_ROWS_PER_GROUP == 2 and not hasattr(_groups, "MIN_GROUP_SIZE")


def test_validating_a_config_writes_no_environment_variable(monkeypatch):
    from fairpca.flows.config import resolve_tracking_uri

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    config = AuditConfig(dataset="adult", tracking_uri="https://ann:pw@mlflow.example")
    assert dict(os.environ) == before
    assert "pw" not in config.model_dump_json() and "pw" not in str(config.flat_params())
    assert resolve_tracking_uri(config.tracking.tracking_uri) == "https://mlflow.example"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "pw"  # connecting moves them


def test_the_config_module_imports_neither_the_registry_nor_the_model_card():
    code = (
        "import sys, fairpca.flows.config; "
        "print(sorted(m for m in sys.modules if m.startswith('fairpca.tasks.') and m.split('.')[2]"
        " in {'registry', 'model_card', 'mlflow_logging'}), 'mlflow' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["[]", "False"]


def test_the_audit_and_the_gate_policy_file_include_one_rule_class():
    """The gate's policy file and the audit's ``selection`` section take the gate rules from
    one class: the same fields, defaults and bounds (a copy had drifted: lt vs le)."""
    from fairpca.flows.config import GateRules, SelectionConfig
    from fairpca.flows.gate import GatePolicy

    for model in (SelectionConfig, GatePolicy):
        assert issubclass(model, GateRules)
        for name, field in GateRules.model_fields.items():
            assert repr(model.model_fields[name]) == repr(field), (model, name)
    reference = {"path": "reference.csv", "label": "y", "sensitive": ["sex"]}
    for value in (0.5, -0.1):
        with pytest.raises(ValidationError):
            SelectionConfig(min_balanced_accuracy_margin=value)
        with pytest.raises(ValidationError):
            GatePolicy(model="m", reference=reference, min_balanced_accuracy_margin=value)
    policy = GatePolicy(model="m", reference=reference, policy="four_fifths+demographic_parity")
    assert policy.policy == SelectionConfig(policy="four_fifths+demographic_parity").policy


@pytest.mark.parametrize("model", [AuditConfig, RetrainConfig])
def test_every_option_has_its_description_in_the_flow_parameter_schema(model):
    """Each field documents itself (its attribute docstring): the command line's help and
    Prefect's deployment parameter form read it from the schema."""
    fields = leaf_fields(model)
    assert fields and all(info.description and info.description.strip() for info in fields.values())
    schema = model.model_json_schema()
    described = [
        prop
        for section in schema["$defs"].values()
        for prop in section.get("properties", {}).values()
    ]
    assert described and all(prop.get("description") for prop in described)
