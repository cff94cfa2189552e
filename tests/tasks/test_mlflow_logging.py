"""Logging to MLflow (``fairpca.tasks.mlflow_logging``): transient errors told apart."""

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
