"""A registrant that knows nothing of fairpca: scikit-learn and MLflow only.

Makes a synthetic credit table (features ``x1``, ``x2``, sensitive ``group`` in {0, 1}, label
``approved``; the label does not depend on the group), and registers two classifiers:

* ``fair``: logistic regression on ``x1``, ``x2`` (the group is not an input);
* ``biased``: logistic regression on ``x1``, ``x2``, ``group`` trained on labels in which
  group 1 is rarely approved (historical bias): its approval rates differ by group.

A skops model is logged with its ONNX graph (``skl2onnx``: one input per column) as MLflow's
``onnx`` flavour beside the scikit-learn one, in the same model folder: what the gate judges.

    python tests/e2e/gate_registrant.py reference OUT.csv        # the reference table
    python tests/e2e/gate_registrant.py register NAME fair|biased [skops]  # prints the version
    python tests/e2e/gate_registrant.py alias NAME ALIAS VERSION

Reads ``MLFLOW_TRACKING_URI``. Deterministic (seeded).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

FEATURES = ["x1", "x2"]


def make_data(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    group = rng.integers(0, 2, size=n)
    approved = (x1 + 0.5 * x2 + 0.5 * rng.normal(size=n) > 0).astype(int)
    return pd.DataFrame({"x1": x1, "x2": x2, "group": group, "approved": approved})


def fit(kind: str, seed: int = 1):
    from sklearn.linear_model import LogisticRegression

    train = make_data(seed=seed)
    if kind == "fair":
        return LogisticRegression().fit(train[FEATURES], train["approved"]), FEATURES
    # historical bias: group 1 approved only when x1 is far above the threshold
    labels = np.where(train["group"] == 1, (train["x1"] > 1.2).astype(int), train["approved"])
    columns = [*FEATURES, "group"]
    return LogisticRegression(C=10.0).fit(train[columns], labels), columns


def register(
    name: str,
    kind: str,
    serialization: str = "cloudpickle",
    tags: dict | None = None,
    graph: bool | None = None,
) -> str:
    """Log and register a ``fair`` or ``biased`` classifier (``serialization``: MLflow's
    ``cloudpickle`` default or ``skops``), the version created with ``tags``; with ``graph``
    (default: for skops) its ONNX graph is logged beside it."""
    import mlflow

    model, columns = fit(kind)
    graph = serialization == "skops" if graph is None else graph
    mlflow.set_experiment("registrant")
    with mlflow.start_run(run_name=f"{kind}-model") as run:
        if not graph:
            info = mlflow.sklearn.log_model(model, name="model", **_logged(columns, serialization))
            return str(mlflow.register_model(info.model_uri, name, tags=tags).version)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "model"
            mlflow.sklearn.save_model(model, str(folder), **_logged(columns, serialization))
            add_graph(folder, model, columns)
            mlflow.log_artifacts(str(folder), "model")
        return register_folder(name, f"{run.info.artifact_uri}/model", run.info.run_id, tags)


def _logged(columns: list[str], serialization: str) -> dict:
    import sklearn

    return {
        "input_example": make_data(n=5, seed=9)[columns],
        "serialization_format": serialization,
        # given, not inferred: inference imports the model in a subprocess (seconds)
        "pip_requirements": [f"scikit-learn=={sklearn.__version__}"],
    }


def add_graph(folder: Path, model, columns: list[str]) -> None:
    """Write ``model.onnx`` (one double input per column, the label first) into the MLflow
    model ``folder`` and name it in its MLmodel as the ``onnx`` flavour."""
    import onnx
    from mlflow.models import Model
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DoubleTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline

    select = ColumnTransformer([("columns", "passthrough", columns)])
    pipeline = Pipeline([("select", select.fit(make_data(n=5)[columns])), ("model", model)])
    types = [(column, DoubleTensorType([None, 1])) for column in columns]
    classifier = model[-1] if isinstance(model, Pipeline) else model
    graph = to_onnx(pipeline, initial_types=types, options={id(classifier): {"zipmap": False}})
    (folder / "model.onnx").write_bytes(graph.SerializeToString())
    spec = Model.load(str(folder / "MLmodel"))
    spec.add_flavor("onnx", onnx_version=onnx.__version__, data="model.onnx", code=None)
    spec.save(str(folder / "MLmodel"))


def register_folder(name: str, source: str, run_id: str, tags: dict | None = None) -> str:
    """Register the model folder at the artifact URI ``source`` as a new version."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    try:
        client.create_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    return str(client.create_model_version(name, source, run_id=run_id, tags=tags).version)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "reference":
        make_data(seed=2).to_csv(args[0], index=False)
    elif command == "register":
        print(register(*args))
    elif command == "alias":
        from mlflow import MlflowClient

        MlflowClient().set_registered_model_alias(*args)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
