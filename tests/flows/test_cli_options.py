"""Every option of ``fairpca audit`` and ``fairpca retrain`` reads into the config as the
config model says: a representative value of each option (found in the command's ``--help``)
gives the config the model builds from that value, and ``--config FILE`` is overridden by
the options given.

The command line runs in-process through its console entry (``sys.argv``), up to the point
where the validated config is handed to the command's thread: that hand-over is recorded
instead of run, so no server starts and nothing is written.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pytest

from fairpca.flows.config import AuditConfig, RetrainConfig, leaf_fields

MODELS = {"audit": AuditConfig, "retrain": RetrainConfig}
# Options besides ``--<field-name>``: the short and long aliases, and the command's own.
ALIASES = {"-k": "k", "--max-dp": "max_dp_difference", "--max-eo": "max_eo_difference"}
COMMAND_OPTIONS = {"--config", "--verbose", "--help"}
# The bases a value is given on: a bundled dataset, or a user file (its own fields).
ON_DATASET = {"dataset": "adult"}
ON_FILE = {"data": Path("people.csv"), "label": "y", "sensitive": ["s"]}


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, AuditConfig | None]:
    """``fairpca *args`` in this process: the exit code, stdout + stderr, and the config the
    command handed to its worker thread (None when it stopped before)."""
    from fairpca.flows import cli, runtime

    handed: list[Any] = []
    monkeypatch.setattr(runtime.Command, "run", lambda self, fn, *values: handed.extend(values))
    monkeypatch.setattr(sys, "argv", ["fairpca", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as done:
        code = 0 if done.code is None else done.code
    captured = capsys.readouterr()
    config = next((value for value in handed if isinstance(value, AuditConfig)), None)
    return code, captured.out + captured.err, config


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def help_options(monkeypatch, capsys, command: str) -> set[str]:
    monkeypatch.setenv("COLUMNS", "200")
    code, text, _ = run_cli(monkeypatch, capsys, command, "--help")
    assert code == 0, text
    return set(re.findall(r"(?<![\w-])(--[a-zA-Z][\w-]*|-k)(?![\w-])", text))


def _item_and_kind(annotation: Any) -> tuple[Any, Any]:
    """(the field's type without None, the item type of a list or None)."""
    if get_origin(annotation) in (Union, UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) is list:
        return list, get_args(annotation)[0]
    return annotation, None


def _candidates(annotation: Any, tmp_path: Path) -> list[Any]:
    """Values of a field's type to try, in order (the first valid one not the default is
    the representative value)."""
    kind, item = _item_and_kind(annotation)
    if kind is bool:
        return [True, False]
    if get_origin(kind) is Literal:
        return list(reversed(get_args(kind)))
    if kind is list:
        if get_origin(item) is Literal:
            return [list(get_args(item)[:2]), list(get_args(item)[:1])]
        if item is str:
            return [["s", "t"], ["s"]]
        if item is int:
            return [[3, 5], [20, 40]]
        return [[0.5, 0.25], [2.0, 3.0]]
    if kind is int:
        return [3, 4, 31, 200, 2500, 6000, 50, 1000]
    if kind is float:
        return [0.3, 0.7, 0.55, 0.9, 1.5, 0.02]
    if kind is Path:
        return [Path("people.csv"), tmp_path / "elsewhere"]
    return ["equal_opportunity", f"sqlite:///{tmp_path}/m.db", ";"]


def _nested(model, base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """The config dict of ``base`` (flat: fields of the source) with ``value`` at ``path``."""
    values: dict[str, Any] = {"source": dict(base)}
    *sections, key = path
    target = values
    for section in sections:
        target = target.setdefault(section, {})
    target[key] = value
    return values


def representative(model, path: tuple[str, ...], info, tmp_path: Path):
    """(the base, the value) for one field: the first candidate that the model accepts on a
    dataset or on a user file and that differs from the default."""
    default = info.get_default(call_default_factory=True)
    for value in _candidates(info.annotation, tmp_path):
        for base in (ON_DATASET, ON_FILE):
            if value == default:
                continue
            try:
                expected = model.model_validate(_nested(model, base, path, value))
            except ValueError:
                continue
            return base, value, expected
    raise AssertionError(f"no representative value for {path}: add a candidate of its type")


def tokens(model, values: dict[tuple[str, ...], Any]) -> list[str]:
    """The command-line tokens of config values (by field path), as the command line takes
    them: a flag for a bool, a repeated option for a list of names (column names may hold
    commas), a comma-separated list for choices and numbers."""
    fields = leaf_fields(model)
    out: list[str] = []
    for path, value in values.items():
        name = flag(path[-1])
        kind, item = _item_and_kind(fields[path].annotation)
        if kind is bool:
            out.append(name if value else f"--no-{name[2:]}")
        elif kind is list and item is str:
            for entry in value:
                out += [name, entry]
        elif kind is list:
            out += [name, ",".join(str(entry) for entry in value)]
        else:
            out += [name, str(value)]
    return out


def _path_of(model, field: str) -> tuple[str, ...]:
    return next(path for path in leaf_fields(model) if path[-1] == field)


@pytest.mark.parametrize("command", sorted(MODELS))
def test_the_help_lists_an_option_for_every_field_and_no_other(command, monkeypatch, capsys):
    model = MODELS[command]
    fields = {flag(path[-1]) for path in leaf_fields(model)}
    negations = {f"--no-{name[2:]}" for name in fields}
    shown = help_options(monkeypatch, capsys, command)
    assert fields <= shown, sorted(fields - shown)
    assert set(ALIASES) <= shown
    unknown = shown - fields - negations - set(ALIASES) - COMMAND_OPTIONS
    assert not unknown, sorted(unknown)


@pytest.mark.parametrize("command", sorted(MODELS))
def test_every_option_parses_to_the_config_the_model_builds(command, monkeypatch, capsys, tmp_path):
    model = MODELS[command]
    monkeypatch.chdir(tmp_path)  # the default tracking store's folder exists
    checked = []
    for path, info in leaf_fields(model).items():
        base, value, expected = representative(model, path, info, tmp_path)
        base_paths = {_path_of(model, key): given for key, given in base.items()}
        args = tokens(model, {**base_paths, path: value})
        code, text, config = run_cli(monkeypatch, capsys, command, *args)
        assert code == 0 and config is not None, (args, text)
        assert config == expected, (args, config, expected)
        checked.append(path)
    assert len(checked) == len(leaf_fields(model))


@pytest.mark.parametrize(("alias", "field"), sorted(ALIASES.items()))
def test_the_aliases_read_as_their_long_options(alias, field, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    value = "3" if field == "k" else "0.3"
    given = ("audit", "--dataset", "adult")
    _, _, long_form = run_cli(monkeypatch, capsys, *given, flag(field), value)
    code, text, short = run_cli(monkeypatch, capsys, *given, alias, value)
    assert code == 0, text
    path = _path_of(AuditConfig, field)
    expected = AuditConfig.model_validate(_nested(AuditConfig, ON_DATASET, path, float(value)))
    assert short == long_form == expected


def test_a_repeated_option_keeps_every_value_and_a_value_may_start_with_a_hyphen(
    monkeypatch, capsys, tmp_path
):
    monkeypatch.chdir(tmp_path)
    code, text, config = run_cli(
        monkeypatch, capsys, "audit", "--data", "people.csv", "--label", "-y",
        "--sensitive", "sex", "--sensitive", "race", "--keep", "a,b", "--no-register-model",
    )  # fmt: skip
    assert code == 0, text
    assert config.source.label == "-y"  # a value may start with a hyphen
    assert config.source.sensitive == ["sex", "race"]
    assert config.source.keep == ["a,b"]  # a column name may hold a comma
    assert config.tracking.register_model is False


@pytest.mark.parametrize(
    "content",
    [
        "dataset: german\nk: 3\nsensitive: [race]\nregister_model: false\n"
        "thresholds: {max_dp_difference: 0.2, max_eo_difference: 0.3}\n",
        "source: {dataset: german, sensitive: [race]}\nrepresentation: {k: 3}\n"
        "tracking: {register_model: false}\n"
        "selection: {thresholds: {max_dp_difference: 0.2, max_eo_difference: 0.3}}\n",
    ],
    ids=["flat", "sections"],
)
def test_the_options_given_override_the_config_file(content, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "audit.yaml").write_text(content)
    code, text, config = run_cli(monkeypatch, capsys, "audit", "--config", "audit.yaml")
    assert code == 0, text
    assert (config.source.dataset, config.source.sensitive) == ("german", ["race"])
    assert config.representation.k == 3 and config.tracking.register_model is False
    code, text, config = run_cli(
        monkeypatch, capsys, "audit", "--config", "audit.yaml", "--dataset", "adult",
        "--sensitive", "sex", "--max-dp", "0.1", "--register-model", "--lambdas", "0,1",
    )  # fmt: skip
    assert code == 0, text
    assert (config.source.dataset, config.source.sensitive) == ("adult", ["sex"])
    assert config.selection.thresholds.max_dp_difference == 0.1  # given
    assert config.selection.thresholds.max_eo_difference == 0.3  # from the file
    assert config.representation.k == 3 and config.tracking.register_model is True
    assert config.representation.lambdas == [0.0, 1.0]


# The panels of ``--help`` and the config sections each shows (the top of the config: "Run").
PANELS = {
    "source": "Data", "split": "Data", "representation": "Search", "evaluation": "Search",
    "selection": "Policy and deployment", "promotion": "Policy and deployment",
    "tracking": "Registry", "output": "Output", "": "Run",
}  # fmt: skip


def help_panels(text: str) -> dict[str, list[str]]:
    """The options of each panel of a cyclopts help page, in order (a panel's rows start
    with their first option name; continuation rows are indented)."""
    panels: dict[str, list[str]] = {}
    for line in text.splitlines():
        if title := re.match(r"╭─ (.+?) ─", line):
            options = panels.setdefault(title.group(1), [])
        elif match := re.match(r"│ (-[\w-]+)", line):
            options.append(match.group(1))
    return panels


@pytest.mark.parametrize("command", sorted(MODELS))
def test_the_help_shows_each_option_under_its_config_section(command, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "120")
    code, text, _ = run_cli(monkeypatch, capsys, command, "--help")
    assert code == 0, text
    panels = help_panels(text)
    assert list(panels)[:5] == ["Data", "Search", "Policy and deployment", "Registry", "Output"]
    for path in leaf_fields(MODELS[command]):
        panel = PANELS[path[0] if len(path) > 1 else ""]
        assert flag(path[-1]) in panels[panel], (path, panel)
    assert {"--config", "--verbose"} <= set(panels["Run"])
    # what a first audit needs comes first
    assert panels["Data"][:4] == ["--dataset", "--data", "--label", "--sensitive"]
    assert panels["Search"][:2] == ["--k", "--variants"]
    assert panels["Policy and deployment"][0] == "--policy"
    assert panels["Registry"][0] == "--tracking-uri" and panels["Output"][0] == "--output-dir"
