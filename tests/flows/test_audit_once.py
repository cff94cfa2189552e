"""One default registering audit does each piece of work once (counted by a profile hook on
every thread, through the real flow, store and registry): one MLflow client for the whole
command, and one verdict per report written.

The results are written and sealed before any network call, and the promotion is decided
after the champion look-up (over the network): so the report is written twice (without, then
with the promotion), each from its own verdict (the second one is the one every surface after
the promotion shows: the report, the run and version descriptions, the model card, the Prefect
artifact and log line, the final state's message); the seal is written before the look-up,
after the promotion, and once more when the MLflow run is known (its id is signed into it)."""

from __future__ import annotations

import collections
import sys
import threading
from contextlib import contextmanager

import pytest

pytestmark = [pytest.mark.flow, pytest.mark.slow]

mlflow = pytest.importorskip("mlflow")


@contextmanager
def counting_calls(*functions):
    """Count the calls of ``functions`` (by their code objects) on every thread started
    while the block runs, and on this one."""
    codes = {function.__code__: function.__qualname__ for function in functions}
    counts: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def hook(frame, event, _arg):
        if event == "call" and frame.f_code in codes:
            with lock:
                counts[codes[frame.f_code]] += 1

    previous = sys.getprofile()
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)


def registering_config(store, tmp_path):
    """The cheapest audit that registers and promotes a version (as ``test_audit.py``'s)."""
    from fairpca.flows.config import AuditConfig

    return AuditConfig(
        dataset="adult", k=4, variants=["pca", "fair_pca"], lambdas=[0.0, 1.0],
        classifiers=["logreg"], n_train=1500, n_validation=1000, n_test=1000,
        metric_max_rows=300, promote_dominated=True,
        thresholds={"max_dp_difference": 0.15, "min_selection_rate_ratio": 0.5},
        tracking_uri=store[0], output_dir=tmp_path / "out",
        model_name=f"fairpca-test-{tmp_path.name}",
    )  # fmt: skip


def test_a_registering_audit_does_each_piece_of_work_once(prefect_harness, mlflow_store, tmp_path):
    from fairpca.flows.audit import fairness_audit
    from fairpca.tasks import mlflow_store as store_module
    from fairpca.tasks import report, trust

    config = registering_config(mlflow_store, tmp_path)
    with counting_calls(
        report.build_verdict, report.write_report, trust._write_seal, store_module.mlflow_client
    ) as counts:
        result = fairness_audit(config)
    assert result.model_version is not None  # a registering audit
    assert counts["mlflow_client"] == 1, counts
    assert counts["write_report"] == 2, counts  # before the look-up, after the promotion
    assert counts["build_verdict"] == counts["write_report"], counts  # one for each
    assert counts["_write_seal"] <= 3, counts
