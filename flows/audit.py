"""The ``fairness_audit`` flow: data -> fair representations -> lambda sweep -> classifiers
-> report -> MLflow (run, artifacts, registered model, ``champion`` alias).

Results are written to ``<output_dir>/<run_name>/`` first and logged to MLflow afterwards,
so a tracking outage never loses an audit (see :mod:`fairpca.tasks.mlflow_logging`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import get_run_context
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel

from fairpca.tasks.audit_record import AuditRecord, write_audit_record
from fairpca.tasks.data import load_data, split_data
from fairpca.tasks.diagnostics import diagnose
from fairpca.tasks.escape import markdown_text
from fairpca.tasks.evaluate import HEADLINE_METRICS, shared_mmd_sigma
from fairpca.tasks.mlflow_logging import (
    AUDIT_FILE,
    is_transient_mlflow_error,
    log_output_dir,
    save_model_locally,
)
from fairpca.tasks.model_card import verdict_markdown
from fairpca.tasks.model_io import as_model_input, input_example, path_inside
from fairpca.tasks.pipeline import (
    build_pipeline,
    check_pipeline,
    evaluate_reported,
    pip_requirements,
)
from fairpca.tasks.policy import GatePolicy
from fairpca.tasks.record import (
    AuditState,
    candidate_summary,
    chosen_metrics,
    logged_metrics,
    metric_steps,
    model_tags,
    report_sections,
    run_tags,
    selection_record,
)
from fairpca.tasks.references import (
    REFERENCE_KEYS,
    dominating_references,
    reference_mitigations,
    sensitive_at_prediction_note,
)
from fairpca.tasks.registry import provenance, resolved_model_name
from fairpca.tasks.report import Bullets, write_matrices, write_report
from fairpca.tasks.represent import fit_preprocessor, fit_representation, resolve_k
from fairpca.tasks.select import candidate_name, choose, require_fair_variant
from fairpca.tasks.signing import seal_output_dir, signing_key
from fairpca.tasks.sweep import lambda_sweep

from .champion import DEFAULT_TOLERANCE, champion_test_metrics, decide_promotion, load_champion
from .config import AuditConfig, mask_credentials, resolve_tracking_uri
from .runtime import current_task_runner_name, dask_subflow

__all__ = ["AuditResult", "AuditState", "fairness_audit", "finish_audit", "prepare_audit"]


class AuditResult(BaseModel):
    """What a flow run returns: where to find it in MLflow and what was decided."""

    run_id: str
    run_name: str
    experiment_id: str
    tracking_uri: str
    model_name: str | None
    model_version: str | None
    champion_alias: str
    champion_moved: bool
    decision: str
    reasons: list[str]
    chosen: dict[str, Any]
    output_dir: str
    report_path: str
    summary: list[dict[str, Any]]
    selection: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    outcome: str | None = None  # retrain: the champion check and the challenger, one sentence
    references: list[dict[str, Any]] = []  # reference mitigations, validation and test rows
    screening: list[dict[str, Any]] = []  # excluded (or kept) columns with rule and score


@contextmanager
def timed(timings: dict[str, float], name: str):
    """Record the wall time of a block as ``time_<name>_s``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[f"time_{name}_s"] = time.perf_counter() - start


def _dashed(variant: str) -> str:
    """``fair_pca_s`` -> ``fair-pca-s`` so ``time_fit_<variant>_s`` stays unambiguous."""
    return variant.replace("_", "-")


def unique_run_name(config: AuditConfig, kind: str = "audit") -> str:
    """``<kind>-<source>-<UTC time>-<random>``: unique across concurrent audits."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    source = re.sub(r"[^a-z0-9-]+", "-", config.source.name.lower()).strip("-") or "data"
    return f"{kind}-{source}-{stamp}-{uuid.uuid4().hex[:6]}"


def _fit_representations(config, split, encoded_train, timings):
    """Fit every variant once (in parallel); a variant that cannot be fitted is skipped."""
    logger = get_run_logger()
    futures = {
        variant: fit_representation.submit(
            variant,
            encoded_train,
            split.y_train,
            split.s_train,
            k=config.representation.k,
            equalize_covariance=config.representation.equalize_covariance,
            seed=config.seed,
        )
        for variant in config.representation.variants
    }
    representations, skipped = {}, {}
    for variant, future in futures.items():
        try:
            representations[variant] = future.result()
        except ValueError as error:  # e.g. k too large, a group without positive rows (EO)
            skipped[variant] = str(error)
            logger.warning("variant %s skipped: %s", variant, error)
    require_fair_variant(config.representation.variants, skipped, encoded_train.shape[1])
    if not representations:
        raise ValueError("no representation could be fitted: " + "; ".join(skipped.values()))
    for variant, rep in representations.items():
        timings[f"time_fit_{_dashed(variant)}_s"] = rep.fit_seconds
    return representations, skipped


def _sweep_all(config, split, representations, encoded_train, encoded_validation, timings):
    """One lambda sweep per representation (in parallel), on training and validation rows."""
    sigma = shared_mmd_sigma(
        encoded_train,
        config.representation.k,
        max_rows=config.representation.metric_max_rows,
        seed=config.seed,
    )
    futures = {
        variant: lambda_sweep.submit(
            variant,
            rep,
            encoded_train,
            encoded_validation,
            split,
            config.representation,
            config.evaluation,
            config.seed,
            sigma,
        )
        for variant, rep in representations.items()
    }
    sweeps = {variant: future.result() for variant, future in futures.items()}
    for variant, sweep in sweeps.items():
        timings[f"time_sweep_{_dashed(variant)}_s"] = sweep.seconds
    return sweeps


def _resolved(config: AuditConfig, split, encoded_train) -> tuple[AuditConfig, dict]:
    """The config as fitted: the split sizes used and the k fitted (see
    :func:`fairpca.tasks.represent.resolve_k`), so params and record report what ran."""
    k = resolve_k(
        config.representation.k,
        encoded_train.shape[1],
        split.s_train,
        list(config.representation.variants),
    )
    if k["requested"] is None:
        get_run_logger().warning(k["note"])
    sizes = {
        "n_train": len(split.y_train),
        "n_validation": len(split.y_validation),
        "n_test": len(split.y_test),
    }
    source = config.source.model_copy(update={"sensitive": list(split.s_train.columns)})
    representation = config.representation.model_copy(update={"k": k["fitted"]})
    update = {
        "source": source,
        "representation": representation,
        "split": config.split.model_copy(update=sizes),
    }
    return config.model_copy(update=update), k


def _load_and_encode(config: AuditConfig, timings: dict[str, float], dataset=None) -> tuple:
    """Load (unless ``dataset`` is given), split (screening on the training rows) and fit the
    preprocessor."""
    with timed(timings, "load_data"):
        dataset = load_data(config.source) if dataset is None else dataset
    with timed(timings, "split_data"):
        split = split_data(
            dataset,
            config.split,
            config.source,
            seed=config.seed,
            min_group_size=config.evaluation.min_group_size,
        )
    get_run_logger().info("split: %s", split.summary())
    with timed(timings, "fit_preprocessor"):
        preprocessor, encoded_train, encoded_validation = fit_preprocessor(
            split, config.representation.min_category_count
        )
    return dataset, split, preprocessor, encoded_train, encoded_validation


def _open_output(config: AuditConfig, kind: str) -> tuple[datetime, str, Path]:
    """The audit's start time, run name and new output folder (the signing key exists
    before any work, so the output can be sealed)."""
    started_at = datetime.now(UTC)
    signing_key(create=True)
    run_name = config.output.run_name or unique_run_name(config, kind)
    out_dir = path_inside(config.output.output_dir, run_name)
    out_dir.mkdir(parents=True, exist_ok=False)
    return started_at, run_name, out_dir


def _evaluate_chosen(config, split, preprocessor, reps, sweeps, choice, timings) -> tuple:
    """The chosen pipeline, and its and unconstrained PCA's metrics on the test rows (read
    only now, after every choice)."""
    pipeline = build_pipeline(preprocessor, reps, sweeps, choice["chosen"])
    check_pipeline(pipeline, split, choice["chosen"])
    pca_row = choice["pca_row"]
    pca_pipeline = build_pipeline(preprocessor, reps, sweeps, pca_row) if pca_row else None
    with timed(timings, "evaluate_test"):
        evaluation = evaluate_reported(
            split, config.evaluation, config.seed, pipeline, pca_pipeline, choice["chosen"], pca_row
        )
    return pipeline, evaluation


def prepare_audit(config: AuditConfig, kind: str = "audit", dataset=None) -> AuditState:
    """Compute part of an audit: load (unless ``dataset`` is given), split, fit, sweep and
    choose on validation rows; diagnostics; then (only then) evaluate what is reported on the
    test rows, beside the reference mitigations (trained meanwhile on the training rows)."""
    started_at, run_name, out_dir = _open_output(config, kind)
    timings: dict[str, float] = {}
    dataset, split, preprocessor, encoded_train, encoded_validation = _load_and_encode(
        config, timings, dataset
    )
    config, k_record = _resolved(config, split, encoded_train)
    references = reference_mitigations.submit(preprocessor, split, config.evaluation, config.seed)
    with timed(timings, "fit_representations"):
        reps, skipped = _fit_representations(config, split, encoded_train, timings)
    with timed(timings, "lambda_sweep"):
        sweeps = _sweep_all(config, split, reps, encoded_train, encoded_validation, timings)
    table = pd.DataFrame([row for sweep in sweeps.values() for row in sweep.rows])
    choice = choose(table, split.y_train, split.y_validation, config.selection)
    with timed(timings, "diagnostics"):
        diagnostics = diagnose(
            reps, encoded_train, encoded_validation, split, table,
            seed=config.seed, min_group_size=config.evaluation.min_group_size,
        )  # fmt: skip
    pipeline, evaluation = _evaluate_chosen(
        config, split, preprocessor, reps, sweeps, choice, timings
    )
    with timed(timings, "reference_mitigations"):
        reference_rows = references.result()
    decision = choice["decision"]
    decision.reasons += reference_notes(
        reference_rows, evaluation["chosen"]["test"], choice["policy"]
    )
    pca_row = choice["pca_row"]
    return AuditState(
        config=config,
        run_name=run_name,
        out_dir=out_dir,
        dataset=dataset,
        split=split,
        preprocessor=preprocessor,
        representations=reps,
        sweeps=sweeps,
        table=table,
        chosen=choice["chosen"],
        decision=decision,
        pipeline=pipeline,
        pca_row=pca_row,
        majority_accuracy=choice["majority_accuracy"],
        evaluation=evaluation,
        diagnostics=diagnostics,
        timings=timings,
        skipped=skipped,
        additions=_additions(choice, reference_rows, split, k_record),
        started_at=started_at,
    )


def _additions(choice, references, split, k_record) -> dict[str, Any]:
    """The audit record's top-level additions (see the contract of ``audit.json``)."""
    return {
        "policy": choice["policy"].record(),
        "eligibility": choice["eligibility"],
        "references": [
            {key: r[key] for key in REFERENCE_KEYS} for r in references if "skipped" not in r
        ],
        "screening": split.screening,
        "champion_comparison": None,
        "k": k_record,
        "split_sizes": {
            part: len(getattr(split, f"y_{part}")) for part in ("train", "validation", "test")
        },
    }


def reference_notes(references, chosen_test, policy) -> list[str]:
    """Decision lines: references that dominate the chosen candidate on the test rows, and
    which approaches need the sensitive attribute at prediction time."""
    skipped = [f"reference {r['name']} could not be fitted: {r['skipped']}" for r in references
               if "skipped" in r]  # fmt: skip
    fitted = [r for r in references if r.get("test")]
    if not fitted:
        return skipped
    return [
        *dominating_references(fitted, chosen_test, policy),
        sensitive_at_prediction_note(fitted),
        *skipped,
    ]


def promotion_check(state: AuditState, tracking_uri: str, tolerance: float) -> None:
    """Compare a promotable challenger with the current champion on this audit's test rows
    (:func:`fairpca.flows.champion.decide_promotion`); updates the decision and the record."""
    config = state.config
    if not (state.decision.promote and config.tracking.register_model and eligible(state)):
        return
    alias = config.tracking.champion_alias
    try:
        champion = load_champion(
            tracking_uri, resolved_model_name(config.source, config.tracking.model_name), alias
        )
        if champion is None:
            return
        champion_test = champion_test_metrics(
            tracking_uri, champion, state.split, config.evaluation, config.seed
        )
    except Exception as error:  # the results are still written; logging reports the outage
        if not is_transient_mlflow_error(error):
            raise
        state.decision.promote = False
        state.decision.reasons.append(
            f"the current {alias!r} version could not be read from MLflow "
            f"({type(error).__name__}), so the challenger was not compared with it and is not "
            "promoted; audit again once the tracking server is reachable"
        )
        return
    challenger = {**state.evaluation["chosen"]["test"], "name": candidate_name(state.chosen)}
    policy = GatePolicy.from_config(config.selection)
    state.decision, record = decide_promotion(
        state.decision, challenger, champion, champion_test, policy, tolerance
    )
    state.additions["champion_comparison"] = record


def eligible(state: AuditState) -> bool:
    """Whether the chosen candidate passed the eligibility rules (only then registered)."""
    return bool(state.additions.get("eligibility", {}).get("chosen_passes", True))


def _write_outputs(state: AuditState) -> dict[str, str]:
    """Matrices, the metrics table, the resolved config and the fitted pipeline."""
    out_dir = state.out_dir
    hashes = write_matrices(out_dir, state.representations)
    state.table.to_csv(out_dir / "metrics.csv", index=False)
    (out_dir / "config.json").write_text(state.config.model_dump_json(indent=2))
    save_model_locally(
        state.pipeline,
        out_dir,
        input_example=input_example(
            as_model_input(state.split.X_train), state.config.representation.min_category_count
        ),
        pip_requirements=pip_requirements(),
    )
    return hashes


def _plot_arguments(state: AuditState) -> dict[str, Any]:
    return {
        "table": state.table,
        "chosen": state.chosen,
        "pca": state.pca_row,
        "majority_accuracy": state.majority_accuracy,
        # the panels are the measures the policy gates
        "thresholds": (state.additions.get("policy") or {}).get("thresholds")
        or state.config.selection.thresholds,
        "gate": state.config.selection.gate,
        "references": state.additions.get("references"),
        "utility": state.config.selection.select_by,
    }


def _flow_tags(kind: str) -> dict[str, str]:
    tags = {"fairpca.flow": kind}
    with suppress(Exception):  # outside a flow run there is no flow run id
        tags["fairpca.prefect_flow_run_id"] = str(get_run_context().flow_run.id)
        tags["fairpca.task_runner"] = current_task_runner_name() or "none"
    return tags


def finish_audit(
    state: AuditState,
    *,
    kind: str = "audit",
    extra_sections: list[tuple[str, Any]] | None = None,
    extra_tags: dict[str, str] | None = None,
    extra_metrics: dict[str, float] | None = None,
) -> AuditResult:
    """Write every result to the output directory, then log it to MLflow."""
    config, out_dir, timings = state.config, state.out_dir, state.timings
    tracking_uri = resolve_tracking_uri(config.tracking.tracking_uri)
    with timed(timings, "write_outputs"):
        hashes = _write_outputs(state)
    extra = (extra_sections or []) + _skipped_section(state.skipped)
    with timed(timings, "write_report"):
        paths = write_report(
            out_dir,
            title=f"Fairness {kind}: {config.source.name} ({state.run_name})",
            sections=report_sections(state, [*extra, ("Timings (seconds)", _timings(timings))]),
            plot=_plot_arguments(state),
        )
    selection = selection_record(state)
    audit = AuditRecord(
        audit_id=state.run_name,
        run_name=state.run_name,
        kind=kind,
        experiment_name=config.tracking.experiment_name,
        model_name=resolved_model_name(config.source, config.tracking.model_name),
        champion_alias=config.tracking.champion_alias,
        register_model=config.tracking.register_model and eligible(state),
        mlflow_retries=config.tracking.mlflow_retries,
        mlflow_retry_backoff=config.tracking.mlflow_retry_backoff,
        started_at=state.started_at,
        ended_at=datetime.now(UTC),
        sensitive=list(state.split.s_train.columns),
        decision=state.decision.as_dict(),
        chosen=chosen_metrics(state.chosen)
        | {"variant": state.chosen["variant"], "classifier": state.chosen["classifier"]},
        selection=selection,
        params={**config.flat_params(), "resolved_tracking_uri": mask_credentials(tracking_uri)},
        metrics={**logged_metrics(state), **(extra_metrics or {})},
        metric_steps=metric_steps(state.table),
        tags={**run_tags(state), **_flow_tags(kind), **(extra_tags or {})},
        model_tags=model_tags(state) | GatePolicy.from_config(config.selection).tags(),
        hashes=hashes,
        provenance=provenance(config.source),
        **state.additions,
    )
    write_audit_record(out_dir / AUDIT_FILE, audit)
    seal_output_dir(out_dir)  # the last file is written: sign the directory
    _prefect_artifacts(state, audit)
    logged = log_output_dir(out_dir, tracking_uri, ends_now=True)
    return _result(state, logged, tracking_uri, paths["html"], audit)


def _result(state: AuditState, logged, tracking_uri: str, report: Path, audit) -> AuditResult:
    config, chosen = state.config, state.chosen
    selection = audit.selection.model_dump()
    summary = candidate_summary(state)
    return AuditResult(
        run_id=logged.run_id,
        run_name=state.run_name,
        experiment_id=logged.experiment_id,
        tracking_uri=mask_credentials(tracking_uri),
        model_name=resolved_model_name(config.source, config.tracking.model_name)
        if config.tracking.register_model and eligible(state)
        else None,
        model_version=logged.model_version,
        champion_alias=config.tracking.champion_alias,
        champion_moved=logged.champion_moved,
        decision="promote" if state.decision.promote else "keep",
        reasons=state.decision.reasons,
        chosen={k: chosen.get(k) for k in ("variant", "classifier", "lambda", *HEADLINE_METRICS)},
        selection=selection,
        output_dir=str(state.out_dir.resolve()),
        report_path=str(report.resolve()),
        summary=json.loads(summary.to_json(orient="records")),
        skipped=state.skipped,
        references=[reference.model_dump() for reference in audit.references or []],
        screening=[entry.model_dump() for entry in audit.screening or []],
    )


def _skipped_section(skipped: dict[str, str]) -> list[tuple[str, Any]]:
    if not skipped:
        return []
    items = Bullets([f"{variant}: {why}" for variant, why in skipped.items()])
    return [("Skipped variants (could not be fitted on this data)", items)]


def _timings(timings: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"step": list(timings), "seconds": list(timings.values())})


def _prefect_artifacts(state: AuditState, record: AuditRecord) -> None:
    """The verdict (Markdown) and the candidates (table) as artifacts of the flow run, from
    the typed record (aggregated numbers only; user strings escaped)."""
    key = re.sub(r"[^a-z0-9-]+", "-", f"fairpca-{state.config.source.name}".lower()).strip("-")
    verdict = verdict_markdown(record, heading=f"Fairness {record.kind} {record.run_name}")
    local = markdown_text(state.out_dir.resolve())
    create_markdown_artifact(
        f"{verdict}\n\nLocal results: {local}",
        key=f"{key}-summary"[:100],
        description="audit verdict",
    )
    summary = candidate_summary(state)
    records = json.loads(summary.round(4).to_json(orient="records"))
    create_table_artifact(
        records,  # our own variant/classifier names and numbers: no user string
        key=f"{key}-candidates"[:100],
        description="candidates on validation rows",
    )


@flow(
    name="fairness-audit",
    task_runner=ThreadPoolTaskRunner(max_workers=2),
    validate_parameters=True,
)
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
        MLflow run id, registered model version, decision and where the report is.
    """
    if (on_dask := dask_subflow(fairness_audit, config.dask_address)) is not None:
        return on_dask(config)
    state = prepare_audit(config, "audit")
    promotion_check(state, resolve_tracking_uri(config.tracking.tracking_uri), DEFAULT_TOLERANCE)
    return finish_audit(state, kind="audit")
