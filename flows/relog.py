"""Re-log a kept audit output directory to MLflow (after a tracking outage).

Nothing in the directory is executed: the saved model is never loaded or unpickled, only
uploaded as files after :func:`tasks.mlflow_logging.check_saved_model` (skops format, the
SHA-256 manifest written by the audit) accepted it. Metric points already in the run are not
logged again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow

from tasks.mlflow_logging import STATUS_FILE, check_saved_model, log_output_dir, read_audit

__all__ = ["relog", "relog_output_dir"]


@flow(name="fairness-relog")
def relog(output_dir: str, tracking_uri: str, force: bool = False) -> dict[str, Any]:
    """Log ``output_dir`` (written by an audit) to MLflow as a new, complete run."""
    status_path = Path(output_dir) / STATUS_FILE
    if status_path.is_file() and not force:
        status = json.loads(status_path.read_text())
        if status.get("status") == "FINISHED":
            raise ValueError(
                f"{output_dir} was already logged completely (run {status.get('run_id')}); "
                "pass --force (force=True) to log it once more."
            )
    check_saved_model(Path(output_dir) / "model")  # before any run or version is created
    logged = log_output_dir(Path(output_dir), tracking_uri)
    return {"run_id": logged.run_id, "model_version": logged.model_version}


def relog_output_dir(output_dir: Path, tracking_uri: str, force: bool = False) -> dict[str, Any]:
    """Check the directory (no Prefect server yet), then run the :func:`relog` flow.

    Raises
    ------
    FileNotFoundError
        ``output_dir`` holds no ``audit.json``.
    ValueError
        The saved model is not the skops model the audit wrote (see
        :func:`tasks.mlflow_logging.check_saved_model`), or the directory was logged before.
    """
    read_audit(Path(output_dir))
    check_saved_model(Path(output_dir) / "model")
    return relog(str(Path(output_dir).resolve()), tracking_uri, force)
