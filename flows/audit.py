"""The ``fairness_audit`` flow: load and split -> encode -> fit the representations -> the
lambda sweep -> choose on validation rows -> evaluate on test rows -> one record, written and
sealed locally -> (only then, over the network) the champion look-up and the MLflow run
started -> the promotion decided, the one verdict built, the report written and the folder
sealed with the run -> MLflow (params, artifacts, model, registered version, alias).

:func:`run_audit` is the recipe, shared by ``fairness_audit`` and the scheduled ``retrain``
(which also demotes a champion that fails the gate on the new rows). Every stage is a task or a
plain function that returns its result; nothing is shared or changed behind the recipe's back.
Results are complete on disk before the first network call, so a tracking outage always leaves
a sealed folder that ``fairpca relog`` can log.
"""

from __future__ import annotations

import dataclasses
import re
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import get_run_context
from prefect.states import Completed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field, model_validator
from threadpoolctl import threadpool_limits

from fairpca.tasks import stages
from fairpca.tasks.decision import Reason, render
from fairpca.tasks.distributed import audit_partitions, connect, on_partitions
from fairpca.tasks.mlflow_logging import as_model_input, input_example, log_output_dir  # noqa: F401
from fairpca.tasks.record import AuditRecord, PromotionRecord
from fairpca.tasks.report import build_verdict, markdown_text, promotion_reasons, verdict_markdown
from fairpca.tasks.select import DEFAULT_TOLERANCE
from fairpca.tasks.stages import choose_candidate, resolved_config, sample_shortlist  # noqa: F401

from .config import AuditConfig, resolve_tracking_uri
from .runtime import current_task_runner_name, dask_subflow, map_large_blocks, release_freed_heap

__all__ = ["AuditResult", "fairness_audit", "run_audit"]
# also importable from here: the model's input (as_model_input, input_example) and the stages'
# helpers choose_candidate, resolved_config and sample_shortlist


class AuditResult(BaseModel):
    """What a flow run returns: the audit's record, where it is on disk and in MLflow, and the
    promotion decided there."""

    record: AuditRecord
    output_dir: str
    report_path: str
    tracking_uri: str
    run_id: str
    experiment_id: str
    model_version: str | None
    model_version_new: bool
    champion_moved: bool
    promotion: PromotionRecord
    # the command's verdict (fairpca.tasks.report.build_verdict of the record and promotion),
    # shown by every surface; not part of the result's data (built here when not given)
    verdict: Any = Field(default=None, exclude=True, repr=False)

    @model_validator(mode="after")
    def _the_verdict(self) -> AuditResult:
        if self.verdict is None:
            self.verdict = build_verdict(self.record, self.promotion)
        return self

    @property
    def run_name(self) -> str:
        return self.record.run_name

    @property
    def model_name(self) -> str | None:
        return self.record.model_name if self.model_version is not None else None

    @property
    def champion_alias(self) -> str:
        return self.record.champion_alias

    @property
    def decision(self) -> str:
        return "promote" if self.promotion.promote else "keep"

    @property
    def decision_reasons(self) -> list[Reason]:
        """The structured reasons, the deciding one first: the champion comparison's when it
        demoted the champion (a retrain) or the audit passed, else the audit's own
        (eligibility, data, the gate, a better reference)."""
        audit = list(self.record.decision.reasons)
        champion = list(promotion_reasons(self.promotion))
        first = self.record.decision.promote or self.promotion.demote
        return [*champion, *audit] if first else [*audit, *champion]

    @property
    def reasons(self) -> list[str]:
        """:attr:`decision_reasons` rendered (:func:`fairpca.tasks.decision.render`)."""
        return [render(reason) for reason in self.decision_reasons]

    @property
    def selection(self) -> dict[str, Any]:
        return self.record.selection.model_dump(by_alias=True)

    @property
    def summary(self) -> list[dict[str, Any]]:
        return list(self.record.candidates)

    @property
    def skipped(self) -> dict[str, str]:
        return dict(self.record.skipped or {})

    @property
    def references(self) -> list[dict[str, Any]]:
        return [reference.model_dump() for reference in self.record.references]

    @property
    def screening(self) -> list[dict[str, Any]]:
        return [entry.model_dump() for entry in self.record.screening or []]


def promote_and_log(
    out_dir: Path, record: AuditRecord, table, split, config: AuditConfig, *,
    sealed: dict[str, str], watch: bool, tolerance: float, score=None,
) -> AuditResult:  # fmt: skip
    """The network part, once the results are written and sealed (``sealed``: that seal's
    SHA-256s): the champion looked up (measured on this audit's test rows: ``score``, by
    default on ``split``) and the audit's MLflow run started; the promotion decided, and with
    it the one verdict every surface shows, written beside the record and sealed with the
    run; then everything logged to that run."""
    tracking_uri = resolve_tracking_uri(config.tracking.tracking_uri)
    begun = stages.begin_logging(
        out_dir, record, table, tracking_uri, sealed=sealed, watch=watch,
        score=score or stages.scorer_on_test_rows(split, config),
    )  # fmt: skip
    decided, verdict, report = stages.decide_and_report(
        out_dir, record, table, begun, sealed=sealed, tolerance=tolerance
    )
    logged = log_output_dir(
        out_dir, tracking_uri, promotion=decided, ends_now=True, client=begun.client,
        verdict=verdict, run=begun.run,
    )  # fmt: skip
    _prefect_artifacts(record, decided, out_dir, verdict)
    return AuditResult(
        record=record, output_dir=str(out_dir.resolve()), report_path=str(report.resolve()),
        promotion=decided, verdict=verdict, **dataclasses.asdict(logged),
    )  # fmt: skip


def _flow_tags(kind: str) -> dict[str, str]:
    tags = {"fairpca.flow": kind}
    with suppress(Exception):  # outside a flow run there is no flow run id
        tags["fairpca.prefect_flow_run_id"] = str(get_run_context().flow_run.id)
        tags["fairpca.task_runner"] = current_task_runner_name() or "none"
    return tags


def verdict_summary(verdict) -> str:
    """The decision, its headline numbers and the deciding reason in one line: the flow run's
    last log line and its final state's message (what ``prefect deployment run --watch``,
    ``prefect flow-run inspect`` and the Prefect UI show). ``verdict``: the command's
    (:attr:`AuditResult.verdict`)."""
    return f"{verdict.line} {verdict.why}."


def _prefect_artifacts(record: AuditRecord, promotion, out_dir: Path, verdict=None) -> None:
    """The verdict (Markdown) and the candidates (table) as artifacts of the flow run, read
    from the record (aggregates only; user strings escaped); then the verdict as the run's
    last log line."""
    source = f"fairpca-{record.provenance.definition.source}".lower()
    key = re.sub(r"[^a-z0-9-]+", "-", source).strip("-")
    text = verdict_markdown(
        record, promotion, heading=f"Fairness {record.kind} {record.run_name}", verdict=verdict
    )
    text += f"\n\nLocal results: {markdown_text(out_dir.resolve())}"
    create_markdown_artifact(text, key=f"{key}-summary"[:100], description="audit verdict")
    candidates = [dict(row) for row in record.candidates]
    create_table_artifact(
        candidates, key=f"{key}-candidates"[:100], description="candidates on validation rows"
    )
    get_run_logger().info("Verdict: %s", verdict_summary(verdict))


def run_audit(
    config: AuditConfig, kind: str = "audit", *, watch: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
) -> AuditResult:  # fmt: skip
    """The recipe of ``fairness_audit`` and ``retrain`` (see the module docstring): ``watch``
    demotes a champion that fails the gate on this audit's test rows; ``tolerance`` is the
    accuracy a challenger may lose against the champion."""
    # The tasks run side by side on the task runner's threads, each calling BLAS through
    # numpy, scipy and scikit-learn: one BLAS thread per call keeps them from oversubscribing
    # the cores (OpenBLAS's threads spin while they wait; on 2 busy cores the German audit's
    # refits took 30 s instead of 3 s). Set once for the run: a limit is process-wide, so a
    # task lifting its own limit as it ends would lift it for the tasks still running.
    with threadpool_limits(limits=1):
        return _run_audit(config, kind, watch=watch, tolerance=tolerance)


def _run_audit(config: AuditConfig, kind: str, *, watch: bool, tolerance: float) -> AuditResult:
    clock, started_at = stages.Stopwatch(), datetime.now(UTC)
    map_large_blocks()
    release_freed_heap()  # what the pre-flight's read of the table left
    out_dir = stages.open_output_dir(config, kind)
    if on_partitions(config.source):  # a partitioned table stays on the Dask cluster
        with connect(config.dask_address):  # open until the champion is scored there
            on_dask = audit_partitions(
                config, out_dir, kind=kind, started_at=started_at, tags=_flow_tags(kind)
            )
            sealed = stages.write_outputs(out_dir, on_dask.record, on_dask.table, config)
            return promote_and_log(
                out_dir, on_dask.record, on_dask.table, None, config, sealed=sealed,
                watch=watch, tolerance=tolerance, score=on_dask.score,
            )  # fmt: skip
    loaded = stages.load_and_encode(config, clock)
    release_freed_heap()  # what loading, screening and encoding left under the encoded rows
    searched = stages.represent_and_search(loaded, clock)
    chosen = stages.choose_model(loaded, searched, out_dir, clock)
    release_freed_heap()  # what the refits left, before the references' copies of the rows
    evaluated = stages.evaluate_choice(loaded, searched, chosen, clock)
    references, choice = stages.judge_references(loaded, searched, chosen[0], evaluated, clock)
    record = stages.record_audit(
        loaded, searched, (choice, *chosen[1:]), evaluated, references, out_dir, clock,
        kind=kind, started_at=started_at, tags=_flow_tags(kind),
    )  # fmt: skip
    sealed = stages.write_outputs(out_dir, record, searched.table, loaded.config)
    return promote_and_log(
        out_dir, record, searched.table, loaded.split, loaded.config, sealed=sealed,
        watch=watch, tolerance=tolerance,
    )  # fmt: skip


def audit_flow(name: str):
    """The decorator of the flows that run :func:`run_audit`: the tasks on two threads, the
    config validated before the body runs, no result persisted."""
    threads = ThreadPoolTaskRunner(max_workers=2)
    return flow(name=name, task_runner=threads, validate_parameters=True, persist_result=False)


@audit_flow("fairness-audit")
def fairness_audit(config: AuditConfig) -> AuditResult:
    """Fairness audit of (fair) PCA representations with downstream classifiers.

    Parameters
    ----------
    config : AuditConfig
        Validated by pydantic before the flow body runs (a bad deployment parameter fails
        here, before any task).

    Returns
    -------
    AuditResult
        The audit record, where it is on disk and in MLflow, and the promotion decision.
    """
    # a partitioned table has its own Dask client (fairpca.tasks.distributed): no subflow
    address = None if on_partitions(config.source) else config.dask_address
    on_dask = dask_subflow(fairness_audit, address)
    result = run_audit(config, "audit") if on_dask is None else on_dask(config)
    # the verdict is the run's outcome: its final state's message; a caller gets the result
    return Completed(message=verdict_summary(result.verdict), data=result)
