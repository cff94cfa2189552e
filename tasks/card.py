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
from fairpca.tasks.record import AuditRecord
from fairpca.tasks.report import (
    METRIC_LABELS,
    RATE_COLUMNS,
    Estimate,
    chosen_group_rates,
    chosen_label,
    deciding_reason,
    decision_summary,
    format_interval,
    group_rows,
    markdown_table,
    markdown_text,
    verdict_columns,
)
from fairpca.tasks.trust import mask_credentials

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
    frame = chosen_group_rates(record.selection)
    rows = [
        {
            key: _text(value) if isinstance(value, str) else f"{value:.4f}"
            if isinstance(value, float) else str(value)
            for key, value in row.items()
        }
        for row in frame.to_dict("records")
    ]  # fmt: skip
    rows += [  # every other group, on its own row, with why its numbers are withheld
        dict(zip(frame.columns, [_text(g.attribute), _text(g.group), _text(g.rows)], strict=False))
        | dict.fromkeys(frame.columns[3:], "-")
        for g in group_rows(record.selection, min_group_size=record.min_group_size)
        if isinstance(g.rows, str) and g.rows.startswith("withheld")
    ]
    return (
        "The chosen candidate on the test rows, per group: selection rate (share predicted "
        "1), TPR and FPR, and the base rate (share labelled 1); a group below the minimum "
        "group size says so on its row.\n\n" + _table(rows)
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


def _section_validation(record: AuditRecord) -> str:
    selection = record.selection
    rows = [
        {"metric": n, "chosen [95% CI]": format_interval(selection.validation, n)}
        for n in HEADLINE_METRICS
    ]
    return (
        f"The candidate and the gate were decided on these {record.validation_label()}.\n\n"
        + _table(rows)
    )


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
        ("Validation metrics", _section_validation(record)),
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
        f"{'Registered model' if record.register_model else 'Model (not registered)'} "
        f"{_text(record.model_name)}, from {record.kind} run "
        f"{_text(record.run_name)}; {chosen_label(record).lower()}: `{chosen.name}` "
        f"(representation `{chosen.variant}`, "
        f"classifier `{chosen.classifier}`, lambda {lam}).",
        "",
        "**{}**: {}".format(*(_text(part) for part in decision_summary(record, promotion)[1:])),
        "",
    ]
    for heading, body in sections:
        lines += [f"## {heading}", "", body, ""]
    return "\n".join(lines)


# ---- the verdict in a few lines (run description, version description, Prefect) -------------

DESCRIPTION_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters
_ITEM_MAX_CHARS = 300
# The headline numbers of the first line, in this order (those measured).
LINE_METRICS = ("dp_difference", "selection_rate_ratio", "accuracy")


def verdict_line(record: AuditRecord, promotion=None) -> str:
    """The decision and the chosen model's headline test numbers in one line of plain text
    (no Markdown: the MLflow UI lists the first characters of a description as they are),
    e.g. ``PROMOTED to champion: test ΔDP 0.003, SR ratio 0.982, accuracy 0.782.``"""
    promoted, headline, _ = decision_summary(record, promotion)
    words = (
        "PROMOTED to champion"
        if promoted
        else ("PASSES the gate" if headline == "Passes the gate" else "NOT promoted")
    )
    deciding = deciding_reason(record, promotion)
    words += f" ({deciding})" if deciding else ""
    test = record.selection.test
    numbers = [
        f"{METRIC_LABELS[name][0]} {Estimate.of(test, name).text}"
        for name in LINE_METRICS
        if Estimate.of(test, name).value is not None
    ]
    return f"{words}: test {', '.join(numbers)}." if numbers else f"{words}."


def _models(record: AuditRecord, references: bool = True) -> list[tuple[str, dict[str, float]]]:
    """(row label, test metrics) of the chosen candidate, the baselines and (``references``)
    the reference mitigations."""
    selection = record.selection
    models = [("chosen", selection.test)]
    if selection.baselines.pca is not None:
        models.append(("unconstrained PCA", selection.baselines.pca.test))
    if references:
        models.append(("majority class", selection.baselines.majority.test))
        models += [(f"reference: {r.name} ({r.approach})", r.test) for r in record.references or []]
    return models


def _test_table(record: AuditRecord, *, intervals: bool, references: bool = True) -> str:
    """The models' test numbers as a right-aligned Markdown table with short headers (it
    fits the MLflow UI's description boxes): point estimates, or with ``intervals`` each
    with its 95% interval."""
    policy = record.policy.thresholds if record.policy else {}
    names = verdict_columns(record.selection.test, policy)
    header = "| test rows | " + " | ".join(METRIC_LABELS[n][0] for n in names) + " |"
    rule = "|:--|" + "--:|" * len(names)
    rows = [
        f"| {_text(label)} | "
        + " | ".join(
            str(Estimate.of(test, n)) if intervals else Estimate.of(test, n).text for n in names
        )
        + " |"
        for label, test in _models(record, references)
    ]
    return "\n".join([header, rule, *rows])


def _groups_table(record: AuditRecord) -> list[str]:
    """The chosen model's rates per named group on the test rows (single attributes)."""
    groups = group_rows(record.selection, min_group_size=record.min_group_size)
    if not groups:
        return []
    rates = ("selection_rate", "tpr", "fpr")
    header = "| group | rows | " + " | ".join(RATE_COLUMNS[rate] for rate in rates) + " |"
    rows = [
        f"| {_text(g.attribute)}: {_text(g.group)} | {_text(g.rows)} | "
        + " | ".join(Estimate(g.rates[rate]).text for rate in rates)
        + " |"
        for g in groups
    ]
    rule = "|:--|" + "--:|" * (1 + len(rates))
    return ["", "Groups of the chosen model (test rows):", "", header, rule, *rows]


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
    record: AuditRecord,
    promotion=None,
    *,
    heading: str | None = None,
    limit: int = 10,
    links: str | None = None,
) -> str:
    """The verdict in a few lines: the decision and headline numbers in one plain line, the
    chosen candidate, every model's test numbers with 95% intervals, the chosen model's
    rates per named group, ``links`` (a line of Markdown), then reasons and warnings (at
    most ``limit`` of each)."""
    selection = record.selection
    reasons = [*selection.decision.reasons, *(promotion.reasons if promotion else [])]
    lines = [f"# {_text(heading)}", ""] if heading else []
    lines += [
        verdict_line(record, promotion),
        "",
        f"{chosen_label(record, short=True)} on the {record.validation_label()}: "
        f"`{selection.chosen.name}` (gate `{selection.gate}`). "
        "Test rows, never used for any choice, with 95% intervals:",
        "",
        _test_table(record, intervals=True),
        *_groups_table(record),
        *(["", links] if links else []),
        *_items("Reasons", reasons, limit),
        *_items("Warnings", selection.warnings, limit),
    ]
    return "\n".join(lines)


def run_description(record: AuditRecord, promotion=None) -> str:
    """The MLflow run's description (``mlflow.note.content``): the verdict line and the
    chosen model beside unconstrained PCA in a compact table (the part the run page shows
    before "Show more"), then :func:`verdict_markdown` without its first line."""
    compact = (
        verdict_line(record, promotion)
        + "\n\n"
        + _test_table(record, intervals=False, references=False)
    )
    links = (
        "Full model card: artifact `model_card.md`; report: `report/report.html` (the run's "
        "Artifacts tab); matrix SHA-256: `hashes.json`."
    )
    return _bounded(record, promotion, links, head=compact)


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
    record: AuditRecord,
    run_id: str,
    ui_url: str | None = None,
    promotion=None,
    *,
    experiment_id: str | None = None,
) -> str:
    """The registered version's description: :func:`verdict_markdown` and links to the run's
    full ``model_card.md`` and report (:func:`artifact_links`); always within
    :data:`DESCRIPTION_MAX_CHARS`. Its first line is plain text: the registered model's page
    lists it as it is."""
    return _bounded(record, promotion, artifact_links(run_id, ui_url, experiment_id))


def _bounded(record: AuditRecord, promotion, links: str, head: str | None = None) -> str:
    """``head`` (default: the verdict line), the rest of the verdict with ``links`` after its
    tables, with fewer reasons and warnings until it fits :data:`DESCRIPTION_MAX_CHARS`."""

    def text(limit: int) -> str:
        verdict = verdict_markdown(record, promotion, limit=limit, links=links)
        if head is not None:
            verdict = head + "\n\n" + verdict.split("\n", 2)[2]
        return verdict

    for limit in (10, 5, 2, 0):
        if len(text(limit)) <= DESCRIPTION_MAX_CHARS:
            return text(limit)
    return text(0)[: DESCRIPTION_MAX_CHARS - 4] + "\n..."
