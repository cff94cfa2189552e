"""The ``fairpca`` command line (in-process through tests/cli_invoke.py; real subprocesses
where the process itself matters)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from cli_invoke import invoke


def test_python_m_flows_help_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "fairpca.flows", "audit", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for option in ("--dataset", "--data", "--sensitive", "--lambdas", "--tracking-uri"):
        assert option in done.stdout


def test_importing_fairpca_does_not_import_prefect_or_mlflow():
    code = (
        "import sys, fairpca, fairpca.datasets, fairpca.metrics; "
        "print('prefect' in sys.modules, 'mlflow' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_the_flags_are_read_without_prefect_scikit_learn_scipy_or_pandas():
    """A mistyped flag is answered before the audit's heavy imports: the command line and
    its settings import none of them (the verdict's modules come when a verdict is printed;
    pandas and numpy when data are read)."""
    heavy = ("prefect", "mlflow", "sklearn", "scipy", "fairlearn", "matplotlib", "pandas", "numpy")
    code = f"import sys, fairpca.flows.cli; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "adult", "--lambdas", "0,-1"], "finite and >= 0"),
        (["--dataset", "adult", "--data", "x.csv"], "exactly one data source"),
        (["--data", "x.csv"], "needs label"),
        (["--dataset", "adult", "--variants", "pca,svd"], "variants"),
        (["--dataset", "adult", "--max-dp", "3"], "thresholds.max_dp_difference"),
        (["--dataset", "adult", "--sensitive", "sex", "--group-column", "sex"], "group_column"),
    ],
)
def test_invalid_options_fail_before_any_work(args, message, tmp_path):
    result = invoke(["audit", *args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "Invalid configuration" in result.output and message in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.flow
@pytest.mark.slow
def test_cli_audit_with_config_file_prints_summary_report_and_run_id(
    prefect_harness, mlflow_store, tmp_path, monkeypatch
):
    from fairpca.tasks import data

    uri, client = mlflow_store
    reads = []
    load_source = data.load_source
    monkeypatch.setattr(data, "load_source", lambda source: reads.append(1) or load_source(source))
    config = tmp_path / "audit.json"
    settings = {"dataset": "german", "k": 3, "thresholds": {"max_dp_difference": 0.2}}
    config.write_text(json.dumps({**settings, "model_name": "fairpca-cli-test"}))
    result = invoke([
            "audit",
            "--config", str(config),
            "--variants", "pca,fair_pca",
            "--lambdas", "0,1",
            "--classifiers", "logreg",
            "--seed", "1",
            "--tracking-uri", uri,
            "--output-dir", str(tmp_path / "out"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Decision: ") and "report.html" in result.output
    run_id = result.output.split("MLflow run id:")[1].split()[0]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["k"] == "3" and run.data.params["seed"] == "1"
    assert run.data.params["thresholds.max_dp_difference"] == "0.2"
    assert run.data.params["variants"] == "pca,fair_pca"
    assert len(reads) == 1  # the flow audits the rows the pre-flight check read and split


def test_without_the_audit_extra_the_cli_says_what_to_install():
    """A library-only install: ``fairpca`` exits at once with one line naming the extra."""
    # Simulate the missing extra: no module of the audit stack can be found.
    code = "import fairpca.flows.entry as e; e.find_spec = lambda name: None; e.main()"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "pip install 'fairpca[audit]'" in lines[0]
    assert "prefect" in lines[0]


# Every option of ``audit`` (user-facing names, spelled out here, not derived from the model).
AUDIT_OPTIONS = (
    "--config", "--seed", "--dask-address",
    # source
    "--dataset", "--data", "--label", "--positive-label", "--sensitive", "--keep", "--drop",
    "--sep", "--data-dir", "--group-column", "--leakage-threshold", "--proxy-threshold",
    # split
    "--train-share", "--validation-share", "--test-share", "--search-rows",
    "--n-train", "--n-validation", "--n-test",
    # representation
    "-k", "--k", "--variants", "--equalize-covariance", "--lambdas", "--min-category-count",
    "--metric-max-rows",
    # evaluation
    "--classifiers", "--svc-max-train-rows", "--min-group-size", "--allow-small-groups",
    "--n-bootstrap",
    # selection
    "--policy", "--max-dp-difference", "--max-dp", "--max-eo-difference", "--max-eo",
    "--max-equalized-odds-difference", "--min-selection-rate-ratio", "--min-accuracy",
    "--gate", "--select-by", "--k-grid", "--logreg-C", "--cv-folds", "--cv-repeats",
    "--cv-below-rows",
    "--certify-factor", "--min-accuracy-gain", "--min-balanced-accuracy-margin",
    "--min-positive-rate-ratio", "--max-one-class-share", "--allow-row-storing-models",
    "--promote-dominated", "--sensitive-at-prediction", "--randomized-decisions",
    # tracking
    "--tracking-uri", "--experiment-name", "--model-name", "--champion-alias",
    "--register-model", "--no-register-model", "--mlflow-retries", "--mlflow-retry-backoff",
    # output
    "--output-dir", "--run-name",
    # the terminal (not a config field)
    "--verbose",
)  # fmt: skip
RETRAIN_ONLY = ("--accuracy-tolerance", "--needs-review-alias")
COMMANDS = ("audit", "retrain", "relog", "gate", "serve", "register", "reconcile", "keygen")


def _flags(name: str) -> set[str]:
    """Every option name of a command, as cyclopts reads its signature."""
    from fairpca.flows.cli import app

    return {flag for argument in app[name].assemble_argument_collection()
            for flag in argument.names}  # fmt: skip


def test_audit_and_retrain_take_exactly_the_listed_options():
    assert _flags("audit") == set(AUDIT_OPTIONS)
    assert _flags("retrain") == {*AUDIT_OPTIONS, *RETRAIN_ONLY}


def test_every_config_field_is_an_option_whose_help_is_its_description():
    from fairpca.flows.config import RetrainConfig, leaf_fields

    fields = leaf_fields(RetrainConfig)
    # -k, 2 aliases, --no-register-model, --verbose
    assert len(fields) == len(AUDIT_OPTIONS) - 5 + len(RETRAIN_ONLY) - 1
    result = invoke(["retrain", "--help"], env={"COLUMNS": "400"})  # each help on one line
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())  # the panels' borders
    for path, info in fields.items():
        flag = "--" + path[-1].replace("_", "-")
        assert flag in _flags("retrain"), flag
        assert info.description, path  # every field is described
        assert " ".join(info.description.split()) in text, path


def test_help_shows_the_defaults_and_wraps_at_80_columns():
    for command in ("audit", "retrain", "relog"):
        narrow = invoke([command, "--help"], env={"COLUMNS": "80"})
        assert narrow.exit_code == 0 and "…" not in narrow.output, narrow.output
        assert max(len(line) for line in narrow.output.splitlines()) <= 80
    wide = invoke(["audit", "--help"], env={"COLUMNS": "400"}).output
    text = " ".join(wide.replace("│", " ").split())
    for shown in (
        "suppressed; still constrained by fair PCA). [default: 30]",
        "never appear in the logged input example. [default: 30]",
        "[default: fairpca-output]",
        "[default: logreg, logreg_tuned, linear_svm]",
        "default: 10, 20, 40, ... doubling while below the largest k the encoded training",
    ):
        assert shown in text, shown
    assert "[default: (" not in text


def test_a_bool_field_is_a_flag_without_a_value():
    from fairpca.flows.cli import app

    arguments = {a.names[0]: a for a in app["audit"].assemble_argument_collection()}
    assert "--no-register-model" in arguments["--register-model"].names
    assert "--no-allow-small-groups" not in _flags("audit")  # off by default: no negation
    lines = invoke(["audit", "--help"], env={"COLUMNS": "100"}).output.splitlines()
    line = next(line for line in lines if "--allow-small-groups" in line)
    assert line.strip("│ ").split()[:2] == ["--allow-small-groups", "Allow"]  # no value


def test_the_flag_reaches_the_config_and_the_floor_needs_it(tmp_path):
    """Without --allow-small-groups a group size below 10 is refused; with it the config is
    valid and the run stops at the next check (an unreachable tracking server)."""
    args = ["audit", "--dataset", "adult", "--min-group-size", "5", "--output-dir",
            str(tmp_path / "out"), "--tracking-uri", "http://127.0.0.1:9"]  # fmt: skip
    refused = invoke(args)
    assert refused.exit_code == 2 and "Invalid configuration" in refused.output
    assert "--allow-small-groups" in refused.output
    allowed = invoke([*args, "--allow-small-groups"])
    assert allowed.exit_code == 2, allowed.output
    assert "MLflow is not reachable" in allowed.output
    assert "Invalid configuration" not in allowed.output


def test_options_override_the_file_in_either_form(tmp_path):
    from fairpca.flows.cli import build_config
    from fairpca.flows.config import AuditConfig

    nested = tmp_path / "nested.yaml"
    nested.write_text("source: {dataset: adult}\nevaluation: {min_group_size: 40}\n")
    flat = tmp_path / "flat.yaml"
    flat.write_text("dataset: adult\nmin_group_size: 40\nthresholds: {max_dp_difference: 0.1}\n")
    options = {"min_group_size": 50, "max_dp_difference": 0.2, "variants": ["pca", "fair_pca"],
               "group_column": "nr"}  # fmt: skip
    for path in (nested, flat):
        config = build_config(dict(options), path, AuditConfig)
        assert config.source.group_column == "nr"
        assert config.evaluation.min_group_size == 50
        assert config.selection.thresholds.max_dp_difference == 0.2
        assert config.representation.variants == ["pca", "fair_pca"]
        assert build_config({}, path, AuditConfig).evaluation.min_group_size == 40


def test_a_misspelt_option_is_one_message_with_the_close_one():
    result = invoke(["audit", "--dataset", "adult", "--min-grup-size", "5"])
    assert result.exit_code == 2
    assert "No such option: --min-grup-size" in result.output
    assert "--min-group-size" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["nosuch"], "nosuch"),
        (["gate", "nosuch"], "nosuch"),
        (["relog"], "OUTPUT_DIR"),
        (["relog", "a", "b"], "b"),
        (["gate", "register", "--url", "https://x/w"], "--model"),
        (["gate", "serve", "--port", "x"], "--port"),
        (["audit", "--dataset", "adult", "--seed", "abc"], "--seed"),
        (["audit", "--dataset", "adult", "--lambdas", "0,x"], "--lambdas"),
        (["audit", "--dataset", "adult", "extra"], "extra"),
    ],
)
def test_a_command_line_that_cannot_be_read_is_one_line_and_exit_2(args, named):
    result = invoke(args)
    assert result.exit_code == 2, result.output
    first, *rest = result.output.strip().splitlines()
    assert first.startswith("Error: ") and named in first, result.output
    command = " ".join(["fairpca", *(arg for arg in args[:2] if arg in COMMANDS)])
    assert rest == [f"Try '{command} --help' for help."], rest
    assert "Traceback" not in result.output


def test_a_group_alone_shows_its_help_and_exits_2():
    for args in ([], ["gate"]):
        result = invoke(args)
        assert result.exit_code == 2 and "Commands" in result.output
        assert "Error" not in result.output


def _result(record=None, promotion=None, **overrides):
    """A finished audit's result (conftest's record, widened to what a default audit of
    Adult shows: three reference mitigations, balanced accuracy, the selection-rate ratio,
    rates per named group, a screened column, the summary rows with the widest names)."""
    from records import build_audit_record, replaced

    from fairpca.flows.audit import AuditResult
    from fairpca.tasks.record import PromotionRecord, ReferenceMitigation, ScreenedColumn

    record = record or build_audit_record()
    extra = {
        "balanced_accuracy": 0.65, "balanced_accuracy.ci95_low": 0.63,
        "balanced_accuracy.ci95_high": 0.67, "selection_rate_ratio": 0.98,
        "selection_rate_ratio.ci95_low": 0.71, "selection_rate_ratio.ci95_high": 1.0,
        "selection_rate.sex:Female": 0.174, "tpr.sex:Female": 0.462, "fpr.sex:Female": 0.138,
        "base_rate.sex:Female": 0.11, "selection_rate.sex:Male": 0.171, "tpr.sex:Male": 0.392,
        "fpr.sex:Male": 0.074, "base_rate.sex:Male": 0.304,
    }  # fmt: skip
    test = {**record.selection.test, **extra}
    references = [
        ReferenceMitigation(name=name, approach=approach, needs_sensitive_at_prediction=needs,
                            validation=test, test=test)
        for name, approach, needs in (("threshold_optimizer", "post-processing", True),
                                      ("exponentiated_gradient", "reductions", False),
                                      ("correlation_remover", "pre-processing", True))
    ]  # fmt: skip
    row = {
        "variant": "fair_pca_eo", "lambda": 0.125, "classifier": "linear_svm",
        "accuracy": 0.8491, "accuracy.ci95_low": 0.8351, "accuracy.ci95_high": 0.8632,
        "dp_difference": 0.1651, "dp_difference.ci95_high": 0.1921, "eo_difference": 0.0551,
        "eo_difference.ci95_high": 0.1721, "var_explained": 0.671,
    }  # fmt: skip
    summary = [{**row, "role": role} for role in ("majority", "PCA (best)", "chosen", "last λ")]
    summary[0].update(variant="-", classifier="majority", **{"lambda": None})
    screening = [ScreenedColumn(column="rank", rule="target leakage", score=0.83,
                                action="excluded")]  # fmt: skip
    record = replaced(record, "selection", test=test)
    record = replaced(record, references=references, candidates=summary, screening=screening)
    promotion = promotion or PromotionRecord(
        promote=True, reasons=["no current champion: the gate alone decides"]
    )
    values = dict(
        record=replaced(record, model_name="fairpca-adult-x-sex"), promotion=promotion,
        output_dir="/tmp/out", report_path="/tmp/out/report.html",
        tracking_uri="sqlite:///mlflow.db", run_id="f79fe6b6ef204cf6bc432b7163157ac2",
        experiment_id="1", model_version="2", model_version_new=True, champion_moved=True,
    )  # fmt: skip
    return AuditResult(**{**values, **overrides})


def _printed(result, before=None, width=80, verbose=False) -> str:
    import io

    from rich.console import Console

    from fairpca.flows import console as shown

    out = Console(width=width, file=io.StringIO(), record=True)
    original = shown.console
    shown.console = out
    try:
        shown.print_report(result, before, verbose=verbose)
    finally:
        shown.console = original
    return out.export_text()


def test_the_summary_leads_with_the_decision_and_fits_40_lines_at_80_columns():
    text = _printed(_result(report_path="/tmp/" + "deep/" * 20 + "report.html"), before="1")
    lines = text.rstrip("\n").splitlines()
    assert lines[0] == "Decision: PROMOTED, fairpca-adult-x-sex v1 -> v2 holds 'champion'."
    assert lines[1].startswith("Meets the gate")
    header = next(i for i, line in enumerate(lines) if line.startswith("test rows"))
    assert header < 6 and lines[header + 2].startswith("chosen ")  # one line per model
    models = [line.split()[0] for line in lines[header + 2 : header + 8]]
    assert models == ["chosen", "unconstrained", "majority", "threshold_optimizer*",
                      "exponentiated_gradient", "correlation_remover*"]  # fmt: skip
    # the rows a terminal of 80 columns shows (a line longer than it takes several)
    # 43 rows: 40 lines and the three rows of the deep test paths; the reasons that did not
    # decide are counted in one line (issue 49)
    assert sum(max(1, -(-len(line) // 80)) for line in lines) <= 43, text
    assert "…" not in text
    long = [line for line in lines if len(line) > 80]
    report = "/tmp/" + "deep/" * 20 + "report.html"
    # a path or URL longer than the terminal is a line of its own, never broken; a command
    # is broken between its words (test_a_printed_command_never_wraps_inside_a_path)
    assert all(line == report for line in long), long
    assert report in lines and "| sex: Female |" not in text
    assert any(line.startswith("sex: Female ") for line in lines)  # groups by name
    assert "Candidates" not in text and "variant" not in text  # the table of --verbose


def test_a_useless_reference_is_marked_with_why_under_the_table():
    """A reference no better than saying one class (Bank: correlation_remover said yes for
    96% of the rows) is not shown as a plain row: a dagger and the reason."""
    from records import replaced

    from fairpca.flows.audit import AuditResult

    result = _result()
    useless = ["says no for only 3.9% of the rows against 88.6% negatives (needs at least 0.25 x)"]
    references = [replaced(r, ineligible=useless) if r.name == "correlation_remover" else r
                  for r in result.record.references]  # fmt: skip
    record = replaced(result.record, references=references)
    shown = AuditResult(**{**dict(result), "record": record, "verdict": None})  # its own verdict
    words = " ".join(_printed(shown, width=100).split())
    assert "correlation_remover*† " in words and "exponentiated_gradient† " not in words
    assert f"† not eligible on the validation rows: correlation_remover {useless[0]}." in words


def test_the_summary_shows_balanced_accuracy_references_groups_and_screening():
    text = _printed(_result(), width=100)
    chosen = next(line for line in text.splitlines() if line.startswith("chosen "))
    assert chosen.split() == ["chosen", "0.822", "0.650", "0.023", "0.980", "0.061", "0.046"]
    words = " ".join(text.split())
    assert "* needs the sensitive attribute to predict." in words
    assert "Chosen, 95% intervals: acc 0.811–0.832, bal acc 0.630–0.670, ΔDP 0.003–0.043" in words
    assert "sex: Female 1,650 0.174 0.462 0.138 0.110" in words
    assert "Column screening: - excluded 'rank': target leakage (score 0.830)" in words
    assert "Warnings (1): - fair_pca: a sensitive attribute is still predictable" in words


def test_verbose_adds_the_candidates_every_reason_and_warning():
    from records import build_audit_record, replaced

    record = replaced(build_audit_record(), "selection", warnings=["first", "second", "third"])
    quiet = " ".join(_printed(_result(record)).split())
    assert "Warnings (3): - first - 2 more in the report (or run with --verbose)" in quiet
    loud = _printed(_result(record), verbose=True)
    words = " ".join(loud.split())
    assert "Warnings (3): - first - second - third" in words
    assert "Fairness audit audit-adult-20261130T150000-abc123" in loud  # the candidates
    assert "Reasons: - gate: upper_bound - no current champion" in words
    for line in loud.split("Reasons:")[0].splitlines():
        assert len(line) <= 80 or line.startswith("/")


def test_summary_names_the_champion_move_the_ui_and_a_working_mlflow_command():
    from fairpca.flows.console import mlflow_bin, mlflow_ui_lines
    from fairpca.tasks.record import PromotionRecord

    text = _printed(_result(), before="1", width=250)
    assert "Decision: PROMOTED, fairpca-adult-x-sex v1 -> v2 holds 'champion'." in text
    mlflow = Path(sys.executable).parent / "mlflow"
    mlflow = mlflow if mlflow.exists() else f"{sys.executable} -m mlflow"
    assert mlflow_bin() == str(mlflow) and Path(mlflow_bin().split()[0]).is_absolute()
    store = f"sqlite:///{Path('mlflow.db').absolute()}"
    assert (f"Open the MLflow UI: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false {mlflow} ui "
            f"--port 5000 --workers 1 --backend-store-uri {store}") in text  # fmt: skip
    ui = "http://127.0.0.1:5000/#/experiments/1"
    assert f"Runs: {ui}/runs?viewStateShareKey=fairpca" in text  # the verdict columns' view
    assert f"Run: {ui}/runs/f79fe6b6ef204cf6bc432b7163157ac2" in text
    assert "Model version: http://127.0.0.1:5000/#/models/fairpca-adult-x-sex/versions/2" in text
    remote = dict(mlflow_ui_lines(_result(tracking_uri="https://mlflow.example.org/")))
    assert "Open the MLflow UI:" not in remote
    assert remote["Runs:"].startswith("https://mlflow.example.org/#/experiments/1/runs?")
    kept = PromotionRecord(promote=False, reasons=["champion v1: the challenger is worse"])
    text = _printed(_result(promotion=kept, champion_moved=False), before="1", width=200)
    assert "Decision: NOT promoted, v2 registered; 'champion' stays on v1." in text
    assert "Meets the gate thresholds (upper 95% bounds) on the validation rows, but champion " in (
        text
    )


def test_a_retrain_says_what_happened_to_the_champion():
    from records import build_audit_record, replaced

    from fairpca.tasks.record import PromotionRecord

    kept = PromotionRecord(promote=False, champion_version="1",
                           reasons=["champion v1: the challenger is worse"])  # fmt: skip
    record = replaced(build_audit_record(), kind="retrain")
    text = _printed(_result(record, kept, champion_moved=False), before="1", width=200)
    assert "Retrain: champion v1 of fairpca-adult-x-sex still meets the gate on the new test " in (
        text
    )
    assert "challenger v2 was not promoted." in text


def test_prefect_and_mlflow_info_lines_only_with_verbose():
    """Quiet by default, before or after Prefect and MLflow are imported; the Prefect API
    handler still gets every line."""
    code = (
        "import logging, sys\n"
        "from fairpca.flows.console import show_logs\n"
        "show_logs(False)\n"
        "import mlflow, prefect.main\n"  # prefect.main sets Prefect's logging up
        "from prefect.logging import get_logger\n"
        "assert logging.getLogger('mlflow').getEffectiveLevel() == logging.WARNING\n"
        "get_logger('prefect').info('HIDDEN-INFO'); get_logger('prefect').warning('SHOWN-1')\n"
        "show_logs(True)\n"
        "get_logger('prefect').info('SHOWN-2')\n"
        "assert logging.getLogger('mlflow').getEffectiveLevel() == logging.INFO\n"
        "show_logs(False)\n"
        "get_logger('prefect.flow_runs').info('HIDDEN-AGAIN')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SHOWN-1" in done.stderr and "SHOWN-2" in done.stderr
    assert "HIDDEN" not in done.stderr + done.stdout


def test_config_file_typo_gets_did_you_mean(tmp_path):
    config = tmp_path / "audit.yaml"
    config.write_text("dataset: adult\nlamdas: [0, 1]\nthresholds:\n  max_dp_diference: 0.1\n")
    result = invoke(["audit", "--config", str(config)])
    assert result.exit_code == 2
    assert "  - lamdas: unknown option; did you mean 'lambdas'?" in result.output
    assert (
        "  - selection.thresholds.max_dp_diference: unknown option; did you mean "
        "'max_dp_difference'?"
    ) in result.output


def test_a_typo_in_a_section_gets_did_you_mean(tmp_path):
    config = tmp_path / "audit.yaml"
    config.write_text(
        "source: {dataset: adult}\nevaluation: {min_grup_size: 40}\nrepresentaton: {k: 2}\n"
    )
    result = invoke(["audit", "--config", str(config)])
    assert result.exit_code == 2
    assert (
        "  - evaluation.min_grup_size: unknown option; did you mean 'min_group_size'?"
        in result.output
    )
    assert "  - representaton: unknown option; did you mean 'representation'?" in result.output


def test_messages_name_the_cli_options(tmp_path):
    from fairpca.flows.console import option_names

    assert option_names("pass positive_label=<value> or data_dir=None") == (
        "pass --positive-label <value> or no --data-dir"
    )
    assert option_names("keep/drop/sep apply to a user data file") == (
        "--keep/--drop/--sep apply to a user data file"
    )
    url = "http://127.0.0.1:5079/api/2.0/mlflow/experiments/get-by-name?experiment_name=x"
    assert option_names(f"503 from {url}; set label=y") == f"503 from {url}; set --label y"
    data = tmp_path / "people.csv"
    data.write_text("x,s,y\n" + "".join(f"{i},{'ab'[i % 2]},{'ny'[i % 3 == 0]}\n"
                                        for i in range(60)))  # fmt: skip
    result = invoke(["audit", "--data", str(data), "--label", "y", "--sensitive", "s",
                                 "--positive-label", "maybe", "--output-dir",
                                 str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--positive-label" in result.output and "positive_label=" not in result.output


def test_unreachable_tracking_uri_is_one_message_before_any_work(tmp_path):
    """The command ends with one message and no traceback (the check's own 5 s bound is
    timed in the next test, without the start-up of a Python process)."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "fairpca.flows", "audit", "--dataset", "german",
         "--tracking-uri", f"http://127.0.0.1:{port}", "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    text = " ".join(done.stderr.split())  # rich wraps long lines
    assert text.startswith("MLflow is not reachable (nothing was run): the MLflow tracking "
                           f"server http://127.0.0.1:{port} is not reachable")  # fmt: skip
    assert "--tracking-uri sqlite:///mlflow.db" in done.stderr
    assert not (tmp_path / "out").exists()


def test_relog_hint_never_suggests_a_second_registration():
    from fairpca.flows.console import relog_alias_note

    logged = {"champion_alias": "champion", "model_name": "m", "model_version": "3"}
    for promote in (False, True):
        note = relog_alias_note(logged, promote, "sqlite:///s.db")
        call = "MlflowClient('sqlite:///s.db').set_registered_model_alias('m', 'champion', '3')"
        assert "--force" not in note and call in note
    assert "only with --promote" in relog_alias_note(logged, False, "sqlite:///s.db")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "missing.csv", "--label", "y", "--sensitive", "s"], "not found: missing.csv"),
        (["--data", "people.csv", "--label", "incomee", "--sensitive", "sex"], "incomee"),
        (["--data", "people.csv", "--label", "income", "--sensitive", "sex",
          "--group-column", "person"], "['person'] not found"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_leaves_no_server(user_cli, tmp_path, args, message):
    """As a user runs it: the temporary Prefect server, started while the inputs are
    checked, is stopped with the command (its log file, in TMPDIR, is gone too)."""
    import time

    fairpca, env = user_cli
    (tmp_path / "people.csv").write_text("age,sex,income\n" + "30,F,1\n40,M,0\n" * 50)
    env["TMPDIR"] = str(tmp_path)
    started = time.perf_counter()
    done = subprocess.run(
        [fairpca, "audit", *args, "--output-dir", str(tmp_path / "out"),
         "--tracking-uri", f"sqlite:///{tmp_path}/m.db"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    print(f"answered in {time.perf_counter() - started:.2f} s")  # shown with -s
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("Invalid input (nothing was run):"), done.stderr
    assert message in " ".join(" ".join(lines).split())
    assert "Traceback" not in done.stderr and not done.stdout
    assert not list(tmp_path.glob("fairpca-prefect-server-*"))
    assert not _processes_with(f"PREFECT_HOME={env['PREFECT_HOME']}".encode())


def _processes_with(variable: bytes) -> list[int]:
    """The running processes whose environment holds ``variable`` (``NAME=value``)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if variable in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_the_prefect_server_boots_while_the_inputs_are_checked(monkeypatch, tmp_path):
    """The server is started before the pre-flight check (it boots meanwhile) and stopped
    when the check fails."""
    from fairpca.flows import preflight, runtime

    events = []

    class Server:
        @classmethod
        def launch(cls):
            events.append("server started")
            return cls()

        def stop(self):
            events.append("server stopped")

    def check(config):
        events.append("inputs checked")
        raise preflight.PreflightError("not found: missing.csv")

    monkeypatch.setattr(runtime, "PrefectServer", Server)
    monkeypatch.setattr(preflight, "check_before_run", check)
    result = invoke(["audit", "--data", str(tmp_path / "missing.csv"), "--label",
                                 "y", "--sensitive", "s", "--output-dir", str(tmp_path / "out"),
                                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert events == ["server started", "inputs checked", "server stopped"]


def test_gate_register_against_an_unreachable_server_fails_in_seconds(user_cli, free_port):
    import time

    fairpca, env = user_cli
    env["FAIRPCA_WEBHOOK_SECRET"] = "k" * 40
    uri = f"http://127.0.0.1:{free_port()}"
    started = time.perf_counter()
    done = subprocess.run(
        [fairpca, "gate", "register", "--model", "m", "--url", "https://gate.example/webhook",
         "--tracking-uri", uri],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    print(f"answered in {time.perf_counter() - started:.2f} s")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    text = " ".join(done.stderr.split())
    assert text.startswith(
        f"MLflow is not reachable (nothing was run): the MLflow tracking server {uri} is not "
        "reachable"
    ), text


def test_piped_output_follows_columns():
    import os

    code = "from fairpca.flows.console import console; print(console.width)"
    for columns, width in (("80", "80"), ("", "120")):
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        env.update({"COLUMNS": columns} if columns else {})
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=120, check=True)  # fmt: skip
        assert done.stdout.strip() == width


def test_a_printed_command_never_wraps_inside_a_path(tmp_path):
    """At 80 columns the MLflow UI command of a deep store is broken between its words with
    shell continuations: every line fits, the store's path is whole on one line, and pasted
    into a shell it is the same command."""
    import shlex

    store = tmp_path / ("a-rather-long-folder-name/" * 3) / "mlflow.db"
    text = _printed(_result(tracking_uri=f"sqlite:///{store}"), width=80)
    lines = text.split("Open the MLflow UI: ", 1)[1].splitlines()
    end = next(i for i, line in enumerate(lines) if not line.endswith("\\"))
    command = lines[: end + 1]
    alone = [line.strip().rstrip(" \\") for line in command if len(line) > 80]
    assert len(command) > 1 and all(" " not in word for word in alone)  # a path on its own
    assert any(line.strip().rstrip(" \\") == f"sqlite:///{store}" for line in command)
    words = shlex.split(" ".join(line.rstrip("\\") for line in command))
    assert words[0] == "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"
    assert words[-6:] == ["--port", "5000", "--workers", "1", "--backend-store-uri",
                          f"sqlite:///{store}"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal")
def test_a_terminal_sees_the_stages_progress_and_a_pipe_does_not(user_cli, tmp_path):
    """On a terminal the audit counts its finished stages on stderr while it runs; with its
    output in a pipe (a log file, CI) it prints no such line."""
    import pty

    fairpca, env = user_cli
    args = [fairpca, "audit", "--dataset", "german", "-k", "2", "--variants", "pca,fair_pca",
            "--lambdas", "0,1", "--classifiers", "logreg", "--tracking-uri",
            f"sqlite:///{tmp_path}/m.db"]  # fmt: skip
    env = {**env, "TERM": "xterm", "COLUMNS": "120"}
    leader, follower = pty.openpty()
    audit = subprocess.Popen([*args, "--output-dir", str(tmp_path / "tty")], cwd=tmp_path,
                             env=env, stdin=follower, stdout=follower, stderr=follower)  # fmt: skip
    os.close(follower)
    seen = b""
    with suppress(OSError):  # EIO once the command and its children closed the terminal
        while chunk := os.read(leader, 65536):
            seen += chunk
    os.close(leader)
    assert audit.wait(timeout=600) == 0, seen.decode(errors="replace")[-3000:]
    assert re.search(rb"fairpca audit: \d+ stages done, last: \w", seen), seen[-3000:]
    piped = subprocess.run([*args, "--output-dir", str(tmp_path / "pipe")], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert "stages done" not in piped.stdout + piped.stderr
