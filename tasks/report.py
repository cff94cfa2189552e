"""Audit report: candidate selection, trade-off plot, Markdown + HTML report, local outputs.

Everything is written to the audit's local output directory first; MLflow logging reads it
back from there (see :mod:`tasks.mlflow_logging`), so results survive a tracking outage.
Only aggregated numbers are written: no raw rows, no per-person sensitive attributes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

__all__ = [
    "Decision",
    "check_thresholds",
    "markdown_table",
    "plot_tradeoff",
    "select_candidate",
    "sha256_file",
    "summary_table",
    "write_matrices",
    "write_report",
]

SUMMARY_COLUMNS = [
    "variant",
    "lambda",
    "classifier",
    "accuracy",
    "dp_difference",
    "eo_difference",
    "var_explained",
    "mmd2",
    "linear_inseparability",
    "mean_gap_train",
]


@dataclass
class Decision:
    """Whether the chosen model may become champion, and why."""

    promote: bool
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "reasons": list(self.reasons)}


def check_thresholds(row: dict[str, Any], thresholds) -> list[str]:
    """Reasons why ``row`` fails the thresholds (empty list: it meets them)."""
    failures = []
    if row["dp_difference"] > thresholds.max_dp_difference:
        failures.append(
            f"DP difference {row['dp_difference']:.4f} > max {thresholds.max_dp_difference}"
        )
    if row["eo_difference"] > thresholds.max_eo_difference:
        failures.append(
            f"EO difference {row['eo_difference']:.4f} > max {thresholds.max_eo_difference}"
        )
    if row["accuracy"] < thresholds.min_accuracy:
        failures.append(f"accuracy {row['accuracy']:.4f} < min {thresholds.min_accuracy}")
    return failures


def select_candidate(table: pd.DataFrame, thresholds) -> tuple[dict[str, Any], Decision]:
    """Most accurate (variant, lambda, classifier) that meets the thresholds.

    When none does, the one with the smallest threshold violation is chosen (it is still
    registered for review, but the decision says not to promote it).
    """
    records = table.to_dict("records")
    passing = [row for row in records if not check_thresholds(row, thresholds)]
    if passing:
        best = max(passing, key=lambda r: (r["accuracy"], -r["dp_difference"]))
        reason = (
            f"{best['variant']} / {best['classifier']} at lambda={_fmt(best['lambda'])} is the "
            f"most accurate of {len(passing)} of {len(records)} candidates meeting the thresholds"
        )
        return best, Decision(True, [reason])

    def violation(row: dict[str, Any]) -> float:
        return (
            max(0.0, row["dp_difference"] - thresholds.max_dp_difference)
            + max(0.0, row["eo_difference"] - thresholds.max_eo_difference)
            + max(0.0, thresholds.min_accuracy - row["accuracy"])
        )

    best = min(records, key=lambda r: (violation(r), -r["accuracy"]))
    reasons = ["no candidate meets the thresholds; least violating one chosen"]
    return best, Decision(False, reasons + check_thresholds(best, thresholds))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    return str(value)


def markdown_table(frame: pd.DataFrame) -> str:
    """GitHub-flavoured Markdown table of a small frame."""
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([header, rule, *body])


def summary_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant and classifier: the fairest (lambda = 0) and the last lambda."""
    keep = [c for c in SUMMARY_COLUMNS if c in table.columns]
    first = table.groupby(["variant", "classifier"], sort=False).head(1)
    last = table.groupby(["variant", "classifier"], sort=False).tail(1)
    both = pd.concat([first, last]).drop_duplicates(subset=["variant", "classifier", "lambda"])
    return both.sort_values(["variant", "classifier", "lambda"], na_position="first")[keep]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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


def plot_tradeoff(table: pd.DataFrame, path: Path) -> Path:
    """Accuracy vs fairness violation per lambda, one curve per classifier, one panel per
    fair variant (DP violation; EO violation for the equal opportunity variant); standard PCA
    is drawn as a cross per classifier for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fair = [v for v in table["variant"].unique() if v != "pca"] or ["pca"]
    fig, axes = plt.subplots(1, len(fair), figsize=(4.2 * len(fair), 3.6), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    classifiers = list(table["classifier"].unique())
    baseline = table[table["variant"] == "pca"]
    for ax, variant in zip(axes[0], fair, strict=True):
        metric = "eo_difference" if variant.endswith("_eo") else "dp_difference"
        part = table[table["variant"] == variant]
        for i, name in enumerate(classifiers):
            color = colors[i % len(colors)]
            curve = part[part["classifier"] == name].sort_values("lambda")
            ax.plot(curve[metric], curve["accuracy"], "o-", ms=3, color=color, label=name)
            ref = baseline[baseline["classifier"] == name]
            if len(ref) and variant != "pca":
                ax.plot(ref[metric], ref["accuracy"], "x", ms=8, color=color)
        label = "EO" if metric == "eo_difference" else "DP"
        ax.set_xlabel(f"{label} violation (lower is fairer)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{variant} (x = standard PCA)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _html_page(title: str, sections: list[tuple[str, Any]], image: Path | None) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
        "padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for heading, content in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if isinstance(content, pd.DataFrame):
            parts.append(content.to_html(index=False, float_format=lambda v: f"{v:.4g}"))
        elif content == "__plot__" and image is not None:
            data = base64.b64encode(image.read_bytes()).decode()
            parts.append(f"<img alt='trade-off plot' src='data:image/png;base64,{data}'>")
        else:
            for line in str(content).splitlines():
                parts.append(f"<p>{html.escape(line)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _markdown(title: str, sections: list[tuple[str, Any]], image_name: str) -> str:
    lines = [f"# {title}", ""]
    for heading, content in sections:
        lines += [f"## {heading}", ""]
        if isinstance(content, pd.DataFrame):
            lines.append(markdown_table(content))
        elif content == "__plot__":
            lines.append(f"![accuracy vs fairness violation per lambda]({image_name})")
        else:
            lines.append(str(content))
        lines.append("")
    return "\n".join(lines)


@task(name="write-report", cache_policy=NO_CACHE)
def write_report(
    out_dir: Path,
    *,
    title: str,
    table: pd.DataFrame,
    chosen: dict[str, Any],
    decision: Decision,
    facts: dict[str, Any],
    extra_sections: list[tuple[str, Any]] | None = None,
) -> dict[str, Path]:
    """Write ``tradeoff.png``, ``report.md`` and ``report.html`` into ``out_dir``."""
    out_dir = Path(out_dir)
    image = plot_tradeoff(table, out_dir / "tradeoff.png")
    chosen_frame = pd.DataFrame(
        [{k: chosen[k] for k in SUMMARY_COLUMNS if k in chosen}], columns=None
    )
    group_rows = [
        {"metric": key, "value": value}
        for key, value in chosen.items()
        if key.startswith(("selection_rate.", "tpr.", "dp_difference.", "eo_difference."))
    ]
    verdict = "PROMOTE to champion" if decision.promote else "do NOT promote"
    sections: list[tuple[str, Any]] = [
        ("Data and setup", "\n".join(f"- {k}: {v}" for k, v in facts.items())),
        ("Decision", f"**{verdict}**\n\n" + "\n".join(f"- {r}" for r in decision.reasons)),
        ("Chosen pipeline (preprocess -> representation -> classifier)", chosen_frame),
        ("Per-group rates of the chosen pipeline (evaluation rows)", pd.DataFrame(group_rows)),
        ("Trade-off: accuracy vs fairness violation per lambda", "__plot__"),
        ("Summary per variant and classifier (first and last lambda)", summary_table(table)),
    ]
    sections += extra_sections or []
    sections.append(
        (
            "Notes",
            "All numbers are aggregates over the evaluation rows; no raw rows or per-person "
            "sensitive attributes are stored. The full metrics table is metrics.csv.",
        )
    )
    (out_dir / "report.md").write_text(_markdown(title, sections, image.name))
    (out_dir / "report.html").write_text(_html_page(title, sections, image))
    return {"md": out_dir / "report.md", "html": out_dir / "report.html", "png": image}


def write_json(path: Path, content: Any) -> Path:
    path.write_text(json.dumps(content, indent=2, sort_keys=True, default=_json_default))
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")
