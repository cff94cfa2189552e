"""The ``fairpca`` command line: ``fairpca audit``, ``fairpca retrain``, ``fairpca relog``.

The options of ``audit`` and ``retrain`` are generated from the config models
(:class:`fairpca.flows.config.AuditConfig`, :class:`~fairpca.flows.config.RetrainConfig`):
one ``--<field-name>`` per field, with the field's type, its description as help and its
default. They override the values of ``--config FILE`` (YAML or JSON, sections as in
``audit.yaml``); the config is validated before any work starts.
"""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass
from functools import partial
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
    labelled,
    print_report,
    print_validation_error,
    relog_alias_note,
    show_logs,
)

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
    if default is not None and default != []:  # click would wrap a shown text in "( )"
        help_text += f"  [default: {_shown(default)}]"
    option = typer.Option(*flags, help=help_text, show_default=False)
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
        *sections, key = option.path
        value = options.get(key)
        if value is None or value == []:
            continue
        if option.comma is not None:
            value = _comma_list(value, option.comma, flag_name(key))
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
        inspect.Parameter(option.path[-1], inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=option.annotation)
        for option in [ConfigOption(("config",), CONFIG_FILE_OPTION), *config_options(model)]
    ]  # fmt: skip
    params.append(inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, default=False,
                                    annotation=VERBOSE_OPTION))  # fmt: skip
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {param.name: param.annotation for param in params}
    return command


def _start(kind: str, model: type[BaseModel], options: dict[str, Any]) -> None:
    """Validate the config, the tracking URI and the inputs, then run the flow."""
    from fairpca.tasks.trust import SEAL_FILE

    from . import runtime

    config_file = options.pop("config", None)
    try:
        cfg = build_config(options, config_file, model)
    except ValidationError as error:
        print_validation_error(error, model)
        raise typer.Exit(2) from error
    except (ValueError, OSError) as error:
        fail("Invalid configuration file", str(error))
    tracking_uri = _check_tracking(cfg.tracking.tracking_uri)
    # where the results are, and in what state (said on a stop signal)
    output_dir = Path(cfg.output.output_dir).resolve()
    prefix = cfg.output.run_name or f"{kind}-"
    results = partial(runtime.describe_output, output_dir, prefix, time.time(), SEAL_FILE)
    with runtime.Command(kind, results) as command:
        command.run(_checked_run, command, kind, cfg, tracking_uri)


def _checked_run(command, kind: str, config, tracking_uri: str) -> None:
    """The command's work, off the main thread: the temporary Prefect server boots (a
    process of its own, 5-10 s) while the inputs are checked (one message on an error,
    before any work; the server is stopped with the command), the flow is imported and a
    new local store is created; then the flow, on the data the check loaded and split."""
    command.start_prefect_server()  # before anything imports Prefect here
    from .preflight import PreflightError, check_before_run

    command.phase = "while the inputs were checked (nothing was written)"
    try:
        notes, split = check_before_run(config)
    except PreflightError as error:
        fail("Invalid input (nothing was run)", str(error))
    for note in notes:
        err_console.print(f"[yellow]Warning:[/yellow] {escape(note)}")
    from fairpca.tasks.data import handed_over

    with handed_over(split, config):  # the flow reads the data no second time
        del split  # held until the flow takes it, then by the flow alone
        _run_flow(command, kind, config, tracking_uri)


def _run_flow(command, kind: str, config, tracking_uri: str) -> None:
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    from . import runtime

    command.phase = "while the flow was loaded (nothing was written)"
    if kind == "retrain":
        from .retrain import retrain as flow_fn
    else:
        from .audit import fairness_audit as flow_fn
    try:
        runtime.create_local_store(tracking_uri)
    except ValueError as error:  # a broken local store, named with its fix
        fail("MLflow store unusable (nothing was run)", str(error), code=1)
    _use_prefect_server(command)
    command.phase = f"during the {kind} flow"
    try:
        result = flow_fn(config)
    except MlflowLoggingError as error:
        fail("MLflow logging failed", error, code=1)
    except (ValueError, TypeError, OSError) as error:
        fail("Audit failed", error, code=1)
    print_report(result)


def _use_prefect_server(command) -> None:
    from .runtime import CommandError

    try:
        command.use_prefect_server()
    except CommandError as error:
        fail("Prefect is not available (nothing was run)", str(error), code=1)


def _check_tracking(uri: str | None) -> str:
    """The tracking URI (resolved: returned) takes an audit (seconds), before any server
    starts."""
    from .runtime import TrackingUnreachable, check_tracking_uri

    resolved = resolve_tracking_uri(uri)
    try:
        check_tracking_uri(resolved, mask_credentials(resolved))
    except TrackingUnreachable as error:
        fail("MLflow is not reachable (nothing was run)", str(error))
    return resolved


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
PolicyDirOpt = Annotated[
    Path | None,
    typer.Option(help="Folder of policy files.", show_default="$FAIRPCA_GATE_POLICY_DIR"),
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
    from . import runtime

    uri = _check_tracking(tracking_uri)
    kept = f"the results in {output_dir} are kept: run `fairpca relog {output_dir}` again"
    with runtime.Command("relog", lambda: kept) as command:
        logged = command.run(_relog, command, output_dir, uri, force, promote)
    shown = mask_credentials(uri)
    labelled("Logged to:", shown)
    console.print(f"MLflow run id: [bold]{logged['run_id']}[/bold]")
    if logged["model_version"] is not None:
        console.print(f"Registered model version: {logged['model_version']}")
        alias = f"{logged['champion_alias']!r} of {logged['model_name']!r}"
        if logged["champion_moved"]:
            console.print(escape(f"Alias {alias} now on version {logged['model_version']}."))
        else:
            console.print(escape(relog_alias_note(logged, promote, shown)))


def _relog(command, output_dir: Path, tracking_uri: str, force: bool, promote: bool):
    """Check the directory (one message, before the server is waited for), then log it."""
    from fairpca.tasks.mlflow_logging import MlflowLoggingError, check_relog_dir, read_audit

    from .relog import relog_output_dir

    command.phase = "while the directory was checked"
    try:  # the checks relog_output_dir makes first, before the server is waited for
        if not (output_dir / "audit.json").is_file():
            read_audit(output_dir)  # the message for a directory that is no audit's
        check_relog_dir(output_dir, contents=False)  # the contents: as the flow copies them
    except (OSError, ValueError) as error:
        fail("Relog failed", str(error), code=1)
    command.start_prefect_server()
    _use_prefect_server(command)
    command.phase = "while the directory was logged"
    try:
        return relog_output_dir(output_dir, tracking_uri, force, promote)
    except (MlflowLoggingError, OSError, ValueError) as error:
        fail("Relog failed", str(error), code=1)


gate_app = typer.Typer(
    help="Fairness gate on the MLflow Model Registry (webhook receiver, webhook, reconciler, "
    "signing key).",
    no_args_is_help=True,
)
app.add_typer(gate_app, name="gate")


@gate_app.command("serve")
def gate_serve(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    policy_dir: PolicyDirOpt = None,
    queue: Annotated[Path, typer.Option(help="SQLite file of the event queue.")] = Path(
        "fairpca-gate-queue.db"
    ),
    certfile: Annotated[Path | None, typer.Option(help="TLS certificate (serves HTTPS).")] = None,
    keyfile: Annotated[Path | None, typer.Option(help="TLS private key.")] = None,
) -> None:
    """Receive signed MLflow webhooks ($FAIRPCA_WEBHOOK_SECRET) and start gate runs."""
    from . import runtime

    if (certfile is None) != (keyfile is None):
        fail("Invalid options", "give both --certfile and --keyfile, or neither")
    options = dict(host=host, port=port, policy_dir=policy_dir and str(policy_dir),
                   queue_path=str(queue), certfile=certfile and str(certfile),
                   keyfile=keyfile and str(keyfile))  # fmt: skip
    with runtime.Command("gate serve") as command:  # a stop signal ends its Prefect server too
        command.run(_serve_gate, command, options)


def _serve_gate(command, options: dict[str, Any]) -> None:
    from .gate import PolicyError
    from .gate_server import serve

    def prefect_then_listen() -> None:
        command.start_prefect_server()
        _use_prefect_server(command)
        command.phase = "while it received webhooks"

    command.phase = "while the receiver started"
    try:
        serve(prefect_then_listen, **options)
    except (PolicyError, ValueError) as error:
        fail("Cannot start the gate receiver", str(error))


@gate_app.command("register")
def gate_register(
    model: Annotated[list[str], typer.Option(help="Watched registered model; repeatable.")],
    url: Annotated[str, typer.Option(help="Receiver URL, e.g. https://gate.example:8765/webhook.")],
    tracking_uri: TrackingOpt = None,
) -> None:
    """Create or update the MLflow webhook of the gate (idempotent)."""
    from .gate_server import register_webhook, secret_from_env

    try:
        secret = secret_from_env()
    except ValueError as error:
        fail("Webhook not registered", str(error))
    uri = _check_tracking(tracking_uri)
    from mlflow.exceptions import MlflowException

    from fairpca.tasks.mlflow_store import mlflow_client

    try:
        client = mlflow_client(uri)
        action, webhook_id = register_webhook(client, url=url, models=model, secret=secret)
    except (ValueError, OSError, MlflowException) as error:
        fail("Webhook not registered", str(error))
    console.print(f"Webhook {webhook_id} {action} on {mask_credentials(uri)} -> {url}")


@gate_app.command("reconcile")
def gate_reconcile(
    policy_dir: PolicyDirOpt = None,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Check every protected alias of every watched model against the gate's signed
    attestations: a holder without a verified pass loses it (one line per change)."""
    from . import runtime
    from .gate import judging_now

    # a stop signal kills the evaluation child, removes its folder and names the version
    with runtime.Command("gate reconcile", doing=judging_now) as command:
        command.phase = "while the aliases were reconciled"
        command.run(_reconcile_gate, policy_dir, tracking_uri)


def _reconcile_gate(policy_dir: Path | None, tracking_uri: str | None) -> None:
    from mlflow.exceptions import MlflowException

    from fairpca.tasks.mlflow_store import mlflow_client
    from fairpca.tasks.trust import AttestationError, gate_public_key

    from .gate import PolicyError, load_policies, reconcile_aliases

    try:
        policies = load_policies(policy_dir and str(policy_dir))
        key = gate_public_key()
    except (PolicyError, AttestationError) as error:
        fail("Nothing reconciled", str(error))
    uri = _check_tracking(tracking_uri)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one line a change
    try:
        checked, changes = reconcile_aliases(mlflow_client(uri), uri, policies, key)
    except (MlflowException, OSError) as error:
        fail("Reconcile stopped", str(error), code=1)
    for line in changes:
        console.print(escape(line), soft_wrap=True)
    console.print(f"{checked} protected alias(es) checked, {len(changes)} changed.")


@gate_app.command("keygen")
def gate_keygen() -> None:
    """Create the gate's signing key (mode 0600; $FAIRPCA_GATE_KEY_FILE, else
    ~/.config/fairpca/gate.key) unless it exists, and print its public key: run it where the
    gate's worker runs; scorers and reconcilers elsewhere set $FAIRPCA_GATE_PUBLIC_KEY."""
    from fairpca.tasks.trust import (
        GATE_KEY_ENV,
        GATE_PUBLIC_KEY_ENV,
        AttestationError,
        create_gate_key,
        gate_signing_key,
        public_key_hex,
    )

    try:
        if os.environ.get(GATE_KEY_ENV):
            where = f"the gate key comes from ${GATE_KEY_ENV}"
        else:
            path, created = create_gate_key()
            where = f"{'created' if created else 'kept the existing'} gate key {path}"
        public = public_key_hex(gate_signing_key().public_key())
    except (AttestationError, OSError) as error:
        fail("No gate key", str(error))
    err_console.print(f"{escape(where)}; its public key ({GATE_PUBLIC_KEY_ENV}):")
    console.print(public)


def main() -> None:
    """Console script entry point (``fairpca``)."""
    app()
