"""Memory of the audit's stages on many rows, pinned without timing: what each stage holds at
once (the 1,000,000-row audit within 2 GB, issue 35)."""

from __future__ import annotations

import tracemalloc
import weakref

import numpy as np
import pandas as pd
import pytest
from sklearn.dummy import DummyClassifier

from fairpca.flows.config import AuditConfig
from fairpca.tasks.data import Split
from fairpca.tasks.represent import fit_representation


def _split(n: int = 400, d: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = pd.DataFrame({"g": rng.integers(0, 2, n)})
    Z = rng.normal(size=(n, d)) + 1.5 * s[["g"]].to_numpy()
    y = (Z[:, 0] + rng.normal(size=n) > 0.7).astype(int)
    cut = 3 * n // 4
    split = Split(
        pd.DataFrame(Z[:cut]), y[:cut], s.iloc[:cut].reset_index(drop=True),
        pd.DataFrame(Z[cut:]), y[cut:], s.iloc[cut:].reset_index(drop=True),
        pd.DataFrame(Z[:0]), y[:0], s.iloc[:0],
    )  # fmt: skip
    return Z[:cut], Z[cut:], split


class _Spy:
    """A representation whose transform says whether the training features it made last are
    still alive when the evaluation rows are transformed."""

    def __init__(self, estimator, X_eval):
        self.estimator, self.X_eval, self.made, self.alive_at_eval = estimator, X_eval, [], []

    def get_params(self):
        return self.estimator.get_params()

    def set_params(self, **params):
        self.estimator.set_params(**params)
        return self

    def transform(self, X):
        if X is self.X_eval:
            self.alive_at_eval.append(any(ref() is not None for ref in self.made))
            return self.estimator.transform(X)
        features = self.estimator.transform(X)
        self.made.append(weakref.ref(features))
        return features


def test_the_sweep_releases_the_training_features_before_the_evaluation_rows_are_transformed():
    """With the appended PCA block each transformed part is twice its input's width; on a
    large table the training and evaluation features side by side were the audit's peak."""
    from fairpca.tasks.sweep import sweep_tradeoff

    Z_train, Z_eval, split = _split()
    rep = fit_representation.fn(
        "fair_pca", Z_train, split.y_train, split.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    spy = _Spy(rep.estimator, Z_eval)
    rows, fitted = sweep_tradeoff(
        spy, [0.0, 0.5], Z_train, split.y_train, Z_eval, split.y_validation,
        split.s_validation,
        classifiers={"dummy": lambda F, y: DummyClassifier().fit(F, y)},
        metric_options={"min_group_size": 10, "n_resamples": 20, "seed": 0},
    )  # fmt: skip
    assert spy.alive_at_eval == [False, False]
    assert [row["n_features"] for row in rows] == [3, 6] and len(fitted) == 2


def test_large_refits_train_on_float32_and_are_measured_as_the_pipeline_predicts(monkeypatch):
    """Above the size limit the refitted classifiers train on float32 features (half the
    audit's largest array); the representation stays float64, and each candidate's numbers
    are those of its classifier on the float64 features the registered pipeline gives."""
    from fairpca.tasks import sweep
    from fairpca.tasks.evaluate import classifier_key, shared_mmd_sigma

    Z_train, Z_eval, split = _split()
    config = AuditConfig(dataset="adult", k=3, lambdas=[0.5], classifiers=["logreg_tuned"])
    searched = fit_representation.fn(
        "fair_pca", Z_train, split.y_train, split.s_train, k=3, equalize_covariance=0.5, seed=0
    )
    sigma = shared_mmd_sigma(Z_train, 3, max_rows=200, seed=0)
    candidates = sweep.sweep_representation(
        searched, Z_train, Z_eval, split, config.representation, config.evaluation, 0, sigma
    ).rows
    monkeypatch.setattr(sweep, "FLOAT32_REFIT_ABOVE_BYTES", 0)
    rep, refit = sweep.refit_shortlist.fn(
        "fair_pca", candidates, searched, (Z_train, Z_eval), split, config.representation,
        config.evaluation, config.selection, 0, sigma, None,
    )  # fmt: skip
    assert rep.estimator.components_.dtype == np.float64
    for row in refit.rows:
        model = refit.classifiers[classifier_key(row)]
        assert model.estimator_.coef_.dtype == np.float32  # fitted on float32 features
        rep.estimator.set_params(tradeoff=row["lambda"])
        predicted = model.predict(rep.estimator.transform(Z_eval))
        assert row["accuracy"] == np.mean(predicted == split.y_validation)
        assert row["mean_gap_train"] < 1e-10  # the fair block measured in float64


def test_the_float32_training_features_are_filled_by_blocks(monkeypatch):
    from fairpca.tasks import sweep

    Z_train, _, split = _split(n=20_000, d=20)
    rep = fit_representation.fn(
        "fair_pca", Z_train, split.y_train, split.s_train, k=8, equalize_covariance=0.5, seed=0
    )
    rep.estimator.set_params(tradeoff=0.5)
    monkeypatch.setattr(sweep, "TRANSFORM_BLOCK_ROWS", 1000)
    tracemalloc.start()
    try:
        features = sweep.transformed(rep.estimator, Z_train, np.float32)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    expected = rep.estimator.transform(Z_train)
    assert features.dtype == np.float32
    np.testing.assert_array_equal(features, expected.astype(np.float32))
    assert peak < expected.nbytes  # never a float64 copy of every row


def test_the_correlation_removers_blocks_fill_one_array(monkeypatch):
    """CorrelationRemover's transform by blocks: one output array, not a list of blocks and
    their stack (two copies of every training row)."""
    from fairpca.tasks import references

    rng = np.random.default_rng(0)
    features = rng.normal(size=(60_000, 10))
    sensitive = pd.DataFrame({"sex": rng.choice(["F", "M"], len(features))})
    columns = [f"x{i}" for i in range(10)] + ["sex_F", "sex_M"]

    def identity(frame: pd.DataFrame) -> np.ndarray:
        return frame.to_numpy(dtype=np.float64)

    monkeypatch.setattr(references, "TRANSFORM_CHUNK_ROWS", 2000)
    tracemalloc.start()
    try:
        out = references._by_chunks(identity, features, sensitive, columns)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (60_000, 12)
    np.testing.assert_array_equal(out[:, :10], features)
    assert peak < 1.5 * out.nbytes


class _Counting:
    """A pipeline stand-in that predicts ``x0 > 0`` and records how many rows each call got."""

    def __init__(self):
        self.calls: list[int] = []

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        self.calls.append(len(X))
        return (X.iloc[:, 0].to_numpy() > 0).astype(np.int64)


def test_pipelines_predict_a_whole_part_by_blocks(monkeypatch):
    """The check of the assembled pipeline and the test rows' evaluation predict by blocks:
    the encoded and projected rows of a whole part are never held at once."""
    from fairpca.tasks import evaluate

    rng = np.random.default_rng(0)
    n = 1000
    frame = pd.DataFrame(rng.normal(size=(n, 3)))
    y = (frame[0].to_numpy() > 0).astype(np.int64)
    s = pd.DataFrame({"g": rng.choice(["a", "b"], n)})
    split = Split(frame, y, s, frame, y, s, frame, y, s)
    monkeypatch.setattr(evaluate, "PREDICT_BLOCK_ROWS", 300)
    config = AuditConfig(dataset="adult", n_bootstrap=100)
    pipeline = _Counting()
    evaluate.check_pipeline(pipeline, split, {"accuracy": 1.0}, config.evaluation)
    reported = evaluate.evaluate_reported.fn(
        split, config.evaluation, 0, pipeline, None, {"accuracy": 1.0}, None
    )
    assert pipeline.calls == [300, 300, 300, 100] * 2
    assert reported["chosen"]["test"]["accuracy"] == pytest.approx(1.0)
