"""The lambda sweep (``fairpca.tasks.sweep``): one fit per representation, reused, and one
implementation for the audit and the public task."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from fairpca.flows.config import AuditConfig
from fairpca.tasks.data import Split
from fairpca.tasks.public import sweep_lambda
from fairpca.tasks.represent import fit_representation
from fairpca.tasks.sweep import make_classifier, sweep_representation


def _split(seed: int = 0):
    rng = np.random.default_rng(seed)
    n, d = 400, 8
    s = pd.DataFrame({"g": rng.integers(0, 2, n)})
    Z = rng.normal(size=(n, d)) + 1.5 * s[["g"]].to_numpy()
    y = (Z[:, 0] + rng.normal(size=n) > 0.7).astype(int)
    split = Split(
        pd.DataFrame(Z[:300]), y[:300], s.iloc[:300].reset_index(drop=True),
        pd.DataFrame(Z[300:]), y[300:], s.iloc[300:].reset_index(drop=True),
        pd.DataFrame(Z[:0]), y[:0], s.iloc[:0],
    )  # fmt: skip
    return Z, split


def test_sweep_fits_once_and_reuses_the_representation():
    from fairpca.tasks.evaluate import shared_mmd_sigma

    Z, split = _split()  # the sweep never reads test rows
    config = AuditConfig(
        dataset="adult", k=3, lambdas=[0.0, 0.5], classifiers=["logreg", "linear_svm"]
    )
    rep = fit_representation.fn(
        "fair_pca", Z[:300], split.y_train, split.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    components = rep.estimator.components_.copy()
    sigma = shared_mmd_sigma(Z[:300], 3, max_rows=200, seed=0)
    seen = []
    result = sweep_representation(
        rep, Z[:300], Z[300:], split, config.representation, config.evaluation, config.seed,
        sigma, lambda v, i, t: seen.append((i, t)),
    )  # fmt: skip
    assert seen == [(1, 2), (2, 2)]
    np.testing.assert_array_equal(rep.estimator.components_, components)  # not refitted
    assert rep.estimator.tradeoff == 0.0  # restored
    table = pd.DataFrame(result.rows)
    assert len(table) == 4 and set(table["n_features"]) == {3, 6}
    assert table.loc[table["lambda"] == 0.0, "mean_gap_train"].max() < 1e-10
    assert set(result.classifiers) == {(0, "logreg"), (0, "linear_svm"), (1, "logreg"),
                                       (1, "linear_svm")}  # fmt: skip


def test_the_public_sweep_is_the_audits_sweep_with_one_classifier():
    Z, split = _split()
    config = AuditConfig(
        dataset="adult", k=3, lambdas=[0.0, 0.5, 1.0], classifiers=["logreg"], n_bootstrap=200
    )
    rep = fit_representation.fn(
        "fair_pca", Z[:300], split.y_train, split.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    audit = pd.DataFrame(
        sweep_representation(
            rep, Z[:300], Z[300:], split, config.representation, config.evaluation, config.seed, 1.0
        ).rows
    )
    public = sweep_lambda.fn(
        rep,
        Z[:300],
        split.y_train,
        Z[300:],
        split.y_validation,
        split.s_validation,
        lambdas=config.representation.lambdas,
        classifier=make_classifier("logreg", 300, 0),
        min_group_size=config.evaluation.min_group_size,
        n_resamples=config.evaluation.n_bootstrap,
        seed=config.seed,
    )
    assert list(public["lambda"]) == [0.0, 0.5, 1.0]
    assert set(public["classifier"]) == {"LogisticRegression"}
    metrics = [c for c in public.columns if c not in ("classifier", "classifier_seconds")]
    assert {"dp_difference", "dp_difference.ci95_low", "one_class_share"} <= set(metrics)
    assert set(metrics) < set(audit.columns)  # the audit adds the representation metrics
    pd.testing.assert_frame_equal(public[metrics], audit[metrics])
    assert public["dp_difference"].iloc[0] != public["dp_difference"].iloc[-1]
    assert rep.estimator.tradeoff == 0.0  # the public sweep works on a copy


def test_the_search_refits_every_k_and_keeps_k_and_C_by_the_audits_own_rule():
    from fairpca.tasks.select import majority_accuracy_of, select_candidate
    from fairpca.tasks.sweep import coarse_lambdas, search_representation

    Z, split = _split()
    config = AuditConfig(
        dataset="adult", lambdas=[0.0, 0.25, 0.5], classifiers=["logreg_tuned"],
        n_bootstrap=200, logreg_C=[0.01, 1.0],
    )  # fmt: skip
    result = search_representation(
        "fair_pca", Z[:300], Z[300:], split, k_grid=[2, 4],
        representation=config.representation, evaluation=config.evaluation,
        selection=config.selection, seed=0,
    )  # fmt: skip
    points = pd.DataFrame(result.points)
    assert coarse_lambdas([0.0, 0.25, 0.5]) == [0.0, 0.5]
    assert set(points["k"]) == {2, 4} and set(points["C"]) == {0.01, 1.0}
    assert set(points["lambda"]) == {0.0, 0.5} and set(points["stage"]) == {"coarse"}
    majority = majority_accuracy_of(split.y_train, split.y_validation)
    best, _, _ = select_candidate(points, majority, config.selection)
    assert result.representation.facts["k"] == best["k"] and best["C"] == result.C
    # each k is its own fit (Fair PCA-S directions are not nested in k): a direct fit agrees
    direct = fit_representation.fn(
        "fair_pca", Z[:300], split.y_train, split.s_train, k=int(best["k"]),
        equalize_covariance=None, seed=0,
    )  # fmt: skip
    np.testing.assert_allclose(
        result.representation.estimator.components_, direct.estimator.components_, atol=1e-12
    )


def test_one_k_and_one_C_need_no_screening():
    from fairpca.tasks.sweep import search_representation

    Z, split = _split()
    config = AuditConfig(dataset="adult", k=3, logreg_C=[1.0])
    result = search_representation(
        "pca", Z[:300], Z[300:], split, k_grid=[3], representation=config.representation,
        evaluation=config.evaluation, selection=config.selection, seed=0,
    )  # fmt: skip
    assert result.points == [] and result.C == 1.0 and result.representation.facts["k"] == 3


def test_cross_validation_measures_candidates_on_training_and_validation_rows_only():
    from fairpca.tasks.sweep import cross_validate

    Z, split = _split()  # no test rows: cross-validation cannot read any
    config = AuditConfig(
        dataset="adult", k=3, lambdas=[0.0, 0.5], classifiers=["logreg", "logreg_tuned"],
        n_bootstrap=200, cv_folds=3, cv_repeats=2,
    )  # fmt: skip
    rep = fit_representation.fn(
        "fair_pca", Z[:300], split.y_train, split.s_train, k=3, equalize_covariance=None, seed=0
    )
    sweep = sweep_representation(
        rep, Z[:300], Z[300:], split, config.representation, config.evaluation, 0, 1.0,
        C=1.0, scoring="balanced_accuracy",
    )  # fmt: skip
    run = {
        "representations": {"fair_pca": rep}, "encoded": (Z[:300], Z[300:]), "split": split,
        "evaluation": config.evaluation, "selection": config.selection, "seed": 0,
    }  # fmt: skip
    first = cross_validate(sweep.rows, **run)
    assert first == cross_validate(sweep.rows, **run)  # deterministic
    assert len(first) == len(sweep.rows)
    for cv, row in zip(first, sweep.rows, strict=True):
        assert cv["holdout_accuracy"] == row["accuracy"]
        assert cv["balanced_accuracy.ci95_low"] <= cv["balanced_accuracy"]
        assert cv["balanced_accuracy"] <= cv["balanced_accuracy.ci95_high"]
        assert {"dp_difference.se", "cv_spread.balanced_accuracy"} <= set(cv)
    assert sorted({row["C"] for row in first}) == pytest.approx([1 / 6, 1.0])  # paper C, C=1


def test_the_sweep_refines_the_lambdas_between_the_coarse_neighbours_of_the_winner():
    from fairpca.flows.config import DEFAULT_LAMBDAS
    from fairpca.tasks.sweep import coarse_lambdas, fine_lambdas

    grid = list(DEFAULT_LAMBDAS)
    assert coarse_lambdas(grid) == [0.0, 0.125, 1.0]
    assert fine_lambdas(grid, 0.0) == [0.0, 0.001, 0.008, 0.027, 0.064, 0.125]
    assert fine_lambdas(grid, 0.125) == grid
    assert fine_lambdas(grid, 1.0) == [0.125, 0.216, 0.343, 0.512, 0.729, 1.0]
    assert fine_lambdas(grid, float("nan")) is None  # standard PCA has no lambda


def test_the_shortlist_from_a_sample_is_refitted_on_every_training_row():
    """A wide search on a sample hands its shortlist to every row: each candidate's
    representation is fitted on every training row, its classifier too, and its metrics
    are those of every validation row (the rows the registered model is judged on)."""
    from fairpca.tasks.data import search_sample
    from fairpca.tasks.evaluate import shared_mmd_sigma
    from fairpca.tasks.sweep import refit_shortlist

    Z, split = _split()
    config = AuditConfig(
        dataset="adult", k=3, lambdas=[0.0, 0.5], classifiers=["logreg", "linear_svm"],
        n_bootstrap=200,
    )  # fmt: skip
    sample, (Z_train, Z_validation) = search_sample(split, (Z[:300], Z[300:]), 120, seed=0)
    assert (len(sample.y_train), len(sample.y_validation)) == (120, 60)
    searched = fit_representation.fn(
        "fair_pca", Z_train, sample.y_train, sample.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    sigma = shared_mmd_sigma(Z_train, 3, max_rows=200, seed=0)
    found = sweep_representation(
        searched, Z_train, Z_validation, sample, config.representation, config.evaluation, 0,
        sigma,
    )  # fmt: skip
    candidates = [row for row in found.rows if row["lambda"] == 0.5][::-1]
    rep, refit = refit_shortlist.fn(
        "fair_pca", candidates, searched, (Z[:300], Z[300:]), split, config.representation,
        config.evaluation, config.selection, 0, sigma, None,
    )  # fmt: skip
    np.testing.assert_allclose(rep.estimator.mean_, Z[:300].mean(axis=0), atol=1e-12)
    assert [(r["classifier"], r["lambda_index"]) for r in refit.rows] == [
        ("linear_svm", 0), ("logreg", 1)
    ]  # fmt: skip
    for row in refit.rows:
        model = refit.classifiers[(row["lambda_index"], row["classifier"])]
        rep.estimator.set_params(tradeoff=row["lambda"])
        predicted = model.predict(rep.estimator.transform(Z[300:]))
        assert row["accuracy"] == pytest.approx(np.mean(predicted == split.y_validation))
        assert row["n_features"] == model.n_features_in_ == 6


def _scored_rows(n: int, seed: int = 0):
    """Rows of two groups with one base rate whose scores favour group ``a`` a little
    (scores rounded to 0.01: many ties)."""
    rng = np.random.default_rng(seed)
    group = np.where(rng.random(n) < 0.4, "a", "b")
    y = (rng.random(n) < 0.3).astype(np.int64)
    logit = 2.5 * y + 0.5 * (group == "a") + rng.normal(0.0, 1.0, n) - 1.5
    return np.round(1 / (1 + np.exp(-logit)), 2), y, pd.DataFrame({"sex": group})


def _gate_values(scores, y, groups, threshold):
    from fairpca.tasks.evaluate import gate_standard_errors

    predicted = (scores >= threshold).astype(np.int64)
    rates = [predicted[groups["sex"].to_numpy() == g].mean() for g in ("a", "b")]
    errors = gate_standard_errors(y, predicted, groups, min_group_size=30)
    tpr = predicted[y == 1].mean()
    tnr = 1 - predicted[y == 0].mean()
    return {
        "dp_difference": max(rates) - min(rates),
        "selection_rate_ratio": min(rates) / max(rates),
        "balanced_accuracy": 0.5 * (tpr + tnr),
        **errors,
    }


def test_the_threshold_is_the_best_one_that_meets_the_gate_with_its_margin():
    """Chosen on the training rows' scores as the best among the thresholds whose
    predictions meet the policy by one standard error (checked against every threshold);
    the unconstrained best when none can."""
    from fairpca.tasks.select import GatePolicy
    from fairpca.tasks.sweep import ThresholdGate, best_threshold, gated_threshold

    scores, y, groups = _scored_rows(3000)
    policy = GatePolicy(("demographic_parity",), {"max_dp_difference": 0.1, "min_accuracy": 0})
    gate = ThresholdGate(policy, groups, 30)
    free = best_threshold(scores, y, "balanced_accuracy")

    def passes(values):
        return values["dp_difference"] + values["dp_difference.se"] <= 0.1

    assert not passes(_gate_values(scores, y, groups, free))  # the best fails the gate
    chosen = gated_threshold(scores, y, "balanced_accuracy", gate)
    values = _gate_values(scores, y, groups, chosen)
    assert passes(values)
    ranked = np.unique(scores)
    cuts = [(low + high) / 2 for low, high in itertools.pairwise(ranked)]
    passing = [_gate_values(scores, y, groups, t) for t in cuts]
    # the useful ones: at least half the best gain over chance (0.5)
    useful = 0.5 + 0.5 * (max(v["balanced_accuracy"] for v in passing) - 0.5)
    best = max(
        v["balanced_accuracy"]
        for v in passing
        if passes(v) and v["balanced_accuracy"] >= useful - 1e-12
    )
    assert values["balanced_accuracy"] == pytest.approx(best, abs=1e-12)
    # a band no threshold can meet with its margin: the unconstrained best
    strict = GatePolicy(("demographic_parity",), {"max_dp_difference": 1e-6, "min_accuracy": 0})
    assert gated_threshold(scores, y, "balanced_accuracy", ThresholdGate(strict, groups, 30)) == (
        free
    )


def test_logreg_tuned_chooses_its_threshold_under_the_gate_on_the_training_rows():
    from fairpca.tasks.select import GatePolicy
    from fairpca.tasks.sweep import ThresholdGate, fit_classifier

    scores, y, groups = _scored_rows(3000)
    clipped = np.clip(scores, 0.005, 0.995)
    features = np.log(clipped / (1 - clipped))[:, None]
    policy = GatePolicy(("demographic_parity",), {"max_dp_difference": 0.1, "min_accuracy": 0})
    gate = ThresholdGate(policy, groups, 30)
    options = {"seed": 0, "scoring": "balanced_accuracy"}
    plain = fit_classifier("logreg_tuned", features, y, **options)
    gated = fit_classifier("logreg_tuned", features, y, gate=gate, **options)
    assert gated.threshold != plain.threshold
    fair = _gate_values(gated.predict_proba(features)[:, 1], y, groups, gated.threshold)
    free = _gate_values(plain.predict_proba(features)[:, 1], y, groups, plain.threshold)
    # met on the out-of-fold scores with its margin; near it on the rows refitted
    assert fair["dp_difference"] < 0.1 < 0.12 < free["dp_difference"]


def test_the_lambda_sweep_tries_the_C_grid_at_every_lambda_and_refits_each_candidates_C(
    prefect_harness,
):
    """A candidate is (variant, k, lambda, C): ``logreg_tuned`` at each C of the grid at every
    lambda, each fitted classifier found by its row; the refit on every row keeps the
    candidate's own C (the paper's rule at the new row count)."""
    from fairpca.tasks.evaluate import build_pipeline, shared_mmd_sigma
    from fairpca.tasks.sweep import lambda_sweep, paper_C, refit_shortlist

    Z, split = _split()
    config = AuditConfig(
        dataset="adult", k=3, lambdas=[0.0, 0.5], classifiers=["logreg", "logreg_tuned"],
        n_bootstrap=100,
    )  # fmt: skip
    rep = fit_representation.fn(
        "fair_pca", Z[:300], split.y_train, split.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    sigma = shared_mmd_sigma(Z[:300], 3, max_rows=200, seed=0)
    result = lambda_sweep.fn(
        "fair_pca", rep, Z[:300], Z[300:], split, config.representation, config.evaluation,
        0, sigma, 1.0, "balanced_accuracy",
    )  # fmt: skip
    tuned = [(r["lambda"], r["C"]) for r in result.rows if r["classifier"] == "logreg_tuned"]
    # the default grid: the paper's C (1 / (2 n 0.01)) and 1
    assert sorted(tuned) == [(0.0, paper_C(300)), (0.0, 1.0), (0.5, paper_C(300)), (0.5, 1.0)]
    for row in result.rows:
        pipeline = build_pipeline(None, {"fair_pca": rep}, {"fair_pca": result}, row)
        predicted = pipeline[1:].predict(Z[300:])
        assert row["accuracy"] == pytest.approx(np.mean(predicted == split.y_validation))
    paper = next(r for r in result.rows if r["classifier"] == "logreg_tuned" and r["C"] < 1)
    _, refit = refit_shortlist.fn(
        "fair_pca", [paper], rep, (Z[:300], Z[300:]), split, config.representation,
        config.evaluation, config.selection, 0, sigma, 1.0,
    )  # fmt: skip
    assert refit.rows[0]["C"] == paper_C(300)  # the paper's rule, not the variant's C = 1
