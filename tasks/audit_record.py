"""The audit record (``audit.json``) as typed pydantic models.

The audit flow builds one :class:`AuditRecord`, writes it with :func:`write_audit_record` and
every reader (model card, registry tags and description, MLflow logging and relog, Prefect
artifacts, the command line summary) reads it back with :meth:`AuditRecord.model_validate_json`
(or :func:`read_audit_record`) and uses attributes. Every model forbids unknown keys, so a
renamed or misspelt key is a validation error where the record is built or read, not a silent
``None`` in a reader.

Metric dictionaries (``validation``, ``test``, a baseline's numbers) map the metric names built
by :mod:`fairpca.metrics` (``accuracy``, ``dp_difference.sex``, ``selection_rate.sex:Female``,
each with ``.ci95_low`` / ``.ci95_high``) to floats; an undefined metric is NaN (written as the
JSON constant ``NaN``, as Python's :mod:`json` does).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

__all__ = [
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
    "Provenance",
    "ReferenceMitigation",
    "ScreenedColumn",
    "Selection",
    "SplitCounts",
    "SplitSizes",
    "read_audit_record",
    "write_audit_record",
]

Metrics = dict[str, float]


class _Record(BaseModel):
    """Strict JSON shape: unknown keys are refused; aliases (``lambda``, ``class``) are the
    names written; NaN and infinities round-trip as JSON constants."""

    model_config = ConfigDict(
        extra="forbid",
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
