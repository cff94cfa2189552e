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

from markupsafe import Markup

from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.record import AuditRecord
from fairpca.tasks.report import (
    RATE_COLUMNS,
    VERDICT_METRICS,
    build_verdict,
    format_interval,
    render_template,
)
from fairpca.tasks.trust import mask_credentials

CARD_FILE = "model_card.md"
# The card's test table: the verdict's measures, then the other disparities.
CARD_METRICS = (*VERDICT_METRICS, "fpr_difference", "equalized_odds_difference", "one_class_share")
_SECRET_KEY = re.compile(r"(password|secret|token|credential|api_key)", re.IGNORECASE)


# ---- rendering -------------------------------------------------------------------------------


def _metric_names(test: dict[str, float]) -> list[str]:
    """:data:`CARD_METRICS`, then the per-attribute and intersection measures present."""
    extra = sorted(
        key
        for key in test
        if key.startswith(("dp_difference.", "eo_difference.", "selection_rate_ratio."))
        and ".ci95_" not in key
    )
    return [name for name in CARD_METRICS if name in test] + extra


def _test_columns(record: AuditRecord) -> dict[str, dict[str, float]]:
    """{column title: test metrics} of the chosen candidate, the baselines, the references."""
    selection, pca = record.selection, record.selection.baselines.pca
    columns = {"chosen [95% CI]": selection.test}
    columns["majority class"] = selection.baselines.majority.test
    if pca is not None:  # None when the audit ran no unconstrained PCA
        columns[f"unconstrained PCA ({pca.name})"] = pca.test
    for ref in record.references:
        needs = "; needs the sensitive attribute to predict" * ref.needs_sensitive_at_prediction
        columns[f"{ref.name} ({ref.approach}{needs})"] = ref.test
    return columns


def _group_sizes(record: AuditRecord) -> list[list[str]]:
    """(attribute, group, rows) of every group; below the minimum group size: suppressed."""
    least, rows = record.min_group_size, []
    for attribute, sizes in record.selection.group_sizes.items():
        for group, size in sizes.items():
            small = not isinstance(size, int) or (least is not None and size < least)
            rows.append([attribute, group, Markup(f"suppressed (< {least})" if small and least
                                                  else size)])  # fmt: skip
    return rows


def _group_rates(verdict) -> tuple[list[str], list[list[Any]]]:
    """The columns and rows of the chosen model's rates per group on the test rows: the
    published groups, the intersection's, then every other group with why its numbers are
    withheld."""
    columns = ["attribute", "group", f"rows ({verdict.group_part})", *RATE_COLUMNS.values()]
    groups = sorted((*verdict.groups, *verdict.intersections), key=_withheld)  # stable
    rows = [[g.attribute, g.group, g.rows, *(Markup("-" if _withheld(g) else f"{g.rates[r]:.4f}")
                                            for r in RATE_COLUMNS)] for g in groups]  # fmt: skip
    return columns, rows


def _withheld(group) -> bool:
    return str(group.rows).startswith("withheld")


def render_model_card(record: AuditRecord, promotion=None) -> str:
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
    columns = _test_columns(record)
    verdict = build_verdict(record, promotion)
    rate_columns, rate_rows = _group_rates(verdict)
    chosen = f"{selection.chosen.variant}/"
    text = render_template(
        "model_card.md.j2",
        record=record,
        v=verdict,
        lam="n/a" if lam is None else f"{lam:g}",
        split=[[part, getattr(selection.split, f"n_{part}")] for part in PARTS],
        group_sizes=_group_sizes(record),
        test_columns=columns,
        test_rows=[_interval_row(name, columns.values()) for name in _metric_names(selection.test)],
        rate_columns=rate_columns,
        rate_rows=rate_rows,
        screening=[_screened(entry) for entry in record.screening or []],
        validation=[_interval_row(Markup(n), [selection.validation]) for n in HEADLINE_METRICS],
        thresholds=[(k[11:], str(v)) for k, v in sorted(params.items()) if k[:11] == "thresholds."],
        hashes=[
            [Markup(k), Markup(f"`{v}`")]
            for k, v in sorted(record.hashes.items())
            if k.startswith(chosen)
        ],
        config=[
            [k, mask_credentials(str(v))]
            for k, v in sorted(params.items())
            if not _SECRET_KEY.search(k)
        ],
    )
    return text + "\n"


PARTS = ("train", "validation", "test")


def _interval_row(name: str, metrics) -> list[str]:
    """``name`` and its value [95% interval] in each of ``metrics``."""
    return [name, *(Markup(format_interval(values, name)) for values in metrics)]


def _screened(entry) -> list[str]:
    score = "-" if entry.score is None else f"{entry.score:.4f}"
    return [entry.column, entry.rule, Markup(score), entry.action]


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


def _verdict_text(verdict, limit: int, links: str | None, heading=None, compact=False) -> str:
    links = Markup(links) if links else None
    text = render_template("verdict.md.j2", v=verdict, limit=limit, links=links,
                           heading=heading, compact=compact)  # fmt: skip
    return text.rstrip("\n")


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
