"""The ``fairpca`` command line: ``fairpca audit``, ``fairpca retrain``, ``fairpca relog``.

Options override the values of ``--config FILE`` (YAML or JSON with the fields of
:class:`fairpca.flows.config.AuditConfig`); the config is validated before any work starts.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from .console import (
    console,
    err_console,
    fail,
    print_report,
    print_validation_error,
    relog_alias_note,
)
from .server import prefect_defaults

app = typer.Typer(
    name="fairpca",
    help="Fairness audits of (fair) PCA representations, orchestrated by Prefect and "
    "recorded in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


def _run(flow_name: str, config) -> None:
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    from .config import resolve_tracking_uri
    from .server import start_server, temporary_server
    from .tracking import champion_version
    from .warmup import start_warmup

    tracking_uri = resolve_tracking_uri(config.tracking_uri)
    model_name = config.resolved_model_name if config.register_model else None
    with temporary_server() as server:  # imported before the warm-up starts importing
        module = "fairpca.flows.retrain" if flow_name == "retrain" else "fairpca.flows.audit"
        start_warmup(tracking_uri, modules=(module,))
        if server is not None:
            start_server(server)
        if flow_name == "retrain":
            from .retrain import retrain as flow_fn
        else:
            from .audit import fairness_audit as flow_fn
        before = champion_version(tracking_uri, model_name, config.champion_alias)
        try:
            result = flow_fn(config)
        except MlflowLoggingError as error:
            _fail("MLflow logging failed", error, code=1)
        except (ValueError, TypeError, OSError) as error:
            _fail("Audit failed", error, code=1)
        print_report(result, before)


_fail = fail


def _default(name: str) -> str:
    """The default of an :class:`~fairpca.flows.config.AuditConfig` field, for the help text."""
    from .config import RetrainConfig, Thresholds

    fields = {**RetrainConfig.model_fields, **Thresholds.model_fields}
    info = fields[name]
    value = info.get_default(call_default_factory=True)
    if isinstance(value, list):
        # ", " lets a long default wrap in an 80-column help instead of being cut
        return ", ".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
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
    "allow_small_groups": Annotated[
        bool,
        _opt(
            "Allow a --min-group-size below the floor of 10 (small groups' rates are then "
            "published: do so only for data that may be disclosed).",
            "--allow-small-groups",
            default="off",
        ),
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
        _opt(
            "Registered model name, e.g. fairpca-adult-income_gt_50k-sex.",
            default="derived from source, label and sensitive attributes",
        ),
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
        print_validation_error(error, RetrainConfig if kind == "retrain" else AuditConfig)
        raise typer.Exit(2) from error
    except (ValueError, OSError) as error:
        _fail("Invalid configuration file", str(error))
    _check_tracking(cfg.tracking_uri)
    try:
        notes = check_before_run(cfg)
    except PreflightError as error:
        _fail("Invalid input (nothing was run)", str(error))
    for note in notes:
        err_console.print(f"[yellow]Warning:[/yellow] {escape(note)}")
    prefect_defaults()
    _run(kind, cfg)


def _check_tracking(uri: str | None) -> None:
    """The tracking URI takes an audit (seconds), before any server starts."""
    from .config import mask_credentials, resolve_tracking_uri
    from .tracking import TrackingUnreachable, check_tracking_uri

    resolved = resolve_tracking_uri(uri)
    try:
        check_tracking_uri(resolved, mask_credentials(resolved))
    except TrackingUnreachable as error:
        _fail("MLflow is not reachable (nothing was run)", str(error))


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

    prefect_defaults()
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    from .relog import relog_output_dir

    _check_tracking(tracking_uri)
    try:
        logged = relog_output_dir(output_dir, resolve_tracking_uri(tracking_uri), force, promote)
    except (MlflowLoggingError, OSError, ValueError) as error:
        _fail("Relog failed", str(error), code=1)
    console.print(f"MLflow run id: [bold]{logged['run_id']}[/bold]")
    if logged["model_version"] is not None:
        console.print(f"Registered model version: {logged['model_version']}")
        if not logged["champion_moved"]:
            console.print(escape(relog_alias_note(logged, promote)))


gate_app = typer.Typer(
    help="Fairness gate on the MLflow Model Registry (webhook receiver, webhook).",
    no_args_is_help=True,
)
app.add_typer(gate_app, name="gate")


@gate_app.command("serve")
def gate_serve(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    policy_dir: Annotated[
        Path | None,
        typer.Option(help="Folder of policy files.", show_default="$FAIRPCA_GATE_POLICY_DIR"),
    ] = None,
    queue: Annotated[Path, typer.Option(help="SQLite file of the event queue.")] = Path(
        "fairpca-gate-queue.db"
    ),
    certfile: Annotated[Path | None, typer.Option(help="TLS certificate (serves HTTPS).")] = None,
    keyfile: Annotated[Path | None, typer.Option(help="TLS private key.")] = None,
) -> None:
    """Receive signed MLflow webhooks ($FAIRPCA_WEBHOOK_SECRET) and start gate runs."""
    from .gate import PolicyError
    from .gate_server import serve

    if (certfile is None) != (keyfile is None):
        _fail("Invalid options", "give both --certfile and --keyfile, or neither")
    try:
        serve(
            host=host,
            port=port,
            policy_dir=policy_dir and str(policy_dir),
            queue_path=str(queue),
            certfile=certfile and str(certfile),
            keyfile=keyfile and str(keyfile),
        )
    except (PolicyError, ValueError) as error:
        _fail("Cannot start the gate receiver", str(error))


@gate_app.command("register")
def gate_register(
    model: Annotated[list[str], typer.Option(help="Watched registered model; repeatable.")],
    url: Annotated[str, typer.Option(help="Receiver URL, e.g. https://gate.example:8765/webhook.")],
    tracking_uri: TrackingOpt = None,
) -> None:
    """Create or update the MLflow webhook of the gate (idempotent)."""
    from mlflow.exceptions import MlflowException

    from fairpca.tasks.mlflow_store import mlflow_client

    from .config import mask_credentials, resolve_tracking_uri
    from .gate_server import register_webhook, secret_from_env

    try:
        secret = secret_from_env()
        uri = resolve_tracking_uri(tracking_uri)
        client = mlflow_client(uri)
        action, webhook_id = register_webhook(client, url=url, models=model, secret=secret)
    except (ValueError, MlflowException) as error:
        _fail("Webhook not registered", str(error))
    console.print(f"Webhook {webhook_id} {action} on {mask_credentials(uri)} -> {url}")


def main() -> None:
    """Console script entry point (``fairpca``)."""
    app()
