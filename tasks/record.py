"""What an audit records: its in-memory state, the report's sections, the flat MLflow
metrics/tags and the ``selection`` summary of the typed audit record
(:mod:`fairpca.tasks.audit_record`) that the registry, the card and the summaries read."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.pipeline import Pipeline

from fairpca import metrics as fm

from .audit_record import MetricStep, Selection
from .evaluate import HEADLINE_METRICS
from .report import Bullets, Plot, format_interval, gate_sentence, summary_table, verdict_sections
from .select import Decision, candidate_name

__all__ = [
    "AuditState",
    "audit_facts",
    "candidate_summary",
    "chosen_metrics",
    "diagnostics_frame",
    "format_interval",
    "group_sizes",
    "logged_metrics",
    "metric_steps",
    "model_tags",
    "report_sections",
    "reported_frame",
    "run_tags",
    "selection_record",
]

# The one entry of an attribute's group sizes that stands for its withheld groups (unnamed).
WITHHELD = "(withheld)"


@dataclass
class AuditState:
    """In-memory results of the compute part of an audit (no MLflow yet)."""

    config: Any
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
    pca_row: dict[str, Any] | None = None
    majority_accuracy: float = math.nan
    evaluation: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    # Top-level audit record additions (policy, eligibility, references, screening, k, ...)
    additions: dict[str, Any] = field(default_factory=dict)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value))


def chosen_metrics(chosen: dict[str, Any]) -> dict[str, float]:
    """The chosen row's numeric, finite values (validation metrics and representation facts)."""
    skip = ("variant", "classifier", "lambda_index")
    return {k: float(v) for k, v in chosen.items() if k not in skip and _finite(v)}


def metric_steps(table: pd.DataFrame) -> list[MetricStep]:
    """Per-lambda validation curves as MLflow metric histories.

    The step is the lambda's index in the sweep; ``<variant>/lambda`` holds the lambda itself
    at the same steps, so a chart can plot any curve against lambda (MLflow's x-axis "metric").
    """
    steps = []
    for row in table.to_dict("records"):
        prefix = f"{row['variant']}/{row['classifier']}"
        for column in HEADLINE_METRICS:
            steps.append((f"{prefix}/{column}", row.get(column), row["lambda_index"]))
    reps = table.drop_duplicates(subset=["variant", "lambda_index"])
    for row in reps.to_dict("records"):
        for column in ("lambda", *REPRESENTATION_CURVES):
            steps.append((f"{row['variant']}/{column}", row.get(column), row["lambda_index"]))
    return [
        MetricStep(key=key, value=float(value), step=int(step))
        for key, value, step in steps
        if _finite(value) and np.isfinite(value)
    ]


REPRESENTATION_CURVES = ("mmd2", "linear_inseparability", "mean_gap_train", "mean_gap_validation")


def group_sizes(
    split, min_group_size: int, allow_small_groups: bool = False
) -> dict[str, dict[str, int | str]]:
    """Rows per group over the three parts, as :func:`fairpca.metrics.published_group_sizes`
    allows (complementary suppression); withheld groups are one unnamed entry."""
    frame = pd.concat([split.s_train, split.s_validation, split.s_test], ignore_index=True)
    sizes, withheld = fm.published_group_sizes(
        frame.astype(str), min_group_size=min_group_size, allow_small_groups=allow_small_groups
    )
    out: dict[str, dict[str, int | str]] = {}
    for column, published in sizes.items():
        out[column] = dict(published)
        if withheld[column]:
            out[column][WITHHELD] = f"{withheld[column]} group(s), suppressed"
    return out


def selection_record(state: AuditState) -> Selection:
    """The audit's result (``audit.json["selection"]``).

    ``baselines["pca"]`` is present only when the audit fitted standard PCA.
    """
    chosen, evaluation = state.chosen, state.evaluation
    lam = chosen["lambda"]
    record = {
        "chosen": {
            "variant": chosen["variant"],
            "classifier": chosen["classifier"],
            "lambda": None if not _finite(lam) else float(lam),
            "name": candidate_name(chosen),
        },
        "gate": state.config.selection.gate,
        "decision": state.decision.as_dict(),
        "validation": evaluation["chosen"]["validation"],
        "test": evaluation["chosen"]["test"],
        "baselines": {
            "majority": {
                "class": evaluation["majority"]["class"],
                "validation": evaluation["majority"]["validation"],
                "test": evaluation["majority"]["test"],
            },
        },
        "split": {key: state.split.summary()[key] for key in ("n_train", "n_validation", "n_test")},
        "group_sizes": group_sizes(
            state.split,
            state.config.evaluation.min_group_size,
            state.config.evaluation.allow_small_groups,
        ),
        "diagnostics": state.diagnostics.get("representations", {}),
        "warnings": list(state.diagnostics.get("warnings", [])),
    }
    if state.pca_row is not None and "pca" in evaluation:
        record["baselines"]["pca"] = {
            "name": candidate_name(state.pca_row),
            "validation": evaluation["pca"]["validation"],
            "test": evaluation["pca"]["test"],
        }
    return Selection.model_validate(json.loads(json.dumps(record, default=float)))


def audit_facts(state: AuditState) -> dict[str, Any]:
    """Data and setup facts for the report (aggregates only), each a readable string."""
    config = state.config
    selection = config.selection
    split = state.split.summary()
    facts: dict[str, Any] = {
        "source": config.source.name,
        "sensitive attribute(s)": ", ".join(str(c) for c in state.split.s_train.columns),
        "rows (train / validation / test)": (
            f"{split['n_train']} / {split['n_validation']} / {split['n_test']}"
        ),
        **{k: v for k, v in split.items() if k not in ("n_train", "n_validation", "n_test")},
        "k": config.representation.k,
        "variants": ", ".join(config.representation.variants),
        "lambdas": ", ".join(f"{lam:g}" for lam in config.representation.lambdas),
        "classifiers": ", ".join(config.evaluation.classifiers),
        "seed": config.seed,
        "gate": gate_sentence(config.selection.thresholds, config.selection.gate),
        "eligibility": f"beat the majority class by {selection.min_accuracy_gain} on "
        f"validation, predict one class for < {100 * selection.max_one_class_share:g}% of the rows",
    }
    if "rbf_svc" in config.evaluation.classifiers:
        cap = config.evaluation.svc_max_train_rows
        facts["RBF SVC training rows"] = (
            split["n_train"] if cap is None else min(cap, split["n_train"])
        )
    encoding = getattr(state.dataset, "sensitive_encoding", None)
    if encoding:
        facts["group coding"] = "; ".join(f"{k}: {v}" for k, v in encoding.items())
    facts["group sizes (all parts)"] = "; ".join(
        f"{attribute}: " + ", ".join(f"{group} {n}" for group, n in groups.items())
        for attribute, groups in group_sizes(
            state.split, config.evaluation.min_group_size, config.evaluation.allow_small_groups
        ).items()
    )
    return facts


def reported_frame(state: AuditState) -> pd.DataFrame:
    """Chosen candidate beside the baselines, validation and test, with 95% intervals."""
    evaluation = state.evaluation
    rows = [("chosen: " + candidate_name(state.chosen), evaluation["chosen"])]
    if "pca" in evaluation and state.pca_row is not None:
        rows.append(("unconstrained PCA: " + candidate_name(state.pca_row), evaluation["pca"]))
    rows.append(("majority class", evaluation["majority"]))
    test = evaluation["chosen"]["test"]
    several = any(k.endswith(".intersection") for k in test)
    metrics = [k for k in test if k.startswith(HEADLINE_METRICS) and "ci95" not in k]
    metrics = sorted(metrics) if several else list(HEADLINE_METRICS)
    records = []
    for label, parts in rows:
        for part in ("validation", "test"):
            entry = {"model": label, "rows": part}
            for metric in metrics:
                entry[metric] = format_interval(parts[part], metric)
            records.append(entry)
    return pd.DataFrame(records)


def candidate_summary(state: AuditState) -> pd.DataFrame:
    """The summary table (validation rows): baselines, chosen, lambda ends per variant."""
    baselines = {
        "majority": {"validation": {"accuracy": state.majority_accuracy}},
        "pca": None if state.pca_row is None else {"row": state.pca_row},
    }
    return summary_table(state.table, state.chosen, baselines)


def report_sections(state: AuditState, extra: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The report's sections, in order (rendered to Markdown and HTML by the report task)."""
    diag = state.diagnostics
    selection = selection_record(state).model_dump(by_alias=True)  # the renderers read plain data
    sections: list[tuple[str, Any]] = [
        *verdict_sections(
            selection,
            thresholds=state.config.selection.thresholds,
            references=state.additions.get("references"),
            policy=state.additions.get("policy"),
        ),
        (
            "Trade-off on validation rows",
            Plot(
                f"validation {state.config.selection.select_by.replace('_', ' ')} (what the choice "
                "maximises) against each gated measure, with 95% intervals"
            ),
        ),
        (
            "Candidates on validation rows (baselines, chosen, lambda=0 and last lambda per "
            "variant and classifier; full table: metrics.csv)",
            candidate_summary(state),
        ),
        (
            "Validation and test rows of the chosen candidate and the baselines",
            reported_frame(state),
        ),
        ("Data and setup", Bullets([f"{k}: {v}" for k, v in audit_facts(state).items()])),
        (
            "Diagnostics: does fairness carry over to held-out rows?",
            diagnostics_frame(diag.get("representations", {})),
        ),
    ]
    sections += extra
    sections.append(
        (
            "Notes",
            "All numbers are aggregates; groups with fewer than "
            f"{state.config.evaluation.min_group_size} rows are suppressed. No raw rows or "
            "per-person sensitive attributes are stored.",
        )
    )
    return sections


def diagnostics_frame(per_variant: dict[str, Any]) -> pd.DataFrame:
    """One row per representation and attribute: probe, chance, mean gaps, reconstruction."""
    records = []
    for variant, diag in per_variant.items():
        errors = diag.get("reconstruction_error") or {}
        for attribute, probe in diag["leakage"].items():
            records.append(
                {
                    "representation": variant,
                    "attribute": attribute,
                    "probe balanced accuracy": f"{probe['balanced_accuracy']:.3f} "
                    f"[{probe['balanced_accuracy.ci95_low']:.3f}, "
                    f"{probe['balanced_accuracy.ci95_high']:.3f}]",
                    "chance": probe["chance"],
                    "mean gap (train)": diag["mean_gap_train"],
                    "mean gap (validation)": diag["mean_gap_validation"],
                    "reconstruction error per group": ", ".join(
                        f"{g}: {e:.3g}" for g, e in errors.items()
                    )
                    or "-",
                    "near-constant directions": ", ".join(
                        str(d["direction"])
                        for d in diag["near_constant_directions"].get(attribute, [])
                    )
                    or "-",
                }
            )
    return pd.DataFrame(records)


def run_tags(state: AuditState) -> dict[str, str]:
    """MLflow run tags, a short curated set: identity of the audit, the choice and the
    decision. The verdict in full is the run's description; the matrices' SHA-256 are the
    artifact ``hashes.json``."""
    return {
        "fairpca.audit_id": state.run_name,
        "fairpca.source": state.config.source.name,
        "fairpca.sensitive": ",".join(state.split.s_train.columns),
        "fairpca.chosen": candidate_name(state.chosen),
        "fairpca.decision": "promote" if state.decision.promote else "keep",
        "fairpca.decision_reasons": "; ".join(state.decision.reasons),
        "fairpca.gate": state.config.selection.gate,
        "fairpca.local_output_dir": str(state.out_dir.resolve()),
        **({"fairpca.skipped_variants": "; ".join(state.skipped)} if state.skipped else {}),
    }


def model_tags(state: AuditState) -> dict[str, str]:
    """Identity tags of the logged and registered model (the registry adds the test
    metrics, :func:`fairpca.tasks.registry.fairness_tags`)."""
    return {
        "fairness.chosen": candidate_name(state.chosen),
        "fairness.decision": "promote" if state.decision.promote else "keep",
        "fairpca.audit_id": state.run_name,
    }


def logged_metrics(state: AuditState) -> dict[str, float]:
    """Flat run metrics: the chosen candidate's validation metrics (unprefixed, as the sweep's
    curves), its test metrics and the baselines' (``test.``, ``baseline.<name>.<part>.``),
    representation facts and timings."""
    metrics = {**chosen_metrics(state.chosen), **state.timings}
    evaluation = state.evaluation
    metrics.update({f"test.{k}": v for k, v in evaluation["chosen"]["test"].items()})
    for name in ("majority", "pca"):
        for part in ("validation", "test"):
            values = evaluation.get(name, {}).get(part, {})
            metrics.update(
                {
                    f"baseline.{name}.{part}.{k}": v
                    for k, v in values.items()
                    if k.startswith(HEADLINE_METRICS)
                }
            )
    for variant, rep in state.representations.items():
        for key, value in rep.facts.items():
            metrics[f"{variant}/{key}"] = value
    return {k: float(v) for k, v in metrics.items() if _finite(v)}
