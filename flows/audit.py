"""The ``fairness_audit`` flow: data -> fair representations -> lambda sweep -> classifiers
-> report -> MLflow (run, artifacts, registered model, ``champion`` alias).

Results are written to ``<output_dir>/<run_name>/`` first and logged to MLflow afterwards,
so a tracking outage never loses an audit (see :mod:`tasks.mlflow_logging`).
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import get_run_context
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel
from sklearn.pipeline import Pipeline

from tasks.data import load_data, split_data
from tasks.evaluate import shared_mmd_sigma
from tasks.mlflow_logging import AUDIT_FILE, log_output_dir, save_model_locally
from tasks.model_card import provenance
from tasks.model_io import as_model_input, input_example, path_inside
from tasks.report import (
    Decision,
    select_candidate,
    summary_table,
    write_json,
    write_matrices,
    write_report,
)
from tasks.represent import fit_preprocessor, fit_representation
from tasks.sweep import lambda_sweep

from .config import AuditConfig, resolve_tracking_uri
from .runners import current_task_runner_name, needs_dask_subflow, task_runner_for
from .warmup import start_warmup, wait_for_warmup

__all__ = ["AuditResult", "AuditState", "fairness_audit", "finish_audit", "prepare_audit"]

HEADLINE = ("accuracy", "dp_difference", "eo_difference", "var_explained", "mmd2")


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
    skipped: dict[str, str] = {}


@dataclass
class AuditState:
    """In-memory results of the compute part of an audit (no MLflow yet)."""

    config: AuditConfig
    run_name: str
    out_dir: Path
    dataset: Any
    split: Any
    preprocessor: Any
    representations: dict[str, Any]
    sweeps: dict[str, Any]
    table: pd.DataFrame
    chosen: dict[str, Any]
    decision: Decision
    pipeline: Pipeline
    timings: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


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
    source = re.sub(r"[^a-z0-9-]+", "-", config.source_name.lower()).strip("-") or "data"
    return f"{kind}-{source}-{stamp}-{uuid.uuid4().hex[:6]}"


def prepare_audit(config: AuditConfig, kind: str = "audit") -> AuditState:
    """Compute part of an audit: load, split, fit, sweep, evaluate, choose a pipeline."""
    logger = get_run_logger()
    start_warmup(resolve_tracking_uri(config.tracking_uri))
    timings: dict[str, float] = {}
    run_name = config.run_name or unique_run_name(config, kind)
    out_dir = path_inside(config.output_dir, run_name)
    out_dir.mkdir(parents=True, exist_ok=False)

    with timed(timings, "load_data"):
        dataset = load_data(config)
    with timed(timings, "split_data"):
        split = split_data(dataset, config)
    logger.info("split: %s", split.summary())
    with timed(timings, "fit_preprocessor"):
        preprocessor, Z_train, Z_eval = fit_preprocessor(split, config.min_group_size)
    with timed(timings, "fit_representations"):
        futures = {
            variant: fit_representation.submit(
                variant,
                Z_train,
                split.y_train,
                split.s_train,
                k=config.k,
                equalize_covariance=config.equalize_covariance,
                seed=config.seed,
            )
            for variant in config.variants
        }
        representations, skipped = {}, {}
        for variant, future in futures.items():
            try:
                representations[variant] = future.result()
            except ValueError as error:  # e.g. a group without positive rows for EO
                skipped[variant] = str(error)
                logger.warning("variant %s skipped: %s", variant, error)
    if not representations:
        raise ValueError(
            "no representation could be fitted: "
            + "; ".join(f"{variant}: {why}" for variant, why in skipped.items())
        )
    for variant, rep in representations.items():
        timings[f"time_fit_{_dashed(variant)}_s"] = rep.fit_seconds
    sigma = shared_mmd_sigma(Z_train, config.k, max_rows=config.metric_max_rows, seed=config.seed)
    with timed(timings, "lambda_sweep"):
        sweep_futures = {
            variant: lambda_sweep.submit(variant, rep, Z_train, Z_eval, split, config, sigma)
            for variant, rep in representations.items()
        }
        sweeps = {variant: future.result() for variant, future in sweep_futures.items()}
    for variant, sweep in sweeps.items():
        timings[f"time_sweep_{_dashed(variant)}_s"] = sweep.seconds
    table = pd.DataFrame([row for sweep in sweeps.values() for row in sweep.rows])
    candidates = registrable(table, config)
    chosen, decision = select_candidate(candidates, config.thresholds)
    if len(candidates) < len(table):
        decision.reasons.append(
            f"{len(table) - len(candidates)} candidates (RBF SVC, fair kernel PCA) were audited "
            "but not eligible for registration: their fitted state stores training rows"
        )
    pipeline = build_pipeline(preprocessor, representations, sweeps, chosen)
    check_pipeline(pipeline, split, chosen)
    return AuditState(
        config=config,
        run_name=run_name,
        out_dir=out_dir,
        dataset=dataset,
        split=split,
        preprocessor=preprocessor,
        representations=representations,
        sweeps=sweeps,
        table=table,
        chosen=chosen,
        decision=decision,
        pipeline=pipeline,
        timings=timings,
        skipped=skipped,
    )


ROW_STORING_VARIANTS = ("fair_kernel_pca",)  # keeps its training points (kernel map)
ROW_STORING_CLASSIFIERS = ("rbf_svc",)  # keeps support vectors (projected training rows)


def registrable(table: pd.DataFrame, config: AuditConfig) -> pd.DataFrame:
    """Candidates that may become the logged model.

    Unless ``allow_row_storing_models``, pipelines whose fitted state holds (projected)
    training rows are audited but not logged, so no per-person data reaches MLflow.
    """
    if config.allow_row_storing_models:
        return table
    keep = ~table["variant"].isin(ROW_STORING_VARIANTS) & ~table["classifier"].isin(
        ROW_STORING_CLASSIFIERS
    )
    if not keep.any():
        raise ValueError(
            "every candidate stores training rows in its fitted state (RBF SVC support "
            "vectors, fair kernel PCA training points), so none can be logged as a model; add "
            "logreg, linear_svm or mlp and a linear variant, or set allow_row_storing_models."
        )
    return table[keep]


def build_pipeline(preprocessor, representations, sweeps, chosen) -> Pipeline:
    """preprocess -> representation (at the chosen lambda) -> classifier, all fitted."""
    rep = representations[chosen["variant"]]
    estimator = copy.deepcopy(rep.estimator)
    if rep.tradeoff:
        estimator.set_params(tradeoff=float(chosen["lambda"]))
    classifier = sweeps[chosen["variant"]].classifiers[
        (int(chosen["lambda_index"]), chosen["classifier"])
    ]
    return Pipeline(
        [("preprocess", preprocessor), ("represent", estimator), ("classify", classifier)]
    )


def check_pipeline(pipeline: Pipeline, split, chosen: dict[str, Any]) -> None:
    """The assembled pipeline must reproduce the sweep's accuracy from X alone."""
    accuracy = float(np.mean(pipeline.predict(split.X_eval) == split.y_eval))
    if abs(accuracy - chosen["accuracy"]) > 1e-9:
        raise RuntimeError(
            f"the assembled pipeline scores {accuracy:.6f}, the sweep {chosen['accuracy']:.6f}; "
            "the representation or classifier was changed after the sweep."
        )


def pip_requirements() -> list[str]:
    """Pinned runtime requirements of the logged pipeline (fairpca's sources travel along)."""
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("numpy", "scipy", "scikit-learn", "pandas")]


def _dataset_facts(state: AuditState) -> dict[str, Any]:
    config = state.config
    facts: dict[str, Any] = {
        "source": config.source_name,
        "sensitive attribute(s)": ", ".join(state.split.s_train.columns),
        **state.split.summary(),
        "k": config.k,
        "variants": ", ".join(config.variants),
        "lambdas": ", ".join(f"{lam:g}" for lam in config.lambdas),
        "classifiers": ", ".join(config.classifiers),
        "seed": config.seed,
        "RBF SVC training rows": config.svc_max_train_rows or "all",
        "thresholds": config.thresholds.model_dump(),
    }
    encoding = getattr(state.dataset, "sensitive_encoding", None)
    if encoding:
        facts["group coding"] = "; ".join(f"{k}: {v}" for k, v in encoding.items())
    summary = getattr(state.dataset, "summary", None)
    if callable(summary):
        groups = summary().get("groups", {})
        facts["groups (count, P(y=1)) in the full data"] = json.dumps(groups)
    return facts


def _metric_steps(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Per-lambda curves as MLflow metric histories (step = lambda index)."""
    steps = []
    per_classifier = [
        c for c in table.columns if c in ("accuracy", "dp_difference", "eo_difference")
    ]
    per_rep = ["mmd2", "linear_inseparability", "mean_gap_train"]
    for row in table.to_dict("records"):
        prefix = f"{row['variant']}/{row['classifier']}"
        for column in per_classifier:
            steps.append(
                {"key": f"{prefix}/{column}", "value": row[column], "step": row["lambda_index"]}
            )
    reps = table.drop_duplicates(subset=["variant", "lambda_index"])
    for row in reps.to_dict("records"):
        for column in per_rep:
            steps.append(
                {
                    "key": f"{row['variant']}/{column}",
                    "value": row[column],
                    "step": row["lambda_index"],
                }
            )
    return [s for s in steps if np.isfinite(s["value"])]


def _chosen_metrics(chosen: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in chosen.items():
        if key in ("variant", "classifier", "lambda_index") or not isinstance(value, int | float):
            continue
        if isinstance(value, float) and not np.isfinite(value):
            continue
        out[key] = float(value)
    return out


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
    tracking_uri = resolve_tracking_uri(config.tracking_uri)
    with timed(timings, "write_outputs"):
        hashes = write_matrices(out_dir, state.representations)
        state.table.to_csv(out_dir / "metrics.csv", index=False)
        (out_dir / "config.json").write_text(config.model_dump_json(indent=2))
        save_model_locally(
            state.pipeline,
            out_dir,
            input_example=input_example(as_model_input(state.split.X_train)),
            pip_requirements=pip_requirements(),
        )
    title = f"Fairness {kind}: {config.source_name} ({state.run_name})"
    with timed(timings, "write_report"):
        paths = write_report(
            out_dir,
            title=title,
            table=state.table,
            chosen=state.chosen,
            decision=state.decision,
            facts=_dataset_facts(state),
            extra_sections=(extra_sections or [])
            + _skipped_section(state.skipped)
            + [("Timings (seconds)", _timings_frame(timings))],
        )
    chosen = state.chosen
    chosen_name = f"{chosen['variant']}/{chosen['classifier']}@lambda={chosen['lambda']:g}"
    tags = {
        "fairpca.audit_id": state.run_name,
        "fairpca.flow": kind,
        "fairpca.source": config.source_name,
        "fairpca.sensitive": ",".join(state.split.s_train.columns),
        "fairpca.chosen": chosen_name,
        "fairpca.decision": "promote" if state.decision.promote else "keep",
        "fairpca.decision_reasons": "; ".join(state.decision.reasons),
        "fairpca.local_output_dir": str(out_dir.resolve()),
        **{f"fairpca.sha256.{key}": value for key, value in hashes.items()},
        "fairpca.projection": f"projection/{chosen['variant']}",
        "fairpca.components_sha256": hashes.get(f"{chosen['variant']}/components_", ""),
        "fairpca.mean_sha256": hashes.get(f"{chosen['variant']}/mean_", ""),
        **({"fairpca.skipped_variants": "; ".join(state.skipped)} if state.skipped else {}),
        **(extra_tags or {}),
    }
    with suppress(Exception):  # outside a flow run there is no flow run id
        tags["fairpca.prefect_flow_run_id"] = str(get_run_context().flow_run.id)
        tags["fairpca.task_runner"] = current_task_runner_name() or "none"
    model_tags = {
        "variant": chosen["variant"],
        "classifier": chosen["classifier"],
        "lambda": f"{chosen['lambda']:g}",
        "accuracy": f"{chosen['accuracy']:.6f}",
        "dp_difference": f"{chosen['dp_difference']:.6f}",
        "eo_difference": f"{chosen['eo_difference']:.6f}",
        "meets_thresholds": str(state.decision.promote).lower(),
        "sensitive": tags["fairpca.sensitive"],
        "audit_run_name": state.run_name,
        **{f"threshold.{k}": str(v) for k, v in config.thresholds.model_dump().items()},
    }
    metrics = {**_chosen_metrics(chosen), **timings, **(extra_metrics or {})}
    for variant, rep in state.representations.items():
        for key, value in rep.facts.items():
            metrics[f"{variant}/{key}"] = value
    audit = {
        "audit_id": state.run_name,
        "run_name": state.run_name,
        "kind": kind,
        "experiment_name": config.experiment_name,
        "model_name": config.resolved_model_name,
        "champion_alias": config.champion_alias,
        "register_model": config.register_model,
        "mlflow_retries": config.mlflow_retries,
        "mlflow_retry_backoff": config.mlflow_retry_backoff,
        "decision": state.decision.as_dict(),
        "chosen": {k: v for k, v in chosen.items() if not isinstance(v, float) or np.isfinite(v)},
        "params": {**config.flat_params(), "resolved_tracking_uri": tracking_uri},
        "metrics": metrics,
        "metric_steps": _metric_steps(state.table),
        "tags": tags,
        "model_tags": model_tags,
        "hashes": hashes,
        "provenance": provenance(config),
    }
    write_json(out_dir / AUDIT_FILE, audit)
    summary = summary_table(state.table)
    _prefect_artifacts(config, state, summary, chosen_name)
    wait_for_warmup(tracking_uri)
    logged = log_output_dir(out_dir, tracking_uri)
    return AuditResult(
        run_id=logged.run_id,
        run_name=state.run_name,
        experiment_id=logged.experiment_id,
        tracking_uri=tracking_uri,
        model_name=config.resolved_model_name if config.register_model else None,
        model_version=logged.model_version,
        champion_alias=config.champion_alias,
        champion_moved=logged.champion_moved,
        decision="promote" if state.decision.promote else "keep",
        reasons=state.decision.reasons,
        chosen={k: chosen[k] for k in ("variant", "classifier", "lambda", *HEADLINE)},
        output_dir=str(out_dir.resolve()),
        report_path=str(paths["html"].resolve()),
        summary=json.loads(summary.to_json(orient="records")),
        skipped=state.skipped,
    )


def _skipped_section(skipped: dict[str, str]) -> list[tuple[str, Any]]:
    if not skipped:
        return []
    text = "\n".join(f"- {variant}: {why}" for variant, why in skipped.items())
    return [("Skipped variants (could not be fitted on this data)", text)]


def _timings_frame(timings: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"step": list(timings), "seconds": list(timings.values())})


def _prefect_artifacts(config, state: AuditState, summary: pd.DataFrame, chosen: str) -> None:
    """Markdown + table artifacts in the Prefect UI (aggregated numbers only)."""
    key = re.sub(r"[^a-z0-9-]+", "-", f"fairpca-{config.source_name}".lower())
    verdict = "promote to champion" if state.decision.promote else "keep the current champion"
    lines = [
        f"# Fairness audit {state.run_name}",
        f"- chosen: `{chosen}` - decision: **{verdict}**",
        *(f"- {reason}" for reason in state.decision.reasons),
        f"- accuracy {state.chosen['accuracy']:.4f}, DP difference "
        f"{state.chosen['dp_difference']:.4f}, EO difference {state.chosen['eo_difference']:.4f}",
        f"- local results: `{state.out_dir.resolve()}`",
    ]
    create_markdown_artifact("\n".join(lines), key=f"{key}-summary", description="audit summary")
    records = json.loads(summary.round(4).to_json(orient="records"))
    create_table_artifact(records, key=f"{key}-table", description="per variant and classifier")


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
    if needs_dask_subflow(config.dask_address):  # a deployment run asking for Dask
        dask_flow = fairness_audit.with_options(task_runner=task_runner_for(config.dask_address))
        return dask_flow(config)
    state = prepare_audit(config, "audit")
    return finish_audit(state, kind="audit")
