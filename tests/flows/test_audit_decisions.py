"""The audit's choice is one a reviewer can defend: chosen on validation rows only, never on
the test rows; and an audit in which no fair variant could be fitted fails."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from messages import matching

from fairpca.flows.config import AuditConfig


def _config(**values):
    base = {
        "dataset": "german",
        "k": 3,
        "variants": ["pca", "fair_pca"],
        "lambdas": [0.0, 0.125, 1.0],
        "classifiers": ["logreg"],
        "n_bootstrap": 200,
        "metric_max_rows": 100,
        "thresholds": {"max_dp_difference": 0.2, "max_eo_difference": 0.3},
    }
    return AuditConfig(**{**base, **values})


def _choose_then_report(split, config, k=3):
    """The compute path of the audit flow, task bodies called directly."""
    from fairpca.tasks.evaluate import build_pipeline, evaluate_reported
    from fairpca.tasks.represent import fit_preprocessor, fit_representation
    from fairpca.tasks.select import choose
    from fairpca.tasks.sweep import sweep_representation

    preprocessor, encoded_train, encoded_validation = fit_preprocessor.fn(split)
    reps = {
        v: fit_representation.fn(
            v, encoded_train, split.y_train, split.s_train, k=k, equalize_covariance=0.5, seed=0
        )
        for v in config.representation.variants
    }
    sweeps = {
        v: sweep_representation(
            rep,
            encoded_train,
            encoded_validation,
            split,
            config.representation,
            config.evaluation,
            config.seed,
            1.0,
        )
        for v, rep in reps.items()
    }
    table = pd.DataFrame([row for sweep in sweeps.values() for row in sweep.rows])
    choice = choose(table, split.y_train, split.y_validation, config.selection)
    pipeline = build_pipeline(preprocessor, reps, sweeps, choice.chosen)
    pca = choice.pca_row and build_pipeline(preprocessor, reps, sweeps, choice.pca_row)
    reported = evaluate_reported.fn(split, config.evaluation, config.seed, pipeline, pca,
                                    choice.chosen, choice.pca_row)  # fmt: skip
    return table, choice, reported


def test_changing_the_test_labels_cannot_change_the_chosen_candidate():
    from fairpca.datasets import load_german
    from fairpca.tasks.data import split_data

    config = _config()
    split = split_data.fn(
        load_german(),
        config.split,
        config.source,
        seed=config.seed,
        min_group_size=config.evaluation.min_group_size,
    )
    flipped = dataclasses.replace(split, y_test=1 - split.y_test)
    table, choice, reported = _choose_then_report(split, config)
    table_flipped, choice_flipped, reported_flipped = _choose_then_report(flipped, config)

    timing = ["classifier_seconds"]
    pd.testing.assert_frame_equal(table.drop(columns=timing), table_flipped.drop(columns=timing))
    assert choice.decision == choice_flipped.decision
    for key in ("variant", "classifier", "lambda_index"):
        assert choice.chosen[key] == choice_flipped.chosen[key]
    # ... while the test-part numbers, reported afterwards, do see the flipped labels
    accuracy = reported["chosen"]["test"]["accuracy"]
    assert reported_flipped["chosen"]["test"]["accuracy"] == pytest.approx(1 - accuracy)
    assert reported["chosen"]["validation"] == reported_flipped["chosen"]["validation"]


def test_baselines_and_intervals_are_reported_on_validation_and_test():
    from fairpca.datasets import load_german
    from fairpca.tasks.data import split_data

    config = _config()
    split = split_data.fn(
        load_german(),
        config.split,
        config.source,
        seed=config.seed,
        min_group_size=config.evaluation.min_group_size,
    )
    _, choice, reported = _choose_then_report(split, config)
    assert {"chosen", "majority", "pca"} <= set(reported)
    majority = reported["majority"]
    assert majority["validation"]["accuracy"] == choice.majority_accuracy
    majority_class = int(np.mean(split.y_train) > 0.5)  # German: 0 (70% good credit)
    assert majority["class"] == majority_class == 0
    assert majority["test"]["accuracy"] == pytest.approx(np.mean(split.y_test == 0))
    assert majority["test"]["dp_difference"] == 0.0  # a constant predictor is trivially "fair"
    for part in ("validation", "test"):
        metrics = reported["chosen"][part]
        for name in ("accuracy", "dp_difference", "eo_difference"):
            assert metrics[f"{name}.ci95_low"] <= metrics[name] <= metrics[f"{name}.ci95_high"]
    assert choice.pca_row["variant"] == "pca"


def test_a_given_k_too_large_fails_before_anything_runs_naming_the_largest(tmp_path):
    """7 features and a 3-group attribute leave 7 - 2 = 5 fair directions: k=10 is refused
    by the preflight (no Prefect server started) and by the flow's own check, naming 5."""
    from fairpca.flows.preflight import PreflightError, check_before_run
    from fairpca.tasks.represent import K_TOO_LARGE, resolve_k

    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame(rng.normal(size=(n, 7)), columns=[f"x{i}" for i in range(7)])
    frame["group"] = rng.choice(["a", "b", "c"], size=n)
    frame["label"] = (frame["x0"] + rng.normal(size=n) > 0).astype(int)
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    config = AuditConfig(
        data=path, label="label", sensitive=["group"], k=10, output_dir=tmp_path / "out"
    )
    too_large = matching(K_TOO_LARGE, requested=10, n_features=7, constraints=2, k_max=5)
    with pytest.raises(PreflightError, match=too_large):
        check_before_run(config)
    with pytest.raises(ValueError, match=too_large):
        resolve_k(10, 7, frame[["group"]], ["pca", "fair_pca"])
    assert resolve_k(None, 7, frame[["group"]], ["pca", "fair_pca"])["fitted"] == 5
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _six_column_table(tmp_path, n=1000, *, noise_label=False):
    """Six numeric features, a binary group, an exact 0/1 recoding and a copy of the group."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(size=(n, 6)), columns=[f"x{i}" for i in range(6)])
    frame["group"] = rng.choice(["f", "m"], size=n)
    frame["group_code"] = (frame["group"] == "m").astype(int)
    frame["group_copy"] = frame["group"]
    signal = 0.0 if noise_label else 1.5 * frame["x0"] + frame["x1"]
    frame["label"] = (signal + rng.normal(size=n) > 0.3).astype(int)
    path = tmp_path / "six.csv"
    frame.to_csv(path, index=False)
    return path


def _audit_config(path, tmp_path, store, **values):
    return AuditConfig(
        data=path,
        label="label",
        sensitive=["group"],
        variants=["pca", "fair_pca"],
        classifiers=["logreg"],
        lambdas=[0.0, 1.0],
        n_bootstrap=200,
        metric_max_rows=200,
        output_dir=tmp_path / "out",
        tracking_uri=store,
        **values,
    )


def test_default_k_proxies_split_sizes_and_references_on_a_six_column_table(
    prefect_harness, tmp_path, empty_store, assert_useful_registration
):
    """No k given: the grid is the one largest k, 6 - 1 = 5; the recoded and the
    duplicated sensitive column are excluded and recorded; params hold the split sizes used
    on a 1,000-row file; the reference mitigations are recorded and never registered."""
    from fairpca.flows.audit import fairness_audit

    result = fairness_audit(_audit_config(_six_column_table(tmp_path), tmp_path, empty_store))
    audit = json.loads(Path(result.output_dir, "audit.json").read_text())
    assert audit["k"]["requested"] is None and audit["k"]["fitted"] == 5
    assert audit["k"]["grid"] == [5] and audit["k"]["largest"] == 5
    assert audit["params"]["k_grid"] == "5"
    assert audit["metrics"]["fair_pca/k"] == 5.0
    screened = {entry["column"]: entry for entry in audit["screening"]}
    assert screened["group_code"]["rule"] == "recoding of group"
    assert screened["group_copy"]["rule"] == "duplicate of group"
    assert {screened[c]["action"] for c in ("group_code", "group_copy")} == {"excluded"}
    card = Path(result.output_dir, "model_card.md").read_text()
    screening = card.split("## Column screening")[1].split("## ")[0]  # its rows: test_report_card
    assert "group_code" in screening and "group_copy" in screening
    sizes = {"train": 500, "validation": 250, "test": 250}
    assert audit["split_sizes"] == sizes
    assert [audit["params"][f"n_{part}"] for part in sizes] == [str(v) for v in sizes.values()]
    names = {r["name"]: r for r in audit["references"]}
    assert set(names) == {"threshold_optimizer", "exponentiated_gradient", "correlation_remover"}
    assert names["threshold_optimizer"]["needs_sensitive_at_prediction"] is True
    assert names["exponentiated_gradient"]["needs_sensitive_at_prediction"] is False
    for reference in names.values():
        test = reference["test"]
        assert test["accuracy.ci95_low"] <= test["accuracy"] <= test["accuracy.ci95_high"]
    assert audit["policy"]["name"] == "demographic_parity+four_fifths"
    assert result.model_version == "1"  # one version: the chosen candidate, no reference
    assert_useful_registration(Path(result.output_dir))


def test_no_eligible_candidate_registers_nothing(prefect_harness, tmp_path, empty_store):
    """Labels independent of the features: every classifier is near chance or constant, so
    nothing is registered and the decision says why."""
    from mlflow import MlflowClient

    from fairpca.flows.audit import fairness_audit

    path = _six_column_table(tmp_path, noise_label=True)
    result = fairness_audit(_audit_config(path, tmp_path, empty_store, k=3))
    audit = json.loads(Path(result.output_dir, "audit.json").read_text())
    assert result.model_version is None and result.model_name is None
    assert audit["register_model"] is False
    assert audit["eligibility"]["chosen_passes"] is False
    assert result.decision == "keep"
    first = result.record.decision.reasons[0]
    assert first.kind == "not_eligible" and first.decides
    tags = MlflowClient(tracking_uri=result.tracking_uri).get_run(result.run_id).data.tags
    assert tags["fairpca.model_version"] == "none"  # not Python's None spelled as a version


def test_diagnostics_flag_a_near_constant_direction_that_carries_the_group():
    """A direction of almost no within-group variance whose group means differ separates the
    groups on held-out rows; the probe finds the attribute; both are named in warnings."""
    from fairpca.tasks.diagnostics import (
        leakage_probe,
        mitigation_warnings,
        near_constant_directions,
    )

    rng = np.random.default_rng(0)
    n = 1000
    groups = pd.Series(rng.choice(["a", "b"], size=n))
    F = rng.normal(size=(n, 4))
    F[:, 2] = 1e-4 * rng.normal(size=n) + 1e-3 * (groups == "a")  # the proxy direction
    flagged = near_constant_directions(F, groups)
    assert [d["direction"] for d in flagged] == [2]
    probe = leakage_probe(F[:600], groups[:600], F[600:], groups[600:], seed=0)
    assert probe["chance"] == 0.5 and probe["balanced_accuracy.ci95_low"] > 0.95
    blind = leakage_probe(F[:600, [0, 1]], groups[:600], F[600:, [0, 1]], groups[600:], seed=0)
    assert blind["balanced_accuracy.ci95_low"] < 0.5 < blind["balanced_accuracy.ci95_high"]

    table = pd.DataFrame(
        [
            {"variant": "pca", "classifier": "logreg", "lambda_index": 0, "dp_difference": 0.1,
             "eo_difference": 0.1},
            {"variant": "fair_pca", "classifier": "logreg", "lambda_index": 0,
             "dp_difference": 0.12, "eo_difference": 0.1},
        ]
    )  # fmt: skip
    diag = {"leakage": {"g": probe}, "near_constant_directions": {"g": flagged}}
    warnings = mitigation_warnings(table, {"fair_pca": diag})
    assert any(w.startswith("mitigation did nothing: fair_pca") for w in warnings)
    assert any("g is still predictable from fair_pca" in w for w in warnings)
    assert any("direction(s) 2" in w and "smaller k" in w for w in warnings)


@pytest.mark.parametrize("tiny_rows", [1, 3])
def test_a_tiny_group_does_not_abort_the_audit(prefect_harness, tmp_path, empty_store, tiny_rows):
    """Its rows go to training (a stratum of < 3 rows cannot reach all three parts; a
    one-row group is merged into the largest group for fitting); the audit completes and
    the group is suppressed in what is logged."""
    from fairpca.flows.audit import fairness_audit

    rng = np.random.default_rng(1)
    n = 600
    frame = pd.DataFrame(rng.normal(size=(n, 6)), columns=[f"x{i}" for i in range(6)])
    frame["group"] = np.where(np.arange(n) < tiny_rows, "tiny", rng.choice(["a", "b"], size=n))
    frame["label"] = (frame["x0"] + frame["x1"] + rng.normal(size=n) > 0).astype(int)
    path = tmp_path / "tiny_group.csv"
    frame.to_csv(path, index=False)
    config = AuditConfig(
        data=path,
        label="label",
        sensitive=["group"],
        k=2,
        variants=["pca", "fair_pca"],
        classifiers=["logreg"],
        lambdas=[0.0, 1.0],
        n_bootstrap=200,
        output_dir=tmp_path / "out",
        tracking_uri=empty_store,
    )
    result = fairness_audit(config)
    assert result.selection["split"] == {"n_train": 300, "n_validation": 150, "n_test": 150}
    sizes = result.selection["group_sizes"]["group"]
    assert "tiny" not in sizes and "suppressed" in sizes["(withheld)"]
    assert not any("tiny" in key for key in result.selection["test"])


def test_mitigation_warning_skips_undefined_differences():
    """With every group but one suppressed the table has no dp_difference: no crash and no
    "mitigation did nothing" built from NaN; a defined, unreduced disparity still warns."""
    from fairpca.tasks.diagnostics import mitigation_warnings

    rows = [
        {"variant": v, "classifier": "logreg", "lambda_index": 0, "accuracy": 0.8}
        for v in ("pca", "fair_pca")
    ]
    quiet = {v: {"leakage": {}, "near_constant_directions": {}} for v in ("pca", "fair_pca")}
    assert mitigation_warnings(pd.DataFrame(rows), quiet) == []
    undefined = [{**row, "dp_difference": float("nan")} for row in rows]
    assert mitigation_warnings(pd.DataFrame(undefined), quiet) == []
    unreduced = [{**row, "dp_difference": 0.2} for row in rows]
    warnings = mitigation_warnings(pd.DataFrame(unreduced), quiet)
    assert any("mitigation did nothing" in w for w in warnings)


def _decide(**values):
    """The audit's choice on a German subsample, stage by stage (search, sweep, choice with
    cross-validation when the validation part is small): the decision and the choice."""
    from fairpca.flows.audit import choose_candidate, resolved_config
    from fairpca.tasks.data import load_source, split_data
    from fairpca.tasks.represent import fit_preprocessor
    from fairpca.tasks.sweep import search_representation, sweep_representation

    config = AuditConfig(**{**SMALL, **values})
    split = split_data.fn(load_source(config.source), config.split, config.source,
                          seed=config.seed, min_group_size=30)  # fmt: skip
    _, train, validation = fit_preprocessor.fn(split)
    config, _ = resolved_config(config, split, train)
    searches = {
        v: search_representation(
            v, train, validation, split, k_grid=config.representation.k_grid,
            representation=config.representation, evaluation=config.evaluation,
            selection=config.selection, seed=config.seed,
        )
        for v in config.representation.variants
    }  # fmt: skip
    table = pd.DataFrame([
        row
        for s in searches.values()
        for row in sweep_representation(
            s.representation, train, validation, split, config.representation,
            config.evaluation, config.seed, 1.0, C=s.C, scoring=config.selection.select_by,
            lambdas=s.lambdas,
        ).rows
    ])  # fmt: skip
    return choose_candidate(config, table, split, searches, (train, validation))


SMALL = {
    "dataset": "german",
    "variants": ["pca", "fair_pca"],
    "lambdas": [0.0, 1.0],
    "k_grid": [5],
    "classifiers": ["logreg", "logreg_tuned"],
    "logreg_C": [1.0],
    "n_bootstrap": 200,
    "metric_max_rows": 100,
    "cv_repeats": 2,
}


def test_a_few_hundred_rows_with_a_policy_they_can_resolve_give_one_decision_for_three_seeds():
    """800 German rows (200 validation rows: chosen by cross-validation on the 600 training
    and validation rows), DP difference at most 0.2, chosen by accuracy: seeds 0, 1, 2 decide
    alike (at 600 rows the fair classifiers' usefulness is itself within noise: eligible for
    one seed, not for another)."""
    choices = [
        _decide(seed=seed, n_train=400, n_validation=200, n_test=200, policy="demographic_parity",
                thresholds={"max_dp_difference": 0.2}, select_by="accuracy")
        for seed in (0, 1, 2)
    ]  # fmt: skip
    assert [c.decision.promote for c in choices] == [True] * 3, [
        c.decision.reasons for c in choices
    ]
    for choice in choices:
        assert choice.certification["certified"]
        assert choice.certification["chosen_by"].startswith(
            "repeated stratified 5-fold cross-validation (2 repeats) on the 600 training+validation"
        )


def test_too_few_rows_to_certify_the_default_gate_are_said_so_and_not_promoted():
    """The same rows under the default gate (DP difference 0.05, four-fifths): the data
    cannot resolve 0.05, so the audit says so and does not promote."""
    choice = _decide(seed=0, n_train=300, n_validation=150, n_test=150)
    assert not choice.decision.promote
    assert not choice.certification["certified"]
    first = choice.decision.deciding
    assert (first.kind, first.rows) == ("too_little_data", "cross-validated training+validation")


def test_adult_sex_and_race_accounts_for_every_group_in_report_terminal_and_mlflow(
    prefect_harness, tmp_path, empty_store, capsys
):
    """Adult, sex + race: Amer-Indian-Eskimo and Other have ~1% of the rows, so more than 30
    in all parts and fewer than 30 in the 2,500 test rows. Each has its own row saying its
    numbers are withheld and why, in report.md, the terminal and the MLflow run's
    description; report.md holds no HTML entity."""
    from mlflow import MlflowClient

    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.console import print_report

    config = AuditConfig(
        dataset="adult", sensitive=["sex", "race"], n_train=1500, n_validation=1000,
        n_test=2500, k=5, variants=["pca", "fair_pca"],
        classifiers=["logreg"], lambdas=[0.0, 1.0], n_bootstrap=200, metric_max_rows=200,
        output_dir=tmp_path / "out", tracking_uri=empty_store,
    )  # fmt: skip
    result = fairness_audit(config)
    sizes = result.selection["group_sizes"]["race"]
    withheld = [g for g in ("Amer-Indian-Eskimo", "Other") if g in sizes]
    assert withheld, sizes
    report = Path(result.output_dir, "report.md").read_text()
    for group in withheld:
        assert f"| race: {group} | withheld: fewer than 30 test rows |" in report, group
    assert "&lt;" not in report and "&#x27;" not in report and "&gt;" not in report
    print_report(result, verbose=False)
    terminal = capsys.readouterr().out
    for group in withheld:
        line = next(line for line in terminal.splitlines() if f"race: {group}" in line)
        assert "withheld: fewer than 30 test rows" in line
    run = MlflowClient(tracking_uri=result.tracking_uri).get_run(result.run_id)
    description = run.data.tags["mlflow.note.content"]
    for group in withheld:
        assert f"race: {group} | withheld: fewer than 30 test rows |" in description


def test_the_results_reasons_lead_with_the_one_that_decided():
    """``AuditResult.reasons[0]`` is the deciding reason: the audit's own when it did not
    promote (here a better reference), the champion comparison's when the audit passed or
    the comparison demoted the champion (a retrain)."""
    from types import SimpleNamespace

    from fairpca.flows.audit import AuditResult
    from fairpca.tasks.decision import Kind, Reason

    champion = SimpleNamespace(reasons=["no current champion: the gate alone decides"],
                               demote=False, promote=True, comparison=None)  # fmt: skip
    veto = Reason(kind=Kind.DOMINATED, decides=True, subject="exponentiated_gradient")
    dominated = SimpleNamespace(promote=False, reasons=[veto, Reason(kind=Kind.NOTE)])
    kept = AuditResult.model_construct(record=SimpleNamespace(decision=dominated),
                                       promotion=champion)  # fmt: skip
    kinds = [r.kind for r in kept.decision_reasons]
    assert kinds == [Kind.DOMINATED, Kind.NOTE, Kind.PROMOTED]
    passed = SimpleNamespace(promote=True, reasons=[Reason(kind=Kind.CHOSEN, decides=True)])
    promoted = AuditResult.model_construct(record=SimpleNamespace(decision=passed),
                                           promotion=champion)  # fmt: skip
    assert [r.kind for r in promoted.decision_reasons] == [Kind.PROMOTED, Kind.CHOSEN]
    assert promoted.reasons[0] == champion.reasons[0]
    demoted = SimpleNamespace(reasons=["champion v1 of m fails the gate on the new data", "x"],
                              demote=True, promote=False, comparison=None)  # fmt: skip
    retrain = AuditResult.model_construct(record=SimpleNamespace(decision=dominated),
                                          promotion=demoted)  # fmt: skip
    assert retrain.decision_reasons[0].kind == Kind.DEMOTED  # a retrain's demotion decides first
    assert retrain.reasons[0] == demoted.reasons[0]


def _decided(split, config, k=3):
    """The decision path of the audit with its reference mitigations: the choice on the
    validation rows, the references fitted on the training rows, the veto (on the rows that
    chose), the promotion without a champion; and the reported test numbers."""
    from fairpca.tasks.references import fit_references
    from fairpca.tasks.represent import fit_preprocessor
    from fairpca.tasks.select import Challenger, decide_promotion, judge_references

    _, choice, reported = _choose_then_report(split, config, k)
    preprocessor, train, validation = fit_preprocessor.fn(split)
    encoded = {"train": train, "validation": validation,
               "test": preprocessor.transform(split.X_test)}  # fmt: skip
    references = fit_references(encoded, split, config.evaluation, config.seed, config.selection)
    choice = judge_references(choice, references, reported["chosen"]["test"], config.selection)
    challenger = Challenger("chosen", choice.decision, choice.policy, reported["chosen"]["test"])
    return choice, decide_promotion(challenger, None), reported, references


def _decision_steps(choice, promotion):
    """What was decided, without the reported test numbers: the outcome, each reason's kind,
    subject, rows and numbers (but the test margins), the certification and the promotion."""
    steps = [(r.kind, r.decides, r.subject, r.rows,
              {k: v for k, v in r.numbers.items() if not k.startswith("test_")})
             for r in choice.decision.reasons]  # fmt: skip
    chosen = {key: choice.chosen[key] for key in ("variant", "classifier", "lambda_index")}
    return choice.decision.promote, steps, chosen, choice.certification, promotion.promote


def test_permuting_the_test_labels_changes_no_decision_only_the_reported_test_numbers():
    """Choice, veto, certification and promotion are taken on the rows that chose; the test
    rows (their labels permuted) change only the numbers reported on them."""
    from fairpca.datasets import load_german
    from fairpca.tasks.data import split_data

    config = _config()
    split = split_data.fn(load_german(), config.split, config.source, seed=config.seed,
                          min_group_size=config.evaluation.min_group_size)  # fmt: skip
    permuted = np.random.default_rng(1).permutation(split.y_test)
    assert (permuted != split.y_test).any()
    choice, promotion, reported, references = _decided(split, config)
    again, promoted, reported_again, references_again = _decided(
        dataclasses.replace(split, y_test=permuted), config
    )
    assert _decision_steps(choice, promotion) == _decision_steps(again, promoted)
    assert any(r.kind in ("better_reference", "excluded_by_deployment", "dominated")
               for r in choice.decision.reasons)  # the references were compared  # fmt: skip
    assert reported["chosen"]["test"]["accuracy"] != reported_again["chosen"]["test"]["accuracy"]
    assert [r["test"] for r in references] != [r["test"] for r in references_again]


def _earnings_like(tmp_path, n=8000):
    """An earnings-shaped table: the label depends on twelve features alike, none on the
    group, so every model meets demographic parity; fair PCA at k=2 keeps little of the
    signal, while the references, on every feature, keep it all."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(n, 12)), columns=[f"x{i}" for i in range(12)])
    frame["gender"] = rng.choice(["f", "m"], size=n)
    frame["earns_more"] = (frame.iloc[:, :12].sum(axis=1) + rng.normal(size=n) > 0).astype(int)
    path = tmp_path / "earnings.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("sensitive_at_prediction", [False, True])
def test_a_reference_that_needs_the_attribute_vetoes_only_where_the_deployment_has_it(
    tmp_path, sensitive_at_prediction
):
    """The earnings case: correlation_remover (deterministic, needs the attribute to
    transform) beats fair PCA on the validation rows beyond the noise. By default the
    deployment excludes it (listed with its margin, fair PCA promoted); with
    --sensitive-at-prediction it vetoes, and names itself first."""
    from fairpca.tasks.data import load_source, split_data

    config = AuditConfig(
        data=_earnings_like(tmp_path), label="earns_more", sensitive=["gender"],
        variants=["fair_pca"], lambdas=[0.0], classifiers=["logreg"], n_bootstrap=200,
        metric_max_rows=200, sensitive_at_prediction=sensitive_at_prediction,
    )  # fmt: skip
    split = split_data.fn(load_source(config.source), config.split, config.source,
                          seed=config.seed, min_group_size=30)  # fmt: skip
    choice, promotion, _, _ = _decided(split, config, k=2)
    remover = next(r for r in choice.decision.reasons if r.subject == "correlation_remover")
    assert remover.rows == "validation" and remover.numbers["margin_low"] > 0
    assert remover.needs == ("sensitive_at_prediction",)
    if sensitive_at_prediction:
        assert not choice.decision.promote and not promotion.promote
        assert choice.decision.reasons[0] == remover and remover.kind == "dominated"
    else:
        assert choice.decision.promote and promotion.promote
        assert remover.kind == "excluded_by_deployment" and not remover.decides


def test_mitigation_did_nothing_compares_eligible_candidates_on_the_gated_measures():
    """Two constant classifiers (ΔDP 0.0000 each) prove nothing; nor does an unreduced
    eo_difference under a demographic-parity policy; an eligible fair variant no fairer
    than eligible PCA on the gated ΔDP still warns."""
    from fairpca.tasks.diagnostics import mitigation_warnings

    useful = {"classifier": "logreg", "lambda_index": 0, "accuracy": 0.8,
              "balanced_accuracy": 0.75, "balanced_accuracy.ci95_low": 0.72,
              "positive_rate": 0.3, "base_rate": 0.25, "one_class_share": 0.7}  # fmt: skip
    constant = {**useful, "balanced_accuracy": 0.5, "balanced_accuracy.ci95_low": 0.5,
                "positive_rate": 0.0, "one_class_share": 1.0, "dp_difference": 0.0}  # fmt: skip
    quiet = {v: {"leakage": {}, "near_constant_directions": {}} for v in ("pca", "fair_pca")}
    selection = _config().selection  # demographic parity

    def warned(pca, fair):
        table = pd.DataFrame([{**pca, "variant": "pca"}, {**fair, "variant": "fair_pca"}])
        warnings = mitigation_warnings(table, quiet, selection, 0.75)
        return [w for w in warnings if w.startswith("mitigation did nothing")]

    assert warned(constant, constant) == []
    unreduced_eo = {**useful, "dp_difference": 0.01, "eo_difference": 0.2}
    assert warned({**unreduced_eo, "dp_difference": 0.05}, unreduced_eo) == []
    assert warned({**useful, "dp_difference": 0.05}, {**useful, "dp_difference": 0.06})


@pytest.mark.e2e  # two default audits of Adult (a few minutes each)
@pytest.mark.parametrize("allowed", [False, True])
def test_the_default_adult_audit_promotes_fair_pca_unless_the_deployment_allows_a_better_one(
    prefect_harness, tmp_path, empty_store, allowed
):
    """Defaults: fair PCA is promoted; exponentiated_gradient (random decisions) and
    threshold_optimizer (the attribute and random decisions) are alternatives the deployment
    excludes, with margins on the validation rows. With --sensitive-at-prediction
    --randomized-decisions it is kept, the first reason naming the reference that decides."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.tasks.decision import Kind

    config = AuditConfig(dataset="adult", output_dir=tmp_path / "out", tracking_uri=empty_store,
                         sensitive_at_prediction=allowed, randomized_decisions=allowed)  # fmt: skip
    result = fairness_audit(config)
    reasons = result.record.decision.reasons
    assert result.record.selection.chosen.variant == "fair_pca"
    compared = {r.subject: r for r in reasons if r.measure and r.rows == "validation"
                and r.kind in (Kind.DOMINATED, Kind.EXCLUDED_BY_DEPLOYMENT)}  # fmt: skip
    if not allowed:
        assert result.decision == "promote"
        assert compared["exponentiated_gradient"].needs == ("randomized_decisions",)
        assert "sensitive_at_prediction" in compared["threshold_optimizer"].needs
        assert all(r.kind == Kind.EXCLUDED_BY_DEPLOYMENT and r.numbers["margin"] > 0
                   for r in compared.values())  # fmt: skip
    else:
        assert result.decision == "keep"
        assert reasons[0].kind == Kind.DOMINATED and reasons[0].decides
        assert reasons[0].subject in {"exponentiated_gradient", "threshold_optimizer"}
