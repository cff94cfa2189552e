"""Every row, at a cost that does not follow the table: a real audit whose wide search runs on
a sample hands its shortlist to every row, and the model it registers is fitted on every
training row and judged on every validation row. Real flow, real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = [pytest.mark.flow, pytest.mark.slow]

pytest.importorskip("mlflow")


def test_a_search_on_a_sample_registers_the_model_fitted_on_every_training_row(
    prefect_harness, mlflow_store, tmp_path
):
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig
    from fairpca.tasks.data import load_source, split_data
    from fairpca.tasks.trust import load_skops_pipeline

    config = AuditConfig(
        dataset="adult", k=3, variants=["pca", "fair_pca"], lambdas=[0.0, 0.125],
        classifiers=["logreg"], n_train=1500, n_validation=1000, n_test=1000, search_rows=500,
        metric_max_rows=300, n_bootstrap=200, tracking_uri=mlflow_store[0],
        output_dir=tmp_path / "out", model_name=f"rows-{tmp_path.name}",
    )  # fmt: skip
    result = fairness_audit(config)
    out = Path(result.output_dir)
    record = json.loads((out / "audit.json").read_text())
    assert record["selection"]["split"] == {"n_train": 1500, "n_validation": 1000, "n_test": 1000}
    searched = pd.read_csv(out / "metrics.csv")  # the wide search, on the sample
    shortlist = pd.read_csv(out / "shortlist.csv")  # its best, on every row
    assert 0 < len(shortlist) <= len(searched)
    chosen = record["selection"]["chosen"]
    notes = [" ".join(r["facts"]) for r in record["decision"]["reasons"] if r["kind"] == "note"]
    assert any("refitted on all 1,500 training rows" in note for note in notes)

    pipeline = load_skops_pipeline(out / "model")  # the model the audit saved and registers
    split = split_data.fn(
        load_source(config.source), config.split, config.source, seed=config.seed,
        min_group_size=config.evaluation.min_group_size,
    )  # fmt: skip
    encoded = pipeline.named_steps["preprocess"].transform(split.X_train)
    np.testing.assert_allclose(
        pipeline.named_steps["represent"].mean_, np.asarray(encoded).mean(axis=0), atol=1e-10
    )
    row = shortlist[
        (shortlist["variant"] == chosen["variant"])
        & (shortlist["classifier"] == chosen["classifier"])
    ]
    accuracy = np.mean(pipeline.predict(split.X_validation) == split.y_validation)
    assert np.isclose(row["accuracy"].to_numpy(), accuracy).any()


def test_a_large_table_runs_its_refits_and_references_one_after_another_with_the_same_verdict(
    prefect_harness, mlflow_store, tmp_path, monkeypatch
):
    """Above ``SIDE_BY_SIDE_MAX_BYTES`` of encoded training rows the stages that copy them
    (the shortlist's refits, the references) run one after another: the peak memory is the
    larger of the two, not their sum; what they compute is the same."""
    from fairpca.flows import audit
    from fairpca.flows.config import AuditConfig
    from fairpca.tasks import stages, sweep

    def verdict(name: str) -> dict:
        config = AuditConfig(
            dataset="adult", k=3, variants=["pca", "fair_pca"], lambdas=[0.0, 0.125],
            classifiers=["logreg"], n_train=1500, n_validation=1000, n_test=1000,
            search_rows=500, metric_max_rows=300, n_bootstrap=200,
            tracking_uri=mlflow_store[0], output_dir=tmp_path / name,
            model_name=f"rows-{name}-{tmp_path.name}", register_model=False,
        )  # fmt: skip
        record = audit.fairness_audit(config).record
        references = [(r.name, r.config, r.test, r.meets_gate) for r in record.references]
        # the record says whether each reference meets the gate on the validation rows
        assert all(isinstance(r.meets_gate, bool) for r in record.references)
        return {"chosen": record.selection.chosen, "references": references}

    submitted = []
    monkeypatch.setattr(sweep.refit_shortlist, "submit", lambda *a: submitted.append(a))
    monkeypatch.setattr(stages.reference_mitigations, "submit", lambda *a: submitted.append(a))
    monkeypatch.setattr(stages, "SIDE_BY_SIDE_MAX_BYTES", 0)
    one_after_another = verdict("sequential")
    assert submitted == []  # nothing ran beside another stage
    monkeypatch.undo()
    assert verdict("side-by-side") == one_after_another


def test_the_audit_calls_blas_with_one_thread_while_its_tasks_run_side_by_side(
    monkeypatch, tmp_path
):
    """Two tasks each calling a multi-threaded BLAS oversubscribe the cores (OpenBLAS's
    threads spin while they wait): the whole run holds one BLAS thread per call, whatever
    the process had, and gives the process its setting back afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from fairpca.flows import audit
    from fairpca.flows.config import AuditConfig

    def blas_threads() -> int:
        return max(pool["num_threads"] for pool in threadpool_info())

    seen = []
    monkeypatch.setattr(audit, "_run_audit", lambda *args, **kwargs: seen.append(blas_threads()))
    with threadpool_limits(limits=2):
        audit.run_audit(AuditConfig(dataset="german", output_dir=tmp_path))
        assert blas_threads() == 2
    assert seen == [1]
