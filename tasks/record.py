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

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import re
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from fairpca import metrics as fm

from .decision import Reason
from .evaluate import HEADLINE_METRICS
from .references import REFERENCE_KEYS
from .select import Choice, GatePolicy, best_useful, candidate_name, ineligibility
from .trust import sha256_file

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
    """Whether the chosen candidate may become champion, and why: the ordered structured
    reasons (:class:`fairpca.tasks.decision.Reason`; each names the rows it was measured on)."""

    promote: StrictBool  # "true" or 1 in a crafted record is not a promotion
    reasons: list[Reason] = []


class ChosenCandidate(_Record):
    """The candidate chosen on validation rows."""

    variant: str
    classifier: str
    lambda_: float | None = Field(None, alias="lambda")
    name: str
    k: int
    C: float | None = None  # the logistic regression's inverse regularisation strength


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
    # rows per group in the test part (what the per-group test rates describe); withheld
    # groups are one unnamed entry with the reason
    test_group_sizes: dict[str, dict[str, int | str]]
    # per attribute, what of its groups' test numbers is withheld and why (None: nothing)
    withheld: dict[str, str] | None = None
    chosen_by: str  # the rows the choice was made on


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


# ---- the gate policy, references, screening, k, search ---------------------------------------


class Policy(_Record):
    name: str
    thresholds: dict[str, float]
    description: str
    # what the deployed model may do (fairpca.tasks.decision.Deployment); absent: neither
    deployment: dict[str, bool] = {}


class Eligibility(_Record):
    rules: dict[str, float]
    chosen_passes: bool
    reasons: list[str] = []


class ReferenceMitigation(_Record):
    """A reference mitigation (e.g. fairlearn's post-processing) evaluated like the chosen one."""

    name: str
    approach: Literal["post-processing", "reductions", "pre-processing"]
    needs_sensitive_at_prediction: bool
    # what its deployment needs (fairpca.tasks.decision.NEEDS)
    needs: list[Literal["sensitive_at_prediction", "randomized_decisions"]] = []
    validation: Metrics
    test: Metrics
    config: str | None = None  # the configuration chosen on the validation rows
    ineligible: list[str] = []  # why it is no better than the majority class (empty: useful)
    # meets the gate policy on the validation rows (None: not measured there)
    meets_gate: bool | None = None


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
    refused: StrictBool = False  # promoted by the audit; its model may not take an alias back

    @classmethod
    def of(cls, promotion, champion) -> PromotionRecord:
        """The record of a :class:`fairpca.tasks.select.Promotion` against ``champion``."""
        version = None if champion is None else champion.version
        fields = {k: v for k, v in dataclasses.asdict(promotion).items() if k in cls.model_fields}
        return cls(**fields, champion_version=version)


class KRecord(_Record):
    requested: int | None = None
    fitted: int  # the chosen candidate's k
    note: str
    grid: list[int]  # the k values searched
    largest: int  # the one largest k the encoded training data allow
    chosen: dict[str, int] | None = None  # per variant, the k its search kept


class FrontierPoint(_Record):
    """One point of the trade-off over k and lambda on the validation rows (or the rows of
    the cross-validation): the best classifier there, its selection measure with its 95%
    interval and the gated measures. ``stage``: ``coarse`` (the k search) or ``sweep`` (every
    lambda at the variant's chosen k); ``pareto``: no other point of the variant has a
    higher measure and a smaller DP difference."""

    variant: str
    k: int
    lambda_: float | None = Field(None, alias="lambda")
    classifier: str
    C: float | None = None
    measure: str
    value: float
    ci95_low: float | None = None
    ci95_high: float | None = None
    dp_difference: float | None = None
    selection_rate_ratio: float | None = None
    eo_difference: float | None = None
    meets_gate: bool
    stage: Literal["coarse", "sweep"]
    pareto: bool = False


class Certification(_Record):
    """Whether the rows that chose the candidate can support the gate (``reasons``: why
    not), and which rows they were."""

    certified: bool
    reasons: list[str] = []
    chosen_by: str


class OnnxGraphRecord(_Record):
    """The registered pipeline's ONNX graph (``model/model.onnx``, MLflow's ``onnx``
    flavour; :mod:`fairpca.tasks.onnx_export`): the only part of the version the gate judges
    and attests. ``status`` ``exported``: the graph's labels equal the pipeline's on the
    ``rows_checked`` rows (``checked_on``); ``no_converter`` or ``differs``: the pipeline is
    registered without a graph and ``reason`` says why (the gate then fails the version)."""

    status: Literal["exported", "no_converter", "differs"]
    sha256: str | None = None  # of model.onnx (also the version tag fairpca.onnx_sha256)
    opset: dict[str, int] | None = None  # the operator set versions the graph imports
    reason: str | None = None
    rows_checked: int = 0
    checked_on: str = "validation"  # the rows compared: "validation" or "training sample"


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
    policy: Policy
    eligibility: Eligibility
    references: list[ReferenceMitigation]
    screening: list[ScreenedColumn] | None = None  # None: the route screened no column
    k: KRecord
    split_sizes: SplitSizes
    candidates: list[dict[str, Any]]  # the summary rows (validation)
    skipped: dict[str, str] | None = None  # variants that could not be fitted, and why
    model_sha256: str  # of the saved skops file
    model_digest: str  # of the fit: the pipeline's content and the training rows
    onnx: OnnxGraphRecord | None = None  # the graph the gate judges (None: not attempted)
    training_data_sha256: str  # of the training rows (features, label, groups)
    frontier: list[FrontierPoint] | None = None  # None: the route searched no frontier
    certification: Certification
    # why the chosen model misses parity, in numbers (:func:`parity_gap`; None: it meets it)
    parity_gap: dict[str, Any] | None = None
    # the validation rows the search measured its candidates on: a stratified sample's after
    # a wide search, else every validation row (None: the table does not say)
    searched_validation_rows: int | None = None
    # the intersection's cells (validation rows of the chosen candidate) the gate did not
    # judge: too few rows to resolve the policy's band (None: none)
    cells_not_judged: list[str] | None = None

    def validation_label(self, rows: int | None = None) -> str:
        """Which validation rows a number comes from, said where it is shown: ``validation
        sample (2,500 rows)`` when ``rows`` (how many measured it; default: every one) are
        fewer than the split's validation rows, else ``validation rows (12,211)``."""
        every = self.split_sizes.validation
        if rows is not None and rows < every:
            return f"validation sample ({rows:,} rows)"
        return f"validation rows ({every:,})"

    @property
    def searched_label(self) -> str:
        """:meth:`validation_label` of the rows the search measured its candidates on (the
        candidates' table, the frontier, the trade-off plot)."""
        return self.validation_label(self.searched_validation_rows)

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


# The message of a refusal below (a str.format template; tests name it, not its words)
NOT_AN_AUDIT_RECORD = (
    "{path} is not an audit record written by this fairpca ({count} problem(s), e.g. "
    "{problems}). Re-run the audit to get one."
)


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
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not readable JSON ({error}); re-run the audit.") from None
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in error.errors()[:3]
        )
        if any(e["loc"][-2:-1] == ("reasons",) and isinstance(e["input"], str)
               for e in error.errors()):  # fmt: skip
            raise ValueError(
                f"{path} was written by an earlier fairpca, whose decision reasons are "
                "sentences, not the structured reasons this version reads and logs; re-run "
                "the audit to log it."
            ) from None
        raise ValueError(
            NOT_AN_AUDIT_RECORD.format(path=path, count=error.error_count(), problems=problems)
        ) from None


NAME_MAX_LENGTH = 100  # well under MLflow's limit, and readable in the UI
_NAME_TOKEN = re.compile(r"[^A-Za-z0-9_.]+")


# ---- identity and provenance: what the audit measures and what it read --------------------

# The label column each bundled loader codes as y (checked against the loaders in the tests).
DATASET_LABELS = {
    "adult": "income_gt_50k",
    "german": "bad_credit",
    "bank": "subscribed",
    "compas": "two_year_recid",
}


def definition_of(source) -> dict[str, Any]:
    """What an audit (its config's ``source`` section) measures: data source, label (and its
    positive value), sensitive attributes (sorted: the worst-attribute and intersection
    metrics ignore their order).

    A bundled dataset's label and default attributes are filled in, so ``--dataset adult``
    and ``--dataset adult --sensitive sex`` define the same audit.
    """
    if source.dataset is None:
        name, label, attributes = Path(source.data).stem, source.label, source.sensitive
        positive = None if source.positive_label is None else str(source.positive_label)
    else:
        from fairpca import datasets

        name, label, positive = source.dataset, DATASET_LABELS[source.dataset], None
        attributes = list(source.sensitive)
        if not attributes:  # the attribute(s) the bundled loader uses when none is asked for
            loader = getattr(datasets, f"load_{source.dataset}")
            default = inspect.signature(loader).parameters["sensitive"].default
            attributes = [default] if isinstance(default, str) else list(default)
    return {"source": name, "label": label, "positive_label": positive,
            "sensitive": sorted(attributes)}  # fmt: skip


def resolved_model_name(source, model_name: str | None = None, policy: str | None = None) -> str:
    """The registered model name: ``model_name`` (the tracking section's), else the name
    derived from the definition of ``source`` (data source, label, sensitive attributes),
    followed by the gate ``policy`` when it is not the default one (``DEFAULT_POLICY``), e.g.
    ``fairpca-adult-income_gt_50k-sex-equal_opportunity``: each policy has its own model, so
    its own champion alias, and a challenger is never compared with a champion chosen under
    another measure."""
    if model_name:
        return model_name
    from fairpca.tasks import DEFAULT_POLICY
    from fairpca.tasks.select import parse_policy

    definition = definition_of(source)
    name, criteria = registered_model_name(definition), parse_policy(policy or DEFAULT_POLICY)
    if criteria == parse_policy(DEFAULT_POLICY):
        return name
    suffix = "-" + ".".join(criteria)
    if len(name) + len(suffix) <= NAME_MAX_LENGTH:
        return name + suffix
    return _hashed(name, definition_json(definition) + suffix, suffix)


def _hashed(name: str, text: str, suffix: str = "") -> str:
    """``name`` cut to ``NAME_MAX_LENGTH`` with an 8-hex-digit SHA-256 of ``text`` and
    ``suffix`` appended: two different ``text`` never share a name."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{name[: NAME_MAX_LENGTH - len(suffix) - 9].rstrip('-_.')}-{digest}{suffix}"


def definition_json(definition: dict[str, Any]) -> str:
    """Canonical text of a definition (the registered-model tag and the hash input)."""
    return json.dumps(definition, sort_keys=True, separators=(",", ":"))


def registered_model_name(definition: dict[str, Any]) -> str:
    """``fairpca-<source>-<label>-<attr1_attr2...>``, e.g. ``fairpca-adult-income_gt_50k-sex``.

    Only ``[A-Za-z0-9_.-]`` is kept. When that loses information (other characters, a
    positive label, or a name longer than ``NAME_MAX_LENGTH``), the readable stem is cut and
    an 8-hex-digit SHA-256 of the full definition is appended, so two different definitions
    never share a name.
    """
    label = str(definition["label"])
    parts = [str(definition["source"]), label, "_".join(definition["sensitive"])]
    cleaned = [_NAME_TOKEN.sub("_", part).strip("_.") or "x" for part in parts]
    name = "fairpca-" + "-".join(cleaned)
    lossless = (
        cleaned == parts
        and definition.get("positive_label") is None
        and len(name) <= NAME_MAX_LENGTH
        and all("_" not in attribute for attribute in definition["sensitive"])
    )
    return name if lossless else _hashed(name, definition_json(definition))


def data_source_facts(source) -> dict[str, Any]:
    """Data source (a config's ``source`` section) and the SHA-256 of each raw file it was
    read from.

    A bundled or data-directory dataset's published files are checked against their
    published SHA-256 when loaded, so the published sums are the ones read; a user file is
    hashed here.
    """
    from fairpca.datasets import _files

    if source.dataset is not None:
        raw = {
            "adult": (_files.ADULT_DATA, _files.ADULT_TEST),
            "german": (_files.GERMAN_DATA,),
            "bank": (_files.BANK_FULL,),
            "compas": (_files.COMPAS_TWO_YEARS,),
        }[source.dataset]
        files = {file.relative_path: file.sha256 for file in raw}
        return {"kind": "dataset", "name": source.dataset, "sha256": files}
    path = Path(source.data)
    return {"kind": "file", "name": path.name, "sha256": {path.name: sha256_file(path)}}


def code_version() -> dict[str, str]:
    """The installed fairpca version and, in a git checkout, its commit (``+dirty`` when
    tracked files differ from it)."""
    import fairpca

    git = ["git", "-C", str(Path(fairpca.__file__).resolve().parent.parent)]
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=10)
    try:
        commit = run([*git, "rev-parse", "HEAD"], check=True).stdout.strip()
        dirty = run([*git, "diff", "--quiet", "HEAD", "--"]).returncode
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "unknown", 0
    return {"fairpca": fairpca.__version__, "git_commit": commit + ("+dirty" if dirty else "")}


# ---- building the record from the audit's stages ---------------------------------------------

# The one entry of an attribute's group sizes that stands for its withheld groups (unnamed).
WITHHELD = "(withheld)"
PARTS = ("train", "validation", "test")
REPRESENTATION_CURVES = ("mmd2", "linear_inseparability", "mean_gap_train", "mean_gap_validation")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value))


def _number(value: Any) -> float | None:
    return float(value) if _finite(value) else None


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
    several_C = set()  # (variant, classifier) swept over a C grid: one curve per C
    if "C" in table:
        counts = table.groupby(["variant", "classifier"])["C"].nunique()
        several_C = set(counts[counts > 1].index)
    for row in table.to_dict("records"):
        prefix = f"{row['variant']}/{row['classifier']}"
        if (row["variant"], row["classifier"]) in several_C:
            prefix += f"_C{row['C']:g}"  # MLflow names allow no "@" or "="
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
    split, min_group_size: int, allow_small_groups: bool = False, parts: Sequence[str] = PARTS
) -> dict[str, dict[str, int | str]]:
    """Rows per group over ``parts`` (default: all three), as
    :func:`fairpca.metrics.published_group_sizes` allows (complementary suppression);
    withheld groups are one unnamed entry saying how many and why."""
    frame = pd.concat([getattr(split, f"s_{part}") for part in parts], ignore_index=True)
    sizes, withheld = fm.published_group_sizes(
        frame.astype(str), min_group_size=min_group_size, allow_small_groups=allow_small_groups
    )
    where = "these rows" if len(parts) > 1 else f"the {parts[0]} rows"
    return with_withheld(sizes, withheld, min_group_size, where)


def with_withheld(sizes, withheld, min_group_size: int, where: str = "these rows") -> dict:
    """The rows per published group of each attribute (``sizes``) and, where the attribute
    has ``withheld`` groups (their number), one unnamed entry saying how many and why."""
    out = {column: {str(g): int(n) for g, n in groups.items()} for column, groups in sizes.items()}
    for column, count in withheld.items():
        if count:
            out[column][WITHHELD] = (
                f"{count} group(s), suppressed: fewer than {min_group_size} of {where}, or "
                "hidden so that a suppressed group's size cannot be recovered"
            )
    return out


def _frontier_point(row: dict[str, Any], measure: str, meets: bool, stage: str) -> dict:
    numbers = ("lambda", "C", "dp_difference", "selection_rate_ratio", "eo_difference")
    return {key: _number(row.get(key)) for key in numbers} | {
        "variant": row["variant"],
        "k": int(row["k"]),
        "classifier": str(row["classifier"]).split("@")[0],
        "measure": measure,
        "value": float(row[measure]),
        "ci95_low": _number(row.get(f"{measure}.ci95_low")),
        "ci95_high": _number(row.get(f"{measure}.ci95_high")),
        "meets_gate": meets,
        "stage": stage,
    }


def frontier_points(searches: dict[str, Any], table: pd.DataFrame, selection) -> list[dict]:
    """The trade-off over k and lambda (:class:`FrontierPoint`): per variant, k, lambda and
    stage the best classifier (meeting the gate first, then ``select_by``), from the k
    searches' points and the sweep's table; the Pareto points per variant marked."""
    policy, measure = GatePolicy.from_config(selection), selection.select_by
    rows = [(point, "coarse") for search in searches.values() for point in search.points]
    rows += [(row, "sweep") for row in table.to_dict("records") if "k" in row]
    best: dict[tuple, tuple] = {}
    for row, stage in rows:
        if not _finite(row.get(measure)):
            continue
        lam = row.get("lambda")
        key = (row["variant"], int(row["k"]), lam if _finite(lam) else None, stage)
        rank = (not policy.failures(row), float(row[measure]))
        if key not in best or rank > best[key][0]:
            best[key] = (rank, row)
    points = [_frontier_point(row, measure, rank[0], key[3]) for key, (rank, row) in best.items()]

    def gap(point: dict) -> float:
        return math.inf if point["dp_difference"] is None else point["dp_difference"]

    for point in points:
        point["pareto"] = not any(
            p["variant"] == point["variant"] and p["value"] > point["value"] and gap(p) < gap(point)
            for p in points
        )
    return points


def _unrated(sizes: dict[str, dict[str, int | str]], metrics: dict[str, float]) -> dict:
    """Per attribute, its named groups (``sizes``) without a selection rate in ``metrics``
    (whose names spell labels as :func:`fairpca.metrics._names.group_tokens` does)."""
    from fairpca.metrics._names import group_tokens

    named = {name: [g for g in groups if g != WITHHELD] for name, groups in sizes.items()}
    tokens = group_tokens(named)
    return {
        name: [g for g in groups if "selection_rate.{}:{}".format(*tokens[name, g]) not in metrics]
        for name, groups in named.items()
    }


def withheld_groups(
    sizes: dict[str, dict[str, int | str]], test: dict[str, float], min_group_size: int
) -> dict[str, str] | None:
    """Per attribute, a sentence for the groups of the test rows whose size or rates are not
    published, and why (the groups themselves stay unnamed when their size is withheld)."""
    out = {}
    unrated = _unrated(sizes, test)
    for attribute, groups in sizes.items():
        parts = [f"sizes and rates of {groups[WITHHELD]}"] if WITHHELD in groups else []
        if unrated[attribute]:
            parts.append(
                f"rates of {', '.join(unrated[attribute])} withheld: beside the attribute's "
                f"other numbers they would reveal a group of fewer than {min_group_size} test "
                "rows, or a gated rate is undefined there"
            )
        if parts:
            out[attribute] = "; ".join(parts)
    return out or None


def unjudged_groups(
    sizes: dict[str, dict[str, int | str]], validation: dict[str, float], split: dict[str, int],
    min_group_size: int,
) -> list[str]:  # fmt: skip
    """A warning for each attribute with groups of many validation rows that the gate did not
    judge: their rates are withheld there, so that a group of fewer than ``min_group_size``
    rows cannot be recovered from them (complementary suppression,
    :func:`fairpca.metrics.published_group_sizes`). ``sizes``: rows per group over all parts;
    ``split``: the rows per part (the split is stratified by label and group)."""
    from fairpca.metrics._names import attribute_tokens

    total = sum(split.values())
    share = split["n_validation"] / max(total, 1)
    many_rows = 1.5 * min_group_size
    unrated = _unrated(sizes, validation)
    tokens = attribute_tokens(list(sizes))
    warnings = []
    for (attribute, groups), token in zip(sizes.items(), tokens, strict=True):
        many = [g for g in unrated[attribute] if groups[g] * share >= many_rows]
        if WITHHELD in groups:
            # The withheld groups (their rows: the attribute's total less its named groups):
            # when none of them has a validation rate and they average many validation rows,
            # at least one large group went unjudged.
            count = int(str(groups[WITHHELD]).split(" ")[0])
            rows = total - sum(size for size in groups.values() if isinstance(size, int))
            rated = sum(  # the rates themselves, not their intervals
                key.startswith(f"selection_rate.{token}:")
                and not key.endswith((".ci95_low", ".ci95_high", ".se"))
                for key in validation
            )
            named_rated = len(groups) - 1 - len(unrated[attribute])
            if rated <= named_rated and rows / max(count, 1) * share >= many_rows:
                many.append(f"{count} groups whose sizes are withheld ({rows:,} rows together)")
        if many:
            warnings.append(
                f"the gate did not judge {attribute}: {', '.join(many)}: on the validation rows "
                f"their rates are withheld so that a group of fewer than {min_group_size} rows "
                f"cannot be recovered from them; merge or drop the rows of {attribute}'s "
                "smallest groups to have them judged"
            )
    return warnings


def unjudged_in_split(split, validation: dict[str, float], evaluation) -> list[str]:
    """:func:`unjudged_groups` of an in-memory split: the chosen candidate's ``validation``
    metrics against the groups' sizes over the three parts."""
    sizes = group_sizes(split, evaluation.min_group_size, evaluation.allow_small_groups)
    rows = {f"n_{part}": len(getattr(split, f"y_{part}")) for part in PARTS}
    return unjudged_groups(sizes, validation, rows, evaluation.min_group_size)


SUMMARY_COLUMNS = (
    "variant", "k", "lambda", "classifier", "C", "accuracy", "accuracy.ci95_low",
    "accuracy.ci95_high", "balanced_accuracy", "dp_difference", "dp_difference.ci95_high",
    "eo_difference", "eo_difference.ci95_high", "var_explained",
)  # fmt: skip


def candidate_summary(table: pd.DataFrame, choice: Choice) -> list[dict[str, Any]]:
    """Rows a reader compares, all on validation rows: the majority-class baseline, the
    unconstrained PCA baseline, the chosen candidate, then per variant and classifier the
    fairest (lambda = 0) and the last lambda. ``role`` says which row is which and
    ``validation_rows`` how many rows measured it: after a wide search the sweep's rows are
    the sample's, the chosen candidate and the baselines every validation row's."""
    first = table.groupby(["variant", "classifier"], sort=False).head(1).assign(role="λ=0")
    last = table.groupby(["variant", "classifier"], sort=False).tail(1).assign(role="last λ")
    sweep = pd.concat([first, last]).drop_duplicates(subset=["variant", "classifier", "lambda"])
    sweep.loc[sweep["lambda"].isna(), "role"] = "no λ"
    sweep = sweep.sort_values(["variant", "classifier", "lambda"], na_position="first")
    head = [{"role": "majority", "classifier": "majority", "accuracy": choice.majority_accuracy,
             "validation_rows": choice.chosen.get("validation_rows")}]  # fmt: skip
    if choice.pca_row is not None:
        head.append({"role": "PCA (best)", **choice.pca_row})
    head.append({"role": "chosen", **choice.chosen})
    columns = ["role", *(c for c in SUMMARY_COLUMNS if c in table.columns)]
    if "validation_rows" in table.columns:
        columns.insert(1, "validation_rows")
    frame = pd.concat(
        [pd.DataFrame(head).reindex(columns=columns), sweep.reindex(columns=columns)],
        ignore_index=True,
    )
    return json.loads(frame.to_json(orient="records"))


def _selection(config, choice: Choice, reported, diagnostics, facts: RowFacts) -> Selection:
    """The audit's result (``audit.json["selection"]``) from the rows per part and the
    published rows per group over every part and over the test part (``facts``);
    ``baselines["pca"]`` only when the audit fitted standard PCA."""
    chosen, min_group_size = choice.chosen, config.evaluation.min_group_size
    split = {f"n_{part}": n for part, n in facts.rows.items()}
    validation, test = reported["chosen"]["validation"], reported["chosen"]["test"]
    baselines = {"majority": reported["majority"]}
    if choice.pca_row is not None and "pca" in reported:
        baselines["pca"] = {"name": candidate_name(choice.pca_row), **reported["pca"]}
    record = {
        "chosen": {
            "variant": chosen["variant"],
            "classifier": chosen["classifier"],
            "lambda": _number(chosen["lambda"]),
            "name": candidate_name(chosen),
            "k": int(chosen["k"]),
            "C": _number(chosen.get("C")),
        },
        "gate": config.selection.gate,
        "decision": choice.decision.as_dict(),
        "validation": validation,
        "test": test,
        "baselines": baselines,
        "split": split,
        "group_sizes": facts.group_sizes,
        "test_group_sizes": facts.test_group_sizes,
        "withheld": withheld_groups(facts.test_group_sizes, test, min_group_size),
        "chosen_by": choice.certification["chosen_by"],
        "diagnostics": diagnostics.get("representations", {}),
        "warnings": [
            *unjudged_groups(facts.group_sizes, validation, split, min_group_size),
            *diagnostics.get("warnings", []),
        ],
    }
    return Selection.model_validate(json.loads(json.dumps(record, default=float)))


def _metrics(choice: Choice, reported, representations, timings) -> dict[str, float]:
    """Flat run metrics: the chosen candidate's validation metrics (under ``validation.``;
    the test numbers are the unprefixed headline ones), the baselines'
    (``baseline.<name>.<part>.``), representation facts and timings."""
    metrics = {f"validation.{k}": v for k, v in chosen_metrics(choice.chosen).items()}
    metrics.update(reported["chosen"]["test"])
    for name in ("majority", "pca"):
        for part in ("validation", "test"):
            values = reported.get(name, {}).get(part, {})
            headline = {k: v for k, v in values.items() if k.startswith(HEADLINE_METRICS)}
            metrics.update({f"baseline.{name}.{part}.{k}": v for k, v in headline.items()})
    for variant, rep in representations.items():
        metrics.update({f"{variant}/{key}": value for key, value in rep.facts.items()})
    metrics.update(timings)
    return {k: float(v) for k, v in metrics.items() if _finite(v)}


@dataclasses.dataclass(frozen=True)
class RowFacts:
    """What the record says of an audit's rows, however they were held: rows per part,
    published rows per group (over every part and over the test part), the attributes, the
    screening, the training rows' digest and (a route that read files itself) the data
    source. :func:`row_facts` gives them for rows in memory; the Dask route from counts."""

    rows: dict[str, int]
    group_sizes: dict[str, dict[str, int | str]]
    test_group_sizes: dict[str, dict[str, int | str]]
    sensitive: list[str]
    screening: list[dict[str, Any]] | None
    training_data_sha256: str
    data_source: dict[str, Any] | None = None


def row_facts(split, evaluation) -> RowFacts:
    """The :class:`RowFacts` of a split held in memory."""
    groups = (evaluation.min_group_size, evaluation.allow_small_groups)
    return RowFacts(
        rows={part: len(getattr(split, f"y_{part}")) for part in PARTS},
        group_sizes=group_sizes(split, *groups),
        test_group_sizes=group_sizes(split, *groups, parts=("test",)),
        sensitive=list(split.s_train.columns),
        screening=split.screening,
        training_data_sha256=training_data_digest(split),
    )


def _run_fields(config, choice: Choice, kind: str, run_name: str, started_at: datetime,
               facts: RowFacts, tags: dict[str, str], onnx) -> dict[str, Any]:  # fmt: skip
    """The fields of an :class:`AuditRecord` that the config, the choice, the run and the
    rows' ``facts`` give, whichever route measured the candidates (``tags``: the flow's, after
    the record's own; the saved graph's SHA-256 among the model (version) tags:
    :data:`fairpca.tasks.onnx_export.ONNX_SHA_TAG`)."""
    from .onnx_export import ONNX_SHA_TAG

    tracking, chosen_name = config.tracking, candidate_name(choice.chosen)
    sensitive = facts.sensitive
    source = config.source
    model_tags = {"fairness.chosen": chosen_name, "fairpca.audit_id": run_name}
    model_tags |= choice.policy.tags()
    if onnx and onnx.get("sha256"):
        model_tags[ONNX_SHA_TAG] = onnx["sha256"]
    return tracking.model_dump(
        include={"experiment_name", "champion_alias", "mlflow_retries", "mlflow_retry_backoff"}
    ) | {
        "audit_id": run_name,
        "run_name": run_name,
        "kind": kind,
        "model_name": resolved_model_name(source, tracking.model_name, config.selection.policy),
        "register_model": tracking.register_model and choice.eligible,
        "started_at": started_at,
        "ended_at": datetime.now(UTC),
        "sensitive": list(sensitive),
        "decision": choice.decision.as_dict(),
        "chosen": chosen_metrics(choice.chosen)
        | {"variant": choice.chosen["variant"], "classifier": choice.chosen["classifier"]},
        "tags": {
            "fairpca.audit_id": run_name,
            "fairpca.source": source.name,
            "fairpca.sensitive": ",".join(sensitive),
            "fairpca.chosen": chosen_name,
            "fairpca.gate": config.selection.gate,
            **tags,
        },
        "model_tags": model_tags,
        "policy": choice.policy.record(),
        "eligibility": choice.eligibility,
        "certification": choice.certification,
        "provenance": {  # what the card says the audit measured, on which data, by which code
            "definition": definition_of(source),
            "data_source": facts.data_source or data_source_facts(source),
            "code_version": code_version(),
        },
    }


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
    frontier: list[dict[str, Any]] | None = None,
    hashes: dict[str, str],
    model_sha256: str,
    model_digest: str,
    tags: dict[str, str],
    parity_gap: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
    onnx: dict[str, Any] | None = None,
) -> AuditRecord:
    """The one record of an audit, built once from its stages; every reader reads it.

    ``split``: the rows in memory, or their :class:`RowFacts` (the Dask route's, from
    counts); ``params``: the route's own, beside the config's; ``onnx``:
    :meth:`fairpca.tasks.onnx_export.GraphExport.record` of the saved model."""
    facts = split if isinstance(split, RowFacts) else row_facts(split, config.evaluation)
    # the validation rows the search measured its candidates on (NaN: the table does not say)
    searched = table.get("validation_rows", pd.Series(dtype=float)).max()
    fails = choice.policy.failures  # a reference meets the gate on the validation rows
    return AuditRecord(
        **_run_fields(config, choice, kind, run_name, started_at, facts, tags, onnx),
        onnx=onnx,
        selection=_selection(config, choice, reported, diagnostics, facts),
        params=config.flat_params() | (params or {}),
        metrics=_metrics(choice, reported, representations, timings),
        metric_steps=metric_steps(table),
        hashes=hashes,
        references=[
            {key: r[key] for key in REFERENCE_KEYS if key in r}
            | {"meets_gate": not fails(r["validation"]) if r.get("validation") else None}
            for r in references
            if "skipped" not in r
        ],
        screening=facts.screening,
        k=_k_record(k_record, choice.chosen, frontier),
        frontier=frontier or None,
        split_sizes=facts.rows,
        candidates=candidate_summary(table, choice),
        searched_validation_rows=None if pd.isna(searched) else int(searched),
        cells_not_judged=(choice.policy.judged_cells(choice.chosen) or ([], None))[1] or None,
        skipped=skipped or None,
        model_sha256=model_sha256,
        model_digest=model_digest,
        training_data_sha256=facts.training_data_sha256,
        parity_gap=parity_gap,
    )


def _scores(pipeline, X) -> np.ndarray | None:
    """The classifier's score of each row: its decision function, else the logit of its
    probability of the positive class (None when it has neither)."""
    for method in ("decision_function", "predict_proba"):
        try:
            values = np.asarray(getattr(pipeline, method)(X), dtype=np.float64)
        except (AttributeError, NotImplementedError):
            continue
        if method == "decision_function":
            return values.ravel()
        p = np.clip(values[:, -1], 1e-6, 1 - 1e-6)
        return np.log(p / (1 - p))
    return None


def parity_gap(pipeline, split, table: pd.DataFrame, choice: Choice, selection,
               min_group_size: int):  # fmt: skip
    """Why the chosen model misses the gate, in numbers on the validation rows (None when it
    meets it or has no score): per group of each attribute and, with several, per cell of
    their intersection (only those of at least ``min_group_size`` rows; no counts), the mean
    and standard deviation of the classifier's score, and the best eligible Fair PCA-S
    candidate (useful, :func:`fairpca.tasks.select.ineligibility`; the least violation of the
    gate, then balanced accuracy; ``selection``: the config's section). Fair PCA equalises the
    groups' means of the representation, not the spread of the scores: one threshold on
    scores of unequal spread
    selects unequal shares, which Fair PCA-S's covariance matching (Sec. 3.6) or group-
    specific thresholds (the attribute at prediction) address."""
    if not choice.policy.failures(choice.chosen):
        return None
    scores = _scores(pipeline, split.X_validation)
    if scores is None:
        return None
    frame = pd.DataFrame(split.s_validation).astype(str).reset_index(drop=True)
    if frame.shape[1] > 1:
        frame["intersection"] = frame.apply(
            lambda row: "/".join(f"{c}:{row[c]}" for c in row.index), axis=1
        )
    spread = {}
    for attribute in frame.columns:
        for group, rows in frame.groupby(attribute).groups.items():
            if len(rows) >= min_group_size:
                part = scores[np.asarray(rows)]
                spread[f"{attribute}:{group}"] = {
                    "mean": float(part.mean()),
                    "sd": float(part.std()),
                }
    searched = sorted({str(v) for v in table["variant"] if str(v).startswith("fair_pca_s")})
    return {"scores": spread, "fair_pca_s": best_fair_pca_s(table, choice, selection),
            "fair_pca_s_searched": searched}  # fmt: skip


def best_fair_pca_s(table: pd.DataFrame, choice: Choice, selection) -> dict[str, dict]:
    """Per Fair PCA-S variant, its best eligible candidate of ``table`` (useful:
    :func:`fairpca.tasks.select.ineligibility`), meeting the gate first, then the least
    violating, then the highest balanced accuracy: what :func:`parity_gap` offers instead."""
    measure, records = "balanced_accuracy", table.to_dict("records")
    useful = best_useful(records, choice.majority_accuracy, selection)
    fair_s = [
        r for r in records if str(r["variant"]).startswith("fair_pca_s") and _finite(r.get(measure))
        and not ineligibility(r, choice.majority_accuracy, selection, useful)
    ]  # fmt: skip
    best = {}
    for variant in sorted({r["variant"] for r in fair_s}):
        # meeting the gate first, then the least violating, then ``measure``
        row = max((r for r in fair_s if r["variant"] == variant),
                  key=lambda r: (-choice.policy.violation(r), float(r[measure])))  # fmt: skip
        best[variant] = {
            "name": candidate_name(row),
            "meets_gate": not choice.policy.failures(row),
            **{k: float(row[k]) for k in PARITY_GAP_METRICS if _finite(row.get(k))},
        }
    return best


PARITY_GAP_METRICS = (
    "balanced_accuracy", "dp_difference", "selection_rate_ratio", "dp_difference.intersection",
    "selection_rate_ratio.intersection",
)  # fmt: skip


def _k_record(k_record: dict[str, Any], chosen: dict[str, Any], frontier) -> dict[str, Any]:
    """The k record with the chosen candidate's k as ``fitted`` and each variant's k."""
    k = dict(k_record)
    if _finite(chosen.get("k")):
        k["fitted"] = int(chosen["k"])
    kept = {p["variant"]: p["k"] for p in frontier or [] if p["stage"] == "sweep"}
    return k | ({"chosen": kept} if kept else {})


def training_data_digest(split) -> str:
    """SHA-256 of the training rows: features, labels and groups, in order (two audits that
    trained on the same rows give the same digest)."""
    digest = hashlib.sha256()
    for frame in (split.X_train, pd.DataFrame({"y": split.y_train}), split.s_train):
        digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
        digest.update("|".join(map(str, frame.columns)).encode())
    return digest.hexdigest()
