"""The audit record (``audit.json``): one immutable typed record per audit, built once.

The audit flow builds one :class:`AuditRecord` from its stages (:func:`build_record`), writes
it with :func:`write_audit_record` and every reader (the report, the model card, registry tags
and descriptions, MLflow logging and relog, Prefect artifacts, the command line summary) reads
it, or reads it back with :func:`read_audit_record`. Every model forbids unknown keys, so a
renamed or misspelt key is a validation error where the record is built or read, not a silent
``None`` in a reader; the models are frozen, so no reader changes what another reads.

Metric dictionaries (``validation``, ``test``, a baseline's numbers) map the metric names built
by :mod:`fairpca.metrics` (``accuracy``, ``dp_difference.sex``, ``selection_rate.sex:Female``,
each with ``.ci95_low`` / ``.ci95_high``) to floats; an undefined metric is NaN (written as the
JSON constant ``NaN``, as Python's :mod:`json` does).
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from fairpca import metrics as fm

from .evaluate import HEADLINE_METRICS
from .references import REFERENCE_KEYS
from .select import Choice, candidate_name

__all__ = [
    "WITHHELD",
    "AuditRecord",
    "Baselines",
    "ChampionComparison",
    "ChosenCandidate",
    "CodeVersion",
    "DataSource",
    "DecisionRecord",
    "Definition",
    "Eligibility",
    "KRecord",
    "MajorityBaseline",
    "MetricStep",
    "PcaBaseline",
    "Policy",
    "PromotionRecord",
    "Provenance",
    "ReferenceMitigation",
    "ScreenedColumn",
    "Selection",
    "SplitCounts",
    "SplitSizes",
    "build_record",
    "candidate_summary",
    "chosen_metrics",
    "group_sizes",
    "metric_steps",
    "read_audit_record",
    "training_data_digest",
    "write_audit_record",
]


Metrics = dict[str, float]


class _Record(BaseModel):
    """Strict JSON shape: unknown keys are refused; aliases (``lambda``, ``class``) are the
    names written; NaN and infinities round-trip as JSON constants."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        serialize_by_alias=True,
        ser_json_inf_nan="constants",
    )


class DecisionRecord(_Record):
    """Whether the chosen candidate may become champion, and why."""

    promote: StrictBool  # "true" or 1 in a crafted record is not a promotion
    reasons: list[str] = []


class ChosenCandidate(_Record):
    """The candidate chosen on validation rows."""

    variant: str
    classifier: str
    lambda_: float | None = Field(None, alias="lambda")
    name: str


class MajorityBaseline(_Record):
    """The constant classifier that predicts the training rows' majority class."""

    class_: int | float | str = Field(alias="class")
    validation: Metrics
    test: Metrics


class PcaBaseline(_Record):
    """The best unconstrained-PCA candidate (validation rows), evaluated like the chosen one."""

    name: str
    validation: Metrics
    test: Metrics


class Baselines(_Record):
    """``pca`` is None when the audit fitted no standard PCA."""

    majority: MajorityBaseline
    pca: PcaBaseline | None = None


class SplitCounts(_Record):
    """Rows of the three disjoint parts."""

    n_train: int
    n_validation: int
    n_test: int


class Selection(_Record):
    """The audit's result: choice, gate, decision, metrics with intervals, data facts."""

    chosen: ChosenCandidate
    gate: str
    decision: DecisionRecord
    validation: Metrics
    test: Metrics
    baselines: Baselines
    split: SplitCounts
    # rows per published group; withheld groups are one unnamed entry ("2 group(s), suppressed")
    group_sizes: dict[str, dict[str, int | str]]
    diagnostics: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []


class Definition(_Record):
    """What the audit measures (the registered model's identity)."""

    source: str
    label: str | None
    positive_label: str | None = None
    sensitive: list[str]


class DataSource(_Record):
    """Where the rows came from and the SHA-256 of each raw file (None: no published sum)."""

    kind: Literal["dataset", "file"]
    name: str
    sha256: dict[str, str | None]


class CodeVersion(_Record):
    fairpca: str
    git_commit: str


class Provenance(_Record):
    definition: Definition
    data_source: DataSource
    code_version: CodeVersion


class MetricStep(_Record):
    """One point of a validation curve over lambda (``step`` is the lambda's index; the
    lambda itself is the point of ``<variant>/lambda`` at the same step)."""

    key: str
    value: float
    step: int


# ---- sections the gate policy adds (optional: absent in records written before them) ---------


class Policy(_Record):
    name: str
    thresholds: dict[str, float]
    description: str


class Eligibility(_Record):
    rules: dict[str, float]
    chosen_passes: bool
    reasons: list[str] = []


class ReferenceMitigation(_Record):
    """A reference mitigation (e.g. fairlearn's post-processing) evaluated like the chosen one."""

    name: str
    approach: Literal["post-processing", "reductions", "pre-processing"]
    needs_sensitive_at_prediction: bool
    validation: Metrics
    test: Metrics


class ScreenedColumn(_Record):
    column: str
    rule: str
    score: float | None = None
    action: Literal["excluded", "kept"]


class ChampionComparison(_Record):
    champion_version: str
    challenger: str
    rows: str
    metrics: dict[str, Any]
    outcome: str
    reason: str


class PromotionRecord(_Record):
    """The promotion decided after the record was sealed, over the network
    (``promotion.json``): whether the champion alias moves to this audit's version, whether the
    champion loses it, why, and the side-by-side comparison on this audit's test rows."""

    promote: StrictBool
    demote: StrictBool = False
    reasons: list[str] = []
    champion_version: str | None = None
    comparison: ChampionComparison | None = None

    @classmethod
    def of(cls, promotion, champion) -> PromotionRecord:
        """The record of a :class:`fairpca.tasks.select.Promotion` against ``champion``."""
        return cls(
            promote=promotion.promote,
            demote=promotion.demote,
            reasons=list(promotion.reasons),
            champion_version=None if champion is None else champion.version,
            comparison=promotion.comparison,
        )


class KRecord(_Record):
    requested: int | None = None
    fitted: int
    note: str


class SplitSizes(_Record):
    train: int
    validation: int
    test: int


# ---- the record --------------------------------------------------------------------------------


class AuditRecord(_Record):
    """Everything an audit recorded, as written to ``audit.json``.

    ``started_at`` / ``ended_at`` are the audit's own wall-clock span (from the start of the
    computation until every result was written locally). The MLflow run starts at
    ``started_at`` and ends when the audit's own logging ends, or at ``ended_at`` when
    ``fairpca relog`` logs it later.
    """

    audit_id: str
    run_name: str
    kind: Literal["audit", "retrain"]
    experiment_name: str
    model_name: str
    champion_alias: str
    register_model: bool
    mlflow_retries: int = 3
    mlflow_retry_backoff: float = 2.0
    started_at: datetime
    ended_at: datetime
    sensitive: list[str]
    decision: DecisionRecord
    chosen: dict[str, float | str]
    selection: Selection
    params: dict[str, str]
    metrics: Metrics
    metric_steps: list[MetricStep]
    tags: dict[str, str]
    model_tags: dict[str, str]
    hashes: dict[str, str]
    provenance: Provenance
    policy: Policy | None = None
    eligibility: Eligibility | None = None
    references: list[ReferenceMitigation] | None = None
    screening: list[ScreenedColumn] | None = None
    champion_comparison: ChampionComparison | None = None
    k: KRecord | None = None
    split_sizes: SplitSizes | None = None
    # since the audit was cut into stages (absent in older records)
    candidates: list[dict[str, Any]] | None = None  # the summary rows (validation)
    skipped: dict[str, str] | None = None  # variants that could not be fitted, and why
    model_sha256: str | None = None  # of the saved skops file
    model_digest: str | None = None  # of the fitted pipeline's content (same fit, same digest)
    training_data_sha256: str | None = None  # of the training rows (features, label, groups)

    @property
    def min_group_size(self) -> int | None:
        """The audit's minimum group size (None when the params do not say)."""
        try:
            return int(self.params["min_group_size"])
        except (KeyError, ValueError):
            return None


def write_audit_record(path: Path, record: AuditRecord) -> Path:
    """Write ``record`` as indented JSON (keys as :class:`AuditRecord` declares them)."""
    Path(path).write_text(record.model_dump_json(indent=2))
    return Path(path)


def read_audit_record(path: Path) -> AuditRecord:
    """The :class:`AuditRecord` in ``path``.

    Raises
    ------
    ValueError
        ``path`` does not hold an audit record fairpca writes (the message names the first
        wrong fields).
    """
    try:
        return AuditRecord.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in error.errors()[:3]
        )
        raise ValueError(
            f"{path} is not an audit record written by this fairpca ({error.error_count()} "
            f"problem(s), e.g. {problems}). Re-run the audit to get one."
        ) from None


# ---- building the record from the audit's stages ---------------------------------------------

# The one entry of an attribute's group sizes that stands for its withheld groups (unnamed).
WITHHELD = "(withheld)"
REPRESENTATION_CURVES = ("mmd2", "linear_inseparability", "mean_gap_train", "mean_gap_validation")


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


SUMMARY_COLUMNS = (
    "variant",
    "lambda",
    "classifier",
    "accuracy",
    "accuracy.ci95_low",
    "accuracy.ci95_high",
    "balanced_accuracy",
    "dp_difference",
    "dp_difference.ci95_high",
    "eo_difference",
    "eo_difference.ci95_high",
    "var_explained",
)


def candidate_summary(table: pd.DataFrame, choice: Choice) -> list[dict[str, Any]]:
    """Rows a reader compares, all on validation rows: the majority-class baseline, the
    unconstrained PCA baseline, the chosen candidate, then per variant and classifier the
    fairest (lambda = 0) and the last lambda. ``role`` says which row is which."""
    first = table.groupby(["variant", "classifier"], sort=False).head(1).assign(role="λ=0")
    last = table.groupby(["variant", "classifier"], sort=False).tail(1).assign(role="last λ")
    sweep = pd.concat([first, last]).drop_duplicates(subset=["variant", "classifier", "lambda"])
    sweep.loc[sweep["lambda"].isna(), "role"] = "no λ"
    sweep = sweep.sort_values(["variant", "classifier", "lambda"], na_position="first")
    head = [{"role": "majority", "classifier": "majority", "accuracy": choice.majority_accuracy}]
    if choice.pca_row is not None:
        head.append({"role": "PCA (best)", **choice.pca_row})
    head.append({"role": "chosen", **choice.chosen})
    columns = ["role", *(c for c in SUMMARY_COLUMNS if c in table.columns)]
    frame = pd.concat(
        [pd.DataFrame(head).reindex(columns=columns), sweep.reindex(columns=columns)],
        ignore_index=True,
    )
    return json.loads(frame.to_json(orient="records"))


def _selection(config, split, choice: Choice, reported, diagnostics) -> Selection:
    """The audit's result (``audit.json["selection"]``); ``baselines["pca"]`` only when the
    audit fitted standard PCA."""
    chosen = choice.chosen
    lam = chosen["lambda"]
    record = {
        "chosen": {
            "variant": chosen["variant"],
            "classifier": chosen["classifier"],
            "lambda": None if not _finite(lam) else float(lam),
            "name": candidate_name(chosen),
        },
        "gate": config.selection.gate,
        "decision": choice.decision.as_dict(),
        "validation": reported["chosen"]["validation"],
        "test": reported["chosen"]["test"],
        "baselines": {"majority": reported["majority"]},
        "split": {f"n_{part}": len(getattr(split, f"y_{part}")) for part in PARTS},
        "group_sizes": group_sizes(
            split, config.evaluation.min_group_size, config.evaluation.allow_small_groups
        ),
        "diagnostics": diagnostics.get("representations", {}),
        "warnings": list(diagnostics.get("warnings", [])),
    }
    if choice.pca_row is not None and "pca" in reported:
        record["baselines"]["pca"] = {"name": candidate_name(choice.pca_row), **reported["pca"]}
    return Selection.model_validate(json.loads(json.dumps(record, default=float)))


PARTS = ("train", "validation", "test")


def _metrics(choice: Choice, reported, representations, timings) -> dict[str, float]:
    """Flat run metrics: the chosen candidate's validation metrics (under ``validation.``;
    the test numbers are the unprefixed headline ones), the baselines'
    (``baseline.<name>.<part>.``), representation facts and timings."""
    metrics = {f"validation.{k}": v for k, v in chosen_metrics(choice.chosen).items()}
    metrics.update(reported["chosen"]["test"])
    for name in ("majority", "pca"):
        for part in ("validation", "test"):
            values = reported.get(name, {}).get(part, {})
            metrics.update(
                {
                    f"baseline.{name}.{part}.{k}": v
                    for k, v in values.items()
                    if k.startswith(HEADLINE_METRICS)
                }
            )
    for variant, rep in representations.items():
        metrics.update({f"{variant}/{key}": value for key, value in rep.facts.items()})
    metrics.update(timings)
    return {k: float(v) for k, v in metrics.items() if _finite(v)}


def build_record(
    config,
    *,
    kind: str,
    run_name: str,
    started_at: datetime,
    split,
    choice: Choice,
    reported: dict[str, Any],
    references: list[dict[str, Any]],
    diagnostics: dict[str, Any],
    representations: dict[str, Any],
    table: pd.DataFrame,
    skipped: dict[str, str],
    k_record: dict[str, Any],
    timings: dict[str, float],
    hashes: dict[str, str],
    model_sha256: str,
    model_digest: str,
    tags: dict[str, str],
) -> AuditRecord:
    """The one record of an audit, built once from its stages; every reader reads it."""
    from .registry import provenance, resolved_model_name

    name = resolved_model_name(config.source, config.tracking.model_name)
    decision = choice.decision.as_dict()
    chosen_name = candidate_name(choice.chosen)
    return AuditRecord(
        audit_id=run_name,
        run_name=run_name,
        kind=kind,
        experiment_name=config.tracking.experiment_name,
        model_name=name,
        champion_alias=config.tracking.champion_alias,
        register_model=config.tracking.register_model and choice.eligible,
        mlflow_retries=config.tracking.mlflow_retries,
        mlflow_retry_backoff=config.tracking.mlflow_retry_backoff,
        started_at=started_at,
        ended_at=datetime.now(UTC),
        sensitive=list(split.s_train.columns),
        decision=decision,
        chosen=chosen_metrics(choice.chosen)
        | {"variant": choice.chosen["variant"], "classifier": choice.chosen["classifier"]},
        selection=_selection(config, split, choice, reported, diagnostics),
        params=config.flat_params(),
        metrics=_metrics(choice, reported, representations, timings),
        metric_steps=metric_steps(table),
        tags={
            "fairpca.audit_id": run_name,
            "fairpca.source": config.source.name,
            "fairpca.sensitive": ",".join(split.s_train.columns),
            "fairpca.chosen": chosen_name,
            "fairpca.gate": config.selection.gate,
            **tags,
        },
        model_tags={
            "fairness.chosen": chosen_name,
            "fairpca.audit_id": run_name,
            **choice.policy.tags(),
        },
        hashes=hashes,
        provenance=provenance(config.source),
        policy=choice.policy.record(),
        eligibility=choice.eligibility,
        references=[
            {key: r[key] for key in REFERENCE_KEYS} for r in references if "skipped" not in r
        ],
        screening=split.screening,
        k=k_record,
        split_sizes={part: len(getattr(split, f"y_{part}")) for part in PARTS},
        candidates=candidate_summary(table, choice),
        skipped=skipped or None,
        model_sha256=model_sha256,
        model_digest=model_digest,
        training_data_sha256=training_data_digest(split),
    )


def training_data_digest(split) -> str:
    """SHA-256 of the training rows: features, labels and groups, in order (two audits that
    trained on the same rows give the same digest)."""
    digest = hashlib.sha256()
    for frame in (split.X_train, pd.DataFrame({"y": split.y_train}), split.s_train):
        digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
        digest.update("|".join(map(str, frame.columns)).encode())
    return digest.hexdigest()
