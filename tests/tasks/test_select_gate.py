"""Selection of the candidate (``fairpca.tasks.select``) on hand-written validation rows:
the most accurate passing one, the point and upper-bound gates, degenerate candidates."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairpca.flows.config import AuditConfig
from fairpca.tasks.select import GatePolicy, gate_failures, select_candidate


def _row(variant, lam, accuracy, dp, eo, *, share=0.8, width=0.02):
    return {"variant": variant, "lambda": lam, "classifier": "logreg", "accuracy": accuracy,
            "accuracy.ci95_low": accuracy - width, "accuracy.ci95_high": accuracy + width,
            "dp_difference": dp, "dp_difference.ci95_low": max(0, dp - width),
            "dp_difference.ci95_high": dp + width, "eo_difference": eo,
            "eo_difference.ci95_low": max(0, eo - width), "eo_difference.ci95_high": eo + width,
            "one_class_share": share, "balanced_accuracy": accuracy - 0.05,
            "balanced_accuracy.ci95_low": accuracy - 0.05 - width,
            "balanced_accuracy.ci95_high": accuracy - 0.05 + width,
            "positive_rate": 1 - share, "base_rate": 0.24, "selection_rate_ratio": 0.9}  # fmt: skip


def _table():
    return pd.DataFrame(
        [
            _row("pca", np.nan, 0.85, 0.20, 0.20),
            _row("fair_pca", 0.0, 0.80, 0.01, 0.02),
            _row("fair_pca", 1.0, 0.82, 0.04, 0.05),
        ]
    )


def _config(**values):
    """The DP and EO pair these tests were written for (the former fixed gate)."""
    return AuditConfig(dataset="adult", **{"policy": "demographic_parity+equal_opportunity",
                                           **values}).selection  # fmt: skip


def test_select_candidate_prefers_the_most_accurate_passing_one():
    config = _config(thresholds={"max_dp_difference": 0.07}, gate="upper_bound")
    chosen, decision, _ = select_candidate(_table(), 0.76, config)
    assert decision.promote and chosen["lambda"] == 1.0 and chosen["accuracy"] == 0.82


def test_select_candidate_without_passing_candidates_does_not_promote():
    config = _config(thresholds={"max_dp_difference": 0.001}, gate="point")
    chosen, decision, _ = select_candidate(_table(), 0.76, config)
    assert not decision.promote
    assert chosen["dp_difference"] == 0.01  # least violating
    (reason,) = decision.reasons
    assert reason.kind == "fails_gate" and "DP difference 0.0100 > max 0.001" in reason.facts


def test_gate_on_the_upper_bound_rejects_what_the_point_estimate_passes():
    """DP 0.04 passes max 0.05 as a point, its 95% upper bound 0.06 does not."""
    table = pd.DataFrame([_row("fair_pca", 0.125, 0.82, 0.04, 0.05)])
    thresholds = {"max_dp_difference": 0.05, "max_eo_difference": 0.10}
    point = _config(thresholds=thresholds, gate="point")
    upper = _config(thresholds=thresholds, gate="upper_bound")
    _, promoted, _ = select_candidate(table, 0.76, point)
    _, kept, _ = select_candidate(table, 0.76, upper)
    assert promoted.promote and not kept.promote
    assert "DP difference (95% upper bound) 0.0600 > max 0.05" in kept.deciding.facts


def test_degenerate_candidates_are_not_eligible_and_nothing_is_promoted():
    """A constant classifier (DP = EO = 0) passes every fairness threshold; it is rejected."""
    constant = _row("fair_pca_s", 0.125, 0.7636, 0.0, 0.0, share=1.0)
    near_majority = _row("fair_pca_s", 1.0, 0.7650, 0.001, 0.0, share=0.97)
    unfair = _row("pca", np.nan, 0.85, 0.20, 0.20)
    config = _config()
    chosen, decision, eligible = select_candidate(
        pd.DataFrame([constant, near_majority, unfair]), 0.7608, config
    )
    assert not decision.promote and eligible
    assert chosen["variant"] == "pca"  # the only eligible candidate, for review
    # eligibility decided, so it comes first
    first = decision.reasons[0]
    assert (first.kind, first.decides, first.numbers["meeting_gate"]) == ("not_eligible", True, 2)
    from fairpca.tasks.select import ineligibility

    assert any(
        "predicts one class for 100.0%" in r for r in ineligibility(constant, 0.7608, config)
    )
    # as accurate as the majority class, but it says yes for 3% against a base rate of 24%
    assert any("says yes for 3.0%" in r for r in ineligibility(near_majority, 0.7608, config))


def test_gate_failures_name_every_failure():
    row = _row("fair_pca", 0.0, 0.5, 0.3, 0.4)
    policy = GatePolicy.from_config(_config(thresholds={"min_accuracy": 0.6}, gate="point"))
    failures = gate_failures(row, policy)
    assert len(failures) == 3 and "accuracy 0.5000 < min 0.6" in failures


def _fair_predictions(seed: int, n: int = 2429):
    """Adult-shaped validation rows of two attributes (cells of 36 to 1,750 rows) and a
    classifier that selects 30% of every cell at random: perfectly fair."""
    rng = np.random.default_rng(seed)
    sensitive = pd.DataFrame({
        "sex": rng.choice(["Female", "Male"], n, p=[0.33, 0.67]),
        "race": rng.choice(["White", "Black", "Asian", "Other"], n, p=[0.85, 0.1, 0.03, 0.02]),
    })  # fmt: skip
    y = rng.integers(0, 2, n)
    return y, (rng.random(n) < 0.3).astype(np.int64), sensitive


def test_the_gate_judges_only_the_intersection_cells_that_resolve_its_band():
    """Cells of 26-51 rows cannot resolve a 0.05 band: judged on them, a perfectly fair
    classifier fails the intersection's point gate most of the time. The gate judges the
    cells whose 95% half-width fits the band and names the others."""
    from fairpca.tasks.evaluate import classifier_metrics, gate_standard_errors

    policy = GatePolicy(
        ("demographic_parity", "four_fifths"),
        {"max_dp_difference": 0.05, "min_selection_rate_ratio": 0.8, "min_accuracy": 0.0},
        "point",
    )
    failed_on_cells = 0
    for seed in range(20):
        y, predicted, sensitive = _fair_predictions(seed)
        metrics = classifier_metrics(y, predicted, sensitive, min_group_size=30)
        metrics |= gate_standard_errors(y, predicted, sensitive, min_group_size=30)
        judged, left_out = policy.judged_cells(metrics)
        rows = {cell: metrics[f"cell_rows.{cell}"] for cell in judged + left_out}
        # 1.96^2 0.3 0.7 / 0.05^2 = 323 rows resolve the band at a 30% selection rate
        assert all(rows[cell] >= 300 for cell in judged)
        assert all(rows[cell] < 350 for cell in left_out) and len(left_out) >= 3
        assert {"sex:Female/race:White", "sex:Male/race:White"} <= set(judged)
        failed_on_cells += any("intersection" in f for f in policy.failures(metrics))
        note = policy.cells_note(metrics)
        assert note.startswith(f"not judged by the gate: {len(left_out)} intersection cell(s)")
        assert all(cell in note for cell in left_out)
    assert failed_on_cells <= 2  # 18 of 20 when every cell of 30 rows decided
