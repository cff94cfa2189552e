"""The promotion rule: the challenger meets the champion on the same test rows, and an audit
under a laxer gate policy never moves ``champion``."""

from __future__ import annotations

import pytest

from fairpca.flows.champion import decide_promotion
from fairpca.flows.config import AuditConfig
from fairpca.tasks.select import Decision, GatePolicy


def _policy(**values):
    return GatePolicy.from_config(AuditConfig(dataset="adult", **values).selection)


def _metrics(accuracy, balanced):
    return {
        "accuracy": accuracy,
        "accuracy.ci95_low": accuracy - 0.02,
        "accuracy.ci95_high": accuracy + 0.02,
        "balanced_accuracy": balanced,
        "balanced_accuracy.ci95_low": balanced - 0.02,
        "balanced_accuracy.ci95_high": balanced + 0.02,
    }


def test_challenger_replaces_the_champion_only_when_not_worse_on_the_shared_rows():
    policy = _policy()
    champion = {"version": "3", "tags": policy.tags()}
    passed = Decision(True, ["passes the gate"])
    worse = {**_metrics(0.80, 0.62), "name": "fair_pca/logreg@lambda=0"}
    decision, record = decide_promotion(passed, worse, champion, _metrics(0.82, 0.70), policy)
    assert not decision.promote and record["outcome"] == "champion kept"
    assert "balanced_accuracy 0.6200 < champion 0.7000 - 0.01" in record["reason"]
    assert record["metrics"]["champion"]["balanced_accuracy.ci95_low"] == pytest.approx(0.68)
    assert record["challenger"] == "fair_pca/logreg@lambda=0"
    as_good = _metrics(0.815, 0.695)
    decision, record = decide_promotion(passed, as_good, champion, _metrics(0.82, 0.70), policy)
    assert decision.promote and record["outcome"] == "champion replaced"
    failed = Decision(False, ["fails the gate"])
    decision, record = decide_promotion(failed, as_good, champion, _metrics(0.5, 0.5), policy)
    assert not decision.promote and record["outcome"] == "champion kept"
    decision, record = decide_promotion(passed, as_good, None, None, policy)
    assert decision.promote and record is None


def test_a_laxer_gate_policy_may_not_move_the_champion():
    strict = _policy(gate="upper_bound")
    champion = {"version": "2", "tags": strict.tags()}
    passed = Decision(True, ["passes its gate"])
    better = _metrics(0.9, 0.8)
    for lax in (
        _policy(gate="point"),
        _policy(policy="demographic_parity", gate="upper_bound"),
        _policy(thresholds={"max_dp_difference": 0.1}, gate="upper_bound"),
    ):
        decision, record = decide_promotion(passed, better, champion, _metrics(0.8, 0.7), lax)
        assert not decision.promote
        assert record["outcome"] == "refused: laxer gate"
        assert "laxer than the one champion v2 was chosen under" in record["reason"]
    stricter = _policy(
        policy="demographic_parity+four_fifths+equal_opportunity", gate="upper_bound"
    )
    decision, record = decide_promotion(passed, better, champion, _metrics(0.8, 0.7), stricter)
    assert decision.promote and record["outcome"] == "champion replaced"


def test_a_version_without_policy_tags_was_chosen_under_the_legacy_pair():
    legacy = GatePolicy.from_tags(
        {"threshold.max_dp_difference": "0.05", "threshold.max_eo_difference": "0.1",
         "threshold.min_accuracy": "0.0", "fairness.gate": "upper_bound"}
    )  # fmt: skip
    assert legacy.name == "demographic_parity+equal_opportunity"
    assert _policy(gate="upper_bound").laxer_than(legacy) == ["it does not gate equal_opportunity"]
    assert _policy().laxer_than(legacy) == [
        "it does not gate equal_opportunity",
        "it judges point estimates, not the 95% interval bounds",
    ]
