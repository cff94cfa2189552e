"""Rendering an audit for people: the :class:`Verdict` every surface shows, the report
(Jinja2 templates ``templates/report.md.j2`` and ``templates/report.html.j2``), the trade-off
plot, and the escaping of every user string where it is rendered.

:func:`build_verdict` reads the audit record (:mod:`fairpca.tasks.record`) and, once decided,
the promotion into a :class:`Verdict` (the decision and why, the chosen model, every model's
test numbers with their 95% intervals, the chosen model's rates per named group, reasons and
warnings; measures named by :data:`METRIC_LABELS`). The report, the model card
(:func:`render_model_card`: a pure function of the record, so a re-logged audit gets the card
it had), the run and version descriptions (:func:`run_description`,
:func:`version_description`) and the terminal (:mod:`fairpca.flows.console`) render it.
The report opens with it; then sections of bullet lists, tables and the plot. Only aggregated
numbers are written: no raw rows, no per-person sensitive attributes.

Column names, category values, group labels and file names come from the user's data. Every
template escapes what it prints (:func:`render_template`: HTML autoescape; Markdown
:func:`markdown_text` on every string not marked safe: report, model card, descriptions,
the gate's card, Prefect artifacts); :func:`write_safe_csv` guards every CSV written (a
spreadsheet runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return as a formula).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import math
import re
import threading
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from markupsafe import Markup

from . import DEFAULT_POLICY
from .decision import (
    NEEDS,
    OUTCOMES,
    REFUSED,
    Deployment,
    Kind,
    Reason,
    deciding_words,
    render,
)
from .decision import deciding as deciding_reason
from .evaluate import CELL_ROWS, HEADLINE_METRICS
from .record import PARTS, WITHHELD, AuditRecord
from .select import unconstrained
from .trust import mask_credentials, sha256_file, visible_text

# -- escaping every user string where it is rendered ------------------------------------------

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

# What starts markup inside a line of CommonMark or GitHub-flavoured Markdown, each
# backslash-escaped (the Markdown source reads as written: no entities); nothing else is, so
# names and numbers stay readable (audit-adult-2026, 0.768, fair_pca):
# - anywhere: the backslash, code spans, * emphasis, [links] and ![images], <HTML> and
#   <autolinks>, &entities;, | table cells, ~strikethrough~, $math$ (GitHub);
# - _ at a word's edge (inside a word it cannot open or close emphasis);
# - GitHub's extended autolinks: a "." before a letter (www.x.org, x@y.org) and "://".
_MARKDOWN_SPECIAL = re.compile(
    r"[\\`*\[\]<>&|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\.(?=[A-Za-z])|:(?=//)"
)
# At the start of a line (a block quote's > is escaped anywhere): a heading, a list item, a
# setext underline or thematic break; an ordered list item's "1." / "1)".
_BLOCK_START = re.compile(r"#{1,6}(?:\s|$)|[+-](?:\s|$)|[=-]+\s*$")
_ORDERED_ITEM = re.compile(r"\d{1,9}(?=[.)](?:\s|$))")
_NEWLINES = re.compile(r"[\r\n]+")


def markdown_text(value: object) -> str:
    """``value`` as literal Markdown text: no emphasis, link, image, code span, table cell,
    HTML tag or block (heading, list, quote) can start inside it, and it stays on one line
    (safe in a table cell); only what would start markup is escaped, and its bidirectional
    controls are shown (:func:`~fairpca.tasks.trust.visible_text`)."""
    # leading blanks: four would start a code block, and Markdown shows none of them
    text = _MARKDOWN_SPECIAL.sub(r"\\\g<0>", _NEWLINES.sub(" ", visible_text(value))).lstrip()
    if _BLOCK_START.match(text):
        return f"\\{text}"
    if item := _ORDERED_ITEM.match(text):
        return f"{item[0]}\\{text[item.end() :]}"
    return text


def csv_cell(value: object) -> object:
    """A string cell that a spreadsheet would evaluate as a formula gets a leading ``'``;
    other values are returned unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def write_safe_csv(frame: pd.DataFrame, path, **kwargs) -> None:
    """Write ``frame`` as CSV whose string cells (also categories), index labels and column
    names cannot start a formula (:func:`csv_cell`); every string is quoted, so a carriage
    return or newline inside a cell can never start a new row."""
    safe = frame.rename(columns=csv_cell, index=csv_cell)
    text = safe.select_dtypes(include=["object", "string", "category"]).columns
    safe[text] = safe[text].astype(object).map(csv_cell)
    safe.to_csv(path, quoting=csv.QUOTE_NONNUMERIC, **kwargs)


# rcParams are global: plots drawn one at a time, so no thread sees another's settings.
_PLOTTING = threading.RLock()


@contextlib.contextmanager
def literal_plot_text():
    """Matplotlib draws every text made inside this block as the literal characters: no
    mathtext (``text.parse_math``) and no LaTeX (``text.usetex``), whatever the user's
    matplotlibrc says (``$50k-$100k`` would lose its dollars and ``$x^$ band`` fail). Usable
    as a decorator of a plotting function; such plots are drawn one at a time."""
    import matplotlib

    with _PLOTTING, matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield


# -- blocks of a section, matrices, intervals ---------------------------------------------------


@dataclass(frozen=True)
class Bullets:
    """A bullet list."""

    items: list[str]


@dataclass(frozen=True)
class Plot:
    """The trade-off plot, with its caption."""

    caption: str


def write_matrices(out_dir: Path, representations: dict[str, Any]) -> dict[str, str]:
    """Save each variant's matrices as ``projection/<variant>/<name>.npy``; return SHA-256s."""
    hashes = {}
    for variant, rep in representations.items():
        folder = out_dir / "projection" / variant
        folder.mkdir(parents=True, exist_ok=True)
        for name, matrix in rep.matrices().items():
            path = folder / f"{name}.npy"
            np.save(path, matrix)
            hashes[f"{variant}/{name}"] = sha256_file(path)
    return hashes


# -- the verdict: the decision, the chosen model, every model's test numbers, the groups ----------

# The first screen's measures, in this order: utility a constant classifier cannot fake, then
# the disparities a reviewer quotes. A gated measure that is not among them is added.
VERDICT_METRICS = (
    "accuracy",
    "balanced_accuracy",
    "dp_difference",
    "selection_rate_ratio",
    "eo_difference",
)
GROUP_RATES = ("selection_rate", "tpr", "fpr", "base_rate")
# The one list of displayed measures: (label, what it measures, terminal label). The label
# heads a column, the meaning is its tooltip; the terminal's 80 columns take the short one.
METRIC_LABELS = {
    "accuracy": ("accuracy", "share of correct predictions", "acc"),
    "balanced_accuracy": (
        "balanced accuracy", "mean of the true-positive and true-negative rates", "bal acc",
    ),
    "dp_difference": ("ΔDP", "largest difference of selection rates between groups", "ΔDP"),
    "selection_rate_ratio": ("SR ratio", "smallest over largest selection rate", "SR ratio"),
    "eo_difference": ("ΔEO", "largest difference of true-positive rates between groups", "ΔEO"),
    "equalized_odds_difference": ("ΔEOdds", "larger of the TPR and FPR differences", "ΔEOdds"),
    "dp_difference.intersection": ("ΔDP ∩", "ΔDP between intersection groups", "ΔDP ∩"),
    "eo_difference.intersection": ("ΔEO ∩", "ΔEO between intersection groups", "ΔEO ∩"),
    "selection_rate": ("selection rate", "share predicted 1", "selection rate"),
    "tpr": ("TPR", "true-positive rate", "TPR"),
    "fpr": ("FPR", "false-positive rate", "FPR"),
    "base_rate": ("base rate", "share labelled 1", "base rate"),
}  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """A measure and its 95% interval, as every renderer shows it: 3 decimals, the interval
    after an en dash (``0.782 (0.765–0.798)``); ``-`` when undefined."""

    value: float | None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, metrics: dict[str, Any], name: str) -> Estimate:
        return cls(*(metrics.get(name + end) for end in ("", ".ci95_low", ".ci95_high")))

    @property
    def text(self) -> str:
        return f"{self.value:.3f}" if pd.notna(self.value) else "-"

    @property
    def interval(self) -> str:
        bounds = pd.notna([self.value, self.low, self.high]).all()
        return f"{self.low:.3f}–{self.high:.3f}" if bounds else ""

    def __str__(self) -> str:
        return self.text + (f" ({self.interval})" if self.interval else "")


def gate_limits(thresholds: Any) -> tuple[dict[str, float], dict[str, float]]:
    """``({metric: largest allowed}, {metric: smallest allowed})`` of a gate policy.

    ``thresholds`` is a mapping (a policy's :attr:`~fairpca.tasks.record.Policy.thresholds`)
    or a pydantic model (the config's :class:`fairpca.flows.config.Thresholds`, whose unset
    limits are None) of ``max_<metric>`` / ``min_<metric>`` names; a bare metric name is an
    upper limit. The short names ``max_dp`` / ``max_eo`` are not used: ``max_dp_difference``
    limits ``dp_difference``.
    """
    values = thresholds.model_dump() if hasattr(thresholds, "model_dump") else thresholds
    limits = {key: float(limit) for key, limit in values.items() if limit is not None}
    upper = {k.removeprefix("max_"): v for k, v in limits.items() if not k.startswith("min_")}
    return upper, {k[4:]: v for k, v in limits.items() if k.startswith("min_")}


def verdict_columns(test: dict[str, Any], thresholds: Any = None) -> list[str]:
    """The measures of the verdict table: :data:`VERDICT_METRICS`, a gated measure outside
    them, and with several attributes the intersection's ΔDP and ΔEO (those measured)."""
    upper, lower = gate_limits(thresholds or {})
    gated = [m for m in (*upper, *lower) if m in METRIC_LABELS]
    intersection = ("dp_difference.intersection", "eo_difference.intersection")
    return [m for m in dict.fromkeys((*VERDICT_METRICS, *gated, *intersection)) if m in test]


NOT_ELIGIBLE = "Best candidate (not eligible, not registered)"


def _chosen_rows(record) -> str:
    """The rows the choice was made on, as the verdict names them: the validation rows, or
    on a small table the training and validation rows it cross-validated."""
    if "cross-validation" not in record.selection.chosen_by:
        return record.validation_label()
    seen = record.split_sizes.train + record.split_sizes.validation
    return f"cross-validated training+validation rows ({seen:,})"


def promotion_reasons(promotion) -> tuple[Reason, ...]:
    """The champion decision (a :class:`~fairpca.tasks.record.PromotionRecord`) as structured
    reasons: demoted, then promoted or the champion stays, each with its account (on this
    audit's test rows, where the champion is measured beside the challenger)."""
    if promotion is None:
        return ()
    reasons, accounts = [], list(promotion.reasons)
    if promotion.demote and accounts:
        reasons.append(Reason(kind=Kind.DEMOTED, decides=True, facts=(accounts.pop(0),)))
    kind = Kind.PROMOTED if promotion.promote else Kind.CHAMPION_STAYS
    rows = "test" if promotion.comparison is not None else ""
    reasons.append(Reason(kind=kind, decides=True, rows=rows, facts=tuple(accounts)))
    return tuple(reasons)


def _decision(record, promotion) -> dict[str, Any]:
    """The decision of a :class:`Verdict`: ``promote``, ``headline`` and ``why`` (in one
    sentence), ``words`` (in plain capitals) and ``deciding`` (what decided, in a few words:
    ``dominated by exponentiated_gradient``, ``not eligible``, ...; None when promoted), all
    from the structured reasons (:mod:`fairpca.tasks.decision`), never from their sentences.

    ``promotion`` is the champion decision (a :class:`~fairpca.tasks.record.PromotionRecord`);
    None before it is taken: the gate's own decision is stated.
    """
    selection, first = record.selection, deciding_reason(record.selection.decision.reasons)
    bound = "point estimates" if selection.gate == "point" else "upper 95% bounds"
    gate = f"the gate {record.policy.name if record.policy else 'thresholds'} ({bound})"
    passed = f"meets {gate} on the validation rows"
    stated = list(promotion_reasons(promotion)[-1:])  # the champion decision's outcome
    but = f"{passed}, but {render(stated[0])}" if stated else ""
    headline, words, deciding = "Not promoted", "NOT promoted", None
    if not selection.decision.promote:
        stated, deciding = [], deciding_words(first)
        why = render(first) if first else f"fails {gate} on the validation rows"
    elif promotion is None:
        headline, words = "Passes the gate", "PASSES the gate"
        why = f"{passed}; the promotion is decided when the audit is logged to MLflow"
    elif promotion.promote:
        headline, words = "Promoted to champion", "PROMOTED to champion"
        why = f"{passed}; {render(stated[0])}"
    elif not record.register_model:
        deciding = "not registered"
        why = (
            f"{passed}, but no version was registered (registration off, or the model stores rows)"
        )
    elif promotion.refused:  # the model lost a protected alias before: the registry's "no"
        headline, words, deciding = "Refused", OUTCOMES[REFUSED], "lost a protected alias before"
        why = but
    else:
        deciding, why = deciding_words(stated[0]), but
    promote = words == "PROMOTED to champion"
    if first is not None:  # the gate's deciding reason goes first
        stated.insert(0, first)
        if selection.decision.promote and first.kind == Kind.DOMINATED:  # --promote-dominated
            why = f"{render(first)}; {why[:1].lower()}{why[1:]}"
    chosen = selection.chosen
    if unconstrained({"variant": chosen.variant, "lambda": chosen.lambda_}):  # never a fair one
        needed = first is not None and first.kind == Kind.CHOSEN and "unconstrained" in first.flags
        what = "unconstrained PCA" if chosen.variant == "pca" else (
            "lambda >= 1, the whole PCA projection beside the fair one"
        )  # fmt: skip
        headline += (
            f": {what}, no fairness constraint was needed"
            if promote and needed
            else f" (the model is {what}: no fairness constraint)"
        )
    why = why[:1].upper() + why[1:]
    return {"promote": promote, "headline": headline, "why": why, "words": words,
            "deciding": deciding, "stated": tuple(stated)}  # fmt: skip


@dataclass(frozen=True)
class VerdictRow:
    """One model of the verdict table: its name, its role, how a compact table labels it
    (``short``; ``sensitive``: it needs the sensitive attribute to predict) and its test
    numbers."""

    model: str
    role: str
    estimates: dict[str, Estimate]
    short: str = ""
    sensitive: bool = False
    approach: str = ""
    ineligible: str = ""  # a reference no better than one class: the first reason why
    meets_gate: bool | None = None  # a reference: meets the gate on the validation rows
    test: dict[str, Any] = field(default_factory=dict)  # every measure on the test rows
    validation: dict[str, Any] = field(default_factory=dict)  # and on the validation rows

    @property
    def heading(self) -> str:
        """The row's label in a table with a column per model: its name and its role."""
        return f"{self.model} ({self.role})"


@dataclass(frozen=True)
class GroupRow:
    """One published group of the chosen model on the test rows."""

    attribute: str
    group: str
    rows: Any
    rates: dict[str, float]


@dataclass(frozen=True)
class Verdict:
    """What every surface shows of an audit, built once (:func:`build_verdict`): the
    decision (``headline`` and ``why``; ``words`` and ``deciding`` in plain capitals), the
    chosen model, every model's test numbers (:class:`VerdictRow`), the chosen model's rate
    per named group, the reasons and the warnings."""

    promote: bool
    headline: str
    why: str
    chosen: str
    gate: str
    chosen_label: str
    columns: tuple[str, ...]
    rows: tuple[VerdictRow, ...]
    groups: tuple[GroupRow, ...]
    words: str = ""
    deciding: str | None = None
    chosen_short: str = ""
    rows_label: str = "validation rows"
    rule: str = ""
    reasons: tuple[str, ...] = ()  # the decision_reasons rendered (one renderer)
    warnings: tuple[str, ...] = ()
    intersections: tuple[GroupRow, ...] = ()
    policy: str = ""  # the gate policy's name where it is not the default one
    measures: tuple[str, ...] = ()  # the headline's metrics: the policy's, then accuracy
    decision_reasons: tuple[Reason, ...] = ()  # the structured reasons, in order
    stated: tuple[Reason, ...] = ()  # those the ``why`` sentence renders

    @property
    def line(self) -> str:
        """The decision and the chosen model's headline test numbers in one line of plain
        text, e.g. ``PROMOTED to champion: test ΔDP 0.003, SR ratio 0.982, accuracy 0.782.``,
        or under another policy its name and its own measure, ``PROMOTED to champion under
        equal_opportunity: test ΔEO 0.041, accuracy 0.812.``"""
        words = self.words + (f" ({self.deciding})" if self.deciding else "")
        words += f" under {self.policy}" if self.policy else ""
        chosen = self.rows[0].estimates
        numbers = [f"{METRIC_LABELS[m][0]} {chosen[m].text}" for m in self.measures or LINE_METRICS
                   if m in chosen and pd.notna(chosen[m].value)]  # fmt: skip
        return f"{words}: test {', '.join(numbers)}." if numbers else f"{words}."


    @property
    def group_line(self) -> str:
        """The chosen model's selection rate per published group on the test rows, in one line
        of text (Markdown-escaped names), e.g. ``Selection rate on the test rows: sex: Female
        0.174, Male 0.171.``; empty when no group is published. Each group's rows are at least
        ``min_group_size``: withheld groups are left out."""
        rates: dict[str, list[str]] = {}
        for group in self.groups:
            rate = group.rates.get("selection_rate", math.nan)
            if not str(group.rows).startswith("withheld") and not math.isnan(rate):
                text = f"{markdown_text(group.group)} {rate:.3f}"
                rates.setdefault(group.attribute, []).append(text)
        if not rates:
            return ""
        shown = "; ".join(f"{markdown_text(a)}: {', '.join(r)}" for a, r in rates.items())
        return f"Selection rate on the test rows: {shown}."


# The headline numbers of :attr:`Verdict.line` under the default policy, in this order (those
# measured): its criteria's metrics, then accuracy.
LINE_METRICS = ("dp_difference", "selection_rate_ratio", "accuracy")


def headline_policy(policy_name: str) -> tuple[str, tuple[str, ...]]:
    """The policy a headline names (empty for the default one) and the metrics it shows: the
    policy's criteria's, then accuracy."""
    from .select import CRITERIA, parse_policy

    try:
        criteria = parse_policy(policy_name)
    except ValueError:  # a record of an older policy name: the default headline
        return "", LINE_METRICS
    named = "" if criteria == parse_policy(DEFAULT_POLICY) else "+".join(criteria)
    return named, (*(CRITERIA[c].metric for c in criteria), "accuracy")


def group_rows(
    selection, attributes: bool = True, min_group_size: int | None = None
) -> tuple[GroupRow, ...]:
    """Groups of the single attributes (``attributes``) or of their intersection: the
    published ones with their rates (NaN: not measured) on the test rows, each counted on
    the test rows (else over all parts); with ``attributes``, every other group of
    ``selection.group_sizes`` on a row of its own saying why its numbers are withheld."""
    sizes = selection.test_group_sizes or selection.group_sizes or {}
    labels = _labels_by_token(selection.group_sizes or {}, selection.test_group_sizes or {})

    def label(cell: str) -> tuple[str, str]:  # "attribute:group" of the metric names: labels
        return labels.get(tuple(cell.split(":", 1)), tuple(cell.split(":", 1)))

    found: dict[tuple[str, str], GroupRow] = {}
    for name, value in selection.test.items():
        # tpr.sex:Female, or an intersection's cell tpr.sex:Female/race:White
        rate, _, cell = name.partition(".")
        if rate not in GROUP_RATES or ":" not in cell or ".ci95_" in cell:
            continue
        if ("/" in cell) == attributes:
            continue
        if "/" in cell:  # a cell's test rows: cell_rows.<cell>
            attribute, count = "intersection", selection.test.get(f"{CELL_ROWS}{cell}")
            group = "/".join(":".join(label(part)) for part in cell.split("/"))
        else:
            attribute, group = label(cell)
            count = sizes.get(attribute, {}).get(group)
        if isinstance(count, float) and count.is_integer():  # the metrics store floats
            count = int(count)
        rates = dict.fromkeys(GROUP_RATES, math.nan)
        count = "-" if count is None else count
        found.setdefault((attribute, group), GroupRow(attribute, group, count, rates))
        found[attribute, group].rates[rate] = value
    published = tuple(found.values())
    return published + (_withheld_rows(selection, published, min_group_size) if attributes else ())


def _labels_by_token(*sizes: dict[str, dict[str, Any]]) -> dict[tuple[str, str], tuple[str, str]]:
    """``(attribute token, group token)`` -> ``(attribute, group)`` for the groups ``sizes``
    name: the metric names hold tokens (:func:`fairpca.metrics._names.group_tokens`), the
    report shows the labels. A token made unique against a label not named here has no entry
    (it is shown as it is)."""
    from fairpca.metrics._names import group_tokens

    named = {
        name: list(dict.fromkeys(g for part in sizes for g in part.get(name, {}) if g != WITHHELD))
        for name in dict.fromkeys(name for part in sizes for name in part)
    }
    return {tokens: labels for labels, tokens in group_tokens(named).items()}


# A group with many test rows is withheld too when its numbers would give a smaller group's
# away (complementary suppression: fairpca.metrics.published_group_sizes).
COMPLEMENTARY = "withheld to hide a smaller group"


def _many_test_rows(size: Any, split, min_group_size: int | None) -> bool:
    """Whether a group of ``size`` rows over all parts has clearly more than
    ``min_group_size`` test rows: the split is stratified by label and group, so the test
    part holds its share of every group's rows."""
    total = split.n_train + split.n_validation + split.n_test
    if not (isinstance(size, int) and min_group_size and total):
        return False
    return size * split.n_test / total >= 1.5 * min_group_size


def _withheld_rows(selection, published, min_group_size: int | None) -> tuple[GroupRow, ...]:
    """A row for each group of the single attributes without published test rates: a named
    group (its size over all parts is published) and the unnamed rest of an attribute."""
    shown = {(g.attribute, g.group) for g in published}
    fewer = f"fewer than {min_group_size}" if min_group_size else "too few"
    under = f"under {min_group_size}" if min_group_size else "too few"
    test_sizes = selection.test_group_sizes
    none = dict.fromkeys(GROUP_RATES, math.nan)
    out = []
    for attribute, groups in (selection.group_sizes or {}).items():
        for group, size in groups.items():
            if group == WITHHELD:
                count = str(size).split(" ")[0]  # with several, the others would reveal them
                why = f"withheld: {fewer} rows" if count == "1" else f"withheld: some {under} rows"
                out.append(GroupRow(attribute, f"{count} more group(s)", why, none))  # fmt: skip
            elif (attribute, group) not in shown:
                counted = isinstance(test_sizes.get(attribute, {}).get(group), int)
                why = "would reveal a group of " if counted else ""
                reason = f"withheld: {why}{fewer} test rows"
                if _many_test_rows(size, selection.split, min_group_size):
                    reason = COMPLEMENTARY
                out.append(GroupRow(attribute, group, reason, none))
    return tuple(out)


def _verdict_rows(record, columns, eligible: bool) -> tuple[VerdictRow, ...]:
    """The chosen candidate, the baselines and the reference mitigations."""
    selection = record.selection

    def row(model, role, measured, short, *reference, **marks):
        test = measured.test or {}
        return VerdictRow(model, role, {m: Estimate.of(test, m) for m in columns}, short,
                          *reference, test=test, validation=measured.validation or {},
                          **marks)  # fmt: skip

    rows = [row(selection.chosen.name, "chosen" if eligible else "best candidate, not eligible",
                selection, "chosen" if eligible else "best, not eligible")]  # fmt: skip
    if (pca := selection.baselines.pca) is not None:
        rows.append(row(pca.name, "baseline: unconstrained PCA", pca, "unconstrained PCA"))
    majority = selection.baselines.majority
    rows.append(row(f"majority class ({majority.class_})", "baseline", majority,
                    "majority class"))  # fmt: skip
    deployment = Deployment(**record.policy.deployment)
    for ref in record.references:
        needs = tuple(ref.needs) or ("sensitive_at_prediction",) * ref.needs_sensitive_at_prediction
        wants = " and ".join(NEEDS[n][1] for n in needs)
        role = f"reference: {ref.approach}" + (f", needs {wants}" if wants else "")
        role += "" if deployment.allows(needs) else "; the deployment excludes it"
        useless = ref.ineligible[0] if ref.ineligible else ""
        role += f"; not eligible: {useless}" if useless else ""
        rows.append(row(ref.name, role, ref, ref.name, ref.needs_sensitive_at_prediction,
                        ref.approach, useless, meets_gate=ref.meets_gate))  # fmt: skip
    return tuple(rows)


def graph_warnings(record) -> tuple[str, ...]:
    """Why the registered version has no ONNX graph (the registry gate judges the graph only,
    so it fails such a version), when the audit saved none."""
    graph = getattr(record, "onnx", None)
    return () if graph is None or graph.status == "exported" else (str(graph.reason),)


def build_verdict(record, promotion=None) -> Verdict:
    """The :class:`Verdict` of an audit record (and of the promotion, once decided): built
    once, rendered by every surface."""
    selection = record.selection
    columns = verdict_columns(selection.test, record.policy.thresholds)
    # a candidate that was never eligible is not "chosen", one the gate did not pass is chosen
    # for review only; the short label goes on in a sentence ("Chosen, 95% intervals")
    eligible = record.eligibility is None or record.eligibility.chosen_passes
    label = short = NOT_ELIGIBLE if not eligible else "Chosen for review (not promoted)"
    if eligible and selection.decision.promote:
        label, short = "Chosen model", "Chosen"
    policy, measures = headline_policy(record.policy.name)
    reasons = (*selection.decision.reasons, *promotion_reasons(promotion))
    return Verdict(
        **_decision(record, promotion),
        chosen=selection.chosen.name,
        gate=record.policy.description,
        chosen_label=label,
        columns=tuple(columns),
        rows=_verdict_rows(record, columns, eligible),
        groups=group_rows(selection, attributes=True, min_group_size=record.min_group_size),
        chosen_short=short,
        rows_label=_chosen_rows(record),
        rule=selection.gate,
        reasons=tuple(map(render, reasons)),
        decision_reasons=reasons,
        warnings=(*selection.warnings, *graph_warnings(record)),
        intersections=group_rows(selection, attributes=False),
        policy=policy,
        measures=measures,
    )


# -- the trade-off plot ----------------------------------------------------------------------

CHOSEN_STYLE = dict(
    marker="*", ms=16, color="gold", markeredgecolor="black", zorder=5, label="chosen"
)
PCA_STYLE = dict(
    marker="X", ms=9, color="black", zorder=4, label="unconstrained PCA (chosen classifier)"
)
REFERENCE_STYLE = dict(marker="D", ms=7, markeredgecolor="black", zorder=4)
CLASSIFIER_MARKERS = ("o", "s", "^", "v", "P", "<", ">")


def _errors(frame: pd.DataFrame, metric: str) -> np.ndarray:
    """Asymmetric error bars (2, n) from the 95% interval columns; 0 where undefined."""
    value = frame[metric].to_numpy(float)
    ends = frame.reindex(columns=[f"{metric}.ci95_low", f"{metric}.ci95_high"])
    low, high = ends.to_numpy(float).T
    bars = np.vstack([value - low, high - value])
    return np.where(np.isfinite(bars), np.clip(bars, 0.0, None), 0.0)


def _errorbar(ax, frame: pd.DataFrame, metric: str, utility: str, **style) -> None:
    """The rows of ``frame`` with their 95% intervals; a row with an undefined coordinate is
    left out."""
    frame = frame[np.isfinite(frame[[metric, utility]].to_numpy(float)).all(axis=1)]
    if not frame.empty:
        ax.errorbar(frame[metric], frame[utility], xerr=_errors(frame, metric),
                    yerr=_errors(frame, utility), **style)  # fmt: skip


def _point(
    ax, values: dict[str, Any] | None, metric: str, utility: str, style: dict[str, Any]
) -> None:
    """One candidate with its 95% intervals, skipped when a coordinate is undefined."""
    if values:
        frame = pd.DataFrame([{metric: np.nan, utility: np.nan, **values}])
        _errorbar(ax, frame, metric, utility, linestyle="none", capsize=2, elinewidth=1, **style)


def _accepted_region(ax, metric: str, limits: tuple[dict, dict], utility: str) -> None:
    """Shade the part of the panel the gate accepts (for this measure, and the accuracy floor
    when the panel's vertical axis is accuracy)."""
    upper, lower = limits
    ax.autoscale_view()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for limit in (upper.get(metric), lower.get(metric)):
        if limit is not None:
            x0, x1 = min(x0, limit - 0.02), max(x1, limit + 0.02)
            ax.axvline(limit, color="tab:green", ls="--", lw=1)
    floor = lower.get("accuracy", -np.inf) if utility == "accuracy" else -np.inf
    left, right = lower.get(metric, x0), upper.get(metric, x1)
    if left < right and max(floor, y0) < y1:
        ax.fill_between([left, right], max(floor, y0), y1, color="tab:green", alpha=0.12, lw=0,
                        label="accepted by the gate")  # fmt: skip
    if np.isfinite(floor) and floor > y0:
        ax.axhline(floor, color="tab:green", ls="--", lw=1)
    ax.set(xlim=(x0, x1), ylim=(y0, y1))


def _panel(ax, table: pd.DataFrame, metric: str, marks: dict[str, Any]) -> None:
    utility = marks["utility"]
    # every candidate: colour = variant, marker = classifier, a thin line along lambda
    for (variant, classifier), curve in table.groupby(["variant", "classifier"], sort=False):
        _errorbar(ax, curve.sort_values("lambda"), metric, utility, color=marks["colors"][variant],
                  marker=marks["markers"][classifier], ms=4, lw=0.6, elinewidth=0.5, alpha=0.55,
                  capsize=0)  # fmt: skip
    _point(ax, marks["pca"], metric, utility, PCA_STYLE)
    for i, reference in enumerate(marks["references"]):
        style = {**REFERENCE_STYLE, "color": f"C{(i + 4) % 10}", "label": reference["name"]}
        _point(ax, reference.get("validation"), metric, utility, style)
    _point(ax, marks["chosen"], metric, utility, CHOSEN_STYLE)
    # the majority class: its accuracy, or chance (0.5) in balanced accuracy
    if utility == "balanced_accuracy":
        ax.axhline(0.5, color="grey", ls=":", lw=1, label="majority class (chance, 0.5)")
    elif np.isfinite(marks["majority_accuracy"]):
        majority = marks["majority_accuracy"]
        ax.axhline(majority, color="grey", ls=":", lw=1, label="majority-class accuracy")
    if not np.isfinite(table[[metric, utility]].to_numpy(float)).any():
        ax.text(0.5, 0.5, f"{metric} undefined for every candidate", transform=ax.transAxes,
                ha="center", va="center", color="grey")  # fmt: skip
    _accepted_region(ax, metric, marks["limits"], utility)
    better = "higher" if metric in marks["limits"][1] else "lower"
    ax.set(xlabel=f"{metric}, validation rows ({better} is fairer)",
           ylabel=f"validation {utility.replace('_', ' ')}")  # fmt: skip
    ax.grid(alpha=0.3)


def _legend_handles(marks: dict[str, Any], axes) -> tuple[list, list]:
    from matplotlib.lines import Line2D

    legend = {f"variant {v}": Line2D([], [], color=c, marker="o", lw=1)
              for v, c in marks["colors"].items()}  # fmt: skip
    legend |= {f"classifier {c}": Line2D([], [], color="grey", marker=m, ls="none")
               for c, m in marks["markers"].items()}  # fmt: skip
    for ax in axes:  # the first handle of each other label
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    return list(legend.values()), list(legend)


def _plotted_measures(table: pd.DataFrame, thresholds) -> tuple[pd.DataFrame, list[str]]:
    """The measures drawn (the gated ones, else the two headline differences) and the table
    with a column for each: a measure undefined for every candidate is an empty panel."""
    gated = dict.fromkeys(m for limits in gate_limits(thresholds) for m in limits)
    measures = (
        [m for m in gated if m != "accuracy" and m in table.columns]
        or [m for m in ("dp_difference", "eo_difference") if m in table.columns]
        or ["dp_difference"]
    )
    table = table.reindex(columns=[*table.columns, *(m for m in measures if m not in table)])
    return table, measures


@literal_plot_text()
def plot_tradeoff(
    table: pd.DataFrame,
    path: Path,
    *,
    chosen: dict[str, Any],
    pca: dict[str, Any] | None,
    majority_accuracy: float,
    thresholds,
    gate: str = "upper_bound",
    references: list[dict[str, Any]] | None = None,
    utility: str = "accuracy",
) -> Path:
    """Validation ``utility`` (the measure the choice maximises: ``accuracy`` or
    ``balanced_accuracy``) against each gated fairness measure, one panel per measure
    (stacked, 7.2 inches = 790 px wide), every candidate with its 95% intervals.

    The region the gate accepts is shaded (with ``gate="upper_bound"`` a candidate passes
    when its whole error bar lies inside it; with ``"point"`` when its point does). Marks the
    chosen candidate (star), unconstrained PCA (X), the reference mitigations (diamonds) and
    the majority-class accuracy (dotted). Undefined (NaN) values are left out.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table, measures = _plotted_measures(table, thresholds)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # unconstrained PCA with the chosen classifier, where the table has it
    same = table[(table["variant"] == "pca") & (table["classifier"] == chosen.get("classifier"))]
    marks = {
        "chosen": chosen,
        "pca": same.iloc[0].to_dict() if pca is not None and len(same) else pca,
        "majority_accuracy": float("nan") if majority_accuracy is None else majority_accuracy,
        "utility": utility if utility in table.columns else "accuracy",
        "limits": gate_limits(thresholds),
        "references": list(references or []),
        "colors": dict(zip(dict.fromkeys(table["variant"]), cycle(palette))),
        "markers": dict(zip(dict.fromkeys(table["classifier"]), cycle(CLASSIFIER_MARKERS))),
    }
    size = (7.2, 3.2 * len(measures) + 1.3)
    fig, axes = plt.subplots(len(measures), 1, figsize=size, squeeze=False, layout="constrained")
    for ax, metric in zip(axes[:, 0], measures, strict=True):
        _panel(ax, table, metric, marks)
    rule = "whole 95% interval inside" if gate == "upper_bound" else "point estimate inside"
    fig.suptitle(f"Gate accepts a candidate with its {rule} the shaded region", fontsize=10)
    handles, labels = _legend_handles(marks, axes[:, 0])
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- rendering --------------------------------------------------------------------------------

TEMPLATES = Path(__file__).parent / "templates"
REPORT_TEMPLATE = "report.html.j2"


def _cell(value: Any) -> str:
    """A table cell: a number at 4 significant digits and ``-`` for an undefined one (our own
    text: safe), anything else as text."""
    if value is None or isinstance(value, float | np.floating):
        return Markup("-" if pd.isna(value) else f"{value:.4g}")
    number = isinstance(value, int | np.integer) and not isinstance(value, bool)
    return Markup(value) if number else str(value)


def render_template(name: str, /, **context: Any) -> str:
    """Render the template ``name``: HTML (``*.html.j2``) autoescaped; Markdown (``*.md.j2``)
    with every printed string escaped as literal text (:func:`markdown_text`); plain text
    (``*.txt.j2``) as it is, for a renderer that escapes it. No printed string keeps a raw
    bidirectional control (:func:`~fairpca.tasks.trust.visible_text`). A string marked safe
    (our own Markdown or HTML) is printed as it is."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    escape = markdown_text if name.endswith(".md.j2") else visible_text

    def finalize(value: Any) -> Any:  # what ``{{ value }}`` prints (HTML then autoescapes it)
        return escape(value) if isinstance(value, str) and not isinstance(value, Markup) else value

    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=name.endswith(".html.j2"),
        finalize=finalize,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        cell=_cell,
        # our own numbers (safe): a rate at 3 decimals, a measure of ``metrics`` with its interval
        rate=lambda value: Markup(Estimate(value).text),
        estimate=lambda metrics, name: Markup(Estimate.of(metrics, name)),
        label=lambda name: METRIC_LABELS[name][0],
    )
    environment.globals.update(labels=METRIC_LABELS, rates=GROUP_RATES)
    return environment.get_template(name).render(**context)


def _blocks(content: Any, plot: str | None) -> list[dict[str, Any]]:
    """The blocks of a section as the templates draw them (``kind`` and its data); ``plot``
    is the image's address (none: no image)."""
    if isinstance(content, list):
        return [block for item in content for block in _blocks(item, plot)]
    if isinstance(content, pd.DataFrame):
        return [{"kind": "table", "columns": list(content.columns),
                 "rows": [list(row) for row in content.itertuples(False)]}]  # fmt: skip
    if isinstance(content, Plot):
        return [{"kind": "plot", "caption": content.caption, "src": plot}] if plot else []
    if isinstance(content, Bullets):
        return [{"kind": "bullets", "items": list(content.items)}]
    return [{"kind": "text", "paragraphs": str(content).split("\n\n")}]


def _section(heading: str, content: Any, plot: str | None) -> dict[str, Any]:
    if isinstance(content, Verdict):
        return {"verdict": content, "heading": heading, "id": "verdict"}
    slug = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")[:40] or "section"
    return {"verdict": None, "heading": heading, "id": slug, "blocks": _blocks(content, plot)}


def render_html(title: str, sections: list[tuple[str, Any]], image: Path | None) -> str:
    """The report as one self-contained, responsive HTML page (the plot inlined), rendered
    by the template ``templates/report.html.j2``: a :class:`Verdict` section is the first
    screen, every other section a heading and its blocks."""
    plot = image and f"data:image/png;base64,{base64.b64encode(image.read_bytes()).decode()}"
    rendered = [_section(heading, content, plot) for heading, content in sections]
    return render_template(REPORT_TEMPLATE, title=title, sections=rendered)


def render_markdown(
    title: str, sections: list[tuple[str, Any]], image_name: str, intro: str | None = None
) -> str:
    """The report as Markdown (template ``templates/report.md.j2``; the plot linked as
    ``image_name``; ``intro``, a paragraph before the first section)."""
    rendered = [_section(heading, content, Markup(image_name)) for heading, content in sections]
    text = render_template("report.md.j2", title=title, intro=intro, sections=rendered)
    return text.rstrip("\n") + "\n"


# -- the sections, read from the record ---------------------------------------------------------


def _facts(record) -> list[str]:
    """Data and setup facts (aggregates only), each a readable line (template
    ``templates/facts.txt.j2``)."""
    params, n_train, svc_rows = record.params, record.selection.split.n_train, None
    if "rbf_svc" in params.get("classifiers", "").split(","):
        cap = params.get("svc_max_train_rows", "")
        svc_rows = min(int(cap), n_train) if cap.isdigit() and int(cap) else n_train
    text = render_template("facts.txt.j2", record=record, svc_rows=svc_rows)
    return [line for line in text.splitlines() if line]


def _reported_frame(record, verdict: Verdict) -> pd.DataFrame:
    """Chosen candidate beside the baselines, validation and test, with 95% intervals."""
    test = record.selection.test
    several = any(k.endswith(".intersection") for k in test)
    metrics = [k for k in test if k.startswith(HEADLINE_METRICS) and "ci95" not in k]
    metrics = sorted(metrics) if several else list(HEADLINE_METRICS)
    test_rows = f"test rows ({record.split_sizes.test:,})"
    shown = {"validation": record.validation_label(), "test": test_rows}
    return pd.DataFrame(
        [
            {"model": row.heading, "rows": shown[part]}
            | {m: str(Estimate.of(getattr(row, part), m)) for m in metrics}
            for row in verdict.rows
            if not row.approach  # the chosen candidate and the baselines
            for part in ("validation", "test")
        ]
    )


def _diagnostics_frame(per_variant: dict[str, Any]) -> pd.DataFrame:
    """One row per representation and attribute: probe, chance, mean gaps, reconstruction."""
    records = []
    for variant, diag in per_variant.items():
        errors = diag.get("reconstruction_error") or {}
        errors = ", ".join(f"{g}: {e:.3g}" for g, e in errors.items()) or "-"
        for attribute, probe in diag["leakage"].items():
            near = diag["near_constant_directions"].get(attribute, [])
            records.append(
                {
                    "representation": variant,
                    "attribute": attribute,
                    "probe balanced accuracy": str(Estimate.of(probe, "balanced_accuracy")),
                    "chance": probe["chance"],
                    "mean gap (train)": diag["mean_gap_train"],
                    "mean gap (validation)": diag["mean_gap_validation"],
                    "reconstruction error per group": errors,
                    "near-constant directions": ", ".join(str(d["direction"]) for d in near) or "-",
                }
            )
    return pd.DataFrame(records)


def parity_paragraph(record) -> str | None:
    """Why fair PCA does not reach parity here and what would (template
    ``templates/parity.txt.j2``), with the numbers of :func:`fairpca.tasks.record.parity_gap`
    and the post-processing reference (None when the chosen model meets the gate)."""
    gap = record.parity_gap or {}
    if not (scores := gap.get("scores")):
        return None
    by_spread = sorted(scores.items(), key=lambda item: item[1]["sd"])
    reference = next((r for r in record.references or [] if r.needs_sensitive_at_prediction
                      and "dp_difference" in (r.test or {})), None)  # fmt: skip
    means = [value["mean"] for value in scores.values()]
    # the diagnosis follows the numbers: the means' range against the spreads' range
    means_differ = max(means) - min(means) > by_spread[-1][1]["sd"] - by_spread[0][1]["sd"]
    text = render_template(
        "parity.txt.j2", low=by_spread[0], high=by_spread[-1], reference=reference,
        means=means, fair_pca_s=gap.get("fair_pca_s") or {}, means_differ=means_differ,
        searched=gap.get("fair_pca_s_searched", []),
    )  # fmt: skip
    return " ".join(line for line in text.splitlines() if line)


def _intersection_groups(record, groups) -> pd.DataFrame | None:
    """The chosen model's rates per intersection group (several attributes), if published."""
    unjudged = set(record.cells_not_judged or [])
    return pd.DataFrame(
        [{"group": g.group, "rows": f"{g.rows:,}" if isinstance(g.rows, int) else g.rows,
          **{METRIC_LABELS[r][0]: Estimate(v).text for r, v in g.rates.items()},
          "gate (validation rows)": NOT_JUDGED if g.group in unjudged else "judged"}
         for g in groups]
    ) if groups else None  # fmt: skip


NOT_JUDGED = "not judged: too few rows to resolve the policy's band"


def frontier_sections(record) -> list[tuple[str, Any]]:
    """The search's accuracy–fairness frontier over k and lambda (on the rows the search
    measured: a wide search's sample or every validation row), where the record has one: one
    row per point (:class:`fairpca.tasks.record.FrontierPoint`), Pareto points first, as a
    table right after the verdict."""
    if not record.frontier:
        return []
    frame = pd.DataFrame([point.model_dump(by_alias=True) for point in record.frontier])
    frame = frame.sort_values(
        ["pareto", "variant", "k", "lambda"], ascending=[False, True, True, True]
    )
    heading = (
        f"Accuracy–fairness frontier over k and lambda ({record.searched_label}; best "
        "classifier per point; Pareto points first)"
    )
    return [(heading, frame.reset_index(drop=True))]


def candidate_rows(record) -> str:
    """Which validation rows the candidates' table's rows come from (their
    ``validation_rows``), e.g. ``the λ rows on the validation sample (2,500 rows); the
    baselines and the chosen candidate on the validation rows (12,211)`` after a wide search,
    else ``all on the validation rows (12,211)``."""
    labels = {}  # False: the searched candidates, True: the baselines and the chosen one
    for row in record.candidates:
        rows = row.get("validation_rows")
        if isinstance(rows, int | float) and math.isfinite(rows):
            baseline_or_chosen = row.get("role") in ("majority", "PCA (best)", "chosen")
            labels[baseline_or_chosen] = record.validation_label(int(rows))
    searched, chosen = labels.get(False), labels.get(True)
    if searched and chosen and searched != chosen:
        return (
            f"the λ rows on the {searched}; the baselines and the chosen candidate on the {chosen}"
        )
    return f"all on the {searched or chosen or 'validation rows'}"


def report_sections(record, promotion=None, verdict=None) -> list[tuple[str, Any]]:
    """The report's sections, in order, all read from the audit record (and the promotion
    decided afterwards, when there is one): the verdict first (``verdict``: the command's,
    when it has built it)."""
    select_by = record.params.get("select_by", "balanced_accuracy")
    verdict = verdict or build_verdict(record, promotion)
    skipped = [f"{variant}: {why}" for variant, why in (record.skipped or {}).items()]
    timings = [(k, v) for k, v in record.metrics.items() if k.startswith("time_")]
    plot = Plot(
        f"validation {select_by.replace('_', ' ')} (what the choice maximises) against each "
        "gated measure, with 95% intervals"
    )
    notes = (
        f"All numbers are aggregates; groups with fewer than {record.min_group_size} rows are "
        "suppressed. No raw rows or per-person sensitive attributes are stored."
    )
    sections = [  # None: a section this audit has not
        ("Verdict (test rows, never used for a choice; 95% intervals)", verdict),
        ("Why", Bullets([f"Gate: {verdict.gate}.", *verdict.reasons])),
        ("Why fair PCA does not reach parity here, and what would", parity_paragraph(record)),
        ("Warnings", Bullets(list(verdict.warnings)) if verdict.warnings else None),
        (
            "Intersection groups of the chosen model (test rows)",
            _intersection_groups(record, verdict.intersections),
        ),
        *frontier_sections(record),
        (f"Trade-off on the {record.searched_label}", plot),
        (
            "Candidates (baselines, chosen, lambda=0 and last lambda per variant and "
            f"classifier; full table: metrics.csv): {candidate_rows(record)}",
            pd.DataFrame(record.candidates or []),
        ),
        (
            "Validation and test rows of the chosen candidate and the baselines",
            _reported_frame(record, verdict),
        ),
        ("Data and setup", Bullets(_facts(record))),
        (
            "Diagnostics: does fairness carry over to held-out rows?",
            _diagnostics_frame(record.selection.diagnostics),
        ),
        (
            "Skipped (variants that could not be fitted, stages of the route)",
            Bullets(skipped) if skipped else None,
        ),
        ("Timings (seconds)", pd.DataFrame(timings, columns=["step", "seconds"])),
        ("Notes", notes),
    ]
    return [(heading, content) for heading, content in sections if content is not None]


def _plot_arguments(record, table: pd.DataFrame) -> dict[str, Any]:
    """:func:`plot_tradeoff`'s arguments: the candidates' table and the record's choice."""
    chosen = record.selection.chosen
    rows = table[(table["variant"] == chosen.variant) & (table["classifier"] == chosen.classifier)]
    if chosen.lambda_ is not None:
        rows = rows[np.isclose(rows["lambda"], chosen.lambda_)]
    pca = table[table["variant"] == "pca"]
    return {
        "table": table,
        "chosen": rows.iloc[0].to_dict() if len(rows) else {},
        "pca": pca.loc[pca["accuracy"].idxmax()].to_dict() if len(pca) else None,
        "majority_accuracy": record.selection.baselines.majority.validation.get("accuracy"),
        "thresholds": record.policy.thresholds,
        "gate": record.selection.gate,
        "references": [r.model_dump() for r in record.references],
        "utility": record.params.get("select_by", "balanced_accuracy"),
    }


def report_title(record) -> str:
    return f"Fairness {record.kind}: {record.provenance.definition.source} ({record.run_name})"


def write_plot(out_dir: Path, record, table: pd.DataFrame) -> Path:
    """The report's plot ``out_dir/tradeoff.png`` (it does not depend on the promotion: the
    audit draws it with its results, before the champion look-up)."""
    return plot_tradeoff(path=Path(out_dir) / "tradeoff.png", **_plot_arguments(record, table))


def write_report(
    out_dir: Path, record, table: pd.DataFrame, promotion=None, *, plot: bool = True,
    verdict=None,
) -> dict[str, Path]:  # fmt: skip
    """Write ``tradeoff.png``, ``report.md`` and ``report.html`` into ``out_dir``; with
    ``plot=False`` the ``tradeoff.png`` that :func:`write_plot` wrote there for the same
    record and table is used as it is (the plot does not depend on the promotion). ``verdict``:
    the command's :func:`build_verdict` of ``record`` and ``promotion``, when built."""
    out_dir = Path(out_dir)
    title = report_title(record)
    sections = report_sections(record, promotion, verdict)
    image = write_plot(out_dir, record, table) if plot else out_dir / "tradeoff.png"
    (out_dir / "report.md").write_text(render_markdown(title, sections, image.name))
    (out_dir / "report.html").write_text(render_html(title, sections, image))
    return {"md": out_dir / "report.md", "html": out_dir / "report.html", "png": image}


# -- the model card (one Markdown page a reviewer reads in the MLflow UI) -----------------------

CARD_FILE = "model_card.md"
# The card's test table: the verdict's measures, then the other disparities.
CARD_METRICS = (*VERDICT_METRICS, "fpr_difference", "equalized_odds_difference", "one_class_share")
_SECRET_KEY = re.compile(r"(password|secret|token|credential|api_key)", re.IGNORECASE)


def _metric_names(test: dict[str, float]) -> list[str]:
    """:data:`CARD_METRICS`, then the per-attribute and intersection measures present."""
    extra = sorted(
        key
        for key in test
        if key.startswith(("dp_difference.", "eo_difference.", "selection_rate_ratio."))
        and ".ci95_" not in key
    )
    return [name for name in CARD_METRICS if name in test] + extra


def _group_sizes(record: AuditRecord) -> list[list[str]]:
    """(attribute, group, rows) of every group; below the minimum group size: suppressed."""
    least = record.min_group_size
    return [[attribute, group, Markup(size if not least or (isinstance(size, int) and size >= least)
                                      else f"suppressed (< {least})")]
            for attribute, sizes in record.selection.group_sizes.items()
            for group, size in sizes.items()]  # fmt: skip


def render_model_card(record: AuditRecord, promotion=None, verdict=None) -> str:
    """The Markdown model card of the version an audit registers (template
    ``templates/model_card.md.j2``).

    Parameters
    ----------
    record : AuditRecord
        The audit record (``audit.json``).

    Returns
    -------
    str
        Markdown whose first line is ``# Model card``. Every user-supplied string (column
        names, group labels, file names, reasons) is escaped as literal Markdown text.
    """
    selection, lam, params = record.selection, record.selection.chosen.lambda_, record.params
    verdict = verdict or build_verdict(record, promotion)
    # the published groups, the intersection's, then every other group with why it is withheld
    groups = sorted(
        (*verdict.groups, *verdict.intersections), key=lambda g: str(g.rows).startswith("withheld")
    )
    text = render_template(
        "model_card.md.j2",
        record=record,
        v=verdict,
        lam="n/a" if lam is None else f"{lam:g}",
        split=[[part, getattr(selection.split, f"n_{part}")] for part in PARTS],
        group_sizes=_group_sizes(record),
        test_rows=[
            [name, *(Estimate.of(row.test, name) for row in verdict.rows)]
            for name in _metric_names(selection.test)
        ],
        rate_rows=[
            [g.attribute, g.group, g.rows, *map(Estimate, g.rates.values())] for g in groups
        ],
        screening=[[e.column, e.rule, Estimate(e.score), e.action] for e in record.screening or []],
        validation=[[name, Estimate.of(selection.validation, name)] for name in HEADLINE_METRICS],
        thresholds=[(k[11:], str(v)) for k, v in sorted(params.items()) if k[:11] == "thresholds."],
        hashes=[
            [Markup(k), Markup(f"`{v}`")]
            for k, v in sorted(record.hashes.items())
            if k.startswith(f"{selection.chosen.variant}/")
        ],
        config=[
            [k, mask_credentials(str(v))]
            for k, v in sorted(params.items())
            if not _SECRET_KEY.search(k)
        ],
    )
    return text + "\n"


# -- the verdict in a few lines (run description, version description, Prefect) -------------

DESCRIPTION_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters


def verdict_markdown(
    record: AuditRecord, promotion=None, *, heading: str | None = None, verdict=None
) -> str:
    """The verdict in a few lines (template ``verdict.md.j2``) under ``heading``: the
    decision and headline numbers in one plain line, the chosen candidate, every model's test
    numbers with 95% intervals, the chosen model's rates per named group, then reasons and
    warnings (at most 10 of each; fewer where it would exceed
    :data:`DESCRIPTION_MAX_CHARS`)."""
    return _bounded(verdict or build_verdict(record, promotion), heading=heading)


def run_description(record: AuditRecord, promotion=None, verdict=None) -> str:
    """The MLflow run's description (``mlflow.note.content``): the verdict line and the
    chosen model beside unconstrained PCA in a compact table (the part the run page shows
    before "Show more"), then :func:`verdict_markdown` without its first line."""
    links = (
        "Full model card: artifact `model_card.md`; report: `report/report.html` (the run's "
        "Artifacts tab); matrix SHA-256: `hashes.json`."
    )
    return _bounded(verdict or build_verdict(record, promotion), links, compact=True)


def artifact_links(run_id: str, ui_url: str | None = None, experiment_id: str | None = None) -> str:
    """Links to the run's model card and report: on the tracking server's web UI when it has
    one (``ui_url``, the card's page there), else pages of whatever MLflow UI shows this
    description (``#/experiments/<id>/runs/<run>/artifactPath/...``, when the experiment is
    known); always the ``runs:/`` URI of the card for the API."""
    uri = f"`runs:/{run_id}/{CARD_FILE}`"
    if ui_url:
        base = ui_url.rsplit("/artifactPath/", 1)[0]
    elif experiment_id:
        base = f"#/experiments/{experiment_id}/runs/{run_id}"
    else:
        return f"Full model card: {uri}; report: `runs:/{run_id}/report/report.html`."
    return (
        f"[Model card]({base}/artifactPath/{CARD_FILE}) · "
        f"[Report]({base}/artifactPath/report/report.html) · {uri}"
    )


def version_description(
    record: AuditRecord, run_id: str, ui_url: str | None = None, promotion=None, *,
    experiment_id: str | None = None, verdict=None,
) -> str:  # fmt: skip
    """The registered version's description: :func:`verdict_markdown` and links to the run's
    full ``model_card.md`` and report (:func:`artifact_links`); always within
    :data:`DESCRIPTION_MAX_CHARS`. Its first line is plain text: the registered model's page
    lists it as it is."""
    links = artifact_links(run_id, ui_url, experiment_id)
    return _bounded(verdict or build_verdict(record, promotion), links)


def _bounded(verdict, links: str | None = None, compact: bool = False, heading=None) -> str:
    """The verdict (``compact``: with the compact table after its first line), ``links`` (a
    line of Markdown) after its tables, with fewer reasons and warnings until it fits
    :data:`DESCRIPTION_MAX_CHARS`."""
    for limit in (10, 5, 2, 0):
        text = render_template("verdict.md.j2", v=verdict, limit=limit, heading=heading,
                               links=links and Markup(links), compact=compact)  # fmt: skip
        text = text.rstrip("\n")
        if len(text) <= DESCRIPTION_MAX_CHARS:
            return text
    return text[: DESCRIPTION_MAX_CHARS - 4] + "\n..."
