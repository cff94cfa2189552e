"""Logging to MLflow (``fairpca.tasks.mlflow_logging``): transient errors told apart, the
headline test numbers logged first, the run list's verdict view."""

from __future__ import annotations


def test_transient_errors_are_told_apart():
    import requests
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, TEMPORARILY_UNAVAILABLE

    from fairpca.tasks.mlflow_logging import is_transient_mlflow_error

    assert is_transient_mlflow_error(requests.exceptions.ConnectionError("refused"))
    assert is_transient_mlflow_error(MlflowException("x", error_code=TEMPORARILY_UNAVAILABLE))
    assert is_transient_mlflow_error(
        MlflowException("API request to http://h failed: Max retries exceeded with url")
    )
    assert not is_transient_mlflow_error(MlflowException("bad", error_code=INVALID_PARAMETER_VALUE))
    assert not is_transient_mlflow_error(ValueError("bad value"))
    assert not is_transient_mlflow_error(None)
    assert is_transient_mlflow_error(RuntimeError("503 Server Error: Service Unavailable"))
    assert not is_transient_mlflow_error(ValueError("model sha256 9a5031c0 does not match"))


def test_a_step_waits_at_most_ten_seconds_between_its_attempts():
    """RETRYING's back-off (with its jitter) leaves a dead server reported well within a
    minute: with MLflow's bounded requests (under a second each when refused) a step gives
    up after about 10 s."""
    from fairpca.tasks.mlflow_logging import RETRYING

    delays = RETRYING["retry_delay_seconds"](RETRYING["retries"])  # Prefect's back-off
    assert delays == [1, 2, 4]
    assert sum(delays) * (1 + RETRYING["retry_jitter_factor"]) <= 10


def test_the_headline_test_numbers_are_logged_first():
    """The run page lists a run's metrics as they were logged."""
    from fairpca.tasks.mlflow_logging import _display_order

    keys = ["time_total_s", "validation.accuracy", "baseline.pca.test.accuracy",
            "fair_pca/lambda", "dp_difference.sex", "accuracy.ci95_low", "eo_difference",
            "selection_rate.sex:Female", "accuracy", "dp_difference"]  # fmt: skip
    assert sorted(keys, key=_display_order) == [
        "accuracy", "dp_difference", "eo_difference", "accuracy.ci95_low", "dp_difference.sex",
        "selection_rate.sex:Female", "validation.accuracy", "baseline.pca.test.accuracy",
        "time_total_s", "fair_pca/lambda",
    ]  # fmt: skip


def test_the_run_list_view_is_stored_once_and_never_fails_the_logging(tmp_path):
    """The experiment's run list view is the MLflow UI's own shared-view tag; a server that
    refuses experiment tags leaves the default run list and the audit is logged anyway."""
    import json

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from fairpca.tasks.mlflow_logging import (
        RUN_LIST_METRICS,
        RUN_LIST_VIEW,
        run_list_url,
        run_list_view,
        set_run_list_view,
    )

    view = run_list_view()
    assert view["selectedColumns"][0] == "attributes.`Description`"  # its first line: decision
    assert view["selectedColumns"][1:] == [f"metrics.`{m}`" for m in RUN_LIST_METRICS]
    widths = view["columnWidths"]
    assert sum(widths.values()) + 85 <= 1026  # the table's room at 1280 px (85: selection)
    # with MLflow's assistant panel open: the description and the first four metrics
    first = ["attributes.`Run Name`", "runDateAndNestInfo", *view["selectedColumns"][:5]]
    assert list(widths)[: len(first)] == first and sum(widths[c] for c in first) + 85 <= 682
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("e", (tmp_path / "artifacts").as_uri())
    set_run_list_view(client, experiment)
    set_run_list_view(client, experiment)
    tag = client.get_experiment(experiment).tags[f"mlflow.sharedViewState.{RUN_LIST_VIEW}"]
    assert json.loads(tag) == view
    assert run_list_url("http://ui", experiment) == (
        f"http://ui/#/experiments/{experiment}/runs?viewStateShareKey={RUN_LIST_VIEW}"
    )

    class Refusing(MlflowClient):
        def set_experiment_tag(self, *args, **kwargs):
            raise MlflowException("PERMISSION_DENIED: experiment tags are read-only here")

    other = client.create_experiment("f", (tmp_path / "artifacts").as_uri())
    set_run_list_view(Refusing(f"sqlite:///{tmp_path / 'mlflow.db'}"), other)
    assert f"mlflow.sharedViewState.{RUN_LIST_VIEW}" not in client.get_experiment(other).tags


def test_the_relog_hint_names_the_store_and_never_its_credentials(tmp_path):
    from fairpca.tasks.mlflow_logging import relog_hint

    hint = relog_hint(tmp_path / "run", "http://mlflow.example:5000")
    assert f"`fairpca relog {tmp_path / 'run'} --tracking-uri http://mlflow.example:5000`" in hint
    secret = relog_hint(tmp_path / "run", "postgresql://alice:s3cret@db/mlflow")
    assert "s3cret" not in secret and "--tracking-uri <that URI>" in secret
