"""The ``fairpca`` command line (typer's CliRunner in-process; one real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fairpca.flows.cli import app

runner = CliRunner()


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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "adult", "--lambdas", "0,-1"], "finite and >= 0"),
        (["--dataset", "adult", "--data", "x.csv"], "exactly one data source"),
        (["--data", "x.csv"], "needs label"),
        (["--dataset", "adult", "--variants", "pca,svd"], "variants"),
        (["--dataset", "adult", "--max-dp", "3"], "thresholds.max_dp_difference"),
    ],
)
def test_invalid_options_fail_before_any_work(args, message, tmp_path):
    result = runner.invoke(app, ["audit", *args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "Invalid configuration" in result.output and message in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.flow
@pytest.mark.slow
def test_cli_audit_with_config_file_prints_summary_report_and_run_id(
    prefect_harness, mlflow_store, tmp_path
):
    uri, client = mlflow_store
    config = tmp_path / "audit.json"
    settings = {"dataset": "german", "k": 3, "thresholds": {"max_dp_difference": 0.2}}
    config.write_text(json.dumps({**settings, "model_name": "fairpca-cli-test"}))
    result = runner.invoke(
        app,
        [
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
    assert "Fairness audit" in result.output and "report.html" in result.output
    run_id = result.output.split("MLflow run id:")[1].split()[0]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["k"] == "3" and run.data.params["seed"] == "1"
    assert run.data.params["thresholds.max_dp_difference"] == "0.2"
    assert run.data.params["variants"] == "pca,fair_pca"


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


def test_audit_and_retrain_share_one_option_declaration_showing_defaults():
    from fairpca.flows.cli import SHARED_OPTIONS

    outputs = {}
    for command in ("audit", "retrain"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "250"})
        assert result.exit_code == 0
        outputs[command] = result.output
        for name in SHARED_OPTIONS:
            assert f"--{name.replace('_', '-')}" in result.output, name
    for shown in (
        "[default: (min(10, the largest the data allow))]",
        "[default: (30)]",
        "[default: (fairpca-output)]",
    ):
        assert shown in outputs["audit"] and shown in outputs["retrain"]
    assert "--accuracy-tolerance" in outputs["retrain"]
    assert "--accuracy-tolerance" not in outputs["audit"]
