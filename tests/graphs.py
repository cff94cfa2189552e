"""Small ONNX graphs for the tests of the gate's graph checks and evaluation child: a
one-column identity, a graph that never ends (a Loop of 2**40 steps), one that asks for
64 GiB, and an MLflow model folder holding one as its ``onnx`` flavour."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def write(folder: Path, model: onnx.ModelProto | bytes) -> Path:
    """An MLflow model folder holding ``model`` as its ``onnx`` flavour."""
    folder.mkdir(parents=True, exist_ok=True)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    (folder / "model.onnx").write_bytes(data)
    (folder / "MLmodel").write_text("flavors:\n  onnx:\n    data: model.onnx\n")
    return folder


def one_output(nodes, *, initializers=(), domain="", opset=17, **options) -> onnx.ModelProto:
    """``label = f(x1)`` (float [N, 1]) from ``nodes``, which end in ``label``."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x1", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("label", TensorProto.FLOAT, [None, 1])],
        list(initializers),
    )  # fmt: skip
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=imports, **options)


def identity() -> onnx.ModelProto:
    return one_output([helper.make_node("Identity", ["x1"], ["label"])])


def slow() -> onnx.ModelProto:
    """A graph that counts to 2**40 (a Loop): it runs until it is stopped."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["acc", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )  # fmt: skip
    constants = [
        helper.make_tensor("trips", TensorProto.INT64, [], [2**40]),
        helper.make_tensor("go", TensorProto.BOOL, [], [True]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    nodes = [
        helper.make_node("Loop", ["trips", "go", "zero"], ["count"], body=body),
        helper.make_node("Add", ["x1", "count"], ["label"]),
    ]
    return one_output(nodes, initializers=constants)


def allocation_bomb() -> onnx.ModelProto:
    """A graph that asks for 2**34 floats (64 GiB) and sums them."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [2**34])
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["huge"], value=value),
        helper.make_node("ReduceSum", ["huge"], ["total"], keepdims=0),
        helper.make_node("Add", ["x1", "total"], ["label"]),
    ]
    return one_output(nodes, initializers=[shape])


def batch_reader() -> onnx.ModelProto:
    """A graph that answers by the batch it is given, not by the row: 1.0 for every row of a
    batch of more than one row, else 0.0 (``Shape`` reads the batch size)."""
    nodes = [
        helper.make_node("Shape", ["x1"], ["shape"]),
        helper.make_node("Gather", ["shape", "axis0"], ["n"], axis=0),
        helper.make_node("Greater", ["n", "one"], ["many"]),
        helper.make_node("Cast", ["many"], ["flag"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x1", "zero"], ["zeros"]),
        helper.make_node("Add", ["zeros", "flag"], ["label"]),
    ]
    constants = [helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
                 helper.make_tensor("one", TensorProto.INT64, [1], [1]),
                 helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])]  # fmt: skip
    return one_output(nodes, initializers=constants)


def random_draw(op_type: str = "RandomUniformLike") -> onnx.ModelProto:
    """A graph whose label is a random draw (``x1 < U(0, 1)``)."""
    nodes = [helper.make_node(op_type, ["x1"], ["u"]),
             helper.make_node("Less", ["x1", "u"], ["below"]),
             helper.make_node("Cast", ["below"], ["label"], to=TensorProto.FLOAT)]  # fmt: skip
    return one_output(nodes)
