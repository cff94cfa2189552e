"""Re-log a kept audit output directory to MLflow (after a tracking outage).

Only what the audit wrote and signed is logged: the directory must verify against its seal
(:mod:`fairpca.tasks.signing`: every file's size and SHA-256 in a manifest authenticated by
an HMAC with this user's key, which the directory does not hold), and the model must pass
:func:`fairpca.tasks.mlflow_logging.check_relog_dir` (skops only, no code, pinned
requirements, only the project's fixed trusted types). Nothing in the directory is executed
or unpickled. Relog completes the run the audit created (recorded in the seal and checked on
the server) or creates a new one; the alias moves only with ``promote`` and only when the
verified record decided to promote. Metric points already in the run are not logged again.
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
    """Log ``output_dir`` (written and sealed by an audit) to MLflow, completing its run.

    ``tracking_uri`` None reads ``$MLFLOW_TRACKING_URI`` (so credentials never become a flow
    parameter). The alias moves only with ``promote=True`` and only if the verified audit
    record decided to promote; otherwise it is left where it is.
    """
    status_path = Path(output_dir) / STATUS_FILE
    if status_path.is_file() and not force:
        status = json.loads(status_path.read_text())
        if status.get("status") == "FINISHED":
            raise ValueError(
                f"{output_dir} was already logged completely (run {status.get('run_id')}); "
                "pass --force (force=True) to log it once more."
            )
    audit = read_audit(Path(output_dir))
    logged = log_output_dir(  # verifies the seal before any run or version is created
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
        The directory is not the one the audit wrote and signed, its model is not the skops
        model the audit saved (see :func:`fairpca.tasks.mlflow_logging.check_relog_dir`), its
        record sets reserved tags, or it was logged before.
    """
    directory = Path(output_dir)
    if not (directory / "audit.json").is_file():
        read_audit(directory)  # the message for a directory that is no audit's
    check_relog_dir(directory)
    read_audit(directory)
    if mask_credentials(tracking_uri) != tracking_uri:  # credentials stay out of parameters
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
        tracking_uri = None
    return relog(str(directory.resolve()), tracking_uri, force, promote)
