"""Audit report: summary table, trade-off plot, Markdown + HTML report, local outputs.

Everything is written to the audit's local output directory first; MLflow logging reads it
back from there (see :mod:`fairpca.tasks.mlflow_logging`), so results survive a tracking outage.
Only aggregated numbers are written: no raw rows, no per-person sensitive attributes.
The report is built from structured sections (paragraphs, emphasised verdicts, bullet lists,
tables, the plot); Markdown and HTML are two renderings of the same sections.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from .select import Decision
from .signing import sha256_file

__all__ = [
    "Bullets",
    "Decision",
    "Plot",
    "Strong",
    "markdown_table",
    "plot_tradeoff",
    "render_html",
    "render_markdown",
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
    "accuracy.ci95_low",
    "accuracy.ci95_high",
    "dp_difference",
    "dp_difference.ci95_high",
    "eo_difference",
    "eo_difference.ci95_high",
    "var_explained",
    "mmd2",
    "linear_inseparability",
    "mean_gap_train",
    "mean_gap_validation",
]


@dataclass(frozen=True)
class Strong:
    """A paragraph in bold (the verdict)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bullet list."""

    items: list[str]


@dataclass(frozen=True)
class Plot:
    """The trade-off plot, with its caption."""

    caption: str


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


def summary_table(
    table: pd.DataFrame, chosen: dict[str, Any], baselines: dict[str, Any]
) -> pd.DataFrame:
    """Rows a reader compares, all on validation rows: the majority-class baseline, the
    unconstrained PCA baseline, the chosen candidate, then per variant and classifier the
    fairest (lambda = 0) and the last lambda. The ``role`` column says which row is which."""
    first = table.groupby(["variant", "classifier"], sort=False).head(1).assign(role="λ=0")
    last = table.groupby(["variant", "classifier"], sort=False).tail(1).assign(role="last λ")
    sweep = pd.concat([first, last]).drop_duplicates(subset=["variant", "classifier", "lambda"])
    sweep.loc[sweep["lambda"].isna(), "role"] = "no λ"
    sweep = sweep.sort_values(["variant", "classifier", "lambda"], na_position="first")
    head = [
        {
            "role": "majority",
            "variant": "-",
            "classifier": "majority",
            **baselines["majority"]["validation"],
        },
    ]
    if baselines.get("pca") is not None:
        head.append({"role": "PCA (best)", **baselines["pca"]["row"]})
    head.append({"role": "chosen", **chosen})
    columns = ["role", *(c for c in SUMMARY_COLUMNS if c in table.columns)]
    return pd.concat(
        [pd.DataFrame(head).reindex(columns=columns), sweep.reindex(columns=columns)],
        ignore_index=True,
    )


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


PCA_STYLE = {"marker": "x", "ms": 9, "color": "black", "label": "unconstrained PCA"}
CHOSEN_STYLE = {"marker": "*", "ms": 14, "color": "gold", "markeredgecolor": "black",
                "label": "chosen"}  # fmt: skip


def _marker(ax, row: dict[str, Any] | None, metric: str, style: dict[str, Any]) -> None:
    if row is not None and np.isfinite(row.get(metric, np.nan)):
        ax.plot(row[metric], row["accuracy"], linestyle="none", **style)


def _panel(ax, table: pd.DataFrame, variant: str, marks: dict[str, Any], colors) -> None:
    """One variant: a curve per classifier with an arrow in the direction of growing lambda,
    unconstrained PCA, the chosen point, the threshold and the majority-class accuracy."""
    metric = "eo_difference" if variant.endswith("_eo") else "dp_difference"
    thresholds = marks["thresholds"]
    eo = metric == "eo_difference"
    limit = thresholds.max_eo_difference if eo else thresholds.max_dp_difference
    part = table[table["variant"] == variant]
    for i, name in enumerate(table["classifier"].unique()):
        curve = part[part["classifier"] == name].sort_values("lambda")
        color = colors[i % len(colors)]
        ax.plot(curve[metric], curve["accuracy"], "o-", ms=3, color=color, label=name)
        if len(curve) > 1:
            ax.annotate(
                "",
                xy=(curve[metric].iloc[-1], curve["accuracy"].iloc[-1]),
                xytext=(curve[metric].iloc[0], curve["accuracy"].iloc[0]),
                arrowprops={"arrowstyle": "->", "color": color, "alpha": 0.4},
            )
    _marker(ax, marks["pca"], metric, PCA_STYLE)
    if marks["chosen"]["variant"] in (variant, "pca"):
        _marker(ax, marks["chosen"], metric, CHOSEN_STYLE)
    ax.axvline(limit, color="red", ls="--", lw=1, label="threshold")
    ax.axhline(marks["majority_accuracy"], color="grey", ls=":", lw=1, label="majority class")
    ax.set_xlabel(f"{'EO' if eo else 'DP'} difference, validation (lower is fairer)")
    ax.set_title(f"{variant} (arrow: lambda 0 -> {table['lambda'].max():g})", fontsize=9)
    ax.grid(alpha=0.3)


def plot_tradeoff(
    table: pd.DataFrame,
    path: Path,
    *,
    chosen: dict[str, Any],
    pca: dict[str, Any] | None,
    majority_accuracy: float,
    thresholds,
) -> Path:
    """Validation accuracy vs fairness violation per lambda: one panel per fair variant (DP;
    EO for the equal opportunity variant), one curve per classifier, on shared axes.

    Marks the threshold (vertical), the majority-class accuracy (horizontal), unconstrained
    PCA (x), the chosen candidate (star) and the lambda direction (an arrow from lambda = 0,
    the fairest point, to the last lambda).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fair = [v for v in table["variant"].unique() if v != "pca"] or ["pca"]
    fig, axes = plt.subplots(
        1, len(fair), figsize=(4.2 * len(fair), 3.8), squeeze=False, sharex=True, sharey=True
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    marks = {"chosen": chosen, "pca": pca, "majority_accuracy": majority_accuracy,
             "thresholds": thresholds}  # fmt: skip
    for ax, variant in zip(axes[0], fair, strict=True):
        _panel(ax, table, variant, marks, colors)
    legend = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    axes[0][0].set_ylabel("validation accuracy")
    axes[0][0].legend(list(legend.values()), list(legend), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _html_block(content: Any, image: Path | None) -> str:
    if isinstance(content, pd.DataFrame):
        return content.to_html(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}")
    if isinstance(content, Plot):
        if image is None:
            return ""
        data = base64.b64encode(image.read_bytes()).decode()
        return (
            f"<figure><img alt='{html.escape(content.caption)}' "
            f"src='data:image/png;base64,{data}'><figcaption>"
            f"{html.escape(content.caption)}</figcaption></figure>"
        )
    if isinstance(content, Strong):
        return f"<p><strong>{html.escape(content.text)}</strong></p>"
    if isinstance(content, Bullets):
        items = "".join(f"<li>{html.escape(str(item))}</li>" for item in content.items)
        return f"<ul>{items}</ul>"
    if isinstance(content, list):
        return "".join(_html_block(item, image) for item in content)
    return "".join(f"<p>{html.escape(line)}</p>" for line in str(content).split("\n\n"))


def render_html(title: str, sections: list[tuple[str, Any]], image: Path | None) -> str:
    """The report as one self-contained HTML page (the plot inlined)."""
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
        parts.append(_html_block(content, image))
    parts.append("</body></html>")
    return "\n".join(parts)


def _markdown_block(content: Any, image_name: str) -> str:
    if isinstance(content, pd.DataFrame):
        return markdown_table(content)
    if isinstance(content, Plot):
        return f"![{content.caption}]({image_name})"
    if isinstance(content, Strong):
        return f"**{content.text}**"
    if isinstance(content, Bullets):
        return "\n".join(f"- {item}" for item in content.items)
    if isinstance(content, list):
        return "\n\n".join(_markdown_block(item, image_name) for item in content)
    return str(content)


def render_markdown(title: str, sections: list[tuple[str, Any]], image_name: str) -> str:
    """The report as Markdown (the plot linked as ``image_name``)."""
    lines = [f"# {title}", ""]
    for heading, content in sections:
        lines += [f"## {heading}", "", _markdown_block(content, image_name), ""]
    return "\n".join(lines)


@task(name="write-report", cache_policy=NO_CACHE)
def write_report(
    out_dir: Path, *, title: str, sections: list[tuple[str, Any]], plot: dict[str, Any]
) -> dict[str, Path]:
    """Write ``tradeoff.png`` (``plot`` = :func:`plot_tradeoff`'s arguments), ``report.md``
    and ``report.html`` into ``out_dir``."""
    out_dir = Path(out_dir)
    image = plot_tradeoff(path=out_dir / "tradeoff.png", **plot)
    (out_dir / "report.md").write_text(render_markdown(title, sections, image.name))
    (out_dir / "report.html").write_text(render_html(title, sections, image))
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
