"""A panel (several rows per person) audited with ``group_column``: a real flow run on a real
MLflow SQLite store. Each person's rows stay in one part, the small validation part's
cross-validated choice runs on folds of whole persons, and the id is no feature of the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytestmark = [pytest.mark.flow, pytest.mark.slow]

pytest.importorskip("mlflow")


def _panel(n_people=240, years=6, seed=0) -> pd.DataFrame:
    """Person ``nr``, six years each: traits constant within a person, a label that moves."""
    rng = np.random.default_rng(seed)
    nr = np.repeat(np.arange(1000, 1000 + n_people), years)
    ability = np.repeat(rng.normal(size=n_people), years)
    schooling = np.repeat(rng.integers(8, 18, n_people), years)
    sex = np.repeat(rng.choice(["female", "male"], n_people, p=[0.4, 0.6]), years)
    hours = np.round(rng.normal(2000, 300, len(nr)))
    noise = rng.normal(size=len(nr))
    latent = ability + 0.25 * (schooling - 12) + 0.3 * (sex == "male") + noise
    return pd.DataFrame({
        "nr": nr, "year": np.tile(np.arange(1980, 1980 + years), n_people),
        "schooling": schooling, "hours": hours, "sex": sex, "high_wage": (latent > 0.5).astype(int),
    })  # fmt: skip


def test_a_panel_audit_keeps_each_person_in_one_part_and_the_id_out_of_the_model(
    prefect_harness, empty_store, tmp_path
):
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig
    from fairpca.tasks.data import load_source, split_data
    from fairpca.tasks.trust import load_skops_pipeline

    path = tmp_path / "wages.csv"
    _panel().to_csv(path, index=False)
    config = AuditConfig(
        data=path, label="high_wage", sensitive=["sex"], group_column="nr", k=2,
        variants=["pca", "fair_pca"], lambdas=[0.0, 1.0], classifiers=["logreg_tuned"],
        n_bootstrap=100, cv_repeats=1, metric_max_rows=300, tracking_uri=empty_store,
        output_dir=tmp_path / "out", model_name=f"panel-{tmp_path.name}",
    )  # fmt: skip
    result = fairness_audit(config)
    out = Path(result.output_dir)
    record = json.loads((out / "audit.json").read_text())
    assert "cross-validation" in record["certification"]["chosen_by"]  # folds of whole persons
    assert not any(entry["column"] == "nr" for entry in record.get("screening") or [])
    pipeline = load_skops_pipeline(out / "model")
    assert "nr" not in list(pipeline.named_steps["preprocess"].feature_names_in_)
    model = yaml.safe_load((out / "model" / "MLmodel").read_text())
    inputs = [column["name"] for column in json.loads(model["signature"]["inputs"])]
    assert "schooling" in inputs and "nr" not in inputs  # the logged model's inputs
    split = split_data.fn(load_source(config.source), config.split, config.source,
                          seed=config.seed, min_group_size=30)  # fmt: skip
    parts = [set(getattr(split, f"entity_{p}")) for p in ("train", "validation", "test")]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert (len(split.y_train), len(split.y_test)) == tuple(
        record["selection"]["split"][key] for key in ("n_train", "n_test")
    )
