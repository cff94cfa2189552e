"""Re-log a kept audit output directory to MLflow (after a tracking outage).

Only what the audit wrote and signed is logged: the directory must verify against its seal
(:mod:`fairpca.tasks.trust`: every file's size and SHA-256 in a manifest authenticated by an
HMAC with this user's key, which the directory does not hold), and the model must pass
:func:`fairpca.tasks.mlflow_logging.check_relog_dir` (skops only, no code, pinned
requirements, only the project's fixed trusted types). Nothing in the directory is executed
or unpickled. An audit stopped during its champion look-up sealed its folder before writing
its report: relog writes it (:func:`fairpca.tasks.mlflow_logging.with_report`). Relog
completes the run the audit created (recorded in the seal and checked on the server) or
creates a new one, and registers the model unless a version of the same model
and training rows exists. The alias moves only with ``promote`` and only when the one
promotion decision (:func:`fairpca.tasks.select.decide_promotion`), against the current
champion and every demotion the registry recorded, says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from prefect import flow

from fairpca.tasks.decision import outcome
from fairpca.tasks.mlflow_logging import (
    AUDIT_FILE,
    PROMOTION_FILE,
    STATUS_FILE,
    check_relog_dir,
    log_output_dir,
    read_audit,
    verified_copy,
    with_report,
)
from fairpca.tasks.mlflow_store import mlflow_client
from fairpca.tasks.record import AuditRecord, PromotionRecord
from fairpca.tasks.report import build_verdict
from fairpca.tasks.select import decide_promotion
from fairpca.tasks.stages import challenger_of, champion_lookup

from .config import mask_credentials, resolve_tracking_uri


def relog_promotion(
    out_dir: Path, audit: AuditRecord, tracking_uri: str, promote: bool, client
):
    """The promotion of a relogged audit: none without ``promote``; otherwise the one
    decision against the registry's champion now, on the rows the audit compared it on when
    the audit's own comparison (its sealed ``promotion.json``) measured that very version.
    ``client``: the command's MLflow client of ``tracking_uri``."""
    if not promote:
        return PromotionRecord(promote=False, reasons=["relog moves no alias without --promote"])
    champion, demoted = champion_lookup(tracking_uri, audit, client=client)
    path = Path(out_dir) / PROMOTION_FILE
    if champion is not None and path.is_file():
        compared = PromotionRecord.model_validate_json(path.read_text()).comparison
        if compared is not None and compared.champion_version == champion.version:
            test = dict(compared.metrics.get("champion", {})) or None
            champion = dataclasses.replace(champion, test=test)
    promotion = decide_promotion(challenger_of(audit), champion, demoted_models=demoted)
    return PromotionRecord.of(promotion, champion)


@flow(name="fairness-relog", persist_result=False)
def relog(
    output_dir: str, tracking_uri: str | None, force: bool = False, promote: bool = False
) -> dict[str, Any]:
    """Log ``output_dir`` (written and sealed by an audit) to MLflow, completing its run.

    ``tracking_uri`` None reads ``$MLFLOW_TRACKING_URI`` (so credentials never become a flow
    parameter). The alias moves only with ``promote=True`` and only if the promotion decision
    says so; otherwise it is left where it is.
    """
    status_path = Path(output_dir) / STATUS_FILE
    if status_path.is_file() and not force:
        status = json.loads(status_path.read_text())
        if status.get("status") == "FINISHED":
            raise ValueError(
                f"{output_dir} was already logged completely (run {status.get('run_id')}); "
                "pass --force (force=True) to log it once more."
            )
    uri = resolve_tracking_uri(tracking_uri)
    # verified (copied, each file hashed once) before anything is asked of the server; all
    # that is read or uploaded afterwards comes from the verified copy
    with verified_copy(Path(output_dir)) as verified:
        audit = read_audit(verified.files)
        client = mlflow_client(uri) if promote else None  # else log_output_dir makes it
        promotion = relog_promotion(verified.files, audit, uri, promote, client)
        verdict = build_verdict(audit, promotion)  # the command's one verdict
        verified = with_report(verified, audit, promotion, verdict)  # an audit stopped early
        logged = log_output_dir(
            Path(output_dir), uri, promotion=promotion, verified=verified, client=client,
            verdict=verdict,
        )  # fmt: skip
    return {
        "run_id": logged.run_id,
        "model_version": logged.model_version,
        "model_name": audit.model_name,
        "champion_alias": audit.champion_alias,
        "champion_moved": logged.champion_moved,
        "decision": outcome(promotion, logged.champion_moved),  # as the run's tag says
        "reasons": list(promotion.reasons),
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
    if not (directory / AUDIT_FILE).is_file():
        read_audit(directory)  # the message for a directory that is no audit's
    check_relog_dir(directory, contents=False)  # quick; the flow hashes the files it copies
    read_audit(directory)
    if mask_credentials(tracking_uri) != tracking_uri:  # credentials stay out of parameters
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
        tracking_uri = None
    return relog(str(directory.resolve()), tracking_uri, force, promote)
