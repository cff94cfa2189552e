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
from markupsafe import Markup

from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.record import AuditRecord
from fairpca.tasks.report import (
    build_verdict,
    chosen_group_rates,
    format_interval,
    group_rows,
    markdown_table,
    markdown_text,
    render_template,
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


def _section_decision(record: AuditRecord, verdict) -> str:
    selection = record.selection
    thresholds = [
        f"- `{key.removeprefix('thresholds.')}` = {_text(value)}"
        for key, value in sorted(record.params.items())
        if key.startswith("thresholds.")
    ]
    return "\n".join(
        [
            f"- Gate: `{selection.gate}`"
            + (f", policy {_text(record.policy.description)}" if record.policy else ""),
            *thresholds,
            f"- Decision: **{verdict.words}**",
            *(f"  - {_text(reason)}" for reason in verdict.reasons),
        ]
    )


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
    chosen, verdict = record.selection.chosen, build_verdict(record, promotion)
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
        ("Thresholds and decision", _section_decision(record, verdict)),
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
        f"{_text(record.run_name)}; {verdict.chosen_label.lower()}: `{chosen.name}` "
        f"(representation `{chosen.variant}`, "
        f"classifier `{chosen.classifier}`, lambda {lam}).",
        "",
        f"**{_text(verdict.headline)}**: {_text(verdict.why)}",
        "",
    ]
    for heading, body in sections:
        lines += [f"## {heading}", "", body, ""]
    return "\n".join(lines)


# ---- the verdict in a few lines (run description, version description, Prefect) -------------

DESCRIPTION_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters


def verdict_line(record: AuditRecord, promotion=None) -> str:
    """The decision and the chosen model's headline test numbers in one line of plain text
    (:attr:`fairpca.tasks.report.Verdict.line`)."""
    return build_verdict(record, promotion).line


def verdict_markdown(
    record: AuditRecord,
    promotion=None,
    *,
    heading: str | None = None,
    limit: int = 10,
    links: str | None = None,
) -> str:
    """The verdict in a few lines (template ``verdict.md.j2``): the decision and headline
    numbers in one plain line, the chosen candidate, every model's test numbers with 95%
    intervals, the chosen model's rates per named group, ``links`` (a line of Markdown),
    then reasons and warnings (at most ``limit`` of each)."""
    return _verdict_text(build_verdict(record, promotion), limit, links, heading=heading)


def _verdict_text(verdict, limit: int, links: str | None, **context) -> str:
    links = Markup(links) if links else None
    return render_template("verdict.md.j2", v=verdict, limit=limit, links=links, **{
        "heading": None, "compact": False, **context}).rstrip("\n")  # fmt: skip


def run_description(record: AuditRecord, promotion=None) -> str:
    """The MLflow run's description (``mlflow.note.content``): the verdict line and the
    chosen model beside unconstrained PCA in a compact table (the part the run page shows
    before "Show more"), then :func:`verdict_markdown` without its first line."""
    links = (
        "Full model card: artifact `model_card.md`; report: `report/report.html` (the run's "
        "Artifacts tab); matrix SHA-256: `hashes.json`."
    )
    return _bounded(build_verdict(record, promotion), links, compact=True)


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
    return _bounded(build_verdict(record, promotion), artifact_links(run_id, ui_url, experiment_id))


def _bounded(verdict, links: str, compact: bool = False) -> str:
    """The verdict (``compact``: with the compact table after its first line), ``links``
    after its tables, with fewer reasons and warnings until it fits
    :data:`DESCRIPTION_MAX_CHARS`."""
    for limit in (10, 5, 2, 0):
        text = _verdict_text(verdict, limit, links, compact=compact)
        if len(text) <= DESCRIPTION_MAX_CHARS:
            return text
    return text[: DESCRIPTION_MAX_CHARS - 4] + "\n..."
