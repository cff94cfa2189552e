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


def _shape_like_input(operator) -> None:
    """The output: the input's type, as many columns as the step saw at fit."""
    kind = operator.inputs[0].type.__class__
    operator.outputs[0].type = kind([None, operator.raw_operator.n_features_in_])


def _double_shape(width) -> Any:
    from skl2onnx.common.data_types import DoubleTensorType

    def shape(operator) -> None:
        operator.outputs[0].type = DoubleTensorType([None, width(operator.raw_operator)])

    return shape


def _constant(scope, container, name: str, value: np.ndarray) -> str:
    """An initializer holding ``value`` (double, int64 or string), by its unique name."""
    from onnx import numpy_helper

    unique = scope.get_unique_variable_name(name)
    container.initializers.append(numpy_helper.from_array(np.asarray(value), unique))
    return unique


def _column(scope, container, source: str, position: int) -> str:
    """Column ``position`` of the ``[N, c]`` tensor ``source``, as ``[N, 1]``."""
    index = _constant(scope, container, "column", np.array([position], dtype=np.int64))
    out = scope.get_unique_variable_name("column")
    container.add_node(
        "Gather", [source, index], [out], axis=1, name=scope.get_unique_operator_name("Gather")
    )
    return out


def _node(scope, container, op: str, inputs: list[str], **attributes) -> str:
    out = scope.get_unique_variable_name(op.lower())
    domain = attributes.pop("op_domain", "")
    version = attributes.pop("op_version", None)
    container.add_node(
        op, inputs, [out], name=scope.get_unique_operator_name(op), op_domain=domain,
        op_version=version, **attributes,
    )  # fmt: skip
    return out


def _text(value: Any) -> str:
    """A fitted category as the graph holds it (a missing one: :data:`MISSING_CATEGORY`)."""
    return MISSING_CATEGORY if pd.isna(value) else str(value)


def _pooler_converter(scope, operator, container) -> None:
    """:class:`fairpca.datasets.RareCategoryPooler`: per column, a kept category (and the
    missing marker) maps to itself, every other string to the placeholder."""
    pooler = operator.raw_operator
    source, pooled = operator.inputs[0].full_name, []
    for position, kept in enumerate(pooler.categories_):
        keys = [str(value) for value in kept]
        if MISSING_CATEGORY in keys:
            raise NotConvertibleError(
                f"a kept category equals the graph's missing marker {MISSING_CATEGORY!r}."
            )
        keys.append(MISSING_CATEGORY)
        pooled.append(
            _node(
                scope,
                container,
                "LabelEncoder",
                [_column(scope, container, source, position)],
                op_domain="ai.onnx.ml",
                op_version=2,
                keys_strings=keys,
                values_strings=keys,
                default_string=pooler.placeholder,
            )
        )
    container.add_node("Concat", pooled, [operator.outputs[0].full_name], axis=1,
                       name=scope.get_unique_operator_name("Concat"))  # fmt: skip


def _one_hot_columns(encoder) -> list[tuple[list[str], list[int], int, int]]:
    """Per input column of a fitted ``OneHotEncoder``: its categories (as the graph holds
    them), the output column of each within the column's block, the output column of an
    unseen value (-1: none, all zeros) and the block's width; read off the encoder's own
    ``transform`` of each category and of an unseen value, so that infrequent categories
    and ``handle_unknown`` map as scikit-learn maps them."""
    if encoder.drop is not None or encoder.handle_unknown == "error":
        raise NotConvertibleError("a OneHotEncoder with drop or handle_unknown='error'")
    widths = list(encoder._n_features_outs)
    starts = np.cumsum([0, *widths])
    first = [categories[0] for categories in encoder.categories_]
    unseen = "\x00fairpca-unseen"
    columns = []
    for position, categories in enumerate(encoder.categories_):
        if categories.dtype.kind not in "OUS":
            raise NotConvertibleError("a OneHotEncoder of numeric columns")
        probe = np.array([first] * (len(categories) + 1), dtype=object)
        probe[:, position] = [*categories, unseen]
        block = _dense(encoder.transform(probe))[:, starts[position] : starts[position + 1]]
        hits = block.sum(axis=1)
        where = np.where(hits > 0, block.argmax(axis=1), -1).astype(int)
        keys = [_text(value) for value in categories]
        if len(set(keys)) < len(keys):
            raise NotConvertibleError(
                f"a category equals the graph's missing marker {MISSING_CATEGORY!r}"
            )
        columns.append((keys, list(where[:-1]), int(where[-1]), widths[position]))
    return columns


def _dense(matrix) -> np.ndarray:
    return np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix, dtype=float)


def _one_hot_converter(scope, operator, container) -> None:
    """``OneHotEncoder`` of string columns: each value to its output column by a
    ``LabelEncoder`` (unseen values as scikit-learn's ``handle_unknown`` maps them), then
    ``Equal`` against the block's column numbers."""
    encoder = operator.raw_operator
    source, blocks = operator.inputs[0].full_name, []
    for position, (keys, where, unknown, width) in enumerate(_one_hot_columns(encoder)):
        column = _column(scope, container, source, position)
        code = _node(
            scope, container, "LabelEncoder", [column], op_domain="ai.onnx.ml", op_version=2,
            keys_strings=keys, values_int64s=[int(w) for w in where], default_int64=unknown,
        )  # fmt: skip
        numbers = _constant(scope, container, "block", np.arange(width, dtype=np.int64)[None, :])
        hit = _node(scope, container, "Equal", [code, numbers])
        blocks.append(_node(scope, container, "Cast", [hit], to=11))  # 11: double
    container.add_node("Concat", blocks, [operator.outputs[0].full_name], axis=1,
                       name=scope.get_unique_operator_name("Concat"))  # fmt: skip


def _imputer_converter(scope, operator, container) -> None:
    """``SimpleImputer`` of NaN: a missing value becomes the column's fitted statistic."""
    imputer = operator.raw_operator
    if not (isinstance(imputer.missing_values, float) and np.isnan(imputer.missing_values)):
        raise NotConvertibleError("a SimpleImputer of a value other than NaN")
    if imputer.add_indicator or len(imputer.statistics_) != imputer.n_features_in_:
        raise NotConvertibleError("a SimpleImputer that adds or drops columns")
    x = operator.inputs[0].full_name
    statistics = _constant(scope, container, "statistics", imputer.statistics_[None, :])
    missing = _node(scope, container, "IsNaN", [x])
    container.add_node("Where", [missing, statistics, x], [operator.outputs[0].full_name],
                       name=scope.get_unique_operator_name("Where"))  # fmt: skip


def _scaler_converter(scope, operator, container) -> None:
    """``StandardScaler``: ``(x - mean_) / scale_``, as scikit-learn computes it."""
    scaler = operator.raw_operator
    x = operator.inputs[0].full_name
    if scaler.with_mean:
        x = _node(scope, container, "Sub", [x, _constant(scope, container, "mean", scaler.mean_)])
    scale = scaler.scale_ if scaler.with_std else np.ones(scaler.n_features_in_)
    container.add_node(
        "Div",
        [x, _constant(scope, container, "scale", scale)],
        [operator.outputs[0].full_name],
        name=scope.get_unique_operator_name("Div"),
    )


def _fair_pca_width(estimator) -> int:
    k = estimator.components_.shape[0]
    return 2 * k if estimator.tradeoff > 0 else k


def _fair_pca_converter(scope, operator, container) -> None:
    """:class:`fairpca.FairPCA`: ``(x - mean_) @ components_.T``, followed by ``tradeoff *
    (x - mean_) @ pca_components_.T`` when ``tradeoff > 0`` (its ``transform``)."""
    estimator = operator.raw_operator
    if estimator.sensitive_columns:
        raise NotConvertibleError("a FairPCA that drops sensitive columns itself")
    x = operator.inputs[0].full_name
    centred = _node(
        scope, container, "Sub", [x, _constant(scope, container, "mean", estimator.mean_)]
    )
    fair = _constant(scope, container, "components", estimator.components_.T.astype(np.float64))
    if estimator.tradeoff <= 0:
        container.add_node("MatMul", [centred, fair], [operator.outputs[0].full_name],
                           name=scope.get_unique_operator_name("MatMul"))  # fmt: skip
        return
    pca = _constant(scope, container, "pca", estimator.pca_components_.T.astype(np.float64))
    tradeoff = _constant(scope, container, "tradeoff", np.array(float(estimator.tradeoff)))
    appended = _node(
        scope, container, "Mul", [_node(scope, container, "MatMul", [centred, pca]), tradeoff]
    )
    container.add_node("Concat", [_node(scope, container, "MatMul", [centred, fair]), appended],
                       [operator.outputs[0].full_name], axis=1,
                       name=scope.get_unique_operator_name("Concat"))  # fmt: skip


def _labels_from(scope, container, chosen: str, classes: np.ndarray, label: str) -> None:
    """``classes[chosen]`` (``chosen``: a boolean ``[N]``) into the output ``label``."""
    index = _node(scope, container, "Cast", [chosen], to=7)  # 7: int64
    table = _constant(scope, container, "classes", np.asarray(classes, dtype=np.int64))
    container.add_node("Gather", [table, index], [label], axis=0,
                       name=scope.get_unique_operator_name("Gather"))  # fmt: skip


def _binary_classes(classifier) -> np.ndarray:
    classes = np.asarray(classifier.classes_)
    if len(classes) != 2 or classes.dtype.kind not in "iub":
        raise NotConvertibleError("a classifier of other than two integer classes")
    return classes


def _svc_converter(scope, operator, container) -> None:
    """A binary RBF ``SVC`` in double precision (``skl2onnx``'s ``SVMClassifier`` computes
    in float, which moves labels near the boundary): ``d = sum_i a_i exp(-gamma |x -
    s_i|^2) + b`` and the label ``classes_[1]`` where ``d >= 0`` (libsvm's rule: class 0
    only for a positive score of its own sign); scores ``[-d, d]``."""
    svc = operator.raw_operator
    classes = _binary_classes(svc)
    if svc.kernel != "rbf" or svc.probability is True:
        raise NotConvertibleError("an SVC other than a binary RBF one without probabilities")
    x = operator.inputs[0].full_name
    vectors = np.asarray(svc.support_vectors_, dtype=np.float64)
    # |x - s|^2 = |x|^2 + |s|^2 - 2 x.s (one product of the rows with the support vectors)
    squares = _node(scope, container, "ReduceSumSquare", [x], axes=[1], keepdims=1)
    cross = _node(scope, container, "MatMul", [x, _constant(scope, container, "sv", vectors.T)])
    twice = _node(
        scope, container, "Mul", [cross, _constant(scope, container, "two", np.array(2.0))]
    )
    norms = _constant(scope, container, "sv_norms", (vectors**2).sum(axis=1)[None, :])
    distance = _node(
        scope, container, "Sub", [_node(scope, container, "Add", [squares, norms]), twice]
    )
    gamma = _constant(scope, container, "gamma", np.array(-float(svc._gamma)))
    kernel = _node(scope, container, "Exp", [_node(scope, container, "Mul", [distance, gamma])])
    coefficients = _constant(scope, container, "dual", svc.dual_coef_.T.astype(np.float64))
    score = _node(scope, container, "Add", [
        _node(scope, container, "MatMul", [kernel, coefficients]),
        _constant(scope, container, "intercept", svc.intercept_.astype(np.float64)),
    ])  # fmt: skip
    _binary_outputs(scope, operator, container, score, classes, "GreaterOrEqual")


def _binary_outputs(scope, operator, container, score: str, classes, rule: str) -> None:
    """A binary classifier's outputs from its ``[N, 1]`` decision ``score``: the label
    ``classes[1]`` where ``rule`` (``Greater`` or ``GreaterOrEqual``) holds against 0, and the
    scores ``[-d, d]``."""
    flat = _node(
        scope,
        container,
        "Reshape",
        [score, _constant(scope, container, "flat", np.array([-1], dtype=np.int64))],
    )
    zero = _constant(scope, container, "zero", np.array(0.0))
    _labels_from(
        scope, container, _node(scope, container, rule, [flat, zero]), classes,
        operator.outputs[0].full_name,
    )  # fmt: skip
    negative = _node(scope, container, "Neg", [score])
    container.add_node("Concat", [negative, score], [operator.outputs[1].full_name], axis=1,
                       name=scope.get_unique_operator_name("Concat"))  # fmt: skip


def _linear_svc_converter(scope, operator, container) -> None:
    """A binary ``LinearSVC`` in double precision (``skl2onnx`` has none): ``d = x @ coef_.T
    + intercept_``, the label ``classes_[1]`` where ``d > 0`` (scikit-learn's rule); scores
    ``[-d, d]``."""
    svc = operator.raw_operator
    classes = _binary_classes(svc)
    x = operator.inputs[0].full_name
    weights = _constant(scope, container, "coef", svc.coef_.T.astype(np.float64))
    intercept = _constant(
        scope, container, "intercept", np.asarray(svc.intercept_, dtype=np.float64)
    )
    score = _node(
        scope, container, "Add", [_node(scope, container, "MatMul", [x, weights]), intercept]
    )
    _binary_outputs(scope, operator, container, score, classes, "Greater")


def _fixed_threshold_converter(scope, operator, container) -> None:
    """``FixedThresholdClassifier`` over a classifier with ``predict_proba`` (a
    ``FrozenEstimator`` is unwrapped): ``classes_[1]`` where the probability of
    ``classes_[1]`` is at least the threshold (scikit-learn's rule), the inner classifier's
    probabilities as scores."""
    from skl2onnx._supported_operators import sklearn_operator_name_map
    from skl2onnx.common.data_types import DoubleTensorType, Int64TensorType

    wrapper = operator.raw_operator
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
    inner_op = scope.declare_local_operator(sklearn_operator_name_map[type(inner)], inner)
    inner_op.inputs = operator.inputs
    inner_label = scope.declare_local_variable("inner_label", Int64TensorType())
    probabilities = scope.declare_local_variable("inner_proba", DoubleTensorType())
    inner_op.outputs.extend([inner_label, probabilities])
    positive = _node(
        scope,
        container,
        "Gather",
        [probabilities.onnx_name, _constant(scope, container, "one", np.array(1, dtype=np.int64))],
        axis=1,
    )
    threshold = _constant(scope, container, "threshold", np.array(float(wrapper.threshold)))
    chosen = _node(scope, container, "GreaterOrEqual", [positive, threshold])
    _labels_from(scope, container, chosen, classes, operator.outputs[0].full_name)
    container.add_node("Identity", [probabilities.onnx_name], [operator.outputs[1].full_name],
                       name=scope.get_unique_operator_name("Identity"))  # fmt: skip


def _classifier_shape(operator) -> None:
    from skl2onnx.common.data_types import DoubleTensorType, Int64TensorType

    operator.outputs[0].type = Int64TensorType([None])
    operator.outputs[1].type = DoubleTensorType([None, 2])


def _register_own_converters() -> None:
    """Register the converters of fairpca's own estimators with ``skl2onnx`` (once)."""
    from skl2onnx import update_registered_converter
    from sklearn.model_selection import FixedThresholdClassifier
    from sklearn.svm import LinearSVC

    from fairpca import FairPCA
    from fairpca.datasets import RareCategoryPooler

    classifier_options = {"zipmap": [True, False, "columns"], "nocl": [True, False]}
    update_registered_converter(
        RareCategoryPooler, "FairpcaRareCategoryPooler", _shape_like_input, _pooler_converter
    )
    update_registered_converter(
        FairPCA, "FairpcaFairPCA", _double_shape(_fair_pca_width), _fair_pca_converter
    )
    update_registered_converter(
        FixedThresholdClassifier, "SklearnFixedThresholdClassifier", _classifier_shape,
        _fixed_threshold_converter, options=classifier_options,
    )  # fmt: skip
    # skl2onnx's LinearSVC computes in float only; this one is exact in double (binary)
    update_registered_converter(
        LinearSVC, "SklearnLinearSVC", _classifier_shape, _linear_svc_converter,
        options=classifier_options,
    )  # fmt: skip


def _exact_converters() -> tuple[dict, dict]:
    """Converters (and shape calculators) used for this conversion only, in place of
    ``skl2onnx``'s: exact double-precision versions of steps whose stock converters compute
    in float or do not handle missing or infrequent categories."""
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    from sklearn.svm import SVC

    def one_hot_width(encoder) -> int:
        return int(sum(encoder._n_features_outs))

    def same_width(estimator) -> int:
        return int(estimator.n_features_in_)

    converters = {
        OneHotEncoder: _one_hot_converter,
        SimpleImputer: _imputer_converter,
        StandardScaler: _scaler_converter,
        SVC: _svc_converter,
    }
    shapes = {
        OneHotEncoder: _double_shape(one_hot_width),
        SimpleImputer: _double_shape(same_width),
        StandardScaler: _double_shape(same_width),
        SVC: _classifier_shape,
    }
    return converters, shapes


# ---- conversion and check -----------------------------------------------------------------


def input_types(X: pd.DataFrame) -> list[tuple[str, Any]]:
    """One graph input per column of ``X``: string for a categorical column, double for a
    numeric one (:func:`fairpca.datasets.split_feature_kinds`), each ``[N, 1]``."""
    from skl2onnx.common.data_types import DoubleTensorType, StringTensorType

    from fairpca.datasets import split_feature_kinds

    categorical, _ = split_feature_kinds(X)
    return [
        (str(c), (StringTensorType if c in categorical else DoubleTensorType)([None, 1]))
        for c in X.columns
    ]


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
    type) with this module's converters; a classifier's probabilities as a tensor.

    Raises
    ------
    NotConvertibleError
        A step has no exact converter.
    """
    from skl2onnx import convert_sklearn
    from skl2onnx.common.exceptions import MissingShapeCalculator

    _register_own_converters()
    converters, shapes = _exact_converters()
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    arguments = {
        "initial_types": input_types(X), "target_opset": OPSET, "final_types": outputs,
        "custom_conversion_functions": converters, "custom_shape_calculators": shapes,
    }  # fmt: skip
    try:
        try:  # probabilities as a tensor (not ZipMap's sequence of maps), where it applies
            return convert_sklearn(model, options={id(final): {"zipmap": False}}, **arguments)
        except NameError as error:  # skl2onnx's "Option 'zipmap' not in [...]"
            if "zipmap" not in str(error):
                raise
            return convert_sklearn(model, **arguments)
    except NotConvertibleError:
        raise
    except (KeyError, MissingShapeCalculator, RuntimeError, NotImplementedError) as error:
        raise NotConvertibleError(f"{type(error).__name__}: {error}") from error


# Rows per run of the graph: an RBF SVM's kernel block is rows x support vectors doubles
# (5,000 x 3,000: 120 MB), a few of them alive at once.
GRAPH_BLOCK_ROWS = 5_000


def graph_labels(graph: Graph, X: pd.DataFrame) -> np.ndarray:
    """The labels of the checked ``graph`` for the rows of ``X``, served as the gate serves
    it (:class:`fairpca.tasks.onnx_runtime.GraphModel`, one thread as in the gate's child),
    by blocks of :data:`GRAPH_BLOCK_ROWS`."""
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

    @property
    def sha256(self) -> str | None:
        return None if self.data is None else hashlib.sha256(self.data).hexdigest()

    def record(self) -> dict[str, Any]:
        """The audit record's ``onnx`` field."""
        return {
            "status": self.status,
            "sha256": self.sha256,
            "opset": graph_opset(self.data) if self.data is not None else None,
            "reason": self.reason,
            "rows_checked": self.rows_checked,
            "checked_on": self.checked_on,
        }


def export_graph(pipeline, X_validation: pd.DataFrame, labels: np.ndarray | None = None):
    """Convert ``pipeline`` and check the graph on the validation rows: its labels must
    equal the pipeline's (``labels``, else ``pipeline.predict``) on every row. A pipeline
    without a converter, or whose graph the gate would refuse
    (:func:`fairpca.tasks.onnx_runtime.graph_of`), or whose graph disagrees, gets no graph
    (:class:`GraphExport` says why: :data:`~fairpca.tasks.onnx_runtime.NO_GRAPH` and the
    cause)."""
    try:
        graph = graph_of(pipeline_graph(pipeline, X_validation).SerializeToString())
    except NotConvertibleError as error:
        return GraphExport(None, "no_converter", f"{NO_GRAPH} (no exact converter: {error})")
    except GraphRefused as error:
        return GraphExport(None, "no_converter", f"{NO_GRAPH} ({error})")
    labels = pipeline.predict(X_validation) if labels is None else labels
    return checked_graph(graph, X_validation, labels)


def checked_graph(graph: Graph, X: pd.DataFrame, labels: np.ndarray) -> GraphExport:
    """``graph``'s bytes if its labels of ``X`` equal ``labels`` on every row, else no graph
    (status ``differs``, with the number of rows that differ)."""
    predicted = graph_labels(graph, X)
    expected = np.asarray(labels)
    differ = (
        int(np.count_nonzero(predicted != expected))
        if len(predicted) == len(expected)
        else len(expected)
    )
    if differ:
        return GraphExport(
            None, "differs",
            f"{NO_GRAPH} (the graph's labels differ from the pipeline's on {differ} of "
            f"{len(expected)} validation rows)", len(expected),
        )  # fmt: skip
    return GraphExport(graph.data, "exported", None, len(expected))


def write_onnx_flavour(model_dir: Path, data: bytes) -> str:
    """Write ``data`` as ``model_dir/model.onnx`` and add MLflow's ``onnx`` flavour to the
    folder's ``MLmodel`` (the keys ``mlflow.onnx.save_model`` writes; no external data);
    the ``python_function`` loader stays ``mlflow.sklearn``. Returns the graph's SHA-256."""
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
    return hashlib.sha256(data).hexdigest()


def save_graph(
    model_dir: Path, pipeline, X: pd.DataFrame, labels=None, *, checked_on: str = "validation"
) -> dict[str, Any]:
    """Export ``pipeline``'s graph, check it on the rows ``X`` (``labels``: the pipeline's
    predictions of them, if already made) and, when it agrees on every row, add it to the
    saved MLflow model ``model_dir`` (:func:`write_onnx_flavour`). Returns the audit
    record's ``onnx`` field (:meth:`GraphExport.record`)."""
    import dataclasses

    export = dataclasses.replace(export_graph(pipeline, X, labels), checked_on=checked_on)
    if export.data is not None:
        write_onnx_flavour(model_dir, export.data)
    return export.record()
