"""One default registering audit does each piece of work once, and its flow reads as a few
stage calls (counted by a profile hook on every thread, through the real flow, store and
registry).

One MLflow client serves the whole command. The results are written and sealed before any
network call; the champion is looked up and the audit's MLflow run started (so its id is
known); then the promotion is decided and, from it, the one verdict every surface shows (the
report, the run and version descriptions, the model card, the Prefect artifact and log line,
the final state's message). So the verdict is built once, the report written once (with the
promotion), and the seal written twice: before the look-up, and after the promotion with the
run's id signed into it.
"""

from __future__ import annotations

import collections
import sys
import threading
from pathlib import Path

import pytest

pytestmark = [pytest.mark.flow, pytest.mark.slow]

mlflow = pytest.importorskip("mlflow")

PACKAGE = Path(__file__).resolve().parents[2]  # the repository root is the package fairpca
TASKS, FLOWS = str(PACKAGE / "tasks"), str(PACKAGE / "flows")
TASKS_MAX = 25  # distinct functions of tasks/ that flows/ calls in one audit


class Profile:
    """Calls counted by a profile hook: of ``functions`` (by their code objects), and the
    distinct functions of tasks/ that code of flows/ calls, directly or as a Prefect task
    (called or submitted)."""

    def __init__(self, *functions):
        self.codes = {function.__code__: function.__qualname__ for function in functions}
        self.counts: collections.Counter = collections.Counter()
        self.stages: set[str] = set()
        self.lock = threading.Lock()

    def called_from_flows(self, frame) -> str | None:
        from prefect import Task

        code = frame.f_code
        if code.co_filename.startswith(TASKS):
            return f"{Path(code.co_filename).stem}.{code.co_qualname}"
        task = frame.f_locals.get("self") if code.co_name in ("__call__", "submit") else None
        if isinstance(task, Task) and task.fn.__code__.co_filename.startswith(TASKS):
            return f"{Path(task.fn.__code__.co_filename).stem}.{task.fn.__qualname__}"
        return None

    def hook(self, frame, event, _arg):
        if event != "call":
            return
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename.startswith(FLOWS):
            name = self.called_from_flows(frame)
            if name is not None:
                with self.lock:
                    self.stages.add(name)
        if frame.f_code in self.codes:
            with self.lock:
                self.counts[self.codes[frame.f_code]] += 1

    def __enter__(self):
        self.previous = sys.getprofile()
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)
        return self

    def __exit__(self, *_exc):
        sys.setprofile(self.previous)
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


@pytest.fixture(scope="module")
def profiled_audit(prefect_harness, mlflow_store, tmp_path_factory):
    """One registering audit under the profile hook: its result and the profile."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.tasks import mlflow_store as store_module
    from fairpca.tasks import report, trust

    config = registering_config(mlflow_store, tmp_path_factory.mktemp("once"))
    counted = (
        report.build_verdict, report.write_report, trust._write_seal, store_module.mlflow_client
    )  # fmt: skip
    with Profile(*counted) as profile:
        result = fairness_audit(config)
    return result, profile


def test_a_registering_audit_does_each_piece_of_work_once(profiled_audit):
    result, profile = profiled_audit
    counts = profile.counts
    assert result.model_version is not None and result.champion_moved  # a registering audit
    print(f"counted in one registering audit: {dict(counts)}")  # shown with -s
    assert counts["mlflow_client"] == 1, counts
    assert counts["build_verdict"] == 1, counts
    assert counts["write_report"] == 1, counts  # after the promotion
    assert counts["_write_seal"] <= 2, counts  # before the look-up, after the promotion


def test_the_flow_calls_few_functions_of_tasks(profiled_audit):
    _result, profile = profiled_audit
    assert profile.stages  # the hook saw the flow's calls
    assert len(profile.stages) <= TASKS_MAX, "\n".join(sorted(profile.stages))
