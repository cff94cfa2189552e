"""Re-log a kept audit output directory to MLflow (after a tracking outage).

Nothing in the directory is executed: the saved model is never loaded or unpickled, only
uploaded as files after :func:`fairpca.tasks.mlflow_logging.check_saved_model` (skops format, the
SHA-256 manifest written by the audit) and :func:`fairpca.tasks.mlflow_logging.check_relog_dir` (no
symbolic links, only the project's fixed trusted types) accepted it. The directory's own
``audit.json`` cannot be trusted, so no alias moves unless the user asks (``promote``). Metric
points already in the run are not logged again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from prefect import flow

from fairpca.tasks.mlflow_logging import STATUS_FILE, check_relog_dir, log_output_dir, read_audit

from .config import mask_credentials, resolve_tracking_uri

__all__ = ["relog", "relog_output_dir"]


@flow(name="fairness-relog")
def relog(
    output_dir: str, tracking_uri: str | None, force: bool = False, promote: bool = False
) -> dict[str, Any]:
    """Log ``output_dir`` (written by an audit) to MLflow as a new, complete run.

    ``tracking_uri`` None reads ``$MLFLOW_TRACKING_URI`` (so credentials never become a flow
    parameter). The alias moves only with ``promote=True`` and only if the audit decided to
    promote; otherwise it is left where it is.
    """
    status_path = Path(output_dir) / STATUS_FILE
    if status_path.is_file() and not force:
        status = json.loads(status_path.read_text())
        if status.get("status") == "FINISHED":
            raise ValueError(
                f"{output_dir} was already logged completely (run {status.get('run_id')}); "
                "pass --force (force=True) to log it once more."
            )
    check_relog_dir(Path(output_dir))  # before any run or version is created
    audit = read_audit(Path(output_dir))
    logged = log_output_dir(
        Path(output_dir), resolve_tracking_uri(tracking_uri), promote=None if promote else False
    )
    return {
        "run_id": logged.run_id,
        "model_version": logged.model_version,
        "model_name": audit.model_name,
        "champion_alias": audit.champion_alias,
        "champion_moved": logged.champion_moved,
    }


def relog_output_dir(
    output_dir: Path, tracking_uri: str, force: bool = False, promote: bool = False
) -> dict[str, Any]:
    """Check the directory (no Prefect server yet), then run the :func:`relog` flow.

    Raises
    ------
    FileNotFoundError
        ``output_dir`` holds no ``audit.json``.
    ValueError
        The saved model is not the skops model the audit wrote (see
        :func:`fairpca.tasks.mlflow_logging.check_relog_dir`), or the directory was logged before.
    """
    read_audit(Path(output_dir))
    check_relog_dir(Path(output_dir))
    if mask_credentials(tracking_uri) != tracking_uri:  # credentials stay out of parameters
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
        tracking_uri = None
    return relog(str(Path(output_dir).resolve()), tracking_uri, force, promote)
