"""The audited pipeline as an ONNX graph: a pure function of its inputs, which the gate can
judge and serve without running the registrant's Python objects.

:func:`pipeline_graph` converts a fitted audit pipeline (preprocess -> representation ->
classifier) with ``skl2onnx``; the project's own estimators and those whose ``skl2onnx``
converters would lose precision, or miss infrequent and missing categories, get converters
here (:func:`_register_own_converters`, :func:`_exact_converters`), all in double precision
and the standard operator sets only (``ai.onnx``, ``ai.onnx.ml``).
:func:`export_graph` converts and checks that the graph's labels equal the pipeline's on the
validation rows; :func:`write_onnx_flavour` adds the graph to a saved MLflow model as
MLflow's ``onnx`` flavour (``model.onnx``) beside the scikit-learn one.

The graph has one input per feature column, named as the column: ``tensor(string)`` of shape
``[N, 1]`` for a categorical column (its values as ``str``; a missing value is
:data:`MISSING_CATEGORY`), ``tensor(double)`` ``[N, 1]`` for a numeric one (missing: NaN);
:func:`fairpca.tasks.onnx_runtime.graph_feed` builds them from a DataFrame. The graph is
read, checked and served only by :mod:`fairpca.tasks.onnx_runtime` (the gate's rules), here
too before it is written. Its outputs are ``label`` (``int64``
``[N]``) and ``probabilities`` (``double`` ``[N, 2]``: the probabilities, or for a classifier
without them its scores).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairpca.tasks.onnx_runtime import (
    MISSING_CATEGORY,
    NO_GRAPH,
    ONNX_FILE,
    Graph,
    GraphModel,
    GraphRefused,
    graph_of,
    parse_graph,
)

ONNX_FLAVOR = "onnx"
ONNX_SHA_TAG = "fairpca.onnx_sha256"  # version tag: the SHA-256 of model.onnx
# the newest operator set versions the graph may use (skl2onnx picks the oldest that suffice)
OPSET = {"": 17, "ai.onnx.ml": 3}
LABEL_OUTPUT, SCORES_OUTPUT = "label", "probabilities"


class NotConvertibleError(ValueError):
    """The pipeline holds a step (or a setting of one) that has no exact ONNX converter."""


# ---- converters ---------------------------------------------------------------------------


class _Nodes:
    """What one converter adds to the graph: ``x`` is its operator's input, ``outputs`` the
    names of its outputs; every node and constant gets a name unique in its scope."""

    def __init__(self, scope, operator, container) -> None:
        self.scope, self.container = scope, container
        self.x = operator.inputs[0].full_name
        self.outputs = [variable.full_name for variable in operator.outputs]

    def constant(self, name: str, value) -> str:
        """An initializer holding ``value`` (double, int64 or string), by its unique name."""
        from onnx import numpy_helper

        unique = self.scope.get_unique_variable_name(name)
        self.container.initializers.append(numpy_helper.from_array(np.asarray(value), unique))
        return unique

    def node(self, op: str, *inputs: str, out: str | None = None, **attributes) -> str:
        """A node ``op`` of ``inputs`` into ``out`` (default: a new variable), whose name it
        returns; ``op_domain`` and ``op_version`` among ``attributes`` name its operator set."""
        out = out or self.scope.get_unique_variable_name(op.lower())
        name = self.scope.get_unique_operator_name(op)
        self.container.add_node(op, list(inputs), [out], name=name, **attributes)
        return out

    def encode(self, position: int, **attributes) -> str:
        """Column ``position`` of the ``[N, c]`` input, as ``[N, 1]``, through an
        ``ai.onnx.ml`` ``LabelEncoder`` of ``attributes``."""
        index = self.constant("column", np.array([position], dtype=np.int64))
        column = self.node("Gather", self.x, index, axis=1)
        return self.node("LabelEncoder", column, op_domain="ai.onnx.ml", op_version=2, **attributes)

    def labels(self, chosen: str, classes: np.ndarray) -> None:
        """``classes[chosen]`` (``chosen``: a boolean ``[N]``) into the first output."""
        table = self.constant("classes", np.asarray(classes, dtype=np.int64))
        self.node("Gather", table, self.node("Cast", chosen, to=7), out=self.outputs[0], axis=0)


def _shape_like_input(operator) -> None:
    """The output: the input's type, as many columns as the step saw at fit."""
    kind = operator.inputs[0].type.__class__
    operator.outputs[0].type = kind([None, operator.raw_operator.n_features_in_])


def _double_shape(width) -> Any:
    from skl2onnx.common.data_types import DoubleTensorType

    def shape(operator) -> None:
        operator.outputs[0].type = DoubleTensorType([None, int(width(operator.raw_operator))])

    return shape


def _classifier_shape(operator) -> None:
    from skl2onnx.common.data_types import DoubleTensorType, Int64TensorType

    operator.outputs[0].type = Int64TensorType([None])
    operator.outputs[1].type = DoubleTensorType([None, 2])


def _pooler_converter(scope, operator, container) -> None:
    """:class:`fairpca.datasets.RareCategoryPooler`: per column, a kept category (and the
    missing marker) maps to itself, every other string to the placeholder."""
    pooler, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    pooled = []
    for position, kept in enumerate(pooler.categories_):
        keys = [str(value) for value in kept]
        if MISSING_CATEGORY in keys:
            raise NotConvertibleError(
                f"a kept category equals the graph's missing marker {MISSING_CATEGORY!r}."
            )
        keys.append(MISSING_CATEGORY)
        pooled.append(nodes.encode(position, keys_strings=keys, values_strings=keys,
                                   default_string=pooler.placeholder))  # fmt: skip
    nodes.node("Concat", *pooled, out=nodes.outputs[0], axis=1)


def _one_hot_converter(scope, operator, container) -> None:
    """``OneHotEncoder`` of string columns: each value to its output column by a
    ``LabelEncoder``, then ``Equal`` against the block's column numbers. The output column
    of each category, and of an unseen value (-1: none, all zeros), is read off the encoder's
    own ``transform`` of each category and of an unseen value, so that infrequent categories
    and ``handle_unknown`` map as scikit-learn maps them."""
    encoder, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    if encoder.drop is not None or encoder.handle_unknown == "error":
        raise NotConvertibleError("a OneHotEncoder with drop or handle_unknown='error'")
    starts = np.cumsum([0, *encoder._n_features_outs])
    first = [categories[0] for categories in encoder.categories_]
    blocks = []
    for position, categories in enumerate(encoder.categories_):
        if categories.dtype.kind not in "OUS":
            raise NotConvertibleError("a OneHotEncoder of numeric columns")
        probe = np.array([first] * (len(categories) + 1), dtype=object)
        probe[:, position] = [*categories, "\x00fairpca-unseen"]
        encoded = encoder.transform(probe)
        encoded = encoded.toarray() if hasattr(encoded, "toarray") else np.asarray(encoded)
        block = encoded[:, starts[position] : starts[position + 1]]
        where = np.where(block.sum(axis=1) > 0, block.argmax(axis=1), -1).tolist()
        keys = [MISSING_CATEGORY if pd.isna(value) else str(value) for value in categories]
        if len(set(keys)) < len(keys):
            raise NotConvertibleError(
                f"a category equals the graph's missing marker {MISSING_CATEGORY!r}"
            )
        code = nodes.encode(position, keys_strings=keys, values_int64s=where[:-1],
                            default_int64=where[-1])  # fmt: skip
        numbers = nodes.constant("block", np.arange(block.shape[1], dtype=np.int64)[None, :])
        blocks.append(nodes.node("Cast", nodes.node("Equal", code, numbers), to=11))  # double
    nodes.node("Concat", *blocks, out=nodes.outputs[0], axis=1)


def _imputer_converter(scope, operator, container) -> None:
    """``SimpleImputer`` of NaN: a missing value becomes the column's fitted statistic."""
    imputer, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    if not (isinstance(imputer.missing_values, float) and np.isnan(imputer.missing_values)):
        raise NotConvertibleError("a SimpleImputer of a value other than NaN")
    if imputer.add_indicator or len(imputer.statistics_) != imputer.n_features_in_:
        raise NotConvertibleError("a SimpleImputer that adds or drops columns")
    statistics = nodes.constant("statistics", imputer.statistics_[None, :])
    nodes.node("Where", nodes.node("IsNaN", nodes.x), statistics, nodes.x, out=nodes.outputs[0])


def _scaler_converter(scope, operator, container) -> None:
    """``StandardScaler``: ``(x - mean_) / scale_``, as scikit-learn computes it."""
    scaler, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    x = nodes.x
    if scaler.with_mean:
        x = nodes.node("Sub", x, nodes.constant("mean", scaler.mean_))
    scale = scaler.scale_ if scaler.with_std else np.ones(scaler.n_features_in_)
    nodes.node("Div", x, nodes.constant("scale", scale), out=nodes.outputs[0])


def _fair_pca_converter(scope, operator, container) -> None:
    """:class:`fairpca.FairPCA`: ``(x - mean_) @ components_.T``, followed by ``tradeoff *
    (x - mean_) @ pca_components_.T`` when ``tradeoff > 0`` (its ``transform``)."""
    estimator, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    if estimator.sensitive_columns:
        raise NotConvertibleError("a FairPCA that drops sensitive columns itself")
    centred = nodes.node("Sub", nodes.x, nodes.constant("mean", estimator.mean_))
    fair = nodes.constant("components", estimator.components_.T.astype(np.float64))
    parts = [nodes.node("MatMul", centred, fair)]
    if estimator.tradeoff > 0:
        pca = nodes.constant("pca", estimator.pca_components_.T.astype(np.float64))
        tradeoff = nodes.constant("tradeoff", np.array(float(estimator.tradeoff)))
        parts.append(nodes.node("Mul", nodes.node("MatMul", centred, pca), tradeoff))
    nodes.node("Concat", *parts, out=nodes.outputs[0], axis=1)


def _binary_classes(classifier) -> np.ndarray:
    classes = np.asarray(classifier.classes_)
    if len(classes) != 2 or classes.dtype.kind not in "iub":
        raise NotConvertibleError("a classifier of other than two integer classes")
    return classes


def _decision_outputs(nodes: _Nodes, features: str, classifier, coefficients, rule: str) -> None:
    """A binary classifier's outputs from its decision ``d = features @ coefficients +
    intercept_`` (``[N, 1]``): the label ``classes_[1]`` where ``rule`` (``Greater`` or
    ``GreaterOrEqual``) holds against 0, and the scores ``[-d, d]``."""
    classes = _binary_classes(classifier)
    weights = nodes.constant("coef", np.asarray(coefficients, dtype=np.float64))
    intercept = nodes.constant("intercept", np.asarray(classifier.intercept_, dtype=np.float64))
    score = nodes.node("Add", nodes.node("MatMul", features, weights), intercept)
    flat = nodes.node("Reshape", score, nodes.constant("flat", np.array([-1], dtype=np.int64)))
    nodes.labels(nodes.node(rule, flat, nodes.constant("zero", np.array(0.0))), classes)
    nodes.node("Concat", nodes.node("Neg", score), score, out=nodes.outputs[1], axis=1)


def _svc_converter(scope, operator, container) -> None:
    """A binary RBF ``SVC`` in double precision (``skl2onnx``'s ``SVMClassifier`` computes
    in float, which moves labels near the boundary): ``d = sum_i a_i exp(-gamma |x -
    s_i|^2) + b`` and the label ``classes_[1]`` where ``d >= 0`` (libsvm's rule: class 0
    only for a positive score of its own sign); scores ``[-d, d]``."""
    svc, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    if svc.kernel != "rbf" or svc.probability is True:
        raise NotConvertibleError("an SVC other than a binary RBF one without probabilities")
    vectors = np.asarray(svc.support_vectors_, dtype=np.float64)
    # |x - s|^2 = |x|^2 + |s|^2 - 2 x.s (one product of the rows with the support vectors;
    # x @ (2 s) is exactly 2 (x @ s): a power of two scales every rounding alike)
    squares = nodes.node("ReduceSumSquare", nodes.x, axes=[1], keepdims=1)
    norms = nodes.constant("sv_norms", (vectors**2).sum(axis=1)[None, :])
    twice = nodes.node("MatMul", nodes.x, nodes.constant("sv", 2 * vectors.T))
    distance = nodes.node("Sub", nodes.node("Add", squares, norms), twice)
    gamma = nodes.constant("gamma", np.array(-float(svc._gamma)))
    kernel = nodes.node("Exp", nodes.node("Mul", distance, gamma))
    _decision_outputs(nodes, kernel, svc, svc.dual_coef_.T, "GreaterOrEqual")


def _linear_svc_converter(scope, operator, container) -> None:
    """A binary ``LinearSVC`` in double precision (``skl2onnx`` has none): ``d = x @ coef_.T
    + intercept_``, the label ``classes_[1]`` where ``d > 0`` (scikit-learn's rule); scores
    ``[-d, d]``."""
    svc = operator.raw_operator
    nodes = _Nodes(scope, operator, container)
    _decision_outputs(nodes, nodes.x, svc, svc.coef_.T, "Greater")


def _fixed_threshold_converter(scope, operator, container) -> None:
    """``FixedThresholdClassifier`` over a classifier with ``predict_proba`` (a
    ``FrozenEstimator`` is unwrapped): ``classes_[1]`` where the probability of
    ``classes_[1]`` is at least the threshold (scikit-learn's rule), the inner classifier's
    probabilities as scores."""
    from skl2onnx import get_model_alias
    from skl2onnx.common.data_types import DoubleTensorType, Int64TensorType

    wrapper, nodes = operator.raw_operator, _Nodes(scope, operator, container)
    inner = wrapper.estimator_
    inner = (
        getattr(inner, "estimator", inner) if type(inner).__name__ == "FrozenEstimator" else inner
    )
    classes = _binary_classes(wrapper)
    if wrapper.pos_label is not None or wrapper.response_method not in ("auto", "predict_proba"):
        raise NotConvertibleError("a FixedThresholdClassifier with pos_label or a score method")
    if not hasattr(inner, "predict_proba") or not isinstance(wrapper.threshold, int | float):
        raise NotConvertibleError(
            "a FixedThresholdClassifier over a classifier without probabilities"
        )
    inner_op = scope.declare_local_operator(get_model_alias(type(inner)), inner)
    inner_op.inputs = operator.inputs
    probabilities = scope.declare_local_variable("inner_proba", DoubleTensorType())
    inner_label = scope.declare_local_variable("inner_label", Int64TensorType())
    inner_op.outputs.extend([inner_label, probabilities])
    one = nodes.constant("one", np.array(1, dtype=np.int64))
    positive = nodes.node("Gather", probabilities.onnx_name, one, axis=1)
    threshold = nodes.constant("threshold", np.array(float(wrapper.threshold)))
    nodes.labels(nodes.node("GreaterOrEqual", positive, threshold), classes)
    nodes.node("Identity", probabilities.onnx_name, out=nodes.outputs[1])


def _register_own_converters() -> None:
    """Register the converters of fairpca's own estimators with ``skl2onnx`` (once)."""
    from skl2onnx import update_registered_converter
    from sklearn.model_selection import FixedThresholdClassifier
    from sklearn.svm import LinearSVC

    from fairpca import FairPCA
    from fairpca.datasets import RareCategoryPooler

    classifier = {"zipmap": [True, False, "columns"], "nocl": [True, False]}
    update_registered_converter(
        RareCategoryPooler, "FairpcaRareCategoryPooler", _shape_like_input, _pooler_converter
    )
    width = _double_shape(lambda fair: len(fair.components_) * (2 if fair.tradeoff > 0 else 1))
    update_registered_converter(FairPCA, "FairpcaFairPCA", width, _fair_pca_converter)
    update_registered_converter(
        FixedThresholdClassifier, "SklearnFixedThresholdClassifier", _classifier_shape,
        _fixed_threshold_converter, options=classifier,
    )  # fmt: skip
    # skl2onnx's LinearSVC computes in float only; this one is exact in double (binary)
    update_registered_converter(
        LinearSVC, "SklearnLinearSVC", _classifier_shape, _linear_svc_converter, options=classifier
    )


def _exact_converters() -> tuple[dict, dict]:
    """Converters (and shape calculators) used for this conversion only, in place of
    ``skl2onnx``'s: exact double-precision versions of steps whose stock converters compute
    in float or do not handle missing or infrequent categories."""
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    from sklearn.svm import SVC

    same_width = _double_shape(lambda estimator: estimator.n_features_in_)
    exact = {
        OneHotEncoder: (_one_hot_converter, _double_shape(lambda e: sum(e._n_features_outs))),
        SimpleImputer: (_imputer_converter, same_width),
        StandardScaler: (_scaler_converter, same_width),
        SVC: (_svc_converter, _classifier_shape),
    }
    converters = {step: converter for step, (converter, _) in exact.items()}
    return converters, {step: shape for step, (_, shape) in exact.items()}


# ---- conversion and check -----------------------------------------------------------------


def pipeline_graph(pipeline, X: pd.DataFrame):
    """The fitted ``pipeline`` as an ONNX ``ModelProto`` over the columns of ``X``, with the
    outputs :data:`LABEL_OUTPUT` and :data:`SCORES_OUTPUT`.

    Raises
    ------
    NotConvertibleError
        A step has no exact converter (e.g. :class:`fairpca.FairKernelPCA`).
    """
    from skl2onnx.common.data_types import DoubleTensorType, Int64TensorType

    outputs = [
        (LABEL_OUTPUT, Int64TensorType([None])),
        (SCORES_OUTPUT, DoubleTensorType([None, 2])),
    ]
    return convert(pipeline, X, outputs)


def convert(model, X: pd.DataFrame, outputs: list[tuple[str, Any]]):
    """``skl2onnx``'s conversion of ``model`` over the columns of ``X`` to ``outputs`` (name,
    type) with this module's converters; a classifier's probabilities as a tensor (not
    ZipMap's sequence of maps). One graph input per column of ``X``: string for a categorical
    column, double for a numeric one (:func:`fairpca.datasets.split_feature_kinds`), each
    ``[N, 1]``.

    Raises
    ------
    NotConvertibleError
        A step has no exact converter.
    """
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DoubleTensorType, StringTensorType
    from sklearn.base import is_classifier

    from fairpca.datasets import split_feature_kinds

    _register_own_converters()
    converters, shapes = _exact_converters()
    categorical, _ = split_feature_kinds(X)
    inputs = [(str(c), (StringTensorType if c in categorical else DoubleTensorType)([None, 1]))
              for c in X.columns]  # fmt: skip
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    try:
        return convert_sklearn(
            model, initial_types=inputs, final_types=outputs, target_opset=OPSET,
            options={id(final): {"zipmap": False}} if is_classifier(final) else None,
            custom_conversion_functions=converters, custom_shape_calculators=shapes,
        )  # fmt: skip
    # (every classifier converter of skl2onnx and of this module takes the zipmap option)
    except (KeyError, RuntimeError, NotImplementedError) as error:  # e.g. MissingShapeCalculator
        raise NotConvertibleError(f"{type(error).__name__}: {error}") from error


# Rows per run of the graph: an RBF SVM's kernel block is rows x support vectors doubles
# (5,000 x 3,000: 120 MB), a few of them alive at once.
GRAPH_BLOCK_ROWS = 5_000


def graph_labels(graph: Graph, X: pd.DataFrame) -> np.ndarray:
    """The labels of the checked ``graph`` for the rows of ``X``, served as the gate serves
    it (:class:`fairpca.tasks.onnx_runtime.GraphModel`: one row per run, one thread as in the
    gate's child), by blocks of :data:`GRAPH_BLOCK_ROWS`.

    Row by row, not one run per block: a kernel or a network sums in another order over a
    block than over one row, and a decision within rounding of its threshold can then get
    another label than the gate gives it.
    """
    model = GraphModel(graph, threads=1)
    blocks = [
        model.predict(X.iloc[start : start + GRAPH_BLOCK_ROWS])
        for start in range(0, len(X), GRAPH_BLOCK_ROWS)
    ]
    return np.concatenate(blocks).ravel() if blocks else np.zeros(0, dtype=np.int64)


def graph_opset(data: bytes) -> dict[str, int]:
    """The operator set versions the graph ``data`` imports (``ai.onnx`` for the default
    domain)."""
    return {o.domain or "ai.onnx": int(o.version) for o in parse_graph(data).opset_import}


@dataclass(frozen=True)
class GraphExport:
    """The outcome of :func:`export_graph`: the graph's bytes (None: no graph) and what the
    audit records of it (:meth:`record`)."""

    data: bytes | None
    status: str  # "exported", "no_converter" or "differs"
    reason: str | None = None
    rows_checked: int = 0
    checked_on: str = "validation"

    def record(self) -> dict[str, Any]:
        """The audit record's ``onnx`` field."""
        data = self.data
        return {
            "status": self.status,
            "sha256": None if data is None else hashlib.sha256(data).hexdigest(),
            "opset": None if data is None else graph_opset(data),
            "reason": self.reason,
            "rows_checked": self.rows_checked,
            "checked_on": self.checked_on,
        }


def export_graph(
    pipeline, X_validation: pd.DataFrame, labels: np.ndarray | None = None, *,
    checked_on: str = "validation",
) -> GraphExport:  # fmt: skip
    """Convert ``pipeline`` and check the graph on the validation rows: its labels must
    equal the pipeline's (``labels``, else ``pipeline.predict``) on every row. A pipeline
    without a converter, or whose graph the gate would refuse
    (:func:`fairpca.tasks.onnx_runtime.graph_of`), or whose graph disagrees, gets no graph
    (:class:`GraphExport` says why: :data:`~fairpca.tasks.onnx_runtime.NO_GRAPH` and the
    cause, or the number of rows that differ); ``checked_on`` names the rows."""
    try:
        graph = graph_of(pipeline_graph(pipeline, X_validation).SerializeToString())
    except NotConvertibleError as error:
        why = f"{NO_GRAPH} (no exact converter: {error})"
        return GraphExport(None, "no_converter", why, checked_on=checked_on)
    except GraphRefused as error:
        return GraphExport(None, "no_converter", f"{NO_GRAPH} ({error})", checked_on=checked_on)
    expected = np.asarray(pipeline.predict(X_validation) if labels is None else labels)
    if differ := int(np.count_nonzero(graph_labels(graph, X_validation) != expected)):
        why = (
            f"{NO_GRAPH} (the graph's labels differ from the pipeline's on {differ} of "
            f"{len(expected)} validation rows)"
        )
        return GraphExport(None, "differs", why, len(expected), checked_on)
    return GraphExport(graph.data, "exported", None, len(expected), checked_on)


def write_onnx_flavour(model_dir: Path, data: bytes) -> None:
    """Write ``data`` as ``model_dir/model.onnx`` and add MLflow's ``onnx`` flavour to the
    folder's ``MLmodel`` (the keys ``mlflow.onnx.save_model`` writes; no external data);
    the ``python_function`` loader stays ``mlflow.sklearn``."""
    import onnx
    from mlflow.models import Model
    from mlflow.onnx import ONNX_EXECUTION_PROVIDERS

    model_dir = Path(model_dir)
    (model_dir / ONNX_FILE).write_bytes(data)
    spec = Model.load(str(model_dir / "MLmodel"))
    spec.add_flavor(
        ONNX_FLAVOR, onnx_version=onnx.__version__, data=ONNX_FILE,
        providers=list(ONNX_EXECUTION_PROVIDERS), onnx_session_options=None, code=None,
    )  # fmt: skip
    spec.model_size_bytes = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
    spec.save(str(model_dir / "MLmodel"))


def save_graph(
    model_dir: Path, pipeline, X: pd.DataFrame, labels=None, *, checked_on: str = "validation"
) -> dict[str, Any]:
    """Export ``pipeline``'s graph, check it on the rows ``X`` (``labels``: the pipeline's
    predictions of them, if already made) and, when it agrees on every row, add it to the
    saved MLflow model ``model_dir`` (:func:`write_onnx_flavour`). Returns the audit
    record's ``onnx`` field (:meth:`GraphExport.record`)."""
    export = export_graph(pipeline, X, labels, checked_on=checked_on)
    if export.data is not None:
        write_onnx_flavour(model_dir, export.data)
    return export.record()
