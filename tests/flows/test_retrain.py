"""The retrain flow watches its champion: re-checked on new data before any challenger is
trained, demoted to ``needs-review`` when its fairness broke (real Prefect + MLflow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from messages import matching

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def people(n: int, *, shift_b: float, seed: int) -> pd.DataFrame:
    """Two equal groups; the label follows x1 + x2/2 the same way in both.

    ``shift_b`` moves group b's ``x1`` up and its label threshold with it: the label rate
    per group stays, but a model fitted on unshifted rows now says "yes" to b far more
    often (its demographic parity and equal opportunity gaps break).
    """
    rng = np.random.default_rng(seed)
    group = np.where(np.arange(n) % 2 == 0, "a", "b")
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    score = x1 + 0.5 * x2 + rng.normal(size=n)  # no single column predicts it too well
    b = group == "b"
    x1 = x1 + shift_b * b
    return pd.DataFrame(
        {
            "x1": x1,
            "x2": x2,
            "x3": rng.normal(size=n),
            "group": group,
            "outcome": np.where(score > 0, "yes", "no"),
        }
    )


def config_for(path: Path, store, tmp_path, **overrides):
    from fairpca.flows.config import RetrainConfig

    values = {
        "data": path,
        "label": "outcome",
        "positive_label": "yes",
        "sensitive": ["group"],
        "k": 2,
        "variants": ["pca", "fair_pca"],
        "lambdas": [0.0, 1.0],
        "classifiers": ["logreg"],
        "tracking_uri": store[0],
        "output_dir": tmp_path / "out",
        "experiment_name": "retrain-tests",
        # 500 validation rows, 250 per group: the upper 95% bound of a DP difference lies
        # ~0.14 above its estimate here (simultaneous per-group intervals)
        "thresholds": {"max_dp_difference": 0.25, "max_eo_difference": 0.3},
        "gate": "upper_bound",  # the strict bound, so a later audit under "point" is laxer
        **overrides,
    }
    return RetrainConfig(**values)


def week(tmp_path: Path, name: str, frame: pd.DataFrame, file: str = "loans.csv") -> Path:
    """The same file name each week (the audit's definition stays the same)."""
    folder = tmp_path / name
    folder.mkdir()
    frame.to_csv(folder / file, index=False)
    return folder / file


@pytest.mark.e2e  # whole audits in sequence (about 30 s); CI runs them with -m e2e
def test_retrain_demotes_a_champion_whose_fairness_broke(prefect_harness, mlflow_store, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from fairpca.flows.retrain import retrain
    from fairpca.tasks.report import build_verdict

    _uri, client = mlflow_store
    steady = week(tmp_path, "week1", people(2000, shift_b=0.0, seed=1))
    first = retrain(config_for(steady, mlflow_store, tmp_path))
    name = first.model_name
    assert name.startswith("fairpca-loans-outcome-group-")  # positive label: hashed
    assert first.champion_moved and first.model_version == "1"

    # group b's features shift: the champion's fairness breaks on the new rows
    broken = week(tmp_path, "week3", people(2000, shift_b=1.5, seed=3))
    before = client.get_model_version_by_alias(name, "champion").version
    state = retrain(config_for(broken, mlflow_store, tmp_path), return_state=True)
    result = state.result()
    assert state.is_completed()
    assert f"champion v{before} of {name} fails the gate on the new data" in state.message
    assert "moved to 'needs-review'" in state.message
    # the challenger's verdict is the run's outcome too (prefect flow-run inspect, the UI)
    verdict = build_verdict(result.record, result.promotion)
    assert state.message.endswith(f" Verdict: {verdict.line} {verdict.why}.")

    run = client.get_run(result.run_id)
    metrics = run.data.metrics
    assert metrics["champion_test_dp_difference"] > 0.15  # measured, not read from tags
    assert {"champion_test_accuracy", "champion_test_eo_difference"} <= set(metrics)
    assert run.data.tags["fairpca.champion_demoted_to"] == "needs-review"
    demoted = client.get_model_version_by_alias(name, "needs-review")
    assert demoted.version == before
    assert "DP difference" in demoted.tags["fairpca.needs_review_reason"]
    assert result.reasons[0].startswith(f"champion v{before} of {name} fails the gate")
    # the old champion is not the yardstick any more: the gate alone decides
    gate_alone = "no current champion: the gate alone decides" in result.reasons
    assert (
        gate_alone == result.champion_moved
        or "the audit did not promote the challenger" in result.reasons[1]
    )
    aliases = client.get_registered_model(name).aliases
    assert str(aliases.get("champion")) != before
    assert (str(aliases.get("champion")) == result.model_version) == result.champion_moved

    # a champion whose registered file no longer matches its SHA-256 is not loaded: demoted
    from fairpca.tasks.registry import MODEL_FILE_SHA_TAG
    from fairpca.tasks.trust import SHA256_CHANGED

    steady_again = week(tmp_path, "week4", people(2000, shift_b=0.0, seed=4))
    assert retrain(config_for(steady_again, mlflow_store, tmp_path)).champion_moved
    champion = client.get_model_version_by_alias(name, "champion").version
    client.set_model_version_tag(name, champion, MODEL_FILE_SHA_TAG, "0" * 64)
    state = retrain(config_for(steady_again, mlflow_store, tmp_path), return_state=True)
    assert f"champion v{champion} of {name} fails the gate" in state.message
    assert "cannot be verified" in state.message
    assert re.search(matching(SHA256_CHANGED, expected="0" * 64), state.message)
    assert client.get_model_version_by_alias(name, "needs-review").version == champion
    assert "champion_test_accuracy" not in client.get_run(state.result().run_id).data.metrics

    key = f"champion-watch-{name}".lower()
    with get_client(sync_client=True) as prefect:
        artifacts = prefect.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
        )
    latest = max(artifacts, key=lambda artifact: artifact.created)
    assert "fails the gate on the new data" in latest.data and "needs-review" in latest.data


@pytest.mark.e2e  # whole audits in sequence (about 30 s); CI runs them with -m e2e
def test_champion_and_challenger_are_compared_on_the_same_test_rows_and_a_laxer_gate_is_refused(
    prefect_harness, mlflow_store, tmp_path
):
    """The second week's challenger meets the champion on the new test part (which no choice
    read): the record holds both with intervals, and the champion's numbers are exactly its
    predictions on those rows. A later audit under the laxer ``point`` gate passes its own
    gate but may not move ``champion``: it is refused, saying why."""
    from fairpca.flows.retrain import retrain
    from fairpca.tasks.data import load_source, split_data
    from fairpca.tasks.evaluate import classifier_metrics
    from fairpca.tasks.registry import load_registered_pipeline
    from fairpca.tasks.select import POLICY_LAXER

    uri, client = mlflow_store
    model_name = f"fairpca-compare-{tmp_path.name}"
    first = retrain(
        config_for(week(tmp_path, "w1", people(2000, shift_b=0.0, seed=11)), mlflow_store,
                   tmp_path, model_name=model_name)
    )  # fmt: skip
    assert first.champion_moved
    second_config = config_for(
        week(tmp_path, "w2", people(2000, shift_b=0.0, seed=12)), mlflow_store, tmp_path,
        model_name=model_name,
    )  # fmt: skip
    second = retrain(second_config)
    comparison = json.loads(Path(second.output_dir, "promotion.json").read_text())["comparison"]
    assert comparison["champion_version"] == first.model_version
    assert comparison["rows"].startswith("the test part of this audit")
    champion_side = comparison["metrics"]["champion"]
    for side in ("champion", "challenger"):
        metrics = comparison["metrics"][side]
        assert metrics["accuracy.ci95_low"] <= metrics["accuracy"] <= metrics["accuracy.ci95_high"]
        assert "balanced_accuracy" in metrics
    split = split_data.fn(
        load_source(second_config.source),
        second_config.split,
        second_config.source,
        seed=second_config.seed,
        min_group_size=second_config.evaluation.min_group_size,
    )
    pipeline = load_registered_pipeline(uri, model_name, first.model_version)
    recomputed = classifier_metrics(
        split.y_test, pipeline.predict(split.X_test), split.s_test, min_group_size=30
    )
    assert champion_side["accuracy"] == pytest.approx(recomputed["accuracy"])
    challenger = json.loads(Path(second.output_dir, "audit.json").read_text())["selection"]["test"]
    assert comparison["metrics"]["challenger"]["accuracy"] == challenger["accuracy"]
    assert second.champion_moved == (comparison["outcome"] == "champion replaced")

    champion_before = client.get_model_version_by_alias(model_name, "champion").version
    lax = config_for(
        week(tmp_path, "w3", people(2000, shift_b=0.0, seed=13)), mlflow_store, tmp_path,
        model_name=model_name, gate="point",
    )  # fmt: skip
    third = retrain(lax)
    record = json.loads(Path(third.output_dir, "promotion.json").read_text())["comparison"]
    assert record["outcome"] == "champion kept"
    assert re.search(matching(POLICY_LAXER, version=champion_before), record["reason"])
    assert "point estimates" in record["reason"]
    assert not third.champion_moved and third.decision == "keep"
    assert client.get_model_version_by_alias(model_name, "champion").version == champion_before


def test_final_message_says_when_the_model_has_no_champion(audit_record):
    from fairpca.flows.audit import AuditResult
    from fairpca.flows.retrain import final_message
    from fairpca.tasks.record import PromotionRecord

    name = audit_record.model_name
    demoted = PromotionRecord(
        promote=False, demote=True, champion_version="3",
        reasons=[f"champion v3 of {name} fails the gate on the new data (DP difference 0.2 > "
                 "max 0.05)", "champion v3: the audit did not promote the challenger"],
    )  # fmt: skip
    result = AuditResult(
        record=audit_record, output_dir=".", report_path=".", tracking_uri="sqlite://",
        run_id="r", experiment_id="1", model_version="4", model_version_new=True,
        champion_moved=False, promotion=demoted,
    )  # fmt: skip
    assert final_message(result) == (
        f"champion v3 of {name} fails the gate on the new data (DP difference 0.2 > max 0.05); "
        f"alias moved to 'needs-review' for review; challenger v4 was not promoted; {name} has "
        "no champion until a reviewer acts."
    )
    kept = result.model_copy(
        update={"promotion": PromotionRecord(promote=False, champion_version="3")}
    )
    assert final_message(kept) == (
        f"champion v3 of {name} still meets the gate on the new test rows; challenger v4 was "
        "not promoted."
    )
    first = result.model_copy(
        update={"champion_moved": True, "promotion": PromotionRecord(promote=True)}
    )
    assert final_message(first) == "no champion to re-check; challenger v4 became champion."
