"""The ``fairness_audit`` flow: load and split -> encode -> fit the representations -> the
lambda sweep -> choose on validation rows -> evaluate on test rows -> one record, written and
sealed locally -> (only then, over the network) the champion comparison and the promotion
decision -> MLflow (run, model, registered version, alias).

:func:`run_audit` is the recipe, shared by ``fairness_audit`` and the scheduled ``retrain``
(which also demotes a champion that fails the gate on the new rows). Every stage is a task or a
plain function that returns its result; nothing is shared or changed behind the recipe's back.
Results are complete on disk before the first network call, so a tracking outage always leaves
a sealed folder that ``fairpca relog`` can log.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from textwrap import shorten
from typing import Any

import numpy as np
import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import get_run_context
from prefect.states import Completed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field
from threadpoolctl import threadpool_limits

from fairpca.tasks.data import load_split, search_sample
from fairpca.tasks.decision import Reason, note, render
from fairpca.tasks.diagnostics import diagnose
from fairpca.tasks.distributed import audit_partitions, connect, on_partitions
from fairpca.tasks.evaluate import (
    GATED_RATES,
    build_pipeline,
    check_pipeline,
    evaluate_reported,
    metrics_with_intervals,
    pip_requirements,
    predict_by_blocks,
    shared_mmd_sigma,
)
from fairpca.tasks.mlflow_logging import (
    AUDIT_FILE,
    PROMOTION_FILE,
    RETRYING,
    MlflowLoggingError,
    as_model_input,
    input_example,
    log_output_dir,
    relog_hint,
    save_model_locally,
)
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.onnx_export import save_graph
from fairpca.tasks.record import (
    AuditRecord,
    PromotionRecord,
    build_record,
    frontier_points,
    parity_gap,
    training_data_digest,
    unjudged_in_split,
    write_audit_record,
)
from fairpca.tasks.references import reference_mitigations
from fairpca.tasks.registry import find_champion
from fairpca.tasks.report import (
    build_verdict,
    markdown_text,
    verdict_markdown,
    write_matrices,
    write_report,
)
from fairpca.tasks.represent import INTERSECTION_VARIANT, fit_preprocessor, resolve_k
from fairpca.tasks.select import (
    DEFAULT_TOLERANCE,
    Challenger,
    Choice,
    Decision,
    GatePolicy,
    choose,
    decide_promotion,
    judge_chosen,
    majority_accuracy_of,
    registrable,
    require_fair_variant,
    shortlist,
)
from fairpca.tasks.sweep import (
    CV_SHORTLIST,
    cross_validate,
    lambda_sweep,
    refit_shortlist,
    search_variant,
)
from fairpca.tasks.trust import (
    model_digest,
    path_inside,
    seal_output_dir,
    sha256_file,
    shown_uri,
    signing_key,
    skops_file,
)

from .config import AuditConfig, resolve_tracking_uri
from .runtime import current_task_runner_name, dask_subflow, map_large_blocks, release_freed_heap

__all__ = ["AuditResult", "fairness_audit", "run_audit"]


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
    # shown by every surface; not part of the result's data
    verdict: Any = Field(default=None, exclude=True, repr=False)

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
        from fairpca.tasks.report import promotion_reasons

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


class Stopwatch:
    """Wall time of the recipe's consecutive stages (``time_<stage>_s``; they add up to the
    audit's wall time) and of tasks that ran beside them (``time_<task>_task_s``)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[f"time_{stage}_s"] = time.perf_counter() - begin

    def timings(self, **beside: float) -> dict[str, float]:
        total = {"time_total_s": time.perf_counter() - self.start}
        return {**self.seconds, **{f"time_{k}_task_s": v for k, v in beside.items()}, **total}


def unique_run_name(config: AuditConfig, kind: str) -> str:
    """``<kind>-<source>-<UTC time>-<random>``: unique across concurrent audits."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    source = re.sub(r"[^a-z0-9-]+", "-", config.source.name.lower()).strip("-") or "data"
    return f"{kind}-{source}-{stamp}-{uuid.uuid4().hex[:6]}"


def open_output_dir(config: AuditConfig, kind: str) -> Path:
    """The audit's new output folder (the signing key exists before any work, so the folder
    can be sealed)."""
    signing_key(create=True)
    out_dir = path_inside(
        config.output.output_dir, config.output.run_name or unique_run_name(config, kind)
    )
    out_dir.mkdir(parents=True, exist_ok=False)
    return out_dir


def resolved_config(config: AuditConfig, split, encoded_train) -> tuple[AuditConfig, dict]:
    """The config as fitted (the split sizes used, the attributes, the k every variant gets:
    :func:`fairpca.tasks.represent.resolve_k`) and the k record."""
    representation = config.representation
    k = resolve_k(
        representation.k, encoded_train.shape[1], split.s_train, list(representation.variants),
        representation.k_grid,
    )  # fmt: skip
    sizes = {
        f"n_{part}": len(getattr(split, f"y_{part}")) for part in ("train", "validation", "test")
    }
    update = {
        "source": config.source.model_copy(update={"sensitive": list(split.s_train.columns)}),
        "representation": representation.model_copy(update={"k_grid": k["grid"]}),
        "split": config.split.model_copy(update=sizes),
    }
    return config.model_copy(update=update), k


def search_representations(config: AuditConfig, split, encoded) -> tuple[dict, dict]:
    """Every variant searched over the k grid (and logreg_tuned's C) on the validation rows,
    in parallel; a variant that cannot be fitted is skipped with its reason (the audit fails
    when no fair variant remains)."""
    several = split.s_train.shape[1] > 1 and "fair_pca_s" in config.representation.variants
    futures = {  # with several attributes, also Fair PCA-S on their intersection's cells
        variant: search_variant.submit(
            variant, *encoded, split, config.representation.k_grid, config.representation,
            config.evaluation, config.selection, config.seed,
        )
        for variant in [*config.representation.variants, *[INTERSECTION_VARIANT] * several]
    }  # fmt: skip
    searches, skipped = {}, {}
    for variant, future in futures.items():
        try:
            searches[variant] = future.result()
        except ValueError as error:  # e.g. a group without positive rows (EO)
            skipped[variant] = str(error)
            get_run_logger().warning("variant %s skipped: %s", variant, error)
    require_fair_variant(config.representation.variants, skipped, encoded[0].shape[1])
    return searches, skipped


def sweep_all(config: AuditConfig, split, searches, encoded, sigma) -> tuple[pd.DataFrame, dict]:
    """One lambda sweep per variant at its chosen k and C (in parallel) on training and
    validation rows: the candidates' table and every sweep's fitted classifiers."""
    futures = [
        lambda_sweep.submit(
            variant, search.representation, *encoded, split, config.representation,
            config.evaluation, config.seed, sigma, search.C, config.selection.select_by,
            search.lambdas, policy=GatePolicy.from_config(config.selection),
        )
        for variant, search in searches.items()
    ]  # fmt: skip
    sweeps = {sweep.variant: sweep for sweep in (future.result() for future in futures)}
    table = pd.DataFrame([row for sweep in sweeps.values() for row in sweep.rows])
    return table, sweeps


def choose_candidate(config: AuditConfig, table, split, searches, encoded) -> Choice:
    """The choice on the validation rows; when they are fewer than ``cv_below_rows``, the
    shortlist of the best candidates on them compared by repeated stratified cross-validation
    on the training and validation rows (:func:`fairpca.tasks.sweep.cross_validate`)."""
    selection = config.selection
    if len(split.y_validation) >= selection.cv_below_rows:
        return choose(table, split.y_train, split.y_validation, selection)
    majority = majority_accuracy_of(split.y_train, split.y_validation)
    representations = {variant: search.representation for variant, search in searches.items()}
    rows = cross_validate(
        shortlist(table, majority, selection, CV_SHORTLIST), representations, encoded, split,
        evaluation=config.evaluation, selection=selection, seed=config.seed,
    )  # fmt: skip
    y_seen = np.concatenate([split.y_train, split.y_validation])
    chosen_by = (
        f"repeated stratified {selection.cv_folds}-fold cross-validation ({selection.cv_repeats} "
        f"repeats) on the {len(y_seen):,} training+validation rows"
    )
    return choose(pd.DataFrame(rows), split.y_train, y_seen, selection, chosen_by=chosen_by,
                  rows="cross-validated training+validation")


def sample_shortlist(table: pd.DataFrame, sample, selection) -> list[dict]:
    """What the wide search hands to every row: the :data:`CV_SHORTLIST` candidates the
    choice would take from (:func:`fairpca.tasks.select.shortlist`: those meeting the gate,
    then those nearest it on every gated measure of every attribute and their intersection,
    with the best unconstrained PCA), and the best that still meet the gate once each gated
    measure is moved towards failing by its 95% sampling error on the sample (the best on a
    sample sit at the gate's edge, where the sample flatters them; these are likely to pass
    on every row too)."""
    majority = majority_accuracy_of(sample.y_train, sample.y_validation)
    # only what may be registered is refitted on every row (choose() keeps to the same)
    table = registrable(table, selection.allow_row_storing_models)
    # Candidates of two variants that predict alike on the sample (Fair PCA-S at a large l is
    # fair PCA) are refitted once, and take one place of the shortlist; unconstrained PCA
    # (lambda NaN) is never a fair one's copy.
    alike = ["classifier", "lambda", "accuracy", "balanced_accuracy", "dp_difference"]
    numbered = table.assign(row=np.arange(len(table)))
    numbered = numbered.drop_duplicates([c for c in alike if c in numbered])
    strict = numbered.copy()
    for measure in GATED_RATES:
        for scope in ("", ".intersection"):
            value, error = f"{measure}{scope}", f"{measure}.se{scope}"
            if value in strict and error in strict:
                towards = -1.0 if measure == "selection_rate_ratio" else 1.0
                strict[value] = strict[value] + towards * 1.96 * strict[error].fillna(0.0)
    policy = GatePolicy.from_config(selection)
    picked = [row["row"] for row in shortlist(numbered, majority, selection, CV_SHORTLIST)]
    picked += [
        row["row"]
        for row in shortlist(strict, majority, selection, CV_SHORTLIST)
        if not policy.failures(row)
    ]
    return table.iloc[list(dict.fromkeys(picked))].to_dict("records")


# Encoded training rows above which the stages that copy them (the shortlist's refits, the
# reference mitigations) run one after another, not side by side on the task runner's two
# threads: each holds a few copies of the rows it fits (at 500,000 rows of 106 columns,
# 424 MB a copy), so side by side they would add up.
SIDE_BY_SIDE_MAX_BYTES = 200_000_000


def side_by_side(encoded: tuple[np.ndarray, ...]) -> bool:
    """Whether the stages that copy the encoded training rows may run at the same time."""
    return encoded[0].nbytes <= SIDE_BY_SIDE_MAX_BYTES


def choose_on_every_row(
    config: AuditConfig, table, split, sample, searches, encoded, sigma, out_dir: Path
):
    """After a wide search on a sample: its best candidates (:data:`CV_SHORTLIST` and the
    best unconstrained PCA, by the audit's own order) refitted on every training row and
    measured on every validation row (:func:`fairpca.tasks.sweep.refit_shortlist`, variants
    in parallel), and the choice among them there: the gate, the certification and the
    references are judged on the rows of the model that is registered. Returns the choice,
    the refitted representations and their sweeps (the measured shortlist is written to
    ``out_dir/shortlist.csv``)."""
    candidates = sample_shortlist(table, sample, config.selection)

    def arguments(variant: str) -> tuple:
        return (
            variant, [row for row in candidates if row["variant"] == variant],
            searches[variant].representation, encoded, split, config.representation,
            config.evaluation, config.selection, config.seed, sigma, searches[variant].C,
        )  # fmt: skip

    variants = dict.fromkeys(row["variant"] for row in candidates)
    if side_by_side(encoded):
        futures = {variant: refit_shortlist.submit(*arguments(variant)) for variant in variants}
        refits = {variant: future.result() for variant, future in futures.items()}
    else:
        refits = {variant: refit_shortlist(*arguments(variant)) for variant in variants}
    measured = pd.DataFrame([row for _, sweep in refits.values() for row in sweep.rows])
    choice = choose(measured, split.y_train, split.y_validation, config.selection)
    refitted = (
        f"the {len(measured)} best candidates of the wide search on a stratified sample "
        f"({len(sample.y_train):,} training, {len(sample.y_validation):,} validation rows) were "
        f"refitted on all {len(split.y_train):,} training rows and measured on all "
        f"{len(split.y_validation):,} validation rows, where the choice was made"
    )
    choice = dataclasses.replace(choice, decision=choice.decision.adding(note(refitted)))
    measured.to_csv(out_dir / "shortlist.csv", index=False)
    representations = {variant: rep for variant, (rep, _) in refits.items()}
    return choice, representations, {variant: sweep for variant, (_, sweep) in refits.items()}


@task(name="write-outputs", cache_policy=NO_CACHE)
def write_outputs(
    out_dir: Path, record: AuditRecord, table: pd.DataFrame, config
) -> dict[str, str]:
    """Everything the audit found, on disk beside the model and the projection matrices
    (written before the record, which names their SHA-256s): the record, the report, the
    candidates' table and the resolved config; then the folder is sealed, with the model's
    and the matrices' SHA-256s as the record names them. Returns the SHA-256s sealed."""
    table.to_csv(out_dir / "metrics.csv", index=False)
    (out_dir / "config.json").write_text(config.model_dump_json(indent=2))
    write_audit_record(out_dir / AUDIT_FILE, record)
    write_report(out_dir, record, table)
    model = skops_file(out_dir / "model").relative_to(out_dir.resolve()).as_posix()
    matrices = {f"projection/{name}.npy": digest for name, digest in record.hashes.items()}
    return seal_output_dir(out_dir, known={model: record.model_sha256, **matrices})


def save_pipeline(
    out_dir: Path, pipeline, split, config: AuditConfig, validation_labels=None
) -> tuple[str, str, dict[str, Any]]:
    """The chosen pipeline as an MLflow model folder ``out_dir/model``: the SHA-256 of its
    skops file, the digest of the fit (:func:`fairpca.tasks.trust.model_digest` of its
    content and of the training rows) and the record of its ONNX graph
    (:func:`fairpca.tasks.onnx_export.save_graph`: the graph is saved beside the skops file
    only when its labels equal the pipeline's, ``validation_labels`` when already predicted,
    on every validation row)."""
    example = input_example(as_model_input(split.X_train), config.representation.min_category_count)
    model_dir = save_model_locally(
        pipeline, out_dir, input_example=example, pip_requirements=pip_requirements()
    )
    if validation_labels is None:
        validation_labels = predict_by_blocks(pipeline, split.X_validation)
    graph = save_graph(model_dir, pipeline, split.X_validation, validation_labels)
    digest = model_digest(pipeline, training_data_digest(split))
    return sha256_file(skops_file(model_dir)), digest, graph


def scorer_on_test_rows(split, config: AuditConfig):
    """``score(pipeline) -> metrics with intervals`` on this audit's test rows: how the
    champion is measured beside the challenger."""

    def score(pipeline) -> dict[str, float]:
        return metrics_with_intervals(
            split.y_test,
            predict_by_blocks(pipeline, split.X_test),
            split.s_test,
            min_group_size=config.evaluation.min_group_size,
            allow_small_groups=config.evaluation.allow_small_groups,
            n_resamples=config.evaluation.n_bootstrap,
            seed=config.seed,
        )

    return score


# The champion's look-up and evaluation over the network, retried on transient errors.
champion_lookup = task(name="mlflow-find-champion", **RETRYING)(find_champion)


def challenger_of(record: AuditRecord) -> Challenger:
    """What the signed record says about the version the audit would promote: it may be
    promoted only if the gate passed it on the validation rows and it was registered."""
    return Challenger(
        name=record.selection.chosen.name,
        decision=Decision(
            record.decision.promote and record.register_model, tuple(record.decision.reasons)
        ),
        policy=GatePolicy.from_tags(record.model_tags),
        test=dict(record.selection.test),
        model_digest=record.model_digest,
    )


def promote_and_log(
    out_dir: Path, record: AuditRecord, table, split, config: AuditConfig, *,
    sealed: dict[str, str], watch: bool, tolerance: float, score=None,
) -> AuditResult:  # fmt: skip
    """The network part: decide the promotion against the current champion (on this audit's
    test rows; ``score`` measures a pipeline there, by default on ``split``), write it beside
    the record (the report shows it), seal again (``sealed``: the first seal's SHA-256s, kept
    for the files not rewritten), log to MLflow."""
    tracking_uri = resolve_tracking_uri(config.tracking.tracking_uri)
    champion, demoted, client = (None, frozenset(), None)  # one MLflow client for the command
    if record.register_model or watch:  # a retrain re-checks its champion in any case
        try:
            client = mlflow_client(tracking_uri)
            champion, demoted = champion_lookup(
                tracking_uri,
                record,
                watch=watch,
                evaluate=score or scorer_on_test_rows(split, config),
                client=client,
            )
        except Exception as error:  # after the task's retries: the folder is complete
            raise MlflowLoggingError(
                f"Looking up the current champion at {shown_uri(tracking_uri)} failed "
                f"({type(error).__name__}: {shorten(str(error), 300, placeholder=' ...')}). "
                f"All results are kept in {out_dir.resolve()}; {relog_hint(out_dir, tracking_uri)}"
            ) from error
    promotion = decide_promotion(
        challenger_of(record), champion, tolerance=tolerance, demoted_models=demoted
    )
    decided = PromotionRecord.of(promotion, champion)
    verdict = build_verdict(record, decided)  # every surface from here on shows this one
    (out_dir / PROMOTION_FILE).write_text(decided.model_dump_json(indent=2))
    paths = write_report(out_dir, record, table, decided, plot=False, verdict=verdict)
    rewritten = {PROMOTION_FILE, paths["md"].name, paths["html"].name}
    seal_output_dir(out_dir, known={n: h for n, h in sealed.items() if n not in rewritten})
    logged = log_output_dir(
        out_dir, tracking_uri, promotion=decided, ends_now=True, client=client, verdict=verdict
    )
    _prefect_artifacts(record, decided, out_dir, verdict)
    return AuditResult(
        record=record,
        output_dir=str(out_dir.resolve()),
        report_path=str(paths["html"].resolve()),
        tracking_uri=logged.tracking_uri,
        run_id=logged.run_id,
        experiment_id=logged.experiment_id,
        model_version=logged.model_version,
        model_version_new=logged.model_version_new,
        champion_moved=logged.champion_moved,
        promotion=decided,
        verdict=verdict,
    )


def _flow_tags(kind: str) -> dict[str, str]:
    tags = {"fairpca.flow": kind}
    with suppress(Exception):  # outside a flow run there is no flow run id
        tags["fairpca.prefect_flow_run_id"] = str(get_run_context().flow_run.id)
        tags["fairpca.task_runner"] = current_task_runner_name() or "none"
    return tags


def verdict_summary(record: AuditRecord, promotion=None, verdict=None) -> str:
    """The decision, its headline numbers and the deciding reason in one line: the flow run's
    last log line and its final state's message (what ``prefect deployment run --watch``,
    ``prefect flow-run inspect`` and the Prefect UI show). ``verdict``: the command's
    :func:`fairpca.tasks.report.build_verdict` of ``record`` and ``promotion``, when built."""
    verdict = verdict or build_verdict(record, promotion)
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
    create_markdown_artifact(
        f"{text}\n\nLocal results: {markdown_text(out_dir.resolve())}",
        key=f"{key}-summary"[:100],
        description="audit verdict",
    )
    create_table_artifact(
        [dict(row) for row in record.candidates],
        key=f"{key}-candidates"[:100],
        description="candidates on validation rows",
    )
    get_run_logger().info("Verdict: %s", verdict_summary(record, promotion, verdict))


def run_audit(
    config: AuditConfig,
    kind: str = "audit",
    *,
    watch: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
) -> AuditResult:
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
    clock, started_at = Stopwatch(), datetime.now(UTC)
    map_large_blocks()
    release_freed_heap()  # what the pre-flight's read of the table left
    out_dir = open_output_dir(config, kind)
    if on_partitions(config.source):  # a partitioned table stays on the Dask cluster
        with connect(config.dask_address):  # open until the champion is scored there
            on_dask = audit_partitions(
                config, out_dir, kind=kind, started_at=started_at, tags=_flow_tags(kind)
            )
            sealed = write_outputs(out_dir, on_dask.record, on_dask.table, config)
            return promote_and_log(
                out_dir, on_dask.record, on_dask.table, None, config, sealed=sealed,
                watch=watch, tolerance=tolerance, score=on_dask.score,
            )  # fmt: skip
    with clock("load_data"):
        split = load_split(
            config.source, config.split,
            seed=config.seed, min_group_size=config.evaluation.min_group_size,
        )  # fmt: skip
    with clock("encode"):
        preprocessor, encoded_train, encoded_validation = fit_preprocessor(
            split, config.representation.min_category_count
        )
        config, k_record = resolved_config(config, split, encoded_train)
    release_freed_heap()  # what loading, screening and encoding left under the encoded rows
    encoded = (encoded_train, encoded_validation)
    # Below cv_below_rows validation rows the choice cross-validates on every row instead.
    search_rows = None if len(split.y_validation) < config.selection.cv_below_rows else (
        config.split.search_rows
    )  # fmt: skip
    sample, sample_encoded = search_sample(
        split, encoded, search_rows, config.seed, config.evaluation.min_group_size
    )
    reference_arguments = (
        preprocessor, split, encoded, config.evaluation, config.seed, config.selection, search_rows
    )  # fmt: skip
    references = side_by_side(encoded) and reference_mitigations.submit(*reference_arguments)
    with clock("search_k"):
        searches, skipped = search_representations(config, sample, sample_encoded)
        representations = {variant: search.representation for variant, search in searches.items()}
    with clock("lambda_sweep"):
        sigma = shared_mmd_sigma(  # the MMD bandwidth of every representation (search rows)
            sample_encoded[0], config.representation.k_grid[0],
            max_rows=config.representation.metric_max_rows, seed=config.seed,
        )  # fmt: skip
        table, sweeps = sweep_all(config, sample, searches, sample_encoded, sigma)
    with clock("choose"):
        if sample is split:
            choice = choose_candidate(config, table, split, searches, encoded)
            registered = representations
        else:
            choice, registered, sweeps = choose_on_every_row(
                config, table, split, sample, searches, encoded, sigma, out_dir
            )
    release_freed_heap()  # what the refits left, before the references' copies of the rows
    with clock("diagnostics"):  # the search's representations on its rows (a capped sample)
        diagnostics = diagnose(
            representations, *sample_encoded, sample, table,
            seed=config.seed, min_group_size=config.evaluation.min_group_size,
            selection=config.selection,
        )  # fmt: skip
    with clock("evaluate_test"):
        pipeline = build_pipeline(preprocessor, registered, sweeps, choice.chosen)
        validation_labels = check_pipeline(pipeline, split, choice.chosen, config.evaluation)
        pca = choice.pca_row and build_pipeline(preprocessor, registered, sweeps, choice.pca_row)
        reported = evaluate_reported(
            split, config.evaluation, config.seed, pipeline, pca, choice.chosen, choice.pca_row
        )
    with clock("wait_references"):
        reference_rows = (
            references.result() if references else reference_mitigations(*reference_arguments)
        )
        unjudged = unjudged_in_split(split, reported["chosen"]["validation"], config.evaluation)
        choice = judge_chosen(
            choice, reference_rows, reported["chosen"]["test"], unjudged, config.selection
        )
    with clock("save_model"):
        model_sha256, digest, graph = save_pipeline(
            out_dir, pipeline, split, config, validation_labels
        )
        hashes = write_matrices(out_dir, {**representations, **registered})
    record = build_record(
        config,
        kind=kind,
        run_name=out_dir.name,
        started_at=started_at,
        split=split,
        choice=choice,
        reported=reported,
        references=reference_rows,
        diagnostics=diagnostics,
        representations={**representations, **registered},
        table=table,
        skipped=skipped,
        k_record=k_record,
        frontier=frontier_points(searches, table, config.selection),
        timings=clock.timings(reference_mitigations=sum(r["seconds"] for r in reference_rows)),
        hashes=hashes,
        model_sha256=model_sha256,
        model_digest=digest,
        onnx=graph,
        tags={**_flow_tags(kind), "fairpca.local_output_dir": str(out_dir.resolve())},
        parity_gap=parity_gap(
            pipeline, split, table, choice, config.selection, config.evaluation.min_group_size
        ),
    )
    sealed = write_outputs(out_dir, record, table, config)
    return promote_and_log(
        out_dir, record, table, split, config, sealed=sealed, watch=watch, tolerance=tolerance
    )


@flow(
    name="fairness-audit",
    task_runner=ThreadPoolTaskRunner(max_workers=2),
    validate_parameters=True,
    persist_result=False,
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
        The audit record, where it is on disk and in MLflow, and the promotion decision.
    """
    if on_partitions(config.source):  # its own Dask client (fairpca.tasks.distributed)
        result = run_audit(config, "audit")
    elif (on_dask := dask_subflow(fairness_audit, config.dask_address)) is not None:
        result = on_dask(config)
    else:
        result = run_audit(config, "audit")
    # the verdict is the run's outcome: its final state's message; a caller gets the result
    summary = verdict_summary(result.record, result.promotion, result.verdict)
    return Completed(message=summary, data=result)
