"""What the ``fairpca`` command line prints: the audit summary, the decision, where to look
in MLflow, and every error message in the command line's own option names.

The summary fits the terminal: at 80 columns the table's columns wrap at spaces and, when
they still do not fit, drop by priority (last: the row, the candidate and its accuracy), so no
cell is ever cut with an ellipsis.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = [
    "console",
    "err_console",
    "fail",
    "mlflow_ui_lines",
    "option_names",
    "print_report",
    "print_validation_error",
    "relog_alias_note",
    "summary_table",
]


def _width(stream) -> int | None:
    """A terminal's own width (or ``$COLUMNS``); piped output (CI logs, files) 120 columns."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 120


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))

SUMMARY_CAPTION = (
    "Validation rows. Shown: the majority-class and unconstrained-PCA baselines, the chosen "
    "candidate, and per variant and classifier lambda = 0 (fairest) and the last lambda. "
    "accuracy with its 95% interval; ≤ the 95% upper bound of ΔDP/ΔEO. All: metrics.csv."
)

# (title, priority): the lowest priority is dropped first when the table does not fit.
SUMMARY_COLUMNS = (
    ("row", 6),
    ("variant", 8),
    ("λ", 7),
    ("classifier", 5),
    ("accuracy (95%)", 9),
    ("ΔDP", 4),
    ("ΔEO", 3),
    ("%Var", 1),
)
TEXT_COLUMNS = ("row", "variant", "λ", "classifier")


# CLI option names of the library's and the config's argument names.
def _cell(value: Any, percent: bool = False) -> str:
    if isinstance(value, float):
        return f"{100 * value:.1f}" if percent else f"{value:.3g}"
    return "-" if value is None else str(value)


def _with_bound(row: dict[str, Any], metric: str) -> str:
    high = row.get(f"{metric}.ci95_high")
    value = row.get(metric)
    if value is None:
        return "-"
    return f"{value:.3f}" + ("" if high is None else f" ≤{high:.3f}")


def _accuracy(row: dict[str, Any]) -> str:
    low, high, accuracy = (row.get(f"accuracy{s}") for s in (".ci95_low", ".ci95_high", ""))
    interval = f" ({low:.3f}-{high:.3f})" if low is not None and high is not None else ""
    return ("-" if accuracy is None else f"{accuracy:.3f}") + interval


def _summary_cells(row: dict[str, Any]) -> dict[str, str]:
    return {
        "row": _cell(row.get("role")),
        "variant": _cell(row.get("variant")),
        "λ": _cell(row.get("lambda")),
        "classifier": _cell(row.get("classifier")),
        "accuracy (95%)": _accuracy(row),
        "ΔDP": _with_bound(row, "dp_difference"),
        "ΔEO": _with_bound(row, "eo_difference"),
        "%Var": _cell(row.get("var_explained"), percent=True),
    }


def _table(result, titles: list[str], cells: list[dict[str, str]]) -> Table:
    table = Table(
        title=f"Fairness audit {result.run_name}",
        box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
    )  # fmt: skip
    for title in titles:
        # a cell wraps at its spaces; a word longer than its column never happens, as the
        # column is at least as wide as its longest word (see summary_table)
        table.add_column(title, justify="left" if title in TEXT_COLUMNS else "right",
                         overflow="fold", min_width=_longest_word(title, cells))  # fmt: skip
    for row, values in zip(result.summary, cells, strict=True):
        table.add_row(*(values[t] for t in titles),
                      style="bold" if row.get("role") == "chosen" else None)  # fmt: skip
    return table


def _longest_word(title: str, cells: list[dict[str, str]]) -> int:
    words = [w for text in [title, *(c[title] for c in cells)] for w in text.split()]
    return max(len(w) for w in words)


def summary_table(result, width: int | None = None) -> Table:
    """The candidates table at ``width`` columns (default: the console's): columns wrap at
    spaces and the lowest-priority ones are left out until the table fits."""
    width = width or console.width
    cells = [_summary_cells(row) for row in result.summary]
    titles = [title for title, _ in SUMMARY_COLUMNS]
    by_priority = sorted(SUMMARY_COLUMNS, key=lambda item: item[1])
    while True:
        table = _table(result, titles, cells)
        needed = sum(_longest_word(t, cells) for t in titles) + 2 * (len(titles) - 1)
        if needed <= width or len(titles) <= 3:
            return table
        dropped = next(title for title, _ in by_priority if title in titles)
        titles.remove(dropped)


def bullets(items: list[str], style: str = "", out: Console | None = None) -> None:
    """One bullet per item; a long item wraps under its own text, never mid-word."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row(f"  {style}-", escape(item))
    (out or console).print(grid)


# Test-row measures shown per model, with their short labels: utility first (balanced accuracy
# cannot be faked by a near-constant classifier), then the disparities reviewers use.
TEST_ROW_METRICS = {
    "accuracy": "acc",
    "balanced_accuracy": "bal. acc",
    "dp_difference": "ΔDP",
    "selection_rate_ratio": "SR ratio",
    "eo_difference": "ΔEO",
    "dp_difference.intersection": "ΔDP ∩",
    "eo_difference.intersection": "ΔEO ∩",
    "one_class_share": "one class",
}


def _short_interval(metrics: dict[str, Any], name: str) -> str:
    value, low, high = (metrics.get(name + end) for end in ("", ".ci95_low", ".ci95_high"))
    if low is None or high is None:
        return f"{TEST_ROW_METRICS[name]} {value:.3f}"
    return f"{TEST_ROW_METRICS[name]} {value:.3f} [{low:.3f}, {high:.3f}]"


def _test_rows(selection: dict[str, Any], references: list[dict[str, Any]]) -> list[str]:
    """One line per model on the test rows: the chosen candidate, the baselines and the
    reference mitigations, each measure with its 95% interval (worst attribute, and the
    intersection of several)."""
    from fairpca.tasks.report import verdict_rows  # Prefect and sklearn: only when printing

    names = [name for name in TEST_ROW_METRICS if name in selection["test"]]
    return [
        f"{model} ({kind}): "
        + ", ".join(_short_interval(values, m) for m in names if values.get(m) is not None)
        for model, kind, values in verdict_rows(selection, references)
    ]


def _group_rows(selection: dict[str, Any]) -> list[str]:
    """Per reported group of the chosen candidate on the test rows: its rates."""
    from fairpca.tasks.report import group_rates_frame  # only when printing

    frame = group_rates_frame(selection["test"], selection.get("group_sizes", {}))
    return [
        f"{row['attribute']}:{row['group']} ({row['rows (all parts)']} rows): "
        + ", ".join(
            f"{name} {row[name]:.3f}" for name in ("selection rate", "TPR", "FPR", "base rate")
        )
        for row in frame.to_dict("records")
    ]


def _screening_rows(screening: list[dict[str, Any]]) -> list[str]:
    return [
        f"{entry['action']} {entry['column']!r}: {entry['rule']}"
        + ("" if entry.get("score") is None else f" (score {entry['score']:.3f})")
        for entry in screening
    ]


def decision_line(result, before: str | None) -> str:
    """One sentence, one reading: what happened to the champion alias."""
    alias, name, version = result.champion_alias, result.model_name, result.model_version
    if result.champion_moved:
        move = f"v{before} -> v{version}" if before and before != version else f"v{version}"
        return f"Decision: [green]promoted[/green]: {name} {move} now holds the {alias!r} alias."
    if version is None:
        return "Decision: [yellow]not promoted[/yellow] (no model version registered)."
    stays = f"stays on v{before}" if before else "is not set"
    return (
        f"Decision: [yellow]not promoted[/yellow]: v{version} was registered, the {alias!r} "
        f"alias {stays}."
    )


def print_report(result, before: str | None = None) -> None:
    """The summary of a finished audit or retrain; ``before`` is the version that held the
    champion alias when the promotion was decided (default: as the promotion says)."""
    promotion = getattr(result, "promotion", None)
    before = before or (promotion.champion_version if promotion is not None else None)
    console.print(summary_table(result))
    console.print(SUMMARY_CAPTION, style="dim")
    for variant, why in result.skipped.items():
        console.print(f"[yellow]Skipped variant {escape(variant)}:[/yellow] {escape(why)}")
    selection = result.selection
    console.print(f"Chosen on validation rows: [bold]{escape(selection['chosen']['name'])}[/bold]")
    console.print("Test rows (never used for a choice), 95% intervals:")
    bullets(_test_rows(selection, getattr(result, "references", [])))
    console.print("Chosen candidate per group (test rows):")
    bullets(_group_rows(selection))
    screening = getattr(result, "screening", [])
    console.print("Column screening:" + ("" if screening else " no column excluded"))
    bullets(_screening_rows(screening))
    console.print(decision_line(result, before))
    bullets([f"gate: {selection['gate']}", *result.reasons])
    if getattr(result, "outcome", None):
        console.print(f"Retrain: {escape(result.outcome)}")
    if selection["warnings"]:
        console.print("[yellow]Warnings:[/yellow]")
        bullets(selection["warnings"])
    console.print(f"Report: {escape(result.report_path)}", soft_wrap=True)
    console.print(f"MLflow run id: [bold]{result.run_id}[/bold]", soft_wrap=True)
    for line in mlflow_ui_lines(result):
        console.print(escape(line), soft_wrap=True)


def mlflow_bin() -> str:
    """The ``mlflow`` command of this Python environment, absolute (works outside the venv):
    its ``bin/mlflow`` script, else ``<this python> -m mlflow``."""
    candidate = Path(sys.executable).parent / "mlflow"
    return str(candidate) if candidate.exists() else f"{sys.executable} -m mlflow"


def _absolute_sqlite(uri: str) -> str:
    path = uri.removeprefix("sqlite:///")
    return f"sqlite:///{Path(path).expanduser().absolute()}"


def mlflow_ui_lines(result, port: int = 5000) -> list[str]:
    """Where to see the run (and the registered version) in the MLflow UI."""
    uri = result.tracking_uri
    lines = []
    if uri.startswith(("http://", "https://")):
        base = uri.rstrip("/")
    else:
        base = f"http://127.0.0.1:{port}"
        store = _absolute_sqlite(uri) if uri.startswith("sqlite:///") else uri
        lines.append(f"Open the MLflow UI: {mlflow_bin()} ui --backend-store-uri {store} "
                     f"--port {port}")  # fmt: skip
    lines.append(f"Run: {base}/#/experiments/{result.experiment_id}/runs/{result.run_id}")
    if result.model_version is not None:
        lines.append(f"Model version: {base}/#/models/{result.model_name}/versions/"
                     f"{result.model_version}")  # fmt: skip
    return lines


def flag_name(field: str) -> str:
    """``min_group_size`` -> ``--min-group-size``: the command-line option of a config field."""
    return "--" + field.replace("_", "-")


def option_names(text: str) -> str:
    """``text`` with Python argument names (``positive_label=...``, ``data_dir=None``,
    ``allow_small_groups=True``) written as the command line's options (``--positive-label
    ...``, no ``--data-dir``, ``--allow-small-groups``)."""
    from .config import RetrainConfig, leaf_fields

    names = {path[-1] for path in leaf_fields(RetrainConfig)}
    fields = "|".join(sorted(names, key=len, reverse=True))

    def option(name: str) -> str:
        return "-k" if name == "k" else flag_name(name)

    text = re.sub(rf"\b({fields})=None\b", lambda m: f"no {option(m.group(1))}", text)
    text = re.sub(rf"\b({fields})=True\b", lambda m: option(m.group(1)), text)  # a flag
    # "label/positive_label apply to ...": a slash-joined list of field names
    text = re.sub(
        rf"\b(?:{fields})(?:/(?:{fields}))+\b",
        lambda m: "/".join(option(name) for name in m.group(0).split("/")),
        text,
    )
    return re.sub(rf"\b({fields})=", lambda m: f"{option(m.group(1))} ", text)


def _suggestion(model: type[BaseModel], loc: tuple) -> str:
    """``did you mean 'lambdas'?`` for an unknown key at ``loc`` (difflib on the fields of
    the section at ``loc``; at the top, also on the keys of every section)."""
    from .config import section_of_key

    names = [*model.model_fields, *section_of_key(model)] if len(loc) == 1 else []
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
        names = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def print_validation_error(error: ValidationError, model: type[BaseModel]) -> None:
    err_console.print("[bold red]Invalid configuration[/bold red] (nothing was run):")
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "config"
        message = option_names(str(item["msg"]))
        if item["type"] == "extra_forbidden":
            message = "unknown option" + _suggestion(model, item["loc"])
        err_console.print(f"  - {escape(where)}: {escape(message)}")


def fail(what: str, error: BaseException | str, code: int = 2) -> NoReturn:
    """One clear line on stderr (no traceback), then exit with ``code``."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    err_console.print(f"[bold red]{what}:[/bold red] {escape(option_names(str(text)))}")
    raise typer.Exit(code)


def relog_alias_note(logged: dict[str, Any], promote: bool) -> str:
    """Why relog left the alias alone, and the one call that moves it (relog again would
    register a second version of the same audit)."""
    alias, name, version = logged["champion_alias"], logged["model_name"], logged["model_version"]
    why = (
        "the audit decided not to promote" if promote else "relog never moves it without --promote"
    )
    return (
        f"Alias {alias!r} of {name!r} was left alone ({why}). A reviewer who decides to "
        f"promote version {version} anyway: MlflowClient().set_registered_model_alias("
        f"{name!r}, {alias!r}, {version!r})."
    )
