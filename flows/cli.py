"""The ``fairpca`` command line: ``fairpca audit``, ``fairpca retrain``, ``fairpca relog``.

Options override the values of ``--config FILE`` (YAML or JSON with the fields of
:class:`flows.config.AuditConfig`); the config is validated before any work starts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
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
        err_console.print(f"  - {where}: {item['msg']}")


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
    from tasks.record import format_interval

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


def _run(flow_name: str, config) -> None:
    from tasks.mlflow_logging import MlflowLoggingError

    from .config import resolve_tracking_uri
    from .warmup import start_warmup

    server = _ephemeral_prefect_server()  # imported before the warm-up thread starts importing
    module = "flows.retrain" if flow_name == "retrain" else "flows.audit"
    start_warmup(resolve_tracking_uri(config.tracking_uri), modules=(module,))
    if server is not None:
        server.start()
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
        err_console.print(f"[bold red]MLflow logging failed:[/bold red] {error}")
        raise typer.Exit(1) from error
    except (ValueError, TypeError, FileNotFoundError) as error:
        err_console.print(f"[bold red]Audit failed:[/bold red] {type(error).__name__}: {error}")
        raise typer.Exit(1) from error
    _report(result)


DatasetOpt = Annotated[
    str | None, typer.Option(help="Dataset: adult, german, bank or compas.", show_default=False)
]
DataOpt = Annotated[
    Path | None, typer.Option(help="User CSV/Parquet file (with --label, --sensitive).")
]
LabelOpt = Annotated[str | None, typer.Option(help="Label column of --data.")]
PositiveOpt = Annotated[
    str | None, typer.Option("--positive-label", help="Label value that counts as y=1.")
]
SensitiveOpt = Annotated[
    list[str] | None,
    typer.Option(help="Sensitive column; repeat for several attributes (stacked, Sec. 3.5)."),
]
KOpt = Annotated[int | None, typer.Option("-k", "--k", help="Target dimension [default: 10].")]
VariantsOpt = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated: pca, fair_pca, fair_pca_eo, fair_pca_s, fair_kernel_pca "
        "[default: pca,fair_pca,fair_pca_s,fair_pca_eo]."
    ),
]
LambdasOpt = Annotated[
    str | None, typer.Option(help="Comma-separated trade-off lambdas [default: (i/10)^3].")
]
ClassifiersOpt = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated: logreg, linear_svm, rbf_svc, mlp "
        "[default: logreg,linear_svm,rbf_svc]."
    ),
]
SeedOpt = Annotated[int | None, typer.Option(help="Seed [default: 0].")]
MaxDpOpt = Annotated[
    float | None, typer.Option("--max-dp", help="Max DP difference for champion [0.05].")
]
MaxEoOpt = Annotated[
    float | None, typer.Option("--max-eo", help="Max EO difference for champion [0.10].")
]
MinAccOpt = Annotated[float | None, typer.Option("--min-accuracy", help="Min accuracy [0].")]
TrainRowsOpt = Annotated[
    int | None, typer.Option(help="Training rows drawn at random [default: 5000].")
]
ValidationRowsOpt = Annotated[
    int | None,
    typer.Option(help="Validation rows (choice and gate) drawn at random [default: 2500]."),
]
TestRowsOpt = Annotated[
    int | None, typer.Option(help="Test rows (reported only) drawn at random [default: 2500].")
]
GateOpt = Annotated[
    str | None,
    typer.Option(
        help="Gate on the 95% interval bounds or the point estimates: "
        "upper_bound or point [default: upper_bound]."
    ),
]
SvcRowsOpt = Annotated[
    int | None, typer.Option(help="Rows the RBF SVC trains on, 0 = all [default: 2000].")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML/JSON config file.")]
DataDirOpt = Annotated[
    Path | None, typer.Option(help="Data directory for bank/compas [$FAIRPCA_DATA_DIR].")
]
TrackingOpt = Annotated[
    str | None,
    typer.Option(help="MLflow tracking URI [$MLFLOW_TRACKING_URI or sqlite:///mlflow.db]."),
]
OutputOpt = Annotated[
    Path | None, typer.Option(help="Local results directory [default: fairpca-output].")
]
ExperimentOpt = Annotated[str | None, typer.Option(help="MLflow experiment name.")]
ModelNameOpt = Annotated[str | None, typer.Option(help="Registered model name [fairpca-<source>].")]
DaskOpt = Annotated[
    str | None,
    typer.Option(help="Run tasks on Dask: 'local' or a scheduler address tcp://host:8786."),
]


def _options(**kwargs) -> dict[str, Any]:
    rename = {"max_dp": "max_dp_difference", "max_eo": "max_eo_difference"}
    options = {rename.get(k, k): v for k, v in kwargs.items()}
    options["variants"] = _split_list(options.get("variants"))
    options["classifiers"] = _split_list(options.get("classifiers"))
    options["lambdas"] = _split_list(options.get("lambdas"), float)
    for key in ("svc_max_train_rows",):
        options[key] = _rows_option(options.get(key))
    return options


@app.command()
def audit(
    dataset: DatasetOpt = None,
    data: DataOpt = None,
    label: LabelOpt = None,
    positive_label: PositiveOpt = None,
    sensitive: SensitiveOpt = None,
    k: KOpt = None,
    variants: VariantsOpt = None,
    lambdas: LambdasOpt = None,
    classifiers: ClassifiersOpt = None,
    seed: SeedOpt = None,
    max_dp: MaxDpOpt = None,
    max_eo: MaxEoOpt = None,
    min_accuracy: MinAccOpt = None,
    n_train: TrainRowsOpt = None,
    n_validation: ValidationRowsOpt = None,
    n_test: TestRowsOpt = None,
    gate: GateOpt = None,
    svc_max_train_rows: SvcRowsOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    tracking_uri: TrackingOpt = None,
    output_dir: OutputOpt = None,
    experiment_name: ExperimentOpt = None,
    model_name: ModelNameOpt = None,
    dask_address: DaskOpt = None,
) -> None:
    """Run a fairness audit and record it in MLflow (moves 'champion' if thresholds are met)."""
    params = dict(locals())
    params.pop("config")
    from .config import AuditConfig

    options = _options(**params)
    try:
        cfg = build_config(options, config, AuditConfig)
    except ValidationError as error:
        _print_validation_error(error)
        raise typer.Exit(2) from error
    _prefect_defaults()
    _run("audit", cfg)


@app.command()
def retrain(
    dataset: DatasetOpt = None,
    data: DataOpt = None,
    label: LabelOpt = None,
    positive_label: PositiveOpt = None,
    sensitive: SensitiveOpt = None,
    k: KOpt = None,
    variants: VariantsOpt = None,
    lambdas: LambdasOpt = None,
    classifiers: ClassifiersOpt = None,
    seed: SeedOpt = None,
    max_dp: MaxDpOpt = None,
    max_eo: MaxEoOpt = None,
    min_accuracy: MinAccOpt = None,
    n_train: TrainRowsOpt = None,
    n_validation: ValidationRowsOpt = None,
    n_test: TestRowsOpt = None,
    gate: GateOpt = None,
    svc_max_train_rows: SvcRowsOpt = None,
    accuracy_tolerance: Annotated[
        float | None, typer.Option(help="Allowed accuracy loss vs champion [0.01].")
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    tracking_uri: TrackingOpt = None,
    output_dir: OutputOpt = None,
    experiment_name: ExperimentOpt = None,
    model_name: ModelNameOpt = None,
    dask_address: DaskOpt = None,
) -> None:
    """Refit on current data, compare with the champion, promote only if fair and no worse."""
    params = dict(locals())
    params.pop("config")
    from .config import RetrainConfig

    options = _options(**params)
    try:
        cfg = build_config(options, config, RetrainConfig)
    except ValidationError as error:
        _print_validation_error(error)
        raise typer.Exit(2) from error
    _prefect_defaults()
    _run("retrain", cfg)


@app.command()
def relog(
    output_dir: Annotated[Path, typer.Argument(help="A kept audit output directory.")],
    tracking_uri: TrackingOpt = None,
    force: Annotated[
        bool, typer.Option(help="Log again even if it was logged completely before.")
    ] = False,
) -> None:
    """Log a kept audit output directory to MLflow again (after a tracking outage)."""
    from .config import resolve_tracking_uri

    _prefect_defaults()
    from tasks.mlflow_logging import MlflowLoggingError

    from .relog import relog_output_dir

    try:
        logged = relog_output_dir(output_dir, resolve_tracking_uri(tracking_uri), force)
    except (MlflowLoggingError, FileNotFoundError, ValueError) as error:
        err_console.print(f"[bold red]Relog failed:[/bold red] {error}")
        raise typer.Exit(1) from error
    console.print(f"MLflow run id: [bold]{logged['run_id']}[/bold]")
    if logged["model_version"] is not None:
        console.print(f"Registered model version: {logged['model_version']}")


def main() -> None:
    """Console script entry point (``fairpca``)."""
    app()
