"""The ``fairpca`` command line: ``fairpca audit``, ``fairpca retrain``, ``fairpca relog``.

Options override the values of ``--config FILE`` (YAML or JSON with the fields of
:class:`fairpca.flows.config.AuditConfig`); the config is validated before any work starts.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    name="fairpca",
    help="Fairness audits of (fair) PCA representations, orchestrated by Prefect and "
    "recorded in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets 120 columns so the summary table is not truncated.
console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)


def _prefect_defaults() -> None:
    """A fresh machine runs a temporary Prefect server; give it time to start, no analytics."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _split_list(value: str | None, cast=str) -> list[Any] | None:
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        return [cast(item) for item in items]
    except ValueError as error:
        raise typer.BadParameter(f"cannot read {value!r} as a comma-separated list") from error


def _rows_option(value: int | None) -> int | str | None:
    """0 means "all rows" on the command line."""
    if value is None:
        return "unset"
    return None if value == 0 else value


def build_config(options: dict[str, Any], config_file: Path | None, model_class):
    """Merge ``--config FILE`` with the given options and validate (pydantic)."""
    from .config import load_config_file

    values: dict[str, Any] = load_config_file(config_file) if config_file else {}
    thresholds = dict(values.get("thresholds") or {})
    for key in ("max_dp_difference", "max_eo_difference", "min_accuracy"):
        if options.get(key) is not None:
            thresholds[key] = options.pop(key)
        else:
            options.pop(key, None)
    if thresholds:
        values["thresholds"] = thresholds
    for key, value in options.items():
        if value is None or value == "unset" or value == []:
            continue
        values[key] = value
    return model_class.model_validate(values)


def _print_validation_error(error: ValidationError) -> None:
    err_console.print("[bold red]Invalid configuration[/bold red] (nothing was run):")
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "config"
        err_console.print(f"  - {escape(where)}: {escape(str(item['msg']))}")


SUMMARY_CAPTION = (
    "Validation rows. Shown: the majority-class and unconstrained-PCA baselines, the chosen "
    "candidate, and per variant and classifier lambda = 0 (fairest) and the last lambda. "
    "accuracy with its 95% interval; ≤ the 95% upper bound of ΔDP/ΔEO. All: metrics.csv."
)


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


def _summary_table(result) -> Table:
    table = Table(title=f"Fairness audit {result.run_name}", caption=SUMMARY_CAPTION)
    titles = ("row", "variant", "λ", "classifier", "accuracy (95%)", "ΔDP", "ΔEO", "%Var")
    for title in titles:
        table.add_column(title, justify="left" if title in titles[:4] else "right", no_wrap=True)
    for row in result.summary:
        low, high = row.get("accuracy.ci95_low"), row.get("accuracy.ci95_high")
        interval = f" ({low:.3f}-{high:.3f})" if low is not None and high is not None else ""
        accuracy = row.get("accuracy")
        table.add_row(
            _cell(row.get("role")),
            _cell(row.get("variant")),
            _cell(row.get("lambda")),
            _cell(row.get("classifier")),
            ("-" if accuracy is None else f"{accuracy:.3f}") + interval,
            _with_bound(row, "dp_difference"),
            _with_bound(row, "eo_difference"),
            _cell(row.get("var_explained"), percent=True),
            style="bold" if row.get("role") == "chosen" else None,
        )
    return table


def _interval(metrics: dict[str, Any], name: str) -> str:
    from fairpca.tasks.record import format_interval

    return f"{name} {format_interval(metrics, name)}"


def _bullets(items: list[str], style: str = "") -> None:
    """One bullet per item; a long item wraps under its own text, never mid-word."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row(f"  {style}-", item)
    console.print(grid)


def _report(result) -> None:
    console.print(_summary_table(result))
    for variant, why in result.skipped.items():
        console.print(f"[yellow]Skipped variant {variant}:[/yellow] {why}")
    selection = result.selection
    names = ["accuracy", "dp_difference", "eo_difference"]  # worst attribute
    names += [n for n in ("dp_difference.intersection", "eo_difference.intersection")
              if n in selection["test"]]  # fmt: skip
    console.print(f"Chosen on validation rows: [bold]{selection['chosen']['name']}[/bold]")
    console.print("Test rows (never used for a choice), 95% intervals:")
    rows = ["chosen: " + ", ".join(_interval(selection["test"], m) for m in names)]
    pca = selection["baselines"].get("pca")
    if pca:
        rows.append(
            f"unconstrained PCA ({pca['name']}): "
            + ", ".join(_interval(pca["test"], m) for m in names)
        )
    rows.append(
        "majority class: " + _interval(selection["baselines"]["majority"]["test"], "accuracy")
    )
    _bullets(rows)
    verdict = (
        "[green]promoted[/green]" if result.champion_moved else "[yellow]not promoted[/yellow]"
    )
    console.print(
        f"Decision: {verdict} ('{result.champion_alias}' alias; gate: {selection['gate']})"
    )
    _bullets(result.reasons)
    if selection["warnings"]:
        console.print("[yellow]Warnings:[/yellow]")
        _bullets(selection["warnings"])
    console.print(f"Report: {result.report_path}", soft_wrap=True)
    console.print(
        f"MLflow run id: [bold]{result.run_id}[/bold] (tracking URI {result.tracking_uri})",
        soft_wrap=True,
    )
    if result.model_version is not None:
        console.print(f"Registered model: {result.model_name} version {result.model_version}")
    if result.tracking_uri.startswith("sqlite:"):
        console.print(
            f"Open the MLflow UI: mlflow ui --backend-store-uri {result.tracking_uri}",
            soft_wrap=True,
        )


def _ephemeral_prefect_server():
    """The temporary Prefect server a flow run would start (None if PREFECT_API_URL is set).

    Starting it before the flow call lets its boot (a separate process) overlap with the
    imports done by the warm-up thread; the flow then finds it running.
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE

    if PREFECT_API_URL.value() or not PREFECT_SERVER_ALLOW_EPHEMERAL_MODE.value():
        return None
    from prefect.server.api.server import SubprocessASGIServer

    return SubprocessASGIServer()


def _exit_on_signal(signum: int, _frame) -> None:
    """SIGTERM/SIGHUP end the command like Ctrl-C does: through every ``finally``."""
    raise SystemExit(128 + signum)


@contextmanager
def _temporary_server():
    """Start the temporary Prefect server (if one is needed) and stop it on every exit:
    normal end, error, Ctrl-C, SIGTERM or SIGHUP."""
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in _STOP_SIGNALS}
    server = None
    try:
        server = _ephemeral_prefect_server()
        yield server
    finally:
        if server is not None:
            with suppress(Exception):
                _drain_prefect_workers()  # else they retry against the stopped server at exit
            with suppress(Exception):
                server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_server(server) -> None:
    """Boot the temporary server with the stop signals held back.

    A signal that arrived while ``subprocess.Popen`` was spawning the server would unwind the
    stack before the server object knows its process, leaving an orphan; held back, it is
    delivered as soon as the server is up (or has failed), and the ``finally`` above stops it.
    """
    held = {*_STOP_SIGNALS, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        server.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _drain_prefect_workers() -> None:
    """Send the flow's queued logs and events while the temporary server still runs."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)
    EventsWorker.drain_all(timeout=5)


_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _run(flow_name: str, config) -> None:
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    from .config import resolve_tracking_uri
    from .warmup import start_warmup

    with _temporary_server() as server:  # imported before the warm-up starts importing
        module = "fairpca.flows.retrain" if flow_name == "retrain" else "fairpca.flows.audit"
        start_warmup(resolve_tracking_uri(config.tracking_uri), modules=(module,))
        if server is not None:
            _start_server(server)
        if flow_name == "retrain":
            from .retrain import retrain as flow_fn
        else:
            from .audit import fairness_audit as flow_fn
        if config.dask_address is not None:
            from .runners import task_runner_for

            flow_fn = flow_fn.with_options(task_runner=task_runner_for(config.dask_address))
        try:
            result = flow_fn(config)
        except MlflowLoggingError as error:
            _fail("MLflow logging failed", error, code=1)
        except (ValueError, TypeError, OSError) as error:
            _fail("Audit failed", error, code=1)
        _report(result)


def _fail(what: str, error: BaseException | str, code: int = 2) -> NoReturn:
    """One clear line on stderr (no traceback), then exit with ``code``."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    err_console.print(f"[bold red]{what}:[/bold red] {escape(str(text))}")
    raise typer.Exit(code)


def _default(name: str) -> str:
    """The default of an :class:`~fairpca.flows.config.AuditConfig` field, for the help text."""
    from .config import RetrainConfig, Thresholds

    fields = {**RetrainConfig.model_fields, **Thresholds.model_fields}
    info = fields[name]
    value = info.get_default(call_default_factory=True)
    if isinstance(value, list):
        return ",".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
    return str(value)


def _opt(help_text: str, *names: str, field: str | None = None, default: str = "") -> Any:
    """A typer option whose help shows the config field's default (or ``default``)."""
    shown = _default(field) if field is not None else default
    return typer.Option(*names, help=help_text, show_default=shown or False)


# Every option of ``audit`` and ``retrain``, declared once: name -> annotated type.
SHARED_OPTIONS: dict[str, Any] = {
    "dataset": Annotated[str | None, _opt("Dataset: adult, german, bank or compas.")],
    "data": Annotated[Path | None, _opt("User CSV/Parquet file (with --label, --sensitive).")],
    "label": Annotated[str | None, _opt("Label column of --data.")],
    "positive_label": Annotated[
        str | None, _opt("Label value that counts as y=1.", "--positive-label")
    ],
    "sensitive": Annotated[
        list[str] | None,
        _opt("Sensitive column; repeat for several attributes (stacked, Sec. 3.5)."),
    ],
    "keep": Annotated[
        list[str] | None,
        _opt("Column of --data to keep although the screening excludes it; repeatable."),
    ],
    "drop": Annotated[
        list[str] | None, _opt("Column of --data to exclude from the features; repeatable.")
    ],
    "sep": Annotated[
        str | None, _opt("CSV separator of --data.", default="detected from the header")
    ],
    "k": Annotated[
        int | None,
        _opt("Target dimension.", "-k", "--k", default="min(10, the largest the data allow)"),
    ],
    "variants": Annotated[
        str | None,
        _opt(
            "Comma-separated: pca, fair_pca, fair_pca_eo, fair_pca_s, fair_kernel_pca.",
            field="variants",
        ),
    ],
    "lambdas": Annotated[
        str | None, _opt("Comma-separated trade-off lambdas ((i/10)^3).", field="lambdas")
    ],
    "classifiers": Annotated[
        str | None,
        _opt("Comma-separated: logreg, linear_svm, rbf_svc, mlp.", field="classifiers"),
    ],
    "seed": Annotated[int | None, _opt("Seed.", field="seed")],
    "max_dp": Annotated[
        float | None,
        _opt("Max DP difference for champion.", "--max-dp", field="max_dp_difference"),
    ],
    "max_eo": Annotated[
        float | None,
        _opt("Max EO difference for champion.", "--max-eo", field="max_eo_difference"),
    ],
    "min_accuracy": Annotated[
        float | None, _opt("Min accuracy.", "--min-accuracy", field="min_accuracy")
    ],
    "min_group_size": Annotated[
        int | None,
        _opt("Smallest group with per-group metrics logged.", field="min_group_size"),
    ],
    "n_train": Annotated[int | None, _opt("Training rows drawn at random.", field="n_train")],
    "n_validation": Annotated[
        int | None,
        _opt("Validation rows (choice and gate) drawn at random.", field="n_validation"),
    ],
    "n_test": Annotated[
        int | None, _opt("Test rows (reported only) drawn at random.", field="n_test")
    ],
    "gate": Annotated[
        str | None,
        _opt(
            "Gate on the 95% interval bounds (upper_bound) or the point estimates (point).",
            field="gate",
        ),
    ],
    "policy": Annotated[
        str | None,
        _opt(
            "Gate policy: demographic_parity, equal_opportunity, equalized_odds, four_fifths, "
            "or several joined by '+'.",
            field="policy",
        ),
    ],
    "svc_max_train_rows": Annotated[
        int | None, _opt("Rows the RBF SVC trains on, 0 = all.", field="svc_max_train_rows")
    ],
    "config": Annotated[Path | None, _opt("YAML/JSON config file.", "--config")],
    "data_dir": Annotated[
        Path | None, _opt("Data directory for bank/compas.", default="$FAIRPCA_DATA_DIR")
    ],
    "tracking_uri": Annotated[
        str | None,
        _opt("MLflow tracking URI.", default="$MLFLOW_TRACKING_URI or sqlite:///mlflow.db"),
    ],
    "output_dir": Annotated[Path | None, _opt("Local results directory.", field="output_dir")],
    "run_name": Annotated[
        str | None, _opt("Run name (letters, digits, . _ -).", default="<kind>-<source>-<time>")
    ],
    "experiment_name": Annotated[
        str | None, _opt("MLflow experiment name.", field="experiment_name")
    ],
    "model_name": Annotated[
        str | None,
        _opt("Registered model name.", default="fairpca-<source>-<label>-<sensitive attributes>"),
    ],
    "dask_address": Annotated[
        str | None, _opt("Run tasks on Dask: 'local' or a scheduler address tcp://host:8786.")
    ],
}


TrackingOpt = SHARED_OPTIONS["tracking_uri"]


def audit_options(command):
    """Give ``command(**options)`` every option of :data:`SHARED_OPTIONS` (typer reads the
    signature), followed by the command's own keyword options."""
    own = [
        param.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for param in inspect.signature(command, eval_str=True).parameters.values()
        if param.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in SHARED_OPTIONS.items()
    ]
    command.__signature__ = inspect.Signature([*shared, *own])
    command.__annotations__ = {
        **SHARED_OPTIONS,
        **{param.name: param.annotation for param in own},
    }
    return command


def _options(**kwargs) -> dict[str, Any]:
    rename = {"max_dp": "max_dp_difference", "max_eo": "max_eo_difference"}
    options = {rename.get(k, k): v for k, v in kwargs.items()}
    options["variants"] = _split_list(options.get("variants"))
    options["classifiers"] = _split_list(options.get("classifiers"))
    options["lambdas"] = _split_list(options.get("lambdas"), float)
    for key in ("svc_max_train_rows",):
        options[key] = _rows_option(options.get(key))
    return options


def _start(kind: str, options: dict[str, Any]) -> None:
    """Validate the config and the inputs (no server yet), then run the flow."""
    from .config import AuditConfig, RetrainConfig
    from .preflight import PreflightError, check_before_run

    config_file = options.pop("config", None)
    try:
        cfg = build_config(
            _options(**options), config_file, RetrainConfig if kind == "retrain" else AuditConfig
        )
    except ValidationError as error:
        _print_validation_error(error)
        raise typer.Exit(2) from error
    except (ValueError, OSError) as error:
        _fail("Invalid configuration file", str(error))
    try:
        notes = check_before_run(cfg)
    except PreflightError as error:
        _fail("Invalid input (nothing was run)", str(error))
    for note in notes:
        err_console.print(f"[yellow]Warning:[/yellow] {escape(note)}")
    _prefect_defaults()
    _run(kind, cfg)


@app.command()
@audit_options
def audit(**options: Any) -> None:
    """Run a fairness audit and record it in MLflow (moves 'champion' if thresholds are met)."""
    _start("audit", options)


@app.command()
@audit_options
def retrain(
    accuracy_tolerance: Annotated[
        float | None,
        _opt("Allowed accuracy loss vs champion.", field="accuracy_tolerance"),
    ] = None,
    **options: Any,
) -> None:
    """Refit on current data, compare with the champion, promote only if fair and no worse."""
    _start("retrain", {**options, "accuracy_tolerance": accuracy_tolerance})


@app.command()
def relog(
    output_dir: Annotated[Path, typer.Argument(help="A kept audit output directory.")],
    tracking_uri: TrackingOpt = None,
    force: Annotated[
        bool, typer.Option(help="Log again even if it was logged completely before.")
    ] = False,
    promote: Annotated[
        bool,
        typer.Option(
            help="Move the champion alias to the new version if the audit decided to promote "
            "(off by default: the directory's own audit.json is not trusted for that)."
        ),
    ] = False,
) -> None:
    """Log a kept audit output directory to MLflow again (after a tracking outage).

    Nothing in the directory is executed or unpickled: the saved model is logged as files,
    each checked against the SHA-256 manifest the audit wrote.
    """
    from .config import resolve_tracking_uri

    _prefect_defaults()
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    from .relog import relog_output_dir

    try:
        logged = relog_output_dir(output_dir, resolve_tracking_uri(tracking_uri), force, promote)
    except (MlflowLoggingError, OSError, ValueError) as error:
        _fail("Relog failed", str(error), code=1)
    console.print(f"MLflow run id: [bold]{logged['run_id']}[/bold]")
    if logged["model_version"] is not None:
        console.print(f"Registered model version: {logged['model_version']}")
        if not logged["champion_moved"]:
            console.print(_relog_alias_note(logged, promote))


def _relog_alias_note(logged: dict[str, Any], promote: bool) -> str:
    """Why relog left the alias alone, and how to move it."""
    alias, name, version = logged["champion_alias"], logged["model_name"], logged["model_version"]
    why = (
        "the audit decided not to promote" if promote else "relog never moves it without --promote"
    )
    return (
        f"Alias {alias!r} of {name!r} was left alone ({why}). To promote version {version}: "
        f"MlflowClient().set_registered_model_alias({name!r}, {alias!r}, {version!r}), or relog "
        "with --promote --force."
    )


def main() -> None:
    """Console script entry point (``fairpca``)."""
    app()
