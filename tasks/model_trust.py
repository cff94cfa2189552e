"""Which types a fairpca model file may hold: one rule for saving, loading and relogging.

A fitted pipeline (preprocess -> representation -> classifier) is saved with skops, which
refuses to rebuild any type outside its own defaults unless told to trust it. The types
fairpca tells it to trust are the fixed :data:`TRUSTED_TYPES`, never read from the model (a
crafted ``MLmodel`` file could list anything):

- saving (:func:`types_to_trust`): a pipeline holding any other type is refused, so nothing
  is saved that the project would refuse to load;
- loading and relogging (:func:`skops_file_types`): a file asking for any other type is
  refused before anything in it is deserialised.

The files of a model directory follow one rule too (:func:`check_model_files`): an MLflow
scikit-learn model serialised with skops, no pickle file, no code. A model a caller names by
URI is loaded only once it passes both (:func:`load_verified_model`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from fairpca.tasks.credentials import shown_text, shown_uri
from fairpca.tasks.signing import sha256_file

__all__ = [
    "TRUSTED_TYPES",
    "UntrustedModelError",
    "VerifiedModel",
    "check_model_files",
    "foreign_types",
    "load_skops_pipeline",
    "load_verified_model",
    "skops_file",
    "skops_file_types",
    "types_to_trust",
]

# Every type a fairpca pipeline holds beyond skops' defaults. The tests rebuild every
# variant and classifier and check this list is complete.
TRUSTED_TYPES = frozenset(
    {
        "fairpca._fair_pca.FairPCA",
        "fairpca.datasets._preprocess.RareCategoryPooler",
        "fairpca._kernel.FairKernelPCA",
        "fairpca._kernel_maps.KernelFactor",
        "fairpca._kernel_maps.KernelFunction",
        "fairpca._kernel_maps.NystroemMap",
        "numpy.dtype",
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    }
)


class UntrustedModelError(RuntimeError):
    """A model file cannot be verified as one fairpca wrote; it is not loaded."""


def foreign_types(types: Iterable[str]) -> list[str]:
    """The rule: the names in ``types`` outside :data:`TRUSTED_TYPES`, sorted."""
    return sorted({str(name) for name in types} - TRUSTED_TYPES)


def types_to_trust(pipeline) -> list[str]:
    """The types skops must be told to trust to reload ``pipeline`` (the save path).

    Raises
    ------
    TypeError
        The pipeline holds a type outside :data:`TRUSTED_TYPES`: it would be saved but never
        loaded again, so it is refused now.
    """
    import skops.io

    needed = skops.io.get_untrusted_types(data=skops.io.dumps(pipeline))
    if foreign := foreign_types(needed):
        raise TypeError(
            f"the pipeline holds types fairpca does not trust: {foreign}; a model holding them "
            "could not be loaded again, so it is not saved (use fairpca's representations and "
            "the audit's classifiers)."
        )
    return sorted(needed)


def skops_file(model_dir: Path) -> Path:
    """The skops file of an MLflow sklearn model directory; refuse any other format."""
    import yaml

    model_dir = Path(model_dir)
    flavor = yaml.safe_load((model_dir / "MLmodel").read_text())["flavors"].get("sklearn", {})
    serialization = flavor.get("serialization_format")
    if serialization != "skops":
        raise UntrustedModelError(
            f"the model in {model_dir} is serialised as {serialization!r}; only 'skops' is "
            "loaded (pickle could run arbitrary code)."
        )
    path = (model_dir / str(flavor.get("pickled_model", ""))).resolve()
    if model_dir.resolve() not in path.parents or not path.is_file():
        raise UntrustedModelError(f"the model file {flavor.get('pickled_model')!r} is missing")
    return path


def skops_file_types(path: Path) -> list[str]:
    """The types the skops file ``path`` needs trusted (read without executing anything).

    Raises
    ------
    UntrustedModelError
        One of them is outside :data:`TRUSTED_TYPES`.
    """
    import skops.io

    needed = skops.io.get_untrusted_types(file=path)
    if foreign := foreign_types(needed):
        raise UntrustedModelError(
            f"{Path(path).name} holds types fairpca does not trust: {foreign}; it is not loaded."
        )
    return list(needed)


def load_skops_pipeline(model_dir: Path, expected_sha256: str | None = None):
    """Load the pipeline of an MLflow sklearn model directory with skops and
    :data:`TRUSTED_TYPES`.

    Raises
    ------
    UntrustedModelError
        Not skops, a file whose SHA-256 differs from ``expected_sha256``, or a type outside
        :data:`TRUSTED_TYPES`; nothing is deserialised then.
    """
    import skops.io

    path = skops_file(Path(model_dir))
    actual = sha256_file(path)
    if expected_sha256 is not None and actual != expected_sha256:
        raise UntrustedModelError(
            f"{path.name} has SHA-256 {actual}, not the {expected_sha256} recorded "
            "at registration: the file was changed after fairpca registered it."
        )
    return skops.io.load(path, trusted=skops_file_types(path))


def check_model_files(model_dir: Path) -> None:
    """Refuse a model directory that is not an MLflow scikit-learn model serialised with
    skops, or that holds a pickle file, code, or anything its loader would read besides
    the checked skops file.

    Nothing in the directory is loaded or executed: ``MLmodel`` is read as YAML and the
    other files only by name. Accepted: the flavors ``sklearn`` (skops, its
    ``skops_trusted_types`` within :data:`TRUSTED_TYPES`) and ``python_function`` (loader
    ``mlflow.sklearn``, reading the same file, no ``data`` folder); no other ``MLmodel``, no
    pickle, no ``code_paths``, no ``.py`` file.

    Raises
    ------
    ValueError
        Naming what was found.
    """
    import yaml

    model_dir = Path(model_dir)
    mlmodel = model_dir / "MLmodel"
    if not mlmodel.is_file():
        raise ValueError(f"{model_dir} holds no MLmodel file; it is not a saved model.")
    try:
        spec = yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {}
        flavors = spec.get("flavors") or {}
        sklearn = flavors.get("sklearn") or {}
        pyfunc = flavors.get("python_function") or {}
        if not all(isinstance(entry, dict) for entry in (flavors, sklearn, pyfunc)):
            raise AttributeError("a flavor entry is not a mapping")
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(f"{mlmodel} is not a readable MLmodel file ({error}).") from error
    serialization = sklearn.get("serialization_format")
    if serialization != "skops":
        raise ValueError(
            f"MLmodel names the serialization {serialization!r}, not skops: loading a pickled "
            "or cloudpickled model runs code from the file, so fairpca never logs or loads one."
        )
    _check_loader_reads_only_the_skops_file(flavors, sklearn, pyfunc)
    nested = [p.relative_to(model_dir).as_posix() for p in model_dir.rglob("MLmodel")]
    if nested != ["MLmodel"]:
        raise ValueError(f"{model_dir} holds more than one MLmodel file ({sorted(nested)}).")
    pickles = [p.name for p in model_dir.rglob("*") if p.suffix in {".pkl", ".pickle"}]
    if pickles:
        raise ValueError(f"{model_dir} holds pickle file(s) {pickles}; it is not loaded.")
    code = sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*.py*"))
    if sklearn.get("code") or pyfunc.get("code") or (model_dir / "code").exists() or code:
        raise ValueError(
            f"{model_dir} carries source code ({code or 'code_paths'}), which loading would "
            "run; a fairpca model depends on fairpca through a pinned requirement instead."
        )


def _check_loader_reads_only_the_skops_file(flavors: dict, sklearn: dict, pyfunc: dict) -> None:
    """MLflow's pyfunc loader reads ``python_function.model_path`` (under ``data``, when
    given) with the types ``sklearn.skops_trusted_types`` names: all must be the checked
    skops file and trusted types."""
    foreign = sorted(set(flavors) - {"sklearn", "python_function"})
    if foreign or pyfunc.get("loader_module") != "mlflow.sklearn":
        raise ValueError(
            f"MLmodel names the flavor(s) {foreign} or the loader "
            f"{pyfunc.get('loader_module')!r}; only a scikit-learn model loaded by "
            "mlflow.sklearn is accepted."
        )
    if "data" in pyfunc or pyfunc.get("model_path") != sklearn.get("pickled_model"):
        raise ValueError(
            "MLmodel points its python_function loader at another file "
            f"({pyfunc.get('data') or pyfunc.get('model_path')!r}) than the skops file "
            f"({sklearn.get('pickled_model')!r})."
        )
    if foreign := foreign_types(sklearn.get("skops_trusted_types") or []):
        raise ValueError(
            f"MLmodel lists skops_trusted_types {foreign} that fairpca does not trust."
        )


class VerifiedModel:
    """A scikit-learn model loaded from a verified skops file, with its MLflow ``metadata``
    (the ``MLmodel`` read as YAML: the signature). ``predict`` passes the columns the
    signature names, in its order, as MLflow's pyfunc wrapper does."""

    def __init__(self, model, metadata):
        self.model = model
        self.metadata = metadata

    def predict(self, X):
        schema = self.metadata.get_input_schema() if self.metadata is not None else None
        if schema is not None and schema.has_input_names() and hasattr(X, "columns"):
            missing = [name for name in schema.required_input_names() if name not in X.columns]
            if missing:
                raise ValueError(f"the model's signature needs the column(s) {missing}.")
            X = X[[name for name in schema.input_names() if name in X.columns]]
        return self.model.predict(X)


def load_verified_model(model_uri: str, tracking_uri: str | None = None) -> VerifiedModel:
    """The scikit-learn model at the MLflow URI ``model_uri``, loaded only from files
    fairpca verified.

    The model is downloaded into a temporary directory and must pass
    :func:`check_model_files`; the types its skops file needs must be skops' defaults or in
    :data:`TRUSTED_TYPES` (:func:`skops_file_types`). Then that very file is loaded by
    ``skops.io.load`` trusting only those types: no loader named by the files runs, and
    nothing they name is imported. ``tracking_uri`` resolves ``models:/`` and ``runs:/``
    URIs.

    Raises
    ------
    UntrustedModelError
        The model is pickled or cloudpickled, carries code, holds an untrusted type or is
        not a readable skops model; the message says how to log it so that it can be
        loaded, or to pass an object the caller loaded.
    """
    import mlflow.artifacts
    from mlflow.models import Model

    shown = shown_uri(model_uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=model_uri, dst_path=tmp, tracking_uri=tracking_uri
                )
            )
        except Exception as error:  # MLflow's message names URIs: each is shown masked
            raise UntrustedModelError(
                f"the model at {shown} could not be downloaded "
                f"({type(error).__name__}: {shown_text(error)})."
            ) from None
        try:
            check_model_files(local)
            metadata = Model.load(str(local / "MLmodel"))
            model = load_skops_pipeline(local)
        except Exception as error:  # a refusal, or files no reader could parse (not a zip)
            raise UntrustedModelError(
                f"the model at {shown} is not loaded: {shown_text(error)} Log it with "
                "mlflow.sklearn.log_model(model, ..., serialization_format='skops'), or load "
                "a model you trust yourself and pass the object (anything with predict)."
            ) from None
        return VerifiedModel(model, metadata)
