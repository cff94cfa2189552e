"""The ``fairpca`` command line: ``fairpca audit``, ``fairpca retrain``, ``fairpca relog``.

The options of ``audit`` and ``retrain`` are generated from the config models
(:class:`fairpca.flows.config.AuditConfig`, :class:`~fairpca.flows.config.RetrainConfig`):
one ``--<field-name>`` per field, with the field's type, its description as help and its
default. They override the values of ``--config FILE`` (YAML or JSON, sections as in
``audit.yaml``); the config is validated before any work starts.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from rich.markup import escape

from .config import (
    AuditConfig,
    RetrainConfig,
    TrackingConfig,
    leaf_fields,
    load_config_file,
    mask_credentials,
    nest_flat_keys,
    resolve_tracking_uri,
)
from .console import (
    console,
    err_console,
    fail,
    flag_name,
    print_report,
    print_validation_error,
    relog_alias_note,
    show_logs,
)
from .server import prefect_defaults

app = typer.Typer(
    name="fairpca",
    help="Fairness audits of (fair) PCA representations, orchestrated by Prefect and "
    "recorded in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's help wraps long option names; rich's tables cut them
)


# Flag names kept beside the generated ``--<field-name>`` (the README and scripts use them).
FLAG_ALIASES: dict[str, tuple[str, ...]] = {
    "k": ("-k",),
    "max_dp_difference": ("--max-dp",),
    "max_eo_difference": ("--max-eo",),
}


@dataclass(frozen=True)
class ConfigOption:
    """One command-line option generated from a config field: where the value goes in the
    config (``path``), the typer annotation, and how the text given is read (``comma``)."""

    path: tuple[str, ...]
    annotation: Any
    comma: type | None = None

    @property
    def name(self) -> str:
        return self.path[-1]


def config_options(model: type[BaseModel]) -> list[ConfigOption]:
    """An option for every leaf field of ``model`` (its sections' fields included), with
    the field's type, its description as help and its default shown."""
    return [_option(info, path) for path, info in leaf_fields(model).items()]


def _option(info: FieldInfo, path: tuple[str, ...]) -> ConfigOption:
    kind, comma = _cli_type(info.annotation)
    flags = (flag_name(path[-1]), *FLAG_ALIASES.get(path[-1], ()))
    if kind is bool and info.default:  # a flag that turns the default off
        flags = (f"{flags[0]}/--no-{flags[0][2:]}",)
    default = info.get_default(call_default_factory=True)
    help_text = info.description
    if comma is not None:
        help_text += " Comma-separated."
    elif kind == list[str]:
        help_text += " Repeat the option for several."
    shown = False if default is None or default == [] else _shown(default)
    option = typer.Option(*flags, help=help_text, show_default=shown)
    return ConfigOption(path, Annotated[kind | None, option], comma)


def _cli_type(annotation: Any) -> tuple[Any, type | None]:
    """The command-line type of a field type, and the item type of a comma-separated list
    (lists of choices or numbers; lists of column names repeat the option instead)."""
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    if get_origin(annotation) in (Union, UnionType):
        annotation = args[0]
        args = list(get_args(annotation))
    if get_origin(annotation) is Literal:
        return str, None
    if get_origin(annotation) is list:
        item = args[0]
        if get_origin(item) is Literal:
            return str, str
        return (list[str], None) if item is str else (str, item)
    return annotation, None


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        # ", " lets a long default wrap in an 80-column help instead of being cut
        return ", ".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
    return str(value)


def _comma_list(value: str, cast: type, flag: str) -> list[Any]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        return [cast(item) for item in items]
    except ValueError as error:
        raise typer.BadParameter(
            f"cannot read {value!r} as a comma-separated list", param_hint=flag
        ) from error


def build_config(options: dict[str, Any], config_file: Path | None, model_class):
    """Merge ``--config FILE`` with the options given (name -> value) and validate."""
    values = nest_flat_keys(model_class, load_config_file(config_file) if config_file else {})
    for option in config_options(model_class):
        value = options.get(option.name)
        if value is None or value == []:
            continue
        if option.comma is not None:
            value = _comma_list(value, option.comma, flag_name(option.name))
        *sections, key = option.path
        target = values
        for section in sections:
            nested = target.get(section)
            target[section] = target = dict(nested) if isinstance(nested, dict) else {}
        target[key] = value
    return model_class.model_validate(values)


VERBOSE_OPTION = Annotated[
    bool,
    typer.Option(
        "--verbose",
        help="Also print Prefect's and MLflow's INFO log lines, every candidate on the "
        "validation rows, every reason and warning.",
    ),
]
CONFIG_FILE_OPTION = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="YAML/JSON config file (sections as in audit.yaml); the options given override it.",
    ),
]


def config_command(model: type[BaseModel], kind: str):
    """A command taking ``--config`` and one option per field of ``model`` (typer reads the
    generated signature), which validates them and runs the ``kind`` flow."""

    def command(**options: Any) -> None:
        show_logs(options.pop("verbose"))
        _start(kind, model, options)

    params = [
        inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=option.annotation)
        for option in [ConfigOption(("config",), CONFIG_FILE_OPTION), *config_options(model)]
    ]  # fmt: skip
    params.append(inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, default=False,
                                    annotation=VERBOSE_OPTION))  # fmt: skip
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {param.name: param.annotation for param in params}
    return command


def _run(flow_name: str, config) -> None:
    from fairpca.tasks.mlflow_logging import MlflowLoggingError
    from fairpca.tasks.record import resolved_model_name

    from .server import start_server, temporary_server
    from .tracking import champion_version
    from .warmup import start_warmup

    tracking_uri = resolve_tracking_uri(config.tracking.tracking_uri)
    model_name = (
        resolved_model_name(config.source, config.tracking.model_name)
        if config.tracking.register_model
        else None
    )
    with temporary_server() as server:  # imported before the warm-up starts importing
        module = "fairpca.flows.retrain" if flow_name == "retrain" else "fairpca.flows.audit"
        start_warmup(tracking_uri, modules=(module,))
        if server is not None:
            start_server(server)
        if flow_name == "retrain":
            from .retrain import retrain as flow_fn
        else:
            from .audit import fairness_audit as flow_fn
        before = champion_version(tracking_uri, model_name, config.tracking.champion_alias)
        try:
            result = flow_fn(config)
        except MlflowLoggingError as error:
            _fail("MLflow logging failed", error, code=1)
        except (ValueError, TypeError, OSError) as error:
            _fail("Audit failed", error, code=1)
        print_report(result, before)


_fail = fail


def _start(kind: str, model: type[BaseModel], options: dict[str, Any]) -> None:
    """Validate the config and the inputs (no server yet), then run the flow."""
    from .preflight import PreflightError, check_before_run

    config_file = options.pop("config", None)
    try:
        cfg = build_config(options, config_file, model)
    except ValidationError as error:
        print_validation_error(error, model)
        raise typer.Exit(2) from error
    except (ValueError, OSError) as error:
        _fail("Invalid configuration file", str(error))
    _check_tracking(cfg.tracking.tracking_uri)
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
    from .tracking import TrackingUnreachable, check_tracking_uri

    resolved = resolve_tracking_uri(uri)
    try:
        check_tracking_uri(resolved, mask_credentials(resolved))
    except TrackingUnreachable as error:
        _fail("MLflow is not reachable (nothing was run)", str(error))


app.command(
    "audit",
    help="Run a fairness audit and record it in MLflow (moves 'champion' if thresholds are met).",
)(config_command(AuditConfig, "audit"))
app.command(
    "retrain",
    help="Refit on current data, compare with the champion, promote only if fair and no worse.",
)(config_command(RetrainConfig, "retrain"))

TrackingOpt = Annotated[
    str | None,
    typer.Option(help=TrackingConfig.model_fields["tracking_uri"].description),
]


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
    verbose: VERBOSE_OPTION = False,
) -> None:
    """Log a kept audit output directory to MLflow again (after a tracking outage).

    Nothing in the directory is executed or unpickled: the saved model is logged as files,
    each checked against the SHA-256 manifest the audit wrote.
    """
    show_logs(verbose)
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
