"""The typed audit record: one model, written as ``audit.json`` and read back unchanged;
unknown or renamed keys are validation errors."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest
from messages import matching
from pydantic import ValidationError

from fairpca.tasks.record import (
    NOT_AN_AUDIT_RECORD,
    AuditRecord,
    metric_steps,
    read_audit_record,
    write_audit_record,
)

CONTRACT_ADDITIONS = {
    "policy": {
        "name": "balanced",
        "thresholds": {"max_dp_difference": 0.05},
        "description": "DP and EO upper bounds",
    },
    "eligibility": {"rules": {"min_accuracy_gain": 0.01}, "chosen_passes": True, "reasons": []},
    "references": [
        {
            "name": "threshold_optimizer",
            "approach": "post-processing",
            "needs_sensitive_at_prediction": True,
            "validation": {"accuracy": 0.8},
            "test": {"accuracy": 0.79, "accuracy.ci95_low": 0.77, "accuracy.ci95_high": 0.81},
        }
    ],
    "screening": [{"column": "relationship", "rule": "proxy", "score": 0.9, "action": "excluded"}],
    "k": {"requested": None, "fitted": 10, "note": "default", "grid": [10], "largest": 63},
    "split_sizes": {"train": 5000, "validation": 2500, "test": 2500},
}


def test_record_round_trips_audit_json(audit_record, tmp_path):
    audit_record.selection.test["roc_auc"] = math.nan  # undefined metrics stay NaN
    path = write_audit_record(tmp_path / "audit.json", audit_record)
    raw = json.loads(path.read_text())
    assert raw["selection"]["chosen"]["lambda"] == 0.125  # the names written are the keys
    assert raw["selection"]["baselines"]["majority"]["class"] == 0
    assert raw["started_at"] == "2026-11-30T15:00:00Z"
    back = read_audit_record(path)
    assert math.isnan(back.selection.test.pop("roc_auc"))
    audit_record.selection.test.pop("roc_auc")
    assert back == audit_record
    assert back.selection.chosen.lambda_ == 0.125 and back.min_group_size == 30


def test_contract_additions_are_typed(audit_record):
    data = json.loads(audit_record.model_dump_json())
    record = AuditRecord.model_validate({**data, **CONTRACT_ADDITIONS})
    assert record.references[0].approach == "post-processing"
    assert record.k.fitted == 10 and record.split_sizes.test == 2500
    assert record.screening[0].action == "excluded"
    wrong = {**CONTRACT_ADDITIONS["references"][0], "approach": "magic"}
    with pytest.raises(ValidationError, match=r"references\.0\.approach"):
        AuditRecord.model_validate({**data, "references": [wrong]})


@pytest.mark.parametrize(
    ("path", "key"),
    [((), "extra_key"), (("selection",), "gates"), (("selection", "chosen"), "lamda")],
)
def test_unknown_keys_are_refused(audit_record, path, key):
    data = json.loads(audit_record.model_dump_json())
    target = data
    for part in path:
        target = target[part]
    target[key] = 1
    with pytest.raises(ValidationError) as refused:
        AuditRecord.model_validate(data)
    assert [error["type"] for error in refused.value.errors()] == ["extra_forbidden"]


def test_a_renamed_key_is_one_clear_error_naming_it(audit_record, tmp_path):
    data = json.loads(audit_record.model_dump_json())
    data["selection"]["group_size"] = data["selection"].pop("group_sizes")
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=matching(NOT_AN_AUDIT_RECORD, path=path)) as info:
        read_audit_record(path)
    assert info.value.__cause__ is None and "selection.group_sizes" in str(info.value)


def test_metric_steps_carry_lambda_at_the_same_steps():
    table = pd.DataFrame(
        {
            "variant": ["pca", "fair_pca", "fair_pca"],
            "classifier": ["logreg"] * 3,
            "lambda_index": [0, 0, 1],
            "lambda": [math.nan, 0.0, 0.25],
            "accuracy": [0.8, 0.7, 0.75],
            "dp_difference": [0.2, 0.01, 0.05],
            "eo_difference": [0.1, 0.02, 0.04],
            "mmd2": [0.3, 0.0, 0.1],
            "linear_inseparability": [0.6, 0.5, 0.55],
            "mean_gap_train": [1.0, 0.0, 0.5],
            "mean_gap_validation": [1.0, 0.1, 0.5],
        }
    )
    steps = {(s.key, s.step): s.value for s in metric_steps(table)}
    assert steps[("fair_pca/lambda", 0)] == 0.0 and steps[("fair_pca/lambda", 1)] == 0.25
    assert steps[("fair_pca/logreg/accuracy", 1)] == 0.75
    assert ("pca/lambda", 0) not in steps  # standard PCA has no lambda
    assert steps[("pca/logreg/accuracy", 0)] == 0.8


def test_the_search_fields_round_trip_typed(audit_record):
    data = json.loads(audit_record.model_dump_json())
    point = {"variant": "fair_pca", "k": 20, "lambda": 0.0, "classifier": "logreg_tuned",
             "C": 1.0, "measure": "balanced_accuracy", "value": 0.75, "ci95_low": 0.73,
             "ci95_high": 0.77, "dp_difference": 0.01, "selection_rate_ratio": 0.95,
             "meets_gate": True, "stage": "coarse", "pareto": True}  # fmt: skip
    record = AuditRecord.model_validate(
        {**data, "frontier": [point],
         "certification": {"certified": False, "reasons": ["wide"], "chosen_by": "cv"},
         "k": {"requested": None, "fitted": 20, "note": "grid", "grid": [10, 20, 40, 63],
               "largest": 63, "chosen": {"fair_pca": 20}}}
    )  # fmt: skip
    assert record.frontier[0].lambda_ == 0.0 and record.k.largest == 63
    assert not record.certification.certified
    with pytest.raises(ValidationError, match=r"frontier\.0\.stage"):
        AuditRecord.model_validate({**data, "frontier": [{**point, "stage": "final"}]})


def test_withheld_groups_say_which_numbers_are_missing_and_why():
    from fairpca.tasks.record import WITHHELD, withheld_groups

    sizes = {
        "sex": {"Female": 800, "Male": 1700},
        "race": {"White": 2100, "Black": 240, WITHHELD: "2 group(s), suppressed: ..."},
    }
    test = {"selection_rate.sex:Female": 0.2, "selection_rate.sex:Male": 0.3}  # fmt: skip
    withheld = withheld_groups(sizes, test, 30)
    assert set(withheld) == {"race"}  # every sex group has its numbers
    assert withheld["race"].startswith("sizes and rates of 2 group(s), suppressed")
    assert "rates of White, Black withheld" in withheld["race"]
    assert withheld_groups({"sex": sizes["sex"]}, test, 30) is None


def test_groups_whose_labels_metric_names_respell_keep_their_rates():
    """Metric names spell "Hispanic/Latino" as "Hispanic_Latino": its rates are found."""
    from fairpca.tasks.record import withheld_groups

    sizes = {"race": {"Hispanic/Latino": 400, "Black (non-Hispanic)": 300}}
    test = {"selection_rate.race:Hispanic_Latino": 0.2,
            "selection_rate.race:Black _non-Hispanic_": 0.3}  # fmt: skip
    assert withheld_groups(sizes, test, 30) is None


def test_a_large_group_the_gate_could_not_judge_is_a_warning_with_the_fix():
    """A group of 400 validation rows whose rates are withheld there (to hide a smaller
    group) was not judged by the gate: the record says so and how to have it judged; a
    small group without rates is no news."""
    from fairpca.tasks.record import unjudged_groups

    sizes = {"marital": {"married": 10_000, "divorced": 2_000, "unknown": 80}}
    validation = {"selection_rate.marital:married": 0.3}
    split = {"n_train": 7_248, "n_validation": 2_416, "n_test": 2_416}
    (warning,) = unjudged_groups(sizes, validation, split, 30)
    assert warning.startswith("the gate did not judge marital: divorced:")
    assert "unknown" not in warning and "merge or drop" in warning
    validation["selection_rate.marital:divorced"] = 0.3
    assert unjudged_groups(sizes, validation, split, 30) == []


def test_groups_whose_sizes_are_all_withheld_and_unjudged_are_a_warning():
    """A third group of 15 rows beside two of 2,500: its size is withheld, and so is the
    other large group's (with the total it would give the small one away). Neither has a
    validation rate, so the gate judged one group only: named by their count and rows."""
    from fairpca.tasks.record import WITHHELD, unjudged_groups

    sizes = {"group": {"A": 2_504, WITHHELD: "2 group(s), suppressed"}}
    validation = {"selection_rate.group:A": 0.5, "selection_rate.group:A.ci95_low": 0.45}
    split = {"n_train": 2_500, "n_validation": 1_250, "n_test": 1_250}
    (warning,) = unjudged_groups(sizes, validation, split, 30)
    assert warning.startswith(
        "the gate did not judge group: 2 groups whose sizes are withheld (2,496 rows together)"
    )
    validation["selection_rate.group:B"] = 0.5  # one of them judged: no telling which
    assert unjudged_groups(sizes, validation, split, 30) == []
    few = {"group": {"A": 4_900, WITHHELD: "2 group(s), suppressed"}}  # 100 rows: both small
    assert unjudged_groups(few, {"selection_rate.group:A": 0.5}, split, 30) == []


def test_a_classifier_swept_over_a_C_grid_has_one_curve_per_C():
    """Two ``logreg_tuned`` rows at one lambda (C 0.01 and 1) are two MLflow curves, not two
    values at one step of one curve."""
    table = pd.DataFrame(
        {
            "variant": ["fair_pca"] * 4,
            "classifier": ["logreg_tuned"] * 4,
            "C": [0.01, 1.0, 0.01, 1.0],
            "lambda_index": [0, 0, 1, 1],
            "lambda": [0.0, 0.0, 0.5, 0.5],
            "accuracy": [0.7, 0.72, 0.75, 0.74],
        }
    )
    steps = [(s.key, s.step, s.value) for s in metric_steps(table)]
    # names MLflow accepts: alphanumerics, _ - . space : /
    assert all(re.fullmatch(r"[\w\-. :/]+", key) for key, _, _ in steps)
    accuracy = [step for step in steps if step[0].endswith("/accuracy")]
    assert sorted(accuracy) == [
        ("fair_pca/logreg_tuned_C0.01/accuracy", 0, 0.7),
        ("fair_pca/logreg_tuned_C0.01/accuracy", 1, 0.75),
        ("fair_pca/logreg_tuned_C1/accuracy", 0, 0.72),
        ("fair_pca/logreg_tuned_C1/accuracy", 1, 0.74),
    ]


def test_the_fair_pca_s_candidate_offered_instead_is_a_useful_one():
    """Where fair PCA misses parity the report offers Fair PCA-S's best candidate: never one
    that meets parity only by saying yes to everyone (not eligible), however small its
    violation."""
    import numpy as np
    from test_select import _adult_like, _config, _rate_classifier, _row, _table

    from fairpca.tasks.record import best_fair_pca_s
    from fairpca.tasks.select import choose

    rng, y, groups = _adult_like()
    everyone = _row(y, np.ones_like(y), groups, variant="fair_pca_s")  # parity, trivially
    male = (groups["sex"] == "Male").to_numpy()
    unequal = np.where(male, _rate_classifier(rng, y, 0.9, 0.3), _rate_classifier(rng, y, 0.7, 0.1))
    useful = _row(y, unequal, groups, variant="fair_pca_s")  # misses parity
    fair = _row(y, _rate_classifier(rng, y, 0.7, 0.1), groups, variant="fair_pca")
    table = _table([everyone, useful, fair])
    choice = choose(table, np.ones(10, int), y, _config())
    (offered,) = best_fair_pca_s(table, choice, _config()).values()
    assert offered["balanced_accuracy"] == pytest.approx(useful["balanced_accuracy"])
