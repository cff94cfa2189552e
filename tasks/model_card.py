"""Model card of a registered pipeline: one Markdown page a reviewer can read in the MLflow UI.

:func:`render_model_card` is a pure function of the audit manifest (``audit.json``): the same
manifest always gives the same card, so a re-logged audit gets the card it had. The facts the
manifest cannot derive later (the data file's SHA-256, the code version) are recorded at audit
time by :func:`fairpca.tasks.registry.provenance`. Only aggregates appear: group sizes below
the audit's minimum are shown as suppressed, and credentials in URIs are masked.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pandas as pd

from fairpca.tasks.record import format_interval
from fairpca.tasks.report import markdown_table, sha256_file

__all__ = ["CARD_FILE", "code_version", "data_source_facts", "render_model_card"]

CARD_FILE = "model_card.md"
HEADLINE = ("accuracy", "dp_difference", "eo_difference")
_SECRET_KEY = re.compile(r"(password|secret|token|credential|api_key)", re.IGNORECASE)


# ---- facts recorded at audit time ------------------------------------------------------------


def _bundled_raw_files(dataset: str) -> tuple:
    """The published raw files a bundled or data-directory dataset is parsed from."""
    from fairpca.datasets import _files

    return {
        "adult": (_files.ADULT_DATA, _files.ADULT_TEST),
        "german": (_files.GERMAN_DATA,),
        "bank": (_files.BANK_FULL,),
        "compas": (_files.COMPAS_TWO_YEARS,),
    }[dataset]


def data_source_facts(dataset: str | None, data: str | Path | None) -> dict[str, Any]:
    """Data source and the SHA-256 of each raw file it was read from.

    A dataset's files are checked against their published SHA-256 when loaded, so the
    published sums are the ones read; a user file is hashed here.
    """
    if dataset is not None:
        files = {raw.relative_path: raw.sha256 for raw in _bundled_raw_files(dataset)}
        return {"kind": "dataset", "name": dataset, "sha256": files}
    path = Path(data)
    return {"kind": "file", "name": path.name, "sha256": {path.name: sha256_file(path)}}


def code_version() -> dict[str, str]:
    """The installed fairpca version and, in a git checkout, its commit (``+dirty`` when
    tracked files differ from it)."""
    import fairpca

    version = {"fairpca": fairpca.__version__, "git_commit": "unknown"}
    root = Path(fairpca.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"],
            capture_output=True, timeout=10,
        ).returncode  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return version
    version["git_commit"] = commit + ("+dirty" if dirty else "")
    return version


# ---- rendering -------------------------------------------------------------------------------


def mask_credentials(value: str) -> str:
    """``scheme://user:password@host/...`` -> ``scheme://***@host/...``; other text as is."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.scheme or "@" not in parts.netloc:
        return value
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}", query=""))


def _cell(value: Any) -> str:
    """Table-cell text: one line, pipes escaped."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[dict[str, str]]) -> str:
    return markdown_table(pd.DataFrame(rows)) if rows else "(none)"


def _metric_names(test: dict[str, Any]) -> list[str]:
    """Headline metrics, then the per-attribute and intersection differences present."""
    extra = sorted(
        key
        for key in test
        if key.startswith(("dp_difference.", "eo_difference.")) and ".ci95_" not in key
    )
    return [name for name in HEADLINE if name in test] + extra


def _section_intended_use(audit: dict[str, Any], definition: dict[str, Any]) -> str:
    attributes = ", ".join(definition.get("sensitive", [])) or "(unknown)"
    warnings = audit.get("selection", {}).get("warnings", [])
    return "\n".join(
        [
            f"- Intended use: binary prediction of `{definition.get('label', '?')}` on rows "
            f"like those of `{definition.get('source', '?')}`, as audited here for group "
            f"fairness with respect to: {attributes}.",
            "- Fairness is measured as demographic parity and equal opportunity differences "
            "between groups of these attributes only: it says nothing about other "
            "attributes, about individual fairness, or about data from another population "
            "or time.",
            "- Reported numbers come from held-out test rows and carry sampling uncertainty "
            "(95% intervals); they hold only while new data look like the audited data "
            "(the scheduled retrain re-checks the champion on new data).",
            "- Not for fully automated decisions about people: a human reviews the outcome.",
            *(f"- Warning from the audit: {_cell(w)}" for w in warnings),
        ]
    )


def _section_data(audit: dict[str, Any], definition: dict[str, Any]) -> str:
    source = audit.get("provenance", {}).get("data_source", {})
    lines = [
        f"- Source: {_cell(definition.get('source', source.get('name', '?')))} "
        f"({source.get('kind', 'unknown kind')})",
        f"- Label: `{_cell(definition.get('label', '?'))}`"
        + (
            f" (positive: `{_cell(definition['positive_label'])}`)"
            if definition.get("positive_label") is not None
            else ""
        ),
    ]
    for name, digest in source.get("sha256", {}).items():
        lines.append(f"- SHA-256 of `{_cell(name)}`: `{digest or 'no published sum'}`")
    split = audit.get("selection", {}).get("split", {})
    rows = [
        {"part": part, "rows": str(split[f"n_{part}"])}
        for part in ("train", "validation", "test")
        if f"n_{part}" in split
    ]
    return "\n".join(lines) + "\n\nSplit sizes (disjoint parts):\n\n" + _table(rows)


def _section_groups(audit: dict[str, Any]) -> str:
    min_size = _min_group_size(audit)
    rows = []
    for attribute, sizes in audit.get("selection", {}).get("group_sizes", {}).items():
        for group, size in sizes.items():
            small = not isinstance(size, int) or (min_size is not None and size < min_size)
            shown = f"suppressed (< {min_size})" if small and min_size else str(size)
            rows.append({"attribute": _cell(attribute), "group": _cell(group), "rows": shown})
    note = "Groups smaller than the audit's minimum group size are suppressed."
    return note + "\n\n" + _table(rows)


def _min_group_size(audit: dict[str, Any]) -> int | None:
    value = audit.get("params", {}).get("min_group_size")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _section_test_metrics(selection: dict[str, Any]) -> str:
    test = selection.get("test", {})
    baselines = selection.get("baselines") or {}
    majority = (baselines.get("majority") or {}).get("test") or {}
    pca = baselines.get("pca") or {}  # None when the audit ran no unconstrained PCA
    pca_test = pca.get("test") or {}
    pca_label = f"unconstrained PCA ({_cell(pca.get('name', 'pca'))})"
    rows = [
        {
            "metric": name,
            "chosen [95% CI]": format_interval(test, name),
            "majority class": format_interval(majority, name),
            pca_label: format_interval(pca_test, name),
        }
        for name in _metric_names(test)
    ]
    return (
        "Untouched test rows, never used for any choice; 95% percentile-bootstrap intervals "
        "in brackets.\n\n" + _table(rows)
    )


def _section_validation(selection: dict[str, Any]) -> str:
    validation = selection.get("validation", {})
    rows = [{"metric": n, "chosen [95% CI]": format_interval(validation, n)} for n in HEADLINE]
    return "The candidate and the gate were decided on these validation rows.\n\n" + _table(rows)


def _section_decision(audit: dict[str, Any]) -> str:
    selection = audit.get("selection", {})
    decision = selection.get("decision") or audit.get("decision", {})
    params = audit.get("params", {})
    thresholds = [
        f"- `{key.removeprefix('thresholds.')}` = {_cell(value)}"
        for key, value in sorted(params.items())
        if key.startswith("thresholds.")
    ]
    verdict = "PROMOTE (champion)" if decision.get("promote") else "NOT promoted"
    return "\n".join(
        [
            f"- Gate: `{selection.get('gate', 'point')}` (upper_bound: the interval's "
            "upper end of DP/EO and lower end of accuracy must pass)",
            *thresholds,
            f"- Decision: **{verdict}**",
            *(f"  - {_cell(reason)}" for reason in decision.get("reasons", [])),
        ]
    )


def _section_hashes(audit: dict[str, Any], variant: str | None) -> str:
    hashes = audit.get("hashes", {})
    rows = [
        {"matrix": _cell(key), "SHA-256": f"`{digest}`"}
        for key, digest in sorted(hashes.items())
        if variant is None or key.startswith(f"{variant}/")
    ]
    return "Artifacts `projection/<variant>/<matrix>.npy` of the audit run.\n\n" + _table(rows)


def _section_config(audit: dict[str, Any]) -> str:
    rows = [
        {"key": _cell(key), "value": _cell(mask_credentials(str(value)))}
        for key, value in sorted(audit.get("params", {}).items())
        if not _SECRET_KEY.search(key)
    ]
    return _table(rows)


def render_model_card(audit: dict[str, Any]) -> str:
    """The Markdown model card of the version an audit registers.

    Parameters
    ----------
    audit : dict
        The audit manifest (``audit.json``): ``selection`` (chosen candidate, gate,
        decision, validation/test metrics with intervals, baselines, split and group
        sizes), ``params`` (the flat config), ``hashes``, ``provenance``, ``model_name``,
        ``run_name``.

    Returns
    -------
    str
        Markdown whose first line is ``# Model card``.
    """
    selection = audit.get("selection", {})
    chosen = selection.get("chosen", {})
    definition = audit.get("provenance", {}).get("definition", {})
    code = audit.get("provenance", {}).get("code_version", {})
    lam = chosen.get("lambda")
    sections = [
        ("Intended use and limits", _section_intended_use(audit, definition)),
        ("Data", _section_data(audit, definition)),
        ("Sensitive attributes and group sizes", _section_groups(audit)),
        ("Test metrics beside the baselines", _section_test_metrics(selection)),
        ("Validation metrics", _section_validation(selection)),
        ("Thresholds and decision", _section_decision(audit)),
        ("Projection matrices (SHA-256)", _section_hashes(audit, chosen.get("variant"))),
        (
            "Code version",
            f"- fairpca {code.get('fairpca', 'unknown')}, git commit "
            f"`{code.get('git_commit', 'unknown')}`",
        ),
        ("Configuration (credentials masked)", _section_config(audit)),
    ]
    lines = [
        "# Model card",
        "",
        f"Registered model `{audit.get('model_name', '?')}`, from {audit.get('kind', 'audit')} "
        f"run `{audit.get('run_name', '?')}`: `{chosen.get('name', '?')}` (representation "
        f"`{chosen.get('variant', '?')}`, classifier `{chosen.get('classifier', '?')}`, "
        f"lambda {'n/a' if lam is None else f'{lam:g}'}).",
        "",
    ]
    for heading, body in sections:
        lines += [f"## {heading}", "", body, ""]
    return "\n".join(lines)
