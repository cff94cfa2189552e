"""One trust rule for saving, loading and relogging a model (fairpca.tasks.trust)."""

from __future__ import annotations

import operator
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import skops.io
from messages import matching
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from fairpca import FairPCA
from fairpca.tasks.mlflow_logging import _check_trusted_types, save_model_locally
from fairpca.tasks.registry import load_skops_pipeline
from fairpca.tasks.trust import (
    FILE_TYPES_UNTRUSTED,
    MODEL_NOT_LOADED,
    NESTED_MLMODEL,
    NOT_SKOPS,
    PIPELINE_TYPES_UNTRUSTED,
    TRUSTED_TYPES,
    UntrustedModelError,
    types_to_trust,
)

ADD = ["_operator.add"]  # the foreign type of the crafted pipelines below


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(80, 4)), columns=list("abcd"))
    s = rng.integers(0, 2, 80)
    y = (X["a"] + 0.5 * s + rng.normal(scale=0.5, size=80) > 0).astype(int)
    return X, y.to_numpy(), s


def _fair_pipeline(classifier):
    X, y, s = _data()
    represent = FairPCA(n_components=2).fit(X.to_numpy(), sensitive_features=s)
    classifier.fit(represent.transform(X.to_numpy()), y)
    return Pipeline([("represent", represent), ("classify", classifier)])


def _saved(pipeline, tmp_path):
    X, _, _ = _data()
    example = pd.DataFrame(X.to_numpy()[:2], columns=list("abcd"))
    return save_model_locally(pipeline, tmp_path, input_example=example, pip_requirements=[])


def test_what_the_save_path_accepts_the_load_and_relog_paths_accept(tmp_path):
    pipeline = _fair_pipeline(LogisticRegression())
    trusted = types_to_trust(pipeline)
    assert "fairpca._fair_pca.FairPCA" in trusted and set(trusted) <= TRUSTED_TYPES
    model_dir = _saved(pipeline, tmp_path)
    _check_trusted_types(model_dir)  # relog
    loaded = load_skops_pipeline(model_dir)
    X, _, _ = _data(1)
    np.testing.assert_array_equal(loaded.predict(X.to_numpy()), pipeline.predict(X.to_numpy()))


def test_a_scikit_learn_type_outside_the_fixed_set_is_not_saved():
    # the stochastic-gradient optimiser is scikit-learn's own, but not one the project loads
    mlp = MLPClassifier(solver="sgd", hidden_layer_sizes=(3,), max_iter=5, random_state=0)
    with pytest.warns(Warning):  # five iterations do not converge
        pipeline = _fair_pipeline(mlp)
    sgd = ["sklearn.neural_network._stochastic_optimizers.SGDOptimizer"]
    with pytest.raises(TypeError, match=matching(PIPELINE_TYPES_UNTRUSTED, foreign=sgd)):
        types_to_trust(pipeline)


def test_a_foreign_type_is_refused_on_every_path(tmp_path):
    foreign = Pipeline([("f", FunctionTransformer(operator.add))])
    with pytest.raises(TypeError, match=matching(PIPELINE_TYPES_UNTRUSTED, foreign=ADD)):
        types_to_trust(foreign)
    model_dir = _saved(_fair_pipeline(LogisticRegression()), tmp_path)
    crafted = shutil.copytree(model_dir, tmp_path / "crafted")
    skops.io.dump(foreign, crafted / "model.skops")
    with pytest.raises(UntrustedModelError, match=matching(FILE_TYPES_UNTRUSTED, foreign=ADD)):
        load_skops_pipeline(crafted)
    pickled = shutil.copytree(model_dir, tmp_path / "pickled")
    spec = (pickled / "MLmodel").read_text().replace("skops", "pickle")
    (pickled / "MLmodel").write_text(spec)
    not_skops = matching(NOT_SKOPS, model_dir=pickled, serialization="pickle")
    with pytest.raises(UntrustedModelError, match=not_skops):
        load_skops_pipeline(pickled)
    with pytest.raises(ValueError, match=matching(FILE_TYPES_UNTRUSTED, foreign=ADD)):
        _check_trusted_types(crafted)


def _pickled_model_dir(tmp_path, marker):
    """A cloudpickled MLflow sklearn model whose pickle, once loaded, writes ``marker``."""
    import pickle

    import mlflow.sklearn

    X, y, _ = _data()
    model_dir = tmp_path / "pickled"
    mlflow.sklearn.save_model(
        LogisticRegression().fit(X, y), str(model_dir), serialization_format="cloudpickle"
    )
    payload = f"open({str(marker)!r}, 'w').close()"
    (model_dir / "model.pkl").write_bytes(
        b"cbuiltins\nexec\n(" + pickle.dumps(payload, protocol=0)[:-1] + b"tR."
    )
    return model_dir


def test_a_model_named_by_uri_is_loaded_only_once_verified(tmp_path):
    import mlflow.sklearn

    from fairpca.tasks.trust import load_verified_model

    X, y, _ = _data()
    model = LogisticRegression().fit(X, y)
    mlflow.sklearn.save_model(model, str(tmp_path / "skops"))  # skops: MLflow's default
    loaded = load_verified_model(str(tmp_path / "skops"))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))

    marker = tmp_path / "unpickled"
    pickled = _pickled_model_dir(tmp_path, marker)
    refused = "serialization 'cloudpickle', not skops"
    with pytest.raises(UntrustedModelError, match=refused) as error:
        load_verified_model(str(pickled))
    assert "serialization_format='skops'" in str(error.value)
    assert not marker.exists()  # refused before anything was unpickled

    foreign = tmp_path / "foreign"
    shutil.copytree(tmp_path / "skops", foreign)
    skops.io.dump(Pipeline([("f", FunctionTransformer(operator.add))]), foreign / "model.skops")
    with pytest.raises(UntrustedModelError, match=matching(FILE_TYPES_UNTRUSTED, foreign=ADD)):
        load_verified_model(str(foreign))


def _edited_mlmodel(source, target, edit):
    """A copy of the model directory ``source`` whose MLmodel ``edit(spec)`` changed."""
    import yaml

    shutil.copytree(source, target)
    spec = yaml.safe_load((target / "MLmodel").read_text())
    edit(spec)
    (target / "MLmodel").write_text(yaml.safe_dump(spec))
    return target


def test_a_model_whose_loader_would_read_another_file_is_refused(tmp_path):
    """What MLflow's loader reads besides the checked skops file: its python_function
    model_path, a data folder with an MLmodel of its own, and the types MLmodel asks skops to
    trust. Each is refused before anything is loaded."""
    import mlflow.sklearn

    from fairpca.tasks.trust import load_verified_model

    X, y, _ = _data()
    mlflow.sklearn.save_model(LogisticRegression().fit(X, y), str(tmp_path / "skops"))
    skops.io.dump(Pipeline([("f", FunctionTransformer(operator.add))]), tmp_path / "evil.skops")

    def other_path(spec):
        shutil.copy(tmp_path / "evil.skops", tmp_path / "other" / "evil.skops")
        spec["flavors"]["python_function"]["model_path"] = "evil.skops"
        spec["flavors"]["sklearn"]["skops_trusted_types"] = ["_operator.add"]

    cases = {
        "other": (other_path, "another file \\('evil.skops'\\)"),
        "trusting": (
            lambda spec: spec["flavors"]["sklearn"].update(skops_trusted_types=["_operator.add"]),
            r"lists skops_trusted_types \['_operator.add'\] that fairpca does not trust",
        ),
        "data": (
            lambda spec: spec["flavors"]["python_function"].update(data="sub"),
            "another file \\('sub'\\)",
        ),
        "flavor": (lambda spec: spec["flavors"].update(keras={}), r"flavor\(s\) \['keras'\]"),
        "not a mapping": (
            lambda spec: spec["flavors"].update(sklearn="x"),
            "not a readable MLmodel file",
        ),
    }
    for name, (edit, message) in cases.items():
        crafted = _edited_mlmodel(tmp_path / "skops", tmp_path / name, edit)
        with pytest.raises(UntrustedModelError, match=message):
            load_verified_model(str(crafted))
    nested = shutil.copytree(tmp_path / "skops", tmp_path / "nested")
    shutil.copytree(_pickled_model_dir(tmp_path, tmp_path / "marker"), nested / "sub")
    (nested / "sub" / "model.pkl").rename(nested / "sub" / "weights.bin")
    refused = matching(NESTED_MLMODEL, nested=["MLmodel", "sub/MLmodel"])
    with pytest.raises(UntrustedModelError, match=refused):
        load_verified_model(str(nested))
    assert not (tmp_path / "marker").exists()
    broken = shutil.copytree(tmp_path / "skops", tmp_path / "broken")
    (broken / "model.skops").write_bytes(b"not a zip file")
    with pytest.raises(UntrustedModelError, match=matching(MODEL_NOT_LOADED, shown=broken)):
        load_verified_model(str(broken))


def test_a_refusal_names_the_model_without_its_credentials(tmp_path):
    from fairpca.tasks.trust import load_verified_model

    with pytest.raises(UntrustedModelError) as error:  # nothing is served there
        load_verified_model(f"file://user:s3cret@localhost{tmp_path}/missing?token=t0ken")
    shown = str(error.value)
    assert "s3cret" not in shown and "t0ken" not in shown
    from fairpca.tasks.trust import shown_text

    said = "404 for https://h/a?X-Amz-Signature=t0ken (via https://u:s3cret@h/x)"
    assert shown_text(said) == "404 for https://h/a (via https://***@h/x)"


def _model_with_graph(tmp_path):
    """A saved audit-like pipeline (preprocessor, fair PCA, classifier) with its ONNX graph."""
    from fairpca.datasets import make_preprocessor
    from fairpca.tasks.onnx_export import save_graph

    X, y, s = _data()
    X["kind"] = np.where(X["b"] > 0, "up", "down")
    preprocess = make_preprocessor(X, min_category_count=1)
    encoded = preprocess.fit_transform(X)
    represent = FairPCA(n_components=2).fit(encoded, sensitive_features=s)
    classify = LogisticRegression().fit(represent.transform(encoded), y)
    pipeline = Pipeline([("preprocess", preprocess), ("represent", represent), ("c", classify)])
    model_dir = save_model_locally(
        pipeline, tmp_path / "graph", input_example=X.head(2), pip_requirements=[]
    )
    assert save_graph(model_dir, pipeline, X)["status"] == "exported"
    return model_dir


def test_the_onnx_flavour_is_accepted_reading_only_its_standard_graph(tmp_path):
    import onnx

    from fairpca.tasks import onnx_runtime
    from fairpca.tasks.trust import check_model_files

    model_dir = _model_with_graph(tmp_path)
    check_model_files(model_dir)  # the graph beside the skops file is accepted

    def graph_edit(name, change):
        crafted = shutil.copytree(model_dir, tmp_path / name)
        graph = onnx.load_model_from_string((crafted / "model.onnx").read_bytes())
        change(graph)
        (crafted / "model.onnx").write_bytes(graph.SerializeToString())
        return crafted

    def external(graph):
        tensor = graph.graph.initializer[0]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "/etc/passwd"

    def custom_domain(graph):
        graph.opset_import.add(domain="com.example", version=1)
        graph.graph.node.append(
            onnx.helper.make_node("ReadFile", ["label"], ["x"], domain="com.example")
        )

    refused = {
        graph_edit("external", external): re.escape(onnx_runtime.EXTERNAL_DATA),
        graph_edit("custom", custom_domain): re.escape(onnx_runtime.FOREIGN_DOMAIN),
        _edited_mlmodel(model_dir, tmp_path / "data", lambda spec: spec["flavors"]["onnx"].update(data="../x.onnx")): "reads '../x.onnx'",  # noqa: E501
        _edited_mlmodel(model_dir, tmp_path / "code", lambda spec: spec["flavors"]["onnx"].update(code="code")): "names code",  # noqa: E501
        _edited_mlmodel(model_dir, tmp_path / "keys", lambda spec: spec["flavors"]["onnx"].update(loader="x")): "not the entry fairpca writes",  # noqa: E501
    }  # fmt: skip
    garbage = shutil.copytree(model_dir, tmp_path / "garbage")
    (garbage / "model.onnx").write_bytes(b"\xff" * 64)
    refused[garbage] = re.escape(onnx_runtime.UNREADABLE)
    missing = shutil.copytree(model_dir, tmp_path / "missing")
    (missing / "model.onnx").unlink()
    refused[missing] = re.escape(onnx_runtime.NO_GRAPH)
    # the gate's one size limit, checked before the file is read (a sparse file)
    large = shutil.copytree(model_dir, tmp_path / "large")
    with (large / "model.onnx").open("r+b") as handle:
        handle.truncate(onnx_runtime.MAX_GRAPH_BYTES + 1)
    refused[large] = re.escape(onnx_runtime.TOO_LARGE)
    for crafted, message in refused.items():
        with pytest.raises(ValueError, match=message):
            check_model_files(crafted)
