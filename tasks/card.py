"""Model card of a registered pipeline: one Markdown page a reviewer can read in the MLflow UI.

:func:`render_model_card` is a pure function of the typed audit record (``audit.json``): the same
record always gives the same card, so a re-logged audit gets the card it had. The facts the
manifest cannot derive later (the data file's SHA-256, the code version) are recorded at audit
time by :func:`fairpca.tasks.registry.provenance`. Only aggregates appear: group sizes below
the audit's minimum are shown as suppressed, and credentials in URIs are masked.
"""

from __future__ import annotations

import re

from markupsafe import Markup

from fairpca.tasks.evaluate import HEADLINE_METRICS
from fairpca.tasks.record import PARTS, AuditRecord
from fairpca.tasks.report import VERDICT_METRICS, Estimate, build_verdict, render_template
from fairpca.tasks.trust import mask_credentials

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
    verdict = build_verdict(record, promotion)
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


# ---- the verdict in a few lines (run description, version description, Prefect) -------------

DESCRIPTION_MAX_CHARS = 5000  # MLflow's SQL stores keep at most 5,000 characters


def verdict_markdown(record: AuditRecord, promotion=None, *, heading: str | None = None) -> str:
    """The verdict in a few lines (template ``verdict.md.j2``) under ``heading``: the
    decision and headline numbers in one plain line, the chosen candidate, every model's test
    numbers with 95% intervals, the chosen model's rates per named group, then reasons and
    warnings (at most 10 of each; fewer where it would exceed
    :data:`DESCRIPTION_MAX_CHARS`)."""
    return _bounded(build_verdict(record, promotion), heading=heading)


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
