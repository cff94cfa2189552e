"""The registered pipeline (``fairpca.tasks.evaluate``) equals a metadata-routed one."""

from __future__ import annotations

import numpy as np


def test_logged_pipeline_equals_a_metadata_routed_pipeline_and_predicts_from_x_alone():
    """Fitting the steps one by one (as the audit does) gives the same pipeline as sklearn
    metadata routing of ``sensitive_features`` to FairPCA; prediction needs X only."""
    import sklearn
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    from fairpca import FairPCA
    from fairpca.datasets import load_german, make_preprocessor
    from fairpca.tasks.data import Split
    from fairpca.tasks.evaluate import build_pipeline
    from fairpca.tasks.represent import fit_preprocessor, fit_representation
    from fairpca.tasks.sweep import SweepResult, fit_classifier

    data = load_german()
    X, y, s = data.X, data.y.to_numpy(), data.sensitive
    split = Split(X, y, s, X.head(50), y[:50], s.head(50), X.head(50), y[:50], s.head(50))
    preprocessor, Z, _ = fit_preprocessor.fn(split)
    rep = fit_representation.fn("fair_pca", Z, y, s, k=4, equalize_covariance=0.5, seed=0)
    rep.estimator.set_params(tradeoff=0.5)
    classifier = fit_classifier("logreg", rep.estimator.transform(Z), y, seed=0)
    sweep = SweepResult("fair_pca", classifiers={(0, "logreg"): classifier})
    chosen = {"variant": "fair_pca", "lambda": 0.5, "lambda_index": 0, "classifier": "logreg"}
    ours = build_pipeline(preprocessor, {"fair_pca": rep}, {"fair_pca": sweep}, chosen)

    with sklearn.config_context(enable_metadata_routing=True):
        routed = Pipeline(
            [
                ("preprocess", make_preprocessor(X)),
                (
                    "represent",
                    FairPCA(n_components=4, tradeoff=0.5, random_state=0).set_fit_request(
                        sensitive_features=True
                    ),
                ),
                ("classify", LogisticRegression(C=1 / (2 * len(y) * 0.01), max_iter=1000)),
            ]
        ).fit(X, y, sensitive_features=s)
    np.testing.assert_array_equal(ours.predict(X), routed.predict(X))
    np.testing.assert_allclose(
        ours.decision_function(X), routed.decision_function(X), rtol=1e-6, atol=1e-8
    )
