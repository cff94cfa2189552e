"""The audited pipeline as an ONNX graph (fairpca.tasks.onnx_export): the graph computes what
the pipeline computes, exactly for labels, over random shapes, seeds, groups and categories;
what has no exact converter, or disagrees, gets no graph and says why."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.decomposition import PCA
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import FixedThresholdClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC, LinearSVC

from fairpca import FairKernelPCA, FairPCA
from fairpca.datasets import make_preprocessor
from fairpca.tasks import onnx_export as og
from fairpca.tasks import onnx_runtime

onnx = pytest.importorskip("onnx")


def random_table(seed: int, n: int | None = None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Rows of a random shape: numeric (float with missing values, int) and categorical
    (object, category, bool) columns, with rare categories and missing ones; a label that
    depends on them and a sensitive attribute of 2 to 4 groups."""
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(300, 700))
    columns: dict[str, object] = {}
    for i in range(int(rng.integers(1, 4))):
        values = rng.normal(loc=rng.normal(), scale=rng.uniform(0.5, 3), size=n)
        values[rng.random(n) < 0.1] = np.nan
        columns[f"num{i}"] = values
    columns["count"] = rng.integers(0, 20, n)
    for i in range(int(rng.integers(1, 4))):
        levels = [f"c{i}_{j}" for j in range(int(rng.integers(2, 9)))]
        weights = rng.dirichlet(np.ones(len(levels)) * 0.7)
        values = rng.choice(levels, n, p=weights).astype(object)
        values[rng.random(n) < 0.05] = None
        columns[f"cat{i}"] = values if i % 2 == 0 else pd.Categorical(values)
    columns["flag"] = rng.random(n) < 0.3
    X = pd.DataFrame(columns)
    groups = rng.integers(0, int(rng.integers(2, 5)), n)
    signal = np.nan_to_num(X["num0"].to_numpy()) + 0.3 * (X["cat0"] == X["cat0"].iloc[0])
    y = (signal + 0.5 * groups + rng.normal(size=n) > np.median(signal)).astype(int)
    return X, y, groups


def unseen_rows(X: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``X`` with some categories never seen at fit and some values missing."""
    rng = np.random.default_rng(seed + 1000)
    out = X.copy()
    for column in [c for c in X.columns if c.startswith("cat")]:
        values = out[column].astype(object).to_numpy(copy=True)
        values[rng.random(len(values)) < 0.1] = "never-seen"
        values[rng.random(len(values)) < 0.05] = np.nan
        out[column] = values
    return out


def fitted_pipeline(X, y, groups, representation, classifier, min_count: int = 20):
    preprocess = make_preprocessor(X, min_category_count=min_count, max_categories=5)
    encoded = preprocess.fit_transform(X)
    if isinstance(representation, PCA):
        representation.fit(encoded)
    else:
        representation.fit(encoded, y, sensitive_features=groups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        classifier.fit(representation.transform(encoded), y)
    return Pipeline(
        [("preprocess", preprocess), ("represent", representation), ("classify", classifier)]
    )


CLASSIFIERS = {
    "logreg": lambda: LogisticRegression(C=0.5, max_iter=500),
    "rbf_svc": lambda: SVC(kernel="rbf", C=3.0),
    "linear_svm": lambda: LinearSVC(tol=1e-3),
    "mlp": lambda: MLPClassifier(hidden_layer_sizes=(10, 5), max_iter=200, random_state=0),
    "thresholded": lambda: FixedThresholdClassifier(LogisticRegression(), threshold=0.37),
}


def representation_for(name: str, seed: int):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 4))
    if name == "pca":
        return PCA(n_components=k)
    if name == "fair_pca_tradeoff":
        return FairPCA(n_components=k, tradeoff=float(rng.uniform(0.1, 1.0)))
    if name == "fair_pca_eo":
        return FairPCA(n_components=k, constraint="equal_opportunity")
    if name == "fair_pca_s":
        return FairPCA(n_components=k, equalize_covariance=0.9)
    return FairPCA(n_components=k)


def run_graph(pipeline, X_fit, X):
    return run_checked(og.pipeline_graph(pipeline, X_fit), X)


def run_checked(graph, X):
    """Every output of ``graph`` for the rows ``X``, checked and fed as the gate does."""
    import onnxruntime

    checked = onnx_runtime.graph_of(graph.SerializeToString())
    session = onnxruntime.InferenceSession(checked.data, providers=["CPUExecutionProvider"])
    return session.run(None, onnx_runtime.graph_feed(checked.inputs, X))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("classifier", sorted(CLASSIFIERS))
@pytest.mark.parametrize(
    "representation", ["fair_pca", "fair_pca_tradeoff", "fair_pca_eo", "fair_pca_s", "pca"]
)
def test_the_graph_predicts_exactly_what_the_pipeline_predicts(representation, classifier, seed):
    X, y, groups = random_table(seed * 31 + len(classifier))
    pipeline = fitted_pipeline(
        X, y, groups, representation_for(representation, seed), CLASSIFIERS[classifier]()
    )
    rows = unseen_rows(X, seed)
    label, scores = run_graph(pipeline, X, rows)
    np.testing.assert_array_equal(label, pipeline.predict(rows))
    final = pipeline[-1]
    if hasattr(final, "predict_proba"):
        np.testing.assert_allclose(scores, pipeline.predict_proba(rows), rtol=0, atol=1e-9)
    else:
        np.testing.assert_allclose(scores[:, 1], pipeline.decision_function(rows), atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_count", [1, 20, 10_000])
def test_the_graph_encodes_rare_unseen_and_missing_categories_as_scikit_learn(seed, min_count):
    """The preprocessor alone: pooled rare categories, the encoder's infrequent column (or
    all zeros without one) for unseen values, missing values' own column, imputed numbers."""
    from skl2onnx.common.data_types import DoubleTensorType

    X, _, _ = random_table(seed)
    for max_categories in (3, None):
        preprocess = make_preprocessor(
            X, min_category_count=min_count, max_categories=max_categories
        )
        expected_train = preprocess.fit_transform(X)
        rows = unseen_rows(X, seed)
        width = expected_train.shape[1]
        graph = og.convert(preprocess, X, [("features", DoubleTensorType([None, width]))])
        (features,) = run_checked(graph, rows)
        np.testing.assert_array_equal(features, preprocess.transform(rows))


def test_the_graph_reads_one_typed_input_per_column_and_standard_operators_only():
    X, y, groups = random_table(5)
    graph = og.pipeline_graph(fitted_pipeline(X, y, groups, FairPCA(2), LogisticRegression()), X)
    kinds = {i.name: i.type.tensor_type.elem_type for i in graph.graph.input}
    assert list(kinds) == list(X.columns)
    strings = {name for name, kind in kinds.items() if kind == onnx.TensorProto.STRING}
    assert strings == {c for c in X.columns if c.startswith("cat")} | {"flag"}
    assert set(kinds.values()) == {onnx.TensorProto.STRING, onnx.TensorProto.DOUBLE}
    assert [o.name for o in graph.graph.output] == [og.LABEL_OUTPUT, og.SCORES_OUTPUT]
    assert {node.domain for node in graph.graph.node} <= {"", "ai.onnx.ml"}
    assert set(og.graph_opset(graph.SerializeToString())) == {"ai.onnx", "ai.onnx.ml"}
    assert all(o.version <= og.OPSET[o.domain] for o in graph.opset_import)
    with pytest.raises(ValueError, match=r"column\(s\) \['cat0'\]"):
        onnx_runtime.graph_feed(onnx_runtime.graph_inputs(graph), X.drop(columns="cat0"))


def test_a_pipeline_without_an_exact_converter_gets_no_graph_and_says_why():
    X, y, groups = random_table(6, n=200)
    kernel = FairKernelPCA(n_components=2, approximation="nystroem", n_landmarks=50)
    pipeline = fitted_pipeline(X, y, groups, kernel, LogisticRegression())
    export = og.export_graph(pipeline, X)
    assert export.data is None and export.status == "no_converter"
    assert export.reason.startswith(onnx_runtime.NO_GRAPH)
    assert export.record()["sha256"] is None


def test_a_graph_that_disagrees_with_the_pipeline_is_not_saved(tmp_path):
    from fairpca.tasks.mlflow_logging import save_model_locally

    X, y, groups = random_table(7)
    pipeline = fitted_pipeline(X, y, groups, FairPCA(2), LogisticRegression())
    model_dir = save_model_locally(
        pipeline, tmp_path, input_example=X.head(2), pip_requirements=["fairpca==0.1.0"]
    )
    before = (model_dir / "MLmodel").read_text()
    # the pipeline's labels of these rows, one of them changed: the graph computes the others
    labels = pipeline.predict(X)
    labels[3] = 1 - labels[3]
    record = og.save_graph(model_dir, pipeline, X, labels)
    assert record["status"] == "differs" and record["sha256"] is None
    assert record["rows_checked"] == len(X) and "on 1 of" in record["reason"]
    assert not (model_dir / og.ONNX_FILE).exists()
    assert (model_dir / "MLmodel").read_text() == before


def test_the_saved_graph_is_mlflows_onnx_flavour_beside_the_skops_file(tmp_path):
    import mlflow.onnx

    from fairpca.tasks.mlflow_logging import check_saved_model, save_model_locally

    X, y, groups = random_table(8)
    pipeline = fitted_pipeline(X, y, groups, FairPCA(2, tradeoff=0.5), LinearSVC())
    model_dir = save_model_locally(
        pipeline, tmp_path, input_example=X.head(2), pip_requirements=["fairpca==0.1.0"]
    )
    record = og.save_graph(model_dir, pipeline, X)
    data = (model_dir / og.ONNX_FILE).read_bytes()
    assert record["status"] == "exported" and record["rows_checked"] == len(X)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["opset"] == og.graph_opset(data)
    assert all(record["opset"][d or "ai.onnx"] <= v for d, v in og.OPSET.items())
    flavors = yaml.safe_load((model_dir / "MLmodel").read_text())["flavors"]
    assert flavors["python_function"]["loader_module"] == "mlflow.sklearn"
    # the entry mlflow.onnx.save_model writes for the same graph
    reference = tmp_path / "reference"
    mlflow.onnx.save_model(onnx_runtime.parse_graph(data), reference, save_as_external_data=False)
    written = yaml.safe_load((reference / "MLmodel").read_text())["flavors"]["onnx"]
    assert flavors["onnx"] == written and flavors["onnx"]["data"] == "model.onnx"
    check_saved_model(model_dir)  # the trust rule of logging and relog accepts it
    loaded = mlflow.onnx.load_model(str(model_dir))
    assert hashlib.sha256(loaded.SerializeToString()).hexdigest() == record["sha256"]


@pytest.mark.parametrize("classifier", ["logreg", "rbf_svc"])
def test_the_graph_the_audit_writes_passes_the_gates_checks_and_serves_its_labels(
    tmp_path, classifier
):
    """The gate reads the saved graph with its own checks (size, standard operator sets, no
    external data, ONNX's checker) and serves it: its labels, of rows with unseen and
    missing categories and missing numbers, are the pipeline's."""
    from fairpca.tasks import onnx_runtime
    from fairpca.tasks.mlflow_logging import save_model_locally

    X, y, groups = random_table(11)
    pipeline = fitted_pipeline(X, y, groups, FairPCA(3), CLASSIFIERS[classifier]())
    model_dir = save_model_locally(
        pipeline, tmp_path, input_example=X.head(2), pip_requirements=["fairpca==0.1.0"]
    )
    assert og.save_graph(model_dir, pipeline, X)["status"] == "exported"
    graph = onnx_runtime.read_graph(model_dir)
    onnx_runtime.check_graph(onnx_runtime.parse_graph(graph.data))
    assert [entry.name for entry in graph.inputs] == list(X.columns)
    rows = unseen_rows(X, 11)
    assert rows.isna().any().any()
    served = onnx_runtime.GraphModel(graph).predict(rows)
    np.testing.assert_array_equal(served, pipeline.predict(rows))


def test_the_export_check_labels_rows_as_the_gate_serves_them_one_by_one():
    """An RBF SVM whose decision for one row lies between its value in a block run and its
    value alone: the check must see the label the gate serves (one row per run) and, as that
    differs from the pipeline's, refuse the graph."""
    import onnxruntime

    X, y, groups = random_table(0, 3000)
    pipeline = fitted_pipeline(
        X, y, groups, representation_for("fair_pca", 0), CLASSIFIERS["rbf_svc"]()
    )
    svc, row = pipeline[-1], 1118
    intercept, libsvm_intercept = svc.intercept_.copy(), svc._intercept_.copy()

    def decisions():
        graph = onnx_runtime.graph_of(og.pipeline_graph(pipeline, X).SerializeToString())
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(
            graph.data, options, providers=["CPUExecutionProvider"]
        )
        feed = onnx_runtime.graph_feed(graph.inputs, X)
        block = session.run(None, feed)[1][row, 1]
        alone = session.run(None, {name: value[row : row + 1] for name, value in feed.items()})
        return block, alone[1][0, 1], pipeline.decision_function(X.iloc[[row]])[0]

    block, alone, _ = decisions()
    for shift in np.linspace(alone, block, 41):
        svc.intercept_, svc._intercept_ = intercept - shift, libsvm_intercept + shift
        block, alone, sklearn = decisions()
        if (block >= 0) != (alone >= 0) and (sklearn >= 0) == (block >= 0):
            break
    else:
        pytest.skip("onnxruntime sums this row alike in a block and alone on this machine")
    exported = og.export_graph(pipeline, X)
    assert exported.status == "differs" and exported.data is None
