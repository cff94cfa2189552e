"""The audit's stages, in the order the ``fairness_audit`` flow (:mod:`fairpca.flows.audit`)
calls them: load and encode -> represent and search -> choose -> evaluate -> references ->
record -> write (and seal) -> begin logging (the champion look-up and the MLflow run, over
the network) -> decide and report (the promotion, the one verdict, the report, the second
seal); each takes the earlier stages' values and returns its own (see
``docs/architecture.rst``). The flow then logs the folder to that run
(:func:`fairpca.tasks.mlflow_logging.log_output_dir`)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from fairpca.tasks import evaluate, mlflow_logging, select, sweep, trust
from fairpca.tasks.data import load_split, search_sample
from fairpca.tasks.decision import note
from fairpca.tasks.diagnostics import diagnose
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
from fairpca.tasks.report import Verdict, build_verdict, write_matrices, write_plot, write_report
from fairpca.tasks.represent import INTERSECTION_VARIANT, fit_preprocessor, resolve_k


class Stopwatch:
    """Wall time of the recipe's consecutive stages (``time_<stage>_s``; they add up to the
    audit's wall time) and of tasks that ran beside them (``time_<task>_task_s``)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        begin = time.perf_counter()
        yield  # a stage that fails ends the audit: its time is not recorded
        self.seconds[f"time_{stage}_s"] = time.perf_counter() - begin

    def timings(self, **beside: float) -> dict[str, float]:
        total = {"time_total_s": time.perf_counter() - self.start}
        return {**self.seconds, **{f"time_{k}_task_s": v for k, v in beside.items()}, **total}


def open_output_dir(config, kind: str) -> Path:
    """The audit's new output folder, named ``config.output.run_name`` or
    ``<kind>-<source>-<UTC time>-<random>`` (unique across concurrent audits); the signing
    key exists before any work, so the folder can be sealed."""
    trust.signing_key(create=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    source = re.sub(r"[^a-z0-9-]+", "-", config.source.name.lower()).strip("-") or "data"
    run_name = config.output.run_name or f"{kind}-{source}-{stamp}-{uuid.uuid4().hex[:6]}"
    out_dir = trust.path_inside(config.output.output_dir, run_name)
    out_dir.mkdir(parents=True, exist_ok=False)
    return out_dir


def resolved_config(config, split, encoded_train) -> tuple[Any, dict]:
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


def search_representations(config, split, encoded) -> tuple[dict, dict]:
    """Every variant searched over the k grid (and logreg_tuned's C) on the validation rows,
    in parallel; a variant that cannot be fitted is skipped with its reason (the audit fails
    when no fair variant remains)."""
    several = split.s_train.shape[1] > 1 and "fair_pca_s" in config.representation.variants
    futures = {  # with several attributes, also Fair PCA-S on their intersection's cells
        variant: sweep.search_variant.submit(
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
    select.require_fair_variant(config.representation.variants, skipped, encoded[0].shape[1])
    return searches, skipped


def sweep_all(config, split, searches, encoded, sigma) -> tuple[pd.DataFrame, dict]:
    """One lambda sweep per variant at its chosen k and C (in parallel) on training and
    validation rows: the candidates' table and every sweep's fitted classifiers."""
    futures = [
        sweep.lambda_sweep.submit(
            variant, search.representation, *encoded, split, config.representation,
            config.evaluation, config.seed, sigma, search.C, config.selection.select_by,
            search.lambdas, policy=select.GatePolicy.from_config(config.selection),
        )
        for variant, search in searches.items()
    ]  # fmt: skip
    sweeps = {swept.variant: swept for swept in (future.result() for future in futures)}
    table = pd.DataFrame([row for swept in sweeps.values() for row in swept.rows])
    return table, sweeps


def choose_candidate(config, table, split, searches, encoded) -> select.Choice:
    """The choice on the validation rows; when they are fewer than ``cv_below_rows``, the
    shortlist of the best candidates on them compared by repeated stratified cross-validation
    on the training and validation rows (:func:`fairpca.tasks.sweep.cross_validate`)."""
    selection = config.selection
    if len(split.y_validation) >= selection.cv_below_rows:
        return select.choose(table, split.y_train, split.y_validation, selection)
    majority = select.majority_accuracy_of(split.y_train, split.y_validation)
    representations = {variant: search.representation for variant, search in searches.items()}
    shortlisted = select.shortlist(table, majority, selection, sweep.CV_SHORTLIST)
    rows = sweep.cross_validate(
        shortlisted, representations, encoded, split, evaluation=config.evaluation,
        selection=selection, seed=config.seed,
    )  # fmt: skip
    y_seen = np.concatenate([split.y_train, split.y_validation])
    chosen_by = (
        f"repeated stratified {selection.cv_folds}-fold cross-validation ({selection.cv_repeats} "
        f"repeats) on the {len(y_seen):,} training+validation rows"
    )
    return select.choose(
        pd.DataFrame(rows), split.y_train, y_seen, selection, chosen_by=chosen_by,
        rows="cross-validated training+validation",
    )  # fmt: skip


def sample_shortlist(table: pd.DataFrame, sample, selection) -> list[dict]:
    """What the wide search hands to every row: the
    :data:`~fairpca.tasks.sweep.CV_SHORTLIST` candidates the choice would take from
    (:func:`fairpca.tasks.select.shortlist`: those meeting the gate,
    then those nearest it on every gated measure of every attribute and their intersection,
    with the best unconstrained PCA), and the best that still meet the gate once each gated
    measure is moved towards failing by its 95% sampling error on the sample (the best on a
    sample sit at the gate's edge, where the sample flatters them; these are likely to pass
    on every row too)."""
    majority = select.majority_accuracy_of(sample.y_train, sample.y_validation)
    # only what may be registered is refitted on every row (choose() keeps to the same)
    table = select.registrable(table, selection.allow_row_storing_models)
    # Candidates of two variants that predict alike on the sample (Fair PCA-S at a large l is
    # fair PCA) are refitted once, and take one place of the shortlist; unconstrained PCA
    # (lambda NaN) is never a fair one's copy.
    alike = ["classifier", "lambda", "accuracy", "balanced_accuracy", "dp_difference"]
    numbered = table.assign(row=np.arange(len(table)))
    numbered = numbered.drop_duplicates([c for c in alike if c in numbered])
    strict = numbered.copy()
    for measure, scope in itertools.product(evaluate.GATED_RATES, ("", evaluate.INTERSECTION)):
        value, error = f"{measure}{scope}", f"{measure}.se{scope}"
        if value in strict and error in strict:
            towards = -1.0 if measure == "selection_rate_ratio" else 1.0
            strict[value] = strict[value] + towards * 1.96 * strict[error].fillna(0.0)
    policy = select.GatePolicy.from_config(selection)
    size = sweep.CV_SHORTLIST
    picked = [row["row"] for row in select.shortlist(numbered, majority, selection, size)]
    picked += [
        row["row"]
        for row in select.shortlist(strict, majority, selection, size)
        if not policy.failures(row)
    ]
    return table.iloc[list(dict.fromkeys(picked))].to_dict("records")


# Encoded training rows above which the stages that copy them (the shortlist's refits, the
# reference mitigations) run one after another, not side by side on the task runner's two
# threads: each holds a few copies of the rows it fits (at 500,000 rows of 106 columns,
# 424 MB a copy), so side by side they would add up.
SIDE_BY_SIDE_MAX_BYTES = 200_000_000


def choose_on_every_row(config, table, split, sample, searches, encoded, sigma, out_dir: Path):
    """After a wide search on a sample: its best candidates
    (:data:`~fairpca.tasks.sweep.CV_SHORTLIST` and the best unconstrained PCA, by the audit's
    own order) refitted on every training row and
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
    refit = sweep.refit_shortlist
    if encoded[0].nbytes <= SIDE_BY_SIDE_MAX_BYTES:
        futures = {variant: refit.submit(*arguments(variant)) for variant in variants}
        refits = {variant: future.result() for variant, future in futures.items()}
    else:
        refits = {variant: refit(*arguments(variant)) for variant in variants}
    measured = pd.DataFrame([row for _, swept in refits.values() for row in swept.rows])
    choice = select.choose(measured, split.y_train, split.y_validation, config.selection)
    refitted = (
        f"the {len(measured)} best candidates of the wide search on a stratified sample "
        f"({len(sample.y_train):,} training, {len(sample.y_validation):,} validation rows) were "
        f"refitted on all {len(split.y_train):,} training rows and measured on all "
        f"{len(split.y_validation):,} validation rows, where the choice was made"
    )
    choice = dataclasses.replace(choice, decision=choice.decision.adding(note(refitted)))
    measured.to_csv(out_dir / "shortlist.csv", index=False)
    representations = {variant: rep for variant, (rep, _) in refits.items()}
    return choice, representations, {variant: swept for variant, (_, swept) in refits.items()}


@task(name="write-outputs", cache_policy=NO_CACHE)
def write_outputs(
    out_dir: Path, record: AuditRecord, table: pd.DataFrame, config
) -> dict[str, str]:
    """Everything the audit found, on disk beside the model and the projection matrices
    (written before the record, which names their SHA-256s): the record, the candidates'
    table, the report's plot and the resolved config; then the folder is sealed, with the
    model's and the matrices' SHA-256s as the record names them, before any network call.
    Returns the SHA-256s sealed. The report itself shows the promotion: it is written once
    that is decided, or the look-up has failed (:func:`fairpca.flows.audit.promote_and_log`)."""
    table.to_csv(out_dir / "metrics.csv", index=False)
    (out_dir / "config.json").write_text(config.model_dump_json(indent=2))
    write_audit_record(out_dir / mlflow_logging.AUDIT_FILE, record)
    write_plot(out_dir, record, table)
    model = trust.skops_file(out_dir / "model").relative_to(out_dir.resolve()).as_posix()
    matrices = {f"projection/{name}.npy": digest for name, digest in record.hashes.items()}
    return trust.seal_output_dir(out_dir, known={model: record.model_sha256, **matrices})


def scorer_on_test_rows(split, config):
    """``score(pipeline) -> metrics with intervals`` on this audit's test rows: how the
    champion is measured beside the challenger."""

    options = evaluate.metric_options(config.evaluation, config.seed)

    def score(pipeline) -> dict[str, float]:
        labels = evaluate.predict_by_blocks(pipeline, split.X_test)
        return evaluate.metrics_with_intervals(split.y_test, labels, split.s_test, **options)

    return score


# The champion's look-up and evaluation over the network, retried on transient errors.
champion_lookup = task(name="mlflow-find-champion", **mlflow_logging.RETRYING)(find_champion)


def challenger_of(record: AuditRecord) -> select.Challenger:
    """What the signed record says about the version the audit would promote: it may be
    promoted only if the gate passed it on the validation rows and it was registered."""
    promotable = record.decision.promote and record.register_model
    return select.Challenger(
        name=record.selection.chosen.name,
        decision=select.Decision(promotable, tuple(record.decision.reasons)),
        policy=select.GatePolicy.from_tags(record.model_tags),
        test=dict(record.selection.test),
        model_digest=record.model_digest,
    )


@dataclass
class Loaded:
    """The load-and-encode stage's values: the config as fitted, the split, the fitted
    encoder, the encoded training and validation rows and the k record."""

    config: Any
    split: Any
    preprocessor: Any
    encoded: tuple
    k_record: dict


def load_and_encode(config, clock: Stopwatch) -> Loaded:
    """Stage 1: the rows loaded and split (:func:`fairpca.tasks.data.load_split`), the
    encoder fitted on the training rows, and the config resolved against them."""
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
    return Loaded(config, split, preprocessor, (encoded_train, encoded_validation), k_record)


@dataclass
class Searched:
    """The represent-and-search stage's values: the search's rows (the sample, or every row),
    the reference mitigations (``references()`` gives their rows: waits for them when they
    run beside the search, else runs them), the searches and what was skipped, the MMD
    bandwidth, the candidates' table and sweeps."""

    sample: Any
    sample_encoded: tuple
    references: Callable[[], list[dict]]
    searches: dict
    skipped: dict
    representations: dict
    sigma: float
    table: pd.DataFrame
    sweeps: dict


def represent_and_search(loaded: Loaded, clock: Stopwatch) -> Searched:
    """Stage 2: every variant searched over the k grid and swept over lambda on the search's
    rows; the reference mitigations start beside it when the rows allow."""
    config, split, encoded = loaded.config, loaded.split, loaded.encoded
    # Below cv_below_rows validation rows the choice cross-validates on every row instead.
    search_rows = None if len(split.y_validation) < config.selection.cv_below_rows else (
        config.split.search_rows
    )  # fmt: skip
    sample, sample_encoded = search_sample(
        split, encoded, search_rows, config.seed, config.evaluation.min_group_size
    )
    arguments = (
        loaded.preprocessor, split, encoded, config.evaluation, config.seed, config.selection,
        search_rows,
    )  # fmt: skip
    if encoded[0].nbytes <= SIDE_BY_SIDE_MAX_BYTES:  # beside the search
        references = reference_mitigations.submit(*arguments).result
    else:  # after the choice, when the search's copies of the rows are gone
        references = functools.partial(reference_mitigations, *arguments)
    with clock("search_k"):
        searches, skipped = search_representations(config, sample, sample_encoded)
        representations = {variant: search.representation for variant, search in searches.items()}
    with clock("lambda_sweep"):
        sigma = evaluate.shared_mmd_sigma(  # the MMD bandwidth of every representation
            sample_encoded[0], config.representation.k_grid[0],
            max_rows=config.representation.metric_max_rows, seed=config.seed,
        )  # fmt: skip
        table, sweeps = sweep_all(config, sample, searches, sample_encoded, sigma)
    return Searched(
        sample, sample_encoded, references, searches, skipped, representations, sigma, table,
        sweeps,
    )  # fmt: skip


def choose_model(loaded: Loaded, searched: Searched, out_dir: Path, clock: Stopwatch):
    """Stage 3: the choice on the validation rows (after a search on a sample, among the
    shortlist refitted on every row). Returns the choice, the representations it may
    register and their sweeps."""
    config, split, encoded = loaded.config, loaded.split, loaded.encoded
    with clock("choose"):
        if searched.sample is split:
            choice = choose_candidate(config, searched.table, split, searched.searches, encoded)
            return choice, searched.representations, searched.sweeps
        return choose_on_every_row(
            config, searched.table, split, searched.sample, searched.searches, encoded,
            searched.sigma, out_dir,
        )  # fmt: skip


@dataclass
class Evaluated:
    """The evaluate stage's values: the diagnostics, the chosen pipeline, its validation
    labels and the measures reported on the test rows."""

    diagnostics: Any
    pipeline: Any
    validation_labels: Any
    reported: dict


def evaluate_choice(loaded: Loaded, searched: Searched, chosen, clock: Stopwatch) -> Evaluated:
    """Stage 4: the search's representations diagnosed on its rows, and the chosen pipeline
    (and the best PCA) built and measured on the test rows, which only report."""
    config, split = loaded.config, loaded.split
    choice, registered, sweeps = chosen
    with clock("diagnostics"):  # the search's representations on its rows (a capped sample)
        diagnostics = diagnose(
            searched.representations, *searched.sample_encoded, searched.sample, searched.table,
            seed=config.seed, min_group_size=config.evaluation.min_group_size,
            selection=config.selection,
        )  # fmt: skip
    with clock("evaluate_test"):
        build = functools.partial(evaluate.build_pipeline, loaded.preprocessor, registered, sweeps)
        pipeline = build(choice.chosen)
        pca = choice.pca_row and build(choice.pca_row)  # the best unconstrained PCA
        validation_labels = evaluate.check_pipeline(
            pipeline, split, choice.chosen, config.evaluation
        )
        reported = evaluate.evaluate_reported(
            split, config.evaluation, config.seed, pipeline, pca, choice.chosen, choice.pca_row
        )
    return Evaluated(diagnostics, pipeline, validation_labels, reported)


def judge_references(
    loaded: Loaded, searched: Searched, choice: select.Choice, evaluated: Evaluated,
    clock: Stopwatch,
) -> tuple[list[dict], select.Choice]:  # fmt: skip
    """Stage 5: the reference mitigations (waited for, or run now) and the choice judged
    against them. Returns their rows and the judged choice."""
    config, split = loaded.config, loaded.split
    with clock("wait_references"):
        reference_rows = searched.references()
        chosen = evaluated.reported["chosen"]
        unjudged = unjudged_in_split(split, chosen["validation"], config.evaluation)
        choice = select.judge_chosen(
            choice, reference_rows, chosen["test"], unjudged, config.selection
        )
    return reference_rows, choice


def record_audit(
    loaded: Loaded, searched: Searched, chosen, evaluated: Evaluated, references: list[dict],
    out_dir: Path, clock: Stopwatch, *, kind: str, started_at: datetime, tags: dict[str, str],
) -> AuditRecord:  # fmt: skip
    """Stage 6: the chosen pipeline saved as an MLflow model folder ``out_dir/model`` beside
    the matrices, and the one audit record every later surface reads: with the SHA-256 of
    the model's skops file, the digest of the fit (:func:`fairpca.tasks.trust.model_digest`
    of its content and of the training rows) and the record of its ONNX graph
    (:func:`fairpca.tasks.onnx_export.save_graph`: saved beside the skops file only when its
    labels equal the pipeline's on every validation row)."""
    config, split, pipeline = loaded.config, loaded.split, evaluated.pipeline
    choice, registered, _sweeps = chosen
    representations = {**searched.representations, **registered}
    with clock("save_model"):
        rows = mlflow_logging.as_model_input(split.X_train)
        example = mlflow_logging.input_example(rows, config.representation.min_category_count)
        model_dir = mlflow_logging.save_model_locally(
            pipeline, out_dir, input_example=example, pip_requirements=evaluate.pip_requirements()
        )
        graph = save_graph(model_dir, pipeline, split.X_validation, evaluated.validation_labels)
        model_sha256 = trust.sha256_file(trust.skops_file(model_dir))
        digest = trust.model_digest(pipeline, training_data_digest(split))
        hashes = write_matrices(out_dir, representations)
    return build_record(
        config, kind=kind, run_name=out_dir.name, started_at=started_at, split=split,
        choice=choice, reported=evaluated.reported, references=references,
        diagnostics=evaluated.diagnostics, representations=representations,
        table=searched.table, skipped=searched.skipped, k_record=loaded.k_record,
        frontier=frontier_points(searched.searches, searched.table, config.selection),
        timings=clock.timings(reference_mitigations=sum(r["seconds"] for r in references)),
        hashes=hashes, model_sha256=model_sha256, model_digest=digest, onnx=graph,
        tags={**tags, "fairpca.local_output_dir": str(out_dir.resolve())},
        parity_gap=parity_gap(pipeline, split, searched.table, choice, config.selection,
                              config.evaluation.min_group_size),
    )  # fmt: skip


@dataclass
class Begun:
    """The begin-logging stage's values: the command's one MLflow client, the current
    champion (None: none, or not looked up), the versions the registry demoted, and the
    audit's MLflow run (``run_id``, ``experiment_id``)."""

    client: Any
    champion: Any
    demoted: frozenset
    run: dict[str, str]


def begin_logging(
    out_dir: Path, record: AuditRecord, table: pd.DataFrame, tracking_uri: str, *,
    sealed: dict[str, str], watch: bool, score,
) -> Begun:  # fmt: skip
    """Stage 8, the first over the network: the command's MLflow client, the current
    champion (when the audit registers, and always in a retrain, which re-checks it;
    ``score`` measures it on the audit's test rows) and the audit's run, started before
    the promotion is decided so that the second seal can name it.

    Raises
    ------
    MlflowLoggingError
        One of them failed after its retries (the audit's). The report (without a
        promotion) is written and the folder sealed again first (``sealed``: the first
        seal's SHA-256s), as on an interrupt: ``fairpca relog`` logs it as it is.
    """
    doing, champion, demoted = "Opening the MLflow tracking store", None, frozenset()
    try:
        client = mlflow_client(tracking_uri)
        if record.register_model or watch:
            doing = "Looking up the current champion"
            lookup = champion_lookup.with_options(**mlflow_logging.retrying(record))
            champion, demoted = lookup(
                tracking_uri, record, watch=watch, evaluate=score, client=client
            )
        doing = "Starting the audit's MLflow run"
        run = mlflow_logging.open_run(tracking_uri, record, client=client)
    except BaseException as error:  # the folder is complete before the error goes up
        report_and_seal(out_dir, record, table, sealed, build_verdict(record))
        if not isinstance(error, Exception):
            raise
        raise mlflow_logging.logging_not_begun(out_dir, tracking_uri, doing, error) from error
    return Begun(client, champion, demoted, run)


def decide_and_report(
    out_dir: Path, record: AuditRecord, table: pd.DataFrame, begun: Begun, *,
    sealed: dict[str, str], tolerance: float,
) -> tuple[PromotionRecord, Verdict, Path]:  # fmt: skip
    """Stage 9: the promotion decided against the champion ``begun`` found
    (:func:`fairpca.tasks.select.decide_promotion`), the one verdict every surface shows from
    here on, and both written beside the record, sealed with the audit's run. Returns the
    promotion, the verdict and the HTML report's path."""
    promotion = select.decide_promotion(
        challenger_of(record), begun.champion, tolerance=tolerance, demoted_models=begun.demoted
    )
    decided = PromotionRecord.of(promotion, begun.champion)
    verdict = build_verdict(record, decided)
    report = report_and_seal(out_dir, record, table, sealed, verdict, decided, begun.run)
    return decided, verdict, report


def report_and_seal(
    out_dir: Path, record: AuditRecord, table: pd.DataFrame, sealed: dict[str, str], verdict,
    promotion: PromotionRecord | None = None, run: dict[str, str] | None = None,
) -> Path:  # fmt: skip
    """The promotion (when decided) and the report (showing ``verdict``, with the plot
    :func:`write_outputs` drew) beside the record, then the folder sealed again, with the
    audit's ``run`` when it started (``sealed``: the first seal's SHA-256s, of files not
    rewritten since). Returns the HTML report's path."""
    if promotion is not None:
        (out_dir / mlflow_logging.PROMOTION_FILE).write_text(promotion.model_dump_json(indent=2))
    paths = write_report(out_dir, record, table, promotion, plot=False, verdict=verdict)
    trust.seal_output_dir(out_dir, known=sealed, run=run)
    return paths["html"]
