"""The audit's configuration (``fairpca.flows.config``): defaults, validation messages, files."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from fairpca.flows.config import DEFAULT_LAMBDAS, NOT_ONE_DATA_SOURCE, AuditConfig
from fairpca.tasks.record import resolved_model_name


def test_default_lambdas_are_the_papers():
    assert tuple(round((i / 10) ** 3, 6) for i in range(11)) == DEFAULT_LAMBDAS
    assert DEFAULT_LAMBDAS[0] == 0.0 and DEFAULT_LAMBDAS[-1] == 1.0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, re.escape(NOT_ONE_DATA_SOURCE)),
        ({"dataset": "adult", "data": "x.csv"}, re.escape(NOT_ONE_DATA_SOURCE)),
        ({"data": "x.csv"}, "needs label"),
        ({"data": "x.txt", "label": "y", "sensitive": ["s"]}, ".csv or .parquet"),
        ({"data": "x.tsv", "label": "y", "sensitive": ["s"]}, "Rename a text table to .csv"),
        ({"dataset": "adult", "label": "y"}, "apply to a user data file"),
        ({"dataset": "census"}, "Input should be 'adult'"),
        ({"dataset": "adult", "lambdas": [-0.5]}, "finite and >= 0"),
        ({"dataset": "adult", "lambdas": []}, "at least one value"),
        ({"dataset": "adult", "variants": ["pca", "pca"]}, "twice"),
        ({"dataset": "adult", "variants": ["svd"]}, "Input should be"),
        ({"dataset": "adult", "k": 0}, "greater than or equal to 1"),
        ({"dataset": "adult", "thresholds": {"max_dp_difference": 2}}, "less than or equal"),
        ({"dataset": "adult", "colour": "red"}, "Extra inputs are not permitted"),
        ({"dataset": "adult", "group_column": ""}, "at least 1 character"),
        ({"dataset": "adult", "group_column": "age", "keep": ["age"]}, "also given as keep"),
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


def test_a_glob_of_csv_parts_is_named_after_its_folder(tmp_path):
    parts = AuditConfig(data=str(tmp_path / "sales" / "*.csv"), label="y", sensitive=["s"],
                        dask_address="local")  # fmt: skip
    assert parts.source.name == "sales"
    assert AuditConfig(data="people.csv", label="y", sensitive=["s"]).source.name == "people"
