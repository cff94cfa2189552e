"""The one promotion decision: the challenger meets the champion on the same test rows, an
audit under a laxer gate policy never moves ``champion``, a demoted model never takes it back,
and a champion that fails the gate on new rows loses it whatever the challenger does."""

from __future__ import annotations

import re

import pytest
from messages import matching

from fairpca.flows.config import AuditConfig
from fairpca.tasks.select import (
    POLICY_LAXER,
    Challenger,
    Champion,
    Decision,
    GatePolicy,
    decide_promotion,
)


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


PASSED = Decision(True, ("passes the gate",))


def _challenger(test, *, decision=PASSED, policy=None, digest="new"):
    policy = policy or _policy()
    return Challenger("fair_pca/logreg@lambda=0", decision, policy, test, digest)


def _champion(test=None, *, policy=None, **more):
    return Champion("fairpca-x", "3", policy or _policy(), model_digest="old", test=test, **more)


def test_challenger_replaces_the_champion_only_when_not_worse_on_the_shared_rows():
    worse = decide_promotion(_challenger(_metrics(0.80, 0.62)), _champion(_metrics(0.82, 0.70)))
    assert not worse.promote and worse.comparison["outcome"] == "champion kept"
    assert "balanced_accuracy 0.6200 < champion 0.7000 - 0.01" in worse.comparison["reason"]
    assert worse.comparison["metrics"]["champion"]["balanced_accuracy.ci95_low"] == (
        pytest.approx(0.68)
    )
    assert worse.comparison["challenger"] == "fair_pca/logreg@lambda=0"
    as_good = decide_promotion(_challenger(_metrics(0.815, 0.695)), _champion(_metrics(0.82, 0.7)))
    assert as_good.promote and as_good.comparison["outcome"] == "champion replaced"
    failed = Decision(False, ("fails the gate",))
    kept = decide_promotion(_challenger(_metrics(0.9, 0.9), decision=failed), _champion({}))
    assert (
        not kept.promote and kept.comparison["reason"] == "the audit did not promote the challenger"
    )
    alone = decide_promotion(_challenger(_metrics(0.9, 0.9)), None)
    assert alone.promote and alone.comparison is None
    assert alone.reasons == ("no current champion: the gate alone decides",)


def test_a_laxer_gate_policy_may_not_move_the_champion():
    strict = _policy(gate="upper_bound")
    champion = _champion(_metrics(0.8, 0.7), policy=strict)
    better = _metrics(0.9, 0.8)
    for lax in (
        _policy(gate="point"),
        _policy(policy="demographic_parity", gate="upper_bound"),
        _policy(thresholds={"max_dp_difference": 0.1}, gate="upper_bound"),
    ):
        promotion = decide_promotion(_challenger(better, policy=lax), champion)
        assert not promotion.promote
        assert re.search(matching(POLICY_LAXER, version="3"), promotion.reasons[-1])
    stricter = _policy(
        policy="demographic_parity+four_fifths+equal_opportunity", gate="upper_bound"
    )
    assert decide_promotion(_challenger(better, policy=stricter), champion).promote


def test_a_demoted_model_never_takes_the_alias_back_and_the_champion_never_replaces_itself():
    better = _metrics(0.9, 0.8)
    refused = decide_promotion(
        _challenger(better, digest="d1"), None, demoted_models=frozenset({"d1"})
    )
    assert not refused.promote and refused.refused  # the terminal and the run tag: "refused"
    assert "demoted from a protected alias before" in refused.reasons[-1]
    itself = decide_promotion(_challenger(better, digest="old"), _champion(_metrics(0.8, 0.7)))
    assert not itself.promote and "champion v3's own model" in itself.reasons[-1]
    assert not itself.refused  # not promoted: nothing was refused


def test_a_champion_that_fails_on_new_rows_is_demoted_whatever_the_challenger_does():
    failing = _champion(_metrics(0.9, 0.9), demoted="fails the gate on the new data (x)")
    weak = decide_promotion(_challenger(_metrics(0.6, 0.55)), failing)
    assert weak.demote and weak.promote  # no champion left to compare with: the gate decides
    assert weak.reasons[0] == "champion v3 of fairpca-x fails the gate on the new data (x)"
    assert weak.comparison["outcome"] == "champion demoted"
    failed = decide_promotion(
        _challenger(_metrics(0.9, 0.9), decision=Decision(False, ("no",))), failing
    )
    assert failed.demote and not failed.promote


def test_without_the_champion_on_the_same_rows_it_stays_unless_it_cannot_be_verified():
    unmeasured = decide_promotion(_challenger(_metrics(0.9, 0.9)), _champion(None))
    assert (
        not unmeasured.promote
        and "could not be evaluated on this audit's test rows" in (unmeasured.reasons[-1])
    )
    unverified = decide_promotion(_challenger(_metrics(0.9, 0.9)), _champion(unverified="pickle"))
    assert unverified.promote and "champion not comparable: pickle" in unverified.reasons[-1]
