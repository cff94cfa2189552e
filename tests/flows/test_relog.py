"""Relog accepts only what the audit wrote and signed, and touches only its own run and model.

One real audit (Prefect test server, real MLflow SQLite store) gives a sealed output
directory; each test copies it, attacks the copy as a reviewer did (forged verdict, another
audit's run, an unrelated model, planted files) and checks the refusal names the problem and
leaves the other run or model as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from messages import matching

pytestmark = [pytest.mark.flow, pytest.mark.slow]

FAIRPCA = [sys.executable, "-c", "from fairpca.flows.entry import main; main()"]


LAX = {"max_dp_difference": 1.0, "max_eo_difference": 1.0, "min_selection_rate_ratio": 0.0}


@pytest.fixture(scope="module")
def audited(prefect_harness, mlflow_store, tmp_path_factory):
    """A real audit of german, logged (and its directory sealed) by the flow."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig

    uri = mlflow_store[0]
    base = tmp_path_factory.mktemp("relog")
    config = AuditConfig(
        dataset="german", k=10, variants=["pca", "fair_pca"], lambdas=[0.0],
        classifiers=["linear_svm"], tracking_uri=uri, output_dir=base / "out",
        model_name=f"relog-own-{base.name}", experiment_name=f"relog-{base.name}",
        thresholds=LAX,  # German's 250 validation rows certify only lax limits
    )  # fmt: skip
    result = fairness_audit(config)
    assert result.champion_moved, result.record.decision.reasons
    return Path(result.output_dir), result


@pytest.fixture
def kept(audited, tmp_path):
    """A copy of the audit's sealed directory (the seal holds relative paths only)."""
    out_dir = tmp_path / audited[0].name
    shutil.copytree(audited[0], out_dir)
    return out_dir


def relog_cli(out_dir: Path, uri: str, *flags: str) -> tuple[int, str]:
    """``fairpca relog`` in a subprocess on the session's Prefect API (as on a machine with a
    Prefect server; the temporary server of a bare shell is tests/flows/test_runtime.py's):
    exit code and stderr then stdout, with the wrapping undone."""
    from prefect.settings import PREFECT_API_URL

    done = subprocess.run(
        [*FAIRPCA, "relog", str(out_dir), "--tracking-uri", uri, *flags],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "COLUMNS": "200", "PREFECT_API_URL": PREFECT_API_URL.value()},
    )  # fmt: skip
    return done.returncode, " ".join((done.stderr + done.stdout).split())


def runs_of(client, experiment_name: str):
    experiment = client.get_experiment_by_name(experiment_name)
    return client.search_runs([experiment.experiment_id])


def edit_json(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def forge_seal(out_dir: Path) -> None:
    """Rewrite the seal's manifest to match the directory as it is now (what an attacker
    without the key can do); the MAC is left as it was."""
    from fairpca.tasks.trust import SEAL_FILE, UNSEALED_FILES, sha256_file

    def match(seal):
        seal["files"] = {
            p.relative_to(out_dir).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(out_dir.rglob("*"))
            if p.is_file() and p.relative_to(out_dir).as_posix() not in UNSEALED_FILES
        }

    edit_json(out_dir / SEAL_FILE, match)


def test_the_audit_seals_its_directory_and_binds_its_run(audited, mlflow_store):
    from fairpca.tasks.mlflow_logging import check_relog_dir
    from fairpca.tasks.trust import bound_run, key_path

    out_dir, result = audited
    record = check_relog_dir(out_dir)
    assert {"audit.json", "metrics.csv", "report.md", "model/MLmodel"} <= set(record["files"])
    assert any(name.startswith("projection/") for name in record["files"])
    assert bound_run(record) == {"run_id": result.run_id, "experiment_id": result.experiment_id}
    assert oct(key_path().stat().st_mode & 0o777) == "0o600"
    assert not key_path().resolve().is_relative_to(out_dir.resolve())


def test_a_folder_sealed_before_its_report_gets_it_at_relog(kept, mlflow_store, tmp_path):
    """An audit stopped during its champion look-up (a stop signal, a killed process) left
    its results sealed without the report, which waits for the promotion: relog writes the
    report, seals it with the folder, and logs it."""
    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import PROMOTION_FILE, STATUS_FILE, check_relog_dir
    from fairpca.tasks.trust import seal_output_dir

    uri, client = mlflow_store
    for name in ("report.md", "report.html", PROMOTION_FILE, STATUS_FILE, "model_card.md"):
        (kept / name).unlink(missing_ok=True)
    seal_output_dir(kept)  # as the audit's first seal, before any network call
    assert "report.md" not in check_relog_dir(kept)["files"]

    logged = relog_output_dir(kept, uri)
    sealed = check_relog_dir(kept)  # the folder verifies, its report sealed with it
    assert {"report.md", "report.html"} <= set(sealed["files"])
    assert sealed["run"]["run_id"] == logged["run_id"]
    assert client.get_run(logged["run_id"]).info.status == "FINISHED"
    uploaded = client.download_artifacts(logged["run_id"], "report/report.md", str(tmp_path))
    assert Path(uploaded).read_bytes() == (kept / "report.md").read_bytes()


def test_swapped_model_with_forged_verdict_is_refused_and_no_champion_moves(
    kept, audited, mlflow_store, tmp_path
):
    """The audit's own preprocessor + a constant classifier, audit.json rewritten to promote
    with dp 0, the manifest rewritten to match: refused; the champion stays."""
    import skops.io
    from sklearn.dummy import DummyClassifier
    from sklearn.pipeline import Pipeline

    uri, client = mlflow_store
    result = audited[1]
    model_file = kept / "model" / "model.skops"
    pipeline = skops.io.load(model_file, trusted=skops.io.get_untrusted_types(file=model_file))
    X = pipeline.named_steps["preprocess"]
    forged = Pipeline([("preprocess", X), ("classify", DummyClassifier(strategy="constant",
                                                                        constant=0))])  # fmt: skip
    forged.named_steps["classify"].fit([[0]], [0])
    skops.io.dump(forged, model_file)

    def promote(audit):
        audit["decision"] = {"promote": True, "reasons": ["forged"]}
        audit["selection"]["test"]["dp_difference"] = 0.0
        audit["tags"]["mlflow.user"] = "someone-else"

    edit_json(kept / "audit.json", promote)
    forge_seal(kept)
    champion_before = client.get_registered_model(result.model_name).aliases
    versions_before = len(client.search_model_versions(f"name = '{result.model_name}'"))
    code, said = relog_cli(kept, uri, "--promote", "--force")
    assert code == 1, said
    assert "does not verify with this user's signing key" in said
    assert "Traceback" not in said
    assert client.get_registered_model(result.model_name).aliases == champion_before
    assert len(client.search_model_versions(f"name = '{result.model_name}'")) == versions_before


def test_a_signed_binding_to_another_audits_run_is_refused(kept, audited, mlflow_store):
    """Even a record signed with the key (a bug, a copied directory) only resumes a run whose
    audit id and run name are its own on the server."""
    from fairpca.tasks.mlflow_logging import NOT_ITS_RUN, MlflowLoggingError, log_output_dir
    from fairpca.tasks.trust import bind_run

    uri, client = mlflow_store
    result = audited[1]
    victim = client.create_run(
        result.experiment_id, run_name="audit-other", tags={"fairpca.audit_id": "audit-other"}
    )
    bind_run(kept, run_id=victim.info.run_id, experiment_id=result.experiment_id)
    with pytest.raises(MlflowLoggingError, match=matching(NOT_ITS_RUN, run_id=victim.info.run_id)):
        log_output_dir(kept, uri, retries=0)
    after = client.get_run(victim.info.run_id)
    assert after.info.status == "RUNNING" and after.data.tags == victim.data.tags
    assert after.data.metrics == {}


def test_relog_completes_the_run_its_audit_created(prefect_harness, mlflow_store, tmp_path):
    """A logging that failed for good at the registry step (a model of another definition
    holds the name); once that is resolved, relog completes the same run."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig
    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import MlflowLoggingError
    from fairpca.tasks.registry import AUDITED_ANOTHER_WAY, DEFINITION_TAG

    uri, client = mlflow_store
    name = f"relog-resume-{tmp_path.name}"
    client.create_registered_model(name, tags={DEFINITION_TAG: '{"source":"other"}'})
    config = AuditConfig(
        dataset="german", k=10, variants=["pca", "fair_pca"], lambdas=[0.0],
        classifiers=["linear_svm"], tracking_uri=uri, output_dir=tmp_path / "out",
        model_name=name, mlflow_retries=0,
    )  # fmt: skip
    another = matching(AUDITED_ANOTHER_WAY, name=name, recorded='{"source":"other"}')
    with pytest.raises(MlflowLoggingError, match=another):
        fairness_audit(config)
    out_dir = next((tmp_path / "out").iterdir())
    status = json.loads((out_dir / "mlflow_status.json").read_text())
    assert client.get_run(status["run_id"]).info.status == "FAILED"
    client.delete_registered_model(name)
    logged = relog_output_dir(out_dir, uri)
    assert logged["run_id"] == status["run_id"]
    run = client.get_run(status["run_id"])
    assert run.info.status == "FINISHED" and "fairpca.logging_error" not in run.data.tags
    again = relog_output_dir(out_dir, uri, force=True)  # FINISHED: a new run, the old kept
    assert again["run_id"] != status["run_id"]
    assert client.get_run(status["run_id"]).info.status == "FINISHED"


def test_planted_files_are_refused_before_anything_is_uploaded(kept, audited, mlflow_store):
    """A 1 GiB .npy (sparse) among the matrices and a pickle: refused in seconds, named."""
    import pickle

    uri, client = mlflow_store
    variant = next((kept / "projection").iterdir())
    with (variant / "big.npy").open("wb") as handle:
        handle.truncate(2**30)
    (kept / "extra.pkl").write_bytes(pickle.dumps({"x": 1}))
    experiment = json.loads((kept / "audit.json").read_text())["experiment_name"]
    runs_before = len(runs_of(client, experiment))
    started = time.perf_counter()
    code, said = relog_cli(kept, uri, "--force")
    assert code == 1, said
    compact = said.replace(" ", "")  # a long path may wrap anywhere
    assert "extra.pkl" in compact and f"projection/{variant.name}/big.npy" in compact
    assert time.perf_counter() - started < 60
    assert len(runs_of(client, experiment)) == runs_before


def test_promote_follows_the_one_decision_and_a_demotion_holds(kept, audited, mlflow_store):
    """Relog moves no alias without --promote; with it, only when the promotion decision
    says so: the audit's own champion, demoted for review, cannot take the alias back by a
    relog of its sealed folder (the same model is not registered again either). The runs
    say so in the terminal's words (issue 51): ``not promoted`` without --promote,
    ``refused`` with it."""
    from pydantic import ValidationError

    from fairpca.tasks.decision import OUTCOMES
    from fairpca.tasks.record import DecisionRecord
    from fairpca.tasks.registry import demote

    uri, client = mlflow_store
    _, result = audited
    name, version = result.model_name, result.model_version
    assert str(client.get_model_version_by_alias(name, "champion").version) == str(version)
    demote(client, name, version, from_alias="champion", to_alias="needs-review", why="drift")
    versions = {v.version for v in client.search_model_versions(f"name = '{name}'")}

    experiment = result.record.experiment_name
    decisions = []
    for flags in (("--force",), ("--force", "--promote")):
        before = {run.info.run_id for run in runs_of(client, experiment)}
        code, said = relog_cli(kept, uri, *flags)
        assert code == 0, said
        (new,) = [run for run in runs_of(client, experiment) if run.info.run_id not in before]
        decisions.append(new.data.tags["fairpca.decision"])
        assert f"Decision: {OUTCOMES[decisions[-1]]} " in said  # the terminal's same words
    assert decisions == ["not promoted", "refused"]
    model = client.get_registered_model(name)
    assert "champion" not in model.aliases and str(model.aliases["needs-review"]) == str(version)
    assert {v.version for v in client.search_model_versions(f"name = '{name}'")} == versions
    with pytest.raises(ValidationError):
        DecisionRecord.model_validate({"promote": "true"})


def test_reserved_tags_in_a_record_are_refused_even_when_signed(kept):
    from fairpca.tasks.mlflow_logging import read_audit
    from fairpca.tasks.trust import seal_output_dir

    edit_json(kept / "audit.json", lambda a: a["tags"].update({"mlflow.user": "x"}))
    seal_output_dir(kept)
    with pytest.raises(ValueError, match=r"sets tag\(s\) \['mlflow.user'\]"):
        read_audit(kept)

    def reserved_version_tag(audit):
        audit["tags"].pop("mlflow.user")
        audit["model_tags"]["mlflow.source"] = "x"

    edit_json(kept / "audit.json", reserved_version_tag)
    with pytest.raises(ValueError, match=r"\['mlflow.source'\]"):
        read_audit(kept)


def test_a_report_swapped_after_the_check_is_not_what_is_uploaded(
    kept, mlflow_store, monkeypatch, tmp_path
):
    """A process watching the folder (inotify) replaces report.html by its own page once
    relog has verified the folder, as the upload starts: the run holds the sealed page."""
    from mlflow import MlflowClient

    from fairpca.flows.relog import relog_output_dir

    uri, client = mlflow_store
    sealed = (kept / "report.html").read_bytes()
    forged = b"<html><script>steal()</script><p>Decision: PROMOTED</p></html>"
    upload = MlflowClient.log_artifact

    def swap_then_upload(self, *args, **kwargs):
        (kept / "report.html").write_bytes(forged)
        return upload(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_artifact", swap_then_upload)
    run_id = relog_output_dir(kept, uri, force=True)["run_id"]
    assert (kept / "report.html").read_bytes() == forged  # the swap happened
    logged = client.download_artifacts(run_id, "report/report.html", str(tmp_path))
    assert Path(logged).read_bytes() == sealed


def test_the_verified_copy_is_private_complete_and_removed(kept):
    import stat

    from fairpca.tasks.mlflow_logging import verified_copy

    with verified_copy(kept) as verified:
        assert stat.S_IMODE(verified.files.parent.stat().st_mode) == 0o700
        copied = {p.relative_to(verified.files).as_posix() for p in verified.files.rglob("*")}
        assert {name for name in copied if (verified.files / name).is_file()} == set(
            verified.record["files"]
        )
    assert not verified.files.exists()


def test_the_seal_covers_the_graph_and_a_changed_graph_is_not_logged(kept, audited):
    """The audit's ONNX graph (german, a linear SVM) is sealed with the folder; one bit
    changed in it, relog's check refuses the folder and names the graph."""
    from fairpca.tasks.mlflow_logging import check_relog_dir
    from fairpca.tasks.trust import SEAL_FILE, SealError, sha256_file

    graph_record = audited[1].record.onnx
    assert graph_record is not None and graph_record.status == "exported"
    sealed = json.loads((kept / SEAL_FILE).read_text())["files"]
    graph = kept / "model" / "model.onnx"
    assert sealed["model/model.onnx"]["sha256"] == sha256_file(graph) == graph_record.sha256
    check_relog_dir(kept)  # as the audit wrote it: accepted
    data = bytearray(graph.read_bytes())
    data[-1] ^= 1
    graph.write_bytes(bytes(data))
    with pytest.raises(SealError, match=r"model/model\.onnx"):
        check_relog_dir(kept)
