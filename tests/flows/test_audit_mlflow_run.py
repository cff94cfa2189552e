"""What a reviewer sees of one audit in MLflow and Prefect: the experiment's kind, the run's
description, span, curated tags, lambda-readable histories and hashes, the registered
version's description, and the flow run's verdict and candidate artifacts (a real German
audit against a real MLflow SQLite store and the Prefect test server)."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from pathlib import Path

import pytest

from fairpca.tasks.record import resolved_model_name

pytestmark = [pytest.mark.flow, pytest.mark.slow]


@pytest.fixture(scope="module")
def audited(prefect_harness, mlflow_store, tmp_path_factory):
    """A tiny German audit, its result and its wall time in seconds (after a first flow run
    has started Prefect's client, which the audit's own span does not include)."""
    from prefect import flow

    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig

    flow(lambda: None, name="warm-up")()

    out = tmp_path_factory.mktemp("mlflow-run")
    config = AuditConfig(
        dataset="german",
        k=10,  # k=2 leaves German no useful classifier: nothing would be registered
        variants=["pca", "fair_pca"],
        lambdas=[0.0, 0.5, 1.0],
        classifiers=["linear_svm"],
        tracking_uri=mlflow_store[0],
        output_dir=out / "out",
        experiment_name=f"reviewer-view-{out.name}",
        model_name=f"reviewer-view-{out.name}",
        thresholds={
            "max_dp_difference": 1.0,
            "max_eo_difference": 1.0,
            "min_selection_rate_ratio": 0.0,
        },
    )
    started = time.time()
    result = fairness_audit(config)
    return config, result, time.time() - started


def test_experiment_opens_as_model_development(audited, mlflow_store):
    from fairpca.tasks.mlflow_store import EXPERIMENT_KIND_TAG

    config, result, _ = audited
    experiment = mlflow_store[1].get_experiment(result.experiment_id)
    assert experiment.name == config.tracking.experiment_name
    assert experiment.tags[EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_existing_experiment_gets_the_kind_tag_once(mlflow_store, tmp_path):
    from fairpca.tasks.mlflow_store import EXPERIMENT_KIND_TAG, get_or_create_experiment

    uri, client = mlflow_store
    name = f"older-{tmp_path.name}"
    created = client.create_experiment(name, tmp_path.as_uri())  # as an older fairpca did
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(created).tags
    assert get_or_create_experiment(client, name, uri) == created
    assert get_or_create_experiment(client, name, uri) == created
    assert client.get_experiment(created).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_run_description_states_the_verdict(audited, mlflow_store):
    _, result, _ = audited
    run = mlflow_store[1].get_run(result.run_id)
    note = run.data.tags["mlflow.note.content"]
    assert result.decision == "promote"  # the fixture's thresholds are lax: a useful fit passes
    test = result.selection["test"]
    lines = note.splitlines()
    # plain text first (the run list shows it as it is), then the compact table of 2 rows
    assert lines[0].startswith(f"PROMOTED to champion: test ΔDP {test['dp_difference']:.3f}")
    assert lines[4].startswith(f"| chosen | {test['accuracy']:.3f} |")
    assert lines[5].startswith("| unconstrained PCA | ")
    sizes = result.record.split_sizes  # a small table: chosen by cross-validation
    seen = sizes.train + sizes.validation
    assert f"Chosen on the cross-validated training+validation rows ({seen:,}): " in note
    chosen_row = next(line for line in lines[6:] if line.startswith("| chosen | "))
    interval = f"{test['accuracy.ci95_low']:.3f}–{test['accuracy.ci95_high']:.3f}"
    assert f"{test['accuracy']:.3f} ({interval})" in chosen_row
    assert "| majority class |" in note and "| age: under 25 |" in note  # groups by name
    assert "Reasons:" in note and "model_card.md" in note


def test_the_run_list_and_the_run_page_lead_with_the_verdict(audited, mlflow_store):
    """The experiment holds the run list's verdict view; the run's first metrics (the run
    page lists them as logged) are the headline test numbers."""
    from fairpca.tasks.mlflow_logging import RUN_LIST_VIEW, run_list_view

    _, result, _ = audited
    client = mlflow_store[1]
    tags = client.get_experiment(result.experiment_id).tags
    assert json.loads(tags[f"mlflow.sharedViewState.{RUN_LIST_VIEW}"]) == run_list_view()
    metrics = list(client.get_run(result.run_id).data.metrics)
    assert metrics[:3] == ["accuracy", "balanced_accuracy", "dp_difference"]
    assert metrics.index("eo_difference") < metrics.index("validation.accuracy")


def test_run_spans_the_audit(audited, mlflow_store):
    """The run starts when the audit started and ends when its logging ended (not the moment
    the run was created): its duration is the audit's wall time, less the Prefect client's
    engine's start of the flow run (about a second)."""
    from fairpca.tasks.mlflow_logging import read_audit

    _, result, wall = audited
    run = mlflow_store[1].get_run(result.run_id)
    record = read_audit(Path(result.output_dir))
    assert run.info.start_time == int(record.started_at.timestamp() * 1000)
    assert run.info.end_time > int(record.ended_at.timestamp() * 1000)
    duration = (run.info.end_time - run.info.start_time) / 1000
    assert wall - 4.0 < duration <= wall, (duration, wall)


def test_run_tags_are_curated_and_hashes_are_one_artifact(audited, mlflow_store, tmp_path):
    _, result, _ = audited
    client = mlflow_store[1]
    run = client.get_run(result.run_id)
    ours = {key for key in run.data.tags if not key.startswith("mlflow.")}
    assert len(ours) <= 15, sorted(ours)
    assert not any("sha256" in key for key in ours)
    assert run.data.tags["fairpca.chosen"] == result.selection["chosen"]["name"]
    local = Path(client.download_artifacts(result.run_id, "hashes.json", str(tmp_path)))
    hashes = json.loads(local.read_text())
    assert set(hashes) >= {"fair_pca/components_", "fair_pca/mean_", "pca/components_"}
    record = json.loads((Path(result.output_dir) / "audit.json").read_text())
    assert hashes == record["hashes"]


def test_sweep_histories_show_lambda(audited, mlflow_store):
    _, result, _ = audited
    client = mlflow_store[1]
    lambdas = client.get_metric_history(result.run_id, "fair_pca/lambda")
    assert sorted((m.step, m.value) for m in lambdas) == [(0, 0.0), (1, 0.5), (2, 1.0)]
    accuracy = client.get_metric_history(result.run_id, "fair_pca/linear_svm/accuracy")
    assert sorted(m.step for m in accuracy) == [0, 1, 2]
    assert client.get_metric_history(result.run_id, "pca/lambda") == []  # PCA has no lambda


def test_group_names_are_the_datas_own(audited, mlflow_store):
    """German's loader codes age as 0 / 1; the audit shows "under 25" / "25 or older"."""
    _, result, _ = audited
    metrics = mlflow_store[1].get_run(result.run_id).data.metrics
    assert {"selection_rate.age:under 25", "selection_rate.age:25 or older"} <= set(metrics)
    assert not any(key.endswith(("age:0", "age:1")) for key in metrics)
    assert set(result.selection["group_sizes"]["age"]) == {"under 25", "25 or older"}
    card = (Path(result.output_dir) / "model_card.md").read_text()
    assert "| age | under 25 |" in card and "| age | 25 or older |" in card


def test_version_description_fits_and_links_the_card(audited, mlflow_store):
    from fairpca.tasks.report import DESCRIPTION_MAX_CHARS

    config, result, _ = audited
    version = mlflow_store[1].get_model_version(
        resolved_model_name(config.source, config.tracking.model_name), result.model_version
    )
    assert len(version.description) <= DESCRIPTION_MAX_CHARS
    assert version.description.startswith("PROMOTED to champion: test ΔDP ")
    # a SQLite store has no web address: links any MLflow UI of the store resolves
    pages = f"#/experiments/{result.experiment_id}/runs/{result.run_id}/artifactPath"
    assert f"[Model card]({pages}/model_card.md)" in version.description
    assert f"[Report]({pages}/report/report.html)" in version.description
    assert f"`runs:/{result.run_id}/model_card.md`" in version.description
    assert "| age: 25 or older |" in version.description
    assert version.tags["fairness.decision"] == "promote"
    assert len(version.tags) <= 21, sorted(version.tags)  # 20 and the graph's fairpca.onnx_sha256


def test_prefect_flow_run_shows_verdict_and_candidates(audited, mlflow_store):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    _, result, _ = audited
    flow_run_id = mlflow_store[1].get_run(result.run_id).data.tags["fairpca.prefect_flow_run_id"]
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    by_type = {artifact.type: artifact for artifact in artifacts}
    markdown = by_type["markdown"].data
    assert markdown.startswith(f"# Fairness audit {result.run_name}")
    assert "PROMOTED to champion: test ΔDP " in markdown and "| majority class |" in markdown
    table = by_type["table"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert {"majority", "chosen"} <= {row["role"] for row in rows}


def test_relog_keeps_the_audits_span(audited, mlflow_store):
    """A later relog's run spans the audit as recorded, not the relog."""
    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import read_audit

    config, result, _ = audited
    client = mlflow_store[1]
    first = client.get_run(result.run_id)
    record = read_audit(Path(result.output_dir))
    again = relog_output_dir(Path(result.output_dir), config.tracking.tracking_uri, force=True)
    second = client.get_run(again["run_id"])
    assert second.info.run_id != first.info.run_id
    assert second.info.start_time == first.info.start_time
    assert second.info.end_time == int(record.ended_at.timestamp() * 1000)

    def table(run):
        return [line for line in run.data.tags["mlflow.note.content"].splitlines() if "|" in line]

    assert table(second) == table(first)  # the same verdict; relog without --promote keeps it
    assert "relog moves no alias without" in second.data.tags["mlflow.note.content"]


# Written only when a champion is demoted: tests/flows/test_retrain.py
# (test_retrain_demotes_a_champion_whose_fairness_broke) checks them.
DEMOTION_TAGS = {"fairpca.champion_demoted_to", "fairpca.needs_review_reason"}


def documented_tags() -> set[str]:
    """Every ``fairpca.<name>`` the README, deployments/README.md and the docs pages name
    that is not a module (``fairpca.metrics``) or a prefix (``fairpca.champion_*``)."""
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", root / "deployments" / "README.md", *root.glob("docs/**/*.rst")]
    names = set()
    for page in pages:
        names |= set(re.findall(r"\bfairpca\.[a-z0-9_]+\b(?![.(])", page.read_text()))
    return {
        name for name in names
        if not name.endswith("_") and importlib.util.find_spec(name) is None
    }  # fmt: skip


def test_every_documented_tag_is_written(audited, mlflow_store):
    """The tags the pages name exist: on the audit's run, its registered version or its
    registered model (or, for a demotion's, on a retrain that demotes)."""
    _, result, _ = audited
    client = mlflow_store[1]
    written = set(client.get_run(result.run_id).data.tags)
    written |= set(client.get_model_version(result.model_name, result.model_version).tags)
    written |= set(client.get_registered_model(result.model_name).tags)
    documented = documented_tags()
    assert {"fairpca.decision", "fairpca.chosen"} <= documented
    assert documented - written - DEMOTION_TAGS == set()


def test_the_verdict_is_where_an_operator_looks(audited, mlflow_store):
    """The MLflow run's ``fairpca.decision`` says what the terminal says (``Decision:
    PROMOTED``); the flow run's final state message and its last log line state the decision,
    its numbers and the deciding reason (``prefect deployment run --watch``, ``prefect
    flow-run inspect`` and the UI show them)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    from fairpca.flows.console import decision_line
    from fairpca.tasks.report import build_verdict

    _, result, _ = audited
    tags = mlflow_store[1].get_run(result.run_id).data.tags
    said = decision_line(result, None)
    assert "PROMOTED" in said and tags["fairpca.decision"] == "promoted"
    verdict = build_verdict(result.record, result.promotion)
    expected = f"{verdict.line} {verdict.why}."
    assert verdict.why and verdict.line.startswith("PROMOTED to champion: test ΔDP ")
    APILogWorker.drain_all(timeout=10)
    flow_run_id = tags["fairpca.prefect_flow_run_id"]
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run_id).state
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    assert state.is_completed() and state.message == expected
    verdicts = [log.message for log in logs if log.message.startswith("Verdict: ")]
    assert verdicts == [f"Verdict: {expected}"]
