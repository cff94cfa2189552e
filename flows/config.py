"""Typed, validated configuration of the audit and retrain flows, in sections.

Both flows take one pydantic model, so Prefect can serialize it as a deployment parameter and
validates it before the flow body runs; the CLI (generated from these models) builds the same
model before anything starts. A bad value raises :class:`pydantic.ValidationError` whose
message names the field and the fix. Every field has a description: it is the CLI's help.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from fairpca.datasets._limits import (
    LEAKAGE_BALANCED_ACCURACY,
    MIN_CATEGORY_COUNT,
    PROXY_BALANCED_ACCURACY,
)
from fairpca.tasks import (
    CLASSIFIER_NAMES,
    DEFAULT_BOUND,
    DEFAULT_CERTIFY_FACTOR,
    DEFAULT_CLASSIFIERS,
    DEFAULT_MIN_GROUP_SIZE,
    DEFAULT_POLICY,
    MAX_ONE_CLASS_SHARE,
    MIN_ACCURACY_GAIN,
    MIN_BALANCED_ACCURACY_MARGIN,
    MIN_POSITIVE_RATE_RATIO,
)
from fairpca.tasks.trust import mask_credentials, take_credentials

__all__ = [
    "CLASSIFIERS",
    "DATASETS",
    "DEFAULT_LAMBDAS",
    "RUN_NAME_PATTERN",
    "VARIANTS",
    "AuditConfig",
    "EvaluationConfig",
    "OutputConfig",
    "PromotionConfig",
    "RepresentationConfig",
    "RetrainConfig",
    "SelectionConfig",
    "SourceConfig",
    "SplitConfig",
    "Thresholds",
    "TrackingConfig",
    "leaf_fields",
    "load_config_file",
    "mask_credentials",
    "nest_flat_keys",
    "resolve_tracking_uri",
    "section_of_key",
    "sections",
]

DATASETS = ("adult", "german", "bank", "compas")
VARIANTS = ("pca", "fair_pca", "fair_pca_eo", "fair_pca_s", "fair_kernel_pca")
CLASSIFIERS = CLASSIFIER_NAMES  # the names fairpca.tasks.sweep builds

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
ALIAS_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*$"

# Section 5.2 / Appendix C.1 of the paper: lambda = (i/10)^3, i = 0..10.
DEFAULT_LAMBDAS = tuple(round((i / 10) ** 3, 6) for i in range(11))

# The messages of the refusals below (str.format templates; tests name them, not their words)
NOT_ONE_DATA_SOURCE = (
    "give exactly one data source: dataset (adult, german, bank, compas) or data (a "
    "CSV/Parquet file with label and sensitive columns)."
)
GIVEN_TWICE = "{key} is given twice: at the top and in {section}; give it once."
GROUP_COLUMN_TAKEN = (
    "group_column {group!r} is also given as {roles}; the entity column only groups the rows "
    "(it is never a feature, label or attribute): name it once, as group_column."
)


def _unique(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError(f"lists a value twice: {value}; give each once.")
    return value


def _non_empty(value: list[str]) -> list[str]:
    if not value:
        raise ValueError("give at least one value.")
    return value


def _sorted_above_zero(message: str) -> AfterValidator:
    """A list of numbers above 0 (finite), sorted and each named once; None: the default."""

    def check(value: list | None) -> list | None:
        if value is not None and (not value or not all(0 < v < float("inf") for v in value)):
            raise ValueError(message.format(value=value))
        return None if value is None else sorted(set(value))

    return AfterValidator(check)


# Field types shared by several sections: a list that names each value once (and, for the
# choices of representations and classifiers, at least one), a share or rate in [0, 1], a
# row cap where 0 (or None) means every row.
Names = Annotated[list[str], AfterValidator(_unique)]
Variants = Annotated[list[Literal[VARIANTS]], AfterValidator(_unique), AfterValidator(_non_empty)]
Classifiers = Annotated[
    list[Literal[CLASSIFIER_NAMES]], AfterValidator(_unique), AfterValidator(_non_empty)
]
Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Share = Annotated[float, Field(gt=0.0, lt=1.0)]
RowCap = Annotated[int | None, BeforeValidator(lambda value: None if value == 0 else value)]
# above one half: a balanced accuracy above chance, the share of a majority
AboveHalf = Annotated[float, Field(gt=0.5, le=1.0)]


class Section(BaseModel):
    """A part of the audit config: unknown keys are errors, assignments are validated; the
    docstring under each field is its description (the command line's help)."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, use_attribute_docstrings=True
    )


class SourceConfig(Section):
    """Where the rows come from and which columns are features.

    Exactly one of ``dataset`` (a bundled or data-directory dataset) and ``data`` (a user CSV
    or Parquet file, with ``label`` and ``sensitive`` naming its columns) is given.
    """

    dataset: Literal[DATASETS] | None = None
    """Dataset: adult, german, bank or compas."""
    data: Path | None = None
    """User CSV/Parquet file (with label and sensitive columns); a folder of Parquet files or
    a glob of CSV parts is audited on Dask (dask_address)."""
    label: str | None = None
    """Label column of the user file."""
    positive_label: str | None = None
    """Value of the user label that counts as positive (y = 1)."""
    sensitive: Names = Field(default_factory=list)
    """Sensitive attribute(s); several are stacked (Sec. 3.5). For a dataset, empty means the
    paper's default attribute."""
    keep: Names = Field(default_factory=list)
    """Columns kept as features whatever the screening says (a user file: identifier-like,
    free text, dates, many categories, target leakage; any source: proxies of a sensitive
    attribute)."""
    drop: Names = Field(default_factory=list)
    """Columns of the user file excluded from the features."""
    sep: str | None = Field(None, min_length=1, max_length=1)
    """CSV separator of the user file; default: detected from the header."""
    data_dir: Path | None = None
    """Data directory of bank and compas; default: $FAIRPCA_DATA_DIR."""
    group_column: str | None = Field(None, min_length=1)
    """Column naming each row's entity (a person, a firm) when the table holds several rows
    per entity (a panel): the training, validation and test parts and every cross-validation
    fold keep each entity's rows together. The column is never a feature. Default: the rows
    are independent."""
    leakage_threshold: AboveHalf = LEAKAGE_BALANCED_ACCURACY
    """A user file's column that alone predicts the label with at least this balanced
    accuracy on the training rows is excluded as target leakage (keep overrides)."""
    proxy_threshold: AboveHalf = PROXY_BALANCED_ACCURACY
    """A feature column that alone predicts a sensitive attribute with at least this balanced
    accuracy (or recodes or duplicates it) is excluded as its proxy (keep overrides)."""

    @model_validator(mode="after")
    def _check_source(self) -> SourceConfig:
        if (self.dataset is None) == (self.data is None):
            raise ValueError(NOT_ONE_DATA_SOURCE)
        if self.data is not None:
            self._check_user_file()
        elif self.label is not None or self.positive_label is not None:
            raise ValueError("label/positive_label apply to a user data file, not to a dataset.")
        elif self.drop or self.sep:
            raise ValueError("drop/sep apply to a user data file, not to a dataset.")
        both = sorted(set(self.keep) & set(self.drop))
        if both:
            raise ValueError(f"columns {both} are in both keep and drop; give each in one.")
        # the entity column is neither the label, a sensitive attribute nor a feature
        group = self.group_column
        roles = {"label": [self.label], "sensitive": self.sensitive, "keep": self.keep,
                 "drop": self.drop}  # fmt: skip
        taken = [role for role, names in roles.items() if group is not None and group in names]
        if taken:
            raise ValueError(GROUP_COLUMN_TAKEN.format(group=group, roles=" and ".join(taken)))
        return self

    def _check_user_file(self) -> None:
        if self.label is None or not self.sensitive:
            raise ValueError(
                "a user data file needs label (the label column) and at least one "
                "sensitive column, e.g. --label income --sensitive sex."
            )
        from fairpca.datasets._user import _CSV_SUFFIXES, _PARQUET_SUFFIXES
        from fairpca.tasks.distributed import on_partitions

        # a partitioned table is checked where it is read; a folder that is none is said
        # to be one when it is read
        if on_partitions(self) or self.data.is_dir():
            return
        if not self.data.name.lower().endswith(_CSV_SUFFIXES + _PARQUET_SUFFIXES):
            allowed = ", ".join(_CSV_SUFFIXES + _PARQUET_SUFFIXES)
            text = ""
            if self.data.suffix.lower() in (".tsv", ".tab", ".txt"):
                text = " Rename a text table to .csv: its separator is found (or pass --sep)."
            raise ValueError(
                f"data must be a .csv or .parquet file ({allowed}); got {self.data}.{text}"
            )

    @property
    def name(self) -> str:
        """Short name of the data source: the dataset's name, the file's stem, or the folder
        of a glob of CSV parts (``parts/*.csv``: ``parts``)."""
        from fairpca.tasks.distributed import GLOB_CHARACTERS

        if self.dataset is not None:
            return self.dataset
        path = Path(self.data)
        if any(character in path.name for character in GLOB_CHARACTERS):
            return path.parent.resolve().name
        return path.stem


class SplitConfig(Section):
    """Every row by default, drawn at random and stratified by label x group: fit on train,
    choose and gate on validation, report on test. Each part takes its share of the table,
    at most its cap; when all three caps are given they are the parts' sizes (scaled down in
    proportion on a smaller table) and the shares are not used."""

    train_share: Share = 0.5
    """Share of the rows for training (fit every model)."""
    validation_share: Share = 0.25
    """Share of the rows for validation (choose, gate)."""
    test_share: Share = 0.25
    """Share of the rows for test (reported only)."""
    n_train: int | None = Field(None, ge=20)
    """Cap on the training rows (default: no cap, the share); with all three caps given,
    they are the sizes of the parts."""
    n_validation: int | None = Field(None, ge=20)
    """Cap on the validation rows (default: no cap, the share); with all three caps given,
    they are the sizes of the parts."""
    n_test: int | None = Field(None, ge=20)
    """Cap on the test rows (default: no cap, the share); with all three caps given, they
    are the sizes of the parts."""
    search_rows: RowCap = Field(5000, ge=100)
    """Training rows of the wide search over k, C, lambda and the classifier (a seeded
    stratified sample; its validation rows in the split's proportion). The best candidates
    are then measured on every validation row, and the chosen one is fitted on every training
    row. 0 or None: search on every row."""

    @model_validator(mode="after")
    def _check_shares(self) -> SplitConfig:
        total = self.train_share + self.validation_share + self.test_share
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"train_share + validation_share + test_share is {total:g}, more than 1; "
                "e.g. 0.6, 0.2 and 0.2."
            )
        return self


class RepresentationConfig(Section):
    """The encoded features and the representations fitted on them."""

    k: int | None = Field(None, ge=1, le=10_000)
    """Target dimension of the representations, fixed; default: the k of k_grid that the
    validation rows choose."""
    k_grid: Annotated[
        list[int] | None,
        _sorted_above_zero("k_grid must list k values of at least 1, e.g. [10, 20]; got {value}."),
    ] = None
    """The k values searched when k is not given (those the data allow); default: 10, 20, 40,
    ... doubling while below the largest k the encoded training data allow, and that largest
    k."""
    variants: Variants = Field(
        default_factory=lambda: ["pca", "fair_pca", "fair_pca_s", "fair_pca_eo"]
    )
    """Representations: pca, fair_pca, fair_pca_eo, fair_pca_s, fair_kernel_pca."""
    equalize_covariance: float | None = Field(None, gt=0.0, le=1.0)
    """Fair PCA-S keeps l = max(k, floor(f * d)) directions (Sec. 3.6), f = this; default: the
    smallest f of a short grid whose k directions keep at least half the variance plain fair
    PCA keeps (smaller l erases the signal on real data)."""
    lambdas: list[float] = Field(default_factory=lambda: list(DEFAULT_LAMBDAS))
    """Trade-off weights of the PCA block appended to the fair features (Sec. 3.1; default
    (i/10)^3, i = 0..10)."""
    min_category_count: int = Field(MIN_CATEGORY_COUNT, ge=1)
    """Categories of fewer training rows are pooled into one '<rare>' column by the encoder
    and never appear in the logged input example."""
    metric_max_rows: int = Field(1000, ge=50)
    """Rows per group used for MMD^2 (quadratic cost)."""

    @field_validator("lambdas")
    @classmethod
    def _check_lambdas(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("lambdas must list at least one value, e.g. [0.0].")
        bad = [lam for lam in value if not (lam >= 0.0 and lam < float("inf"))]
        if bad:
            raise ValueError(f"lambdas must be finite and >= 0; got {bad}.")
        if len(set(value)) != len(value):
            raise ValueError(f"lambdas lists a value twice: {value}.")
        return sorted(value)


class EvaluationConfig(Section):
    """Downstream classifiers and the group metrics computed on their predictions."""

    classifiers: Classifiers = Field(default_factory=lambda: list(DEFAULT_CLASSIFIERS))
    """Downstream classifiers: the paper's logreg, linear_svm, rbf_svc and mlp (Appendix
    C.1), and logreg_tuned, logistic regression with its C searched over logreg_C on the
    validation rows and its probability threshold chosen for the selection measure
    (select_by) by cross-validation on the training rows. rbf_svc is opt-in: its support
    vectors are training rows, so it cannot be registered unless allow_row_storing_models;
    the MLP (10, 5) is opt-in ('mlp'): ~1 s per fit."""
    logreg_C: Annotated[
        list[float] | None,
        _sorted_above_zero("logreg_C must list finite values above 0, e.g. [0.1, 1]; got {value}."),
    ] = None
    """Inverse regularisation strengths C that logreg_tuned and the reference mitigations'
    logistic regression try, chosen on the validation rows; default: the paper's
    C = 1/(2 n 0.01) and 1.0."""
    svc_max_train_rows: RowCap = Field(2000, ge=20)
    """Rows the RBF SVC trains on (cost is quadratic); 0 or None: all rows."""
    min_group_size: int = Field(DEFAULT_MIN_GROUP_SIZE, ge=1)
    """Groups with fewer rows get no per-group metrics (reported as suppressed; still
    constrained by fair PCA)."""
    allow_small_groups: bool = False
    """Allow min_group_size below the floor of 10: rates of groups that small come close to
    describing single people (publish them only for data that may be disclosed)."""
    n_bootstrap: int = Field(1000, ge=100, le=100_000)
    """Bootstrap resamples of the 95% intervals."""

    @model_validator(mode="after")
    def _check_group_floor(self) -> EvaluationConfig:
        # imported when a config is validated, not when the flags are read (SciPy)
        from fairpca.metrics import check_fairness_options

        check_fairness_options(
            min_group_size=self.min_group_size, allow_small_groups=self.allow_small_groups
        )
        return self


class Thresholds(Section):
    """Thresholds of the gate policy (``SelectionConfig.policy`` says which ones apply)."""

    max_dp_difference: Rate = 0.05
    """Largest allowed demographic parity difference."""
    max_eo_difference: Rate = 0.10
    """Largest allowed equal opportunity (TPR) difference."""
    max_equalized_odds_difference: Rate = 0.10
    """Largest allowed equalized odds difference (max of TPR and FPR differences)."""
    min_selection_rate_ratio: Rate = 0.8
    """Smallest allowed selection-rate ratio (lowest over highest group selection rate; the
    four-fifths rule asks for 0.8)."""
    min_accuracy: Rate = 0.0
    """Smallest allowed accuracy."""


class GateRules(Section):
    """The gate policy and the eligibility rules a model must meet: the audit's
    ``selection`` section and the registry gate's policy file
    (:class:`fairpca.flows.gate.GatePolicy`) both include them."""

    policy: str = DEFAULT_POLICY
    """Gate policy: demographic_parity, equal_opportunity, equalized_odds, four_fifths, or
    several joined by '+' (all must hold), with the thresholds of 'thresholds'."""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    """Thresholds of the gate policy."""
    gate: Literal["upper_bound", "point"] = DEFAULT_BOUND
    """point: the validation estimates of the gated differences must meet the thresholds;
    upper_bound: their upper 95% bounds (strict: on 2,500 validation rows the upper bound of
    a fair classifier's DP difference at a 25% selection rate is about 0.07, so only
    classifiers that rarely say yes pass 0.05)."""
    select_by: Literal["balanced_accuracy", "accuracy"] = "balanced_accuracy"
    """Validation measure that picks the chosen candidate among those eligible and meeting
    the gate (ties go to accuracy). Balanced accuracy, unlike accuracy, does not favour a
    classifier that rarely predicts the rarer class."""
    min_accuracy_gain: Rate = MIN_ACCURACY_GAIN
    """A candidate must beat the majority class by this much on the selection measure
    (select_by): its validation accuracy over the majority-class accuracy, or its balanced
    accuracy over the majority class's 0.5."""
    min_balanced_accuracy_margin: float = Field(MIN_BALANCED_ACCURACY_MARGIN, ge=0.0, lt=0.5)
    """The lower 95% bound of a candidate's validation balanced accuracy must exceed chance
    (0.5) by this much."""
    min_positive_rate_ratio: Rate = MIN_POSITIVE_RATE_RATIO
    """A candidate's predicted-positive rate must reach this share of the base rate, and its
    predicted-negative rate this share of the negative rate."""
    max_one_class_share: AboveHalf = MAX_ONE_CLASS_SHARE
    """A candidate predicting one class for more than this share of the validation rows is
    degenerate (not eligible)."""

    sensitive_at_prediction: bool = False
    """Deployment: the deployed model may see the sensitive attribute when it decides. Off
    (as in most lending, hiring and insurance deployments), a reference mitigation that needs
    it (threshold_optimizer, correlation_remover) cannot veto the chosen model; it is listed
    as an alternative the deployment excludes."""
    randomized_decisions: bool = False
    """Deployment: the deployed model may decide at random (the same applicant, another
    answer). Off, a reference mitigation that decides at random (exponentiated_gradient,
    threshold_optimizer) cannot veto the chosen model; it is listed as an alternative the
    deployment excludes."""

    @field_validator("policy")
    @classmethod
    def _check_policy(cls, value: str) -> str:
        from fairpca.tasks.select import parse_policy  # Prefect: not to read the flags

        return "+".join(parse_policy(value))


class SelectionConfig(GateRules):
    """How the candidate is chosen on the validation rows and gated (the gate's rules,
    :class:`GateRules`, and how the rows decide)."""

    certify_factor: float = Field(DEFAULT_CERTIFY_FACTOR, ge=0.0, le=10.0)
    """Certification before promotion: the 95% resolution (1.96 standard errors) of each
    gated measure on the rows that chose the candidate may be at most this many times the
    policy's band (the limit of a difference, 1 - the minimum of a ratio); wider, the audit
    says there is not enough data to certify and does not promote. 0 turns the check off."""
    promote_dominated: bool = False
    """Promote the chosen candidate even when a reference mitigation that meets the gate, and
    that the deployment allows, beats it on the rows that chose it by a margin whose 95%
    interval lies above zero (by default such a candidate is kept, not promoted, and the
    reference is named)."""
    cv_below_rows: int = Field(1000, ge=0)
    """A validation part of fewer rows is too noisy to choose on: the best candidates on it
    are then compared by repeated stratified cross-validation on the training and validation
    rows (the test rows stay untouched). 0: never."""
    cv_folds: int = Field(5, ge=2, le=20)
    """Folds of that cross-validation."""
    cv_repeats: int = Field(3, ge=1, le=20)
    """Repeats of that cross-validation (different fold draws); their spread widens the
    standard errors that the stability and certification checks use."""
    allow_row_storing_models: bool = False
    """Let the registered pipeline be one that stores (projected) training rows: an RBF SVC
    keeps support vectors, fair kernel PCA keeps its training points. Off by default
    (privacy); such candidates are still audited and reported."""


class TrackingConfig(Section):
    """Where and how the audit is recorded in MLflow."""

    tracking_uri: str | None = None
    """MLflow tracking URI; default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db."""
    experiment_name: str = Field("fairpca-audit", min_length=1)
    """MLflow experiment."""
    model_name: str | None = None
    """Registered model name; default derived from the data source, label and sensitive
    attributes, e.g. fairpca-adult-income_gt_50k-sex."""
    champion_alias: str = Field("champion", pattern=ALIAS_PATTERN)
    """Registry alias of the model in use; moved only when the gate passes."""
    register_model: bool = True
    """Register the chosen pipeline in the MLflow Model Registry."""
    mlflow_retries: int = Field(3, ge=0, le=10)
    """Retries of each MLflow logging task on transient errors."""
    mlflow_retry_backoff: float = Field(2.0, ge=0.0, le=60.0)
    """Back-off factor: retry i waits factor * 2**i seconds."""

    @field_validator("tracking_uri")
    @classmethod
    def _refuse_masked_credentials(cls, value: str | None) -> str | None:
        if value is not None and "//***@" in value:
            raise ValueError(
                "tracking_uri holds masked credentials ('***@'): written configs never carry "
                "credentials. Give the real URI in the environment variable MLFLOW_TRACKING_URI "
                "of the process or worker that runs the flow, and leave tracking_uri unset."
            )
        return value

    @field_serializer("tracking_uri", when_used="json")
    def _mask_tracking_uri(self, value: str | None) -> str | None:
        # Everything written (config.json, MLflow params, Prefect parameters) goes through JSON.
        return None if value is None else mask_credentials(value)


class OutputConfig(Section):
    """The local results of one run."""

    output_dir: Path = Path("fairpca-output")
    """Local results directory, written first."""
    # the pattern refuses path separators and names of dots only (the first is a letter
    # or digit)
    run_name: str | None = Field(None, pattern=RUN_NAME_PATTERN)
    """Unique run name (letters, digits, '.', '_', '-'; no path separators); default
    <kind>-<source>-<time>."""


class PromotionConfig(Section):
    """What the scheduled retrain does with the champion."""

    accuracy_tolerance: Rate = 0.01
    """The new model may lose at most this much accuracy against the champion."""
    needs_review_alias: str = Field("needs-review", pattern=ALIAS_PATTERN)
    """Alias the champion moves to when it fails the gate on new data."""


class AuditConfig(BaseModel):
    """Everything one fairness audit needs, in sections; validated before any work starts.

    A key of a section may also be given at the top level (``{"dataset": "adult", "k": 2}``,
    the flat form of earlier config files): it is moved into its section (every key name is
    unique across the sections).
    """

    model_config = Section.model_config

    seed: int = Field(0, ge=0)
    """Seed of the split, subsampling, classifiers and bootstrap."""
    dask_address: str | None = None
    """Run the flow's independent tasks (representations, lambda sweeps) on Dask through
    prefect-dask's DaskTaskRunner (extra fairpca[dask]): 'local' for a temporary
    LocalCluster, or a scheduler address such as 'tcp://host:8786'. A deployment run starts
    on threads and runs the flow as a subflow on Dask. With data a Parquet folder or CSV
    parts, the table stays in the cluster's partitions (the Dask route of the audit).
    Default: a thread pool."""
    source: SourceConfig
    """Where the rows come from."""
    split: SplitConfig = Field(default_factory=SplitConfig)
    """Split sizes."""
    representation: RepresentationConfig = Field(default_factory=RepresentationConfig)
    """Encoder and representations."""
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """Classifiers and group metrics."""
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    """Choice on validation rows and the gate."""
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    """MLflow."""
    output: OutputConfig = Field(default_factory=OutputConfig)
    """Local results."""

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_keys(cls, values: Any) -> Any:
        return nest_flat_keys(cls, values) if isinstance(values, dict) else values

    def flat_params(self) -> dict[str, str]:
        """The whole config as flat ``key -> str`` pairs (MLflow params), named by their key
        within the section (``min_group_size``, ``thresholds.max_dp_difference``)."""
        dumped = json.loads(self.model_dump_json())
        for section in sections(type(self)):
            dumped.update(dumped.pop(section))
        return _flatten(dumped)


class RetrainConfig(AuditConfig):
    """Audit configuration plus the promotion rule of the scheduled retrain flow."""

    promotion: PromotionConfig = Field(default_factory=PromotionConfig)
    """The retrain's promotion rule."""

    @model_validator(mode="after")
    def _check_review_alias(self) -> RetrainConfig:
        if self.promotion.needs_review_alias == self.tracking.champion_alias:
            raise ValueError(
                f"needs_review_alias and champion_alias are both {self.tracking.champion_alias!r}; "
                "give the demoted champion its own alias, e.g. 'needs-review'."
            )
        return self


def sections(model: type[AuditConfig]) -> dict[str, type[BaseModel]]:
    """The section models of ``model`` by field name (``source`` -> :class:`SourceConfig`)."""
    return {
        name: info.annotation
        for name, info in model.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, Section)
    }


def section_of_key(model: type[AuditConfig]) -> dict[str, str]:
    """Each key of a section of ``model`` -> the section's name (``k`` -> ``representation``)."""
    return {key: name for name, section in sections(model).items() for key in section.model_fields}


def leaf_fields(model: type[BaseModel], path: tuple[str, ...] = ()) -> dict[tuple, FieldInfo]:
    """Every field of ``model`` that holds a value, by its path (``("evaluation",
    "min_group_size")``), the fields of its nested section models included."""
    leaves: dict[tuple, FieldInfo] = {}
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            leaves |= leaf_fields(info.annotation, (*path, name))
        else:
            leaves[(*path, name)] = info
    return leaves


def nest_flat_keys(model: type[AuditConfig], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each top-level key that names a field of a section moved into that
    section (``{"k": 2}`` -> ``{"representation": {"k": 2}}``); a key given both ways is an
    error."""
    values = {"source": {}, **values}
    for key, section in section_of_key(model).items():
        if key not in values:
            continue
        nested = values.get(section)
        nested = dict(nested) if isinstance(nested, dict) else {}
        if key in nested:
            raise ValueError(GIVEN_TWICE.format(key=key, section=section))
        nested[key] = values.pop(key)
        values[section] = nested
    return values


def resolve_tracking_uri(uri: str | None) -> str:
    """Explicit URI, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` (cwd).

    The returned URI is for connecting only and may hold credentials (a database URI);
    write, log or print it only through :func:`mask_credentials`.
    """
    return take_credentials(uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db")


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML or JSON config file into a dict (validated later by the model)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix not in {".json", ".yaml", ".yml"}:
        raise ValueError(f"config file must end in .json, .yaml or .yml; got {path.name}.")
    try:
        text = path.read_text(encoding="utf-8")
        if suffix == ".json":
            content = json.loads(text)
        else:
            import yaml

            content = yaml.safe_load(text)
    except UnicodeDecodeError as error:
        raise ValueError(f"config file {path} is not UTF-8 text ({error.reason}).") from error
    except OSError as error:
        raise ValueError(f"config file {path} cannot be read: {error.strerror}.") from error
    except json.JSONDecodeError as error:
        raise ValueError(
            f"config file {path} is not valid JSON: {error.msg} at line {error.lineno}, "
            f"column {error.colno}."
        ) from error
    except Exception as error:  # yaml.YAMLError (the yaml module is imported lazily)
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ValueError(f"config file {path} is not valid YAML: {problem}{where}.") from error
    if not isinstance(content, dict):
        raise ValueError(f"config file {path} must hold a mapping of option names to values.")
    return content


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        return {key: text for name, item in value.items()
                for key, text in _flatten(item, f"{prefix}{name}.").items()}  # fmt: skip
    return {prefix[:-1]: ",".join(map(str, value)) if isinstance(value, list) else str(value)}
