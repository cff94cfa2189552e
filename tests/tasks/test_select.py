"""Eligibility and the gate policy: a constant or near-constant classifier is never eligible,
the gate is a named policy, intersections are gated where their groups are large enough."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from messages import matching

from fairpca.flows.config import AuditConfig
from fairpca.tasks.decision import Kind, Reason
from fairpca.tasks.evaluate import metrics_with_intervals
from fairpca.tasks.select import (
    UNKNOWN_POLICY_PARTS,
    GatePolicy,
    choose,
    ineligibility,
    parse_policy,
    select_candidate,
)


def _config(**values):
    return AuditConfig(dataset="adult", **values).selection


def _row(y, y_pred, groups, **extra):
    """A validation-table row as the sweep builds it (metrics with intervals)."""
    metrics = metrics_with_intervals(y, y_pred, groups, min_group_size=30, n_resamples=300, seed=0)
    share = float(np.mean(y_pred == 1))
    return {"one_class_share": max(share, 1 - share), **metrics, **extra}


def _adult_like(n=2500, seed=0):
    """24% positives, two groups of 1/3 and 2/3 of the rows."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.24).astype(int)
    groups = pd.DataFrame({"sex": np.where(rng.random(n) < 1 / 3, "Female", "Male")})
    return rng, y, groups


def test_a_classifier_saying_yes_for_two_percent_of_rows_is_not_eligible():
    """Case of the near-constant champion: yes for ~2% of rows (mostly right), base rate 24%:
    accuracy beats the majority class, yet balanced accuracy is ~0.54 and the rate collapsed."""
    rng, y, groups = _adult_like()
    y_pred = np.zeros_like(y)
    positives = np.flatnonzero(y == 1)
    y_pred[rng.choice(positives, size=45, replace=False)] = 1  # 45 right
    y_pred[rng.choice(np.flatnonzero(y == 0), size=5, replace=False)] = 1  # 5 wrong
    row = _row(y, y_pred, groups)
    majority = float(np.mean(y == 0))
    assert row["accuracy"] >= majority + 0.01  # the old rule let it through
    reasons = ineligibility(row, majority, _config())
    assert any("balanced accuracy" in reason for reason in reasons)
    assert any("base rate" in reason for reason in reasons)


def test_constant_and_98_7_percent_one_class_classifiers_are_not_eligible():
    rng, y, groups = _adult_like()
    majority = float(np.mean(y == 0))
    constant = _row(y, np.zeros_like(y), groups)
    assert constant["dp_difference"] == 0.0  # trivially "fair"
    assert ineligibility(constant, majority, _config())
    y_pred = np.zeros_like(y)
    y_pred[rng.choice(np.flatnonzero(y == 1), size=int(0.013 * len(y)), replace=False)] = 1
    nearly = _row(y, y_pred, groups)
    assert nearly["one_class_share"] == pytest.approx(0.987, abs=1e-3)
    reasons = ineligibility(nearly, majority, _config())
    assert any("one class for 98.7%" in reason for reason in reasons)


def test_a_useful_classifier_is_eligible():
    rng, y, groups = _adult_like()
    y_pred = np.where(rng.random(len(y)) < 0.8, y, 1 - y)  # 80% right, both classes
    row = _row(y, y_pred, groups)
    assert ineligibility(row, 0.5, _config()) == []


def _table(rows):
    frame = pd.DataFrame(rows)
    frame["variant"] = [r.get("variant", "fair_pca") for r in rows]
    frame["classifier"] = "logreg"
    frame["lambda"] = np.nan
    frame["lambda_index"] = range(len(rows))
    return frame


def test_when_no_candidate_is_eligible_nothing_may_be_registered():
    _, y, groups = _adult_like()
    constant = _row(y, np.zeros_like(y), groups)
    table = _table([constant])
    choice = choose(table, np.zeros(10, dtype=int), y, _config())
    assert choice.eligible is False
    assert choice.eligibility["chosen_passes"] is False
    assert not choice.decision.promote
    first = choice.decision.reasons[0]
    assert first.kind == Kind.NOT_ELIGIBLE and "none_eligible" in first.flags and first.decides


def test_policy_names_parse_and_refuse_unknown_parts():
    assert parse_policy("four_fifths+demographic_parity") == ("demographic_parity", "four_fifths")
    with pytest.raises(ValueError, match=matching(UNKNOWN_POLICY_PARTS, unknown=["fairness"])):
        parse_policy("demographic_parity+fairness")
    with pytest.raises(ValueError, match="policy"):
        AuditConfig(dataset="adult", policy="equal_chance")
    assert AuditConfig(dataset="adult").selection.policy == "demographic_parity+four_fifths"


def test_four_fifths_gates_the_observed_selection_rate_ratio():
    rng, y, groups = _adult_like()
    female = groups["sex"].to_numpy() == "Female"
    # selection rates ~0.15 (Female) vs ~0.25 (Male): ratio ~0.6, DP ~0.10
    y_pred = (rng.random(len(y)) < np.where(female, 0.15, 0.25)).astype(int)
    row = _row(y, y_pred, groups)
    policy = GatePolicy.from_config(_config(policy="four_fifths"))
    failures = policy.failures(row)
    # the four-fifths rule is defined on the observed rates: the estimate is compared
    assert len(failures) == 1 and failures[0].startswith("selection-rate ratio 0.")
    assert row["selection_rate_ratio"] < 0.8 < row["selection_rate_ratio.ci95_high"]
    lax = GatePolicy.from_config(
        _config(policy="four_fifths", thresholds={"min_selection_rate_ratio": 0.3})
    )
    assert lax.failures(row) == []


def test_intersections_are_gated_where_their_groups_are_large_enough():
    """Each attribute alone is balanced, their intersection is not: the gate sees it."""
    rng = np.random.default_rng(1)
    n = 4000
    a = rng.choice(["a0", "a1"], size=n)
    b = rng.choice(["b0", "b1"], size=n)
    y = (rng.random(n) < 0.3).astype(int)
    same = (a == "a0") == (b == "b0")
    y_pred = (rng.random(n) < np.where(same, 0.45, 0.15)).astype(int)  # XOR pattern
    groups = pd.DataFrame({"a": a, "b": b})
    row = _row(y, y_pred, groups)
    assert row["dp_difference"] < 0.05 and row["dp_difference.intersection"] > 0.2
    policy = GatePolicy.from_config(
        _config(policy="demographic_parity", thresholds={"max_dp_difference": 0.1})
    )
    failures = policy.failures(row)
    assert any("of the intersection" in failure for failure in failures)
    assert not any("of the intersection" not in failure for failure in failures)
    # a too-small intersection (no two groups of min_group_size rows) is said to be ungated
    small = {key: value for key, value in row.items() if ".intersection" not in key}
    small |= {"dp_difference.intersection": float("nan")}
    assert policy.failures(small) == []
    assert "not gated" in policy.ungated_note(small)


def test_a_laxer_policy_is_recognised():
    upper = {"gate": "upper_bound"}
    strict = GatePolicy.from_config(_config(policy="demographic_parity+four_fifths", **upper))
    point = GatePolicy.from_config(_config(policy="demographic_parity+four_fifths", gate="point"))
    fewer = GatePolicy.from_config(_config(policy="demographic_parity", **upper))
    wider = GatePolicy.from_config(
        _config(
            policy="demographic_parity+four_fifths", thresholds={"max_dp_difference": 0.2}, **upper
        )
    )
    assert strict.laxer_than(strict) == []
    assert point.laxer_than(strict) == ["it judges point estimates, not the 95% interval bounds"]
    assert fewer.laxer_than(strict) == ["it does not gate four_fifths"]
    assert wider.laxer_than(strict) == ["max_dp_difference 0.2 is laxer than 0.05"]
    assert strict.laxer_than(wider) == []
    assert GatePolicy.from_tags(strict.tags()) == strict


def test_select_candidate_picks_the_most_accurate_eligible_passing_candidate():
    rng, y, groups = _adult_like()
    good = _row(y, np.where(rng.random(len(y)) < 0.8, y, 1 - y), groups, variant="fair_pca")
    better = _row(y, np.where(rng.random(len(y)) < 0.9, y, 1 - y), groups, variant="pca")
    constant = _row(y, np.zeros_like(y), groups, variant="fair_pca_s")
    table = _table([good, better, constant])
    config = _config(policy="demographic_parity", thresholds={"max_dp_difference": 0.1})
    chosen, decision, eligible = select_candidate(table, float(np.mean(y == 0)), config)
    assert eligible and decision.promote and chosen["variant"] == "pca"


def _rate_classifier(rng, y, tpr, fpr):
    """Predictions with the given true- and false-positive rates."""
    return np.where(y == 1, rng.random(len(y)) < tpr, rng.random(len(y)) < fpr).astype(int)


def test_select_candidate_prefers_balanced_accuracy_over_accuracy_by_default():
    """On 24% positives, a cautious classifier (TPR 0.45, FPR 0.02) is more accurate than one
    that finds most positives (TPR 0.75, FPR 0.12); balanced accuracy prefers the second."""
    rng, y, groups = _adult_like()
    cautious = _row(y, _rate_classifier(rng, y, 0.45, 0.02), groups, variant="pca")
    finder = _row(y, _rate_classifier(rng, y, 0.75, 0.12), groups, variant="fair_pca")
    assert cautious["accuracy"] > finder["accuracy"]
    assert cautious["balanced_accuracy"] < finder["balanced_accuracy"]
    table = _table([cautious, finder])
    majority = float(np.mean(y == 0))
    lax = {"policy": "demographic_parity", "thresholds": {"max_dp_difference": 0.2}}
    chosen, decision, _ = select_candidate(table, majority, _config(**lax))
    assert chosen["variant"] == "fair_pca"
    first = decision.reasons[0]
    assert (first.kind, first.measure, first.numbers["passing"]) == (
        Kind.CHOSEN, "balanced_accuracy", 2
    )
    chosen, decision, _ = select_candidate(table, majority, _config(select_by="accuracy", **lax))
    assert chosen["variant"] == "pca"
    assert decision.reasons[0].measure == "accuracy"


def test_the_default_gate_compares_estimates_and_upper_bound_is_the_strict_option():
    """A fair classifier at a 25% selection rate on 2,500 validation rows: its DP estimate is
    small, yet the upper 95% bound exceeds 0.05, so the strict gate would admit only
    classifiers that rarely say yes."""
    rng, y, groups = _adult_like()
    row = _row(y, (rng.random(len(y)) < 0.25).astype(int), groups)
    assert row["dp_difference"] < 0.05 < row["dp_difference.ci95_high"]
    assert AuditConfig(dataset="adult").selection.gate == "point"
    assert GatePolicy.from_config(_config()).failures(row) == []
    assert GatePolicy.from_config(_config(gate="upper_bound")).failures(row) != []


def _gated(dp, dp_se, ratio=0.95, ratio_se=0.02, **extra):
    """An eligible validation row with the gated measures and their standard errors."""
    return {
        "variant": "fair_pca", "classifier": "logreg_tuned", "k": 10, "lambda": 0.0,
        "accuracy": 0.8, "balanced_accuracy": 0.75, "balanced_accuracy.ci95_low": 0.72,
        "balanced_accuracy.ci95_high": 0.78, "positive_rate": 0.3, "base_rate": 0.25,
        "one_class_share": 0.7, "dp_difference": dp, "dp_difference.se": dp_se,
        "selection_rate_ratio": ratio, "selection_rate_ratio.se": ratio_se, **extra,
    }  # fmt: skip


def test_certification_compares_the_95_percent_resolution_with_the_policys_band():
    from fairpca.tasks.select import certification

    policy = GatePolicy.from_config(_config())  # DP <= 0.05, ratio >= 0.8
    assert certification(_gated(0.01, 0.02), policy) == []  # 1.96 x 0.02 = 0.039 <= 0.05
    reasons = certification(_gated(0.01, 0.03, ratio_se=0.11), policy)
    assert len(reasons) == 2
    assert reasons[0].startswith("DP difference is resolved to +/-0.059 (95%), wider than 1 x")
    assert "band of 0.2" in reasons[1]  # 1 - 0.8
    assert certification(_gated(0.01, 0.03), policy, factor=2.0) == []
    assert certification(_gated(0.01, 0.5, ratio_se=0.5), policy, factor=0.0) == []  # off
    assert certification({"dp_difference": 0.01}, policy) == []  # no standard errors: no claim


def test_a_pass_within_one_standard_error_of_the_limit_is_unstable_and_not_preferred():
    from fairpca.tasks.select import unstable_margins

    policy = GatePolicy.from_config(_config())
    assert unstable_margins(_gated(0.02, 0.02), policy) == []  # margin 0.03 >= 0.02
    (reason,) = unstable_margins(_gated(0.04, 0.02), policy)
    assert reason == "DP difference 0.0400 is within 1 standard error (0.0200) of its limit 0.05"
    near = _gated(0.04, 0.02, balanced_accuracy=0.80, k=40)
    clear = _gated(0.01, 0.02, balanced_accuracy=0.75, k=10)
    best, decision, _ = select_candidate(pd.DataFrame([near, clear]), 0.7, _config())
    assert best["k"] == 10 and decision.promote  # the clear pass, although less accurate
    alone, decision, eligible = select_candidate(pd.DataFrame([near]), 0.7, _config())
    assert alone["k"] == 40 and eligible and not decision.promote
    assert decision.deciding.kind == Kind.UNSTABLE


def test_an_uncertifiable_choice_is_not_promoted_and_says_so():
    rows = pd.DataFrame([_gated(0.01, 0.05)])
    choice = choose(rows, np.zeros(10), np.r_[np.zeros(70), np.ones(30)], _config())
    assert not choice.decision.promote
    assert choice.certification["certified"] is False
    first = choice.decision.deciding
    assert (first.kind, first.rows, first.flags) == (
        Kind.TOO_LITTLE_DATA, "validation", ("certification",)
    )
    certified = choose(
        pd.DataFrame([_gated(0.01, 0.01)]),
        np.zeros(10),
        np.r_[np.zeros(70), np.ones(30)],
        _config(),
    )
    assert certified.decision.promote and certified.certification["certified"]


def test_candidate_names_carry_k_when_the_table_has_it():
    from fairpca.tasks.select import candidate_name

    row = {"variant": "fair_pca", "classifier": "logreg_tuned", "lambda": 0.0}
    assert candidate_name(row) == "fair_pca/logreg_tuned@lambda=0"  # tables before the search
    assert candidate_name({**row, "k": 40}) == "fair_pca/logreg_tuned@k=40,lambda=0"
    assert candidate_name({"variant": "pca", "classifier": "logreg", "lambda": float("nan"),
                           "k": 20}) == "pca/logreg@k=20"  # fmt: skip


def test_the_shortlist_puts_eligible_gate_passing_rows_first_and_keeps_a_pca_row():
    from fairpca.tasks.select import shortlist

    rows = [
        _gated(0.2, 0.01, balanced_accuracy=0.9, k=1),  # fails the gate
        _gated(0.01, 0.01, balanced_accuracy=0.7, k=2),
        _gated(0.01, 0.01, balanced_accuracy=0.8, k=3),
        {**_gated(0.3, 0.01, balanced_accuracy=0.95, k=4), "variant": "pca"},
    ]
    picked = shortlist(pd.DataFrame(rows), 0.7, _config(), 2)
    assert [r["k"] for r in picked] == [3, 2, 4]


def _health_insurance_like(n=3000, seed=3):
    """AER HealthInsurance's shape: ~80% insured, three ethnic groups whose base rates differ
    (0.88 / 0.78 / 0.65), so an accurate classifier fails parity while one that says yes to
    94% of every group (no mostly to the uninsured) meets it trivially."""
    rng = np.random.default_rng(seed)
    ethnicity = rng.choice(["cauc", "afam", "other"], size=n, p=[0.6, 0.25, 0.15])
    base = pd.Series(ethnicity).map({"cauc": 0.88, "afam": 0.78, "other": 0.65}).to_numpy()
    y = (rng.random(n) < base).astype(int)
    yes_to_all = np.ones(n, dtype=int)
    for group in np.unique(ethnicity):
        rows = np.flatnonzero(ethnicity == group)
        no = int(0.06 * len(rows))
        negatives, positives = rows[y[rows] == 0], rows[y[rows] == 1]
        yes_to_all[rng.choice(negatives, int(0.8 * no), replace=False)] = 0
        yes_to_all[rng.choice(positives, no - int(0.8 * no), replace=False)] = 0
    useful = _rate_classifier(rng, y, 0.85, 0.30)
    return y, pd.DataFrame({"ethnicity": ethnicity}), yes_to_all, useful


def test_saying_yes_to_nearly_everyone_is_not_eligible_whatever_the_gate_says():
    """HealthInsurance: pca/linear_svm said yes to ~95% (balanced accuracy ~0.56) and was
    promoted as the fair champion; a useful candidate (~0.70) failed the gate. The trivial
    pass (~0.61 here, against ~0.77) is not eligible, named so, and nothing is promoted."""
    y, groups, yes_to_all, useful = _health_insurance_like()
    trivial = _row(y, yes_to_all, groups, variant="pca")
    accurate = _row(y, useful, groups, variant="fair_pca")
    majority = float(np.mean(y == 1))
    assert not ineligibility(trivial, majority, _config())  # the rules alone let it through
    assert GatePolicy.from_config(_config()).failures(trivial) == []
    assert GatePolicy.from_config(_config()).failures(accurate)  # the useful one fails
    choice = choose(_table([trivial, accurate]), np.ones(10, int), y, _config())
    assert not choice.decision.promote
    assert choice.chosen["variant"] == "fair_pca"  # shown for review, not the trivial pass
    first = choice.decision.reasons[0]
    assert first.kind == Kind.NOT_ELIGIBLE and first.numbers["meeting_gate"] == 1
    assert any("says yes to 94" in fact for fact in first.facts)


def test_below_the_majority_class_the_first_reason_is_eligibility_not_the_gate():
    """The candidates meeting the gate do not beat the majority class on the selection
    measure (balanced accuracy ~0.50 against its 0.5): that decided, so it comes first."""
    rng, y, groups = _adult_like(n=1500)
    y = (rng.random(len(y)) < 0.683).astype(int)  # majority class: yes
    weak = _row(y, _rate_classifier(rng, y, 0.50, 0.45), groups)  # balanced accuracy ~0.5
    assert weak["accuracy"] < float(np.mean(y == 1))
    choice = choose(_table([weak]), np.ones(10, int), y, _config())
    assert not choice.decision.promote and not choice.eligible
    first = choice.decision.reasons[0]
    assert first.kind == Kind.NOT_ELIGIBLE and first.numbers["meeting_gate"] == 1
    assert any("is not above chance 0.5" in fact for fact in first.facts)


def _promoted_choice():
    row = _gated(0.01, 0.01)
    choice = choose(pd.DataFrame([row]), np.zeros(10), np.r_[np.zeros(70), np.ones(30)], _config())
    assert choice.decision.promote
    return choice


def _reference(name, value, half, needs=(), test_value=None):
    """A reference meeting the gate on the validation rows at ``value`` +/- ``half``; its test
    rows (reported only) at ``test_value`` (default: the same)."""
    validation = {**_gated(0.01, 0.01), "balanced_accuracy": value,
                  "balanced_accuracy.ci95_low": value - half,
                  "balanced_accuracy.ci95_high": value + half}  # fmt: skip
    test = {**validation, "balanced_accuracy": value if test_value is None else test_value}
    return {"name": name, "approach": "reductions", "needs": list(needs),
            "needs_sensitive_at_prediction": "sensitive_at_prediction" in needs,
            "validation": validation, "test": test}  # fmt: skip


CHOSEN_TEST = {"balanced_accuracy": 0.75, "balanced_accuracy.ci95_low": 0.72,
               "balanced_accuracy.ci95_high": 0.78}  # fmt: skip


def test_a_reference_better_on_the_rows_that_chose_vetoes_when_the_deployment_allows_it():
    """The chosen candidate: balanced accuracy 0.75 [0.72, 0.78] on the validation rows. A
    deployable reference at 0.85 +/- 0.02 there vetoes (margin +0.10, interval above 0); one
    whose interval includes zero is listed; an ineligible one is not compared."""
    from fairpca.tasks.select import judge_references

    references = [
        _reference("threshold_optimizer", 0.77, 0.02),  # interval includes zero
        _reference("exponentiated_gradient", 0.85, 0.02),
    ]
    kept = judge_references(_promoted_choice(), references, CHOSEN_TEST, _config())
    assert not kept.decision.promote
    first = kept.decision.reasons[0]
    assert (first.kind, first.subject, first.rows, first.decides) == (
        Kind.DOMINATED, "exponentiated_gradient", "validation", True
    )
    assert first.numbers["margin"] == pytest.approx(0.10)
    assert first.numbers["margin_low"] == pytest.approx(0.10 - np.hypot(0.03, 0.02))
    listed = [r for r in kept.decision.reasons if r.kind == Kind.BETTER_REFERENCE]
    assert [r.subject for r in listed] == ["threshold_optimizer"]
    useless = [{**references[1], "ineligible": ["says yes for 99.0% of the rows"]}]
    assert judge_references(_promoted_choice(), useless, CHOSEN_TEST, _config()).decision.promote
    anyway = judge_references(_promoted_choice(), references, CHOSEN_TEST,
                              _config(promote_dominated=True))  # fmt: skip
    assert anyway.decision.promote and "overridden" in anyway.decision.reasons[0].flags


def test_a_reference_the_deployment_excludes_never_vetoes_and_is_listed_with_its_margin():
    """Exponentiated gradient decides at random, the threshold optimizer also needs the
    attribute: by default neither vetoes, both are listed as excluded with what enabling them
    takes; with both settings on, the one that needs least decides first."""
    from fairpca.tasks.select import judge_references

    references = [
        _reference("threshold_optimizer", 0.90, 0.02,
                   ("sensitive_at_prediction", "randomized_decisions")),
        _reference("exponentiated_gradient", 0.85, 0.02, ("randomized_decisions",)),
    ]  # fmt: skip
    kept = judge_references(_promoted_choice(), references, CHOSEN_TEST, _config())
    assert kept.decision.promote
    excluded = [r for r in kept.decision.reasons if r.kind == Kind.EXCLUDED_BY_DEPLOYMENT]
    assert {r.subject: r.needs for r in excluded} == {
        "threshold_optimizer": ("sensitive_at_prediction", "randomized_decisions"),
        "exponentiated_gradient": ("randomized_decisions",),
    }
    assert all(r.rows == "validation" and r.numbers["margin_low"] > 0 for r in excluded)
    only_random = _config(randomized_decisions=True)
    vetoed = judge_references(_promoted_choice(), references, CHOSEN_TEST, only_random)
    first = vetoed.decision.reasons[0]
    assert not vetoed.decision.promote and first.subject == "exponentiated_gradient"
    both = _config(randomized_decisions=True, sensitive_at_prediction=True)
    first = judge_references(_promoted_choice(), references, CHOSEN_TEST, both).decision.deciding
    assert (first.kind, first.subject) == (Kind.DOMINATED, "exponentiated_gradient")


def test_the_veto_never_reads_the_test_rows():
    """A reference far better on the test rows but not on the validation rows does not
    veto; one better on the validation rows vetoes whatever its test numbers."""
    from fairpca.tasks.select import judge_references

    only_on_test = _reference("correlation_remover", 0.76, 0.02, test_value=0.95)
    assert judge_references(
        _promoted_choice(), [only_on_test], CHOSEN_TEST, _config()
    ).decision.promote
    worse_on_test = _reference("correlation_remover", 0.85, 0.02, test_value=0.50)
    kept = judge_references(_promoted_choice(), [worse_on_test], CHOSEN_TEST, _config())
    assert not kept.decision.promote
    assert kept.decision.reasons[0].numbers["test_margin"] == pytest.approx(-0.25)


def test_unconstrained_pca_is_named_and_no_constraint_needed_only_when_shown():
    rows = [{**_gated(0.01, 0.01), "variant": "pca", "lambda": float("nan")}]
    _, decision, _ = select_candidate(pd.DataFrame(rows), 0.7, _config())
    assert decision.promote
    first = decision.reasons[0]
    assert first.kind == Kind.CHOSEN and "unconstrained" in first.flags
    assert first.subject == "pca/logreg_tuned@k=10"
    near = [{**_gated(0.045, 0.02), "variant": "pca", "lambda": float("nan")}]
    _, decision, _ = select_candidate(pd.DataFrame(near), 0.7, _config())
    assert not decision.promote and decision.deciding.kind == Kind.UNSTABLE


def test_a_gate_that_could_not_judge_a_large_group_promotes_nothing():
    """Bank marketing's 'unknown' marital status (80 rows) hides 'divorced' (4,612 rows) on
    the validation rows: a gate passed without them is no verdict on them."""
    from fairpca.tasks.select import judged_everywhere

    unjudged = ["the gate did not judge marital: divorced: on the validation rows ..."]
    kept = judged_everywhere(_promoted_choice(), unjudged)
    assert not kept.decision.promote
    first = kept.decision.reasons[0]
    assert first.kind == Kind.TOO_LITTLE_DATA and first.facts == tuple(unjudged)
    assert judged_everywhere(_promoted_choice(), []).decision.promote
    # a gate failed for want of those groups: too little data decides, before the gate
    failed = _promoted_choice()
    gate = Reason(kind=Kind.FAILS_GATE, decides=True)
    failed = dataclasses.replace(failed, decision=failed.decision.leading(gate, False))
    kinds = [r.kind for r in judged_everywhere(failed, unjudged).decision.reasons]
    assert kinds[:2] == [Kind.TOO_LITTLE_DATA, Kind.FAILS_GATE]


def _imbalanced(n=2500, seed=0):
    """8% positives, two groups of 1/3 and 2/3 of the rows, independent of the label."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.08).astype(int)
    groups = pd.DataFrame({"sex": np.where(rng.random(n) < 1 / 3, "Female", "Male")})
    return rng, y, groups


def _candidates(rows):
    frame = pd.DataFrame(rows)
    frame["lambda"] = [r.get("lambda", np.nan) for r in rows]
    frame["lambda_index"] = range(len(rows))
    return frame


def test_the_unconstrained_pca_baseline_is_its_best_eligible_candidate():
    """The imbalanced table: the most accurate PCA candidate says no to everyone; the
    baseline is the tuned, useful one, and a constant one only when none is useful (then
    a note says so)."""
    rng, y, groups = _imbalanced()
    constant = _row(y, np.zeros_like(y), groups, variant="pca", classifier="logreg")
    useful = _row(y, _rate_classifier(rng, y, 0.6, 0.15), groups, variant="pca",
                  classifier="logreg_tuned")  # fmt: skip
    fair = _row(y, _rate_classifier(rng, y, 0.6, 0.15), groups, variant="fair_pca",
                classifier="logreg_tuned", **{"lambda": 0.0})  # fmt: skip
    assert constant["accuracy"] > useful["accuracy"]
    majority = float(np.mean(y == 0))
    choice = choose(_candidates([constant, useful, fair]), np.zeros(10, int), y, _config())
    assert choice.pca_row["classifier"] == "logreg_tuned"
    assert not any("unconstrained PCA baseline shown" in " ".join(r.facts)
                   for r in choice.decision.reasons)  # fmt: skip
    alone = choose(_candidates([constant, fair]), np.zeros(10, int), y, _config())
    assert alone.pca_row["classifier"] == "logreg"
    notes = [r for r in alone.decision.reasons if r.kind == Kind.NOTE]
    assert any("no unconstrained PCA candidate is eligible" in " ".join(r.facts) for r in notes)
    assert majority > 0.9


def test_a_selection_rate_over_twice_every_groups_base_rate_is_said_with_the_accuracy_choice():
    """The résumé case: chosen by balanced accuracy, the model says yes to ~44% at an 8%
    base rate; the summary says so and names what --select-by accuracy would choose."""
    rng, y, groups = _imbalanced()
    yes_sayer = _row(y, _rate_classifier(rng, y, 0.95, 0.40), groups, variant="fair_pca",
                     classifier="logreg_tuned", k=5)  # fmt: skip
    cautious = _row(y, _rate_classifier(rng, y, 0.55, 0.03), groups, variant="fair_pca",
                    classifier="logreg", k=5)  # fmt: skip
    lax = {"policy": "demographic_parity", "thresholds": {"max_dp_difference": 0.2}}
    choice = choose(_candidates([yes_sayer, cautious]), np.zeros(10, int), y, _config(**lax))
    assert choice.chosen["classifier"] == "logreg_tuned"
    (note,) = [r for r in choice.decision.reasons if "selection_rate" in r.flags]
    assert note.subject == "fair_pca/logreg@k=5" and note.numbers["positive_rate"] > 0.4
    assert note.numbers["accuracy_positive_rate"] < 0.1
    by_accuracy = choose(_candidates([yes_sayer, cautious]), np.zeros(10, int), y,
                         _config(select_by="accuracy", **lax))  # fmt: skip
    assert not any("selection_rate" in r.flags for r in by_accuracy.decision.reasons)


def test_when_no_fair_candidate_is_eligible_it_is_said_first_and_pca_is_never_fair():
    """The 255k-row census case: every fair candidate says one class, the unconstrained one
    fails the gate and is shown for review: the first reason says no fair candidate is
    eligible and why; the review names the model as unconstrained."""
    pca = _gated(0.3, 0.01, variant="pca", classifier="logreg", **{"lambda": float("nan")})
    fair = _gated(0.0, 0.01, variant="fair_pca", one_class_share=0.995, positive_rate=0.005)
    choice = choose(pd.DataFrame([pca, fair]), np.zeros(10), np.r_[np.zeros(70), np.ones(30)],
                    _config())  # fmt: skip
    assert not choice.decision.promote and choice.chosen["variant"] == "pca"
    first = choice.decision.reasons[0]
    assert first.kind == Kind.NOT_ELIGIBLE and "no_fair" in first.flags
    assert first.subject.startswith("fair_pca/") and first.facts  # how far from the rules
    review = next(r for r in choice.decision.reasons if r.kind == Kind.FAILS_GATE)
    assert "unconstrained" in review.flags
    at_one = {**_gated(0.3, 0.01), "lambda": 1.0}  # the whole PCA projection beside the fair
    _, decision, _ = select_candidate(pd.DataFrame([at_one]), 0.7, _config())
    assert "unconstrained" in decision.reasons[0].flags
