"""The ``fairpca`` command line: ``fairpca audit``, ``fairpca retrain``, ``fairpca relog``,
``fairpca gate ...``, on `cyclopts <https://cyclopts.readthedocs.io>`_.

The options of ``audit`` and ``retrain`` come from the config models
(:class:`fairpca.flows.config.AuditConfig`, :class:`~fairpca.flows.config.RetrainConfig`):
one ``--<field-name>`` per field, with the field's type, its description as help and its
default, shown in ``--help`` under its config section (:data:`HELP_SECTIONS`), the options a
first audit needs (:data:`FIRST_OPTIONS`) at the top of theirs. An option not given stays
unset, so the values of ``--config FILE`` (YAML or JSON, sections as in ``audit.yaml``) hold
unless an option overrides them; the config is validated once, before any work starts.
"""

from __future__ import annotations

import difflib
import inspect
import math
import os
import sys
import time
from functools import partial
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from cyclopts import App, Group, Parameter
from cyclopts.exceptions import CycloptsError, UnknownOptionError, UnusedCliTokensError
from cyclopts.help import DefaultFormatter
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from .config import (
    AuditConfig,
    RetrainConfig,
    leaf_fields,
    load_config_file,
    mask_credentials,
    nest_flat_keys,
    resolve_tracking_uri,
)
from .console import (
    console,
    err_console,
    escape,
    fail,
    flag_name,
    labelled,
    print_message,
    print_report,
    print_validation_error,
    relog_alias_note,
    show_logs,
    stage_progress,
)


def _usage_error(error: CycloptsError) -> str:
    """A command line that cannot be read, as cyclopts prints it: one line saying why (an
    unknown option with the close ones), one saying where the help is; exit code 2."""
    message = str(error).strip()
    chain = tuple(error.command_chain or ())
    if isinstance(error, UnknownOptionError):
        given = error.token.keyword or error.token.value
        names = [name for argument in error.argument_collection for name in argument.names]
        close = difflib.get_close_matches(given, names, n=3, cutoff=0.6)
        message = f"No such option: {given}" + (f" (Possible options: {', '.join(close)})"
                                                 if close else "")  # fmt: skip
    elif isinstance(error, UnusedCliTokensError):
        extra = " ".join(error.unused_tokens or ())
        in_group = chain in {(), ("gate",)}  # the commands that only hold commands
        message = f"No such command: {extra}" if in_group else f"Unexpected arguments: {extra}"
    command = " ".join(["fairpca", *chain])
    return (f"[bold red]Error:[/bold red] {escape(message)}\n"
            + escape(f"Try '{command} --help' for help."))  # fmt: skip


def _help_columns(console, options, entries) -> tuple:
    """The option and description columns of a ``--help`` panel (cyclopts' own, with the
    option column as wide as the longest option name, so that no name is broken)."""
    from cyclopts.help import ColumnSpec, DescriptionRenderer, NameRenderer

    words = [word for entry in entries for label in entry.display_labels_with_metavar
             for word in label.split()]  # fmt: skip
    width = max([math.ceil(console.width * 0.35), *map(len, words)])
    return (
        ColumnSpec(renderer=NameRenderer(max_width=width), style="cyclopts.name", max_width=width),
        ColumnSpec(renderer=DescriptionRenderer(), overflow="fold"),
    )


app = App(
    name="fairpca",
    help="Fairness audits of (fair) PCA representations, orchestrated by Prefect and "
    "recorded in MLflow.",
    help_format="plaintext",
    help_flags=("--help",),
    version_flags=(),
    error_formatter=_usage_error,
    help_formatter=DefaultFormatter(column_specs=_help_columns),
)


def _help_alone(group: App) -> None:
    """``fairpca`` or ``fairpca gate`` alone: its help, and exit code 2 (no command was run)."""
    group.help_print([])
    raise SystemExit(2)


app.default(partial(_help_alone, app))


# The panels of ``--help``, in order, and the config sections each shows; the fields at the
# top of the config go under "Run".
HELP_SECTIONS: dict[str, tuple[str, ...]] = {
    "Data": ("source", "split"),
    "Search": ("representation", "evaluation"),
    "Policy and deployment": ("selection", "promotion"),
    "Registry": ("tracking",),
    "Output": ("output",),
    "Run": ("",),
}
PANELS = {
    section: Group(title, sort_key=order)
    for order, (title, shown) in enumerate(HELP_SECTIONS.items())
    for section in shown
}
# The options a first audit needs: shown first in their panels.
FIRST_OPTIONS = (
    "dataset", "data", "label", "sensitive", "k", "variants", "classifiers", "policy",
    "tracking_uri", "output_dir",
)  # fmt: skip
# Flag names kept beside the generated ``--<field-name>`` (the README and scripts use them).
FLAG_ALIASES: dict[str, tuple[str, ...]] = {
    "k": ("-k",),
    "max_dp_difference": ("--max-dp",),
    "max_eo_difference": ("--max-eo",),
}


def config_parameters(model: type[BaseModel]) -> list[inspect.Parameter]:
    """A keyword parameter for every leaf field of ``model`` (its sections' fields included),
    annotated for cyclopts, default unset: in panel order, the first options first."""
    fields = leaf_fields(model)
    panel = {path: PANELS[path[0] if len(path) > 1 else ""] for path in fields}
    order = sorted(fields, key=lambda path: (panel[path].sort_key, path[-1] not in FIRST_OPTIONS))
    return [_parameter(path[-1], fields[path], panel[path]) for path in order]


def _parameter(name: str, info: FieldInfo, group: Group) -> inspect.Parameter:
    kind, comma = _cli_type(info.annotation)
    default = info.get_default(call_default_factory=True)
    help_text = " ".join((info.description or "").split())  # a field's docstring: one paragraph
    if comma is not None:
        help_text += " Comma-separated."
    elif kind == list[str]:
        help_text += " Repeat the option for several."
    if default is not None and default != []:
        help_text += f"  [default: {_shown(default)}]"
    spec = Parameter(
        name=(flag_name(name), *FLAG_ALIASES.get(name, ())),
        help=help_text,
        group=group,
        show_default=False,
        negative=None if kind is bool and default else (),  # only a flag on by default
        converter=None if comma is None else partial(_comma_list, comma),
        metavar=None if comma is None else f"{comma.__name__.upper()},...",
        allow_leading_hyphen=True,  # a value such as a column named "-x", as before
    )
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[kind | None, spec])  # fmt: skip


def _cli_type(annotation: Any) -> tuple[Any, type | None]:
    """The command-line type of a field type, and the item type of a comma-separated list
    (lists of choices or numbers; lists of column names repeat the option instead). Choices
    are read as text: the config's validation names the allowed ones."""
    if get_origin(annotation) in (Union, UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) is Literal:
        return str, None
    if get_origin(annotation) is not list:
        return annotation, None
    item = get_args(annotation)[0]
    if item is str:
        return list[str], None
    item = str if get_origin(item) is Literal else item
    return list[item], item


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        # ", " lets a long default wrap in an 80-column help instead of being cut
        return ", ".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
    return str(value)


def _comma_list(cast: type, type_: Any, tokens: list[Any]) -> list[Any]:
    """The items of each comma-separated value given (cyclopts' converter)."""
    items = [item.strip() for token in tokens for item in token.value.split(",")]
    try:
        return [cast(item) for item in items if item]
    except ValueError as error:
        given = ",".join(token.value for token in tokens)
        raise ValueError(f"cannot read {given!r} as a comma-separated list") from error


def build_config(options: dict[str, Any], config_file: Path | None, model_class):
    """Merge ``--config FILE`` with the options given (name -> value, None: not given) and
    validate."""
    values = nest_flat_keys(model_class, load_config_file(config_file) if config_file else {})
    for *sections, key in leaf_fields(model_class):
        value = options.get(key)
        if value is None:
            continue
        target = values
        for section in sections:
            nested = target.get(section)
            target[section] = target = dict(nested) if isinstance(nested, dict) else {}
        target[key] = value
    return model_class.model_validate(values)


VERBOSE_HELP = (
    "Also print Prefect's and MLflow's INFO log lines, every candidate on the validation "
    "rows, every reason and warning."
)
VERBOSE_OPTION = Annotated[
    bool,
    Parameter(name="--verbose", negative=(), help=VERBOSE_HELP, group=PANELS[""],
              show_default=False),
]  # fmt: skip
CONFIG_FILE_OPTION = Annotated[
    Path | None,
    Parameter(
        name="--config",
        help="YAML/JSON config file (sections as in audit.yaml); the options given override it.",
        group=PANELS[""],
    ),
]


def config_command(model: type[BaseModel], kind: str):
    """A command taking ``--config``, one option per field of ``model`` (cyclopts reads the
    generated signature) and ``--verbose``, which validates them and runs the ``kind``
    flow."""

    def start(**options: Any) -> None:
        """Validate the config, the tracking URI and the inputs, then run the flow."""
        from fairpca.tasks.trust import SEAL_FILE

        from . import runtime

        show_logs(options.pop("verbose", False))  # cyclopts passes the options given
        config_file = options.pop("config", None)
        try:
            cfg = build_config(options, config_file, model)
        except ValidationError as error:
            print_validation_error(error, model)
            raise SystemExit(2) from error
        except (ValueError, OSError) as error:
            fail("Invalid configuration file", str(error))
        tracking_uri = _check_tracking(cfg.tracking.tracking_uri)
        # where the results are, and in what state (said on a stop signal)
        output_dir = cfg.output.output_dir.resolve()
        prefix = cfg.output.run_name or f"{kind}-"
        results = partial(runtime.describe_output, output_dir, prefix, time.time(), SEAL_FILE)
        with runtime.Command(kind, results) as command:
            command.run(_checked_run, command, kind, cfg, tracking_uri)

    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("config", keyword, default=None, annotation=CONFIG_FILE_OPTION),
        *config_parameters(model),
        inspect.Parameter("verbose", keyword, default=False, annotation=VERBOSE_OPTION),
    ]
    start.__signature__ = inspect.Signature(params)
    start.__annotations__ = {param.name: param.annotation for param in params}
    return start


def _checked_run(command, kind: str, config, tracking_uri: str) -> None:
    """The command's work, off the main thread: the temporary Prefect server boots (a
    process of its own, 5-10 s) while the inputs are checked (one message on an error,
    before any work; the server is stopped with the command), the flow is imported and a
    new local store is created; then the flow, on the data the check loaded and split."""
    command.start_prefect_server()  # before anything imports Prefect here
    from fairpca.tasks.data import handed_over
    from fairpca.tasks.mlflow_logging import MlflowLoggingError

    from . import runtime
    from .preflight import PreflightError, check_before_run

    command.phase = "while the inputs were checked (nothing was written)"
    try:
        notes, split = check_before_run(config)
    except PreflightError as error:
        fail("Invalid input (nothing was run)", str(error))
    for note in notes:
        print_message(err_console, note, head="[yellow]Warning:[/yellow] ")
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
        with handed_over(split, config):  # the flow reads the data no second time
            del split  # held until the flow takes it, then by the flow alone
            with stage_progress(f"fairpca {kind}"):  # a spinner on a terminal only
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


for order, (kind, model, text) in enumerate([
    ("audit", AuditConfig, "Run a fairness audit and record it in MLflow (moves 'champion' if "
     "thresholds are met)."),
    ("retrain", RetrainConfig, "Refit on current data, compare with the champion, promote "
     "only if fair and no worse."),
], start=1):  # fmt: skip
    app.command(config_command(model, kind), name=kind, help=text, sort_key=order)


def relog(
    output_dir: Path,
    /,
    *,
    tracking_uri: str | None = None,
    force: bool = False,
    promote: bool = False,
    verbose: Annotated[bool, Parameter(negative=(), help=VERBOSE_HELP, show_default=False)] = False,
) -> None:
    """Log a kept audit output directory to MLflow again (after a tracking outage).

    Nothing in the directory is executed or unpickled: the saved model is logged as files,
    each checked against the SHA-256 manifest the audit wrote.

    Parameters
    ----------
    output_dir
        A kept audit output directory.
    tracking_uri
        MLflow tracking URI; default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db.
    force
        Log again even if it was logged completely before.
    promote
        Move the champion alias to the new version if the audit decided to promote (off by
        default: the directory's own audit.json is not trusted for that).
    """
    show_logs(verbose)
    from fairpca.tasks.decision import OUTCOMES

    from . import runtime

    uri = _check_tracking(tracking_uri)
    kept = f"the results in {output_dir} are kept: run `fairpca relog {output_dir}` again"
    with runtime.Command("relog", lambda: kept) as command:
        logged = command.run(_relog, command, output_dir, uri, force, promote)
    shown = mask_credentials(uri)
    labelled("Logged to:", shown)
    console.print(f"MLflow run id: [bold]{logged['run_id']}[/bold]")
    console.print(f"Decision: {OUTCOMES[logged['decision']]}", markup=False)  # the run's tag
    if logged["model_version"] is not None:
        console.print(f"Registered model version: {logged['model_version']}")
        alias = f"{logged['champion_alias']!r} of {logged['model_name']!r}"
        if logged["champion_moved"]:
            console.print(escape(f"Alias {alias} now on version {logged['model_version']}."))
        else:
            print_message(console, relog_alias_note(logged, promote, shown))


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


gate_app = App(
    name="gate",
    help="Fairness gate on the MLflow Model Registry (webhook receiver, webhook, reconciler, "
    "signing key).",
    help_format="md",
    sort_key=4,
)

gate_app.default(partial(_help_alone, gate_app))


def gate_serve(
    *,
    port: int = 8765,
    host: str = "127.0.0.1",
    policy_dir: Path | None = None,
    queue: Path = Path("fairpca-gate-queue.db"),
    certfile: Path | None = None,
    keyfile: Path | None = None,
) -> None:
    """Receive signed MLflow webhooks ($FAIRPCA_WEBHOOK_SECRET) and start gate runs.

    Parameters
    ----------
    port
        Port to listen on.
    host
        Address to listen on.
    policy_dir
        Folder of policy files.  [default: $FAIRPCA_GATE_POLICY_DIR]
    queue
        SQLite file of the event queue.
    certfile
        TLS certificate (serves HTTPS).
    keyfile
        TLS private key.
    """
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


def gate_register(
    *,
    model: Annotated[list[str], Parameter(negative=())],
    url: str,
    tracking_uri: str | None = None,
) -> None:
    """Create or update the MLflow webhook of the gate (idempotent).

    Parameters
    ----------
    model
        Watched registered model; repeatable.
    url
        Receiver URL, e.g. https://gate.example:8765/webhook.
    tracking_uri
        MLflow tracking URI; default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db.
    """
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


def gate_reconcile(*, policy_dir: Path | None = None, tracking_uri: str | None = None) -> None:
    """Check every protected alias of every watched model against the gate's signed
    attestations: a holder without a verified pass loses it (one line per change).

    Parameters
    ----------
    policy_dir
        Folder of policy files.  [default: $FAIRPCA_GATE_POLICY_DIR]
    tracking_uri
        MLflow tracking URI; default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db.
    """
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


def gate_keygen() -> None:
    """Create the gate's signing key (mode 0600; $FAIRPCA_GATE_KEY_FILE, else
    ~/.config/fairpca/gate.key) unless it exists, and print its public key: run it where the
    gate's worker runs; scorers and reconcilers elsewhere set $FAIRPCA_GATE_PUBLIC_KEY."""
    from fairpca.tasks import trust

    try:
        if os.environ.get(trust.GATE_KEY_ENV):
            where = f"the gate key comes from ${trust.GATE_KEY_ENV}"
        else:
            path, created = trust.create_gate_key()
            where = f"{'created' if created else 'kept the existing'} gate key {path}"
        public = trust.public_key_hex(trust.gate_signing_key().public_key())
    except (trust.AttestationError, OSError) as error:
        fail("No gate key", str(error))
    err_console.print(f"{escape(where)}; its public key ({trust.GATE_PUBLIC_KEY_ENV}):")
    console.print(public)


# their docstrings are their help: Markdown reflows a paragraph to the terminal's width
app.command(relog, name="relog", help_format="md", sort_key=3)
app.command(gate_app)
for order, function in enumerate([gate_serve, gate_register, gate_reconcile, gate_keygen]):
    gate_app.command(function, name=function.__name__.removeprefix("gate_"), sort_key=order)


def main() -> None:
    """Console script entry point (``fairpca``)."""
    app(sys.argv[1:])
