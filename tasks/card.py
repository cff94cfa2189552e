"""Model card of a registered pipeline: one Markdown page a reviewer can read in the MLflow UI.

:func:`render_model_card` is a pure function of the typed audit record (``audit.json``): the same
record always gives the same card, so a re-logged audit gets the card it had. The facts the
manifest cannot derive later (the data file's SHA-256, the code version) are recorded at audit
time by :func:`fairpca.tasks.registry.provenance`. Only aggregates appear: group sizes below
the audit's minimum are shown as suppressed, and credentials in URIs are masked.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.record import AuditRecord, Selection
from fairpca.tasks.report import format_interval, group_rates_frame, markdown_table, markdown_text
from fairpca.tasks.trust import mask_credentials

__all__ = [
    "CARD_FILE",
    "CARD_METRICS",
    "DESCRIPTION_MAX_CHARS",
    "VERDICT_METRICS",
    "decision_words",
    "render_model_card",
    "run_description",
    "verdict_markdown",
    "version_description",
]

CARD_FILE = "model_card.md"
# The card's test table: utility a constant classifier cannot fake, then the disparities.
CARD_METRICS = (
    "accuracy",
    "balanced_accuracy",
    "dp_difference",
    "selection_rate_ratio",
    "eo_difference",
    "fpr_difference",
    "equalized_odds_difference",
    "one_class_share",
)
_SECRET_KEY = re.compile(r"(password|secret|token|credential|api_key)", re.IGNORECASE)


# ---- rendering -------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """A user-supplied string (column name, group label, file name, reason) as literal
    Markdown text; never put inside a code span, where escapes would show."""
    return markdown_text(value)


def _table(rows: list[dict[str, str]]) -> str:
    return markdown_table(pd.DataFrame(rows)) if rows else "(none)"


def _metric_names(test: dict[str, float]) -> list[str]:
    """:data:`CARD_METRICS`, then the per-attribute and intersection measures present."""
    extra = sorted(
        key
        for key in test
        if key.startswith(("dp_difference.", "eo_difference.", "selection_rate_ratio."))
        and ".ci95_" not in key
    )
    return [name for name in CARD_METRICS if name in test] + extra


def _section_intended_use(record: AuditRecord) -> str:
    definition = record.provenance.definition
    attributes = ", ".join(_text(a) for a in definition.sensitive) or "(unknown)"
    return "\n".join(
        [
            f"- Intended use: binary prediction of {_text(definition.label)} on rows like those "
            f"of {_text(definition.source)}, as audited here for group fairness with respect "
            f"to: {attributes}.",
            "- Fairness is measured as demographic parity and equal opportunity differences "
            "between groups of these attributes only: it says nothing about other "
            "attributes, about individual fairness, or about data from another population "
            "or time.",
            "- Reported numbers come from held-out test rows and carry sampling uncertainty "
            "(95% intervals); they hold only while new data look like the audited data "
            "(the scheduled retrain re-checks the champion on new data).",
            "- Not for fully automated decisions about people: a human reviews the outcome.",
            *(f"- Warning from the audit: {_text(w)}" for w in record.selection.warnings),
        ]
    )


def _section_data(record: AuditRecord) -> str:
    definition, source = record.provenance.definition, record.provenance.data_source
    positive = definition.positive_label
    lines = [
        f"- Source: {_text(definition.source)} ({source.kind})",
        f"- Label: {_text(definition.label)}"
        + (f" (positive: {_text(positive)})" if positive is not None else ""),
    ]
    for name, digest in source.sha256.items():
        lines.append(f"- SHA-256 of {_text(name)}: `{digest or 'no published sum'}`")
    split = record.selection.split
    rows = [
        {"part": part, "rows": str(getattr(split, f"n_{part}"))}
        for part in ("train", "validation", "test")
    ]
    return "\n".join(lines) + "\n\nSplit sizes (disjoint parts):\n\n" + _table(rows)


def _section_groups(record: AuditRecord) -> str:
    min_size = record.min_group_size
    rows = []
    for attribute, sizes in record.selection.group_sizes.items():
        for group, size in sizes.items():
            small = not isinstance(size, int) or (min_size is not None and size < min_size)
            shown = f"suppressed (< {min_size})" if small and min_size else str(size)
            rows.append({"attribute": _text(attribute), "group": _text(group), "rows": shown})
    note = "Groups smaller than the audit's minimum group size are suppressed."
    return note + "\n\n" + _table(rows)


def _test_columns(record: AuditRecord) -> list[tuple[str, dict[str, float]]]:
    """(column title, test metrics) of the chosen candidate, the baselines, the references."""
    selection = record.selection
    pca = selection.baselines.pca  # None when the audit ran no unconstrained PCA
    columns = [("chosen [95% CI]", selection.test)]
    columns.append(("majority class", selection.baselines.majority.test))
    if pca is not None:
        columns.append((f"unconstrained PCA ({pca.name})", pca.test))
    for reference in record.references or []:
        needs = "; needs the sensitive attribute to predict"
        if not reference.needs_sensitive_at_prediction:
            needs = ""
        columns.append((f"{reference.name} ({reference.approach}{needs})", reference.test))
    return columns


def _section_test_metrics(record: AuditRecord) -> str:
    columns = _test_columns(record)
    rows = [
        {"metric": _text(name), **{title: format_interval(test, name) for title, test in columns}}
        for name in _metric_names(record.selection.test)
    ]
    return (
        "Untouched test rows, never used for any choice, for the chosen candidate, the "
        "baselines and the reference mitigations (trained on the same training rows, never "
        "registered); 95% intervals in brackets (Clopper-Pearson for rates, simultaneous "
        "group intervals for differences and ratios, a bootstrap for balanced accuracy).\n\n"
        + _table(rows)
    )


def _section_group_rates(record: AuditRecord) -> str:
    frame = group_rates_frame(record.selection.test, record.selection.group_sizes)
    rows = [
        {
            key: _text(value) if isinstance(value, str) else f"{value:.4f}"
            if isinstance(value, float) else str(value)
            for key, value in row.items()
        }
        for row in frame.to_dict("records")
    ]  # fmt: skip
    return (
        "The chosen candidate on the test rows, per reported group: selection rate (share "
        "predicted 1), TPR and FPR, and the base rate (share labelled 1). Groups below the "
        "minimum group size are suppressed.\n\n" + _table(rows)
    )


def _section_screening(record: AuditRecord) -> str:
    rows = [
        {
            "column": _text(entry.column),
            "rule": _text(entry.rule),
            "score": "-" if entry.score is None else f"{entry.score:.4f}",
            "action": entry.action,
        }
        for entry in record.screening or []
    ]
    if not rows:
        return "No column was excluded or kept against a screening rule."
    return (
        "Columns screened on the training rows (leakage: one column alone predicts the label; "
        "proxy: one column alone predicts a sensitive attribute, or recodes it), with the "
        "rule's score (balanced accuracy) and what was done.\n\n" + _table(rows)
    )


def _section_validation(selection: Selection) -> str:
    rows = [
        {"metric": n, "chosen [95% CI]": format_interval(selection.validation, n)}
        for n in HEADLINE_METRICS
    ]
    return "The candidate and the gate were decided on these validation rows.\n\n" + _table(rows)


def _section_decision(record: AuditRecord, promotion) -> str:
    selection = record.selection
    thresholds = [
        f"- `{key.removeprefix('thresholds.')}` = {_text(value)}"
        for key, value in sorted(record.params.items())
        if key.startswith("thresholds.")
    ]
    reasons = [*selection.decision.reasons, *(promotion.reasons if promotion else [])]
    return "\n".join(
        [
            f"- Gate: `{selection.gate}`"
            + (f", policy {_text(record.policy.description)}" if record.policy else ""),
            *thresholds,
            f"- Decision: **{decision_words(record, promotion)}**",
            *(f"  - {_text(reason)}" for reason in reasons),
        ]
    )


def decision_words(record: AuditRecord, promotion) -> str:
    """The decision in two or three words: promoted, not promoted, or (before the promotion
    was decided) what the gate said."""
    if promotion is not None:
        return "PROMOTED to champion" if promotion.promote else "NOT promoted"
    if record.selection.decision.promote:
        return "passes the gate (promotion decided when logged to MLflow)"
    return "NOT promoted"


def _section_hashes(record: AuditRecord) -> str:
    variant = record.selection.chosen.variant
    rows = [
        {"matrix": key, "SHA-256": f"`{digest}`"}
        for key, digest in sorted(record.hashes.items())
        if key.startswith(f"{variant}/")
    ]
    return "Artifacts `projection/<variant>/<matrix>.npy` of the audit run.\n\n" + _table(rows)


def _section_config(record: AuditRecord) -> str:
    rows = [
        {"key": _text(key), "value": _text(mask_credentials(str(value)))}
        for key, value in sorted(record.params.items())
        if not _SECRET_KEY.search(key)
    ]
    return _table(rows)


def render_model_card(record: AuditRecord, promotion=None) -> str:
    """The Markdown model card of the version an audit registers.

    Parameters
    ----------
    record : AuditRecord
        The audit record (``audit.json``).

    Returns
    -------
    str
        Markdown whose first line is ``# Model card``. Every user-supplied string (column
        names, group labels, file names, reasons) is escaped with
        :func:`fairpca.tasks.report.markdown_text`.
    """
    chosen = record.selection.chosen
    code = record.provenance.code_version
    lam = "n/a" if chosen.lambda_ is None else f"{chosen.lambda_:g}"
    sections = [
        ("Intended use and limits", _section_intended_use(record)),
        ("Data", _section_data(record)),
        ("Sensitive attributes and group sizes", _section_groups(record)),
        ("Test metrics beside the baselines and references", _section_test_metrics(record)),
        ("Per-group rates on the test rows", _section_group_rates(record)),
        ("Column screening", _section_screening(record)),
        ("Validation metrics", _section_validation(record.selection)),
        ("Thresholds and decision", _section_decision(record, promotion)),
        ("Projection matrices (SHA-256)", _section_hashes(record)),
        (
            "Code version",
            f"- fairpca {code.fairpca}, git commit `{code.git_commit}`",
        ),
        ("Configuration (credentials masked)", _section_config(record)),
    ]
    lines = [
        "# Model card",
        "",
        f"Registered model {_text(record.model_name)}, from {record.kind} run "
        f"{_text(record.run_name)}: `{chosen.name}` (representation `{chosen.variant}`, "
        f"classifier `{chosen.classifier}`, lambda {lam}).",
        "",
    ]
    for heading, body in sections:
        lines += [f"## {heading}", "", body, ""]
    return "\n".join(lines)


# ---- the verdict in a few lines (run description, version description, Prefect) -------------

DESCRIPTION_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters
VERDICT_METRICS = (*HEADLINE_METRICS, "balanced_accuracy", "selection_rate_ratio")
_ITEM_MAX_CHARS = 300


def _verdict_rows(record: AuditRecord) -> list[dict[str, str]]:
    """Test rows of the chosen candidate, the baselines and the reference mitigations."""
    selection = record.selection
    names = [name for name in VERDICT_METRICS if name in selection.test]
    models = [(f"chosen: {selection.chosen.name}", selection.test)]
    if selection.baselines.pca is not None:
        pca = selection.baselines.pca
        models.append((f"unconstrained PCA: {pca.name}", pca.test))
    models.append(("majority class", selection.baselines.majority.test))
    for reference in record.references or []:
        models.append((f"reference: {reference.name} ({reference.approach})", reference.test))
    return [
        {"test rows": _text(label), **{name: format_interval(test, name) for name in names}}
        for label, test in models
    ]


def _items(title: str, items: list[str], limit: int) -> list[str]:
    """A bullet list of at most ``limit`` items, each cut to a few hundred characters."""
    if not items:
        return []
    shown = [
        "- " + _text(item if len(item) <= _ITEM_MAX_CHARS else item[:_ITEM_MAX_CHARS] + "...")
        for item in items[:limit]
    ]
    if len(items) > limit:
        shown.append(f"- ... and {len(items) - limit} more (see the model card)")
    return ["", f"{title}:", "", *shown]


def verdict_markdown(
    record: AuditRecord, promotion=None, *, heading: str | None = None, limit: int = 10
) -> str:
    """The verdict in a few lines: decision, chosen candidate, test metrics with intervals
    beside the baselines and the reference mitigations, reasons and warnings (at most
    ``limit`` of each)."""
    selection = record.selection
    verdict = decision_words(record, promotion)
    reasons = [*selection.decision.reasons, *(promotion.reasons if promotion else [])]
    lines = [f"# {_text(heading)}", ""] if heading else []
    lines += [
        f"**Decision: {verdict}** (gate `{selection.gate}`). Chosen on validation rows: "
        f"`{selection.chosen.name}`.",
        "",
        "Test rows, never used for any choice (95% intervals in brackets):",
        "",
        markdown_table(pd.DataFrame(_verdict_rows(record))),
        *_items("Reasons", reasons, limit),
        *_items("Warnings", selection.warnings, limit),
    ]
    return "\n".join(lines)


def run_description(record: AuditRecord, promotion=None) -> str:
    """The MLflow run's description (``mlflow.note.content``)."""
    return _bounded(
        record,
        promotion,
        "Full model card: artifact `model_card.md`; report: `report/report.html`; "
        "matrix SHA-256: `hashes.json`.",
    )


def version_description(
    record: AuditRecord, run_id: str, ui_url: str | None = None, promotion=None
) -> str:
    """The registered version's description: the verdict and a link to the run's full
    ``model_card.md`` (``runs:/<run_id>/model_card.md``, and ``ui_url`` when the tracking
    server has a web UI); always within :data:`DESCRIPTION_MAX_CHARS`."""
    link = f"Full model card: `runs:/{run_id}/model_card.md`"
    if ui_url:
        link += f" ([open in the MLflow UI]({ui_url}))"
    return _bounded(record, promotion, link + ".")


def _bounded(record: AuditRecord, promotion, footer: str) -> str:
    """The verdict and ``footer``, with fewer reasons and warnings until it fits."""
    for limit in (10, 5, 2, 0):
        text = verdict_markdown(record, promotion, limit=limit) + "\n\n" + footer
        if len(text) <= DESCRIPTION_MAX_CHARS:
            return text
    room = DESCRIPTION_MAX_CHARS - len(footer) - len("\n\n...\n\n")
    return verdict_markdown(record, promotion, limit=0)[:room] + "\n\n...\n\n" + footer
