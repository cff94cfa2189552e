"""What the ``fairpca`` command line prints: the verdict, where to look in MLflow, and every
error message in the command line's own option names.

The summary leads with the decision and why, then one line per model on the test rows and
the chosen model's rates per named group; at 80 columns the default audit's summary takes
about 30 lines. Paths, URLs and commands are printed on a line of their own, never broken by
the console. ``--verbose`` adds the candidates on the validation rows (their table's columns
wrap at spaces and, when they still do not fit, drop by priority, so no cell is ever cut
with an ellipsis), every reason, and Prefect's and MLflow's INFO log lines
(:func:`show_logs`).

The verdict's names (:mod:`fairpca.tasks.report`, which imports Prefect and scikit-learn) are
imported where a verdict is printed, so that a mistyped flag is answered at once.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import re
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError
from rich import box
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table
from rich.text import Text

from fairpca.tasks.trust import visible_text

from .runtime import prefect_console


def _width(stream) -> int | None:
    """A terminal's own width (or ``$COLUMNS``); piped output (CI logs, files) 120 columns."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 120


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))


def escape(text: str) -> str:
    """``text`` as the console shows it literally: no rich markup, and no raw bidirectional
    control (:func:`fairpca.tasks.trust.visible_text`)."""
    return markup_escape(visible_text(text))


SUMMARY_CAPTION = (
    "Shown: the majority-class and unconstrained-PCA baselines, the chosen "
    "candidate, and per variant and classifier lambda = 0 (fairest) and the last lambda. "
    "accuracy with its 95% interval; ≤ the 95% upper bound of ΔDP/ΔEO. All: metrics.csv."
)


def summary_caption(record) -> str:
    """:data:`SUMMARY_CAPTION` after the rows the candidates were measured on
    (:func:`fairpca.tasks.report.candidate_rows`)."""
    from fairpca.tasks.report import candidate_rows

    rows = candidate_rows(record)
    return f"{rows[:1].upper()}{rows[1:]}. {SUMMARY_CAPTION}"


# The candidates table's columns, and the order they are left out in while it does not fit.
SUMMARY_COLUMNS = ("row", "variant", "λ", "classifier", "accuracy (95%)", "ΔDP", "ΔEO", "%Var")
DROPPED_FIRST = ("%Var", "ΔEO", "ΔDP", "classifier", "row")  # then λ, variant, accuracy stay
TEXT_COLUMNS = ("row", "variant", "λ", "classifier")


def _cell(value: Any, percent: bool = False) -> str:
    if isinstance(value, float):
        return f"{100 * value:.1f}" if percent else f"{value:.3g}"
    return "-" if value is None else str(value)


def _with_bound(row: dict[str, Any], metric: str) -> str:
    """The estimate and its 95% upper bound: ``0.031 ≤0.052``."""
    from fairpca.tasks.report import Estimate

    high, text = row.get(f"{metric}.ci95_high"), Estimate.of(row, metric).text
    return text if high is None or text == "-" else f"{text} ≤{high:.3f}"


def _summary_cells(row: dict[str, Any]) -> dict[str, str]:
    from fairpca.tasks.report import Estimate

    return {
        "row": _cell(row.get("role")),
        "variant": _cell(row.get("variant")),
        "λ": _cell(row.get("lambda")),
        "classifier": _cell(row.get("classifier")),
        "accuracy (95%)": str(Estimate.of(row, "accuracy")),
        "ΔDP": _with_bound(row, "dp_difference"),
        "ΔEO": _with_bound(row, "eo_difference"),
        "%Var": _cell(row.get("var_explained"), percent=True),
    }


def summary_table(result, width: int | None = None) -> Table:
    """The candidates table at ``width`` columns (default: the console's): columns wrap at
    spaces and the lowest-priority ones are left out until the table fits (a column is at
    least as wide as its longest word, so no word is ever cut)."""
    cells = [_summary_cells(row) for row in result.summary]
    longest = {title: max(len(word) for text in [title, *(c[title] for c in cells)]
                          for word in text.split()) for title in SUMMARY_COLUMNS}  # fmt: skip
    titles = list(SUMMARY_COLUMNS)
    for dropped in DROPPED_FIRST:
        if sum(longest[t] for t in titles) + 2 * (len(titles) - 1) <= (width or console.width):
            break
        titles.remove(dropped)
    table = Table(title=f"Fairness audit {result.run_name}", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)  # fmt: skip
    for title in titles:
        table.add_column(title, justify="left" if title in TEXT_COLUMNS else "right",
                         overflow="fold", min_width=longest[title])  # fmt: skip
    for row, values in zip(result.summary, cells, strict=True):
        table.add_row(*(values[t] for t in titles),
                      style="bold" if row.get("role") == "chosen" else None)  # fmt: skip
    return table


def bullets(title: str, items: list[str]) -> None:
    """``title``, then one bullet per item; a long item wraps under its own text, never
    mid-word."""
    console.print(title)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row("  -", escape(item))
    console.print(grid)


def _plain_table(first: str, titles: list[str], rows: list[list[str]], bold_first=False) -> Table:
    """A table of short numbers, each under its title (``rows`` may wrap), after a first
    column of labels; ``bold_first``: the first row in bold."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False)
    table.add_column(first, overflow="fold")
    for title in titles:
        table.add_column(title, justify="right", no_wrap=title != "rows")
    for i, cells in enumerate(rows):
        table.add_row(*cells, style="bold" if bold_first and i == 0 else None)
    return table


def headline_table(verdict) -> Table:
    """One line per model of the :class:`~fairpca.tasks.report.Verdict` on the test rows
    (point estimates): the chosen candidate, the baselines and the reference mitigations
    (``*``: needs the sensitive attribute to predict; ``✓``: meets the gate on the validation
    rows)."""
    from fairpca.tasks.report import METRIC_LABELS

    rows = [
        [escape(f"{row.short}{'*' * row.sensitive}{'†' * bool(row.ineligible)}"
                f"{'✓' * bool(row.meets_gate)}"),
         *(row.estimates[m].text for m in verdict.columns)]
        for row in verdict.rows
    ]  # fmt: skip
    titles = [METRIC_LABELS[name][2] for name in verdict.columns]
    return _plain_table("test rows", titles, rows, bold_first=True)


def _notes(verdict) -> str:
    """Under the test table: what ``*`` and ``†`` mean, and the chosen model's 95% intervals
    (named as the headline names it)."""
    from fairpca.tasks.report import METRIC_LABELS

    chosen = verdict.rows[0].estimates
    intervals = [f"{METRIC_LABELS[m][2]} {chosen[m].interval}" for m in verdict.columns
                 if chosen[m].interval]  # fmt: skip
    notes = ["* needs the sensitive attribute to predict."] * any(r.sensitive for r in verdict.rows)
    notes += [f"† not eligible on the validation rows: {row.short} {row.ineligible}."
              for row in verdict.rows if row.ineligible]  # fmt: skip
    notes += ["✓ a reference that meets the gate on the validation rows."] * any(
        r.meets_gate for r in verdict.rows
    )
    if intervals:
        notes.append(f"{verdict.chosen_short}, 95% intervals: " + ", ".join(intervals) + ".")
    return "\n".join(notes)


def group_table(verdict) -> Table | None:
    """The chosen model's rates per named group on the test rows (single attributes; the
    intersection's are in the report)."""
    from fairpca.tasks.report import GROUP_RATES, METRIC_LABELS, Estimate

    if not verdict.groups:
        return None
    rows = [
        [
            escape(f"{g.attribute}: {g.group}"),
            escape(f"{g.rows:,}" if isinstance(g.rows, int) else str(g.rows)),
            *(Estimate(r).text for r in g.rates.values()),
        ]
        for g in verdict.groups
    ]
    titles = ["rows", *(METRIC_LABELS[rate][0] for rate in GROUP_RATES)]
    return _plain_table("group, test rows", titles, rows)  # the chosen model's rates


OUTCOME_STYLES = {"promoted": "green", "not promoted": "yellow", "refused": "red"}


def decision_line(result, before: str | None) -> str:
    """One sentence, one reading: what happened to the champion alias, in the words of the
    MLflow run's ``fairpca.decision`` tag (:func:`fairpca.tasks.decision.outcome`)."""
    from fairpca.tasks.decision import OUTCOMES, PROMOTED, REFUSED, outcome

    alias, name, version = result.champion_alias, result.model_name, result.model_version
    word = outcome(result.promotion, result.champion_moved)
    said = f"[{OUTCOME_STYLES[word]}]{OUTCOMES[word]}[/{OUTCOME_STYLES[word]}]"
    if word == PROMOTED:
        move = f"v{before} -> v{version}" if before and before != version else f"v{version}"
        return f"Decision: {said}, {name} {move} holds {alias!r}."
    if version is None:
        return f"Decision: {said} (no model version registered)."
    stays = f"stays on v{before}" if before else "is not set"
    if not result.model_version_new:  # the registry already held this fit: nothing was added
        registered = f"same fit as version {version}; nothing registered"
    else:
        registered = f"v{version} registered"
    if word == REFUSED:  # the gate took a protected alias from this very model before
        registered += ", but this model lost a protected alias before and may not take it back"
    return f"Decision: {said}, {registered}; {alias!r} {stays}."


# What this command prints besides the verdict (``--verbose``).
OUTPUT = {"verbose": False}


def show_logs(verbose: bool) -> None:
    """Prefect's and MLflow's INFO lines on the terminal only with ``--verbose`` (their
    warnings and errors always); the Prefect API still receives every log line.

    Works before or after Prefect and MLflow are imported: it sets the level of Prefect's
    console handler and of MLflow's logger, and the variables a later logging set-up (or a
    Prefect server or worker process started afterwards) reads. MLflow's progress bars
    (``Downloading artifacts: 100%`` as a champion is loaded) follow the same rule: MLflow
    reads the variable at each download.
    """
    OUTPUT["verbose"] = verbose
    level = "INFO" if verbose else "WARNING"
    os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = level
    os.environ["MLFLOW_LOGGING_LEVEL"] = level
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = str(verbose).lower()
    logging.getLogger("mlflow").setLevel(level)
    if (handler := prefect_console()) is not None:
        handler.setLevel(level)


def labelled(label: str, value: str, style: str = "") -> None:
    """``label value`` on one line when it fits, else ``value`` (a path, a URL, a command)
    on a line of its own, never broken by the console; a command too long for its line is
    broken between its words (:func:`command_lines`), never inside a path."""
    fits = len(f"{label} {value}") <= console.width
    if fits or " " not in value:  # else a path or a URL on a line of its own
        console.print(escape(label), f"{style}{escape(value)}", sep=" " if fits else "\n",
                      soft_wrap=True)  # fmt: skip
        return
    for line in command_lines(f"{label} {value}", console.width, words_kept=len(label.split())):
        # printed without markup: rich's escape doubles a line's closing continuation "\\"
        console.print(visible_text(line), style=style.strip("[]") or None, markup=False,
                      soft_wrap=True)  # fmt: skip


def command_lines(command: str, width: int, words_kept: int = 0) -> list[str]:
    """A shell command as lines of at most ``width`` characters, broken only between its
    words, each line but the last ending in `` \\`` and the next indented: pasted into a
    shell it is the same command. A word longer than a line (a long path) stands alone. The
    first ``words_kept`` words (a label before the command) are taken as they are."""
    label, rest = command.split(" ")[:words_kept], " ".join(command.split(" ")[words_kept:])
    lines, line = [], " ".join(label)
    for word in shlex.split(rest):
        word = shlex.quote(word)
        if line and len(line) + 1 + len(word) + 2 > width:  # room for " \\"
            lines.append(f"{line} \\")
            line = f"    {word}"
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line]


def _more(count: int) -> list[str]:
    return [f"{count} more in the report (or run with --verbose)"] if count else []


def print_report(result, before: str | None = None, *, verbose: bool | None = None) -> None:
    """The summary of a finished audit or retrain; ``before`` is the version that held the
    champion alias when the promotion was decided (default: as the promotion says).

    The decision first, why in a sentence, then one line per model on the test rows and
    the chosen model's rates per named group; warnings; where the report and the MLflow
    run are. ``verbose`` (default: the command's ``--verbose``) adds the candidates on the
    validation rows and every reason.
    """
    from fairpca.tasks.decision import shown

    verbose = OUTPUT["verbose"] if verbose is None else verbose
    before = before or result.promotion.champion_version
    record, verdict = result.record, result.verdict  # the command's one verdict
    console.print(decision_line(result, before))
    console.print(escape(verdict.why) + ".")
    if record.kind == "retrain":
        from .retrain import final_message

        console.print(f"Retrain: {escape(final_message(result))}")
    chosen = f"[bold]{escape(verdict.chosen)}[/bold]"
    console.print(f"{verdict.chosen_short} on the {verdict.rows_label}: {chosen}")
    console.print(headline_table(verdict))
    console.print(escape(_notes(verdict)), style="dim")
    if (groups := group_table(verdict)) is not None:
        console.print(groups)
    deciding, others = shown(r for r in verdict.decision_reasons if r not in verdict.stated)
    if deciding and not verbose:  # every reason that decided or names an alternative
        bullets("Reasons:", deciding + _more(others))
    elif others and not verbose:
        console.print(f"Reasons: {_more(others)[0]}.")
    for what, why in result.skipped.items():  # a variant, or a stage the Dask route leaves out
        console.print(f"[yellow]Skipped {escape(what)}:[/yellow] {escape(why)}")
    if screening := result.screening:
        bullets("Column screening:", [
            f"{entry['action']} {entry['column']!r}: {entry['rule']}"
            + ("" if entry.get("score") is None else f" (score {entry['score']:.3f})")
            for entry in screening
        ])  # fmt: skip
    if warnings := list(verdict.warnings):
        kept = warnings if verbose else warnings[:1]
        more = _more(len(warnings) - len(kept))
        bullets(f"[yellow]Warnings ({len(warnings)}):[/yellow]", kept + more)
    if verbose:
        console.print(summary_table(result))
        console.print(summary_caption(record), style="dim")
        bullets("Reasons:", [f"gate: {verdict.rule}", *result.reasons])
    labelled("Report:", result.report_path)
    labelled("MLflow run id:", result.run_id, style="[bold]")
    for label, value in mlflow_ui_lines(result):
        labelled(label, value)


def mlflow_bin() -> str:
    """The ``mlflow`` command of this Python environment, absolute (works outside the venv):
    its ``bin/mlflow`` script, else ``<this python> -m mlflow``."""
    candidate = Path(sys.executable).parent / "mlflow"
    return str(candidate) if candidate.exists() else f"{sys.executable} -m mlflow"


MLFLOW_UI_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"


def mlflow_ui_lines(result, port: int = 5000) -> list[tuple[str, str]]:
    """Where to see the run (and the registered version) in the MLflow UI: (label, address)
    pairs. The run list opens in the experiment's verdict view
    (:func:`fairpca.tasks.mlflow_logging.run_list_url`: each run's description, whose first
    line is the decision, and the headline test metrics as columns)."""
    from fairpca.tasks.mlflow_logging import run_list_url

    uri = result.tracking_uri
    lines = []
    if uri.startswith(("http://", "https://")):
        base = uri.rstrip("/")
    else:
        base = f"http://127.0.0.1:{port}"
        store = uri  # a local database by its absolute path
        if uri.startswith("sqlite:///"):
            store = f"sqlite:///{Path(uri.removeprefix('sqlite:///')).expanduser().absolute()}"
        mlflow = mlflow_bin()
        program = [mlflow] if Path(mlflow).exists() else [sys.executable, "-m", "mlflow"]
        # one server process and no job runner: fairpca needs no MLflow server jobs; the
        # store last, so that a long path ends the command on a line of its own
        command = shlex.join([*program, "ui", "--port", str(port), "--workers", "1",
                              "--backend-store-uri", store])  # fmt: skip
        lines.append(("Open the MLflow UI:", f"{MLFLOW_UI_ENV} {command}"))
    lines.append(("Runs:", run_list_url(base, result.experiment_id)))
    lines.append(("Run:", f"{base}/#/experiments/{result.experiment_id}/runs/{result.run_id}"))
    if result.model_version is not None:
        lines.append(("Model version:", f"{base}/#/models/{result.model_name}/versions/"
                      f"{result.model_version}"))  # fmt: skip
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

    def rewrite(piece: str) -> str:
        piece = re.sub(rf"\b({fields})=None\b", lambda m: f"no {option(m.group(1))}", piece)
        piece = re.sub(rf"\b({fields})=True\b", lambda m: option(m.group(1)), piece)  # a flag
        # "label/positive_label apply to ...": a slash-joined list of field names
        piece = re.sub(
            rf"\b(?:{fields})(?:/(?:{fields}))+\b",
            lambda m: "/".join(option(name) for name in m.group(0).split("/")),
            piece,
        )
        return re.sub(rf"\b({fields})=", lambda m: f"{option(m.group(1))} ", piece)

    # a URL in the text (a server's error) is quoted as it is: "?experiment_name=" stays
    pieces = re.split(r"(\w+://\S+)", text)
    return "".join(piece if i % 2 else rewrite(piece) for i, piece in enumerate(pieces))


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
        # a validator's own message, without pydantic's "Value error, " in front
        message = option_names(str(item["msg"]).removeprefix("Value error, "))
        if item["type"] == "extra_forbidden":
            message = "unknown option" + _suggestion(model, item["loc"])
        err_console.print(f"  - {escape(where)}: {escape(message)}")


# A command quoted in a message (``log them again with `fairpca relog DIR` once ...``).
QUOTED_COMMAND = re.compile(r"`([^`\n]+)`")


def print_message(target: Console, text: str, head: str = "", style: str | None = None) -> None:
    """``text`` (plain, after the markup ``head``) wrapped at spaces and never inside a word:
    a path or a URL longer than a line stands whole on a line of its own. A command quoted in
    backticks that does not fit on its line is printed on lines of its own, broken between
    its words with shell continuations (:func:`command_lines`), so that pasted into a shell it
    is the one command; the text around it goes on after it."""
    shown = visible_text(text)
    plain_head = Text.from_markup(head).plain if head else ""
    fits = len(plain_head) + len(shown) <= target.width
    pieces = [shown] if fits else QUOTED_COMMAND.split(shown)  # prose, command, prose, ...
    for i, piece in enumerate(pieces):
        if i % 2:  # a command: on lines of its own, without markup (its "\\" stays one)
            for line in command_lines(piece, target.width):
                target.print(line, style=style, markup=False, soft_wrap=True)
            continue
        lead = plain_head if i == 0 else ""
        for n, line in enumerate(word_lines(lead + piece.strip(), target.width)):
            # rich's own wrapping would fold a word longer than the line: the lines are ours
            shown_line = markup_escape(line[len(lead) :] if n == 0 else line)
            target.print((head if n == 0 and lead else "") + shown_line, style=style,
                         soft_wrap=True)  # fmt: skip


def word_lines(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces only (a longer
    word, a path or a URL, stands whole on a line of its own); its own newlines kept."""
    return [
        line
        for paragraph in text.split("\n")
        for line in textwrap.wrap(paragraph, width, break_long_words=False,
                                  break_on_hyphens=False) or [""]
    ]  # fmt: skip


def fail(what: str, error: BaseException | str, code: int = 2) -> NoReturn:
    """One clear message on stderr (no traceback; a command it names never broken inside a
    path: :func:`print_message`), then exit with ``code``."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    print_message(
        err_console, option_names(str(text)), head=f"[bold red]{markup_escape(what)}:[/bold red] "
    )
    raise SystemExit(code)


def relog_alias_note(logged: dict[str, Any], promote: bool, tracking_uri: str) -> str:
    """Why relog left the alias alone, and the one call that moves it (relog again would
    register a second version of the same audit); ``tracking_uri`` as it may be shown."""
    alias, name, version = logged["champion_alias"], logged["model_name"], logged["model_version"]
    why = (
        "the one promotion decision, against the champion now, did not move it"
        if promote
        else "relog moves it only with --promote, and then only if the audit's decision, "
        "against the champion now, says so"
    )
    return (
        f"Alias {alias!r} of {name!r} was left alone ({why}). A reviewer who decides to "
        f"promote version {version}: MlflowClient({tracking_uri!r}).set_registered_model_alias("
        f"{name!r}, {alias!r}, {version!r})."
    )


class _StageProgress(logging.Handler):
    """Counts the audit's finished stages (Prefect's task runs: "Finished in state ...") and
    names the last one on a :class:`rich.status.Status`."""

    def __init__(self, status, what: str) -> None:
        super().__init__(logging.INFO)
        self.status, self.what, self.done = status, what, 0

    def emit(self, record: logging.LogRecord) -> None:
        stage = getattr(record, "task_name", None)
        if stage and str(record.msg).startswith("Finished in state"):
            self.done += 1
            self.status.update(f"{self.what}: {self.done} stages done, last: {escape(stage)}")


@contextlib.contextmanager
def stage_progress(what: str):
    """On a terminal, a spinner on stderr that counts the flow's finished stages and names the
    last; nothing where stderr is not a terminal (a log file, CI), so output stays quiet."""
    if not err_console.is_terminal:
        yield
        return
    status = err_console.status(f"{what}: starting")
    progress = _StageProgress(status, what)
    logger = logging.getLogger("prefect.task_runs")
    logger.addHandler(progress)
    try:
        with status:
            yield
    finally:
        logger.removeHandler(progress)
